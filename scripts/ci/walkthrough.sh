#!/usr/bin/env bash
# Runs the README's curl walkthrough (the block between the walkthrough markers) against a live
# server, so the README cannot drift from what the service does. Fails if any step fails.
#
#   scripts/ci/walkthrough.sh [sqlite|postgres|DATABASE_URL]      (default: a temporary SQLite file)
#   BIN=target/release/dirichlet-release scripts/ci/walkthrough.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-target/debug/dirichlet-release}
# shellcheck source=scripts/ops/serve.sh
. scripts/ops/serve.sh
serve "${1:-sqlite}" "$BIN"
work=$serve_work

sed -n '/<!-- walkthrough:start -->/,/<!-- walkthrough:end -->/p' README.md |
  sed -n '/^```bash$/,/^```$/p' | sed '1d;$d' >"$work/walkthrough.sh"
[ -s "$work/walkthrough.sh" ] || { echo "no walkthrough block found in README.md" >&2; exit 1; }
(cd "$work" && bash -euo pipefail walkthrough.sh)
echo "walkthrough: all steps passed"
