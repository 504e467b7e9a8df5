/*
 * test_panic: a Lua error outside every protected call of the engine's own state (a bug of
 * mend's; memory running out for the engine itself) must break the engine, not abort the
 * host. The error is raised here from a host callback that the engine calls from C (an event),
 * on the engine's Lua thread, as a bug of mend's would: mend_engine_run_all must return
 * MEND_EBROKEN with a message saying so, every later call too, the process must live on,
 * freeing the engine must be clean, and a new engine on the same database must finish the run.
 * On a host's loop, the panic leaves nothing of run's own on that loop: the host's uv_run
 * returns.
 */
#include <lua.h>
#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "check.h"
#include "two_steps.h"
#include "engine.h"

static mend_engine *engine;
static int armed, raised;

/* A step's event, from C outside any Lua call: the engine's thread has no protected call. */
static void on_event(void *ud, const char *json) {
  (void)ud;
  if (!armed || !strstr(json, "step_failed")) return;
  armed = 0;
  raised = 1;
  lua_State *L = mend_engine_lua(engine);
  lua_pushliteral(L, "simulated bug of the engine's");
  lua_error(L);
}

static mend_engine *open_engine_on(const char *db, const char *wf, uv_loop_t *loop) {
  mend_options o;
  mend_options_init(&o);
  o.uv_loop = loop;
  o.db_path = db;
  o.durability = MEND_SYNC_PROCESS;
  o.sandbox = 1;
  o.memory_limit = 64u << 20;
  o.instruction_budget = 1000000;
  o.on_event = on_event;
  mend_engine *E = NULL;
  char err[300];
  if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) {
    fprintf(stderr, "mend_engine_new: %s\n", err);
    return NULL;
  }
  if (mend_engine_load(E, wf, NULL, 0) != MEND_OK) {
    fprintf(stderr, "load: %s\n", mend_engine_errmsg(E));
    mend_engine_free(E);
    return NULL;
  }
  return E;
}

static mend_engine *open_engine(const char *db, const char *wf) {
  return open_engine_on(db, wf, NULL);
}

/* `test_panic attempt_state`, with MEND_FAILPOINT=attempt_state:1:panic and under valgrind
 * (ctest c_panic_attempt_state): the panic comes between an attempt's state being taken and its
 * coroutine being made, as lua_newthread running out of memory would raise it. The engine
 * breaks, and freeing it frees that state too (it was lost: valgrind's "definitely lost"). */
static int attempt_state_case(const char *db, const char *wf) {
  engine = open_engine(db, wf);
  CHECK(engine != NULL);
  if (!engine) return check_done("test_panic attempt_state");
  char id[17];
  CHECK_EQ_INT(mend_engine_start(engine, "two", "{}", NULL, id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(engine), MEND_EBROKEN);
  CHECK(strstr(mend_engine_errmsg(engine), "failpoint attempt_state") != NULL);
  mend_engine_free(engine);
  return check_done("test_panic attempt_state");
}

/* Whether run id's status JSON holds text. */
static int strstr_run(const char *id, const char *text) {
  char *json = NULL;
  int found = mend_engine_run_json(engine, id, &json) == MEND_OK && json && strstr(json, text);
  mend_free(json);
  return found;
}

static int dog_bit;
static void on_dog(uv_timer_t *t) {
  dog_bit = 1;
  uv_stop(t->loop);
}

static const char slow_lua[] =
    "local mend = require 'mend'\n"
    "return { name = 'slow', steps = {\n"
    "  { name = 'a', retry = { max_attempts = 3, initial = 30, jitter = 0 }, execute = "
    "function(ctx)\n"
    "      if ctx.attempt == 1 then error(mend.retryable('later')) end\n"
    "      return 1\n"
    "    end } } }\n";

/* On the host's loop, on a real clock: run_all, left by the panic, leaves no handle of its own
 * started there (its look at the store for what other processes send, every 500 ms), and the
 * broken engine's waiting runs (here a retry due in 30 s) no longer wake the loop, so the
 * host's uv_run returns with the engine broken and not yet freed. */
static int host_loop_case(const char *db, const char *wf, const char *slow) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  engine = open_engine_on(db, wf, &loop);
  CHECK(engine != NULL);
  if (!engine) return 1;
  CHECK_EQ_INT(mend_engine_load(engine, slow, NULL, 0), MEND_OK);
  char id[17], waits[17];
  armed = 0;
  CHECK_EQ_INT(mend_engine_start(engine, "slow", "{}", NULL, waits, NULL), MEND_OK);
  for (int k = 0; k < 100 && !strstr_run(waits, "retry_wait"); k++) mend_engine_tick(engine, 0.01);
  CHECK(strstr_run(waits, "retry_wait"));
  CHECK_EQ_INT(mend_engine_start(engine, "two", "{}", NULL, id, NULL), MEND_OK);
  armed = 1;
  raised = 0;
  CHECK_EQ_INT(mend_engine_run_all(engine), MEND_EBROKEN);
  CHECK(raised);
  uv_timer_t dog;   /* unreferenced: it fires only if something else holds the loop */
  uv_timer_init(&loop, &dog);
  uv_timer_start(&dog, on_dog, 3000, 0);
  uv_unref((uv_handle_t *)&dog);
  dog_bit = 0;
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_EQ_INT(dog_bit, 0);   /* uv_run returned on its own */
  mend_engine_free(engine);
  uv_close((uv_handle_t *)&dog, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_EQ_INT(uv_loop_close(&loop), 0);
  return 0;
}

int main(int argc, char **argv) {
  char dir[] = "/tmp/mend-panic-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  char db[128], wf[128];
  snprintf(db, sizeof db, "%s/runs.db", dir);
  if (two_steps_write(dir, wf, sizeof wf) != 0) return 2;
  if (argc > 1 && strcmp(argv[1], "attempt_state") == 0) {
    int rc = attempt_state_case(db, wf);
    check_remove_dir(dir);
    return rc;
  }

  engine = open_engine(db, wf);
  CHECK(engine != NULL);
  if (!engine) return check_done("test_panic");
  char id[17];
  CHECK_EQ_INT(mend_engine_start(engine, "two", "{}", NULL, id, NULL), MEND_OK);
  armed = 1;
  CHECK_EQ_INT(mend_engine_run_all(engine), MEND_EBROKEN);
  CHECK(raised);
  const char *msg = mend_engine_errmsg(engine);
  printf("errmsg: %s\n", msg);
  CHECK(strstr(msg, "escaped every protected call") && strstr(msg, "simulated bug"));
  /* Broken for good: no call runs Lua on that state again. */
  CHECK_EQ_INT(mend_engine_run_all(engine), MEND_EBROKEN);
  CHECK_EQ_INT(mend_engine_tick(engine, 0.01), MEND_EBROKEN);
  CHECK_EQ_INT(mend_engine_load(engine, wf, NULL, 0), MEND_EBROKEN);
  mend_engine_free(engine);

  /* The run is in the database as it was: a new engine finishes it. */
  engine = open_engine(db, wf);
  CHECK(engine != NULL);
  if (!engine) return check_done("test_panic");
  int recovered = 0;
  CHECK_EQ_INT(mend_engine_recover(engine, &recovered), MEND_OK);
  CHECK_EQ_INT(recovered, 1);
  CHECK_EQ_INT(mend_engine_run_all(engine), MEND_OK);
  char *json = NULL;
  CHECK_EQ_INT(mend_engine_run_json(engine, id, &json), MEND_OK);
  printf("run: %s\n", json ? json : "(none)");
  CHECK(json && strstr(json, "\"status\":\"succeeded\""));
  mend_free(json);
  mend_engine_free(engine);

  char db2[128], slow[128];
  snprintf(db2, sizeof db2, "%s/host.db", dir);
  snprintf(slow, sizeof slow, "%s/slow.lua", dir);
  FILE *f = fopen(slow, "w");
  if (!f || fputs(slow_lua, f) < 0 || fclose(f)) return 2;
  host_loop_case(db2, wf, slow);
  check_remove_dir(dir);
  return check_done("test_panic");
}
