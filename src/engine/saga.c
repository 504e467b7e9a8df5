/*
 * saga: what an outcome means for a run (SPEC sections 2 to 6). Owns going forward (the next
 * step, its sleep, its breaker, its attempt), what a success or a failure of an attempt
 * decides (a retry and its delay, compensation, a dead letter), going backward through the
 * compensations in reverse, and the timers that end a run's waits. Must never: change a
 * status anywhere but through step_to and run_to; act before what it decided is durable (it
 * queues actions behind the batch).
 */
#include "engine_int.h"

#include <lauxlib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "utf8.h"
#include "util.h"

/* ---------------------------------------------------------------- forward */

static void finish_failed(mend_run *r);
void mend__backward(mend_run *r);

/* ctx.results[name] = the step's result; a branch's goes in its group's table, by the
 * branch's own name (ctx.results.prepare.stock). */
void mend__set_result(mend_run *r, int i) {
  if (MEND_COLD(r, item)) {
    mend__set_item_result(r);
    return;
  }
  lua_State *L = r->E->L;
  const mend_step_def *def = &r->wf->steps[i];
  mend_refs_push(&r->E->refs, L, r->results_ref);
  if (def->group >= 0) {
    const char *group = r->wf->steps[def->group].name;
    if (lua_getfield(L, -1, group) != LUA_TTABLE) {
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, group);
    }
  }
  char err[256];
  if (mend_json_decode(L, r->steps[i].result, strlen(r->steps[i].result), err, sizeof err))
    lua_pushnil(L);
  lua_setfield(L, -2, def->group >= 0 ? def->branch : def->name);
  lua_pop(L, def->group >= 0 ? 2 : 1);
}

/* Step i succeeded (or was skipped): a lane's branch is done; a run goes on to its next step,
 * now (its `running` joins this batch) or once this batch is durable. */
void mend__after_success(mend_run *r, int i, int queue) {
  if (MEND_COLD(r, parent)) {
    mend__lane_done(r);
    return;
  }
  r->cur = mend__next_top(r->wf, i);
  if (queue) mend__queue(r, ACT_ADVANCE);
  else mend__forward(r);
}

static void fail_step(mend_run *r, int i, const mend_error_info *info, int called);

/* Asks the breaker of step i for an attempt. When it refuses, the step waits in breaker_open,
 * from pending, retry_wait or breaker_open alike (SPEC section 2), and 1 is returned. */
static int breaker_refuses(mend_run *r, int i) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  double retry_at;
  mend_breaker_state before = def->slot->b.state;
  int admitted = mend_breaker_admit(&def->slot->b, &def->slot->p, mend_engine_now(E), &retry_at);
  if (def->slot->b.state != before) mend__breaker_changed(r, i, before);
  st->probe = admitted && def->slot->b.state == MEND_BREAKER_HALF_OPEN;
  st->probe_spell = def->slot->spell & 0xfffu;
  if (admitted) return 0;
  /* Spread the waiters so that they do not all probe at the same instant. */
  double spread = 0.1 * mend_rng_uniform(&E->rng)
                  * (def->slot->p.open_seconds > 1 ? 1 : def->slot->p.open_seconds);
  st->due = retry_at + spread;
  mend__step_to(r, i, MEND_STEP_BREAKER_OPEN, NULL, st->due - mend_engine_now(E), def->breaker_key);
  r->wait_kind = WAIT_BREAKER;
  mend__arm(r, &r->wait, st->due);
  return 1;
}

/* Step i will not execute after all (skipped, or its key's result reused): a half-open probe
 * it was admitted as on its retry's due time is given back, or the breaker would wait for its
 * outcome for ever. */
static void give_back_admission(mend_run *r, int i) {
  if (r->steps[i].probe && mend__holds_probe(r, i)) mend_breaker_release(&r->wf->steps[i].slot->b);
  r->steps[i].probe = 0;
}

/* Asks step i's when(ctx), once it answers: 1 it goes on; 2 it was skipped (with its branches,
 * for a group); 0 it failed (when raised, or the engine stopped it). A when that raised a
 * retryable error is asked again when its retry is due: until it answers, nothing is recorded
 * that a restart could take for an answer. */
static int decide_when(mend_run *r, int i) {
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (def->when_ref == LUA_NOREF || st->when_done || st->status != MEND_STEP_PENDING || st->slept)
    return 1;
  if (r->E->draining) return 0;   /* parked: no workflow code runs on a stopping worker */
  mend_error_info info;
  int w = mend__ask_when(r, i, &info);
  if (mend__land_kept_cancel(r)) return 0;   /* it cancelled its parent: its answer is void */
  if (w < 0) {
    mend__fail_before_execute(r, i, &info);
    return 0;
  }
  st->when_done = 1;
  if (w) {
    /* The answer is in the history: a restart does not ask again (group.c reads it back). */
    mend__history(r, mend__step_name(r, i), "when", NULL, NULL, 0, NULL, -1,
                  "when(ctx) returned true");
    return 1;
  }
  give_back_admission(r, i);
  mend__step_to(r, i, MEND_STEP_SKIPPED, NULL, -1, "when(ctx) returned false");
  for (int b = i + 1; b <= i + def->nbranches; b++)
    if (r->steps[b].status == MEND_STEP_PENDING)
      mend__step_to(r, b, MEND_STEP_SKIPPED, NULL, -1, "its group was skipped");
  return 2;
}

static void forward_step(mend_run *r, int i, int admitted);

void mend__forward(mend_run *r) {
  int admitted = r->admitted;   /* for this attempt only, of the step it was given to */
  int admitted_step = r->cur;
  r->admitted = 0;
  if (MEND_COLD(r, parent)) {   /* a lane: its one branch */
    int b = r->cur;
    if (b < 0) return;
    /* stopping: no new attempt, but one found running after a restart ends and is recorded,
     * a child run waited for is cancelled, its end waited for, and a token's outcome accepted
     * already is taken */
    if (mend__group_stopping(r) && r->steps[b].status == MEND_STEP_WAITING
        && r->wf->steps[b].child) {
      mend__stop_child(r, b);
      return;
    }
    if (mend__group_stopping(r) && r->steps[b].status == MEND_STEP_WAITING &&
        r->wf->steps[b].wait_token && mend__take_token(r, b))
      return;
    if (mend__group_stopping(r) && r->steps[b].status != MEND_STEP_RUNNING) {
      mend__lane_stop(r);
      return;
    }
    mend_step_status s = r->steps[b].status;
    int w = s == MEND_STEP_SUCCEEDED || s == MEND_STEP_SKIPPED ? 2 : decide_when(r, b);
    if (w == 2) mend__lane_done(r);
    else if (w == 1) forward_step(r, b, admitted);
    return;
  }
  for (;;) {
    while (r->cur < r->wf->nsteps && (r->steps[r->cur].status == MEND_STEP_SUCCEEDED ||
                                      r->steps[r->cur].status == MEND_STEP_SKIPPED))
      r->cur = mend__next_top(r->wf, r->cur);
    if (r->cur >= r->wf->nsteps) {
      mend__run_to(r, MEND_RUN_SUCCEEDED);
      mend__queue(r, ACT_FINISH);
      return;
    }
    int w = decide_when(r, r->cur);
    if (w == 0) return;
    if (w == 1) break;
  }
  if (r->wf->steps[r->cur].nbranches || r->wf->steps[r->cur].map_ref != LUA_NOREF)
    mend__group_forward(r, r->cur);
  else forward_step(r, r->cur, admitted && r->cur == admitted_step);
}

static void forward_step(mend_run *r, int i, int admitted) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (st->status == MEND_STEP_WAITING) {   /* rebuilt waiting: its event may be in the inbox */
    mend__take_event(r, i);
    return;
  }
  if (st->status != MEND_STEP_PENDING && st->status != MEND_STEP_RUNNING) return;  /* waiting */
  if (E->draining) return;   /* parked: its lease is given back when the worker stops */
  if (st->status == MEND_STEP_PENDING) {
    st->reused = st->comp_skipped = 0;   /* set pending again by a person: decided afresh */
    mend_error_info info;
    int key = mend__ensure_key(r, i, &info);
    if (mend__land_kept_cancel(r)) return;
    if (key) {
      mend__fail_before_execute(r, i, &info);
      return;
    }
    if (st->custom_key) {
      int r2 = mend__reuse_key(r, i);
      if (r2 < 0) {
        give_back_admission(r, i);   /* asked for again when the step comes round */
        if (!E->broken) mend__store_failed(E);
        /* a lock elsewhere: again after the commit */
        if (!E->broken) mend__queue(r, ACT_ADVANCE);
        return;
      }
      if (r2 == 1) {
        give_back_admission(r, i);
        mend__set_result(r, i);
        mend__after_success(r, i, 1);
        return;
      }
    }
    if (def->sleep > 0 && !st->slept) {
      /* A durable wait: only its due time is kept, in the step's row; no coroutine. The
       * breaker is asked again when it ends. */
      give_back_admission(r, i);
      st->due = mend_engine_now(E) + def->sleep;
      mend__step_to(r, i, MEND_STEP_SLEEPING, NULL, def->sleep, NULL);
      r->wait_kind = WAIT_STEP_SLEEP;
      mend__arm(r, &r->wait, st->due);
      return;
    }
    if (def->wait_for) {
      mend__await_event(r, i);
      return;
    }
    if (def->child) {
      mend__start_child(r, i);
      return;
    }
    if (def->execute_ref == LUA_NOREF) {
      mend__step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, "a wait step: nothing to execute");
      mend__set_str(&st->result, "null");
      mend__set_result(r, i);
      mend__after_success(r, i, 1);
      return;
    }
    if (!admitted && breaker_refuses(r, i)) return;
  }
  if (def->child) {   /* running found after a crash: its start again finds the child it made */
    mend__start_child(r, i);
    return;
  }
  /* pending, or running found after a crash: either way a new attempt with the same key */
  st->attempts++;
  st->due = -1;
  mend__step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
  mend__queue(r, ACT_EXECUTE);
}

static void succeed_step(mend_run *r, int i, const char *result_json) {
  step_rt *st = &r->steps[i];
  int was_waiting = st->status == MEND_STEP_WAITING;
  if (!was_waiting) mend__breaker_outcome(r, i, MEND_OUTCOME_SUCCESS);
  if (r->wf->steps[i].wait_token && !was_waiting) {   /* executed: now its token */
    mend__await_token(r, i);
    return;
  }
  mend__set_str(&st->result, result_json);
  mend__set_str(&st->error, NULL);
  mend__step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, NULL);
  /* ctx.results is read by the attempts of the steps after this one: a run's last step ends
   * its run now (after_success goes forward at once), and nothing reads it again; decoding
   * the result into it costs 1k instructions of a one-step run (W9). */
  if (r->wf->steps[i].group >= 0 || MEND_COLD(r, parent) || MEND_COLD(r, item) ||
      mend__next_top(r->wf, i) < r->wf->nsteps)
    mend__set_result(r, i);
  /* The next step's `running` joins this batch; its execute still waits for the commit that
   * makes both durable. One turn per step instead of two. */
  mend__after_success(r, i, 0);
}

/* SPEC section 4's attention_after, of the way forward's policy or of compensate_retry: after
 * `failed` failed attempts of step i the run is flagged and one alert fires (once a run), while
 * the retries go on. */
static void flag_attention(mend_run *r, int i, const mend_retry_policy *p, int failed,
                           const char *msg) {
  mend_run *run = mend__root(r);
  if (p->attention_after <= 0 || failed < p->attention_after || run->attention) return;
  mend_engine *E = r->E;
  run->attention = 1;
  if (mend_store_update_run(E->store, run->id, mend_run_status_name(run->status), run->error, 1,
                            mend_engine_now(E), run->reason))
    mend__store_failed(E);
  mend__alert(run, "attention", i, "attention_after", msg);
}

/* called: the step's execute was called (or its wait ended); 0 when code of the step's that
 * decides before it failed, and no call its breaker guards was made. */
static void fail_step(mend_run *r, int i, const mend_error_info *info, int called) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  int retryable = info->kind == MEND_ERR_RETRYABLE || info->kind == MEND_ERR_TIMEOUT;
  mend_workflow_counters *counts = &mend__root(r)->wf->counts;
  counts->failures[MEND_PHASE_EXECUTE][info->kind]++;
  char msg[600];
  snprintf(msg, sizeof msg, "%s: %s", mend_error_kind_name(info->kind),
           info->message ? info->message : "");
  mend_utf8_fix(msg);   /* else its event, alert and log line are dropped (utf8.c) */
  mend__emit(E, json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:b}", "type", "step_failed",
                          "run_id", r->id, "workflow", r->wf->name, "step", mend__step_name(r, i),
                          "attempt", st->attempts, "error", msg,
                          "will_retry", retryable && st->attempts < def->retry.max_attempts));
  int was_waiting = st->status == MEND_STEP_WAITING;
  if (def->wait_for || def->child || was_waiting)
    ;   /* nothing was called (or its call counted already): no breaker has anything to count */
  else if (!called)
    mend__breaker_outcome(r, i, MEND_OUTCOME_OTHER);   /* a probe it was admitted as, given back */
  else if (def->slot->b.state == MEND_BREAKER_HALF_OPEN || retryable
           || info->kind != MEND_ERR_ERROR)
    mend__breaker_outcome(r, i, retryable ? MEND_OUTCOME_RETRYABLE : MEND_OUTCOME_OTHER);
  else
    mend__breaker_outcome(r, i, MEND_OUTCOME_OTHER);
  /* A branch whose group is stopping makes no new attempt: it fails here. */
  int stopping = MEND_COLD(r, parent) && mend__group_stopping(r);
  if (retryable && st->attempts < def->retry.max_attempts && !stopping) {
    double delay = info->retry_after >= 0
      ? mend_backoff_clamp_retry_after(&def->retry, info->retry_after)
      : mend_backoff_delay(&def->retry, st->attempts, st->last_delay > 0 ? st->last_delay : 0,
                           &E->rng);
    st->last_delay = delay;
    st->due = mend_engine_now(E) + delay;
    mend__step_err_to(r, i, MEND_STEP_RETRY_WAIT, info, msg, delay, NULL);
    counts->retries[MEND_PHASE_EXECUTE]++;
    flag_attention(r, i, &def->retry, st->attempts, msg);
    r->wait_kind = WAIT_RETRY;
    mend__arm(r, &r->wait, st->due);
    return;
  }
  mend__step_err_to(r, i, MEND_STEP_FAILED, info, msg, -1, NULL);
  if (MEND_COLD(r, parent)) {
    /* The run decides once its branches in flight have ended (group.c). */
    st->compensate_self = info->kind == MEND_ERR_COMPENSABLE;
    mend__lane_failed(r, i, info, msg);
    return;
  }
  mend__fail_run(r, i, info, msg, was_waiting);
}

/* Step i failed for good (msg says how): the run goes back through what succeeded, or to the
 * dead-letter queue when a person must look first. was_waiting: it failed while it waited (a
 * timeout then ends a planned wait: reason `timeout`). */
void mend__fail_run(mend_run *r, int i, const mend_error_info *info, const char *msg,
                    int was_waiting) {
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  int retryable = info->kind == MEND_ERR_RETRYABLE || info->kind == MEND_ERR_TIMEOUT;
  mend__set_str(&r->error, msg);
  r->fail_step = i;
  if (info->kind == MEND_ERR_COMPENSABLE && info->severity >= 3) {
    r->reason = "severity_3";
    mend__run_to(r, MEND_RUN_NEEDS_ATTENTION);
    mend__dead_letter(r, r->reason, i, msg, "severity 3: nothing compensated automatically");
    mend__queue(r, ACT_FINISH);
    return;
  }
  if (info->stopped) {
    /* The engine stopped the step's code: a bug of the workflow's, not an answer of the
     * world's. A person looks before anything is undone on its account. */
    r->reason = "workflow_error";
    mend__run_to(r, MEND_RUN_NEEDS_ATTENTION);
    mend__dead_letter(r, r->reason, i, msg,
                      "the engine stopped the step's code: nothing compensated automatically; "
                      "fix the workflow (mend upgrade) and mend dlq retry, or resolve");
    mend__queue(r, ACT_FINISH);
    return;
  }
  /* A wait that timed out for good is an outcome the workflow planned for (its compensation),
   * not a dependency that kept failing: no dead letter. */
  r->reason = retryable && (def->wait_for || (was_waiting && info->kind == MEND_ERR_TIMEOUT))
                ? "timeout"
            : retryable ? "attempts_exhausted"
            : info->kind == MEND_ERR_FATAL ? "fatal"
            : info->kind == MEND_ERR_COMPENSABLE
                ? (info->severity == 2 ? "severity_2" : "compensable")
            : "error";
  st->compensate_self = info->kind == MEND_ERR_COMPENSABLE;
  int anything = st->compensate_self;
  /* every step, not only those before: a branch's siblings may have succeeded after it */
  for (int j = 0; j < r->wf->nsteps; j++) anything |= r->steps[j].status == MEND_STEP_SUCCEEDED;
  anything |= mend__items_succeeded(r);
  if (!anything) { finish_failed(r); return; }
  mend__run_to(r, MEND_RUN_COMPENSATING);
  /* going back from the failed step, or from the last branch of its group */
  r->cur = def->group >= 0 ? def->group + r->wf->steps[def->group].nbranches : i;
  mend__queue(r, ACT_ADVANCE);
}

/* The run failed for good and compensation (if any) is over. */
static void finish_failed(mend_run *r) {
  if (!r->reason) r->reason = "error";
  if (strcmp(r->reason, "attempts_exhausted") == 0) {
    mend__run_to(r, MEND_RUN_NEEDS_ATTENTION);
    mend__dead_letter(r, r->reason, r->fail_step, r->error,
                      r->status == MEND_RUN_NEEDS_ATTENTION
                        ? "attempts exhausted; completed steps compensated" : NULL);
  } else if (r->status == MEND_RUN_COMPENSATING) {
    mend__run_to(r, MEND_RUN_COMPENSATED);
    if (strcmp(r->reason, "severity_2") == 0)
      mend__alert(r, "compensated_with_alert", r->fail_step, "severity_2", r->error);
  } else {
    mend__run_to(r, MEND_RUN_FAILED);
  }
  mend__queue(r, ACT_FINISH);
}

/* ---------------------------------------------------------------- backward */

int mend__needs_compensation(const mend_run *r, int i) {
  const step_rt *st = &r->steps[i];
  return st->status == MEND_STEP_SUCCEEDED || st->status == MEND_STEP_COMPENSATING ||
         st->status == MEND_STEP_COMPENSATION_FAILED ||
         (st->status == MEND_STEP_FAILED && st->compensate_self);
}

void mend__backward(mend_run *r) {
  if (MEND_COLD(r, parent)) {   /* an item of a map: its compensation again, after its delay */
    mend__lane_backward(r);
    return;
  }
  for (; r->cur >= 0; r->cur--) {
    int i = r->cur;
    const mend_step_def *def = &r->wf->steps[i];
    if (def->map_ref != LUA_NOREF) {
      if (mend__map_backward(r, i)) return;
      continue;
    }
    if (def->group >= 0) continue;   /* its group undoes its branches, latest completed first */
    if (def->nbranches) {
      if (mend__group_backward(r, i)) return;
      continue;
    }
    if (!mend__needs_compensation(r, i)) continue;
    if (mend__skip_reused(r, mend__step_name(r, i), &r->steps[i])) continue;
    if (!mend__compensable(&r->wf->steps[i])) {
      mend__history(r, mend__step_name(r, i), "skip_compensate", NULL, NULL, 0, NULL, -1,
                    "step has no compensate");
      mend_engine_log_line(r->E, "info", r->id, mend__step_name(r, i), 0, "skip_compensate",
                           "no compensate function: skipped");
      continue;
    }
    if (r->E->draining) return;
    r->steps[i].comp_attempts++;
    r->steps[i].due = -1;
    mend__step_to(r, i, MEND_STEP_COMPENSATING, NULL, -1, NULL);
    if (r->wf->steps[i].child) mend__undo_child(r, i);   /* its child's saga, reversed */
    else mend__queue(r, ACT_COMPENSATE);
    return;
  }
  finish_failed(r);
}

static void compensated(mend_run *r, int i) {
  /* A step's error is its own failure on the way forward (a compensable one, for a step undone
   * for it): a failed compensation attempt's, shown while the step waited for another, goes
   * (its history row keeps it), or `compensated` would stand beside an error it overcame. */
  step_rt *st = &r->steps[i];
  if (st->error && st->err_kind != MEND_ERR_COMPENSABLE) mend__set_str(&st->error, NULL);
  mend__step_to(r, i, MEND_STEP_COMPENSATED, NULL, -1, NULL);
  if (MEND_COLD(r, parent)) {   /* an item of a map: its run goes on with the next */
    mend__lane_compensated(r);
    return;
  }
  r->cur = i - 1;
  mend__backward(r);   /* as succeed_step: the next compensate still waits for the commit */
}

static void compensation_failed(mend_run *r, int i, const mend_error_info *info) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_retry_policy *p = &r->wf->steps[i].compensate_retry;
  char msg[600];
  snprintf(msg, sizeof msg, "%s: %s", mend_error_kind_name(info->kind),
           info->message ? info->message : "");
  mend_utf8_fix(msg);
  /* As on the way forward (SPEC section 3), only a transient failure is worth another try: a
   * fatal or unknown one would fail again, and a person must look at it now. */
  int retryable = info->kind == MEND_ERR_RETRYABLE || info->kind == MEND_ERR_TIMEOUT;
  int again = retryable && st->comp_attempts < p->max_attempts;
  /* A step undone for its own compensable failure keeps that failure as its error while it
   * waits for another try (the attempt's is in its history row); one that had none shows the
   * attempt's until it is compensated. */
  if (!again || !st->error || st->err_kind != MEND_ERR_COMPENSABLE) {
    mend__set_str(&st->error, msg);
    mend__step_error_of(st, info);
  }
  mend_workflow_counters *counts = &mend__root(r)->wf->counts;
  counts->failures[MEND_PHASE_COMPENSATE][info->kind]++;
  if (again) {
    counts->retries[MEND_PHASE_COMPENSATE]++;
    /* The service's own advice wins here as on the way forward (SPEC section 3). A first
     * failed compensation has no delay of its own before it: the way forward's last one, still
     * in last_delay, is another policy's (decorrelated jitter grows from it). */
    double previous = st->comp_attempts > 1 && st->last_delay > 0 ? st->last_delay : 0;
    double delay = info->retry_after >= 0
      ? mend_backoff_clamp_retry_after(p, info->retry_after)
      : mend_backoff_delay(p, st->comp_attempts, previous, &E->rng);
    st->last_delay = delay;
    st->due = mend_engine_now(E) + delay;
    mend__write_step(r, i);
    /* The attempt's requests belong to its own outcome's row, not to the next attempt's. */
    char *http = MEND_COLD(r, http_detail);
    if (http) r->cold->http_detail = NULL;
    mend__history(r, mend__step_name(r, i), "compensate_failed", NULL, NULL, st->comp_attempts,
                  msg, delay, http);
    if (http) {
      free(http);
      mend__run_cold_trim(r);
    }
    mend_engine_log_line(E, "warn", r->id, mend__step_name(r, i), st->comp_attempts,
                         "compensate_failed", msg);
    flag_attention(r, i, p, st->comp_attempts, msg);
    r->wait_kind = WAIT_COMP_RETRY;
    mend__arm(r, &r->wait, st->due);
    return;
  }
  mend__step_err_to(r, i, MEND_STEP_COMPENSATION_FAILED, info, msg, -1, NULL);
  /* Name exactly what is left undone, so a person knows what to repair by hand. */
  char left[1024] = "";
  size_t used = 0;
  for (int j = i; j >= 0; j--) {
    if (j != i && !mend__needs_compensation(r, j)) continue;
    if (j != i && (!mend__compensable(&r->wf->steps[j]) || r->steps[j].reused)) continue;
    int n = snprintf(left + used, sizeof left - used, "%s%s", used ? ", " : "",
                     mend__step_name(r, j));
    if (n < 0 || (size_t)n >= sizeof left - used) break;
    used += (size_t)n;
  }
  char detail[1200];
  snprintf(detail, sizeof detail, "not compensated: %s", left);
  mend_run *run = mend__root(r);   /* an item's lane: the run is its parent's */
  mend__set_str(&run->error, msg);
  run->reason = "compensation_failed";
  mend__run_to(run, MEND_RUN_NEEDS_ATTENTION);
  mend__dead_letter(r, "compensation_failed", i, msg, detail);
  mend__queue(run, ACT_FINISH);
}

/* ---------------------------------------------------------------- outcomes of attempts */


void mend__attempt_done(mend_run *r, int ok, mend_error_info *info, const char *result_json) {
  int i = r->cur;
  int back = r->status == MEND_RUN_COMPENSATING;
  if (back) {
    if (ok) compensated(r, i);
    else compensation_failed(r, i, info);
  } else {
    if (ok) succeed_step(r, i, result_json);
    else fail_step(r, i, info, 1);
  }
}

void mend__fail_before_execute(mend_run *r, int i, const mend_error_info *info) {
  r->steps[i].attempts++;
  mend__step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
  fail_step(r, i, info, 0);
}

/* ---------------------------------------------------------------- the ends of waits */

void mend__on_wait(mend_timer *t) {
  mend_run *r = (mend_run *)(void *)((char *)t - offsetof(mend_run, wait));
  if (mend__defer_wait(r)) return;
  wait_kind kind = r->wait_kind;
  r->wait_kind = WAIT_NONE;
  switch (kind) {
    case WAIT_SLEEP:
      mend__resume(r, 0);
      break;
    case WAIT_RETRY:
    case WAIT_BREAKER:
      /* A step whose breaker is (still) open goes on waiting there, not through pending. */
      if (!r->E->draining && r->wf->steps[r->cur].execute_ref != LUA_NOREF) {
        if (breaker_refuses(r, r->cur)) break;
        r->admitted = 1;
      }
      mend__step_to(r, r->cur, MEND_STEP_PENDING, NULL, -1, NULL);
      mend__forward(r);
      break;
    case WAIT_COMP_RETRY:
      mend__backward(r);
      break;
    case WAIT_STEP_SLEEP:
      r->steps[r->cur].slept = 1;
      r->steps[r->cur].due = -1;
      mend__step_to(r, r->cur, MEND_STEP_PENDING, NULL, -1, NULL);
      mend__forward(r);
      break;
    case WAIT_EVENT: {
      char msg[300];
      if (mend__event_due(r, r->cur, msg, sizeof msg)) break;
      mend_error_info info = {MEND_ERR_TIMEOUT, msg, -1, 0, 0};
      r->steps[r->cur].due = -1;
      fail_step(r, r->cur, &info, 1);
      break;
    }
    case WAIT_NONE:
      break;
  }
}
