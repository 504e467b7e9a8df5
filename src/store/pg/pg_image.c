/*
 * pg_image: a run's image for the engine (mend_store_run_image) from PostgreSQL: its row, its
 * steps and its history read in one round trip, as one pipeline (in a snapshot of its own when
 * no batch is open), typed from the columns without building JSON. Must never: write; read
 * around the open batch (it is sent first); leave a transaction open that it began.
 */
#include "pg_int.h"

#include <float.h>
#include <math.h>
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

/* What each command of the pipeline is. */
enum { C_BEGIN, C_RUN, C_STEPS, C_HISTORY, C_COMMIT, C__COUNT };

int mend__pg_run_image(mend_store *s, const char *id, mend_run_image *img) {
  mend_pg *p = PG(s);
  memset(img, 0, sizeof *img);
  p->not_found = 0;
  if (!mend__pg_text_fits(p, id)) {   /* no row holds it; sent, it would fail the batch */
    p->not_found = 1;
    mend__pg_msg(p->err, sizeof p->err, "no run %s", id);
    return -1;
  }
  if (mend__pg_sync(p) != 0) return -1;
  PGconn *c = p->conn;
  /* Without a batch open the three reads need a snapshot of their own, or a commit between
   * them could make a step read as pending while a later one reads as running. */
  int own = !p->in_batch && PQtransactionStatus(c) == PQTRANS_IDLE;
  int cmds[C__COUNT], n = 0;
  const char *v[1] = {id};
  int ok = PQenterPipelineMode(c);
  if (ok && own) {
    ok = PQsendQueryParams(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, NULL,
                           NULL, NULL, 0);
    cmds[n++] = C_BEGIN;
  }
  static const int prepared[] = {[C_RUN] = P_IMAGE_RUN, [C_STEPS] = P_IMAGE_STEPS,
                                 [C_HISTORY] = P_IMAGE_HISTORY};
  for (int k = C_RUN; ok && k <= C_HISTORY; k++) {
    char name[16];
    snprintf(name, sizeof name, "m%d", prepared[k]);
    ok = PQsendQueryPrepared(c, name, 1, v, NULL, NULL, 0);
    cmds[n++] = k;
  }
  if (ok && own) {
    ok = PQsendQueryParams(c, "COMMIT", 0, NULL, NULL, NULL, NULL, 0);
    cmds[n++] = C_COMMIT;
  }
  if (!ok || !PQpipelineSync(c)) {
    mend__pg_fail(p, c, NULL, "read run");
    PQexitPipelineMode(c);
    p->conn_doomed = PQstatus(c) != CONNECTION_OK;
    return -1;
  }
  int failed = 0, oom = 0, lost = 0;
  char *step_names = NULL;
  for (int k = 0; k < n; k++) {
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
    } else if (!failed) {
      switch (cmds[k]) {
      case C_RUN: failed = fill_run(p, id, r, img, &step_names, &oom) != 0; break;
      case C_STEPS: failed = fill_steps(p, id, r, img, &oom) != 0; break;
      case C_HISTORY: fill_history(r, img, &oom); break;
      default: break;
      }
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
    p->conn_doomed = 1;
    p->conn_lost = 1;
    mend__pg_rollback(p);
  } else if (own && PQtransactionStatus(c) != PQTRANS_IDLE) {
    PQclear(PQexec(c, "ROLLBACK"));   /* a failed BEGIN's block; no batch of ours */
  } else if (p->in_batch && PQtransactionStatus(c) == PQTRANS_INERROR) {
    p->batch_failed = 1;
  }
  if (!failed && oom) {
    mend__pg_msg(p->err, sizeof p->err, "%s: read run: out of memory", p->server);
    failed = 1;
  }
  if (!failed) {
    char err[300];
    if (mend__image_finish(img, id, step_names, err, sizeof err) != 0) {
      mend__pg_msg(p->err, sizeof p->err, "%s: %s", p->server, err);
      failed = 1;
    }
  }
  free(step_names);
  if (failed) mend_run_image_free(img);
  return failed ? -1 : 0;
}
