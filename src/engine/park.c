/*
 * park: runs that wait for something outside them kept out of memory. A run waits "for
 * something" when its current step waits for an event, a durable sleep, a backoff or an open
 * breaker, or its compensation waits for a retry (waits_outside; a new kind of wait, such as a
 * completion token or a child run, is one more case there, one call of mend__park_soon where it
 * begins, and its status in recover.c's schedule_restored). Once such a run has waited
 * park_after seconds of the engine's clock with nothing in flight, it is parked: freed from
 * memory with its Lua values, leaving in E->parked (parkset.h) only its id and due time, 24
 * bytes, plus 4 of the heap when it has a due time and 8 to 16 of the hash: that is the whole
 * of its cost. It is brought back from the store, as recovery rebuilds a run (without the
 * `recovered` row: nothing changed hands), when its due time comes on the engine's clock (a
 * virtual one too), when an event for it is sent in this process or seen by the worker's look
 * at the inbox (events.c), when a cancel is asked for, or when a repair looks for it.
 * A parked run stays this engine's in the store: its owner column names us, the one lease row
 * of the worker covers it as it covers the runs in memory (renewed while any run is parked),
 * and nothing is written to park or to wake it. So another worker takes it only as it takes
 * any run of a worker whose lease ran out (then the fence or the owner check at waking lets
 * our entry go), and a stopping worker gives it back with the runs in memory.
 * Must never: park a run with anything in flight (a coroutine, an action queued behind a
 * batch, a breaker's probe or slot, a child process, a request); wake a run the store says
 * another worker holds; write anything to park or to wake a run.
 */
#include "engine_int.h"

#include <lua.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* Parked or woken at most this many in one timer callback: the loop commits and polls between. */
#define PARK_BATCH 4096
/* After this many were parked, once none is left to park (a burst has gone to wait), what they
 * held goes back to the system: their Lua values collected, the allocator's free pages
 * returned. Without it a worker keeps the peak of the burst (1 KB a parked run at 100k). */
#define GIVE_BACK_AFTER 1024
/* How soon a run the store could not give back (locked by another process) is tried again. */
#define PARK_RETRY_SECONDS 0.25

static int waits_outside(const mend_run *r) {
  if (r->status == MEND_RUN_RUNNING)
    return r->wait_kind == WAIT_EVENT || r->wait_kind == WAIT_RETRY ||
           r->wait_kind == WAIT_BREAKER || r->wait_kind == WAIT_STEP_SLEEP;
  return r->status == MEND_RUN_COMPENSATING && r->wait_kind == WAIT_COMP_RETRY;
}

/* No lane of its parallel group or map is busy. A lane itself is never parked: it is part of
 * its run. */
static int lanes_idle(const mend_run *r) {
  if (MEND_COLD(r, parent)) return 0;
  for (int k = 0; MEND_COLD(r, group); k++) {
    const mend_run *l = mend__lane_at((mend_run *)r, k);
    if (!l) break;
    if (l->cur >= 0) return 0;
  }
  return 1;
}

/* Nothing of it is in flight: what the store has is the whole run. */
static int nothing_in_flight(const mend_run *r) {
  return !r->queued && !r->co && !r->waiting && !r->lost && !MEND_COLD(r, exec) &&
         !MEND_COLD(r, http) && !MEND_COLD(r, host_call) && !r->waiting_in && !r->held &&
         !r->admitted && !r->cancel_asked && !r->look_out && lanes_idle(r);
}

static void arm_engine_timer(mend_engine *E, mend_timer *t, double due) {
  if (mend_timer_arm(&E->timers, t, due)) {
    mend__breakdown(E, "out of memory arming a timer");
    return;
  }
  if (E->timers.is_virtual) mend__kick(E);
  else if (t->slot == 1) mend_timers_sync(&E->timers);
}

static void list_unlink(mend_engine *E, mend_run *r) {
  if (!r->park_listed) return;
  if (r->pprev) r->pprev->pnext = r->pnext;
  else E->park_head = r->pnext;
  if (r->pnext) r->pnext->pprev = r->pprev;
  else E->park_tail = r->pprev;
  r->pprev = r->pnext = NULL;
  r->park_listed = 0;
  /* a virtual clock would go there */
  if (!E->park_head) mend_timer_disarm(&E->timers, &E->park_sweep);
}

static void list_append(mend_engine *E, mend_run *r, double now) {
  list_unlink(E, r);
  r->idle_since = now;
  r->pprev = E->park_tail;
  if (E->park_tail) E->park_tail->pnext = r;
  else E->park_head = r;
  E->park_tail = r;
  r->park_listed = 1;
  if (!mend_timer_armed(&E->park_sweep)) arm_engine_timer(E, &E->park_sweep, now + E->park_after);
}

/* The wake timer follows the earliest due time of the parked runs. */
static void rearm_wake(mend_engine *E) {
  double next = mend_parkset_next_due(&E->parked);
  if (next < 0) mend_timer_disarm(&E->timers, &E->park_wake);
  else if (!mend_timer_armed(&E->park_wake) || E->park_wake.due != next)
    arm_engine_timer(E, &E->park_wake, next);
}

void mend__park_soon(mend_run *r) {
  mend_engine *E = r->E;
  if (E->park_after > 0 && !E->destroying && !MEND_COLD(r, parent))
    list_append(E, r, mend_engine_now(E));
}

void mend__park_unlist(mend_run *r) { list_unlink(r->E, r); }

static void say(mend_engine *E, const char *id, const char *what) {
  char msg[1000];
  snprintf(msg, sizeof msg, "%s (%u parked, %d in memory)", what, E->parked.n, E->in_flight);
  mend_engine_log_line(E, "debug", id, NULL, 0, "park", msg);
}

static void park(mend_run *r) {
  mend_engine *E = r->E;
  double due = mend_timer_armed(&r->wait) ? r->wait.due : -1;
  int added = mend_parkset_add(&E->parked, r->id, due);
  if (added == -1) { mend__breakdown(E, "out of memory parking run %s", r->id); return; }
  if (added == -2) return;   /* an id this engine did not make: it stays in memory */
  char id[MEND_RUN_ID_LEN], what[200];
  memcpy(id, r->id, sizeof id);
  const mend_step_def *def = r->cur >= 0 && r->cur < r->wf->nsteps ? &r->wf->steps[r->cur] : NULL;
  if (r->wait_kind == WAIT_EVENT && def && def->wait_for)
    snprintf(what, sizeof what, "parked: %s waits for event %s", def->name, def->wait_for);
  else
    snprintf(what, sizeof what, "parked: %s waits until its due time", def ? def->name : "the run");
  mend__run_free(r);
  E->parked_since_give_back++;
  rearm_wake(E);
  say(E, id, what);
}

static void give_back(mend_engine *E) {
  E->parked_since_give_back = 0;
  lua_gc(E->L, LUA_GCCOLLECT, 0);
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

static void on_sweep(mend_timer *t) {
  mend_engine *E = (mend_engine *)(void *)((char *)t - offsetof(mend_engine, park_sweep));
  double now = mend_engine_now(E);
  mend_run *r;
  int n = 0;
  for (; n < PARK_BATCH && !E->broken; n++) {
    if (!(r = E->park_head) || r->idle_since + E->park_after > now) break;
    list_unlink(E, r);
    if (!waits_outside(r)) continue;
    /* its action, or the answer to its look at the inbox, comes first: look again later */
    if (r->queued || r->look_out) list_append(E, r, now);
    else if (nothing_in_flight(r)) park(r);
  }
  if ((r = E->park_head))
    arm_engine_timer(E, &E->park_sweep,
                     r->idle_since + E->park_after > now ? r->idle_since + E->park_after : now);
  if (n < PARK_BATCH && E->parked_since_give_back >= GIVE_BACK_AFTER && !E->broken) give_back(E);
}

/* A run the store could not give back now (another process holds its write lock) is tried
 * again shortly: woken early, a run only waits again, but left out it would wait for ever. */
static void later(mend_engine *E, const char *id) {
  mend__store_failed(E);
  if (E->broken) return;
  if (mend_parkset_add(&E->parked, id, mend_engine_now(E) + PARK_RETRY_SECONDS) < 0)
    mend__breakdown(E, "out of memory parking run %s", id);
  rearm_wake(E);
}

/* The connection went while this run was read back, and the open batch with it: a lost batch
 * (reconnect.c). The run goes back into the set, so that it is let go with every run held
 * here and claimed anew; given back alone, on the connection the next write opens, the rest
 * would go on as if the lost batch had committed. */
static void lost_reading(mend_engine *E, const char *id) {
  if (mend_parkset_add(&E->parked, id, mend_engine_now(E) + PARK_RETRY_SECONDS) < 0) {
    mend__breakdown(E, "out of memory parking run %s", id);
    return;
  }
  rearm_wake(E);
  if (E->draining) mend__breakdown(E, "%s", mend_store_errmsg(E->store));
  else mend__store_lost(E);
}

/* Rebuilds a run whose entry was just taken out of the set, if it is still ours. */
static int bring_back(mend_engine *E, const char *id, const char *why) {
  char owner[128], msg[800];
  double until;
  int found = mend_store_owner(E->store, id, owner, sizeof owner, &until);
  if (found < 0) { later(E, id); return -1; }
  if (!found || strcmp(owner, E->owner) != 0) {
    mend_engine_log_line(E, "warn", id, NULL, 0, "lease", "another worker took this parked run"
                         " while this one stalled past its lease: let go here, nothing written");
    return 0;
  }
  int unavailable;
  mend_run *r = mend__rebuild(E, id, msg, sizeof msg, &unavailable);
  if (!r && mend_store_locked(E->store)) { later(E, id); return -1; }
  if (!r && mend_store_conn_lost(E->store)) { lost_reading(E, id); return -1; }
  if (!r) {
    mend_engine_log_line(E, "error", id, NULL, 0, "park", msg);
    if (mend_store_release(E->store, id, E->owner)) mend__store_failed(E);
    return -1;
  }
  mend__carry_on(r);
  snprintf(msg, sizeof msg, "back from the store: %s", why);
  say(E, id, msg);
  return 1;
}

int mend__unpark(mend_engine *E, const char *id, const char *why) {
  if (!mend_parkset_remove(&E->parked, id)) return 0;
  rearm_wake(E);
  return bring_back(E, id, why);
}

static void on_wake(mend_timer *t) {
  mend_engine *E = (mend_engine *)(void *)((char *)t - offsetof(mend_engine, park_wake));
  char id[MEND_RUN_ID_LEN];
  double now = mend_engine_now(E);
  /* nothing can be read back before the lock goes, nor after a lost batch before the runs
   * held are let go (reconnect.c) */
  if (mend__lock_waiting(E) || E->store_lost) {
    arm_engine_timer(E, &E->park_wake, now + PARK_RETRY_SECONDS);
    return;
  }
  /* reading a run back would wait for the writer thread's batch: a later tick's */
  if (mend__tick_store_held(E)) {
    arm_engine_timer(E, &E->park_wake, now + MEND_TICK_DEFER_SECONDS);
    return;
  }
  for (int n = 0; n < PARK_BATCH && !E->broken && mend_parkset_pop_due(&E->parked, now, id); n++)
    if (bring_back(E, id, "its due time came") < 0 && E->store_lost) break;
  rearm_wake(E);
}

int mend__parked(const mend_engine *E, const char *id) { return mend_parkset_has(&E->parked, id); }

void mend__park_forget(mend_engine *E, const char *id) {
  if (mend_parkset_remove(&E->parked, id)) rearm_wake(E);
}

/* The parked runs the store no longer says are ours (`mine`, from mend_store_held) are let go. */
void mend__park_match(mend_engine *E, const mend_idset *mine, const char *why) {
  char id[MEND_RUN_ID_LEN];
  for (uint32_t i = 0; i < E->parked.n;) {
    mend_parkset_id(&E->parked, i, id);
    if (mend_idset_has(mine, id, strlen(id))) { i++; continue; }
    mend_parkset_remove(&E->parked, id);   /* the last entry moves to i */
    mend_engine_log_line(E, "warn", id, NULL, 0, "lease", why);
  }
  rearm_wake(E);
}

int mend__park_release(mend_engine *E) {
  char id[MEND_RUN_ID_LEN];
  for (uint32_t i = 0; i < E->parked.n; i++) {
    mend_parkset_id(&E->parked, i, id);
    if (mend_store_release(E->store, id, E->owner)) { mend__store_failed(E); return -1; }
  }
  mend_parkset_free(&E->parked);
  mend_timer_disarm(&E->timers, &E->park_wake);
  return 0;
}

void mend__park_init(mend_engine *E) {
  mend_timer_init(&E->park_sweep, on_sweep);
  mend_timer_init(&E->park_wake, on_wake);
  E->park_after = E->cfg.park_after > 0 ? E->cfg.park_after : 0;
}

void mend__park_serving(mend_engine *E) {
  if (E->cfg.park_after == 0) E->park_after = 1.0;
}

void mend__park_close(mend_engine *E) {
  while (E->park_head) list_unlink(E, E->park_head);
  mend_timer_disarm(&E->timers, &E->park_sweep);
  mend_timer_disarm(&E->timers, &E->park_wake);
  mend_parkset_free(&E->parked);
}

int mend_engine_parked(const mend_engine *E) { return (int)E->parked.n; }
