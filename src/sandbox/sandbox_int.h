/*
 * sandbox_int: the insides of the sandbox, shared by its files (src/sandbox.c and
 * src/sandbox/) and by nothing else: the functions one sandbox file takes from another (named
 * mend__sandbox_*). Everything outside the sandbox goes through sandbox.h.
 */
#ifndef MEND_SANDBOX_INT_H
#define MEND_SANDBOX_INT_H

#include <lua.h>

#include "sandbox.h"

/* ---- pattern.c: the bounded pattern functions */
void mend__sandbox_bound_patterns(lua_State *L);

/* ---- bounded.c: C functions of bounded cost, as a sandbox's environment hands them out
 * (upvalue 1: the library's own function) */
int mend__sandbox_bounded_date(lua_State *L);
int mend__sandbox_bounded_decode(lua_State *L);
int mend__sandbox_charged_encode(lua_State *L);
int mend__sandbox_charged_strings(lua_State *L);
int mend__sandbox_charged_time(lua_State *L);
int mend__sandbox_charged_tostring(lua_State *L);
int mend__sandbox_charged_tostrings(lua_State *L);   /* upvalue 2: the function's name */

#endif
