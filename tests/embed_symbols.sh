#!/bin/sh
# The installed libmend.so exports the public API of include/mend.h and nothing else: every
# defined dynamic symbol starts with mend_, and every MEND_API function is among them.
set -eu
lib=$(find "$MEND_PREFIX" -name 'libmend.so.*.*.*' | head -n 1)
test -n "$lib"
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
echo "$lib: SONAME $soname"
major=$(sed -n 's/#define MEND_VERSION_MAJOR //p' "$MEND_SRC/include/mend.h")
minor=$(sed -n 's/#define MEND_VERSION_MINOR //p' "$MEND_SRC/include/mend.h")
# before 1.0 a minor version may change the ABI: it is part of the soname
if [ "$major" = 0 ]; then want="libmend.so.0.$minor"; else want="libmend.so.$major"; fi
test "$soname" = "$want"
nm -D --defined-only "$lib" | awk '{print $3}' | sort > "$MEND_HOSTS.symbols"
others=$(grep -v '^mend_' "$MEND_HOSTS.symbols" || true)
if [ -n "$others" ]; then
  echo "symbols other than mend_* exported:" >&2
  echo "$others" >&2
  exit 1
fi
sed -n 's/^MEND_API [^(]*[ *]\(mend_[a-z_]*\)(.*/\1/p' "$MEND_SRC/include/mend.h" |
  sort > "$MEND_HOSTS.api"
missing=$(comm -23 "$MEND_HOSTS.api" "$MEND_HOSTS.symbols")
if [ -n "$missing" ]; then
  echo "public functions not exported: $missing" >&2
  exit 1
fi
echo "embed_symbols: $(wc -l < "$MEND_HOSTS.symbols") symbols, all mend_, all of mend.h"
