/*
 * sandbox: the environment of sandboxed workflow code (see sandbox.h).
 *
 * What a workflow file sees is a table made for it alone: the safe part of the base library,
 * copies of string, table, math, utf8 and coroutine, os.time/clock/date, and `mend` as a step
 * needs it. What all chunks share is made safe once, in mend_sandbox_prepare: the string
 * metatable (reached by every string's methods) is hidden from getmetatable, and the string
 * table behind it loses `dump` and gets pattern functions that refuse a call whose worst case
 * is too costly and charge what they may cost to the caller's instruction budget.
 */
#include "sandbox.h"

#include <ctype.h>
#include <limits.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guard.h"

/* Modules a sandbox reads from disk are Lua source of a sensible size. */
#define MAX_MODULE_BYTES (16u << 20)
/* The longest string string.rep makes (Lua's own limit is the memory limit, below it). */
#define MAX_REP_BYTES ((size_t)1 << 40)
/* The most bytes a sandboxed C function goes through between two looks at the limits. */
#define PIECE_BYTES ((size_t)1 << 20)
/* Bytes of a copy charged as one instruction (as the engine's allocator charges). */
#define ALLOC_BYTES_PER_CHARGE 32.0
/* The longest text mend.json.decode takes in a sandbox. */
#define MAX_JSON_TEXT (4u << 20)

/* ---------------------------------------------------------------- bounded patterns */

/* Does the single character class cls[0..clen) (".", "%a", "[set]", or a character) hold c? */
static int class_has_escape(unsigned char cl, unsigned char c) {
  int r;
  switch (tolower(cl)) {
    case 'a': r = isalpha(c); break;
    case 'c': r = iscntrl(c); break;
    case 'd': r = isdigit(c); break;
    case 'g': r = isgraph(c); break;
    case 'l': r = islower(c); break;
    case 'p': r = ispunct(c); break;
    case 's': r = isspace(c); break;
    case 'u': r = isupper(c); break;
    case 'w': r = isalnum(c); break;
    case 'x': r = isxdigit(c); break;
    default: return cl == c;
  }
  if (isupper(cl)) r = !r;
  return r != 0;
}

static int set_has(const char *set, size_t len, unsigned char c) {
  size_t i = 1;   /* after '[' */
  int negate = 0;
  if (i < len && set[i] == '^') { negate = 1; i++; }
  size_t end = len - 1;   /* the closing ']' */
  int found = 0;
  while (i < end) {
    unsigned char a = (unsigned char)set[i];
    if (a == '%' && i + 1 < end) {
      found |= class_has_escape((unsigned char)set[i + 1], c);
      i += 2;
    } else if (i + 2 < end && set[i + 1] == '-') {
      found |= a <= c && c <= (unsigned char)set[i + 2];
      i += 3;
    } else {
      found |= a == c;
      i++;
    }
  }
  return negate ? !found : found;
}

static int class_has(const char *cls, size_t clen, unsigned char c) {
  if (cls[0] == '.' && clen == 1) return 1;
  if (cls[0] == '%' && clen == 2) return class_has_escape((unsigned char)cls[1], c);
  if (cls[0] == '[') return set_has(cls, clen, c);
  return (unsigned char)cls[0] == c;
}

/* The longest stretch of s that the class matches: how far one repetition of it can go. */
static size_t longest_run(const char *s, size_t n, const char *cls, size_t clen) {
  size_t best = 0, run = 0;
  for (size_t i = 0; i < n; i++) {
    if (class_has(cls, clen, (unsigned char)s[i])) {
      if (++run > best) best = run;
    } else {
      run = 0;
    }
  }
  return best;
}

/* The end of the set that starts at p[i] == '['; plen when it is not closed. */
static size_t set_end(const char *p, size_t plen, size_t i) {
  size_t j = i + 1;
  if (j < plen && p[j] == '^') j++;
  do {
    if (j >= plen) return plen;
    if (p[j++] == '%' && j < plen) j++;
  } while (j < plen && p[j] != ']');
  return j < plen ? j + 1 : plen;
}

/* Is nothing but closing parentheses and the end anchor left of the pattern from i? */
static int only_closing(const char *p, size_t plen, size_t i) {
  while (i < plen && p[i] == ')') i++;
  return i == plen || (i + 1 == plen && p[i] == '$');
}

/* log10 of the most steps a backtracking match of p over s can take: the start positions
 * tried, times the lengths each repetition can take (the longest run of its class in s),
 * times two for each optional item, times the work at the end of each path: the pattern's
 * length, plus the last repetition's run when nothing follows it (it is tried only once
 * per path), plus the subject's length when a %b or a back reference scans it. An upper
 * bound, loose for most patterns. */
static double cost_log10(const char *s, size_t n, const char *p, size_t plen, int anchored_ok) {
  size_t i = 0;
  double lg = 0, leaf = (double)plen + 1;
  if (anchored_ok && plen > 0 && p[0] == '^') i = 1;
  else lg += log10((double)n + 1);
  /* Each repetition's run is a pass over the subject: the estimate itself must not cost more
   * than the bound (a pattern of thousands of "a*" anchored on a long subject). Every item is
   * tried at least once at each start, so an estimate already over the bound is not refined. */
  if (lg + log10(leaf) > log10(MEND_SANDBOX_PATTERN_STEPS)) return lg + log10(leaf);
  double scanned = 0;
  int scans = 0;
  while (i < plen) {
    char c = p[i];
    size_t cls = i, clen;
    if (c == '(' || c == ')') { i++; continue; }
    if (c == '%' && i + 1 < plen) {
      char d = p[i + 1];
      if (d == 'b') { scans = 1; i += 4; continue; }
      if (d == 'f') {
        i += 2;
        if (i < plen && p[i] == '[') i = set_end(p, plen, i);
        continue;
      }
      if (isdigit((unsigned char)d)) { scans = 1; i += 2; continue; }
      clen = 2;
    } else if (c == '[') {
      clen = set_end(p, plen, i) - i;
    } else {
      clen = 1;
    }
    i += clen;
    if (i < plen && (p[i] == '*' || p[i] == '+' || p[i] == '-')) {
      if ((scanned += (double)n) > MEND_SANDBOX_PATTERN_STEPS) return HUGE_VAL;
      double run = (double)longest_run(s, n, p + cls, clen);
      i++;
      if (only_closing(p, plen, i)) leaf += run;
      else lg += log10(run + 1);
    } else if (i < plen && p[i] == '?') {
      lg += log10(2.0);
      i++;
    }
  }
  if (scans) leaf += (double)n;
  return lg + log10(leaf);
}

enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };
static const char *const pattern_fn[] = {"find", "match", "gmatch", "gsub"};

/* string.find/match/gmatch/gsub of a sandbox: upvalue 1 the library's own, 2 which one. */
static int bounded_pattern(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(2));
  int ts = lua_type(L, 1), tp = lua_type(L, 2);
  if ((ts == LUA_TSTRING || ts == LUA_TNUMBER) && (tp == LUA_TSTRING || tp == LUA_TNUMBER)) {
    size_t n, plen;
    const char *s = lua_tolstring(L, 1, &n);
    const char *p = lua_tolstring(L, 2, &plen);
    /* A plain find compares the needle at every start (Lua's lmemfind): quadratic too. */
    double lg = which == PAT_FIND && lua_toboolean(L, 4)
      ? log10((double)n + 1) + log10((double)plen + 1)
      : cost_log10(s, n, p, plen, which != PAT_GMATCH || LUA_VERSION_RELEASE_NUM >= 50400);
    if (lg > log10(MEND_SANDBOX_PATTERN_STEPS)) {
      char msg[300];
      if (isinf(lg))
        snprintf(msg, sizeof msg, "string.%s: the pattern has too many repetitions for a subject "
                 "of %zu bytes (the sandbox's bound of %.0e steps, README: Limits and sandbox)",
                 pattern_fn[which], n, MEND_SANDBOX_PATTERN_STEPS);
      else
        snprintf(msg, sizeof msg, "string.%s: the pattern may take up to 10^%.0f steps on a "
                 "subject of %zu bytes, over the sandbox's bound of %.0e (README: Limits and "
                 "sandbox)", pattern_fn[which], lg, n, MEND_SANDBOX_PATTERN_STEPS);
      return luaL_error(L, "%s", msg);
    }
    mend_limits_charge(L, pow(10.0, lg));
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* table.sort of a sandbox: a sort without a comparator runs in C alone, so it is charged. */
static int charged_sort(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  /* Lua's sort asks __len itself, which may answer more than the table holds (its __index
   * then serving a table sorted in C alone) or more than it answered here. */
  if (luaL_getmetafield(L, 1, "__len") != LUA_TNIL)
    return luaL_error(L, "table.sort: a table with a __len metamethod is not sorted in a sandbox");
  double n = (double)lua_rawlen(L, 1);
  if (n > 1) mend_limits_charge(L, n * log2(n));
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

static int bounded_format(lua_State *L) {
  size_t flen;
  const char *f = luaL_checklstring(L, 1, &flen), *end = f + flen;
  int arg = 1;
  while (f < end) {
    if (*f++ != '%') continue;
    if (f < end && *f == '%') { f++; continue; }
    while (f < end && strchr("-+ #0123456789.", *f)) f++;
    if (f >= end) break;
    arg++;
    size_t len;
    if (*f++ == 'q' && lua_type(L, arg) == LUA_TSTRING && lua_tolstring(L, arg, &len) &&
        len > MAX_QUOTED_BYTES)
      return luaL_error(L, "string.format: %%q of a string of %I bytes, over the sandbox's bound "
                        "of %d (README: Limits and sandbox)", (lua_Integer)len,
                        (int)MAX_QUOTED_BYTES);
  }
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
  for (; i <= last; i++) {
    lua_geti(L, 1, i);
    if (!lua_isstring(L, -1))
      return luaL_error(L, "invalid value (at index %I) in table for 'concat'", (LUAI_UACINT)i);
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

/* tonumber and the arithmetic metamethods of strings ("10" + 1) read a numeric string to its
 * end: charged the length of each string argument. */
static int charged_strings(lua_State *L) {
  for (int i = 1, n = lua_gettop(L); i <= n; i++)
    if (lua_type(L, i) == LUA_TSTRING) mend_limits_charge(L, (double)lua_rawlen(L, i));
  return call_original(L);
}

/* os.date calls strftime once for each conversion of its format: no format of a sensible
 * length needs more than this. */
#define MAX_DATE_FORMAT 4096

static int bounded_date(lua_State *L) {
  size_t n;
  if (lua_type(L, 1) == LUA_TSTRING && lua_tolstring(L, 1, &n) && n > MAX_DATE_FORMAT)
    return luaL_error(L, "os.date: a format of %I bytes, over the sandbox's bound of %d",
                      (lua_Integer)n, MAX_DATE_FORMAT);
  return call_original(L);
}

/* utf8.len and utf8.offset walk the string. */
static int charged_walk(lua_State *L) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  mend_limits_charge(L, (double)l);
  return call_original(L);
}

void mend_sandbox_prepare(lua_State *L) {
  lua_getglobal(L, "string");
  lua_pushnil(L);
  lua_setfield(L, -2, "dump");
  for (int k = PAT_FIND; k <= PAT_GSUB; k++) {
    lua_getfield(L, -1, pattern_fn[k]);
    lua_pushinteger(L, k);
    lua_pushcclosure(L, bounded_pattern, 2);
    lua_setfield(L, -2, pattern_fn[k]);
  }
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
  lua_pop(L, 1);
  lua_getglobal(L, "tonumber");
  lua_pushcclosure(L, charged_strings, 1);
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
      lua_pushcclosure(L, charged_strings, 1);
      lua_setfield(L, -2, *nm);
    }
    lua_pushboolean(L, 0);
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* ---------------------------------------------------------------- the environment */

/* setmetatable refuses __gc: a finalizer runs with hooks off, out of reach of every limit. */
static int safe_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      return luaL_error(L, "setmetatable: __gc is not available in a sandbox");
    lua_pop(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* A reader function for load, charged the text it hands over. Upvalues: 1 the workflow's
 * reader, 2 the bytes read so far. */
static int charged_reader(lua_State *L) {
  lua_settop(L, 0);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 0, 1);
  size_t n;
  if (lua_type(L, 1) == LUA_TSTRING && lua_tolstring(L, 1, &n) && n > 0) {
    lua_Integer total = lua_tointeger(L, lua_upvalueindex(2)) + (lua_Integer)n;
    if (total > (lua_Integer)MAX_MODULE_BYTES)
      return luaL_error(L, "load: a chunk of more than %d bytes, over the sandbox's bound",
                        (int)MAX_MODULE_BYTES);
    lua_pushinteger(L, total);
    lua_replace(L, lua_upvalueindex(2));
    mend_limits_charge(L, (double)n);
  }
  return 1;
}

/* load(chunk [, name [, mode [, env]]]): text only, and the workflow's own environment by
 * default. Upvalue 1: the environment, 2: the library's load. */
static int safe_load(lua_State *L) {
  int given_env = lua_gettop(L) >= 4;
  lua_settop(L, 4);
  const char *mode = luaL_optstring(L, 3, "bt");
  if (!strchr(mode, 't'))
    return luaL_error(L, "load: binary chunks are not available in a sandbox");
  size_t len;
  if (lua_type(L, 1) == LUA_TSTRING && lua_tolstring(L, 1, &len)) {
    if (len > MAX_MODULE_BYTES)
      return luaL_error(L, "load: a chunk of %I bytes, over the sandbox's bound of %d",
                        (lua_Integer)len, (int)MAX_MODULE_BYTES);
    mend_limits_charge(L, (double)len);
  }
  /* Compiling is C work no hook sees: a string chunk is charged at once, a reader function
   * piece by piece. */
  if (lua_type(L, 1) == LUA_TFUNCTION) {
    lua_pushvalue(L, 1);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, charged_reader, 2);
    lua_replace(L, 1);
  }
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_pushliteral(L, "t");
  if (given_env) lua_pushvalue(L, 4);
  else lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 4, 2);
  if (lua_isnil(L, -2)) return 2;   /* nil and the message */
  lua_pop(L, 1);
  return 1;
}

/* xpcall(f, msgh, ...): the message handler runs once the error has unwound, not on top of
 * it as Lua's does, because Lua runs it with hooks off when the error came from a hook (a
 * limit), out of reach of every limit. A traceback is not to be had in a sandbox anyway. */
static int safe_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 1);
  lua_rotate(L, 3, 1);   /* f above msgh, then the arguments */
  if (lua_pcall(L, n - 2, LUA_MULTRET, 0) == LUA_OK) {
    lua_pushboolean(L, 1);
    lua_replace(L, 2);   /* true in place of msgh */
    return lua_gettop(L) - 1;
  }
  lua_pushvalue(L, 2);
  lua_insert(L, -2);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    lua_pop(L, 1);
    lua_pushliteral(L, "error in error handling");
  }
  lua_pushboolean(L, 0);
  lua_insert(L, -2);
  return 2;
}

/* Is co the coroutine of a step's attempt (the engine's table of them, THREADS_KEY in
 * engine_int.h)? Only the engine resumes or closes one: a step that kept another run's
 * (coroutine.running()) would otherwise end that attempt early or run it out of turn. */
static int attempt_thread(lua_State *L, lua_State *co) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, "mend.threads") != LUA_TTABLE) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushthread(co);
  lua_xmove(co, L, 1);
  int found = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return found;
}

static int close_thread(lua_State *co, lua_State *from) {
  int depth = mend_limits_run_on(co);   /* its __close handlers run on it */
#if LUA_VERSION_RELEASE_NUM >= 50406
  int status = lua_closethread(co, from);
#else
  (void)from;
  int status = lua_resetthread(co);
#endif
  mend_limits_run_off(depth);
  return status;
}

/* coroutine.wrap's function: upvalue 1 the coroutine. Like Lua's, but a coroutine that a limit
 * stopped is not closed (that would run its __close handlers with hooks off). */
static int wrapped_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, lua_upvalueindex(1));
  int n = lua_gettop(L), nres;
  if (!lua_checkstack(co, n)) return luaL_error(L, "too many arguments to resume");
  lua_xmove(L, co, n);
  int depth = mend_limits_run_on(co);
  int status = lua_resume(co, L, n, &nres);
  mend_limits_run_off(depth);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) return luaL_error(L, "too many results to resume");
    lua_xmove(co, L, nres);
    return nres;
  }
  lua_xmove(co, L, 1);   /* the error */
  if (!mend_limits_stopped(L, co)) close_thread(co, L);
  if (lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

static int safe_wrap(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State *co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, wrapped_resume, 1);
  return 1;
}

/* coroutine.resume, as Lua's, but the watchdog knows the coroutine runs, and an attempt's
 * coroutine is not resumed. */
static int safe_resume(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co, 1, "coroutine");
  if (attempt_thread(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "cannot resume the coroutine of a step's attempt (the engine runs it)");
    return 2;
  }
  int n = lua_gettop(L) - 1, nres;
  if (!lua_checkstack(co, n)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "too many arguments to resume");
    return 2;
  }
  lua_xmove(L, co, n);
  int depth = mend_limits_run_on(co);
  int status = lua_resume(co, L, n, &nres);
  mend_limits_run_off(depth);
  if (status == LUA_OK || status == LUA_YIELD) {
    if (!lua_checkstack(L, nres + 1)) {
      lua_pop(co, nres);
      lua_pushboolean(L, 0);
      lua_pushliteral(L, "too many results to resume");
      return 2;
    }
    lua_pushboolean(L, 1);
    lua_xmove(co, L, nres);
    return nres + 1;
  }
  lua_pushboolean(L, 0);
  lua_xmove(co, L, 1);
  return 2;
}

/* coroutine.close, but not of a coroutine that a limit stopped, nor of an attempt's.
 * Upvalue 1: Lua's. */
static int safe_close(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  if (co && mend_limits_stopped(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "the coroutine was stopped by a limit of the sandbox");
    return 2;
  }
  if (co && attempt_thread(L, co)) {
    lua_pushboolean(L, 0);
    lua_pushliteral(L, "cannot close the coroutine of a step's attempt (the engine runs it)");
    return 2;
  }
  /* Lua's close raises for a running or normal coroutine: only the others are closed here. */
  lua_Debug ar;
  if (co && co != L && (lua_status(co) != LUA_OK || !lua_getstack(co, 0, &ar))) {
    if (close_thread(co, L) == LUA_OK) {
      lua_pushboolean(L, 1);
      return 1;
    }
    lua_pushboolean(L, 0);
    lua_xmove(co, L, 1);
    return 2;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* collectgarbage: what a program may ask of the collector without changing it for the host. */
static int safe_collectgarbage(lua_State *L) {
  static const char *const allowed[] = {"collect", "count", "step", "isrunning", NULL};
  int opt = luaL_checkoption(L, 1, "collect", allowed);
  /* A full collection walks the whole state, the engine's part and every workflow's. */
  if (opt == 0 || opt == 2) mend_limits_charge(L, 32.0 * lua_gc(L, LUA_GCCOUNT));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

static int valid_module_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 200 || name[0] == '.' || name[n - 1] == '.') return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!(isalnum(c) || c == '_' || (c == '.' && name[i + 1] != '.'))) return 0;
  }
  return 1;
}

/* The text of the file, or NULL (a message pushed). */
static char *read_module(lua_State *L, const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0, got;
  char *text = malloc(cap);
  while (text && (got = fread(text + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *more = cap < MAX_MODULE_BYTES ? realloc(text, cap *= 2) : NULL;
      if (!more) { free(text); text = NULL; }
      else text = more;
    }
  }
  fclose(f);
  if (!text) luaL_error(L, "require: %s is larger than %d bytes", path, (int)MAX_MODULE_BYTES);
  *len = n;
  return text;
}

/* require(name): "mend" and what the workflow's directory holds. Upvalues: 1 the environment,
 * 2 its table of loaded modules, 3 the workflow's directory, 4 mend's Lua directory. */
static int safe_require(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  lua_settop(L, 1);
  lua_pushvalue(L, 1);
  if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  if (!valid_module_name(name))
    return luaL_error(L, "require: \"%s\" is not a module name a sandbox can load (letters, "
                      "digits, _ and single dots)", name);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int ours = strcmp(name, "mend.sim") == 0;
  luaL_addstring(&b, lua_tostring(L, lua_upvalueindex(ours ? 4 : 3)));
  luaL_addchar(&b, '/');
  for (const char *c = name; *c; c++) luaL_addchar(&b, *c == '.' ? '/' : *c);
  luaL_addstring(&b, ".lua");
  luaL_pushresult(&b);
  const char *path = lua_tostring(L, -1);
  size_t len;
  char *text = read_module(L, path, &len);
  if (!text && ours)
    return luaL_error(L, "require: module \"%s\" not found: mend's Lua files are not in %s: set "
                      "MEND_LUA_DIR (or mend_options.lua_path) to the directory `pkg-config "
                      "--variable=luadir mend` prints", name, lua_tostring(L, lua_upvalueindex(4)));
  if (!text)
    return luaL_error(L, "require: module \"%s\" not found (a sandboxed workflow may require "
                      "\"mend\", \"mend.sim\" and the Lua modules beside its file)", name);
  lua_pushfstring(L, "@%s", path);
  int status = luaL_loadbufferx(L, text, len, lua_tostring(L, -1), "t");
  free(text);
  if (status != LUA_OK) return lua_error(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_setupvalue(L, -2, 1);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_pushboolean(L, 1);
  }
  lua_pushvalue(L, 1);
  lua_pushvalue(L, -2);
  lua_rawset(L, lua_upvalueindex(2));
  return 1;
}

/* A shallow copy of the global library `lib`, keeping only `names` (all when NULL). */
static void copy_library(lua_State *L, int env, const char *lib, const char *const *names) {
  lua_getglobal(L, lib);
  int src = lua_gettop(L);
  lua_newtable(L);
  if (names) {
    for (const char *const *nm = names; *nm; nm++) {
      lua_getfield(L, src, *nm);
      lua_setfield(L, -2, *nm);
    }
  } else {
    lua_pushnil(L);
    while (lua_next(L, src)) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4);
    }
  }
  lua_setfield(L, env, lib);
  lua_pop(L, 1);
}

/* mend.json.decode: jansson builds the whole document outside the Lua state (and its memory
 * limit), some twenty times the text's size, before a Lua value is made of it. Upvalue 1:
 * the function. */
static int bounded_decode(lua_State *L) {
  size_t n;
  luaL_checklstring(L, 1, &n);
  if (n > MAX_JSON_TEXT)
    return luaL_error(L, "mend.json.decode: a text of %I bytes, over the sandbox's bound of %d",
                      (lua_Integer)n, (int)MAX_JSON_TEXT);
  mend_limits_charge(L, (double)n);
  return call_original(L);
}

/* mend.json.encode: charged the text it made (up to a million values walked in C). */
static int charged_encode(lua_State *L) {
  int n = call_original(L);
  size_t len;
  if (n >= 1 && lua_type(L, 1) == LUA_TSTRING && lua_tolstring(L, 1, &len))
    mend_limits_charge(L, (double)len);
  return n;
}

/* mend as a step sees it: errors, waits, host calls, JSON. */
static void push_mend(lua_State *L) {
  static const char *const names[] = {"retryable", "fatal", "compensable", "is_error", "sleep",
                                      "version", "http", NULL};   /* http: under http_allow */
  lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_getfield(L, -1, "mend.core");
  int core = lua_gettop(L);
  lua_newtable(L);
  for (const char *const *nm = names; *nm; nm++) {
    lua_getfield(L, core, *nm);
    lua_setfield(L, -2, *nm);
  }
  lua_newtable(L);
  lua_getfield(L, core, "json");
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -5);
  }
  lua_pop(L, 1);
  lua_getfield(L, -1, "decode");
  lua_pushcclosure(L, bounded_decode, 1);
  lua_setfield(L, -2, "decode");
  lua_getfield(L, -1, "encode");
  lua_pushcclosure(L, charged_encode, 1);
  lua_setfield(L, -2, "encode");
  lua_setfield(L, -2, "json");
  /* mend.call raises the host's error as lua/mend/init.lua does. */
  luaL_loadstring(L, "local call, error = ...\n"
                     "return function(name, ...)\n"
                     "  local ok, v = call(name, ...)\n"
                     "  if ok then return v end\n"
                     "  error(v, 0)\n"
                     "end");
  lua_getfield(L, core, "_call");
  lua_getglobal(L, "error");
  lua_call(L, 2, 1);
  lua_setfield(L, -2, "call");
  lua_replace(L, core - 1);
  lua_settop(L, core - 1);
}

void mend_sandbox_env(lua_State *L, const char *dir, const char *lua_dir) {
  static const char *const base[] = {"assert", "error", "ipairs", "next", "pairs", "pcall",
    "rawequal", "rawget", "rawlen", "rawset", "select", "tonumber", "tostring",
    "type", "getmetatable", "_VERSION", NULL};
  static const char *const os_names[] = {"time", "clock", "date", "difftime", NULL};
  static const char *const string_names[] = {"byte", "char", "find", "format", "gmatch", "gsub",
    "len", "lower", "match", "rep", "reverse", "sub", "upper", "pack", "packsize", "unpack",
    NULL};
  lua_newtable(L);
  int env = lua_gettop(L);
  for (const char *const *nm = base; *nm; nm++) {
    lua_getglobal(L, *nm);
    lua_setfield(L, env, *nm);
  }
  lua_pushvalue(L, env);
  lua_setfield(L, env, "_G");
  lua_getglobal(L, "setmetatable");
  lua_pushcclosure(L, safe_setmetatable, 1);
  lua_setfield(L, env, "setmetatable");
  /* print writes to the host's stdout, a byte for each byte it is given. */
  lua_getglobal(L, "print");
  lua_pushcclosure(L, charged_strings, 1);
  lua_setfield(L, env, "print");
  lua_pushvalue(L, env);
  lua_getglobal(L, "load");
  lua_pushcclosure(L, safe_load, 2);
  lua_setfield(L, env, "load");
  lua_getglobal(L, "collectgarbage");
  lua_pushcclosure(L, safe_collectgarbage, 1);
  lua_setfield(L, env, "collectgarbage");
  copy_library(L, env, "string", string_names);
  copy_library(L, env, "table", NULL);
  copy_library(L, env, "math", NULL);
  /* The generator is the state's: a seed set by one workflow would set the numbers another
   * draws. */
  lua_getfield(L, env, "math");
  lua_pushnil(L);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);
  copy_library(L, env, "utf8", NULL);
  copy_library(L, env, "coroutine", NULL);
  lua_getfield(L, env, "coroutine");
  lua_pushcfunction(L, safe_wrap);
  lua_setfield(L, -2, "wrap");
  lua_getfield(L, -1, "close");
  lua_pushcclosure(L, safe_close, 1);
  lua_setfield(L, -2, "close");
  lua_pushcfunction(L, safe_resume);
  lua_setfield(L, -2, "resume");
  lua_pop(L, 1);
  lua_pushcfunction(L, safe_xpcall);
  lua_setfield(L, env, "xpcall");
  copy_library(L, env, "os", os_names);
  lua_getfield(L, env, "os");
  lua_getfield(L, -1, "date");
  lua_pushcclosure(L, bounded_date, 1);
  lua_setfield(L, -2, "date");
  lua_pop(L, 1);
  /* require, with its own table of what it loaded: "mend" is there from the start. */
  lua_newtable(L);
  int loaded = lua_gettop(L);
  push_mend(L);
  lua_pushvalue(L, -1);
  lua_setfield(L, env, "mend");
  lua_setfield(L, loaded, "mend");
  lua_pushvalue(L, env);
  lua_pushvalue(L, loaded);
  lua_pushstring(L, dir && *dir ? dir : ".");
  lua_pushstring(L, lua_dir && *lua_dir ? lua_dir : ".");
  lua_pushcclosure(L, safe_require, 4);
  lua_setfield(L, env, "require");
  lua_settop(L, env);
}
