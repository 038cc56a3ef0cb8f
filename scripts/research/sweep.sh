#!/usr/bin/env bash
# docs/mechanism-sweep.png and the numbers behind the README's "When to use the Dirichlet
# mechanism": runs examples/sweep.rs over its full grid (release build; every planned item and
# every mechanism at ε 0.01, 0.1 and 1 drawn 1,000 times at four count vectors, a few minutes on
# 2 cores), then scripts/research/plot_sweep.py (matplotlib from the venv of scripts/ci/tools-venv.sh), which
# draws the figure and prints the findings the README quotes. The example exits non-zero, and
# this script with it, if any planned forecast is refuted by the draws.
#   scripts/research/sweep.sh [extra example options, e.g. --draws 2000]
# Outputs: target/sweep/{sweep.csv,sweep.txt,findings.txt} and docs/mechanism-sweep.png
# (SWEEP_PNG=path writes the figure elsewhere, e.g. for a --short run).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/ci/tools-venv.sh
source scripts/ci/tools-venv.sh
tools_venv matplotlib==3.11.2

target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/sweep
png=${SWEEP_PNG:-docs/mechanism-sweep.png}
mkdir -p "$out"
nice cargo build --release --quiet --example sweep
"$target_dir/release/examples/sweep" --out "$out/sweep.csv" "$@" | tee "$out/sweep.txt"
python scripts/research/plot_sweep.py "$out/sweep.csv" --png "$png" | tee "$out/findings.txt"
