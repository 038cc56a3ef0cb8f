#!/usr/bin/env bash
# Runs the README's curl walkthrough (the block between the walkthrough markers) against a live
# server, so the README cannot drift from what the service does. Fails if any step fails.
#
#   scripts/walkthrough.sh [DATABASE_URL]      (default: a temporary SQLite file)
#   BIN=target/release/dirichlet-release scripts/walkthrough.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-target/debug/dirichlet-release}
[ -x "$BIN" ] || cargo build --quiet
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export ADMIN="walkthrough-admin-$(date +%s)-token"
export BASE="http://127.0.0.1:$port"
DIRICHLET_DATABASE_URL=${1:-sqlite://$work/walkthrough.db} DIRICHLET_LISTEN="127.0.0.1:$port" \
  DIRICHLET_ADMIN_TOKEN="$ADMIN" "$BIN" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -sf "$BASE/readyz" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/server.log"; echo "server exited" >&2; exit 1; }
  sleep 0.2
done

sed -n '/<!-- walkthrough:start -->/,/<!-- walkthrough:end -->/p' README.md |
  sed -n '/^```bash$/,/^```$/p' | sed '1d;$d' >"$work/walkthrough.sh"
[ -s "$work/walkthrough.sh" ] || { echo "no walkthrough block found in README.md" >&2; exit 1; }
(cd "$work" && bash -euo pipefail walkthrough.sh)
echo "walkthrough: all steps passed"
