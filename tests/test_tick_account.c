/*
 * test_tick_account: what mend_tick_stats says a tick's time went to, from a host's side (a
 * game that profiles its frames): the pieces it counts (answers that resumed steps, events that
 * reached waiting runs, batches picked up and handed off, events heard, collector steps), the
 * Lua heap around the tick, and the wall clock of its phases, which add up to the tick; and
 * that the thread a tick wakes to read its looks at inboxes does not preempt the ticking one.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <dirent.h>
#include <mend.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tick_host.h"

static char dir[64];

static const char quest[] =
  "local mend = require 'mend'\n"
  "return { name = 'q', steps = {\n"
  "  { name = 'ask', execute = function(ctx, input) return mend.call('later', input.n) end },\n"
  "  { name = 'slay', wait_for = 'slain', timeout = 60 },\n"
  "  { name = 'done', execute = function(ctx, input) return { t = string.rep('x', 200) } end },\n"
  "} }\n";

/* A step whose code runs long between two waits: the tick's time is its work. */
static const char spin[] =
  "return { name = 'spin', steps = {\n"
  "  { name = 'loop', execute = function(ctx, input)\n"
  "      local x = 0\n"
  "      for i = 1, input.n do x = (x * 31 + i) % 1000003 end\n"
  "      return x\n"
  "    end },\n"
  "} }\n";

enum { RUNS = 30 };
static mend_call *calls[RUNS];
static int ncalls, heard_events;

static void later(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  if (ncalls < RUNS) calls[ncalls++] = call;
  else mend_call_fail(call, "fatal", "too many", -1, 0);
}

static void on_event(void *ud, const char *json) {
  (void)ud;
  (void)json;
  heard_events++;
}

typedef struct totals {
  long ticks, actions, resumed, delivered, picked_up, heard, handed_off, gc_steps;
  int phases_bad;   /* a phase below 0, or the phases past the tick's time */
} totals;

static void tick(mend_engine *E, double budget, mend_tick_stats *st, totals *t) {
  memset(st, 0xAB, sizeof *st);
  CHECK_EQ_INT(mend_engine_tick_stats(E, budget, st), MEND_OK);
  t->ticks++;
  t->actions += st->actions;
  t->resumed += st->resumed;
  t->delivered += st->delivered;
  t->picked_up += st->picked_up;
  t->heard += st->heard;
  t->handed_off += st->handed_off;
  t->gc_steps += st->gc_steps;
  double phases = st->pickup_seconds + st->work_seconds + st->gc_seconds + st->handoff_seconds;
  if (st->pickup_seconds < 0 || st->work_seconds < 0 || st->gc_seconds < 0 ||
      st->handoff_seconds < 0 || phases > st->seconds + 1e-6 ||
      st->resumed > st->actions || st->handed_off < 0 || st->handed_off > 1 ||
      st->lua_kb_begin <= 0 || st->lua_kb_end <= 0)
    t->phases_bad++;
}

static void it_counts_what_a_tick_did(void) {
  char db[96];
  snprintf(db, sizeof db, "%s/q.db", dir);
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.durability = MEND_SYNC_PROCESS;
  o.on_event = on_event;
  mend_engine *E = NULL;
  char err[256] = "", path[128];
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_OK);
  if (!E) return;
  mend_engine_register_function(E, "later", later, NULL);
  snprintf(path, sizeof path, "%s/q.lua", dir);
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  char id[RUNS][17];
  for (int i = 0; i < RUNS; i++) {
    char input[32];
    snprintf(input, sizeof input, "{\"n\":%d}", i);
    CHECK_EQ_INT(mend_engine_start(E, "q", input, NULL, id[i], NULL), MEND_OK);
  }
  totals t = {0};
  mend_tick_stats st;
  /* until every run asked the game */
  for (int i = 0; i < 2000 && ncalls < RUNS; i++) {
    tick(E, 0.002, &st, &t);
    if (mend_engine_next_tick(E) != 0) usleep(1000);
  }
  CHECK_EQ_INT(ncalls, RUNS);
  /* The thread that reads a ticking host's looks at inboxes is woken as a tick ends: it must
   * not take the CPU from the thread that ticks (as the commit thread does not). */
  CHECK_EQ_INT(threads_in_class("mend-look", SCHED_BATCH), 1);
  CHECK(t.handed_off >= 1);   /* the starts' batch, and the attempts' */
  CHECK(t.picked_up >= 1);
  CHECK_EQ_INT(t.resumed, 0);
  /* the game answers: the answers resume their steps in the ticks that follow */
  for (int i = 0; i < RUNS; i++) CHECK_EQ_INT(mend_call_return(calls[i], "{\"ok\":true}"), MEND_OK);
  int waiting = 0;
  for (int i = 0; i < 4000 && waiting < RUNS; i++) {
    tick(E, 0.002, &st, &t);
    if (mend_engine_next_tick(E) != 0) usleep(1000);
    if (i % 20 == 19) {
      waiting = 0;
      for (int r = 0; r < RUNS; r++) waiting += step_status_is(E, id[r], "slay", "waiting");
    }
  }
  CHECK_EQ_INT(waiting, RUNS);
  CHECK_EQ_INT(t.resumed, RUNS);
  CHECK_EQ_INT(t.delivered, 0);
  /* the players slay their monsters: each event reaches its waiting run in a later tick */
  for (int i = 0; i < RUNS; i++)
    CHECK_EQ_INT(mend_engine_signal(E, id[i], "slain", "{\"rounds\":3}", NULL), MEND_OK);
  for (int i = 0; i < 4000 && mend_engine_in_flight_count(E) > 0; i++) {
    tick(E, 0.002, &st, &t);
    if (mend_engine_next_tick(E) != 0) usleep(1000);
  }
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_EQ_INT(t.resumed, RUNS);
  CHECK_EQ_INT(t.delivered, RUNS);
  CHECK_EQ_INT(t.heard, heard_events);   /* every event the host heard, heard in a tick */
  CHECK(heard_events >= RUNS);           /* a run_finished each, at least */
  CHECK(t.gc_steps > 0);                 /* ticks run the collector */
  CHECK(t.actions >= 4 * RUNS);
  CHECK_EQ_INT(t.phases_bad, 0);
  for (int i = 0; i < RUNS; i++) CHECK(status_is(E, id[i], "succeeded"));
  mend_engine_free(E);
}

/* A tick whose step code runs long says its time went to the work, not the other phases. */
static void it_puts_step_code_in_the_work(void) {
  mend_options o;
  mend_options_init(&o);
  mend_engine *E = NULL;
  char err[256] = "", path[128];
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_OK);
  if (!E) return;
  snprintf(path, sizeof path, "%s/spin.lua", dir);
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  char id[17];
  CHECK_EQ_INT(mend_engine_start(E, "spin", "{\"n\":3000000}", NULL, id, NULL), MEND_OK);
  totals t = {0};
  mend_tick_stats st, dearest = {0};
  for (int i = 0; i < 200 && mend_engine_in_flight_count(E) > 0; i++) {
    tick(E, 0.5, &st, &t);
    if (st.seconds > dearest.seconds) dearest = st;
  }
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_EQ_INT(t.phases_bad, 0);
  CHECK(dearest.work_seconds > 0.5 * dearest.seconds);
  CHECK(dearest.work_seconds > dearest.pickup_seconds + dearest.gc_seconds +
                               dearest.handoff_seconds);
  CHECK_EQ_INT(dearest.resumed + dearest.delivered, 0);
  mend_engine_free(E);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-tickacct-XXXXXX");
  if (!mkdtemp(dir)) return 2;
  tick_host_write(dir, "q", quest);
  tick_host_write(dir, "spin", spin);
  it_counts_what_a_tick_did();
  it_puts_step_code_in_the_work();
  check_remove_dir(dir);
  return check_done("test_tick_account");
}
