#!/usr/bin/env bash
# A table release (ROWS × CELLS, default 600 × 10: the naive-Bayes size of the digits set) against
# one CELLS-cell vector release, end to end on PostgreSQL (release build, one client, one request
# at a time), both measured in the same run and interleaved so that load on the machine hits both
# alike; and, for contrast, the same table released as ROWS separate vector releases (one
# keep-alive connection, one request after the other).
#
#   scripts/bench/bench-table.sh            REPS=30 interleaved pairs, SEPARATE=3 runs of ROWS vectors
#   scripts/bench/bench-table.sh --short    REPS=5, SEPARATE=1 (CI)
#
# Environment: BIN (default $CARGO_TARGET_DIR/release/dirichlet-release, built if missing),
# DIRICHLET_TEST_POSTGRES_URL (admin URL, default postgres://postgres@127.0.0.1:5432/postgres),
# ROWS, CELLS, REPS, SEPARATE, OUT (default target/bench-e2e).
# Output: a table on stdout and JSON lines in $OUT/table.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."

short=0
[ "${1:-}" = "--short" ] && short=1
ROWS=${ROWS:-600}
CELLS=${CELLS:-10}
REPS=${REPS:-$([ $short = 1 ] && echo 5 || echo 30)}
SEPARATE=${SEPARATE:-$([ $short = 1 ] && echo 1 || echo 3)}
target_dir=${CARGO_TARGET_DIR:-target}
BIN=${BIN:-$target_dir/release/dirichlet-release}
OUT=${OUT:-$target_dir/bench-e2e}
for tool in psql jq curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-table: $tool is required" >&2; exit 1; }
done
[ -x "$BIN" ] || cargo build --release --quiet --bin dirichlet-release
mkdir -p "$OUT"
# shellcheck source=scripts/ops/serve.sh
. scripts/ops/serve.sh
serve postgres "$BIN"
work=$serve_work pid=$SERVER_PID base=$BASE admin=$ADMIN
# A budget no run exhausts: ε = 8000 at order 2, 0.01 per release.
ds=$(curl -sSf -X POST "$base/v1/datasets" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' \
  -d '{"name": "bench table", "budget": {"order": 2, "epsilon": 8000}}' | jq -r .id)
url="$base/v1/datasets/$ds/releases"
python3 - "$ROWS" "$CELLS" "$work" <<'EOF'
import json, sys
rows, cells, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
table = [[(r * 7919 + c * 104729) % 97 + 1 for c in range(cells)] for r in range(rows)]
json.dump({"table": table, "epsilon": 0.01, "label": "bench table"}, open(f"{work}/table.json", "w"))
json.dump({"counts": table[0], "epsilon": 0.01}, open(f"{work}/vector.json", "w"))
# One curl config that sends every row as its own vector release over one connection.
with open(f"{work}/separate.curl", "w") as f:
    for row in table:
        body = json.dumps({"counts": row, "epsilon": 0.01})
        f.write(f'next\nurl = "URL"\nrequest = "POST"\noutput = "/dev/null"\n'
                f'header = "Content-Type: application/json"\nheader = "Authorization: Bearer ADMIN"\n'
                f"data = {json.dumps(body)}\n")
EOF
sed -i "s|URL|$url|; s|ADMIN|$admin|" "$work/separate.curl"
sed -i '1d' "$work/separate.curl"

post() { # body file -> "status seconds"
  curl -sS -o "$work/out.json" -w '%{http_code} %{time_total}\n' -X POST "$url" \
    -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' --data-binary @"$1"
}
# Warm-up (connection pool, calibration cache, page cache), and the table's shape checked once.
for _ in 1 2 3; do post "$work/vector.json" >/dev/null; done
read -r code _ < <(post "$work/table.json")
[ "$code" = 201 ] || { head -c 500 "$work/out.json"; echo; exit 1; }
jq -e --argjson rows "$ROWS" --argjson cells "$CELLS" \
  '(.distributions | length) == $rows and (.distributions[0] | length) == $cells and .label == "bench table"' \
  "$work/out.json" >/dev/null

: >"$OUT/table.jsonl"
for rep in $(seq 1 "$REPS"); do
  for kind in vector table; do
    read -r code secs < <(post "$work/$kind.json")
    [ "$code" = 201 ] || { head -c 500 "$work/out.json"; echo; exit 1; }
    echo "{\"name\":\"$kind\",\"rep\":$rep,\"seconds\":$secs,\"load1\":$(cut -d' ' -f1 /proc/loadavg)}" >>"$OUT/table.jsonl"
  done
done
for rep in $(seq 1 "$SEPARATE"); do
  start=$(date +%s.%N)
  curl -sS --fail -K "$work/separate.curl"
  end=$(date +%s.%N)
  echo "{\"name\":\"separate\",\"rep\":$rep,\"seconds\":$(python3 -c "print($end - $start)"),\"load1\":$(cut -d' ' -f1 /proc/loadavg)}" >>"$OUT/table.jsonl"
done
releases=$(curl -sSf "$base/v1/datasets/$ds/budget" -H "Authorization: Bearer $admin" | jq .releases)
expected=$((3 + 1 + 2 * REPS + SEPARATE * ROWS))
[ "$releases" = "$expected" ] || { echo "expected $expected releases, the ledger has $releases" >&2; exit 1; }

python3 - "$OUT/table.jsonl" "$ROWS" "$CELLS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n_rows, cells = sys.argv[2], sys.argv[3]
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]
by = {}
for r in rows:
    by.setdefault(r["name"], []).append(r["seconds"] * 1000)
print(f"workload\truns\tmedian ms\tp90 ms\tmin ms")
labels = {"vector": f"one {cells}-cell vector", "table": f"one {n_rows}x{cells} table",
          "separate": f"{n_rows} separate {cells}-cell vectors"}
for name in ["vector", "table", "separate"]:
    xs = by.get(name, [])
    if xs:
        print(f"{labels[name]}\t{len(xs)}\t{statistics.median(xs):.2f}\t{q(xs, 0.9):.2f}\t{min(xs):.2f}")
v, t = statistics.median(by["vector"]), statistics.median(by["table"])
s = statistics.median(by["separate"])
print(f"table / vector (medians): {t / v:.2f}x (target <= 10x); separate / table: {s / t:.1f}x")
loads = [r["load1"] for r in rows]
print(f"load average during the run: {min(loads)}-{max(loads)}")
EOF
