/*
 * json: Lua values <-> JSON, through jansson.
 *
 * Owns the mapping: nil/null, booleans, numbers (integers stay integers), strings, tables as
 * arrays (keys exactly 1..n, n >= 1) or objects (string keys); an empty table is an object.
 * mend.json.null (a light userdata NULL) stands for JSON null inside arrays and objects.
 * Refuses what JSON cannot say (functions, userdata, NaN and infinities, mixed or non-string
 * keys, cycles, depth beyond 100) with a message naming the path ("input.items[2]: cannot
 * encode a function"). Must never: encode such a value as something else; keep a Lua or
 * jansson value beyond one call.
 */
#ifndef MEND_JSON_H
#define MEND_JSON_H

#include <jansson.h>
#include <lua.h>

/* Lua value at idx -> new jansson value; NULL and a message in err on failure. `what` names
 * the root in messages ("result"). */
json_t *mend_json_from_lua(lua_State *L, int idx, const char *what, char *err, int errlen);
/* Pushes the Lua form of v (NULL pushes nil). [-0, +1, m] */
void mend_json_push(lua_State *L, const json_t *v);

/* Lua value at idx -> malloc'ed compact JSON text; NULL and err on failure. */
char *mend_json_encode(lua_State *L, int idx, const char *what, char *err, int errlen);
/* The same, also giving the jansson document the text was printed from (NULL for the texts of
 * nil and booleans, which are printed without one): what decoding the text would build, for
 * mend_json_push_doc. The caller json_decref()s it. */
char *mend_json_encode_doc(lua_State *L, int idx, const char *what, char *err, int errlen,
                           json_t **doc);
/* Pushes the Lua form of doc, as mend_json_decode of its text would; 0, or -1 with err set and
 * nothing pushed (out of memory). */
int mend_json_push_doc(lua_State *L, const json_t *doc, char *err, int errlen);
/* Decodes text and pushes it; returns 0, or -1 with err set ("line 1 column 5: ...") and
 * nothing pushed. Any JSON value is accepted at the top, not only objects and arrays. */
int mend_json_decode(lua_State *L, const char *text, size_t len, char *err, int errlen);

/* Lua module table for mend.json: encode, decode, null. [-0, +1, m] */
int mend_json_open(lua_State *L);

#endif
