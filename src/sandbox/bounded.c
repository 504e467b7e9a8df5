/*
 * bounded: what every chunk of a sandboxed state shares, made safe once
 * (mend_sandbox_prepare): string.dump removed, the string metatable hidden, and the library's C
 * functions whose work grows with a count or a length the caller chose (string.rep, format,
 * table.concat, unpack, sort, utf8, tonumber, os.date, mend.json...) bounded or charged to the
 * caller's instruction budget, since no count hook runs inside a C function.
 *
 * Must never: change what such a function returns for a call within its bounds; build a
 * workflow's environment (sandbox.c does); estimate patterns (pattern.c does).
 */
#include "sandbox_int.h"

#include <ctype.h>
#include <float.h>
#include <limits.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"
#include "json.h"

/* The longest string string.rep makes (Lua's own limit is the memory limit, below it). */
#define MAX_REP_BYTES ((size_t)1 << 40)
/* The most bytes a sandboxed C function goes through between two looks at the limits. */
#define PIECE_BYTES ((size_t)1 << 20)
/* Bytes of a copy charged as one instruction (as the engine's allocator charges). */
#define ALLOC_BYTES_PER_CHARGE 32.0
/* The longest text mend.json.decode takes in a sandbox. */
#define MAX_JSON_TEXT (4u << 20)

/* table.sort of a sandbox: a sort without a comparator runs in C alone, so it is charged:
 * three instructions a step of n log2 n, for each step is a comparison and reads and writes
 * through the C API (12 ns a step where an instruction takes 4.4 ns). */
static int charged_sort(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  /* Lua's sort asks __len itself, which may answer more than the table holds (its __index
   * then serving a table sorted in C alone) or more than it answered here. */
  if (luaL_getmetafield(L, 1, "__len") != LUA_TNIL)
    return luaL_error(L, "table.sort: a table with a __len metamethod is not sorted in a sandbox");
  double n = (double)lua_rawlen(L, 1);
  if (n > 1) mend_limits_charge(L, 3 * n * log2(n));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 0);
  return 0;
}

/* ---------------------------------------------------------------- C functions of bounded cost
 *
 * No hook runs inside a C function: one that loops over a count its caller chose (not over
 * memory it holds) is charged that count before it starts, and refused when the count alone is
 * over the bound of one call. */

static void charge_count(lua_State *L, const char *fn, double count) {
  if (count > MEND_SANDBOX_PATTERN_STEPS) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: %.0f elements in one call, over the sandbox's bound of %.0e "
             "(README: Limits and sandbox)", fn, count, MEND_SANDBOX_PATTERN_STEPS);
    luaL_error(L, "%s", msg);
  }
  if (count > 1) mend_limits_charge(L, count);
}

/* As charge_count, for a call whose work is counted in instructions, not elements. */
static void charge_work(lua_State *L, const char *fn, double work) {
  if (work > MEND_SANDBOX_PATTERN_STEPS) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: some %.0f instructions of work in one call, over the "
             "sandbox's bound of %.0e (README: Limits and sandbox)", fn, work,
             MEND_SANDBOX_PATTERN_STEPS);
    luaL_error(L, "%s", msg);
  }
  if (work > 1) mend_limits_charge(L, work);
}

/* Calls upvalue 1 with the arguments, returning all it returns. */
static int call_original(lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* string.rep: Lua's copies the string n times, one memcpy each (an 8 MiB string of one
 * byte: 8M calls, tens of milliseconds that no hook or watchdog can stop), and loops n times
 * even when each copy is empty. Here the result doubles what it holds at each copy, a few
 * dozen copies in all, and looks at the limits between two. */
static int bounded_rep(lua_State *L) {
  size_t l, lsep;
  const char *s = luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  const char *sep = luaL_optlstring(L, 3, "", &lsep);
  if (n <= 0 || l + lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  size_t unit = l + lsep;
  if (unit < l || (lua_Unsigned)n > (MAX_REP_BYTES + lsep) / unit)
    return luaL_error(L, "resulting string too large");
  size_t total = unit * (size_t)n - lsep, filled = 0;
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, total);
  memcpy(p, s, l);
  if (lsep > 0 && n > 1) memcpy(p + l, sep, lsep);
  filled = n > 1 ? unit : l;
  while (filled < total) {
    size_t chunk = filled < total - filled ? filled : total - filled;
    memcpy(p + filled, p, chunk);
    filled += chunk;
    /* Small copies are charged as the allocation of the result is: not at all. */
    if (chunk >= PIECE_BYTES) mend_limits_charge(L, (double)chunk / ALLOC_BYTES_PER_CHARGE);
  }
  luaL_pushresultsize(&b, total);
  return 1;
}

/* string.upper/lower/reverse: one pass over the string in C, 290 ms for 32 MiB on a loaded
 * machine, that no hook or watchdog can stop. Here in pieces of PIECE_BYTES, the limits
 * looked at between two. Upvalue 1: 'u', 'l' or 'r'. */

static int chunked_bytes(lua_State *L) {
  size_t l;
  const char *s = luaL_checklstring(L, 1, &l);
  int op = (int)lua_tointeger(L, lua_upvalueindex(1));
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, l);
  for (size_t i = 0; i < l;) {
    size_t start = i, end = l - i > PIECE_BYTES ? i + PIECE_BYTES : l;
    if (op == 'u')
      for (; i < end; i++) p[i] = (char)toupper((unsigned char)s[i]);
    else if (op == 'l')
      for (; i < end; i++) p[i] = (char)tolower((unsigned char)s[i]);
    else
      for (; i < end; i++) p[i] = s[l - 1 - i];
    /* Small strings are charged as the allocation of the result is: not at all. */
    if (l > PIECE_BYTES) mend_limits_charge(L, (double)(end - start) / ALLOC_BYTES_PER_CHARGE);
  }
  luaL_pushresultsize(&b, l);
  return 1;
}

/* string.format: %q writes a string a byte at a time with a test for each (20 ms for 1 MiB
 * on a loaded machine): a larger one is refused. Upvalue 1: Lua's format. */
#define MAX_QUOTED_BYTES ((size_t)1 << 20)
/* What one conversion costs, in instructions: a call to snprintf; a new string for %s of a
 * value that is not one; a digit of the integer part of a %f (glibc writes 1e308's 309 digits
 * in some 13 us: 100k of them held the loop 1.3 s in one call). */
#define FORMAT_ITEM_COST 32.0
#define FORMAT_TOSTRING_COST 160.0
#define FORMAT_DIGIT_COST 16.0

static int bounded_format(lua_State *L) {
  size_t flen;
  const char *f = luaL_checklstring(L, 1, &flen), *end = f + flen;
  int arg = 1;
  double cost = 0;
  while (f < end) {
    if (*f++ != '%') continue;
    if (f < end && *f == '%') { f++; continue; }
    while (f < end && strchr("-+ #0123456789.", *f)) f++;
    if (f >= end) break;
    arg++;
    size_t len;
    char conv = *f++;
    int t = lua_type(L, arg);
    cost += FORMAT_ITEM_COST;
    if (conv == 'q' && t == LUA_TSTRING && lua_tolstring(L, arg, &len) && len > MAX_QUOTED_BYTES)
      return luaL_error(L, "string.format: %%q of a string of %I bytes, over the sandbox's bound "
                        "of %d (README: Limits and sandbox)", (lua_Integer)len,
                        (int)MAX_QUOTED_BYTES);
    if (conv == 's' && t != LUA_TSTRING) cost += FORMAT_TOSTRING_COST;
    if ((conv == 'f' || conv == 'F') && t == LUA_TNUMBER) {
      double x = fabs(lua_tonumber(L, arg));
      if (x >= 10 && x <= DBL_MAX) cost += FORMAT_DIGIT_COST * log10(x);
    }
  }
  charge_work(L, "string.format", cost);
  return call_original(L);
}

/* table.move(a1, f, e, t [, a2]): e - f + 1 gets and sets. */
static int bounded_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
  if (e >= f) charge_count(L, "table.move", (double)e - (double)f + 1);
  return call_original(L);
}

/* table.insert and table.remove, as Lua's (ltablib.c) but asking for the length once: the
 * elements they shift are counted from it. */
static lua_Integer table_length(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  return luaL_len(L, 1);
}

static int bounded_insert(lua_State *L) {
  lua_Integer e = table_length(L) + 1, pos;
  switch (lua_gettop(L)) {
    case 2:
      pos = e;
      break;
    case 3:
      pos = luaL_checkinteger(L, 2);
      luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2, "position out of bounds");
      charge_count(L, "table.insert", (double)e - (double)pos);
      for (lua_Integer i = e; i > pos; i--) {
        lua_geti(L, 1, i - 1);
        lua_seti(L, 1, i);
      }
      break;
    default:
      return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

static int bounded_remove(lua_State *L) {
  lua_Integer size = table_length(L);
  lua_Integer pos = luaL_optinteger(L, 2, size);
  if (pos != size)
    luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
  if (pos < size) charge_count(L, "table.remove", (double)size - (double)pos);
  lua_geti(L, 1, pos);
  for (; pos < size; pos++) {
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

/* table.unpack(t [, i [, j]]), as Lua's, charged j - i + 1. */
static int bounded_unpack(lua_State *L) {
  lua_Integer i = luaL_optinteger(L, 2, 1);
  lua_Integer e = luaL_opt(L, luaL_checkinteger, 3, luaL_len(L, 1));
  if (i > e) return 0;
  lua_Unsigned n = (lua_Unsigned)e - i;
  if (n >= (unsigned int)INT_MAX || !lua_checkstack(L, (int)(++n)))
    return luaL_error(L, "too many results to unpack");
  charge_count(L, "table.unpack", (double)n);
  for (; i < e; i++) lua_geti(L, 1, i);
  lua_geti(L, 1, e);
  return (int)n;
}

/* table.concat(t [, sep [, i [, j]]]), as Lua's, charged j - i + 1: empty strings make it a
 * loop that allocates nothing. */
static int bounded_concat(lua_State *L) {
  lua_Integer last = table_length(L);
  size_t lsep;
  const char *sep = luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, 3, 1);
  last = luaL_optinteger(L, 4, last);
  if (i <= last) charge_count(L, "table.concat", (double)last - (double)i + 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  double made = 0;   /* strings made of numbers, not yet charged */
  for (; i <= last; i++) {
    lua_geti(L, 1, i);
    if (!lua_isstring(L, -1))
      return luaL_error(L, "invalid value (at index %I) in table for 'concat'", (LUAI_UACINT)i);
    if (lua_type(L, -1) == LUA_TNUMBER && (made += FORMAT_TOSTRING_COST) >= 65536) {
      mend_limits_charge(L, made);   /* raises once the call is over its limits */
      made = 0;
    }
    luaL_addvalue(&b);
    if (i < last) luaL_addlstring(&b, sep, lsep);
    if (i == LUA_MAXINTEGER) break;
  }
  luaL_pushresult(&b);
  return 1;
}

/* string.byte and utf8.codepoint (s [, i [, j]]): charged the bytes of s they may look at. */
static int charged_slice(lua_State *L) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  lua_Integer i = luaL_optinteger(L, 2, 1);
  lua_Integer j = luaL_optinteger(L, 3, i);
  if (i < 0) i = (lua_Integer)l + i + 1;
  if (j < 0) j = (lua_Integer)l + j + 1;
  if (i < 1) i = 1;
  if (j > (lua_Integer)l) j = (lua_Integer)l;
  if (j >= i) mend_limits_charge(L, (double)(j - i + 1));
  return call_original(L);
}

/* utf8.char makes a string of each code point (some 240 ns each) and print of each argument
 * that is not a string (on top of the bytes it writes): charged that, and refused a call
 * whose charge alone is over the bound. Upvalues: 1 the function, 2 its name. */
int mend__sandbox_charged_tostrings(lua_State *L) {
  double work = 0;
  for (int i = 1, n = lua_gettop(L); i <= n; i++)
    work += lua_type(L, i) == LUA_TSTRING ? (double)lua_rawlen(L, i) : FORMAT_TOSTRING_COST;
  charge_work(L, lua_tostring(L, lua_upvalueindex(2)), work);
  return call_original(L);
}

/* string.pack pads a "c<n>" item a byte at a time (c30000000: 300 ms in one call): charged
 * the sizes of its c items, twice (the padding's cost). Upvalue 1: Lua's pack. */
static int charged_pack(lua_State *L) {
  size_t flen;
  const char *f = luaL_checklstring(L, 1, &flen), *end = f + flen;
  double work = (double)flen;
  while (f < end) {
    if (*f++ != 'c') continue;
    double n = 0;
    while (f < end && isdigit((unsigned char)*f) && n < 1e18) n = n * 10 + (*f++ - '0');
    work += 2 * n;
  }
  charge_work(L, "string.pack", work);
  return call_original(L);
}

/* string.packsize and string.unpack read their format an item at a time (4 to 6.5 ns a byte),
 * and unpack pushes a value for each item that is not padding (130 ns an "i1"): charged a byte
 * of the format each, and 16 for each letter that may be such an item. Upvalue 1: Lua's. */
#define UNPACK_ITEM_COST 16.0

static int charged_format(lua_State *L) {
  size_t flen;
  const char *f = luaL_checklstring(L, 1, &flen);
  double work = (double)flen;
  if (lua_isstring(L, 2))   /* unpack's data: packsize has none */
    for (size_t i = 0; i < flen; i++)
      if (isalpha((unsigned char)f[i]) && f[i] != 'x' && f[i] != 'X') work += UNPACK_ITEM_COST;
  charge_work(L, lua_isstring(L, 2) ? "string.unpack" : "string.packsize", work);
  return call_original(L);
}

/* tonumber and the arithmetic metamethods of strings ("10" + 1) read a numeric string to its
 * end: charged the length of each string argument. */
int mend__sandbox_charged_strings(lua_State *L) {
  for (int i = 1, n = lua_gettop(L); i <= n; i++)
    if (lua_type(L, i) == LUA_TSTRING) mend_limits_charge(L, (double)lua_rawlen(L, i));
  return call_original(L);
}

/* os.date calls strftime once for each conversion of its format: no format of a sensible
 * length needs more than this. */
#define MAX_DATE_FORMAT 4096
/* One conversion: a call to strftime, 170-240 ns for a %c or %Ec. Each call, conversions or
 * not: localtime_r or gmtime_r and a string or a table made (80-330 ns). */
#define DATE_CONVERSION_COST 32.0
#define DATE_CALL_COST 32.0

int mend__sandbox_bounded_date(lua_State *L) {
  size_t n;
  const char *f;
  double work = DATE_CALL_COST;
  if (lua_type(L, 1) == LUA_TSTRING && (f = lua_tolstring(L, 1, &n))) {
    if (n > MAX_DATE_FORMAT)
      return luaL_error(L, "os.date: a format of %I bytes, over the sandbox's bound of %d",
                        (lua_Integer)n, MAX_DATE_FORMAT);
    for (size_t i = 0; i < n; i++)
      if (f[i] == '%') { work += DATE_CONVERSION_COST; i++; }
  }
  mend_limits_charge(L, work);
  return call_original(L);
}

/* os.time of a table calls mktime, which (glibc, TZ unset) looks at /etc/localtime again with
 * a stat each call: 1-2 us of CPU, of system time mostly. */
#define MKTIME_COST 512.0

int mend__sandbox_charged_time(lua_State *L) {
  if (lua_type(L, 1) == LUA_TTABLE) mend_limits_charge(L, MKTIME_COST);
  return call_original(L);
}

/* tostring makes a string of a number (snprintf) or of a table's, a function's or a
 * userdata's address, as print does; a string, a boolean and nil it returns as they are. */
int mend__sandbox_charged_tostring(lua_State *L) {
  int t = lua_type(L, 1);
  if (t != LUA_TSTRING && t != LUA_TBOOLEAN && t != LUA_TNIL && t != LUA_TNONE)
    mend_limits_charge(L, FORMAT_TOSTRING_COST);
  return call_original(L);
}

/* utf8.len and utf8.offset walk the string. */
static int charged_walk(lua_State *L) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  mend_limits_charge(L, (double)l);
  return call_original(L);
}

/* mend.json.decode: jansson builds the whole document outside the Lua state (and its memory
 * limit), some twenty times the text's size, before a Lua value is made of it. Upvalue 1:
 * the function. */
int mend__sandbox_bounded_decode(lua_State *L) {
  size_t n;
  luaL_checklstring(L, 1, &n);
  if (n > MAX_JSON_TEXT)
    return luaL_error(L, "mend.json.decode: a text of %I bytes, over the sandbox's bound of %d",
                      (lua_Integer)n, (int)MAX_JSON_TEXT);
  mend_limits_charge(L, (double)n);
  return call_original(L);
}

/* mend.json.encode: charged the text it made (up to a million values walked in C). */
typedef struct encode_meter {
  mend_limits *lim;
  long values;
  size_t bytes;
} encode_meter;

static int meter_encode(void *ud, long values, size_t bytes) {
  encode_meter *m = ud;
  double work = (double)(values - m->values) * MEND_JSON_VALUE_COST +
                (double)(bytes - m->bytes) * MEND_JSON_BYTE_COST;
  m->values = values;
  m->bytes = bytes;
  return mend_limits_spend(m->lim, work);
}

/* mend.json.encode, its work charged as it goes (the encoder stops once the limits trip),
 * not after: a value of a million numbers held the loop a second. Upvalue 1: mend's. */
int mend__sandbox_charged_encode(lua_State *L) {
  encode_meter m = {mend_limits_current(L), 0, 0};
  if (!m.lim) return call_original(L);
  char err[512];
  luaL_checkany(L, 1);
  lua_settop(L, 1);
  char *text = mend_json_encode_metered(L, 1, "value", err, sizeof err, meter_encode, &m);
  if (!text) {
    if (m.lim->tripped) mend_limits_charge(L, 0);   /* raises the limit's error */
    return luaL_error(L, "mend.json.encode: %s", err);
  }
  lua_pushstring(L, text);
  free(text);
  return 1;
}

/* The table bound (mend_limits_refuse_table) lets a lauxlib buffer's block through when it
 * comes right after its box. The first box a state makes also creates the boxes' metatable in
 * between, and then a block of 24 * 2^k bytes (a 12 MiB string.rep) looked like a table's
 * node vector: one buffer made here, larger than the one on the C stack, creates it now. */
static void make_buffer_metatable(lua_State *L) {
  luaL_Buffer b;
  luaL_buffinitsize(L, &b, LUAL_BUFFERSIZE * 2);
  luaL_pushresultsize(&b, 0);
  lua_pop(L, 1);
}

void mend_sandbox_prepare(lua_State *L) {
  make_buffer_metatable(L);
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  mend__sandbox_bound_patterns(L);
  lua_getfield(L, -1, "rep");
  lua_pushcclosure(L, bounded_rep, 1);
  lua_setfield(L, -2, "rep");
  lua_getfield(L, -1, "byte");
  lua_pushcclosure(L, charged_slice, 1);
  lua_setfield(L, -2, "byte");
  static const char *const piecewise[] = {"upper", "lower", "reverse"};
  for (int k = 0; k < 3; k++) {
    lua_pushinteger(L, "ulr"[k]);
    lua_pushcclosure(L, chunked_bytes, 1);
    lua_setfield(L, -2, piecewise[k]);
  }
  lua_getfield(L, -1, "format");
  lua_pushcclosure(L, bounded_format, 1);
  lua_setfield(L, -2, "format");
  lua_getfield(L, -1, "pack");
  lua_pushcclosure(L, charged_pack, 1);
  lua_setfield(L, -2, "pack");
  static const char *const formatted[] = {"packsize", "unpack"};
  for (int k = 0; k < 2; k++) {
    lua_getfield(L, -1, formatted[k]);
    lua_pushcclosure(L, charged_format, 1);
    lua_setfield(L, -2, formatted[k]);
  }
  lua_pop(L, 1);
  lua_getglobal(L, "table");
  lua_getfield(L, -1, "sort");
  lua_pushcclosure(L, charged_sort, 1);
  lua_setfield(L, -2, "sort");
  lua_getfield(L, -1, "move");
  lua_pushcclosure(L, bounded_move, 1);
  lua_setfield(L, -2, "move");
  lua_pushcfunction(L, bounded_insert);
  lua_setfield(L, -2, "insert");
  lua_pushcfunction(L, bounded_remove);
  lua_setfield(L, -2, "remove");
  lua_pushcfunction(L, bounded_unpack);
  lua_setfield(L, -2, "unpack");
  lua_pushcfunction(L, bounded_concat);
  lua_setfield(L, -2, "concat");
  lua_pop(L, 1);
  lua_getglobal(L, "utf8");
  lua_getfield(L, -1, "codepoint");
  lua_pushcclosure(L, charged_slice, 1);
  lua_setfield(L, -2, "codepoint");
  lua_getfield(L, -1, "len");
  lua_pushcclosure(L, charged_walk, 1);
  lua_setfield(L, -2, "len");
  lua_getfield(L, -1, "offset");
  lua_pushcclosure(L, charged_walk, 1);
  lua_setfield(L, -2, "offset");
  lua_getfield(L, -1, "char");
  lua_pushliteral(L, "utf8.char");
  lua_pushcclosure(L, mend__sandbox_charged_tostrings, 2);
  lua_setfield(L, -2, "char");
  lua_pop(L, 1);
  lua_getglobal(L, "tonumber");
  lua_pushcclosure(L, mend__sandbox_charged_strings, 1);
  lua_setglobal(L, "tonumber");
  /* Every string reaches this metatable; getmetatable("") now answers false. */
  lua_pushliteral(L, "");
  if (lua_getmetatable(L, -1)) {
    static const char *const arith[] = {"__add", "__sub", "__mul", "__mod", "__pow", "__div",
                                        "__idiv", "__unm", NULL};
    for (const char *const *nm = arith; *nm; nm++) {
      if (lua_getfield(L, -1, *nm) != LUA_TFUNCTION) {
        lua_pop(L, 1);
        continue;
      }
      lua_pushcclosure(L, mend__sandbox_charged_strings, 1);
      lua_setfield(L, -2, *nm);
    }
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}
