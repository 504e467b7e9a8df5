/*
 * pg_image: a run's image for the engine (mend_store_run_image) from PostgreSQL: its row, its
 * steps and its history read in one round trip, in the pipeline that sends the open batch's
 * writes (or alone, in a snapshot of its own, when no batch is open), typed from the columns
 * without building JSON. The runs of a claim are read ahead together, a chunk at a time, in
 * the claim's transaction: a worker taking a thousand runs waits for ten round trips, not a
 * thousand. An image read ahead is given only in the transaction that read it, and only while
 * nothing was written since to the rows it holds (mend__pg_pre_forget hears every statement).
 * Must never: write; read around the open batch; leave a transaction open that it began; give
 * an image read ahead that a write since may have changed.
 */
#include "pg_int.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/image.h"

static char *text_of(const PGresult *r, int row, int col, int *oom) {
  if (PQgetisnull(r, row, col)) return NULL;
  return mend__image_text(PQgetvalue(r, row, col), (size_t)PQgetlength(r, row, col), oom);
}

static long long int_of(const PGresult *r, int row, int col) {
  return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* NULL: none (-1); an infinite wait reads as the largest double, as in the view. */
static double real_of(const PGresult *r, int row, int col) {
  if (PQgetisnull(r, row, col)) return -1;
  double d = strtod(PQgetvalue(r, row, col), NULL);
  return isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d;
}

/* Row `row` of P_IMAGE_RUN or P_IMAGES_RUN (the same columns first). */
static int run_row(mend_pg *p, const char *id, const PGresult *r, int row, mend_run_image *img,
                   char **step_names, int *oom) {
  const char *status = PG_TEXT(r, row, 2);
  if (!status || mend_run_status_parse(status, &img->status) != 0) {
    mend__pg_msg(p->err, sizeof p->err, "%s: run %s has an unknown status \"%s\"", p->server, id,
                 status ? status : "null");
    return -1;
  }
  img->workflow = text_of(r, row, 0, oom);
  img->version = text_of(r, row, 1, oom);
  img->reason = text_of(r, row, 3, oom);
  img->error = text_of(r, row, 4, oom);
  img->attention = int_of(r, row, 5) != 0;
  img->cancel_requested = int_of(r, row, 6) != 0;
  img->parent_run = text_of(r, row, 7, oom);
  img->unavailable = text_of(r, row, 8, oom);
  img->input = text_of(r, row, 9, oom);
  *step_names = text_of(r, row, 10, oom);
  return 0;
}

static int fill_run(mend_pg *p, const char *id, const PGresult *r, mend_run_image *img,
                    char **step_names, int *oom) {
  if (PQntuples(r) == 0) {
    p->not_found = 1;
    mend__pg_msg(p->err, sizeof p->err, "no run %s", id);
    return -1;
  }
  return run_row(p, id, r, 0, img, step_names, oom);
}

static int step_row(mend_pg *p, const char *id, const PGresult *r, int i, mend_run_image *img,
                    int *oom) {
  mend_step_image *st = mend__image_add_step(img);
  if (!st) {
    *oom = 1;
    return 0;
  }
  st->idx = (int)int_of(r, i, 0);
  st->name = text_of(r, i, 1, oom);
  const char *ss = PG_TEXT(r, i, 2);
  if (!ss || mend_step_status_parse(ss, &st->status) != 0) {
    mend__pg_msg(p->err, sizeof p->err, "%s: run %s: step #%d has an unknown status \"%s\"",
                 p->server, id, st->idx + 1, ss ? ss : "null");
    return -1;
  }
  st->attempts = (int)int_of(r, i, 3);
  st->comp_attempts = (int)int_of(r, i, 4);
  st->idem_key = text_of(r, i, 5, oom);
  st->custom_key = (int)int_of(r, i, 6);
  st->result = text_of(r, i, 7, oom);
  st->error = text_of(r, i, 8, oom);
  st->due = real_of(r, i, 9);
  st->last_delay = real_of(r, i, 10);
  st->slept = int_of(r, i, 11) != 0;
  st->error_kind = text_of(r, i, 12, oom);
  st->error_severity = (int)int_of(r, i, 13);
  st->error_stopped = int_of(r, i, 14) != 0;
  return 0;
}

static int fill_steps(mend_pg *p, const char *id, const PGresult *r, mend_run_image *img,
                      int *oom) {
  for (int i = 0; i < PQntuples(r) && !*oom; i++)
    if (step_row(p, id, r, i, img, oom) != 0) return -1;
  return 0;
}

static void history_row(const PGresult *r, int i, mend_run_image *img, int *oom) {
  mend_history_image *h = mend__image_add_history(img);
  if (!h) {
    *oom = 1;
    return;
  }
  h->seq = (long)int_of(r, i, 0);
  h->at = PQgetisnull(r, i, 1) ? -1 : strtod(PQgetvalue(r, i, 1), NULL);
  h->step = text_of(r, i, 2, oom);
  h->event = text_of(r, i, 3, oom);
  h->to = text_of(r, i, 4, oom);
  h->attempt = (int)int_of(r, i, 5);
  h->detail = text_of(r, i, 6, oom);
}

static void fill_history(const PGresult *r, mend_run_image *img, int *oom) {
  for (int i = 0; i < PQntuples(r) && !*oom; i++) history_row(r, i, img, oom);
}

/* The reads, in the order sent. */
enum { R_RUN, R_STEPS, R_HISTORY, R__COUNT };
static const int image_q[R__COUNT] = {P_IMAGE_RUN, P_IMAGE_STEPS, P_IMAGE_HISTORY};

typedef struct taker {
  mend_pg *p;
  const char *id;
  mend_run_image *img;
  char *step_names;
  int taken, failed, oom;
} taker;

static void take(void *ud, int i, const PGresult *r) {
  taker *t = ud;
  if (t->failed) return;
  t->taken = i + 1;
  switch (i) {
  case R_RUN: t->failed = fill_run(t->p, t->id, r, t->img, &t->step_names, &t->oom) != 0; break;
  case R_STEPS: t->failed = fill_steps(t->p, t->id, r, t->img, &t->oom) != 0; break;
  default: fill_history(r, t->img, &t->oom); break;
  }
}

/* No batch open: the reads in a snapshot of their own, or a commit between them could make a
 * step read as pending while a later one reads as running. One pipeline, one round trip. */
static int read_alone(mend_pg *p, const char *const *v, taker *t) {
  PGconn *c = p->conn;
  int ok = PQenterPipelineMode(c) &&
           PQsendQueryParams(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, NULL,
                             NULL, NULL, 0);
  for (int k = 0; ok && k < R__COUNT; k++) {
    char name[16];
    snprintf(name, sizeof name, "m%d", image_q[k]);
    ok = PQsendQueryPrepared(c, name, 1, v, NULL, NULL, 0);
  }
  ok = ok && PQsendQueryParams(c, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) && PQpipelineSync(c);
  if (!ok) {
    mend__pg_fail(p, c, NULL, "read run");
    PQexitPipelineMode(c);
    return -1;
  }
  int failed = 0, lost = 0;
  for (int k = 0; k < R__COUNT + 2; k++) {   /* BEGIN, the reads, COMMIT */
    PGresult *r = PQgetResult(c);
    if (!r) {   /* the connection is gone */
      if (!failed) mend__pg_fail(p, c, NULL, "read run");
      failed = lost = 1;
      break;
    }
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
      if (!failed && st != PGRES_PIPELINE_ABORTED) mend__pg_fail(p, c, r, "read run");
      const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
      if (sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0)) lost = 1;
      failed = 1;
    } else if (!failed && k >= 1 && k <= R__COUNT) {
      take(t, k - 1, r);
    }
    PQclear(r);
    while ((r = PQgetResult(c))) PQclear(r);   /* the NULL that ends each command's results */
  }
  if (!lost) {
    PGresult *r;
    while ((r = PQgetResult(c))) {   /* the sync */
      ExecStatusType st = PQresultStatus(r);
      PQclear(r);
      if (st == PGRES_PIPELINE_SYNC) break;
    }
  }
  PQexitPipelineMode(c);
  if (lost || PQstatus(c) != CONNECTION_OK) {
    /* told once, as a batch's lost connection is; the next call reconnects */
    p->conn_doomed = 1;
    p->conn_lost = 1;
  } else if (PQtransactionStatus(c) != PQTRANS_IDLE) {
    PQclear(PQexec(c, "ROLLBACK"));   /* a failed read's block */
  }
  return failed ? -1 : 0;
}

/* ---- a claim's runs, read ahead ------------------------------------------------------- */

enum { PRE_WAITING, PRE_READY, PRE_GONE };

/* Runs read together: a chunk's images are in memory at once, and a run's history can be long
 * (a map's items). At 100, a claim of 1,000 runs waits for 10 round trips. */
#define PRE_CHUNK 100

static void pre_drop(pg_pre *e) {
  if (e->state == PRE_READY) mend_run_image_free(&e->img);
  free(e->step_names);
  e->step_names = NULL;
  e->state = PRE_GONE;
}

void mend__pg_pre_clear(mend_pg *p) {
  for (int i = 0; i < p->npre; i++) {
    pre_drop(&p->pre[i]);
    free(p->pre[i].id);
  }
  free(p->pre);
  p->pre = NULL;
  p->npre = p->cappre = p->pre_lo = p->pre_hi = p->pre_hint = 0;
}

/* Read ahead in this transaction, which is still open: nothing committed, rolled back or
 * handed to the writer thread since (each moves open_seq, ends in_batch, or the next
 * transaction begun moves tx_serial). */
static int pre_fresh(const mend_pg *p) {
  return p->pre_seq == p->open_seq && p->pre_tx == p->tx_serial && p->in_batch &&
         !p->batch_failed;
}

void mend__pg_pre_claimed(mend_pg *p, const PGresult *r) {
  if (p->npre && !pre_fresh(p)) mend__pg_pre_clear(p);
  p->pre_seq = p->open_seq;
  p->pre_tx = p->tx_serial;
  int n = PQntuples(r);
  if (p->npre + n > p->cappre) {
    int cap = p->cappre ? p->cappre : 64;
    while (cap < p->npre + n) cap *= 2;
    pg_pre *q = realloc(p->pre, (size_t)cap * sizeof *q);
    if (!q) {   /* only a saving: each run is read by itself then */
      mend__pg_pre_clear(p);
      return;
    }
    p->pre = q;
    p->cappre = cap;
  }
  for (int i = 0; i < n; i++) {
    char *id = strdup(PQgetvalue(r, i, 0));
    if (!id) {
      mend__pg_pre_clear(p);
      return;
    }
    p->pre[p->npre++] = (pg_pre){.id = id, .state = PRE_WAITING};
  }
}

static int pre_find(mend_pg *p, const char *id, int lo, int hi) {
  if (p->pre_hint >= lo && p->pre_hint < hi && strcmp(p->pre[p->pre_hint].id, id) == 0)
    return p->pre_hint;
  for (int i = lo; i < hi; i++)
    if (strcmp(p->pre[i].id, id) == 0) return i;
  return -1;
}

/* Whether statement q, whose first value is v0, may change what an image holds: of one run
 * (v0), of none, or of any (then all read ahead is dropped). Images hold the run's row but its
 * owner and fence, its steps and its history. */
void mend__pg_pre_forget(mend_pg *p, int q, const char *v0) {
  if (!p->npre) return;
  switch (q) {
  /* of none: reads, claims (owner and fence), and tables no image reads */
  case P_LEASE_LIVE: case P_LEASE_CHECK: case P_VERSION_ID: case P_FIND_RUN_KEY:
  case P_FIND_KEY_RESULT: case P_GET_BREAKER: case P_LAST_SEQ: case P_VERSION_SCRIPT:
  case P_OWNER: case P_HOLDERS: case P_HELD: case P_CLAIMABLE_QUICK: case P_CLAIMABLE_THOROUGH:
  case P_CANCEL_REQUESTS: case P_NEXT_EVENT: case P_LAST_EVENT: case P_EVENTS_AFTER:
  case P_EVENT_SENT:
  case P_TOKEN_OF_ATTEMPT: case P_IMAGE_RUN: case P_IMAGE_STEPS: case P_IMAGE_HISTORY:
  case P_IMAGES_RUN: case P_IMAGES_STEPS: case P_IMAGES_HISTORY:
  case P_CLAIM_OLDEST: case P_CLAIM_NEWEST: case P_CLAIM_FREE_OLDEST: case P_CLAIM_FREE_NEWEST:
  case P_FORGET_GONE: case P_FORGET_WORKER: case P_RELEASE_OWNER: case P_RENEW:
  case P_PUT_BREAKER: case P_PUT_VERSION: case P_KEEP_SCRIPT: case P_AUDIT: case P_PUT_TOKEN:
  case P_USE_TOKEN: case P_SEND_EVENT: case P_RECORD_EVENT: case P_DLQ_REMOVE:
  case P_CONSUME_EVENT:
  case P_CHILD_END:
    return;
  /* of the run named first */
  case P_INSERT_RUN: case P_INSERT_RUN_KEY: case P_UPDATE_RUN: case P_PUT_STEP: case P_UPDATE_STEP:
  case P_APPEND_HISTORY: case P_PUT_DLQ: case P_SET_UNAVAILABLE: case P_RELEASE: case P_TAKE:
  case P_REQUEST_CANCEL: case P_MOVE_RUN: case P_DROP_STEPS_FROM: case P_SET_PARENT:
  case P_REOPEN_RUN:
    if (v0) {
      int i = pre_find(p, v0, p->pre_lo, p->pre_hi);
      if (i >= 0) pre_drop(&p->pre[i]);
      return;
    }
    break;
  default:
    break;
  }
  mend__pg_pre_clear(p);
}

typedef struct pre_key { const char *id; int i; } pre_key;

static int key_cmp(const void *a, const void *b) {
  return strcmp(((const pre_key *)a)->id, ((const pre_key *)b)->id);
}

typedef struct ahead {
  mend_pg *p;
  pre_key *keys;
  int n;
  char *failed;   /* of each key: its image is not to be given (the run is read by itself) */
  char *got;      /* of each key: its run row came */
} ahead;

/* The reads, in the order sent, and the column that names the run in each. */
static const int ahead_q[R__COUNT] = {P_IMAGES_RUN, P_IMAGES_STEPS, P_IMAGES_HISTORY};
static const int ahead_id_col[R__COUNT] = {11, 15, 7};

static void take_ahead(void *ud, int k, const PGresult *r) {
  ahead *a = ud;
  for (int row = 0; row < PQntuples(r); row++) {
    pre_key key = {PQgetvalue(r, row, ahead_id_col[k]), 0};
    pre_key *f = bsearch(&key, a->keys, (size_t)a->n, sizeof *a->keys, key_cmp);
    if (!f) continue;
    int j = (int)(f - a->keys);
    if (a->failed[j]) continue;
    pg_pre *e = &a->p->pre[f->i];
    int oom = 0, bad = 0;
    switch (k) {
    case R_RUN:
      bad = run_row(a->p, e->id, r, row, &e->img, &e->step_names, &oom) != 0;
      a->got[j] = 1;
      break;
    case R_STEPS: bad = step_row(a->p, e->id, r, row, &e->img, &oom) != 0; break;
    default: history_row(r, row, &e->img, &oom); break;
    }
    if (bad || oom) a->failed[j] = 1;
  }
}

/* Reads the images of the runs waiting from i on, up to PRE_CHUNK of them, after the open
 * batch's writes, in their round trip. 0, or -1 when the batch failed. */
static int pre_fetch(mend_pg *p, int i) {
  /* Images are ready only in the chunk read last, where mend__pg_pre_forget looks: one of an
   * earlier chunk not taken yet (runs taken out of order) is read again when it is. */
  for (int j = p->pre_lo; j < p->pre_hi; j++)
    if (p->pre[j].state == PRE_READY) pre_drop(&p->pre[j]);
  int hi = i;
  size_t len = 3;
  while (hi < p->npre && hi - i < PRE_CHUNK && p->pre[hi].state == PRE_WAITING)
    len += 2 * strlen(p->pre[hi++].id) + 3;
  int n = hi - i;
  pre_key *keys = malloc((size_t)n * sizeof *keys);
  char *flags = calloc(2, (size_t)n), *array = malloc(len);
  if (!keys || !flags || !array) {   /* only a saving: read by itself */
    free(keys);
    free(flags);
    free(array);
    for (int j = i; j < hi; j++) pre_drop(&p->pre[j]);
    return 0;
  }
  /* a text[] literal: each id quoted, its quotes and backslashes escaped */
  char *w = array;
  *w++ = '{';
  for (int j = i; j < hi; j++) {
    keys[j - i] = (pre_key){p->pre[j].id, j};
    memset(&p->pre[j].img, 0, sizeof p->pre[j].img);
    if (j > i) *w++ = ',';
    *w++ = '"';
    for (const char *c = p->pre[j].id; *c; c++) {
      if (*c == '"' || *c == '\\') *w++ = '\\';
      *w++ = *c;
    }
    *w++ = '"';
  }
  *w++ = '}';
  *w = 0;
  qsort(keys, (size_t)n, sizeof *keys, key_cmp);
  ahead a = {.p = p, .keys = keys, .n = n, .failed = flags, .got = flags + n};
  const char *v[R__COUNT] = {array, array, array};
  pg_reads reads = {.n = R__COUNT, .q = ahead_q, .vals = v, .take = take_ahead, .ud = &a};
  /* their state says what came; each is ready only once all three reads are taken */
  for (int j = i; j < hi; j++) p->pre[j].state = PRE_READY;
  int rc = mend__pg_sync_reads(p, &reads);
  for (int j = 0; j < n; j++) {
    pg_pre *e = &p->pre[keys[j].i];
    if (rc != 0 || a.failed[j] || !a.got[j]) pre_drop(e);
  }
  p->pre_lo = i;
  p->pre_hi = hi;
  free(keys);
  free(flags);
  free(array);
  return rc < 0 ? -1 : 0;
}

/* The image of a claimed run, read ahead: 0 given, 1 not read ahead (the caller reads it),
 * -1 error (err). */
static int pre_take(mend_pg *p, const char *id, mend_run_image *img) {
  if (!p->npre) return 1;
  if (!pre_fresh(p)) {
    mend__pg_pre_clear(p);
    return 1;
  }
  int i = pre_find(p, id, 0, p->npre);
  if (i < 0) return 1;
  if (p->pre[i].state == PRE_WAITING && pre_fetch(p, i) != 0) return -1;
  pg_pre *e = &p->pre[i];
  p->pre_hint = i + 1;
  if (e->state != PRE_READY) return 1;
  *img = e->img;
  e->state = PRE_GONE;   /* the image is the caller's now */
  char err[300];
  int rc = mend__image_finish(img, id, e->step_names, err, sizeof err);
  free(e->step_names);
  e->step_names = NULL;
  if (rc != 0) {   /* read by itself, it says what is wrong */
    mend_run_image_free(img);
    memset(img, 0, sizeof *img);
    return 1;
  }
  return 0;
}

#ifdef MEND_FAILPOINTS
/* MEND_PG_END_BEFORE_IMAGE=N: before the Nth image this process reads from the server (not
 * from a claim's read-ahead), a batch is begun if none is open and the server ends the
 * session, as pg_terminate_backend from elsewhere would while a batch is open: the read
 * finds the connection gone, and the batch with it. For the spec of a parked run brought back
 * then (spec/pg_reconnect_spec.lua). */
static void end_before_image(mend_pg *p) {
  static pg_failpoint fp = {"MEND_PG_END_BEFORE_IMAGE", -1, 0};
  if (!mend__pg_failpoint_hit(&fp)) return;
  if (!p->in_batch && mend__pg_begin(p) != 0) return;
  PQclear(PQexec(p->conn, "SELECT pg_terminate_backend(pg_backend_pid())"));
}
#endif

int mend__pg_run_image(mend_store *s, const char *id, mend_run_image *img) {
  mend_pg *p = PG(s);
  memset(img, 0, sizeof *img);
  p->not_found = 0;
  if (!mend__pg_text_fits(p, id)) {   /* no row holds it; sent, it would fail the batch */
    p->not_found = 1;
    mend__pg_msg(p->err, sizeof p->err, "no run %s", id);
    return -1;
  }
  int pre = pre_take(p, id, img);
  if (pre <= 0) return pre;
#ifdef MEND_FAILPOINTS
  end_before_image(p);
#endif
  const char *v[R__COUNT] = {id, id, id};
  taker t = {.p = p, .id = id, .img = img};
  /* After the open batch's writes, in their round trip; alone when there is no batch. */
  pg_reads reads = {.n = R__COUNT, .q = image_q, .vals = v, .take = take, .ud = &t};
  int rc = mend__pg_sync_reads(p, &reads);
  if (rc == 1) rc = read_alone(p, v, &t);
  int failed = rc != 0 || t.failed;
  if (!failed && t.taken != R__COUNT) {
    mend__pg_msg(p->err, sizeof p->err, "%s: read run: no answer to every read", p->server);
    failed = 1;
  }
  if (!failed && t.oom) {
    mend__pg_msg(p->err, sizeof p->err, "%s: read run: out of memory", p->server);
    failed = 1;
  }
  if (!failed) {
    char err[300];
    if (mend__image_finish(img, id, t.step_names, err, sizeof err) != 0) {
      mend__pg_msg(p->err, sizeof p->err, "%s: %s", p->server, err);
      failed = 1;
    }
  }
  free(t.step_names);
  if (failed) mend_run_image_free(img);
  return failed ? -1 : 0;
}
