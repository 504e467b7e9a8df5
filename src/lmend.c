/*
 * lmend: the `mend.core` Lua module (see lmend.h): its table of functions, typed errors
 * ("mend.error" tables), the waits a step makes (mend.sleep, mend.exec, mend.http, mend.call),
 * and the CLI's few helpers (listdir, copy, isatty, a stop heard while files load). Engines as
 * userdata are lengine.c's, behind lmend_int.h.
 *
 * Must never: reach the engine's insides (engine.h only); yield but from a step's coroutine.
 */
#include "lmend.h"
#include "lmend_int.h"

#include <dirent.h>
#include <errno.h>
#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "guard.h"
#include "json.h"
#include "log.h"
#include "mend.h"
#include "timers.h"

#include "lmend_int.h"

/* ---------------------------------------------------------------- errors */

/* The message argument as text; called last, since luaL_tolstring pushes. */
static const char *error_message(lua_State *L) {
  if (lua_isnoneornil(L, 1)) return "";
  return luaL_tolstring(L, 1, NULL);
}

/* Raises unless every key of the options table at idx is `only`: a misspelt option would
 * otherwise be dropped without a word (a service's retry_after advice, a severity). */
static void only_option(lua_State *L, int idx, const char *only) {
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), only) == 0) continue;
    const char *key = luaL_tolstring(L, -1, NULL);
    luaL_argerror(L, idx, lua_pushfstring(L, "%s is not an option: %s is the only one", key, only));
  }
}

/* mend.retryable(msg [, {retry_after = s}]) -> error  [-0, +1, e] */
static int l_retryable(lua_State *L) {
  double retry_after = -1;
  if (lua_istable(L, 2)) {
    only_option(L, 2, "retry_after");
    lua_getfield(L, 2, "retry_after");
    if (!lua_isnil(L, -1)) {
      /* written !(x >= 0) so that NaN is refused too */
      if (!lua_isnumber(L, -1) || !(lua_tonumber(L, -1) >= 0))
        return luaL_argerror(L, 2, "retry_after must be a number >= 0");
      retry_after = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
  } else if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  mend_lua_push_error(L, MEND_ERR_RETRYABLE, error_message(L), retry_after, 0);
  return 1;
}

/* mend.fatal(msg) -> error  [-0, +1, -] */
static int l_fatal(lua_State *L) {
  mend_lua_push_error(L, MEND_ERR_FATAL, error_message(L), -1, 0);
  return 1;
}

/* mend.compensable(msg [, {severity = 1|2|3}]) -> error  [-0, +1, e] */
static int l_compensable(lua_State *L) {
  int severity = 1;
  if (lua_istable(L, 2)) {
    only_option(L, 2, "severity");
    lua_getfield(L, 2, "severity");
    if (!lua_isnil(L, -1)) {
      lua_Integer s = lua_tointeger(L, -1);
      if (s < 1 || s > 3) return luaL_argerror(L, 2, "severity must be 1, 2 or 3");
      severity = (int)s;
    }
    lua_pop(L, 1);
  } else if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  mend_lua_push_error(L, MEND_ERR_COMPENSABLE, error_message(L), -1, severity);
  return 1;
}

/* mend.is_error(v) -> kind | nil  [-0, +1, -] */
static int l_is_error(lua_State *L) {
  mend_error_info info;
  if (!mend_lua_read_error(L, 1, &info)) { lua_pushnil(L); return 1; }
  lua_pushstring(L, mend_error_kind_name(info.kind));
  return 1;
}

/* ---------------------------------------------------------------- waits */

/* mend.sleep(seconds): yields the step until the engine clock has moved on.  [-1, +0, e] */
static int l_sleep(lua_State *L) {
  double s = luaL_checknumber(L, 1);
  char err[200];
  if (mend_engine_sleep(L, s, err, sizeof err)) return luaL_error(L, "mend.sleep: %s", err);
  return lua_yield(L, 0);
}

/* mend.exec{prog, args..., stdin=, cwd=, env=} -> {status, signal, stdout, stderr}  [-1, +1, e] */
static int l_exec(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  char err[300];
  if (mend_engine_exec(L, err, sizeof err)) return luaL_error(L, "mend.exec: %s", err);
  return lua_yield(L, 0);
}

/* mend.http{url=, method=, headers=, body= | json=, ...} -> {status, headers, body, json}, or
 * raises the mend error its outcome maps to (engine/http.c).  [-1, +1, e] */
static int http_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  if (!lua_toboolean(L, -2)) return lua_error(L);
  return 1;
}

static int l_http(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  char err[600], msg[640];
  if (mend_engine_http(L, err, sizeof err)) {
    snprintf(msg, sizeof msg, "mend.http: %s", err);
    mend_lua_push_error(L, MEND_ERR_FATAL, msg, -1, 0);
    return lua_error(L);
  }
  return lua_yieldk(L, 0, 0, http_k);
}

/* mend.core._call(name, ...) -> true, value | false, error: a host function's answer, at once
 * or after the step yielded (lua/mend/init.lua raises the error).  [-n, +2, e] */
static int l_call(lua_State *L) {
  const char *name = mend__check_text(L, 1, "mend.call", "the host function's name");
  char err[400];
  int rc = mend_engine_host_call(L, name, 2, err, sizeof err);
  if (rc < 0) {
    /* Level 2: the workflow's line that called mend.call, not mend.call's own wrapper (Lua in
     * lua/mend/init.lua, or the sandbox's). */
    luaL_where(L, 2);
    lua_pushfstring(L, "mend.call: %s", err);
    lua_concat(L, 2);
    return lua_error(L);
  }
  if (rc == 1) return 2;
  return lua_yield(L, 0);
}

/* mend.listdir(path) -> {names} (without . and ..), {name = true for each regular file (a
 * symbolic link to one too)}, or raises naming the path. The second lets a caller pass over a
 * named pipe, whose opening blocks until a writer comes.  [-0, +2, e] */
static int l_listdir(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  DIR *d = opendir(path);
  if (!d) return luaL_error(L, "%s: %s", path, strerror(errno));
  lua_newtable(L);
  lua_newtable(L);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    lua_pushstring(L, e->d_name);
    lua_rawseti(L, -3, ++n);
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode)) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, e->d_name);
    }
  }
  closedir(d);
  return 2;
}

/* mend.copy(from, to) -> {table = rows copied} (mend copy: store.h, mend_store_copy), or
 * raises with the reason.  [-0, +1, e] */
static int l_copy(lua_State *L) {
  char err[512] = "";
  const char *from = mend__check_text(L, 1, "mend.copy", "the database to copy");
  const char *to = mend__check_text(L, 2, "mend.copy", "the database to copy to");
  json_t *counts = mend_store_copy(from, to, err, (int)sizeof err);
  if (!counts) {
    lua_pushstring(L, err);
    return lua_error(L);
  }
  mend_json_push(L, counts);
  json_decref(counts);
  return 1;
}

/* mend.upgrade_db(path [, {despite_leases = true}]) -> "upgraded" | "current" (mend db
 * upgrade: store.h, mend_store_upgrade_run_keys), or raises with the reason (a worker's lease
 * lasts, or the file could not be changed: it is as it was).  [-0, +1, e] */
static int l_upgrade_db(lua_State *L) {
  const char *path = mend__check_text(L, 1, "mend.upgrade_db", "the database");
  int despite = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const known[] = {"despite_leases", NULL};
    mend__opts_known(L, 2, "upgrade_db", known);
    despite = lua_getfield(L, 2, "despite_leases") != LUA_TNIL && lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  char err[1024] = "";
  mend_run_keys_outcome r = mend_store_upgrade_run_keys(path, despite, err, (int)sizeof err);
  if (r == MEND_RUN_KEYS_HELD || r == MEND_RUN_KEYS_FAILED) {
    lua_pushstring(L, err);
    return lua_error(L);
  }
  lua_pushstring(L, r == MEND_RUN_KEYS_UPGRADED ? "upgraded" : "current");
  return 1;
}

/* mend.trust_db(path) -> "cleared" | "unmarked" (mend db trust): clears the database's sandbox
 * mark (store.h: sandbox_mark), the host's decision that its workflows' code is trusted again:
 * engines that open it after this run that code unsandboxed unless told sandbox. Engines open
 * now keep what they are. Raises with the store's reason. Never in a sandbox (sandbox.c's
 * allow-list).  [-0, +1, e] */
static int l_trust_db(lua_State *L) {
  const char *path = mend__check_text(L, 1, "mend.trust_db", "the database");
  char err[1024];
  mend_trust_outcome r = mend_store_trust(path, err, (int)sizeof err);
  if (r == MEND_TRUST_NO_DATABASE) return luaL_error(L, "mend.trust_db: %s", err);
  if (r == MEND_TRUST_FAILED) {
    lua_pushstring(L, err);
    return lua_error(L);
  }
  lua_pushstring(L, r == MEND_TRUST_CLEARED ? "cleared" : "unmarked");
  return 1;
}

/* mend.db_where(name) -> "file", path | "memory" | "postgres": where the database a name opens
 * is, read as its backend reads it (storage.c: mend_store_where): a "file:" URI's file with
 * its escapes decoded, "postgres_x.db" a file. For the CLI's checks before it opens a name.
 * [-0, +2, e] */
static int l_db_where(lua_State *L) {
  const char *name = mend__check_text(L, 1, "mend.db_where", "the database");
  char file[4096];
  mend_db_kind kind = mend_store_where(name, file, sizeof file);
  if (kind == MEND_DB_FILE) {
    lua_pushliteral(L, "file");
    lua_pushstring(L, file);
    return 2;
  }
  lua_pushstring(L, kind == MEND_DB_POSTGRES ? "postgres" : "memory");
  return 1;
}

/* mend.db_mark(name) -> "marked" | "unmarked" | "none": the database's sandbox mark, looked at
 * without making a database or mend's schema ("none": no mend database there); raises with the
 * store's reason. Never in a sandbox (sandbox.c's allow-list). [-0, +1, e] */
static int l_db_mark(lua_State *L) {
  const char *name = mend__check_text(L, 1, "mend.db_mark", "the database");
  char err[1024] = "";
  mend_mark_look r = mend_store_mark_look(name, err, (int)sizeof err);
  if (r == MEND_MARK_FAILED) {
    lua_pushstring(L, err);
    return lua_error(L);
  }
  lua_pushstring(L, r == MEND_MARK_ON ? "marked" : r == MEND_MARK_OFF ? "unmarked" : "none");
  return 1;
}

/* mend.core._hear_stop(on) -> "SIGINT" | "SIGTERM" | nil: a worker hears a stop while its
 * workflow files load (guard.h: mend_limits_hear_stop); nil: none heard yet.  [-0, +1, -] */
static int l_hear_stop(lua_State *L) {
  int heard = lua_isnoneornil(L, 1) ? mend_limits_stop_heard()
                                    : mend_limits_hear_stop(lua_toboolean(L, 1));
  if (heard) lua_pushstring(L, heard == SIGINT ? "SIGINT" : "SIGTERM");
  else lua_pushnil(L);
  return 1;
}

/* mend.isatty(fd) for the CLI's choice of output.  [-0, +1, -] */
static int l_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_optinteger(L, 1, 1)));
  return 1;
}

int mend_lua_open(lua_State *L) {
  static const luaL_Reg funcs[] = {{"retryable", l_retryable},
                                   {"fatal", l_fatal},
                                   {"compensable", l_compensable},
                                   {"is_error", l_is_error},
                                   {"sleep", l_sleep},
                                   {"exec", l_exec},
                                   {"http", l_http},
                                   {"engine", mend__lengine_new},
                                   {"isatty", l_isatty},
                                   {"listdir", l_listdir},
                                   {"copy", l_copy},
                                   {"upgrade_db", l_upgrade_db},
                                   {"trust_db", l_trust_db},
                                   {"db_where", l_db_where},
                                   {"db_mark", l_db_mark},
                                   {"_call", l_call},
                                   {"_hear_stop", l_hear_stop},
                                   {NULL, NULL}};
  mend_lerror_open(L);
  mend__lengine_open(L);
  luaL_newlib(L, funcs);
  { int mend_repl_open(lua_State *L); mend_repl_open(L); lua_setfield(L, -2, "readline"); }
  mend_json_open(L);
  lua_setfield(L, -2, "json");
  lua_pushstring(L, MEND_VERSION_STRING);
  lua_setfield(L, -2, "version");
  lua_pushinteger(L, MEND_HISTORY_PAGE_MAX);
  lua_setfield(L, -2, "history_page_max");
  lua_pushinteger(L, MEND_HISTORY_PAGE);
  lua_setfield(L, -2, "history_page");
  return 1;
}
