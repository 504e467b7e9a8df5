/*
 * test_crash_loop: a run whose host function crashes the process each time it is called (a
 * segfault, the signal raised for real) must not keep every worker down. Each worker here is a
 * real child process on one SQLite file, as a supervisor would restart it: the first starts
 * a poison run and a good run, and each next one recovers what the dead one held. The poison
 * run must end in the dead-letter queue with reason crash_loop after a few crashes, the good
 * run must succeed, and a run started after it in the same engine too.
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

/* One worker's life: exit 0 when it drove every run it holds to a stop. */
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
    if (mend_engine_start(E, "calls", "{\"poison\":true}", NULL, poison, NULL) != MEND_OK ||
        mend_engine_start(E, "calls", "{}", NULL, good, NULL) != MEND_OK)
      _exit(2);
    FILE *f = fopen(ids_path, "w");
    if (!f || fprintf(f, "%s %s\n", poison, good) < 0 || fclose(f)) _exit(2);
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

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  char dir[] = "/tmp/mend-crashloop-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  char db[128], wf[128], ids_path[128];
  snprintf(db, sizeof db, "%s/runs.db", dir);
  snprintf(wf, sizeof wf, "%s/calls.lua", dir);
  snprintf(ids_path, sizeof ids_path, "%s/ids", dir);
  FILE *f = fopen(wf, "w");
  if (!f || fputs(workflow_lua, f) < 0 || fclose(f)) return 2;

  /* A supervisor's restarts: each worker lives until it exits or crashes. */
  int crashes = 0, clean = 0;
  for (int i = 0; i < 8 && !clean; i++) {
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) worker(db, wf, i == 0, ids_path);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 2;
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
  if (!E) return check_done("test_crash_loop");
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
  return check_done("test_crash_loop");
}
