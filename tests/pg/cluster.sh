#!/bin/sh
# cluster.sh: a throw-away PostgreSQL cluster for the tests, from Debian's packages (postgresql,
# postgresql-common). It owns the cluster's life: a data directory made with mktemp, initdb and
# pg_ctl run as the `postgres` user when run as root (PostgreSQL refuses to run as root),
# fsync on (a durability test against a cluster that does not flush proves nothing), a free
# port on 127.0.0.1, and a role `mend` that logs in over TCP with a password (scram-sha-256),
# so that a wrong password can be tested; each login a line of the server's log (server.log beside
# the data directory: log_connections), so that a spec can count a command's. It must
# never touch a cluster it did not start: it only acts on the one whose data directory its
# state directory names.
#
#   cluster.sh start STATE     start a cluster; STATE (a directory) keeps what the others need
#   cluster.sh stop STATE      stop it and remove its data directory (nothing to stop: exit 0)
#   cluster.sh uri STATE       print the URI of the mend role's database `mend`
#   cluster.sh restart STATE   stop the server (fast: sessions ended) and start it again
#   cluster.sh down STATE      stop the server at once (immediate: no goodbye to clients)
#   cluster.sh up STATE        start it again after down, on the same port
#   cluster.sh kill9 STATE     kill the postmaster with SIGKILL, as a crash would, and start it
#                              again on the same data (the server does crash recovery)
#   cluster.sh run STATE CMD…  run CMD with MEND_TEST_PG set to that URI and MEND_TEST_PG_STATE
#                              to STATE (exit 77 if no cluster)
#
# The mend role may create databases and, in its database `mend`, schemas: the specs make a
# fresh schema for each test (spec/helper.lua).
set -eu

cmd=${1:-}
state=${2:-}
[ -n "$cmd" ] && [ -n "$state" ] || {
  echo "usage: cluster.sh start|stop|uri|restart|kill9|run STATE [CMD...]" >&2
  exit 2
}

bindir() {
  for v in 15 16 17 14 13; do
    if [ -x "/usr/lib/postgresql/$v/bin/initdb" ]; then
      echo "/usr/lib/postgresql/$v/bin"
      return 0
    fi
  done
  echo "cluster.sh: no PostgreSQL server found in /usr/lib/postgresql" \
       "(Debian package postgresql)" >&2
  return 1
}

# As the postgres user when we are root, else as ourselves.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

stop() {
  [ -f "$state/datadir" ] || return 0
  dir=$(cat "$state/datadir")
  if [ -f "$dir/data/postmaster.pid" ]; then
    as_pg "$(bindir)/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  case "$dir" in
    */mend-pg.*) rm -rf "$dir" ;;
  esac
  rm -f "$state/datadir" "$state/uri" "$state/port"
}

start() {
  mkdir -p "$state"
  stop
  bin=$(bindir)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/mend-pg.XXXXXX")
  echo "$dir" > "$state/datadir"
  chmod 755 "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir"; fi
  # A password of the run's own: nothing to leak, and the URI file is readable by us only.
  pw=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  printf '%s\n' "$pw" > "$dir/pw.tmp"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$dir/pw.tmp"; fi
  if ! as_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync -E UTF8 --locale=C \
       >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    echo "cluster.sh: initdb failed" >&2
    stop
    exit 1
  fi
  cat >> "$dir/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
shared_buffers = 64MB
password_encryption = 'scram-sha-256'
log_connections = on
EOF
  # The postgres superuser only over the socket in the data's own directory; everyone else
  # over TCP with a password.
  cat > "$dir/data/pg_hba.conf" <<EOF
local all postgres trust
host all all 127.0.0.1/32 scram-sha-256
EOF
  tries=0
  while :; do
    tries=$((tries + 1))
    port=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 40000 ))
    if as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "-p $port" -w -t 60 start \
         >/dev/null 2>&1; then
      break
    fi
    if [ $tries -ge 8 ]; then
      cat "$dir/server.log" >&2 || true
      echo "cluster.sh: the server did not start" >&2
      stop
      exit 1
    fi
  done
  echo "$port" > "$state/port"
  as_pg "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres \
    -c "CREATE ROLE mend LOGIN CREATEDB PASSWORD '$pw'" \
    -c "CREATE DATABASE mend OWNER mend" >/dev/null
  rm -f "$dir/pw.tmp"
  umask 077
  echo "postgresql://mend:$pw@127.0.0.1:$port/mend" > "$state/uri"
  echo "cluster.sh: PostgreSQL ($bin) on 127.0.0.1:$port, data in $dir"
}

# The same data and port: what a worker sees when the server it talks to restarts.
restart() {
  [ -f "$state/datadir" ] || { echo "cluster.sh: no cluster started in $state" >&2; exit 1; }
  dir=$(cat "$state/datadir")
  as_pg "$(bindir)/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "-p $(cat "$state/port")" \
    -m fast -w -t 60 restart >/dev/null
}

# The server gone (as a crash or a cut cable looks to a client: no goodbye), and back.
down() {
  [ -f "$state/datadir" ] || { echo "cluster.sh: no cluster started in $state" >&2; exit 1; }
  as_pg "$(bindir)/pg_ctl" -D "$(cat "$state/datadir")/data" -m immediate -w stop >/dev/null
}

up() {
  [ -f "$state/datadir" ] || { echo "cluster.sh: no cluster started in $state" >&2; exit 1; }
  dir=$(cat "$state/datadir")
  as_pg "$(bindir)/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "-p $(cat "$state/port")" \
    -w -t 60 start >/dev/null
}

# A crash: no shutdown checkpoint, sessions cut. The backends the postmaster leaves notice its
# death and exit, but while one still holds the shared memory a new postmaster refuses to start:
# starting is tried again for a while.
kill9() {
  [ -f "$state/datadir" ] || { echo "cluster.sh: no cluster started in $state" >&2; exit 1; }
  dir=$(cat "$state/datadir")
  pid=$(head -n 1 "$dir/data/postmaster.pid")
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  tries=0
  until as_pg "$(bindir)/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
          -o "-p $(cat "$state/port")" -w -t 60 start >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ $tries -ge 100 ]; then
      tail -n 20 "$dir/server.log" >&2
      echo "cluster.sh: the server did not start again after SIGKILL" >&2
      exit 1
    fi
    sleep 0.1
  done
}

case "$cmd" in
  start) start ;;
  restart) restart ;;
  down) down ;;
  up) up ;;
  kill9) kill9 ;;
  stop) stop ;;
  uri)
    [ -f "$state/uri" ] || { echo "cluster.sh: no cluster started in $state" >&2; exit 1; }
    cat "$state/uri" ;;
  run)
    shift 2
    [ -f "$state/uri" ] || { echo "cluster.sh: no cluster started in $state" >&2; exit 77; }
    MEND_TEST_PG=$(cat "$state/uri")
    MEND_TEST_PG_STATE=$state
    export MEND_TEST_PG MEND_TEST_PG_STATE
    exec "$@" ;;
  *) echo "cluster.sh: unknown command $cmd" >&2; exit 2 ;;
esac
