#!/bin/sh
# Builds the fuzz targets with clang in a directory of their own and runs each for a bounded
# time, both at once, on copies of their seed corpora (the repository's corpora are only read).
#
#   sh tests/fuzz/run.sh SOURCE_DIR BUILD_DIR SECONDS [JOBS]
#
# CC (clang) and CMAKE (cmake) may be set. Exits 77 when clang or libFuzzer's runtime is
# missing (a skip for ctest), 1 when a target finds a crash, a leak, undefined behaviour or a
# slow input: its log and the input that did it (BUILD_DIR/artifacts/) are named.
set -u
src=$1
dir=$2
secs=$3
jobs=${4:-2}
cc=${CC:-clang}
cmake=${CMAKE:-cmake}

if ! command -v "$cc" >/dev/null 2>&1; then
  echo "fuzz: $cc not found (Debian: apt-get install clang libclang-rt-14-dev); skipped"
  exit 77
fi
mkdir -p "$dir" || exit 1
printf '%s\n' 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)' \
  '{ (void)d; (void)n; return 0; }' \
  >"$dir/probe.c"
if ! "$cc" -fsanitize=fuzzer "$dir/probe.c" -o "$dir/probe" >"$dir/probe.log" 2>&1; then
  echo "fuzz: $cc cannot link libFuzzer (Debian: apt-get install libclang-rt-14-dev); skipped"
  cat "$dir/probe.log"
  exit 77
fi

"$cmake" -S "$src" -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMEND_FUZZ=ON -DMEND_TESTS=OFF >"$dir/configure.log" 2>&1 \
  || { cat "$dir/configure.log"; exit 1; }
"$cmake" --build "$dir" --target fuzz_json fuzz_workflow -j "$jobs" || exit 1

rm -rf "$dir/corpus" "$dir/artifacts"
mkdir -p "$dir/artifacts"
pids=""
for t in json workflow; do
  mkdir -p "$dir/corpus/$t"
  cp "$src/tests/fuzz/corpus/$t/"* "$dir/corpus/$t/"
  if [ "$t" = workflow ]; then   # the workflows people copy are seeds as they are
    for f in "$src"/workflows/*.lua "$src"/examples/*.lua; do
      cp "$f" "$dir/corpus/$t/seed-$(basename "$f")"
    done
  fi
  # -timeout: an input that runs 30 s is a hang (the workflow target's limits end any input in
  # well under a second without the sanitizers, a few with them on a busy machine).
  # -rss_limit_mb: ASan's allocator keeps what the 16 MiB Lua states freed, and the process
  # passed 1 GiB in 5 minutes with no leak (LeakSanitizer checks each input); 4 GiB is a leak.
  "$dir/fuzz_$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 \
    -artifact_prefix="$dir/artifacts/$t-" -print_final_stats=1 "$dir/corpus/$t" \
    >"$dir/fuzz_$t.log" 2>&1 &
  pids="$pids $!"
done
rc=0
i=0
for p in $pids; do
  i=$((i + 1))
  t=$(echo "json workflow" | cut -d' ' -f$i)
  if wait "$p"; then
    echo "fuzz_$t: no finding in ${secs}s ($(grep -c . "$dir/fuzz_$t.log") log lines," \
         "$(ls "$dir/corpus/$t" | wc -l) inputs in $dir/corpus/$t)"
  else
    rc=1
    echo "fuzz_$t: FOUND A PROBLEM; the end of $dir/fuzz_$t.log:"
    tail -n 60 "$dir/fuzz_$t.log"
    echo "fuzz_$t: the input is in $dir/artifacts/ (rerun: $dir/fuzz_$t FILE)"
  fi
done
exit $rc
