/*
 * timers: the engine's clock and its timers. The scheduler owns time: every wait in mend (a
 * backoff, a breaker wait, mend.sleep, a step timeout) is a mend_timer here, never a sleep.
 *
 * A binary min-heap of caller-owned timers, ordered by due time then by arming order, so that
 * timers due at the same instant fire in the order they were armed. With a real clock the heap
 * drives one libuv timer armed for its earliest entry; with a virtual clock time stands still
 * until the engine (or a caller) advances it, and then due timers fire in order at once.
 * On Linux the real clock's timer is a timerfd watched by the loop: a libuv timer fires up to
 * 2 ms late, as libuv counts time and its poll's timeout in milliseconds.
 * Times are seconds since the epoch as doubles.
 */
#ifndef MEND_TIMERS_H
#define MEND_TIMERS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct mend_timer mend_timer;
typedef void (*mend_timer_fn)(mend_timer *t);

struct mend_timer {
  double due;
  uint64_t seq;
  size_t slot;             /* index in the heap + 1; 0 when not armed */
  mend_timer_fn fn;        /* finds its own data from t (a timer is embedded in it): a parked
                            * run has two, and a pointer each is 16 B of its memory */
};

typedef struct mend_timers {
  mend_timer **heap;
  size_t count, cap;
  uint64_t next_seq;
  int is_virtual;
  double virtual_now;
  uv_loop_t *loop;
  uv_timer_t *uv;          /* malloc'ed: closed through uv_close, freed in its close callback */
  double fire_deadline;    /* real clock: mend_timers_fire_due stops firing at this wall time
                            * (0: never), one timer at least; the rest stay due for the next */
  uv_poll_t *fd_poll;      /* Linux: a timerfd armed for the earliest entry, to the nanosecond
                            * (libuv's timers count milliseconds); then `uv` stays idle */
} mend_timers;

/* 0 or -1 (out of memory). `loop` drives the real clock; unused by a virtual one. */
int    mend_timers_init(mend_timers *ts, uv_loop_t *loop, int is_virtual);
void   mend_timers_close(mend_timers *ts);  /* disarms everything; closes the uv handle */
/* The entries no longer keep the loop alive (a broken engine's waits hold a host's uv_run no
 * longer), and still fire while something else does (an attempt's deadline stops a child
 * process that holds the loop). */
void   mend_timers_unref(mend_timers *ts);
double mend_timers_now(const mend_timers *ts);
double mend_real_now(void);   /* wall clock, seconds since the epoch, the store's if set below */
double mend_host_now(void);   /* this host's wall clock, for deadlines that stay on this host */
/* The store's clock minus this host's (0: the host's is the engine's). */
void   mend_real_clock_offset(double seconds);
double mend_real_clock_offset_now(void);

void   mend_timer_init(mend_timer *t, mend_timer_fn fn);
int    mend_timer_arm(mend_timers *ts, mend_timer *t, double due);   /* re-arms if armed */
void   mend_timer_disarm(mend_timers *ts, mend_timer *t);
static inline int mend_timer_armed(const mend_timer *t) { return t->slot != 0; }

/* Fires, in order, every timer due at or before the clock's present (the real clock's or the
 * virtual one's). Returns how many fired. Callbacks may arm and disarm timers. */
size_t mend_timers_fire_due(mend_timers *ts);
/* Earliest due time, or -1 when nothing is armed. */
double mend_timers_next_due(const mend_timers *ts);
/* Virtual clock: moves time to `to` (never backwards), firing due timers in order on the way,
 * each at its own due time. Returns how many fired. */
size_t mend_timers_advance_to(mend_timers *ts, double to);
/* Virtual clock: moves time on to t if it is behind, firing nothing now (timers due before t
 * fire at the next mend_timers_fire_due). A real clock is left alone. */
void   mend_timers_not_before(mend_timers *ts, double t);
/* Real clock: re-arms the timerfd (or the uv timer) for the earliest entry. */
void   mend_timers_sync(mend_timers *ts);

#endif
