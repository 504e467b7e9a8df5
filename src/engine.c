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
 * This file owns the machine's middle: the pump and its batches (the write-ahead rule), the one
 * place statuses change (step_to, run_to) and the history they write, the actions of runs, the
 * loop, and an engine's life.
 * The rest is in src/engine/, one concern a file, behind src/engine/engine_int.h: saga.c (what
 * outcomes mean), attempt.c (coroutines and every call into workflow code), admit.c (breakers
 * and caps), notify.c (alerts and events for the host), events.c (events sent to runs and
 * the steps that wait for them), exec.c, http.c, hostcall.c, load.c (workflows and their
 * versions), lock.c (a lock held by another process, waited out), recover.c, run.c (runs in
 * memory, and their start), worker.c (leases, fence, serving), repair.c.
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
#include "lerror.h"
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

void mend__breakdown(mend_engine *E, const char *fmt, ...) {
  if (E->broken) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(E->errmsg, sizeof E->errmsg, fmt, ap);
  va_end(ap);
  E->broken = 1;
  mend_engine_log_line(E, "error", NULL, NULL, 0, "engine", E->errmsg);
}

/* A lock held by another process is no failure: nothing was lost, the batch is kept, and the
 * engine waits it out (lock.c). Anything else stops the engine. */
void mend__store_failed(mend_engine *E) {
  if (mend_store_locked(E->store)) mend__lock_wait(E);
  else if (mend_store_conn_lost(E->store) && E->serving && !E->draining) mend__store_lost(E);
  else mend__breakdown(E, "%s", mend_store_errmsg(E->store));
}


/* Commits the batch now, outside the pump (an operation that must be durable before it
 * returns). The batch may hold the pump's own transitions too: if it fails they are rolled
 * back with it, so the engine stops rather than act on them. A lock held by another process
 * is waited for up to the store's default busy wait; then the operation fails, the engine
 * goes on, and the batch is committed once the lock goes. */
int mend__commit_now(mend_engine *E) {
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
void mend__new_run_id(mend_engine *E, char out[MEND_RUN_ID_LEN]) {
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

/* ---------------------------------------------------------------- the pump */


static int any_waiting(const mend_engine *E) {
  for (int k = 0; k < 4; k++)
    if (E->waiting[k].head) return 1;
  return 0;
}

/* Work a pump turn would do now: actions queued, a batch to commit or being committed, or
 * events and alerts waiting for the commit that comes before them (a run's last turn leaves
 * those behind). */
int mend__has_ready_work(const mend_engine *E) {
  return E->ready_head || any_waiting(E) || mend_store_batch_open(E->store) ||
         json_array_size(E->events) || json_array_size(E->alerts) ||
         (E->writer && (mend_store_writer_busy(E->store) || json_array_size(E->alerts_handed) ||
                        json_array_size(E->events_handed)));
}

/* Work a turn can do now. While the writer thread holds the only batch there is, a turn would
 * find nothing to do: the thread wakes the loop when it is done (on_wakeup). */
int mend__turn_has_work(const mend_engine *E) {
  int writing = (E->writer && mend_store_writer_busy(E->store)) || mend__lock_waiting(E);
  return E->ready_head || (!writing && mend__has_ready_work(E));
}

/* With nothing else to do, a run() on the virtual clock moves it to the next timer. */
int mend__virtual_timers_to_advance(const mend_engine *E) {
  return E->timers.is_virtual && E->auto_advance && !E->externals && E->timers.count;
}

void mend__kick(mend_engine *E) {
  if (E->destroying) return;   /* the pump handle is closing */
  if (!uv_is_active((uv_handle_t *)E->pump)) uv_idle_start(E->pump, mend__pump_cb);
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
  mend__kick(E);
}

void mend__arm(mend_run *r, mend_timer *t, double due) {
  mend_engine *E = r->E;
  if (mend_timer_arm(&E->timers, t, due)) { mend__breakdown(E, "out of memory arming a timer"); return; }
  if (E->timers.is_virtual) mend__kick(E);
  else if (t->slot == 1) mend_timers_sync(&E->timers);   /* it is the earliest */
  if (t == &r->wait) mend__park_soon(r);   /* it waits for its timer: parked if it lasts */
}

/* ---------------------------------------------------------------- writes */

const char *mend__step_name(mend_run *r, int i) { return r->item_name ? r->item_name : r->wf->steps[i].name; }

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
  if (st->status == MEND_STEP_RUNNING && (st->has_row || !st->custom_key) && !r->item) return;
  int new_row = !st->has_row;
  const char *idem_key = st->custom_key ? st->idem_key : NULL;
  mend_step_rec rec = {
    .run_id = r->id, .idx = i + r->row_base, .name = mend__step_name(r, i), .status = mend_step_status_name(st->status),
    .attempts = st->attempts, .comp_attempts = st->comp_attempts, .idem_key = idem_key,
    .custom_key = st->custom_key, .result = st->result, .error = st->error, .due = st->due,
    .last_delay = st->last_delay, .updated = mend_engine_now(r->E), .slept = st->slept,
    .awaits = mend__awaits(r, i)};
  if ((new_row ? mend_store_put_step : mend_store_update_step)(r->E->store, &rec)) mend__store_failed(r->E);
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

void mend__history(mend_run *r, const char *step, const char *event, const char *from,
                    const char *to, int attempt, const char *error, double delay,
                    const char *detail) {
  r = mend__root(r);   /* a lane's rows are its run's */
  mend_history_rec h = {r->id, step, mend__history_time(r), event, from, to, attempt, error,
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
void mend__step_to(mend_run *r, int i, mend_step_status to, const char *error, double delay,
                    const char *detail) {
  step_rt *st = &r->steps[i];
  if (!mend_step_transition_ok(st->status, to)) {
    mend__breakdown(r->E, "bug: illegal step transition %s -> %s (run %s, step %s)",
              mend_step_status_name(st->status), mend_step_status_name(to), r->id, mend__step_name(r, i));
    return;
  }
  const char *from = mend_step_status_name(st->status);
  st->status = to;
  if (error) mend__set_str(&st->error, error);
  int attempt = to >= MEND_STEP_COMPENSATING ? st->comp_attempts : st->attempts;
  mend__write_step(r, i);
  /* The first row after an attempt with HTTP requests (its outcome) names them. */
  char *http = detail ? NULL : r->http_detail;
  if (http) r->http_detail = NULL;
  mend__history(r, mend__step_name(r, i), "step", from, mend_step_status_name(to), attempt, error, delay,
                http ? http : detail);
  free(http);
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

/* ---------------------------------------------------------------- ticking hosts */

/* The CPU time of this thread: what an action cost, without the time the OS gave the CPU to
 * another thread meanwhile (taken for the action's, it made a busy machine's ticks do one
 * action each while hundreds waited). */
static double thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + 1e-9;   /* never 0: 0 is "not ticking" */
}

/* What the next action will cost, for a tick deciding whether it fits: up fast after a dear
 * one, down slowly, so that a run of cheap actions does not hide the dear ones among them. */
static void tick_piece_cost(mend_engine *E, double cost) {
  if (cost > 0.01) cost = 0.01;
  if (cost > E->tick_piece) E->tick_piece += (cost - E->tick_piece) / 4;
  else E->tick_piece -= (E->tick_piece - cost) / 64;
}

static void writer_done(void *ud);

/* A ticking host's frame must not wait for a commit or its fsync: from its first tick an
 * engine on its own loop with a real clock and a file commits on the store's writer thread,
 * whatever commit_thread says (which is about run_all). What was written before goes first,
 * committed here once. 1 if the thread runs. */
static int tick_writer(mend_engine *E) {
  if (E->writer || E->tick_writer_tried) return E->writer;
  if (E->timers.is_virtual || E->cfg.loop || mend__lock_waiting(E)) return 0;
  if (mend__end_batch(E) || mend_store_batch_open(E->store)) return 0;
  E->tick_writer_tried = 1;
  int rc = mend_store_start_writer(E->store, writer_done, E);
  if (rc < 0) mend_engine_log_line(E, "warn", NULL, NULL, 0, "tick", mend_store_errmsg(E->store));
  E->writer = rc == 0;
  return E->writer;
}

/* The writer thread writes a batch (not a part of the open one): a read would wait for it. */
static int writer_holds_batch(mend_engine *E) {
  return E->writer && mend_store_writer_busy(E->store) && !mend_store_writer_part(E->store);
}

/* Timers due and not yet fired: the heap's entries due by now are a subtree at its root. */
static int timers_due(const mend_timers *ts, size_t i, double now) {
  if (i >= ts->count || ts->heap[i]->due > now) return 0;
  return 1 + timers_due(ts, 2 * i + 1, now) + timers_due(ts, 2 * i + 2, now);
}

/* The Lua collector's steps, in the time a tick has left: its atomic step (every coroutine of
 * a run in flight traversed at once) took 1 to 2 ms with 1000 runs in flight, inside whichever
 * action's allocation came to it. A cycle begins here once the heap has grown by half since
 * the last one ended (before Lua's own pace, which waits for it to double), and goes on in the
 * next ticks' spare time; a step is taken only if the dearest one seen still fits. */
static void tick_collect(mend_engine *E) {
  lua_State *L = E->L;
  size_t kb = (size_t)lua_gc(L, LUA_GCCOUNT);
  if (!E->tick_gc_cycle && kb < E->tick_gc_base + E->tick_gc_base / 2) return;
  while (mend_real_now() + E->tick_gc_piece < E->turn_deadline) {
    double c0 = thread_cpu_now();
    int ended = lua_gc(L, LUA_GCSTEP, 0);
    double cost = thread_cpu_now() - c0;
    if (cost > E->tick_gc_piece) E->tick_gc_piece = cost;
    else E->tick_gc_piece -= (E->tick_gc_piece - cost) / 256;
    E->tick_gc_cycle = !ended;
    if (ended) {
      E->tick_gc_base = (size_t)lua_gc(L, LUA_GCCOUNT);
      break;
    }
  }
}

/* A tick does pieces of work (a due timer's wake, a pump turn's actions, a hand-off) while the
 * next, at the cost pieces have had (E->tick_piece), still fits before the deadline; the first
 * always runs, or a budget smaller than one piece would never move. A piece that runs step
 * code runs it to its next wait: the instruction budget is what bounds that. */
int mend_engine_tick_with(mend_engine *E, double budget, mend_engine_tick_info *info) {
  double start = mend_real_now();
  E->turn_deadline = start + (budget > 0 ? budget : 0);
  E->tick_did = 0;
  if (!E->broken) tick_writer(E);
  int turns = 0;
  do {
    if (mend__turn_has_work(E)) mend__kick(E);   /* a write outside any run (a load) needs a turn too */
    E->timers.fire_deadline = E->turn_deadline - E->tick_piece;
    uv_run(E->loop, UV_RUN_NOWAIT);   /* I/O, due timers, and one pump turn */
    E->timers.fire_deadline = 0;
    turns++;
  } while (!E->broken && mend__turn_has_work(E) &&   /* not while only the writer thread works */
           !writer_holds_batch(E) &&   /* the actions left would wait for it: the next tick's */
           mend_real_now() + E->tick_piece < E->turn_deadline);
  if (!E->broken) tick_collect(E);
  E->turn_deadline = 0;
  if (info) {
    double now = mend_real_now();
    info->seconds = now - start;
    info->actions = (int)E->tick_did;
    info->ready = 0;
    for (mend_run *r = E->ready_head; r; r = r->qnext) info->ready++;
    info->timers_due = E->timers.is_virtual ? 0 : timers_due(&E->timers, 0, now);
    info->committing = E->writer && mend_store_writer_busy(E->store);
  }
  return E->broken ? -1 : turns;
}

int mend_engine_tick_for(mend_engine *E, double budget) { return mend_engine_tick_with(E, budget, NULL); }

/* HTTP requests and child processes answer on the loop, at no time a timer knows: a host that
 * ticks is asked back soon while any is in flight. */
#define EXTERNAL_POLL_SECONDS 0.01

/* While the writer thread holds a batch a tick can do nothing, and the batch takes an fsync
 * (milliseconds): a host that sleeps as told is asked back this soon, not spun. */
#define WRITER_POLL_SECONDS 0.001

double mend_engine_next_due(mend_engine *E) {
  int writing = writer_holds_batch(E);
  if (mend__has_ready_work(E) && !writing) return 0;
  double next = mend_timers_next_due(&E->timers);
  double wait = next < 0 ? -1 : next - mend_engine_now(E);
  if (next >= 0 && wait < 0) wait = 0;
  if (E->externals && (wait < 0 || wait > EXTERNAL_POLL_SECONDS)) wait = EXTERNAL_POLL_SECONDS;
  if (writing && (wait < 0 || wait > WRITER_POLL_SECONDS)) wait = WRITER_POLL_SECONDS;
  return wait;
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
      /* its last run_to already gave the lease back (mend_store_update_run) */
      if (r->E->cfg.on_event)
        mend__emit(r->E, json_pack("{s:s, s:s, s:s, s:s}", "type", "run_finished", "run_id", r->id,
                           "workflow", r->wf->name, "status", mend_run_status_name(r->status)));
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
  if (mend_store_durable_seq(E->store) >= E->handed_seq &&
      (json_array_size(E->alerts_handed) || json_array_size(E->events_handed)))
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
  /* A ticking host hands every batch off: the commit (and its fsync) is not the frame's. */
  if (!E->writer || (E->turn_deadline <= 0 && !E->ready_head &&
                     mend_store_batch_writes(E->store) < HAND_OFF_WRITES)) {
    if (mend__lock_waiting(E)) return 0;   /* its timer kicks the next try */
    int rc = mend_store_commit(E->store);
    if (rc == MEND_STORE_BUSY) { mend__lock_wait(E); return 0; }
    if (rc) { mend__store_failed(E); return -1; }
    mend__fire_batch(E, take_array(&E->alerts), take_array(&E->events));
    return 0;
  }
  E->handed_seq = mend_store_open_seq(E->store);
  json_array_extend(E->alerts_handed, E->alerts);
  json_array_extend(E->events_handed, E->events);
  json_array_clear(E->alerts);
  json_array_clear(E->events);
  int rc = mend_store_hand_off(E->store);
  if (rc == MEND_STORE_BUSY) { mend__lock_wait(E); return 0; }
  if (rc) { mend__store_failed(E); return -1; }
  if (mend_store_writer_busy(E->store)) uv_ref((uv_handle_t *)E->wakeup);
  else mend__settle_writer(E);   /* nothing was written: durable at once */
  return 0;
}

/* ---------------------------------------------------------------- the loop */

/* One turn: do what the durable batches allow, then end the batch that wrote (so that a run
 * released by a commit has its next transition in the very next one). */
static int pump_turn(mend_engine *E) {
  if (E->broken) return -1;
  if (E->writer) mend__settle_writer(E);
  else if (mend__end_batch(E)) return -1;   /* what the last turn wrote, before acting on it */
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
    E->waiting[seq % 4].head = E->waiting[seq % 4].tail = NULL;
  }
  if (E->moved_seq < durable) E->moved_seq = durable;   /* every list was moved */
  int did = 0;
  while (E->ready_head && !E->broken) {
    /* A turn ends at a ticking host's budget, or after MAX_TURN_ACTIONS: a burst of starts
     * must not keep the next commit (and the timers, and I/O) waiting behind all of it. The
     * rest stays ready, ahead of what this turn queues. */
    double c0 = E->turn_deadline > 0 ? thread_cpu_now() : 0;
    if (did > 0 && (did >= MAX_TURN_ACTIONS ||
                    (E->turn_deadline > 0 && mend_real_now() + E->tick_piece >= E->turn_deadline)))
      break;
    /* A ticking host's action could read the store, and a read waits for the writer thread's
     * commit (its fsync): the action waits for the next tick instead. */
    if (E->turn_deadline > 0 && writer_holds_batch(E)) break;
    mend_run *r = E->ready_head;
    E->ready_head = r->qnext;
    if (!E->ready_head) E->ready_tail = NULL;
    if (r->wait_seq > durable) {
      /* it wrote again after it was queued: it waits for that batch too */
      mend__append(&E->waiting[r->wait_seq % 4].head, &E->waiting[r->wait_seq % 4].tail, r);
      continue;
    }
    r->queued = 0;
    mend__do_action(r);
    did++;
    if (c0 > 0) tick_piece_cost(E, thread_cpu_now() - c0);
  }
  E->tick_did += (unsigned long)did;
  if (E->writer && !E->broken && mend__end_batch(E)) return -1;
  return did;
}

void mend__pump_cb(uv_idle_t *h) {
  mend_engine *E = h->data;
  pump_turn(E);
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

/* One pass of a loop that blocks (run, serve): a turn if there is work for one, else sleep
 * until something happens. Kicked only with work for a turn: a turn started while the writer
 * thread has the batch does nothing, and the idle pump keeps the loop from sleeping, so kicking
 * every time made the loop spin through the thread's whole write (110k empty turns for 10k
 * runs) and through every wait of its runs. Timers wake it on time (timers.c: a timerfd). */
void mend__loop_once(mend_engine *E) {
  if (mend__turn_has_work(E) || mend__virtual_timers_to_advance(E)) mend__kick(E);
  uv_run(E->loop, UV_RUN_ONCE);
}

int mend_engine_run(mend_engine *E) {
  E->auto_advance = 1;
  while ((E->in_flight > 0 || E->parked.nheap > 0 || mend__has_ready_work(E)) && !E->broken) {
    /* On the virtual clock, runs left waiting for the world alone (an event, a token, a child
     * with no timeout) would wait here for ever: nothing but a caller can wake them. */
    if (E->timers.is_virtual && !E->timers.count && !E->attempts && !E->externals &&
        !mend__has_ready_work(E))
      break;
    mend__loop_once(E);
  }
  E->auto_advance = 0;
  /* Alerts of the last runs must reach their command before a one-shot caller exits. */
  double until = mend_real_now() + 5;
  while (!E->broken && E->alert_commands > 0 && mend_real_now() < until)
    uv_run(E->loop, UV_RUN_ONCE);
  return E->broken ? -1 : 0;
}

static void drain(mend_engine *E) {
  while (!E->broken && (E->ready_head || (mend__has_ready_work(E) && !mend__lock_waiting(E)))) pump_turn(E);
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
  if (E->limit_memory && nsize > old) {
    if (E->mem_used + (nsize - old) > E->mem_limit) {
      E->over_limit = 1;
      return NULL;
    }
    if (E->alloc_limits && E->cfg.sandbox && mend_limits_refuse_table(E->alloc_limits, ptr, osize, nsize))
      return NULL;
    /* What an allocation is for (a concatenation, string.rep, string.format...) is work no
     * count hook sees, one instruction for any size: a large one is charged its bytes and
     * looks at the clock, and fails once the call is over its limits. */
    if (E->alloc_limits && nsize - old >= ALLOC_CHARGED &&
        mend_limits_spend(E->alloc_limits, (double)(nsize - old) / ALLOC_BYTES_PER_INSTRUCTION))
      return NULL;
  }
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
  mend__breakdown(E, "mend: an error escaped every protected call of the engine's Lua state (a bug of "
            "mend's, or memory running out): %s", msg);
  /* The calls the error jumps over leave no limits behind them for the allocator or the
   * watchdog to touch. */
  E->limit_memory = 0;
  E->alloc_limits = NULL;
  mend_limits_watchdog_reset();
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
  E->cfg.http_allow = cfg->http_allow ? mend_dupstr(cfg->http_allow) : NULL;
  if (!host) {
    E->mem_limit = cfg->memory_limit > 0 ? cfg->memory_limit : (size_t)-1;
    host = E->owned_state = lua_newstate(limited_alloc, E);
    if (!host) { free(E); snprintf(err, (size_t)errlen, "out of memory"); return NULL; }
    luaL_openlibs(host);
    if (cfg->open_module) {   /* what `require "mend"` finds: the binding is the C API's */
      luaL_requiref(host, "mend.core", cfg->open_module, 0);
      lua_pop(host, 1);
    }
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
  mend_lerror_open(E->L);
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
  mend__park_init(E);
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
  uv_timer_start(E->lease_timer, mend__renew_leases, renew_ms ? renew_ms : 1, renew_ms ? renew_ms : 1);
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
  E->fence_until = mend__lease_until(E);
  if (mend_store_set_fence(E->store, E->owner, E->lease_seconds)) {
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
  if (cfg->writer_thread && !cfg->virtual_clock && !cfg->loop) {
    int rc = mend_store_start_writer(E->store, writer_done, E);
    if (rc < 0) {
      snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
      mend_engine_destroy(E);
      return NULL;
    }
    E->writer = rc == 0;
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
  /* Runs left unfinished stay in the store as they are; their leases are given back so that
   * another engine can take them at once. */
  if (E->store && !E->broken)
    for (mend_run *r = E->runs; r; r = r->next)
      if (mend_store_release(E->store, r->id, E->owner)) { mend__store_failed(E); break; }
  if (E->store && !E->broken) mend__park_release(E);
  while (E->runs) mend__run_free(E->runs);
  mend__park_close(E);
  mend__http_close(E);
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
  free((char *)E->cfg.http_allow);
  free(E);
}
