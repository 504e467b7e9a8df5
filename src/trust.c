/*
 * trust: the host's clearing of a database's sandbox mark (store.h: sandbox_mark), the one way
 * it is cleared: `mend db trust` and mend.trust_db (lmend.c) and mend_trust_db (capi.c) all
 * come here, so that they refuse and answer alike. A name with no database behind it is
 * refused (opening would make an empty one there and answer "not marked", a mistyped path
 * trusted and a stray file left), nor is mend's schema made in an empty file or an empty
 * PostgreSQL database (mend_store_open_existing): neither is mend's. The
 * mark's look before an engine opens (mend_store_mark_look: the CLI's --memory-limit without
 * --sandbox, refused unless the database is marked) is made the same way, making nothing.
 * Must never: be reachable from workflow code (a sandbox holds neither mend.trust_db nor the C
 * API); make a database (or mend's schema) where there was none; set the mark.
 */
#include <stdio.h>

#include "store.h"

mend_trust_outcome mend_store_trust(const char *path, char *err, int errlen) {
  int none = 0;
  mend_store *s = mend_store_open_existing(path, MEND_DURABILITY_FULL, &none, err, errlen);
  if (!s) return none ? MEND_TRUST_NO_DATABASE : MEND_TRUST_FAILED;
  int was = mend_store_sandbox_mark(s, 0);
  if (was == 1 && mend_store_sandbox_mark(s, -1) < 0) was = -1;
  if (was < 0) snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(s));
  mend_store_close(s);
  return was < 0 ? MEND_TRUST_FAILED : was ? MEND_TRUST_CLEARED : MEND_TRUST_UNMARKED;
}

mend_mark_look mend_store_mark_look(const char *path, char *err, int errlen) {
  int none = 0;
  mend_store *s = mend_store_open_existing(path, MEND_DURABILITY_FULL, &none, err, errlen);
  if (!s) return none ? MEND_MARK_NO_DATABASE : MEND_MARK_FAILED;
  int on = mend_store_sandbox_mark(s, 0);
  if (on < 0) snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(s));
  mend_store_close(s);
  return on < 0 ? MEND_MARK_FAILED : on ? MEND_MARK_ON : MEND_MARK_OFF;
}
