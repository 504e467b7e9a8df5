/*
 * pg: the only door into the PostgreSQL backend of the store. Everything else of it is behind
 * pg_int.h, which nothing outside src/store/pg/ includes. Must never: expose libpq to a caller.
 */
#ifndef MEND_STORE_PG_H
#define MEND_STORE_PG_H

#include "../../store.h"

/* Connects to the database a libpq URI names ("postgres://...", "postgresql://...";
 * "postgresql://" alone: the PG* environment variables), creates or upgrades mend's schema
 * there under an advisory lock and checks it is mend's. Returns the store, or NULL with a
 * message in err naming the server (host:port/dbname, never a password) and the cause. With
 * `none` non-NULL mend's schema must be there already: a database with none is left as it is,
 * NULL with *none = 1 (mend__pg_open_ex). */
mend_store *mend__pg_open(const char *uri, mend_durability d, char *err, int errlen);
mend_store *mend__pg_open_ex(const char *uri, mend_durability d, int *none, char *err, int errlen);

#endif
