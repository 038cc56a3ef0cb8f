#!/usr/bin/env bash
# One d = 1,000,000 release end to end (JSON in, calibrate, sample, store the 8 MB output,
# JSON out) against a release build on a fresh PostgreSQL database, timed by curl, and the
# server's peak RSS (VmHWM) before and after. REPS releases (default 3), each timed.
#
#   scripts/bench-large.sh
# Output: a table on stdout and JSON lines in $OUT/large.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
DIM=${DIM:-1000000}
pg_admin=${DIRICHLET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
target_dir=${CARGO_TARGET_DIR:-target}
BIN=${BIN:-$target_dir/release/dirichlet-release}
OUT=${OUT:-$target_dir/bench-e2e}
[ -x "$BIN" ] || cargo build --release --quiet --bin dirichlet-release
mkdir -p "$OUT"
work=$(mktemp -d)
db="dr_large_$(date +%s)_$$"
pid=""
cleanup() {
  [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
psql "$pg_admin" -qc "CREATE DATABASE $db"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
admin="bench-admin-$(date +%s)-token"
DIRICHLET_DATABASE_URL="${pg_admin%/*}/$db" DIRICHLET_LISTEN="127.0.0.1:$port" \
  DIRICHLET_ADMIN_TOKEN="$admin" "$BIN" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "$base/readyz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/server.log"; echo "server exited" >&2; exit 1; }
  sleep 0.2
done
ds=$(curl -sSf -X POST "$base/v1/datasets" -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
  -d '{"name": "large", "budget": {"order": 2, "epsilon": 1000}}' | jq -r .id)
python3 -c "
import sys
d = $DIM
sys.stdout.write('{\"counts\": [' + ','.join(str((i * 7919) % 97) for i in range(d)) + '], \"epsilon\": 1.0}')
" >"$work/body.json"
hwm() { awk '/VmHWM/ {print $2}' "/proc/$pid/status"; }
echo "request body: $(stat -c %s "$work/body.json") bytes; server VmHWM before: $(($(hwm) / 1024)) MiB"
: >"$OUT/large.jsonl"
printf 'rep\tstatus\tseconds\tresponse bytes\tVmHWM MiB\tload1\n'
for rep in $(seq 1 "$REPS"); do
  read -r code secs size < <(curl -sS -o "$work/out.json" -w '%{http_code} %{time_total} %{size_download}\n' \
    -X POST "$base/v1/datasets/$ds/releases" -H "Authorization: Bearer $admin" \
    -H 'Content-Type: application/json' --data-binary @"$work/body.json")
  load1=$(cut -d' ' -f1 /proc/loadavg)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$code" "$secs" "$size" "$(($(hwm) / 1024))" "$load1"
  echo "{\"name\":\"release_d${DIM}\",\"rep\":$rep,\"status\":$code,\"seconds\":$secs,\"response_bytes\":$size,\"vmhwm_kib\":$(hwm),\"load1\":$load1}" >>"$OUT/large.jsonl"
  [ "$code" = 201 ] || { head -c 500 "$work/out.json"; echo; exit 1; }
done
