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
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The live workers, as "worker W (N runs, its lease lasts S s more), ..." in buf, as many
 * whole entries as fit and then ", and K more" for the rest; their count. */
static int live_workers(mend_store *s, char *buf, size_t len, int *failed) {
  sqlite3_stmt *q;
  *failed = 0;
  if (sqlite3_prepare_v2(s->db, mend__runs_key_holders_sql, -1, &q, NULL) != SQLITE_OK ||
      sqlite3_bind_double(q, 1, mend__wall_now()) != SQLITE_OK) {
    sqlite3_finalize(q);
    *failed = 1;
    return 0;
  }
  enum { MORE_ROOM = sizeof ", and 2147483647 more" };
  int n = 0, left_out = 0, rc;
  size_t used = 0;
  buf[0] = '\0';
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    const char *owner = (const char *)sqlite3_column_text(q, 0);
    int runs = sqlite3_column_int(q, 1);
    char one[320];
    int w = snprintf(one, sizeof one, "%sworker %s (%d run%s, its lease lasts %.0f s more)",
                     n ? ", " : "", owner ? owner : "?", runs, runs == 1 ? "" : "s",
                     sqlite3_column_double(q, 2));
    /* A name cut short or half an entry would read as a worker of that name. */
    if (!left_out && w > 0 && (size_t)w < sizeof one && used + (size_t)w + MORE_ROOM <= len) {
      memcpy(buf + used, one, (size_t)w + 1);
      used += (size_t)w;
    } else {
      left_out++;
    }
    n++;
  }
  if (left_out && len > used)
    snprintf(buf + used, len - used, "%sand %d more", used ? ", " : "", left_out);
  if (rc != SQLITE_DONE) *failed = 1;
  sqlite3_finalize(q);
  return n;
}

/* The layout meta names in buf ("column" or "partial"); -1 when it cannot be read. A file of
 * schema 16 made before the layout was recorded has no row: its runs_key index says. */
static int read_layout(mend_store *s, char *buf, size_t len) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, mend__runs_key_layout_sql, -1, &q, NULL) != SQLITE_OK) return -1;
  int rc = sqlite3_step(q);
  const char *v = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
  snprintf(buf, len, "%s", v ? v : "");
  sqlite3_finalize(q);
  if (v || rc != SQLITE_DONE) return v ? 0 : -1;
  if (sqlite3_prepare_v2(s->db, mend__runs_key_index_sql, -1, &q, NULL) != SQLITE_OK) return -1;
  rc = sqlite3_step(q);
  snprintf(buf, len, "%s", rc == SQLITE_ROW ? "partial" : "column");
  sqlite3_finalize(q);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* What a person made on runs (an index for a query of theirs, a trigger) goes with the old
 * table: its SQL, read before, is run again after. Views name runs by name and are left as
 * they are (the rename does not look into them: legacy_alter_table). */
typedef struct {
  char **sql;
  int n;
} own_schema;

static int own_schema_read(mend_store *s, own_schema *o) {
  sqlite3_stmt *q;
  o->sql = NULL;
  o->n = 0;
  if (sqlite3_prepare_v2(s->db, mend__runs_own_schema_sql, -1, &q, NULL) != SQLITE_OK) return -1;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    char **more = realloc(o->sql, (size_t)(o->n + 1) * sizeof *more);
    char *one = more ? mend_dupstr((const char *)sqlite3_column_text(q, 0)) : NULL;
    if (more) o->sql = more;
    if (!one) {
      rc = SQLITE_NOMEM;
      break;
    }
    o->sql[o->n++] = one;
  }
  sqlite3_finalize(q);
  return rc == SQLITE_DONE ? 0 : -1;
}

static void own_schema_free(own_schema *o) {
  for (int i = 0; i < o->n; i++) free(o->sql[i]);
  free(o->sql);
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
  own_schema own;
  if (own_schema_read(s, &own) != 0) {
    mend__set_msg(err, errlen, "%s: read the indexes and triggers made on runs: %s", s->path,
                  sqlite3_errmsg(s->db));
    own_schema_free(&own);
    goto fail;
  }
  sqlite3_exec(s->db, "PRAGMA legacy_alter_table = ON", NULL, NULL, NULL);
  int rebuilt = sqlite3_exec(s->db, mend__runs_key_rebuild, NULL, NULL, NULL) == SQLITE_OK;
  if (!rebuilt)   /* before the next statement resets the message */
    mend__set_msg(err, errlen, "%s: make run keys partial: %s", s->path, sqlite3_errmsg(s->db));
  sqlite3_exec(s->db, "PRAGMA legacy_alter_table = OFF", NULL, NULL, NULL);
  if (!rebuilt) {
    own_schema_free(&own);
    goto fail;
  }
  for (int i = 0; i < own.n; i++)
    if (sqlite3_exec(s->db, own.sql[i], NULL, NULL, NULL) != SQLITE_OK) {
      mend__set_msg(err, errlen, "%s: make again what was made on runs (%s): %s", s->path,
                    own.sql[i], sqlite3_errmsg(s->db));
      own_schema_free(&own);
      goto fail;
    }
  own_schema_free(&own);
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
  /* Not looked at, so not called current: its address may hold a password to keep quiet. */
  if (mend_store_is_postgres(path)) {
    mend__set_msg(err, errlen, "mend db upgrade changes SQLite files only: on PostgreSQL, run "
                  "keys are a partial index from mend's first schema there, with nothing to do");
    return MEND_RUN_KEYS_FAILED;
  }
  /* A path mistyped, or an empty file, is no new database to make and call current: the file
   * SQLite opens (a "file:" URI's, %HH decoded) must be there, with mend's schema in it. */
  char file[4096];
  if (mend_store_where(path, file, sizeof file) == MEND_DB_FILE && access(file, F_OK) != 0) {
    mend__set_msg(err, errlen, "%s: no database there (%s)", path, strerror(errno));
    return MEND_RUN_KEYS_FAILED;
  }
  int none = 0;
  mend_store *s = mend__sqlite_open_ex(path, MEND_DURABILITY_FULL, &none, err, errlen);
  if (!s) return MEND_RUN_KEYS_FAILED;
  mend_run_keys_outcome r = upgrade(s, despite_leases, err, errlen);
  mend_store_close(s);
  return r;
}
