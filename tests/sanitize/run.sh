#!/bin/sh
# Builds what the hostile corpus and the cheap C unit tests need with AddressSanitizer and
# UBSan, in a directory of its own, and runs them there (issue 16), and mend serve's stop and
# long polls under LeakSanitizer (serve_close.sh, serve_wait.sh): `make test` runs this as the
# ctest `c_sanitized`, so that a plain build's CI also catches what only the sanitizers see.
#
#   sh tests/sanitize/run.sh [build|test] SOURCE_DIR BUILD_DIR [JOBS]
#
# `build` only builds, `test` only runs what a `build` made; neither: both. ctest runs the two
# as c_sanitized_build and c_sanitized, each beside a spec shard (the tests run one at a time:
# alone they would leave the second core idle for minutes).
# CMAKE (cmake) may be set. Exits 1 at the first test that fails (sanitizer reports end a test:
# the build has -fno-sanitize-recover=all), printing its output.
set -u
phase=all
case $1 in build|test) phase=$1; shift ;; esac
src=$1
dir=$2
jobs=${3:-2}
cmake=${CMAKE:-cmake}
tests="json backoff breaker transition idset numtext flatjson utf8 parkset timers panic cpus
  host_answers keys_twice closed_fds hold_status tick_account tick_account_edges lock_answers
  kept_start run_keys key_reuse walvfs print_pipe adopt_race crash_loop blocks blocks_sizes
  threads threads_peak csp csp_hostile csp_foreign texts texts_hostile log"
# Every embedding program (tests/test_embed_*.c) and every SQLite store program
# (tests/test_store_*.c), found by the patterns as CMakeLists.txt finds them
for f in "$src"/tests/test_embed_*.c "$src"/tests/test_store_*.c; do
  tests="$tests $(basename "$f" .c | sed 's/^test_//')"
done
# Not here: the PostgreSQL programs (test_pg_*: they need the tests' cluster, which this build
# does not start), c_panic_attempt_state (valgrind, which excludes a sanitizer) and the examples
# (game_loop's frame times mean nothing 2-5 times slower).

if [ "$phase" != test ]; then
  start=$(date +%s)
  "$cmake" -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEND_SANITIZE=ON \
    -DMEND_WERROR=ON -DMEND_TESTS=ON >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; exit 1; }
  targets="test_hostile test_unload acceptance_capi mend test_blocks_poison"
  for t in $tests; do targets="$targets test_$t"; done
  # shellcheck disable=SC2086
  "$cmake" --build "$dir" --target $targets -j "$jobs" >"$dir.build.log" 2>&1 \
    || { tail -50 "$dir.build.log"; exit 1; }
  echo "sanitized: built in $(($(date +%s) - start)) s"
  [ "$phase" = build ] && exit 0
fi
built=$(date +%s)

# Lua's own allocations go through ASan's malloc too: its leak report would name the state
# a test leaves to the end of the process on purpose; leaks are valgrind's (embed_valgrind).
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export MEND_LUA_DIR="$src/lua"
for t in $tests; do
  if ! (cd "$dir" && "./test_$t") >"$dir.test_$t.log" 2>&1; then
    echo "sanitized: test_$t failed:"; cat "$dir.test_$t.log"; exit 1
  fi
done
# the outside tester's host, from mend.h alone
if ! (cd "$dir" && ./acceptance_capi) >"$dir.acceptance_capi.log" 2>&1; then
  echo "sanitized: acceptance_capi failed:"; cat "$dir.acceptance_capi.log"; exit 1
fi
# a host that unloads the (sanitized) module with its Lua state and lives on
if ! (cd "$dir" && ./test_unload "$dir/lib/?.so" "$src/lua/?.lua;$src/lua/?/init.lua") \
    >"$dir.test_unload.log" 2>&1; then
  echo "sanitized: test_unload failed:"; cat "$dir.test_unload.log"; exit 1
fi
# a use after free of a block the size classes keep (src/blocks.c) is reported: this one must
# die with the report
# (the report must follow the read of the kept block, not an earlier write of the test's own)
rc=0
(cd "$dir" && ./test_blocks_poison) >"$dir.test_blocks_poison.log" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] || ! grep -A3 "reading a kept block" "$dir.test_blocks_poison.log" \
    | grep -q "use-after-poison"; then
  echo "sanitized: test_blocks_poison's use after free not reported:"
  cat "$dir.test_blocks_poison.log"; exit 1
fi
if ! (cd "$dir" && ./test_hostile "$src/tests/hostile") >"$dir.test_hostile.log" 2>&1; then
  echo "sanitized: test_hostile failed:"; grep -v ' ms$' "$dir.test_hostile.log"; exit 1
fi
# mend serve stopping under clients h2o holds: leak-checked, the one process here that is
if ! sh "$src/tests/sanitize/serve_close.sh" "$dir/mend" "$src" >"$dir.serve_close.log" 2>&1; then
  cat "$dir.serve_close.log"; exit 1
fi
# its long polls: a waiter let go, timed out, answered and held at the stop, leak-checked too
if ! sh "$src/tests/sanitize/serve_wait.sh" "$dir/mend" "$src" >"$dir.serve_wait.log" 2>&1; then
  cat "$dir.serve_wait.log"; exit 1
fi
echo "sanitized: tests passed in $(($(date +%s) - built)) s"
