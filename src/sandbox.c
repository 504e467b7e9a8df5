/*
 * sandbox: the environment of sandboxed workflow code (see sandbox.h).
 *
 * What a workflow file sees is a table made for it alone: the safe part of the base library,
 * copies of string, table, math, utf8 and coroutine, os.time/clock/date, and `mend` as a step
 * needs it. This file owns that allow-list, the safe versions of load, setmetatable, xpcall,
 * collectgarbage and the coroutine functions, and `require` (text-only, from the workflow's
 * directory). What all chunks share is made safe once, in mend_sandbox_prepare
 * (src/sandbox/bounded.c: the string metatable hidden, string.dump removed, C functions of
 * bounded cost; src/sandbox/pattern.c: pattern functions that refuse a call whose worst case
 * is too costly), behind src/sandbox/sandbox_int.h.
 *
 * Must never: build an environment from the state's globals with names removed (only from the
 * allow-list); load a binary chunk; run workflow code itself (the engine does, under its
 * limits).
 */
#include "sandbox.h"

#include <ctype.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"
#include "threads.h"
#include "sandbox/sandbox_int.h"

/* Modules a sandbox reads from disk are Lua source of a sensible size. */
#define MAX_MODULE_BYTES (16u << 20)
/* Reading a module's file (its open, reads and close) as instructions, on top of a byte of its
 * text each for the read and the parse, as load is charged: a module that raises as it loads is
 * kept by nobody, and read again at the next require. */
#define MODULE_OPEN_COST 2000.0

/* ---------------------------------------------------------------- the environment */

/* setmetatable refuses __gc: a finalizer runs with hooks off, out of reach of every limit. */
static int safe_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(L, "setmetatable: __gc is not available in a sandbox");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* A reader function for load, charged the text it hands over. Upvalues: 1 the workflow's
 * reader, 2 the bytes read so far. */
static int charged_reader(lua_State *L) {
  lua_settop(L, 0);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 0, 1);
  size_t n;
  if (lua_type(L, 1) == LUA_TSTRING && lua_tolstring(L, 1, &n) && n > 0) {
    lua_Integer total = lua_tointeger(L, lua_upvalueindex(2)) + (lua_Integer)n;
    if (total > (lua_Integer)MAX_MODULE_BYTES)
      return luaL_error(L, "load: a chunk of more than %d bytes, over the sandbox's bound",
                        (int)MAX_MODULE_BYTES);
    lua_pushinteger(L, total);
    lua_replace(L, lua_upvalueindex(2));
    mend_limits_charge(L, (double)n);
  }
  return 1;
}

/* load(chunk [, name [, mode [, env]]]): text only, and the workflow's own environment by
 * default. Upvalue 1: the environment, 2: the library's load. */
static int safe_load(lua_State *L) {
  int given_env = lua_gettop(L) >= 4;
  lua_settop(L, 4);
  const char *mode = luaL_optstring(L, 3, "bt");
  if (!strchr(mode, 't'))
    return luaL_error(L, "load: binary chunks are not available in a sandbox");
  size_t len;
  if (lua_type(L, 1) == LUA_TSTRING && lua_tolstring(L, 1, &len)) {
    if (len > MAX_MODULE_BYTES)
      return luaL_error(L, "load: a chunk of %I bytes, over the sandbox's bound of %d",
                        (lua_Integer)len, (int)MAX_MODULE_BYTES);
    mend_limits_charge(L, (double)len);
  }
  /* Compiling is C work no hook sees: a string chunk is charged at once, a reader function
   * piece by piece. */
  if (lua_type(L, 1) == LUA_TFUNCTION) {
    lua_pushvalue(L, 1);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, charged_reader, 2);
    lua_replace(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushliteral(L, "t");
  if (given_env) lua_pushvalue(L, 4);
  else lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 4, 2);
  if (lua_isnil(L, -2)) return 2;   /* nil and the message */
  lua_pop(L, 1);
  return 1;
}

/* xpcall(f, msgh, ...): the message handler runs once the error has unwound, not on top of
 * it as Lua's does, because Lua runs it with hooks off when the error came from a hook (a
 * limit), out of reach of every limit. A traceback is not to be had in a sandbox anyway. */
static int safe_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 1);   /* f above msgh, then the arguments */
  if (lua_pcall(L, n - 2, LUA_MULTRET, 0) == LUA_OK) {
    lua_pushboolean(L, 1);
    lua_replace(L, 2);   /* true in place of msgh */
    return lua_gettop(L) - 1;
  }
  lua_pushvalue(L, 2);
  lua_insert(L, -2);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    lua_pop(L, 1);
    lua_pushliteral(L, "error in error handling");
  }
  lua_pushboolean(L, 0);
  lua_insert(L, -2);
  return 2;
}

/* Is co the coroutine of a step's attempt (the list of them, threads.h)? Only the engine
 * resumes or closes one: a step that kept another run's (coroutine.running()) would otherwise
 * end that attempt early or run it out of turn. */
static int attempt_thread(lua_State *L, lua_State *co) { return mend_threads_find(L, co) != NULL; }

static int close_thread(lua_State *co, lua_State *from) {
  int depth = mend_limits_run_on(co);   /* its __close handlers run on it */
#if LUA_VERSION_RELEASE_NUM >= 50406
  int status = lua_closethread(co, from);
#else
  (void)from;
  int status = lua_resetthread(co);
#endif
  mend_limits_run_off(depth);
  return status;
}

/* coroutine.wrap's function: upvalue 1 the coroutine. Like Lua's, but a coroutine that a limit
 * stopped is not closed (that would run its __close handlers with hooks off). */
static int wrapped_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int n = lua_gettop(L), nres;
  if (!lua_checkstack(co, n)) return luaL_error(L, "too many arguments to resume");
  lua_xmove(L, co, n);
  int depth = mend_limits_run_on(co);
  int status = lua_resume(co, L, n, &nres);
  mend_limits_run_off(depth);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) return luaL_error(L, "too many results to resume");
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1);   /* the error */
  if (!mend_limits_stopped(L, co)) close_thread(co, L);
  if (lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

static int safe_wrap(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State *co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, wrapped_resume, 1);
  return 1;
}

/* coroutine.resume, as Lua's, but the watchdog knows the coroutine runs, and an attempt's
 * coroutine is not resumed. */
static int safe_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  if (attempt_thread(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "cannot resume the coroutine of a step's attempt (the engine runs it)");
    return 2;
  }
  int n = lua_gettop(L) - 1, nres;
  if (!lua_checkstack(co, n)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "too many arguments to resume");
    return 2;
  }
  lua_xmove(L, co, n);
  int depth = mend_limits_run_on(co);
  int status = lua_resume(co, L, n, &nres);
  mend_limits_run_off(depth);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) {
      lua_pop(co, nres);
      lua_pushboolean(L, 0);
      lua_pushliteral(L, "too many results to resume");
      return 2;
    }
    lua_pushboolean(L, 1);
    lua_xmove(co, L, nres);
    return nres + 1;
  }
  lua_pushboolean(L, 0);
  lua_xmove(co, L, 1);
  return 2;
}

/* coroutine.close, but not of a coroutine that a limit stopped, nor of an attempt's.
 * Upvalue 1: Lua's. */
static int safe_close(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  if (co && mend_limits_stopped(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "the coroutine was stopped by a limit of the sandbox");
    return 2;
  }
  if (co && attempt_thread(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "cannot close the coroutine of a step's attempt (the engine runs it)");
    return 2;
  }
  /* Lua's close raises for a running or normal coroutine: only the others are closed here. */
  lua_Debug ar;
  if (co && co != L && (lua_status(co) != LUA_OK || !lua_getstack(co, 0, &ar))) {
    if (close_thread(co, L) == LUA_OK) {
      lua_pushboolean(L, 1);
      return 1;
    }
    lua_pushboolean(L, 0);
    lua_xmove(co, L, 1);
    return 2;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* collectgarbage: what a program may ask of the collector without changing it for the host. */
static int safe_collectgarbage(lua_State *L) {
  static const char *const allowed[] = {"collect", "count", "step", "isrunning", NULL};
  int opt = luaL_checkoption(L, 1, "collect", allowed);
  /* A full collection walks the whole state, the engine's part and every workflow's. */
  if (opt == 0 || opt == 2) mend_limits_charge(L, 32.0 * lua_gc(L, LUA_GCCOUNT));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int valid_module_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 200 || name[0] == '.' || name[n - 1] == '.') return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!(isalnum(c) || c == '_' || (c == '.' && name[i + 1] != '.'))) return 0;
  }
  return 1;
}

/* The text of the file, or NULL (a message pushed). */
static char *read_module(lua_State *L, const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0, got;
  char *text = malloc(cap);
  while (text && (got = fread(text + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *more = cap < MAX_MODULE_BYTES ? realloc(text, cap *= 2) : NULL;
      if (!more) { free(text); text = NULL; }
      else text = more;
    }
  }
  fclose(f);
  if (!text) luaL_error(L, "require: %s is larger than %d bytes", path, (int)MAX_MODULE_BYTES);
  *len = n;
  return text;
}

/* require(name): "mend" and what the workflow's directory holds. Upvalues: 1 the environment,
 * 2 its table of loaded modules, 3 the workflow's directory, 4 mend's Lua directory. */
static int safe_require(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_settop(L, 1);
  lua_pushvalue(L, 1);
  if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  if (!valid_module_name(name))
    return luaL_error(L, "require: \"%s\" is not a module name a sandbox can load (letters, "
                      "digits, _ and single dots)", name);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int ours = strcmp(name, "mend.sim") == 0;
  luaL_addstring(&b, lua_tostring(L, lua_upvalueindex(ours ? 4 : 3)));
  luaL_addchar(&b, '/');
  for (const char *c = name; *c; c++) luaL_addchar(&b, *c == '.' ? '/' : *c);
  luaL_addstring(&b, ".lua");
  luaL_pushresult(&b);
  const char *path = lua_tostring(L, -1);
  size_t len;
  mend_limits_charge(L, MODULE_OPEN_COST);
  char *text = read_module(L, path, &len);
  if (!text && ours)
    return luaL_error(L, "require: module \"%s\" not found: mend's Lua files are not in %s: set "
                      "MEND_LUA_DIR (or mend_options.lua_path) to the directory `pkg-config "
                      "--variable=luadir mend` prints", name, lua_tostring(L, lua_upvalueindex(4)));
  if (!text)
    return luaL_error(L, "require: module \"%s\" not found (a sandboxed workflow may require "
                      "\"mend\", \"mend.sim\" and the Lua modules beside its file)", name);
  lua_pushfstring(L, "@%s", path);
  int status = luaL_loadbufferx(L, text, len, lua_tostring(L, -1), "t");
  free(text);
  mend_limits_charge(L, (double)len);   /* once the text is freed: the charge may raise */
  if (status != LUA_OK) return lua_error(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setupvalue(L, -2, 1);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -2);
  lua_rawset(L, lua_upvalueindex(2));
  return 1;
}

/* A shallow copy of the global library `lib`, keeping only `names` (all when NULL). */
static void copy_library(lua_State *L, int env, const char *lib, const char *const *names) {
  lua_getglobal(L, lib);
  int src = lua_gettop(L);
  lua_newtable(L);
  if (names) {
    for (const char *const *nm = names; *nm; nm++) {
      lua_getfield(L, src, *nm);
      lua_setfield(L, -2, *nm);
    }
  } else {
    lua_pushnil(L);
    while (lua_next(L, src)) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4);
    }
  }
  lua_setfield(L, env, lib);
  lua_pop(L, 1);
}

/* mend as a step sees it: errors, waits, host calls, JSON. */
static void push_mend(lua_State *L) {
  static const char *const names[] = {"retryable", "fatal", "compensable", "is_error", "sleep",
                                      "version", "http", NULL};   /* http: under http_allow */
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "mend.core");
  int core = lua_gettop(L);
  lua_newtable(L);
  for (const char *const *nm = names; *nm; nm++) {
    lua_getfield(L, core, *nm);
    lua_setfield(L, -2, *nm);
  }
  lua_newtable(L);
  lua_getfield(L, core, "json");
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -5);
  }
  lua_pop(L, 1);
  lua_getfield(L, -1, "decode");
  lua_pushcclosure(L, mend__sandbox_bounded_decode, 1);
  lua_setfield(L, -2, "decode");
  lua_getfield(L, -1, "encode");
  lua_pushcclosure(L, mend__sandbox_charged_encode, 1);
  lua_setfield(L, -2, "encode");
  lua_setfield(L, -2, "json");
  /* mend.call raises the host's error as lua/mend/init.lua does. */
  luaL_loadstring(L, "local call, error = ...\n"
                     "return function(name, ...)\n"
                     "  local ok, v = call(name, ...)\n"
                     "  if ok then return v end\n"
                     "  error(v, 0)\n"
                     "end");
  lua_getfield(L, core, "_call");
  lua_getglobal(L, "error");
  lua_call(L, 2, 1);
  lua_setfield(L, -2, "call");
  lua_replace(L, core - 1);
  lua_settop(L, core - 1);
}

void mend_sandbox_env(lua_State *L, const char *dir, const char *lua_dir) {
  static const char *const base[] = {"assert", "error", "ipairs", "next", "pairs", "pcall",
    "rawequal", "rawget", "rawlen", "rawset", "select", "tonumber", "tostring",
    "type", "getmetatable", "_VERSION", NULL};
  static const char *const os_names[] = {"time", "clock", "date", "difftime", NULL};
  static const char *const string_names[] = {"byte", "char", "find", "format", "gmatch", "gsub",
    "len", "lower", "match", "rep", "reverse", "sub", "upper", "pack", "packsize", "unpack",
    NULL};
  lua_newtable(L);
  int env = lua_gettop(L);
  for (const char *const *nm = base; *nm; nm++) {
    lua_getglobal(L, *nm);
    lua_setfield(L, env, *nm);
  }
  lua_pushvalue(L, env);
  lua_setfield(L, env, "_G");
  lua_getglobal(L, "setmetatable");
  lua_pushcclosure(L, safe_setmetatable, 1);
  lua_setfield(L, env, "setmetatable");
  /* print writes to the host's stdout, a byte for each byte it is given, and makes a string
   * of each argument that is not one. */
  lua_getglobal(L, "print");
  lua_pushliteral(L, "print");
  lua_pushcclosure(L, mend__sandbox_charged_tostrings, 2);
  lua_setfield(L, env, "print");
  lua_getglobal(L, "tostring");
  lua_pushcclosure(L, mend__sandbox_charged_tostring, 1);
  lua_setfield(L, env, "tostring");
  lua_pushvalue(L, env);
  lua_getglobal(L, "load");
  lua_pushcclosure(L, safe_load, 2);
  lua_setfield(L, env, "load");
  lua_getglobal(L, "collectgarbage");
  lua_pushcclosure(L, safe_collectgarbage, 1);
  lua_setfield(L, env, "collectgarbage");
  copy_library(L, env, "string", string_names);
  copy_library(L, env, "table", NULL);
  copy_library(L, env, "math", NULL);
  /* The generator is the state's: a seed set by one workflow would set the numbers another
   * draws. */
  lua_getfield(L, env, "math");
  lua_pushnil(L);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);
  copy_library(L, env, "utf8", NULL);
  copy_library(L, env, "coroutine", NULL);
  lua_getfield(L, env, "coroutine");
  lua_pushcfunction(L, safe_wrap);
  lua_setfield(L, -2, "wrap");
  lua_getfield(L, -1, "close");
  lua_pushcclosure(L, safe_close, 1);
  lua_setfield(L, -2, "close");
  lua_pushcfunction(L, safe_resume);
  lua_setfield(L, -2, "resume");
  lua_pop(L, 1);
  lua_pushcfunction(L, safe_xpcall);
  lua_setfield(L, env, "xpcall");
  copy_library(L, env, "os", os_names);
  lua_getfield(L, env, "os");
  lua_getfield(L, -1, "date");
  lua_pushcclosure(L, mend__sandbox_bounded_date, 1);
  lua_setfield(L, -2, "date");
  lua_getfield(L, -1, "time");
  lua_pushcclosure(L, mend__sandbox_charged_time, 1);
  lua_setfield(L, -2, "time");
  lua_pop(L, 1);
  /* require, with its own table of what it loaded: "mend" is there from the start. */
  lua_newtable(L);
  int loaded = lua_gettop(L);
  push_mend(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, env, "mend");
  lua_setfield(L, loaded, "mend");
  lua_pushvalue(L, env);
  lua_pushvalue(L, loaded);
  lua_pushstring(L, dir && *dir ? dir : ".");
  lua_pushstring(L, lua_dir && *lua_dir ? lua_dir : ".");
  lua_pushcclosure(L, safe_require, 4);
  lua_setfield(L, env, "require");
  lua_settop(L, env);
}
