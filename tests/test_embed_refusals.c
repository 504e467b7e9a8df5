/*
 * test_embed_refusals: what the C API refuses and how it says so, through mend.h alone: a
 * loaded workflow's name cut by a short buffer, a host function, a log callback or a run's
 * when/key/map code driving its own engine, a free from the engine's callbacks, each
 * failure's own status code, and the arguments no call can use.
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest c_embed_refusals,
 * under AddressSanitizer in c_sanitized), and against the installed library with pkg-config
 * and with find_package(mend) (tests/embed_*.sh). Its set-up is tests/embed_host.h's. Must
 * never: use more of mend than include/mend.h.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <dirent.h>
#include <math.h>
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

/* A name_out too small for the workflow's name: a cut name would name another workflow (or
 * none), so the load says so, and the workflow is loaded all the same. */
static void it_refuses_to_cut_a_loaded_workflows_name(void) {
  mend_options o;
  mend_options_init(&o);
  mend_engine *E = engine(&o);
  char path[128], name[4] = "xyz", id[17], st[32];
  snprintf(path, sizeof path, "%s/plain.lua", dir);
  CHECK_EQ_INT(mend_engine_load(E, path, name, sizeof name), MEND_EINVAL);
  CHECK_STR(name, "");
  CHECK(strstr(mend_engine_errmsg(E), "name_out holds 4 bytes") != NULL);
  CHECK(strstr(mend_engine_errmsg(E), "needs 6") != NULL);
  start(E, "plain", NULL, id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  mend_engine_free(E);
}

/* A host function that tries to drive the engine calling it: each call is refused (it pulled
 * the step's coroutine from under itself before), and the call is then answered as usual. */
static int reenter_status[4];
static void reenter(void *ud, mend_call *call, const char *args) {
  mend_engine *E = ud;
  (void)args;
  reenter_status[0] = mend_engine_run_all(E);
  reenter_status[1] = mend_engine_tick(E, 0.001);
  reenter_status[2] = mend_engine_recover(E, NULL);
  reenter_status[3] = mend_engine_advance_clock(E, 1);
  CHECK(strstr(mend_engine_errmsg(E), "mend_engine_advance_clock: called from a step's code"));
  CHECK_EQ_INT(mend_call_return(call, "\"ok\""), MEND_OK);
}

static void it_refuses_a_host_function_driving_its_engine(void) {
  mend_options o;
  mend_options_init(&o);
  mend_engine *E = engine(&o);
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", reenter, E), MEND_OK);
  load(E, "basic");
  char id[17], st[32];
  start(E, "basic", "{\"who\":\"bob\"}", id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(reenter_status[i], MEND_ESTATE);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  mend_engine_free(E);
}

/* The same from a run's code outside its attempt: when, idempotency_key and a map's list
 * function each log through ctx:log, and the host's log callback tries to drive the engine
 * there. Each call is refused (a nested run_all drove the engine from inside that run's
 * decision before), and the run succeeds. */
static const char deciding_lua[] =
  "return { name = 'deciding', steps = {\n"
  "  { name = 'a', when = function(ctx) ctx:log('decide') return true end,\n"
  "    idempotency_key = function(ctx) ctx:log('decide') return 'k' end,\n"
  "    execute = function() return 1 end },\n"
  "  { name = 'm', map = function(ctx) ctx:log('decide') return { 1, 2 } end,\n"
  "    step = { execute = function() return 2 end } } } }\n";
static int deciding_calls, deciding_refused;
static void drive_from_log(void *ud, const char *level, double time, const char *run,
                           const char *step, int attempt, const char *event, const char *message) {
  (void)level; (void)time; (void)run; (void)step; (void)attempt;
  if (strcmp(event, "log") != 0 || !strstr(message, "decide")) return;
  mend_engine *E = *(mend_engine **)ud;
  deciding_calls++;
  int rc[3] = {mend_engine_run_all(E), mend_engine_tick(E, 0.001), mend_engine_recover(E, NULL)};
  for (int i = 0; i < 3; i++) deciding_refused += rc[i] == MEND_ESTATE;
}

static void it_refuses_driving_from_a_runs_when_key_or_map(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = NULL;
  o.log = drive_from_log;
  o.log_ud = &E;
  E = engine(&o);
  write_workflow("deciding", deciding_lua);
  load(E, "deciding");
  char id[17], st[32];
  start(E, "deciding", NULL, id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(deciding_calls, 3);
  CHECK_EQ_INT(deciding_refused, 9);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  mend_engine_free(E);
}

/* mend_engine_free from inside the engine's callbacks: a host function (the step's code runs
 * under it), the log callback (called from a `when` through ctx:log) and an event callback
 * (outside any code, inside mend_engine_run_all). Each is refused with MEND_ESTATE and an
 * error log line naming where it came from; the engine goes on, its run succeeds, and it is
 * freed afterwards. Freeing it there returned into freed memory before. */
static int free_status[3] = {-1, -1, -1};
static int free_logged;
static void free_from_host(void *ud, mend_call *call, const char *args) {
  (void)args;
  free_status[0] = mend_engine_free(*(mend_engine **)ud);
  CHECK(strstr(mend_engine_errmsg(*(mend_engine **)ud),
               "mend_engine_free: called from a step's code while the engine runs it") != NULL);
  CHECK_EQ_INT(mend_call_return(call, "\"ok\""), MEND_OK);
}
static void free_from_log(void *ud, const char *level, double time, const char *run,
                          const char *step, int attempt, const char *event, const char *message) {
  (void)time; (void)run; (void)step; (void)attempt;
  mend_engine *E = *(mend_engine **)ud;
  if (strcmp(level, "error") == 0 && strstr(message, "mend_engine_free: called from"))
    free_logged++;
  if (strcmp(event, "log") == 0 && strstr(message, "decide")) {
    free_status[1] = mend_engine_free(E);
    const char *msg = mend_engine_errmsg(E);
    CHECK(strstr(msg, "called from a when function") ||
          strstr(msg,
                 "called from an idempotency_key "
                 "function") ||
          strstr(msg, "called from a map's list function"));
  }
}
static void free_from_event(void *ud, const char *json) {
  if (!strstr(json, "run_finished")) return;
  mend_engine *E = *(mend_engine **)ud;
  free_status[2] = mend_engine_free(E);
  CHECK(strstr(mend_engine_errmsg(E), "called from a callback of the engine's") != NULL);
}

static void it_refuses_to_free_from_its_callbacks(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = NULL;
  o.log = free_from_log;
  o.log_ud = &E;
  o.on_event = free_from_event;
  o.event_ud = &E;
  E = engine(&o);
  CHECK_EQ_INT(mend_engine_register_function(E, "greet", free_from_host, &E), MEND_OK);
  load(E, "basic");
  write_workflow("deciding", deciding_lua);
  load(E, "deciding");
  char id[2][17], st[32];
  start(E, "basic", "{\"who\":\"bob\"}", id[0]);
  start(E, "deciding", NULL, id[1]);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(free_status[i], MEND_ESTATE);
  CHECK(free_logged >= 3);
  CHECK_STR(run_status(E, id[0], st, sizeof st), "succeeded");
  CHECK_STR(run_status(E, id[1], st, sizeof st), "succeeded");
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
}

/* Each failure has its own status, whatever its message says: a host decides on the status. */
static void it_gives_each_failure_its_own_status(void) {
  char db[160], cmd[400], err[512] = "", id[17];
  mend_engine *E = NULL;
  mend_options o;
  mend_options_init(&o);
  /* a database that cannot be opened is the store's failure */
  snprintf(db, sizeof db, "%s/no/such/dir/x.db", dir);
  o.db_path = db;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_ESTORE);
  CHECK(E == NULL && strstr(err, "no/such/dir") != NULL);
  /* a real clock does not advance by request */
  E = engine(NULL);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_ECLOCK);
  mend_engine_free(E);

  snprintf(db, sizeof db, "%s/statuses.db", dir);
  o.db_path = db;
  o.virtual_clock = 1;
  E = engine(&o);
  load(E, "plain");
  char *json = NULL;
  CHECK_EQ_INT(mend_engine_run_json(E, "nosuchrun", &json), MEND_ENOTFOUND);
  CHECK(json == NULL && strstr(mend_engine_errmsg(E), "nosuchrun") != NULL);
  CHECK_EQ_INT(mend_engine_start(E, "plain", "{not json", NULL, id, NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_start(E, "plain", "{\"n\":1}", NULL, id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  /* the database refuses a run's row: a storage error, not a bad argument */
  snprintf(cmd, sizeof cmd, "sqlite3 %s \"CREATE TRIGGER boom BEFORE INSERT ON runs WHEN NEW.input "
           "LIKE '%%boom%%' BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END\"", db);
  CHECK_EQ_INT(system(cmd), 0);
  CHECK_EQ_INT(mend_engine_start(E, "plain", "{\"n\":\"boom\"}", NULL, id, NULL), MEND_ESTORE);
  CHECK(strstr(mend_engine_errmsg(E), "refused by a trigger") != NULL);
  /* the engine stopped on the store's failure: moving its clock on is refused for that */
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_ESTORE);
  mend_engine_free(E);
  remove_db_files(db);
}

/* What no call can use is refused with MEND_EINVAL and a message, never read: a NULL engine or
 * argument, options out of their range, a clock moved to no time, an engine freed already. */
static void it_refuses_what_no_call_can_use(void) {
  char err[256] = "", id[17];
  mend_engine *E = NULL;
  mend_options o;
  mend_options_init(&o);
  CHECK_EQ_INT(mend_engine_new(&o, NULL, err, sizeof err), MEND_EINVAL);
  CHECK(strstr(err, "out is NULL") != NULL);
  o.durability = (mend_durability_mode)7;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "durability") != NULL && strstr(err, "got 7") != NULL);
  mend_options_init(&o);
  o.max_concurrency = -1;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "max_concurrency") != NULL);
  mend_options_init(&o);
  o.instruction_budget = -5;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "instruction_budget") != NULL);
  /* a park_after of NaN or < 0 had been read as never, unsaid (0 is never) */
  mend_options_init(&o);
  o.park_after = NAN;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "park_after must be a number >= 0") != NULL);
  o.park_after = -1;
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "got -1") != NULL);
  /* an empty name: SQLite's private temporary file had failed on WAL mode, naming no file; a
   * bad option, not a failed store */
  mend_options_init(&o);
  o.db_path = "";
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_EINVAL);
  CHECK(E == NULL && strstr(err, "database name is empty") != NULL);

  char *json = NULL;
  CHECK(mend_engine_errmsg(NULL) != NULL);
  CHECK_EQ_INT(mend_engine_tick(NULL, 0.01), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_run_all(NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_load(NULL, "x.lua", NULL, 0), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_start(NULL, "plain", NULL, NULL, id, NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_run_json(NULL, "x", &json), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_signal(NULL, "x", "go", NULL, NULL), MEND_EINVAL);
  CHECK(mend_engine_next_tick(NULL) == -1 && mend_engine_in_flight_count(NULL) == 0);
  mend_engine_wakeup(NULL);
  CHECK_EQ_INT(mend_call_return(NULL, "1"), MEND_EINVAL);

  mend_options_init(&o);
  o.virtual_clock = 1;
  E = engine(&o);
  load(E, "plain");
  start(E, "plain", NULL, id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_load(E, NULL, NULL, 0), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "path is NULL") != NULL);
  CHECK_EQ_INT(mend_engine_run_json(E, NULL, &json), MEND_EINVAL);
  CHECK(json == NULL && strstr(mend_engine_errmsg(E), "run id is NULL") != NULL);
  CHECK_EQ_INT(mend_engine_history_json(E, NULL, &json), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_run_json(E, id, NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "json_out is NULL") != NULL);
  CHECK_EQ_INT(mend_engine_dlq_json(E, NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_cancel(E, NULL, "me"), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_retry_dead_letter(E, NULL, "me"), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_resolve_dead_letter(E, NULL, "me", "n"), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_complete(E, NULL, NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_signal(E, id, NULL, NULL, NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "name is NULL") != NULL);
  /* a payload past MEND_EVENT_DATA_MAX, from a host as from any sender */
  char *big = malloc(MEND_EVENT_DATA_MAX + 2);
  CHECK(big != NULL);
  memset(big, ' ', MEND_EVENT_DATA_MAX + 1);
  big[0] = '1';
  big[MEND_EVENT_DATA_MAX + 1] = '\0';
  CHECK_EQ_INT(mend_engine_signal(E, id, "go", big, NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "over the limit of 1048576 (MEND_EVENT_DATA_MAX") != NULL);
  free(big);
  CHECK_EQ_INT(mend_engine_register_function(E, "f", NULL, NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "register_function") != NULL);
  CHECK_EQ_INT(mend_engine_start(E, NULL, NULL, NULL, id, NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "workflow and run_id_out") != NULL);

  /* the clock moves by a time, or not at all: every row after would carry the time it left */
  double before = mend_engine_time(E);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1.0 / 0.0), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "finite") != NULL);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 0.0 / 0.0), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_advance_clock(E, -1), MEND_EINVAL);
  CHECK(mend_engine_time(E) == before);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 2), MEND_OK);
  CHECK(mend_engine_time(E) == before + 2);
  /* a tick's budget is a time too: NaN would make no deadline, a negative one a wrong one */
  CHECK_EQ_INT(mend_engine_tick(E, 0.0 / 0.0), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "budget must be a finite number") != NULL);
  CHECK_EQ_INT(mend_engine_tick(E, -1), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_tick(E, 1.0 / 0.0), MEND_EINVAL);
  mend_tick_stats ts = {0};
  ts.actions = 7;
  CHECK_EQ_INT(mend_engine_tick_stats(E, -0.5, &ts), MEND_EINVAL);
  CHECK(ts.actions == 7);
  CHECK_EQ_INT(mend_engine_tick(E, 0), MEND_OK);
  start(E, "plain", NULL, id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_history_json(E, id, &json), MEND_OK);
  CHECK(json && strstr(json, "e308") == NULL);
  mend_free(json);

  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  /* freed already: nothing of it is read, its message neither (a host that logs the message
   * after each call read the freed engine's) */
  CHECK(strstr(mend_engine_errmsg(E), "freed") != NULL);
  CHECK_EQ_INT(mend_engine_free(E), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_tick(E, 0.01), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_signal(E, id, "go", NULL, NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "freed") != NULL);
}

int main(void) {
  embed_host_begin("embed-refusals");
  it_refuses_to_cut_a_loaded_workflows_name();
  it_refuses_a_host_function_driving_its_engine();
  it_refuses_driving_from_a_runs_when_key_or_map();
  it_refuses_to_free_from_its_callbacks();
  it_gives_each_failure_its_own_status();
  it_refuses_what_no_call_can_use();
  return embed_host_end("test_embed_refusals");
}
