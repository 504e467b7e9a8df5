/*
 * flatjson: the engine's events and alerts, flat JSON objects, as the text a host receives,
 * written straight into a buffer kept from one to the next. json_dumps was 95% of hearing an
 * event (15.9k instructions of it in W11: its strbuffer grown from nothing and freed, printf
 * for the event's time, a UTF-8 decode of every byte); a ticking host hears events inside its
 * budget. Owns only that text. Must never: write other bytes than jansson 2.14's
 * json_dumps(v, JSON_COMPACT) for the same object (keys in insertion order, its escapes, "%lld",
 * "%.17g" with its ".0" and exponent rules: tests/test_flatjson.c compares the two), or a text
 * for an object json_dumps would refuse; anything but a flat object is the caller's to dump.
 */
#include "flatjson.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "numtext.h"
#include "utf8.h"

static int reserve(mend_textbuf *b, size_t more) {
  if (b->len + more < b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap <= b->len + more) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p;
  b->cap = cap;
  return 0;
}

static void put(mend_textbuf *b, const char *s, size_t n) {
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether any of the 8 bytes of w is one that is not copied as it is: under 0x20, '"', '\\',
 * or past ASCII (each test exact about whether there is one, not which). */
static int special8(uint64_t w) {
  uint64_t q = w ^ (ONES * '"'), bs = w ^ (ONES * '\\');
  return ((w | ((w - ONES * 0x20) & ~w) | ((q - ONES) & ~q) | ((bs - ONES) & ~bs)) & HIGHS) != 0;
}

/* A string as jansson dumps it: '"' and '\\' escaped, the control characters as \b \f \n \r \t
 * or \u00XX (upper-case hex), everything else (DEL, '/', UTF-8) as it is. Eight plain bytes
 * at a time where it can: an event's strings are mostly ids and names. */
static int put_string(mend_textbuf *b, const char *str, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  if (reserve(b, 6 * n + 2)) return -1;   /* the longest escape is 6 bytes for 1 */
  const unsigned char *s = (const unsigned char *)str;
  char *o = b->p + b->len;
  *o++ = '"';
  for (size_t i = 0; i < n;) {
    uint64_t w;
    if (n - i >= 8 && (memcpy(&w, s + i, 8), !special8(w))) {
      memcpy(o, &w, 8);
      o += 8;
      i += 8;
      continue;
    }
    unsigned c = s[i];
    if (c >= 0x80) {
      size_t len = mend_utf8_len(s + i, n - i);
      if (!len) return -1;
      memcpy(o, s + i, len);
      o += len;
      i += len;
      continue;
    }
    i++;
    if (c >= 0x20 && c != '"' && c != '\\') {
      *o++ = (char)c;
      continue;
    }
    *o++ = '\\';
    switch (c) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '\b': *o++ = 'b'; break;
      case '\f': *o++ = 'f'; break;
      case '\n': *o++ = 'n'; break;
      case '\r': *o++ = 'r'; break;
      case '\t': *o++ = 't'; break;
      default:
        memcpy(o, "u00", 3);
        o[3] = hex[c >> 4];
        o[4] = hex[c & 15];
        o += 5;
    }
  }
  *o++ = '"';
  b->len = (size_t)(o - b->p);
  return 0;
}

/* A real as jansson's jsonp_dtostr writes it at its default precision: "%.17g", then ".0"
 * when that has neither a point nor an exponent, and the exponent without its '+' and its
 * leading zeros. */
static void put_real(mend_textbuf *b, double d) {
  char t[MEND_NUMTEXT_MAX + 4];
  size_t n = mend_numtext_real(t, d);
  char *e = memchr(t, 'e', n);
  if (!e && !memchr(t, '.', n)) {
    memcpy(t + n, ".0", 2);
    n += 2;
  } else if (e) {
    char *start = e + 1, *end = e + 2;
    if (*start == '-') start++;
    while (*end == '0') end++;
    if (end != start) {
      memmove(start, end, (size_t)(t + n - end));
      n -= (size_t)(end - start);
    }
  }
  put(b, t, n);
}

const char *mend_flatjson(const json_t *v, mend_textbuf *b) {
  if (!json_is_object(v)) return NULL;
  b->len = 0;
  if (reserve(b, 1)) return NULL;
  put(b, "{", 1);
  int first = 1;
  for (void *it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
    json_t *x = json_object_iter_value(it);
    if (reserve(b, 1)) return NULL;
    if (!first) put(b, ",", 1);
    first = 0;
    if (put_string(b, json_object_iter_key(it), json_object_iter_key_len(it))) return NULL;
    if (reserve(b, MEND_NUMTEXT_MAX + 8)) return NULL;
    put(b, ":", 1);
    switch (json_typeof(x)) {
      case JSON_STRING:
        if (put_string(b, json_string_value(x), json_string_length(x))) return NULL;
        break;
      case JSON_INTEGER: b->len += mend_numtext_int(b->p + b->len, json_integer_value(x)); break;
      case JSON_REAL: put_real(b, json_real_value(x)); break;
      case JSON_TRUE: put(b, "true", 4); break;
      case JSON_FALSE: put(b, "false", 5); break;
      case JSON_NULL: put(b, "null", 4); break;
      default: return NULL;
    }
  }
  if (reserve(b, 2)) return NULL;
  put(b, "}", 1);
  b->p[b->len] = 0;
  return b->p;
}

void mend_textbuf_free(mend_textbuf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}
