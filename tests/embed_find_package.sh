#!/bin/sh
# A host built with CMake against the installed mend: tests/embed_project does
# find_package(mend) and builds tests/test_embed.c twice, linked to mend::mend (libmend.so)
# and to mend::mend_static (libmend.a); both run.
# Environment (set by ctest): MEND_PREFIX, MEND_SRC, MEND_HOSTS, MEND_HOST_FLAGS, CC, CMAKE.
set -eu
: "${CMAKE:=cmake}"
out="$MEND_HOSTS/find_package"
rm -rf "$out"
"$CMAKE" -S "$MEND_SRC/tests/embed_project" -B "$out" -DCMAKE_PREFIX_PATH="$MEND_PREFIX" \
  -DCMAKE_C_COMPILER="${CC:-cc}" -DCMAKE_C_FLAGS="$MEND_HOST_FLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="$MEND_HOST_FLAGS" -DCMAKE_BUILD_TYPE=RelWithDebInfo
"$CMAKE" --build "$out"
ldd "$out/host_shared" | grep -q "$MEND_PREFIX/.*libmend.so"
if ldd "$out/host_static" | grep -q libmend.so; then
  echo "host_static links libmend.so" >&2
  exit 1
fi
"$out/host_shared"
# A static host finds the Lua files at the path the library was configured with, which a
# temporary prefix is not: it says where they are, as a host in that case must.
MEND_LUA_DIR="$(sed -n 's/^luadir=\${prefix}\///p' "$(find "$MEND_PREFIX" -name mend.pc | head -n 1)")"
MEND_LUA_DIR="$MEND_PREFIX/$MEND_LUA_DIR" "$out/host_static"
echo "embed_find_package: ok"
