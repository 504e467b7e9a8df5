/*
 * luadir: the default directory of mend's Lua files (see luadir.h). Owns nothing else.
 *
 * MEND_LUA_DIR is an absolute path. With MEND_LUA_DIR_FROM_LIB / MEND_LUA_DIR_FROM_BIN (the
 * install's share/mend/lua relative to its lib/ and bin/), the directory is looked for first
 * next to the binary holding this code (libmend.so, or the executable it is linked into), so
 * that an install copied to another prefix (`cmake --install . --prefix P`) finds its own files.
 */
#define _GNU_SOURCE 1   /* dladdr */
#include "luadir.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MEND_LUA_DIR
#error "MEND_LUA_DIR must be defined by the build"
#endif

#if defined(MEND_LUA_DIR_FROM_LIB) && defined(MEND_LUA_DIR_FROM_BIN)
static char found[PATH_MAX];

/* found = dirname(binary) "/" rel, if it holds mend/init.lua. */
static int try_relative(const char *binary, const char *rel) {
  const char *slash = strrchr(binary, '/');
  if (!slash) return 0;
  int n = snprintf(found, sizeof found, "%.*s/%s", (int)(slash - binary), binary, rel);
  if (n < 0 || (size_t)n >= sizeof found) return 0;
  char probe[PATH_MAX + 32];
  snprintf(probe, sizeof probe, "%s/mend/init.lua", found);
  return access(probe, R_OK) == 0;
}

static const char *relative_dir(void) {
  Dl_info info;
  if (!dladdr((void *)mend_lua_dir_default, &info) || !info.dli_fname) return NULL;
  char binary[PATH_MAX];
  if (!realpath(info.dli_fname, binary)) return NULL;
  if (try_relative(binary, MEND_LUA_DIR_FROM_LIB) || try_relative(binary, MEND_LUA_DIR_FROM_BIN))
    return found;
  return NULL;
}
#else
static const char *relative_dir(void) { return NULL; }
#endif

const char *mend_lua_dir_default(void) {
  const char *dir = getenv("MEND_LUA_DIR");
  if (dir && *dir) return dir;
  dir = relative_dir();
  return dir ? dir : MEND_LUA_DIR;
}
