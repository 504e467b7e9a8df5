/*
 * wsched: the scheduling class of the store's writer thread (mend_writer_sched in mend.h).
 * The loop says which class it wants as the engine starts or stops being ticked; the writer
 * thread puts itself in it when it next tells the loop a batch is done, since only the store
 * knows the thread and the engine's done() is the one call the engine gets on it.
 *
 * Must never: change the class of any thread but the writer; raise a thread above the class
 * the host gave it (SCHED_BATCH only ever goes back to SCHED_OTHER, and only from itself);
 * fail a batch or the engine because the kernel refused a class.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include "engine_int.h"

#include <pthread.h>
#include <sched.h>

#include <mend.h>

/* On the loop's thread: the class for a ticked engine, or for one driven by run. */
void mend__writer_sched_want(mend_engine *E, int ticked) {
  int want = E->cfg.writer_sched == MEND_WRITER_SCHED_TICKS
               ? (ticked ? MEND_WRITER_SCHED_BATCH : MEND_WRITER_SCHED_OTHER)
               : E->cfg.writer_sched;
  atomic_store_explicit(&E->writer_sched_want, want, memory_order_relaxed);
}

/* On the writer thread, after each batch. A thread never moved keeps what it inherited from
 * the thread that started it, the host's choice, for SCHED_OTHER. */
void mend__writer_sched_apply(mend_engine *E) {
  int want = atomic_load_explicit(&E->writer_sched_want, memory_order_relaxed);
  if (!want || want == E->writer_sched_now) return;
  if (want == MEND_WRITER_SCHED_OTHER && !E->writer_sched_now) return;
  struct sched_param sp = {0};
  /* A refusal (a seccomp filter, say) leaves the thread as it is: it only costs ticks time. */
  pthread_setschedparam(pthread_self(), want == MEND_WRITER_SCHED_BATCH ? SCHED_BATCH : SCHED_OTHER, &sp);
  E->writer_sched_now = want;
}
