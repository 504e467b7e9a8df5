/*
 * hush: a backend's background threads keep off the cores while the host's thread ticks (see
 * hush.h). Owns the tick flag, the count of tick ends and the wait for one. Must never: hold
 * its lock while anything but its own fields is touched; wait past one tick or HUSH_MAX_S.
 */
#include "store/hush.h"

#include <time.h>

/* A tick ends within its budget but for step code between two waits, which the instruction
 * budget bounds; past this a background thread goes on anyway, so that a host's stuck tick
 * delays commits and checkpoints by no more than this. */
#define HUSH_MAX_S 1

void mend__hush_init(mend_hush *h) {
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  atomic_init(&h->ticking, 0);
  h->ends = 0;
  h->needed = h->sleepers = 0;
}

void mend__hush_destroy(mend_hush *h) {
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
}

void mend__hush_tick(mend_hush *h, int on) {
  /* Only this thread writes the flag: its own read needs no lock. */
  if (atomic_load_explicit(&h->ticking, memory_order_relaxed) == on) return;
  if (on) {
    atomic_store(&h->ticking, 1);   /* a thread that misses it pauses at its next point */
    return;
  }
  pthread_mutex_lock(&h->mu);
  atomic_store(&h->ticking, 0);
  h->ends++;
  h->needed = 0;
  if (h->sleepers) pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

void mend__hush_need(mend_hush *h, int on) {
  /* Outside a tick nothing pauses (and needed was cleared as the last one ended): a wait then
   * costs no lock. The flag cannot change between the two calls: this thread sets it. */
  if (!atomic_load_explicit(&h->ticking, memory_order_relaxed)) return;
  pthread_mutex_lock(&h->mu);
  h->needed = on;
  if (on && h->sleepers) pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

int mend__hush_wait(mend_hush *h) {
  if (!atomic_load(&h->ticking)) return 0;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += HUSH_MAX_S;
  pthread_mutex_lock(&h->mu);
  unsigned long ends = h->ends;
  int waited = 0, rc = 0;
  h->sleepers++;
  while (atomic_load(&h->ticking) && h->ends == ends && !h->needed && rc == 0) {
    waited = 1;
    rc = pthread_cond_timedwait(&h->cv, &h->mu, &until);
  }
  h->sleepers--;
  pthread_mutex_unlock(&h->mu);
  return waited;
}
