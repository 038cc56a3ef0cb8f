#!/usr/bin/env bash
# An automatic PostgreSQL failover under release load, with no operator step: pg_auto_failover
# (Debian's postgresql-15-auto-failover) promotes the synchronous standby when the primary dies,
# HAProxy sends the service to whichever node the monitor names as primary
# (deploy/postgres-ha/pg-auto-failover-check), and the dead primary, started again, rejoins as a
# standby by itself (RELIABILITY.md, "Failover").
#
# Builds, under a temporary directory and on free ports (never the system cluster), as the user
# postgres:
#   - a pg_auto_failover monitor, with the failure-detection settings of its documentation
#     lowered for a fast failover (below), and two nodes, pg1 (primary) and pg2 (synchronous
#     secondary), each run by its own `pg_autoctl run` keeper;
#   - HAProxy with deploy/postgres-ha/haproxy.cfg as shipped, its check being
#     pg-auto-failover-check;
#   - REPLICAS service processes (the real binary) connected through HAProxy.
# Then sends releases (scripts/ops/failover_load.py: half of them with an Idempotency-Key, retried
# when unanswered) and, at KILL_AT seconds of the load, kills pg1 — SIGKILL to its keeper, its
# postmaster and every child, the node dies — after stalling its WAL sender for STALL seconds so
# that commits are in flight. Nothing else is done by hand: the monitor promotes pg2, HAProxy
# follows the monitor. REJOIN seconds after the kill pg1's keeper is started again (what a
# rebooted host's init does); it must come back as pg2's standby without ever being writable.
# After the load: every 201 is on the new primary, no release charged twice, spent = the sum of
# the stored costs, every release log verifies (scripts/ops/failover_load.py check), the time from
# the kill to the first 201 is reported, and pg1 is pg2's streaming standby. Prints
# `FAILOVER {json}` and exits non-zero on any violation.
#
# Usage: scripts/ops/failover-auto.sh [full|ci] [--duration S] [--replicas N] [--rate R]
#            [--keyed PCT] [--kill-at S] [--rejoin S] [--stall S] [--async]
#   full (default): 60 s of load at 60 releases/s, 3 replicas, the kill at 15 s;
#   ci: 30 s at 40 releases/s, 2 replicas, the kill at 8 s.
# --async: pg2 outside the replication quorum (`pg_autoctl set node replication-quorum false`:
# asynchronous replication); the releases committed while the WAL sender is stalled are then
# lost, and the run must fail.
# Needs: pg_autoctl (postgresql-15-auto-failover), PostgreSQL 15 server binaries, haproxy,
# psql, python3, curl, procps; as root it installs the missing Debian packages with apt-get.
# BIN (default target/debug/dirichlet-release, built if missing) is the service. KEEP=1 keeps the
# temporary directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

mode=full
duration=60 replicas=3 rate=60 keyed=50 kill_at=15 rejoin=20 stall=1 async=0
if [ "${1:-}" = ci ] || [ "${1:-}" = full ]; then mode=$1; shift; fi
if [ "$mode" = ci ]; then duration=30 replicas=2 rate=40 kill_at=8 rejoin=14; fi
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --keyed) keyed=$2; shift 2 ;;
    --kill-at) kill_at=$2; shift 2 ;;
    --rejoin) rejoin=$2; shift 2 ;;
    --stall) stall=$2; shift 2 ;;
    --async) async=1; shift ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
BIN=${BIN:-target/debug/dirichlet-release}
started=$(date +%s)

# --- tools ----------------------------------------------------------------------------------
need_apt=()
command -v pg_autoctl >/dev/null || need_apt+=(postgresql-15-auto-failover)
command -v haproxy >/dev/null || need_apt+=(haproxy)
command -v pgrep >/dev/null || need_apt+=(procps)
pg_bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/15/bin 2>/dev/null || true)}
[ -x "$pg_bin/initdb" ] || need_apt+=(postgresql-15)
command -v psql >/dev/null || need_apt+=(postgresql-client-15)
if [ ${#need_apt[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "failover-auto: missing ${need_apt[*]}; install them (apt-get install ${need_apt[*]})" >&2; exit 1; }
  echo "failover-auto: installing ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  pg_bin=/usr/lib/postgresql/15/bin
fi
[ -x "$BIN" ] || cargo build --quiet --bin dirichlet-release

# --- the work directory, owned by the user PostgreSQL runs as ---------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/dirichlet-autofailover-XXXXXX")
chmod 755 "$work"
mkdir -p "$work/xdg/config" "$work/xdg/data" "$work/xdg/run"
chmod 700 "$work/xdg/run"
as_pg() { env "$@"; }
if [ "$(id -u)" = 0 ]; then
  chown -R postgres: "$work"
  as_pg() { runuser -u postgres -- env "$@"; }
fi
# pg_autoctl keeps its configuration and state under XDG directories: the work directory's own.
autoctl() {
  as_pg PATH="$pg_bin:/usr/bin:/bin" XDG_CONFIG_HOME="$work/xdg/config" XDG_DATA_HOME="$work/xdg/data" \
    XDG_RUNTIME_DIR="$work/xdg/run" pg_autoctl "$@"
}
descendants() { local child; for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }
event() { echo "$1 $(now)" >>"$work/events.txt"; }
log() { awk -v a="$(now)" -v b="$t0" -v m="$*" 'BEGIN { printf "[%6.1fs] %s\n", a - b, m }'; }
t0=$(now)

pm=$(free_port) p1=$(free_port) p2=$(free_port) front=$(free_port)
declare -A port=([pg1]=$p1 [pg2]=$p2 [monitor]=$pm)
declare -A keeper=()
pids=()
haproxy_pid=
# shellcheck disable=SC2329 # run by the EXIT trap
cleanup() {
  local status=$?
  for pid in "${pids[@]}" $haproxy_pid; do kill "$pid" 2>/dev/null || true; done
  # The keepers' process trees (a pg_autoctl service outlives its supervisor and would restart
  # its postmaster), then the postmasters.
  local postmasters=() trees=() node pid
  for node in pg1 pg2 monitor; do
    [ -f "$work/$node/postmaster.pid" ] && postmasters+=("$(head -1 "$work/$node/postmaster.pid")")
  done
  for pid in "${keeper[@]}"; do
    trees+=("$pid")
    mapfile -t -O "${#trees[@]}" trees < <(descendants "$pid")
  done
  for pid in "${trees[@]}"; do
    [[ " ${postmasters[*]} " == *" $pid "* ]] || kill -9 "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}" $haproxy_pid "${keeper[@]}"; do wait "$pid" 2>/dev/null || true; done
  for node in pg1 pg2 monitor; do
    [ -f "$work/$node/postmaster.pid" ] && as_pg "$pg_bin/pg_ctl" -D "$work/$node" -m immediate stop >/dev/null 2>&1
  done
  if [ "${KEEP:-0}" = 1 ] || [ "$status" != 0 ]; then
    echo "failover-auto: logs and data kept in $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

psql_at() { # node sql...
  local node=$1; shift
  psql -X -q -v ON_ERROR_STOP=1 -At -h 127.0.0.1 -p "${port[$node]}" -U postgres -d "${DB:-postgres}" "$@"
}
monitor_sql() { DB=pg_auto_failover psql_at monitor -c "$1"; }
state_of() { # node: its reported state, as the monitor has it
  monitor_sql "SELECT current_group_state FROM pgautofailover.current_state('default') WHERE nodename = '$1'"
}
primary_name() { monitor_sql "SELECT primary_name FROM pgautofailover.get_primary('default', 0)" 2>/dev/null || true; }
run_keeper() { # node
  autoctl run --pgdata "$work/$1" >>"$work/$1.keeper.log" 2>&1 &
  keeper[$1]=$!
}
wait_state() { # node state seconds
  local i
  for i in $(seq 1 $(($3 * 5))); do
    [ "$(state_of "$1")" = "$2" ] && return 0
    # pg_basebackup waits for a spread checkpoint on the primary: ask for it now.
    [ $((i % 10)) = 0 ] && psql_at pg1 -c CHECKPOINT >/dev/null 2>&1
    sleep 0.2
  done
  echo "failover-auto: $1 did not reach $2 (it is $(state_of "$1"))" >&2
  autoctl show state --pgdata "$work/monitor" >&2 || true
  exit 1
}

# --- 1. the monitor, pg1 primary, pg2 synchronous secondary -----------------------------------
autoctl create monitor --pgdata "$work/monitor" --pgport "$pm" --hostname 127.0.0.1 \
  --auth trust --no-ssl >"$work/monitor.create.log" 2>&1
run_keeper monitor
for _ in $(seq 1 100); do monitor_sql "SELECT 1" >/dev/null 2>&1 && break; sleep 0.1; done
# The monitor's failure detection and promotion timing (pg_auto_failover's documented settings,
# "Configuring pg_auto_failover"): a node is unhealthy after 1 s without an answer and 3 s without
# a report from its keeper; the standby is promoted once the old primary has had 6 s to demote
# itself. Each keeper's network_partition_timeout (below, 4 s) stays shorter than that, so that a
# primary cut off from the monitor and its standby stops taking writes before the standby takes
# over.
for setting in health_check_period=1000 health_check_timeout=1000 health_check_max_retries=1 \
  health_check_retry_delay=500 node_considered_unhealthy_timeout=3000 primary_demote_timeout=6000; do
  monitor_sql "ALTER SYSTEM SET pgautofailover.${setting%%=*} = ${setting#*=}" >/dev/null
done
monitor_sql "SELECT pg_reload_conf()" >/dev/null
monitor_uri="postgres://autoctl_node@127.0.0.1:$pm/pg_auto_failover?sslmode=disable"
create_node() { # node
  autoctl create postgres --pgdata "$work/$1" --pgport "${port[$1]}" --hostname 127.0.0.1 \
    --name "$1" --auth trust --no-ssl --monitor "$monitor_uri" --dbname dirichlet \
    >"$work/$1.create.log" 2>&1
  autoctl config set --pgdata "$work/$1" timeout.network_partition_timeout 4 >/dev/null
  run_keeper "$1"
}
create_node pg1
wait_state pg1 single 60
create_node pg2
wait_state pg2 secondary 120
wait_state pg1 primary 30
if [ "$async" = 1 ]; then
  autoctl set node replication-quorum false --pgdata "$work/pg2" >/dev/null
  for _ in $(seq 1 50); do [ -z "$(psql_at pg1 -c "SHOW synchronous_standby_names")" ] && break; sleep 0.2; done
fi
sync_names=$(psql_at pg1 -c "SHOW synchronous_standby_names")
log "monitor on :$pm, pg1 primary on :$p1, pg2 secondary on :$p2 (synchronous_standby_names '$sync_names')"

# --- 2. HAProxy, as shipped, following the monitor -----------------------------------------------
echo "postgres://postgres@127.0.0.1:$pm/pg_auto_failover" >"$work/monitor.uri"
cat >"$work/check" <<EOF
#!/bin/sh
PGCHECK_MONITOR_FILE='$work/monitor.uri' exec '$repo/deploy/postgres-ha/pg-auto-failover-check' "\$@"
EOF
chmod 755 "$work/check"
export PG_FRONT_BIND="127.0.0.1:$front" PG1_ADDR="127.0.0.1:$p1" PG2_ADDR="127.0.0.1:$p2"
export PG_CHECK="$work/check" HAPROXY_ADMIN="$work/haproxy.sock"
haproxy -c -q -f deploy/postgres-ha/haproxy.cfg
haproxy -db -f deploy/postgres-ha/haproxy.cfg >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!
haproxy_cmd() { echo "$1" | python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.stdin.buffer.read())
while (chunk := s.recv(65536)): sys.stdout.buffer.write(chunk)' "$HAPROXY_ADMIN"; }
server_status() { haproxy_cmd "show stat" | awk -F, -v s="$1" '$1 == "postgres" && $2 == s { print $18 }'; }
for _ in $(seq 1 50); do
  [ -S "$HAPROXY_ADMIN" ] && [ "$(server_status pg1)" = UP ] && [ "$(server_status pg2)" = DOWN ] && break
  sleep 0.2
done
[ "$(server_status pg1)" = UP ] && [ "$(server_status pg2)" = DOWN ] \
  || { echo "failover-auto: HAProxy should send to pg1 only" >&2; exit 1; }
log "HAProxy on :$front: pg1 UP, pg2 DOWN"

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
  curl -sf "$base/readyz" >/dev/null || { tail -5 "$work"/replica-*.log; echo "failover-auto: $base not ready" >&2; exit 1; }
done
bases_csv=$(IFS=,; echo "${bases[*]}")
python3 scripts/ops/failover_load.py setup --base "${bases[0]}" --admin "$admin" --datasets 4 --out "$work/datasets.json"
log "$replicas service replicas ready; load: ${duration}s at ${rate}/s, ${keyed}% keyed"

# --- 4. the load, and the primary's death during it -------------------------------------------------
load_start=$(now)
python3 scripts/ops/failover_load.py run --bases "$bases_csv" --admin "$admin" --datasets "$work/datasets.json" \
  --duration "$duration" --rate "$rate" --keyed "$keyed" --out "$work/requests.jsonl" &
load_pid=$!
pids+=("$load_pid")
sleep_until() { sleep "$(awk -v t="$1" -v s="$load_start" -v n="$(now)" 'BEGIN { d = s + t - n; print (d > 0 ? d : 0) }')"; }

sleep_until "$kill_at"
# Commits in flight when the node dies: its WAL sender is stopped for STALL seconds first, so
# that commits pile up on pg1 waiting for pg2's acknowledgement (synchronous: unanswered; with
# --async: answered 201, on pg1 alone).
sender=$(psql_at pg1 -c "SELECT pid FROM pg_stat_replication WHERE application_name LIKE 'pgautofailover_standby_%'")
kill -STOP "$sender"
sleep "$stall"
# The whole node: the keeper's process tree (its supervisor, its postgres and node-active
# services) and the postmaster's, frozen first so that no survivor restarts the others.
postmaster=$(head -1 "$work/pg1/postmaster.pid")
mapfile -t doomed < <(descendants "${keeper[pg1]}"; echo "$postmaster"; descendants "$postmaster")
kill -STOP "${doomed[@]}" 2>/dev/null || true
kill -9 "${keeper[pg1]}" "${doomed[@]}" 2>/dev/null || true
event kill_pg1
log "pg1 killed (SIGKILL to its keeper, its postmaster and $((${#doomed[@]} - 1)) other processes) after ${stall}s with its WAL sender stopped"
wait "${keeper[pg1]}" 2>/dev/null || true
unset 'keeper[pg1]'
# From here on nothing is done to the formation but watch it (and, later, restart pg1's keeper).
for _ in $(seq 1 300); do [ "$(primary_name)" = pg2 ] && break; sleep 0.1; done
event promoted_pg2
log "the monitor names pg2 primary ($(state_of pg2)); HAProxy: pg1 $(server_status pg1), pg2 $(server_status pg2)"

# pg1 comes back (a rebooted host's init starts its keeper): it must rejoin as pg2's standby and
# never be writable, nor chosen by HAProxy, on the way.
sleep_until "$((kill_at + rejoin))"
run_keeper pg1
event back_pg1
writable_seen=0 haproxy_seen=0
for _ in $(seq 1 300); do
  [ "$(psql_at pg1 -c "SELECT pg_is_in_recovery()" 2>/dev/null || true)" = f ] && writable_seen=1
  [ "$(server_status pg1)" = UP ] && haproxy_seen=1
  [ "$(state_of pg1)" = secondary ] && break
  sleep 0.2
done
log "pg1 back: $(state_of pg1) (writable seen: $writable_seen, HAProxy UP seen: $haproxy_seen)"
wait "$load_pid"
log "load done"

# --- 5. the verdict --------------------------------------------------------------------------------
status=0
DB=dirichlet psql_at pg2 -F'|' -c "SELECT id, dataset_id, coalesce(label, ''), coalesce(idempotency_key, ''), cost_units, seq FROM releases" >"$work/new-releases.txt"
DB=dirichlet psql_at pg2 -F'|' -c "SELECT id, spent_units, release_count, total_units FROM datasets" >"$work/new-datasets.txt"
python3 scripts/ops/failover_load.py check --requests "$work/requests.jsonl" --datasets "$work/datasets.json" \
  --events "$work/events.txt" --new-releases "$work/new-releases.txt" --new-datasets "$work/new-datasets.txt" \
  --bases "$bases_csv" --admin "$admin" || status=1
replication=$(psql_at pg2 -c "SELECT state || ' ' || sync_state FROM pg_stat_replication WHERE application_name = 'pgautofailover_standby_1'")
log "pg2 primary ($(state_of pg2)), pg1 $(state_of pg1), replication to pg1: ${replication:-none}"
if [ "$writable_seen" != 0 ] || [ "$haproxy_seen" != 0 ] || [ "$(state_of pg1)" != secondary ] \
  || [[ $replication != streaming* ]]; then
  echo "FAILED: the old primary did not rejoin as a standby without taking writes" >&2
  status=1
fi
errors=$(cat "$work"/replica-*.log | grep -c '"level":"ERROR"' || true)
echo "failover-auto: the replicas logged $errors ERROR lines (a 5xx logs its cause once)"
echo "failover-auto ($mode$([ "$async" = 1 ] && echo ', asynchronous')): $([ $status = 0 ] && echo passed || echo FAILED) in $(($(date +%s) - started)) s"
exit $status
