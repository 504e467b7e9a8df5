/*
 * cpus: mend_options.thread_cpus read, checked and applied (see cpus.h). Must never: change the
 * affinity of a thread it did not start itself (the check runs on a thread of its own).
 */
#define _GNU_SOURCE   /* cpu_set_t, sched_setaffinity, pthread_attr_setaffinity_np */
#include "cpus.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#define WORD_BITS (8 * sizeof(unsigned long))

static int has(const mend_cpus *c, int cpu) {
  return (c->bits[cpu / WORD_BITS] >> (cpu % WORD_BITS)) & 1;
}

static void add(mend_cpus *c, int cpu) { c->bits[cpu / WORD_BITS] |= 1UL << (cpu % WORD_BITS); }

static void to_set(const mend_cpus *c, cpu_set_t *set) {
  CPU_ZERO(set);
  for (int cpu = 0; cpu < MEND_CPUS_MAX; cpu++)
    if (has(c, cpu)) CPU_SET(cpu, set);
}

/* "0-1,3", as the kernel writes Cpus_allowed_list, for messages. */
static void format(const mend_cpus *c, char *out, size_t len) {
  size_t at = 0;
  out[0] = 0;
  for (int cpu = 0; cpu < MEND_CPUS_MAX && at < len; cpu++) {
    if (!has(c, cpu)) continue;
    int last = cpu;
    while (last + 1 < MEND_CPUS_MAX && has(c, last + 1)) last++;
    int n = last > cpu ? snprintf(out + at, len - at, "%s%d-%d", at ? "," : "", cpu, last)
                       : snprintf(out + at, len - at, "%s%d", at ? "," : "", cpu);
    at += n > 0 ? (size_t)n : 0;
    cpu = last;
  }
}

/* One CPU number at *p: its value, or -1 when there is none or it is past MEND_CPUS_MAX. */
static long number(const char **p) {
  const char *s = *p;
  while (*s == ' ') s++;
  if (!isdigit((unsigned char)*s)) return -1;
  long v = 0;
  while (isdigit((unsigned char)*s) && v < MEND_CPUS_MAX) v = v * 10 + (*s++ - '0');
  while (*s == ' ') s++;
  *p = s;
  return v < MEND_CPUS_MAX ? v : -1;
}

/* What the kernel lets a thread of this process run on: a thread asks for every CPU and reads
 * back what it got (those online and in the process's cpuset; taskset's narrower affinity is
 * only a thread's own, which a thread may widen). 0, or an errno (a seccomp filter, say). */
typedef struct probe {
  mend_cpus allowed;
  int err;
} probe;

static void *probe_main(void *arg) {
  probe *p = arg;
  /* The mask sized for the CPUs the kernel may have, not cpu_set_t's 1024: a kernel with more
   * possible CPUs refuses a shorter one (EINVAL). */
  for (int n = CPU_SETSIZE;; n *= 2) {
    cpu_set_t *set = CPU_ALLOC(n);
    if (!set) {
      p->err = ENOMEM;
      return NULL;
    }
    size_t size = CPU_ALLOC_SIZE(n);
    memset(set, 0xff, size);
    int rc = sched_setaffinity(0, size, set) == 0 && sched_getaffinity(0, size, set) == 0;
    p->err = rc ? 0 : errno;
    if (rc)
      for (int cpu = 0; cpu < MEND_CPUS_MAX; cpu++)
        if (CPU_ISSET_S(cpu, size, set)) add(&p->allowed, cpu);
    CPU_FREE(set);
    if (p->err != EINVAL || n >= (1 << 22)) return NULL;
  }
}

static int allowed(mend_cpus *out) {
  probe p = {.allowed = {.any = 1}, .err = 0};
  pthread_t t;
  int rc = pthread_create(&t, NULL, probe_main, &p);
  if (rc != 0) return rc;
  pthread_join(t, NULL);
  if (p.err) return p.err;
  *out = p.allowed;
  return 0;
}

int mend_cpus_parse(const char *text, const char *option, mend_cpus *out, char *err,
                    size_t errlen) {
  *out = (mend_cpus){.any = 0};
  if (!text) return 0;
  mend_cpus want = {.any = 1};
  const char *p = text;
  while (*p == ' ') p++;
  if (!*p) {
    snprintf(err, errlen, "%s is empty: name the CPUs mend's threads may run on, or leave it "
             "unset", option);
    return -1;
  }
  for (;;) {
    long lo = number(&p), hi = lo;
    if (lo >= 0 && *p == '-') {
      p++;
      hi = number(&p);
    }
    if (lo < 0 || hi < lo || (*p && *p != ',')) {
      snprintf(err, errlen, "%s: \"%s\" is not a list of CPUs such as \"1\" or \"0,2-3\" "
               "(numbers below %d)", option, text, MEND_CPUS_MAX);
      return -1;
    }
    for (long cpu = lo; cpu <= hi; cpu++) add(&want, (int)cpu);
    if (!*p) break;
    p++;   /* the comma */
  }
  mend_cpus may;
  int rc = allowed(&may);
  if (rc != 0) {
    snprintf(err, errlen, "%s: the kernel does not say which CPUs this process may use (%s)",
             option, strerror(rc));
    return -1;
  }
  for (int cpu = 0; cpu < MEND_CPUS_MAX; cpu++) {
    if (has(&want, cpu) && !has(&may, cpu)) {
      char list[256];
      format(&may, list, sizeof list);
      snprintf(err, errlen, "%s: CPU %d is not one this process may run on (it may use %s)",
               option, cpu, list);
      return -1;
    }
  }
  *out = want;
  return 0;
}

static int thread_create(pthread_t *thread, const mend_cpus *cpus, void *(*fn)(void *), void *arg) {
  if (cpus && cpus->any) {
    pthread_attr_t attr;
    cpu_set_t set;
    to_set(cpus, &set);
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
      rc = pthread_attr_setaffinity_np(&attr, sizeof set, &set);
      if (rc == 0) rc = pthread_create(thread, &attr, fn, arg);
      pthread_attr_destroy(&attr);
    }
    /* EINVAL: the CPUs were checked when the engine was made and have gone since (taken
     * offline, the cpuset narrowed); the thread's work is worth more than where it runs. */
    if (rc != EINVAL) return rc;
  }
  return pthread_create(thread, NULL, fn, arg);
}

int mend_thread_start(pthread_t *thread, const mend_cpus *cpus, const char *name,
                      void *(*fn)(void *), void *arg) {
  int rc = thread_create(thread, cpus, fn, arg);
  if (rc == 0 && name) pthread_setname_np(*thread, name);   /* a name is a label: never fatal */
  return rc;
}
