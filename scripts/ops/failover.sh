#!/usr/bin/env bash
# A PostgreSQL failover under release load that must lose no charge (RELIABILITY.md, "Failover").
#
# Builds, under a temporary directory and on free ports (never the system cluster):
#   - pg1, a PostgreSQL 15 primary, and pg2, its synchronous standby (streaming replication,
#     synchronous_standby_names naming the other node, synchronous_commit = on), each naming the
#     other so that a rebuilt node is synchronous again;
#   - HAProxy with deploy/postgres-ha/haproxy.cfg as shipped: the service's connections go to
#     whichever node passes deploy/postgres-ha/pg-read-write-check;
#   - REPLICAS service processes (the real binary) connected through HAProxy.
# Then sends releases (scripts/ops/failover_load.py: half of them with an Idempotency-Key, retried
# when unanswered) and, during the load, fails over twice, pg1 -> pg2 at KILL_AT seconds and
# back, pg2 -> pg1, at KILL_AGAIN_AT:
#   1. replication is stalled for STALL seconds, so that commits pile up on the primary waiting
#      for the standby — the first time by stopping the primary's WAL sender (those commits stay
#      on it alone), the second by stopping the standby's WAL receiver (they reach the standby,
#      unanswered) — then every process of the primary is killed with SIGKILL (the node dies);
# and then does what the operator's procedure (RELIABILITY.md, "Failover") says:
#   2. after DETECT seconds: fence the dead node in HAProxy (`disable server`), let the standby
#      commit alone (synchronous_standby_names = ''), promote it; HAProxy moves the traffic;
#   3. the dead node is started again as it was (what a rebooted host's init would do): it comes
#      back writable on the old timeline, and must get no write;
#   4. it is stopped, rewound onto the new timeline (pg_rewind), started as the new primary's
#      standby, the new primary is made synchronous again, and its server line re-enabled (it
#      fails the check: it is a standby).
# After the load: every 201 must be on the final primary (by release id), no release charged twice,
# spent = the sum of the stored releases' costs, every release log verifies, nothing the old
# primaries kept got a 201 (scripts/ops/failover_load.py check). Prints `FAILOVER {json}` figures and
# exits non-zero on any violation.
#
# Usage: scripts/ops/failover.sh [full|ci] [--duration S] [--replicas N] [--rate R] [--keyed PCT]
#            [--kill-at S] [--kill-again-at S] [--detect S] [--stall S] [--async]
#   full (default): 60 s of load at 60 releases/s, 3 replicas, stalls at 15 and 38 s of the load
#     (the kills 1 s later), promotions 3 s after the kills;
#   ci: 36 s at 40 releases/s, 2 replicas, stalls at 6 and 21 s, promotions 2 s after the kills.
# Needs: PostgreSQL 15 server binaries (/usr/lib/postgresql/15/bin), haproxy, socat, psql,
# python3, curl; as root it installs haproxy, socat and postgresql with apt-get when missing,
# and runs PostgreSQL as user postgres. BIN (default target/debug/dirichlet-release, built if
# missing) is the service.
# --async: the same with asynchronous replication (synchronous_standby_names = ''), to show what
# it loses: the run must then fail, with 201s whose releases the new primary lacks.
# KEEP=1 keeps the temporary directory (logs, data directories, requests.jsonl) for inspection.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

mode=full
duration=60 replicas=3 rate=60 keyed=50 kill_at=15 kill_again_at=38 detect=3 stall=1 async=0
if [ "${1:-}" = ci ] || [ "${1:-}" = full ]; then mode=$1; shift; fi
if [ "$mode" = ci ]; then duration=36 replicas=2 rate=40 kill_at=6 kill_again_at=21 detect=2; fi
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --keyed) keyed=$2; shift 2 ;;
    --kill-at) kill_at=$2; shift 2 ;;
    --kill-again-at) kill_again_at=$2; shift 2 ;;
    --detect) detect=$2; shift 2 ;;
    --stall) stall=$2; shift 2 ;;
    --async) async=1; shift ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
BIN=${BIN:-target/debug/dirichlet-release}
started=$(date +%s)

# --- tools ----------------------------------------------------------------------------------
need_apt=()
command -v haproxy >/dev/null || need_apt+=(haproxy)
command -v socat >/dev/null || need_apt+=(socat)
command -v pgrep >/dev/null || need_apt+=(procps)
pg_bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/15/bin 2>/dev/null || true)}
[ -x "$pg_bin/initdb" ] || need_apt+=(postgresql-15)
command -v psql >/dev/null || need_apt+=(postgresql-client-15)
if [ ${#need_apt[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "failover: missing ${need_apt[*]}; install them (apt-get install ${need_apt[*]})" >&2; exit 1; }
  echo "failover: installing ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  pg_bin=/usr/lib/postgresql/15/bin
fi
[ -x "$BIN" ] || cargo build --quiet --bin dirichlet-release

# --- the work directory, owned by the user PostgreSQL runs as ---------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/dirichlet-failover-XXXXXX")
chmod 755 "$work"
as_pg() { "$@"; }
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$work"
  as_pg() { runuser -u postgres -- "$@"; }
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
event() { echo "$1 $(now)" >>"$work/events.txt"; }
log() { awk -v a="$(now)" -v b="$t0" -v m="$*" 'BEGIN { printf "[%6.1fs] %s\n", a - b, m }'; }
t0=$(now)

p1=$(free_port) p2=$(free_port) front=$(free_port)
declare -A port=([pg1]=$p1 [pg2]=$p2)
pids=()
haproxy_pid=
# shellcheck disable=SC2329 # run by the EXIT trap
cleanup() {
  local status=$?
  for pid in "${pids[@]}" $haproxy_pid; do kill "$pid" 2>/dev/null || true; done
  for node in pg1 pg2; do
    [ -f "$work/$node/postmaster.pid" ] && as_pg "$pg_bin/pg_ctl" -D "$work/$node" -m immediate stop >/dev/null 2>&1
  done
  for pid in "${pids[@]}" $haproxy_pid; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ] || [ "$status" != 0 ]; then
    echo "failover: logs and data kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

psql_at() { # node sql...
  local node=$1; shift
  psql -X -q -v ON_ERROR_STOP=1 -At -h 127.0.0.1 -p "${port[$node]}" -U postgres -d "${DB:-postgres}" "$@"
}
pg_ctl() { # node args...
  local node=$1; shift
  as_pg "$pg_bin/pg_ctl" -D "$work/$node" -l "$work/$node.log" "$@"
}
want_sync=sync
[ "$async" = 1 ] && want_sync=async
# Each node's own settings live outside its data directory, as on Debian (/etc/postgresql/…):
# pg_rewind copies the source's postgresql.conf and postgresql.auto.conf over the rewound node's,
# which turned a rebuilt pg1 into a second "pg2" on pg2's port when they lived inside.
node_conf() { # node
  local node=$1 other=pg2
  [ "$node" = pg2 ] && other=pg1
  [ "$async" = 1 ] && other=''
  cat >"$work/$node.conf" <<EOF
include '$work/common.conf'
port = ${port[$node]}
cluster_name = '$node'
synchronous_standby_names = '$other'
EOF
}
pg_start() { # node
  pg_ctl "$1" -o "-c config_file=$work/$1.conf" -w start
}

# --- 1. pg1 primary, pg2 synchronous standby -------------------------------------------------
as_pg "$pg_bin/initdb" -D "$work/pg1" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
cp "$work/pg1/postgresql.conf" "$work/initdb.conf"; chmod 644 "$work/initdb.conf"
cat >"$work/common.conf" <<EOF
include '$work/initdb.conf'
listen_addresses = '127.0.0.1'
unix_socket_directories = '$work'
max_connections = 200
shared_buffers = 64MB
wal_level = replica
max_wal_senders = 8
wal_keep_size = 256MB
hot_standby = on
synchronous_commit = on
# pg_rewind needs hint-bit changes in the WAL to rebuild a failed primary as a standby.
wal_log_hints = on
# A standby whose primary is gone retries the connection this often, and notices a promotion
# only between tries (5 s by default).
wal_retrieve_retry_interval = 1s
EOF
node_conf pg1
pg_start pg1 >/dev/null
as_pg "$pg_bin/pg_basebackup" -h 127.0.0.1 -p "$p1" -U postgres -D "$work/pg2" -X stream -R \
  --checkpoint=fast
node_conf pg2
pg_start pg2 >/dev/null
for _ in $(seq 1 100); do
  [ "$(psql_at pg1 -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'pg2'")" = "$want_sync" ] && break
  sleep 0.1
done
[ "$(psql_at pg1 -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'pg2'")" = "$want_sync" ] \
  || { echo "failover: pg2 is not a $want_sync standby of pg1" >&2; exit 1; }
psql_at pg1 -c "CREATE DATABASE dirichlet"
log "pg1 primary on :$p1, pg2 $want_sync standby on :$p2"

# --- 2. HAProxy, as shipped --------------------------------------------------------------------
export PG_FRONT_BIND="127.0.0.1:$front" PG1_ADDR="127.0.0.1:$p1" PG2_ADDR="127.0.0.1:$p2"
export PG_CHECK="$repo/deploy/postgres-ha/pg-read-write-check" HAPROXY_ADMIN="$work/haproxy.sock"
haproxy -c -q -f deploy/postgres-ha/haproxy.cfg
haproxy -db -f deploy/postgres-ha/haproxy.cfg >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!
haproxy_cmd() { echo "$1" | socat - "UNIX-CONNECT:$HAPROXY_ADMIN"; }
# `show stat` CSV: field 2 the server, field 18 its status (UP, DOWN, MAINT, ...).
server_status() { haproxy_cmd "show stat" | awk -F, -v s="$1" '$1 == "postgres" && $2 == s { print $18 }'; }
for _ in $(seq 1 50); do
  [ -S "$HAPROXY_ADMIN" ] && [ "$(server_status pg1)" = UP ] && [ "$(server_status pg2)" = DOWN ] && break
  sleep 0.2
done
log "HAProxy on :$front: pg1 $(server_status pg1), pg2 $(server_status pg2)"
[ "$(server_status pg1)" = UP ] && [ "$(server_status pg2)" = DOWN ] \
  || { echo "failover: HAProxy should send to pg1 only" >&2; exit 1; }

# --- 3. the service ------------------------------------------------------------------------------
admin="failover-admin-$RANDOM-$RANDOM-token"
fingerprint=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
bases=()
for n in $(seq 1 "$replicas"); do
  p=$(free_port)
  DIRICHLET_DATABASE_URL="postgres://postgres@127.0.0.1:$front/dirichlet" \
    DIRICHLET_LISTEN="127.0.0.1:$p" DIRICHLET_ADMIN_TOKEN="$admin" \
    DIRICHLET_FINGERPRINT_KEY="$fingerprint" DIRICHLET_LOG_FORMAT=json \
    "$BIN" >"$work/replica-$n.out" 2>"$work/replica-$n.log" &
  pids+=($!)
  bases+=("http://127.0.0.1:$p")
done
for base in "${bases[@]}"; do
  for _ in $(seq 1 150); do curl -sf "$base/readyz" >/dev/null && break; sleep 0.2; done
  curl -sf "$base/readyz" >/dev/null || { tail -5 "$work"/replica-*.log; echo "failover: $base not ready" >&2; exit 1; }
done
bases_csv=$(IFS=,; echo "${bases[*]}")
python3 scripts/ops/failover_load.py setup --base "${bases[0]}" --admin "$admin" --datasets 4 --out "$work/datasets.json"
log "$replicas service replicas ready; load: ${duration}s at ${rate}/s, ${keyed}% keyed"

# --- 4. the load, and two failovers during it ----------------------------------------------------
fence_ok=1
declare -A stall_what=([sender]="the primary's WAL sender (the commits in flight stay on it alone)"
  [receiver]="the standby's WAL receiver (the commits in flight reach it, unacknowledged)")

# fail_over FROM TO STALL: the node FROM dies with commits in flight, TO is promoted.
fail_over() {
  local from=$1 to=$2 side=$3 stalled postmaster children
  # Commits in flight when the node dies: replication is stalled for STALL seconds first, so that
  # commits pile up on FROM waiting for the standby's acknowledgement (as behind a slow link).
  # Stopping FROM's WAL sender keeps them on FROM alone; stopping TO's WAL receiver lets their
  # WAL reach TO (it is in the socket) once it resumes: unanswered releases that the new primary
  # has, which a keyed retry must get back as they are.
  if [ "$side" = sender ]; then
    stalled=$(psql_at "$from" -c "SELECT pid FROM pg_stat_replication WHERE application_name = '$to'")
  else
    stalled=$(psql_at "$to" -c "SELECT pid FROM pg_stat_wal_receiver")
  fi
  kill -STOP "$stalled"
  sleep "$stall"
  postmaster=$(head -1 "$work/$from/postmaster.pid")
  mapfile -t children < <(pgrep -P "$postmaster")
  kill -9 "$postmaster" "${children[@]}"
  event "kill_$from"
  [ "$side" = receiver ] && kill -CONT "$stalled"
  log "$from killed (SIGKILL to its postmaster and ${#children[@]} children) after ${stall}s with ${stall_what[$side]} stopped"
  sleep "$detect"
  # The operator's procedure: fence first, then promote.
  haproxy_cmd "disable server postgres/$from" >/dev/null
  psql_at "$to" -c "ALTER SYSTEM SET synchronous_standby_names = ''" -c "SELECT pg_reload_conf()" >/dev/null
  pg_ctl "$to" -w promote >/dev/null
  event "promoted_$to"
  for _ in $(seq 1 50); do [ "$(server_status "$to")" = UP ] && break; sleep 0.1; done
  log "$from fenced ($(server_status "$from")), $to promoted; HAProxy: $to $(server_status "$to")"
}

# come_back FROM TO: the dead node comes back as it was (writable, on the old timeline: what a
# rebooted host's init does) and must get no write; then it is rewound and rebuilt as TO's
# standby, TO is made synchronous again, and FROM's server line is given back.
come_back() {
  local from=$1 to=$2 writable check=fails before after sync_state=
  # (pg_ctl warns that a server might be running: the killed postmaster left its pid file.)
  pg_start "$from" >/dev/null 2>&1
  event "back_as_it_was_$from"
  writable=$(psql_at "$from" -c "SELECT NOT pg_is_in_recovery()")
  "$PG_CHECK" NOT_USED NOT_USED 127.0.0.1 "${port[$from]}" && check=passes
  before=$(DB=dirichlet psql_at "$from" -c "SELECT count(*) FROM releases")
  sleep 3
  after=$(DB=dirichlet psql_at "$from" -c "SELECT count(*) FROM releases")
  DB=dirichlet psql_at "$from" -F'|' -c "SELECT id, dataset_id, coalesce(label, '') FROM releases" >>"$work/old-releases.txt"
  log "$from back as it was: writable=$writable, read-write check $check, HAProxy $(server_status "$from"); its releases $before -> $after"
  [ "$before" = "$after" ] && [ "$(server_status "$from")" = MAINT ] || fence_ok=0

  pg_ctl "$from" -m fast -w stop >/dev/null
  # pg_rewind reads the source's timeline from its control file, which a promotion updates only
  # at its next checkpoint: without this it may find "the same timeline" and rewind nothing.
  psql_at "$to" -c CHECKPOINT
  as_pg "$pg_bin/pg_rewind" -D "$work/$from" --write-recovery-conf \
    --source-server="host=127.0.0.1 port=${port[$to]} user=postgres dbname=postgres" >"$work/pg_rewind-$from.log" 2>&1
  grep -q "^pg_rewind: Done!" "$work/pg_rewind-$from.log" \
    || { cat "$work/pg_rewind-$from.log"; echo "failover: pg_rewind did not rewind $from" >&2; exit 1; }
  pg_start "$from" >/dev/null
  for _ in $(seq 1 100); do
    [ "$(psql_at "$to" -c "SELECT state FROM pg_stat_replication WHERE application_name = '$from'")" = streaming ] && break
    sleep 0.1
  done
  psql_at "$to" -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" >/dev/null
  for _ in $(seq 1 100); do
    sync_state=$(psql_at "$to" -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$from'")
    [ "$sync_state" = "$want_sync" ] && break
    sleep 0.1
  done
  haproxy_cmd "enable server postgres/$from" >/dev/null
  sleep 2
  event "rebuilt_$from"
  log "$from rewound and back as $to's standby ($sync_state); HAProxy: $from $(server_status "$from"), $to $(server_status "$to")"
  [ "$sync_state" = "$want_sync" ] && [ "$(server_status "$from")" = DOWN ] && [ "$(server_status "$to")" = UP ] || fence_ok=0
}

load_start=$(now)
python3 scripts/ops/failover_load.py run --bases "$bases_csv" --admin "$admin" --datasets "$work/datasets.json" \
  --duration "$duration" --rate "$rate" --keyed "$keyed" --out "$work/requests.jsonl" &
load_pid=$!
pids+=("$load_pid")
sleep_until() { sleep "$(awk -v t="$1" -v s="$load_start" -v n="$(now)" 'BEGIN { d = s + t - n; print (d > 0 ? d : 0) }')"; }

sleep_until "$kill_at"
fail_over pg1 pg2 sender
sleep 4
come_back pg1 pg2
sleep_until "$kill_again_at"
fail_over pg2 pg1 receiver
sleep 4
come_back pg2 pg1
wait "$load_pid"
log "load done"
primary=pg1

# --- 5. the verdict --------------------------------------------------------------------------------
DB=dirichlet psql_at "$primary" -F'|' -c "SELECT id, dataset_id, coalesce(label, ''), coalesce(idempotency_key, ''), cost_units, seq FROM releases" >"$work/new-releases.txt"
DB=dirichlet psql_at "$primary" -F'|' -c "SELECT id, spent_units, release_count, total_units FROM datasets" >"$work/new-datasets.txt"
status=0
python3 scripts/ops/failover_load.py check --requests "$work/requests.jsonl" --datasets "$work/datasets.json" \
  --events "$work/events.txt" --new-releases "$work/new-releases.txt" --new-datasets "$work/new-datasets.txt" \
  --old-releases "$work/old-releases.txt" --bases "$bases_csv" --admin "$admin" || status=1
errors=$(cat "$work"/replica-*.log | grep -c '"level":"ERROR"' || true)
echo "failover: the replicas logged $errors ERROR lines (a 5xx logs its cause once)"
if [ "$fence_ok" != 1 ]; then
  echo "FAILED: the fence or the rebuild did not hold (see the lines above)" >&2
  status=1
fi
echo "failover ($mode): $([ $status = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - started)) s"
exit $status
