/*
 * sandbox: what workflow code may reach in an engine made with `sandbox = 1`. Owns the
 * environment each workflow file gets, built up from an allow-list (never the state's globals
 * with a few names removed), its `require`, and the changes a sandbox needs in what all of a
 * state's code shares: the string metatable, string.dump, and the C pattern matchers, whose
 * cost can grow faster than their input and that no count hook can interrupt.
 *
 * Must never: hand workflow code a way to a file, a process, the registry, a binary chunk,
 * another workflow's globals or a shared metatable; run workflow code itself (the engine does,
 * under its limits).
 */
#ifndef MEND_SANDBOX_H
#define MEND_SANDBOX_H

#include <lua.h>

/* The bound of the pattern functions of a sandbox: estimated steps of one call (README,
 * "Limits and sandbox"). */
#define MEND_SANDBOX_PATTERN_STEPS 2e7

/* Changes what every chunk of L shares so that a sandbox holds: removes string.dump, bounds
 * string.find/match/gmatch/gsub, hides the string metatable. Once, on a state the engine owns,
 * after its libraries are open. [-0, +0, m] */
void mend_sandbox_prepare(lua_State *L);

/* Pushes a new environment for one workflow file: the allowed globals, copies of the
 * allowed libraries (so that one workflow's changes are its own), `mend` as a step sees it,
 * and a `require` that finds "mend", "mend.sim" (from lua_dir) and the Lua modules in `dir`,
 * the workflow file's directory, loaded text-only into this same environment.
 * [-0, +1, m] */
void mend_sandbox_env(lua_State *L, const char *dir, const char *lua_dir);

#endif
