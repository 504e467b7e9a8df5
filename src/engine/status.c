/*
 * status: the one place statuses change. Owns a step's and a run's transitions (checked
 * against transition.c's table, written into the open batch with the history row each one
 * makes, and logged), the step's row as it is now, the history's order in time, and a run's
 * dead letter.
 *
 * Must never: apply a transition the table in transition.c refuses; write anywhere but the open
 * batch (what follows from a transition is the pump's to do, after the commit); write a row
 * for a lane that is not its run's.
 */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "util.h"

const char *mend__step_name(mend_run *r, int i) {
  const char *item = MEND_COLD(r, item_name);
  return item ? item : r->wf->steps[i].name;
}

/* The step's row as it is now: the whole row at its first transition (a step not begun has
 * none: schema 4), an update after. The key is written only when it is the step's own: the
 * default one (run_id/name) is what a row without one reads as (schema 5). An attempt that
 * begins writes no row: its `-> running` history row says so, and the row is written once the
 * attempt ends (schema 6: one row write a step instead of two; 20% of the writer thread's
 * work in W1). */
void mend__write_step(mend_run *r, int i) {
  step_rt *st = &r->steps[i];
  /* ...but for a key of the step's own just asked for: it is stored before the attempt uses it,
   * as the same key must come back after a crash (ensure_key asks once). */
  if (st->status == MEND_STEP_RUNNING && (st->has_row || !st->custom_key) && !MEND_COLD(r, item))
    return;
  int new_row = !st->has_row;
  const char *idem_key = st->custom_key ? st->idem_key : NULL;
  mend_step_rec rec = {
    .run_id = r->id, .idx = i + MEND_COLD(r, row_base), .name = mend__step_name(r, i),
    .status = mend_step_status_name(st->status),
    .attempts = st->attempts, .comp_attempts = st->comp_attempts, .idem_key = idem_key,
    .custom_key = !st->custom_key ? MEND_KEY_DEFAULT : st->reused ? MEND_KEY_REUSED : MEND_KEY_OWN,
    .result = st->result, .error = st->error,
    .error_kind = st->error ? mend_error_kind_name((mend_error_kind)st->err_kind) : NULL,
    .error_severity = st->error ? (int)st->err_severity : 0,
    .error_stopped = st->error ? (int)st->err_stopped : 0, .due = st->due,
    .last_delay = st->last_delay, .updated = mend_engine_now(r->E), .slept = st->slept,
    .awaits = mend__awaits(r, i), .new_row = new_row && !st->row_unknown};
  if ((new_row ? mend_store_put_step : mend_store_update_step)(r->E->store, &rec))
    mend__store_failed(r->E);
  else st->has_row = 1;
}

/* A run carried on by another engine (a virtual clock elsewhere, a clock set back) keeps its
 * history in order: no row is older than the one before. */
double mend__history_time(mend_run *r) {
  r = mend__root(r);
  double now = mend_engine_now(r->E);
  if (now > r->last_at) r->last_at = now;
  return r->last_at;
}

static void append_history(mend_run *r, mend_history_rec *h) {
  r = mend__root(r);   /* a lane's rows are its run's */
  h->run_id = r->id;
  h->at = mend__history_time(r);
  h->seq = ++r->history_seq;
  if (mend_store_append_history(r->E->store, h)) mend__store_failed(r->E);
}

void mend__history(mend_run *r, const char *step, const char *event, const char *from,
                    const char *to, int attempt, const char *error, double delay,
                    const char *detail) {
  mend_history_rec h = {NULL, step, 0, event, from, to, attempt, error, delay, detail, 0, NULL};
  append_history(r, &h);
}

static void log_transition(mend_run *r, const char *step, int attempt, const char *from,
                           const char *to, const char *error) {
  const char *level = error ? "warn" : "info";
  if (!mend__logs(r->E, level)) return;
  char msg[512];
  if (error) snprintf(msg, sizeof msg, "%s -> %s: %s", from, to, error);
  else snprintf(msg, sizeof msg, "%s -> %s", from, to);
  mend_engine_log_line(r->E, level, r->id, step, attempt, step ? "step" : "run", msg);
}

/* The one place a step changes status. */
void mend__step_to(mend_run *r, int i, mend_step_status to, const char *error, double delay,
                    const char *detail) {
  mend__step_err_to(r, i, to, NULL, error, delay, detail);
}

/* A step going again from the dead-letter queue: fresh attempts, no error of its failure. */
void mend__step_fresh(step_rt *st) {
  st->attempts = 0;
  st->last_delay = st->due = -1;
  st->compensate_self = 0;
  mend__set_str(&st->error, NULL);
}

void mend__step_error_of(step_rt *st, const mend_error_info *info) {
  st->err_kind = info ? info->kind : MEND_ERR_ERROR;
  int severity = info && info->kind == MEND_ERR_COMPENSABLE ? info->severity : 0;
  st->err_severity = severity < 0 ? 0 : severity > 3 ? 3 : (unsigned)severity;
  st->err_stopped = info && info->stopped;
}

void mend__step_err_to(mend_run *r, int i, mend_step_status to, const mend_error_info *info,
                       const char *error, double delay, const char *detail) {
  step_rt *st = &r->steps[i];
  if (!mend_step_transition_ok(st->status, to)) {
    mend__breakdown(r->E, "bug: illegal step transition %s -> %s (run %s, step %s)",
                    mend_step_status_name(st->status), mend_step_status_name(to), r->id,
                    mend__step_name(r, i));
    return;
  }
  const char *from = mend_step_status_name(st->status);
  st->status = to;
  if (error) {
    mend__set_str(&st->error, error);
    mend__step_error_of(st, info);
  }
  int attempt = to >= MEND_STEP_COMPENSATING ? st->comp_attempts : st->attempts;
  mend__write_step(r, i);
  /* The first row after an attempt with HTTP requests (its outcome) names them. */
  char *http = detail ? NULL : MEND_COLD(r, http_detail);
  if (http) r->cold->http_detail = NULL;
  mend_history_rec h = {NULL, mend__step_name(r, i), 0, "step", from, mend_step_status_name(to),
                        attempt, error, delay, http ? http : detail, 0,
                        error ? mend_error_kind_name((mend_error_kind)st->err_kind) : NULL};
  append_history(r, &h);
  if (http) {
    free(http);
    mend__run_cold_trim(r);
  }
  log_transition(r, mend__step_name(r, i), attempt, from, mend_step_status_name(to), error);
}

void mend__run_to(mend_run *r, mend_run_status to) {
  if (!mend_run_transition_ok(r->status, to)) {
    mend__breakdown(r->E, "bug: illegal run transition %s -> %s (run %s)",
              mend_run_status_name(r->status), mend_run_status_name(to), r->id);
    return;
  }
  const char *from = mend_run_status_name(r->status);
  r->status = to;
  if (mend_store_update_run(r->E->store, r->id, mend_run_status_name(to), r->error, r->attention,
                            mend_engine_now(r->E), r->reason))
    mend__store_failed(r->E);
  mend__history(r, NULL, "run", from, mend_run_status_name(to), 0, NULL, -1, r->reason);
  log_transition(r, NULL, 0, from, mend_run_status_name(to), NULL);
  if (mend_run_status_final(to)) r->wf->counts.runs_ended[to]++;
  if (r->is_child && (mend_run_status_final(to) || to == MEND_RUN_NEEDS_ATTENTION))
    mend__child_ended(r, to);
}

void mend__dead_letter(mend_run *r, const char *reason, int step, const char *error,
                        const char *detail) {
  mend_dlq_rec d = {r->id, reason, step >= 0 ? mend__step_name(r, step) : NULL, error, detail,
                    mend_engine_now(r->E)};
  if (mend_store_put_dlq(r->E->store, &d)) mend__store_failed(r->E);
  mend__history(r, d.step, "dead_letter", NULL, NULL, 0, error, -1, reason);
  mend__alert(r, "dead_letter", step, reason, error);
}
