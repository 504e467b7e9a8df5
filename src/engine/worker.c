/*
 * worker: an engine as one of several workers on a database. Owns its leases (renewed while it
 * works), the fence (after a stall, the runs another worker took are let go, unwritten), the
 * polling and claiming of runs, and serving until stopped (signals, the grace period). Must
 * never: write to a run it no longer holds; start an attempt once it stops.
 */
#include "engine_int.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

/* ---------------------------------------------------------------- fencing */

/* The store drops every write to a run another worker took while this one stalled past its
 * lease (src/store/fence.c); here such runs are let go, wherever they are, and the leases
 * renewed before they can run out under a long turn. */

double mend__lease_until(const mend_engine *E);

static void renew_now(mend_engine *E) {
  if (E->broken || (!E->in_flight && !E->parked.n)) return;
  double until = mend__lease_until(E);
  if (mend_store_renew(E->store, E->owner, E->lease_seconds)) { mend__store_failed(E); return; }
  E->fence_until = until;
  mend__kick(E);   /* committed by the next turn */
}


void mend__add_id(void *ud, const char *id) {
  id_list *l = ud;
  if (mend_idset_add(&l->set, id, strlen(id)) < 0) l->oom = 1;
}

static int in_hand(const mend_run *r) {
  return r->status == MEND_RUN_RUNNING || r->status == MEND_RUN_COMPENSATING;
}

/* Lets go of the runs in memory whose ids are in `ids`: freed, or, if queued, when their action
 * comes up. Nothing more is written for them. */
void mend__let_go(mend_engine *E, const mend_idset *ids, const char *why) {
  for (size_t i = 0; E->parked.n && i < ids->cap; i++)
    if (ids->slots[i]) mend__park_forget(E, ids->slots[i]);
  for (mend_run *r = E->runs, *next; r; r = next) {
    next = r->next;
    if (r->lost || !mend_idset_has(ids, r->id, strlen(r->id))) continue;
    mend_engine_log_line(E, "warn", r->id, NULL, 0, "lease", why);
    if (r->queued) r->lost = 1;
    else mend__drop_run(r, 0);
  }
}

/* Before the turn acts: no action may start for a run that is no longer ours. */
void mend__check_fence(mend_engine *E) {
  if (E->broken) return;
  if (E->store_lost) mend__store_lost_let_go(E);
  if (E->broken) return;
  /* The renewal timer is late (turns are long): renew now, while a third of the lease is left. */
  if (mend_real_now() >= E->fence_until - E->lease_seconds / 3) renew_now(E);
  id_list lost = {0}, mine = {0};
  if (mend_store_fence_news(E->store, mend__add_id, &lost) || E->fence_recheck) {
    E->fence_was_late = 1;
    /* A batch began late: which runs does the store say are ours? The rest are not. */
    json_t *held = mend_store_held(E->store);
    E->fence_recheck = !held && mend_store_locked(E->store);   /* again at the next turn */
    if (!held) {
      mend__store_failed(E);
      if (lost.set.count && !E->broken) mend__let_go(E, &lost.set, "another worker took this run"
                                               " while this one stalled past its lease: let go"
                                               " here, nothing more written");
      mend_idset_clear(&lost.set);
      return;
    }
    mend_store_fence_news(E->store, mend__add_id, &lost);   /* found by the flush just now */
    size_t i;
    json_t *id;
    json_array_foreach(held, i, id) mend__add_id(&mine, json_string_value(id));
    json_decref(held);
    for (mend_run *r = E->runs; r && !mine.oom; r = r->next) {
      if (!in_hand(r) || r->lost || mend_idset_has(&mine.set, r->id, strlen(r->id))) continue;
      mend__add_id(&lost, r->id);
      if (mend_store_add_lost(E->store, r->id)) mend__store_failed(E);
    }
    if (!mine.oom) mend__park_match(E, &mine.set, "another worker took this parked run while"
                                    " this one stalled past its lease: let go here");
    mend_idset_clear(&mine.set);
    if (!mine.oom) mend_store_fence_verified(E->store);   /* else the store keeps looking up */
  }
  if (lost.oom || mine.oom) mend__breakdown(E, "out of memory keeping track of lost leases");
  if (lost.set.count)
    mend__let_go(E, &lost.set,
                 "another worker took this run while this one stalled"
                 " past its lease: let go here, nothing more written");
  mend_idset_clear(&lost.set);
}

/* ---------------------------------------------------------------- serving */

void mend__reload_breakers(mend_engine *E);
void mend__take_cancel_requests(mend_engine *E);

void mend__renew_leases(uv_timer_t *t) { renew_now(t->data); }

/* The quick look every poll; the thorough one (it walks every run held: 27 ms with 100k) at the
 * first poll, then at most once in 30 s and in a hundredth of the loop's time. */
static int claimable(mend_engine *E, double now) {
  if (now < E->next_thorough_look) return mend_store_claimable(E->store, E->owner, 0);
  double began = mend_real_now();   /* not `now`: the poll may have waited for the writer */
  int found = mend_store_claimable(E->store, E->owner, 1);
  double took = mend_real_now() - began;
  E->next_thorough_look = now + (took * 100 > 30.0 ? took * 100 : 30.0);
  return found;
}

static void poll_for_runs(uv_timer_t *t) {
  mend_engine *E = t->data;
  if (E->draining || E->broken) return;
  /* No look for work while another process's lock is being waited out (lock.c). */
  if (mend__lock_stops_looks(E)) {
    uv_timer_start(t, poll_for_runs, E->poll_ms, 0);
    return;
  }
  /* No look either while the store's connection is lost: a turn tries to give the runs back,
   * which reconnects (reconnect.c), and the looks start again once that is done. */
  if (E->store_lost) {
    mend__kick(E);
    uv_timer_start(t, poll_for_runs, E->poll_ms > 1000 ? 1000 : E->poll_ms, 0);
    return;
  }
  double now = mend_real_now();
  if (now >= E->next_reload) {
    E->next_reload = now + 1.0;
    mend__reload_breakers(E);
    mend__take_cancel_requests(E);
    if (E->broken) return;
  }
  mend__take_events(E);   /* sent by other processes to runs held here */
  if (E->broken) return;
  int room = E->max_in_flight > 0 ? E->max_in_flight - E->in_flight : 1000;
  if (room > 1000) room = 1000;
  /* A dead worker's runs must become claimable first: they are not, until given back. The
   * look of the read-only connection cannot see that yet. */
  int released = mend__release_dead_local_owners(E);
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
      mend__claim_and_restore(E, room,
                              (found & MEND_CLAIMABLE_GONE ? 0 : MEND_CLAIM_FREE) | unavailable);
  }
  /* The next poll is an interval after this one ends, not after it began: a poll that takes
   * longer than the interval must not run back to back and leave the loop no turn between. */
  if (!E->broken) uv_timer_start(t, poll_for_runs, mend__poll_jitter(E->poll_ms), 0);
  E->poll_ended = mend_real_now();
  mend__wake_watch(E);
}

/* A wake-up from another process: the next poll now. */
/* At most one look every POLL_SOON_GAP_MS for wake-ups: other workers' batches notify
 * hundreds of times a second under load, and each look is a query; a look that soon after
 * the last finds what they all made due. */
#define POLL_SOON_GAP_MS 10

void mend__poll_soon(mend_engine *E) {
  if (!E->poll_timer || E->draining || E->broken) return;
  double since = (mend_real_now() - E->poll_ended) * 1000;
  uint64_t wait = since >= POLL_SOON_GAP_MS ? 0 : (uint64_t)(POLL_SOON_GAP_MS - since);
  if (uv_is_active((uv_handle_t *)E->poll_timer) && uv_timer_get_due_in(E->poll_timer) <= wait)
    return;
  uv_timer_start(E->poll_timer, poll_for_runs, wait, 0);
}

static void on_signal(uv_signal_t *h, int signum) {
  mend_engine *E = h->data;
  mend_engine_log_line(E, "info", NULL, NULL, 0, "worker",
                       signum == SIGINT ? "SIGINT: finishing attempts in flight"
                                        : "SIGTERM: finishing attempts in flight");
  mend_engine_stop(E);
}

/* The loop must wake when the grace runs out: an attempt in flight may wait for a timer or a
 * reply long after it, and nothing else may be due before (a lease renewal is a third of a
 * lease away). The poll timer, idle from now on, is that wake-up, and the serving loop's check
 * then stops. libuv counts a timer from its loop time, read as the turn began, and the deadline
 * is the real clock's: a stop late in a long turn would fire early, so each firing arms it
 * again for what is left until the deadline has passed by the clock the check reads. */
static void arm_grace(mend_engine *E);
static void grace_over(uv_timer_t *t) { arm_grace(t->data); }

static void arm_grace(mend_engine *E) {
  double left = E->grace_deadline - mend_real_now();
  if (!E->poll_timer || !(left > 0)) return;
  double ms = left * 1000.0 + 1;
  if (ms > 1e12) ms = 1e12;   /* an endless grace: a wake-up now and then, never an overflow */
  uv_update_time(E->loop);
  uv_timer_start(E->poll_timer, grace_over, (uint64_t)ms, 0);
}

void mend_engine_stop(mend_engine *E) {
  if (E->draining) return;
  E->draining = 1;
  E->grace_deadline = mend_real_now() + E->cfg.grace_seconds;
  arm_grace(E);
  mend__kick(E);
}

static void close_and_free(uv_handle_t *h) { free(h); }

int mend_engine_serve(mend_engine *E, double poll_seconds, int max_in_flight) {
  E->serving = 1;
  E->max_in_flight = max_in_flight;
  mend__park_serving(E);
  if (mend__events_start(E)) return -1;
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
    mend__loop_once(E);
  }
  E->auto_advance = 0;
  if (E->draining && !E->broken && E->attempts > 0) {
    char msg[160];
    snprintf(msg, sizeof msg, "stopping with %d attempt(s) in flight, left unfinished for "
             "another worker", E->attempts);
    mend_engine_log_line(E, "info", NULL, NULL, 0, "worker", msg);
  }
  /* Give back every run still held so that another worker can take it at once. */
  if (!E->broken) {
    for (mend_run *r = E->runs; r; r = r->next)
      if (mend_store_release(E->store, r->id, E->owner)) { mend__store_failed(E); break; }
    if (!E->broken) mend__park_release(E);
    if (!E->broken && mend__commit_counted(E)) mend__store_failed(E);
    /* A batch another PostgreSQL session's lock holds back is not waited for (the store gives
     * it up as it closes): said, for what is done again after a restart. */
    if (!E->broken && mend_store_locked(E->store) && !mend_store_has_write_lock(E->store)) {
      char msg[1200];
      snprintf(msg, sizeof msg, "stopping while a batch waits for a lock: its writes are not "
               "written, and are done again from what was committed when its runs are taken "
               "(%s)", mend_store_errmsg(E->store));
      mend_engine_log_line(E, "warn", NULL, NULL, 0, "worker", msg);
    }
  }
  mend__serve_close(E);
  return E->broken ? -1 : 0;
}

void mend__serve_close(mend_engine *E) {
  mend__wake_stop(E);
  if (E->poll_timer) uv_close((uv_handle_t *)E->poll_timer, close_and_free);
  E->poll_timer = NULL;
  for (int k = 0; k < 2; k++) {
    if (E->signals[k]) uv_close((uv_handle_t *)E->signals[k], close_and_free);
    E->signals[k] = NULL;
  }
  E->serving = 0;
}
