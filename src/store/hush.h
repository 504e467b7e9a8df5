/*
 * hush: a backend's background threads (its writer, SQLite's checkpointer) keep off the cores
 * while the host's thread runs a tick. The loop says when a tick begins and ends, and when it
 * waits for one of those threads itself; a background thread asks, at the points where it may
 * pause, whether to wait for the tick's end. Must never: be included outside the backends'
 * files; make a thread wait for a tick that the thread's own work holds up (the loop waiting
 * for it ends the pause), nor for longer than one tick or HUSH_MAX_S.
 */
#ifndef MEND_STORE_HUSH_H
#define MEND_STORE_HUSH_H

#include <pthread.h>
#include <stdatomic.h>

typedef struct mend_hush {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_int ticking;     /* written by the loop's thread only */
  unsigned long ends;     /* ticks ended so far: under mu */
  int needed;             /* the loop waits for a background thread: under mu */
  int sleepers;           /* background threads waiting for a tick's end: under mu */
} mend_hush;

void mend__hush_init(mend_hush *h);
void mend__hush_destroy(mend_hush *h);
/* On the loop's thread: a tick begins (1) or ends (0); an end wakes whoever waits for it. */
void mend__hush_tick(mend_hush *h, int on);
/* On the loop's thread, around a wait for a background thread (1 before, 0 after): no pause
 * meanwhile, and a thread paused now goes on. */
void mend__hush_need(mend_hush *h, int on);
/* On a background thread: while a tick runs, waits until it ends. 1 if it waited. */
int mend__hush_wait(mend_hush *h);

#endif
