#!/usr/bin/env bash
# End-to-end throughput and latency of POST /v1/datasets/{id}/releases against PostgreSQL, with
# the ceiling measured in the same run: pgbench running the minimal per-release ledger
# transaction on the same schema (the service's own migrations), at the same concurrency.
#
#   scripts/bench/bench-e2e.sh            full run (DURATION=20 s per workload), targets checked
#   scripts/bench/bench-e2e.sh --short    a few seconds per workload, no targets asserted (CI)
#
# Environment: BIN (default $CARGO_TARGET_DIR/release/dirichlet-release, built if missing),
# DIRICHLET_TEST_POSTGRES_URL (admin URL, default postgres://postgres@127.0.0.1:5432/postgres),
# CONNS (64), DIM (16 cells), DURATION, TOKEN (analyst|allocated|admin, default analyst;
# allocated: an analyst token with an allocation on every dataset, never exhausted),
# POOL (DIRICHLET_DB_MAX_CONNECTIONS for the server, default: the service default),
# OUT (results folder, default target/bench-e2e),
# VARIANTS: an A/B in one run — space-separated NAME or NAME:VAR=VALUE[,VAR=VALUE…], one server
# each (same binary and database; e.g. "alone:DIRICHLET_DB_COMMIT_SLOTS=0 grouped:"), run
# back to back against the same ceilings; TOKEN=… in a variant picks its token (e.g.
# "admin:TOKEN=admin allocated:TOKEN=allocated"), BIN=… its binary (an A/B of two builds on
# the same database: servers start in the order listed, each applying the migrations it knows,
# and a build refuses a database with migrations newer than its own, so list the older first;
# the setup goes through the last) and SET=population its datasets: 65 twins of the standalone ones, each in a shared
# population under a shared root population (the cost of the population path), SET=blocks1 or
# SET=blocks7 into 65 twins split into blocks by day, each release reading one block or seven
# (the cost of the blocks); default one variant, "service",
# REPS (1): repeat every workload, ceilings included, so that each variant's ratio to the
# other and to the ceilings is taken pair by pair within a repetition.
# Output: a table on stdout, one JSON object per figure in $OUT/results.jsonl and markdown
# rows in $OUT/results.md; with several variants, their ratios per repetition too.
set -euo pipefail
cd "$(dirname "$0")/../.."

short=0
[ "${1:-}" = "--short" ] && short=1
DURATION=${DURATION:-$([ $short = 1 ] && echo 3 || echo 20)}
CONNS=${CONNS:-64}
DIM=${DIM:-16}
TOKEN=${TOKEN:-analyst}
pg_admin=${DIRICHLET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
target_dir=${CARGO_TARGET_DIR:-target}
BIN=${BIN:-$target_dir/release/dirichlet-release}
OUT=${OUT:-$target_dir/bench-e2e}
for tool in wrk pgbench psql jq curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-e2e: $tool is required" >&2; exit 1; }
done
[ -x "$BIN" ] || cargo build --release --quiet --bin dirichlet-release
mkdir -p "$OUT"
work=$(mktemp -d)
db="dr_bench_$(date +%s)_$$"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql "$pg_admin" -qc "CREATE DATABASE $db"
db_url="${pg_admin%/*}/$db"

read -r -a variants <<<"${VARIANTS:-service}"
REPS=${REPS:-1}
admin="bench-admin-$(date +%s)-token"
bases=()
tokens=()
sets=()
# One server per variant, started one after the other (the first applies the migrations).
for variant in "${variants[@]}"; do
  name=${variant%%:*}
  extra=()
  [[ $variant == *:* ]] && [ -n "${variant#*:}" ] && IFS=, read -r -a extra <<<"${variant#*:}"
  token=$TOKEN
  bin=$BIN
  set=standalone
  for i in "${!extra[@]}"; do
    [[ ${extra[$i]} == TOKEN=* ]] && { token=${extra[$i]#TOKEN=}; unset 'extra[i]'; continue; }
    [[ ${extra[$i]} == SET=* ]] && { set=${extra[$i]#SET=}; unset 'extra[i]'; continue; }
    [[ ${extra[$i]} == BIN=* ]] && { bin=${extra[$i]#BIN=}; unset 'extra[i]'; }
  done
  case $set in standalone | population | blocks1 | blocks7) ;; *) echo "bench-e2e: unknown SET $set" >&2; exit 1 ;; esac
  extra=("${extra[@]}")
  tokens+=("$token")
  sets+=("$set")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  env ${POOL:+DIRICHLET_DB_MAX_CONNECTIONS=$POOL} DIRICHLET_DATABASE_URL="$db_url" \
    DIRICHLET_LISTEN="127.0.0.1:$port" DIRICHLET_ADMIN_TOKEN="$admin" "${extra[@]}" "$bin" \
    >"$work/server-$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/server-$name.log"; echo "server exited" >&2; exit 1; }
    sleep 0.2
  done
  bases+=("http://127.0.0.1:$port")
done
# The datasets, populations and tokens are made through the last server started: with an older
# build listed first (its migrations applied first), the newest knows every route they need.
base=${bases[-1]}

# 64 spread datasets and one hot one, each with a budget no run can exhaust: ε = 8000 at order 2,
# 0.01 per release (800,000 releases per dataset).
ids=()
for i in $(seq 1 65); do
  ids+=("$(curl -sSf -X POST "$base/v1/datasets" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' \
    -d "{\"name\": \"bench $i\", \"budget\": {\"order\": 2, \"epsilon\": 8000}}" | jq -r .id)")
done
hot=${ids[64]}
spread=("${ids[@]:0:64}")
# A variant with SET=population releases into twins of the 65 datasets that sit two levels
# down a population tree (root and child both shared; no run can exhaust a budget).
declare -A twin=()
all_ids=("${ids[@]}")
if [[ " ${sets[*]} " == *" population "* ]]; then
  new_population() { # name parent
    curl -sSf -X POST "$base/v1/populations" -H "Authorization: Bearer $admin" \
      -H 'Content-Type: application/json' \
      -d "{\"name\": \"$1\", \"budget\": {\"order\": 2, \"epsilon\": 8000}${2:+, \"parent\": \"$2\"}}" | jq -r .id
  }
  root=$(new_population "bench root")
  child=$(new_population "bench child" "$root")
  for i in $(seq 1 65); do
    twin[${ids[$((i - 1))]}]=$(curl -sSf -X POST "$base/v1/datasets" -H "Authorization: Bearer $admin" \
      -H 'Content-Type: application/json' \
      -d "{\"name\": \"bench population $i\", \"budget\": {\"order\": 2, \"epsilon\": 8000}, \"population\": \"$child\"}" | jq -r .id)
    all_ids+=("${twin[${ids[$((i - 1))]}]}")
  done
  # Every release of the 65 twins is charged to both nodes: ε = 8000 at 0.01 a release lasts
  # 800,000 releases, fewer than two population variants send in two repetitions. The bench
  # raises the two nodes to the ledger's largest total in the database, as it does for
  # pgbench's datasets below.
  psql "$db_url" -qc "UPDATE populations SET total_units = 9007199254740992 WHERE id IN ('$root', '$child')"
fi
# A variant with SET=blocks1 or SET=blocks7 releases into twins of the 65 datasets split into
# blocks by day, each block capped at ε = 8000 (no run can exhaust one).
declare -A btwin=()
if [[ " ${sets[*]} " == *" blocks"* ]]; then
  for i in $(seq 1 65); do
    btwin[${ids[$((i - 1))]}]=$(curl -sSf -X POST "$base/v1/datasets" -H "Authorization: Bearer $admin" \
      -H 'Content-Type: application/json' \
      -d "{\"name\": \"bench blocks $i\", \"budget\": {\"order\": 2, \"epsilon\": 8000}, \"blocks\": {\"period\": \"day\"}}" | jq -r .id)
    all_ids+=("${btwin[${ids[$((i - 1))]}]}")
  done
fi
# The bearer of each kind of token: an analyst token scoped to every dataset, one more with an
# allocation on each (ε = 4000 of the dataset's 8000: never exhausted, checked on every release).
scope=$(printf '"%s",' "${all_ids[@]}")
new_analyst() {
  curl -sSf -X POST "$base/v1/tokens" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' -d "{\"datasets\": [${scope%,}]}"
}
declare -A bearers=([admin]=$admin)
bearers[analyst]=$(new_analyst | jq -r .token)
allocated=$(new_analyst)
bearers[allocated]=$(jq -r .token <<<"$allocated")
allocated_id=$(jq -r .id <<<"$allocated")
for id in "${all_ids[@]}"; do
  curl -sSf -X PUT "$base/v1/datasets/$id/allocations/$allocated_id" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' -d '{"epsilon": 4000}' >/dev/null
done
for token in "${tokens[@]}"; do
  [ -n "${bearers[$token]:-}" ] || { echo "bench-e2e: unknown TOKEN $token" >&2; exit 1; }
done
bearer=${bearers[${tokens[0]}]}
counts=$(python3 -c "print(','.join(str((i * 7919) % 97) for i in range($DIM)))")
body="{\"counts\": [$counts], \"epsilon\": 0.01}"
# What a release of each set adds to the body: the blocks it reads.
declare -A set_blocks=([standalone]='' [population]='' [blocks1]=', "block": "2026-12-05"'
                       [blocks7]=', "blocks": {"from": "2026-12-01", "to": "2026-12-07"}')
# One release by hand: it must succeed, and its stored mechanism record sizes the pgbench row.
mechanism=$(curl -sSf -X POST "$base/v1/datasets/$hot/releases" -H "Authorization: Bearer $bearer" \
  -H 'Content-Type: application/json' -d "$body" | jq -c .mechanism)

# wrk script: $1 = dataset ids (space separated), $2 = per-request delay in ms (0 = none),
# $3 = 1 to send a fresh Idempotency-Key with every request.
wrk_lua() { # ids delay keyed bearer [body]
  local list bearer=$4 body=${5:-$body}
  list=$(printf '"%s",' $1)
  cat <<LUA
local ids = {${list%,}}
local headers = {["Authorization"] = "Bearer $bearer", ["Content-Type"] = "application/json"}
local body = '$body'
local keyed = ${3:-0}
local n = 0
local threads = 0
setup = function(thread) threads = threads + 1; thread:set("tid", threads) end
init = function(args) n = tid * 7 end
request = function()
  n = n + 1
  if keyed == 1 then headers["Idempotency-Key"] = "bench-$(date +%s%N)-" .. tid .. "-" .. n end
  return wrk.format("POST", "/v1/datasets/" .. ids[(n % #ids) + 1] .. "/releases", headers, body)
end
local pause = $2
if pause > 0 then delay = function() return pause end end
done = function(s, lat, req)
  local e = s.errors
  io.write(string.format('RESULT {"requests":%d,"seconds":%.3f,"rps":%.1f,"p50_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,"non2xx":%d,"socket_errors":%d}\n',
    s.requests, s.duration / 1e6, s.requests / (s.duration / 1e6), lat:percentile(50) / 1e3,
    lat:percentile(99) / 1e3, lat.max / 1e3, e.status, e.connect + e.read + e.write + e.timeout))
end
LUA
}

load() { cut -d' ' -f1 /proc/loadavg; }
results="$OUT/results.jsonl"
: >"$results"
emit() { # name kind json
  local json
  json=$(jq -c --arg name "$1" --arg kind "$2" --arg load "$(load)" --argjson conns "$3" \
    --argjson rep "$rep" \
    '. + {name: $name, kind: $kind, rep: $rep, load1: ($load|tonumber), conns: $conns, dim: '"$DIM"'}' <<<"$4")
  echo "$json" >>"$results"
  jq -r '"\(.name)\t\(.kind)\t\(.conns)\t\(.rps|floor)\t\(.p50_ms)\t\(.p99_ms)\t\(.non2xx)\t\(.load1)"' <<<"$json"
}

run_wrk() { # name ids delay conns keyed variant-index
  local name=$1 url=${bases[$6]} ids=$2 id
  [ ${#variants[@]} -gt 1 ] && name="$1@${variants[$6]%%:*}"
  if [ "${sets[$6]}" = population ]; then
    ids=$(for id in $2; do printf '%s ' "${twin[$id]}"; done)
  fi
  if [[ ${sets[$6]} == blocks* ]]; then
    ids=$(for id in $2; do printf '%s ' "${btwin[$id]}"; done)
  fi
  wrk_lua "$ids" "$3" "$5" "${bearers[${tokens[$6]}]}" \
    "{\"counts\": [$counts], \"epsilon\": 0.01${set_blocks[${sets[$6]}]}}" >"$work/$name.lua"
  local out
  out=$(wrk -t2 -c"$4" -d"${DURATION}s" --timeout 10s -s "$work/$name.lua" "$url" | sed -n 's/^RESULT //p')
  emit "$name" service "$4" "$out"
}
# Each service workload once per variant.
each_variant() { # name ids delay conns keyed
  local v
  for v in "${!variants[@]}"; do run_wrk "$@" "$v"; done
}

# pgbench: the same schema, 65 datasets of its own (ids ...0001 to ...0065; 65 is hot).
psql "$db_url" -q <<SQL
INSERT INTO datasets (id, name, budget_order, total_units, l2_squared, linf, neighbouring, created_by)
SELECT ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid, 'pgbench ' || i, 2,
       9007199254740992, 2, 1, 'replace_one', 'pgbench'
  FROM generate_series(1, 65) AS i;
SQL
dist_hex=$(python3 -c "import os; print(os.urandom(8 * $DIM).hex())")
# The minimal ledger transaction: lock the row while adding the cost, insert the release with
# its output, commit (four round trips, as an application would write it by hand).
pg_txn() { # dataset expression
  cat <<SQL
\\set ds $1
BEGIN;
UPDATE datasets SET spent_units = spent_units + 10995116278, release_count = release_count + 1
 WHERE id = ('00000000-0000-4000-8000-' || lpad(:ds::text, 12, '0'))::uuid AND spent_units + 10995116278 <= total_units
 RETURNING release_count AS seq \\gset
INSERT INTO releases (id, dataset_id, seq, created_by, mechanism, cost_units, distribution, dimension)
VALUES (gen_random_uuid(), ('00000000-0000-4000-8000-' || lpad(:ds::text, 12, '0'))::uuid, :seq, 'pgbench',
        '$mechanism'::jsonb, 10995116278, '\\x$dist_hex'::bytea, $DIM);
COMMIT;
SQL
}
# The service's own statement (src/store/postgres.rs COMMIT_RELEASE), one round trip.
pg_cte() {
  cat <<SQL
\\set ds $1
WITH charged AS (
    UPDATE datasets SET spent_units = spent_units + 10995116278, release_count = release_count + 1
     WHERE id = ('00000000-0000-4000-8000-' || lpad(:ds::text, 12, '0'))::uuid AND spent_units + 10995116278 <= total_units
 RETURNING id, budget_order, total_units, spent_units, release_count, dp_epsilon, dp_delta
), recorded AS (
    INSERT INTO releases (id, dataset_id, seq, created_by, mechanism, cost_units, distribution, dimension)
    SELECT gen_random_uuid(), charged.id, charged.release_count, 'pgbench', '$mechanism'::jsonb, 10995116278, '\\x$dist_hex'::bytea, $DIM FROM charged
 RETURNING seq, created_at
) SELECT * FROM charged CROSS JOIN recorded;
SQL
}
run_pgbench() { # name script-file [clients, default CONNS]
  local clients=${3:-$CONNS}
  rm -f "$work"/pglog*
  local out
  # The server is shared: when other clients hold most connection slots, wait and try again.
  local attempt
  for attempt in 1 2 3 4 5 6; do
    rm -f "$work"/pglog*
    out=$(cd "$work" && pgbench -n -M prepared -c "$clients" -j 2 -T "$DURATION" -l --log-prefix=pglog \
      -f "$2" "$db_url" 2>&1) && break
    grep -q 'too many clients' <<<"$out" && [ "$attempt" -lt 6 ] || { echo "$out" >&2; exit 1; }
    echo "pgbench: PostgreSQL is out of connection slots; retrying in 10 s" >&2
    sleep 10
  done
  local failed tps
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
  failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
  local json
  json=$(cat "$work"/pglog* | awk '{print $3}' | sort -n | awk -v tps="$tps" -v failed="${failed:-0}" \
    '{v[NR]=$1} END {printf "{\"requests\":%d,\"rps\":%s,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"non2xx\":%d}",
      NR, tps, v[int(NR*0.5)+1]/1000, v[int(NR*0.99)+1]/1000, v[NR]/1000, failed}')
  emit "$1" ceiling "$clients" "$json"
}
pg_txn 'random(1, 64)' >"$work/txn_spread.sql"
pg_txn 65 >"$work/txn_hot.sql"
pg_cte 'random(1, 64)' >"$work/cte_spread.sql"
pg_cte 65 >"$work/cte_hot.sql"

printf 'workload\tkind\tconns\treq/s\tp50 ms\tp99 ms\terrors\tload1\n'
for rep in $(seq 1 "$REPS"); do
  run_pgbench ceiling_txn_spread "$work/txn_spread.sql"
  run_pgbench ceiling_cte_spread "$work/cte_spread.sql"
  each_variant service_spread "${spread[*]}" 0 "$CONNS" 0
  each_variant service_spread_keyed "${spread[*]}" 0 "$CONNS" 1
  run_pgbench ceiling_txn_hot "$work/txn_hot.sql"
  run_pgbench ceiling_cte_hot "$work/cte_hot.sql"
  each_variant service_hot "$hot" 0 "$CONNS" 0
  # What careful clients send: a fresh Idempotency-Key with every release.
  each_variant service_hot_keyed "$hot" 0 "$CONNS" 1
  # The hot ceiling again with as many clients as the service has database connections: the
  # service queues its 64 HTTP connections in front of a pool of POOL, so at most POOL
  # transactions wait on the row lock, while 64 pgbench clients all do. Reported, not a target.
  run_pgbench ceiling_txn_hot_pool "$work/txn_hot.sql" "${POOL:-16}"
  # About half the measured maximum: each connection waits between requests so that CONNS
  # connections offer half the spread rate (each variant's own).
  for v in "${!variants[@]}"; do
    spread_name=service_spread
    [ ${#variants[@]} -gt 1 ] && spread_name="service_spread@${variants[$v]%%:*}"
    max_rps=$(jq -s --arg n "$spread_name" --argjson rep "$rep" \
      'map(select(.name == $n and .rep == $rep))[0].rps' "$results")
    pause=$(python3 -c "print(max(1, round($CONNS * 1000 / ($max_rps / 2))))")
    run_wrk service_spread_half "${spread[*]}" "$pause" "$CONNS" 0 "$v"
  done
done
hwm=$(awk '/VmHWM/ {print $2}' "/proc/${pids[0]}/status")

# Ratios and targets.
python3 - "$results" "$short" "$hwm" "$OUT/results.md" <<'PY'
import json, statistics, sys
path, short, hwm, md = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(path)]
by = {(r["rep"], r["name"]): r for r in rows}
reps = sorted({r["rep"] for r in rows})
variants = sorted({r["name"].split("@")[1] for r in rows if "@" in r["name"]},
                  key=lambda v: next(i for i, r in enumerate(rows) if r["name"].endswith("@" + v)))
suffixes = ["@" + v for v in variants] or [""]
lines = ["| rep | workload | kind | conns | req/s | p50 ms | p99 ms | errors | ×txn ceiling | ×CTE ceiling | load1 |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    w = "hot" if "hot" in r["name"] else "spread"
    rt = r["rps"] / by[(r["rep"], f"ceiling_txn_{w}")]["rps"]
    rc = r["rps"] / by[(r["rep"], f"ceiling_cte_{w}")]["rps"]
    r["ratio_txn"], r["ratio_cte"] = round(rt, 3), round(rc, 3)
    lines.append(f"| {r['rep']} | {r['name']} | {r['kind']} | {r['conns']} | {r['rps']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['non2xx'] + r.get('socket_errors', 0)} | {rt:.2f} | {rc:.2f} | {r['load1']} |")
lines.append(f"\nserver peak RSS (VmHWM) after the run: {hwm / 1024:.1f} MiB")
for rep in reps:
    pool = by.get((rep, "ceiling_txn_hot_pool"))
    for sfx in suffixes:
        hot = by[(rep, "service_hot" + sfx)]
        lines.append(f"rep {rep}: service_hot{sfx} / ceiling_txn_hot_pool ({pool['conns']} pgbench clients, the service's pool size): {hot['rps'] / pool['rps']:.2f}")
if len(variants) > 1:
    base = variants[0]
    lines.append(f"\nA/B, each variant's req/s over {base}'s in the same repetition (median over reps; each rep):")
    for v in variants[1:]:
        for w in ["service_spread", "service_spread_keyed", "service_hot", "service_hot_keyed"]:
            ratios = [by[(rep, f"{w}@{v}")]["rps"] / by[(rep, f"{w}@{base}")]["rps"] for rep in reps]
            lines.append(f"- {w}: {v} / {base} = {statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)})")
with open(path, "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
    f.write(json.dumps({"name": "server_vmhwm_kib", "value": hwm}) + "\n")
open(md, "w").write("\n".join(lines) + "\n")
print("\nratio to ceiling (txn = 4-statement transaction, cte = the minimal one-statement commit):")
print("\n".join(lines))
checks = []
for sfx in suffixes:
    med = lambda name, key: statistics.median(by[(rep, name + sfx)][key] for rep in reps)
    checks += [
        (f"spread{sfx} >= 0.7x ceiling (median over reps)", med("service_spread", "ratio_txn") >= 0.7),
        (f"hot{sfx} >= 0.5x ceiling (median over reps)", med("service_hot", "ratio_txn") >= 0.5),
        (f"p99 <= 25 ms at half load{sfx} (median over reps)", med("service_spread_half", "p99_ms") <= 25.0),
        (f"keyed spread{sfx} >= 1.0x one-statement ceiling (median over reps)", med("service_spread_keyed", "ratio_cte") >= 1.0),
        (f"keyed spread{sfx} within 20% of keyless (median over reps)",
         statistics.median(by[(rep, "service_spread_keyed" + sfx)]["rps"] / by[(rep, "service_spread" + sfx)]["rps"] for rep in reps) >= 0.8),
        (f"keyed hot{sfx} >= 5x ceiling (median over reps)", med("service_hot_keyed", "ratio_txn") >= 5.0),
    ]
checks.append(("zero errors", all(r["non2xx"] + r.get("socket_errors", 0) == 0 for r in rows if r["kind"] == "service")))
print()
for name, ok in checks:
    print(f"{'met   ' if ok else 'MISSED'} {name}")
if not short and not all(ok for _, ok in checks):
    sys.exit(1)
PY
