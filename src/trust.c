/*
 * trust: the host's clearing of a database's sandbox mark (store.h: sandbox_mark), the one way
 * it is cleared: `mend db trust` and mend.trust_db (lmend.c) and mend_trust_db (capi.c) all
 * come here, so that they refuse and answer alike. It owns the refusal of a name with no
 * database behind it: opening would make an empty one there and answer "not marked", a
 * mistyped path trusted and a stray file left.
 * Must never: be reachable from workflow code (a sandbox holds neither mend.trust_db nor the C
 * API); make a database where there was none; set the mark.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

mend_trust_outcome mend_store_trust(const char *path, char *err, int errlen) {
  if (!mend_store_is_postgres(path)) {
    /* a SQLite name: a file, or a "file:" URI whose file is before its '?' or '#' */
    char file[4096];
    const char *p = path && strncmp(path, "file:", 5) == 0 ? path + 5 : path ? path : "";
    snprintf(file, sizeof file, "%s", p);
    if (p != path) file[strcspn(file, "?#")] = 0;
    if (!path || !*path || strcmp(path, ":memory:") == 0 || !file[0] ||
        access(file, F_OK) != 0) {
      snprintf(err, (size_t)errlen, "no database at %s", path ? path : "(NULL)");
      return MEND_TRUST_NO_DATABASE;
    }
  }
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, errlen);
  if (!s) return MEND_TRUST_FAILED;
  int was = mend_store_sandbox_mark(s, 0);
  if (was == 1 && mend_store_sandbox_mark(s, -1) < 0) was = -1;
  if (was < 0) snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(s));
  mend_store_close(s);
  return was < 0 ? MEND_TRUST_FAILED : was ? MEND_TRUST_CLEARED : MEND_TRUST_UNMARKED;
}
