#!/usr/bin/env bash
# An A/B of this checkout against a base commit, in one run: the criterion benchmarks of the
# request path (parse_and_plan: d = 6 and d = 10⁶), the planner (plan_1000) and calibration
# (calibrate), run base, new, base, new… so that drift in the machine's load falls on both;
# then scripts/bench/bench-e2e.sh's workloads with both binaries as VARIANTS (its own pairing).
#
# Usage: scripts/bench/bench-ab.sh BASE_COMMIT [REPS]    (REPS: criterion pairs, default 3)
# Environment: E2E_REPS (bench-e2e's REPS, default 2; 0 skips it), E2E_SECONDS (its DURATION,
#   default 10), FILTERS (criterion filters). bench-e2e's own targets are reported, not fatal.
# The base is checked out as a git worktree under target/ab/ and built there once; a
# benchmark the base lacks is reported for the new build only.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?usage: scripts/bench/bench-ab.sh BASE_COMMIT [REPS]}
reps=${2:-3}
short=$(git rev-parse --short "$base")
work=$PWD/target/ab
src=$work/src-$short
# BASE_TARGET may be the same folder as the new build's: cargo keeps the two builds of the
# crate apart (their paths differ), and the binaries are copied out before the next build.
base_target=${BASE_TARGET:-$work/target-base}
new_target=${CARGO_TARGET_DIR:-$PWD/target}
read -r -a filters <<<"${FILTERS:-parse_and_plan plan_1000 calibrate}"
mkdir -p "$work"
[ -d "$src" ] || git worktree add --detach "$src" "$base" >/dev/null

echo "building base $short and the working tree (release, benches and binary)" >&2
(cd "$src" && CARGO_TARGET_DIR=$base_target cargo bench --quiet --no-run \
  && CARGO_TARGET_DIR=$base_target cargo build --quiet --release --bin dirichlet-release)
cp "$base_target/release/dirichlet-release" "$work/dirichlet-release-base"
CARGO_TARGET_DIR=$new_target cargo bench --quiet --no-run
CARGO_TARGET_DIR=$new_target cargo build --quiet --release --bin dirichlet-release
cp "$new_target/release/dirichlet-release" "$work/dirichlet-release-new"

log=$work/criterion-$(date +%Y%m%dT%H%M%S).log
: >"$log"
run() { # variant dir target filter
  local bench
  case $4 in parse_and_plan) bench=request ;; plan_1000) bench=planner ;; *) bench=privacy ;; esac
  (cd "$2" && CARGO_TARGET_DIR=$3 cargo bench --quiet --bench "$bench" -- --noplot "$4" 2>/dev/null) \
    | sed "s/^/$1 /" >>"$log"
}
for ((i = 1; i <= reps; i++)); do
  for f in "${filters[@]}"; do
    run base "$src" "$base_target" "$f"
    run new "$PWD" "$new_target" "$f"
  done
  echo "criterion pair $i/$reps done (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

# Each variant's median estimate per benchmark and rep; the ratio new/base pair by pair.
python3 - "$log" <<'EOF'
import re, sys, statistics
from collections import defaultdict
unit = {"ps": 1e-12, "ns": 1e-9, "µs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
times = defaultdict(lambda: defaultdict(list))
pending = {}
for line in open(sys.argv[1], encoding="utf-8"):
    variant, _, rest = line.rstrip("\n").partition(" ")
    m = re.match(r"(\S+)?\s*time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", rest)
    if m:
        name = m.group(1) or pending.get(variant)
        if name:
            times[name][variant].append(float(m.group(2)) * unit[m.group(3)])
        continue
    word = rest.strip().split()
    if len(word) == 1 and "/" in word[0]:
        pending[variant] = word[0]
print(f"{'benchmark':44} {'base (median)':>14} {'new (median)':>14} {'new/base pairs':>24}")
for name, v in times.items():
    b, n = v.get("base", []), v.get("new", [])
    fmt = lambda xs: f"{statistics.median(xs) * 1e6:11.2f} µs" if xs else f"{'—':>14}"
    pairs = " ".join(f"{y / x:.3f}" for x, y in zip(b, n))
    print(f"{name:44} {fmt(b)} {fmt(n)} {pairs:>24}")
EOF
echo "criterion output: $log" >&2

e2e_reps=${E2E_REPS:-2}
if [ "$e2e_reps" -gt 0 ]; then
  VARIANTS="base:BIN=$work/dirichlet-release-base new:BIN=$work/dirichlet-release-new" \
    REPS=$e2e_reps DURATION=${E2E_SECONDS:-10} scripts/bench/bench-e2e.sh \
    || echo "bench-e2e: a target of its own was missed (see above)" >&2
fi
