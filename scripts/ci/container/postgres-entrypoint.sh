#!/bin/sh
# Entry point of the stand-in for the official postgres:15 image that scripts/ci/container-test.sh
# bootstraps from Debian's postgresql-15 package where no registry is reachable. It honours what
# compose.yaml uses of the official image: POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB on
# first start (an empty PGDATA), password authentication over TCP, data in
# /var/lib/postgresql/data, the server as user postgres, pg_isready on PATH. The first start
# creates the role and the database with the server listening on its socket only, as the
# official image does, so that nothing connects over TCP before they exist.
set -eu
PGDATA=${PGDATA:-/var/lib/postgresql/data}
export PGDATA
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown -R postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?the stand-in postgres image needs POSTGRES_PASSWORD}"
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl --wait --silent --options="-c listen_addresses=''" start
    if [ "$db" != postgres ]; then
        psql --quiet -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres \
            --command="CREATE DATABASE \"$db\""
    fi
    pg_ctl --wait --silent --mode=fast stop
    echo "postgres stand-in: initialised $PGDATA (user $user, database $db)"
fi
if [ "${1:-postgres}" = postgres ]; then
    [ $# -gt 0 ] && shift
    exec postgres -c listen_addresses='*' "$@"
fi
exec "$@"
