/*
 * store_case: what the C tests of the SQLite store share (test_store_*): a temporary directory
 * of the program's own for its database files (store_case_begin, removed by store_case_end),
 * the store opened on a file there (store_at), a look at a file from outside the store
 * (raw_open), and the run and step records the cases write. Included after check.h. Must never:
 * hold a case's own checks.
 */
#ifndef MEND_STORE_CASE_H
#define MEND_STORE_CASE_H

#include "raw_sqlite.h"
#include "store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[64];
static char path_buf[128];

/* The path of `name` in the program's directory (one buffer: copy it to keep two). */
static inline const char *file_in_dir(const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

static inline void remove_with_suffix(const char *path, const char *suffix) {
  char p[4096];
  int n = snprintf(p, sizeof p, "%s%s", path, suffix);
  if (n > 0 && (size_t)n < sizeof p) unlink(p);
}

/* A database file and its WAL and shared-memory files. */
static inline void remove_db(const char *path) {
  unlink(path);
  remove_with_suffix(path, "-wal");
  remove_with_suffix(path, "-shm");
}

/* A raw connection for what the store does not expose: checking the file from outside. */
static inline sqlite3 *raw_open(const char *path) {
  sqlite3 *db = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK) {
    fprintf(stderr, "raw open %s: %s\n", path, sqlite3_errmsg(db));
    exit(2);
  }
  return db;
}

/* The store on the file at path (durability d), or NULL having said why on stderr. */
static inline mend_store *store_at(const char *path, mend_durability d) {
  char err[512] = "";
  mend_store *s = mend_store_open(path, d, err, sizeof err);
  if (!s) fprintf(stderr, "open %s: %s\n", path, err);
  return s;
}

/* Two stores on one file: *a records its writes and runs them in groups on its commit thread,
 * as an engine's store does (a worker, "holder:1:a"); *b another process beside it. 0, or -1
 * with neither open. */
static inline int holder_and_other(const char *path, mend_store **a, mend_store **b) {
  *a = store_at(path, MEND_DURABILITY_PROCESS);
  *b = store_at(path, MEND_DURABILITY_PROCESS);
  if (!*a || !*b) {
    if (*a) mend_store_close(*a);
    if (*b) mend_store_close(*b);
    *a = *b = NULL;
    return -1;
  }
  mend_store_set_worker(*a, "holder:1:a");
  return mend_store_start_writer(*a, NULL, NULL) == 0 ? 0 : -1;
}

static inline const char *str_field(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

static inline mend_run_rec run_rec(const char *id, const char *key, const char *status,
                                   double created) {
  mend_run_rec r = {.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                    .run_key = key, .status = status, .input = "{\"order\":42,\"items\":[1,2.5]}",
                    .error = NULL, .attention = 0, .created = created, .updated = created};
  return r;
}

static inline mend_step_rec step_rec(const char *run, int idx, const char *name,
                                     const char *status) {
  mend_step_rec st = {.run_id = run, .idx = idx, .name = name, .status = status, .attempts = 1,
                      .comp_attempts = 0, .idem_key = NULL, .custom_key = 0, .result = NULL,
                      .error = NULL, .due = -1, .last_delay = -1, .updated = 10};
  return st;
}

/* The program's directory, /tmp/mend-NAME-XXXXXX, or the program ends (exit 2). */
static inline void store_case_begin(const char *name) { check_make_dir(dir, sizeof dir, name); }

/* Removes the directory and what the cases left in it; says how the program's checks went. */
static inline int store_case_end(const char *suite) {
  check_remove_dir(dir);
  return check_done(suite);
}

#endif
