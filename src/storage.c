/*
 * storage: which backend a database name opens. It owns only that choice: a libpq connection
 * URI (postgres://, postgresql://) is PostgreSQL's, anything else is a SQLite file (or
 * ":memory:"). Every other operation goes through the backend's table of methods (store.h).
 * It must never hold state of its own or know a backend's insides.
 */
#include <stdio.h>
#include <string.h>

#include "store.h"
#include "store/sqlite.h"
#ifdef MEND_WITH_PG
#include "store/pg/pg.h"
#endif

/* 1 if `name` is a PostgreSQL connection URI (libpq's own two prefixes). */
int mend_store_is_postgres(const char *name) {
  return name && (strncmp(name, "postgres://", 11) == 0 || strncmp(name, "postgresql://", 13) == 0);
}

mend_store *mend_store_open(const char *path, mend_durability durability, char *err, int errlen) {
  if (mend_store_is_postgres(path)) {
#ifdef MEND_WITH_PG
    return mend__pg_open(path, durability, err, errlen);
#else
    snprintf(err, (size_t)errlen, "%s: this mend was built without PostgreSQL (libpq)", path);
    return NULL;
#endif
  }
  return mend__sqlite_open(path, durability, err, errlen);
}
