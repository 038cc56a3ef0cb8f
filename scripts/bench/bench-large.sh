#!/usr/bin/env bash
# One d = 1,000,000 release end to end (JSON in, calibrate, sample, store the 8 MB output,
# JSON out) against a release build on a fresh PostgreSQL database, timed by curl, and the
# server's peak RSS (VmHWM) before and after. REPS releases (default 3), each timed.
#
#   scripts/bench/bench-large.sh
# Output: a table on stdout and JSON lines in $OUT/large.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${REPS:-3}
DIM=${DIM:-1000000}
target_dir=${CARGO_TARGET_DIR:-target}
BIN=${BIN:-$target_dir/release/dirichlet-release}
OUT=${OUT:-$target_dir/bench-e2e}
[ -x "$BIN" ] || cargo build --release --quiet --bin dirichlet-release
mkdir -p "$OUT"
# shellcheck source=scripts/ops/serve.sh
. scripts/ops/serve.sh
serve postgres "$BIN"
work=$serve_work pid=$SERVER_PID base=$BASE admin=$ADMIN
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
