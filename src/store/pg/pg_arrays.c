/*
 * pg_arrays: which of a batch's recorded writes go to the server as one statement of arrays
 * (one array a column, unnest() on the server) rather than one statement each, and the
 * arrays themselves, as text. A row sent alone costs the server a statement's start and end
 * besides the row; sent among a batch's others, only the row. Owns the rule for each kind:
 * new runs (P_INSERT_RUNS) and run updates (P_UPDATE_RUNS: a run missing fails the statement,
 * as one update would), each run's in the arrays only when nothing else of the batch touches
 * its row (written by another kind, a repair's, or updated twice: then all of that run's go in
 * their place, in order); history rows that carry their number (P_APPEND_HISTORIES: one whose
 * number was taken fails the statement, and pg_batch.c sends the rows again one by one); and
 * step rows put whole (P_PUT_STEPS: of a step put twice in the batch only the last, which is
 * what the two upserts one after the other leave; none of a run whose steps the batch also
 * updates, as an update must come after the put it changes), and among them those the engine
 * knows to have no row yet inserted plainly (P_INSERT_STEPS), when the caller can send the
 * batch again without them if one was there after all. A record of one of these kinds
 * whose number of values is not its statement's is refused (PG_PLAN_WIDTH), never sent alone
 * in silence. A column whose rows all have one value goes as that value, its array empty
 * (pg_schema.c's COL). Must never: change what a batch leaves in the database against its
 * statements sent one by one in order; take a repair's write (sent alone, as recorded, past
 * the fence).
 */
#include "pg_int.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Appends t as the array's element number `at` (the first opens the brace). */
static void col_write(pg_arrays *a, int col, const char *t, int at) {
  /* most values have no quote or backslash: their bytes go in with one copy */
  size_t plain = t ? strcspn(t, "\"\\") : 0, n = t && t[plain] ? plain + strlen(t + plain) : plain;
  /* worst case: every byte escaped, a comma, two quotes, and the closing brace and NUL */
  size_t need = a->len[col] + 2 * n + 8;
  if (need > a->cap[col]) {
    size_t cap = a->cap[col] ? a->cap[col] * 2 : 4096;
    while (cap < need) cap *= 2;
    char *s = realloc(a->a[col], cap);
    if (!s) {
      a->oom = 1;
      return;
    }
    a->a[col] = s;
    a->cap[col] = cap;
  }
  char *o = a->a[col] + a->len[col];
  *o++ = at ? ',' : '{';
  if (!t) {
    memcpy(o, "NULL", 4);
    o += 4;
  } else {
    *o++ = '"';
    memcpy(o, t, plain);
    o += plain;
    for (size_t i = plain; i < n; i++) {
      if (t[i] == '"' || t[i] == '\\') *o++ = '\\';
      *o++ = t[i];
    }
    *o++ = '"';
  }
  a->len[col] = (size_t)(o - a->a[col]);
}

static int same_value(const char *x, const char *y) {
  return x == y || (x && y && strcmp(x, y) == 0);
}

/* t as the next row's value of the column: kept as the column's one value while every row has
 * it; at the first that differs, the rows before are written out as the array's elements. The
 * first column is always an array (pg_schema.c: the rows are counted by it). */
static void col_put(pg_arrays *a, int col, const char *t) {
  if (!a->varied[col]) {
    if (a->n == 0) {
      a->one[col] = t;
      if (col > 0) return;
    } else if (same_value(a->one[col], t)) {
      return;
    } else {
      for (int i = 0; i < a->n && !a->oom; i++) col_write(a, col, a->one[col], i);
    }
    a->varied[col] = 1;
  }
  col_write(a, col, t, a->n);
}

/* The record's ith value, NULL for SQL's NULL. */
static const char *val(const pg_log *log, const pg_rec *r, int i) {
  long off = log->vals[r->first + i];
  return off < 0 ? NULL : log->text + off;
}

static void row_add(pg_arrays *a, const pg_log *log, const pg_rec *r) {
  for (int c = 0; c < a->ncols && !a->oom; c++) col_put(a, c, val(log, r, c));
  a->n++;
}

/* A set of the log's records told apart by their first nkey values (a run's id; and a step's
 * index): the log outlives the plan, so nothing is copied, and a key costs no allocation. */
typedef struct recset {
  int *slot;         /* record number + 1; 0 is empty. Open addressing, at most half full. */
  size_t cap, count;
  int nkey;
} recset;

static size_t rec_hash(const pg_log *log, const pg_rec *r, int nkey) {
  uint64_t h = 1469598103934665603ull;   /* FNV-1a, a separator byte after each value */
  for (int i = 0; i < nkey; i++) {
    const char *t = val(log, r, i);
    for (; t && *t; t++) h = (h ^ (unsigned char)*t) * 1099511628211ull;
    h = (h ^ (t ? 0x1fu : 0xffu)) * 1099511628211ull;
  }
  return (size_t)(h ^ (h >> 29));
}

static int rec_same(const pg_log *log, const pg_rec *a, const pg_rec *b, int nkey) {
  for (int i = 0; i < nkey; i++) {
    const char *x = val(log, a, i), *y = val(log, b, i);
    if (x != y && (!x || !y || strcmp(x, y) != 0)) return 0;
  }
  return 1;
}

/* The slot holding a record with r's key, or the empty one where r would go. */
static size_t rec_find(const recset *s, const pg_log *log, const pg_rec *r) {
  size_t mask = s->cap - 1, i = rec_hash(log, r, s->nkey) & mask;
  while (s->slot[i] && !rec_same(log, &log->recs[s->slot[i] - 1], r, s->nkey)) i = (i + 1) & mask;
  return i;
}

/* Record k's key: 1 added, 0 there already, -1 out of memory. */
static int recset_add(recset *s, const pg_log *log, int k) {
  if ((s->count + 1) * 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    int *slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    recset old = *s;
    s->slot = slot;
    s->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
      if (old.slot[i]) s->slot[rec_find(s, log, &log->recs[old.slot[i] - 1])] = old.slot[i];
    free(old.slot);
  }
  size_t i = rec_find(s, log, &log->recs[k]);
  if (s->slot[i]) return 0;
  s->slot[i] = k + 1;
  s->count++;
  return 1;
}

int mend__pg_arrays_width(int q) {
  switch (q) {
  case P_INSERT_RUN: return PG_RUN_COLS;
  case P_UPDATE_RUN: return PG_RUN_UPDATE_COLS;
  case P_APPEND_HISTORY: return PG_HISTORY_COLS;
  case P_PUT_STEP: return PG_STEP_COLS;
  default: return -1;
  }
}

/* Statements other than a run's insert and update that write or read its row by its id
 * (their first value): that run's inserts and updates keep their place. */
static int touches_run(int q) { return q == P_SET_UNAVAILABLE || q == P_CHILD_END; }

int mend__pg_arrays_plan(pg_batch_arrays *b, const pg_log *log, int may_fail) {
  memset(b, 0, sizeof *b);
  b->runs.ncols = PG_RUN_COLS;
  b->run_updates.ncols = PG_RUN_UPDATE_COLS;
  b->hist.ncols = PG_HISTORY_COLS;
  b->new_steps.ncols = PG_STEP_COLS;
  b->steps.ncols = PG_STEP_COLS;
  b->bad = -1;
  if (!(b->take = calloc((size_t)log->nrec + 1, 1))) return -1;
  mend_idset updated = {0}, runs_alone = {0};
  recset seen = {.nkey = 2}, run_updated = {.nkey = 1};
  int rc = 0, hist_alone = !may_fail;
  for (int k = 0; k < log->nrec && rc == 0; k++) {
    const pg_rec *r = &log->recs[k];
    int width = mend__pg_arrays_width(r->q);
    if (width >= 0 && r->n != width) {
      assert(!"a record's values are not its array statement's columns");
      b->bad = k;
      rc = PG_PLAN_WIDTH;
      break;
    }
    const char *run = r->n ? val(log, r, 0) : NULL;
    size_t len = run ? strlen(run) : 0;
    /* a step written otherwise than by a put of the engine's: its run's puts keep their place */
    if ((r->q == P_UPDATE_STEP || (r->q == P_PUT_STEP && r->repair)) && run &&
        mend_idset_add(&updated, run, len) < 0)
      rc = -1;
    /* a run's row written otherwise, or updated twice (each update keeps the owner only while
     * the run is live, so the last alone would not leave what both do) */
    int alone = touches_run(r->q) || (r->repair && width >= 0);
    if (!alone && r->q == P_UPDATE_RUN && run) {
      int added = recset_add(&run_updated, log, k);
      if (added < 0) rc = -1;
      alone = added == 0;
    }
    if (alone && run && mend_idset_add(&runs_alone, run, len) < 0) rc = -1;
    /* A row that takes the next free number (or a repair's) sent before rows it followed
     * would take a lower one: then every row goes in order, one by one. */
    if (r->q == P_APPEND_HISTORY && (r->repair || !val(log, r, PG_HISTORY_COLS - 1)))
      hist_alone = 1;
  }
  /* from the last: a step's put seen already is a later one */
  for (int k = log->nrec - 1; k >= 0 && rc == 0; k--) {
    const pg_rec *r = &log->recs[k];
    if (r->repair) continue;
    if (r->q == P_APPEND_HISTORY && !hist_alone) {
      b->take[k] = PG_TAKE_HISTORY;
      b->nhist++;
    }
    const char *run = r->n ? val(log, r, 0) : NULL;
    if (!run) continue;
    if ((r->q == P_INSERT_RUN || r->q == P_UPDATE_RUN) &&
        !mend_idset_has(&runs_alone, run, strlen(run)))
      b->take[k] = r->q == P_INSERT_RUN ? PG_TAKE_RUN : PG_TAKE_RUN_UPDATE;
    if (r->q != P_PUT_STEP) continue;
    if (mend_idset_has(&updated, run, strlen(run))) continue;
    int added = recset_add(&seen, log, k);
    if (added < 0) rc = -1;
    else if (!added) b->take[k] = PG_TAKE_SUPERSEDED;
    else if (r->new_row && may_fail) {
      b->take[k] = PG_TAKE_NEW_STEP;
      b->nnew_steps++;
    } else {
      b->take[k] = PG_TAKE_STEP;
    }
  }
  mend_idset_clear(&updated);
  free(seen.slot);
  mend_idset_clear(&runs_alone);
  free(run_updated.slot);
  if (rc != 0) {
    free(b->take);
    b->take = NULL;
  }
  return rc;
}

int mend__pg_arrays_take(pg_batch_arrays *b, const pg_log *log, int k) {
  if (!b->take) return 0;
  switch (b->take[k]) {
  case PG_TAKE_RUN: row_add(&b->runs, log, &log->recs[k]); return 1;
  case PG_TAKE_RUN_UPDATE: row_add(&b->run_updates, log, &log->recs[k]); return 1;
  case PG_TAKE_HISTORY: row_add(&b->hist, log, &log->recs[k]); return 1;
  case PG_TAKE_STEP: row_add(&b->steps, log, &log->recs[k]); return 1;
  case PG_TAKE_NEW_STEP: row_add(&b->new_steps, log, &log->recs[k]); return 1;
  case PG_TAKE_SUPERSEDED: return 1;
  default: return 0;
  }
}

const char **mend__pg_arrays_end(pg_arrays *a, const char **v) {
  if (a->oom) return NULL;
  for (int c = 0; c < a->ncols; c++) {
    if (!a->varied[c]) {
      v[c] = "{}";
      v[a->ncols + c] = a->one[c];
      continue;
    }
    a->a[c][a->len[c]++] = '}';   /* col_write left room for the brace */
    a->a[c][a->len[c]] = 0;
    v[c] = a->a[c];
    v[a->ncols + c] = NULL;
  }
  return v;
}

static void arrays_free(pg_arrays *a) {
  for (int c = 0; c < PG_ARRAY_COLS; c++) free(a->a[c]);
}

void mend__pg_arrays_free(pg_batch_arrays *b) {
  arrays_free(&b->runs);
  arrays_free(&b->run_updates);
  arrays_free(&b->hist);
  arrays_free(&b->new_steps);
  arrays_free(&b->steps);
  free(b->take);
  memset(b, 0, sizeof *b);
}
