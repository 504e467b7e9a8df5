/*
 * handoff: a backend's writer thread, the part both backends share (SQLite's writer.c,
 * PostgreSQL's pg_batch.c): its start and stop, the hand-over of one job at a time under its
 * lock, the wait until it is idle again, and the loop's news after each job. What a job is,
 * how it is written and what follows it are the backend's, through the callbacks below. Must
 * never: be included outside the backends' files; know a database; call done() with its lock
 * held (the loop's callback may take locks of its own).
 */
#ifndef MEND_STORE_HANDOFF_H
#define MEND_STORE_HANDOFF_H

#include <pthread.h>

#include "cpus.h"

typedef struct mend_handoff mend_handoff;

typedef struct mend_handoff_ops {
  /* On the thread, without the lock: writes the job; 0, or -1 when it failed. */
  int (*write)(void *store, void *job);
  /* With the lock held, after each job (failed already set when it failed): what follows it
   * in the backend; returns the job to go on with at once, or NULL to be idle. NULL: none. */
  void *(*settle)(void *store, int rc);
  /* With the lock held, whenever a caller finds the thread idle (wait, busy). NULL: none. */
  void (*idle)(void *store);
} mend_handoff_ops;

/* Fields are read and written under mu; the backends take it for their own hand-over. */
struct mend_handoff {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void *job;                  /* the job handed over, being written */
  unsigned long job_seq;      /* its batch's number, where it has one */
  int busy, stop;
  int in_done;                /* done() is running: the store must not go away under it */
  int failed;                 /* a job failed: the store's error says why */
  void (*done)(void *ud);     /* called on the thread after each job, without the lock */
  void *ud;
  const mend_handoff_ops *ops;
  void *store;
};

/* Starts the thread, on `cpus` (the store's mend_store_set_thread_cpus): 0 and *out, or
 * ENOMEM or pthread_create's error code (nothing started). */
int mend__handoff_start(mend_handoff **out, const mend_handoff_ops *ops, void *store,
                        const mend_cpus *cpus, void (*done)(void *ud), void *ud);
/* Tells the thread to stop and waits at most `seconds` for its job to end: 1 if it still has
 * one (the backend may then cut it short), else 0. mend__handoff_stop follows. */
int mend__handoff_stop_soon(mend_handoff *h, double seconds);
/* Whether the thread is told to stop (its job gives up what can wait). */
int mend__handoff_stopping(mend_handoff *h);
/* Lets the thread end its job, joins it and frees h. */
void mend__handoff_stop(mend_handoff *h);
/* With the lock held and the thread idle: job goes to it (its number, if any, set first). */
void mend__handoff_post(mend_handoff *h, void *job);
/* With the lock held: done(), outside the lock (a thread that waits on it tells the loop why). */
void mend__handoff_tell(mend_handoff *h);
/* With h's mutex held, by the thread: waits *delay seconds for another try at a batch a lock
 * holds back (at once when stopping; sooner when told), lets the mutex go, and doubles *delay
 * up to 1 s. */
void mend__handoff_nap(mend_handoff *h, double *delay);
/* Waits until the thread is idle and out of done(); -1 if a job of it failed. */
int mend__handoff_wait(mend_handoff *h);
/* Whether the thread has a job now. */
int mend__handoff_busy(mend_handoff *h);

#endif
