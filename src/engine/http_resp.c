/*
 * http_resp: the table a step gets back from mend.http, { status, headers, body, json }, and
 * the reading of an answer's header lines. Only status and body are put in the table when the
 * answer comes; headers (a table by lower-case name) and json (the body decoded, when the
 * Content-Type says JSON) are made the first time the step reads them, from a copy of the
 * header lines and the body that the table's record keeps: most steps read neither, and making
 * both for every answer was most of what an answer cost the loop. The record sits in a
 * weak-keyed table of the state's registry, so it goes with the response. Once both fields are
 * made (or set by the step), the metatable is taken off and the table is a plain one.
 * Must never: let a step reach the shared metatable (getmetatable answers false, setmetatable
 * refuses, until both fields are made); let the step see a difference through indexing,
 * assignment, pairs or the JSON encoding of the table (a step's result, mend.json.encode:
 * json.c fills the table through MEND_JSON_FILL before reading it); decode the body the step
 * did not get; keep anything of the request's buffers, which the next request reuses.
 */
#include "http_int.h"

#include <ctype.h>
#include <lauxlib.h>
#include <string.h>

#include "json.h"
#include "lweak.h"

/* Registry keys: the responses' shared metatable, the weak table of their records, and the
 * metatable of a parsed body's box. */
static const char mt_key = 0, records_key = 0, box_key = 0;

/* What a response keeps to make its headers and json: the header lines (the block curl gave,
 * to its first NUL) and, as its user value, the body as the step got it. */
typedef struct resp_rec {
  unsigned char headers_done, json_done;   /* made, or set by the step: never made again */
  size_t hlen;
  char hdr[];
} resp_rec;

/* The next header line of [*p, end): its name and value, as the header table has them (the
 * status lines and lines without a colon skipped; a line's CR dropped; the value without its
 * leading blanks). 0 at the end. */
int mend__http_header_next(const char **p, const char *end, const char **name, size_t *nlen,
                           const char **value, size_t *vlen) {
  while (*p < end) {
    const char *line = *p;
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    const char *stop = eol ? eol : end;
    *p = eol ? eol + 1 : end;
    if (stop > line && stop[-1] == '\r') stop--;
    if (stop - line >= 5 && memcmp(line, "HTTP/", 5) == 0) continue;
    const char *colon = memchr(line, ':', (size_t)(stop - line));
    if (!colon) continue;
    const char *v = colon + 1;
    while (v < stop && (*v == ' ' || *v == '\t')) v++;
    *name = line;
    *nlen = (size_t)(colon - line);
    *value = v;
    *vlen = (size_t)(stop - v);
    return 1;
  }
  return 0;
}

/* Whether a header's name is `lower` (lower-case), as the table's lower-cased name would be. */
int mend__http_header_is(const char *name, size_t nlen, const char *lower) {
  size_t n = strlen(lower);
  if (nlen != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (tolower((unsigned char)name[i]) != lower[i]) return 0;
  return 1;
}

static int contains(const char *s, size_t n, const char *word) {
  size_t w = strlen(word);
  for (size_t i = 0; i + w <= n; i++)
    if (memcmp(s + i, word, w) == 0) return 1;
  return 0;
}

/* Pushes the headers as a table of lower-case names; a repeated one is joined with ", ".
 * Lower-cases the names in the record's copy, which nothing reads case-sensitively. */
static void push_headers(lua_State *L, resp_rec *rec) {
  char *end = rec->hdr + rec->hlen;
  int lines = 0;   /* sized once: grown from empty, the table was rehashed at each power of 2 */
  for (const char *p = rec->hdr; (p = memchr(p, '\n', (size_t)(end - p))); p++) lines++;
  lua_createtable(L, 0, lines);
  const char *p = rec->hdr, *name, *value;
  size_t nlen, vlen;
  while (mend__http_header_next(&p, end, &name, &nlen, &value, &vlen)) {
    for (char *c = (char *)name; c < name + nlen; c++) *c = (char)tolower((unsigned char)*c);
    lua_pushlstring(L, name, nlen);   /* stack: headers, name */
    lua_pushvalue(L, -1);
    if (lua_rawget(L, -3) == LUA_TSTRING) {
      lua_pushliteral(L, ", ");
      lua_pushlstring(L, value, vlen);
      lua_concat(L, 3);
    } else {
      lua_pop(L, 1);
      lua_pushlstring(L, value, vlen);
    }
    lua_rawset(L, -3);
  }
}

/* A parsed body held by a userdata while its Lua value is made, so that a memory error
 * (the step's limit) raised from the making still frees it, through the box's __gc. */
static int box_gc(lua_State *L) {
  json_t **box = lua_touserdata(L, 1);
  if (*box) json_decref(*box);
  *box = NULL;
  return 0;
}

static json_t **push_box(lua_State *L) {
  json_t **box = lua_newuserdatauv(L, sizeof *box, 0);
  *box = NULL;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &box_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &box_key);
  }
  lua_setmetatable(L, -2);
  return box;
}

/* Pushes the body decoded when a Content-Type says JSON and the body is not empty; nil when
 * it does not, or is not JSON. A memory error while the value is made (the step's limit) is
 * raised as one: it is not a body without json. The record is at rec_idx. */
static void push_json(lua_State *L, resp_rec *rec, int rec_idx) {
  const char *p = rec->hdr, *end = rec->hdr + rec->hlen, *name, *value;
  size_t nlen, vlen;
  int is_json = 0;
  while (!is_json && mend__http_header_next(&p, end, &name, &nlen, &value, &vlen))
    is_json = mend__http_header_is(name, nlen, "content-type") && contains(value, vlen, "json");
  lua_getiuservalue(L, rec_idx, 1);
  size_t len;
  const char *body = lua_tolstring(L, -1, &len);
  if (!is_json || !len) {
    lua_pop(L, 1);
    lua_pushnil(L);
    return;
  }
  json_t **box = push_box(L);   /* stack: body, box */
  json_error_t je;
  *box = json_loadb(body, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  if (!*box) {
    lua_pop(L, 2);
    lua_pushnil(L);
    return;
  }
  mend_json_push(L, *box);      /* stack: body, box, value */
  json_decref(*box);
  *box = NULL;
  lua_replace(L, -3);
  lua_pop(L, 1);
}

/* The record of the response at idx, pushed; NULL (and nil pushed) for a table that is not a
 * response (the metatable taken to another table). */
static resp_rec *push_record(lua_State *L, int idx) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &records_key);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  lua_remove(L, -2);
  return lua_touserdata(L, -1);
}

/* Takes the metatable off once nothing is left to make: the table is then as plain as any. */
static void settle(lua_State *L, int idx, resp_rec *rec) {
  if (!rec->headers_done || !rec->json_done) return;
  lua_pushnil(L);
  lua_setmetatable(L, idx);
}

/* Makes the field `headers` (which 1) or `json` (0) of the response at idx, pushes it and sets
 * it in the table. The record is at rec_idx. */
static void make(lua_State *L, int idx, resp_rec *rec, int rec_idx, int which) {
  if (which) push_headers(L, rec);
  else push_json(L, rec, rec_idx);
  /* raw: the key is absent, __newindex would run */
  lua_pushstring(L, which ? "headers" : "json");
  lua_pushvalue(L, -2);
  lua_rawset(L, idx);   /* may grow the table: a memory error here leaves the field to make */
  if (which) rec->headers_done = 1;
  else rec->json_done = 1;
}

/* 1 for "headers", 0 for "json", -1 for any other key. */
static int lazy_field(lua_State *L, int k) {
  if (lua_type(L, k) != LUA_TSTRING) return -1;
  const char *s = lua_tostring(L, k);
  return strcmp(s, "headers") == 0 ? 1 : strcmp(s, "json") == 0 ? 0 : -1;
}

/* Makes whatever is left and takes the metatable off. [-0, +0, m] */
static int fill(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  resp_rec *rec = push_record(L, 1);
  if (!rec) return 0;
  for (int which = 1; which >= 0; which--) {
    if (which ? rec->headers_done : rec->json_done) continue;
    lua_pushstring(L, which ? "headers" : "json");
    if (lua_rawget(L, 1) != LUA_TNIL) {   /* the step's own value (rawset) stands */
      if (which) rec->headers_done = 1;
      else rec->json_done = 1;
    } else {
      make(L, 1, rec, 2, which);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  settle(L, 1, rec);
  return 0;
}

/* resp.headers, resp.json the first time; nil for any other absent key, as for a plain table. */
static int resp_index(lua_State *L) {
  int which = lazy_field(L, 2);
  if (which < 0) return 0;
  resp_rec *rec = push_record(L, 1);   /* stack: t, k, record */
  if (!rec || (which ? rec->headers_done : rec->json_done)) return 0;   /* set to nil since */
  make(L, 1, rec, 3, which);
  settle(L, 1, rec);
  return 1;
}

/* resp.headers = v (or json) before it was read: the step's value stands, never made after. */
static int resp_newindex(lua_State *L) {
  int which = lazy_field(L, 2);
  lua_settop(L, 3);
  lua_rawset(L, 1);
  if (which < 0) return 0;
  resp_rec *rec = push_record(L, 1);
  if (!rec) return 0;
  if (which) rec->headers_done = 1;
  else rec->json_done = 1;
  settle(L, 1, rec);
  return 0;
}

/* next, as the base library's: the iterator pairs gives once the table is filled. */
static int resp_next(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  if (lua_next(L, 1)) return 2;
  lua_pushnil(L);
  return 1;
}

/* pairs(resp): every field, headers and json made first (plain tables walk raw). */
static int resp_pairs(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_pushcfunction(L, fill);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 0);
  lua_pushcfunction(L, resp_next);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* Pushes the metatable and the records' table, made at a state's first response.
 * stack: +2 */
static void push_shared(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &mt_key) == LUA_TTABLE) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &records_key);
    return;
  }
  lua_pop(L, 1);
  lua_createtable(L, 0, 5);
  lua_pushcfunction(L, resp_index);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, resp_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushcfunction(L, resp_pairs);
  lua_setfield(L, -2, "__pairs");
  lua_pushcfunction(L, fill);
  lua_rawsetp(L, -2, MEND_JSON_FILL);
  /* Shared by every response of the state, so out of a step's reach: one workflow must not
   * change what another's responses answer (a sandbox hides the string metatable alike). */
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &mt_key);
  mend_weak_table(L, &records_key);
}

void mend__http_push_response(lua_State *L, long status, const char *hdr, const char *body,
                              size_t len) {
  size_t hlen = hdr ? strlen(hdr) : 0;   /* the header table always stopped at a NUL */
  push_shared(L);                        /* stack: mt, records */
  lua_createtable(L, 0, 4);              /* room for all four fields: no rehash when made */
  lua_pushinteger(L, status);
  lua_setfield(L, -2, "status");
  lua_pushlstring(L, body ? body : "", len);
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "body");           /* stack: mt, records, resp, body */
  resp_rec *rec = lua_newuserdatauv(L, sizeof *rec + hlen, 1);
  rec->headers_done = rec->json_done = 0;
  rec->hlen = hlen;
  if (hlen) memcpy(rec->hdr, hdr, hlen);
  lua_insert(L, -2);
  lua_setiuservalue(L, -2, 1);           /* stack: mt, records, resp, record */
  lua_pushvalue(L, -2);
  lua_insert(L, -2);
  lua_rawset(L, -4);                     /* records[resp] = record */
  lua_rotate(L, -3, 1);                  /* stack: resp, mt, records */
  lua_pop(L, 1);
  lua_setmetatable(L, -2);
}
