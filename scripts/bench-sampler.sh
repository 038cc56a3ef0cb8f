#!/usr/bin/env bash
# Dirichlet sampling throughput of the service's sampler (criterion, benches/privacy.rs, group
# sample_dirichlet/histogram) against numpy's Generator.dirichlet on the same shapes, in the same
# run, at d = 16, 1,000 and 1,000,000. numpy runs in target/tools-venv (scripts/tools-venv.sh).
#
#   scripts/bench-sampler.sh            (RAYON_NUM_THREADS limits the sampler's threads)
# Output: a table on stdout and one JSON object per dimension in $OUT/sampler.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
export TOOLS_VENV=${TOOLS_VENV:-$target_dir/tools-venv}
# shellcheck source=scripts/tools-venv.sh
. scripts/tools-venv.sh
tools_venv numpy==2.2.6
target_dir=${CARGO_TARGET_DIR:-target}
OUT=${OUT:-$target_dir/bench-e2e}
mkdir -p "$OUT"
load() { cut -d' ' -f1 /proc/loadavg; }

load_before=$(load)
cargo bench --quiet --bench privacy -- 'sample_dirichlet/histogram' >"$OUT/criterion-sampler.txt" 2>&1 ||
  { cat "$OUT/criterion-sampler.txt"; exit 1; }
load_after_rust=$(load)
python3 - "$target_dir/criterion" "$OUT/sampler.jsonl" "$load_before" "$load_after_rust" <<'PY'
import json, os, sys, time
import numpy as np

crit, out, load_before, load_rust = sys.argv[1:5]
rng = np.random.Generator(np.random.PCG64())
rows = []
print(f"{'d':>9} {'ours (median)':>15} {'numpy (median)':>15} {'ours/numpy speed':>17}  load1")
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
    est = json.load(open(os.path.join(crit, "sample_dirichlet", "histogram", str(d), "new", "estimates.json")))
    ours_s = est["median"]["point_estimate"] / 1e9
    load_np = os.getloadavg()[0]
    row = {"d": d, "ours_ms": ours_s * 1e3, "numpy_ms": numpy_s * 1e3, "speedup": numpy_s / ours_s,
           "load1_before": float(load_before), "load1_after_rust": float(load_rust), "load1_after_numpy": load_np,
           "numpy": np.__version__, "rayon_threads": os.environ.get("RAYON_NUM_THREADS", str(os.cpu_count()))}
    rows.append(row)
    print(f"{d:>9} {ours_s*1e3:>12.4f} ms {numpy_s*1e3:>12.4f} ms {numpy_s/ours_s:>16.2f}x  {load_rust}/{load_np:.2f}")
with open(out, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
PY
