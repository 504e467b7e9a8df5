/*
 * pg_log: the PostgreSQL store's write log: a batch's writes recorded with their values copied,
 * as the text libpq sends (numbers through numtext.c, the bytes printf would write), and copies
 * of records from one log to another. Must never: send anything; decide what a write means or
 * when a log is sent (pg_batch.c).
 */
#include "pg_int.h"
#include "../../numtext.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **a, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int n = *cap ? *cap * 2 : 256;
  while (n < need) n *= 2;
  void *q = realloc(*a, (size_t)n * size);
  if (!q) return -1;
  *a = q;
  *cap = n;
  return 0;
}

void mend__pg_log_free(pg_log *log) {
  free(log->recs);
  free(log->vals);
  free(log->text);
  memset(log, 0, sizeof *log);
}

void mend__pg_log_clear(pg_log *log) {
  log->nrec = log->nval = 0;
  log->ntext = 0;
  log->oom = 0;
  log->wake = 0;
}

void mend__pg_rec_begin(mend_pg *p, int q) {
  pg_log *log = p->cur;
  if (grow((void **)&log->recs, &log->caprec, log->nrec + 1, sizeof *log->recs)) {
    log->oom = 1;
    return;
  }
  log->recs[log->nrec++] = (pg_rec){q, log->nval, 0, p->repairing, 0};
}

static void log_value(pg_log *log, const char *t, size_t n) {
  if (log->oom || !log->nrec) return;
  if (grow((void **)&log->vals, &log->capval, log->nval + 1, sizeof *log->vals)) {
    log->oom = 1;
    return;
  }
  long off = -1;
  if (t) {
    if (log->ntext + n + 1 > log->captext) {
      size_t cap = log->captext ? log->captext * 2 : 65536;
      while (cap < log->ntext + n + 1) cap *= 2;
      char *text = realloc(log->text, cap);
      if (!text) {
        log->oom = 1;
        return;
      }
      log->text = text;
      log->captext = cap;
    }
    memcpy(log->text + log->ntext, t, n);
    log->text[log->ntext + n] = 0;
    off = (long)log->ntext;
    log->ntext += n + 1;
  }
  log->vals[log->nval++] = off;
  log->recs[log->nrec - 1].n++;
}

static void rec_value(mend_pg *p, const char *t, size_t n) { log_value(p->cur, t, n); }

void mend__pg_log_keep(pg_log *dst, const pg_log *src, int q) {
  for (int k = 0; k < src->nrec && !dst->oom; k++) {
    const pg_rec *r = &src->recs[k];
    if (q >= 0 && r->q != q) continue;
    if (grow((void **)&dst->recs, &dst->caprec, dst->nrec + 1, sizeof *dst->recs)) {
      dst->oom = 1;
      return;
    }
    dst->recs[dst->nrec++] = (pg_rec){r->q, dst->nval, 0, r->repair, r->new_row};
    for (int i = 0; i < r->n; i++) {
      long off = src->vals[r->first + i];
      log_value(dst, off < 0 ? NULL : src->text + off, off < 0 ? 0 : strlen(src->text + off));
    }
    dst->wake = 1;
  }
}

void mend__pg_rec_text(mend_pg *p, const char *t) { rec_value(p, t, t ? strlen(t) : 0); }

void mend__pg_rec_int(mend_pg *p, long long i) {
  char b[MEND_NUMTEXT_MAX];
  rec_value(p, b, mend_numtext_int(b, i));
}

void mend__pg_rec_real(mend_pg *p, double d) {
  char b[MEND_NUMTEXT_MAX];
  if (isinf(d)) rec_value(p, d > 0 ? "Infinity" : "-Infinity", d > 0 ? 8 : 9);
  else if (isnan(d)) rec_value(p, "NaN", 3);
  else rec_value(p, b, mend_numtext_real(b, d));
}

void mend__pg_rec_opt_real(mend_pg *p, double d) {
  if (d < 0) rec_value(p, NULL, 0);
  else mend__pg_rec_real(p, d);
}
