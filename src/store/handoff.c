/*
 * handoff: a backend's writer thread (see handoff.h): one job at a time, handed over under
 * its lock, written without it, the loop told after each; in a build with failpoints, held
 * back on purpose before a job for tests and benches. Must never: hold its lock while a
 * job is written or while done() runs; know what a job is.
 */
#include "store/handoff.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifdef MEND_FAILPOINTS
/* Tests and benches hold the thread back on purpose, to show what the loop does while a batch
 * is not yet durable: MEND_WRITER_HOLD names a file while whose existence a job waits before
 * it is written (a test decides exactly when the batch may go on), MEND_WRITER_DELAY_MS delays
 * each job that long (a writer starved of a core, in a bench). Read at each job, so set them
 * before the thread starts: getenv is no safe read while another thread sets one. */
#define HOLD_MAX_USEC 20000000   /* a test that forgets its file fails, rather than hangs */
static void hold_back(void) {
  const char *path = getenv("MEND_WRITER_HOLD");
  for (long t = 0; path && *path && t < HOLD_MAX_USEC && access(path, F_OK) == 0; t += 500)
    usleep(500);
  const char *ms = getenv("MEND_WRITER_DELAY_MS");
  long delay = ms ? atol(ms) : 0;
  if (delay > 0) usleep((useconds_t)(delay * 1000));
}
#else
#define hold_back() ((void)0)
#endif

void mend__handoff_tell(mend_handoff *h) {
  if (!h->done) return;
  h->in_done = 1;
  pthread_mutex_unlock(&h->mu);
  h->done(h->ud);
  pthread_mutex_lock(&h->mu);
  h->in_done = 0;
  pthread_cond_broadcast(&h->cv);
}

static void *handoff_main(void *arg) {
  mend_handoff *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (!h->job && !h->stop) pthread_cond_wait(&h->cv, &h->mu);
    if (!h->job) break;
    void *job = h->job;
    pthread_mutex_unlock(&h->mu);
    hold_back();
    int rc = h->ops->write(h->store, job);
    pthread_mutex_lock(&h->mu);
    if (rc != 0) h->failed = 1;
    void *next = h->ops->settle ? h->ops->settle(h->store, rc) : NULL;
    if (next) {
      h->job = next;
      continue;
    }
    h->job = NULL;
    h->busy = 0;
    pthread_cond_broadcast(&h->cv);
    mend__handoff_tell(h);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

int mend__handoff_start(mend_handoff **out, const mend_handoff_ops *ops, void *store,
                        const mend_cpus *cpus, void (*done)(void *ud), void *ud) {
  mend_handoff *h = calloc(1, sizeof *h);
  if (!h) return ENOMEM;
  h->ops = ops;
  h->store = store;
  h->done = done;
  h->ud = ud;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  int rc = mend_thread_start(&h->thread, cpus, "mend-writer", handoff_main, h);
  if (rc != 0) {
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    return rc;
  }
  *out = h;
  return 0;
}

int mend__handoff_stop_soon(mend_handoff *h, double seconds) {
  if (!h) return 0;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += (time_t)seconds;
  until.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&h->mu);
  h->stop = 1;
  pthread_cond_broadcast(&h->cv);
  while (h->busy && pthread_cond_timedwait(&h->cv, &h->mu, &until) == 0) {}
  int busy = h->busy;
  pthread_mutex_unlock(&h->mu);
  return busy;
}

int mend__handoff_stopping(mend_handoff *h) {
  pthread_mutex_lock(&h->mu);
  int stop = h->stop;
  pthread_mutex_unlock(&h->mu);
  return stop;
}

void mend__handoff_stop(mend_handoff *h) {
  if (!h) return;
  pthread_mutex_lock(&h->mu);
  h->stop = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->thread, NULL);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  free(h);
}

void mend__handoff_post(mend_handoff *h, void *job) {
  h->job = job;
  h->busy = 1;
  pthread_cond_broadcast(&h->cv);
}

int mend__handoff_wait(mend_handoff *h) {
  pthread_mutex_lock(&h->mu);
  while (h->busy || h->in_done) pthread_cond_wait(&h->cv, &h->mu);
  int failed = h->failed;
  if (h->ops->idle) h->ops->idle(h->store);
  pthread_mutex_unlock(&h->mu);
  return failed ? -1 : 0;
}

int mend__handoff_busy(mend_handoff *h) {
  pthread_mutex_lock(&h->mu);
  int busy = h->busy;
  if (!busy && h->ops->idle) h->ops->idle(h->store);
  pthread_mutex_unlock(&h->mu);
  return busy;
}

void mend__handoff_nap(mend_handoff *h, double *delay) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  long ns = until.tv_nsec + (long)(*delay * 1e9);
  until.tv_sec += ns / 1000000000L;
  until.tv_nsec = ns % 1000000000L;
  if (!h->stop) pthread_cond_timedwait(&h->cv, &h->mu, &until);
  pthread_mutex_unlock(&h->mu);
  *delay = *delay * 2 > 1 ? 1 : *delay * 2;
}
