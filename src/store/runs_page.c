/*
 * runs_page: one page of the runs list for clients that walk it with a cursor (the HTTP API).
 * Owns that one query, ordered by (created, id) newest first so that a cursor names a place in
 * the order that later inserts do not move. Must never write, nor hold a statement between
 * calls (the store's prepared table belongs to open.c and schema.c).
 */
#include <stdio.h>

#include "store_int.h"

static const char *const RUNS_PAGE_SQL =
  "SELECT r.id, r.workflow, coalesce(r.version, v.version) AS version,"
  " r.run_key AS key, r.status, r.error, r.attention, r.reason, r.owner,"
  " r.created, r.updated, r.unavailable FROM runs r"
  " LEFT JOIN workflow_versions v ON v.id = r.workflow_version"
  " WHERE (?1 IS NULL OR r.status = ?1) AND (?2 IS NULL OR r.workflow = ?2)"
  " AND (?3 IS NULL OR r.created >= ?3)"
  " AND (?4 IS NULL OR r.created < ?4 OR (r.created = ?4 AND r.id < ?5))"
  " ORDER BY r.created DESC, r.id DESC LIMIT ?6";

json_t *mend__sqlite_runs_page(mend_store *s, const char *status, const char *workflow,
                             double since, double after_created, const char *after_id,
                             int limit) {
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = NULL;
  sqlite3 *db = s->view_committed ? s->reader : s->db;
  if (sqlite3_prepare_v2(db, RUNS_PAGE_SQL, -1, &q, NULL) != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: read a page of runs: %s", s->path,
                  sqlite3_errmsg(db));
    sqlite3_finalize(q);
    return NULL;
  }
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, status));
  BIND(mend__bind_text(q, 2, workflow));
  BIND(mend__bind_opt_real(q, 3, since));
  if (after_id) {
    BIND(sqlite3_bind_double(q, 4, after_created));
    BIND(mend__bind_text(q, 5, after_id));
  }
  BIND(sqlite3_bind_int(q, 6, limit > 0 ? limit : -1));
  json_t *rows = mend__rows_array(s, q, rc, "read a page of runs");
  sqlite3_finalize(q);
  return rows;
}
