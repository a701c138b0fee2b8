#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on loopback and print its SQLAlchemy URL on stdout.
#
# Why: the history must work on any SQLAlchemy URL, so the db tests also run against PostgreSQL
# when FARM_TEST_DB_URL is set:  export FARM_TEST_DB_URL="$(.ci/start-postgres.sh)"
# Tolerant: installs Debian's postgresql only when no server binaries exist, reuses a server
# already answering on the port, and never touches the system cluster.
# Env: FARM_PG_PORT (55432), FARM_PG_DIR (/tmp/farm-pg-$PORT), FARM_PG_DB (farm_test).
set -euo pipefail

port="${FARM_PG_PORT:-55432}"
dir="${FARM_PG_DIR:-/tmp/farm-pg-$port}"
dbname="${FARM_PG_DB:-farm_test}"
url="postgresql+psycopg://farm@127.0.0.1:$port/$dbname"

log() { echo "start-postgres: $*" >&2; }

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

if [ -z "$(bindir)" ]; then
    log "installing postgresql with apt"
    export DEBIAN_FRONTEND=noninteractive
    sudo_="" ; [ "$(id -u)" -ne 0 ] && sudo_="sudo"
    $sudo_ apt-get update -qq >&2
    $sudo_ apt-get install -y -qq postgresql >&2
fi
bin="$(bindir)"
[ -n "$bin" ] || { log "no PostgreSQL server binaries after install"; exit 3; }

# The server refuses to run as root: run it as the postgres user when we are root.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

ready() { "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; }

if ! ready; then
    if [ ! -s "$dir/PG_VERSION" ]; then
        log "initdb in $dir"
        mkdir -p "$dir"
        [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
        as_owner "$bin/initdb" -D "$dir" -U farm --auth=trust -E UTF8 --no-locale >/dev/null
    fi
    log "starting on 127.0.0.1:$port"
    as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off" \
        start >/dev/null || { tail -n 20 "$dir/server.log" >&2; exit 3; }
fi
for _ in $(seq 1 50); do ready && break; sleep 0.2; done
ready || { log "server on port $port does not answer"; exit 3; }

if ! "$bin/psql" -h 127.0.0.1 -p "$port" -U farm -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname='$dbname'" | grep -q 1; then
    "$bin/createdb" -h 127.0.0.1 -p "$port" -U farm "$dbname"
fi
echo "$url"
