/*
 * drive: the three ways a host drives an engine (README: "Three ways to drive an engine"):
 * run (a blocking loop until nothing is left to do), advance (the virtual clock moved on by
 * hand) and tick (pieces of work within a frame's budget, and when to tick next), with what a
 * tick needs of its own: the writer thread started at the first tick, the Lua collector's
 * steps in a tick's spare time, and the tick's account of what its time went to.
 *
 * Must never: do an action itself (the pump does, pump.c); let a tick wait for a commit or
 * its fsync; keep a host's loop alive with nothing to do.
 */
#include "engine_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <lua.h>
#include <mend.h>

#include "util.h"

/* ---------------------------------------------------------------- ticking hosts */

/* A ticking host's frame must not wait for a commit or its fsync: from its first tick an
 * engine on its own loop with a real clock and a file commits on the store's writer thread,
 * whatever commit_thread says (which is about run_all). What was written before goes first,
 * committed here once. 1 if the thread runs. */
static int tick_writer(mend_engine *E) {
  if (E->writer || E->tick_writer_tried) return E->writer;
  if (E->timers.is_virtual || E->cfg.loop || mend__lock_waiting(E)) return 0;
  if (mend__end_batch(E) || mend_store_batch_open(E->store)) return 0;
  E->tick_writer_tried = 1;
  int rc = mend_store_start_writer(E->store, mend__writer_done, E);
  if (rc < 0) mend_engine_log_line(E, "warn", NULL, NULL, 0, "tick", mend_store_errmsg(E->store));
  E->writer = rc == 0;
  return E->writer;
}

/* Timers due and not yet fired: the heap's entries due by now are a subtree at its root. */
static int timers_due(const mend_timers *ts, size_t i, double now) {
  if (i >= ts->count || ts->heap[i]->due > now) return 0;
  return 1 + timers_due(ts, 2 * i + 1, now) + timers_due(ts, 2 * i + 2, now);
}

/* Lua's step size (log2 of bytes) for a tick's steps of the collector: a step of 2^4 bytes
 * is about 100 units of work (at Lua's step multiplier of 100), i.e. a few objects marked, the
 * atomic step, or at most two sweeps of 100 objects (lgc.c's GCSWEEPMAX). Sweeping frees what
 * is dead, the collector's dearest work by far (W11, 10,000 players, tick profile: 135 us on
 * average, up to 1.1 ms, for the five sweeps of a 2^6-byte step, against 13 us for as much
 * marking; the atomic step 32 us, with at most 70 live coroutines), so a piece of it ends
 * after a sweep or two. Smaller steps (a single object marked each) cost more in calls and
 * clock reads than the marking they do. */
#define TICK_GC_STEP_LOG2 4
/* Lua's default step size, given back when ticks no longer run the collector. */
#define LUA_GC_STEP_LOG2 13
/* The bytes of allocation a step pays for: what Lua's own pace would. */
#define TICK_GC_STEP_PAYS 16.0
/* A piece of collector work is steps for this long (wall clock, cheap to read), so
 * that the thread's CPU clock (a system call) is read once for many of them. */
#define TICK_GC_PIECE_SECONDS 30e-6
/* Steps owed for more than this much allocation are taken past the budget, by up to half of
 * it, and past the hard limit without bound: the heap must not grow for ever while ticks have
 * no time to spare. */
#define TICK_GC_OWED_MAX (4.0 * 1024 * 1024)
#define TICK_GC_OWED_HARD (64.0 * 1024 * 1024)

/* One piece of the collector's work: steps while the piece is short of
 * TICK_GC_PIECE_SECONDS and of the time end (the tick's deadline, or past it when owed), the
 * owed allocation paid (owing: 1) or not, and the cycle not ended; 1 when it ended a cycle.
 * *cpu is the thread's CPU clock as the last piece ended (0: not read yet), read once between
 * two pieces as between two actions (pump.c). */
static int gc_step(mend_engine *E, double *cpu, int owing, double end) {
  lua_State *L = E->L;
  double c0 = *cpu > 0 ? *cpu : mend__thread_cpu_now();
  mend__tp_begin(E);
  double until = mend_real_now() + TICK_GC_PIECE_SECONDS;
  if (until > end) until = end;
  int ended;
  do {
    ended = lua_gc(L, LUA_GCSTEP, 0);
    E->tick_gc_steps++;
    E->tick_gc_owed -= TICK_GC_STEP_PAYS;
  } while (!ended && (!owing || E->tick_gc_owed > 0) && mend_real_now() < until);
  mend__tp_end(E, MEND_TP_GC, ended ? "cycle_end" : NULL);
  *cpu = mend__thread_cpu_now();
  double cost = *cpu - c0;
  /* up fast, down slowly, as for actions (pump.c): the rare dear step (the atomic one) must
   * not keep every later step out of the ticks' spare time */
  if (cost > E->tick_gc_piece) E->tick_gc_piece += (cost - E->tick_gc_piece) / 4;
  else E->tick_gc_piece -= (E->tick_gc_piece - cost) / 64;
  E->tick_gc_cycle = !ended;
  if (ended) {
    E->tick_gc_base = (size_t)lua_gc(L, LUA_GCCOUNT);
    E->tick_gc_owed = 0;
  }
  return ended;
}

/* Lua's collector, left to its own pace, runs inside whichever allocation meets its debt, and
 * the debt is in proportion to the bytes asked for: one table or stack grown by a few KB swept
 * tens of thousands of objects, 1 to 14 ms of CPU in an action (W11, 10,000 players; its atomic
 * step took 1 to 2 ms with 1000 runs in flight). So from its first tick an engine runs its
 * collector itself: stopped, and at the end of each tick paid for what was allocated since the
 * last (in the tick and by the host's calls between), in small steps of their own, each a piece
 * the clock is checked between; what does not fit is owed to the next ticks (taken past the
 * budget only once it passes TICK_GC_OWED_MAX). Steps are owed while a cycle runs, or once
 * the heap has grown by half since the last one ended (Lua's own pace waits for it to double);
 * then more go on in the spare time. run and advance give the collector back to Lua. */
static void tick_collect(mend_engine *E, double budget) {
  lua_State *L = E->L;
  if (!E->tick_gc_stopped) {
    lua_gc(L, LUA_GCINC, 0, 0, TICK_GC_STEP_LOG2);   /* a memory error's full collection too */
    lua_gc(L, LUA_GCSTOP);
    E->tick_gc_stopped = 1;
    E->tick_gc_mark = E->mem_allocated;
  }
  size_t allocated = E->mem_allocated - E->tick_gc_mark;
  E->tick_gc_mark = E->mem_allocated;
  size_t kb = (size_t)lua_gc(L, LUA_GCCOUNT);
  if (!E->tick_gc_cycle && kb < E->tick_gc_base + E->tick_gc_base / 2) return;
  E->tick_gc_owed += (double)allocated;
  double cpu = 0;
  while (E->tick_gc_owed > 0) {
    double end = E->tick_gc_owed > TICK_GC_OWED_HARD
                   ? HUGE_VAL
                   : E->turn_deadline + (E->tick_gc_owed > TICK_GC_OWED_MAX ? budget / 2 : 0);
    if (mend_real_now() + E->tick_gc_piece >= end || gc_step(E, &cpu, 1, end)) break;
  }
  while (E->tick_gc_cycle && mend_real_now() + E->tick_gc_piece < E->turn_deadline &&
         !gc_step(E, &cpu, 0, E->turn_deadline))
    ;
}

static void untick_collect(mend_engine *E) {
  if (!E->tick_gc_stopped) return;
  lua_gc(E->L, LUA_GCINC, 0, 0, LUA_GC_STEP_LOG2);
  lua_gc(E->L, LUA_GCRESTART);
  E->tick_gc_stopped = 0;
}

/* Another turn for a tick that commits on the writer thread: only while nothing is written
 * (what follows a write waits for its batch, handed off as the tick ends), and not for the
 * open batch alone. */
static int tick_turn_again(mend_engine *E) {
  return (E->ready_head || E->answered_head || mend__sent_event_ready(E)) &&
         !mend_store_batch_open(E->store);
}

/* The tick's one hand-off, after its collector steps: the writer thread it wakes then runs
 * while the host's frame goes on or sleeps (in SCHED_BATCH it does not take the core from the
 * host's thread; wsched.c), not in the middle of the tick's pieces. A batch still with the
 * thread makes this one wait for the next tick, growing. */
static void tick_hand_off(mend_engine *E) {
  mend__tp_begin(E);
  mend__end_batch(E);   /* a failure breaks the engine: the tick returns -1 */
  mend__tp_end(E, MEND_TP_HANDOFF, NULL);
  mend__durable_fire(E);
}

/* A tick does pieces of work (a due timer's wake, a pump turn's actions, a hand-off) while the
 * next, at what it may cost (mend__tick_next_piece), still fits before the deadline; the first
 * always runs, or a budget smaller than one piece would never move. A piece that runs step
 * code runs it to its next wait: the instruction budget is what bounds that. */
int mend_engine_tick_with(mend_engine *E, double budget, mend_engine_tick_info *info) {
  /* NaN would make no deadline at all, and an infinite budget a tick that blocks while work
   * keeps coming: neither is "about budget seconds". */
  if (!(budget >= 0) || !isfinite(budget)) {
    E->refusal = MEND_REFUSED_INVALID;
    snprintf(E->errmsg, sizeof E->errmsg, "tick: budget must be a finite number of seconds >= 0, "
             "got %g", budget);
    return -2;
  }
  double start = mend_real_now();
  E->turn_deadline = start + (budget > 0 ? budget : 0);
  E->tick_did = 0;
  E->tick_resumed = E->tick_delivered = E->tick_gc_steps = 0;
  E->tick_pickup_seconds = 0;
  unsigned long moved0 = E->moved_seq, heard0 = E->events_heard_n;
  int kb0 = lua_gc(E->L, LUA_GCCOUNT);
  mend__tp_tick_begin(E, budget);
  mend__writer_sched_want(E, 1);
  if (!E->broken) tick_writer(E);
  if (!E->tick_reads_opened) {   /* at the first tick, so that no later one pays for a login */
    E->tick_reads_opened = 1;
    mend_store_open_committed_reads(E->store, E->cfg.writer_sched != MEND_WRITER_SCHED_OTHER);
  }
  if (!E->broken) mend__looks_pick_up(E, 0);   /* what the last tick's look found, if here */
  double t_work = mend_real_now();
  E->tick_pickup_seconds += t_work - start;
  int turns = 0;
  do {
    /* a write outside any run (a load) needs a turn too */
    if (mend__turn_has_work(E)) mend__kick(E);
    E->timers.fire_deadline = E->turn_deadline - mend__tick_next_piece(E);
    uv_run(E->loop, UV_RUN_NOWAIT);   /* I/O, due timers, and one pump turn */
    E->timers.fire_deadline = 0;
    turns++;
  } while (!E->broken && mend__turn_has_work(E) &&   /* not while only the writer thread works */
           (!E->writer || tick_turn_again(E)) &&
           /* the actions left would wait for it: the next tick's */
           !mend__writer_holds_batch(E) &&
           mend_real_now() + mend__tick_next_piece(E) < E->turn_deadline);
  double t_send = mend_real_now();
  if (!E->broken) mend__looks_send(E);   /* its round trip in the frame's gap */
  double t_gc = mend_real_now();
  if (!E->broken) tick_collect(E, budget > 0 ? budget : 0);
  double t_off = mend_real_now();
  int handed = 0;
  if (!E->broken && E->writer) {   /* handed: it was open, and is no longer */
    handed = mend_store_batch_open(E->store);
    tick_hand_off(E);
    handed = handed && !mend_store_batch_open(E->store);
  }
  E->turn_deadline = 0;
  if (info) {
    double now = mend_real_now();
    info->seconds = now - start;
    info->actions = (int)E->tick_did;
    info->ready = (int)E->ready_n;   /* a walk of the list missed the cache at every run */
    info->timers_due = E->timers.is_virtual ? 0 : timers_due(&E->timers, 0, now);
    info->committing = E->writer && mend_store_writer_busy(E->store);
    info->resumed = E->tick_resumed;
    info->delivered = E->tick_delivered;
    info->picked_up = (int)(E->moved_seq - moved0);
    info->heard = (int)(E->events_heard_n - heard0);
    info->handed_off = handed;
    info->gc_steps = E->tick_gc_steps;
    info->lua_kb_begin = kb0;
    info->lua_kb_end = lua_gc(E->L, LUA_GCCOUNT);
    info->pickup_seconds = E->tick_pickup_seconds;
    /* the turns' pick-ups (pump.c) are inside the turns' time */
    info->work_seconds = t_send - t_work - (E->tick_pickup_seconds - (t_work - start));
    info->gc_seconds = t_off - t_gc;
    info->handoff_seconds = (t_gc - t_send) + (now - t_off);
  }
  mend__tp_tick_end(E);
  return E->broken ? -1 : turns;
}

int mend_engine_tick_for(mend_engine *E, double budget) {
  return mend_engine_tick_with(E, budget, NULL);
}

/* HTTP requests and child processes answer on the loop, at no time a timer knows: a host that
 * ticks is asked back soon while any is in flight. */
#define EXTERNAL_POLL_SECONDS 0.01

/* While the writer thread holds a batch a tick does only the pieces that read nothing (pump.c),
 * and the batch takes an fsync (milliseconds): a host that sleeps as told is asked back this
 * soon, not spun. */
#define WRITER_POLL_SECONDS 0.001

double mend_engine_next_due(mend_engine *E) {
  int writing = mend__writer_holds_batch(E);
  if (mend__has_ready_work(E) && !writing) return 0;
  double next = mend_timers_next_due(&E->timers);
  double wait = next < 0 ? -1 : next - mend_engine_now(E);
  if (next >= 0 && wait < 0) wait = 0;
  if (E->externals && (wait < 0 || wait > EXTERNAL_POLL_SECONDS)) wait = EXTERNAL_POLL_SECONDS;
  if ((writing || mend__looks_out(E)) && (wait < 0 || wait > WRITER_POLL_SECONDS))
    wait = WRITER_POLL_SECONDS;
  return wait;
}

/* ---------------------------------------------------------------- run and advance */

/* One pass of a loop that blocks (run, serve): a turn if there is work for one, else sleep
 * until something happens. Kicked only with work for a turn: a turn started while the writer
 * thread has the batch does nothing, and the idle pump keeps the loop from sleeping, so kicking
 * every time made the loop spin through the thread's whole write (110k empty turns for 10k
 * runs) and through every wait of its runs. Timers wake it on time (timers.c: a timerfd). */
void mend__loop_once(mend_engine *E) {
  if (mend__turn_has_work(E) || mend__virtual_timers_to_advance(E)) mend__kick(E);
  uv_run(E->loop, UV_RUN_ONCE);
}

/* What another process asks of the runs held here (an event, a token's answer or a child's end
 * sent to the inbox; a cancel) reaches them only by a look at the store, as a serving worker's
 * poll does (worker.c): run() on a real clock looks this often, so that `mend run` of a run
 * that waits for the world, or that someone cancels, does not wait for ever. */
#define RUN_LOOK_MS 500

static void alert_wait_over(uv_timer_t *t) { (void)t; }

/* Alerts of the last runs must reach their command before a one-shot caller exits, for at
 * most ALERT_WAIT_MS: a turn of the loop waits for its next event, and without a timer of its
 * own a command that hangs would hold the caller until some other timer or the command ends. */
#define ALERT_WAIT_MS 5000
static void wait_for_alert_commands(mend_engine *E) {
  if (E->broken || E->alert_commands <= 0) return;
  uv_timer_t limit;
  uv_timer_init(E->loop, &limit);
  uv_update_time(E->loop);
  uv_timer_start(&limit, alert_wait_over, ALERT_WAIT_MS, 0);
  while (!E->broken && E->alert_commands > 0 && uv_is_active((uv_handle_t *)&limit))
    uv_run(E->loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&limit, NULL);
  uv_run(E->loop, UV_RUN_NOWAIT);   /* the close is done before the handle's memory goes */
}

static void look_from_run(uv_timer_t *t) {
  mend_engine *E = t->data;
  if (E->broken || E->draining || E->store_lost || mend__lock_stops_looks(E)) return;
  mend__take_cancel_requests(E);
  if (!E->broken) mend__take_events(E);
}

/* As run() returns, and as a panic jumps out of it (engine.c: on_panic; the Lua binding's
 * run, for an error of the state it shares with its caller). */
void mend_engine_run_left(mend_engine *E) {
  E->auto_advance = 0;
  if (E->run_look) uv_timer_stop(E->run_look);
}

int mend_engine_run(mend_engine *E) {
  untick_collect(E);
  mend__looks_settle(E);
  mend__writer_sched_want(E, 0);
  E->auto_advance = 1;
  if (!E->timers.is_virtual && !E->poll_timer && (E->inbox_started || !mend__events_start(E))) {
    if (!E->run_look && (E->run_look = malloc(sizeof *E->run_look))) {
      uv_timer_init(E->loop, E->run_look);
      E->run_look->data = E;
    }
    if (E->run_look) uv_timer_start(E->run_look, look_from_run, RUN_LOOK_MS, RUN_LOOK_MS);
  }
  while ((E->in_flight > 0 || E->parked.nheap > 0 || mend__has_ready_work(E)) && !E->broken) {
    /* On the virtual clock, runs left waiting for the world alone (an event, a token, a child
     * with no timeout) would wait here for ever: nothing but a caller can wake them. */
    if (E->timers.is_virtual && !E->timers.count && !E->attempts && !E->externals &&
        !mend__has_ready_work(E))
      break;
    mend__loop_once(E);
  }
  mend_engine_run_left(E);
  wait_for_alert_commands(E);
  return E->broken ? -1 : 0;
}

static void drain(mend_engine *E) {
  while (!E->broken && (E->ready_head || (mend__has_ready_work(E) && !mend__lock_waiting(E))))
    mend__pump_turn(E);
}

int mend_engine_advance(mend_engine *E, double seconds) {
  if (!E->timers.is_virtual) {
    E->refusal = MEND_REFUSED_CLOCK;
    snprintf(E->errmsg, sizeof E->errmsg, "advance needs a virtual clock");
    return -1;
  }
  /* The clock it leaves is the time of every row written after: an infinite one would be
   * recorded as DBL_MAX in each of them; NaN and a step back make no time at all. */
  if (!(seconds >= 0) || !isfinite(mend_engine_now(E) + seconds)) {
    E->refusal = MEND_REFUSED_INVALID;
    snprintf(E->errmsg, sizeof E->errmsg, "advance: seconds must be a finite number >= 0, got %g",
             seconds);
    return -1;
  }
  E->refusal = MEND_REFUSED_STORE;
  untick_collect(E);
  mend__looks_settle(E);
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
