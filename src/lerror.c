/*
 * lerror: mend's typed error object (see lerror.h). A table of fields with the metatable
 * "mend.error"; read raw, so that reading one runs no code of whoever made it. Must never:
 * call a metamethod of the value it reads; know the engine or a run.
 */
#include "lerror.h"

#include <lauxlib.h>
#include <string.h>

#define ERROR_MT "mend.error"

static const char *const kind_names[] = {"retryable", "fatal", "compensable", "timeout", "error"};

const char *mend_error_kind_name(mend_error_kind k) {
  return k >= MEND_ERR_RETRYABLE && k <= MEND_ERR_ERROR ? kind_names[k] : "error";
}

mend_error_kind mend_error_kind_parse(const char *name) {
  for (int k = MEND_ERR_RETRYABLE; name && k < MEND_ERR_ERROR; k++)
    if (strcmp(name, kind_names[k]) == 0) return (mend_error_kind)k;
  return MEND_ERR_ERROR;
}

void mend_lua_push_error(lua_State *L, mend_error_kind kind, const char *message,
                         double retry_after, int severity) {
  lua_createtable(L, 0, 4);
  lua_pushstring(L, mend_error_kind_name(kind));
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, message ? message : "");
  lua_setfield(L, -2, "message");
  if (retry_after >= 0) { lua_pushnumber(L, retry_after); lua_setfield(L, -2, "retry_after"); }
  if (severity > 0) { lua_pushinteger(L, severity); lua_setfield(L, -2, "severity"); }
  luaL_setmetatable(L, ERROR_MT);
}

static int is_mend_error(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TTABLE || !lua_getmetatable(L, idx)) return 0;
  luaL_getmetatable(L, ERROR_MT);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

/* e[field], raw: an error's fields are read without running any code of the workflow's. */
static int raw_field(lua_State *L, int idx, const char *field) {
  lua_pushstring(L, field);
  return lua_rawget(L, idx);
}

int mend_lua_read_error(lua_State *L, int idx, mend_error_info *info) {
  idx = lua_absindex(L, idx);
  *info = (mend_error_info){MEND_ERR_ERROR, NULL, -1, 0, 0};
  if (!is_mend_error(L, idx)) {
    if (lua_type(L, idx) == LUA_TSTRING) info->message = lua_tostring(L, idx);
    return 0;
  }
  raw_field(L, idx, "kind");
  const char *kind = lua_tostring(L, -1);
  for (int k = MEND_ERR_RETRYABLE; k <= MEND_ERR_ERROR; k++)
    if (kind && strcmp(kind, kind_names[k]) == 0) info->kind = (mend_error_kind)k;
  lua_pop(L, 1);
  /* A message that is not a string stays NULL: converting a number in place would change
   * the error table's field under a lua_next of someone's. */
  if (raw_field(L, idx, "message") == LUA_TSTRING)
    info->message = lua_tostring(L, -1);   /* anchored in the error table */
  lua_pop(L, 1);
  if (raw_field(L, idx, "retry_after") == LUA_TNUMBER) {
    double ra = lua_tonumber(L, -1);
    if (ra >= 0) info->retry_after = ra;
  }
  lua_pop(L, 1);
  raw_field(L, idx, "severity");
  lua_Integer sev = lua_tointeger(L, -1);
  info->severity = sev >= 1 && sev <= 3 ? (int)sev : 0;
  lua_pop(L, 1);
  return 1;
}

static int error_tostring(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int tk = raw_field(L, 1, "kind");
  int tm = raw_field(L, 1, "message");
  lua_pushfstring(L, "%s: %s", tk == LUA_TSTRING ? lua_tostring(L, -2) : "error",
                  tm == LUA_TSTRING ? lua_tostring(L, -1) : "");
  return 1;
}

void mend_lerror_open(lua_State *L) {
  if (luaL_newmetatable(L, ERROR_MT)) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushstring(L, "mend.error");
    lua_setfield(L, -2, "__name");
    /* Shared by every error of every workflow: getmetatable answers its name instead. */
    lua_pushstring(L, "mend.error");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
}
