/*
 * lua_host: `lua SCRIPT ARGS...` with Debian's static liblua5.4.a linked in and its symbols
 * exported (-Wl,-E), for bench/http_cost.sh under MEND_COST_LUA_SYMBOLS=1: Debian's lua5.4 is
 * stripped, so callgrind charges the collector, tables and strings to bare addresses; this host
 * names them (luaC_step, luaH_newkey...). The module's calls into Lua resolve to the host's
 * copy. Not a lua.c: no options, no REPL; arg[0] is the script.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: lua_host SCRIPT [ARGS...]\n");
    return 2;
  }
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_createtable(L, argc, 0);
  for (int i = 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  lua_setglobal(L, "arg");
  if (luaL_dofile(L, argv[1]) != LUA_OK) {
    fprintf(stderr, "lua_host: %s\n", lua_tostring(L, -1));
    return 1;
  }
  lua_close(L);
  return 0;
}
