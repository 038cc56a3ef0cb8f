#!/bin/sh
# Runs the test suite on throwaway PostgreSQL servers only (as on a machine without a running
# PostgreSQL), then checks that every server the run started is gone with its directory.
# Usage: scripts/ci/check-throwaway-pg.sh [cargo test arguments...]
set -eu
cd "$(dirname "$0")/../.."
tmp=${TMPDIR:-/tmp}
before=$(ls -d "$tmp"/dirichlet-pg-* 2>/dev/null | sort || true)

unset DIRICHLET_TEST_POSTGRES_URL
status=0
DIRICHLET_TEST_FORCE_THROWAWAY_PG=1 cargo test "$@" || status=$?

# The watchdogs poll once a second and give a server up to ten seconds to stop.
leftover=""
for _ in $(seq 1 30); do
    after=$(ls -d "$tmp"/dirichlet-pg-* 2>/dev/null | sort || true)
    leftover=$(printf '%s\n' "$after" | grep -vxF -e "$before" -e '' || true)
    [ -z "$leftover" ] && break
    sleep 1
done
if [ -n "$leftover" ]; then
    echo "check-throwaway-pg: throwaway server directories were not removed:" >&2
    printf '%s\n' "$leftover" >&2
    exit 1
fi
echo "check-throwaway-pg: every throwaway server was removed."
exit "$status"
