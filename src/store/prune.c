/*
 * prune: forgetting ended runs (mend prune) in the SQLite backend, in one transaction of its
 * own: the runs, their steps, history, events and dead-letter rows, with their run keys and
 * custom idempotency keys. Must never remove an unfinished run or one that waits for a person
 * in the dead-letter queue.
 */
#include "store_int.h"

#include <stdlib.h>

/* The runs a prune takes: ended (succeeded, compensated, failed, resolved), last updated before
 * ?1, of status ?2 if given. Never running or compensating, and never needs_attention: a run in
 * the dead-letter queue waits for a person, who resolves it first. Nor a child run while a run
 * above it has not ended (or is a dead letter): that run may still compensate it, which reopens
 * its row. */
#define PRUNE_RUNS                                                                             \
  "SELECT id FROM runs p WHERE status IN ('succeeded', 'compensated', 'failed', 'resolved')"   \
  " AND updated < ?1 AND (?2 IS NULL OR status = ?2) AND (parent_run IS NULL OR NOT EXISTS ("  \
  "WITH RECURSIVE up(id) AS (SELECT p.parent_run UNION SELECT r.parent_run FROM runs r"        \
  " JOIN up ON r.id = up.id WHERE r.parent_run IS NOT NULL) SELECT 1 FROM runs r JOIN up"      \
  " ON r.id = up.id WHERE r.status IN ('running', 'compensating', 'needs_attention')))"

/* The ended runs of the prune's age and status it keeps: child runs under a run that has not
 * ended (said, so that "nothing to prune" is not read as none of them having ended). */
#define KEPT_RUNS                                                                              \
  "SELECT count(*) FROM runs WHERE status IN ('succeeded', 'compensated', 'failed', 'resolved')" \
  " AND updated < ?1 AND (?2 IS NULL OR status = ?2) AND parent_run IS NOT NULL"                \
  " AND id NOT IN (" PRUNE_RUNS ")"

/* Prunes are rare: their statements are prepared when used, not at open. Runs sql with the
 * prune's two parameters; with `counts`, adds each row's (name, count) to it, or, for a one
 * column row, sets counts[key]. */
static int prune_sql(mend_store *s, const char *sql, double before, const char *status,
                     json_t *counts, const char *key) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
    mend__sql_err(s, "prune");
    return -1;
  }
  int rc = SQLITE_OK;
  if (sqlite3_bind_parameter_count(q) == 2) {
    rc = sqlite3_bind_double(q, 1, before);
    if (rc == SQLITE_OK) rc = mend__bind_text(q, 2, status);
  }
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = mend__step_busy_retry(s, q);
    if (rc != SQLITE_ROW) break;
    const char *name = sqlite3_column_count(q) == 2 ? (const char *)sqlite3_column_text(q, 0) : key;
    json_t *n = json_integer(sqlite3_column_int64(q, sqlite3_column_count(q) - 1));
    if (!name || !n || json_object_set_new(counts, name, n) != 0) rc = SQLITE_NOMEM;
  }
  if (rc != SQLITE_DONE) mend__sql_err(s, "prune");
  sqlite3_finalize(q);
  return rc == SQLITE_DONE ? 0 : -1;
}

json_t *mend__sqlite_prune(mend_store *s, double before, const char *status, int dry_run) {
  /* A transaction of its own: whatever this store recorded before is committed first. */
  if (mend__sqlite_commit(s) != 0) return NULL;
  json_t *res = json_object(), *runs = json_object();
  if (!res || !runs || json_object_set(res, "runs", runs) != 0) {
    json_decref(res);
    json_decref(runs);
    mend__set_msg(s->err, sizeof s->err, "%s: prune: out of memory", s->path);
    return NULL;
  }
  int failed =
      prune_sql(s, dry_run ? "BEGIN" : "BEGIN IMMEDIATE", 0, NULL, NULL, NULL) ||
      prune_sql(s, "SELECT status, count(*) FROM runs WHERE id IN (" PRUNE_RUNS ") GROUP BY status",
                before, status, runs, NULL) ||
      prune_sql(s, "SELECT count(*) FROM steps WHERE run_id IN (" PRUNE_RUNS ")", before, status,
                res, "steps") ||
      prune_sql(s, "SELECT count(*) FROM history WHERE run_id IN (" PRUNE_RUNS ")", before,
                status, res, "history") ||
      prune_sql(s, "SELECT count(*) FROM dlq WHERE run_id IN (" PRUNE_RUNS ")", before, status,
                res, "dlq") ||
      prune_sql(s, KEPT_RUNS, before, status, res, "kept");
  if (!failed && !dry_run)
    failed =
        prune_sql(s, "DELETE FROM dlq WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL,
                  NULL) ||
        prune_sql(s, "DELETE FROM history WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL,
                  NULL) ||
        prune_sql(s, "DELETE FROM steps WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL,
                  NULL) ||
        prune_sql(s, "DELETE FROM inbox WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL,
                  NULL) ||
        prune_sql(s, "DELETE FROM tokens WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL,
                  NULL) ||
        prune_sql(s, "DELETE FROM runs WHERE id IN (" PRUNE_RUNS ")", before, status, NULL, NULL);
  if (!failed) failed = prune_sql(s, "COMMIT", 0, NULL, NULL, NULL);
  json_decref(runs);
  if (failed) {
    if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    json_decref(res);
    return NULL;
  }
  return res;
}
