#!/bin/sh
# bench/profile.sh WORKLOAD N DURABILITY [extra run.lua options]: a perf profile of one workload
# (cpu-clock sampling with DWARF call graphs: this VM has no hardware counters), then the
# functions by inclusive time. Needs perf; builds nothing (run `make bench-build` first).
#   bench/profile.sh W1 10000 full
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BENCH_BUILD_DIR:-build-bench}
out=${PERF_OUT:-/tmp/mend-bench-perf.data}
dir=$(mktemp -d -p "${BENCH_TMP:-/var/tmp}" mend-prof.XXXXXX)
w=$1 n=$2 d=$3
shift 3
LUA_PATH="$here/lua/?.lua;$here/lua/?/init.lua;;" LUA_CPATH="$here/$build/lib/?.so;;" \
  perf record -e cpu-clock -F 1000 --call-graph dwarf,16384 -o "$out" -- \
  lua5.4 "$here/bench/run.lua" --one "$w" --n "$n" --durability "$d" --dir "$dir" "$@"
rm -rf "$dir"
echo "== by shared object (self)"
perf report -i "$out" --comm lua5.4 --no-children --sort dso 2>/dev/null | grep '%' | grep -v '^#' | head -8
echo "== functions by inclusive time (children)"
perf report -i "$out" --comm lua5.4 --children --sort symbol -g none --percent-limit 2 2>/dev/null \
  | grep '%' | grep -v '^#' | grep -v ' 0x0000' | head -60
