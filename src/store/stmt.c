/*
 * stmt: the SQLite backend's statements as its files run them, and their errors: a message
 * naming the file, what was done and SQLite's cause (a lock waited out, the system's cause of
 * an I/O error), a step retried on SQLITE_BUSY within the busy wait, a write run with its first
 * binding failure, which fails the batch. Owns no statement and no connection: those are
 * open.c's. Must never: match an error by its text, or reset a statement before its message is
 * read.
 */
#include "store_int.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

void mend__set_msg(char *buf, int len, const char *fmt, ...) {
  va_list ap;
  if (!buf || len <= 0) return;
  va_start(ap, fmt);
  vsnprintf(buf, (size_t)len, fmt, ap);
  va_end(ap);
}

/* What "disk I/O error" alone does not say: the system's cause when SQLite kept it (a disk
 * full as a file is opened), else a file size limit (RLIMIT_FSIZE) that a write may have met,
 * whose errno SQLite does not keep. "" when neither is known. */
static const char *io_cause(sqlite3 *db) {
  static _Thread_local char cause[160];
  struct rlimit rl;
  cause[0] = 0;
  if (sqlite3_system_errno(db))
    snprintf(cause, sizeof cause, " (%s)", strerror(sqlite3_system_errno(db)));
  else if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    snprintf(cause, sizeof cause, " (this process may write no file past %llu bytes: its file "
             "size limit, RLIMIT_FSIZE, `ulimit -f`)", (unsigned long long)rl.rlim_cur);
  return cause;
}

/* "<path>: <what>: <sqlite errmsg>", read before any reset can change the message. */
static void db_err(mend_store *s, sqlite3 *db, const char *what) {
  int code = sqlite3_extended_errcode(db) & 0xff;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    mend__set_msg(s->err, sizeof s->err,
                  "%s: %s: database is locked by another process (waited %.1f s)", s->path, what,
                  (db == s->db ? s->busy_ms : BUSY_TIMEOUT_MS) / 1000.0);
  else if (code == SQLITE_IOERR || code == SQLITE_CANTOPEN)
    mend__set_msg(s->err, sizeof s->err, "%s: %s: %s%s", s->path, what, sqlite3_errmsg(db),
                  io_cause(db));
  else
    mend__set_msg(s->err, sizeof s->err, "%s: %s: %s", s->path, what, sqlite3_errmsg(db));
}

void mend__sql_err(mend_store *s, const char *what) { db_err(s, s->db, what); }

void mend__stmt_err(mend_store *s, sqlite3_stmt *q, const char *what) {
  if (q) db_err(s, sqlite3_db_handle(q), what);
  else mend__set_msg(s->err, sizeof s->err, "%s: %s: its statement could not be prepared on the "
                     "read-only connection", s->path, what);
}

double mend__now_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The busy handler already waits; this covers the cases where SQLite returns SQLITE_BUSY without
 * calling it (WAL recovery by another connection, for one), still bounded by busy_ms. */
int mend__step_busy_retry(const mend_store *s, sqlite3_stmt *q) {
  double deadline = mend__now_mono() + s->busy_ms / 1000.0;
  int rc;
  for (;;) {
    rc = sqlite3_step(q);
    if ((rc & 0xff) != SQLITE_BUSY || mend__now_mono() >= deadline) break;
    sqlite3_reset(q);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return rc;
}

void mend__finish(sqlite3_stmt *q) {
  sqlite3_reset(q);
  sqlite3_clear_bindings(q);
}

/* Runs a bound write statement; `rc` carries the first binding failure, if any. Its bindings
 * are cleared after, unless kept: a recorded write binds every parameter again. */
int mend__run_bound(mend_store *s, sqlite3_stmt *q, int rc, const char *what, int keep) {
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc != SQLITE_DONE) mend__sql_err(s, what);   /* before the reset, which may change it */
  if (keep) sqlite3_reset(q);
  else mend__finish(q);
  if (rc == SQLITE_DONE) return 0;
  s->batch_failed = 1;
  return -1;
}

int mend__run_write(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  return mend__run_bound(s, q, rc, what, 0);
}

int mend__bind_text(sqlite3_stmt *q, int i, const char *v) {
  return v ? sqlite3_bind_text(q, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(q, i);
}

int mend__bind_opt_real(sqlite3_stmt *q, int i, double v) {
  return v < 0 ? sqlite3_bind_null(q, i) : sqlite3_bind_double(q, i, v);
}

int mend__exec_sql(mend_store *s, const char *sql, const char *what) {
  if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    mend__sql_err(s, what);
    return -1;
  }
  return 0;
}
