/*
 * luadir: where mend's own Lua files (lua/mend/, what `require "mend"` loads) are, for an
 * engine or a `mend` command that was not told. Built twice: into the build tree's libmend
 * (the source tree's lua/) and into the installed libraries and executable (the install's
 * share/mend/lua, found relative to the binary first, so that a moved prefix still works).
 * Must never: override a directory the caller was told (mend_options.lua_path, MEND_LUA_DIR).
 */
#ifndef MEND_LUADIR_H
#define MEND_LUADIR_H

/* $MEND_LUA_DIR if set, else the directory this build of mend was made for. Never NULL; the
 * string is static. */
const char *mend_lua_dir_default(void);

#endif
