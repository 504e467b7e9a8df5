/*
 * test_adopt_race: mend_engine_adopt against a driving call of the old owner that has passed its
 * thread check but not yet begun (the window the call's count of driving closes). Linked with
 * -Wl,--wrap=mend_engine_panicked, the first thing a driving call does after that check, so
 * that the owner can be held there while another thread adopts: the owner's call must then be
 * refused (MEND_ESTATE), never run beside the new owner's.
 */
#include <mend.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>

#include "check.h"

int __real_mend_engine_panicked(const mend_engine *E);
int __wrap_mend_engine_panicked(const mend_engine *E);

static mend_engine *engine;
static pthread_t owner;
static volatile int hold;
static sem_t at_gate, go;
static int adopt_rc = -1;

int __wrap_mend_engine_panicked(const mend_engine *E) {
  if (hold && pthread_equal(pthread_self(), owner)) {
    hold = 0;
    sem_post(&at_gate);   /* past its thread check: now the other thread adopts */
    sem_wait(&go);
  }
  return __real_mend_engine_panicked(E);
}

static void *adopter(void *ud) {
  (void)ud;
  sem_wait(&at_gate);
  adopt_rc = mend_engine_adopt(engine);
  sem_post(&go);
  return NULL;
}

int main(void) {
  mend_options o;
  mend_options_init(&o);
  char err[300];
  CHECK_EQ_INT(mend_engine_new(&o, &engine, err, sizeof err), MEND_OK);
  if (!engine) return check_done("test_adopt_race");
  owner = pthread_self();
  sem_init(&at_gate, 0, 0);
  sem_init(&go, 0, 0);
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, adopter, NULL), 0);
  hold = 1;
  int tick_rc = mend_engine_tick(engine, 0.001);
  pthread_join(t, NULL);
  /* The adopt came before the count: it is the other thread's now, and the held call, no
   * longer its owner's, did not drive it. */
  CHECK_EQ_INT(adopt_rc, MEND_OK);
  CHECK_EQ_INT(tick_rc, MEND_ESTATE);
  CHECK_EQ_INT(mend_engine_tick(engine, 0.001), MEND_ESTATE);
  /* That thread has ended: this one takes the engine back, and drives it. */
  CHECK_EQ_INT(mend_engine_adopt(engine), MEND_OK);
  CHECK_EQ_INT(mend_engine_tick(engine, 0.001), MEND_OK);
  mend_engine_free(engine);
  return check_done("test_adopt_race");
}
