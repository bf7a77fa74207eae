#!/bin/sh
# The official image's first start, reduced to what compose.yaml uses: a cluster made once
# with POSTGRES_USER as its superuser (password POSTGRES_PASSWORD) and database POSTGRES_DB,
# password authentication from anywhere, then the server in the foreground.
set -eu
user="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$user}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" > /tmp/pwfile
    initdb --username="$user" --pwfile=/tmp/pwfile --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --no-sync >/dev/null
    rm -f /tmp/pwfile
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$database" != postgres ]; then
        postgres --single -D "$PGDATA" -j postgres <<SQL >/dev/null
CREATE DATABASE "$database" OWNER "$user";
SQL
    fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/run/postgresql "$@"
