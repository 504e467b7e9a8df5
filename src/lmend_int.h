/*
 * lmend_int: the insides of the mend.core module, shared by lmend.c, lengine.c and
 * lengine_ops.c and by nothing else. Everything outside the binding goes through lmend.h.
 * Must never: be included outside those three files.
 */
#ifndef MEND_LMEND_INT_H
#define MEND_LMEND_INT_H

#include <lauxlib.h>
#include <lua.h>

#include "lmend.h"

/* ---- lengine.c: engines as userdata */
/* mend.engine{...} -> engine  [-1, +1, e] */
int mend__lengine_new(lua_State *L);
/* Registers the metatable of engines ("mend.engine").  [-0, +0, m] */
void mend__lengine_open(lua_State *L);
/* opts[field] as a string without a NUL byte, def when nil; raises "METHOD: FIELD ..." when it
 * is another value or holds one. The string stays anchored in the table.  [-0, +0, e] */
const char *mend__opt_string(lua_State *L, int idx, const char *method, const char *field,
                             const char *def);
/* Argument idx, a string without a NUL byte; raises "METHOD: WHAT holds a NUL byte ..."
 * otherwise.  [-0, +0, e] */
const char *mend__check_text(lua_State *L, int idx, const char *method, const char *what);
/* Raises "METHOD: unknown option F (it takes A, B)" for a key of the table at idx (when it is
 * one) that is not in known (NULL-terminated): a misspelt option must not be read as absent
 * (a run key dropped is a second run).  [-0, +0, e] */
void mend__opts_known(lua_State *L, int idx, const char *method, const char *const *known);
/* Raises the formatted message as it is, with no "file:line:" of the calling Lua code: for a
 * failure of the engine or its store (a full disk, a lock), which is not the caller's line and
 * which the mend command prints as its own error.  [-0, +0, v] */
int mend__fail(lua_State *L, const char *fmt, ...);
/* Raises, for a call another's lock held back, a table a caller tests without reading the
 * message: {code = "busy" (nothing recorded: send it again) or "deferred" (kept, committed
 * once the lock goes: do not send it again), run = the run's id or nil, message = `what: err`},
 * whose tostring is the message. Other failures stay strings. */
int mend__fail_lock(lua_State *L, const char *code, const char *run, const char *what,
                    const char *err);

/* ---- lengine_ops.c: the engine's methods for people (queries, wait, prune, repairs) */
extern const luaL_Reg mend__lengine_ops[];

#endif
