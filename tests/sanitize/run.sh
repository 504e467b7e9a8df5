#!/bin/sh
# Builds what the hostile corpus and the cheap C unit tests need with AddressSanitizer and
# UBSan, in a directory of its own, and runs them there (issue 16), and mend serve's stop and
# long polls under LeakSanitizer (serve_close.sh, serve_wait.sh): `make test` runs this as the
# ctest `c_sanitized`, so that a plain build's CI also catches what only the sanitizers see.
#
#   sh tests/sanitize/run.sh SOURCE_DIR BUILD_DIR [JOBS]
#
# CMAKE (cmake) may be set. Exits 1 at the first test that fails (sanitizer reports end a test:
# the build has -fno-sanitize-recover=all), printing its output.
set -u
src=$1
dir=$2
jobs=${3:-2}
cmake=${CMAKE:-cmake}
tests="json backoff breaker transition idset numtext flatjson utf8 parkset timers panic cpus host_answers keys_twice closed_fds hold_status tick_account lock_answers csp"
# Every embedding program (tests/test_embed_*.c), found by the pattern as CMakeLists.txt finds it
for f in "$src"/tests/test_embed_*.c; do tests="$tests $(basename "$f" .c | sed 's/^test_//')"; done

start=$(date +%s)
"$cmake" -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEND_SANITIZE=ON \
  -DMEND_WERROR=ON -DMEND_TESTS=ON >"$dir.configure.log" 2>&1 \
  || { cat "$dir.configure.log"; exit 1; }
targets="test_hostile mend"
for t in $tests; do targets="$targets test_$t"; done
# shellcheck disable=SC2086
"$cmake" --build "$dir" --target $targets -j "$jobs" >"$dir.build.log" 2>&1 \
  || { tail -50 "$dir.build.log"; exit 1; }
built=$(date +%s)
echo "sanitized: built in $((built - start)) s"

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
