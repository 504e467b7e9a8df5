/*
 * raw_sqlite: the C tests' looks into a database file past the store (what a schema or a row
 * holds, as sqlite3 would show it). Header-only; a test includes it after sqlite3.h. Must
 * never: write, or stand in for the store's own reads in what a test asserts of mend.
 */
#ifndef MEND_TESTS_RAW_SQLITE_H
#define MEND_TESTS_RAW_SQLITE_H

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

/* The first column of sql's first row, a copy to free; NULL for none. */
static inline char *raw_text(sqlite3 *db, const char *sql) {
  sqlite3_stmt *q;
  char *out = NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) return NULL;
  if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
    out = strdup((const char *)sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  return out;
}

/* The same as a number; -1 for none. */
static inline int raw_int(sqlite3 *db, const char *sql) {
  char *t = raw_text(db, sql);
  int v = t ? atoi(t) : -1;
  free(t);
  return v;
}

#endif
