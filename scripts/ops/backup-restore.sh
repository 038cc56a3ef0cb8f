#!/usr/bin/env bash
# Online backup and restore of the ledger, on SQLite and PostgreSQL, as RELIABILITY.md ("Backup
# and restore") tells an operator to do it, checked end to end with the real binary:
#
#   SQLite (WAL mode): `sqlite3 DB ".backup FILE"` and `sqlite3 DB "VACUUM INTO 'FILE'"`, both
#     taken while the service commits releases; restored by copying the file into place (no
#     stale -wal/-shm beside it) and starting the service on it.
#   PostgreSQL: `pg_dump --format=custom` taken while the service commits releases; restored with
#     `pg_restore --single-transaction --exit-on-error --no-owner` into a new database.
#
# For each backend:
#   1. the original service gets two datasets (X: budget 2 with an analyst's allocation of 0.5;
#      Y: budget 8), releases on X by the admin (one with an Idempotency-Key) and the analyst, and
#      a writer committing releases on Y during the first backup(s);
#   2. backups under load: each restored copy's release logs verify, and each is exactly the
#      original as of one instant (Y's restored head hash and spent equal the original's at that
#      seq); being older than the original, it re-grants budget — then
#      scripts/ops/carry-over-spend.py, fed the original's logs, charges the missing spend again, after
#      which the copy holds exactly the original's spent;
#   3. a backup once the writer stopped (the service still up): budgets, release counts and
#      release-log heads equal the original's; a keyed retry returns the stored release; and both
#      admit exactly the same: the analyst's release over its allocation by 1/64 refused
#      (allocation-exhausted), the one that fits it exactly admitted, then the admin's over the
#      dataset's budget refused (budget-exhausted) and the exact remainder admitted, on the
#      original and on the copy alike (costs are dyadic, so "exactly" is exact on the ledger grid).
#   The restored-and-carried-over copy then admits on Y exactly what the original does.
#
# Usage: scripts/ops/backup-restore.sh [sqlite|postgres|all]    (default all)
# Needs sqlite3, jq, curl, python3, and for PostgreSQL a server whose admin URL is
# DIRICHLET_TEST_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres) and pg_dump /
# pg_restore of its major version. BIN: the service binary (default target/debug/dirichlet-release).
set -euo pipefail
cd "$(dirname "$0")/../.."
which=${1:-all}
BIN=${BIN:-target/debug/dirichlet-release}
[ -x "$BIN" ] || cargo build --quiet --bin dirichlet-release
pg_admin=${DIRICHLET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
for tool in sqlite3 jq curl python3; do
  command -v "$tool" >/dev/null || { echo "backup-restore: $tool is missing" >&2; exit 1; }
done
pg_tools=$(ls -d /usr/lib/postgresql/15/bin 2>/dev/null || dirname "$(command -v pg_dump)")

work=$(mktemp -d)
admin="backup-admin-$RANDOM-$RANDOM-token"
fingerprint=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
declare -A pid=() base=()
databases=()
writer=
cleanup() {
  [ -n "$writer" ] && kill "$writer" 2>/dev/null
  for name in "${!pid[@]}"; do kill "${pid[$name]}" 2>/dev/null || true; done
  for name in "${!pid[@]}"; do wait "${pid[$name]}" 2>/dev/null || true; done
  for db in "${databases[@]}"; do psql -X -q "$pg_admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
check() { # description, then a command that must succeed
  local what=$1; shift
  if "$@"; then echo "  ok   $what"; else echo "  FAIL $what"; failures=$((failures + 1)); fi
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # name database-url
  local name=$1 url=$2 port
  port=$(free_port)
  DIRICHLET_DATABASE_URL="$url" DIRICHLET_LISTEN="127.0.0.1:$port" DIRICHLET_ADMIN_TOKEN="$admin" \
    DIRICHLET_FINGERPRINT_KEY="$fingerprint" DIRICHLET_LOG_FORMAT=json \
    "$BIN" >"$work/$name.out" 2>"$work/$name.log" &
  pid[$name]=$!
  base[$name]="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do curl -sf "${base[$name]}/readyz" >/dev/null && return 0; sleep 0.1; done
  cat "$work/$name.log"; echo "backup-restore: $name did not start" >&2; return 1
}
stop() { kill "${pid[$1]}"; wait "${pid[$1]}" 2>/dev/null || true; unset "pid[$1]"; }
api() { # name method path [json body] [extra curl args...]: prints "STATUS BODY"
  local name=$1 method=$2 path=$3 body=${4:-} out
  shift 4 2>/dev/null || shift $#
  out=$(curl -sS -X "$method" "${base[$name]}$path" -H "Authorization: Bearer ${AUTH:-$admin}" \
    -H 'Content-Type: application/json' ${body:+-d "$body"} -w '\n%{http_code}' "$@")
  echo "$(tail -1 <<<"$out") $(sed '$d' <<<"$out")"
}
release() { # name dataset epsilon [key]: prints the status and the problem type or release id
  local key=${4:-} answer
  answer=$(api "$1" POST "/v1/datasets/$2/releases" "{\"counts\": [3, 1, 4, 1], \"epsilon\": $3}" \
    ${key:+-H "Idempotency-Key: $key"})
  echo "${answer%% *} $(jq -r '.id // .type' <<<"${answer#* }")"
}
budget() { api "$1" GET "/v1/datasets/$2/budget" | cut -d' ' -f2- | jq -c '{spent, remaining, releases}'; }
head_of() { api "$1" GET "/v1/datasets/$2/audit" | cut -d' ' -f2- | jq -c 'select(.ok) | .head'; }
audit_ok() { [ "$(api "$1" GET "/v1/datasets/$2/audit" | cut -d' ' -f2- | jq -r .ok)" = true ]; }
same() { [ "$1" = "$2" ] || { echo "       $1 != $2"; return 1; }; }
answers() { # name dataset epsilon regex [analyst token]: the release's "STATUS id-or-type" matches
  local got
  got=$(AUTH=${5:-} release "$1" "$2" "$3")
  [[ $got =~ $4 ]] || { echo "       got $got"; return 1; }
}
audits_ok() { # name dataset...
  local name=$1 d; shift
  for d in "$@"; do audit_ok "$name" "$d" || return 1; done
}
carried_already() { # name
  python3 scripts/ops/carry-over-spend.py --base "${base[$1]}" --admin "$admin" --log "$work/orig.log" |
    grep -q "already a carry-over"
}
sql() { # backend url query: one value
  if [ "$1" = sqlite ]; then sqlite3 "${2#sqlite://}" "$3"; else psql -X -At "$2" -c "$3"; fi
}
row_at() { # backend url dataset seq: "chain hash (hex) spent_after_units"
  local hex='hex(chain_hash)'
  [ "$1" = postgres ] && hex="encode(chain_hash, 'hex')"
  sql "$1" "$2" "SELECT lower($hex) || ' ' || spent_after_units FROM releases WHERE dataset_id = '$3' AND seq = $4"
}

run() {
  local backend=$1 orig_url db
  echo "== $backend"
  if [ "$backend" = sqlite ]; then
    orig_url="sqlite://$work/sqlite-original.db"
  else
    db="dr_backup_$(date +%s)_$$"
    psql -X -q "$pg_admin" -c "CREATE DATABASE $db"
    databases+=("$db")
    orig_url="${pg_admin%/*}/$db"
  fi
  start orig "$orig_url"

  # 1. The ledger before the backups.
  local x y analyst analyst_id analyst_token keyed
  x=$(api orig POST /v1/datasets '{"name": "X", "budget": {"order": 2, "epsilon": 2}}' | cut -d' ' -f2- | jq -r .id)
  y=$(api orig POST /v1/datasets '{"name": "Y", "budget": {"order": 2, "epsilon": 8}}' | cut -d' ' -f2- | jq -r .id)
  analyst=$(api orig POST /v1/tokens "{\"datasets\": [\"$x\"]}" | cut -d' ' -f2-)
  analyst_id=$(jq -r .id <<<"$analyst") analyst_token=$(jq -r .token <<<"$analyst")
  api orig PUT "/v1/datasets/$x/allocations/$analyst_id" '{"epsilon": 0.5}' >/dev/null
  keyed=$(release orig "$x" 0.125 before-backup-1 | cut -d' ' -f2)
  release orig "$x" 0.125 >/dev/null; release orig "$x" 0.125 >/dev/null
  AUTH=$analyst_token release orig "$x" 0.125 >/dev/null
  AUTH=$analyst_token release orig "$x" 0.125 >/dev/null

  # 2. Backups while a writer commits releases on Y.
  (while :; do release orig "$y" 0.015625 >/dev/null; done) &
  writer=$!
  sleep 1
  local b1 b2 copies=()
  if [ "$backend" = sqlite ]; then
    b1="$work/backup-api.db" b2="$work/backup-vacuum.db"
    sqlite3 "${orig_url#sqlite://}" ".backup '$b1'"
    sleep 0.5
    sqlite3 "${orig_url#sqlite://}" "VACUUM INTO '$b2'"
    copies=(".backup:$b1" "VACUUM INTO:$b2")
  else
    b1="$work/dump-under-load.pgdump"
    "$pg_tools/pg_dump" --format=custom --file="$b1" "$orig_url"
    copies=("pg_dump:$b1")
  fi
  sleep 0.5
  kill "$writer"; wait "$writer" 2>/dev/null || true; writer=
  echo "  (the writer committed $(budget orig "$y" | jq .releases) releases on Y)"

  restore() { # backup-file name: restores it as database "name" and starts a service on it
    local file=$1 name=$2 url
    if [ "$backend" = sqlite ]; then
      # The restore, as documented: the service stopped, no -wal or -shm of another database
      # beside the file, the backup copied into place, private like the original.
      mkdir -p "$work/$name"
      rm -f "$work/$name/service.db-wal" "$work/$name/service.db-shm"
      install -m 600 "$file" "$work/$name/service.db"
      url="sqlite://$work/$name/service.db"
    else
      local rdb="${db}_$name"
      psql -X -q "$pg_admin" -c "CREATE DATABASE $rdb TEMPLATE template0"
      databases+=("$rdb")
      url="${pg_admin%/*}/$rdb"
      "$pg_tools/pg_restore" --single-transaction --exit-on-error --no-owner --dbname="$url" "$file"
    fi
    start "$name" "$url"
    echo "$url" >"$work/$name.url"
  }

  local n=0 copy label file restored_head restored_seq orig_row restored_spent
  for copy in "${copies[@]}"; do
    label=${copy%%:*} file=${copy#*:} n=$((n + 1))
    restore "$file" "r$n"
    echo " restored from $label (taken under load):"
    check "release logs verify (X, Y)" audits_ok "r$n" "$x" "$y"
    restored_head=$(head_of "r$n" "$y")
    restored_seq=$(jq .seq <<<"$restored_head")
    orig_row=$(row_at "$backend" "$orig_url" "$y" "$restored_seq")
    restored_spent=$(sql "$backend" "$(cat "$work/r$n.url")" "SELECT spent_units FROM datasets WHERE id = '$y'")
    check "Y is the original as of seq $restored_seq (chain hash and spent)" \
      same "$(jq -r .hash <<<"$restored_head") $restored_spent" "$orig_row"
    check "X unchanged" same "$(budget "r$n" "$x")" "$(budget orig "$x")"
    echo "       Y: original $(budget orig "$y"), restored $(budget "r$n" "$y"): the backup re-grants what the later releases spent"
  done

  # The older copy carried over to the original's spend, from the original's log.
  echo " carry-over on the copy from ${copies[0]%%:*}:"
  python3 scripts/ops/carry-over-spend.py --base "${base[r1]}" --admin "$admin" --log "$work/orig.log" | sed 's/^/       /'
  check "after the carry-over Y's spent equals the original's" \
    same "$(budget r1 "$y" | jq -c '{spent, remaining}')" "$(budget orig "$y" | jq -c '{spent, remaining}')"
  check "and its release log verifies" audit_ok r1 "$y"
  check "a second run carries nothing more" carried_already r1

  # 3. A backup with the writer stopped, the service still serving.
  if [ "$backend" = sqlite ]; then
    b2="$work/backup-quiet.db"
    sqlite3 "${orig_url#sqlite://}" ".backup '$b2'"
  else
    b2="$work/dump-quiet.pgdump"
    "$pg_tools/pg_dump" --format=custom --file="$b2" "$orig_url"
  fi
  restore "$b2" quiet
  echo " restored from a backup taken at rest:"
  for d in "$x" "$y"; do
    check "budget of $d equal" same "$(budget quiet "$d")" "$(budget orig "$d")"
    check "release log head of $d equal" same "$(head_of quiet "$d")" "$(head_of orig "$d")"
  done
  check "allocations equal" same "$(api quiet GET "/v1/datasets/$x/allocations" | cut -d' ' -f2- | jq -c .allocations)" \
    "$(api orig GET "/v1/datasets/$x/allocations" | cut -d' ' -f2- | jq -c .allocations)"
  check "a keyed retry returns the stored release" same "$(release quiet "$x" 0.125 before-backup-1)" "201 $keyed"
  local side
  for side in quiet orig; do
    check "$side: the analyst 1/64 over its allocation is refused" \
      answers "$side" "$x" 0.265625 '^409 .*allocation-exhausted$' "$analyst_token"
    check "$side: the analyst's exact remainder (1/4) is admitted" \
      answers "$side" "$x" 0.25 '^201 ' "$analyst_token"
    check "$side: the admin 1/64 over the budget (9/8) is refused" \
      answers "$side" "$x" 1.140625 '^409 .*budget-exhausted$'
    check "$side: the exact remainder (9/8) is admitted" answers "$side" "$x" 1.125 '^201 '
  done
  check "both spent X exactly: remaining 0 on each" same "$(budget quiet "$x")" "$(budget orig "$x")"
  check "X's release log verifies on the copy" audits_ok quiet "$x"
  check "X's release log verifies on the original" audits_ok orig "$x"
  # The carried-over copy admits on Y what the original admits.
  local remaining
  remaining=$(budget orig "$y" | jq .remaining)
  for side in r1 orig; do
    check "$side: Y's remaining ($remaining) + 1/64 is refused" \
      answers "$side" "$y" "$(python3 -c "print($remaining + 1/64)")" '^409 .*budget-exhausted$'
    check "$side: Y's exact remaining is admitted" answers "$side" "$y" "$remaining" '^201 '
  done
  for name in "${!pid[@]}"; do stop "$name"; done
}

case "$which" in
  sqlite|postgres) run "$which" ;;
  all) run sqlite; run postgres ;;
  *) echo "usage: $0 [sqlite|postgres|all]" >&2; exit 2 ;;
esac
if ((failures)); then echo "backup-restore: $failures check(s) FAILED"; exit 1; fi
echo "backup-restore ($which): every check passed"
