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
/* Holds an encoding to the limits of the code it encodes for: told how many values and bytes
 * of strings and keys it has gone through so far, every METER_EVERY values (json.c), before a
 * long string is copied, and before the text is printed (the totals doubled: printing goes
 * through them all again); nonzero stops it, and it fails with err saying the limits of the
 * call stopped it. */
typedef int (*mend_json_meter)(void *ud, long values, size_t bytes);
/* The deepest nesting of a value (an input, a payload, a result) mend encodes from Lua: a
 * value from outside nested deeper could reach a step but never leave it. */
#define MEND_JSON_MAX_DEPTH 100
/* What encoding costs against one Lua instruction (some 6 ns): a value 100 (jansson allocates
 * it, then prints it: 0.9 us a value on a loaded machine), a byte of a string or a key 1. */
#define MEND_JSON_VALUE_COST 100.0
#define MEND_JSON_BYTE_COST 1.0
/* mend_json_encode under a meter (NULL: none). */
char *mend_json_encode_metered(lua_State *L, int idx, const char *what, char *err, int errlen,
                               mend_json_meter meter, void *ud);
/* Pushes the Lua form of doc, as mend_json_decode of its text would; 0, or -1 with err set and
 * nothing pushed (out of memory). */
int mend_json_push_doc(lua_State *L, const json_t *doc, char *err, int errlen);
/* Parses JSON text: any value at the top, `flags` added to jansson's. Text handed to mend from
 * outside (a run's input, an event's payload, a token's or a host call's result, through the C
 * API or the command line) is read with JSON_REJECT_DUPLICATES, as the HTTP API reads its
 * bodies: of a key given twice, which was meant is not known. Text mend stored, and text a
 * workflow decodes (a service's answer), is read as most JSON readers do, the last key winning:
 * a row must load as it was written. NULL with err set ("line 1 column 10: duplicate object
 * key near '\"a\"'") on failure. */
json_t *mend_json_load(const char *text, size_t len, size_t flags, char *err, int errlen);
/* 1 and err ("line L column C: the integer N is past 64 bits (...): send it as a string, "N"")
 * when je, jansson's error of reading text, is an integer too big for it; 0 otherwise. */
int mend_json_too_big(const char *text, size_t len, const json_error_t *je, char *err,
                      int errlen);
/* v as compact text, its keys in order, each real in the fewest digits from 15 up that give back
 * every real of v, as the engine writes a Lua value (jansson alone writes 0.1 as
 * 0.10000000000000001). NULL: out of memory. */
char *mend_json_dumps(const json_t *v);
/* The deepest nesting of v: 0 for a scalar, 1 for an array or object of scalars, counted as
 * the encoder counts it; past `bound` it stops counting and gives bound + 1. */
int mend_json_depth(const json_t *v, int bound);
/* Text handed to mend from outside (a run's input, an event's payload, a token's or a host
 * call's result, through the C API): mend_json_load with JSON_REJECT_DUPLICATES, refusing too a
 * value nested deeper than MEND_JSON_MAX_DEPTH, which a step could neither return nor encode.
 * NULL with err set, `what` ("the event's payload") in front, or jansson's message alone when
 * what is NULL. */
json_t *mend_json_load_in(const char *text, size_t len, size_t flags, const char *what,
                          char *err, int errlen);
/* Decodes text (a key given twice: the last) and pushes it; returns 0, or -1 with err set
 * ("line 1 column 5: ...") and nothing pushed. */
int mend_json_decode(lua_State *L, const char *text, size_t len, char *err, int errlen);
/* The same for text handed in from outside: a key given twice is refused. */
int mend_json_decode_in(lua_State *L, const char *text, size_t len, char *err, int errlen);

/* A table whose metatable holds a C function at this key (lua_rawsetp) is not complete until
 * the function is called with it: the encoding calls it (fields made on first use, such as a
 * mend.http response's headers) before reading the table raw. */
extern const char mend_json_fill_key;
#define MEND_JSON_FILL ((const void *)&mend_json_fill_key)

/* Lua module table for mend.json: encode, decode, null. [-0, +1, m] */
int mend_json_open(lua_State *L);

#endif
