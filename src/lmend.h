/*
 * lmend: the Lua face of mend (the `mend.core` module): typed errors, waits inside steps,
 * JSON, and engines as userdata. Owns the Lua stack discipline of everything Lua calls.
 * Must never: reach the engine's insides (engine.h only); be included by the engine.
 */
#ifndef MEND_LMEND_H
#define MEND_LMEND_H

#include <lua.h>

#include "lerror.h"

/* SIGPIPE made harmless for this process when it is at its default (a handler that does
 * nothing, not SIG_IGN, which a process started by io.popen or os.execute would inherit):
 * a write to a pipe whose reader went away then fails with EPIPE, which mend handles, instead
 * of killing the process without a word. A host's own handler or SIG_IGN is left as it is. */
void mend_lua_quiet_sigpipe(void);

/* Opens mend.core (pushes the module table) and registers its metatables. */
int mend_lua_open(lua_State *L);
/* The engine of the engine userdata at idx (raises if it is not one, or is closed). */
struct mend_engine;
struct mend_engine *mend_lua_engine(lua_State *L, int idx);
/* body(L) under the guard every method of the engine userdata at idx runs under (lengine.c),
 * for a face of mend that drives that engine outside its methods (server:run): body's result,
 * or -1 when a panic of the engine's own state jumped out of body, the engine broken (its
 * message: mend_engine_error), for the caller to raise once it let go of what body held.
 * Raises if the engine is closed or already broken. */
int mend_lua_engine_guarded(lua_State *L, int idx, lua_CFunction body);

#endif
