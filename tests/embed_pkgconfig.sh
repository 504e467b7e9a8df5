#!/bin/sh
# A host built against the installed mend with pkg-config alone, as a user would:
#   cc host.c $(pkg-config --cflags --libs mend)
# then run: each tests/test_embed_*.c (every driving mode, host functions, limits, sandbox), and the
# installed `mend` command, which must find its Lua files in the prefix.
# Environment (set by ctest): MEND_PREFIX, MEND_SRC, MEND_HOSTS, MEND_HOST_FLAGS, CC.
set -eu
: "${CC:=cc}"
out="$MEND_HOSTS/pkgconfig"
mkdir -p "$out"
pcdir=$(dirname "$(find "$MEND_PREFIX" -name mend.pc | head -n 1)")
export PKG_CONFIG_PATH="$pcdir"

echo "mend.pc: $pcdir/mend.pc, version $(pkg-config --modversion mend)"
version=$(sed -n 's/.*MEND_VERSION_STRING "\(.*\)"/\1/p' "$MEND_SRC/include/mend.h")
test "$(pkg-config --modversion mend)" = "$version"
cflags=$(pkg-config --cflags mend)
libs=$(pkg-config --libs mend)
libdir=$(pkg-config --variable=libdir mend)
luadir=$(pkg-config --variable=luadir mend)
echo "cflags: $cflags"
echo "libs:   $libs"
test -f "$luadir/mend/init.lua"
# mend.h needs no other headers: --cflags names mend's include directory and nothing else.
test "$(echo $cflags)" = "-I$(pkg-config --variable=includedir mend)"
test -f "$(pkg-config --variable=includedir mend)/mend.h"

for source in "$MEND_SRC"/tests/test_embed_*.c; do
  t=$(basename "$source" .c)
  # shellcheck disable=SC2086  # flags are word lists
  $CC -std=c11 -Wall -Wextra -Werror -D_DEFAULT_SOURCE $MEND_HOST_FLAGS \
    -I"$MEND_SRC/tests" $cflags $(pkg-config --cflags libuv) \
    "$source" -o "$out/$t" \
    $libs $(pkg-config --libs libuv) -Wl,-rpath,"$libdir"
  # It links the installed shared library, not the build tree's.
  ldd "$out/$t" | grep -q "$libdir/libmend.so"
  "$out/$t"
done

# The installed mend command runs a workflow with the Lua files of its prefix.
MEND_LUA_DIR= "$MEND_PREFIX/bin/mend" run "$MEND_SRC/workflows/order.lua" --clock virtual \
  --db "$out/order.db" --json > "$out/order.json"
grep -q '"status": *"succeeded"' "$out/order.json"
echo "embed_pkgconfig: ok"
