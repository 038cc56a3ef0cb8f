#!/usr/bin/env bash
# EXPERIMENTS.md's numbers and docs/experiments.png: runs examples/naive_bayes.rs and
# examples/bayes_net.rs in full (the seed paper's ε grid, 10 repetitions; each model with ε split
# evenly, split by the planner for one KL target, and the baselines smoothed) through an in-process
# service on a temporary SQLite file, then rewrites the results part of EXPERIMENTS.md and the
# plot with scripts/research/plot_experiments.py (matplotlib from the venv of scripts/ci/tools-venv.sh).
#   scripts/research/experiments.sh [extra example options, e.g. --repetitions 3 or --row-by-row]
# EXAMPLES_PROFILE=dev uses the debug build instead of --release (same numbers, slower sampling,
# no release build of the dependency tree).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/ci/tools-venv.sh
source scripts/ci/tools-venv.sh
tools_venv matplotlib==3.11.2

target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/experiments
mkdir -p "$out"
profile=${EXAMPLES_PROFILE:-release}
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
nice cargo build --profile "$profile" --quiet --example naive_bayes --example bayes_net
for example in naive_bayes bayes_net; do
  echo "=== $example"
  "$target_dir/$dir/examples/$example" --out "$out/$example.csv" "$@" | tee "$out/$example.txt"
done
python scripts/research/plot_experiments.py "$out/naive_bayes.csv" "$out/bayes_net.csv" \
  --png docs/experiments.png --png-link docs/experiments.png --markdown EXPERIMENTS.md
echo "wrote EXPERIMENTS.md (results section) and docs/experiments.png"
