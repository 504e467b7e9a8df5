/*
 * utf8: owns the one definition of UTF-8 the engine holds texts to, jansson's: a text jansson
 * refuses is not encoded at all, so an event, an alert or a log line carrying a step's error
 * with one stray byte (a Latin-1 message, a binary response body's start, a message cut
 * mid-character at its limit) was dropped whole. Must never: allocate, or change a text that
 * is valid (it runs on failure paths, on every error).
 */
#include "utf8.h"

#include <string.h>

size_t mend_utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t len;
  unsigned v;
  if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07;
  else return 0;
  if (len > n) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (s[i] & 0x3F);
  }
  if ((len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10FFFF) return 0;
  if (v >= 0xD800 && v <= 0xDFFF) return 0;
  return len;
}

int mend_utf8_valid(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0, k; i < n; i += k)
    if (!(k = u[i] < 0x80 ? 1 : mend_utf8_len(u + i, n - i))) return 0;
  return 1;
}

size_t mend_utf8_fix(char *s) {
  unsigned char *p = (unsigned char *)s;
  size_t n = strlen(s), fixed = 0;
  for (size_t i = 0; i < n;) {
    if (p[i] < 0x80) { i++; continue; }
    size_t len = mend_utf8_len(p + i, n - i);
    if (len) { i += len; continue; }
    p[i++] = '?';   /* one byte at a time: what follows may start a valid sequence */
    fixed++;
  }
  return fixed;
}
