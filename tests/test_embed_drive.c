/*
 * test_embed_drive: the ways a host drives an engine and the engine's life, through mend.h alone:
 * its own loop (run_all), the host's loop (attached), a wake from another thread, the options
 * read by their size, the log level and the commit thread's scheduling class asked, calls
 * left open when the engine is freed, and no lock held after a recover.
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest c_embed_drive,
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

/* Mode (a): the engine owns its loop, and run_all blocks until every run has ended. */
static void it_runs_on_its_own_loop(void) {
  mend_options o;
  mend_options_init(&o);
  o.on_event = on_event;
  mend_engine *E = engine(&o);
  CHECK_STR(mend_version(), MEND_VERSION_STRING);
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", greet, NULL), MEND_OK);
  load(E, "basic");
  char id[3][17], st[32];
  for (int i = 0; i < 3; i++) start(E, "basic", "{\"who\":\"bob\"}", id[i]);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 3);
  events_finished = 0;
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_EQ_INT(events_finished, 3);
  for (int i = 0; i < 3; i++) {
    CHECK_STR(run_status(E, id[i], st, sizeof st), "succeeded");
    CHECK(run_has(E, id[i], "bob", 0));
  }
  CHECK_EQ_INT(mend_engine_start(E, "nope", NULL, NULL, id[0], NULL), MEND_ENOTFOUND);
  CHECK(strstr(mend_engine_errmsg(E), "nope") != NULL);
  /* Names and keys over MEND_NAME_MAX and MEND_KEY_MAX: refused, saying why. */
  char longer[MEND_KEY_MAX + 2];
  memset(longer, 'w', sizeof longer - 1);
  longer[sizeof longer - 1] = 0;
  longer[MEND_NAME_MAX + 1] = 0;
  CHECK_EQ_INT(mend_engine_start(E, longer, NULL, NULL, id[0], NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E),
               "a workflow name of 513 bytes, over the longest name of 512") != NULL);
  longer[MEND_NAME_MAX + 1] = 'w';
  CHECK_EQ_INT(mend_engine_start(E, "basic", NULL, longer, id[0], NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "a run key of 1025 bytes") != NULL);
  CHECK_EQ_INT(mend_engine_signal(E, id[1], longer, NULL, NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "MEND_NAME_MAX") != NULL);
  /* An empty key (a host's unset variable) would make every start one run, every event one. */
  CHECK_EQ_INT(mend_engine_start(E, "basic", NULL, "", id[0], NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "the run key is empty") != NULL);
  CHECK_EQ_INT(mend_engine_signal(E, id[1], "ev", NULL, ""), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "the event key is empty") != NULL);
  mend_engine_free(E);
}

/* mend_engine_wakeup is the one function other threads may call: hammered from a second
 * thread while the engine runs, it must neither crash nor disturb the runs. */
static void *wake_often(void *engine) {
  for (int i = 0; i < 2000; i++) {
    mend_engine_wakeup(engine);
    usleep(50);
  }
  return NULL;
}

static void it_can_be_woken_from_another_thread(void) {
  mend_options o;
  mend_options_init(&o);
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "greet", greet, NULL);
  load(E, "basic");
  char id[20][17], st[32];
  for (int i = 0; i < 20; i++) start(E, "basic", "{\"who\":\"thread\"}", id[i]);
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, wake_often, E), 0);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  pthread_join(t, NULL);
  for (int i = 0; i < 20; i++) CHECK_STR(run_status(E, id[i], st, sizeof st), "succeeded");
  mend_engine_free(E);
}

/* Mode (b): attached to the host's uv loop; the host's timers answer calls, and the host's
 * uv_run returns once the runs have ended (the engine keeps no idle loop alive). */
static void answer_on_timer(uv_timer_t *t) {
  pending *p = t->data;
  answer(p);
  uv_close((uv_handle_t *)t, NULL);
}

static uv_timer_t host_timers[16];
static pending host_pending[16];
static int nhost;
static void remote_on_host_loop(void *ud, mend_call *call, const char *args) {
  uv_loop_t *loop = ud;
  pending *p = &host_pending[nhost];
  p->call = call;
  sscanf(args, "[\"%31[^\"]\",%d]", p->mode, &p->attempt);
  uv_timer_t *t = &host_timers[nhost++];
  uv_timer_init(loop, t);
  t->data = p;
  uv_timer_start(t, answer_on_timer, 10, 0);
}

static void it_runs_on_the_hosts_loop(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  mend_options o;
  mend_options_init(&o);
  o.uv_loop = &loop;
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "remote", remote_on_host_loop, &loop);
  mend_engine_register_function(E, "undo", undo, NULL);
  load(E, "saga");
  char a[17], b[17], st[32];
  start(E, "saga", "{\"mode\":\"value\"}", a);
  start(E, "saga", "{\"mode\":\"retry\"}", b);
  double t0 = now_s();
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(now_s() - t0 < 5);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_STR(run_status(E, a, st, sizeof st), "succeeded");
  CHECK_STR(run_status(E, b, st, sizeof st), "succeeded");
  CHECK(run_has(E, b, "43", 0));
  CHECK_EQ_INT(nhost, 3);   /* value, retry's first attempt, retry's second */
  mend_engine_free(E);
  CHECK_EQ_INT(uv_loop_close(&loop), 0);   /* the engine closed every handle it had */
}

/* A host may hold a call across mend_engine_free: answering it then only frees it (checked
 * for memory errors by the sanitized and valgrind builds of this test). */
static const char hold_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'hold', steps = { { name = 'ask', execute = function()\n"
  "  return mend.call('hold') end } } }\n";

static mend_call *held_call;
static void hold(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  held_call = call;
}

static void it_lets_go_of_calls_open_when_freed(void) {
  mend_options o;
  mend_options_init(&o);
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "hold", hold, NULL);
  load(E, "hold");
  char id[17];
  start(E, "hold", NULL, id);
  for (int i = 0; i < 100 && !held_call; i++) mend_engine_tick(E, 0.01);
  CHECK(held_call != NULL);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 1);
  mend_engine_free(E);
  if (held_call) CHECK_EQ_INT(mend_call_return(held_call, "42"), MEND_OK);
}

static int logged_info;
static void count_levels(void *ud, const char *level, double time, const char *run,
                         const char *step, int attempt, const char *event, const char *message) {
  (void)ud; (void)time; (void)run; (void)step; (void)attempt; (void)event; (void)message;
  if (strcmp(level, "info") == 0) logged_info++;
}

/* The threads of this process (its entries in /proc/self/task). */
static int thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Runs `basic` once on a new engine with these options; how many threads the engine added. */
static int threads_of_an_engine(const mend_options *o) {
  int before = thread_count();
  mend_engine *E = engine(o);
  int added = thread_count() - before;
  mend_engine_register_function(E, "greet", greet, NULL);
  load(E, "basic");
  char id[17], st[32];
  start(E, "basic", "{\"who\":\"kim\"}", id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  mend_engine_free(E);
  return added;
}

/* The thread that commits for a ticked engine does not take the CPU from the thread that
 * ticks (mend_writer_sched): it is in SCHED_BATCH from its first batch, unless the host asks
 * for SCHED_OTHER; MEND_WRITER_SCHED_BATCH asks for it under run_all too. By default it goes
 * back to SCHED_OTHER as the ticks stop, and to SCHED_BATCH as they start again, with no batch
 * of its own between. */
static void it_runs_its_commit_thread_in_the_class_asked(void) {
  char db[160], err[256] = "";
  snprintf(db, sizeof db, "%s/wsched.db", dir);
  static const struct { mend_writer_sched sched; int ticked, run;
  } cases[] = {{MEND_WRITER_SCHED_TICKS, 1, -1},
               {MEND_WRITER_SCHED_OTHER, 0, 0},
               {MEND_WRITER_SCHED_BATCH, 1, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    remove_db_files(db);
    mend_options o;
    mend_options_init(&o);
    o.db_path = db;
    o.durability = MEND_SYNC_PROCESS;
    o.writer_sched = cases[c].sched;
    int before = threads_in_class("mend-writer", SCHED_BATCH);
    mend_engine *E = engine(&o);
    mend_engine_register_function(E, "greet", greet, NULL);
    load(E, "basic");
    char id[17], st[32];
    start(E, "basic", "{\"who\":\"kim\"}", id);
    double t0 = now_s();
    while (mend_engine_in_flight_count(E) > 0 && now_s() - t0 < 10) {
      CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
      usleep(1000);
    }
    CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
    CHECK_EQ_INT(threads_in_class("mend-writer", SCHED_BATCH) - before, cases[c].ticked);
    if (cases[c].sched == MEND_WRITER_SCHED_TICKS) {
      CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);   /* nothing to do: no batch */
      CHECK_EQ_INT(threads_in_class("mend-writer", SCHED_BATCH) - before, 0);
      CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
      CHECK_EQ_INT(threads_in_class("mend-writer", SCHED_BATCH) - before, 1);
    }
    if (cases[c].run >= 0) {
      /* a backlog, so that run_all gives the thread batches (a small one it commits itself) */
      for (int i = 0; i < 3000; i++) start(E, "basic", "{\"who\":\"kim\"}", id);
      CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
      CHECK_EQ_INT(threads_in_class("mend-writer", SCHED_BATCH) - before, cases[c].run);
    }
    mend_engine_free(E);
  }
  mend_options o;
  mend_options_init(&o);
  o.writer_sched = (mend_writer_sched)7;
  mend_engine *E = NULL;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "writer_sched") != NULL);
}

/* mend_options carry their size, so that a later libmend reads an older host's options as they
 * were; commit_thread, the first field added since, is how that is tested. */
static void it_reads_options_by_their_size(void) {
  char db[160], err[256] = "";
  snprintf(db, sizeof db, "%s/commit_thread.db", dir);
  mend_options o;
  mend_options_init(&o);
  CHECK(o.size == sizeof o);
  o.db_path = db;
  o.commit_thread = 1;   /* a file, the engine's own loop, a real clock: the thread starts */
  CHECK_EQ_INT(threads_of_an_engine(&o), 1);
  o.commit_thread = 0;
  CHECK_EQ_INT(threads_of_an_engine(&o), 0);
  /* a host built before commit_thread: what follows its options is not read */
  o.commit_thread = 1;
  o.size = offsetof(mend_options, commit_thread);
  CHECK_EQ_INT(threads_of_an_engine(&o), 0);
  /* nor are options not set up, or from a newer header */
  mend_engine *E = NULL;
  o.size = 0;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "mend_options_init") != NULL);
  o.size = sizeof o + 8;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "newer mend.h") != NULL);
  /* an older host's init writes no more than its options hold */
  union { mend_options o; unsigned char bytes[sizeof(mend_options)]; } older;
  memset(older.bytes, 0xAB, sizeof older.bytes);
  mend_options_init_size(&older.o, offsetof(mend_options, commit_thread));
  CHECK(older.bytes[offsetof(mend_options, commit_thread)] == 0xAB);
  CHECK(older.o.size == offsetof(mend_options, commit_thread));
  remove_db_files(db);
}

/* A recover's claim is committed before it returns: an engine that recovers and is driven only
 * later had held the database's write lock meanwhile, and no other process could write. */
static void it_holds_no_lock_after_recovering(void) {
  char db[160], cmd[400], id[17];
  snprintf(db, sizeof db, "%s/recover_lock.db", dir);
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  mend_engine *E = engine(&o);
  load(E, "wait");
  start(E, "wait", NULL, id);
  CHECK_EQ_INT(mend_engine_tick(E, 0.05), MEND_OK);
  mend_engine_free(E);   /* its lease given back: the run waits for an engine to recover it */
  E = engine(&o);
  load(E, "wait");
  int n = 0;
  CHECK_EQ_INT(mend_engine_recover(E, &n), MEND_OK);
  CHECK_EQ_INT(n, 1);
  snprintf(cmd, sizeof cmd,
           "sqlite3 -cmd '.timeout 300' %s 'BEGIN IMMEDIATE; ROLLBACK;' 2>/dev/null", db);
  CHECK_EQ_INT(system(cmd), 0);
  /* and the run is this engine's, to signal and finish */
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{\"gold\":3}", NULL), MEND_OK);
  for (int i = 0; i < 2000 && mend_engine_in_flight_count(E) > 0; i++) {
    mend_engine_tick(E, 0.01);
    usleep(2000);
  }
  char *json = run_json(E, id);
  CHECK(strstr(json, "\"succeeded\"") != NULL);
  mend_free(json);
  mend_engine_free(E);
  remove_db_files(db);
}

/* log_level: a host that wants only failures gets only failures; a level that does not exist
 * is refused with the choices. */
static void it_logs_from_the_level_asked(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  o.log = count_levels;
  o.log_level = "warn";
  mend_engine *E = engine(&o);
  load(E, "basic");
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", greet, NULL), MEND_OK);
  char id[17];
  start(E, "basic", "{\"who\":\"al\"}", id);
  logged_info = 0;
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(logged_info, 0);
  mend_engine_free(E);
  o.log_level = "info";
  E = engine(&o);
  load(E, "basic");
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", greet, NULL), MEND_OK);
  start(E, "basic", "{\"who\":\"al\"}", id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK(logged_info > 0);
  mend_engine_free(E);
  o.log_level = "loud";
  char err[256] = "";
  E = (mend_engine *)&o;   /* must come back NULL */
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL);
  CHECK(strstr(err, "log_level must be") && strstr(err, "\"loud\""));
}

int main(void) {
  embed_host_begin("embed-drive");
  write_workflow("hold", hold_lua);
  it_runs_on_its_own_loop();
  it_can_be_woken_from_another_thread();
  it_runs_on_the_hosts_loop();
  it_runs_its_commit_thread_in_the_class_asked();
  it_lets_go_of_calls_open_when_freed();
  it_logs_from_the_level_asked();
  it_reads_options_by_their_size();
  it_holds_no_lock_after_recovering();
  return embed_host_end("test_embed_drive");
}
