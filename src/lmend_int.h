/*
 * lmend_int: the insides of the mend.core module, shared by lmend.c and lengine.c and by
 * nothing else. Everything outside the binding goes through lmend.h. Must never: be
 * included outside those two files.
 */
#ifndef MEND_LMEND_INT_H
#define MEND_LMEND_INT_H

#include <lua.h>

#include "lmend.h"

/* ---- lengine.c: engines as userdata */
/* mend.engine{...} -> engine  [-1, +1, e] */
int mend__lengine_new(lua_State *L);
/* Registers the metatable of engines ("mend.engine").  [-0, +0, m] */
void mend__lengine_open(lua_State *L);

#endif
