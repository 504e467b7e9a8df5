/*
 * fuzz_json: libFuzzer target for the JSON decoder (mend_json_decode, src/json.c).
 *
 * Any byte string is decoded into a fresh Lua state whose allocator refuses past 64 MiB. What
 * decodes must survive the trip back: encoded again (when the encoder accepts it: it refuses
 * nesting deeper than 100), that text must decode to an equal value, integers staying
 * integers, and the document the text was printed from must push that same value (the
 * engine's shortcut, mend_json_push_doc). A difference aborts, so that libFuzzer keeps the
 * input. Never writes anything but its Lua state; built only with MEND_FUZZ (see
 * tests/fuzz/README.md).
 */
#include "json.h"

#include <lauxlib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEM_LIMIT ((size_t)64 << 20)

static size_t mem_used;

/* Lua's allocator with a ceiling: a decoded document cannot take the fuzzer's memory. */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    mem_used -= old;
    return NULL;
  }
  if (nsize > old && mem_used + (nsize - old) > MEM_LIMIT) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) mem_used = mem_used - old + nsize;
  return p;
}

/* 1 when the values at a and b are the same JSON value as mend maps it. */
static int same(lua_State *L, int a, int b) {
  a = lua_absindex(L, a);
  b = lua_absindex(L, b);
  int t = lua_type(L, a);
  if (t != lua_type(L, b)) return 0;
  switch (t) {
  case LUA_TNUMBER:
    if (lua_isinteger(L, a) != lua_isinteger(L, b)) return 0;
    return lua_rawequal(L, a, b);
  case LUA_TTABLE: {
    luaL_checkstack(L, 4, "fuzz_json: nested too deeply");
    lua_Integer na = 0, nb = 0;
    lua_pushnil(L);
    while (lua_next(L, a)) {
      na++;
      lua_pushvalue(L, -2);
      lua_rawget(L, b);
      int eq = same(L, -2, -1);
      lua_pop(L, 2);
      if (!eq) {
        lua_pop(L, 1);
        return 0;
      }
    }
    lua_pushnil(L);
    while (lua_next(L, b)) {
      nb++;
      lua_pop(L, 1);
    }
    return na == nb;
  }
  default:
    return lua_rawequal(L, a, b);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lua_State *L = lua_newstate(capped_alloc, NULL);
  if (!L) return 0;
  char err[512];
  if (mend_json_decode(L, (const char *)data, size, err, sizeof err) == 0) {
    json_t *doc = NULL;
    char *text = mend_json_encode_doc(L, -1, "value", err, sizeof err, &doc);
    if (text) {
      if (mend_json_decode(L, text, strlen(text), err, sizeof err) == 0) {
        if (!same(L, -2, -1)) {
          fprintf(stderr, "fuzz_json: the value changed on its way back through %s\n", text);
          abort();
        }
        if (doc && mend_json_push_doc(L, doc, err, sizeof err) == 0 && !same(L, -2, -1)) {
          fprintf(stderr, "fuzz_json: the document of %s pushes another value\n", text);
          abort();
        }
      } else if (!strstr(err, "not enough memory")) {
        fprintf(stderr, "fuzz_json: mend's own text does not decode: %s\n%s\n", err, text);
        abort();
      }
      free(text);
    }
    json_decref(doc);
  }
  lua_close(L);
  return 0;
}
