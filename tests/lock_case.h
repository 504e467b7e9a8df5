/*
 * lock_case: what the C tests of another process's SQLite write lock share (test_lock_answers,
 * test_kept_start): the program's temporary directory and its database's path (lock_case_begin),
 * a workflow file written there, an engine on the database with the virtual clock and the
 * workflows of that directory loaded, and the lock itself: a second connection inside BEGIN
 * IMMEDIATE, as the sqlite3 shell holds it. Included after check.h. Must never: hold a case's
 * own checks.
 */
#ifndef MEND_LOCK_CASE_H
#define MEND_LOCK_CASE_H

#include <mend.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "raw_sqlite.h"
#include "tick_host.h"

static char dir[64];
static char path[128];

/* A directory of the program's own (named after `name`) and the database file `db` in it. */
static inline void lock_case_begin(const char *name, const char *db) {
  snprintf(dir, sizeof dir, "/tmp/mend-test-%s-XXXXXX", name);
  if (!mkdtemp(dir)) { perror("mkdtemp"); exit(2); }
  snprintf(path, sizeof path, "%s/%s", dir, db);
}

static inline void write_file(const char *name, const char *text) {
  char p[160];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (!f) { perror(p); exit(2); }
  fputs(text, f);
  fclose(f);
}

/* An engine on the database, on the virtual clock, with the workflow files named (a NULL-ended
 * list, in the directory) loaded; anything refused ends the program. */
static inline mend_engine *lock_engine(const char *const *files) {
  mend_options o;
  mend_options_init(&o);
  o.db_path = path;
  o.virtual_clock = 1;
  mend_engine *E = tick_host_engine(&o);
  for (int i = 0; files[i]; i++) {
    char p[160];
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    if (mend_engine_load(E, p, NULL, 0) != MEND_OK) {
      fprintf(stderr, "load %s: %s\n", p, mend_engine_errmsg(E));
      exit(2);
    }
  }
  return E;
}

/* Another process's write lock taken and let go. */
static inline void hold(sqlite3 *holder) {
  CHECK_EQ_INT(sqlite3_exec(holder, "BEGIN IMMEDIATE; INSERT INTO meta VALUES('held', 'x')", NULL,
                            NULL, NULL), SQLITE_OK);
}
static inline void let_go(sqlite3 *holder) {
  CHECK_EQ_INT(sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
}

#endif
