#!/bin/sh
# bench/w6_ready.sh [N] [TOOL...]: W6's time to ready as a count, not a time: a victim of
# bench/run.lua (N runs in flight, process durability) is killed with SIGKILL, then
# bench/w6_ready.lua recovers a copy of its database under TOOL, e.g.
#   sh bench/w6_ready.sh 10000 valgrind --tool=callgrind     (instructions)
#   sh bench/w6_ready.sh 10000 strace -f -c                  (system calls)
#   sh bench/w6_ready.sh 10000 /usr/bin/time -f '%U user %S sys'
# Uses the build of BENCH_BUILD_DIR (build-bench); run `make bench-build` first.
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BENCH_BUILD_DIR:-build-bench}
n=${1:-10000}
[ $# -gt 0 ] && shift
export LUA_PATH="$here/lua/?.lua;$here/lua/?/init.lua;;" LUA_CPATH="$here/$build/lib/?.so;;"
dir=$(mktemp -d -p "${BENCH_TMP:-/var/tmp}" mend-w6ready.XXXXXX)
trap 'rm -rf "$dir"' EXIT
lua5.4 "$here/bench/run.lua" --one W6victim --n "$n" --durability process \
  --db "$dir/victim.db" >/dev/null 2>&1 &
pid=$!
waited=0
while [ ! -f "$dir/victim.db.ready" ]; do
  sleep 0.05
  waited=$((waited + 1))
  [ "$waited" -lt 6000 ] || { echo "w6_ready: the victim never had all runs in flight" >&2; exit 1; }
done
sleep 0.3   # its last batch commits
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
mkdir "$dir/copy"
cp "$dir"/victim.db* "$dir/copy/"
"$@" lua5.4 "$here/bench/w6_ready.lua" "$dir/copy/victim.db"
