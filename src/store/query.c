/*
 * query: the store's reads: point reads for the engine and the views for people (a run and its
 * steps as JSON, history, dead letters, runs, breakers), including the steps it derives
 * (pending, in flight), and which rows a view shows: the connection's own, the write log
 * flushed first, or the committed ones while the log cannot be flushed. Must never: write; show
 * a person a row the write log has not flushed while it could be; wait for another process's
 * write lock to show a view.
 */
#define _GNU_SOURCE   /* mremap */
#include "store_int.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "store/image.h"
#include "utf8.h"
#include "walvfs.h"

/* ---- point reads ----------------------------------------------------------------------- */

/* Steps a bound read statement to its first row: 1 row, 0 none, -1 error (statement reset). */
int mend__first_row(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  if (!q) {
    mend__stmt_err(s, q, what);
    return -1;
  }
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) return 1;
  if (rc == SQLITE_DONE) {
    mend__finish(q);
    return 0;
  }
  mend__stmt_err(s, q, what);
  mend__finish(q);
  return -1;
}

/* ---- which rows a view shows ----------------------------------------------------------- */

/* A view shows what was written before it was asked for: the write log is flushed into the
 * open transaction first. While that cannot be done now (another process holds the write lock
 * and the batch waits for it, here or on the writer thread), the view shows the committed rows
 * instead, read on the reader: nothing pending has been acknowledged to anyone (an answer
 * waits for its batch), so no one can miss a write they were told of, and a view neither waits
 * for the lock nor fails for it. In memory there is no other connection, and no other process
 * to hold a lock. */
int mend__view_point(mend_store *s) {
  s->view_committed = 0;
  int waiting = atomic_load(&s->locked) && (s->cur->nrec || mend__sqlite_writer_busy(s));
  if (!waiting) {
    int rc = mend__sync_point(s);
    if (rc != MEND_STORE_BUSY) return rc;
  }
  if (mend__open_reader(s) != 0) {
    if (waiting) mend__set_msg(s->err, sizeof s->err, "%s: the database is locked by another "
                               "process, and it cannot be read without the lock", s->path);
    return -1;
  }
  s->view_committed = 1;
  return 0;
}

sqlite3_stmt *mend__view_stmt(mend_store *s, int k) {
  return s->view_committed ? mend__reader_stmt(s, &s->rq[k], k) : s->q[k];
}

static long last_history(mend_store *s, sqlite3_stmt *q, const char *run_id, double *at);

long mend__sqlite_last_history(mend_store *s, const char *run_id, double *at) {
  if (mend__sync_point(s) != 0) return -1;
  return last_history(s, s->q[Q_LAST_SEQ], run_id, at);
}

long mend__sqlite_last_history_view(mend_store *s, const char *run_id, double *at, int *committed) {
  if (mend__view_point(s) != 0) return -1;
  *committed = s->view_committed;
  return last_history(s, mend__view_stmt(s, Q_LAST_SEQ), run_id, at);
}

static long last_history(mend_store *s, sqlite3_stmt *q, const char *run_id, double *at) {
  int r = mend__first_row(s, q, mend__bind_text(q, 1, run_id), "read the history's length");
  if (r < 0) return -1;
  long seq = r ? (long)sqlite3_column_int64(q, 0) : 0;
  if (at) *at = r && sqlite3_column_type(q, 1) != SQLITE_NULL ? sqlite3_column_double(q, 1) : -1;
  if (r) mend__finish(q);
  return seq;
}

long mend__sqlite_last_history_seq(mend_store *s, const char *run_id) {
  return mend__sqlite_last_history(s, run_id, NULL);
}

char *mend__sqlite_version_script(mend_store *s, const char *workflow, const char *version,
                                char **source) {
  if (source) *source = NULL;
  if (mend__sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_VERSION_SCRIPT];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, workflow));
  BIND(mend__bind_text(q, 2, version));
  int r = mend__first_row(s, q, rc, "read a workflow version's script");
  if (r <= 0) {
    if (r == 0)
      mend__set_msg(s->err, sizeof s->err, "%s: no script of workflow %s version %s is kept",
                    s->path, workflow, version);
    return NULL;
  }
  int oom = 0;
  char *text = mend__copy_text((const char *)sqlite3_column_text(q, 0), &oom);
  if (source && !oom) *source = mend__copy_text((const char *)sqlite3_column_text(q, 1), &oom);
  mend__finish(q);
  if (oom) {
    free(text);
    if (source) { free(*source); *source = NULL; }
    mend__set_msg(s->err, sizeof s->err, "%s: out of memory reading a workflow version", s->path);
    return NULL;
  }
  return text;
}

static int key_row(mend_store *s, sqlite3_stmt *q, const char *run_key, char *id_out, int id_len);

int mend__sqlite_find_run_key(mend_store *s, const char *run_key, char *id_out, int id_len) {
  if (mend__sync_point(s) != 0) return -1;
  return key_row(s, s->q[Q_FIND_RUN_KEY], run_key, id_out, id_len);
}

/* On the reader: needs no lock, and sees no batch not yet committed (a key an uncommitted start
 * of this store took is found by the keyed insert itself, as the batch is written). */
int mend__sqlite_find_run_key_committed(mend_store *s, const char *run_key, char *id_out,
                                        int id_len) {
  if (mend__open_reader(s) != 0) return mend__sqlite_find_run_key(s, run_key, id_out, id_len);
  return key_row(s, mend__reader_stmt(s, &s->rq[Q_FIND_RUN_KEY], Q_FIND_RUN_KEY), run_key, id_out,
                 id_len);
}

static int key_row(mend_store *s, sqlite3_stmt *q, const char *run_key, char *id_out, int id_len) {
  int r = mend__first_row(s, q, mend__bind_text(q, 1, run_key), "find run key");
  if (r != 1) return r;
  const char *id = (const char *)sqlite3_column_text(q, 0);
  int n = sqlite3_column_bytes(q, 0);
  if (!id || n >= id_len) {
    mend__set_msg(s->err, sizeof s->err, "%s: find run key: run id does not fit in %d bytes",
                  s->path, id_len);
    mend__finish(q);
    return -1;
  }
  memcpy(id_out, id, (size_t)n + 1);
  mend__finish(q);
  return 1;
}

int mend__sqlite_find_key_result(mend_store *s, const char *idem_key, char **result_out,
                                 char *run_out, int run_len) {
  if (mend__sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_FIND_KEY_RESULT];
  int r = mend__first_row(s, q, mend__bind_text(q, 1, idem_key), "find key result");
  if (r != 1) return r;
  const char *run = (const char *)sqlite3_column_text(q, 1);
  snprintf(run_out, (size_t)run_len, "%s", run ? run : "");
  const char *res = (const char *)sqlite3_column_text(q, 0);
  /* A step that returned nothing has a NULL result, which is JSON null to the caller. */
  *result_out = strdup(res ? res : "null");
  mend__finish(q);
  if (!*result_out) {
    mend__set_msg(s->err, sizeof s->err, "%s: find key result: out of memory", s->path);
    return -1;
  }
  return 1;
}

int mend__sqlite_get_breaker(mend_store *s, const char *key, mend_breaker *b) {
  if (mend__sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_GET_BREAKER];
  int r = mend__first_row(s, q, mend__bind_text(q, 1, key), "get breaker");
  if (r != 1) return r;
  const char *state = (const char *)sqlite3_column_text(q, 0);
  mend_breaker_state st;
  if (!state || mend_breaker_state_parse(state, &st) != 0) {
    mend__set_msg(s->err, sizeof s->err, "%s: get breaker %s: unknown state %s", s->path, key,
            state ? state : "null");
    mend__finish(q);
    return -1;
  }
  b->state = st;
  b->failures = sqlite3_column_int(q, 1);
  b->successes = sqlite3_column_int(q, 2);
  b->probes = 0;
  b->opened_at = sqlite3_column_double(q, 3);
  b->open_until = sqlite3_column_double(q, 4);
  mend__finish(q);
  return 1;
}


/* ---- queries --------------------------------------------------------------------------- */

/* By the first letter first: every column of every row of a view asks (some 40 a status). */
static int is_json_column(const char *name) {
  switch (name[0]) {
  case 'i': return strcmp(name, "input") == 0;
  case 'r': return strcmp(name, "result") == 0;
  case 's': return strcmp(name, "step_names") == 0 || strcmp(name, "sources") == 0;
  default: return 0;
  }
}

static int is_bool_column(const char *name) {
  switch (name[0]) {
  case 'a': return strcmp(name, "attention") == 0;
  case 'c': return strcmp(name, "custom_key") == 0 || strcmp(name, "cancel_requested") == 0;
  case 'k': return strcmp(name, "kept") == 0;
  case 'r': return strcmp(name, "reused") == 0;
  case 's': return strcmp(name, "slept") == 0;
  default: return 0;
  }
}

/* Text that is not valid UTF-8 (written by hand with SQL, say) still comes back, with '?' for
 * the bytes jansson refuses (the characters around them kept), rather than being dropped or
 * crashing a listing. */
static json_t *text_value(const char *t, size_t n) {
  json_t *v = json_stringn(t, n);
  if (v) return v;
  char *copy = malloc(n + 1);
  if (!copy) return NULL;
  for (size_t i = 0; i < n; i++) copy[i] = t[i] == 0 ? '?' : t[i];
  copy[n] = 0;
  mend_utf8_fix(copy);
  v = json_stringn(copy, n);
  free(copy);
  return v;
}

/* The current row as an object keyed by column names; NULL columns are left out. */
static json_t *row_object(sqlite3_stmt *q) {
  json_t *o = json_object();
  if (!o) return NULL;
  int n = sqlite3_column_count(q);
  for (int i = 0; i < n; i++) {
    const char *name = sqlite3_column_name(q, i);
    json_t *v = NULL;
    switch (sqlite3_column_type(q, i)) {
    case SQLITE_NULL:
      continue;
    case SQLITE_INTEGER:
      v = is_bool_column(name) ? json_boolean(sqlite3_column_int64(q, i) != 0)
                               : json_integer(sqlite3_column_int64(q, i));
      break;
    case SQLITE_FLOAT: {
      /* JSON has no infinity: a row written with one (a wait of math.huge) still reads. */
      double d = sqlite3_column_double(q, i);
      v = json_real(isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d);
      break;
    }
    default: {
      const char *t = (const char *)sqlite3_column_text(q, i);
      size_t len = (size_t)sqlite3_column_bytes(q, i);
      if (!t) continue;
      if (is_json_column(name)) v = json_loadb(t, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
      if (!v) v = text_value(t, len);   /* not JSON after all: keep the text */
      break;
    }
    }
    /* a column's name is one of this backend's SQL texts: ASCII, no UTF-8 check */
    if (!v || json_object_set_new_nocheck(o, name, v) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* All rows of a bound statement as an array of objects; NULL on error (errmsg set). */
json_t *mend__rows_array(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  if (!q) {
    mend__stmt_err(s, q, what);
    return NULL;
  }
  json_t *a = json_array();
  if (!a) {
    mend__finish(q);
    mend__set_msg(s->err, sizeof s->err, "%s: %s: out of memory", s->path, what);
    return NULL;
  }
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) break;
    json_t *o = row_object(q);
    if (!o || json_array_append_new(a, o) != 0) {
      mend__finish(q);
      json_decref(a);
      mend__set_msg(s->err, sizeof s->err, "%s: %s: out of memory", s->path, what);
      return NULL;
    }
  }
  if (rc != SQLITE_DONE) {
    mend__stmt_err(s, q, what);
    mend__finish(q);
    json_decref(a);
    return NULL;
  }
  mend__finish(q);
  return a;
}

/* A step has no row until its first transition: the run's step_names give the ones not begun,
 * listed as their row would say (pending, no attempt, the default key). step_names itself is
 * not part of the run as read. */
static int list_pending(mend_store *s, json_t *run, json_t *steps) {
  json_t *names = json_object_get(run, "step_names");
  if (!names) return 0;   /* a run from before schema 4: every step has its row */
  const char *id = json_string_value(json_object_get(run, "id"));
  json_t *created = json_object_get(run, "created");
  size_t i;
  json_t *name;
  int rc = json_is_array(names) && id ? 0 : -1;
  json_array_foreach(names, i, name) {
    if (rc != 0) break;
    json_t *row = json_array_get(steps, i);
    if (row && json_integer_value(json_object_get(row, "idx")) == (json_int_t)i) continue;
    const char *n = json_string_value(name);
    if (!n) { rc = -1; break; }
    json_t *p = json_pack("{s:I, s:s, s:s, s:i, s:i, s:o, s:b, s:b}", "idx", (json_int_t)i,
                          "name", n, "status", "pending", "attempts", 0, "comp_attempts", 0,
                          "idempotency_key", json_sprintf("%s/%s", id, n), "custom_key", 0,
                          "slept", 0);
    if (!p || (created && json_object_set(p, "updated", created) != 0) ||
        json_array_insert_new(steps, i, p) != 0) {
      mend__set_msg(s->err, sizeof s->err, "%s: read steps: out of memory", s->path);
      return -1;
    }
  }
  if (rc != 0) {
    mend__set_msg(s->err, sizeof s->err, "%s: run %s: step_names is not a JSON array of names",
            s->path, id ? id : "?");
    return -1;
  }
  json_object_del(run, "step_names");
  return 0;
}

static int bind_code(sqlite3_stmt *q, int i, int code) {
  return code >= 0 ? sqlite3_bind_int(q, i, code) : sqlite3_bind_null(q, i);
}

/* A step's row says what its last attempt came to; an attempt begun since is only in history
 * (the `-> running` row written with it), so that a step costs one row write, not two. Those
 * steps read as running, with that attempt's number and time. */
static int show_in_flight(mend_store *s, const char *id, json_t *steps) {
  size_t n = json_array_size(steps);
  /* per step, its last transition in history: 1 + the attempt if it was to running, else 0 */
  struct last { long long attempt_1; double at; } *last = calloc(n ? n : 1, sizeof *last);
  if (!last) {
    mend__set_msg(s->err, sizeof s->err, "%s: read steps: out of memory", s->path);
    return -1;
  }
  sqlite3_stmt *q = mend__view_stmt(s, Q_IN_FLIGHT);
  if (!q) {
    free(last);
    mend__stmt_err(s, q, "read attempts in flight");
    return -1;
  }
  int rc = mend__bind_text(q, 1, id);
  if (rc == SQLITE_OK) rc = bind_code(q, 2, s->code_step);
  if (rc == SQLITE_OK) rc = bind_code(q, 3, s->code_running);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  for (; rc == SQLITE_ROW; rc = sqlite3_step(q)) {
    const char *name = (const char *)sqlite3_column_text(q, 0);
    for (size_t i = 0; name && i < n; i++) {
      const char *step = json_string_value(json_object_get(json_array_get(steps, i), "name"));
      if (!step || strcmp(step, name) != 0) continue;
      last[i].attempt_1 = sqlite3_column_int(q, 1) ? 1 + sqlite3_column_int64(q, 2) : 0;
      last[i].at = sqlite3_column_double(q, 3);
      break;
    }
  }
  if (rc != SQLITE_DONE) mend__stmt_err(s, q, "read attempts in flight");
  mend__finish(q);
  for (size_t i = 0; rc == SQLITE_DONE && i < n; i++) {
    if (!last[i].attempt_1) continue;
    json_t *st = json_array_get(steps, i);
    /* no due time: the wait the row tells of is over (as the engine has it, and as the row
     * said when it was written at each attempt, before schema 6) */
    json_object_del(st, "due");
    if (json_object_set_new(st, "status", json_string("running")) != 0 ||
        json_object_set_new(st, "attempts", json_integer(last[i].attempt_1 - 1)) != 0 ||
        json_object_set_new(st, "updated", json_real(last[i].at)) != 0) {
      mend__set_msg(s->err, sizeof s->err, "%s: read steps: out of memory", s->path);
      rc = SQLITE_NOMEM;
    }
  }
  free(last);
  return rc == SQLITE_DONE ? 0 : -1;
}

static json_t *read_run(mend_store *s, const char *id) {
  sqlite3_stmt *q = mend__view_stmt(s, Q_RUN);
  int r = mend__first_row(s, q, mend__bind_text(q, 1, id), "read run");
  s->not_found = r == 0;
  if (r < 0) return NULL;
  if (r == 0) {
    mend__set_msg(s->err, sizeof s->err, "no run %s", id ? id : "(null)");
    return NULL;
  }
  json_t *run = row_object(q);
  mend__finish(q);
  if (!run) {
    mend__set_msg(s->err, sizeof s->err, "%s: read run: out of memory", s->path);
    return NULL;
  }
  sqlite3_stmt *qs = mend__view_stmt(s, Q_STEPS);
  json_t *steps = mend__rows_array(s, qs, mend__bind_text(qs, 1, id), "read steps");
  if (!steps || json_object_set_new(run, "steps", steps) != 0 || list_pending(s, run, steps) != 0) {
    json_decref(run);
    return NULL;
  }
  /* A finished run has no attempt in flight. */
  const char *status = json_string_value(json_object_get(run, "status"));
  if (status && (strcmp(status, "running") == 0 || strcmp(status, "compensating") == 0) &&
      show_in_flight(s, id, steps) != 0) {
    json_decref(run);
    return NULL;
  }
  return run;
}

static int step_read_txn(mend_store *s, sqlite3_stmt *q) {
  int rc = q ? sqlite3_step(q) : SQLITE_MISUSE;
  if (rc != SQLITE_DONE) mend__stmt_err(s, q, "read run");
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* A run is read in three statements (its row, its steps, its history): without a batch open
 * they share one read transaction, so that a worker's commits in between cannot make a step
 * read as pending while a later one reads as running. */
json_t *mend__sqlite_run(mend_store *s, const char *id) {
  s->not_found = 0;
  if (mend__view_point(s) != 0) return NULL;
  int own = s->view_committed || sqlite3_get_autocommit(s->db);
  if (own && step_read_txn(s, mend__view_stmt(s, Q_BEGIN_READ)) != 0) return NULL;
  json_t *run = read_run(s, id);
  if (own && step_read_txn(s, mend__view_stmt(s, Q_COMMIT)) != 0) {
    json_decref(run);
    return NULL;
  }
  return run;
}

/* ---- a run's image for the engine ------------------------------------------------------- */

static char *col_text(sqlite3_stmt *q, int i, int *oom) {
  const char *t = (const char *)sqlite3_column_text(q, i);
  return mend__image_text(t, (size_t)sqlite3_column_bytes(q, i), oom);
}

/* A real column: NULL is none (-1); an infinite wait reads as the largest double, as in the
 * view. */
static double col_real(sqlite3_stmt *q, int i) {
  if (sqlite3_column_type(q, i) == SQLITE_NULL) return -1;
  double d = sqlite3_column_double(q, i);
  return isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d;
}

static int image_rows(mend_store *s, const char *id, mend_run_image *img) {
  int oom = 0;
  char *step_names = NULL;
  sqlite3_stmt *q = s->q[Q_IMAGE_RUN];
  int r = mend__first_row(s, q, mend__bind_text(q, 1, id), "read run");
  s->not_found = r == 0;
  if (r < 0) return -1;
  if (r == 0) {
    mend__set_msg(s->err, sizeof s->err, "no run %s", id ? id : "(null)");
    return -1;
  }
  const char *status = (const char *)sqlite3_column_text(q, 2);
  if (!status || mend_run_status_parse(status, &img->status) != 0) {
    mend__set_msg(s->err, sizeof s->err, "%s: run %s has an unknown status \"%s\"", s->path, id,
                  status ? status : "null");
    mend__finish(q);
    return -1;
  }
  img->workflow = col_text(q, 0, &oom);
  img->version = col_text(q, 1, &oom);
  img->reason = col_text(q, 3, &oom);
  img->error = col_text(q, 4, &oom);
  img->attention = sqlite3_column_int(q, 5) != 0;
  img->cancel_requested = sqlite3_column_int(q, 6) != 0;
  img->parent_run = col_text(q, 7, &oom);
  img->unavailable = col_text(q, 8, &oom);
  img->input = col_text(q, 9, &oom);
  step_names = col_text(q, 10, &oom);
  mend__finish(q);
  int rc = SQLITE_OK;
  q = s->q[Q_IMAGE_STEPS];
  for (rc = mend__bind_text(q, 1, id); !oom && rc == SQLITE_OK;) {
    if ((rc = sqlite3_step(q)) != SQLITE_ROW) break;
    rc = SQLITE_OK;
    mend_step_image *st = mend__image_add_step(img);
    if (!st) {
      oom = 1;
      break;
    }
    st->idx = sqlite3_column_int(q, 0);
    st->name = col_text(q, 1, &oom);
    const char *ss = (const char *)sqlite3_column_text(q, 2);
    if (!ss || mend_step_status_parse(ss, &st->status) != 0) {
      mend__set_msg(s->err, sizeof s->err, "%s: run %s: step #%d has an unknown status \"%s\"",
                    s->path, id, st->idx + 1, ss ? ss : "null");
      rc = SQLITE_MISMATCH;
      break;
    }
    st->attempts = sqlite3_column_int(q, 3);
    st->comp_attempts = sqlite3_column_int(q, 4);
    st->idem_key = col_text(q, 5, &oom);
    st->custom_key = sqlite3_column_int(q, 6);
    st->result = col_text(q, 7, &oom);
    st->error = col_text(q, 8, &oom);
    st->due = col_real(q, 9);
    st->last_delay = col_real(q, 10);
    st->slept = sqlite3_column_int(q, 11) != 0;
    st->error_kind = col_text(q, 12, &oom);
    st->error_severity = sqlite3_column_int(q, 13);
    st->error_stopped = sqlite3_column_int(q, 14) != 0;
  }
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_MISMATCH) mend__sql_err(s, "read steps");
  mend__finish(q);
  if (rc == SQLITE_DONE) {
    q = s->q[Q_IMAGE_HISTORY];
    for (rc = mend__bind_text(q, 1, id); !oom && rc == SQLITE_OK;) {
      if ((rc = sqlite3_step(q)) != SQLITE_ROW) break;
      rc = SQLITE_OK;
      mend_history_image *h = mend__image_add_history(img);
      if (!h) {
        oom = 1;
        break;
      }
      h->seq = (long)sqlite3_column_int64(q, 0);
      h->at = sqlite3_column_type(q, 1) == SQLITE_NULL ? -1 : sqlite3_column_double(q, 1);
      h->step = col_text(q, 2, &oom);
      h->event = col_text(q, 3, &oom);
      h->to = col_text(q, 4, &oom);
      h->attempt = sqlite3_column_int(q, 5);
      h->detail = col_text(q, 6, &oom);
    }
    if (rc != SQLITE_OK && rc != SQLITE_DONE) mend__sql_err(s, "read history");
    mend__finish(q);
  }
  if (oom) {
    mend__set_msg(s->err, sizeof s->err, "%s: read run: out of memory", s->path);
    rc = SQLITE_NOMEM;
  }
  if (rc == SQLITE_DONE) {
    char err[300];
    if (mend__image_finish(img, id, step_names, err, sizeof err) != 0) {
      mend__set_msg(s->err, sizeof s->err, "%s: %s", s->path, err);
      rc = SQLITE_ERROR;
    }
  }
  free(step_names);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* Its three statements share one read transaction, as the view's do. */
int mend__sqlite_run_image(mend_store *s, const char *id, mend_run_image *img) {
  memset(img, 0, sizeof *img);
  s->not_found = 0;
  if (mend__sync_point(s) != 0) return -1;
  int own = sqlite3_get_autocommit(s->db);
  if (own && step_read_txn(s, s->q[Q_BEGIN_READ]) != 0) return -1;
  int rc = image_rows(s, id, img);
  if (own && step_read_txn(s, s->q[Q_COMMIT]) != 0) rc = -1;
  if (rc != 0) mend_run_image_free(img);
  return rc;
}

/* A history read (NULL through): an empty one of a run not in the store is NULL, "no run <id>"
 * and not_found, as a missing run is to every view. */
static json_t *of_a_run(mend_store *s, const char *id, json_t *rows) {
  s->not_found = 0;
  if (!rows || json_array_size(rows) > 0) return rows;
  sqlite3_stmt *q = mend__view_stmt(s, Q_RUN_EXISTS);
  int r = mend__first_row(s, q, mend__bind_text(q, 1, id), "read history");
  if (r > 0) {
    mend__finish(q);
    return rows;
  }
  json_decref(rows);
  if (r == 0) {
    s->not_found = 1;
    mend__set_msg(s->err, sizeof s->err, "no run %s", id ? id : "(null)");
  }
  return NULL;
}

json_t *mend__sqlite_history(mend_store *s, const char *id) {
  s->not_found = 0;
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = mend__view_stmt(s, Q_HISTORY);
  return of_a_run(s, id, mend__rows_array(s, q, mend__bind_text(q, 1, id), "read history"));
}

json_t *mend__sqlite_history_page(mend_store *s, const char *id, long after, long limit,
                                  long tail) {
  s->not_found = 0;
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = mend__view_stmt(s, tail > 0 ? Q_HISTORY_TAIL : Q_HISTORY_AFTER);
  int rc = mend__bind_text(q, 1, id);
  if (tail > 0) {
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 2, tail);
  } else {
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 2, after);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 3, limit > 0 ? limit : -1);
  }
  return of_a_run(s, id, mend__rows_array(s, q, rc, "read history"));
}

json_t *mend__sqlite_dlq(mend_store *s, double after_at, const char *after_id, long limit) {
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = mend__view_stmt(s, Q_DLQ);
  /* The first page's cursor is before every row: no `at` is below -1 (none, or a time). */
  int rc = sqlite3_bind_double(q, 1, after_id ? after_at : -HUGE_VAL);
  if (rc == SQLITE_OK) rc = mend__bind_text(q, 2, after_id ? after_id : "");
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 3, limit > 0 ? limit : -1);
  return mend__rows_array(s, q, rc, "read dlq");
}

json_t *mend__sqlite_breakers(mend_store *s) {
  if (mend__view_point(s) != 0) return NULL;
  return mend__rows_array(s, mend__view_stmt(s, Q_BREAKERS), SQLITE_OK, "read breakers");
}

json_t *mend__sqlite_runs(mend_store *s, const char *status, const char *workflow, int limit) {
  return mend__sqlite_runs_where(s, status, workflow, -1, 0, limit);
}

json_t *mend__sqlite_runs_where(mend_store *s, const char *status, const char *workflow,
                              double since, int attention_only, int limit) {
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = mend__view_stmt(s, Q_RUNS);
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, status));
  BIND(mend__bind_text(q, 2, workflow));
  BIND(sqlite3_bind_int(q, 3, limit > 0 ? limit : -1));
  BIND(mend__bind_opt_real(q, 4, since));
  BIND(sqlite3_bind_int(q, 5, attention_only ? 1 : 0));
  return mend__rows_array(s, q, rc, "read runs");
}

int mend__sqlite_take(mend_store *s, const char *id, const char *owner, double lease_seconds) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0 ||
      mend__lease_at_least(s, owner, mend__wall_now() + lease_seconds) != 0)
    return -1;
  sqlite3_stmt *q = s->q[Q_TAKE];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, id));
  BIND(mend__bind_text(q, 2, owner));
  if (mend__run_write(s, q, rc, "take run") != 0) return -1;
  mend__ours_again(s, id);
  return 0;
}

/* In the open batch's transaction (BEGIN IMMEDIATE): the write lock is this connection's from
 * the look to the commit, so no other process's write comes between. */
int mend__sqlite_hold_status(mend_store *s, const char *id, const char *status, char *found,
                             int len) {
  int rc = mend__sync_point(s);
  if (rc == 0) rc = mend__batch_begin(s);
  if (rc != 0) return rc < 0 ? rc : -1;
  sqlite3_stmt *q = s->q[Q_RUN_STATUS];
  int row = mend__first_row(s, q, mend__bind_text(q, 1, id), "read a run's status");
  if (row < 0) return -1;
  const char *st = row ? (const char *)sqlite3_column_text(q, 0) : NULL;
  mend__set_msg(found, len, "%s", st ? st : "");
  if (row) mend__finish(q);
  return strcmp(found, status) == 0 ? 0 : 1;
}

int mend__sqlite_set_unavailable(mend_store *s, const char *id, const char *why) {
  mend__rec_begin(s, Q_SET_UNAVAILABLE);
  mend__rec_text(s, id);
  mend__rec_text(s, why);
  return mend__rec_end(s);
}

int mend__sqlite_version_number(mend_store *s, const mend_run_rec *r, long long *id) {
  sqlite3_int64 n;
  if (mend__workflow_version(s, r, &n) != 0) return -1;
  *id = (long long)n;
  return 0;
}

int mend__sqlite_move_run(mend_store *s, const char *id, long long version_id, int keep_steps) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_MOVE_RUN];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, id));
  BIND(sqlite3_bind_int64(q, 2, (sqlite3_int64)version_id));
  if (mend__run_write(s, q, rc, "move a run to another version") != 0) return -1;
  q = s->q[Q_DROP_STEPS_FROM];
  rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, id));
  BIND(sqlite3_bind_int(q, 2, keep_steps));
  return mend__run_write(s, q, rc, "move a run to another version");
}

json_t *mend__sqlite_workflows(mend_store *s, const char *workflow) {
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = mend__view_stmt(s, Q_WORKFLOWS);
  return mend__rows_array(s, q, mend__bind_text(q, 1, workflow), "read workflow versions");
}

/* A person's repair, recorded as a run's writes are (it waits for no lock, and commits with
 * the repair's other writes); not a write of the run's holder: the fence lets it pass. */
static int record_repair(mend_store *s, int k, const char *run_id) {
  int repairing = s->repairing;
  s->repairing = 1;
  mend__rec_begin(s, k);
  mend__rec_text(s, run_id);
  s->repairing = repairing;
  return mend__rec_end(s);
}

int mend__sqlite_dlq_remove(mend_store *s, const char *run_id) {
  return record_repair(s, Q_DLQ_REMOVE, run_id);
}

int mend__sqlite_request_cancel(mend_store *s, const char *run_id) {
  return record_repair(s, Q_REQUEST_CANCEL, run_id);
}

json_t *mend__sqlite_cancel_requests(mend_store *s, const char *owner) {
  if (mend__sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_CANCEL_REQUESTS];
  json_t *rows = mend__rows_array(s, q, mend__bind_text(q, 1, owner), "read cancel requests");
  if (!rows) return NULL;
  json_t *ids = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) json_array_append(ids, json_object_get(row, "id"));
  json_decref(rows);
  return ids;
}

sqlite3_stmt *mend__reader_stmt(mend_store *s, sqlite3_stmt **slot, int k) {
  if (mend__open_reader(s) != 0) return NULL;
  if (!*slot && sqlite3_prepare_v3(s->reader, mend__query_sql[k], -1, SQLITE_PREPARE_PERSISTENT,
                                   slot, NULL) != SQLITE_OK) {
    sqlite3_finalize(*slot);
    *slot = NULL;
  }
  return *slot;
}

int mend__sqlite_cancels_requested(mend_store *s, const char *owner) {
  sqlite3_stmt *q = mend__reader_stmt(s, &s->q_cancels_committed, Q_CANCEL_REQUESTS);
  if (!q) return 1;
  int rc = mend__bind_text(q, 1, owner);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  sqlite3_reset(q);   /* ends its read transaction: a checkpoint is not held back by it */
  return rc == SQLITE_DONE ? 0 : 1;
}

/* Recorded, as a run's writes are: it waits for no lock, and commits with the operation. */
int mend__sqlite_audit(mend_store *s, double at, const char *who, const char *op,
                     const char *target, const char *detail) {
  mend__rec_begin(s, Q_AUDIT);
  mend__rec_real(s, at);
  mend__rec_text(s, who);
  mend__rec_text(s, op);
  mend__rec_text(s, target);
  mend__rec_text(s, detail);
  return mend__rec_end(s);
}
