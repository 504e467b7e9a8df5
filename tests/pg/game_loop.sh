#!/bin/sh
# game_loop.sh: examples/game_loop.c ticking an engine whose store is PostgreSQL, in a schema
# of its own on the test cluster (MEND_TEST_PG: tests/pg/cluster.sh run), dropped after. What
# it checks is the example's own: every quest ends as it should (succeeded, or compensated for
# a full inventory), with its events, asynchronous host calls and retries, in ticks. The
# ticks' times are printed, not judged (--no-strict): on PostgreSQL a signal to a run and a
# run's take of its event are round trips inside the frame (README, "Three ways to drive an
# engine").
#
#   game_loop.sh EXAMPLE_BINARY QUEST_LUA [ARGS...]
set -eu
bin=${1:?example_game_loop}; quest=${2:?quest.lua}; shift 2
[ -n "${MEND_TEST_PG:-}" ] || { echo "game_loop.sh: MEND_TEST_PG is not set" >&2; exit 77; }
schema="mend_game_$$"
psql -X -q -v ON_ERROR_STOP=1 "$MEND_TEST_PG" -c "CREATE SCHEMA $schema"
trap 'psql -X -q "$MEND_TEST_PG" -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1 || true' EXIT
case "$MEND_TEST_PG" in *\?*) sep='&' ;; *) sep='?' ;; esac
"$bin" "$quest" 400 "$MEND_TEST_PG${sep}options=-csearch_path%3D$schema" --no-strict "$@"
