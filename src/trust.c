/*
 * trust: the host's clearing of a database's sandbox mark (store.h: sandbox_mark), the one way
 * it is cleared: `mend db trust` and mend.trust_db (lmend.c) and mend_trust_db (capi.c) all
 * come here, so that they refuse and answer alike. It owns the refusal of a name with no
 * database behind it: opening would make an empty one there and answer "not marked", a
 * mistyped path trusted and a stray file left; nor does it make mend's schema in an empty
 * file or an empty PostgreSQL database (mend_store_open_existing): neither is mend's.
 * Must never: be reachable from workflow code (a sandbox holds neither mend.trust_db nor the C
 * API); make a database where there was none; set the mark.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

/* The file a SQLite name opens: the name itself, or a "file:" URI's path (before its '?' or
 * '#', its %HH escapes decoded, as SQLite reads it). */
static void sqlite_file(const char *path, char *file, size_t cap) {
  if (strncmp(path, "file:", 5) != 0) {
    snprintf(file, cap, "%s", path);
    return;
  }
  size_t n = 0;
  for (const char *p = path + 5; *p && *p != '?' && *p != '#' && n + 1 < cap; p++) {
    unsigned hi, lo;
    if (p[0] == '%' && sscanf(p + 1, "%1x%1x", &hi, &lo) == 2) {
      file[n++] = (char)(hi << 4 | lo);
      p += 2;
    } else {
      file[n++] = *p;
    }
  }
  file[n] = 0;
}

mend_trust_outcome mend_store_trust(const char *path, char *err, int errlen) {
  if (!mend_store_is_postgres(path)) {
    /* SQLite would make a missing file: refused before anything opens it */
    char file[4096];
    if (path) sqlite_file(path, file, sizeof file);
    if (!path || !*path || strcmp(path, ":memory:") == 0 || !file[0] ||
        access(file, F_OK) != 0) {
      snprintf(err, (size_t)errlen, "no database at %s", path ? path : "(NULL)");
      return MEND_TRUST_NO_DATABASE;
    }
  }
  int none = 0;
  mend_store *s = mend_store_open_existing(path, &none, err, errlen);
  if (!s) return none ? MEND_TRUST_NO_DATABASE : MEND_TRUST_FAILED;
  int was = mend_store_sandbox_mark(s, 0);
  if (was == 1 && mend_store_sandbox_mark(s, -1) < 0) was = -1;
  if (was < 0) snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(s));
  mend_store_close(s);
  return was < 0 ? MEND_TRUST_FAILED : was ? MEND_TRUST_CLEARED : MEND_TRUST_UNMARKED;
}
