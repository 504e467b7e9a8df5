#!/bin/sh
# tests/test_embed_cycles.c (20 create/run/destroy cycles), or another C test, under valgrind:
# no invalid access, nothing lost. Exit 77 (skipped) without valgrind or in a sanitized build,
# where the c_embed_* tests run the same API under AddressSanitizer instead.
#   embed_valgrind.sh PROGRAM SANITIZER (off, on, address or thread) [ARGUMENTS...]
set -u
prog=$1
sanitizer=${2:-off}
shift; [ $# -gt 0 ] && shift
case "$sanitizer" in
  off|0|false|no|"") ;;
  *) echo "embed_valgrind: skipped: the build is sanitized ($sanitizer;" \
          "a sanitizer and valgrind exclude each other)"
     exit 77 ;;
esac
if ! command -v valgrind > /dev/null 2>&1; then
  echo "embed_valgrind: skipped: valgrind is not installed (apt-get install valgrind)"
  exit 77
fi
exec valgrind --error-exitcode=1 --leak-check=full \
  --errors-for-leak-kinds=definite,indirect,possible \
  --track-fds=no --quiet "$prog" "$@"
