/*
 * wsched: the scheduling class of the store's writer thread (mend_writer_sched in mend.h).
 * The loop says which class it wants as the engine starts or stops being ticked, and moves the
 * thread then if it knows it; the thread moves itself when it next tells the loop a batch is
 * done, which is also how its id becomes known (only the store knows the thread, and the
 * engine's done() is the one call the engine gets on it).
 *
 * Must never: change the class of any thread but the writer; raise a thread above the class
 * the host gave it (SCHED_BATCH only ever goes back to SCHED_OTHER, the class the thread
 * inherited); fail a batch or the engine because the kernel refused a class.
 */
#define _GNU_SOURCE   /* SCHED_BATCH, gettid */
#include "engine_int.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mend.h>

/* Under writer_sched_busy, from either thread: the class wanted now, if it is not the one the
 * thread is in. Both threads may try at once (a tick starting while a batch ends); whichever
 * goes last reads the latest want, so the thread ends in it. */
static void move(mend_engine *E) {
  int expected = 0;
  while (!atomic_compare_exchange_weak(&E->writer_sched_busy, &expected, 1)) expected = 0;
  int want = atomic_load_explicit(&E->writer_sched_want, memory_order_relaxed);
  int now = E->writer_sched_now;
  /* A thread never moved keeps what it inherited from the thread that started it, the host's
   * choice, for SCHED_OTHER. */
  if (want && want != now && !(want == MEND_WRITER_SCHED_OTHER && !now) && E->writer_tid > 0) {
    struct sched_param sp = {0};
    /* A refusal (a seccomp filter, say) leaves the thread as it is: it only costs ticks time. */
    sched_setscheduler(E->writer_tid, want == MEND_WRITER_SCHED_BATCH ? SCHED_BATCH : SCHED_OTHER,
                       &sp);
    E->writer_sched_now = want;
  }
  atomic_store(&E->writer_sched_busy, 0);
}

/* On the loop's thread: the class for a ticked engine, or for one driven by run. A change
 * moves the thread at once: idle, it would keep its class until its next batch (under run_all
 * small batches are committed on the loop's thread, so a writer stayed in SCHED_BATCH long
 * after the ticks stopped). */
void mend__writer_sched_want(mend_engine *E, int ticked) {
  int want = E->cfg.writer_sched == MEND_WRITER_SCHED_TICKS
               ? (ticked ? MEND_WRITER_SCHED_BATCH : MEND_WRITER_SCHED_OTHER)
               : E->cfg.writer_sched;
  if (atomic_exchange_explicit(&E->writer_sched_want, want, memory_order_relaxed) != want)
    move(E);
}

/* On the writer thread, after each batch. Its id is written once, under the same lock as
 * every read of it; the thread lives as long as the store, and so as long as the engine. */
void mend__writer_sched_apply(mend_engine *E) {
  if (!E->writer_tid) {
    int expected = 0;
    while (!atomic_compare_exchange_weak(&E->writer_sched_busy, &expected, 1)) expected = 0;
    E->writer_tid = (int)syscall(SYS_gettid);
    atomic_store(&E->writer_sched_busy, 0);
  }
  move(E);
}
