#!/usr/bin/env bash
# The console's end-to-end test in a real headless Chromium (tests/console/console.test.mjs).
# Installs what is missing (Debian's chromium and nodejs/npm, then playwright-core from
# tests/console/package-lock.json), starts the server on a free port with a fresh database and
# runs the scenario. Screenshots are written to target/console-artifacts/<backend>/.
#
#   scripts/ci/console-test.sh              (a temporary SQLite file)
#   scripts/ci/console-test.sh postgres     (a fresh database on DIRICHLET_TEST_POSTGRES_URL's server)
#   BIN=target/release/dirichlet-release scripts/ci/console-test.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

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

# shellcheck source=scripts/ops/serve.sh
source scripts/ops/serve.sh
case "$backend" in
  sqlite|postgres) ;;
  *) echo "usage: $0 [sqlite|postgres]" >&2; exit 2 ;;
esac
serve "$backend" "${BIN:-target/debug/dirichlet-release}"
export OUT="$PWD/target/console-artifacts/$backend"
export CHROMIUM=${CHROMIUM:-$(command -v chromium)}
grep -q "Console: $BASE/console" "$SERVER_LOG" || { cat "$SERVER_LOG"; echo "the server did not print the console address" >&2; exit 1; }

echo "console test on $backend ($BASE)"
(cd tests/console && node console.test.mjs)
if grep -qF "$ADMIN" "$SERVER_LOG"; then echo "the admin token reached the server log" >&2; exit 1; fi
if grep -q 'dra_' "$SERVER_LOG"; then echo "an analyst token reached the server log" >&2; exit 1; fi
