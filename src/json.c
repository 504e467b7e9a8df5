/*
 * json: Lua values <-> JSON through jansson. Owns the mapping between the two (which tables are
 * arrays, what stands for null, integers versus floats; a table whose metatable asks for it,
 * MEND_JSON_FILL, completed before it is read) and the refusal, with a path, of what JSON
 * cannot say. Never keeps Lua values or jansson values beyond one call, but for the weak set
 * of the empty tables decoded from `[]`, which it must never let workflow code reach.
 */
#include "json.h"
#include "lweak.h"

#include <ctype.h>
#include <lauxlib.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH MEND_JSON_MAX_DEPTH
/* Values one encoding may produce: a table shared by two branches is encoded twice, so a
 * small Lua value can stand for an exponential document, built outside any memory limit. */
#define MAX_VALUES (1L << 20)
/* Values between two calls of a meter, and the string from whose length on it is called
 * before the copy. */
#define METER_EVERY 4096
#define METER_BYTES ((size_t)64 << 10)

/* A step of the path to where the walk is: a key (valid while it is on the Lua stack), or an
 * array index when key is NULL. */
typedef struct path_seg {
  const char *key;
  size_t len;
  lua_Integer index;
} path_seg;

/* The walk from Lua to jansson: where we are (for messages) and which tables enclose us (for
 * cycles; a table shared by two branches is fine, one inside itself is not). The path is kept
 * as steps and spelled out only for a message: printing it at every key was two snprintf
 * calls a run's start in W1. */
typedef struct enc {
  lua_State *L;
  const char *what;
  path_seg segs[MAX_DEPTH + 1];
  int nsegs;
  const void *open[MAX_DEPTH + 1];
  int depth;
  int precision;   /* digits the reals seen so far need to read back exactly */
  long values;     /* produced so far */
  size_t bytes;    /* of strings and keys, so far */
  long next_meter; /* values at which the meter is called next */
  mend_json_meter meter;
  void *meter_ud;
  char *err;
  int errlen;
} enc;

/* Appends a path segment to buf (of `cap` bytes, `*len` used). A path too long for the buffer
 * ends in "..." rather than being cut mid-name without notice; 0 once it has. */
static int path_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  size_t room = cap - *len;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, room, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= room) {
    memcpy(buf + cap - 4, "...", 4);
    *len = cap - 1;
    return 0;
  }
  *len += (size_t)n;
  return 1;
}

static int is_identifier(const char *s, size_t n);

/* The path spelled out: `input.items[3]["a b"]`. Its length. */
static size_t path_text(const enc *e, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  int more = path_add(buf, cap, &len, "%s", e->what);
  for (int i = 0; more && i < e->nsegs; i++) {
    const path_seg *g = &e->segs[i];
    if (!g->key) more = path_add(buf, cap, &len, "[%lld]", (long long)g->index);
    else if (is_identifier(g->key, g->len))
      more = path_add(buf, cap, &len, ".%.*s", (int)g->len, g->key);
    else more = path_add(buf, cap, &len, "[\"%.*s\"]", (int)(g->len > 64 ? 64 : g->len), g->key);
  }
  return len;
}

static void fail(enc *e, const char *fmt, ...) {
  if (!e->err || e->errlen <= 0) return;
  char path[512];
  size_t plen = path_text(e, path, sizeof path);
  /* A deep path would crowd out the reason: keep its start and its end. */
  int n = plen > 160
            ? snprintf(e->err, (size_t)e->errlen, "%.60s...%s: ", path, path + plen - 90)
            : snprintf(e->err, (size_t)e->errlen, "%s: ", path);
  if (n < 0 || n >= e->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->err + n, (size_t)(e->errlen - n), fmt, ap);
  va_end(ap);
}

/* Enters a key or an index of the table being walked (the depth check keeps it in bounds). */
static void path_push(enc *e, const char *key, size_t len, lua_Integer index) {
  e->segs[e->nsegs++] = (path_seg){key, len, index};
}

static void path_pop(enc *e) { e->nsegs--; }

static int is_identifier(const char *s, size_t n) {
  if (n == 0 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
    return 0;
  for (size_t i = 1; i < n; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      return 0;
  }
  return 1;
}

static json_t *value(enc *e, int idx);

const char mend_json_fill_key = 0;

/* Completes the table at idx when its metatable asks to (MEND_JSON_FILL); 0, or -1 with the
 * error's text pushed. */
static int fill(lua_State *L, int idx) {
  if (!lua_getmetatable(L, idx)) return 0;
  if (lua_rawgetp(L, -1, MEND_JSON_FILL) != LUA_TFUNCTION) {
    lua_pop(L, 2);
    return 0;
  }
  lua_remove(L, -2);
  lua_pushvalue(L, idx);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) return -1;
  return 0;
}

/* jansson prints every real with one precision (17 digits by default, so 0.1 comes out as
 * 0.10000000000000001); the fewest digits from 15 up that give back the same double for every
 * real in the value keep the text short and exact. */
static int real_precision(double d, int so_far) {
  char buf[40];
  for (int p = so_far; p < 17; p++) {
    snprintf(buf, sizeof buf, "%.*g", p, d);
    if (strtod(buf, NULL) == d) return p;
  }
  return 17;
}

/* An empty Lua table cannot say whether it was [] or {}; the tables decoded from [] are kept in
 * a weak-keyed set in the registry (no metatable: workflow code could read or change one
 * shared by every run), so that a value read back is written as it came: a run's input
 * `{"items":[]}` is recorded so, not as `{"items":{}}`. */
static const char empty_arrays_key = 0;

/* Adds the table on top of the stack to the set.  [-0, +0, m] */
static void mark_empty_array(lua_State *L) {
  luaL_checkstack(L, 4, "JSON nested too deeply");
  mend_weak_table(L, &empty_arrays_key);
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

/* 1 if the (empty) table at idx was decoded from []. stack: unchanged */
static int is_empty_array(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (!lua_checkstack(L, 2)) return 0;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &empty_arrays_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushvalue(L, idx);
  int marked = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return marked;
}

/* Array if the keys are exactly 1..n (n >= 1), object if they are all strings; an empty table
 * is an object unless it was decoded from [] (above). Returns 1 array, 0 object, -1 refused.
 * stack: unchanged */
static int table_kind(enc *e, int idx, lua_Integer *n_out) {
  lua_State *L = e->L;
  lua_Integer count = 0, max = 0;
  int strings = 0, integers = 0;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {   /* stack: ..., key, value */
    lua_pop(L, 1);
    int kt = lua_type(L, -1);
    if (kt == LUA_TSTRING) {
      strings++;
    } else if (kt == LUA_TNUMBER && lua_isinteger(L, -1)) {
      lua_Integer k = lua_tointeger(L, -1);
      if (k < 1) {
        lua_pop(L, 1);
        fail(e, "cannot encode a table with integer key %lld (arrays start at 1)", (long long)k);
        return -1;
      }
      integers++;
      count++;
      if (k > max) max = k;
    } else {
      const char *tn = luaL_typename(L, -1);
      lua_pop(L, 1);
      fail(e, "cannot encode a table key of type %s", kt == LUA_TNUMBER ? "float" : tn);
      return -1;
    }
  }
  if (strings && integers) {
    fail(e, "cannot encode a table that mixes array and object keys");
    return -1;
  }
  if (integers && max != count) {
    fail(e, "cannot encode a sparse array (keys are not 1..%lld)", (long long)count);
    return -1;
  }
  *n_out = count;
  if (!integers && !strings) return is_empty_array(L, idx);
  return integers ? 1 : 0;
}

static json_t *table_value(enc *e, int idx) {
  lua_State *L = e->L;
  const void *self = lua_topointer(L, idx);
  for (int i = 0; i < e->depth; i++) {
    if (e->open[i] == self) {
      fail(e, "cannot encode a cycle (the table contains itself)");
      return NULL;
    }
  }
  if (e->depth >= MAX_DEPTH) {
    fail(e, "cannot encode nesting deeper than %d", MAX_DEPTH);
    return NULL;
  }
  if (!lua_checkstack(L, 4)) {
    fail(e, "Lua stack exhausted");
    return NULL;
  }
  if (fill(L, idx)) {
    fail(e, "cannot complete a table: %s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
    lua_pop(L, 1);
    return NULL;
  }
  lua_Integer n;
  int kind = table_kind(e, idx, &n);
  if (kind < 0) return NULL;
  e->open[e->depth++] = self;
  json_t *out = kind ? json_array() : json_object();
  if (!out) goto oom;
  if (kind) {
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, i);
      path_push(e, NULL, 0, i);
      json_t *v = value(e, lua_gettop(L));
      lua_pop(L, 1);
      if (!v) goto fail;
      path_pop(e);
      if (json_array_append_new(out, v) != 0) goto oom;
    }
  } else {
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {   /* stack: ..., key, value */
      size_t klen;
      /* The key is known to be a string, so lua_tolstring does not disturb lua_next. */
      const char *k = lua_tolstring(L, -2, &klen);
      e->bytes += klen;
      path_push(e, k, klen, 0);
      json_t *v = value(e, lua_gettop(L));
      if (!v) {
        lua_pop(L, 2);
        goto fail;
      }
      path_pop(e);
      if (memchr(k, '\0', klen) || json_object_setn_new(out, k, klen, v) != 0) {
        lua_pop(L, 2);
        fail(e, "cannot encode key \"%s\" (not valid UTF-8 or contains a NUL byte)", k);
        goto fail;
      }
      lua_pop(L, 1);
    }
  }
  e->depth--;
  return out;
oom:
  fail(e, "out of memory");
fail:
  e->depth--;
  json_decref(out);
  return NULL;
}

/* 1 when the meter stops the encoding (a message set). */
static int metered_stop(enc *e) {
  e->next_meter = e->values + METER_EVERY;
  if (!e->meter || !e->meter(e->meter_ud, e->values, e->bytes)) return 0;
  fail(e, "stopped by the limits of the call after %ld values", e->values);
  return 1;
}

static json_t *value(enc *e, int idx) {
  lua_State *L = e->L;
  json_t *v = NULL;
  if (++e->values > MAX_VALUES) {
    fail(e, "cannot encode more than %ld values (a table shared by several branches counts "
         "each time)", MAX_VALUES);
    return NULL;
  }
  if (e->values >= e->next_meter && metered_stop(e)) return NULL;
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    v = json_null();
    break;
  case LUA_TBOOLEAN:
    v = json_boolean(lua_toboolean(L, idx));
    break;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      v = json_integer((json_int_t)lua_tointeger(L, idx));
    } else {
      double d = lua_tonumber(L, idx);
      if (isnan(d)) {
        fail(e, "cannot encode NaN");
        return NULL;
      }
      if (isinf(d)) {
        fail(e, "cannot encode an infinity");
        return NULL;
      }
      v = json_real(d);
      e->precision = real_precision(d, e->precision);
    }
    break;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    /* jansson writes a control character as \uXXXX with a call to snprintf each, as dear as
     * a value (20 MiB of them: 4 s in one call): each counts as one. */
    long controls = 0;
    for (size_t i = 0; i < n; i++) controls += (unsigned char)s[i] < 0x20;
    if (controls && (e->values += controls) > MAX_VALUES) {
      fail(e, "cannot encode more than %ld values (a control character in a string, written "
           "as \\uXXXX, counts as one)", MAX_VALUES);
      return NULL;
    }
    e->bytes += n;
    if (n >= METER_BYTES && metered_stop(e)) return NULL;
    v = json_stringn(s, n);
    if (!v) {
      fail(e, "cannot encode a string that is not valid UTF-8");
      return NULL;
    }
    return v;
  }
  case LUA_TTABLE:
    return table_value(e, idx);
  case LUA_TLIGHTUSERDATA:
    if (lua_touserdata(L, idx) == NULL) {
      v = json_null();
      break;
    }
    fail(e, "cannot encode a light userdata");
    return NULL;
  default:
    fail(e, "cannot encode a %s", luaL_typename(L, idx));
    return NULL;
  }
  if (!v) fail(e, "out of memory");
  return v;
}

static json_t *from_lua(lua_State *L, int idx, const char *what, char *err, int errlen,
                         int *precision, mend_json_meter meter, void *ud) {
  enc e;
  e.L = L;
  e.depth = 0;
  e.values = 0;
  e.bytes = 0;
  e.next_meter = METER_EVERY;
  e.meter = meter;
  e.meter_ud = ud;
  e.precision = 15;
  e.err = err;
  e.errlen = errlen;
  e.what = what ? what : "value";
  e.nsegs = 0;
  json_t *v = value(&e, lua_absindex(L, idx));
  if (precision) *precision = e.precision;
  /* Printing the document goes through every value and byte again, in one call. */
  if (v && meter && meter(ud, 2 * e.values, 2 * e.bytes)) {
    fail(&e, "stopped by the limits of the call before printing %ld values", e.values);
    json_decref(v);
    v = NULL;
  }
  return v;
}

json_t *mend_json_from_lua(lua_State *L, int idx, const char *what, char *err, int errlen) {
  return from_lua(L, idx, what, err, errlen, NULL, NULL, NULL);
}

/* The text of a nil or a boolean, which most step results are ("return true"): no jansson
 * value built and printed for them (3k instructions a step in W1). NULL for any other. */
static const char *scalar_text(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
  case LUA_TNIL: return "null";
  case LUA_TBOOLEAN: return lua_toboolean(L, idx) ? "true" : "false";
  default: return NULL;
  }
}

/* What most values a run carries are: an integer, a short string of printable ASCII without a
 * quote or a backslash, and a table of a few such strings as keys to such values, booleans
 * and integers ({"i":1}, {"ok":true}). Their text is written here as jansson prints it, and
 * read back as jansson reads it, without building a jansson document (encoding {"i":1} and
 * pushing it back took 6.9k instructions a run's start in W1; W9 encodes its body too). */
#define QUICK_STRING_MAX 256
#define QUICK_KEYS 32

static int plain(const char *s, size_t n) {
  if (n > QUICK_STRING_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
      return 0;
  return 1;
}

/* The room a quick scalar's text takes (at most), its string's bytes added to *bytes; -1 for a
 * value that is not one. */
static long quick_room(lua_State *L, int idx, size_t *bytes) {
  switch (lua_type(L, idx)) {
  case LUA_TBOOLEAN: return 5;
  case LUA_TNUMBER: return lua_isinteger(L, idx) ? 20 : -1;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (!plain(s, n)) return -1;
    *bytes += n;
    return (long)n + 2;
  }
  default: return -1;
  }
}

/* Writes the quick scalar at idx at p; returns the end. */
static char *quick_put(char *p, lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) {
    const char *b = lua_toboolean(L, idx) ? "true" : "false";
    size_t n = strlen(b);
    memcpy(p, b, n);
    return p + n;
  }
  if (lua_type(L, idx) == LUA_TSTRING) {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    *p++ = '"';
    memcpy(p, s, n);
    p[n] = '"';
    return p + n + 1;
  }
  lua_Integer v = lua_tointeger(L, idx);
  char buf[24], *d = buf + sizeof buf;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do *--d = (char)('0' + u % 10); while (u /= 10);
  if (v < 0) *--d = '-';
  size_t n = (size_t)(buf + sizeof buf - d);
  memcpy(p, d, n);
  return p + n;
}

/* The quick text of the value at idx, charged to the meter as from_lua charges it; NULL for a
 * value that is not quick, and when the meter refuses (the full walk then meets the same
 * refusal and says so: the meters count deltas, and a limit that tripped stays tripped). */
static char *quick_text(lua_State *L, int idx, mend_json_meter meter, void *ud) {
  idx = lua_absindex(L, idx);
  int table = lua_type(L, idx) == LUA_TTABLE;
  size_t bytes = 0, room;
  long values = 1;
  if (table) {
    if (!lua_checkstack(L, 3)) return NULL;
    if (fill(L, idx)) {   /* the full walk meets the same failure and says so */
      lua_pop(L, 1);
      return NULL;
    }
    room = 3;
    lua_pushnil(L);
    while (lua_next(L, idx)) {   /* stack: ..., key, value */
      size_t klen = 0;
      const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &klen) : NULL;
      long r;
      if (!k || !plain(k, klen) || values > QUICK_KEYS || (r = quick_room(L, -1, &bytes)) < 0) {
        lua_pop(L, 2);
        return NULL;
      }
      values++;
      bytes += klen;
      room += klen + 4 + (size_t)r;
      lua_pop(L, 1);
    }
    if (values == 1 && is_empty_array(L, idx)) return NULL;   /* [], the full walk's */
  } else {
    long r = quick_room(L, idx, &bytes);
    if (r < 0) return NULL;
    room = (size_t)r + 1;
  }
  if (meter && meter(ud, 2 * values, 2 * bytes)) return NULL;
  char *text = malloc(room), *p = text;
  if (!text) return NULL;
  if (table) {
    *p++ = '{';
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      size_t klen;
      const char *k = lua_tolstring(L, -2, &klen);
      if (p > text + 1) *p++ = ',';
      *p++ = '"';
      memcpy(p, k, klen);
      p += klen;
      *p++ = '"';
      *p++ = ':';
      p = quick_put(p, L, -1);
      lua_pop(L, 1);
    }
    *p++ = '}';
  } else {
    p = quick_put(p, L, idx);
  }
  *p = '\0';
  return text;
}

char *mend_json_encode(lua_State *L, int idx, const char *what, char *err, int errlen) {
  return mend_json_encode_doc(L, idx, what, err, errlen, NULL);
}

/* sorted: an object's keys in byte order, for what people read (a table's order is its
 * state's hash order, another in each process); never on the engine's paths, which keep the
 * quick encoder. */
static char *encode(lua_State *L, int idx, const char *what, char *err, int errlen,
                    json_t **doc, mend_json_meter meter, void *ud, int sorted) {
  if (doc) *doc = NULL;
  const char *scalar = scalar_text(L, idx);
  if (scalar) {
    char *text = strdup(scalar);
    if (!text && err && errlen > 0)
      snprintf(err, (size_t)errlen, "%s: out of memory", what ? what : "value");
    return text;
  }
  char *quick = sorted ? NULL : quick_text(L, idx, meter, ud);
  if (quick) return quick;
  int precision;
  json_t *v = from_lua(L, idx, what, err, errlen, &precision, meter, ud);
  if (!v) return NULL;
  char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY |
                                 (sorted ? JSON_SORT_KEYS : JSON_PRESERVE_ORDER) |
                                 JSON_REAL_PRECISION(precision));
  if (text && doc) *doc = v;
  else json_decref(v);
  if (!text && err && errlen > 0)
    snprintf(err, (size_t)errlen, "%s: out of memory", what ? what : "value");
  return text;
}

char *mend_json_encode_doc(lua_State *L, int idx, const char *what, char *err, int errlen,
                           json_t **doc) {
  return encode(L, idx, what, err, errlen, doc, NULL, NULL, 0);
}

char *mend_json_encode_metered(lua_State *L, int idx, const char *what, char *err, int errlen,
                               mend_json_meter meter, void *ud) {
  return encode(L, idx, what, err, errlen, NULL, meter, ud, 0);
}

/* ---- jansson -> Lua -------------------------------------------------------------------- */

/* `nested`: JSON null inside a container is the sentinel; at the top it is plain nil. */
static void push_value(lua_State *L, const json_t *v, int nested) {
  luaL_checkstack(L, 3, "JSON nested too deeply");
  switch (json_typeof(v)) {
  case JSON_OBJECT: {
    lua_createtable(L, 0, (int)json_object_size(v));
    /* A fresh table has no metatable: a raw set, its key's length known, is what setfield
     * would do, without measuring the key and looking for a __newindex. */
    for (void *it = json_object_iter((json_t *)v); it;
         it = json_object_iter_next((json_t *)v, it)) {
      lua_pushlstring(L, json_object_iter_key(it), json_object_iter_key_len(it));
      push_value(L, json_object_iter_value(it), 1);
      lua_rawset(L, -3);
    }
    break;
  }
  case JSON_ARRAY: {
    size_t n = json_array_size(v);
    lua_createtable(L, n > 1u << 20 ? 1 << 20 : (int)n, 0);
    if (n == 0) mark_empty_array(L);
    for (size_t i = 0; i < n; i++) {
      push_value(L, json_array_get(v, i), 1);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    break;
  }
  case JSON_STRING:
    lua_pushlstring(L, json_string_value(v), json_string_length(v));
    break;
  case JSON_INTEGER:
    lua_pushinteger(L, (lua_Integer)json_integer_value(v));
    break;
  case JSON_REAL:
    lua_pushnumber(L, json_real_value(v));
    break;
  case JSON_TRUE:
    lua_pushboolean(L, 1);
    break;
  case JSON_FALSE:
    lua_pushboolean(L, 0);
    break;
  case JSON_NULL:
    if (nested) lua_pushlightuserdata(L, NULL);
    else lua_pushnil(L);
    break;
  }
}

void mend_json_push(lua_State *L, const json_t *v) {
  if (!v) lua_pushnil(L);
  else push_value(L, v, 0);
}

/* Runs the push under lua_pcall so that a memory error cannot leak the decoded document. */
static int push_protected(lua_State *L) {
  mend_json_push(L, (const json_t *)lua_touserdata(L, 1));
  return 1;
}

int mend_json_push_doc(lua_State *L, const json_t *doc, char *err, int errlen) {
  lua_pushcfunction(L, push_protected);
  lua_pushlightuserdata(L, (void *)doc);
  if (lua_pcall(L, 1, 1, 0) == LUA_OK) return 0;
  if (err && errlen > 0)
    snprintf(err, (size_t)errlen, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
  lua_pop(L, 1);
  return -1;
}

/* An integer as JSON writes it (no leading zero, at most 18 digits: no overflow to tell
 * apart); 0 for any other text. */
static int quick_integer(const char *text, size_t len, long long *out) {
  size_t i = len > 0 && text[0] == '-';
  if (len == i || len - i > 18 || (text[i] == '0' && len - i > 1)) return 0;
  long long v = 0;
  for (; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') return 0;
    v = v * 10 + (text[i] - '0');
  }
  *out = text[0] == '-' ? -v : v;
  return 1;
}

static int quick_string(const char *text, size_t len) {
  return len >= 2 && text[0] == '"' && text[len - 1] == '"' && plain(text + 1, len - 2);
}

/* Pushes a quick scalar's text as jansson's reading of it would be; 0 (nothing pushed) for
 * any other text. */
static int quick_scalar(lua_State *L, const char *text, size_t len) {
  long long v;
  if (quick_integer(text, len, &v)) lua_pushinteger(L, v);
  else if (quick_string(text, len)) lua_pushlstring(L, text + 1, len - 2);
  else if (len == 4 && memcmp(text, "true", 4) == 0) lua_pushboolean(L, 1);
  else if (len == 5 && memcmp(text, "false", 5) == 0) lua_pushboolean(L, 0);
  else return 0;
  return 1;
}

/* A quick object's text ({"k":v,...}, no space, no key twice) pushed as jansson's reading of
 * it would be: a table sized for its keys, set in the text's order, as push_value sets them
 * (the order of lua_next, and so of a later encoding, follows it). 0 for any other text. */
static int quick_object(lua_State *L, const char *text, size_t len) {
  struct { const char *k, *v; size_t klen, vlen; } f[QUICK_KEYS];
  if (len < 2 || text[0] != '{' || text[len - 1] != '}') return 0;
  int n = 0;
  size_t i = 1;
  while (i < len - 1) {
    if (n == QUICK_KEYS || text[i] != '"') return 0;
    size_t k = ++i;
    while (i < len && text[i] != '"') i++;
    if (i + 2 >= len || text[i + 1] != ':') return 0;
    f[n].k = text + k;
    f[n].klen = i - k;
    size_t v = i += 2;
    if (text[i] == '"') {
      for (i++; i < len && text[i] != '"'; i++) {}
      i++;
    } else {
      while (i < len && text[i] != ',' && text[i] != '}') i++;
    }
    if (i >= len || (text[i] != ',' && i != len - 1)) return 0;
    f[n].v = text + v;
    f[n].vlen = i - v;
    long long ignored;
    const char *fv = f[n].v;
    size_t fl = f[n].vlen;
    if (!plain(f[n].k, f[n].klen) ||
        !(quick_integer(fv, fl, &ignored) || quick_string(fv, fl) ||
          (fl == 4 && memcmp(fv, "true", 4) == 0) || (fl == 5 && memcmp(fv, "false", 5) == 0)))
      return 0;
    for (int d = 0; d < n; d++)
      if (f[d].klen == f[n].klen && memcmp(f[d].k, f[n].k, f[n].klen) == 0) return 0;
    n++;
    if (text[i] == ',') {
      i++;
      if (i >= len - 1) return 0;   /* {"a":1,} */
    }
  }
  if (!lua_checkstack(L, 3)) return 0;
  lua_createtable(L, 0, n);
  for (int d = 0; d < n; d++) {
    lua_pushlstring(L, f[d].k, f[d].klen);
    quick_scalar(L, f[d].v, f[d].vlen);
    lua_rawset(L, -3);
  }
  return 1;
}

/* jansson's "too big integer" names neither the number nor the limit: the number is the
 * digits (and sign) before where it stopped (or the one character past them it read). */
int mend_json_too_big(const char *text, size_t len, const json_error_t *je, char *err,
                      int errlen) {
  if (strncmp(je->text, "too big ", 8) != 0 || je->position <= 0 || (size_t)je->position > len)
    return 0;
  size_t end = (size_t)je->position;
  if (!isdigit((unsigned char)text[end - 1])) end--;   /* the character read past it */
  size_t at = end;
  while (at > 0 && (isdigit((unsigned char)text[at - 1]) || text[at - 1] == '-')) at--;
  if (at == end) return 0;
  int n = (int)(end - at), shown = n > 30 ? 30 : n;
  snprintf(err, (size_t)errlen, "line %d column %d: the integer %.*s%s is past 64 bits "
           "(-9223372036854775808 to 9223372036854775807): send it as a string, \"%.*s%s\"",
           je->line, je->column, shown, text + at, n > shown ? "..." : "", shown, text + at,
           n > shown ? "..." : "");
  return 1;
}

json_t *mend_json_load(const char *text, size_t len, size_t flags, char *err, int errlen) {
  json_error_t je;
  json_t *v = json_loadb(text, len, JSON_DECODE_ANY | flags, &je);
  if (!v && err && errlen > 0 && !mend_json_too_big(text, len, &je, err, errlen))
    snprintf(err, (size_t)errlen, "line %d column %d: %s", je.line, je.column, je.text);
  return v;
}

int mend_json_depth(const json_t *v, int bound) {
  if (!json_is_object(v) && !json_is_array(v)) return 0;
  if (bound <= 0) return 1;
  int most = 0;
  if (json_is_object(v)) {
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)v, k, x) {
      int d = mend_json_depth(x, bound - 1);
      if (d > most) most = d;
      if (most >= bound) break;
    }
  } else {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
      int d = mend_json_depth(x, bound - 1);
      if (d > most) most = d;
      if (most >= bound) break;
    }
  }
  return most + 1;
}

/* The precision every real of v needs (see real_precision), from so_far up; 17 past `bound`
 * levels, where the walk stops. */
static int doc_precision(const json_t *v, int so_far, int bound) {
  if (json_is_real(v)) return real_precision(json_real_value(v), so_far);
  if (!json_is_object(v) && !json_is_array(v)) return so_far;
  if (bound <= 0) return 17;
  json_t *x;
  if (json_is_object(v)) {
    const char *k;
    json_object_foreach((json_t *)v, k, x) {
      so_far = doc_precision(x, so_far, bound - 1);
      if (so_far == 17) break;
    }
  } else {
    size_t i;
    json_array_foreach(v, i, x) {
      so_far = doc_precision(x, so_far, bound - 1);
      if (so_far == 17) break;
    }
  }
  return so_far;
}

char *mend_json_dumps(const json_t *v) {
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER |
                           JSON_REAL_PRECISION(doc_precision(v, 15, MEND_JSON_MAX_DEPTH)));
}

json_t *mend_json_load_in(const char *text, size_t len, size_t flags, const char *what,
                          char *err, int errlen) {
  char jerr[300];
  json_t *v = mend_json_load(text, len, flags | JSON_REJECT_DUPLICATES, jerr, sizeof jerr);
  if (!v) {
    if (what) snprintf(err, (size_t)errlen, "%s is not JSON: %s", what, jerr);
    else snprintf(err, (size_t)errlen, "%s", jerr);
    return NULL;
  }
  if (mend_json_depth(v, MAX_DEPTH) > MAX_DEPTH) {
    snprintf(err, (size_t)errlen, "%s is nested deeper than %d levels, the most mend encodes",
             what ? what : "the value", MAX_DEPTH);
    json_decref(v);
    return NULL;
  }
  return v;
}

static int decode(lua_State *L, const char *text, size_t len, size_t flags, char *err,
                  int errlen) {
  /* the texts scalar_text writes, read back without jansson (null at the top is nil) */
  if ((len == 4 && memcmp(text, "true", 4) == 0) || (len == 5 && memcmp(text, "false", 5) == 0)) {
    lua_pushboolean(L, len == 4);
    return 0;
  }
  if (len == 4 && memcmp(text, "null", 4) == 0) {
    lua_pushnil(L);
    return 0;
  }
  /* ...and the texts quick_text writes */
  if (quick_scalar(L, text, len) || quick_object(L, text, len)) return 0;
  json_t *v = mend_json_load(text, len, JSON_ALLOW_NUL | flags, err, errlen);
  if (!v) return -1;
  int rc = mend_json_push_doc(L, v, err, errlen);
  json_decref(v);
  return rc;
}

int mend_json_decode(lua_State *L, const char *text, size_t len, char *err, int errlen) {
  return decode(L, text, len, 0, err, errlen);
}

int mend_json_decode_in(lua_State *L, const char *text, size_t len, char *err, int errlen) {
  return decode(L, text, len, JSON_REJECT_DUPLICATES, err, errlen);
}

/* ---- the mend.json module -------------------------------------------------------------- */

/* encode(v [, {sort_keys = true}]) -> string  [-0, +1, e] */
static int l_encode(lua_State *L) {
  char err[512];
  luaL_checkany(L, 1);
  int sorted = 0;
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_getfield(L, 2, "sort_keys");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      return luaL_error(L, "mend.json.encode: sort_keys is true or false, got %s",
                        luaL_typename(L, -1));
    sorted = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  char *text = encode(L, 1, "value", err, sizeof err, NULL, NULL, NULL, sorted);
  if (!text) return luaL_error(L, "mend.json.encode: %s", err);
  lua_pushstring(L, text);
  free(text);
  return 1;
}

/* decode(s [, {duplicates = false}]) -> value  [-0, +1, e] */
static int l_decode(lua_State *L) {
  char err[512];
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  int refuse = 0;
  /* Only a table is options: decode(select(2, ...)) passes what follows the text along too */
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_getfield(L, 2, "duplicates");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      return luaL_error(L, "mend.json.decode: duplicates is true or false, got %s",
                        luaL_typename(L, -1));
    refuse = lua_isboolean(L, -1) && !lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  if ((refuse ? mend_json_decode_in : mend_json_decode)(L, s, len, err, sizeof err) != 0)
    return luaL_error(L, "mend.json.decode: %s", err);
  return 1;
}

int mend_json_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
    {"encode", l_encode},
    {"decode", l_decode},
    {NULL, NULL},
  };
  luaL_newlib(L, funcs);
  lua_pushlightuserdata(L, NULL);
  lua_setfield(L, -2, "null");
  return 1;
}
