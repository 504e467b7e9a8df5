/*
 * main: the `mend` command. A thin host, as lua.c is for Lua: it makes a Lua state with the
 * mend module, points `require` at mend's Lua files, and hands the arguments to mend.cli,
 * which is written against the same Lua API that users have. Must never: hold a command's
 * logic (mend.cli does); run Lua outside a protected call.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lmend.h"
#include "luadir.h"
#include "serve/serve.h"
#include "stdfds.h"
#include "store.h"

static int traceback(lua_State *L) {
  luaL_traceback(L, L, lua_tostring(L, 1), 1);
  return 1;
}

/* Prepends mend's own Lua directory ($MEND_LUA_DIR, or the one it was built for) to
 * package.path. */
static void set_path(lua_State *L) {
  const char *dir = mend_lua_dir_default();
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
}

static int run_cli(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  luaL_openlibs(L);
  luaL_requiref(L, "mend.core", mend_lua_open, 0);
  lua_pop(L, 1);
  luaL_requiref(L, "mend.serve", mend_serve_lua_open, 0);
  lua_pop(L, 1);
  set_path(L);
  lua_createtable(L, argc, 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_setglobal(L, "arg");
  lua_pushcfunction(L, traceback);
  lua_getglobal(L, "require");
  lua_pushstring(L, "mend.cli");
  if (lua_pcall(L, 1, 1, -3) != LUA_OK) return lua_error(L);
  lua_getfield(L, -1, "main");
  lua_getglobal(L, "arg");
  if (lua_pcall(L, 1, 1, -4) != LUA_OK) return lua_error(L);
  return 1;
}

int main(int argc, char **argv) {
  (void)mend_fill_standard_fds();   /* one left closed: the engine says so as it is made */
  /* A write past the file size limit (RLIMIT_FSIZE, `ulimit -f`) would kill the process
   * without a word; ignored, the write fails with EFBIG and the store names the file and the
   * cause, as it does for a full disk. */
  signal(SIGXFSZ, SIG_IGN);
  /* A child that exits without reading its stdin (an alert command that does not read the
   * alert, a mend.exec given input it does not want) or a stdout whose reader went away would
   * kill a worker without a word; caught, the write fails with EPIPE, which each of them
   * handles (src/engine/print.c drops what stdout cannot take). */
  mend_lua_quiet_sigpipe();
  mend_store_quiet_memstatus();
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "mend: out of memory\n");
    return 1;
  }
  lua_pushcfunction(L, run_cli);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 0);
  int code;
  if (status != LUA_OK) {
    fprintf(stderr, "mend: %s\n", lua_tostring(L, -1));
    code = 1;
  } else {
    code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  }
  lua_close(L);
  return code;
}
