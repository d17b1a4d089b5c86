#!/usr/bin/env bash
# Start a throw-away PostgreSQL server for the coordinator's tests and print its admin URL: a cluster under
# ${VKBLAS_PG_DIR:-/tmp/vkblas-pg} on 127.0.0.1:${VKBLAS_PG_PORT:-55432}, trust authentication on loopback.
# Installs Debian's postgresql first when it is missing and we are root. Safe to run again (a running cluster is
# reused). Exits non-zero, saying why, when the server cannot be started.
set -euo pipefail
DIR=${VKBLAS_PG_DIR:-/tmp/vkblas-pg}
PORT=${VKBLAS_PG_PORT:-55432}
bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [ -z "$(bindir)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "postgres.sh: installing postgresql" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "postgres.sh: PostgreSQL is not installed (as root: apt-get install postgresql)" >&2
    exit 1
  fi
fi
BIN=$(bindir)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir -p "$DIR"
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
if [ ! -f "$DIR/data/PG_VERSION" ]; then
  as_pg "$BIN/initdb" -D "$DIR/data" -A trust -U postgres >"$DIR/initdb.log" 2>&1 \
    || { echo "postgres.sh: initdb failed:" >&2; cat "$DIR/initdb.log" >&2; exit 1; }
fi
if ! as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; then
  as_pg "$BIN/pg_ctl" -D "$DIR/data" -w -t 60 -l "$DIR/server.log" \
    -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off" start >/dev/null \
    || { echo "postgres.sh: the server did not start:" >&2; tail -20 "$DIR/server.log" >&2; exit 1; }
fi
echo "postgresql://postgres@127.0.0.1:$PORT/postgres"
