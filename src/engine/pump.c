/*
 * pump: the write-ahead rule. Owns the lists of runs waiting for a batch to be durable (by
 * batch number, four at a time) and the ready list, queueing an action behind the open batch
 * (or for this turn, for one that only writes), arming a run's timers, doing an action, ending
 * a batch (committed on the loop or handed to the writer thread, and its alerts and events
 * heard once it is durable), a pump turn, and the writer thread's wakeups of the loop; and the
 * callers outside the engine that wait for a batch to be durable before they answer (an HTTP
 * reply), told once it is or once it failed. What a turn's actions cost is measured here, for
 * a ticking host (drive.c).
 *
 * Must never: do an action before the batch that announces it is durable, or tell a waiting
 * caller its batch is durable before it is (nor after it failed); block the loop
 * waiting for the writer thread; decide what an outcome means (saga.c) or change a status
 * (status.c).
 */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <lauxlib.h>

#include "util.h"

/* ---------------------------------------------------------------- the lists */

static int any_waiting(const mend_engine *E) {
  for (int k = 0; k < 4; k++)
    if (E->waiting[k].head) return 1;
  return 0;
}

/* Work a pump turn would do now: actions queued, a batch to commit or being committed, or
 * events and alerts waiting for the commit that comes before them (a run's last turn leaves
 * those behind). */
int mend__has_ready_work(const mend_engine *E) {
  return E->ready_head || E->answered_head || mend__sent_event_ready(E) || any_waiting(E) ||
         mend_store_batch_open(E->store) ||
         json_array_size(E->events) || json_array_size(E->alerts) || mend__events_due(E) ||
         (E->writer && (mend_store_writer_busy(E->store) || json_array_size(E->alerts_handed) ||
                        json_array_size(E->events_handed)));
}

/* Work a turn can do now. While the writer thread holds the only batch there is, a turn would
 * find nothing to do: the thread wakes the loop when it is done (on_wakeup). */
int mend__turn_has_work(const mend_engine *E) {
  int writing = (E->writer && mend_store_writer_busy(E->store)) || mend__lock_waiting(E);
  return E->ready_head || E->answered_head || mend__events_due(E) ||
         (!writing && mend__has_ready_work(E));
}

/* With nothing else to do, a run() on the virtual clock moves it to the next timer. */
int mend__virtual_timers_to_advance(const mend_engine *E) {
  return E->timers.is_virtual && E->auto_advance && !E->externals && E->timers.count;
}

void mend__kick(mend_engine *E) {
  if (E->destroying) return;   /* the pump handle is closing */
  if (!uv_is_active((uv_handle_t *)E->pump)) uv_idle_start(E->pump, mend__pump_cb);
}

void mend__append(mend_run **head, mend_run **tail, mend_run *r) {
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
  mend__append(&E->waiting[seq % 4].head, &E->waiting[seq % 4].tail, r);
  E->waiting[seq % 4].n++;
  mend__kick(E);
}

/* The run's next action is `a` in this turn or the next, without waiting for a commit: for an
 * action that only writes (the write-ahead rule holds its execute back, not its writes). */
void mend__queue_now(mend_run *r, action a) {
  mend_engine *E = r->E;
  r->next_action = a;
  if (r->queued) return;
  r->queued = 1;
  r->wait_seq = 0;
  mend__append(&E->ready_head, &E->ready_tail, r);
  E->ready_n++;
  mend__kick(E);
}

void mend__arm(mend_run *r, mend_timer *t, double due) {
  mend_engine *E = r->E;
  if (mend_timer_arm(&E->timers, t, due)) {
    mend__breakdown(E, "out of memory arming a timer");
    return;
  }
  if (E->timers.is_virtual) mend__kick(E);
  else if (t->slot == 1) mend_timers_sync(&E->timers);   /* it is the earliest */
  if (t == &r->wait) mend__park_soon(r);   /* it waits for its timer: parked if it lasts */
}

/* ---------------------------------------------------------------- what an action cost */

/* The CPU time of this thread: what an action cost, without the time the OS gave the CPU to
 * another thread meanwhile (taken for the action's, it made a busy machine's ticks do one
 * action each while hundreds waited). */
double mend__thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + 1e-9;   /* never 0: 0 is "not ticking" */
}

/* Pieces that ran the open batch's records count them in what the next piece may cost for
 * this many pieces after: work comes in runs of a kind (answers resuming steps that read), and
 * a tick whose pieces stopped reading owes nothing for the records waiting. */
#define FLUSH_MEMORY 64

/* What the next piece may cost, for a tick deciding whether it fits: what pieces cost without
 * running records, and, while pieces lately ran them and records wait, what running them
 * costs: as much as a piece's flush has cost, more in proportion for more records than such a
 * flush ran (the cost is mostly fixed for a few records, then grows with them; the batch grows
 * as the tick records, which no average of past pieces would see). */
double mend__tick_next_piece(mend_engine *E) {
  if (E->tick_since_flush >= FLUSH_MEMORY) return E->tick_piece;
  unsigned long recs;
  double cpu;
  int pending;
  mend_store_read_flushes(E->store, &recs, &cpu, &pending);
  if (pending <= 0) return E->tick_piece;
  double flush = E->tick_flush;
  if (pending > E->tick_flush_recs && E->tick_flush_recs > 0) flush *= pending / E->tick_flush_recs;
  return E->tick_piece + (flush > 0.01 ? 0.01 : flush);
}

static void tick_piece_begin(mend_engine *E) {
  int pending;
  mend_store_read_flushes(E->store, &E->tick_flushed_recs, &E->tick_flushed_cpu, &pending);
}

/* A piece took `cost` of CPU: the part that ran records is learnt apart (with how many it
 * ran), the rest as what a piece costs. Each up fast after a dear one, down slowly, so that a
 * run of cheap pieces does not hide the dear ones among them. */
static void tick_piece_cost(mend_engine *E, double cost) {
  unsigned long recs;
  double cpu;
  int pending;
  mend_store_read_flushes(E->store, &recs, &cpu, &pending);
  if (recs > E->tick_flushed_recs) {
    double flushed = cpu - E->tick_flushed_cpu, n = (double)(recs - E->tick_flushed_recs);
    if (flushed > E->tick_flush) E->tick_flush += (flushed - E->tick_flush) / 4;
    else E->tick_flush -= (E->tick_flush - flushed) / 64;
    E->tick_flush_recs += (n - E->tick_flush_recs) / 16;
    E->tick_since_flush = 0;
    cost -= flushed;
  } else if (E->tick_since_flush < FLUSH_MEMORY) {
    E->tick_since_flush++;
  }
  if (cost < 0) cost = 0;
  if (cost > 0.01) cost = 0.01;
  if (cost > E->tick_piece) E->tick_piece += (cost - E->tick_piece) / 4;
  else E->tick_piece -= (E->tick_piece - cost) / 64;
}

/* The writer thread writes a batch (not a part of the open one): a read would wait for it. */
int mend__writer_holds_batch(mend_engine *E) {
  return E->writer && mend_store_writer_busy(E->store) && !mend_store_writer_part(E->store);
}

/* ------------------------------------------------------------ while the writer holds a batch */

/* A read waits for the writer thread to be done with the connection (store.h), and the thread
 * may wait long for a core and an fsync: a ticking host's piece that would read waits for a
 * later tick, while pieces that read nothing through the store run on. Such a piece only acts
 * on what is durable already (the ready list, answers, events of durable batches): its writes
 * go to the next batch and whatever they announce waits for that one, as always.
 *
 * A workflow's pieces read nothing when none of its steps reads by its kind: not a group nor a
 * map (lanes share an inbox), a child or a token (their ends come through reads), an
 * idempotency key of its own (looked up among results); and a wait for an event may be read
 * among committed events (events.c: inbox_committed_is_own) unless one follows another, with
 * only steps that may be skipped between: the second then looks through the batch that holds
 * the first's take. */
int mend__workflow_store_free(const mend_engine *E, const mend_workflow *wf) {
  for (int i = 0; i < wf->nsteps; i++) {
    const mend_step_def *d = &wf->steps[i];
    if (d->nbranches || d->map_ref != LUA_NOREF || d->child || d->wait_token ||
        d->key_ref != LUA_NOREF)
      return 0;
    if (!d->wait_for) continue;
    /* events of the engine's own names are read with the batch (events.c) */
    if (!mend_store_reads_committed_events(E->store) || strncmp(d->wait_for, "mend.", 5) == 0)
      return 0;
    for (int j = mend__next_top(wf, i); j < wf->nsteps; j = mend__next_top(wf, j)) {
      if (wf->steps[j].wait_for) return 0;
      if (wf->steps[j].when_ref == LUA_NOREF) break;
    }
  }
  return 1;
}

/* A ticking host's piece that read now would wait for the writer thread: a batch, or a part
 * of the open one (a read waits for that too, and the thread may wait as long for a core). */
int mend__tick_store_held(mend_engine *E) {
  return E->turn_deadline > 0 && E->writer && mend_store_writer_busy(E->store);
}

/* Whether a piece of r (an answer resuming its step, its event, its action, its timer) may
 * read through the store; 1 when not known not to. A run whose last take is not durable yet
 * looks at its inbox through the batch; a child tells its parent, a lost run is let go:
 * through the store. */
int mend__piece_needs_store(const mend_run *r) {
  /* a suspect run's attempt commits before and after its code (attempt.c) */
  if (!r->wf->store_free || MEND_COLD(r, parent) || MEND_COLD(r, group) || r->lane ||
      r->is_child || r->lost || r->suspect)
    return 1;
  return r->took_seq > mend_store_durable_seq(r->E->store);
}

/* An action also reads when it advances a run rebuilt waiting: it looks at the inbox through
 * the batch (saga.c: forward_step). */
static int action_needs_store(const mend_run *r) {
  if (r->cur >= 0 && r->cur < r->wf->nsteps && r->steps[r->cur].status == MEND_STEP_WAITING)
    return 1;
  return mend__piece_needs_store(r);
}

/* A run's timer whose piece would read through the batch the writer thread holds fires again a
 * little later, in a later tick: 1 if so. Its due time as stored does not move. A wait for an
 * event that times out reads the batch on purpose: its last look must see every event sent. */
int mend__defer_wait(mend_run *r) {
  mend_engine *E = r->E;
  if (!mend__tick_store_held(E)) return 0;
  if (r->wait_kind != WAIT_EVENT && !mend__piece_needs_store(r)) return 0;
  if (mend_timer_arm(&E->timers, &r->wait, mend_engine_now(E) + MEND_TICK_DEFER_SECONDS)) {
    mend__breakdown(E, "out of memory arming a timer");
    return 1;
  }
  if (r->wait.slot == 1) mend_timers_sync(&E->timers);
  return 1;
}

/* ---------------------------------------------------------------- the writer thread */

void mend__on_wakeup(uv_async_t *h) {
  mend_engine *E = h->data;
  if (E->on_wake) E->on_wake(E->on_wake_ud);
  mend__kick(E);
  /* Held while the writer thread has a batch, so that the loop waits for it; idle otherwise,
   * as a host's loop must not be kept alive by it. */
  if (!E->writer || !mend_store_writer_busy(E->store)) uv_unref((uv_handle_t *)h);
}

/* On the writer thread, after a batch: the loop takes it from there. */
void mend__writer_done(void *ud) {
  mend_engine *E = ud;
  mend__writer_sched_apply(E);
  uv_async_send(E->wakeup);
}

void mend_engine_wake(mend_engine *E) { uv_async_send(E->wakeup); }

void mend_engine_on_wake(mend_engine *E, void (*fn)(void *ud), void *ud) {
  E->on_wake = fn;
  E->on_wake_ud = ud;
}
/* ---------------------------------------------------------------- actions and batches */

void mend__do_action(mend_run *r) {
  if (r->lost) {
    mend__drop_run(r, 1);   /* popped from the queue just now */
    return;
  }
  action a = r->next_action;
  r->next_action = ACT_NONE;
  switch (a) {
    case ACT_ADVANCE:
      if (r->status == MEND_RUN_RUNNING) mend__forward(r);
      else if (r->status == MEND_RUN_COMPENSATING) mend__backward(r);
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
        mend__fifo_push(wait, r);
        break;
      }
      slot->in_flight++;
      r->held = slot;
      mend__start_attempt(r, a == ACT_COMPENSATE);
      break;
    }
    case ACT_FINISH:
      /* its last run_to already gave the lease back (mend_store_update_run). The batch of its
       * end is durable: its run_finished is due now, not with the open batch (a lease renewal
       * in it would leave it for a later turn), and the run stays in the host's in-flight count
       * until it is heard (notify.c). */
      if (r->E->cfg.on_event)
        mend__emit_finished(r->E, json_pack("{s:s, s:s, s:s, s:s}", "type", "run_finished",
                                           "run_id", r->id, "workflow", r->wf->name,
                                           "status", mend_run_status_name(r->status)));
      mend__run_free(r);
      break;
    case ACT_NONE: break;
  }
}

static json_t *take_array(json_t **a) {
  json_t *taken = *a;
  *a = json_array();
  return taken;
}

/* With the writer thread: once it is idle, the alerts and events of the batch it had are heard
 * (if that batch failed, durable_seq did not move and hand_off reports the failure). */
void mend__settle_writer(mend_engine *E) {
  if (mend_store_writer_busy(E->store)) return;
  if (mend_store_durable_seq(E->store) < E->handed_seq) return;
  mend__handed_durable(E);
  if (json_array_size(E->alerts_handed) || json_array_size(E->events_handed))
    mend__fire_batch(E, take_array(&E->alerts_handed), take_array(&E->events_handed));
}

/* A batch of at least this many writes is worth the writer thread even with nothing else
 * ready: timers and I/O go on while it is written. */
#define HAND_OFF_WRITES 1024

/* Ends the open batch: committed here, or handed to the writer thread if it is idle (else the
 * batch grows until it is). Alerts and events are heard once their batch is durable. */
int mend__end_batch(mend_engine *E) {
  /* A part of this batch on the thread (store.h) is no batch to wait for: the hand-off below
   * follows it. */
  if (E->writer && mend_store_writer_busy(E->store) && !mend_store_writer_part(E->store)) {
    uv_ref((uv_handle_t *)E->wakeup);
    return 0;
  }
  /* With nothing else ready the loop would only wait for the writer thread: committing a small
   * batch here is as fast and saves a hand-off per transition (latency at moderate load). A
   * backlog is worth a second thread: the loop works through it while the thread writes. */
  /* A ticking host hands every batch off: the commit (and its fsync) is not the frame's. With
   * calls in flight (mend.http, mend.exec) the loop is not idle either: their answers come
   * while the thread commits (W9: the loop ran every commit between two answers). */
  if (!E->writer || (E->turn_deadline <= 0 && !E->ready_head && !E->externals &&
                     mend_store_batch_writes(E->store) < HAND_OFF_WRITES)) {
    if (mend__lock_waiting(E)) return 0;   /* its timer kicks the next try */
    int rc = mend__commit_counted(E);
    if (rc == MEND_STORE_BUSY) { mend__lock_wait(E); return 0; }
    if (rc) { mend__store_failed(E); return -1; }
    mend__fire_batch(E, take_array(&E->alerts), take_array(&E->events));
    return 0;
  }
  if (mend_store_durable_seq(E->store) >= E->handed_seq) {
    /* The batch handed last became durable since the turn looked: its alerts and events are
     * heard now, not with this one (its runs may move on in the next turn, a run's
     * run_finished heard before the events of the batch that ended it). */
    mend__handed_durable(E);
    if (json_array_size(E->alerts_handed) || json_array_size(E->events_handed))
      mend__fire_batch(E, take_array(&E->alerts_handed), take_array(&E->events_handed));
  }
  uint64_t handed_at = mend_store_batch_open(E->store) ? uv_hrtime() : 0;
  E->handed_seq = mend_store_open_seq(E->store);
  json_array_extend(E->alerts_handed, E->alerts);
  json_array_extend(E->events_handed, E->events);
  json_array_clear(E->alerts);
  json_array_clear(E->events);
  int rc = mend_store_hand_off(E->store);
  if (rc == MEND_STORE_BUSY) { mend__lock_wait(E); return 0; }
  if (rc) { mend__store_failed(E); return -1; }
  if (handed_at) mend__handed(E, handed_at);
  if (mend_store_writer_busy(E->store)) uv_ref((uv_handle_t *)E->wakeup);
  else mend__settle_writer(E);   /* written already, or nothing was: durable at once */
  return 0;
}

/* ---------------------------------------------------------------- callers waiting */

void mend_engine_when_durable(mend_engine *E, mend_durable_wait *w) {
  /* Every write so far is in the open batch or an earlier one. */
  w->seq = mend_store_open_seq(E->store);
  w->next = NULL;
  w->prev = E->durable_tail;
  if (E->durable_tail) E->durable_tail->next = w;
  else E->durable_head = w;
  E->durable_tail = w;
  w->listed = 1;
  w->lost = 0;
  if (E->broken) mend__durable_fire(E);
  else mend__kick(E);   /* the next turn ends the batch, even one with nothing in it */
}

void mend_engine_durable_cancel(mend_engine *E, mend_durable_wait *w) {
  if (!w->listed) return;
  if (w->prev) w->prev->next = w->next;
  else E->durable_head = w->next;
  if (w->next) w->next->prev = w->prev;
  else E->durable_tail = w->prev;
  w->listed = 0;
}

/* Tells the waiting callers whose batch is durable, or failed: all of them once the engine is
 * broken (its batch was rolled back), those that waited when the connection was lost (a
 * prefix of the list). Seqs only grow along the list, so only its head is looked at. */
void mend__durable_fire(mend_engine *E) {
  if (!E->durable_head) return;
  unsigned long durable = mend_store_durable_seq(E->store);
  while (E->durable_head) {
    mend_durable_wait *w = E->durable_head;
    const char *err = E->broken ? E->errmsg
      : w->lost ? "the connection to the database was lost while this was "
        "being written: it is not known to be recorded (ask again: a start with a key gives the "
        "same run)"
      : NULL;
    if (!err && w->seq > durable) break;
    mend_engine_durable_cancel(E, w);
    w->done(w, err);
  }
}

/* The engine closes: what its last commit made durable is told so, the rest not kept. */
void mend__durable_close(mend_engine *E) {
  if (E->store) mend__durable_fire(E);
  while (E->durable_head) {
    mend_durable_wait *w = E->durable_head;
    mend_engine_durable_cancel(E, w);
    w->done(w, "the engine closed before this was written");
  }
}

/* ---------------------------------------------------------------- the loop */

static int pump_turn(mend_engine *E);

/* One turn: do what the durable batches allow, then end the batch that wrote (so that a run
 * released by a commit has its next transition in the very next one). */
int mend__pump_turn(mend_engine *E) {
  int rc = pump_turn(E);
  mend__durable_fire(E);
  return rc;
}

static int pump_turn(mend_engine *E) {
  if (E->broken) return -1;
  mend__tp_begin(E);
  double picking = E->turn_deadline > 0 ? mend_real_now() : 0;
  unsigned long heard = E->events_heard_n;
  if (E->writer) mend__settle_writer(E);
  else if (mend__end_batch(E)) return -1;   /* what the last turn wrote, before acting on it */
  if (mend__events_due(E)) mend__hear_events(E);   /* what an earlier tick had no time to hear */
  mend__durable_fire(E);
  if (E->cancels_deferred) mend__land_deferred_cancels(E);
  mend__watch_lock(E);
  mend__check_fence(E);
  unsigned long durable = mend_store_durable_seq(E->store);
  for (int k = 0; k < 4 && E->moved_seq < durable; k++) {
    unsigned long seq = ++E->moved_seq;
    mend_run *head = E->waiting[seq % 4].head;
    if (!head) continue;
    if (E->ready_tail) E->ready_tail->qnext = head;
    else E->ready_head = head;
    E->ready_tail = E->waiting[seq % 4].tail;
    E->ready_n += E->waiting[seq % 4].n;
    E->waiting[seq % 4].head = E->waiting[seq % 4].tail = NULL;
    E->waiting[seq % 4].n = 0;
  }
  if (E->moved_seq < durable) E->moved_seq = durable;   /* every list was moved */
  if (picking > 0) E->tick_pickup_seconds += mend_real_now() - picking;
  if (E->tprof) {
    char what[32];
    snprintf(what, sizeof what, "events=%lu", E->events_heard_n - heard);
    mend__tp_end(E, MEND_TP_PICKUP, what);
  }
  int did = 0;
  /* A ticking host's thread CPU clock, read once between two pieces: the end of one is the
   * start of the next. The kernel reads it in a system call (a VM's dearest: two a piece were
   * some 0.14 ms of a 1 ms tick in W11). */
  double c_last = 0;
  /* While the writer thread holds a batch, a ticking host's pieces that would read through the
   * store wait for a later turn: answers and events in their order (the first that would read
   * stops the rest of its list), ready runs set aside, put back ahead of the list as the turn
   * ends. */
  int answers_wait = 0, events_wait = 0, looked = 0;
  mend_run *aside = NULL, *aside_tail = NULL;
  unsigned long aside_n = 0;
  /* Pieces of work: answers to host calls resume their steps, events whose batch is durable
   * reach their runs, then ready actions. */
  while (((E->answered_head && !answers_wait) || E->ready_head ||
          (!events_wait && mend__sent_event_ready(E))) && !E->broken) {
    /* A turn ends at a ticking host's budget, or after MAX_TURN_ACTIONS: a burst of starts
     * must not keep the next commit (and the timers, and I/O) waiting behind all of it. The
     * rest stays ready, ahead of what this turn queues. */
    double c0 = E->turn_deadline <= 0 ? 0 : c_last > 0 ? c_last : mend__thread_cpu_now();
    if ((did > 0 || looked > 0) &&
        (did >= MAX_TURN_ACTIONS ||
         (E->turn_deadline > 0 && mend_real_now() + mend__tick_next_piece(E) >= E->turn_deadline)))
      break;
    if (c0 > 0) tick_piece_begin(E);
    int held = mend__tick_store_held(E);
    if (E->answered_head && !answers_wait) {
      if (held && mend__answer_needs_store(E)) { answers_wait = 1; looked++; continue; }
    } else if (!events_wait && mend__sent_event_ready(E)) {
      if (held && mend__sent_event_needs_store(E)) { events_wait = 1; looked++; continue; }
    }
    if ((E->answered_head && !answers_wait) || (!events_wait && mend__sent_event_ready(E))) {
      int kind = E->answered_head && !answers_wait ? MEND_TP_ANSWER : MEND_TP_EVENT;
      mend__tp_begin(E);
      if (kind == MEND_TP_ANSWER) {
        int resumed = mend__resume_answered(E);
        if (E->turn_deadline > 0) E->tick_resumed += resumed;
      } else {
        mend__deliver_sent_event(E);
      }
      mend__tp_end(E, kind, NULL);
      did++;
      if (c0 > 0) tick_piece_cost(E, (c_last = mend__thread_cpu_now()) - c0);
      continue;
    }
    if (!E->ready_head) break;
    mend_run *r = E->ready_head;
    E->ready_head = r->qnext;
    E->ready_n--;
    if (!E->ready_head) E->ready_tail = NULL;
    if (r->wait_seq > durable) {
      /* it wrote again after it was queued: it waits for that batch too */
      mend__append(&E->waiting[r->wait_seq % 4].head, &E->waiting[r->wait_seq % 4].tail, r);
      E->waiting[r->wait_seq % 4].n++;
      continue;
    }
    if (held && action_needs_store(r)) {
      mend__append(&aside, &aside_tail, r);
      aside_n++;
      looked++;
      continue;
    }
    r->queued = 0;
    if (E->tprof) {
      static const int kinds[] = {
        [ACT_ADVANCE] = MEND_TP_ADVANCE, [ACT_EXECUTE] = MEND_TP_EXECUTE,
        [ACT_COMPENSATE] = MEND_TP_COMPENSATE, [ACT_FINISH] = MEND_TP_FINISH};
      int kind = r->next_action == ACT_NONE ? MEND_TP_OTHER : kinds[r->next_action];
      const char *step = r->cur >= 0 && r->cur < r->wf->nsteps ? r->wf->steps[r->cur].name : NULL;
      mend__tp_begin(E);
      mend__do_action(r);
      mend__tp_end(E, kind, step);
    } else {
      mend__do_action(r);
    }
    did++;
    if (c0 > 0) tick_piece_cost(E, (c_last = mend__thread_cpu_now()) - c0);
  }
  if (aside) {
    aside_tail->qnext = E->ready_head;
    if (!E->ready_head) E->ready_tail = aside_tail;
    E->ready_head = aside;
    E->ready_n += aside_n;
  }
  E->tick_did += (unsigned long)did;
  /* A tick hands its batch off once, as it ends (drive.c): the writer thread woken here would
   * take the tick's core from it for the rest of the tick. */
  if (E->turn_deadline > 0) return did;
  mend__tp_begin(E);
  int failed = E->writer && !E->broken && mend__end_batch(E);
  mend__tp_end(E, MEND_TP_HANDOFF, NULL);
  return failed ? -1 : did;
}

void mend__pump_cb(uv_idle_t *h) {
  mend_engine *E = h->data;
  mend__pump_turn(E);
  int writing = E->writer && mend_store_writer_busy(E->store);
  int more = mend__turn_has_work(E);
  if (!more && !E->broken && mend__virtual_timers_to_advance(E)) {
    mend_timers_advance_to(&E->timers, mend_timers_next_due(&E->timers));
    more = 1;
  }
  if (!more || E->broken) {
    uv_idle_stop(E->pump);
    if (!writing) mend_store_trim(E->store);   /* the runs wait: what a burst grew goes back */
  }
}
