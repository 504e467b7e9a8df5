/*
 * tick_host: what the tests of a host that embeds mend share (test_embed_*, test_tick_account,
 * test_tick_account_edges, lock_case.h, test_keys_twice): an engine made or the test ended,
 * writing a workflow file, a run's status read as a host reads it, and the scheduling class of
 * this process's threads by name. Must never: hold a test's checks.
 */
#ifndef MEND_TICK_HOST_H
#define MEND_TICK_HOST_H

#include <dirent.h>
#include <mend.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An engine made with opts, or the test ends (2) saying why. */
static inline mend_engine *tick_host_engine(const mend_options *opts) {
  mend_engine *E = NULL;
  char err[512] = "";
  int rc = mend_engine_new(opts, &E, err, sizeof err);
  if (rc != MEND_OK) {
    fprintf(stderr, "mend_engine_new: %s: %s\n", mend_strerror(rc), err);
    exit(2);
  }
  return E;
}

/* dir/name.lua holds text, or the test ends (2). */
static inline void tick_host_write(const char *dir, const char *name, const char *text) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s.lua", dir, name);
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f)) {
    perror(path);
    exit(2);
  }
}

/* The run's own status in out (its JSON's first "status": the run's fields come before its
 * steps'); "" when the run cannot be read. */
static inline const char *run_status(mend_engine *E, const char *id, char *out, size_t len) {
  char *json = NULL;
  out[0] = 0;
  const char *p = mend_engine_run_json(E, id, &json) == MEND_OK && json
                    ? strstr(json, "\"status\":\"") : NULL;
  if (p) {
    p += strlen("\"status\":\"");
    size_t n = strcspn(p, "\"");
    if (n >= len) n = len - 1;
    memcpy(out, p, n);
    out[n] = 0;
  }
  mend_free(json);
  return out;
}

/* Whether the run itself is in that status. */
static inline int status_is(mend_engine *E, const char *id, const char *status) {
  char st[48];
  return strcmp(run_status(E, id, st, sizeof st), status) == 0;
}

/* Whether the run's step of that name is in that status (in the run's JSON a step's "status"
 * comes right after its "name"). */
static inline int step_status_is(mend_engine *E, const char *id, const char *step,
                                 const char *status) {
  char *json = NULL, want[128];
  if (mend_engine_run_json(E, id, &json) != MEND_OK || !json) return 0;
  snprintf(want, sizeof want, "\"name\":\"%s\",\"status\":\"%s\"", step, status);
  int is = strstr(json, want) != NULL;
  mend_free(json);
  return is;
}

/* The name (comm) of this process's thread `tid` (an entry of /proc/self/task); "" if gone. */
static inline void thread_name(const char *tid, char *comm, size_t len) {
  char path[300];
  snprintf(path, sizeof path, "/proc/self/task/%s/comm", tid);
  comm[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fgets(comm, (int)len, f)) comm[strcspn(comm, "\n")] = 0;
  fclose(f);
}

/* How many of this process's threads of that name are in scheduling class `policy` (-1: in
 * any). */
static inline int threads_in_class(const char *name, int policy) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char comm[64];
    thread_name(e->d_name, comm, sizeof comm);
    n += strcmp(comm, name) == 0 && (policy < 0 || sched_getscheduler(atoi(e->d_name)) == policy);
  }
  if (d) closedir(d);
  return n;
}

#endif
