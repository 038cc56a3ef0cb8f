#!/usr/bin/env bash
# The worked examples (examples/naive_bayes.rs, examples/bayes_net.rs) against a running server
# on either backend, as a client would use them: scripts/ops/serve.sh starts the debug binary on a
# fresh SQLite file or PostgreSQL database, and each example fits its models over HTTP with
# `--url` and the admin token, checking that every model's ledger spent exactly its budget.
# (Without `--url` the examples start an in-process service on SQLite, which CI also runs.)
#
#   scripts/ci/examples.sh [sqlite|postgres] [example options, default --short]
set -euo pipefail
cd "$(dirname "$0")/../.."
backend=${1:-postgres}
shift || true
options=("$@")
[ ${#options[@]} -gt 0 ] || options=(--short)
# shellcheck source=scripts/ops/serve.sh
source scripts/ops/serve.sh
cargo build --quiet --bin dirichlet-release --example naive_bayes --example bayes_net
serve "$backend"
for example in naive_bayes bayes_net; do
  echo "=== $example on $backend ($BASE)"
  "target/debug/examples/$example" --url "$BASE" --admin-token "$ADMIN" "${options[@]}"
done
if grep -qF "$ADMIN" "$SERVER_LOG"; then echo "the admin token reached the server log" >&2; exit 1; fi
