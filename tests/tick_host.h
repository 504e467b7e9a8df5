/*
 * tick_host: what the tests of a ticking host's account share (test_tick_account,
 * test_tick_account_edges): writing a workflow file, a run's status read as a host reads it,
 * and the scheduling class of one of this process's threads by name. Must never: hold a
 * test's checks.
 */
#ifndef MEND_TICK_HOST_H
#define MEND_TICK_HOST_H

#include <dirent.h>
#include <mend.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dir/name.lua holds text, or the test ends (2). */
static void tick_host_write(const char *dir, const char *name, const char *text) {
  char path[160];
  snprintf(path, sizeof path, "%s/%s.lua", dir, name);
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f)) {
    perror(path);
    exit(2);
  }
}

static int status_is(mend_engine *E, const char *id, const char *status) {
  char *json = NULL, want[48];
  if (mend_engine_run_json(E, id, &json) != MEND_OK || !json) return 0;
  snprintf(want, sizeof want, "\"status\":\"%s\"", status);
  int is = strstr(json, want) != NULL;
  mend_free(json);
  return is;
}

/* The scheduling class of this process's thread of that name; -1: none has it. */
static int class_of(const char *name) {
  DIR *d = opendir("/proc/self/task");
  int policy = -1;
  for (struct dirent *e; d && policy < 0 && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    if (strcmp(comm, name) == 0) policy = sched_getscheduler(atoi(e->d_name));
  }
  if (d) closedir(d);
  return policy;
}

#endif
