/*
 * lmod: the entry point of the Lua C module, so that plain lua5.4 can `require "mend.core"`.
 * Must never: hold anything of the module's own (its functions are lmend.c's and lengine.c's).
 */
#include <lua.h>
#include "lmend.h"
#include "store.h"

__attribute__((visibility("default"))) int luaopen_mend_core(lua_State *L) {
  mend_store_quiet_memstatus();
  return mend_lua_open(L);
}
