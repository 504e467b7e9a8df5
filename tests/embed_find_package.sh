#!/bin/sh
# A host built with CMake against the installed mend: tests/embed_project does
# find_package(mend) and builds each tests/test_embed_*.c twice, linked to mend::mend
# (libmend.so) and to mend::mend_static (libmend.a); all run.
# Environment (set by ctest): MEND_PREFIX, MEND_SRC, MEND_HOSTS, MEND_HOST_FLAGS, CC, CMAKE.
set -eu
: "${CMAKE:=cmake}"
out="$MEND_HOSTS/find_package"
rm -rf "$out"
"$CMAKE" -S "$MEND_SRC/tests/embed_project" -B "$out" -DCMAKE_PREFIX_PATH="$MEND_PREFIX" \
  -DCMAKE_C_COMPILER="${CC:-cc}" -DCMAKE_C_FLAGS="$MEND_HOST_FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="$MEND_HOST_FLAGS" -DCMAKE_BUILD_TYPE=RelWithDebInfo
"$CMAKE" --build "$out"
# A static host finds the Lua files at the path the library was configured with, which a
# temporary prefix is not: it says where they are, as a host in that case must.
luadir="$(sed -n 's/^luadir=\${prefix}\///p' "$(find "$MEND_PREFIX" -name mend.pc | head -n 1)")"
for source in "$MEND_SRC"/tests/test_embed_*.c; do
  t=$(basename "$source" .c)
  ldd "$out/${t}_shared" | grep -q "$MEND_PREFIX/.*libmend.so"
  if ldd "$out/${t}_static" | grep -q libmend.so; then
    echo "${t}_static links libmend.so" >&2
    exit 1
  fi
  "$out/${t}_shared"
  MEND_LUA_DIR="$MEND_PREFIX/$luadir" "$out/${t}_static"
done
echo "embed_find_package: ok"
