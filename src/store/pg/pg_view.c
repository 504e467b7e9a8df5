/*
 * pg_view: the PostgreSQL store's views for people, in the SQLite store's JSON shapes (the
 * contract is in pg_view.h; the shapes are query.c's: columns as fields, NULLs left out, JSON
 * columns decoded, flags as booleans, pending steps listed from the run's step names, a step
 * whose last transition is `-> running` shown in flight). Orders are SQLite's: text by bytes
 * (COLLATE "C"), NULLs first when ascending. Must never: write, except prune; leave a
 * transaction open that it began; name the server or a password in a message.
 */
#include "store/pg/pg_view.h"
#include "store/pg/pg_line.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* The server's message, on one line. */
static void pg_err(const char *m, const char *what, char *err, size_t errlen) {
  char cause[768];
  mend__pg_one_line(cause, sizeof cause, m && *m ? m : "no connection");
  set_err(err, errlen, "%s: %s", what, cause);
}

/* Runs sql with text parameters; the result, or NULL with err set. */
static PGresult *exec(PGconn *c, const char *sql, int n, const char *const *params,
                      const char *what, char *err, size_t errlen) {
  PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
  ExecStatusType st = PQresultStatus(r);
  if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) return r;
  const char *m = r ? PQresultErrorMessage(r) : "";
  pg_err(m && *m ? m : PQerrorMessage(c), what, err, errlen);
  PQclear(r);
  return NULL;
}

static int is_json_column(const char *name) {
  return strcmp(name, "input") == 0 || strcmp(name, "result") == 0 ||
         strcmp(name, "step_names") == 0 || strcmp(name, "sources") == 0;
}

static int is_bool_column(const char *name) {
  return strcmp(name, "attention") == 0 || strcmp(name, "custom_key") == 0 ||
         strcmp(name, "kept") == 0 || strcmp(name, "slept") == 0 || strcmp(name, "reused") == 0 ||
         strcmp(name, "cancel_requested") == 0;
}

/* Text that is not valid UTF-8 reads with '?' for the bytes jansson refuses, as in SQLite. */
static json_t *text_value(const char *t, size_t n) {
  json_t *v = json_stringn(t, n);
  if (v) return v;
  char *copy = malloc(n + 1);
  if (!copy) return NULL;
  for (size_t i = 0; i < n; i++) copy[i] = (t[i] & 0x80) || t[i] == 0 ? '?' : t[i];
  v = json_stringn(copy, n);
  free(copy);
  return v;
}

enum { OID_BOOL = 16, OID_INT8 = 20, OID_INT2 = 21, OID_INT4 = 23, OID_FLOAT4 = 700,
       OID_FLOAT8 = 701, OID_NUMERIC = 1700 };

/* Row i of r as an object keyed by column names; NULL columns are left out. */
static json_t *row_object(const PGresult *r, int i) {
  json_t *o = json_object();
  if (!o) return NULL;
  int n = PQnfields(r);
  for (int f = 0; f < n; f++) {
    if (PQgetisnull(r, i, f)) continue;
    const char *name = PQfname(r, f);
    const char *t = PQgetvalue(r, i, f);
    size_t len = (size_t)PQgetlength(r, i, f);
    json_t *v = NULL;
    switch (PQftype(r, f)) {
    case OID_BOOL:
      v = json_boolean(t[0] == 't');
      break;
    case OID_INT2: case OID_INT4: case OID_INT8: {
      long long x = strtoll(t, NULL, 10);
      v = is_bool_column(name) ? json_boolean(x != 0) : json_integer((json_int_t)x);
      break;
    }
    case OID_FLOAT4: case OID_FLOAT8: case OID_NUMERIC: {
      /* JSON has no infinity: as in SQLite, a wait of math.huge reads as the largest double. */
      double d = strtod(t, NULL);
      if (isnan(d)) continue;
      v = json_real(isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d);
      break;
    }
    default:
      if (is_json_column(name)) v = json_loadb(t, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
      if (!v) v = text_value(t, len);   /* not JSON after all: keep the text */
      break;
    }
    if (!v || json_object_set_new(o, name, v) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* Every row of sql's result as an array of objects; NULL with err set. */
static json_t *rows_array(PGconn *c, const char *sql, int n, const char *const *params,
                          const char *what, char *err, size_t errlen) {
  PGresult *r = exec(c, sql, n, params, what, err, errlen);
  if (!r) return NULL;
  json_t *a = json_array();
  int rows = PQntuples(r);
  for (int i = 0; a && i < rows; i++) {
    json_t *o = row_object(r, i);
    if (!o || json_array_append_new(a, o) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  PQclear(r);
  if (!a) set_err(err, errlen, "%s: out of memory", what);
  return a;
}

/* ---- a run ----------------------------------------------------------------------------- */

#define LEASE_UNTIL \
  "(SELECT extract(epoch FROM w.lease_until)::float8 FROM workers w WHERE w.owner = r.owner)" \
  " AS lease_until"

static const char SQL_RUN[] =
  "SELECT r.id, r.workflow, coalesce(r.version, v.version) AS version,"
  " coalesce(r.source, v.source) AS source, r.run_key AS key, r.status, r.input, r.error,"
  " r.attention, r.reason, r.owner, " LEASE_UNTIL ","
  " r.created, r.updated, coalesce(r.step_names, v.step_names) AS step_names,"
  " CASE WHEN r.status = 'running' THEN nullif(r.cancel_requested, 0) END AS cancel_requested,"
  " r.unavailable, r.parent_run,"
  " r.parent_step"
  " FROM runs r LEFT JOIN workflow_versions v ON v.id = r.workflow_version WHERE r.id = $1";

/* As Q_STEPS (schema.c): the runs reused results are from, in one pass over the run's history
 * (its primary key), made only when it has a reused step. */
static const char SQL_STEPS[] =
  "SELECT idx, name, status, attempts, comp_attempts,"
  " coalesce(idem_key, run_id || '/' || name) AS idempotency_key,"
  " custom_key, result, error, error_kind, due, last_delay, updated, slept, awaits,"
  " CASE WHEN custom_key = 2 THEN 1 END AS reused,"
  " CASE WHEN custom_key = 2 THEN u.detail END AS reused_from FROM steps"
  " LEFT JOIN (SELECT DISTINCT ON (step) step, detail FROM history WHERE run_id = $1"
  " AND event = 'reused' AND EXISTS (SELECT 1 FROM steps s WHERE s.run_id = $1"
  " AND s.custom_key = 2) ORDER BY step, seq DESC) u ON u.step = steps.name"
  " WHERE run_id = $1 ORDER BY idx";

static const char SQL_IN_FLIGHT[] =
  "SELECT step, coalesce(to_status = 'running', false), coalesce(attempt, 0), at FROM history"
  " WHERE run_id = $1 AND event = 'step' ORDER BY seq";

/* A step has no row until its first transition: the run's step names give the ones not
 * begun, as their row would say (pending, no attempt, the default key). step_names itself is
 * not part of the run as read. */
static int list_pending(json_t *run, json_t *steps, char *err, size_t errlen) {
  json_t *names = json_object_get(run, "step_names");
  if (!names) return 0;
  const char *id = json_string_value(json_object_get(run, "id"));
  json_t *created = json_object_get(run, "created");
  size_t i;
  json_t *name;
  int bad = !json_is_array(names) || !id;
  json_array_foreach(names, i, name) {
    if (bad) break;
    json_t *row = json_array_get(steps, i);
    if (row && json_integer_value(json_object_get(row, "idx")) == (json_int_t)i) continue;
    const char *n = json_string_value(name);
    if (!n) { bad = 1; break; }
    json_t *p = json_pack("{s:I, s:s, s:s, s:i, s:i, s:o, s:b, s:b}", "idx", (json_int_t)i,
                          "name", n, "status", "pending", "attempts", 0, "comp_attempts", 0,
                          "idempotency_key", json_sprintf("%s/%s", id, n), "custom_key", 0,
                          "slept", 0);
    if (!p || (created && json_object_set(p, "updated", created) != 0) ||
        json_array_insert_new(steps, i, p) != 0) {
      set_err(err, errlen, "read steps: out of memory");
      return -1;
    }
  }
  if (bad) {
    set_err(err, errlen, "run %s: step_names is not a JSON array of names", id ? id : "?");
    return -1;
  }
  json_object_del(run, "step_names");
  return 0;
}

/* A step's row says what its last attempt came to; an attempt begun since is only in
 * history (its `-> running` row): such a step reads as running, with that attempt. */
static int show_in_flight(PGconn *c, const char *id, json_t *steps, char *err, size_t errlen) {
  const char *p[1] = {id};
  PGresult *r = exec(c, SQL_IN_FLIGHT, 1, p, "read attempts in flight", err, errlen);
  if (!r) return -1;
  size_t n = json_array_size(steps);
  struct last { long long attempt_1; double at; } *last = calloc(n ? n : 1, sizeof *last);
  if (!last) {
    PQclear(r);
    set_err(err, errlen, "read steps: out of memory");
    return -1;
  }
  int rows = PQntuples(r);
  for (int k = 0; k < rows; k++) {
    if (PQgetisnull(r, k, 0)) continue;
    const char *name = PQgetvalue(r, k, 0);
    for (size_t i = 0; i < n; i++) {
      const char *step = json_string_value(json_object_get(json_array_get(steps, i), "name"));
      if (!step || strcmp(step, name) != 0) continue;
      last[i].attempt_1 =
          PQgetvalue(r, k, 1)[0] == 't' ? 1 + strtoll(PQgetvalue(r, k, 2), NULL, 10) : 0;
      last[i].at = PQgetisnull(r, k, 3) ? 0 : strtod(PQgetvalue(r, k, 3), NULL);
      break;
    }
  }
  PQclear(r);
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    if (!last[i].attempt_1) continue;
    json_t *st = json_array_get(steps, i);
    json_object_del(st, "due");   /* the wait the row tells of is over */
    if (json_object_set_new(st, "status", json_string("running")) != 0 ||
        json_object_set_new(st, "attempts", json_integer(last[i].attempt_1 - 1)) != 0 ||
        json_object_set_new(st, "updated", json_real(last[i].at)) != 0) {
      set_err(err, errlen, "read steps: out of memory");
      rc = -1;
    }
  }
  free(last);
  return rc;
}

static json_t *read_run(PGconn *c, const char *id, char *err, size_t errlen, int *not_found) {
  const char *p[1] = {id};
  PGresult *r = exec(c, SQL_RUN, 1, p, "read run", err, errlen);
  if (!r) return NULL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    *not_found = 1;
    set_err(err, errlen, "no run %s", id ? id : "(null)");
    return NULL;
  }
  json_t *run = row_object(r, 0);
  PQclear(r);
  if (!run) {
    set_err(err, errlen, "read run: out of memory");
    return NULL;
  }
  json_t *steps = rows_array(c, SQL_STEPS, 1, p, "read steps", err, errlen);
  if (!steps || json_object_set_new(run, "steps", steps) != 0 ||
      list_pending(run, steps, err, errlen) != 0) {
    json_decref(run);
    return NULL;
  }
  const char *status = json_string_value(json_object_get(run, "status"));
  if (status && (strcmp(status, "running") == 0 || strcmp(status, "compensating") == 0) &&
      show_in_flight(c, id, steps, err, errlen) != 0) {
    json_decref(run);
    return NULL;
  }
  return run;
}

static int simple(PGconn *c, const char *sql, const char *what, char *err, size_t errlen) {
  PGresult *r = exec(c, sql, 0, NULL, what, err, errlen);
  PQclear(r);
  return r ? 0 : -1;
}

json_t *mend__pg_view_run(PGconn *c, const char *id, char *err, size_t errlen, int *not_found) {
  int nf = 0;
  json_t *run = NULL;
  PGTransactionStatusType ts = PQtransactionStatus(c);
  if (ts == PQTRANS_INTRANS) {
    run = read_run(c, id, err, errlen, &nf);
  } else if (ts != PQTRANS_IDLE) {
    set_err(err, errlen, "read run: the connection is %s",
            ts == PQTRANS_INERROR ? "in a failed transaction" : "busy");
  } else if (simple(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "read run", err,
                    errlen) == 0) {
    run = read_run(c, id, err, errlen, &nf);
    char keep[256] = "";
    if (!run && err) snprintf(keep, sizeof keep, "%s", err);
    if (simple(c, run ? "COMMIT" : "ROLLBACK", "read run", err, errlen) != 0) {
      json_decref(run);
      run = NULL;
      nf = 0;
    } else if (!run && err) {
      snprintf(err, errlen, "%s", keep);
    }
  }
  if (not_found) *not_found = nf;
  return run;
}

/* ---- lists ----------------------------------------------------------------------------- */

/* A history row as every read of it gives it, up to its WHERE. */
#define HISTORY_ROW                                                                             \
  "seq, run_id, step, at, event, from_status AS \"from\", to_status AS \"to\", attempt, error," \
  " error_kind, delay, detail, worker FROM history"

/* A history read (NULL through): an empty one of a run not in the store is NULL, "no run <id>"
 * and *not_found, as a missing run is to every view. */
static json_t *of_a_run(PGconn *c, const char *id, json_t *rows, char *err, size_t errlen,
                        int *not_found) {
  *not_found = 0;
  if (!rows || json_array_size(rows) > 0) return rows;
  const char *p[1] = {id};
  PGresult *r = exec(c, "SELECT 1 FROM runs WHERE id = $1", 1, p, "read history", err, errlen);
  if (r && PQntuples(r) > 0) {
    PQclear(r);
    return rows;
  }
  json_decref(rows);
  if (r) {
    PQclear(r);
    *not_found = 1;
    set_err(err, errlen, "no run %s", id ? id : "(null)");
  }
  return NULL;
}

json_t *mend__pg_view_history(PGconn *c, const char *id, char *err, size_t errlen,
                              int *not_found) {
  const char *p[1] = {id};
  return of_a_run(c, id,
                  rows_array(c, "SELECT " HISTORY_ROW " WHERE run_id = $1 ORDER BY seq", 1, p,
                             "read history", err, errlen),
                  err, errlen, not_found);
}

/* Pages walk the (run_id, seq) key from either end; LIMIT NULL is none. */
json_t *mend__pg_view_history_page(PGconn *c, const char *id, long after, long limit, long tail,
                                   char *err, size_t errlen, int *not_found) {
  char a[24], n[24];
  snprintf(a, sizeof a, "%ld", after);
  snprintf(n, sizeof n, "%ld", tail > 0 ? tail : limit);
  const char *p[3] = {id, n, a};
  if (tail <= 0 && limit <= 0) p[1] = NULL;
  json_t *rows =
    tail > 0 ? rows_array(c,
                          "SELECT * FROM (SELECT " HISTORY_ROW " WHERE run_id = $1"
                          " ORDER BY seq DESC LIMIT $2::bigint) h ORDER BY seq",
                          2, p, "read history", err, errlen)
             : rows_array(c,
                          "SELECT " HISTORY_ROW " WHERE run_id = $1 AND seq > $3::bigint"
                          " ORDER BY seq LIMIT $2::bigint",
                          3, p, "read history", err, errlen);
  return of_a_run(c, id, rows, err, errlen, not_found);
}

/* SQLite's order: a missing `at` first, as -1; ties by run id, bytewise. */
json_t *mend__pg_view_dlq(PGconn *c, double after_at, const char *after_id, long limit, char *err,
                          size_t errlen) {
  char at[40], lim[24];
  /* The first page's cursor is before every row: no `at` is below -1 (none, or a time). */
  snprintf(at, sizeof at, "%.17g", after_at);
  snprintf(lim, sizeof lim, "%ld", limit);
  const char *p[3] = {after_id ? at : "-Infinity", after_id ? after_id : "",
                      limit > 0 ? lim : NULL};
  /* Walked in dlq_page from the cursor (a row comparison an index's columns serve), never a
   * sort of the whole queue. */
  return rows_array(c,
                    "SELECT run_id, reason, step, error, detail, at FROM dlq"
                    " WHERE (coalesce(at, -1), run_id COLLATE \"C\") > ($1::float8, $2::text)"
                    " ORDER BY coalesce(at, -1), run_id COLLATE \"C\" LIMIT $3::bigint",
                    3, p, "read dlq", err, errlen);
}

json_t *mend__pg_view_breakers(PGconn *c, char *err, size_t errlen) {
  return rows_array(c,
                    "SELECT key, state, failures, successes, opened_at, open_until, updated"
                    " FROM breakers ORDER BY key COLLATE \"C\"",
                    0, NULL, "read breakers", err, errlen);
}

/* SQLite breaks ties of creation time by rowid, the order of insertion; run ids are
 * time-ordered within an engine, so the id is that order here. */
json_t *mend__pg_view_runs_where(PGconn *c, const char *status, const char *workflow,
                                 double since, int attention_only, int limit, char *err,
                                 size_t errlen) {
  char lim[32], sin[64], att[4];
  snprintf(lim, sizeof lim, "%d", limit);
  snprintf(sin, sizeof sin, "%.17g", since);
  snprintf(att, sizeof att, "%d", attention_only ? 1 : 0);
  const char *p[5] = {status, workflow, limit > 0 ? lim : NULL, since >= 0 ? sin : NULL, att};
  return rows_array(c,
                    "SELECT r.id, r.workflow, coalesce(r.version, v.version) AS version,"
                    " coalesce(r.source, v.source) AS source, r.run_key AS key, r.status,"
                    " r.input, r.error, r.attention, r.reason, r.owner, " LEASE_UNTIL ","
                    " r.created, r.updated, r.unavailable FROM runs r"
                    " LEFT JOIN workflow_versions v ON v.id = r.workflow_version"
                    " WHERE ($1::text IS NULL OR r.status = $1)"
                    " AND ($2::text IS NULL OR r.workflow = $2)"
                    " AND ($4::float8 IS NULL OR r.created >= $4)"
                    " AND ($5::int = 0 OR r.attention = 1 OR r.status = 'needs_attention'"
                    " OR r.unavailable IS NOT NULL)"
                    " ORDER BY r.created DESC NULLS LAST, r.id COLLATE \"C\" DESC LIMIT $3::bigint",
                    5, p, "read runs", err, errlen);
}

json_t *mend__pg_view_runs(PGconn *c, const char *status, const char *workflow, int limit,
                           char *err, size_t errlen) {
  return mend__pg_view_runs_where(c, status, workflow, -1, 0, limit, err, errlen);
}

json_t *mend__pg_view_token(PGconn *c, const char *digest, char *err, size_t errlen) {
  const char *p[1] = {digest};
  if (err && errlen) err[0] = 0;
  json_t *rows = rows_array(c,
                            "SELECT digest, run_id, step, attempt, made, used, outcome FROM tokens"
                            " WHERE digest = $1",
                            1, p, "read a token", err, errlen);
  if (!rows) return NULL;
  json_t *row = json_incref(json_array_get(rows, 0));
  json_decref(rows);
  return row;
}

/* In the order started: run ids sort by creation within one created time (rowid, in SQLite). */
json_t *mend__pg_view_children(PGconn *c, const char *parent, char *err, size_t errlen) {
  const char *p[1] = {parent};
  return rows_array(c,
                    "SELECT id AS run_id, parent_step AS step, workflow, status FROM runs"
                    " WHERE parent_run = $1 ORDER BY created, id COLLATE \"C\"",
                    1, p, "read child runs", err, errlen);
}

json_t *mend__pg_view_owner(PGconn *c, const char *id, char *err, size_t errlen) {
  const char *p[1] = {id};
  return rows_array(c,
                    "SELECT r.owner, extract(epoch FROM w.lease_until - clock_timestamp())::float8"
                    " AS lease_left FROM runs r LEFT JOIN workers w ON w.owner = r.owner"
                    " WHERE r.id = $1",
                    1, p, "read lease", err, errlen);
}

json_t *mend__pg_view_audit_list(PGconn *c, char *err, size_t errlen) {
  return rows_array(c, "SELECT seq, at, who, op, target, detail FROM audit ORDER BY seq", 0,
                    NULL, "read audit", err, errlen);
}

json_t *mend__pg_view_inbox(PGconn *c, const char *run_id, long long after, long limit,
                            char *err, size_t errlen) {
  char aft[24], lim[24];
  snprintf(aft, sizeof aft, "%lld", after);
  snprintf(lim, sizeof lim, "%ld", limit);
  const char *p[3] = {run_id, aft, limit > 0 ? lim : NULL};
  return rows_array(c,
                    "SELECT seq, name, payload, key, sent, consumed, step, who FROM inbox"
                    " WHERE run_id = $1 AND seq > $2::bigint ORDER BY seq LIMIT $3::bigint",
                    3, p, "read a run's inbox", err, errlen);
}

/* A version is its text: the rows of one version loaded from several paths are one, its
 * sources listed in the order they were first seen. */
#define SAME_VERSION "w.workflow = v.workflow AND w.version IS NOT DISTINCT FROM v.version"
json_t *mend__pg_view_workflows(PGconn *c, const char *workflow, char *err, size_t errlen) {
  const char *p[1] = {workflow};
  return rows_array(
      c,
      "SELECT v.workflow, v.version, min(v.first_seen) AS first_seen,"
      " (SELECT json_agg(s.source ORDER BY s.first) FROM (SELECT w.source, min(w.id) AS first"
      " FROM workflow_versions w WHERE " SAME_VERSION " GROUP BY w.source) s)::text AS sources,"
      " max((v.script IS NOT NULL)::int) AS kept,"
      " (SELECT w.step_names FROM workflow_versions w WHERE " SAME_VERSION
      " ORDER BY w.id DESC LIMIT 1) AS step_names,"
      " (SELECT count(*) FROM runs r WHERE r.status IN ('running', 'compensating')"
      " AND r.workflow_version IN (SELECT w.id FROM workflow_versions w WHERE " SAME_VERSION
      ")) AS unfinished,"
      " (SELECT count(*) FROM runs r WHERE r.status IN ('running', 'compensating')"
      " AND r.unavailable IS NOT NULL AND r.workflow_version IN (SELECT w.id FROM"
      " workflow_versions w WHERE " SAME_VERSION ")) AS unavailable, max(v.id) AS newest"
      " FROM workflow_versions v WHERE $1::text IS NULL OR v.workflow = $1"
      " GROUP BY v.workflow, v.version ORDER BY v.workflow COLLATE \"C\", newest DESC",
      1, p, "read workflow versions", err, errlen);
}

char *mend__pg_view_version_script(PGconn *c, const char *workflow, const char *version,
                                   char **source, char *err, size_t errlen, int *none) {
  if (source) *source = NULL;
  if (none) *none = 0;
  const char *p[2] = {workflow, version};
  PGresult *r = exec(c,
                     "SELECT script, source FROM workflow_versions WHERE workflow = $1"
                     " AND version = $2 AND script IS NOT NULL ORDER BY id DESC LIMIT 1",
                     2, p, "read a workflow version's script", err, errlen);
  if (!r) return NULL;
  if (PQntuples(r) == 0) {
    PQclear(r);
    if (none) *none = 1;
    set_err(err, errlen, "no script of workflow %s version %s is kept", workflow,
            version ? version : "(none)");
    return NULL;
  }
  char *text = strdup(PQgetvalue(r, 0, 0));
  int oom = !text;
  if (source && !oom && !PQgetisnull(r, 0, 1)) {
    *source = strdup(PQgetvalue(r, 0, 1));
    oom = !*source;
  }
  PQclear(r);
  if (oom) {
    free(text);
    if (source) { free(*source); *source = NULL; }
    set_err(err, errlen, "out of memory reading a workflow version");
    return NULL;
  }
  return text;
}

/* ---- prune ----------------------------------------------------------------------------- */

/* The runs a prune takes: ended, last updated before $1, of status $2 if given; never
 * running, compensating or needs_attention (a dead letter waits for a person), nor a child run
 * while a run above it has not ended or is a dead letter (it may still compensate the child). */
#define PRUNE_RUNS                                                                             \
  "SELECT id FROM runs p WHERE status IN ('succeeded', 'compensated', 'failed', 'resolved')"   \
  " AND updated < $1::float8 AND ($2::text IS NULL OR status = $2) AND (parent_run IS NULL"    \
  " OR NOT EXISTS (WITH RECURSIVE up(id) AS (SELECT p.parent_run UNION SELECT r.parent_run"    \
  " FROM runs r JOIN up ON r.id = up.id WHERE r.parent_run IS NOT NULL) SELECT 1 FROM runs r"  \
  " JOIN up ON r.id = up.id WHERE r.status IN ('running', 'compensating', 'needs_attention')))"

/* The ended runs of the prune's age and status it keeps: child runs under a run that has not
 * ended (said, so that "nothing to prune" is not read as none of them having ended). */
#define KEPT_RUNS                                                                              \
  "SELECT count(*) FROM runs WHERE status IN ('succeeded', 'compensated', 'failed', 'resolved')" \
  " AND updated < $1::float8 AND ($2::text IS NULL OR status = $2) AND parent_run IS NOT NULL"  \
  " AND id NOT IN (" PRUNE_RUNS ")"

/* Runs sql with the prune's two parameters; adds each row's (name, count) to counts, or for a
 * one-column row sets counts[key]. */
static int prune_sql(PGconn *c, const char *sql, const char *const *p, json_t *counts,
                     const char *key, char *err, size_t errlen) {
  PGresult *r = exec(c, sql, p ? 2 : 0, p, "prune", err, errlen);
  if (!r) return -1;
  int rc = 0;
  if (counts) {
    int two = PQnfields(r) == 2;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
      const char *name = two ? PQgetvalue(r, i, 0) : key;
      json_t *n = json_integer((json_int_t)strtoll(PQgetvalue(r, i, two ? 1 : 0), NULL, 10));
      if (!n || json_object_set_new(counts, name, n) != 0) rc = -1;
    }
    if (rc != 0) set_err(err, errlen, "prune: out of memory");
  }
  PQclear(r);
  return rc;
}

json_t *mend__pg_view_prune(PGconn *c, double before, const char *status, int dry_run,
                            char *err, size_t errlen) {
  if (PQtransactionStatus(c) != PQTRANS_IDLE) {
    set_err(err, errlen, "prune: a transaction is open on the connection (commit it first)");
    return NULL;
  }
  char b[64];
  snprintf(b, sizeof b, "%.17g", before);
  const char *p[2] = {b, status};
  json_t *res = json_object(), *runs = json_object();
  if (!res || !runs || json_object_set(res, "runs", runs) != 0) {
    json_decref(res);
    json_decref(runs);
    set_err(err, errlen, "prune: out of memory");
    return NULL;
  }
  int failed =
      prune_sql(c, dry_run ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN", NULL,
                NULL, NULL, err, errlen) ||
      /* What is counted is what is deleted: no run may end between the two. */
      (!dry_run && prune_sql(c, "LOCK TABLE runs IN SHARE ROW EXCLUSIVE MODE", NULL, NULL,
                             NULL, err, errlen)) ||
      prune_sql(c, "SELECT status, count(*) FROM runs WHERE id IN (" PRUNE_RUNS ")"
                " GROUP BY status ORDER BY status COLLATE \"C\"", p, runs, NULL, err, errlen) ||
      prune_sql(c, "SELECT count(*) FROM steps WHERE run_id IN (" PRUNE_RUNS ")", p, res,
                "steps", err, errlen) ||
      prune_sql(c, "SELECT count(*) FROM history WHERE run_id IN (" PRUNE_RUNS ")", p, res,
                "history", err, errlen) ||
      prune_sql(c, "SELECT count(*) FROM dlq WHERE run_id IN (" PRUNE_RUNS ")", p, res, "dlq",
                err, errlen) ||
      prune_sql(c, KEPT_RUNS, p, res, "kept", err, errlen);
  if (!failed && !dry_run)
    failed =
        prune_sql(c, "DELETE FROM dlq WHERE run_id IN (" PRUNE_RUNS ")", p, NULL, NULL, err,
                  errlen) ||
        prune_sql(c, "DELETE FROM history WHERE run_id IN (" PRUNE_RUNS ")", p, NULL, NULL, err,
                  errlen) ||
        prune_sql(c, "DELETE FROM steps WHERE run_id IN (" PRUNE_RUNS ")", p, NULL, NULL, err,
                  errlen) ||
        prune_sql(c, "DELETE FROM inbox WHERE run_id IN (" PRUNE_RUNS ")", p, NULL, NULL, err,
                  errlen) ||
        prune_sql(c, "DELETE FROM tokens WHERE run_id IN (" PRUNE_RUNS ")", p, NULL, NULL, err,
                  errlen) ||
        prune_sql(c, "DELETE FROM runs WHERE id IN (" PRUNE_RUNS ")", p, NULL, NULL, err, errlen);
  if (!failed) failed = prune_sql(c, "COMMIT", NULL, NULL, NULL, err, errlen);
  json_decref(runs);
  if (failed) {
    if (PQtransactionStatus(c) != PQTRANS_IDLE) {
      PGresult *r = PQexec(c, "ROLLBACK");
      PQclear(r);
    }
    json_decref(res);
    return NULL;
  }
  return res;
}
