/*
 * serve: mend's HTTP API (`mend serve`, `mend worker --listen`), as seen from outside the
 * module: the Lua binding that the mend program opens. Must never be linked into libmend: a
 * host embedding mend does not carry an HTTP server it did not ask for.
 */
#ifndef MEND_SERVE_H
#define MEND_SERVE_H

#include <lua.h>

/* Opens mend.serve (pushes the module table): listen(engine, opts) -> server. */
int mend_serve_lua_open(lua_State *L);

#endif
