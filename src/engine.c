/*
 * engine: runs workflows (see engine.h).
 *
 * Shape of the machine. A run moves by actions: ADVANCE (decide the next transition and write
 * it), EXECUTE and COMPENSATE (call into Lua), FINISH (let go of a run that ended). Every action
 * is queued behind the batch being written and runs only from the pump after that batch has
 * committed, which is how the write-ahead rule holds with one transaction per loop turn.
 * Timers and child processes resume coroutines directly: a wait changes nothing durable, and
 * what the resumed code decides is again written first and acted on after the commit.
 *
 * Must never: call Lua while a batch that announces that call is uncommitted; block; apply a
 * transition the table in transition.c refuses.
 */
#include "engine.h"
#include "idset.h"
#include "log.h"

#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "breaker.h"
#include "json.h"
#include "guard.h"
#include "lmend.h"
#include "refs.h"
#include "sandbox.h"
#include "timers.h"
#include "transition.h"
#include "util.h"

#include "engine/engine_int.h"


/* ---------------------------------------------------------------- small helpers */

void mend__set_str(char **slot, const char *s) {
  free(*slot);
  *slot = mend_dupstr(s);
}

static void breakdown(mend_engine *E, const char *fmt, ...) {
  if (E->broken) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(E->errmsg, sizeof E->errmsg, fmt, ap);
  va_end(ap);
  E->broken = 1;
  mend_engine_log_line(E, "error", NULL, NULL, 0, "engine", E->errmsg);
}

static void lock_wait(mend_engine *E);

/* A lock held by another process is no failure: nothing was lost, the batch is kept, and the
 * engine waits it out (lock_wait). Anything else stops the engine. */
void mend__store_failed(mend_engine *E) {
  if (mend_store_locked(E->store)) lock_wait(E);
  else breakdown(E, "%s", mend_store_errmsg(E->store));
}

/* How long one statement of the loop waits for another process's lock; longer locks are
 * waited out on a timer (lock_wait), so that the loop goes on. */
#define LOOP_BUSY_MS 100
/* Warnings while the lock lasts, this far apart (seconds). */
#define LOCK_WARN_EVERY 3.0

/* Commits the batch now, outside the pump (an operation that must be durable before it
 * returns). The batch may hold the pump's own transitions too: if it fails they are rolled
 * back with it, so the engine stops rather than act on them. A lock held by another process
 * is waited for up to the store's default busy wait; then the operation fails, the engine
 * goes on, and the batch is committed once the lock goes. */
static int commit_now(mend_engine *E) {
  if (E->broken) return -1;
  mend_store_set_busy_wait(E->store, 0);
  int rc = mend_store_commit(E->store);
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  if (rc) {
    if (rc == MEND_STORE_BUSY)
      snprintf(E->errmsg, sizeof E->errmsg, "%s", mend_store_errmsg(E->store));
    mend__store_failed(E);
    return -1;
  }
  return 0;
}

double mend_engine_now(const mend_engine *E) { return mend_timers_now(&E->timers); }
mend_store *mend_engine_store(mend_engine *E) { return E->store; }
lua_State *mend_engine_lua(mend_engine *E) { return E->L; }
uv_loop_t *mend_engine_loop(mend_engine *E) { return E->loop; }
int mend_engine_in_flight(const mend_engine *E) { return E->in_flight; }
const char *mend_engine_error(const mend_engine *E) { return E->errmsg; }
void mend_engine_note_error(mend_engine *E, const char *msg) {
  if (!E->broken) snprintf(E->errmsg, sizeof E->errmsg, "%s", msg);
}

static int logs(const mend_engine *E, const char *level) {
  return E->cfg.log && mend_log_level_of(level) >= E->cfg.log_level;
}

void mend_engine_log_line(mend_engine *E, const char *level, const char *run, const char *step,
                          int attempt, const char *event, const char *message) {
  if (!logs(E, level)) return;
  mend_log_record rec = {level, mend_engine_now(E), run, step, attempt, event, message};
  E->cfg.log(E->cfg.log_ud, &rec);
}

/* Crockford base32: time-ordered ids that sort by creation, with 30 random bits. Within one
 * millisecond an engine counts up from the first id's random part (as monotonic ULIDs do):
 * random parts alone collided, about once per million runs started 20k at a time (W4), and
 * the batch holding the second insert failed. */
static void new_run_id(mend_engine *E, char out[MEND_RUN_ID_LEN]) {
  static const char digits[] = "0123456789abcdefghjkmnpqrstvwxyz";
  const uint64_t rnd_mask = (1u << 30) - 1;
  uint64_t ms = (uint64_t)(mend_real_now() * 1000.0);
  uint64_t rnd;
  if (ms <= E->id_ms && E->id_rnd < rnd_mask) {
    ms = E->id_ms;
    rnd = E->id_rnd + 1;
  } else {
    if (ms <= E->id_ms) ms = E->id_ms + 1;   /* 2^30 ids in one millisecond: borrow the next */
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd) rnd = mend_rng_next(&E->rng);
    rnd &= rnd_mask >> 1;   /* room to count up */
  }
  E->id_ms = ms;
  E->id_rnd = rnd;
  for (int i = 9; i >= 0; i--) { out[i] = digits[ms & 31]; ms >>= 5; }
  for (int i = 15; i >= 10; i--) { out[i] = digits[rnd & 31]; rnd >>= 5; }
  out[16] = 0;
}

/* ---------------------------------------------------------------- failpoints */

#ifdef MEND_FAILPOINTS
/* MEND_FAILPOINT="name:N" kills the process with SIGKILL at the Nth time it passes `name`, so
 * crash tests can stop a worker at exactly the instant they mean to prove safe. */
void mend__failpoint(const char *name) {
  static const char *spec;
  static long countdown = -1;
  static char point[64];
  if (!spec) {
    spec = getenv("MEND_FAILPOINT");
    if (!spec) spec = "";
    const char *colon = strchr(spec, ':');
    if (colon && (size_t)(colon - spec) < sizeof point) {
      memcpy(point, spec, (size_t)(colon - spec));
      countdown = atol(colon + 1);
    }
  }
  if (countdown > 0 && strcmp(point, name) == 0 && --countdown == 0) raise(SIGKILL);
}
#else
#define mend__failpoint(name) ((void)0)
#endif

/* ---------------------------------------------------------------- concurrency caps */

static void fifo_push(run_fifo *f, mend_run *r) {
  r->tnext = NULL;
  r->waiting_in = f;
  if (f->tail) f->tail->tnext = r;
  else f->head = r;
  f->tail = r;
}

mend_run *mend__fifo_pop(run_fifo *f) {
  mend_run *r = f->head;
  if (!r) return NULL;
  f->head = r->tnext;
  if (!f->head) f->tail = NULL;
  r->waiting_in = NULL;
  return r;
}

/* ---------------------------------------------------------------- the pump */

static void pump_cb(uv_idle_t *h);

static int any_waiting(const mend_engine *E) {
  for (int k = 0; k < 4; k++)
    if (E->waiting[k].head) return 1;
  return 0;
}

/* Work a pump turn would do now: actions queued, a batch to commit or being committed, or
 * events and alerts waiting for the commit that comes before them (a run's last turn leaves
 * those behind). */
static int has_ready_work(const mend_engine *E) {
  return E->ready_head || any_waiting(E) || mend_store_batch_open(E->store) ||
         json_array_size(E->events) || json_array_size(E->alerts) ||
         (E->writer && (mend_store_writer_busy(E->store) || json_array_size(E->alerts_handed) ||
                        json_array_size(E->events_handed)));
}

/* Work a turn can do now. While the writer thread holds the only batch there is, a turn would
 * find nothing to do: the thread wakes the loop when it is done (on_wakeup). */
static int lock_waiting(const mend_engine *E) {
  return E->lock_since > 0 && mend_real_now() < E->lock_retry_at;
}

static int turn_has_work(const mend_engine *E) {
  int writing = (E->writer && mend_store_writer_busy(E->store)) || lock_waiting(E);
  return E->ready_head || (!writing && has_ready_work(E));
}

/* With nothing else to do, a run() on the virtual clock moves it to the next timer. */
static int virtual_timers_to_advance(const mend_engine *E) {
  return E->timers.is_virtual && E->auto_advance && !E->externals && E->timers.count;
}

void mend__kick(mend_engine *E) {
  if (E->destroying) return;   /* the pump handle is closing */
  if (!uv_is_active((uv_handle_t *)E->pump)) uv_idle_start(E->pump, pump_cb);
}

void mend__child_link(mend_engine *E, child *c, int tag) {
  c->tag = tag;
  c->E = E;
  c->prev = NULL;
  c->next = E->children;
  if (E->children) E->children->prev = c;
  E->children = c;
}

/* The child's engine, unlinked; NULL if the engine is gone. */
mend_engine *mend__child_unlink(child *c) {
  mend_engine *E = c->E;
  if (!E) return NULL;
  if (c->prev) c->prev->next = c->next;
  else E->children = c->next;
  if (c->next) c->next->prev = c->prev;
  c->E = NULL;
  return E;
}

static void append(mend_run **head, mend_run **tail, mend_run *r) {
  r->qnext = NULL;
  if (*tail) (*tail)->qnext = r;
  else *head = r;
  *tail = r;
}

/* The run's next action is `a`, once what it wrote so far is durable. */
void mend__queue(mend_run *r, action a) {
  mend_engine *E = r->E;
  unsigned long seq = mend_store_open_seq(E->store);
  r->next_action = a;
  if (r->queued) {
    /* already in a list: only its action changes, and it waits for this batch too */
    if (r->wait_seq < seq) r->wait_seq = seq;
    return;
  }
  r->queued = 1;
  r->wait_seq = seq;
  append(&E->waiting[seq % 4].head, &E->waiting[seq % 4].tail, r);
  mend__kick(E);
}

/* The run's next action is `a` in this turn or the next, without waiting for a commit: for an
 * action that only writes (the write-ahead rule holds its execute back, not its writes). */
static void queue_now(mend_run *r, action a) {
  mend_engine *E = r->E;
  r->next_action = a;
  if (r->queued) return;
  r->queued = 1;
  r->wait_seq = 0;
  append(&E->ready_head, &E->ready_tail, r);
  mend__kick(E);
}

void mend__arm(mend_run *r, mend_timer *t, double due) {
  mend_engine *E = r->E;
  if (mend_timer_arm(&E->timers, t, due)) { breakdown(E, "out of memory arming a timer"); return; }
  if (E->timers.is_virtual) mend__kick(E);
  else if (t->slot == 1) mend_timers_sync(&E->timers);   /* it is the earliest */
}

/* ---------------------------------------------------------------- writes */

const char *mend__step_name(mend_run *r, int i) { return r->wf->steps[i].name; }

/* The step's row as it is now: the whole row at its first transition (a step not begun has
 * none: schema 4), an update after. The key is written only when it is the step's own: the
 * default one (run_id/name) is what a row without one reads as (schema 5). An attempt that
 * begins writes no row: its `-> running` history row says so, and the row is written once the
 * attempt ends (schema 6: one row write a step instead of two; 20% of the writer thread's
 * work in W1). */
static void write_step(mend_run *r, int i) {
  step_rt *st = &r->steps[i];
  /* ...but for a key of the step's own just asked for: it is stored before the attempt uses it,
   * as the same key must come back after a crash (ensure_key asks once). */
  if (st->status == MEND_STEP_RUNNING && (st->has_row || !st->custom_key)) return;
  int new_row = !st->has_row;
  const char *idem_key = st->custom_key ? st->idem_key : NULL;
  mend_step_rec rec = {
    .run_id = r->id, .idx = i, .name = mend__step_name(r, i), .status = mend_step_status_name(st->status),
    .attempts = st->attempts, .comp_attempts = st->comp_attempts, .idem_key = idem_key,
    .custom_key = st->custom_key, .result = st->result, .error = st->error, .due = st->due,
    .last_delay = st->last_delay, .updated = mend_engine_now(r->E), .slept = st->slept};
  if ((new_row ? mend_store_put_step : mend_store_update_step)(r->E->store, &rec)) mend__store_failed(r->E);
  else st->has_row = 1;
}

/* A run carried on by another engine (a virtual clock elsewhere, a clock set back) keeps its
 * history in order: no row is older than the one before. */
static double history_time(mend_run *r) {
  double now = mend_engine_now(r->E);
  if (now > r->last_at) r->last_at = now;
  return r->last_at;
}

void mend__history(mend_run *r, const char *step, const char *event, const char *from,
                    const char *to, int attempt, const char *error, double delay,
                    const char *detail) {
  mend_history_rec h = {r->id, step, history_time(r), event, from, to, attempt, error,
                        delay, detail, ++r->history_seq};
  if (mend_store_append_history(r->E->store, &h)) mend__store_failed(r->E);
}

static void log_transition(mend_run *r, const char *step, int attempt, const char *from,
                           const char *to, const char *error) {
  const char *level = error ? "warn" : "info";
  if (!logs(r->E, level)) return;
  char msg[512];
  if (error) snprintf(msg, sizeof msg, "%s -> %s: %s", from, to, error);
  else snprintf(msg, sizeof msg, "%s -> %s", from, to);
  mend_engine_log_line(r->E, level, r->id, step, attempt, step ? "step" : "run", msg);
}

/* The one place a step changes status. */
static void step_to(mend_run *r, int i, mend_step_status to, const char *error, double delay,
                    const char *detail) {
  step_rt *st = &r->steps[i];
  if (!mend_step_transition_ok(st->status, to)) {
    breakdown(r->E, "bug: illegal step transition %s -> %s (run %s, step %s)",
              mend_step_status_name(st->status), mend_step_status_name(to), r->id, mend__step_name(r, i));
    return;
  }
  const char *from = mend_step_status_name(st->status);
  st->status = to;
  if (error) mend__set_str(&st->error, error);
  int attempt = to >= MEND_STEP_COMPENSATING ? st->comp_attempts : st->attempts;
  write_step(r, i);
  mend__history(r, mend__step_name(r, i), "step", from, mend_step_status_name(to), attempt, error, delay, detail);
  log_transition(r, mend__step_name(r, i), attempt, from, mend_step_status_name(to), error);
}

static void run_to(mend_run *r, mend_run_status to) {
  if (!mend_run_transition_ok(r->status, to)) {
    breakdown(r->E, "bug: illegal run transition %s -> %s (run %s)",
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
}

static void dead_letter(mend_run *r, const char *reason, int step, const char *error,
                        const char *detail) {
  mend_dlq_rec d = {r->id, reason, step >= 0 ? mend__step_name(r, step) : NULL, error, detail,
                    mend_engine_now(r->E)};
  if (mend_store_put_dlq(r->E->store, &d)) mend__store_failed(r->E);
  mend__history(r, d.step, "dead_letter", NULL, NULL, 0, error, -1, reason);
  mend__alert(r, "dead_letter", step, reason, error);
}

/* ---------------------------------------------------------------- breakers */

static struct mend_breaker_slot *breaker_slot(mend_engine *E, const char *key,
                                              const mend_breaker_policy *p) {
  for (struct mend_breaker_slot *s = E->breakers; s; s = s->next)
    if (strcmp(s->key, key) == 0) return s;
  struct mend_breaker_slot *s = calloc(1, sizeof *s);
  s->key = mend_dupstr(key);
  s->p = *p;
  int found = mend_store_get_breaker(E->store, key, &s->b);
  if (found <= 0) {
    mend_breaker_init(&s->b);
    /* known from now on, so that people can list it and override it */
    if (found == 0 && mend_store_put_breaker(E->store, key, &s->b, mend_engine_now(E))) mend__store_failed(E);
  }
  s->next = E->breakers;
  E->breakers = s;
  return s;
}

/* Persists a breaker whose state moved, and tells the history of the run that moved it. */
static void breaker_changed(mend_run *r, int i, mend_breaker_state before) {
  struct mend_breaker_slot *s = r->wf->steps[i].slot;
  if (mend_store_put_breaker(r->E->store, s->key, &s->b, mend_engine_now(r->E))) mend__store_failed(r->E);
  mend__history(r, mend__step_name(r, i), "breaker", mend_breaker_state_name(before),
          mend_breaker_state_name(s->b.state), r->steps[i].attempts, NULL, -1, s->key);
  char msg[300];
  snprintf(msg, sizeof msg, "breaker %s: %s -> %s", s->key, mend_breaker_state_name(before),
           mend_breaker_state_name(s->b.state));
  mend_engine_log_line(r->E, "warn", r->id, mend__step_name(r, i), r->steps[i].attempts, "breaker", msg);
  mend__emit(r->E, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "breaker_changed", "key", s->key,
                       "from", mend_breaker_state_name(before), "to",
                       mend_breaker_state_name(s->b.state), "run_id", r->id));
}

static void breaker_outcome(mend_run *r, int i, mend_breaker_outcome outcome) {
  struct mend_breaker_slot *s = r->wf->steps[i].slot;
  mend_breaker before = s->b;
  int changed = mend_breaker_record(&s->b, &s->p, mend_engine_now(r->E), outcome);
  if (changed) breaker_changed(r, i, before.state);
  else if (before.failures != s->b.failures || before.successes != s->b.successes) {
    if (mend_store_put_breaker(r->E->store, s->key, &s->b, mend_engine_now(r->E)))
      mend__store_failed(r->E);
  }
}

/* ---------------------------------------------------------------- forward */

static void finish_failed(mend_run *r);
static void backward(mend_run *r);
int mend__guarded_pcall(mend_engine *E, mend_limits *lim, int nargs, int nres);
const char *mend__describe(mend_engine *E, lua_State *from, int idx, char *buf, size_t len);

static void set_result(mend_run *r, int i) {
  lua_State *L = r->E->L;
  mend_refs_push(&r->E->refs, L, r->results_ref);
  char err[256];
  if (mend_json_decode(L, r->steps[i].result, strlen(r->steps[i].result), err, sizeof err))
    lua_pushnil(L);
  lua_setfield(L, -2, mend__step_name(r, i));
  lua_pop(L, 1);
}

static void fail_step(mend_run *r, int i, const mend_error_info *info);

/* Asks the breaker of step i for an attempt. When it refuses, the step waits in breaker_open,
 * from pending, retry_wait or breaker_open alike (SPEC section 2), and 1 is returned. */
static int breaker_refuses(mend_run *r, int i) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  double retry_at;
  mend_breaker_state before = def->slot->b.state;
  int admitted = mend_breaker_admit(&def->slot->b, &def->slot->p, mend_engine_now(E), &retry_at);
  if (def->slot->b.state != before) breaker_changed(r, i, before);
  if (admitted) return 0;
  /* Spread the waiters so that they do not all probe at the same instant. */
  double spread = 0.1 * mend_rng_uniform(&E->rng) * (def->slot->p.open_seconds > 1 ? 1 : def->slot->p.open_seconds);
  st->due = retry_at + spread;
  step_to(r, i, MEND_STEP_BREAKER_OPEN, NULL, st->due - mend_engine_now(E), def->breaker_key);
  r->wait_kind = WAIT_BREAKER;
  mend__arm(r, &r->wait, st->due);
  return 1;
}

static void forward(mend_run *r) {
  mend_engine *E = r->E;
  int admitted = r->admitted;   /* for this attempt only */
  r->admitted = 0;
  while (r->cur < r->wf->nsteps && r->steps[r->cur].status == MEND_STEP_SUCCEEDED) r->cur++;
  if (r->cur == r->wf->nsteps) {
    run_to(r, MEND_RUN_SUCCEEDED);
    mend__queue(r, ACT_FINISH);
    return;
  }
  int i = r->cur;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (st->status != MEND_STEP_PENDING && st->status != MEND_STEP_RUNNING) return;  /* waiting */
  if (E->draining) return;   /* parked: its lease is given back when the worker stops */
  if (st->status == MEND_STEP_PENDING) {
    if (mend__ensure_key(r, i)) {
      st->attempts++;
      step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
      mend_error_info info = {MEND_ERR_ERROR, st->error, -1, 0};
      fail_step(r, i, &info);
      return;
    }
    if (st->custom_key) {
      char *found = NULL;
      int r2 = mend_store_find_key_result(E->store, st->idem_key, &found);
      if (r2 < 0) {
        mend__store_failed(E);
        if (!E->broken) mend__queue(r, ACT_ADVANCE);   /* a lock elsewhere: again after the commit */
        return;
      }
      if (r2 == 1) {
        mend__set_str(&st->result, found);
        free(found);
        step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, "result reused: idempotency key already succeeded");
        set_result(r, i);
        r->cur++;
        mend__queue(r, ACT_ADVANCE);
        return;
      }
    }
    if (def->sleep > 0 && !st->slept) {
      /* A durable wait: only its due time is kept, in the step's row; no coroutine. */
      st->due = mend_engine_now(E) + def->sleep;
      step_to(r, i, MEND_STEP_SLEEPING, NULL, def->sleep, NULL);
      r->wait_kind = WAIT_STEP_SLEEP;
      mend__arm(r, &r->wait, st->due);
      return;
    }
    if (def->execute_ref == LUA_NOREF) {
      step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, "a wait step: nothing to execute");
      mend__set_str(&st->result, "null");
      set_result(r, i);
      r->cur = i + 1;
      mend__queue(r, ACT_ADVANCE);
      return;
    }
    if (!admitted && breaker_refuses(r, i)) return;
  }
  /* pending, or running found after a crash: either way a new attempt with the same key */
  st->attempts++;
  st->due = -1;
  step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
  mend__queue(r, ACT_EXECUTE);
}

static void succeed_step(mend_run *r, int i, const char *result_json) {
  step_rt *st = &r->steps[i];
  breaker_outcome(r, i, MEND_OUTCOME_SUCCESS);
  mend__set_str(&st->result, result_json);
  mend__set_str(&st->error, NULL);
  step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, NULL);
  set_result(r, i);
  r->cur = i + 1;
  /* The next step's `running` joins this batch; its execute still waits for the commit that
   * makes both durable. One turn per step instead of two. */
  forward(r);
}

static void fail_step(mend_run *r, int i, const mend_error_info *info) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  int retryable = info->kind == MEND_ERR_RETRYABLE || info->kind == MEND_ERR_TIMEOUT;
  char msg[600];
  snprintf(msg, sizeof msg, "%s: %s", mend_error_kind_name(info->kind), info->message ? info->message : "");
  mend__emit(E, json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:b}", "type", "step_failed", "run_id", r->id,
                    "workflow", r->wf->name, "step", mend__step_name(r, i), "attempt", st->attempts,
                    "error", msg, "will_retry", retryable && st->attempts < def->retry.max_attempts));
  if (def->slot->b.state == MEND_BREAKER_HALF_OPEN || retryable || info->kind != MEND_ERR_ERROR)
    breaker_outcome(r, i, retryable ? MEND_OUTCOME_RETRYABLE : MEND_OUTCOME_OTHER);
  else
    breaker_outcome(r, i, MEND_OUTCOME_OTHER);
  if (retryable && st->attempts < def->retry.max_attempts) {
    double delay = info->retry_after >= 0
      ? mend_backoff_clamp_retry_after(&def->retry, info->retry_after)
      : mend_backoff_delay(&def->retry, st->attempts, st->last_delay > 0 ? st->last_delay : 0, &E->rng);
    st->last_delay = delay;
    st->due = mend_engine_now(E) + delay;
    step_to(r, i, MEND_STEP_RETRY_WAIT, msg, delay, NULL);
    if (def->retry.attention_after > 0 && st->attempts >= def->retry.attention_after && !r->attention) {
      r->attention = 1;
      if (mend_store_update_run(E->store, r->id, mend_run_status_name(r->status), r->error, 1,
                                mend_engine_now(E), r->reason))
        mend__store_failed(E);
      mend__alert(r, "attention", i, "attention_after", msg);
    }
    r->wait_kind = WAIT_RETRY;
    mend__arm(r, &r->wait, st->due);
    return;
  }
  step_to(r, i, MEND_STEP_FAILED, msg, -1, NULL);
  mend__set_str(&r->error, msg);
  r->fail_step = i;
  if (info->kind == MEND_ERR_COMPENSABLE && info->severity >= 3) {
    r->reason = "severity_3";
    run_to(r, MEND_RUN_NEEDS_ATTENTION);
    dead_letter(r, r->reason, i, msg, "severity 3: nothing compensated automatically");
    mend__queue(r, ACT_FINISH);
    return;
  }
  r->reason = retryable ? "attempts_exhausted"
            : info->kind == MEND_ERR_FATAL ? "fatal"
            : info->kind == MEND_ERR_COMPENSABLE ? (info->severity == 2 ? "severity_2" : "compensable")
            : "error";
  st->compensate_self = info->kind == MEND_ERR_COMPENSABLE;
  int anything = st->compensate_self;
  for (int j = 0; j < i; j++) anything |= r->steps[j].status == MEND_STEP_SUCCEEDED;
  if (!anything) { finish_failed(r); return; }
  run_to(r, MEND_RUN_COMPENSATING);
  r->cur = i;
  mend__queue(r, ACT_ADVANCE);
}

/* The run failed for good and compensation (if any) is over. */
static void finish_failed(mend_run *r) {
  if (!r->reason) r->reason = "error";
  if (strcmp(r->reason, "attempts_exhausted") == 0) {
    run_to(r, MEND_RUN_NEEDS_ATTENTION);
    dead_letter(r, r->reason, r->fail_step, r->error,
                r->status == MEND_RUN_NEEDS_ATTENTION ? "attempts exhausted; completed steps compensated" : NULL);
  } else if (r->status == MEND_RUN_COMPENSATING) {
    run_to(r, MEND_RUN_COMPENSATED);
    if (strcmp(r->reason, "severity_2") == 0)
      mend__alert(r, "compensated_with_alert", r->fail_step, "severity_2", r->error);
  } else {
    run_to(r, MEND_RUN_FAILED);
  }
  mend__queue(r, ACT_FINISH);
}

/* ---------------------------------------------------------------- backward */

static int needs_compensation(const mend_run *r, int i) {
  const step_rt *st = &r->steps[i];
  return st->status == MEND_STEP_SUCCEEDED || st->status == MEND_STEP_COMPENSATING ||
         st->status == MEND_STEP_COMPENSATION_FAILED ||
         (st->status == MEND_STEP_FAILED && st->compensate_self);
}

static void backward(mend_run *r) {
  for (; r->cur >= 0; r->cur--) {
    int i = r->cur;
    if (!needs_compensation(r, i)) continue;
    if (r->wf->steps[i].compensate_ref == LUA_NOREF) {
      mend__history(r, mend__step_name(r, i), "skip_compensate", NULL, NULL, 0, NULL, -1, "step has no compensate");
      mend_engine_log_line(r->E, "info", r->id, mend__step_name(r, i), 0, "skip_compensate",
                           "no compensate function: skipped");
      continue;
    }
    if (r->E->draining) return;
    r->steps[i].comp_attempts++;
    r->steps[i].due = -1;
    step_to(r, i, MEND_STEP_COMPENSATING, NULL, -1, NULL);
    mend__queue(r, ACT_COMPENSATE);
    return;
  }
  finish_failed(r);
}

static void compensated(mend_run *r, int i) {
  step_to(r, i, MEND_STEP_COMPENSATED, NULL, -1, NULL);
  r->cur = i - 1;
  backward(r);   /* as succeed_step: the next compensate still waits for the commit */
}

static void compensation_failed(mend_run *r, int i, const mend_error_info *info) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_retry_policy *p = &r->wf->steps[i].compensate_retry;
  char msg[600];
  snprintf(msg, sizeof msg, "%s: %s", mend_error_kind_name(info->kind), info->message ? info->message : "");
  mend__set_str(&st->error, msg);
  if (st->comp_attempts < p->max_attempts) {
    double delay = mend_backoff_delay(p, st->comp_attempts, st->last_delay > 0 ? st->last_delay : 0, &E->rng);
    st->last_delay = delay;
    st->due = mend_engine_now(E) + delay;
    write_step(r, i);
    mend__history(r, mend__step_name(r, i), "compensate_failed", NULL, NULL, st->comp_attempts, msg, delay, NULL);
    mend_engine_log_line(E, "warn", r->id, mend__step_name(r, i), st->comp_attempts, "compensate_failed", msg);
    r->wait_kind = WAIT_COMP_RETRY;
    mend__arm(r, &r->wait, st->due);
    return;
  }
  step_to(r, i, MEND_STEP_COMPENSATION_FAILED, msg, -1, NULL);
  /* Name exactly what is left undone, so a person knows what to repair by hand. */
  char left[1024] = "";
  size_t used = 0;
  for (int j = i; j >= 0; j--) {
    if (j != i && !needs_compensation(r, j)) continue;
    if (j != i && r->wf->steps[j].compensate_ref == LUA_NOREF) continue;
    int n = snprintf(left + used, sizeof left - used, "%s%s", used ? ", " : "", mend__step_name(r, j));
    if (n < 0 || (size_t)n >= sizeof left - used) break;
    used += (size_t)n;
  }
  char detail[1200];
  snprintf(detail, sizeof detail, "not compensated: %s", left);
  mend__set_str(&r->error, msg);
  r->reason = "compensation_failed";
  run_to(r, MEND_RUN_NEEDS_ATTENTION);
  dead_letter(r, "compensation_failed", i, msg, detail);
  mend__queue(r, ACT_FINISH);
}

/* ---------------------------------------------------------------- attempts in Lua */


void mend__attempt_done(mend_run *r, int ok, mend_error_info *info, const char *result_json) {
  int i = r->cur;
  int back = r->status == MEND_RUN_COMPENSATING;
  if (back) {
    if (ok) compensated(r, i);
    else compensation_failed(r, i, info);
  } else {
    if (ok) succeed_step(r, i, result_json);
    else fail_step(r, i, info);
  }
}

/* ---------------------------------------------------------------- waits from Lua */

static void on_wait(mend_timer *t) {
  mend_run *r = (mend_run *)(void *)((char *)t - offsetof(mend_run, wait));
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
      step_to(r, r->cur, MEND_STEP_PENDING, NULL, -1, NULL);
      forward(r);
      break;
    case WAIT_COMP_RETRY:
      backward(r);
      break;
    case WAIT_STEP_SLEEP:
      r->steps[r->cur].slept = 1;
      r->steps[r->cur].due = -1;
      step_to(r, r->cur, MEND_STEP_PENDING, NULL, -1, NULL);
      forward(r);
      break;
    case WAIT_NONE:
      break;
  }
}

/* ---------------------------------------------------------------- ticking hosts */

int mend_engine_tick_for(mend_engine *E, double budget) {
  double start = mend_real_now();
  E->turn_deadline = start + (budget > 0 ? budget : 0);
  int turns = 0;
  do {
    if (turn_has_work(E)) mend__kick(E);   /* a write outside any run (a load) needs a turn too */
    uv_run(E->loop, UV_RUN_NOWAIT);   /* I/O, due timers, and one pump turn */
    turns++;
  } while (!E->broken && turn_has_work(E) &&   /* not while only the writer thread works */
           mend_real_now() < E->turn_deadline);
  E->turn_deadline = 0;
  return E->broken ? -1 : turns;
}

double mend_engine_next_due(mend_engine *E) {
  if (has_ready_work(E)) return 0;
  double next = mend_timers_next_due(&E->timers);
  if (next < 0) return -1;
  double wait = next - mend_engine_now(E);
  return wait > 0 ? wait : 0;
}

static void on_wakeup(uv_async_t *h) {
  mend_engine *E = h->data;
  mend__kick(E);
  /* Held while the writer thread has a batch, so that the loop waits for it; idle otherwise,
   * as a host's loop must not be kept alive by it. */
  if (!E->writer || !mend_store_writer_busy(E->store)) uv_unref((uv_handle_t *)h);
}

/* On the writer thread, after a batch: the loop takes it from there. */
static void writer_done(void *ud) {
  mend_engine *E = ud;
  uv_async_send(E->wakeup);
}

void mend_engine_wake(mend_engine *E) { uv_async_send(E->wakeup); }

/* ---------------------------------------------------------------- runs */

static void unthrottle(mend_run *r);

static void run_free(mend_run *r) {
  mend_engine *E = r->E;
  unthrottle(r);
  mend__end_attempt(r);
  mend_timer_disarm(&E->timers, &r->wait);
  mend_refs_drop(&E->refs, E->L, r->input_ref);
  mend_refs_drop(&E->refs, E->L, r->results_ref);
  for (int i = 0; i < r->wf->nsteps; i++) {
    free(r->steps[i].idem_key);
    free(r->steps[i].result);
    free(r->steps[i].error);
  }
  free(r->steps);
  free(r->error);
  if (r->prev) r->prev->next = r->next;
  else E->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  E->in_flight--;
  free(r);
}

/* A run leaving its step before the attempt ends (cancelled, or let go): a concurrency slot
 * it was woken for is passed on, and a half-open probe it made is given back. */
static void give_back(mend_run *r, int was_queued, int was_running) {
  mend_engine *E = r->E;
  int i = r->cur;
  if (i < 0 || i >= r->wf->nsteps) return;
  struct mend_breaker_slot *slot = r->wf->steps[i].slot;
  if (was_queued && (r->next_action == ACT_EXECUTE || r->next_action == ACT_COMPENSATE)) {
    mend_run *next = mend__fifo_pop(&slot->waiting);
    if (!next) next = mend__fifo_pop(&E->throttled);
    if (next) mend__queue(next, next->next_action);
  }
  if (was_running && slot->b.state == MEND_BREAKER_HALF_OPEN) mend_breaker_release(&slot->b);
}

/* Frees a run this engine lets go of (another worker took it). */
static void drop_run(mend_run *r, int was_queued) {
  give_back(r, was_queued, r->co != NULL);
  run_free(r);
}

static void do_action(mend_run *r) {
  if (r->lost) {
    drop_run(r, 1);   /* popped from the queue just now */
    return;
  }
  action a = r->next_action;
  r->next_action = ACT_NONE;
  switch (a) {
    case ACT_ADVANCE:
      if (r->status == MEND_RUN_RUNNING) forward(r);
      else if (r->status == MEND_RUN_COMPENSATING) backward(r);
      break;
    case ACT_EXECUTE:
    case ACT_COMPENSATE: {
      /* A stopping worker starts no call: its runs are given back, and the next holder makes
       * the attempt their committed `running` row asks for (as forward() parks). Started here,
       * a call would run on a run another worker may already hold. */
      if (r->E->draining || r->E->destroying) break;
      /* At a cap, wait for a slot: the transition is committed, the call comes later. */
      struct mend_breaker_slot *slot = r->wf->steps[r->cur].slot;
      run_fifo *wait = slot->p.max_concurrency > 0 && slot->in_flight >= slot->p.max_concurrency
        ? &slot->waiting
        : r->E->cfg.max_concurrency > 0 && r->E->attempts >= r->E->cfg.max_concurrency
        ? &r->E->throttled : NULL;
      if (wait) {
        r->next_action = a;
        fifo_push(wait, r);
        break;
      }
      slot->in_flight++;
      r->held = slot;
      mend__start_attempt(r, a == ACT_COMPENSATE);
      break;
    }
    case ACT_FINISH:
      /* its last run_to already gave the lease back (mend_store_update_run) */
      if (r->E->cfg.on_event)
        mend__emit(r->E, json_pack("{s:s, s:s, s:s, s:s}", "type", "run_finished", "run_id", r->id,
                           "workflow", r->wf->name, "status", mend_run_status_name(r->status)));
      run_free(r);
      break;
    case ACT_NONE: break;
  }
}

static json_t *take_array(json_t **a) {
  json_t *taken = *a;
  *a = json_array();
  return taken;
}

static void checkpoint_now(mend_engine *E);
static void checkpoint_if_grown(mend_engine *E);

/* With the writer thread: once it is idle, the alerts and events of the batch it had are heard
 * (if that batch failed, durable_seq did not move and hand_off reports the failure). */
static void settle_writer(mend_engine *E) {
  if (mend_store_writer_busy(E->store)) return;
  checkpoint_if_grown(E);
  if (mend_store_durable_seq(E->store) >= E->handed_seq &&
      (json_array_size(E->alerts_handed) || json_array_size(E->events_handed)))
    mend__fire_batch(E, take_array(&E->alerts_handed), take_array(&E->events_handed));
}

/* A batch of at least this many writes is worth the writer thread even with nothing else
 * ready: timers and I/O go on while it is written. */
#define HAND_OFF_WRITES 1024

/* The most WAL frames the loop copies itself to let the WAL start over (about 8 MiB). */
#define CATCH_UP_FRAMES 2048

/* Ends the open batch: committed here, or handed to the writer thread if it is idle (else the
 * batch grows until it is). Alerts and events are heard once their batch is durable. */
static int end_batch(mend_engine *E) {
  /* A part of this batch on the thread (store.h) is no batch to wait for: the hand-off below
   * follows it. */
  if (E->writer && mend_store_writer_busy(E->store) && !mend_store_writer_part(E->store)) {
    uv_ref((uv_handle_t *)E->wakeup);
    return 0;
  }
  /* With nothing else ready the loop would only wait for the writer thread: committing a small
   * batch here is as fast and saves a hand-off per transition (latency at moderate load). A
   * backlog is worth a second thread: the loop works through it while the thread writes. A
   * long WAL is caught up here too, once the commit leaves nothing open. */
  if (!E->writer || E->wal_catch_up ||
      (!E->ready_head && mend_store_batch_writes(E->store) < HAND_OFF_WRITES)) {
    if (lock_waiting(E)) return 0;   /* its timer kicks the next try */
    int rc = mend_store_commit(E->store);
    if (rc == MEND_STORE_BUSY) { lock_wait(E); return 0; }
    if (rc) { mend__store_failed(E); return -1; }
    checkpoint_if_grown(E);
    if (E->wal_catch_up && !E->checkpointing) {
      /* Only a short tail is copied here; a long one (the end of a burst) goes back to the
       * thread first: 0.4 s on the loop with 1M runs parked. */
      if (mend_store_wal_frames(E->store) - E->wal_copied > CATCH_UP_FRAMES) {
        checkpoint_now(E);
      } else {
        int done = mend_store_checkpoint_catch_up(E->store);
        if (done < 0) { mend__store_failed(E); return -1; }
        if (done) E->wal_catch_up = 0;
      }
    }
    mend__fire_batch(E, take_array(&E->alerts), take_array(&E->events));
    return 0;
  }
  E->handed_seq = mend_store_open_seq(E->store);
  json_array_extend(E->alerts_handed, E->alerts);
  json_array_extend(E->events_handed, E->events);
  json_array_clear(E->alerts);
  json_array_clear(E->events);
  int rc = mend_store_hand_off(E->store);
  if (rc == MEND_STORE_BUSY) { lock_wait(E); return 0; }
  if (rc) { mend__store_failed(E); return -1; }
  if (mend_store_writer_busy(E->store)) uv_ref((uv_handle_t *)E->wakeup);
  else settle_writer(E);   /* nothing was written: durable at once */
  return 0;
}

/* ---------------------------------------------------------------- a lock held elsewhere */

/* Another process holds the database's write lock (the sqlite3 shell inside a transaction, a
 * process stopped mid-write). Nothing is lost: the batch stays recorded and nothing it
 * announces runs until it commits (the write-ahead rule), so the runs simply wait. Without a
 * writer thread the commit is tried again on a timer, 50 ms doubling to 1 s; the writer thread
 * retries its batch by itself (store.c). Either way a warning is logged every few seconds,
 * and a line when the lock goes. Leases are not renewed meanwhile: a lock longer than the
 * lease is a stall like any other, and the fence sorts out what another worker took. */

static void lock_retry(uv_timer_t *t) {
  mend_engine *E = t->data;
  mend__kick(E);
}

static void lock_warn(mend_engine *E, double now) {
  char msg[1200];
  snprintf(msg, sizeof msg, "the database is locked by another process: writes wait"
           " (%.0f s so far), retrying; %s", now - E->lock_since, mend_store_errmsg(E->store));
  mend_engine_log_line(E, "warn", NULL, NULL, 0, "store", msg);
  E->lock_warned = now;
}

static void lock_wait(mend_engine *E) {
  if (E->broken || E->destroying) return;
  double now = mend_real_now();
  if (E->lock_since <= 0) {
    E->lock_since = now;
    E->lock_delay = 0.05;
    lock_warn(E, now);
  } else {
    E->lock_delay = E->lock_delay * 2 > 1 ? 1 : E->lock_delay * 2;
    if (now - E->lock_warned >= LOCK_WARN_EVERY) lock_warn(E, now);
  }
  E->lock_retry_at = now + E->lock_delay;
  if (!E->lock_timer) {
    E->lock_timer = malloc(sizeof *E->lock_timer);
    if (!E->lock_timer) { breakdown(E, "out of memory waiting for a lock"); return; }
    uv_timer_init(E->loop, E->lock_timer);
    E->lock_timer->data = E;
  }
  uv_timer_start(E->lock_timer, lock_retry, (uint64_t)(E->lock_delay * 1000) + 1, 0);
}

/* At each turn: the writer thread's wait heard of, and the end of a lock told. */
static void watch_lock(mend_engine *E) {
  if (mend_store_locked(E->store)) {
    if (E->writer && mend_store_writer_busy(E->store)) {
      double now = mend_real_now();
      if (E->lock_since <= 0) {
        E->lock_since = now;
        lock_warn(E, now);
      } else if (now - E->lock_warned >= LOCK_WARN_EVERY) {
        lock_warn(E, now);
      }
    }
    return;
  }
  if (E->lock_since <= 0) return;
  char msg[160];
  snprintf(msg, sizeof msg, "the database lock is gone after %.1f s: going on",
           mend_real_now() - E->lock_since);
  mend_engine_log_line(E, "info", NULL, NULL, 0, "store", msg);
  E->lock_since = E->lock_retry_at = 0;
  if (E->lock_timer) uv_timer_stop(E->lock_timer);
}

/* ---------------------------------------------------------------- fencing */

/* The store drops every write to a run another worker took while this one stalled past its
 * lease (store.c, "fencing"); here such runs are let go, wherever they are, and the leases
 * renewed before they can run out under a long turn. */

static double lease_until(const mend_engine *E);

static void renew_now(mend_engine *E) {
  if (E->broken || !E->in_flight) return;
  double until = lease_until(E);
  if (mend_store_renew(E->store, E->owner, until)) { mend__store_failed(E); return; }
  E->fence_until = until;
  mend__kick(E);   /* committed by the next turn */
}

typedef struct id_list { mend_idset set; int oom; } id_list;

static void add_id(void *ud, const char *id) {
  id_list *l = ud;
  if (mend_idset_add(&l->set, id, strlen(id)) < 0) l->oom = 1;
}

static int in_hand(const mend_run *r) {
  return r->status == MEND_RUN_RUNNING || r->status == MEND_RUN_COMPENSATING;
}

/* Lets go of the runs in memory whose ids are in `ids`: freed, or, if queued, when their action
 * comes up. Nothing more is written for them. */
static void let_go(mend_engine *E, const mend_idset *ids, const char *why) {
  for (mend_run *r = E->runs, *next; r; r = next) {
    next = r->next;
    if (r->lost || !mend_idset_has(ids, r->id, strlen(r->id))) continue;
    mend_engine_log_line(E, "warn", r->id, NULL, 0, "lease", why);
    if (r->queued) r->lost = 1;
    else drop_run(r, 0);
  }
}

/* Before the turn acts: no action may start for a run that is no longer ours. */
static void check_fence(mend_engine *E) {
  if (E->broken) return;
  /* The renewal timer is late (turns are long): renew now, while a third of the lease is left. */
  if (mend_real_now() >= E->fence_until - E->lease_seconds / 3) renew_now(E);
  id_list lost = {0}, mine = {0};
  if (mend_store_fence_news(E->store, add_id, &lost) || E->fence_recheck) {
    E->fence_was_late = 1;
    /* A batch began late: which runs does the store say are ours? The rest are not. */
    json_t *held = mend_store_held(E->store);
    E->fence_recheck = !held && mend_store_locked(E->store);   /* again at the next turn */
    if (!held) {
      mend__store_failed(E);
      if (lost.set.count && !E->broken) let_go(E, &lost.set, "another worker took this run"
                                               " while this one stalled past its lease: let go"
                                               " here, nothing more written");
      mend_idset_clear(&lost.set);
      return;
    }
    mend_store_fence_news(E->store, add_id, &lost);   /* found by the flush just now */
    size_t i;
    json_t *id;
    json_array_foreach(held, i, id) add_id(&mine, json_string_value(id));
    json_decref(held);
    for (mend_run *r = E->runs; r && !mine.oom; r = r->next) {
      if (!in_hand(r) || r->lost || mend_idset_has(&mine.set, r->id, strlen(r->id))) continue;
      add_id(&lost, r->id);
      if (mend_store_add_lost(E->store, r->id)) mend__store_failed(E);
    }
    mend_idset_clear(&mine.set);
    if (!mine.oom) mend_store_fence_verified(E->store);   /* else the store keeps looking up */
  }
  if (lost.oom || mine.oom) breakdown(E, "out of memory keeping track of lost leases");
  if (lost.set.count) let_go(E, &lost.set, "another worker took this run while this one stalled"
                             " past its lease: let go here, nothing more written");
  mend_idset_clear(&lost.set);
}

/* One turn: do what the durable batches allow, then end the batch that wrote (so that a run
 * released by a commit has its next transition in the very next one). */
static int pump_turn(mend_engine *E) {
  if (E->broken) return -1;
  if (E->writer) settle_writer(E);
  else if (end_batch(E)) return -1;   /* what the last turn wrote, before acting on it */
  watch_lock(E);
  check_fence(E);
  unsigned long durable = mend_store_durable_seq(E->store);
  for (int k = 0; k < 4 && E->moved_seq < durable; k++) {
    unsigned long seq = ++E->moved_seq;
    mend_run *head = E->waiting[seq % 4].head;
    if (!head) continue;
    if (E->ready_tail) E->ready_tail->qnext = head;
    else E->ready_head = head;
    E->ready_tail = E->waiting[seq % 4].tail;
    E->waiting[seq % 4].head = E->waiting[seq % 4].tail = NULL;
  }
  if (E->moved_seq < durable) E->moved_seq = durable;   /* every list was moved */
  int did = 0;
  while (E->ready_head && !E->broken) {
    /* A turn ends at a ticking host's budget, or after MAX_TURN_ACTIONS: a burst of starts
     * must not keep the next commit (and the timers, and I/O) waiting behind all of it. The
     * rest stays ready, ahead of what this turn queues. */
    if (did > 0 && (did >= MAX_TURN_ACTIONS ||
                    (E->turn_deadline > 0 && mend_real_now() >= E->turn_deadline)))
      break;
    mend_run *r = E->ready_head;
    E->ready_head = r->qnext;
    if (!E->ready_head) E->ready_tail = NULL;
    if (r->wait_seq > durable) {
      /* it wrote again after it was queued: it waits for that batch too */
      append(&E->waiting[r->wait_seq % 4].head, &E->waiting[r->wait_seq % 4].tail, r);
      continue;
    }
    r->queued = 0;
    do_action(r);
    did++;
  }
  if (E->writer && !E->broken && end_batch(E)) return -1;
  return did;
}

static void pump_cb(uv_idle_t *h) {
  mend_engine *E = h->data;
  pump_turn(E);
  int writing = E->writer && mend_store_writer_busy(E->store);
  int more = turn_has_work(E);
  if (!more && !E->broken && virtual_timers_to_advance(E)) {
    mend_timers_advance_to(&E->timers, mend_timers_next_due(&E->timers));
    more = 1;
  }
  if (!more || E->broken) {
    uv_idle_stop(E->pump);
    if (!writing) mend_store_trim(E->store);   /* the runs wait: what a burst grew goes back */
  }
}

/* One pass of a loop that blocks (run, serve): a turn if there is work for one, else sleep
 * until something happens. Kicked only with work for a turn: a turn started while the writer
 * thread has the batch does nothing, and the idle pump keeps the loop from sleeping, so kicking
 * every time made the loop spin through the thread's whole write (110k empty turns for 10k
 * runs) and through every wait of its runs. Timers wake it on time (timers.c: a timerfd). */
static void loop_once(mend_engine *E) {
  if (turn_has_work(E) || virtual_timers_to_advance(E)) mend__kick(E);
  uv_run(E->loop, UV_RUN_ONCE);
}

int mend_engine_run(mend_engine *E) {
  E->auto_advance = 1;
  while ((E->in_flight > 0 || has_ready_work(E)) && !E->broken) loop_once(E);
  E->auto_advance = 0;
  /* Alerts of the last runs must reach their command before a one-shot caller exits. */
  double until = mend_real_now() + 5;
  while (!E->broken && E->alert_commands > 0 && mend_real_now() < until)
    uv_run(E->loop, UV_RUN_ONCE);
  return E->broken ? -1 : 0;
}

static void drain(mend_engine *E) {
  while (!E->broken && (E->ready_head || (has_ready_work(E) && !lock_waiting(E)))) pump_turn(E);
}

int mend_engine_advance(mend_engine *E, double seconds) {
  if (!E->timers.is_virtual) {
    snprintf(E->errmsg, sizeof E->errmsg, "advance needs a virtual clock");
    return -1;
  }
  double target = mend_engine_now(E) + (seconds > 0 ? seconds : 0);
  drain(E);
  while (!E->broken) {
    uv_run(E->loop, UV_RUN_NOWAIT);
    drain(E);
    double next = mend_timers_next_due(&E->timers);
    if (next < 0 || next > target) break;
    mend_timers_advance_to(&E->timers, next);
  }
  if (!E->broken) mend_timers_advance_to(&E->timers, target);
  drain(E);
  return E->broken ? -1 : 0;
}

static mend_run *run_new(mend_engine *E, mend_workflow *wf, const char *id) {
  mend_run *r = calloc(1, sizeof *r);
  r->E = E;
  r->wf = wf;
  r->status = MEND_RUN_RUNNING;
  r->co_ref = LUA_NOREF;
  r->input_ref = r->results_ref = LUA_NOREF;
  r->fail_step = -1;
  snprintf(r->id, sizeof r->id, "%s", id);
  r->steps = calloc((size_t)wf->nsteps, sizeof *r->steps);
  for (int i = 0; i < wf->nsteps; i++) {
    step_rt *st = &r->steps[i];
    st->status = MEND_STEP_PENDING;
    st->due = st->last_delay = -1;
    st->key_ready = wf->steps[i].key_ref == LUA_NOREF;
  }
  mend_timer_init(&r->wait, on_wait);
  mend_timer_init(&r->deadline, mend__on_deadline);
  r->ref_shard = mend_refs_shard(&E->refs, E->L);
  lua_newtable(E->L);
  r->results_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  r->next = E->runs;
  if (E->runs) E->runs->prev = r;
  E->runs = r;
  E->in_flight++;
  return r;
}

static double lease_until(const mend_engine *E) { return mend_real_now() + E->lease_seconds; }

static int start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                       const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                       int detached, char *err, int errlen);

/* A start is an answer to its caller: it waits for another process's lock up to the store's
 * default busy wait, then fails naming the lock (the loop's own writes wait on a timer). */
int mend_engine_start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                            const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                            int detached, char *err, int errlen) {
  if (E->store) mend_store_set_busy_wait(E->store, 0);
  int rc = start_value(E, L, workflow, input_idx, run_key, id_out, existed, detached, err, errlen);
  if (E->store) mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  return rc;
}

static int start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                       const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                       int detached, char *err, int errlen) {
  *existed = 0;
  if (E->broken) { snprintf(err, (size_t)errlen, "%s", E->errmsg); return -1; }
  mend_workflow *wf = mend_engine_workflow(E, workflow);
  if (!wf) { snprintf(err, (size_t)errlen, "no workflow named \"%s\" is loaded", workflow); return -1; }
  input_idx = lua_absindex(L, input_idx);
  if (run_key) {
    int found = mend_store_find_run_key(E->store, run_key, id_out, MEND_RUN_ID_LEN);
    if (found < 0) { snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store)); return -1; }
    if (found) { *existed = 1; return 0; }
  }
  char jerr[400];
  json_t *input_doc;
  char *input_json = mend_json_encode_doc(L, input_idx, "input", jerr, sizeof jerr, &input_doc);
  if (!input_json) { snprintf(err, (size_t)errlen, "%s", jerr); return -1; }
  char id[MEND_RUN_ID_LEN];
  new_run_id(E, id);
  double now = mend_engine_now(E);
  mend_run_rec rec = {id, wf->name, wf->version, wf->source, run_key, "running", input_json,
                      NULL, 0, now, now, detached ? NULL : E->owner, wf->step_names, wf->script};
  int ins = mend_store_insert_run(E->store, &rec);
  if (ins < 0) {
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    free(input_json);
    json_decref(input_doc);
    mend__store_failed(E);
    return -1;
  }
  if (ins == 1) {
    /* Another process took the key between our look and our insert: theirs is the run. */
    free(input_json);
    json_decref(input_doc);
    *existed = 1;
    return mend_store_find_run_key(E->store, run_key, id_out, MEND_RUN_ID_LEN) == 1 ? 0 : -1;
  }
  mend_run *r = run_new(E, wf, id);
  mend__history(r, NULL, "run", NULL, "running", 0, NULL, -1, run_key);
  /* The run's input is the JSON form, as a restarted engine will see it: the document the
   * text was printed from, not the text parsed again (5k instructions a start). */
  if (input_doc ? mend_json_push_doc(E->L, input_doc, jerr, sizeof jerr)
                : mend_json_decode(E->L, input_json, strlen(input_json), jerr, sizeof jerr))
    lua_pushnil(E->L);
  r->input_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  free(input_json);
  json_decref(input_doc);
  memcpy(id_out, r->id, MEND_RUN_ID_LEN);
  if (E->broken) { snprintf(err, (size_t)errlen, "%s", E->errmsg); return -1; }
  if (detached) {
    /* Recorded for any worker to take; durable before the caller hears the id. */
    if (commit_now(E)) {
      snprintf(err, (size_t)errlen, "%s", E->errmsg);
      run_free(r);
      return -1;
    }
    run_free(r);
    return 0;
  }
  mend_engine_log_line(E, "info", r->id, NULL, 0, "run", "started");
  /* Its first step's `running` joins the batch of its start: one commit less before the
   * first execute. */
  queue_now(r, ACT_ADVANCE);
  return 0;
}

int mend_engine_start_json(mend_engine *E, const char *workflow, const char *input_json,
                           const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                           char *err, int errlen) {
  lua_State *L = E->L;
  if (mend_json_decode(L, input_json ? input_json : "null", input_json ? strlen(input_json) : 4,
                       err, errlen))
    return -1;
  int rc = mend_engine_start_value(E, L, workflow, -1, run_key, id_out, existed, 0, err, errlen);
  lua_pop(L, 1);
  return rc;
}

/* ---------------------------------------------------------------- recovery */

static int step_status_of(json_t *o, const char *field, mend_step_status *out) {
  const char *v = json_string_value(json_object_get(o, field));
  return v ? mend_step_status_parse(v, out) : -1;
}

static double real_field(json_t *o, const char *field) {
  json_t *v = json_object_get(o, field);
  return v ? json_number_value(v) : -1;
}

/* The workflow a run executes: the version it started with (SPEC section 13), loaded here
 * or from the script the store keeps; by name only for a run that names no version. NULL with
 * the reason in `why` when that version cannot be loaded. */
static mend_workflow *run_workflow(mend_engine *E, const char *name, const char *version,
                                   char *why, int whylen) {
  if (!name) {
    mend_errorf(why, whylen, "the run names no workflow");
    return NULL;
  }
  if (!version) {
    mend_workflow *wf = mend_engine_workflow(E, name);
    if (!wf) mend_errorf(why, whylen, "workflow \"%s\" is not loaded here", name);
    return wf;
  }
  char err[600];
  mend_workflow *wf = mend_engine_load_version(E, name, version, err, sizeof err);
  if (wf) return wf;
  /* Nothing of that name here and no script of it kept (a workflow registered in code): */
  char *kept = mend_engine_workflow(E, name) ? NULL : mend_store_version_script(E->store, name, version, NULL);
  if (!mend_engine_workflow(E, name) && !kept)
    mend_errorf(why, whylen, "workflow \"%s\" is not loaded here", name);
  else
    mend_errorf(why, whylen, "workflow %s version %s cannot be loaded: %s", name, version, err);
  free(kept);
  return NULL;
}

/* Rebuilds a run in memory from the store alone, without acting on it. NULL when the run
 * cannot be resumed by this engine, with the reason in `why`; the run is then left as it is
 * for a person or another worker. *unavailable (if given) says when the reason is that its
 * version cannot be loaded here: 1, or 2 when the store says so already. */
static mend_run *rebuild(mend_engine *E, const char *id, char *why, int whylen, int *unavailable) {
  if (unavailable) *unavailable = 0;
  json_t *row = mend_store_run(E->store, id);
  if (!row) { snprintf(why, (size_t)whylen, "%s", mend_store_errmsg(E->store)); return NULL; }
  const char *wf_name = json_string_value(json_object_get(row, "workflow"));
  const char *flagged = json_string_value(json_object_get(row, "unavailable"));
  json_t *steps = json_object_get(row, "steps");
  why[0] = 0;
  mend_workflow *wf = run_workflow(E, wf_name, json_string_value(json_object_get(row, "version")),
                                   why, whylen);
  if (!wf && unavailable) *unavailable = flagged ? 2 : 1;
  if (!wf) {
    json_decref(row);
    return NULL;
  }
  if ((int)json_array_size(steps) != wf->nsteps)
    snprintf(why, (size_t)whylen, "workflow \"%s\" now has %d steps, the run has %d", wf->name,
             wf->nsteps, (int)json_array_size(steps));
  for (int i = 0; !why[0] && i < wf->nsteps; i++) {
    const char *name = json_string_value(json_object_get(json_array_get(steps, (size_t)i), "name"));
    /* a version is its text: only a run without one, or a damaged row, gets here */
    if (!name || strcmp(name, wf->steps[i].name) != 0)
      snprintf(why, (size_t)whylen, "step #%d is \"%s\" in the run but \"%s\" in the workflow", i + 1,
               name ? name : "?", wf->steps[i].name);
  }
  if (why[0]) {
    json_decref(row);
    return NULL;
  }
  double last_at;
  long seq = mend_store_last_history(E->store, id, &last_at);
  if (seq < 0) {
    snprintf(why, (size_t)whylen, "%s", mend_store_errmsg(E->store));
    json_decref(row);
    return NULL;
  }
  /* It loads here: whoever looks for runs to take may take it again. */
  if (flagged && mend_store_set_unavailable(E->store, id, NULL)) mend__store_failed(E);
  mend_run *r = run_new(E, wf, id);
  r->history_seq = (int)seq;
  r->last_at = last_at;
  /* A virtual clock starts at the real time: one behind the run's own moves on to it. */
  mend_timers_not_before(&E->timers, last_at);
  r->cancel_asked = json_is_true(json_object_get(row, "cancel_requested"));
  mend_run_status_parse(json_string_value(json_object_get(row, "status")), &r->status);
  r->attention = json_is_true(json_object_get(row, "attention"));
  r->error = mend_dupstr(json_string_value(json_object_get(row, "error")));
  /* The reason is one of the engine's own static strings; map the stored text back to it. */
  static const char *const reasons[] = {"attempts_exhausted", "fatal", "severity_2", "compensable",
                                        "error", "severity_3", "compensation_failed", "cancelled"};
  const char *reason = json_string_value(json_object_get(row, "reason"));
  for (size_t k = 0; reason && k < sizeof reasons / sizeof *reasons; k++)
    if (strcmp(reason, reasons[k]) == 0) r->reason = reasons[k];
  /* A run going back always has a reason; one this mend does not know counts as an error. */
  if (!r->reason && strcmp(json_string_value(json_object_get(row, "status")), "running") != 0)
    r->reason = "error";
  mend_json_push(E->L, json_object_get(row, "input"));
  r->input_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  for (int i = 0; i < wf->nsteps; i++) {
    json_t *so = json_array_get(steps, (size_t)i);
    step_rt *st = &r->steps[i];
    step_status_of(so, "status", &st->status);
    st->attempts = (int)json_integer_value(json_object_get(so, "attempts"));
    st->comp_attempts = (int)json_integer_value(json_object_get(so, "comp_attempts"));
    st->custom_key = json_is_true(json_object_get(so, "custom_key"));
    if (st->custom_key) st->idem_key = mend_dupstr(json_string_value(json_object_get(so, "idempotency_key")));
    st->key_ready = st->custom_key || wf->steps[i].key_ref == LUA_NOREF;
    st->error = mend_dupstr(json_string_value(json_object_get(so, "error")));
    st->due = real_field(so, "due");
    st->slept = json_is_true(json_object_get(so, "slept"));
    /* A pending step with no attempt may be one listed from step_names, and a running one may
     * be only in history (write_step): their first write puts the whole row, which is right for
     * a row that exists too. */
    st->has_row = st->status != MEND_STEP_RUNNING &&
                  (st->status != MEND_STEP_PENDING || st->attempts > 0 || st->comp_attempts > 0);
    st->last_delay = real_field(so, "last_delay");
    json_t *result = json_object_get(so, "result");
    if (result) {
      st->result = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY);
      if (st->status == MEND_STEP_SUCCEEDED || st->status == MEND_STEP_COMPENSATING) set_result(r, i);
    }
    if (st->status == MEND_STEP_FAILED || st->status == MEND_STEP_COMPENSATION_FAILED) r->fail_step = i;
    st->compensate_self = st->status == MEND_STEP_FAILED && r->reason &&
      (strcmp(r->reason, "compensable") == 0 || strcmp(r->reason, "severity_2") == 0);
  }
  json_decref(row);
  return r;
}

/* A run rebuilt from the store: the step it is at, going forward (the first not succeeded) or
 * back (the one being compensated: steps without compensate stay succeeded when skipped, so
 * look past them). */
static void find_current_step(mend_run *r) {
  const mend_workflow *wf = r->wf;
  if (r->status == MEND_RUN_RUNNING) {
    r->cur = 0;
    while (r->cur < wf->nsteps && r->steps[r->cur].status == MEND_STEP_SUCCEEDED) r->cur++;
  } else {
    r->cur = wf->nsteps - 1;
    while (r->cur >= 0 && (!needs_compensation(r, r->cur) || wf->steps[r->cur].compensate_ref == LUA_NOREF))
      r->cur--;
  }
}

/* Sets a rebuilt run going from where the store says it stood. */
static void schedule_restored(mend_run *r) {
  const mend_workflow *wf = r->wf;
  double now = mend_engine_now(r->E);
  find_current_step(r);
  if (r->status == MEND_RUN_RUNNING) {
    step_rt *st = r->cur < wf->nsteps ? &r->steps[r->cur] : NULL;
    if (st && (st->status == MEND_STEP_RETRY_WAIT || st->status == MEND_STEP_BREAKER_OPEN ||
               st->status == MEND_STEP_SLEEPING)) {
      r->wait_kind = st->status == MEND_STEP_RETRY_WAIT ? WAIT_RETRY
                   : st->status == MEND_STEP_BREAKER_OPEN ? WAIT_BREAKER : WAIT_STEP_SLEEP;
      mend__arm(r, &r->wait, st->due > now ? st->due : now);   /* already due: now */
      return;
    }
  } else {
    step_rt *st = r->cur >= 0 ? &r->steps[r->cur] : NULL;
    if (st && st->status == MEND_STEP_COMPENSATING && st->due >= 0) {
      r->wait_kind = WAIT_COMP_RETRY;
      mend__arm(r, &r->wait, st->due > now ? st->due : now);
      return;
    }
  }
  mend__queue(r, ACT_ADVANCE);
}

static int cancel_now(mend_run *r, const char *who, char *err, int errlen);

/* The history says who carries the run on, and with which version of its workflow. */
static void recovered_entry(mend_run *r) {
  char detail[700];
  const mend_workflow *wf = r->wf;
  snprintf(detail, sizeof detail, "%s, version %s%s%s%s", r->E->owner,
           wf->version ? wf->version : "?", wf->source ? " (" : "", wf->source ? wf->source : "",
           wf->source ? ")" : "");
  mend__history(r, NULL, "recovered", NULL, mend_run_status_name(r->status), 0, NULL, -1, detail);
}

/* Sets a rebuilt run going, or cancels it when a cancel was asked for while nobody held it: the
 * request binds whoever takes the run next. */
static void carry_on(mend_run *r) {
  char err[300];
  if (r->cancel_asked && r->status == MEND_RUN_RUNNING) {
    find_current_step(r);
    if (cancel_now(r, "an operator (requested)", err, sizeof err) == 0) return;
    mend_engine_log_line(r->E, "warn", r->id, NULL, 0, "operator", err);
  }
  schedule_restored(r);
}

static double entry_time(mend_engine *E, const char *id);

/* A run whose version cannot be loaded here cannot progress: the store says why, once, with an
 * alert in its history; no worker takes it again before it looks for such runs on purpose
 * (poll_for_runs), and none alerts or logs again while the reason stands. */
static void flag_unavailable(mend_engine *E, const char *id, const char *why, int already) {
  if (already) {
    mend_engine_log_line(E, "debug", id, NULL, 0, "recover", why);
    return;
  }
  json_t *row = mend_store_run(E->store, id);
  const char *wf = row ? json_string_value(json_object_get(row, "workflow")) : NULL;
  json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:s, s:f}", "kind", "attention", "run_id", id,
                         "workflow", wf ? wf : "?", "reason", "workflow_unavailable", "error", why,
                         "at", mend_engine_now(E));
  json_decref(row);
  if (!ev) { breakdown(E, "out of memory flagging run %s", id); return; }
  mend_engine_log_line(E, "warn", id, NULL, 0, "recover", why);
  if (mend_store_set_unavailable(E->store, id, why)) mend__store_failed(E);
  char *text = json_dumps(ev, JSON_COMPACT);
  mend_history_rec h = {id, NULL, entry_time(E, id), "alert", NULL, NULL, 0, why, -1, text, 0};
  if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
  free(text);
  json_array_append_new(E->alerts, ev);   /* logged and sent once the batch commits */
}

static int restore(mend_engine *E, const char *id) {
  char why[700];
  int unavailable;
  mend_run *r = rebuild(E, id, why, sizeof why, &unavailable);
  if (!r) {
    if (unavailable) flag_unavailable(E, id, why, unavailable == 2);
    else mend_engine_log_line(E, "error", id, NULL, 0, "recover", why);
    if (mend_store_release(E->store, id, E->owner)) mend__store_failed(E);
    return -1;
  }
  recovered_entry(r);
  mend_engine_log_line(E, "info", r->id, NULL, 0, "recover", "resumed from the store");
  carry_on(r);
  return 0;
}

/* A lease of a worker on this host whose process is gone need not be waited out: a restart
 * after kill -9 takes its runs over at once. A reused pid only makes us wait for the lease. */
static int release_dead_local_owners(mend_engine *E) {
  /* It reads every unfinished run's owner: once a second is enough, not every poll, and less
   * often when that read is long (40 ms with 100k runs held), so that it costs the loop at
   * most a twentieth of its time. */
  double now = mend_real_now();
  if (now < E->next_dead_check) return 0;
  int released = 0;
  json_t *owners = mend_store_lease_holders(E->store, now);
  double took = mend_real_now() - now;
  E->next_dead_check = now + (took * 20 > 1.0 ? took * 20 : 1.0);
  if (!owners) { mend__store_failed(E); return 0; }
  const char *mine_host_end = strchr(E->owner, ':');
  size_t host_len = mine_host_end ? (size_t)(mine_host_end - E->owner) : 0;
  size_t i;
  json_t *o;
  json_array_foreach(owners, i, o) {
    const char *owner = json_string_value(o);
    if (!owner || strcmp(owner, E->owner) == 0 || strncmp(owner, E->owner, host_len + 1) != 0)
      continue;
    long pid = strtol(owner + host_len + 1, NULL, 10);
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
      if (mend_store_release_owner(E->store, owner)) { mend__store_failed(E); break; }
      mend_engine_log_line(E, "info", NULL, NULL, 0, "recover", owner);
      released++;
    }
  }
  json_decref(owners);
  return released;
}

/* Takes the unfinished runs that nobody holds and resumes them; with MEND_CLAIM_FREE in `how`,
 * not those of workers whose lease ran out. Returns how many. */
static int claim_and_restore(mend_engine *E, int limit, int how) {
  if (limit <= 0 || E->broken) return 0;
  release_dead_local_owners(E);
  if (E->broken) return 0;
  /* A serving worker takes the newest half first: new work must not wait behind a backlog
   * being recovered, and the oldest half keeps the backlog moving. */
  json_t *ids = mend_store_claim(E->store, E->owner, mend_real_now(), lease_until(E),
                                 E->serving ? (limit + 1) / 2 : limit,
                                 how | (E->serving ? MEND_CLAIM_NEWEST : 0));
  if (ids && E->serving && (int)json_array_size(ids) < limit) {
    json_t *more = mend_store_claim(E->store, E->owner, mend_real_now(), lease_until(E),
                                    limit - (int)json_array_size(ids), how);
    if (more) json_array_extend(ids, more);
    json_decref(more);
    if (!more) { json_decref(ids); ids = NULL; }
  }
  if (!ids) { mend__store_failed(E); return 0; }
  size_t i;
  json_t *id;
  int n = 0;
  /* The claim is durable before any of these runs acts: each is queued behind the batch that
   * holds it. With nothing claimed the write lock must not wait for a turn: commit now. */
  if (json_array_size(ids) == 0) {
    if (mend_store_commit(E->store)) mend__store_failed(E);
    json_decref(ids);
    return 0;
  }
  mend__kick(E);
  check_fence(E);   /* a run we lost and now claim again must be let go before it returns */
  if (E->fence_was_late) {
    /* One this engine still has in memory from before a stall (another worker took it, then
     * gave it back) is stale: the store's copy is the run now. */
    id_list claimed = {0};
    json_array_foreach(ids, i, id) add_id(&claimed, json_string_value(id));
    if (claimed.oom) breakdown(E, "out of memory keeping track of lost leases");
    else let_go(E, &claimed.set, "claimed again after a stall: the stored run replaces this copy");
    mend_idset_clear(&claimed.set);
  }
  json_array_foreach(ids, i, id) n += restore(E, json_string_value(id)) == 0;
  json_decref(ids);
  return n;
}

int mend_engine_recover_runs(mend_engine *E, int limit) {
  int n = claim_and_restore(E, limit > 0 ? limit : 1 << 30, MEND_CLAIM_UNAVAILABLE);
  return E->broken ? -1 : n;
}

/* ---------------------------------------------------------------- serving */

static void reload_breakers(mend_engine *E);
static void take_cancel_requests(mend_engine *E);

/* ---- checkpoints, off the loop thread: a commit never stalls on one */

/* Past this many WAL frames (about 32 MiB) passive checkpoints are not keeping up, and the loop
 * lets the WAL start over (wal_catch_up): two fdatasyncs while no commit can happen, which cost
 * more the more WAL is waiting to be written back. At 64 MiB they were 10 and 26 ms, every
 * 0.6 s at 50k steps/s (process durability), and p99 step latency 8.7 ms over 9 s; at 32 MiB,
 * 4.1 ms, with W1 and W3 unchanged (at 16 MiB bursts slowed: W3 lateness +30%). */
#define WAL_FRAMES_LIMIT 8192
/* A checkpoint starts each time the WAL grew by this many frames (about 4 MiB), besides the
 * one a second. A second's worth of small commits (60 MB of WAL at 25k steps/s) copied and
 * synced at once held every commit behind it for 10-30 ms: the database's sync and the WAL's
 * share the disk and ext4's journal (W1p p99 6-10 ms; 2.2-3.3 ms at 500-1000 frames). */
#define CHECKPOINT_FRAMES 1000

/* After a commit: a checkpoint if the WAL grew enough since the last one began. */
static void checkpoint_if_grown(mend_engine *E) {
  if (!E->checkpoint_timer) return;   /* no file, or no second connection for checkpoints */
  int frames = mend_store_wal_frames(E->store);
  if (frames < E->checkpoint_from) E->checkpoint_from = 0;   /* the WAL started over */
  if (E->checkpointing || frames - E->checkpoint_from < CHECKPOINT_FRAMES) return;
  E->checkpoint_from = frames;
  checkpoint_now(E);
}

static void checkpoint_on_thread(uv_work_t *w) {
  mend_engine *E = w->data;
  E->wal_frames = 0;
  E->wal_copied = mend_store_checkpoint(E->store, &E->wal_frames);
  /* A long WAL is copied again at once, a few times: each pass copies only what was committed
   * during the one before, so what the loop copies itself (end_batch) is a few milliseconds of
   * writes, not the second's worth that one pass leaves (a 72 ms stall of the loop in W4). */
  for (int pass = 0; pass < 3 && E->wal_frames > WAL_FRAMES_LIMIT; pass++) {
    int before = E->wal_frames;
    E->wal_copied = mend_store_checkpoint(E->store, &E->wal_frames);
    if (E->wal_frames == before) break;   /* nothing new since: the loop has nothing to copy */
  }
}

static void checkpoint_done(uv_work_t *w, int status) {
  (void)status;
  mend_engine *E = w->data;
  E->checkpointing = 0;
  /* The WAL starts over at the first write after a checkpoint that left nothing behind.
   * Under steady writes there is no such moment, and the WAL would grow without end (to GBs
   * in W4 with 1M runs): the loop copies the last few frames itself between two batches. */
  if (E->wal_frames > WAL_FRAMES_LIMIT) E->wal_catch_up = 1;
}

static void checkpoint_now(mend_engine *E) {
  if (E->checkpointing || E->broken || E->destroying) return;
  E->checkpointing = 1;
  E->checkpoint_work.data = E;
  if (uv_queue_work(E->loop, &E->checkpoint_work, checkpoint_on_thread, checkpoint_done))
    E->checkpointing = 0;
}

static void start_checkpoint(uv_timer_t *t) { checkpoint_now(t->data); }

static void renew_leases(uv_timer_t *t) { renew_now(t->data); }

/* The quick look every poll; the thorough one (it walks every run held: 27 ms with 100k) at the
 * first poll, then at most once in 30 s and in a hundredth of the loop's time. */
static int claimable(mend_engine *E, double now) {
  if (now < E->next_thorough_look) return mend_store_claimable(E->store, E->owner, now, 0);
  double began = mend_real_now();   /* not `now`: the poll may have waited for the writer */
  int found = mend_store_claimable(E->store, E->owner, now, 1);
  double took = mend_real_now() - began;
  E->next_thorough_look = now + (took * 100 > 30.0 ? took * 100 : 30.0);
  return found;
}

static void poll_for_runs(uv_timer_t *t) {
  mend_engine *E = t->data;
  if (E->draining || E->broken) return;
  /* No look for work while another process holds the lock: it would wait for the lock too. */
  if (mend_store_locked(E->store)) {
    uv_timer_start(t, poll_for_runs, E->poll_ms, 0);
    return;
  }
  double now = mend_real_now();
  if (now >= E->next_reload) {
    E->next_reload = now + 1.0;
    reload_breakers(E);
    take_cancel_requests(E);
    if (E->broken) return;
  }
  int room = E->max_in_flight > 0 ? E->max_in_flight - E->in_flight : 1000;
  if (room > 1000) room = 1000;
  /* A dead worker's runs must become claimable first: they are not, until given back. The
   * look of the read-only connection cannot see that yet. */
  int released = release_dead_local_owners(E);
  if (!E->broken && room > 0) {
    /* Runs given back just now are nobody's, in a batch the look cannot see yet. */
    int found = claimable(E, now) | (released ? MEND_CLAIMABLE_FREE : 0);
    /* Runs whose version no worker could load: at the first poll (this worker may load
     * them) and then now and then (a module they require may be back), never every poll. */
    int unavailable = now >= E->next_unavailable_look ? MEND_CLAIM_UNAVAILABLE : 0;
    if (unavailable) {
      E->next_unavailable_look = now + UNAVAILABLE_LOOK_SECONDS;
      found |= MEND_CLAIMABLE_FREE;
    }
    /* Runs nobody holds are taken without walking the runs others hold, which is what a
     * claim of every kind costs: only a lease that ran out asks for that. */
    if (found)
      claim_and_restore(E, room, (found & MEND_CLAIMABLE_GONE ? 0 : MEND_CLAIM_FREE) | unavailable);
  }
  /* The next poll is an interval after this one ends, not after it began: a poll that takes
   * longer than the interval must not run back to back and leave the loop no turn between. */
  if (!E->broken) uv_timer_start(t, poll_for_runs, E->poll_ms, 0);
}

static void on_signal(uv_signal_t *h, int signum) {
  mend_engine *E = h->data;
  mend_engine_log_line(E, "info", NULL, NULL, 0, "worker",
                       signum == SIGINT ? "SIGINT: finishing attempts in flight" : "SIGTERM: finishing attempts in flight");
  mend_engine_stop(E);
}

void mend_engine_stop(mend_engine *E) {
  if (E->draining) return;
  E->draining = 1;
  E->grace_deadline = mend_real_now() + E->cfg.grace_seconds;
  if (E->poll_timer) uv_timer_stop(E->poll_timer);
  mend__kick(E);
}

static void close_and_free(uv_handle_t *h) { free(h); }

int mend_engine_serve(mend_engine *E, double poll_seconds, int max_in_flight) {
  E->serving = 1;
  E->max_in_flight = max_in_flight;
  E->poll_timer = malloc(sizeof *E->poll_timer);
  uv_timer_init(E->loop, E->poll_timer);
  E->poll_timer->data = E;
  E->poll_ms = (uint64_t)(poll_seconds * 1000.0);
  if (E->poll_ms < 1) E->poll_ms = 1;
  uv_timer_start(E->poll_timer, poll_for_runs, 0, 0);   /* re-armed by each poll */
  int sigs[2] = {SIGINT, SIGTERM};
  for (int k = 0; k < 2; k++) {
    E->signals[k] = malloc(sizeof *E->signals[k]);
    uv_signal_init(E->loop, E->signals[k]);
    E->signals[k]->data = E;
    uv_signal_start(E->signals[k], on_signal, sigs[k]);
  }
  E->auto_advance = 1;
  while (!E->broken) {
    if (E->draining && (E->attempts == 0 || mend_real_now() >= E->grace_deadline)) break;
    loop_once(E);
  }
  E->auto_advance = 0;
  /* Give back every run still held so that another worker can take it at once. */
  if (!E->broken) {
    for (mend_run *r = E->runs; r; r = r->next)
      if (mend_store_release(E->store, r->id, E->owner)) { mend__store_failed(E); break; }
    if (!E->broken && mend_store_commit(E->store)) mend__store_failed(E);
  }
  uv_close((uv_handle_t *)E->poll_timer, close_and_free);
  E->poll_timer = NULL;
  for (int k = 0; k < 2; k++) {
    uv_close((uv_handle_t *)E->signals[k], close_and_free);
    E->signals[k] = NULL;
  }
  E->serving = 0;
  return E->broken ? -1 : 0;
}

/* ---------------------------------------------------------------- repairs by people */

static mend_run *find_run(mend_engine *E, const char *id) {
  for (mend_run *r = E->runs; r; r = r->next)
    if (!r->lost && strcmp(r->id, id) == 0) return r;   /* a lost copy is no longer the run */
  return NULL;
}

/* The time for a row of a run this engine does not hold: now, or its last row's if later. */
static double entry_time(mend_engine *E, const char *id) {
  double now = mend_engine_now(E), last = -1;
  if (mend_store_last_history(E->store, id, &last) < 0) mend__store_failed(E);
  return last > now ? last : now;
}

/* r: the run, if this engine holds it (it numbers the row); else NULL and the id. */
static void operator_entry(mend_engine *E, mend_run *r, const char *id, const char *op,
                           const char *who, const char *note) {
  char detail[1200];
  snprintf(detail, sizeof detail, "%s by %s%s%s", op, who ? who : "?", note ? ": " : "", note ? note : "");
  mend_history_rec h = {id, NULL, r ? history_time(r) : entry_time(E, id), "operator", NULL, NULL,
                        0, NULL, -1, detail, r ? ++r->history_seq : 0};
  if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
  mend_engine_log_line(E, "info", id, NULL, 0, "operator", detail);
}

/* Reads a run's status and reason from the store; 0, or -1 with "no run <id>" in err. */
static int stored_status(mend_engine *E, const char *id, char *status, char *reason, int len,
                         char *err, int errlen) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  const char *st = json_string_value(json_object_get(row, "status"));
  const char *why = json_string_value(json_object_get(row, "reason"));
  snprintf(status, (size_t)len, "%s", st ? st : "");
  snprintf(reason, (size_t)len, "%s", why ? why : "");
  json_decref(row);
  return 0;
}

/* 1 when `owner` (host:pid:tag) is another engine that holds its runs now: its lease lasts
 * and, on this host, its process is there (one killed leaves a lease nobody will renew). */
static int holder_live(const mend_engine *E, const char *owner, double until) {
  if (!owner[0] || strcmp(owner, E->owner) == 0 || until < mend_real_now()) return 0;
  const char *host_end = strchr(E->owner, ':');
  size_t host_len = host_end ? (size_t)(host_end - E->owner) + 1 : 0;
  if (host_len && strncmp(owner, E->owner, host_len) == 0) {
    long pid = strtol(owner + host_len, NULL, 10);
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
  }
  return 1;
}

int mend_engine_holder(mend_engine *E, const char *id, char *owner, int len) {
  double until;
  int found = mend_store_owner(E->store, id, owner, len, &until);
  if (found < 0) return mend_errorf(owner, len, "%s", mend_store_errmsg(E->store));
  if (found == 0) owner[0] = 0;
  if (found && strcmp(owner, E->owner) == 0) return find_run(E, id) != NULL;   /* this engine */
  return found && holder_live(E, owner, until);
}

/* Brings a run that no live engine holds into this engine, holding its lease. */
static mend_run *take_over(mend_engine *E, const char *id, char *err, int errlen) {
  char owner[128];
  double until;
  if (mend_store_owner(E->store, id, owner, sizeof owner, &until) < 0) {
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return NULL;
  }
  if (holder_live(E, owner, until)) {
    mend_errorf(err, errlen, "run %s is held by worker %s (lease for %.0f s more)", id, owner,
           until - mend_real_now());
    return NULL;
  }
  mend_run *r = rebuild(E, id, err, errlen, NULL);
  if (!r) return NULL;
  find_current_step(r);   /* a cancel acts on it */
  if (mend_store_take(E->store, id, E->owner, lease_until(E))) mend__store_failed(E);
  return r;
}

/* Cancels a run held in memory: the attempt in flight is abandoned, the steps done are
 * compensated in reverse. */
static void unthrottle(mend_run *r) {
  run_fifo *f = r->waiting_in;
  if (!f) return;
  for (mend_run **p = &f->head, *prev = NULL; *p; prev = *p, p = &(*p)->tnext) {
    if (*p != r) continue;
    *p = r->tnext;
    if (f->tail == r) f->tail = prev;
    break;
  }
  r->waiting_in = NULL;
}

static int cancel_now(mend_run *r, const char *who, char *err, int errlen) {
  if (r->status != MEND_RUN_RUNNING)
    return mend_errorf(err, errlen, "run %s is %s: only a running run can be cancelled", r->id,
                  mend_run_status_name(r->status));
  mend_engine *E = r->E;
  unthrottle(r);
  int i = r->cur;
  step_rt *st = i < r->wf->nsteps ? &r->steps[i] : NULL;
  int was_running = r->co != NULL || (st && st->status == MEND_STEP_RUNNING);
  give_back(r, r->queued, was_running);
  mend__end_attempt(r);
  mend_timer_disarm(&E->timers, &r->wait);
  r->wait_kind = WAIT_NONE;
  operator_entry(E, r, r->id, "cancel", who, NULL);
  char msg[300];
  snprintf(msg, sizeof msg, "cancelled by %s", who ? who : "?");
  if (st && st->status == MEND_STEP_RUNNING) step_to(r, i, MEND_STEP_FAILED, msg, -1, NULL);
  else if (st && st->status != MEND_STEP_PENDING) step_to(r, i, MEND_STEP_PENDING, NULL, -1, NULL);
  mend__set_str(&r->error, msg);
  r->reason = "cancelled";
  r->fail_step = i;
  int anything = 0;
  for (int j = 0; j < i && j < r->wf->nsteps; j++) anything |= r->steps[j].status == MEND_STEP_SUCCEEDED;
  if (!anything) {
    run_to(r, MEND_RUN_FAILED);
    mend__queue(r, ACT_FINISH);
  } else {
    run_to(r, MEND_RUN_COMPENSATING);
    r->cur = i - 1;
    mend__queue(r, ACT_ADVANCE);
  }
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

int mend_engine_cancel_run(mend_engine *E, const char *id, const char *who, char *err, int errlen) {
  mend_run *r = find_run(E, id);
  if (r) return cancel_now(r, who, err, errlen);
  char status[64], reason[64];
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "running") != 0)
    return mend_errorf(err, errlen, "run %s is %s: only a running run can be cancelled", id, status);
  char owner[128];
  int live = mend_engine_holder(E, id, owner, sizeof owner);
  if (live < 0) return mend_errorf(err, errlen, "%s", owner);
  char why[400] = "";
  r = live ? NULL : take_over(E, id, why, sizeof why);
  if (!r) {
    /* Held by a live worker, which cancels at its next poll; or not to be rebuilt here (its
     * workflow is not loaded): whoever takes it next cancels it (carry_on). */
    if (mend_store_request_cancel(E->store, id)) mend__store_failed(E);
    mend_store_repairing(E->store, 1);   /* a note in its history, not a transition */
    operator_entry(E, NULL, id, "cancel requested", who, live ? NULL : why);
    mend_store_repairing(E->store, 0);
    if (commit_now(E)) return mend_errorf(err, errlen, "%s", E->errmsg);
    if (!live) snprintf(err, (size_t)errlen, "%s", why);
    return live ? 1 : 2;
  }
  return cancel_now(r, who, err, errlen);
}

int mend_engine_resume_run(mend_engine *E, const char *id, char *err, int errlen) {
  if (find_run(E, id)) return 0;
  char status[64], reason[64];
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "running") != 0 && strcmp(status, "compensating") != 0)
    return mend_errorf(err, errlen, "run %s is %s: it has ended", id, status);
  int live = mend_engine_holder(E, id, err, errlen);
  if (live) return live < 0 ? -1 : 1;   /* err: the holder */
  mend_run *r = take_over(E, id, err, errlen);
  if (!r) return -1;
  recovered_entry(r);
  mend_engine_log_line(E, "info", r->id, NULL, 0, "recover", "resumed from the store");
  carry_on(r);
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

int mend_engine_dlq_retry(mend_engine *E, const char *id, const char *who, char *err, int errlen) {
  char status[64], reason[64];
  if (find_run(E, id)) return mend_errorf(err, errlen, "run %s is in flight: it is not in the dead-letter queue", id);
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "needs_attention") != 0)
    return mend_errorf(err, errlen, "run %s is %s: only a run in the dead-letter queue can be retried", id, status);
  if (strcmp(reason, "attempts_exhausted") == 0)
    return mend_errorf(err, errlen, "run %s was compensated after its attempts ran out: there is nothing left to "
                  "resume; start a new run, or resolve this one with a note", id);
  mend_run *r = take_over(E, id, err, errlen);
  if (!r) return -1;
  /* The step to resume from, found before anything is written. */
  int comp = strcmp(reason, "compensation_failed") == 0;
  int i = r->wf->nsteps - 1;
  if (comp) while (i >= 0 && r->steps[i].status != MEND_STEP_COMPENSATION_FAILED) i--;
  else i = r->fail_step;
  if (i < 0) {
    run_free(r);
    return mend_errorf(err, errlen, "run %s: no step is %s", id, comp ? "compensation_failed" : "failed");
  }
  operator_entry(E, r, id, "dlq retry", who, NULL);
  if (mend_store_dlq_remove(E->store, id)) mend__store_failed(E);
  if (comp) {
    r->steps[i].comp_attempts = 0;   /* fresh attempts */
    r->steps[i].last_delay = -1;
    run_to(r, MEND_RUN_COMPENSATING);
  } else {   /* severity 3: the failed step again, with fresh attempts */
    r->steps[i].attempts = 0;
    r->steps[i].last_delay = -1;
    r->steps[i].compensate_self = 0;
    mend__set_str(&r->steps[i].error, NULL);
    step_to(r, i, MEND_STEP_PENDING, NULL, -1, "retried from the dead-letter queue");
    r->reason = NULL;
    mend__set_str(&r->error, NULL);
    r->fail_step = -1;
    run_to(r, MEND_RUN_RUNNING);
  }
  r->cur = i;
  mend__queue(r, ACT_ADVANCE);
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

/* A run that cannot progress (no engine can load its version) and that no live worker holds:
 * it goes to the dead-letter queue's end state as a dead letter would, running ->
 * needs_attention -> resolved, with nothing of its code run. */
static int resolve_unavailable(mend_engine *E, const char *id, const char *who, const char *note,
                               char *err, int errlen) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  const char *st = json_string_value(json_object_get(row, "status"));
  const char *why = json_string_value(json_object_get(row, "unavailable"));
  mend_run_status from;
  char owner[128];
  int live = 0;
  if (!st || mend_run_status_parse(st, &from) ||
      !mend_run_transition_ok(from, MEND_RUN_NEEDS_ATTENTION) || !why ||
      (live = mend_engine_holder(E, id, owner, sizeof owner)) != 0) {
    if (live > 0) mend_errorf(err, errlen, "run %s is held by worker %s, which can carry it on", id, owner);
    else if (live < 0) mend_errorf(err, errlen, "%s", owner);
    else mend_errorf(err, errlen, "run %s is %s: only a run in the dead-letter queue, or one that cannot "
                     "progress (mend runs --attention), can be resolved", id, st ? st : "?");
    json_decref(row);
    return -1;
  }
  double now = entry_time(E, id);
  mend_store_repairing(E->store, 1);   /* nobody holds it: no lease to fence */
  if (mend_store_update_run(E->store, id, "resolved", why, 0, now, "workflow_unavailable") ||
      mend_store_set_unavailable(E->store, id, NULL))
    mend__store_failed(E);
  mend_history_rec a = {id, NULL, now, "run", st, "needs_attention", 0, why, -1, "workflow_unavailable", 0};
  mend_history_rec b = {id, NULL, now, "run", "needs_attention", "resolved", 0, NULL, -1, note, 0};
  if (mend_store_append_history(E->store, &a) || mend_store_append_history(E->store, &b)) mend__store_failed(E);
  operator_entry(E, NULL, id, "dlq resolve", who, note);
  mend_store_repairing(E->store, 0);
  json_decref(row);
  return commit_now(E) ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

int mend_engine_upgrade_run(mend_engine *E, const char *id, const char *version, const char *who,
                            char *err, int errlen) {
  if (find_run(E, id)) return mend_errorf(err, errlen, "run %s is in flight here", id);
  json_t *row = mend_store_run(E->store, id);
  if (!row) return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  int rc = -1;
  const char *st = json_string_value(json_object_get(row, "status"));
  const char *name = json_string_value(json_object_get(row, "workflow"));
  const char *was = json_string_value(json_object_get(row, "version"));
  json_t *steps = json_object_get(row, "steps");
  char owner[128], lerr[600];
  mend_workflow *wf = NULL;
  int live = 0;
  if (!st || (strcmp(st, "running") != 0 && strcmp(st, "compensating") != 0)) {
    mend_errorf(err, errlen, "run %s is %s: only an unfinished run can be upgraded", id, st ? st : "?");
  } else if (was && strcmp(was, version) == 0) {
    rc = 1;   /* on that version already */
  } else if ((live = mend_engine_holder(E, id, owner, sizeof owner)) != 0) {
    if (live < 0) mend_errorf(err, errlen, "%s", owner);
    else mend_errorf(err, errlen, "run %s is held by worker %s, which runs it with the version it has: "
                     "stop that worker first (it gives its runs back on SIGTERM), then upgrade", id, owner);
  } else if (!name || !(wf = mend_engine_load_version(E, name, version, lerr, sizeof lerr))) {
    mend_errorf(err, errlen, "version %s of workflow %s cannot be loaded: %s", version,
                name ? name : "?", lerr);
  } else {
    /* The steps the run has begun keep their rows, results and keys: the new version must
     * have the same ones, in the same places. */
    int begun = -1, n = (int)json_array_size(steps);
    for (int i = 0; i < n; i++) {
      const char *s_st = json_string_value(json_object_get(json_array_get(steps, (size_t)i), "status"));
      if (s_st && strcmp(s_st, "pending") != 0) begun = i;
    }
    int bad = 0;
    for (int i = 0; !bad && i <= begun; i++) {
      const char *sn = json_string_value(json_object_get(json_array_get(steps, (size_t)i), "name"));
      if (i >= wf->nsteps)
        bad = mend_errorf(err, errlen, "refused: step #%d \"%s\" has begun in run %s, but version %s of %s "
                          "has only %d step%s", i + 1, sn ? sn : "?", id, wf->version, name,
                          wf->nsteps, wf->nsteps == 1 ? "" : "s");
      else if (!sn || strcmp(sn, wf->steps[i].name) != 0)
        bad = mend_errorf(err, errlen, "refused: step #%d is \"%s\" in run %s but \"%s\" in version %s of "
                          "%s: a new version must keep the steps a run has begun, in their order",
                          i + 1, sn ? sn : "?", id, wf->steps[i].name, wf->version, name);
    }
    if (!bad) {
      long long vid;
      mend_run_rec rec = {.workflow = wf->name, .version = wf->version, .source = wf->source,
                          .step_names = wf->step_names, .script = wf->script,
                          .created = mend_engine_now(E)};
      char note[400];
      snprintf(note, sizeof note, "version %s -> %s (%s)", was ? was : "?", wf->version,
               wf->source ? wf->source : "?");
      mend_store_repairing(E->store, 1);   /* nobody holds it: no lease to fence */
      if (mend_store_version_number(E->store, &rec, &vid) ||
          mend_store_move_run(E->store, id, vid, begun + 1))
        mend__store_failed(E);
      operator_entry(E, NULL, id, "upgrade", who, note);
      mend_store_repairing(E->store, 0);
      rc = commit_now(E) ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
    }
  }
  json_decref(row);
  return rc;
}

int mend_engine_resolve(mend_engine *E, const char *id, const char *who, const char *note,
                        char *err, int errlen) {
  char status[64], reason[64];
  if (!note || !*note) return mend_errorf(err, errlen, "resolving a run needs a note saying what was done");
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "needs_attention") != 0)
    return resolve_unavailable(E, id, who, note, err, errlen);
  double now = entry_time(E, id);
  json_t *row = mend_store_run(E->store, id);
  const char *error = row ? json_string_value(json_object_get(row, "error")) : NULL;
  int attention = row ? json_is_true(json_object_get(row, "attention")) : 0;
  mend_store_repairing(E->store, 1);   /* a dead letter is nobody's: no lease to fence */
  if (mend_store_update_run(E->store, id, "resolved", error, attention, now, reason)) mend__store_failed(E);
  json_decref(row);
  mend_history_rec h = {id, NULL, now, "run", "needs_attention", "resolved", 0, NULL, -1, note, 0};
  if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
  operator_entry(E, NULL, id, "dlq resolve", who, note);
  mend_store_repairing(E->store, 0);
  if (mend_store_dlq_remove(E->store, id)) mend__store_failed(E);
  if (commit_now(E)) return mend_errorf(err, errlen, "%s", E->errmsg);
  return 0;
}

int mend_engine_breaker_set(mend_engine *E, const char *key, const char *op, double seconds,
                            const char *who, char *err, int errlen) {
  struct mend_breaker_slot *s = NULL;
  for (struct mend_breaker_slot *x = E->breakers; x; x = x->next)
    if (strcmp(x->key, key) == 0) s = x;
  mend_breaker b;
  int found = s ? 1 : mend_store_get_breaker(E->store, key, &b);
  if (found < 0) return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  if (!found) return mend_errorf(err, errlen, "no breaker %s (a breaker exists once a step using it has run)", key);
  if (s) b = s->b;
  double now = mend_engine_now(E);
  mend_breaker_state before = b.state;
  if (strcmp(op, "reset") == 0 || strcmp(op, "close") == 0) {
    mend_breaker_init(&b);
  } else if (strcmp(op, "open") == 0) {
    b.state = MEND_BREAKER_OPEN;
    b.failures = b.successes = b.probes = 0;
    b.opened_at = now;
    b.open_until = now + (seconds > 0 ? seconds : s ? s->p.open_seconds : 30);
  } else {
    return mend_errorf(err, errlen, "breaker operation must be reset, open or close, got %s", op);
  }
  if (s) s->b = b;
  if (mend_store_put_breaker(E->store, key, &b, now)) mend__store_failed(E);
  char detail[200];
  snprintf(detail, sizeof detail, "%s -> %s", mend_breaker_state_name(before), mend_breaker_state_name(b.state));
  if (mend_store_audit(E->store, now, who, op, key, detail)) mend__store_failed(E);
  if (commit_now(E)) return mend_errorf(err, errlen, "%s", E->errmsg);
  return 0;
}

/* Other processes change breakers (manual overrides, other workers): a serving engine reads
 * them back now and then. */
static void reload_breakers(mend_engine *E) {
  for (struct mend_breaker_slot *s = E->breakers; s; s = s->next) {
    mend_breaker b;
    if (mend_store_get_breaker(E->store, s->key, &b) != 1) continue;
    b.probes = b.state == s->b.state ? s->b.probes : 0;
    s->b = b;
  }
}

static void take_cancel_requests(mend_engine *E) {
  json_t *ids = mend_store_cancel_requests(E->store, E->owner);
  if (!ids) { mend__store_failed(E); return; }
  size_t i;
  json_t *id;
  json_array_foreach(ids, i, id) {
    mend_run *r = find_run(E, json_string_value(id));
    char err[300];
    if (r && cancel_now(r, "an operator (requested)", err, sizeof err))
      mend_engine_log_line(E, "warn", r->id, NULL, 0, "operator", err);
  }
  json_decref(ids);
}

/* ---------------------------------------------------------------- workflows */

static mend_workflow *adopt(mend_engine *E, mend_workflow *wf) {
  if (!wf) return NULL;
  for (int i = 0; i < wf->nsteps; i++)
    wf->steps[i].slot = breaker_slot(E, wf->steps[i].breaker_key, &wf->steps[i].breaker);
  /* Newest first: a reloaded workflow serves new runs; the old one stays for runs in flight. */
  wf->next = E->workflows;
  E->workflows = wf;
  return wf;
}

/* Runs a workflow's text (its top level, under the engine's limits and, in a sandboxed engine,
 * in an environment of its own) and checks the definition it returns. `path` names it in
 * messages and is where its `require` looks in a sandbox. */
static mend_workflow *load_text(mend_engine *E, const char *text, size_t len, const char *path,
                                const char *version, char *err, int errlen) {
  lua_State *L = E->L;
  int top = lua_gettop(L);
  lua_pushfstring(L, "@%s", path);
  int status = luaL_loadbufferx(L, text, len, lua_tostring(L, -1), "t");
  if (status == LUA_OK && E->cfg.sandbox && E->owned_state) {
    const char *slash = strrchr(path, '/');
    lua_pushlstring(L, path, slash ? (size_t)(slash - path) : 0);
    mend_sandbox_env(L, lua_tostring(L, -1), E->cfg.lua_path);
    lua_setupvalue(L, -3, 1);
    lua_pop(L, 1);
  }
  if (status == LUA_OK) {
    mend_limits lim;
    mend_limits_init(&lim, "workflow file", E->cfg.instruction_budget, CALL_SECONDS);
    status = mend__guarded_pcall(E, &lim, 0, 1);
    if (status != LUA_OK && lim.tripped) {
      char why[200];
      mend_errorf(err, errlen, "%s: %s while it loaded", path, mend_limits_message(&lim, why, sizeof why));
      lua_settop(L, top);
      return NULL;
    }
  }
  if (status != LUA_OK) {
    char text_of[600];
    if (status == LUA_ERRMEM && E->owned_state && E->cfg.memory_limit > 0)
      mend_errorf(err, errlen, "%s: exceeded the memory limit (%zu bytes) while it loaded", path,
                  E->cfg.memory_limit);
    else   /* Lua's message already starts with the file name and line */
      mend_errorf(err, errlen, "%s", mend__describe(E, L, -1, text_of, sizeof text_of));
    lua_settop(L, top);
    return NULL;
  }
  mend_workflow *wf = mend_workflow_from_table(L, -1, path, version, err, errlen);
  lua_settop(L, top);
  /* A script with a NUL byte is not kept: it could not come back whole as text. */
  if (wf && memchr(text, 0, len) == NULL && !(wf->script = malloc(len + 1))) {
    mend_errorf(err, errlen, "%s: out of memory", path);
    mend_workflow_free(L, wf);
    return NULL;
  }
  if (wf && wf->script) {
    memcpy(wf->script, text, len);
    wf->script[len] = 0;
  }
  return wf;
}

mend_workflow *mend_engine_load_version(mend_engine *E, const char *name, const char *version,
                                        char *err, int errlen) {
  for (mend_workflow *wf = E->workflows; wf; wf = wf->next)
    if (strcmp(wf->name, name) == 0 && wf->version && strcmp(wf->version, version) == 0) return wf;
  char *source = NULL;
  char *text = mend_store_version_script(E->store, name, version, &source);
  if (!text) {
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return NULL;
  }
  size_t len = strlen(text);
  char v[20];
  mend_workflow_version_of(text, len, v);
  mend_workflow *wf = load_text(E, text, len, source ? source : name, v, err, errlen);
  free(text);
  free(source);
  if (wf && strcmp(wf->name, name) != 0) {
    mend_errorf(err, errlen, "the script kept for %s version %s names workflow \"%s\"", name,
                version, wf->name);
    mend_workflow_free(E->L, wf);
    return NULL;
  }
  if (!wf || !mend_engine_workflow(E, name)) return adopt(E, wf);
  /* An older version: it carries its runs on, and the newest one loaded still serves new runs. */
  mend_workflow **tail = &E->workflows;
  while (*tail) tail = &(*tail)->next;
  adopt(E, wf);
  E->workflows = wf->next;
  wf->next = NULL;
  *tail = wf;
  return wf;
}

mend_workflow *mend_engine_load_file(mend_engine *E, const char *path, char *err, int errlen) {
  size_t len;
  char *text = mend_workflow_read(path, &len, err, errlen);
  if (!text) return NULL;
  char version[20];
  mend_workflow_version_of(text, len, version);
  mend_workflow *wf = load_text(E, text, len, path, version, err, errlen);
  free(text);
  return adopt(E, wf);
}

mend_workflow *mend_engine_register(mend_engine *E, int idx, char *err, int errlen) {
  return adopt(E, mend_workflow_from_table(E->L, idx, "register", NULL, err, errlen));
}

mend_workflow *mend_engine_workflow(mend_engine *E, const char *name) {
  for (mend_workflow *wf = E->workflows; wf; wf = wf->next)
    if (strcmp(wf->name, name) == 0) return wf;
  return NULL;
}

/* ---------------------------------------------------------------- life */

/* The allocator of an engine's own Lua state: step code is held to cfg.memory_limit, the
 * engine's own bookkeeping is not (running out there would abort the host). */
static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  mend_engine *E = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    E->mem_used -= old;
    return NULL;
  }
  if (E->limit_memory && nsize > old && E->mem_used + (nsize - old) > E->mem_limit) return NULL;
  void *p = realloc(ptr, nsize);
  if (p) E->mem_used = E->mem_used - old + nsize;
  return p;
}

void *mend_engine_set_panic_exit(mend_engine *E, void *jmpbuf) {
  void *before = E->panic_exit;
  E->panic_exit = jmpbuf;
  return before;
}

int mend_engine_panicked(const mend_engine *E) { return E->panicked; }

/* An error outside every protected call of an engine's own state: Lua would abort the process
 * when this returns, so it goes back to the C API's entry point instead, the engine broken. */
static int on_panic(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  mend_engine *E = ud;
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(not a string)";
  breakdown(E, "mend: an error escaped every protected call of the engine's Lua state (a bug of "
            "mend's, or memory running out): %s", msg);
  if (E->panic_exit) {
    E->panicked = 1;
    longjmp(*(jmp_buf *)E->panic_exit, 1);
  }
  fprintf(stderr, "%s\n", E->errmsg);
  return 0;
}

mend_engine *mend_engine_create(lua_State *host, const mend_engine_config *cfg, char *err, int errlen) {
  mend_engine *E = calloc(1, sizeof *E);
  if (!E) { snprintf(err, (size_t)errlen, "out of memory"); return NULL; }
  E->cfg = *cfg;
  if (!E->cfg.log_level) E->cfg.log_level = MEND_LOG_INFO;
  E->cfg.alert_command = cfg->alert_command ? mend_dupstr(cfg->alert_command) : NULL;
  if (!host) {
    E->mem_limit = cfg->memory_limit > 0 ? cfg->memory_limit : (size_t)-1;
    host = E->owned_state = lua_newstate(limited_alloc, E);
    if (!host) { free(E); snprintf(err, (size_t)errlen, "out of memory"); return NULL; }
    luaL_openlibs(host);
    luaL_requiref(host, "mend.core", mend_lua_open, 0);
    lua_pop(host, 1);
    if (cfg->lua_path) {
      lua_getglobal(host, "package");
      lua_getfield(host, -1, "path");
      lua_pushfstring(host, "%s/?.lua;%s/?/init.lua;%s", cfg->lua_path, cfg->lua_path, lua_tostring(host, -1));
      lua_setfield(host, -3, "path");
      lua_pop(host, 2);
    }
    lua_atpanic(host, on_panic);
    if (cfg->sandbox) mend_sandbox_prepare(host);
  }
  lua_rawgeti(host, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(host, -1);
  lua_pop(host, 1);
  E->L = lua_newthread(main);
  E->thread_ref = luaL_ref(main, LUA_REGISTRYINDEX);
  mend_refs_init(&E->refs, E->L);
  lua_getfield(E->L, LUA_REGISTRYINDEX, THREADS_KEY);
  if (lua_isnil(E->L, -1)) {
    lua_newtable(E->L);
    lua_setfield(E->L, LUA_REGISTRYINDEX, THREADS_KEY);
  }
  lua_pop(E->L, 1);
  /* Typed errors need their metatable even when the module was not required yet. */
  luaL_requiref(E->L, "mend.core", mend_lua_open, 0);
  lua_pop(E->L, 1);
  if (cfg->loop) E->loop = cfg->loop;
  else {
    uv_loop_init(&E->own_loop);
    E->loop = &E->own_loop;
    E->owns_loop = 1;
  }
  E->pump = malloc(sizeof *E->pump);
  uv_idle_init(E->loop, E->pump);
  E->pump->data = E;
  mend_timers_init(&E->timers, E->loop, cfg->virtual_clock);
  uint64_t seed = cfg->seed;
  if (!cfg->has_seed && getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = (uint64_t)mend_real_now();
  mend_rng_seed(&E->rng, seed);
  E->alerts = json_array();
  mend__make_ctx_metatable(E);
  E->lease_seconds = cfg->lease_seconds > 0 ? cfg->lease_seconds : 30;
  if (E->cfg.grace_seconds <= 0) E->cfg.grace_seconds = 10;
  char hostname[64] = "host";
  gethostname(hostname, sizeof hostname - 1);
  uint32_t tag;
  if (getrandom(&tag, sizeof tag, 0) != sizeof tag) tag = (uint32_t)mend_rng_next(&E->rng);
  snprintf(E->owner, sizeof E->owner, "%s:%d:%08x", hostname, (int)getpid(), tag);
  E->lease_timer = malloc(sizeof *E->lease_timer);
  uv_timer_init(E->loop, E->lease_timer);
  E->lease_timer->data = E;
  uint64_t renew_ms = (uint64_t)(E->lease_seconds * 1000.0 / 3.0);
  uv_timer_start(E->lease_timer, renew_leases, renew_ms ? renew_ms : 1, renew_ms ? renew_ms : 1);
  uv_unref((uv_handle_t *)E->lease_timer);   /* leases alone must not keep a host's loop alive */
  E->wakeup = malloc(sizeof *E->wakeup);
  uv_async_init(E->loop, E->wakeup, on_wakeup);
  E->wakeup->data = E;
  uv_unref((uv_handle_t *)E->wakeup);
  E->events = json_array();
  E->alerts_handed = json_array();
  E->events_handed = json_array();
  char serr[600];
  E->store = mend_store_open(cfg->db_path ? cfg->db_path : ":memory:", cfg->durability, serr, sizeof serr);
  if (!E->store) {
    snprintf(err, (size_t)errlen, "%s", serr);
    mend_engine_destroy(E);
    return NULL;
  }
  mend_store_set_worker(E->store, E->owner);
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  /* Every lease this engine takes from now on lasts at least this long. */
  E->fence_until = lease_until(E);
  if (mend_store_set_fence(E->store, E->owner, E->lease_seconds, E->fence_until)) {
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    mend_engine_destroy(E);
    return NULL;
  }
#ifdef MEND_FAILPOINTS
  mend_store_set_commit_hook(E->store, mend__failpoint);
#endif
  /* Statements and commits on a thread of their own, while the loop goes on with the next
   * batch: for an engine on its own loop with a real clock and a file (a virtual clock wants
   * every turn to end in a commit). */
  if (cfg->writer_thread && !cfg->virtual_clock && !cfg->loop && mend_store_has_checkpointer(E->store)) {
    if (mend_store_start_writer(E->store, writer_done, E)) {
      snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
      mend_engine_destroy(E);
      return NULL;
    }
    E->writer = 1;
  }
  if (mend_store_has_checkpointer(E->store)) {
    E->checkpoint_timer = malloc(sizeof *E->checkpoint_timer);
    uv_timer_init(E->loop, E->checkpoint_timer);
    E->checkpoint_timer->data = E;
    uv_timer_start(E->checkpoint_timer, start_checkpoint, 1000, 1000);
    uv_unref((uv_handle_t *)E->checkpoint_timer);
  }
  return E;
}

static void free_on_close(uv_handle_t *h) { free(h); }

/* A handle still open at destroy belongs to a child process abandoned mid-flight (its pipes
 * and process handle): closing it the usual way frees its request with the last one. */

static void close_stray(uv_handle_t *h, void *arg) {
  (void)arg;
  if (uv_is_closing(h) || !h->data) return;
  uv_close(h, *(int *)h->data == CHILD_ALERT ? mend__alert_handle_closed : mend__exec_handle_closed);
}

void mend_engine_destroy(mend_engine *E) {
  if (!E) return;
  E->destroying = 1;
  /* A checkpoint on a worker thread uses the store: let it end first. */
  while (E->checkpointing) {
    uv_run(E->loop, UV_RUN_NOWAIT);
    if (E->checkpointing) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
  if (E->checkpoint_timer) uv_close((uv_handle_t *)E->checkpoint_timer, free_on_close);
  /* Runs left unfinished stay in the store as they are; their leases are given back so that
   * another engine can take them at once. */
  if (E->store && !E->broken)
    for (mend_run *r = E->runs; r; r = r->next)
      if (mend_store_release(E->store, r->id, E->owner)) { mend__store_failed(E); break; }
  while (E->runs) run_free(E->runs);
  if (E->store && !E->broken) mend_store_commit(E->store);
  mend_store_close(E->store);
  for (mend_workflow *wf = E->workflows, *next; wf; wf = next) {
    next = wf->next;
    mend_workflow_free(E->L, wf);
  }
  for (struct mend_breaker_slot *s = E->breakers, *next; s; s = next) {
    next = s->next;
    free(s->key);
    free(s);
  }
  /* Children still running may report after the engine is gone (on a host's loop). */
  while (E->children) mend__child_unlink(E->children);
  json_decref(E->alerts);
  json_decref(E->events);
  json_decref(E->alerts_handed);
  json_decref(E->events_handed);
  mend__forget_host_calls(E);
  if (E->wakeup) uv_close((uv_handle_t *)E->wakeup, free_on_close);
  mend_timers_close(&E->timers);
  if (E->lease_timer) uv_close((uv_handle_t *)E->lease_timer, free_on_close);
  if (E->lock_timer) uv_close((uv_handle_t *)E->lock_timer, free_on_close);
  uv_close((uv_handle_t *)E->pump, free_on_close);
  if (E->owns_loop) {
    uv_run(&E->own_loop, UV_RUN_NOWAIT);   /* let close callbacks run */
    while (uv_loop_close(&E->own_loop) == UV_EBUSY) {
      uv_walk(&E->own_loop, close_stray, NULL);
      uv_run(&E->own_loop, UV_RUN_NOWAIT);
    }
  } else {
    uv_run(E->loop, UV_RUN_NOWAIT);
  }
  luaL_unref(E->L, LUA_REGISTRYINDEX, E->ctx_mt_ref);
  mend_refs_free(&E->refs, E->L);
  luaL_unref(E->L, LUA_REGISTRYINDEX, E->thread_ref);
  if (E->owned_state) lua_close(E->owned_state);
  free((char *)E->cfg.alert_command);
  free(E);
}
