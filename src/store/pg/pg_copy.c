/*
 * pg_copy: `mend copy --from mend.db --to postgres://...`: a SQLite store's rows into an empty
 * PostgreSQL store, while no worker runs. It reads the source through its own read-only
 * connection (never migrating or writing it), lets the PostgreSQL store's own open create or
 * check the target's schema, and writes every table with COPY in one transaction that commits
 * only when the target was empty and every count matches. Must never: write to the source;
 * leave a partial copy behind; copy into a store that has rows; name a password.
 */
#include "store/pg/pg_copy.h"
#include "store/pg/pg_line.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

#include "store.h"

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || errlen == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

/* "what: " and libpq's message m, on one line. */
static void trim_copy(char *err, size_t errlen, const char *what, const char *m) {
  char cause[768];
  mend__pg_one_line(cause, sizeof cause, m);
  set_err(err, errlen, "%s: %s", what, cause);
}

static PGresult *pexec(PGconn *c, const char *sql, const char *what, char *err, size_t errlen) {
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) return r;
  trim_copy(err, errlen, what, r && *PQresultErrorMessage(r) ? PQresultErrorMessage(r)
                                                             : PQerrorMessage(c));
  PQclear(r);
  return NULL;
}

/* ---- one table ------------------------------------------------------------------------- */

/* What a table's copy reads from SQLite (in the target's column order), and how many rows
 * the target must hold after. The version rows of one version loaded from several paths are
 * one row in PostgreSQL (UNIQUE (workflow, version)): the newest, with the script and first
 * sighting of any of them; a run names that row. */
typedef struct table {
  const char *name, *columns, *select, *count;
} table;

#define SAME_VERSION(a, b) a ".workflow = " b ".workflow AND " a ".version IS " b ".version"

static const table tables[] = {
  {"workflow_versions", "id, workflow, version, source, step_names, script, first_seen",
   "SELECT w.id, w.workflow, w.version, w.source, w.step_names,"
   " (SELECT s.script FROM workflow_versions s WHERE " SAME_VERSION("s", "w")
   " AND s.script IS NOT NULL ORDER BY s.id DESC LIMIT 1),"
   " (SELECT min(s.first_seen) FROM workflow_versions s WHERE " SAME_VERSION("s", "w") ")"
   " FROM workflow_versions w WHERE w.id = (SELECT max(s.id) FROM workflow_versions s"
   " WHERE " SAME_VERSION("s", "w") ") ORDER BY w.id",
   "SELECT count(*) FROM (SELECT 1 FROM workflow_versions GROUP BY workflow, version)"},
  {"runs",
   "id, workflow, version, source, run_key, status, input, error, attention, reason, owner,"
   " created, updated, step_names, workflow_version, unavailable, cancel_requested,"
   " parent_run, parent_step",
   "SELECT r.id, r.workflow, r.version, r.source, r.run_key, r.status, r.input, r.error,"
   " r.attention, r.reason, NULL, r.created, r.updated, r.step_names,"
   " (SELECT max(s.id) FROM workflow_versions o, workflow_versions s"
   " WHERE o.id = r.workflow_version AND " SAME_VERSION("s", "o") "),"
   " r.unavailable, r.cancel_requested, r.parent_run, r.parent_step FROM runs r ORDER BY r.rowid",
   "SELECT count(*) FROM runs"},
  {"steps",
   "run_id, idx, name, status, attempts, comp_attempts, idem_key, custom_key, result, error,"
   " due, last_delay, updated, slept, awaits, error_kind, error_severity, error_stopped",
   "SELECT run_id, idx, name, status, attempts, comp_attempts, idem_key, custom_key, result,"
   " error, due, last_delay, updated, slept, awaits, error_kind, error_severity, error_stopped"
   " FROM steps",
   "SELECT count(*) FROM steps"},
  /* history_named: statuses, events and workers as names (PostgreSQL keeps no labels). */
  {"history",
   "run_id, seq, step, at, event, from_status, to_status, attempt, error, delay, detail, worker,"
   " error_kind",
   "SELECT run_id, seq, step, at, event, from_status, to_status, attempt, error, delay,"
   " detail, worker, error_kind FROM history_named",
   "SELECT count(*) FROM history"},
  {"breakers", "key, state, failures, successes, opened_at, open_until, updated",
   "SELECT key, state, failures, successes, opened_at, open_until, updated FROM breakers",
   "SELECT count(*) FROM breakers"},
  {"dlq", "run_id, reason, step, error, detail, at",
   "SELECT run_id, reason, step, error, detail, at FROM dlq", "SELECT count(*) FROM dlq"},
  {"audit", "seq, at, who, op, target, detail",
   "SELECT seq, at, who, op, target, detail FROM audit ORDER BY seq",
   "SELECT count(*) FROM audit"},
  {"inbox", "seq, run_id, name, payload, key, sent, consumed, step, who",
   "SELECT seq, run_id, name, payload, key, sent, consumed, step, who FROM inbox ORDER BY seq",
   "SELECT count(*) FROM inbox"},
  {"tokens", "digest, run_id, step, attempt, made, used, outcome",
   "SELECT digest, run_id, step, attempt, made, used, outcome FROM tokens",
   "SELECT count(*) FROM tokens"},
};
#define NTABLES (sizeof tables / sizeof tables[0])

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static int put(buf *b, const char *s, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->n + n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  return 0;
}

/* A SQLite value in COPY's text format: \N for NULL, doubles with every digit. */
static int put_value(buf *b, sqlite3_stmt *q, int i) {
  char num[64];
  switch (sqlite3_column_type(q, i)) {
  case SQLITE_NULL:
    return put(b, "\\N", 2);
  case SQLITE_INTEGER:
    snprintf(num, sizeof num, "%lld", (long long)sqlite3_column_int64(q, i));
    return put(b, num, strlen(num));
  case SQLITE_FLOAT: {
    double d = sqlite3_column_double(q, i);
    if (isinf(d)) snprintf(num, sizeof num, "%s", d > 0 ? "Infinity" : "-Infinity");
    else snprintf(num, sizeof num, "%.17g", d);
    return put(b, num, strlen(num));
  }
  default: {
    const unsigned char *t = sqlite3_column_text(q, i);
    int n = sqlite3_column_bytes(q, i);
    for (int k = 0; k < n; k++) {
      const char *esc = NULL;
      switch (t[k]) {
      case '\\': esc = "\\\\"; break;
      case '\t': esc = "\\t"; break;
      case '\n': esc = "\\n"; break;
      case '\r': esc = "\\r"; break;
      default: break;
      }
      if (esc ? put(b, esc, 2) : put(b, (const char *)t + k, 1)) return -1;
    }
    return 0;
  }
  }
}

static long long sqlite_count(sqlite3 *src, const char *sql, char *err, size_t errlen) {
  sqlite3_stmt *q;
  long long n = -1;
  if (sqlite3_prepare_v2(src, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
    n = sqlite3_column_int64(q, 0);
  else
    set_err(err, errlen, "read the source: %s", sqlite3_errmsg(src));
  sqlite3_finalize(q);
  return n;
}

/* Streams one table's rows into dst with COPY; the number of rows sent, or -1. */
static long long copy_table(sqlite3 *src, PGconn *dst, const table *t, char *err,
                            size_t errlen) {
  char what[64];
  snprintf(what, sizeof what, "copy %s", t->name);
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(src, t->select, -1, &q, NULL) != SQLITE_OK) {
    set_err(err, errlen, "%s: read the source: %s", what, sqlite3_errmsg(src));
    return -1;
  }
  char sql[512];
  snprintf(sql, sizeof sql, "COPY %s (%s) FROM STDIN", t->name, t->columns);
  PGresult *r = PQexec(dst, sql);
  if (PQresultStatus(r) != PGRES_COPY_IN) {
    trim_copy(err, errlen, what, PQerrorMessage(dst));
    PQclear(r);
    sqlite3_finalize(q);
    return -1;
  }
  PQclear(r);
  buf b = {0};
  long long rows = 0;
  int rc, failed = 0, ncol = sqlite3_column_count(q);
  while (!failed && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    for (int i = 0; !failed && i < ncol; i++)
      failed = (i && put(&b, "\t", 1)) || put_value(&b, q, i);
    failed = failed || put(&b, "\n", 1);
    rows++;
    if (!failed && b.n >= (1 << 16)) {
      failed = PQputCopyData(dst, b.p, (int)b.n) != 1;
      b.n = 0;
    }
  }
  if (!failed && rc != SQLITE_DONE) {
    set_err(err, errlen, "%s: read the source: %s", what, sqlite3_errmsg(src));
    failed = 2;
  } else if (failed == 1 && !*PQerrorMessage(dst)) {
    set_err(err, errlen, "%s: out of memory", what);
    failed = 2;
  }
  if (!failed && b.n) failed = PQputCopyData(dst, b.p, (int)b.n) != 1;
  free(b.p);
  sqlite3_finalize(q);
  /* A failed copy is ended with an error, so that the server drops what it was sent. */
  PQputCopyEnd(dst, failed ? "mend copy stopped" : NULL);
  int ok = 1;
  while ((r = PQgetResult(dst))) {
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      if (!failed || failed == 1) trim_copy(err, errlen, what, PQresultErrorMessage(r));
      ok = 0;
    }
    PQclear(r);
  }
  if (failed == 1 && ok) trim_copy(err, errlen, what, PQerrorMessage(dst));
  return failed || !ok ? -1 : rows;
}

/* ---- the copy -------------------------------------------------------------------------- */

json_t *mend__pg_copy_into(sqlite3 *src, PGconn *dst, char *err, size_t errlen) {
  if (PQtransactionStatus(dst) != PQTRANS_IDLE) {
    set_err(err, errlen, "copy: the target's connection is inside a transaction");
    return NULL;
  }
  json_t *counts = json_object();
  if (!counts) {
    set_err(err, errlen, "copy: out of memory");
    return NULL;
  }
  long long want[NTABLES];
  int failed = sqlite3_exec(src, "BEGIN", NULL, NULL, NULL) != SQLITE_OK;
  if (failed) set_err(err, errlen, "read the source: %s", sqlite3_errmsg(src));
  for (size_t i = 0; !failed && i < NTABLES; i++) {
    want[i] = sqlite_count(src, tables[i].count, err, errlen);
    failed = want[i] < 0;
  }
  PGresult *r = NULL;
  /* Nothing else writes the tables while they are checked empty and filled. */
  if (!failed)
    failed = !(r = pexec(dst, "BEGIN; LOCK TABLE runs, steps, history, breakers, dlq, audit,"
                              " inbox, tokens, workflow_versions, workers IN EXCLUSIVE MODE",
                         "copy: lock the target", err, errlen));
  PQclear(r);
  if (!failed) {
    r = pexec(dst,
              "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM workflow_versions),"
              " (SELECT count(*) FROM history), (SELECT count(*) FROM steps),"
              " (SELECT count(*) FROM breakers), (SELECT count(*) FROM dlq),"
              " (SELECT count(*) FROM audit), (SELECT count(*) FROM inbox),"
              " (SELECT count(*) FROM workers), (SELECT count(*) FROM tokens)",
              "copy: read the target", err, errlen);
    failed = !r;
    if (r) {
      static const char *const names[] = {"runs", "workflow versions", "history rows", "steps",
                                          "breakers", "dead letters", "audit rows",
                                          "inbox events", "workers", "tokens"};
      for (int i = 0; i < 10; i++) {
        long long n = strtoll(PQgetvalue(r, 0, i), NULL, 10);
        if (n == 0) continue;
        set_err(err, errlen,
                "the target is not empty (%lld %s): mend copy only fills a new store", n,
                names[i]);
        failed = 1;
        break;
      }
      PQclear(r);
    }
  }
  for (size_t i = 0; !failed && i < NTABLES; i++) {
    long long sent = copy_table(src, dst, &tables[i], err, errlen);
    failed = sent < 0;
  }
  /* The serial columns go on after the copied numbers. */
  if (!failed) {
    r = pexec(dst,
              "SELECT setval(pg_get_serial_sequence('workflow_versions', 'id'),"
              " coalesce((SELECT max(id) FROM workflow_versions), 0) + 1, false),"
              " setval(pg_get_serial_sequence('audit', 'seq'),"
              " coalesce((SELECT max(seq) FROM audit), 0) + 1, false),"
              " setval(pg_get_serial_sequence('inbox', 'seq'),"
              " coalesce((SELECT max(seq) FROM inbox), 0) + 1, false)",
              "copy: set the target's counters", err, errlen);
    failed = !r;
    PQclear(r);
  }
  /* The counts are checked in the transaction that wrote them: a mismatch commits nothing. */
  for (size_t i = 0; !failed && i < NTABLES; i++) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", tables[i].name);
    r = pexec(dst, sql, "copy: count the target", err, errlen);
    failed = !r;
    if (!r) break;
    long long have = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    if (have != want[i]) {
      set_err(err, errlen, "copy: %s: the source has %lld rows, the target %lld: nothing copied",
              tables[i].name, want[i], have);
      failed = 1;
    } else if (json_object_set_new(counts, tables[i].name, json_integer((json_int_t)have))) {
      set_err(err, errlen, "copy: out of memory");
      failed = 1;
    }
  }
  if (!failed) {
    r = pexec(dst, "COMMIT", "copy: commit", err, errlen);
    failed = !r;
    PQclear(r);
  }
  sqlite3_exec(src, "COMMIT", NULL, NULL, NULL);
  if (failed) {
    if (PQtransactionStatus(dst) != PQTRANS_IDLE) PQclear(PQexec(dst, "ROLLBACK"));
    json_decref(counts);
    return NULL;
  }
  return counts;
}

/* A message that quotes the URI, or part of it, shows its password as ***. */
static void redact(char *err, size_t errlen, const char *uri) {
  const char *scheme = strstr(uri, "://");
  const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
  const char *colon = scheme ? strchr(scheme + 3, ':') : NULL;
  if (!err || !at || !colon || colon > at || at == colon + 1) return;
  size_t pwlen = (size_t)(at - colon - 1);
  char out[1024];
  size_t o = 0;
  for (const char *p = err; *p && o + 4 < sizeof out;) {
    if (strncmp(p, colon + 1, pwlen) == 0) {
      memcpy(out + o, "***", 3);
      o += 3;
      p += pwlen;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = 0;
  snprintf(err, errlen, "%s", out);
}

static int is_pg_uri(const char *s) {
  return strncmp(s, "postgres://", 11) == 0 || strncmp(s, "postgresql://", 13) == 0;
}

json_t *mend_store_copy(const char *from, const char *to, char *err, int errlen) {
  size_t el = errlen > 0 ? (size_t)errlen : 0;
  if (is_pg_uri(from)) {
    set_err(err, el, "copy: --from must be a SQLite database: copying from PostgreSQL is not"
                     " supported");
    return NULL;
  }
  if (!is_pg_uri(to)) {
    set_err(err, el, "copy: --to must be a PostgreSQL URI (postgres://...)");
    return NULL;
  }
  sqlite3 *src = NULL;
  if (sqlite3_open_v2(from, &src, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL) != SQLITE_OK) {
    set_err(err, el, "%s: %s", from, src ? sqlite3_errmsg(src) : "cannot open");
    sqlite3_close(src);
    return NULL;
  }
  sqlite3_busy_timeout(src, 5000);
  /* Its own schema, at this mend's version: older ones are upgraded by opening them. */
  long long version = -1;
  long long app = 0;
  sqlite3_stmt *q = NULL;
  if (sqlite3_prepare_v2(src, "PRAGMA user_version", -1, &q, NULL) == SQLITE_OK &&
      sqlite3_step(q) == SQLITE_ROW)
    version = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  q = NULL;   /* finalized: the one below may never be prepared (a file that is no database) */
  if (version >= 0 &&
      sqlite3_prepare_v2(src, "SELECT count(*) FROM sqlite_master WHERE name = 'runs'", -1, &q,
                         NULL) == SQLITE_OK &&
      sqlite3_step(q) == SQLITE_ROW)
    app = sqlite3_column_int64(q, 0);
  else if (version >= 0)
    version = -1;
  sqlite3_finalize(q);
  const char *why = NULL;
  char msg[160];
  if (version < 0) why = sqlite3_errmsg(src);
  else if (version == 0 || !app) why = "not a mend database";
  else if (version < MEND_COPY_SQLITE_SCHEMA) {
    snprintf(msg, sizeof msg, "schema version %lld is older than this mend's (%d): open it once"
             " with this mend (mend runs --db %s) to upgrade it first", version,
             MEND_COPY_SQLITE_SCHEMA, from);
    why = msg;
  } else if (version > MEND_COPY_SQLITE_SCHEMA) {
    snprintf(msg, sizeof msg, "schema version %lld is newer than this mend (%d)", version,
             MEND_COPY_SQLITE_SCHEMA);
    why = msg;
  }
  if (why) {
    set_err(err, el, "%s: %s", from, why);
    sqlite3_close(src);
    return NULL;
  }
  /* While no worker runs: a live lease (the local wall clock) means one may still write. */
  struct timeval tv;
  gettimeofday(&tv, NULL);
  double now = (double)tv.tv_sec + tv.tv_usec / 1e6;
  if (sqlite3_prepare_v2(src, "SELECT owner, lease_until FROM workers WHERE lease_until >= ?1"
                              " ORDER BY lease_until DESC LIMIT 1", -1, &q, NULL) == SQLITE_OK &&
      sqlite3_bind_double(q, 1, now) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
    set_err(err, el, "%s: worker %s holds runs (its lease lasts %.0f s more): stop every"
                     " worker before copying", from, (const char *)sqlite3_column_text(q, 0),
            sqlite3_column_double(q, 1) - now);
    sqlite3_finalize(q);
    sqlite3_close(src);
    return NULL;
  }
  sqlite3_finalize(q);
  /* The sandbox mark goes with the workflows: a copy must not be a way to run untrusted code
   * unsandboxed. Set on the target before its rows (a copy that fails leaves an empty store
   * marked, which only sandboxes it). */
  int marked = 0;
  q = NULL;
  if (sqlite3_prepare_v2(src, "SELECT value = 'on' FROM meta WHERE key = 'sandbox'", -1, &q,
                         NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
    marked = sqlite3_column_int(q, 0);
  sqlite3_finalize(q);
  /* The target's schema is the PostgreSQL store's to make or check. */
  mend_store *t = mend_store_open(to, MEND_DURABILITY_FULL, err, errlen);
  if (!t) {
    redact(err, el, to);
    sqlite3_close(src);
    return NULL;
  }
  if (marked && mend_store_sandbox_mark(t, 1) < 0) {
    set_err(err, el, "copy: %s", mend_store_errmsg(t));
    redact(err, el, to);
    mend_store_close(t);
    sqlite3_close(src);
    return NULL;
  }
  mend_store_close(t);
  PGconn *dst = PQconnectdb(to);
  if (PQstatus(dst) != CONNECTION_OK) {
    trim_copy(err, el, "copy: connect to the target", PQerrorMessage(dst));
    PQfinish(dst);
    sqlite3_close(src);
    return NULL;
  }
  json_t *counts = mend__pg_copy_into(src, dst, err, el);
  PQfinish(dst);
  sqlite3_close(src);
  return counts;
}
