/*
 * sandbox: the environment of sandboxed workflow code (see sandbox.h).
 *
 * What a workflow file sees is a table made for it alone: the safe part of the base library,
 * copies of string, table, math, utf8 and coroutine, os.time/clock/date, and `mend` as a step
 * needs it. What all chunks share is made safe once, in mend_sandbox_prepare: the string
 * metatable (reached by every string's methods) is hidden from getmetatable, and the string
 * table behind it loses `dump` and gets pattern functions that refuse a call whose worst case
 * is too costly and charge what they may cost to the caller's instruction budget.
 */
#include "sandbox.h"

#include <ctype.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"

/* Modules a sandbox reads from disk are Lua source of a sensible size. */
#define MAX_MODULE_BYTES (16u << 20)

/* ---------------------------------------------------------------- bounded patterns */

/* Does the single character class cls[0..clen) (".", "%a", "[set]", or a character) hold c? */
static int class_has_escape(unsigned char cl, unsigned char c) {
  int r;
  switch (tolower(cl)) {
    case 'a': r = isalpha(c); break;
    case 'c': r = iscntrl(c); break;
    case 'd': r = isdigit(c); break;
    case 'g': r = isgraph(c); break;
    case 'l': r = islower(c); break;
    case 'p': r = ispunct(c); break;
    case 's': r = isspace(c); break;
    case 'u': r = isupper(c); break;
    case 'w': r = isalnum(c); break;
    case 'x': r = isxdigit(c); break;
    default: return cl == c;
  }
  if (isupper(cl)) r = !r;
  return r != 0;
}

static int set_has(const char *set, size_t len, unsigned char c) {
  size_t i = 1;   /* after '[' */
  int negate = 0;
  if (i < len && set[i] == '^') { negate = 1; i++; }
  size_t end = len - 1;   /* the closing ']' */
  int found = 0;
  while (i < end) {
    unsigned char a = (unsigned char)set[i];
    if (a == '%' && i + 1 < end) {
      found |= class_has_escape((unsigned char)set[i + 1], c);
      i += 2;
    } else if (i + 2 < end && set[i + 1] == '-') {
      found |= a <= c && c <= (unsigned char)set[i + 2];
      i += 3;
    } else {
      found |= a == c;
      i++;
    }
  }
  return negate ? !found : found;
}

static int class_has(const char *cls, size_t clen, unsigned char c) {
  if (cls[0] == '.' && clen == 1) return 1;
  if (cls[0] == '%' && clen == 2) return class_has_escape((unsigned char)cls[1], c);
  if (cls[0] == '[') return set_has(cls, clen, c);
  return (unsigned char)cls[0] == c;
}

/* The longest stretch of s that the class matches: how far one repetition of it can go. */
static size_t longest_run(const char *s, size_t n, const char *cls, size_t clen) {
  size_t best = 0, run = 0;
  for (size_t i = 0; i < n; i++) {
    if (class_has(cls, clen, (unsigned char)s[i])) {
      if (++run > best) best = run;
    } else {
      run = 0;
    }
  }
  return best;
}

/* The end of the set that starts at p[i] == '['; plen when it is not closed. */
static size_t set_end(const char *p, size_t plen, size_t i) {
  size_t j = i + 1;
  if (j < plen && p[j] == '^') j++;
  do {
    if (j >= plen) return plen;
    if (p[j++] == '%' && j < plen) j++;
  } while (j < plen && p[j] != ']');
  return j < plen ? j + 1 : plen;
}

/* Is nothing but closing parentheses and the end anchor left of the pattern from i? */
static int only_closing(const char *p, size_t plen, size_t i) {
  while (i < plen && p[i] == ')') i++;
  return i == plen || (i + 1 == plen && p[i] == '$');
}

/* log10 of the most steps a backtracking match of p over s can take: the start positions
 * tried, times the lengths each repetition can take (the longest run of its class in s),
 * times two for each optional item, times the work at the end of each path: the pattern's
 * length, plus the last repetition's run when nothing follows it (it is tried only once
 * per path), plus the subject's length when a %b or a back reference scans it. An upper
 * bound, loose for most patterns. */
static double cost_log10(const char *s, size_t n, const char *p, size_t plen, int anchored_ok) {
  size_t i = 0;
  double lg = 0, leaf = (double)plen + 1;
  if (anchored_ok && plen > 0 && p[0] == '^') i = 1;
  else lg += log10((double)n + 1);
  int scans = 0;
  while (i < plen) {
    char c = p[i];
    size_t cls = i, clen;
    if (c == '(' || c == ')') { i++; continue; }
    if (c == '%' && i + 1 < plen) {
      char d = p[i + 1];
      if (d == 'b') { scans = 1; i += 4; continue; }
      if (d == 'f') {
        i += 2;
        if (i < plen && p[i] == '[') i = set_end(p, plen, i);
        continue;
      }
      if (isdigit((unsigned char)d)) { scans = 1; i += 2; continue; }
      clen = 2;
    } else if (c == '[') {
      clen = set_end(p, plen, i) - i;
    } else {
      clen = 1;
    }
    i += clen;
    if (i < plen && (p[i] == '*' || p[i] == '+' || p[i] == '-')) {
      double run = (double)longest_run(s, n, p + cls, clen);
      i++;
      if (only_closing(p, plen, i)) leaf += run;
      else lg += log10(run + 1);
    } else if (i < plen && p[i] == '?') {
      lg += log10(2.0);
      i++;
    }
  }
  if (scans) leaf += (double)n;
  return lg + log10(leaf);
}

enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };
static const char *const pattern_fn[] = {"find", "match", "gmatch", "gsub"};

/* string.find/match/gmatch/gsub of a sandbox: upvalue 1 the library's own, 2 which one. */
static int bounded_pattern(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(2));
  int ts = lua_type(L, 1), tp = lua_type(L, 2);
  if ((ts == LUA_TSTRING || ts == LUA_TNUMBER) && (tp == LUA_TSTRING || tp == LUA_TNUMBER) &&
      !(which == PAT_FIND && lua_toboolean(L, 4))) {
    size_t n, plen;
    const char *s = lua_tolstring(L, 1, &n);
    const char *p = lua_tolstring(L, 2, &plen);
    double lg = cost_log10(s, n, p, plen, which != PAT_GMATCH || LUA_VERSION_RELEASE_NUM >= 50400);
    if (lg > log10(MEND_SANDBOX_PATTERN_STEPS)) {
      char msg[300];
      snprintf(msg, sizeof msg, "string.%s: the pattern may take up to 10^%.0f steps on a subject "
               "of %zu bytes, over the sandbox's bound of %.0e (README: Limits and sandbox)",
               pattern_fn[which], lg, n, MEND_SANDBOX_PATTERN_STEPS);
      return luaL_error(L, "%s", msg);
    }
    mend_limits_charge(L, pow(10.0, lg));
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* table.sort of a sandbox: a sort without a comparator runs in C alone, so it is charged. */
static int charged_sort(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  double n = (double)lua_rawlen(L, 1);
  if (n > 1) mend_limits_charge(L, n * log2(n));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 0);
  return 0;
}

void mend_sandbox_prepare(lua_State *L) {
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  for (int k = PAT_FIND; k <= PAT_GSUB; k++) {
    lua_getfield(L, -1, pattern_fn[k]);
    lua_pushinteger(L, k);
    lua_pushcclosure(L, bounded_pattern, 2);
    lua_setfield(L, -2, pattern_fn[k]);
  }
  lua_pop(L, 1);
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "sort");
  lua_pushcclosure(L, charged_sort, 1);
  lua_setfield(L, -2, "sort");
  lua_pop(L, 1);
  /* Every string reaches this metatable; getmetatable("") now answers false. */
  lua_pushliteral(L, "");
  if (lua_getmetatable(L, -1)) {
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

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

/* load(chunk [, name [, mode [, env]]]): text only, and the workflow's own environment by
 * default. Upvalue 1: the environment, 2: the library's load. */
static int safe_load(lua_State *L) {
  int given_env = lua_gettop(L) >= 4;
  lua_settop(L, 4);
  const char *mode = luaL_optstring(L, 3, "bt");
  if (!strchr(mode, 't'))
    return luaL_error(L, "load: binary chunks are not available in a sandbox");
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

/* coroutine.wrap's function: upvalue 1 the coroutine. Like Lua's, but a coroutine that a limit
 * stopped is not closed (that would run its __close handlers with hooks off). */
static int wrapped_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int n = lua_gettop(L), nres;
  if (!lua_checkstack(co, n)) return luaL_error(L, "too many arguments to resume");
  lua_xmove(L, co, n);
  int status = lua_resume(co, L, n, &nres);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) return luaL_error(L, "too many results to resume");
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1);   /* the error */
  if (!mend_limits_stopped(L, co)) {
#if LUA_VERSION_RELEASE_NUM >= 50406
    lua_closethread(co, L);
#else
    lua_resetthread(co);
#endif
  }
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

/* coroutine.close, but not of a coroutine that a limit stopped. Upvalue 1: Lua's. */
static int safe_close(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  if (co && mend_limits_stopped(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "the coroutine was stopped by a limit of the sandbox");
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
  luaL_checkoption(L, 1, "collect", allowed);
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
    "type", "getmetatable", "print", "_VERSION", NULL};
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
  copy_library(L, env, "utf8", NULL);
  copy_library(L, env, "coroutine", NULL);
  lua_getfield(L, env, "coroutine");
  lua_pushcfunction(L, safe_wrap);
  lua_setfield(L, -2, "wrap");
  lua_getfield(L, -1, "close");
  lua_pushcclosure(L, safe_close, 1);
  lua_setfield(L, -2, "close");
  lua_pop(L, 1);
  lua_pushcfunction(L, safe_xpcall);
  lua_setfield(L, env, "xpcall");
  copy_library(L, env, "os", os_names);
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
