/*
 * threads: the coroutines of steps' attempts in a Lua state, each with the run it is an attempt
 * of, shared by every engine of the state (the registry's "mend.threads"). A coroutine listed
 * is kept alive (anchored in an array by a slot number) until it is taken out; which run it
 * belongs to is found in a hash of C pointers. Not a Lua table keyed by the coroutine: each
 * attempt would add a key and leave a dead one, and Lua rehashes such a table every twenty
 * attempts or so (W9: 0.6k instructions an attempt). Must never: be read or written but
 * through these functions; keep a coroutine past mend_threads_remove.
 */
#ifndef MEND_THREADS_H
#define MEND_THREADS_H

#include <lua.h>

/* The state's list, made if there is none yet (on L's registry). [-0, +0, m] */
void mend_threads_open(lua_State *L);
/* co (at the top of L's stack, left there) listed as run's attempt. [-0, +0, m] */
void mend_threads_add(lua_State *L, lua_State *co, void *run);
/* The run co is an attempt of, or NULL: not listed (or the state has no list). [-0, +0, -] */
void *mend_threads_find(lua_State *L, lua_State *co);
/* co taken out, or the coroutine listed for run when co is NULL; no longer kept. [-0, +0, -] */
void mend_threads_remove(lua_State *L, lua_State *co, void *run);
/* Whether fn(co, ud) is true of some listed coroutine. [-0, +0, -] */
int mend_threads_any(lua_State *L, int (*fn)(lua_State *co, void *ud), void *ud);

#endif
