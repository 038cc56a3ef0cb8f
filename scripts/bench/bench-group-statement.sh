#!/usr/bin/env bash
# The group commit statement alone, in PostgreSQL, without the service: pgbench runs the
# statement of src/store/postgres/group.rs (`COMMIT_GROUP`, and the same without its population
# steps, as `standalone` cuts them; the binary prints both: `dirichlet-release group-statement
# full|standalone`) with groups of N members drawn over 64 datasets, keyless and
# keyed, on 2 connections (the database side of a replica's commit slots under load). Members per
# second is tps × N. What the statement costs per group and per member, apart from HTTP, the
# sampler and the load generator: change the statement, run this before and after.
#
#   scripts/bench/bench-group-statement.sh            N = 4, 16 and 64; 8 s per variant
#
# Environment: SIZES ("4 16 64"), SECONDS_EACH (8), CLIENTS (2), VARIANTS ("full full_keyed
# standalone standalone_keyed"), BIN (the service binary that applies the migrations, default
# $CARGO_TARGET_DIR/release/dirichlet-release, built if missing), DIRICHLET_TEST_POSTGRES_URL
# (admin URL, default postgres://postgres@127.0.0.1:5432/postgres).
#
# The members are made in SQL (`input` is replaced by a SELECT over generate_series; the keyed
# variants draw a fresh key and fingerprint per member there, a few per cent of their time), and
# the rest of the statement is the service's, byte for byte.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZES=${SIZES:-4 16 64}
SECONDS_EACH=${SECONDS_EACH:-8}
CLIENTS=${CLIENTS:-2}
VARIANTS=${VARIANTS:-full full_keyed standalone standalone_keyed}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/dirichlet-release}
for tool in pgbench psql curl python3; do
  command -v "$tool" >/dev/null || { echo "bench-group-statement: $tool is required" >&2; exit 1; }
done
[ -x "$BIN" ] || cargo build --release --quiet --bin dirichlet-release
# The schema: the service's own migrations, applied by starting it once on a fresh database
# (serve.sh drops it on exit).
# shellcheck source=scripts/ops/serve.sh
. scripts/ops/serve.sh
serve postgres "$BIN"
stop_server "$SERVER_PID"; SERVER_PID=
db_url=$SERVE_DATABASE_URL
work=$serve_work
# 64 datasets no run can exhaust, an analyst token scoped to each (its spend row is locked and
# written by every release, as in the service).
psql "$db_url" -q <<'SQL'
INSERT INTO datasets (id, name, budget_order, total_units, l2_squared, linf, neighbouring, created_by)
SELECT ('00000000-0000-4000-8000-' || lpad(i::text, 12, '0'))::uuid, 'bench ' || i, 2,
       9007199254740992, 2, 1, 'replace_one', 'bench'
  FROM generate_series(1, 64) AS i;
CREATE TABLE bench_ids AS SELECT array_agg(id ORDER BY id) AS ids FROM datasets;
INSERT INTO tokens (id, secret_hash, role, created_at) VALUES ('bench', sha256('bench'), 'analyst', now());
INSERT INTO token_datasets (token_id, dataset_id) SELECT 'bench', id FROM datasets;
VACUUM ANALYZE;
SQL

# One pgbench script per variant and size: the statement as the service sends it (printed by
# the binary's hidden `group-statement` subcommand, the population steps cut for `standalone`
# by the service's own code), with its array parameters replaced by members made in SQL.
for variant in full standalone; do
  "$BIN" group-statement "$variant" >"$work/statement-$variant.sql"
done
python3 - "$work" "$SIZES" <<'PY'
import pathlib, re, sys
work, sizes = pathlib.Path(sys.argv[1]), sys.argv[2].split()

def members(n, keyed):
    key = "'bench-' || gen_random_uuid()" if keyed else "NULL::text"
    fingerprint = "sha256(gen_random_uuid()::text::bytea)" if keyed else "NULL::bytea"
    return f"""input AS MATERIALIZED (
    SELECT (SELECT ids FROM bench_ids)[1 + floor(random() * 64)::int] AS dataset_id,
           10995116278::int8 AS cost, gen_random_uuid() AS release_id, 'bench'::text AS created_by,
           '{{"kind": "dirichlet"}}'::text AS mechanism, decode(repeat('ab', 128), 'hex') AS distribution,
           16::int8 AS dimension, NULL::int8 AS table_rows, NULL::text AS label,
           decode(repeat('01', 40), 'hex') AS link_prefix, decode(repeat('02', 60), 'hex') AS link_suffix,
           NULL::text AS row_names, {key} AS idempotency_key, {fingerprint} AS fingerprint,
           NULL::text AS block_period, NULL::int8 AS block_first, NULL::int8 AS block_last,
           NULL::text AS block_from, NULL::text AS block_to, g::int8 AS ord
      FROM generate_series(1, {n}) AS g
), tokens"""

for name in ("full", "standalone"):
    sql = (work / f"statement-{name}.sql").read_text().rstrip()
    for keyed in (False, True):
        for n in sizes:
            text = re.sub(r"input AS MATERIALIZED \(.*?\n\), tokens", lambda _: members(int(n), keyed),
                          sql, count=1, flags=re.S).replace("$13", "9007199254740992")
            assert "$" not in text, f"{name}: a parameter is left"
            (work / f"{name}{'_keyed' if keyed else ''}-{n}.sql").write_text(text + ";\n")
PY

printf 'variant\tmembers\tstatements/s\tmembers/s\tload1\n'
for n in $SIZES; do
  for variant in $VARIANTS; do
    out=$(pgbench -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_EACH" \
      -f "$work/$variant-$n.sql" "$db_url" 2>&1) || { echo "$out" >&2; exit 1; }
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
    printf '%s\t%s\t%.0f\t%.0f\t%s\n' "$variant" "$n" "$tps" "$(python3 -c "print($tps * $n)")" \
      "$(cut -d' ' -f1 /proc/loadavg)"
  done
done
