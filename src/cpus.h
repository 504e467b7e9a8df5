/*
 * cpus: the CPUs mend's own threads may run on (mend_options.thread_cpus): a list written as
 * Linux writes one ("3", "0,2-3"), read and checked against the CPUs the kernel lets this
 * process use, and the start of a thread of mend's on them. A leaf: it knows no engine and no
 * store. Must never: move a thread mend did not make (the host's, a library's); leave one of
 * mend's threads unstarted because its CPUs went away after the check (it then runs where the
 * thread that starts it may, as every thread did before the option).
 */
#ifndef MEND_CPUS_H
#define MEND_CPUS_H

#include <pthread.h>
#include <stddef.h>

#define MEND_CPUS_MAX 1024   /* glibc's CPU_SETSIZE: the highest CPU a list may name, plus one */

typedef struct mend_cpus {
  int any;   /* 0: no list given, threads inherit the affinity of the thread that starts them */
  unsigned long bits[MEND_CPUS_MAX / (8 * sizeof(unsigned long))];
} mend_cpus;

/* Reads `text` into *out: NULL leaves it empty (any 0); else 0 and the set, or -1 with a
 * message naming `option` in err when the text is no list, names no CPU, or names a CPU that
 * no thread of this process may run on (absent, offline, outside its cpuset). One short-lived
 * thread asks the kernel, so that the caller's own affinity is not touched. */
int mend_cpus_parse(const char *text, const char *option, mend_cpus *out, char *err,
                    size_t errlen);
/* pthread_create, on `cpus` when a list was given (the thread never runs elsewhere, even
 * before its first instruction); a list the kernel refuses now starts it without one. A name
 * (at most 15 bytes; NULL: none) is given before this returns, so that top -H, perf and a host
 * reading /proc/self/task/N/comm right after the start tell mend's threads from its own: the
 * thread itself may not have run yet. */
int mend_thread_start(pthread_t *thread, const mend_cpus *cpus, const char *name,
                      void *(*fn)(void *), void *arg);

#endif
