#!/usr/bin/env bash
# Starts the service for the Python client's tests through scripts/ops/serve.sh (a fresh SQLite file
# or a fresh PostgreSQL database on a free port), prints `BASE=…` and `ADMIN=…`, and keeps it up
# until its standard input closes or it is sent SIGTERM; serve.sh's exit trap then stops the
# server and drops the database.
#
#   clients/python/tests/serve_for_pytest.sh sqlite|postgres      (DIRICHLET_BIN: the binary)
set -euo pipefail
cd "$(dirname "$0")/../../.."
bin=${DIRICHLET_BIN:-target/debug/dirichlet-release}
# shellcheck source=scripts/ops/serve.sh
source scripts/ops/serve.sh
trap 'exit 143' TERM INT
serve "$1" "$bin" >&2
echo "BASE=$BASE"
echo "ADMIN=$ADMIN"
echo "LOG=$SERVER_LOG"
# Wait for the end of standard input (the test session closes it), checking that the server is
# still there.
while kill -0 "$SERVER_PID" 2>/dev/null; do
  if read -r -t 1 _; then :; else
    [ $? -gt 128 ] || break
  fi
done
