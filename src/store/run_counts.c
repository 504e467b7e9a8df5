/*
 * run_counts: how many runs there are of each workflow in each status, and the oldest
 * unfinished one's creation time, in one pass over the runs table, for /metrics. Must never
 * write, nor keep a statement between calls (the store's prepared table belongs to open.c
 * and schema.c).
 */
#include "store_int.h"

static const char *const RUN_COUNTS_SQL =
  "SELECT workflow, status, count(*) AS runs,"
  " min(CASE WHEN status IN ('running', 'compensating') THEN created END) AS oldest"
  " FROM runs GROUP BY workflow, status ORDER BY workflow, status";

json_t *mend__sqlite_run_counts(mend_store *s) {
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = NULL;
  sqlite3 *db = s->view_committed ? s->reader : s->db;
  if (sqlite3_prepare_v2(db, RUN_COUNTS_SQL, -1, &q, NULL) != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: count runs: %s", s->path, sqlite3_errmsg(db));
    sqlite3_finalize(q);
    return NULL;
  }
  json_t *rows = mend__rows_array(s, q, SQLITE_OK, "count runs");
  sqlite3_finalize(q);
  return rows;
}
