/*
 * sqlite: the only door into the SQLite backend (src/store.c and src/store/) for the rest of
 * mend: how to open one. Everything else goes through the table of methods it returns.
 * Must never: expose sqlite3.h or the backend's insides (store_int.h) to its includers.
 */
#ifndef MEND_STORE_SQLITE_H
#define MEND_STORE_SQLITE_H

#include "store.h"

/* Opens (creating if needed) the database file at `path` (":memory:" allowed): WAL, the
 * synchronous mode, a busy timeout, the schema created or checked, every statement prepared.
 * NULL on failure, with a message naming the file and the cause in `err`. With `none`
 * non-NULL the database must hold mend's schema already: a file with none (empty, or made by
 * SQLite and never written) is left as it is, NULL with *none = 1 (mend__sqlite_open_ex). */
mend_store *mend__sqlite_open(const char *path, mend_durability durability, char *err, int errlen);
mend_store *mend__sqlite_open_ex(const char *path, mend_durability durability, int *none,
                                 char *err, int errlen);

#endif
