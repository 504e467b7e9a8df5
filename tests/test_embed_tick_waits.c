/*
 * test_embed_tick_waits: what a ticked engine does in its ticks while its writer thread holds
 * a batch, through mend.h alone: answers and signals are its work only in its ticks, work
 * that needs no store goes on, a run waiting on a late writer still runs, each end is heard
 * in the tick its run leaves flight, and a wait (a first, a second, one of the same event
 * name) begins in a tick without reading the inbox and takes each event once.
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest
 * c_embed_tick_waits, under AddressSanitizer in c_sanitized), and against the installed library
 * with pkg-config and with find_package(mend) (tests/embed_*.sh). Its set-up is
 * tests/embed_host.h's. Must never: use more of mend than include/mend.h.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <dirent.h>
#include <mend.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "embed_host.h"

/* A ticking host's answers and signals are mend's work only in its ticks (issue 24): an
 * answer to a host call resumes nothing before the next tick, and a signal to a run held in
 * memory is accepted (or refused) at once but taken by the run in a later tick, once the batch
 * that holds it is durable, with full durability on a database file. */
static const char slay_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'slay', steps = {\n"
  "  { name = 'spawn', execute = function(ctx)\n"
  "      local m = mend.call('spawn_later')\n"
  "      mend.call('resumed')\n"
  "      return m end },\n"
  "  { name = 'kill', wait_for = 'boss_killed', timeout = 3600 },\n"
  "  { name = 'reward', execute = function(ctx) return ctx.results.kill.gold end } } }\n";

static mend_call *spawn_call;
static int resumed_calls;
static void spawn_later(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  spawn_call = call;
}
static void resumed(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  resumed_calls++;
  mend_call_return(call, NULL);
}

static void tick_until(mend_engine *E, int (*done)(mend_engine *E, const char *id),
                       const char *id) {
  double t0 = now_s();
  while (!done(E, id) && now_s() - t0 < 20) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    if (mend_engine_next_tick(E) != 0) usleep(1000);
  }
  CHECK(done(E, id));
}
static int spawn_asked(mend_engine *E, const char *id) {
  (void)E;
  (void)id;
  return spawn_call != NULL;
}
static int kill_waits(mend_engine *E, const char *id) { return run_has(E, id, "\"waiting\"", 0); }
static int run_ended(mend_engine *E, const char *id) {
  (void)id;
  return mend_engine_in_flight_count(E) == 0;
}

/* "slay" with a second wait right after the first. */
static const char slay_twice_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'slay_twice', steps = {\n"
  "  { name = 'spawn', execute = function(ctx)\n"
  "      local m = mend.call('spawn_later')\n"
  "      mend.call('resumed')\n"
  "      return m end },\n"
  "  { name = 'kill', wait_for = 'boss_killed', timeout = 3600 },\n"
  "  { name = 'loot', wait_for = 'chest_opened', timeout = 3600 },\n"
  "  { name = 'reward', execute = function(ctx)\n"
  "      return ctx.results.kill.gold + ctx.results.loot.gold end } } }\n";

/* Two waits in a row for the same event name. */
static const char twice_same_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'twice_same', steps = {\n"
  "  { name = 'spawn', execute = function(ctx) return mend.call('spawn_later') end },\n"
  "  { name = 'kill', wait_for = 'e' },\n"
  "  { name = 'loot', wait_for = 'e' },\n"
  "  { name = 'reward', execute = function(ctx)\n"
  "      return ctx.results.kill.n * 10 + ctx.results.loot.n end } } }\n";

/* A file database of its own (name in the test dir), workflow `wf` ("slay" or "slay_twice")
 * loaded with its host functions, one run of it started. */
static mend_engine *slay_engine_of(const char *name, const char *wf, char id[17]) {
  char db[160];
  mend_options o;
  file_db_options(&o, db, sizeof db, name, MEND_SYNC_FULL);
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "spawn_later", spawn_later, NULL);
  mend_engine_register_function(E, "resumed", resumed, NULL);
  load(E, wf);
  start(E, wf, NULL, id);
  spawn_call = NULL;
  return E;
}

static mend_engine *slay_engine(const char *name, char id[17]) {
  return slay_engine_of(name, "slay", id);
}

static void it_ticks_answers_and_signals_in_its_ticks(void) {
  char id[17], st[32];
  mend_engine *E = slay_engine("signals.db", id);
  resumed_calls = 0;
  tick_until(E, spawn_asked, id);
  CHECK_EQ_INT(mend_call_return(spawn_call, "{\"id\":1}"), MEND_OK);
  CHECK_EQ_INT(resumed_calls, 0);   /* the step goes on in a tick, not in the answer */
  CHECK(mend_engine_next_tick(E) == 0);
  tick_until(E, kill_waits, id);
  CHECK_EQ_INT(resumed_calls, 1);

  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{\"gold\":50}", "k1"), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{\"gold\":99}", "k1"), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{bad", NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_signal(E, "nosuchrun", "boss_killed", NULL, NULL), MEND_ENOTFOUND);
  CHECK(kill_waits(E, id));   /* accepted; taken only in a tick, once durable */
  tick_until(E, run_ended, id);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  CHECK(run_has(E, id, "\"result\":50", 0));
  CHECK(!run_has(E, id, "\"gold\":99", 0));
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", NULL, NULL), MEND_ESTATE);
  mend_engine_free(E);
}

/* A tick whose writer thread still holds the last batch (waiting for a core, or its fsync) does
 * the work that needs nothing from the store: answers resume their steps, whose next `running`
 * rows go to the next batch (issue 24). Nothing announced by the held batch runs before it is
 * durable (a new run's first step), nor anything announced by the next one (a resumed step's
 * successor), and a timeout due meanwhile, whose look at the inbox reads through the batch,
 * waits for a later tick rather than for the thread. The thread is held back on purpose
 * (handoff.c: MEND_WRITER_HOLD, in a build with failpoints). */
static const char behind_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'behind', steps = {\n"
  "  { name = 'ask', execute = function(ctx)\n"
  "      local a = mend.call('ask_later')\n"
  "      mend.call('saw', ctx.run_id, 'ask')\n"
  "      return a end },\n"
  "  { name = 'next', execute = function(ctx) return mend.call('saw', ctx.run_id, 'next') end },\n"
  "} }\n";
static const char keyed_lua[] =   /* its next step's key is looked up among results: a read */
  "local mend = require 'mend'\n"
  "return { name = 'keyed', steps = {\n"
  "  { name = 'ask', execute = function(ctx) return mend.call('ask_later') end },\n"
  "  { name = 'next', idempotency_key = function(ctx) return 'k-' .. ctx.run_id end,\n"
  "    execute = function(ctx) return mend.call('saw', ctx.run_id, 'next') end } } }\n";
/* an event of the engine's own name: read with the batch */
static const char engine_named_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'engine_named', steps = {\n"
  "  { name = 'ask', execute = function(ctx) return mend.call('ask_later') end },\n"
  "  { name = 'hear', wait_for = 'mend.ping', timeout = 3600 } } }\n";
static const char lonely_lua[] =
  "return { name = 'lonely', retry = { max_attempts = 1 }, steps = {\n"
  "  { name = 'hear', wait_for = 'never', timeout = 1.5 } } }\n";

static mend_call *ask_calls[8];
static int n_asks, saw_ask, saw_next;
static void ask_later(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  if (n_asks < 8) ask_calls[n_asks] = call;
  n_asks++;
}
static void saw(void *ud, mend_call *call, const char *args) {
  if (strstr(args, "\"ask\"")) saw_ask++;
  else saw_next++;
  peek(ud, call, args);   /* its running row durable, and answered */
}
static int asks_at_least(mend_engine *E, const char *n) { (void)E; return n_asks >= atoi(n); }
static int nexts_at_least(mend_engine *E, const char *n) { (void)E; return saw_next >= atoi(n); }
static int hears(mend_engine *E, const char *id) { return run_has(E, id, "\"waiting\"", 0); }

/* Ticks until nothing is being committed and no work is due now (up to 20 s): every write so
 * far is durable. */
static void tick_until_settled(mend_engine *E) {
  mend_tick_stats st;
  double t0 = now_s();
  do {
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
    usleep(1000);
  } while ((st.committing || mend_engine_next_tick(E) == 0) && now_s() - t0 < 20);
}

static void it_ticks_what_needs_no_store_while_its_writer_holds_a_batch(void) {
#ifndef MEND_FAILPOINTS
  return;   /* nothing holds the thread back */
#endif
  char db[128], hold[160], id[5][17], st_text[32];
  snprintf(hold, sizeof hold, "%s/writer-held", dir);
  unlink(hold);
  setenv("MEND_WRITER_HOLD", hold, 1);   /* before the thread starts: read at each batch */
  mend_options o;
  file_db_options(&o, db, sizeof db, "behind.db", MEND_SYNC_FULL);
  mend_engine *E = engine(&o);
  peek_engine = engine(&o);
  mend_engine_register_function(E, "ask_later", ask_later, NULL);
  mend_engine_register_function(E, "saw", saw, NULL);
  load(E, "behind");
  load(E, "lonely");
  load(E, "keyed");
  load(E, "engine_named");
  n_asks = saw_ask = saw_next = peeks = peeks_durable = 0;
  char lonely[17];
  start(E, "lonely", NULL, lonely);
  double lonely_from = now_s();
  for (int i = 0; i < 4; i++) start(E, "behind", NULL, id[i]);
  tick_until(E, asks_at_least, "4");
  tick_until(E, hears, lonely);
  mend_tick_stats st;
  tick_until_settled(E);   /* every write so far durable */
  /* the timeout is not due yet (a slow machine: it was) */
  int timed = now_s() - lonely_from < 1.2;

  start(E, "behind", NULL, id[4]);   /* its first step waits for the batch held below */
  FILE *f = fopen(hold, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);   /* hands that batch off */
  CHECK_EQ_INT(st.committing, 1);
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(mend_call_return(ask_calls[i], "1"), MEND_OK);
  if (timed) while (now_s() - lonely_from < 1.6) usleep(10000);
  CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);
  CHECK(st.seconds < 2);   /* it did not wait for the thread (held up to 20 s) */
  CHECK_EQ_INT(st.committing, 1);   /* which still holds the batch */
  CHECK_EQ_INT(saw_ask, 4);         /* the answered steps went on: they read nothing */
  CHECK(st.actions >= 4);
  for (int k = 0; k < 3; k++) {
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
    CHECK(st.seconds < 2);
    usleep(2000);
  }
  CHECK_EQ_INT(n_asks, 4);     /* the new run's first step: its running row is held */
  CHECK_EQ_INT(saw_next, 0);   /* the next steps' running rows: in the batch after it */
  unlink(hold);

  tick_until(E, asks_at_least, "5");
  CHECK_EQ_INT(mend_call_return(ask_calls[4], "1"), MEND_OK);
  tick_until(E, nexts_at_least, "5");
  tick_until(E, run_ended, id[0]);
  CHECK_EQ_INT(peeks, 10);
  CHECK_EQ_INT(peeks_durable, 10);   /* every step ran once its running row was durable */
  for (int i = 0; i < 5; i++) CHECK_STR(run_status(E, id[i], st_text, sizeof st_text), "succeeded");
  CHECK(run_has(E, lonely, "no event never within", 1));   /* timed out, once let be */

  /* The thread holding a part of the open batch (a host's burst of starts passes one at 1024
   * records) holds the connection as a batch does: a timeout due meanwhile waits too. */
  start(E, "lonely", NULL, lonely);
  tick_until(E, hears, lonely);
  tick_until_settled(E);
  lonely_from = now_s();
  f = fopen(hold, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  char burst[17];
  for (int i = 0; i < 1500; i++) start(E, "lonely", NULL, burst);
  while (now_s() - lonely_from < 1.6) usleep(10000);
  CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);
  CHECK(st.seconds < 2);
  CHECK_EQ_INT(st.committing, 1);
  unlink(hold);
  tick_until(E, run_ended, lonely);
  CHECK(run_has(E, lonely, "no event never within", 1));

  /* An answer whose step goes on into a read (the next step's key among results; a wait for an
   * event of the engine's own name) waits for a tick after the batch, rather than for the
   * thread inside this one. */
  for (int w = 0; w < 2; w++) {
    char keyed[17];
    n_asks = saw_next = 0;
    start(E, w == 0 ? "keyed" : "engine_named", NULL, keyed);
    tick_until(E, asks_at_least, "1");
    tick_until_settled(E);
    start(E, "behind", NULL, id[0]);   /* a batch to hold */
    f = fopen(hold, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
    CHECK_EQ_INT(st.committing, 1);
    CHECK_EQ_INT(mend_call_return(ask_calls[0], "1"), MEND_OK);
    for (int k = 0; k < 3; k++) {
      CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);
      CHECK(st.seconds < 2);
      CHECK_EQ_INT(st.actions, 0);
      usleep(2000);
    }
    unlink(hold);
    tick_until(E, asks_at_least, "2");   /* the new run's first step, once its batch is durable */
    CHECK_EQ_INT(mend_call_return(ask_calls[1], "1"), MEND_OK);
    tick_until(E, nexts_at_least, w == 0 ? "2" : "1");   /* engine_named has no next step */
    if (w == 1) {
      tick_until(E, hears, keyed);
      CHECK_EQ_INT(mend_engine_signal(E, keyed, "mend.ping", NULL, NULL), MEND_OK);
    }
    tick_until(E, run_ended, keyed);
    CHECK_STR(run_status(E, keyed, st_text, sizeof st_text), "succeeded");
  }
  unsetenv("MEND_WRITER_HOLD");
  mend_engine_free(peek_engine);
  mend_engine_free(E);
}

/* What a tick holds back while the writer thread has a batch (an answered step whose next
 * step's key is looked up among results: a read) is not starved by a host whose every frame
 * writes and whose writer is always late (MEND_WRITER_DELAY_MS: each batch waits 30 ms, longer
 * than a frame): a tick hands the open batch off only as it ends, so some later tick begins
 * with the thread idle, and runs what waited. */
static const char starve_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'starve', steps = {\n"
  "  { name = 'ask', execute = function(ctx) return mend.call('ask_later') end },\n"
  "  { name = 'next', idempotency_key = function(ctx) return 'k-' .. ctx.run_id end,\n"
  "    execute = function(ctx) return mend.call('noted') end } } }\n";
static int noted_calls;
static void noted(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  noted_calls++;
  CHECK_EQ_INT(mend_call_return(call, "1"), MEND_OK);
}

static void it_runs_what_waits_for_a_late_writer_while_every_frame_writes(void) {
#ifndef MEND_FAILPOINTS
  return;   /* nothing makes the thread late */
#endif
  char db[128], id[17];
  setenv("MEND_WRITER_DELAY_MS", "30", 1);   /* before the thread starts: read at each batch */
  mend_options o;
  file_db_options(&o, db, sizeof db, "starve.db", MEND_SYNC_PROCESS);
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "ask_later", ask_later, NULL);
  mend_engine_register_function(E, "noted", noted, NULL);
  load(E, "starve");
  load(E, "plain");
  enum { WAITING = 4 };
  n_asks = noted_calls = 0;
  for (int i = 0; i < WAITING; i++) start(E, "starve", NULL, id);
  tick_until(E, asks_at_least, "4");
  for (int i = 0; i < WAITING; i++) CHECK_EQ_INT(mend_call_return(ask_calls[i], "1"), MEND_OK);
  /* Every frame starts a run, so every tick has writes of its own for the thread, which is
   * busy (30 ms a batch) through most frames (a 2 ms tick, 1 ms of rest). */
  int frames = 0, busy = 0;
  mend_tick_stats st;
  while (noted_calls < WAITING && frames < 2000) {
    start(E, "plain", NULL, id);
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
    busy += st.committing;
    usleep(1000);
    frames++;
  }
  printf("late writer: %d frames (the thread busy after %d of them) until the %d held steps ran\n",
         frames, busy, WAITING);
  CHECK_EQ_INT(noted_calls, WAITING);
  CHECK(busy > frames / 2);   /* the thread was late through most frames: the case meant */
  tick_until(E, run_ended, NULL);
  mend_engine_free(E);
  unsetenv("MEND_WRITER_DELAY_MS");
}

/* Two waits for one event name after an answer, in a ticking host's pieces: each takes its
 * own event, in the order sent, whether the events were durable before the answer resumed the
 * step or were sent with the answer in the same frame (then not durable when it waits). */
static const char hits_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'hits', steps = {\n"
  "  { name = 'spawn', execute = function(ctx) return mend.call('spawn_later') end },\n"
  "  { name = 'first', wait_for = 'hit', timeout = 3600 },\n"
  "  { name = 'second', wait_for = 'hit', timeout = 3600 },\n"
  "  { name = 'sum', execute = function(ctx)\n"
  "      return ctx.results.first.n * 10 + ctx.results.second.n end } } }\n";

static void hits_run(mend_engine *E, int durable_first, int a, int b) {
  char id[17], st[32], p[32], want[32];
  start(E, "hits", NULL, id);
  spawn_call = NULL;
  tick_until(E, spawn_asked, id);
  snprintf(p, sizeof p, "{\"n\":%d}", a);
  CHECK_EQ_INT(mend_engine_signal(E, id, "hit", p, NULL), MEND_OK);
  snprintf(p, sizeof p, "{\"n\":%d}", b);
  CHECK_EQ_INT(mend_engine_signal(E, id, "hit", p, NULL), MEND_OK);
  /* ticks with nothing to resume: the signals' batch is handed off and becomes durable */
  for (int i = 0; durable_first && i < 50; i++) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    usleep(2000);
  }
  CHECK_EQ_INT(mend_call_return(spawn_call, NULL), MEND_OK);
  tick_until(E, run_ended, id);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  snprintf(want, sizeof want, "\"result\":%d", a * 10 + b);
  CHECK(run_has(E, id, want, 0));
}

/* A host that counts the runs it started, those in flight and the run_finished events it
 * heard finds after every tick that each run gone from the count was heard: its end comes in
 * the tick that takes it out of flight, though the batch open then has writes (the host's start
 * of a run each frame, as a lease renewal would be), and a host that stops ticking at 0 in
 * flight has heard them all. */
static void it_hears_each_end_in_the_tick_the_run_leaves_flight(void) {
  char db[128], id[17];
  mend_options o;
  file_db_options(&o, db, sizeof db, "ends.db", MEND_SYNC_PROCESS);
  o.on_event = on_event;
  mend_engine *E = engine(&o);
  load(E, "plain");
  enum { RUNS = 30 };
  events_finished = 0;
  int started = 0, behind = 0;
  double t0 = now_s();
  while ((started < RUNS || mend_engine_in_flight_count(E) > 0) && now_s() - t0 < 20) {
    if (started < RUNS) {
      start(E, "plain", NULL, id);
      started++;
    }
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    if (started - mend_engine_in_flight_count(E) != events_finished) behind++;
    usleep(1000);
  }
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_EQ_INT(events_finished, RUNS);
  CHECK_EQ_INT(behind, 0);
  mend_engine_free(E);
}

static void it_takes_each_event_once_after_an_answer_in_a_tick(void) {
  char db[128];
  mend_options o;
  file_db_options(&o, db, sizeof db, "hits.db", MEND_SYNC_FULL);
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "spawn_later", spawn_later, NULL);
  load(E, "hits");
  hits_run(E, 1, 1, 2);
  hits_run(E, 0, 3, 4);
  mend_engine_free(E);
}

/* A step that begins its wait for an event in a tick (an answer resumed the step before) does
 * not read the inbox on the tick's thread: that read begins a WAL read, behind a mutex of
 * SQLite's the writer and checkpoint threads hold too, and ticks waited there for tens of
 * milliseconds (issue 24). The event, durable before the wait began, is taken at a later tick,
 * once. The read is held back on purpose (inbox.c: MEND_INBOX_READ_HOLD, with failpoints). */
static void it_begins_a_wait_in_a_tick_without_reading_the_inbox(void) {
#ifndef MEND_FAILPOINTS
  return;   /* nothing holds the read back */
#endif
  char hold[160], id[17], st_text[32];
  snprintf(hold, sizeof hold, "%s/inbox-held", dir);
  unlink(hold);
  setenv("MEND_INBOX_READ_HOLD", hold, 1);   /* before the engine's threads start */
  mend_engine *E = slay_engine("held_inbox.db", id);
  tick_until(E, spawn_asked, id);
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{\"gold\":7}", NULL), MEND_OK);
  mend_tick_stats st;
  tick_until_settled(E);   /* the event durable before the wait begins */
  FILE *f = fopen(hold, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  resumed_calls = 0;
  CHECK_EQ_INT(mend_call_return(spawn_call, "{\"id\":1}"), MEND_OK);
  int waiting = 0;
  for (int k = 0; k < 200 && waiting < 3; k++) {   /* until the step waits, and 3 ticks more */
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);
    CHECK(st.seconds < 2);   /* the read is held up to 20 s: this tick did not make it */
    char *json = NULL;
    mend_engine_run_json(E, id, &json);
    if (json && strstr(json, "\"waiting\"")) waiting++;
    mend_free(json);
    usleep(2000);
  }
  CHECK_EQ_INT(resumed_calls, 1);
  CHECK(kill_waits(E, id));   /* the step began its wait; the event is not taken yet */
  unlink(hold);
  tick_until(E, run_ended, id);
  CHECK_STR(run_status(E, id, st_text, sizeof st_text), "succeeded");
  CHECK(run_has(E, id, "\"result\":7", 0));
  mend_engine_free(E);   /* its threads stopped: none reads the environment as it changes */
  unsetenv("MEND_INBOX_READ_HOLD");
}

/* The two second-wait tests' set-up: "slay_twice" started in its own database (named after
 * what), the hold file that MEND_INBOX_READ_HOLD names set before the engine's threads start
 * (absent: nothing held yet), the run asking for its spawn, and both events sent and durable
 * before either wait begins. */
static mend_engine *second_wait_engine(const char *what, char *hold, size_t len, char id[17]) {
  char db[64];
  snprintf(hold, len, "%s/inbox-held-%s", dir, what);
  snprintf(db, sizeof db, "held_inbox_%s.db", what);
  unlink(hold);
  setenv("MEND_INBOX_READ_HOLD", hold, 1);
  mend_engine *E = slay_engine_of(db, "slay_twice", id);
  tick_until(E, spawn_asked, id);
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{\"gold\":7}", NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal(E, id, "chest_opened", "{\"gold\":5}", NULL), MEND_OK);
  tick_until_settled(E);
  return E;
}

/* From now on the inbox read of the second wait's event (loot's) is held back. */
static void hold_loot_read(const char *hold) {
  FILE *f = fopen(hold, "w");
  CHECK(f != NULL);
  if (f) {
    fputs("chest_opened", f);
    fclose(f);
  }
}

/* The hold let go: the run takes both events once each and succeeds with their sum. */
static void second_wait_finish(mend_engine *E, const char *hold, const char *id) {
  char st_text[32];
  unlink(hold);
  tick_until(E, run_ended, id);
  CHECK_STR(run_status(E, id, st_text, sizeof st_text), "succeeded");
  CHECK(run_has(E, id, "\"result\":12", 0));
  mend_engine_free(E);   /* its threads stopped: none reads the environment as it changes */
  unsetenv("MEND_INBOX_READ_HOLD");
}

/* The same for a step whose wait begins as the step before takes its event, in the tick's
 * pick-up of a look's answer: the run's take is not durable yet, and the second look was read
 * through the batch on the tick's thread (issue 24). It goes to the look thread once the take
 * is durable; both events, durable before the waits began, are taken once each. The hold
 * (MEND_INBOX_READ_HOLD) names the second wait's event only. */
static void it_begins_a_second_wait_in_a_tick_without_reading_the_inbox(void) {
#ifndef MEND_FAILPOINTS
  return;   /* nothing holds the read back */
#endif
  char hold[160], id[17];
  mend_engine *E = second_wait_engine("twice", hold, sizeof hold, id);
  mend_tick_stats st;
  hold_loot_read(hold);
  resumed_calls = 0;
  CHECK_EQ_INT(mend_call_return(spawn_call, "{\"id\":1}"), MEND_OK);
  int waiting = 0;
  for (int k = 0; k < 400 && waiting < 3; k++) {   /* until loot waits, and 3 ticks more */
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);
    CHECK(st.seconds < 2);   /* the read is held up to 20 s: this tick did not make it */
    char *json = NULL;
    mend_engine_run_json(E, id, &json);
    if (json && strstr(json, "\"gold\":7") && strstr(json, "\"waiting\"")) waiting++;
    mend_free(json);
    usleep(2000);
  }
  CHECK_EQ_INT(resumed_calls, 1);
  CHECK_EQ_INT(waiting, 3);   /* kill took its event; loot began its wait, not taken yet */
  second_wait_finish(E, hold, id);
}

/* The second wait's look is sent once the take before it is durable, not at the end of the
 * tick that took it: a look sent earlier is answered with rows that may still show the taken
 * event, and its answer then goes through the batch on the tick's thread (lookahead.c's
 * pick-up), the read issue 24 took off that thread. it_begins_a_second_wait_... holds the
 * read from before the first take, so it cannot tell (it passes with take_sendable sending
 * every look at once); here the hold begins after the tick that took the first event, once a
 * look sent at that tick's end would have been answered. */
static void it_sends_a_second_waits_look_once_its_take_is_durable(void) {
#ifndef MEND_FAILPOINTS
  return;   /* nothing holds the read back */
#endif
  char hold[160], id[17];
  mend_engine *E = second_wait_engine("late", hold, sizeof hold, id);
  mend_tick_stats st;
  resumed_calls = 0;
  CHECK_EQ_INT(mend_call_return(spawn_call, "{\"id\":1}"), MEND_OK);
  for (int k = 0; k < 400 && resumed_calls == 0; k++) {   /* the step resumed, kill looks */
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);
    usleep(1000);
  }
  CHECK_EQ_INT(resumed_calls, 1);
  usleep(200000);   /* kill's look answered */
  CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);   /* kill takes, loot waits */
  usleep(200000);   /* a look of loot's sent at that tick's end would be answered by now */
  hold_loot_read(hold);
  for (int k = 0; k < 10; k++) {
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.05, &st), MEND_OK);
    CHECK(st.seconds < 2);   /* the read is held up to 20 s: this tick did not make it */
    usleep(2000);
  }
  second_wait_finish(E, hold, id);
}

/* An engine that ticked (its committed reads open) and is then driven by run_all: the second
 * of two waits in a row for the same name begins in the batch that took the first event, not
 * durable yet, so the committed rows still show that event; the wait reads through the batch
 * and takes the second (events.c: the take's durability checked before a committed read, now
 * that a look may wait for it). Without that check the second wait took the first event again
 * and the engine broke ("consume an event: no unconsumed event"). */
static void it_takes_the_second_event_of_a_name_in_run_all_after_ticks(void) {
  char id[17], st_text[32];
  mend_engine *E = slay_engine_of("twice_same.db", "twice_same", id);
  tick_until(E, spawn_asked, id);
  CHECK_EQ_INT(mend_engine_signal(E, id, "e", "{\"n\":1}", NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal(E, id, "e", "{\"n\":2}", NULL), MEND_OK);
  CHECK_EQ_INT(mend_call_return(spawn_call, "{\"id\":1}"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id, st_text, sizeof st_text), "succeeded");
  CHECK(run_has(E, id, "\"result\":12", 0));
  mend_engine_free(E);
}

int main(void) {
  embed_host_begin("embed-tick-waits");
  write_workflow("slay", slay_lua);
  write_workflow("slay_twice", slay_twice_lua);
  write_workflow("twice_same", twice_same_lua);
  write_workflow("behind", behind_lua);
  write_workflow("keyed", keyed_lua);
  write_workflow("engine_named", engine_named_lua);
  write_workflow("lonely", lonely_lua);
  write_workflow("starve", starve_lua);
  write_workflow("hits", hits_lua);
  it_ticks_answers_and_signals_in_its_ticks();
  it_ticks_what_needs_no_store_while_its_writer_holds_a_batch();
  it_runs_what_waits_for_a_late_writer_while_every_frame_writes();
  it_takes_each_event_once_after_an_answer_in_a_tick();
  it_hears_each_end_in_the_tick_the_run_leaves_flight();
  it_begins_a_wait_in_a_tick_without_reading_the_inbox();
  it_begins_a_second_wait_in_a_tick_without_reading_the_inbox();
  it_takes_the_second_event_of_a_name_in_run_all_after_ticks();
  it_sends_a_second_waits_look_once_its_take_is_durable();
  return embed_host_end("test_embed_tick_waits");
}
