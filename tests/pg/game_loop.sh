#!/bin/sh
# game_loop.sh: examples/game_loop.c ticking an engine whose store is PostgreSQL, in a schema
# of its own on the test cluster (MEND_TEST_PG: tests/pg/cluster.sh run), dropped after. What
# it checks is the example's own: every quest ends as it should (succeeded, or compensated for
# a full inventory), with its events, asynchronous host calls and retries, in ticks; and that
# the ticks do not wait on the server: a run's take of its event comes from a read the tick
# before sent (README, "Three ways to drive an engine"), so at most one tick in 20 may have
# blocked (the first logs in; one that waited for every take was nearly all of them). The
# ticks' times are printed, not judged (--no-strict): under load the OS preempts them.
#
#   game_loop.sh EXAMPLE_BINARY QUEST_LUA [ARGS...]
set -eu
bin=${1:?example_game_loop}; quest=${2:?quest.lua}; shift 2
[ -n "${MEND_TEST_PG:-}" ] || { echo "game_loop.sh: MEND_TEST_PG is not set" >&2; exit 77; }
schema="mend_game_$$"
psql -X -q -v ON_ERROR_STOP=1 "$MEND_TEST_PG" -c "CREATE SCHEMA $schema"
trap 'psql -X -q "$MEND_TEST_PG" -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true' EXIT
case "$MEND_TEST_PG" in *\?*) sep='&' ;; *) sep='?' ;; esac
out=$("$bin" "$quest" 400 "$MEND_TEST_PG${sep}options=-csearch_path%3D$schema" --no-strict "$@")
printf '%s\n' "$out"
frames=$(printf '%s\n' "$out" | sed -n 's/.* \([0-9]*\) frames in .*/\1/p')
waited=$(printf '%s\n' "$out" |
         sed -n 's/.*ticks that waited (a voluntary switch): \([0-9]*\).*/\1/p')
if [ -z "$frames" ] || [ -z "$waited" ]; then
  echo "game_loop.sh: no tick figures in the output" >&2
  exit 1
fi
if [ $((waited * 20)) -gt "$frames" ]; then
  echo "game_loop.sh: $waited ticks of $frames waited (a voluntary switch):" \
       "a tick waited on the server" >&2
  exit 1
fi
