#!/usr/bin/env bash
# Fuzzes request parsing and validation for a bounded time: fuzz/fuzz_targets/requests.rs feeds
# arbitrary bytes to the release body's parse → validate → calibrate → price → draw path
# (`release::request::Request::plan`, `release::draw`) and to the dataset registration parser
# (`http::datasets::parse_registration`). Any panic, failed assertion or sanitizer report fails
# the run; the input that caused it is kept in fuzz/artifacts/requests/.
#
# Usage: scripts/ci/fuzz.sh [seconds]        (default: $FUZZ_SECONDS, else 60)
#
# Toolchain: cargo-fuzz needs unstable compiler flags. With a nightly toolchain installed
# (`rustup toolchain install nightly`) it runs on nightly with AddressSanitizer; otherwise on the
# stable toolchain with RUSTC_BOOTSTRAP=1 and `--sanitizer none` (stable ships no sanitizer
# runtime; safe Rust's panics and the target's assertions are still caught). Force one with
# FUZZ_TOOLCHAIN=nightly|stable. cargo-fuzz is installed from crates.io if missing.
#
# The working corpus grows in $FUZZ_TARGET_DIR/corpus/requests (default target/fuzz, outside git);
# fuzz/seeds/requests holds the committed seed inputs.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-${FUZZ_SECONDS:-60}}

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$PWD/target/fuzz}
corpus=$CARGO_TARGET_DIR/corpus/requests
mkdir -p "$corpus"

choice=${FUZZ_TOOLCHAIN:-auto}
if [ "$choice" = auto ]; then
  if rustup run nightly rustc --version >/dev/null 2>&1; then choice=nightly; else choice=stable; fi
fi
case "$choice" in
  nightly) toolchain=(+nightly); sanitizer=address ;;
  stable) toolchain=(); sanitizer=none; export RUSTC_BOOTSTRAP=1 ;;
  *) echo "FUZZ_TOOLCHAIN must be nightly or stable" >&2; exit 2 ;;
esac
echo "fuzz: $seconds s on $choice ($(cargo "${toolchain[@]}" --version)), sanitizer $sanitizer"

# -timeout: one input taking longer than 10 s is a hang; -rss_limit_mb bounds memory.
cargo "${toolchain[@]}" fuzz run --fuzz-dir fuzz --target-dir "$CARGO_TARGET_DIR" \
  --sanitizer "$sanitizer" requests \
  "$corpus" fuzz/seeds/requests -- \
  -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
