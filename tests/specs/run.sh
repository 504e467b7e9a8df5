#!/bin/sh
# run.sh: runs one shard of the busted specs (tests/specs/shard.lua says which files), from the
# source directory, as ctest's busted_specs_* and busted_specs_pg_* do.
#
#   sh tests/specs/run.sh STORE SHARD COUNT
#
# STORE sqlite or pg (pg: under tests/pg/cluster.sh run, which sets MEND_TEST_PG; the specs
# tagged #sqlite are left out). SHARD 1..COUNT or server; `check` asserts that every spec file
# is in one shard of STORE's COUNT. BUSTED (busted) and LUA (lua5.4) may be set.
set -eu
store=$1
shard=$2
count=$3
here=$(dirname "$0")
set -- spec/*_spec.lua
if [ "$shard" = check ]; then
  exec "${LUA:-lua5.4}" "$here/shard.lua" "$store" check "$count" "$here/weights.txt" "$@"
fi
files=$("${LUA:-lua5.4}" "$here/shard.lua" "$store" "$shard" "$count" "$here/weights.txt" "$@")
if [ -z "$files" ]; then
  echo "specs: no spec file in shard $shard of $count ($store)"
  exit 0
fi
echo "specs ($store, shard $shard of $count):" $files
tags=
# each file's seconds printed (spec/helper.lua), read back into weights.txt from ctest's log
export MEND_SPEC_TIMES=1
[ "$store" = pg ] && tags=--exclude-tags=sqlite
# shellcheck disable=SC2086  # a list of files and an option
exec "${BUSTED:-busted}" --helper=spec/helper.lua $tags $files
