#!/bin/sh
# bench/http_cost.sh [C [N]]: W9's cost in instructions, which the machine's load does not move:
# callgrind over 1,000 and 3,000 runs of bench/http_cost.lua against one nginx on loopback
# (W9's configuration), and over as many requests of bench/http_raw.c; the difference over
# the 2,000 extra is what one run (one request) costs, by thread, without start-up and the
# first connections (each thread apart, named by what it runs); and the allocator calls a run
# of the loop thread and a request of raw's, by who makes them (bench/http_allocs.py). Each
# side is measured N times (default 3, each on a database of its own) and its figures given as
# min/median/max: one measure's moves by some 2.6k instructions a run (libcurl's allocations
# follow its connections), more than most cuts; the allocator calls are the first measure's.
# Needs valgrind and nginx; builds http_raw, not the module (run
# `make bench-build` first). MEND_COST_OWN=1: the same on an engine with a Lua state of its own.
# MEND_COST_KEEP=DIR: the callgrind profiles copied into DIR, for callgrind_annotate.
# MEND_COST_LUA_SYMBOLS=1: the mend half under bench/lua_host.c (Debian's static liblua5.4.a,
# symbols kept) rather than the stripped lua5.4, so that Lua's own functions have their names
# in the profiles; the totals differ from lua5.4's by a percent or two (another build of Lua).
set -e
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BENCH_BUILD_DIR:-build-bench}
c=${1:-64}
reps=${2:-3}
dir=$(mktemp -d -p "${BENCH_TMP:-/var/tmp}" mend-httpcost.XXXXXX)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 60s;
  client_body_temp_path $dir/body;
  server {
    listen 127.0.0.1:$port;
    location / { default_type application/json; return 200 '{"ok":true}'; }
  }
}
CONF
nginx -p "$dir" -c "$dir/nginx.conf"
trap 'kill $(cat "$dir/nginx.pid") 2>/dev/null; rm -rf "$dir"' EXIT
# a shell killed by a signal runs no EXIT trap: piped into head, the script left nginx running
trap 'exit 1' INT TERM HUP PIPE
sleep 0.3
url="http://127.0.0.1:$port/echo"
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -o "$dir/http_raw" "$here/bench/http_raw.c" -lcurl
lua=lua5.4
if [ "${MEND_COST_LUA_SYMBOLS:-0}" = 1 ]; then
  lua="$dir/lua_host"
  cc -O2 -g $(pkg-config --cflags lua5.4) -o "$lua" "$here/bench/lua_host.c" -Wl,-E \
    "$(pkg-config --variable=libdir lua5.4)/liblua5.4.a" -lm -ldl
fi
total() { grep -h '^totals:\|^summary:' "$1" | head -1 | awk '{print $2}'; }
# What run()'s looks at the store cost a thread (look_from_run, twice a second, for cancels
# and events other processes sent, and mend__events_start, its first look at the inbox; both
# inclusive): a look is a read, so it runs the open batch's records on the loop thread first
# (a sync point), records the writer thread would run otherwise. How many looks fall in a
# measure follows how long it takes (callgrind's slowness), not the runs, and a look reads
# more the more runs the database holds: the loop's figure without them is the one to compare.
looks() { callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | awk '
  NF > 1 { n = $NF ~ /\]$/ ? $(NF-1) : $NF; sub(/^.*:/, "", n)
           if (n == "look_from_run" || n == "mend__events_start") {
             gsub(",", "", $1); v = $1 + 0; if (v > m[n]) m[n] = v } }
  END { print m["look_from_run"] + m["mend__events_start"] }'; }
r=1
while [ $r -le "$reps" ]; do
  for n in 1000 3000; do
    MEND_COST_URL="$url" MEND_COST_C="$c" \
    LUA_PATH="$here/lua/?.lua;$here/lua/?/init.lua;;" LUA_CPATH="$here/$build/lib/?.so;;" \
      valgrind -q --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/mend.$r.$n" \
      "$lua" "$here/bench/http_cost.lua" "$url" $n "$c" "$dir/w9.$r.db"
    valgrind -q --tool=callgrind --callgrind-out-file="$dir/raw.$r.$n" "$dir/http_raw" "$url" $n \
      "$c" >/dev/null
  done
  r=$((r + 1))
done
# min/median/max of the numbers given
spread() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 }
  END { printf "%d/%d/%d", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
# Threads by what they run: the loop (the first), the store's writer, any other (a resolver's,
# a checkpoint's) by number; a thread started during the runs may get another number in each
# run, so each is matched with its namesake.
label() {
  case "$1" in *-01) echo "loop thread"; return;; esac
  if grep -q "handoff_main" "$1"; then echo "writer thread"
  else echo "thread ${1##*-}"; fi
}
# Every thread any measure saw, by name: one missing from a measure (of 1,000 runs or of 3,000)
# has no difference there, and is said to be missing rather than counted as 0.
names=$(for f in "$dir"/mend.*.*-*; do label "$f"; done | sort -u)
echo "$names" | while IFS= read -r name; do
  all= bare= missing=0
  r=1
  while [ $r -le "$reps" ]; do
    a= b=
    for f in "$dir"/mend.$r.1000-*; do [ "$(label "$f")" = "$name" ] && a=$f; done
    for f in "$dir"/mend.$r.3000-*; do [ "$(label "$f")" = "$name" ] && b=$f; done
    if [ -n "$a" ] && [ -n "$b" ]; then
      ta=$(total "$a"); tb=$(total "$b")
      all="$all $(( (tb - ta) / 2000 ))"
      bare="$bare $(( (tb - ta - $(looks "$b") + $(looks "$a")) / 2000 ))"
    else
      missing=$((missing + 1))
    fi
    r=$((r + 1))
  done
  n=$(echo $all | wc -w)
  if [ "$n" -eq 0 ]; then
    echo "mend $name: not measured (missing from a side of each of the $reps measures)"
    continue
  fi
  echo "mend $name: $(spread $all) instructions per run, min/median/max of $n" \
       "($(spread $bare) without run()'s looks at the store)"
  if [ "$missing" -gt 0 ]; then
    echo "  ($name was missing from a side of $missing of the $reps measures: not counted)"
  fi
done
# Lua's collector, inclusive (named only under lua_host): its steps are charged to whichever
# call allocates when its debt falls due, most often the ctx table's lua_createtable.
gc() { callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | awk '
  NF > 1 && $0 ~ /:luaC_step[ ]/ { gsub(",", "", $1); v = $1 + 0; if (v > m) m = v }
  END { print m + 0 }'; }
if [ "$lua" != lua5.4 ]; then
  all=
  r=1
  while [ $r -le "$reps" ]; do
    all="$all $(( ($(gc "$dir/mend.$r.3000-01") - $(gc "$dir/mend.$r.1000-01")) / 2000 ))"
    r=$((r + 1))
  done
  echo "of the loop thread's: Lua's collector (luaC_step): $(spread $all) instructions per run"
fi
all=
r=1
while [ $r -le "$reps" ]; do
  all="$all $(( ($(total "$dir/raw.$r.3000") - $(total "$dir/raw.$r.1000")) / 2000 ))"
  r=$((r + 1))
done
echo "raw libcurl: $(spread $all) instructions per request, min/median/max of $reps"
echo "allocator calls a run, loop thread, by the caller's object (the first measure):"
python3 "$here/bench/http_allocs.py" "$dir/mend.1.1000-01" "$dir/mend.1.3000-01" 2000
echo "allocator calls a request, raw libcurl (the first measure):"
python3 "$here/bench/http_allocs.py" "$dir/raw.1.1000" "$dir/raw.1.3000" 2000
if [ -n "${MEND_COST_KEEP:-}" ]; then
  mkdir -p "$MEND_COST_KEEP" && cp "$dir"/mend.* "$dir"/raw.* "$MEND_COST_KEEP"/
fi
