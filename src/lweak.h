/*
 * lweak: a table of the registry, under a C key, weak in its keys: marks on Lua values (an
 * empty table decoded from [], a coroutine a limit stopped, a lazy HTTP response's record)
 * that must neither keep the value alive nor be reachable from Lua code. Header-only. Must
 * never: be used for what must outlive its value.
 */
#ifndef MEND_LWEAK_H
#define MEND_LWEAK_H

#include <lua.h>

/* Pushes the table kept under key, made weak-keyed and kept there if there was none yet.
 * [-0, +1, m] */
static inline void mend_weak_table(lua_State *L, const void *key) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

#endif
