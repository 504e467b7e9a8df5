/*
 * lmod: the entry point of the Lua C module, so that plain lua5.4 can `require "mend.core"`.
 */
#include <lua.h>
#include "lmend.h"
#include "store.h"

__attribute__((visibility("default"))) int luaopen_mend_core(lua_State *L) {
  mend_store_quiet_memstatus();
  return mend_lua_open(L);
}
