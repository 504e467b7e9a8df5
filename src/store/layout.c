/*
 * layout: the explicit change of a SQLite file's run_key layout from `column` (the UNIQUE
 * column of schema 1, an index entry for every run) to `partial` (runs_key, only the runs
 * that have a key), behind `mend db upgrade` (schema.c says what each layout is). It is the
 * one change of the schema that a mend before schema 16, still running on the file, does not
 * survive: its starts name a constraint (ON CONFLICT(run_key)) that is gone. So it is done on
 * purpose, refused while a worker's lease on the file lasts, in one transaction.
 * Must never: run at an automatic open; leave the file half made (killed or failed, the file
 * is as before); hold SQL text of its own (schema.c has it).
 */
#include "store_int.h"
#include "store/sqlite.h"

#include <stdio.h>
#include <string.h>

/* The live workers, as "worker W (N runs, its lease lasts S s more), ..." in buf; their count. */
static int live_workers(mend_store *s, char *buf, size_t len, int *failed) {
  sqlite3_stmt *q;
  *failed = 0;
  if (sqlite3_prepare_v2(s->db, mend__runs_key_holders_sql, -1, &q, NULL) != SQLITE_OK ||
      sqlite3_bind_double(q, 1, mend__wall_now()) != SQLITE_OK) {
    sqlite3_finalize(q);
    *failed = 1;
    return 0;
  }
  int n = 0, rc;
  size_t used = 0;
  buf[0] = '\0';
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    const char *owner = (const char *)sqlite3_column_text(q, 0);
    int runs = sqlite3_column_int(q, 1);
    if (used < len) {
      int w = snprintf(buf + used, len - used,
                       "%sworker %s (%d run%s, its lease lasts %.0f s more)", n ? ", " : "", owner ? owner : "?", runs, runs == 1 ? "" : "s",
                       sqlite3_column_double(q, 2));
      used = w < 0 ? len : used + (size_t)w;
    }
    n++;
  }
  if (rc != SQLITE_DONE) *failed = 1;
  sqlite3_finalize(q);
  return n;
}

/* The layout meta names in buf ("column" or "partial"); -1 when it cannot be read. */
static int read_layout(mend_store *s, char *buf, size_t len) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, mend__runs_key_layout_sql, -1, &q, NULL) != SQLITE_OK) return -1;
  int rc = sqlite3_step(q);
  const char *v = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
  snprintf(buf, len, "%s", v ? v : "");
  sqlite3_finalize(q);
  return v ? 0 : -1;
}

static mend_run_keys_outcome upgrade(mend_store *s, int despite_leases, char *err, int errlen) {
  if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
    mend__set_msg(err, errlen, "%s: begin: %s", s->path, sqlite3_errmsg(s->db));
    return MEND_RUN_KEYS_FAILED;
  }
  char layout[16];
  if (read_layout(s, layout, sizeof layout) != 0) {
    mend__set_msg(err, errlen, "%s: no run-key layout in meta", s->path);
    goto fail;
  }
  if (strcmp(layout, "partial") == 0) {
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return MEND_RUN_KEYS_CURRENT;
  }
  /* Read inside the write transaction: no worker can take a lease between this look and the
   * rebuild's commit. */
  char workers[768];
  int failed, n = live_workers(s, workers, sizeof workers, &failed);
  if (failed) {
    mend__set_msg(err, errlen, "%s: read the workers' leases: %s", s->path, sqlite3_errmsg(s->db));
    goto fail;
  }
  if (n > 0 && !despite_leases) {
    mend__set_msg(err, errlen, "%s: %s: stop every mend running on the file first (a mend "
                  "before schema 16 fails every start after this upgrade), or give "
                  "--despite-leases if none of them is older", s->path, workers);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return MEND_RUN_KEYS_HELD;
  }
  if (sqlite3_exec(s->db, mend__runs_key_rebuild, NULL, NULL, NULL) != SQLITE_OK) {
    mend__set_msg(err, errlen, "%s: make run keys partial: %s", s->path, sqlite3_errmsg(s->db));
    goto fail;
  }
  if (sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
    mend__set_msg(err, errlen, "%s: commit: %s", s->path, sqlite3_errmsg(s->db));
    goto fail;
  }
  return MEND_RUN_KEYS_UPGRADED;
fail:
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return MEND_RUN_KEYS_FAILED;
}

mend_run_keys_outcome mend_store_upgrade_run_keys(const char *path, int despite_leases, char *err,
                                                  int errlen) {
  /* PostgreSQL's run_key index is partial since its schema 3 */
  if (mend_store_is_postgres(path)) return MEND_RUN_KEYS_CURRENT;
  mend_store *s = mend__sqlite_open(path, MEND_DURABILITY_FULL, err, errlen);
  if (!s) return MEND_RUN_KEYS_FAILED;
  mend_run_keys_outcome r = upgrade(s, despite_leases, err, errlen);
  mend_store_close(s);
  return r;
}
