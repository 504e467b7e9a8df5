/*
 * util: the two small helpers every module that builds messages and keeps strings needs.
 * Header-only; nothing here knows about Lua, libuv or SQLite.
 */
#ifndef MEND_UTIL_H
#define MEND_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A malloc'ed copy of s; NULL for NULL (or when out of memory). */
static inline char *mend_dupstr(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Writes a message into err and returns -1, so that `return mend_errorf(...)` reports. */
__attribute__((format(printf, 3, 4)))
static inline int mend_errorf(char *err, int errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, (size_t)errlen, fmt, ap);
  va_end(ap);
  return -1;
}

#endif
