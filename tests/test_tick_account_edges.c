/*
 * test_tick_account_edges: mend_tick_stats at its edges, from a host's side:
 * an older host's smaller struct is written no further than its size; `delivered` counts only
 * events that reached a run waiting for them, `resumed` only answers that resumed a step (as
 * mend.h says); the inbox-look thread follows the class a host chose for mend's commit thread.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <dirent.h>
#include <mend.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tick_host.h"

static char dir[64];

static const char quest[] =
  "local mend = require 'mend'\n"
  "return { name = 'q', steps = {\n"
  "  { name = 'ask', execute = function(ctx, input) return mend.call('later', input.n) end },\n"
  "  { name = 'slay', wait_for = 'slain', timeout = 60 },\n"
  "} }\n";

enum { RUNS = 10 };
static mend_call *calls[RUNS];
static int ncalls;

static void later(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  if (ncalls < RUNS) calls[ncalls++] = call;
  else mend_call_fail(call, "fatal", "too many", -1, 0);
}

static mend_engine *engine(const char *db, mend_writer_sched sched) {
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.durability = MEND_SYNC_PROCESS;
  o.writer_sched = sched;
  mend_engine *E = NULL;
  char err[256] = "", path[128];
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_OK);
  if (!E) exit(1);
  mend_engine_register_function(E, "later", later, NULL);
  snprintf(path, sizeof path, "%s/q.lua", dir);
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  return E;
}

/* ticks (sleeping as told) n times; the sums of delivered and resumed */
static void ticks(mend_engine *E, int n, long *delivered, long *resumed) {
  for (int i = 0; i < n; i++) {
    mend_tick_stats st;
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
    *delivered += st.delivered;
    *resumed += st.resumed;
    if (mend_engine_next_tick(E) != 0) usleep(1000);
  }
}

/* A host compiled when mend_tick_stats ended at `committing` passes that size: nothing past it
 * is written (its stack), and size 0 writes nothing. */
static void it_writes_no_byte_past_an_older_hosts_stats(void) {
  char db[96];
  snprintf(db, sizeof db, "%s/abi.db", dir);
  mend_engine *E = engine(db, MEND_WRITER_SCHED_TICKS);
  size_t old = offsetof(mend_tick_stats, resumed);
  CHECK_EQ_INT(old, 24);
  unsigned char buf[sizeof(mend_tick_stats) + 64];
  memset(buf, 0xCD, sizeof buf);
  CHECK_EQ_INT(mend_engine_tick_ex(E, 0.002, (mend_tick_stats *)(void *)buf, old), MEND_OK);
  int past = 0, within = 0;
  for (size_t i = 0; i < sizeof buf; i++) {
    if (i >= old && buf[i] != 0xCD) past++;
    if (i < old && buf[i] != 0xCD) within++;
  }
  CHECK_EQ_INT(past, 0);
  CHECK(within > 0);
  memset(buf, 0xCD, sizeof buf);
  CHECK_EQ_INT(mend_engine_tick_ex(E, 0.002, (mend_tick_stats *)(void *)buf, 0), MEND_OK);
  for (size_t i = 0; i < sizeof buf; i++) past += buf[i] != 0xCD;
  CHECK_EQ_INT(past, 0);
  mend_engine_free(E);
}

/* mend.h: delivered is "events (mend_engine_signal) that reached a waiting run". Events signalled
 * while the runs are still in their first step (their host calls out) reach no waiting run: they
 * go to the inbox, and each run takes its event later, by its own look, when it begins to wait.
 * Nor does an answer to a call whose run was cancelled resume any step. */
static void it_counts_only_what_reached_a_waiting_run(void) {
  char db[96];
  snprintf(db, sizeof db, "%s/d.db", dir);
  mend_engine *E = engine(db, MEND_WRITER_SCHED_TICKS);
  char id[RUNS][17];
  for (int i = 0; i < RUNS; i++) {
    char input[32];
    snprintf(input, sizeof input, "{\"n\":%d}", i);
    CHECK_EQ_INT(mend_engine_start(E, "q", input, NULL, id[i], NULL), MEND_OK);
  }
  long delivered = 0, resumed = 0;
  for (int i = 0; i < 2000 && ncalls < RUNS; i++) ticks(E, 1, &delivered, &resumed);
  CHECK_EQ_INT(ncalls, RUNS);
  for (int i = 0; i < RUNS; i++) CHECK(status_is(E, id[i], "running"));
  /* every run is in 'ask', its call out: none waits for an event */
  for (int i = 0; i < RUNS; i++)
    CHECK_EQ_INT(mend_engine_signal(E, id[i], "slain", "{}", NULL), MEND_OK);
  ticks(E, 200, &delivered, &resumed);
  for (int i = 0; i < RUNS; i++) CHECK(status_is(E, id[i], "running"));
  CHECK_EQ_INT(delivered, 0);   /* no run waited */
  /* run 0 is cancelled with its call out; its answer resumes nothing */
  CHECK_EQ_INT(mend_engine_cancel(E, id[0], "the test"), MEND_OK);
  ticks(E, 100, &delivered, &resumed);
  CHECK(status_is(E, id[0], "failed"));   /* reason cancelled: its attempt ended, the call let go */
  resumed = 0;
  CHECK_EQ_INT(mend_call_return(calls[0], "{}"), MEND_OK);
  ticks(E, 100, &delivered, &resumed);
  CHECK_EQ_INT(resumed, 0);
  /* the others take their events from the inbox, by their own look */
  for (int i = 1; i < RUNS; i++) CHECK_EQ_INT(mend_call_return(calls[i], "{}"), MEND_OK);
  for (int i = 0; i < 4000 && mend_engine_in_flight_count(E) > 0; i++)
    ticks(E, 1, &delivered, &resumed);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  for (int i = 1; i < RUNS; i++) CHECK(status_is(E, id[i], "succeeded"));
  CHECK_EQ_INT(resumed, RUNS - 1);
  mend_engine_free(E);
}

/* A host that keeps mend's commit thread in its own class (MEND_WRITER_SCHED_OTHER: a game
 * thread at real-time priority, whose threads inherit it) keeps the inbox-look thread there
 * too. */
static void it_keeps_the_look_thread_in_the_class_the_host_chose(void) {
  char db[96];
  snprintf(db, sizeof db, "%s/s.db", dir);
  ncalls = 0;
  mend_engine *E = engine(db, MEND_WRITER_SCHED_OTHER);
  char id[17];
  CHECK_EQ_INT(mend_engine_start(E, "q", "{\"n\":1}", NULL, id, NULL), MEND_OK);
  long d = 0, r = 0;
  for (int i = 0; i < 2000 && ncalls < 1; i++) ticks(E, 1, &d, &r);
  CHECK_EQ_INT(threads_in_class("mend-writer", SCHED_OTHER), 1);
  CHECK_EQ_INT(threads_in_class("mend-look", SCHED_OTHER), 1);
  CHECK_EQ_INT(mend_call_return(calls[0], "{}"), MEND_OK);
  CHECK_EQ_INT(mend_engine_cancel(E, id, "the test"), MEND_OK);
  ticks(E, 20, &d, &r);
  mend_engine_free(E);
}

/* This process's threads that bear no name of their own (the process's, as the main thread
 * does), the main thread left out. */
static int nameless_threads(void) {
  char self[64], main_tid[32];
  snprintf(main_tid, sizeof main_tid, "%d", (int)getpid());
  thread_name(main_tid, self, sizeof self);
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == getpid()) continue;
    char comm[64];
    thread_name(e->d_name, comm, sizeof comm);
    n += comm[0] && strcmp(comm, self) == 0;
  }
  if (d) closedir(d);
  return n;
}

/* mend's threads bear their names from their start, not only once they have first run: a host
 * listing its threads right after the call that started one (the commit thread, the
 * checkpoint thread, the inbox look) finds it by name. The process is held to one CPU
 * meanwhile, so that a thread just made has seldom run when its name is read. */
static void it_names_its_threads_as_it_starts_them(void) {
  cpu_set_t was, one;
  CHECK_EQ_INT(sched_getaffinity(0, sizeof was, &was), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &was)) { CPU_SET(c, &one); break; }
  CHECK_EQ_INT(sched_setaffinity(0, sizeof one, &one), 0);
  char db[96];
  snprintf(db, sizeof db, "%s/names.db", dir);
  ncalls = 0;
  mend_engine *E = engine(db, MEND_WRITER_SCHED_TICKS);
  int nameless = nameless_threads();
  char id[17];
  CHECK_EQ_INT(mend_engine_start(E, "q", "{\"n\":1}", NULL, id, NULL), MEND_OK);
  nameless += nameless_threads();
  mend_tick_stats st;
  for (int i = 0; i < 2000 && ncalls < 1; i++) {
    CHECK_EQ_INT(mend_engine_tick_stats(E, 0.002, &st), MEND_OK);
    nameless += nameless_threads();
    if (mend_engine_next_tick(E) != 0) usleep(1000);
  }
  CHECK_EQ_INT(ncalls, 1);
  CHECK_EQ_INT(nameless, 0);
  CHECK_EQ_INT(threads_in_class("mend-writer", -1), 1);
  CHECK_EQ_INT(threads_in_class("mend-ckpt", -1), 1);
  long d = 0, r = 0;
  CHECK_EQ_INT(mend_call_return(calls[0], "{}"), MEND_OK);
  CHECK_EQ_INT(mend_engine_cancel(E, id, "the test"), MEND_OK);
  ticks(E, 20, &d, &r);
  mend_engine_free(E);
  CHECK_EQ_INT(sched_setaffinity(0, sizeof was, &was), 0);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-tick-edges-XXXXXX");
  if (!mkdtemp(dir)) return 2;
  tick_host_write(dir, "q", quest);
  it_writes_no_byte_past_an_older_hosts_stats();
  it_counts_only_what_reached_a_waiting_run();
  it_keeps_the_look_thread_in_the_class_the_host_chose();
  it_names_its_threads_as_it_starts_them();
  check_remove_dir(dir);
  return check_done("test_tick_account_edges");
}
