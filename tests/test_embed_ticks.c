/*
 * test_embed_ticks: an engine ticked by its host (mode c), through mend.h alone: each error
 * kind a host function answers, a file database committed on the engine's own thread (a
 * step runs once its row is durable), garbage collected between ticks, and a batch's
 * events heard over the ticks that follow.
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest c_embed_ticks,
 * under AddressSanitizer in c_sanitized), and against the installed library with pkg-config
 * and with find_package(mend) (tests/embed_*.sh). Its set-up is tests/embed_host.h's. Must
 * never: use more of mend than include/mend.h.
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

/* A ticking host with a database file: a step's execute runs only once its `running` row is
 * durable, seen by another connection (a second engine on the file), though every commit is
 * on mend's thread now; and a tick with no time for more leaves the rest ready and says so. */
static void it_ticks_a_file_database_committing_on_its_own_thread(void) {
  char db[128];
  for (int mode = 0; mode < 2; mode++) {
    mend_options o;
    file_db_options(&o, db, sizeof db, "ticked.db", mode ? MEND_SYNC_PROCESS : MEND_SYNC_FULL);
    mend_engine *E = engine(&o);
    peek_engine = engine(&o);
    mend_engine_register_function(E, "peek", peek, NULL);
    load(E, "ahead");
    enum { RUNS = 40 };
    char id[RUNS][17];
    for (int i = 0; i < RUNS; i++) start(E, "ahead", NULL, id[i]);
    /* no time at all: one action, the rest left ready */
    mend_tick_stats st;
    memset(&st, 0xAB, sizeof st);
    CHECK_EQ_INT(mend_engine_tick_stats(E, 1e-9, &st), MEND_OK);
    CHECK_EQ_INT(st.actions, 1);
    CHECK_EQ_INT(st.ready, RUNS - 1);
    CHECK_EQ_INT(st.timers_due, 0);
    CHECK(st.seconds >= 0 && st.seconds < 1);
    /* a host built when the stats were shorter: what follows them is not written */
    unsigned char older[sizeof st];
    memset(older, 0xCD, sizeof older);
    CHECK_EQ_INT(mend_engine_tick_ex(E, 1e-9, (mend_tick_stats *)(void *)older,
                                     offsetof(mend_tick_stats, ready)), MEND_OK);
    CHECK(older[offsetof(mend_tick_stats, ready)] == 0xCD);
    peeks = peeks_durable = 0;
    int committing = 0;
    double t0 = now_s();
    while (mend_engine_in_flight_count(E) > 0 && now_s() - t0 < 20) {
      CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
      committing |= st.committing;
      if (mend_engine_next_tick(E) != 0) usleep(1000);
    }
    CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
    CHECK_EQ_INT(st.ready, 0);
    CHECK_EQ_INT(peeks, 2 * RUNS);
    CHECK_EQ_INT(peeks_durable, 2 * RUNS);
    /* The commits were the thread's: a tick saw one under way. With full durability each takes
     * an fsync, long past the tick that handed it off; in process mode a small batch may be
     * durable before that tick returns (peeks_durable above is what holds there). */
    if (mode == 0) CHECK(committing);
    char status[32];
    for (int i = 0; i < RUNS; i++)
      CHECK_STR(run_status(peek_engine, id[i], status, sizeof status), "succeeded");
    mend_engine_free(peek_engine);
    mend_engine_free(E);
  }
  /* Due timers are pieces of work too: a tick with no time fires one, and says how many wait. */
  mend_options o;
  mend_options_init(&o);
  mend_engine *E = engine(&o);
  load(E, "naps");
  enum { NAPS = 20 };
  char nap[NAPS][17];
  for (int i = 0; i < NAPS; i++) start(E, "naps", NULL, nap[i]);
  mend_tick_stats st;
  for (int i = 0; i < 50 && mend_engine_next_tick(E) == 0; i++)
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.5, &st), MEND_OK);
  CHECK(mend_engine_next_tick(E) > 0);   /* every run asleep */
  usleep(400 * 1000);
  CHECK_EQ_INT(mend_engine_tick_stats(E, 1e-9, &st), MEND_OK);
  CHECK_EQ_INT(st.timers_due, NAPS - 1);
  CHECK_EQ_INT(mend_engine_next_tick(E), 0);
  double t0 = now_s();
  while (mend_engine_in_flight_count(E) > 0 && now_s() - t0 < 10)
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_EQ_INT(st.timers_due, 0);
  mend_engine_free(E);
  for (const char *ext = ""; ext; ext = *ext ? (ext[1] == 'w' ? "-shm" : NULL) : "-wal") {
    char p[160];
    snprintf(p, sizeof p, "%s%s", db, ext);
    unlink(p);
  }
}

static double heap_kb_max;

static void heap(void *ud, mend_call *call, const char *args) {
  (void)ud;
  double kb = atof(args + 1);   /* [kb] */
  if (kb > heap_kb_max) heap_kb_max = kb;
  mend_call_return(call, "true");
}

/* A ticking engine runs the Lua collector itself, in its ticks: the garbage its runs leave
 * is collected all the same, without a memory limit to force a collection. */
static void it_collects_garbage_while_ticked(void) {
  mend_options o;
  mend_options_init(&o);
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "heap", heap, NULL);
  load(E, "litter");
  enum { LITTER = 300 };   /* some 450 MB of garbage in all */
  char id[17];
  for (int i = 0; i < LITTER; i++) start(E, "litter", NULL, id);
  heap_kb_max = 0;
  mend_tick_stats st;
  /* a bound for a hang only: under ASan on a loaded machine 60 s was once not enough */
  double t0 = now_s();
  long ticks = 0;
  while (mend_engine_in_flight_count(E) > 0 && now_s() - t0 < 300) {
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.001, &st), MEND_OK);
  }
  if (mend_engine_in_flight_count(E) > 0)
    fprintf(stderr, "litter: %d runs in flight after %ld ticks in %.0f s\n",
            mend_engine_in_flight_count(E), ticks, now_s() - t0);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_EQ_INT(st.ready, 0);
  CHECK(heap_kb_max > 1000);
  if (heap_kb_max >= 160 * 1024)
    fprintf(stderr, "heap grew to %.0f KB while ticked\n", heap_kb_max);
  CHECK(heap_kb_max < 160 * 1024);
  mend_engine_free(E);
}

/* A tick hears the events of a durable batch while it has time, the rest at the next ticks: a
 * wave of runs ending together must not keep a frame for all of their callbacks (here 3 ms
 * each against a 1 ms budget), and every run's end is still heard, once. */
enum { HEARD_RUNS = 24 };
static char heard_ids[HEARD_RUNS][17];
static int heard_n, heard_twice;

static void slow_event(void *ud, const char *json) {
  (void)ud;
  const char *id = strstr(json, "\"run_id\":\"");
  if (!strstr(json, "\"run_finished\"") || !id) return;
  id += strlen("\"run_id\":\"");
  for (int i = 0; i < heard_n; i++)
    if (strncmp(heard_ids[i], id, 16) == 0) heard_twice++;
  if (heard_n < HEARD_RUNS) snprintf(heard_ids[heard_n++], 17, "%.16s", id);
  usleep(3000);
}

static void it_hears_a_batchs_events_over_its_ticks(void) {
  mend_options o;
  mend_options_init(&o);
  o.on_event = slow_event;
  mend_engine *E = engine(&o);
  load(E, "plain");
  char id[HEARD_RUNS][17];
  for (int i = 0; i < HEARD_RUNS; i++) start(E, "plain", NULL, id[i]);
  heard_n = heard_twice = 0;
  int most = 0;
  double t0 = now_s();
  while ((mend_engine_in_flight_count(E) > 0 || mend_engine_next_tick(E) == 0) &&
         now_s() - t0 < 20) {
    int before = heard_n;
    CHECK_EQ_INT(mend_engine_tick(E, 0.001), MEND_OK);
    if (heard_n - before > most) most = heard_n - before;
  }
  CHECK_EQ_INT(heard_n, HEARD_RUNS);
  CHECK_EQ_INT(heard_twice, 0);
  if (most > 2) fprintf(stderr, "one tick heard %d events of 3 ms at a 1 ms budget\n", most);
  CHECK(most <= 2);   /* one at the turn's pick-up, one as a batch handed off settles at once */
  char status[32];
  for (int i = 0; i < HEARD_RUNS; i++)
    CHECK_STR(run_status(E, id[i], status, sizeof status), "succeeded");
  mend_engine_free(E);
}

/* Mode (c): the host ticks the engine from its frame loop; asynchronous answers come from
 * the frame loop too, with a value or each kind of typed error. */
static void it_is_ticked_and_answers_each_error_kind(void) {
  mend_options o;
  mend_options_init(&o);
  o.alert = on_alert;
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "remote", remote, NULL);
  mend_engine_register_function(E, "undo", undo, NULL);
  load(E, "saga");
  CHECK_EQ_INT(mend_engine_tick(E, 0.01), MEND_OK);   /* loading left a commit to do */
  CHECK_NEAR(mend_engine_next_tick(E), -1, 0);        /* nothing to do */
  static const char *const modes[] = {"value", "retry", "fatal", "half", "stuck"};
  char id[5][17], st[32];
  for (int i = 0; i < 5; i++) {
    char input[64];
    snprintf(input, sizeof input, "{\"mode\":\"%s\"}", modes[i]);
    start(E, "saga", input, id[i]);
  }
  CHECK_NEAR(mend_engine_next_tick(E), 0, 0);   /* work is ready */
  undo_calls = alerts_with_alert = 0;
  double t0 = now_s(), worst = 0;
  int frames = 0;
  while ((mend_engine_in_flight_count(E) > 0 || ncalls) && now_s() - t0 < 10) {
    double t = now_s();
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    if (now_s() - t > worst) worst = now_s() - t;
    answer_due();
    double next = mend_engine_next_tick(E);
    if (next != 0) usleep(1000);   /* a frame's rest */
    frames++;
  }
  printf("tick: %d frames, worst tick %.2f ms\n", frames, worst * 1e3);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK(worst < 0.1);

  /* a value */
  CHECK_STR(run_status(E, id[0], st, sizeof st), "succeeded");
  CHECK(run_has(E, id[0], "42", 0));
  /* retryable with retry_after: retried after the dependency's delay, then succeeded */
  CHECK_STR(run_status(E, id[1], st, sizeof st), "succeeded");
  CHECK(run_has(E, id[1], "busy, come back", 1));
  CHECK(run_has(E, id[1], "\"delay\":0.05", 1));
  /* fatal: not retried, the reservation is compensated */
  CHECK_STR(run_status(E, id[2], st, sizeof st), "compensated");
  CHECK(run_has(E, id[2], "no such account", 0));
  CHECK(run_has(E, id[2], "\"error_kind\":\"fatal\"", 0));   /* the step's, by its name */
  CHECK(run_has(E, id[2], "\"error_kind\":\"fatal\"", 1));   /* and its history row's */
  /* compensable, severity 2: the step itself is compensated too, and an alert is raised */
  CHECK_STR(run_status(E, id[3], st, sizeof st), "compensated");
  CHECK(run_has(E, id[3], "half applied", 0));
  CHECK(run_has(E, id[3], "\"error_kind\":\"compensable\"", 0));
  CHECK_EQ_INT(alerts_with_alert, 1);
  /* compensable, severity 3: into the dead-letter queue, nothing compensated */
  CHECK_STR(run_status(E, id[4], st, sizeof st), "needs_attention");
  char *dlq = NULL;
  CHECK_EQ_INT(mend_engine_dlq_json(E, &dlq), MEND_OK);
  CHECK(dlq && strstr(dlq, id[4]) && strstr(dlq, "state unknown"));
  mend_free(dlq);
  CHECK_EQ_INT(undo_calls, 1 + 2);   /* fatal: reserve; half: remote and reserve */
  mend_engine_free(E);
}

int main(void) {
  embed_host_begin("embed-ticks");
  it_is_ticked_and_answers_each_error_kind();
  it_ticks_a_file_database_committing_on_its_own_thread();
  it_collects_garbage_while_ticked();
  it_hears_a_batchs_events_over_its_ticks();
  return embed_host_end("test_embed_ticks");
}
