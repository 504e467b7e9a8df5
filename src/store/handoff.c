/*
 * handoff: a backend's writer thread (see handoff.h): one job at a time, handed over under
 * its lock, written without it, the loop told after each. Must never: hold its lock while a
 * job is written or while done() runs; know what a job is.
 */
#include "store/handoff.h"

#include <errno.h>
#include <stdlib.h>

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
                        void (*done)(void *ud), void *ud) {
  mend_handoff *h = calloc(1, sizeof *h);
  if (!h) return ENOMEM;
  h->ops = ops;
  h->store = store;
  h->done = done;
  h->ud = ud;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  int rc = pthread_create(&h->thread, NULL, handoff_main, h);
  if (rc != 0) {
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    return rc;
  }
  *out = h;
  return 0;
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
