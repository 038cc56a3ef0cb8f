#!/usr/bin/env bash
# The long reliability runs (tests/it/reliability.rs, the #[ignore]d ones) and the storage-failure
# tests (tests/it/sqlite_failures.rs), with the real binary:
#   - replicas racing: REPLICAS server processes on one PostgreSQL database, RELEASES release
#     requests from CLIENTS concurrent clients against datasets whose budgets admit exactly K of
#     them each (the first, hot, dataset gets half the requests);
#   - crash: the same load while replicas are killed with SIGKILL and restarted;
#   - outage: a throwaway PostgreSQL server stopped for OUTAGE_SECS under load, then started;
#   - frozen: the same with the server's processes stopped by SIGSTOP;
#   - SQLite on a full disk (tmpfs) and on a read-only bind mount (needs root; required here).
# Each run prints `RELIABILITY {json}` figures; they are also collected in $DIRICHLET_REL_REPORT
# (default target/reliability/report-<time>.jsonl).
#
# Usage: scripts/ci/reliability.sh [full|ci]
#   full (default): 10,000 releases, 64 clients, 3 replicas, 10 s outages (several minutes);
#   ci: 3,000 releases, 64 clients, 3 replicas, 3 s outages (a couple of minutes).
# Every size can be overridden: DIRICHLET_REL_RELEASES, _CLIENTS, _REPLICAS, _KS (comma list, hot
# first), _HOT_SHARE (percent), _TWIN_EVERY, _KILL_AT (percent list), _DOWN_MS, _OUTAGE_SECS,
# _MAX_SECS (time bound of a load).
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-full}

set_default() { # name value
  if [ -z "${!1:-}" ]; then export "$1=$2"; fi
}
case "$mode" in
  full)
    set_default DIRICHLET_REL_RELEASES 10000
    set_default DIRICHLET_REL_CLIENTS 64
    set_default DIRICHLET_REL_REPLICAS 3
    set_default DIRICHLET_REL_OUTAGE_SECS 10
    ;;
  ci)
    set_default DIRICHLET_REL_RELEASES 3000
    set_default DIRICHLET_REL_CLIENTS 64
    set_default DIRICHLET_REL_REPLICAS 3
    set_default DIRICHLET_REL_KS 600,1,10,50,200
    set_default DIRICHLET_REL_KILL_AT 25,50,75
    set_default DIRICHLET_REL_DOWN_MS 500
    set_default DIRICHLET_REL_OUTAGE_SECS 3
    set_default DIRICHLET_REL_MAX_SECS 300
    ;;
  *) echo "usage: $0 [full|ci]" >&2; exit 2 ;;
esac
# The storage-failure tests need mount; as root they must run, not excuse themselves.
if [ "$(id -u)" = 0 ]; then export DIRICHLET_TEST_REQUIRE_MOUNT=1; fi

mkdir -p target/reliability
set_default DIRICHLET_REL_REPORT "$PWD/target/reliability/report-$(date +%Y%m%d-%H%M%S).jsonl"
echo "reliability ($mode): releases=$DIRICHLET_REL_RELEASES clients=$DIRICHLET_REL_CLIENTS" \
  "replicas=$DIRICHLET_REL_REPLICAS outage=${DIRICHLET_REL_OUTAGE_SECS}s; figures: $DIRICHLET_REL_REPORT"

started=$(date +%s)
# One scenario at a time (they also serialise themselves), with their output.
cargo test --test it reliability:: -- --ignored --nocapture --test-threads=1
cargo test --test it sqlite_failures:: -- --nocapture --test-threads=1
echo "reliability ($mode): passed in $(($(date +%s) - started)) s; figures in $DIRICHLET_REL_REPORT"
