/*
 * pg_image: a run's image for the engine (mend_store_run_image) from PostgreSQL: its row, its
 * steps and its history read in one round trip, in the pipeline that sends the open batch's
 * writes (or alone, in a snapshot of its own, when no batch is open), typed from the columns
 * without building JSON. Must never: write; read around the open batch; leave a transaction
 * open that it began.
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

static int fill_run(mend_pg *p, const char *id, const PGresult *r, mend_run_image *img,
                    char **step_names, int *oom) {
  if (PQntuples(r) == 0) {
    p->not_found = 1;
    mend__pg_msg(p->err, sizeof p->err, "no run %s", id);
    return -1;
  }
  const char *status = PG_TEXT(r, 0, 2);
  if (!status || mend_run_status_parse(status, &img->status) != 0) {
    mend__pg_msg(p->err, sizeof p->err, "%s: run %s has an unknown status \"%s\"", p->server, id,
                 status ? status : "null");
    return -1;
  }
  img->workflow = text_of(r, 0, 0, oom);
  img->version = text_of(r, 0, 1, oom);
  img->reason = text_of(r, 0, 3, oom);
  img->error = text_of(r, 0, 4, oom);
  img->attention = int_of(r, 0, 5) != 0;
  img->cancel_requested = int_of(r, 0, 6) != 0;
  img->parent_run = text_of(r, 0, 7, oom);
  img->unavailable = text_of(r, 0, 8, oom);
  img->input = text_of(r, 0, 9, oom);
  *step_names = text_of(r, 0, 10, oom);
  return 0;
}

static int fill_steps(mend_pg *p, const char *id, const PGresult *r, mend_run_image *img,
                      int *oom) {
  for (int i = 0; i < PQntuples(r) && !*oom; i++) {
    mend_step_image *st = mend__image_add_step(img);
    if (!st) {
      *oom = 1;
      break;
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
    st->custom_key = int_of(r, i, 6) != 0;
    st->result = text_of(r, i, 7, oom);
    st->error = text_of(r, i, 8, oom);
    st->due = real_of(r, i, 9);
    st->last_delay = real_of(r, i, 10);
    st->slept = int_of(r, i, 11) != 0;
    st->error_kind = text_of(r, i, 12, oom);
  }
  return 0;
}

static void fill_history(const PGresult *r, mend_run_image *img, int *oom) {
  for (int i = 0; i < PQntuples(r) && !*oom; i++) {
    mend_history_image *h = mend__image_add_history(img);
    if (!h) {
      *oom = 1;
      break;
    }
    h->seq = (long)int_of(r, i, 0);
    h->at = PQgetisnull(r, i, 1) ? -1 : strtod(PQgetvalue(r, i, 1), NULL);
    h->step = text_of(r, i, 2, oom);
    h->event = text_of(r, i, 3, oom);
    h->to = text_of(r, i, 4, oom);
    h->attempt = (int)int_of(r, i, 5);
    h->detail = text_of(r, i, 6, oom);
  }
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

int mend__pg_run_image(mend_store *s, const char *id, mend_run_image *img) {
  mend_pg *p = PG(s);
  memset(img, 0, sizeof *img);
  p->not_found = 0;
  if (!mend__pg_text_fits(p, id)) {   /* no row holds it; sent, it would fail the batch */
    p->not_found = 1;
    mend__pg_msg(p->err, sizeof p->err, "no run %s", id);
    return -1;
  }
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
