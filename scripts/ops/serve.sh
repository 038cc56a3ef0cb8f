#!/usr/bin/env bash
# Sourced, not run: start the service on a free port with a fresh database for a test script,
# and stop it (and drop the database) when the script exits.
#
#   source scripts/ops/serve.sh
#   serve sqlite|postgres|URL [BIN]   sets BASE, ADMIN, SERVE_DATABASE_URL, SERVER_LOG and SERVER_PID;
#                                     waits for /readyz
#
# sqlite: a fresh file. postgres: a fresh database on DIRICHLET_TEST_POSTGRES_URL's server
# (default postgres://postgres@127.0.0.1:5432/postgres), dropped on exit. A sqlite:// or
# postgres:// URL: that database, as it is (the caller owns it). BIN defaults to
# target/debug/dirichlet-release, built if missing. Extra DIRICHLET_* variables exported by the
# caller reach the server. Every script that starts a server for a test or a benchmark uses this
# (scripts/ci/docker-cmd-on-host.sh excepted: it checks the image's own start command).

serve_work=$(mktemp -d)
SERVER_PID=
serve_db=
serve_pg_admin=${DIRICHLET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
# SIGTERM lets the server drain; one stuck in a request never exits, so SIGKILL after 10 s (a
# server left spinning once ate a core of the next CI run).
stop_server() {
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
serve_cleanup() {
  [ -n "$SERVER_PID" ] && stop_server "$SERVER_PID"
  [ -n "$serve_db" ] && { psql "$serve_pg_admin" -qc "DROP DATABASE IF EXISTS $serve_db WITH (FORCE)" >/dev/null || true; }
  rm -rf "$serve_work"
}
trap serve_cleanup EXIT

serve() {
  local backend=$1 bin=${2:-target/debug/dirichlet-release} url port
  [ -x "$bin" ] || cargo build --quiet --bin dirichlet-release
  case "$backend" in
    sqlite) url="sqlite://$serve_work/service.db" ;;
    postgres)
      serve_db="dr_test_$(date +%s)_$$"
      psql "$serve_pg_admin" -qc "CREATE DATABASE $serve_db"
      url="${serve_pg_admin%/*}/$serve_db" ;;
    sqlite://*|postgres://*|postgresql://*) url=$backend ;;
    *) echo "serve: backend must be sqlite, postgres or a database URL, not '$backend'" >&2; return 2 ;;
  esac
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export ADMIN="test-admin-$(date +%s)-$RANDOM-token"
  export BASE="http://127.0.0.1:$port"
  export SERVE_DATABASE_URL=$url
  SERVER_LOG="$serve_work/server.log"
  DIRICHLET_DATABASE_URL="$url" DIRICHLET_LISTEN="127.0.0.1:$port" DIRICHLET_ADMIN_TOKEN="$ADMIN" \
    "$bin" >"$SERVER_LOG" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    curl -sf "$BASE/readyz" >/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$SERVER_LOG"; echo "server exited" >&2; return 1; }
    sleep 0.2
  done
  cat "$SERVER_LOG"; echo "server not ready after 20 s" >&2; return 1
}
