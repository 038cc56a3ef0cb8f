#!/usr/bin/env bash
# The console's end-to-end test in a real headless Chromium (tests/console/console.test.mjs).
# Installs what is missing (Debian's chromium and nodejs/npm, then playwright-core from
# tests/console/package-lock.json), starts the server on a free port with a fresh database and
# runs the scenario. Screenshots are written to target/console-artifacts/<backend>/.
#
#   scripts/console-test.sh              (a temporary SQLite file)
#   scripts/console-test.sh postgres     (a fresh database on DIRICHLET_TEST_POSTGRES_URL's server)
#   BIN=target/release/dirichlet-release scripts/console-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

backend=${1:-sqlite}
need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
command -v curl >/dev/null || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing: ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if [ ! -d tests/console/node_modules/playwright-core ]; then
  (cd tests/console && npm ci --no-audit --no-fund --loglevel=error)
fi

BIN=${BIN:-target/debug/dirichlet-release}
[ -x "$BIN" ] || cargo build --quiet
work=$(mktemp -d)
pid=
pg_admin=${DIRICHLET_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
db=
cleanup() {
  [ -n "$pid" ] && { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
  [ -n "$db" ] && { psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT

case "$backend" in
  sqlite) url="sqlite://$work/console.db" ;;
  postgres)
    db="dr_console_$(date +%s)_$$"
    psql "$pg_admin" -qc "CREATE DATABASE $db"
    url="${pg_admin%/*}/$db" ;;
  *) echo "usage: $0 [sqlite|postgres]" >&2; exit 2 ;;
esac

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export ADMIN="console-admin-$(date +%s)-$RANDOM-token"
export BASE="http://127.0.0.1:$port"
export OUT="$PWD/target/console-artifacts/$backend"
export CHROMIUM=${CHROMIUM:-$(command -v chromium)}
DIRICHLET_DATABASE_URL="$url" DIRICHLET_LISTEN="127.0.0.1:$port" DIRICHLET_ADMIN_TOKEN="$ADMIN" \
  "$BIN" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "$BASE/readyz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/server.log"; echo "server exited" >&2; exit 1; }
  sleep 0.2
done
grep -q "Console: $BASE/console" "$work/server.log" || { cat "$work/server.log"; echo "the server did not print the console address" >&2; exit 1; }

echo "console test on $backend ($BASE)"
(cd tests/console && node console.test.mjs)
if grep -qF "$ADMIN" "$work/server.log"; then echo "the admin token reached the server log" >&2; exit 1; fi
if grep -q 'dra_' "$work/server.log"; then echo "an analyst token reached the server log" >&2; exit 1; fi
