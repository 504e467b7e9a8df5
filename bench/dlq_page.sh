#!/bin/sh
# bench/dlq_page.sh [N] [BUILD_DIR]: a page of the dead-letter queue (eng:dlq{limit = 50}, the
# store read behind `mend dlq` and GET /api/v1/dlq) with N parked runs in it (100,000 by
# default): the first page, and one from a cursor halfway down, each the median of 21 reads
# in wall-clock ms, on a new SQLite file made by that build. Run it with the build before a
# change and the one after (BUILD_DIR: build-bench by default, or BENCH_BUILD_DIR); the queue's
# rows are written straight into the table (the page reads nothing else).
# MEND_DB=postgres://...: on that PostgreSQL database instead (an empty one: a new database each
# build, as the one before refuses the schema of the one after).
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-100000}
build=${2:-${BENCH_BUILD_DIR:-build-bench}}
case "$build" in /*) ;; *) build="$here/$build" ;; esac
export LUA_PATH="$here/lua/?.lua;$here/lua/?/init.lua;;" LUA_CPATH="$build/lib/?.so;;"
dir=$(mktemp -d -p "${BENCH_TMP:-/var/tmp}" mend-dlqpage.XXXXXX)
trap 'rm -rf "$dir"' EXIT
lua5.4 "$here/bench/dlq_page.lua" "${MEND_DB:-$dir/dlq.db}" "$n"
