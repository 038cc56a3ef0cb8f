#!/usr/bin/env bash
# Dirichlet sampling throughput of the service's sampler (criterion, benches/privacy.rs, group
# sample_dirichlet/histogram) against numpy's Generator.dirichlet on the same shapes, in the same
# run, at d = 16, 1,000 and 1,000,000. numpy runs in target/tools-venv (scripts/ci/tools-venv.sh).
# The sampler is measured twice, with one rayon thread and with two (RAYON_NUM_THREADS), so the
# table separates the single-core speed from the use of both cores; numpy is single-threaded.
#
#   scripts/bench/bench-sampler.sh
# Output: a table on stdout and one JSON object per dimension in $OUT/sampler.jsonl; exit 1 if
# the two-thread sampler is below 1.8x numpy at d = 1,000,000 (the target).
set -euo pipefail
cd "$(dirname "$0")/../.."
target_dir=${CARGO_TARGET_DIR:-target}
export TOOLS_VENV=${TOOLS_VENV:-$target_dir/tools-venv}
# shellcheck source=scripts/ci/tools-venv.sh
. scripts/ci/tools-venv.sh
tools_venv numpy==2.2.6
target_dir=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$target_dir/bench-e2e}
mkdir -p "$OUT"
load() { cut -d' ' -f1 /proc/loadavg; }

load_before=$(load)
for threads in 1 2; do
  RAYON_NUM_THREADS=$threads cargo bench --quiet --bench privacy -- 'sample_dirichlet/histogram' \
    --save-baseline "threads$threads" >"$OUT/criterion-sampler-$threads.txt" 2>&1 ||
    { cat "$OUT/criterion-sampler-$threads.txt"; exit 1; }
done
load_after_rust=$(load)
python3 - "$target_dir/criterion" "$OUT/sampler.jsonl" "$load_before" "$load_after_rust" <<'PY'
import json, os, sys, time
import numpy as np

crit, out, load_before, load_rust = sys.argv[1:5]
rng = np.random.Generator(np.random.PCG64())
rows = []
print(f"{'d':>9} {'ours, 1 thread':>15} {'ours, 2 threads':>16} {'numpy':>13} {'1 thr/numpy':>12} {'2 thr/numpy':>12}  load1")
for d in (16, 1_000, 1_000_000):
    # The same shapes as benches/privacy.rs: 3.46 + ((i * 7919) % 13).
    i = np.arange(d, dtype=np.int64)
    shapes = 3.46 + ((i * 7919) % 13).astype(np.float64)
    # Enough repetitions for ~1 s per dimension, median of batches.
    t0 = time.perf_counter(); rng.dirichlet(shapes); one = time.perf_counter() - t0
    reps = max(1, min(20000, int(0.05 / max(one, 1e-7))))
    batches = []
    for _ in range(max(5, min(30, int(1.0 / max(one * reps, 1e-9))))):
        t0 = time.perf_counter()
        for _ in range(reps):
            rng.dirichlet(shapes)
        batches.append((time.perf_counter() - t0) / reps)
    numpy_s = float(np.median(batches))
    ours = {}
    for threads in (1, 2):
        path = os.path.join(crit, "sample_dirichlet", "histogram", str(d), f"threads{threads}", "estimates.json")
        ours[threads] = json.load(open(path))["median"]["point_estimate"] / 1e9
    load_np = os.getloadavg()[0]
    row = {"d": d, "ours_1thread_ms": ours[1] * 1e3, "ours_2threads_ms": ours[2] * 1e3,
           "numpy_ms": numpy_s * 1e3, "speedup_1thread": numpy_s / ours[1],
           "speedup_2threads": numpy_s / ours[2],
           "load1_before": float(load_before), "load1_after_rust": float(load_rust), "load1_after_numpy": load_np,
           "numpy": np.__version__}
    rows.append(row)
    print(f"{d:>9} {ours[1]*1e3:>12.4f} ms {ours[2]*1e3:>13.4f} ms {numpy_s*1e3:>10.4f} ms"
          f" {numpy_s/ours[1]:>11.2f}x {numpy_s/ours[2]:>11.2f}x  {load_rust}/{load_np:.2f}")
with open(out, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
big = rows[-1]["speedup_2threads"]
print(f"target: >= 1.8x numpy at d = 1,000,000 with two threads: {big:.2f}x, {'met' if big >= 1.8 else 'MISSED'}")
sys.exit(0 if big >= 1.8 else 1)
PY
