#!/usr/bin/env bash
# Releases per second through 1, 2 and 4 replicas of the service on one PostgreSQL database, in
# one run: the same 64 client connections (four wrk processes of 16) spread over the first N
# servers, on one hot dataset and over 64 datasets, keyless and with a fresh Idempotency-Key per
# release. Each figure is compared with the one-replica figure of the same workload and
# repetition (pairwise: the machine's load moves absolute rates, not ratios taken back to back).
#
#   scripts/bench/bench-replicas.sh           DURATION=10 s per figure, the 0.9 × target checked
#   scripts/bench/bench-replicas.sh --short   a few seconds per figure, nothing asserted
#
# Environment: BIN (default $CARGO_TARGET_DIR/release/dirichlet-release, built if missing),
# DIRICHLET_TEST_POSTGRES_URL (admin URL, default postgres://postgres@127.0.0.1:5432/postgres),
# CONNS (64, a multiple of 4), DIM (16 cells), DURATION, REPS (1), REPLICAS ("1 2 4"),
# WORKLOADS ("hot spread hot_keyed spread_keyed"), OUT (default target/bench-replicas).
# The replicas' pools (16 connections each, the default) must fit the server's max_connections.
# Output: a table on stdout, JSON lines in $OUT/results.jsonl, markdown in $OUT/results.md.
# Besides req/s, each figure reports the releases per transaction of the releases it stored
# (rows one transaction inserted share `xmin`) and the share committed alone.
set -euo pipefail
cd "$(dirname "$0")/../.."

short=0
[ "${1:-}" = "--short" ] && short=1
DURATION=${DURATION:-$([ $short = 1 ] && echo 3 || echo 10)}
CONNS=${CONNS:-64}
DIM=${DIM:-16}
REPS=${REPS:-1}
read -r -a replicas <<<"${REPLICAS:-1 2 4}"
read -r -a workloads <<<"${WORKLOADS:-hot spread hot_keyed spread_keyed}"
pg_admin=${DIRICHLET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
target_dir=${CARGO_TARGET_DIR:-target}
BIN=${BIN:-$target_dir/release/dirichlet-release}
OUT=${OUT:-$target_dir/bench-replicas}
for tool in wrk psql jq curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-replicas: $tool is required" >&2; exit 1; }
done
[ $((CONNS % 4)) = 0 ] || { echo "bench-replicas: CONNS must be a multiple of 4" >&2; exit 1; }
[ -x "$BIN" ] || cargo build --release --quiet --bin dirichlet-release
mkdir -p "$OUT"
work=$(mktemp -d)
db="dr_replicas_$(date +%s)_$$"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql "$pg_admin" -qc "CREATE DATABASE $db"
db_url="${pg_admin%/*}/$db"

most=$(printf '%s\n' "${replicas[@]}" | sort -n | tail -1)
admin="bench-admin-$(date +%s)-token"
bases=()
for i in $(seq 1 "$most"); do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  DIRICHLET_DATABASE_URL="$db_url" DIRICHLET_LISTEN="127.0.0.1:$port" DIRICHLET_ADMIN_TOKEN="$admin" \
    "$BIN" >"$work/server-$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/server-$i.log"; echo "server exited" >&2; exit 1; }
    sleep 0.2
  done
  bases+=("http://127.0.0.1:$port")
done
base=${bases[0]}

# 64 spread datasets and one hot one, with budgets no run can exhaust.
ids=()
for i in $(seq 1 65); do
  ids+=("$(curl -sSf -X POST "$base/v1/datasets" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' \
    -d "{\"name\": \"replicas $i\", \"budget\": {\"order\": 2, \"epsilon\": 8000}}" | jq -r .id)")
done
hot=${ids[64]}
spread=("${ids[@]:0:64}")
scope=$(printf '"%s",' "${ids[@]}")
bearer=$(curl -sSf -X POST "$base/v1/tokens" -H "Authorization: Bearer $admin" \
  -H 'Content-Type: application/json' -d "{\"datasets\": [${scope%,}]}" | jq -r .token)
counts=$(python3 -c "print(','.join(str((i * 7919) % 97) for i in range($DIM)))")
body="{\"counts\": [$counts], \"epsilon\": 0.01}"
curl -sSf -X POST "$base/v1/datasets/$hot/releases" -H "Authorization: Bearer $bearer" \
  -H 'Content-Type: application/json' -d "$body" >/dev/null

wrk_lua() { # ids keyed client-number
  local list
  list=$(printf '"%s",' $1)
  cat <<LUA
local ids = {${list%,}}
local headers = {["Authorization"] = "Bearer $bearer", ["Content-Type"] = "application/json"}
local body = '$body'
local keyed = $2
local n = $3 * 1000003
request = function()
  n = n + 1
  if keyed == 1 then headers["Idempotency-Key"] = "replicas-$(date +%s%N)-" .. n end
  return wrk.format("POST", "/v1/datasets/" .. ids[(n % #ids) + 1] .. "/releases", headers, body)
end
done = function(s, lat, req)
  local e = s.errors
  io.write(string.format('RESULT {"requests":%d,"seconds":%.3f,"p50_ms":%.3f,"p99_ms":%.3f,"non2xx":%d,"socket_errors":%d}\n',
    s.requests, s.duration / 1e6, lat:percentile(50) / 1e3, lat:percentile(99) / 1e3,
    e.status, e.connect + e.read + e.write + e.timeout))
end
LUA
}

results="$OUT/results.jsonl"
: >"$results"
stats_sql() { # since
  cat <<SQL
SELECT json_build_object(
  'stored', count(*),
  'transactions', count(DISTINCT x),
  'alone', count(*) FILTER (WHERE n = 1))
  FROM (SELECT xmin::text AS x, count(*) OVER (PARTITION BY xmin::text) AS n
          FROM releases WHERE created_at >= '$1') r
SQL
}
run() { # workload replicas rep
  local workload=$1 n=$2 ids keyed=0 i
  case $workload in
    hot*) ids=$hot ;;
    spread*) ids="${spread[*]}" ;;
  esac
  [[ $workload == *_keyed ]] && keyed=1
  local since
  since=$(psql "$db_url" -Atc "SELECT now()")
  local outs=()
  for i in 0 1 2 3; do
    wrk_lua "$ids" "$keyed" "$i" >"$work/c$i.lua"
    wrk -t1 -c$((CONNS / 4)) -d"${DURATION}s" --timeout 10s -s "$work/c$i.lua" "${bases[$((i % n))]}" \
      >"$work/c$i.out" &
    outs+=($!)
  done
  for pid in "${outs[@]}"; do wait "$pid"; done
  local stats
  stats=$(psql "$db_url" -Atc "$(stats_sql "$since")")
  cat "$work"/c?.out | sed -n 's/^RESULT //p' | jq -sc \
    --arg w "$workload" --argjson n "$n" --argjson rep "$3" --argjson stats "$stats" \
    --arg load "$(cut -d' ' -f1 /proc/loadavg)" \
    '{workload: $w, replicas: $n, rep: $rep,
      rps: ((map(.requests) | add) / (map(.seconds) | max)),
      p50_ms: (map(.p50_ms) | max), p99_ms: (map(.p99_ms) | max),
      errors: (map(.non2xx + .socket_errors) | add),
      per_txn: ($stats.stored / ([$stats.transactions, 1] | max)),
      alone: ($stats.alone / ([$stats.stored, 1] | max)), load1: ($load | tonumber)}' |
    tee -a "$results" | jq -r '"\(.workload)\t\(.replicas)\t\(.rps|floor)\t\(.p50_ms)\t\(.p99_ms)\t\(.errors)\t\(.per_txn*100|floor/100)\t\(.alone*1000|floor/10)%\t\(.load1)"'
}

printf 'workload\treplicas\treq/s\tp50 ms*\tp99 ms*\terrors\trel/txn\talone\tload1\n'
for rep in $(seq 1 "$REPS"); do
  for workload in "${workloads[@]}"; do
    for n in "${replicas[@]}"; do run "$workload" "$n" "$rep"; done
  done
done
echo "(* the largest of the four clients')"

python3 - "$results" "$short" "$OUT/results.md" <<'PY'
import json, statistics, sys
path, short, md = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
rows = [json.loads(l) for l in open(path)]
by = {(r["rep"], r["workload"], r["replicas"]): r for r in rows}
reps = sorted({r["rep"] for r in rows})
workloads = list(dict.fromkeys(r["workload"] for r in rows))
counts = sorted({r["replicas"] for r in rows})
lines = ["| rep | workload | replicas | req/s | × 1 replica | p99 ms | errors | releases/txn | alone | load1 |",
         "|---|---|---|---|---|---|---|---|---|---|"]
ratios = {}
for r in rows:
    one = by[(r["rep"], r["workload"], 1)]["rps"]
    ratio = r["rps"] / one
    ratios.setdefault((r["workload"], r["replicas"]), []).append(ratio)
    lines.append(f"| {r['rep']} | {r['workload']} | {r['replicas']} | {r['rps']:.0f} | {ratio:.2f} | {r['p99_ms']:.1f} | {r['errors']} | {r['per_txn']:.1f} | {100 * r['alone']:.1f} % | {r['load1']} |")
lines.append("\nmedian over repetitions of N replicas / 1 replica, same workload and repetition:")
checks = []
for w in workloads:
    for n in counts:
        if n == 1:
            continue
        med = statistics.median(ratios[(w, n)])
        lines.append(f"- {w}: {n} replicas = {med:.2f} × 1 replica ({', '.join(f'{x:.2f}' for x in ratios[(w, n)])})")
        checks.append((f"{w} with {n} replicas >= 0.9 x one replica", med >= 0.9))
checks.append(("zero errors", all(r["errors"] == 0 for r in rows)))
open(md, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
print()
for name, ok in checks:
    print(f"{'met   ' if ok else 'MISSED'} {name}")
if not short and not all(ok for _, ok in checks):
    sys.exit(1)
PY
