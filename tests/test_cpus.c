/*
 * test_cpus: mend_options.thread_cpus, as a game host uses it (through include/mend.h): the
 * host pins the thread that makes and ticks the engine to one CPU and names another for mend's
 * threads; the commit thread and the checkpoint thread run there, read back from the kernel
 * (/proc/self/task/N/status, Cpus_allowed_list), and the host's thread stays where it was.
 * Without the option they inherit the host thread's CPU, as before it existed, and so do
 * those of a host built before it (its options are shorter). A list that is no list, names no
 * CPU or one the process may not use is refused with a message naming the option. The
 * placement needs two CPUs (on one, only the refusals are checked, and it says so).
 */
#define _GNU_SOURCE   /* sched_setaffinity, CPU_SET */
#include <dirent.h>
#include <mend.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static char dir[64];

static const char plain_lua[] =
  "return { name = 'plain', steps = { { name = 'a', execute = function() return 1 end } } }\n";

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The Cpus_allowed_list of the first thread whose name is `comm` ("self": this thread), or ""
 * when there is none. */
static void cpus_of(const char *comm, char *out, size_t len) {
  out[0] = 0;
  char path[320], buf[4096];
  if (strcmp(comm, "self") == 0) {
    snprintf(path, sizeof path, "/proc/thread-self/status");
  } else {
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    path[0] = 0;
    for (struct dirent *e; (e = readdir(d)) && !path[0];) {
      if (e->d_name[0] == '.') continue;
      char name[64] = "";
      snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
      FILE *f = fopen(path, "r");
      path[0] = 0;
      if (!f) continue;
      if (fgets(name, sizeof name, f)) name[strcspn(name, "\n")] = 0;
      fclose(f);
      if (strcmp(name, comm) == 0)
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    }
    closedir(d);
    if (!path[0]) return;
  }
  FILE *f = fopen(path, "r");
  if (!f) return;
  while (fgets(buf, sizeof buf, f)) {
    if (strncmp(buf, "Cpus_allowed_list:", 18) != 0) continue;
    const char *v = buf + 18;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(out, len, "%.*s", (int)strcspn(v, "\n"), v);
  }
  fclose(f);
}

/* A file database, the engine ticked until its run has ended: by then it has committed on its
 * writer thread, and the first commit started the checkpoint thread. The two threads' CPU
 * lists are copied out before the engine goes (and its threads with it). */
static void tick_an_engine(const mend_options *o, char *writer, char *ckpt, size_t len) {
  char db[160], wf[160], err[512] = "";
  static int engines;
  snprintf(db, sizeof db, "%s/cpus-%d.db", dir, ++engines);
  snprintf(wf, sizeof wf, "%s/plain.lua", dir);
  mend_options opts = *o;
  opts.db_path = db;
  opts.durability = MEND_SYNC_PROCESS;
  mend_engine *E = NULL;
  int rc = mend_engine_new(&opts, &E, err, sizeof err);
  if (rc != MEND_OK) {
    fprintf(stderr, "mend_engine_new: %s\n", err);
    exit(2);
  }
  CHECK_EQ_INT(mend_engine_load(E, wf, NULL, 0), MEND_OK);
  char id[17];
  CHECK_EQ_INT(mend_engine_start(E, "plain", "{}", NULL, id, NULL), MEND_OK);
  double t0 = now_s();
  while (mend_engine_in_flight_count(E) > 0 && now_s() - t0 < 10) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    usleep(1000);
  }
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  cpus_of("mend-writer", writer, len);
  cpus_of("mend-ckpt", ckpt, len);
  mend_engine_free(E);
}

static int refused(const char *list, const char *also) {
  mend_options o;
  mend_options_init(&o);
  o.thread_cpus = list;
  mend_engine *E = NULL;
  char err[512] = "";
  int rc = mend_engine_new(&o, &E, err, sizeof err);
  if (rc == MEND_OK) mend_engine_free(E);
  int ok = rc == MEND_EINVAL && E == NULL && strstr(err, "thread_cpus") != NULL &&
           (!also || strstr(err, also) != NULL);
  if (!ok) fprintf(stderr, "thread_cpus \"%s\": %s (%s)\n", list, mend_strerror(rc), err);
  return ok;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-cpus-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  char wf[160];
  snprintf(wf, sizeof wf, "%s/plain.lua", dir);
  FILE *f = fopen(wf, "w");
  if (!f || fputs(plain_lua, f) < 0 || fclose(f)) return 2;

  /* Refused, whatever the machine: no list, an empty one, a CPU no machine has (past the
   * kernel's largest set), one this machine has not. */
  CHECK(refused("", "empty"));
  CHECK(refused("  ", "empty"));
  CHECK(refused("one", "not a list"));
  CHECK(refused("0,", "not a list"));
  CHECK(refused("1-0", "not a list"));
  CHECK(refused("0-", "not a list"));
  CHECK(refused("-1", "not a list"));
  CHECK(refused("4096", "not a list"));
  CHECK(refused("1023", "CPU 1023"));

  cpu_set_t mine;
  CHECK_EQ_INT(sched_getaffinity(0, sizeof mine, &mine), 0);
  int a = -1, b = -1;
  for (int c = 0; c < CPU_SETSIZE && b < 0; c++) {
    if (!CPU_ISSET(c, &mine)) continue;
    if (a < 0) a = c;
    else b = c;
  }
  if (b < 0) {
    printf("test_cpus: one CPU only, where mend's threads run is not checked\n");
    return check_done("test_cpus");
  }
  /* The host's thread on a, mend's named on b. */
  cpu_set_t host;
  CPU_ZERO(&host);
  CPU_SET(a, &host);
  CHECK_EQ_INT(sched_setaffinity(0, sizeof host, &host), 0);
  char want_a[16], want_b[16], writer[64], ckpt[64], self[64];
  snprintf(want_a, sizeof want_a, "%d", a);
  snprintf(want_b, sizeof want_b, "%d", b);

  mend_options o;
  mend_options_init(&o);
  o.thread_cpus = want_b;
  tick_an_engine(&o, writer, ckpt, sizeof writer);
  CHECK_STR(writer, want_b);
  CHECK_STR(ckpt, want_b);
  cpus_of("self", self, sizeof self);
  CHECK_STR(self, want_a);

  /* A list, given with blanks and out of order, is the set it names. */
  char list[64];
  snprintf(list, sizeof list, " %d , %d", b, a);
  o.thread_cpus = list;
  tick_an_engine(&o, writer, ckpt, sizeof writer);
  char range[32];
  snprintf(range, sizeof range, b == a + 1 ? "%d-%d" : "%d,%d", a, b);
  CHECK_STR(writer, range);
  CHECK_STR(ckpt, range);

  /* Unset, and from a host built before the option: where the host's thread is. */
  o.thread_cpus = NULL;
  tick_an_engine(&o, writer, ckpt, sizeof writer);
  CHECK_STR(writer, want_a);
  CHECK_STR(ckpt, want_a);
  o.thread_cpus = want_b;
  o.size = offsetof(mend_options, thread_cpus);
  tick_an_engine(&o, writer, ckpt, sizeof writer);
  CHECK_STR(writer, want_a);
  CHECK_STR(ckpt, want_a);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "test_cpus: %s left behind\n", dir);
  return check_done("test_cpus");
}
