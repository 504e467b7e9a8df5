/*
 * pg_copy: moving a SQLite store into an empty PostgreSQL one (`mend copy`, issue 20). The
 * door for the CLI is mend_store_copy (store.h); this is the part that works on open handles,
 * for tests that make the PostgreSQL schema themselves. Must never: be included but by
 * pg_copy.c and those tests.
 */
#ifndef MEND_PG_COPY_H
#define MEND_PG_COPY_H

#include <stddef.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <sqlite3.h>

/* The SQLite schema whose columns the copy reads; a source at another version is refused
 * (test_pg_view checks that it is the SQLite store's current one). */
#define MEND_COPY_SQLITE_SCHEMA 21

/* Copies every run (with its parent's link), step, history row, breaker, dead letter,
 * workflow version, inbox event, completion token and audit row of `src` (a mend database at this
 * mend's schema version, read in one read transaction) into `dst` (a PostgreSQL mend store, not
 * inside a transaction), in one transaction that is committed only if `dst` held none of them
 * before and holds as many of each as `src` after. Owners are not copied: after the move nobody
 * holds a run. Returns {"runs": n, "steps": n, ...} or NULL with err set (and nothing written). */
json_t *mend__pg_copy_into(sqlite3 *src, PGconn *dst, char *err, size_t errlen);

#endif
