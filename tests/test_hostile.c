/*
 * test_hostile: a corpus of hostile and broken workflows (the .lua files of tests/hostile) run
 * through the C API as a server would run untrusted code: sandbox on, a 64 MiB memory limit, a
 * budget of 10M instructions, one engine for the whole corpus. Each file says on its first line
 * what must
 * become of it:
 *
 *   -- expect: load <text>          mend_engine_load refuses it with a message holding <text>
 *   -- expect: <status> <text>      it loads; its run ends <status> (failed, needs_attention:
 *                                   a workflow_error in the dead-letter queue, ...), its JSON
 *                                   holding <text>
 *   -- runs: <n>                    (second line, optional) n runs of it at once, each ending
 *                                   <status>, <text> in one of them at least
 *   -- holds: budget                (second line, optional) it is bounded by the budget, though
 *                                   its text names no limit: a call refused for what it would
 *                                   cost, in a loop that the budget ends
 *   -- budget: <n>                  (optional, after the lines above) it runs in an engine of
 *                                   its own, made for it and freed after, whose budget is n
 *                                   instructions (0: none): for the memory limit, or a case
 *                                   that builds large values (pages mapped afresh are
 *                                   charged), which a budget of 10M would stop first
 *   -- memory: <bytes>              (optional, after the lines above) the same, with that memory
 *                                   limit (and a budget of 10M unless it says another)
 *   -- faults: <n>                  (optional, after the lines above) its load and runs fault
 *                                   fewer than n pages (minor faults: memory mapped afresh,
 *                                   14-20 us each on a virtual machine); not checked under
 *                                   AddressSanitizer, whose allocator maps blocks its own way
 *   -- overrun: <ms>                (optional, after the lines above) how far past its timeout
 *                                   its first run's step may end: the wall time from its
 *                                   `running` to its `failed` in the history, less the timeout,
 *                                   printed beside <ms> (four times as much under the
 *                                   sanitizers), not asserted: on a loaded machine wall time
 *                                   is the other processes' too (258 ms once at load 5, for
 *                                   -49 ms idle); the case's CPU bound and its faults are
 *                                   what is asserted
 *
 * What the issue promises is that no hostile script holds the loop longer than its budget or
 * its timeout plus 100 ms, and that is what is asserted, on the CPU time of this thread, which
 * runs the engine's loop (mend_engine_run_all): the store's helper threads (the writer, the
 * checkpointer) write what the loop hands them, they run no workflow code, and what they take
 * of the CPU is not time the loop is held. CPU time rather than wall time, because on a 2-core
 * machine loaded with other builds and tests a case waits for the CPU as long again as it
 * runs (f61: 1.0 s of wall time for 0.17 s of CPU); the thread's own time is what a hostile
 * script takes from the others. What the loop waits for without running (a helper thread's
 * write, a sleep) is not in it: the wall time's hang guard of 5 s holds that. The budget's
 * time is measured here, not assumed: a step of plain instructions at their dearest (a large
 * table read and written, out of the cache: calibrate_lua) that only the budget of 10M ends,
 * run three times before the corpus and again every 3 s of it, the median of its CPU times. So a
 * case bounded by the budget (its text names "instruction budget", or it says "-- holds: budget")
 * must hold the loop at most, for each of its runs, the budget's time (scaled to its engine's
 * budget) plus 100 ms, loading included; one stopped by its timeout at most that timeout (the first
 * "timeout = " of the file) plus 100 ms a run; one stopped by either ("exceeded its") the larger of
 * the two plus 100 ms. Every case must end within 5 s of wall time.
 *
 * and for every file: the host is alive (this process), nothing was written in the directory
 * the scripts are pointed at (ctx.input.outside), nor in the history of a run that is not
 * theirs (ctx.input.victim, a benign run's), the engine is not broken, and a benign run in the
 * same engine succeeds right after. Files run in the order of their names, so that a
 * later one sees what an earlier one did to the state they share.
 */
#include <dirent.h>
#include <jansson.h>
#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char benign_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'benign', steps = {\n"
  "  { name = 'one', execute = function(ctx, input)\n"
  "      return { upper = string.upper('ok'), n = #('abc'):rep(3), json = mend.json.encode({1}) }\n"
  "    end } } }\n";

/* Plain instructions until the budget ends them, at their dearest: reads and writes of a table
 * of 16,000 string keys (the table, its keys and their strings some 1.3 MB, out of the cache),
 * 2 to 3 times the time of a loop that stays in the cache (a call, arithmetic and a small
 * table: 45 ms for 10M on this machine idle, 110-130 ms this way). Any step may spend its
 * budget on such instructions: this is the budget's time. */
static const char calibrate_lua[] =
  "return { name = 'calibrate', steps = {\n"
  "  { name = 'spin', retry = { max_attempts = 1 }, execute = function()\n"
  "      local keys, t = {}, {}\n"
  "      for i = 1, 16000 do keys[i] = 'k' .. i end\n"
  "      for i = 1, 16000 do t[keys[i]] = i end\n"
  "      while true do for i = 1, 16000 do t[keys[i]] = i end end\n"
  "    end } } }\n";

#define CORPUS_BUDGET 10000000
#define HANG_GUARD_S 5.0
#define HELD_MORE_S 0.1
#define RECALIBRATE_S 3.0
/* AddressSanitizer's allocator (red zones, a quarantine of freed blocks) makes each allocation
 * several times as dear, against instructions that are dearer too, but less: a sanitized
 * build's bounds are four times as long. */
#if defined(__SANITIZE_ADDRESS__)
#define TIME_SCALE 4.0
#else
#define TIME_SCALE 1.0
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The CPU time of this thread: the thread that runs the engine's loop (mend_engine_run_all
 * runs it here). */
static double loop_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#if !defined(__SANITIZE_ADDRESS__)
static long minor_faults(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}
#endif

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int entries(const char *path) {
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* What bounds a case's time: its budget, its timeout, either, or none of them. */
enum { HELD_NONE, HELD_BUDGET, HELD_TIMEOUT, HELD_EITHER };

/* The first "timeout = <seconds>" of the file, or -1. */
static double file_timeout(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512];
  double t = -1;
  while (t < 0 && fgets(line, sizeof line, f)) {
    const char *at = strstr(line, "timeout = ");
    if (at) t = atof(at + 10);
  }
  fclose(f);
  return t;
}

/* The first line's expectation: "load" or a status, and the text to find; how many runs. */
static int read_expectation(const char *path, char *kind, size_t klen, char *text, size_t tlen,
                            int *runs, int *held, double *timeout, long *budget, long *memory,
                            long *faults, long *overrun_ms) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512] = "", next[512] = "";
  char *got = fgets(line, sizeof line, f);
  int holds_budget = 0;
  *runs = 1;
  *budget = -1;
  *faults = -1;
  *memory = -1;
  *overrun_ms = -1;
  while (fgets(next, sizeof next, f)) {
    if (strncmp(next, "-- runs: ", 9) == 0) *runs = atoi(next + 9);
    else if (strncmp(next, "-- holds: budget", 16) == 0) holds_budget = 1;
    else if (strncmp(next, "-- faults: ", 11) == 0) *faults = atol(next + 11);
    else if (strncmp(next, "-- memory: ", 11) == 0) *memory = atol(next + 11);
    else if (strncmp(next, "-- overrun: ", 12) == 0) *overrun_ms = atol(next + 12);
    else if (strncmp(next, "-- budget: ", 11) == 0) {
      *budget = atol(next + 11);
      if (*budget < 0) return fclose(f), -1;
    }
    else break;
  }
  fclose(f);
  if (*runs < 1 || *runs > 8) return -1;
  if (!got || strncmp(line, "-- expect: ", 11) != 0) return -1;
  char *p = line + 11, *sp = strchr(p, ' ');
  if (!sp) return -1;
  snprintf(kind, klen, "%.*s", (int)(sp - p), p);
  snprintf(text, tlen, "%s", sp + 1);
  text[strcspn(text, "\n")] = 0;
  *timeout = file_timeout(path);
  size_t tl = strlen(text);
  int bare = (tl >= 8 && strcmp(text + tl - 8, "exceeded") == 0) ||
             (tl >= 12 && strcmp(text + tl - 12, "exceeded its") == 0);
  if (holds_budget || strstr(text, "instruction budget")) *held = HELD_BUDGET;
  else if (strstr(text, "exceeded its timeout")) *held = HELD_TIMEOUT;
  else if (bare) *held = HELD_EITHER;
  else *held = HELD_NONE;
  /* A bound by a timeout the file does not give is none. */
  if (*held != HELD_BUDGET && *held != HELD_NONE && *timeout <= 0) return -1;
  return 0;
}

/* How long run id's step took from its first `running` to its last `failed`, in seconds of
 * the history's clock; -1 if the history has no such pair. */
static double attempt_span(mend_engine *E, const char *id) {
  char *text = NULL;
  if (mend_engine_history_json(E, id, &text) != MEND_OK) return -1;
  json_t *rows = json_loads(text, 0, NULL);
  mend_free(text);
  double began = -1, ended = -1;
  size_t k;
  json_t *row;
  json_array_foreach(rows, k, row) {
    const char *event = json_string_value(json_object_get(row, "event"));
    const char *to = json_string_value(json_object_get(row, "to"));
    if (!event || !to || strcmp(event, "step") != 0) continue;
    double at = json_number_value(json_object_get(row, "at"));
    if (strcmp(to, "running") == 0 && began < 0) began = at;
    if (strcmp(to, "failed") == 0) ended = at;
  }
  json_decref(rows);
  return began >= 0 && ended >= began ? ended - began : -1;
}

static char *run_json(mend_engine *E, const char *id) {
  char *json = NULL;
  if (mend_engine_run_json(E, id, &json) != MEND_OK) return NULL;
  return json;
}

static void benign_run(mend_engine *E, const char *after, char id[17]) {
  CHECK_EQ_INT(mend_engine_start(E, "benign", "{}", NULL, id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  char *json = run_json(E, id);
  int ok = json && strstr(json, "\"status\":\"succeeded\"") &&
           strstr(json, "\"upper\":\"OK\"") && strstr(json, "\"n\":9");
  if (!ok) fprintf(stderr, "benign run after %s: %s\n", after, json ? json : "(none)");
  CHECK(ok);
  mend_free(json);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The CPU time the loop takes for a budget of CORPUS_BUDGET plain instructions in E: the
 * median of three runs of calibrate_lua, each of which the budget must stop. */
static double budget_cpu_s(mend_engine *E, const char *path) {
  char loaded[MEND_NAME_MAX + 1], id[17];
  CHECK_EQ_INT(mend_engine_load(E, path, loaded, sizeof loaded), MEND_OK);
  double took[3];
  for (int k = 0; k < 3; k++) {
    double c0 = loop_cpu_s();
    CHECK_EQ_INT(mend_engine_start(E, loaded, "{}", NULL, id, NULL), MEND_OK);
    CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
    took[k] = loop_cpu_s() - c0;
    char *json = run_json(E, id);
    CHECK(json && strstr(json, "exceeded its instruction budget"));
    mend_free(json);
  }
  qsort(took, 3, sizeof *took, by_value);
  return took[1];
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_hostile CORPUS_DIR\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* w12 checks that a fresh block is refused when its pages could not be faulted in before the
   * deadline at a given cost a page; the cost measured on a machine where faults are cheap lets
   * its block through, rightly. The cost is pinned here (unless given) so that the case means the
   * same on every machine. */
  setenv("MEND_FAULT_SECONDS", "10e-6", 0);
  const char *corpus = argv[1];
  char scratch[] = "/tmp/mend-hostile-XXXXXX", outside[] = "/tmp/mend-outside-XXXXXX";
  if (!mkdtemp(scratch) || !mkdtemp(outside)) return 2;
  char db[128], benign[128], input[300], victim[17];
  snprintf(db, sizeof db, "%s/hostile.db", scratch);
  snprintf(benign, sizeof benign, "%s/benign.lua", scratch);
  FILE *f = fopen(benign, "w");
  if (!f || fputs(benign_lua, f) < 0 || fclose(f)) return 2;
  char calibrate[128];
  snprintf(calibrate, sizeof calibrate, "%s/calibrate.lua", scratch);
  f = fopen(calibrate, "w");
  if (!f || fputs(calibrate_lua, f) < 0 || fclose(f)) return 2;

  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.durability = MEND_SYNC_PROCESS;
  o.sandbox = 1;
  o.memory_limit = 64u << 20;
  o.instruction_budget = CORPUS_BUDGET;
  o.log_to_stderr = getenv("HOSTILE_LOG") != NULL;
  mend_engine *E = NULL;
  char err[512];
  if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) {
    fprintf(stderr, "mend_engine_new: %s\n", err);
    return 2;
  }
  CHECK_EQ_INT(mend_engine_load(E, benign, NULL, 0), MEND_OK);
  benign_run(E, "nothing", victim);
  double budget_s = 0, calibrated = -1;
  char *victim_history = NULL;
  CHECK_EQ_INT(mend_engine_history_json(E, victim, &victim_history), MEND_OK);
  snprintf(input, sizeof input, "{\"outside\":\"%s/pwned\",\"victim\":\"%s\"}", outside,
           victim);

  DIR *d = opendir(corpus);
  if (!d) {
    perror(corpus);
    return 2;
  }
  char *names[256];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 256) {
    size_t len = strlen(e->d_name);
    if (len > 4 && strcmp(e->d_name + len - 4, ".lua") == 0) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  CHECK(n >= 30);

  for (int i = 0; i < n; i++) {
    char path[512], kind[32], want[400], loaded[MEND_NAME_MAX + 1] = "";
    int runs;
    int held;
    double timeout;
    long budget, memory, faults, overrun_ms;
    snprintf(path, sizeof path, "%s/%s", corpus, names[i]);
    if (read_expectation(path, kind, sizeof kind, want, sizeof want, &runs, &held, &timeout,
                         &budget, &memory, &faults, &overrun_ms) ||
        memory == 0 || (overrun_ms >= 0 && timeout <= 0)) {
      fprintf(stderr, "%s: no '-- expect: ' first line, or a bad line after it\n", names[i]);
      CHECK(0);
      continue;
    }
    /* R: the engine the case runs in, E unless it asks for a budget or a memory limit of its
     * own. */
    mend_engine *R = E;
    if (budget >= 0 || memory > 0) {
      char own_db[160];
      snprintf(own_db, sizeof own_db, "%s/own-%d.db", scratch, i);
      o.db_path = own_db;
      o.instruction_budget = budget >= 0 ? budget : CORPUS_BUDGET;
      o.memory_limit = memory > 0 ? (size_t)memory : 64u << 20;
      R = NULL;
      if (mend_engine_new(&o, &R, err, sizeof err) != MEND_OK) {
        fprintf(stderr, "%s: mend_engine_new: %s\n", names[i], err);
        return 2;
      }
      CHECK_EQ_INT(mend_engine_load(R, benign, NULL, 0), MEND_OK);
    }
    /* The CPU time of an instruction changes with what the other core runs (a loaded machine
     * was seen to double it): measured again every few seconds. */
    if (calibrated < 0 || now_s() - calibrated > RECALIBRATE_S) {
      budget_s = budget_cpu_s(E, calibrate);
      calibrated = now_s();
      printf("the budget of %d instructions: CPU %.1f ms\n", CORPUS_BUDGET, budget_s * 1000);
    }
    double t0 = now_s(), c0 = loop_cpu_s();
#if !defined(__SANITIZE_ADDRESS__)
    long faults0 = minor_faults();
#endif
    int rc = mend_engine_load(R, path, loaded, sizeof loaded);
    const char *msg = rc == MEND_OK ? "" : mend_engine_errmsg(R);
    if (strcmp(kind, "load") == 0) {
      int ok = rc == MEND_ELOAD && strstr(msg, want);
      if (!ok) fprintf(stderr, "%s: load: want refusal with \"%s\", got %s: %s\n", names[i], want,
                       mend_strerror(rc), msg);
      CHECK(ok);
    } else if (rc != MEND_OK) {
      fprintf(stderr, "%s: load failed: %s\n", names[i], msg);
      CHECK(0);
    } else {
      char id[8][17];
      for (int k = 0; k < runs; k++)
        CHECK_EQ_INT(mend_engine_start(R, loaded, input, NULL, id[k], NULL), MEND_OK);
      int run_rc = mend_engine_run_all(R);
      CHECK_EQ_INT(run_rc, MEND_OK);
      int found = 0;
      for (int k = 0; k < runs; k++) {
        char *json = run_json(R, id[k]), status[64];
        /* The run's own status is its first: the steps' come after, in "steps". */
        snprintf(status, sizeof status, "\"status\":\"%s\"", kind);
        const char *first = json ? strstr(json, "\"status\":\"") : NULL;
        int ok = first && strncmp(first, status, strlen(status)) == 0;
        found |= ok && strstr(json, want) != NULL;
        if (!ok || (k == runs - 1 && !found))
          fprintf(stderr, "%s: want %s with \"%s\": %s\n", names[i], kind, want,
                  json ? json : "(no run)");
        CHECK(ok);
        mend_free(json);
      }
      CHECK(found);
      if (overrun_ms >= 0) {
        double span = attempt_span(R, id[0]), over = span - timeout;
        printf("%-36s its step past its timeout of %.0f: %.1f (bound %.0f) ms\n", names[i],
               timeout * 1000, over * 1000, overrun_ms * TIME_SCALE);
        CHECK(span >= 0);
      }
    }
    double took = now_s() - t0, cpu = loop_cpu_s() - c0;
#if !defined(__SANITIZE_ADDRESS__)
    long faulted = minor_faults() - faults0;
    if (faults >= 0 && faulted >= faults)
      fprintf(stderr, "%s: faulted %ld pages, %ld or more\n", names[i], faulted, faults);
    CHECK(faults < 0 || faulted < faults);
#endif
    /* What the case may hold the loop, of CPU time: for each run the time of what stops it
     * (the budget's scaled to its engine's, 0 for none: no bound), and 100 ms. */
    double case_budget = budget >= 0 ? (double)budget : CORPUS_BUDGET;
    double by_budget = case_budget > 0 ? budget_s * case_budget / CORPUS_BUDGET : 0;
    double stop = held == HELD_BUDGET ? by_budget
                : held == HELD_TIMEOUT ? timeout
                : held == HELD_EITHER ? (by_budget > timeout ? by_budget : timeout) : 0;
    double cpu_bound = (runs * stop + HELD_MORE_S) * TIME_SCALE;
    /* Each line ends in " ms": tests/sanitize/run.sh leaves such lines out of what it shows. */
#if !defined(__SANITIZE_ADDRESS__)
    printf("%-36s %-15s %6ld faults, CPU %6.1f (bound %6.1f), wall %7.1f ms\n", names[i], kind,
           faulted, cpu * 1000, stop > 0 ? cpu_bound * 1000 : 0.0, took * 1000);
#else
    printf("%-36s %-15s CPU %6.1f (bound %6.1f), wall %7.1f ms\n", names[i], kind, cpu * 1000,
           stop > 0 ? cpu_bound * 1000 : 0.0, took * 1000);
#endif
    if (stop > 0 && cpu >= cpu_bound)
      fprintf(stderr, "%s: held the loop %.0f ms of CPU, over its bound of %.0f ms\n", names[i],
              cpu * 1000, cpu_bound * 1000);
    CHECK(stop <= 0 || cpu < cpu_bound);
    if (took >= HANG_GUARD_S * TIME_SCALE)
      fprintf(stderr, "%s: took %.1f s, over %.1f\n", names[i], took, HANG_GUARD_S * TIME_SCALE);
    CHECK(took < HANG_GUARD_S * TIME_SCALE);
    int written = entries(outside);
    if (written != 0) fprintf(stderr, "%s: wrote %d entries outside\n", names[i], written);
    CHECK_EQ_INT(written, 0);
    char *history = NULL, id[17];
    CHECK_EQ_INT(mend_engine_history_json(E, victim, &history), MEND_OK);
    int same = history && victim_history && strcmp(history, victim_history) == 0;
    if (!same) fprintf(stderr, "%s: wrote in another run's history: %s\n", names[i], history);
    CHECK(same);
    mend_free(history);
    benign_run(E, names[i], id);
    if (R != E) {
      benign_run(R, names[i], id);
      mend_engine_free(R);
    }
    free(names[i]);
  }
  mend_free(victim_history);
  mend_engine_free(E);
  char cmd[160];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", scratch, outside);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", scratch);
  return check_done("test_hostile");
}
