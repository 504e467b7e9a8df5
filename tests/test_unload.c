/*
 * test_unload: a host that closes its Lua state unloads mend's Lua module with it (Lua's
 * loader dlcloses it) and lives on, as a server reloading its scripts does. The module's
 * watchdog leaves its timer armed after a call with a deadline (guard.c); a timer firing
 * once the module is gone would signal into code no longer mapped (SIGSEGV at the step's
 * deadline). Here a step with a timeout runs, the state is closed, and the host waits past
 * that deadline: it must still be alive, and again with the module loaded anew. argv[1] is
 * package.cpath, argv[2] package.path.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <time.h>

static const char run_lua[] =
  "local mend = require 'mend'\n"
  "local db = os.tmpname()\n"
  "local eng = mend.engine{ db = db, clock = 'virtual' }\n"
  "eng:register{ name = 'w', steps = { { name = 's', timeout = 0.3,\n"
  "  execute = function() return 1 end } } }\n"
  "local id = eng:start('w', {})\n"
  "eng:run()\n"
  "local status = eng:status(id).status\n"
  "eng:close()\n"
  "for _, s in ipairs { '', '-wal', '-shm' } do os.remove(db .. s) end\n"
  "assert(status == 'succeeded', status)\n";

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_unload CPATH PATH\n");
    return 2;
  }
  /* Twice: the module loaded again in a new state works as the first time did. */
  for (int round = 0; round < 2; round++) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_pushstring(L, argv[1]);
    lua_setfield(L, -2, "cpath");
    lua_pushstring(L, argv[2]);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    if (luaL_dostring(L, run_lua) != LUA_OK) {
      fprintf(stderr, "FAIL: %s\n", lua_tostring(L, -1));
      return 1;
    }
    lua_close(L);   /* the module is unloaded here */
    struct timespec wait = {0, 800 * 1000 * 1000};   /* past the step's deadline */
    nanosleep(&wait, NULL);
  }
  printf("ok: alive after the state closed and the step's deadline passed\n");
  return 0;
}
