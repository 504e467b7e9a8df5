/*
 * pattern: the sandbox's string.find, match, gmatch and gsub. Owns the estimate of what one
 * call of a pattern may cost on its subject (backtracking over the pattern's repetitions, a
 * plain find's comparisons) before Lua's matcher runs it: refused over the sandbox's bound of
 * one call, charged to the caller's instruction budget otherwise.
 *
 * Must never: run a pattern itself (the library's own matcher does, unchanged); let a call
 * through whose worst case it cannot bound; reach the state's globals (it replaces the
 * functions of the string table it is given).
 */
#include "sandbox_int.h"

#include <ctype.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>

#include "guard.h"

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

/* What gsub does at one match for each escape of its replacement string that names a capture
 * ("%0".."%9"): the capture pushed and added to the result, made a string first when it is a
 * position (60-85 ns); an empty capture adds nothing to the result, so its allocation charges
 * nothing either. A "%%" adds a byte (one instruction); the other bytes are copied at the
 * cost their allocation is charged. */
#define GSUB_ESCAPE_COST 16.0
/* What gsub does at one match for a function or table replacement: the captures pushed and a
 * call or a lookup (25-30 ns); the function's own instructions are counted by the hook. */
#define GSUB_CALL_COST 16.0

/* The work of gsub's replacement string at each match. */
static double gsub_per_match(const char *r, size_t rlen) {
  double work = 0;
  for (size_t i = 0; i + 1 < rlen; i++)
    if (r[i] == '%') {
      work += r[i + 1] == '%' ? 1 : GSUB_ESCAPE_COST;
      i++;
    }
  return work;
}

/* The most matches gsub can make of p in s (n of them at most): one at most when p is
 * anchored; when every match starts with a byte of one class (p's first item, a character or
 * a "%" class that is not optional), no more than the bytes of s in that class; n + 1
 * otherwise (an empty match at every start position). */
static double gsub_matches(const char *s, size_t n, const char *p, size_t plen) {
  size_t i = 0;
  if (plen > 0 && p[0] == '^') return 1;
  while (i < plen && (p[i] == '(' || p[i] == ')')) {
    if (p[i] == '(' && i + 1 < plen && p[i + 1] == ')') return (double)n + 1;   /* a position */
    i++;
  }
  if (i >= plen || p[i] == '[' || p[i] == '.' || p[i] == '$') return (double)n + 1;
  size_t clen = 1;
  if (p[i] == '%') {
    if (i + 1 >= plen || p[i + 1] == 'b' || p[i + 1] == 'f' || isdigit((unsigned char)p[i + 1]))
      return (double)n + 1;
    clen = 2;
  }
  size_t after = i + clen;
  if (after < plen && (p[after] == '*' || p[after] == '-' || p[after] == '?'))
    return (double)n + 1;
  double count = 0;
  for (size_t k = 0; k < n; k++) count += class_has(p + i, clen, (unsigned char)s[k]);
  return count;
}

/* A function or table replacement of gsub, called at each match: charged its push and call,
 * as the match happens. Upvalue 1: the function or table. */
static int charged_replacement(lua_State *L) {
  mend_limits_charge(L, GSUB_CALL_COST);
  if (lua_type(L, lua_upvalueindex(1)) == LUA_TFUNCTION) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
  }
  lua_settop(L, 1);
  lua_gettable(L, lua_upvalueindex(1));
  return 1;
}

enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };
static const char *const pattern_fn[] = {"find", "match", "gmatch", "gsub"};

/* string.find/match/gmatch/gsub of a sandbox: upvalue 1 the library's own, 2 which one. */
static int bounded_pattern(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(2));
  int ts = lua_type(L, 1), tp = lua_type(L, 2);
  double per_match = 0;
  if ((ts == LUA_TSTRING || ts == LUA_TNUMBER) && (tp == LUA_TSTRING || tp == LUA_TNUMBER)) {
    size_t n, plen;
    const char *s = lua_tolstring(L, 1, &n);
    const char *p = lua_tolstring(L, 2, &plen);
    /* A plain find compares the needle at every start (Lua's lmemfind): quadratic too. */
    double lg = which == PAT_FIND && lua_toboolean(L, 4)
      ? log10((double)n + 1) + log10((double)plen + 1)
      : cost_log10(s, n, p, plen, which != PAT_GMATCH || LUA_VERSION_RELEASE_NUM >= 50400);
    /* gsub's replacement string is read again at each match: refused when that alone may go
     * over the bound at the matches it may make, charged for those it made (below). */
    double matches = 0;
    if (which == PAT_GSUB && lua_type(L, 3) == LUA_TSTRING) {
      size_t rlen;
      const char *r = lua_tolstring(L, 3, &rlen);
      per_match = gsub_per_match(r, rlen);
      matches = gsub_matches(s, n, p, plen);
      if (lua_type(L, 4) == LUA_TNUMBER && lua_tonumber(L, 4) < matches)
        matches = lua_tonumber(L, 4) > 0 ? lua_tonumber(L, 4) : 0;
      if (matches * per_match > MEND_SANDBOX_PATTERN_STEPS) {
        char msg[300];
        snprintf(msg, sizeof msg, "string.gsub: a replacement of %.0f instructions of work at "
                 "each of up to %.0f matches, over the sandbox's bound of %.0e in one call "
                 "(README: Limits and sandbox)", per_match, matches, MEND_SANDBOX_PATTERN_STEPS);
        return luaL_error(L, "%s", msg);
      }
    } else if (which == PAT_GSUB && (lua_type(L, 3) == LUA_TFUNCTION ||
                                     lua_type(L, 3) == LUA_TTABLE)) {
      lua_pushvalue(L, 3);
      lua_pushcclosure(L, charged_replacement, 1);
      lua_replace(L, 3);
    }
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
  /* gsub answers the matches it made. */
  if (per_match > 0 && lua_gettop(L) >= 2 && lua_isinteger(L, 2))
    mend_limits_charge(L, (double)lua_tointeger(L, 2) * per_match);
  return lua_gettop(L);
}

/* Replaces find, match, gmatch and gsub of the string table at the top of the stack with
 * their bounded versions. */
void mend__sandbox_bound_patterns(lua_State *L) {
  for (int k = PAT_FIND; k <= PAT_GSUB; k++) {
    lua_getfield(L, -1, pattern_fn[k]);
    lua_pushinteger(L, k);
    lua_pushcclosure(L, bounded_pattern, 2);
    lua_setfield(L, -2, pattern_fn[k]);
  }
}
