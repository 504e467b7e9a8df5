/*
 * pg_serve: the PostgreSQL store's reads for `mend serve`: a page of the runs list walked with
 * a cursor (runs_page) and the counts of runs by workflow and status for /metrics
 * (run_counts), in exactly the JSON shapes of src/store/runs_page.c and run_counts.c. The
 * order is SQLite's, (created, id) newest first with ids compared by bytes (COLLATE "C"), so a
 * cursor names a place that later inserts do not move. Reads run after the open batch, in its
 * transaction, as every read of this store does, but while a batch waits for another session's
 * lock (pg_wait.c): then the committed rows, on aux. Must never: write; name a password in a
 * message (errors carry the server's host:port/dbname only).
 */
#include "store/pg/pg_int.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NULLS LAST: SQLite sorts NULL below every number, so last when descending; a run without a
 * creation time is then never after a cursor, in either store. The cursor's id comes as bytes
 * ($5, bytea), compared with the ids' bytes as SQLite compares them: a cursor a client made up
 * that is not UTF-8 still names a place, and does not fail the open batch's transaction. */
static const char SQL_RUNS_PAGE[] =
  "SELECT r.id, r.workflow, coalesce(r.version, v.version) AS version,"
  " r.run_key AS key, r.status, r.error, r.attention <> 0 AS attention, r.reason, r.owner,"
  " r.created, r.updated, r.unavailable FROM runs r"
  " LEFT JOIN workflow_versions v ON v.id = r.workflow_version"
  " WHERE ($1::text IS NULL OR r.status = $1) AND ($2::text IS NULL OR r.workflow = $2)"
  " AND ($3::float8 IS NULL OR r.created >= $3)"
  " AND ($5::bytea IS NULL OR r.created < $4::float8"
  " OR (r.created = $4::float8 AND convert_to(r.id, 'UTF8') < $5::bytea))"
  " ORDER BY r.created DESC NULLS LAST, r.id COLLATE \"C\" DESC LIMIT $6::bigint";

/* Text compared by bytes, as SQLite groups and orders it. */
static const char SQL_RUN_COUNTS[] =
  "SELECT workflow, status, count(*) AS runs,"
  " min(CASE WHEN status IN ('running', 'compensating') THEN created END) AS oldest"
  " FROM runs GROUP BY workflow, status"
  " ORDER BY workflow COLLATE \"C\", status COLLATE \"C\"";

enum { OID_BOOL = 16, OID_INT8 = 20, OID_INT4 = 23, OID_FLOAT8 = 701 };

/* A column's value as SQLite's row reader makes it: JSON has no infinity, so the largest
 * double stands for one; text jansson refuses (not UTF-8) reads with '?' for such bytes. */
static json_t *value(const PGresult *r, int i, int f) {
  const char *t = PQgetvalue(r, i, f);
  size_t n = (size_t)PQgetlength(r, i, f);
  switch (PQftype(r, f)) {
  case OID_BOOL:
    return json_boolean(t[0] == 't');
  case OID_INT4: case OID_INT8:
    return json_integer((json_int_t)strtoll(t, NULL, 10));
  case OID_FLOAT8: {
    double d = strtod(t, NULL);
    return json_real(isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d);
  }
  default: {
    json_t *v = json_stringn(t, n);
    if (v) return v;
    char *copy = malloc(n + 1);
    if (!copy) return NULL;
    for (size_t k = 0; k < n; k++) copy[k] = (t[k] & 0x80) || t[k] == 0 ? '?' : t[k];
    v = json_stringn(copy, n);
    free(copy);
    return v;
  }
  }
}

/* Each row of q's result as an object keyed by column names, NULLs (and NaN, which SQLite
 * stores as NULL) left out; NULL with the store's error set. */
static json_t *rows(mend_pg *p, const char *sql, int n, const char *const *vals,
                    const char *what) {
  p->view_failed = 0;
  PGconn *aux = mend__pg_view_aux(p);   /* a batch waits for a lock: the committed rows */
  PGresult *r;
  if (aux) {
    r = PQexecParams(aux, sql, n, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
      p->view_failed = 1;
      mend__pg_fail_to(p->view_err, sizeof p->view_err, p->aux_server, aux, r, what);
      PQclear(r);
      return NULL;
    }
  } else {
    if (mend__pg_sync(p) != 0) return NULL;
    if (!(r = mend__pg_run(p, -1, sql, n, vals, what))) return NULL;
  }
  json_t *a = json_array();
  for (int i = 0; a && i < PQntuples(r); i++) {
    json_t *o = json_object();
    for (int f = 0; o && f < PQnfields(r); f++) {
      if (PQgetisnull(r, i, f)) continue;
      if (PQftype(r, f) == OID_FLOAT8 && isnan(strtod(PQgetvalue(r, i, f), NULL))) continue;
      json_t *v = value(r, i, f);
      if (!v || json_object_set_new(o, PQfname(r, f), v) != 0) {
        json_decref(o);
        o = NULL;
      }
    }
    if (!o || json_array_append_new(a, o) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  PQclear(r);
  if (!a && aux) {
    p->view_failed = 1;
    mend__pg_msg(p->view_err, sizeof p->view_err, "%s: %s: out of memory", p->aux_server, what);
  } else if (!a) {
    mend__pg_msg(p->err, sizeof p->err, "%s: %s: out of memory", p->server, what);
  }
  return a;
}

json_t *mend__pg_runs_page(mend_store *s, const char *status, const char *workflow,
                           double since, double after_created, const char *after_id,
                           int limit) {
  mend_pg *p = PG(s);
  /* a name the server cannot take as text is no run's */
  if (!mend__pg_text_fits(p, status) || !mend__pg_text_fits(p, workflow)) return json_array();
  char since_t[40], after_t[40], limit_t[24], *id_hex = NULL;
  if (after_id) {
    size_t n = strlen(after_id);
    if (!(id_hex = malloc(2 * n + 3))) {
      mend__pg_msg(p->err, sizeof p->err, "%s: read a page of runs: out of memory", p->server);
      return NULL;
    }
    memcpy(id_hex, "\\x", 2);
    for (size_t i = 0; i < n; i++)
      snprintf(id_hex + 2 + 2 * i, 3, "%02x", (unsigned char)after_id[i]);
    id_hex[2 + 2 * n] = 0;
  }
  snprintf(since_t, sizeof since_t, "%.17g", since);
  snprintf(after_t, sizeof after_t, "%.17g", after_created);
  snprintf(limit_t, sizeof limit_t, "%d", limit);
  const char *v[6] = {status, workflow, since >= 0 ? since_t : NULL,
                      after_id ? after_t : NULL, id_hex, limit > 0 ? limit_t : NULL};
  json_t *page = rows(p, SQL_RUNS_PAGE, 6, v, "read a page of runs");
  free(id_hex);
  return page;
}

json_t *mend__pg_run_counts(mend_store *s) {
  return rows(PG(s), SQL_RUN_COUNTS, 0, NULL, "count runs");
}
