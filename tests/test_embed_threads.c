/*
 * test_embed_threads: an engine and threads, through mend.h alone: calls from a thread that
 * does not own the engine refused (also while it is freed, the getters too, and said on both
 * threads), a wake-up of an engine freed meanwhile doing nothing, engines made and freed on
 * many threads, an engine handed over with adopt, and one ticked by a pool of threads.
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest c_embed_threads,
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

/* Only mend_engine_wakeup may be called from a thread the engine does not belong to: a signal,
 * a start, a tick or a free from another is refused, the engine untouched, and says so there. */
typedef struct {
  mend_engine *E;
  const char *id;
  int signal_rc, start_rc, tick_rc, free_rc;
  char why[200];
} from_another;

static void *call_from_another_thread(void *arg) {
  from_another *a = arg;
  char id[17];
  a->signal_rc = mend_engine_signal(a->E, a->id, "go", "{}", NULL);
  snprintf(a->why, sizeof a->why, "%s", mend_engine_errmsg(a->E));
  a->start_rc = mend_engine_start(a->E, "plain", NULL, NULL, id, NULL);
  a->tick_rc = mend_engine_tick(a->E, 0.01);
  a->free_rc = mend_engine_free(a->E);
  mend_engine_wakeup(a->E);
  return NULL;
}

/* A host function that keeps its call, to be answered later. */
static void keep_call(void *ud, mend_call *call, const char *args) {
  (void)args;
  *(mend_call **)ud = call;
}

typedef struct {
  mend_call *call;
  int return_rc, fail_rc;
} answer_from;

static void *answer_from_another_thread(void *arg) {
  answer_from *a = arg;
  a->return_rc = mend_call_return(a->call, "\"from afar\"");
  a->fail_rc = mend_call_fail(a->call, "fatal", "from afar", -1, 0);   /* the call stays open */
  return NULL;
}

/* An engine on the virtual clock (its log `log`, if any) whose run of basic (input `input`,
 * its id in id) called greet, the call kept open in *kept for a thread to answer. */
static mend_engine *engine_with_a_kept_call(mend_log_fn log, const char *input, mend_call **kept,
                                            char id[17]) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  o.log = log;
  mend_engine *E = engine(&o);
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", keep_call, kept), MEND_OK);
  load(E, "basic");
  start(E, "basic", input, id);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 0), MEND_OK);
  CHECK(*kept != NULL);
  return E;
}

/* An engine on the virtual clock (its log `log`, if any) whose run of wait (its id in id)
 * waits for its event. */
static mend_engine *engine_with_a_waiting_run(mend_log_fn log, char id[17]) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  o.log = log;
  mend_engine *E = engine(&o);
  load(E, "wait");
  start(E, "wait", NULL, id);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 0), MEND_OK);   /* the run waits for its event */
  return E;
}

static void it_refuses_calls_from_another_thread(void) {
  {
    /* an answer to a host call from another thread: refused, the call still open */
    mend_call *kept = NULL;
    char id[17];
    mend_engine *E = engine_with_a_kept_call(NULL, "{\"who\":\"far\"}", &kept, id);
    answer_from a = {.call = kept};
    pthread_t t;
    CHECK_EQ_INT(pthread_create(&t, NULL, answer_from_another_thread, &a), 0);
    pthread_join(t, NULL);
    CHECK_EQ_INT(a.return_rc, MEND_ESTATE);
    CHECK_EQ_INT(a.fail_rc, MEND_ESTATE);
    CHECK_EQ_INT(mend_call_return(kept, "\"near\""), MEND_OK);
    CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
    char *json = run_json(E, id);
    CHECK(strstr(json, "\"succeeded\"") != NULL && strstr(json, "\"near\"") != NULL);
    mend_free(json);
    mend_engine_free(E);
  }

  char id[17];
  mend_engine *E = engine_with_a_waiting_run(NULL, id);
  from_another a = {.E = E, .id = id};
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, call_from_another_thread, &a), 0);
  pthread_join(t, NULL);
  CHECK_EQ_INT(a.signal_rc, MEND_ESTATE);
  CHECK(strstr(a.why, "thread") != NULL);
  CHECK_EQ_INT(a.start_rc, MEND_ESTATE);
  CHECK_EQ_INT(a.tick_rc, MEND_ESTATE);
  CHECK_EQ_INT(a.free_rc, MEND_ESTATE);
  /* untouched: no event was sent, and the run still waits for one from its own thread */
  char *json = run_json(E, id);
  CHECK(strstr(json, "\"running\"") != NULL);
  mend_free(json);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 1);
  CHECK(strstr(mend_engine_errmsg(E), "thread") == NULL);
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
}

/* Engines on different threads are independent (mend.h): made, driven and freed on four
 * threads at once, each ends its runs. The registry of engines the C API keeps is shared:
 * without its lock ThreadSanitizer (SANITIZE=thread) reports the race here, and a plain build
 * may lose an engine's entry (its free refused) or crash. */
static void *engines_on_a_thread(void *arg) {
  int *failures = arg;
  for (int i = 0; i < 15; i++) {
    mend_options o;
    mend_options_init(&o);
    o.virtual_clock = 1;
    mend_engine *E = NULL;
    char err[256], id[17], path[128];
    snprintf(path, sizeof path, "%s/plain.lua", dir);
    int ok = mend_engine_new(&o, &E, err, sizeof err) == MEND_OK &&
             mend_engine_load(E, path, NULL, 0) == MEND_OK &&
             mend_engine_start(E, "plain", NULL, NULL, id, NULL) == MEND_OK &&
             mend_engine_run_all(E) == MEND_OK && mend_engine_in_flight_count(E) == 0;
    if (mend_engine_free(E) != MEND_OK) ok = 0;
    if (!ok) (*failures)++;
  }
  return NULL;
}

static void it_makes_and_frees_engines_on_many_threads(void) {
  pthread_t t[4];
  int failures[4] = {0};
  for (int i = 0; i < 4; i++)
    CHECK_EQ_INT(pthread_create(&t[i], NULL, engines_on_a_thread, &failures[i]), 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ_INT(failures[i], 0);
  }
}

/* A call from a thread the engine does not belong to, racing with the owner freeing it: the
 * check that refuses the call reads what it needs under the registry's lock, never the
 * owner's handle after it (under ASan, in c_sanitized, a read of the freed handle is
 * reported here). Every such call is refused: MEND_ESTATE while the engine lives, MEND_EINVAL
 * once it is gone. */
static _Atomic(mend_engine *) raced_engine;
static atomic_int race_over;
static void *call_while_freed(void *arg) {
  int *wrong = arg;
  while (!atomic_load(&race_over)) {
    mend_engine *E = atomic_load(&raced_engine);
    if (!E) continue;
    int rc = mend_engine_run_all(E);
    if (rc != MEND_ESTATE && rc != MEND_EINVAL) (*wrong)++;
  }
  return NULL;
}

static void it_refuses_calls_from_other_threads_while_the_engine_is_freed(void) {
  pthread_t t[3];
  int wrong[3] = {0};
  for (int i = 0; i < 3; i++)
    CHECK_EQ_INT(pthread_create(&t[i], NULL, call_while_freed, &wrong[i]), 0);
  for (int i = 0; i < 200; i++) {
    mend_options o;
    mend_options_init(&o);
    o.virtual_clock = 1;
    mend_engine *E = engine(&o);
    atomic_store(&raced_engine, E);
    CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  }
  atomic_store(&race_over, 1);
  for (int i = 0; i < 3; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ_INT(wrong[i], 0);
  }
}

/* A worker thread that has a host call's answer wakes the engine's thread (the one call any
 * thread may make), while that thread may have freed the engine meanwhile: the wake-up of an
 * engine gone does nothing. It read the freed engine (under ASan, in c_sanitized, a
 * heap-use-after-free; in a plain build libuv aborted on the freed handle). */
static _Atomic(mend_engine *) woken_engine;
static atomic_int wakes_over;
static void *wake_while_freed(void *arg) {
  (void)arg;
  while (!atomic_load(&wakes_over)) {
    mend_engine *E = atomic_load(&woken_engine);
    if (E) mend_engine_wakeup(E);
  }
  return NULL;
}

static void it_wakes_no_engine_once_it_is_freed(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = engine(&o);
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  mend_engine_wakeup(E);   /* the worker's answer came after the free */
  CHECK_EQ_INT(mend_engine_tick(E, 0.001), MEND_EINVAL);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    CHECK_EQ_INT(pthread_create(&t[i], NULL, wake_while_freed, NULL), 0);
  for (int i = 0; i < 100; i++) {
    E = engine(&o);
    atomic_store(&woken_engine, E);
    CHECK_EQ_INT(mend_engine_tick(E, 0.001), MEND_OK);
    CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  }
  atomic_store(&wakes_over, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}

/* A refusal of another thread's call is heard on both threads: a status and mend_engine_errmsg
 * there, an error line in the engine's log on its own thread as its loop next turns. A host
 * call failed from a worker thread was a silent no-op, and its step waited for ever. */
static char refusal_logged[600];
static int refusals_logged;
static void keep_refusals(void *ud, const char *level, double time, const char *run,
                          const char *step, int attempt, const char *event, const char *message) {
  (void)ud; (void)time; (void)run; (void)step; (void)attempt;
  if (strcmp(level, "error") == 0 && strcmp(event, "engine") == 0 &&
      strstr(message, "does not belong to")) {
    refusals_logged++;
    snprintf(refusal_logged, sizeof refusal_logged, "%s", message);
  }
}

typedef struct {
  mend_call *call;
  mend_engine *E;
  int fail_rc, return_rc;
  char why[600];
} answered_afar;

static void *fail_and_return_from_afar(void *arg) {
  answered_afar *a = arg;
  a->fail_rc = mend_call_fail(a->call, "fatal", "from afar", -1, 0);
  snprintf(a->why, sizeof a->why, "%s", mend_engine_errmsg(a->E));
  a->return_rc = mend_call_return(a->call, "\"from afar\"");
  return NULL;
}

static void it_says_on_both_threads_what_another_thread_was_refused(void) {
  mend_call *kept = NULL;
  char id[17];
  mend_engine *E = engine_with_a_kept_call(keep_refusals, "{\"who\":\"far\"}", &kept, id);
  refusals_logged = 0;
  answered_afar a = {.call = kept, .E = E};
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, fail_and_return_from_afar, &a), 0);
  pthread_join(t, NULL);
  CHECK_EQ_INT(a.fail_rc, MEND_ESTATE);
  CHECK_EQ_INT(a.return_rc, MEND_ESTATE);
  CHECK(strstr(a.why, "does not belong to") && strstr(a.why, "mend_engine_adopt") &&
        strstr(a.why, "stays open"));
  /* the engine's thread hears of both as its loop turns, in one line */
  CHECK_EQ_INT(mend_engine_tick(E, 0.01), MEND_OK);
  CHECK_EQ_INT(refusals_logged, 1);
  CHECK(strstr(refusal_logged, "2 calls") && strstr(refusal_logged, "mend_call_return"));
  CHECK_EQ_INT(mend_engine_tick(E, 0.01), MEND_OK);
  CHECK_EQ_INT(refusals_logged, 1);   /* said once */
  /* the call stayed open: answered here, the run ends */
  CHECK_EQ_INT(mend_call_fail(kept, "fatal", "from here", -1, 0), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  char *json = run_json(E, id);
  CHECK(strstr(json, "\"failed\"") != NULL && strstr(json, "from here") != NULL);
  mend_free(json);
  CHECK_EQ_INT(mend_call_fail(NULL, "fatal", "nothing", -1, 0), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
}

/* The getters that return a value, not a status (mend_engine_next_tick, in_flight_count,
 * time), from a thread the engine does not belong to: refused as the queries are, the engine
 * untouched (they read what that thread writes: a race), the NULL engine's answer given,
 * mend_engine_errmsg there and the engine's log saying why. */
typedef struct {
  mend_engine *E;
  double next, time;
  int in_flight;
  char why_next[600], why_time[600];
} got_afar;

static void *get_from_afar(void *arg) {
  got_afar *g = arg;
  g->next = mend_engine_next_tick(g->E);
  snprintf(g->why_next, sizeof g->why_next, "%s", mend_engine_errmsg(g->E));
  g->in_flight = mend_engine_in_flight_count(g->E);
  g->time = mend_engine_time(g->E);
  snprintf(g->why_time, sizeof g->why_time, "%s", mend_engine_errmsg(g->E));
  return NULL;
}

static void it_refuses_the_getters_on_another_thread(void) {
  char id[17];
  mend_engine *E = engine_with_a_waiting_run(keep_refusals, id);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 1);
  CHECK(mend_engine_time(E) > 0);
  refusals_logged = 0;
  got_afar g = {.E = E};
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, get_from_afar, &g), 0);
  pthread_join(t, NULL);
  CHECK(g.next == -1);
  CHECK_EQ_INT(g.in_flight, 0);
  CHECK(g.time == 0);
  CHECK(strstr(g.why_next, "does not belong to") != NULL);
  CHECK(strstr(g.why_time, "does not belong to") != NULL);
  CHECK_EQ_INT(mend_engine_tick(E, 0.01), MEND_OK);
  CHECK_EQ_INT(refusals_logged, 1);
  CHECK(strstr(refusal_logged, "3 calls") && strstr(refusal_logged, "mend_engine_time"));
  /* on its own thread, as before */
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 1);
  CHECK(mend_engine_time(E) > 0);
  CHECK(strstr(mend_engine_errmsg(E), "thread") == NULL);
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  /* a freed engine's address: nothing of it read */
  CHECK(mend_engine_next_tick(E) == -1);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK(mend_engine_time(E) == 0);
}

/* mend_engine_adopt: an engine made on one thread is driven to its end on another, which
 * answers the call the first left open; the first is then refused as any other thread. */
typedef struct {
  mend_engine *E;
  mend_call *call;
  const char *id;
  int adopt_rc, return_rc, run_rc, succeeded;
} adopter;

static void *adopt_and_finish(void *arg) {
  adopter *a = arg;
  a->adopt_rc = mend_engine_adopt(a->E);
  a->return_rc = mend_call_return(a->call, "\"adopted\"");
  a->run_rc = mend_engine_run_all(a->E);
  char *json = NULL;
  if (mend_engine_run_json(a->E, a->id, &json) == MEND_OK)
    a->succeeded = strstr(json, "\"succeeded\"") && strstr(json, "adopted");
  mend_free(json);
  return NULL;
}

/* A host function that has another thread try to adopt its engine while it runs. */
typedef struct {
  mend_engine *E;
  int rc;
  char why[400];
} early_adopter;

static void *adopt_too_early(void *arg) {
  early_adopter *a = arg;
  a->rc = mend_engine_adopt(a->E);
  snprintf(a->why, sizeof a->why, "%s", mend_engine_errmsg(a->E));
  return NULL;
}

static void adopted_while_running(void *ud, mend_call *call, const char *args) {
  (void)args;
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, adopt_too_early, ud), 0);
  pthread_join(t, NULL);
  CHECK_EQ_INT(mend_call_return(call, "\"still mine\""), MEND_OK);
}

static void *adopt_only(void *arg) {
  early_adopter *a = arg;
  a->rc = mend_engine_adopt(a->E);
  return NULL;
}

static void it_is_handed_to_another_thread_with_adopt(void) {
  mend_call *kept = NULL;
  char id[17];
  mend_engine *E = engine_with_a_kept_call(keep_refusals, "{\"who\":\"moved\"}", &kept, id);
  CHECK_EQ_INT(mend_engine_adopt(E), MEND_OK);   /* its own thread: nothing changes */
  adopter a = {.E = E, .call = kept, .id = id};
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, adopt_and_finish, &a), 0);
  pthread_join(t, NULL);
  CHECK_EQ_INT(a.adopt_rc, MEND_OK);
  CHECK_EQ_INT(a.return_rc, MEND_OK);
  if (a.return_rc != MEND_OK) mend_call_return(kept, "null");   /* else later drives wait */
  CHECK_EQ_INT(a.run_rc, MEND_OK);
  CHECK(a.succeeded);
  /* it belongs to that thread now: this one is refused, until it adopts the engine back */
  CHECK_EQ_INT(mend_engine_tick(E, 0.01), MEND_ESTATE);
  CHECK(strstr(mend_engine_errmsg(E), "mend_engine_adopt") != NULL);
  refusals_logged = 0;
  CHECK_EQ_INT(mend_engine_adopt(E), MEND_OK);
  CHECK(strstr(mend_engine_errmsg(E), "thread") == NULL);
  /* the refused tick is logged by the thread the engine belongs to, at its next call */
  CHECK_EQ_INT(mend_engine_cancel(E, id, "nobody"), MEND_ESTATE);   /* the run has ended */
  CHECK_EQ_INT(refusals_logged, 1);
  CHECK(strstr(refusal_logged, "1 call ") && strstr(refusal_logged, "mend_engine_tick"));

  /* adopted from another thread while its own drives it (inside a host function): refused,
   * and that is logged on the engine's thread as any refusal */
  early_adopter early = {.E = E};
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", adopted_while_running, &early), MEND_OK);
  refusals_logged = 0;
  start(E, "basic", "{\"who\":\"early\"}", id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(early.rc, MEND_ESTATE);
  CHECK(strstr(early.why, "driving") != NULL);
  CHECK_EQ_INT(refusals_logged, 1);
  CHECK(strstr(refusal_logged, "mend_engine_adopt") != NULL);
  char *json = run_json(E, id);
  CHECK(strstr(json, "\"succeeded\"") && strstr(json, "still mine"));
  mend_free(json);
  /* once the drive has returned, the hand-over is taken; a freed engine is no one's */
  early_adopter only = {.E = E, .rc = -1};
  CHECK_EQ_INT(pthread_create(&t, NULL, adopt_only, &only), 0);
  pthread_join(t, NULL);
  CHECK_EQ_INT(only.rc, MEND_OK);
  CHECK_EQ_INT(mend_engine_adopt(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_adopt(E), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_adopt(NULL), MEND_EINVAL);
}

/* A game server's pool: each frame a worker (here a new thread, whose creation and join order
 * the frames) adopts the engine and ticks it, with a file database and mend's commit thread.
 * The runs end, and every host function is called on the thread of the frame it runs in.
 * What a frame's thread sees is checked on the main thread after the join (CHECK's counts are
 * the main thread's). */
static int calls_off_frame, answers_refused;
static _Atomic(pthread_t *) frame_thread;
static void greet_on_frame(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  if (!pthread_equal(*atomic_load(&frame_thread), pthread_self())) calls_off_frame++;
  if (mend_call_return(call, "\"framed\"") != MEND_OK) answers_refused++;
}

typedef struct {
  mend_engine *E;
  pthread_t self;
  int rc;
  int in_flight;   /* as the frame ends: only the engine's thread may ask */
} frame;

static void *tick_a_frame(void *arg) {
  frame *f = arg;
  f->self = pthread_self();
  atomic_store(&frame_thread, &f->self);
  f->rc = mend_engine_adopt(f->E);
  if (f->rc == MEND_OK) f->rc = mend_engine_tick(f->E, 0.005);
  f->in_flight = mend_engine_in_flight_count(f->E);
  return NULL;
}

static void it_is_ticked_by_a_pool_of_threads(void) {
  char db[128];
  snprintf(db, sizeof db, "%s/pool.db", dir);
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.durability = MEND_SYNC_PROCESS;
  mend_engine *E = engine(&o);
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", greet_on_frame, NULL), MEND_OK);
  load(E, "basic");
  char id[8][17];
  for (int i = 0; i < 8; i++) start(E, "basic", "{\"who\":\"pool\"}", id[i]);
  calls_off_frame = answers_refused = 0;
  int frames = 0, failed = 0;
  double deadline = now_s() + 30;
  int in_flight = mend_engine_in_flight_count(E);
  while (in_flight > 0 && now_s() < deadline) {
    frame f = {.E = E};
    pthread_t t;
    if (pthread_create(&t, NULL, tick_a_frame, &f) != 0) f.rc = -1;
    else pthread_join(t, NULL);
    frames++;
    if (f.rc != MEND_OK && ++failed) break;
    in_flight = f.in_flight;
    usleep(1000);
  }
  CHECK_EQ_INT(failed, 0);
  CHECK_EQ_INT(calls_off_frame, 0);
  CHECK_EQ_INT(answers_refused, 0);
  CHECK_EQ_INT(in_flight, 0);
  CHECK_EQ_INT(mend_engine_adopt(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  for (int i = 0; i < 8; i++) {
    char *json = run_json(E, id[i]);
    CHECK(strstr(json, "\"succeeded\"") && strstr(json, "framed"));
    mend_free(json);
  }
  printf("pool: 8 runs ended in %d frames, each on a thread of its own\n", frames);
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  static const char *const files[] = {"", "-wal", "-shm"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[200];
    snprintf(path, sizeof path, "%s%s", db, files[i]);
    unlink(path);
  }
}

int main(void) {
  embed_host_begin("embed-threads");
  it_refuses_calls_from_another_thread();
  it_makes_and_frees_engines_on_many_threads();
  it_refuses_calls_from_other_threads_while_the_engine_is_freed();
  it_wakes_no_engine_once_it_is_freed();
  it_says_on_both_threads_what_another_thread_was_refused();
  it_refuses_the_getters_on_another_thread();
  it_is_handed_to_another_thread_with_adopt();
  it_is_ticked_by_a_pool_of_threads();
  return embed_host_end("test_embed_threads");
}
