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
 * NULL on failure, with a message naming the file and the cause in `err`. */
mend_store *mend__sqlite_open(const char *path, mend_durability durability, char *err, int errlen);

#endif
