/*
 * test_crash_loop: a run whose host function crashes the process each time it is called (a
 * segfault, the signal raised for real) must not keep every worker down. Each worker here is a
 * real child process on one SQLite file, as a supervisor would restart it: the first starts
 * a poison run and a good run, and each next one recovers what the dead one held. The poison
 * run must end in the dead-letter queue with reason crash_loop after a few crashes, the good
 * run must succeed, and a run started after it in the same engine too. The same again with
 * the runs only recorded (as `mend serve` starts them) and first taken by a worker: its
 * `claimed` row counts as a take, as a `recovered` one does.
 */
#include <mend.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "engine.h"   /* mend_engine_start_value: a start only recorded, for any worker */

static const char workflow_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'calls', steps = {\n"
  "  { name = 'call', execute = function(ctx, input)\n"
  "      return mend.call('host', input.poison or false)\n"
  "    end } } }\n";

static int in_worker;

/* Crashes a worker when the step's input says poison. */
static void host_fn(void *ud, mend_call *call, const char *args_json) {
  (void)ud;
  if (in_worker && strstr(args_json, "true")) raise(SIGSEGV);
  mend_call_return(call, "\"ok\"");
}

static mend_engine *open_engine(const char *db, const char *wf) {
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.durability = MEND_SYNC_PROCESS;
  o.sandbox = 1;
  o.log_to_stderr = 0;
  mend_engine *E = NULL;
  char err[300];
  if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) {
    fprintf(stderr, "mend_engine_new: %s\n", err);
    return NULL;
  }
  if (mend_engine_register_function(E, "host", host_fn, NULL) != MEND_OK ||
      mend_engine_load(E, wf, NULL, 0) != MEND_OK) {
    fprintf(stderr, "setup: %s\n", mend_engine_errmsg(E));
    mend_engine_free(E);
    return NULL;
  }
  return E;
}

/* A run of `calls` only recorded, for any worker to take; 0 or -1. */
static int record_start(mend_engine *E, int poison, char id[17]) {
  lua_State *L = mend_engine_lua(E);
  lua_newtable(L);
  lua_pushboolean(L, poison);
  lua_setfield(L, -2, "poison");
  int existed = 0;
  char err[300];
  int rc = mend_engine_start_value(E, L, "calls", lua_gettop(L), NULL, NULL, id, &existed, 1, err,
                                   sizeof err);
  lua_pop(L, 1);
  if (rc) fprintf(stderr, "start: %s\n", err);
  return rc;
}

/* One worker's life: exit 0 when it drove every run it holds to a stop. `first` 1: it starts
 * the runs and runs them; 2: it only records them and exits, holding none. */
static void worker(const char *db, const char *wf, int first, const char *ids_path) {
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none);
  /* A sanitizer's handler would turn the signal into an exit: the process dies of it here. */
  signal(SIGSEGV, SIG_DFL);
  in_worker = 1;
  mend_engine *E = open_engine(db, wf);
  if (!E) _exit(2);
  if (first) {
    char poison[17], good[17];
    if (first == 2 ? record_start(E, 1, poison) || record_start(E, 0, good)
                   : mend_engine_start(E, "calls", "{\"poison\":true}", NULL, poison, NULL) !=
                             MEND_OK ||
                         mend_engine_start(E, "calls", "{}", NULL, good, NULL) != MEND_OK)
      _exit(2);
    FILE *f = fopen(ids_path, "w");
    if (!f || fprintf(f, "%s %s\n", poison, good) < 0 || fclose(f)) _exit(2);
    if (first == 2) {
      mend_engine_free(E);
      _exit(0);
    }
  } else if (mend_engine_recover(E, NULL) != MEND_OK) {
    _exit(2);
  }
  int rc = mend_engine_run_all(E);
  mend_engine_free(E);
  _exit(rc == MEND_OK ? 0 : 3);
}

static char *run_json(mend_engine *E, const char *id) {
  char *json = NULL;
  return mend_engine_run_json(E, id, &json) == MEND_OK ? json : NULL;
}

/* How many times the event of each take appears in run id's history: `claimed`, `recovered`. */
static void takes(mend_engine *E, const char *id, int *claimed, int *recovered) {
  char *hist = NULL;
  *claimed = *recovered = 0;
  CHECK_EQ_INT(mend_engine_history_json(E, id, &hist), MEND_OK);
  for (const char *p = hist; p && (p = strstr(p, "\"event\":\"")); p++) {
    *claimed += strncmp(p + 9, "claimed\"", 8) == 0;
    *recovered += strncmp(p + 9, "recovered\"", 10) == 0;
  }
  mend_free(hist);
}

/* The supervisor's restarts on a new file, the runs started by its first worker (`recorded`
 * 0) or only recorded by it (1). Returns how many workers the poison run took down. */
static int loop(int recorded) {
  char dir[] = "/tmp/mend-crashloop-XXXXXX";
  if (!mkdtemp(dir)) return -1;
  char db[128], wf[128], ids_path[128];
  snprintf(db, sizeof db, "%s/runs.db", dir);
  snprintf(wf, sizeof wf, "%s/calls.lua", dir);
  snprintf(ids_path, sizeof ids_path, "%s/ids", dir);
  FILE *f = fopen(wf, "w");
  if (!f || fputs(workflow_lua, f) < 0 || fclose(f)) return -1;

  /* A supervisor's restarts: each worker lives until it exits or crashes. */
  int crashes = 0, clean = 0;
  for (int i = 0; i < 8 + recorded && !clean; i++) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) worker(db, wf, i == 0 ? 1 + recorded : 0, ids_path);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    if (i == 0 && recorded) {   /* the recorder, which ran nothing */
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      continue;
    }
    if (WIFSIGNALED(status)) {
      crashes++;
      printf("worker %d: killed by signal %d\n", i + 1, WTERMSIG(status));
    } else {
      printf("worker %d: exit %d\n", i + 1, WEXITSTATUS(status));
      CHECK_EQ_INT(WEXITSTATUS(status), 0);
      clean = 1;
    }
  }
  /* The poison run crashed a worker at least once, and the loop ended without an operator. */
  CHECK(crashes >= 1);
  CHECK(clean);

  char poison[17] = "", good[17] = "";
  f = fopen(ids_path, "r");
  CHECK(f && fscanf(f, "%16s %16s", poison, good) == 2);
  if (f) fclose(f);
  mend_engine *E = open_engine(db, wf);
  CHECK(E != NULL);
  if (!E) return -1;
  char *pj = run_json(E, poison), *gj = run_json(E, good), *dlq = NULL;
  printf("poison: %s\ngood: %s\n", pj ? pj : "(none)", gj ? gj : "(none)");
  CHECK(pj && strstr(pj, "\"status\":\"needs_attention\"") &&
        strstr(pj, "\"reason\":\"crash_loop\""));
  /* The step is failed, but its record says the last attempt's outcome is not known. */
  CHECK(pj && strstr(pj, "the outcome of its last attempt is unknown"));
  CHECK(gj && strstr(gj, "\"status\":\"succeeded\""));
  CHECK_EQ_INT(mend_engine_dlq_json(E, &dlq), MEND_OK);
  CHECK(dlq && strstr(dlq, poison) && strstr(dlq, "crash_loop"));
  CHECK(dlq && strstr(dlq, "the outcome of the last attempt is unknown"));
  char *hist = NULL;
  CHECK_EQ_INT(mend_engine_history_json(E, poison, &hist), MEND_OK);
  CHECK(hist && strstr(hist, "the outcome of its last attempt is unknown"));
  mend_free(hist);
  /* A take of a run that no process had held is its `claimed` row; each one after, of a run
   * whose worker died, a `recovered` row. */
  int claimed, recovered_rows;
  takes(E, poison, &claimed, &recovered_rows);
  printf("poison: %d claimed, %d recovered\n", claimed, recovered_rows);
  CHECK_EQ_INT(claimed, recorded);
  CHECK_EQ_INT(recovered_rows, crashes);
  takes(E, good, &claimed, &recovered_rows);
  CHECK_EQ_INT(claimed, recorded);
  mend_free(pj);
  mend_free(gj);
  mend_free(dlq);
  /* The engine goes on: a new run succeeds, and recovering takes nothing up again. */
  char next[17];
  int recovered = -1;
  CHECK_EQ_INT(mend_engine_recover(E, &recovered), MEND_OK);
  CHECK_EQ_INT(recovered, 0);
  CHECK_EQ_INT(mend_engine_start(E, "calls", "{}", NULL, next, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  char *nj = run_json(E, next);
  CHECK(nj && strstr(nj, "\"status\":\"succeeded\""));
  mend_free(nj);
  mend_engine_free(E);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (!getenv("KEEP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return crashes;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int held = loop(0), recorded = loop(1);
  /* A first claim counts as a take (as when it was a `recovered` row): the run only recorded
   * is put aside one crash sooner than the one its starter ran first, with no take before. */
  printf("crashes: %d started by a worker, %d recorded and claimed\n", held, recorded);
  CHECK(held > 0 && recorded == held - 1);
  return check_done("test_crash_loop");
}
