/*
 * timers: a min-heap of caller-owned timers under one clock, real or virtual (see timers.h).
 * Never blocks and never calls into Lua itself: callbacks are the engine's.
 */
#include "timers.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/timerfd.h>
#endif

/* The shared store's clock minus this host's, when a store whose clock is the reference (a
 * PostgreSQL server) found them apart: every time the engine writes and every due time it
 * compares is then the store's, as another worker reading them will take them. Process-wide,
 * like the clock it corrects; set from a store's thread, read from any. */
static _Atomic double clock_offset;

/* The latest a real timer is set for, in seconds (year 5138): a later one fires then, finds
 * nothing due and is set again. */
#define MEND_TIMERS_LATEST 1e11

double mend_host_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double mend_real_now(void) {
  return mend_host_now() + atomic_load_explicit(&clock_offset, memory_order_relaxed);
}

void mend_real_clock_offset(double seconds) {
  atomic_store_explicit(&clock_offset, seconds, memory_order_relaxed);
}

double mend_real_clock_offset_now(void) {
  return atomic_load_explicit(&clock_offset, memory_order_relaxed);
}

static int earlier(const mend_timer *a, const mend_timer *b) {
  return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void place(mend_timers *ts, size_t i, mend_timer *t) {
  ts->heap[i] = t;
  t->slot = i + 1;
}

static void sift_up(mend_timers *ts, size_t i) {
  mend_timer *t = ts->heap[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!earlier(t, ts->heap[parent])) break;
    place(ts, i, ts->heap[parent]);
    i = parent;
  }
  place(ts, i, t);
}

static void sift_down(mend_timers *ts, size_t i) {
  mend_timer *t = ts->heap[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= ts->count) break;
    if (child + 1 < ts->count && earlier(ts->heap[child + 1], ts->heap[child])) child++;
    if (!earlier(ts->heap[child], t)) break;
    place(ts, i, ts->heap[child]);
    i = child;
  }
  place(ts, i, t);
}

static void on_uv_timer(uv_timer_t *h) {
  mend_timers *ts = h->data;
  mend_timers_fire_due(ts);
  mend_timers_sync(ts);
}

#ifdef __linux__
typedef struct timer_fd {
  uv_poll_t poll;   /* first: the handle's address is the struct's */
  int fd;
} timer_fd;

static int fd_of(uv_poll_t *p) { return ((timer_fd *)p)->fd; }

static void on_timerfd(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  mend_timers *ts = h->data;
  uint64_t expirations;
  if (read(fd_of(h), &expirations, sizeof expirations) < 0) { /* EAGAIN: nothing to clear */ }
  mend_timers_fire_due(ts);
  mend_timers_sync(ts);
}

/* The poll handle is closed first; its timerfd once libuv no longer watches it. */
static void close_timerfd(uv_handle_t *h) {
  close(fd_of((uv_poll_t *)h));
  free(h);
}

static void open_timerfd(mend_timers *ts) {
  int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) return;   /* the uv timer does it, to the millisecond */
  timer_fd *t = malloc(sizeof *t);
  if (!t || uv_poll_init(ts->loop, &t->poll, fd) != 0) {
    free(t);
    close(fd);
    return;
  }
  t->fd = fd;
  t->poll.data = ts;
  ts->fd_poll = &t->poll;
}

static void arm_timerfd(mend_timers *ts, double due) {
  /* A microsecond past the due time: the clock read as a double must not come out before it
   * (at 1.8e9 s a double's step is 0.24 us), or the timer would fire and find nothing due. */
  due += 1e-6 - mend_real_clock_offset_now();   /* the kernel's clock is the host's */
  /* A due time past what time_t holds (an endless timeout) would convert to nonsense, a
   * timer firing at once, again and again. */
  if (!(due < MEND_TIMERS_LATEST)) due = MEND_TIMERS_LATEST;
  struct itimerspec its = {0};
  its.it_value.tv_sec = (time_t)due;
  its.it_value.tv_nsec = (long)((due - (double)its.it_value.tv_sec) * 1e9);
  if (its.it_value.tv_nsec < 0) its.it_value.tv_nsec = 0;
  if (its.it_value.tv_nsec > 999999999) its.it_value.tv_nsec = 999999999;
  if (its.it_value.tv_sec <= 0) its.it_value = (struct timespec){0, 1};   /* 0 would disarm it */
  timerfd_settime(fd_of(ts->fd_poll), TFD_TIMER_ABSTIME, &its, NULL);
  if (!uv_is_active((uv_handle_t *)ts->fd_poll))
    uv_poll_start(ts->fd_poll, UV_READABLE, on_timerfd);
}

static void disarm_timerfd(mend_timers *ts) {
  struct itimerspec off = {0};
  timerfd_settime(fd_of(ts->fd_poll), 0, &off, NULL);
  uv_poll_stop(ts->fd_poll);   /* an armed timer keeps the loop alive; none must not */
}
#endif

int mend_timers_init(mend_timers *ts, uv_loop_t *loop, int is_virtual) {
  *ts = (mend_timers){0};
  ts->is_virtual = is_virtual;
  ts->virtual_now = mend_real_now();
  ts->loop = loop;
  ts->cap = 64;
  ts->heap = malloc(ts->cap * sizeof *ts->heap);
  if (!ts->heap) return -1;
  if (!is_virtual) {
    ts->uv = malloc(sizeof *ts->uv);
    if (!ts->uv) { free(ts->heap); ts->heap = NULL; return -1; }
    uv_timer_init(loop, ts->uv);
    ts->uv->data = ts;
#ifdef __linux__
    open_timerfd(ts);
#endif
  }
  return 0;
}

static void free_on_close(uv_handle_t *h) { free(h); }

void mend_timers_close(mend_timers *ts) {
  for (size_t i = 0; i < ts->count; i++) ts->heap[i]->slot = 0;
  ts->count = 0;
  free(ts->heap);
  ts->heap = NULL;
  if (ts->uv) {
    uv_timer_stop(ts->uv);
    uv_close((uv_handle_t *)ts->uv, free_on_close);
    ts->uv = NULL;
  }
#ifdef __linux__
  if (ts->fd_poll) {
    uv_poll_stop(ts->fd_poll);
    uv_close((uv_handle_t *)ts->fd_poll, close_timerfd);
    ts->fd_poll = NULL;
  }
#endif
}

double mend_timers_now(const mend_timers *ts) {
  return ts->is_virtual ? ts->virtual_now : mend_real_now();
}

void mend_timer_init(mend_timer *t, mend_timer_fn fn) { *t = (mend_timer){.fn = fn}; }

int mend_timer_arm(mend_timers *ts, mend_timer *t, double due) {
  if (t->slot) mend_timer_disarm(ts, t);
  if (ts->count == ts->cap) {
    size_t cap = ts->cap * 2;
    mend_timer **heap = realloc(ts->heap, cap * sizeof *heap);
    if (!heap) return -1;
    ts->heap = heap;
    ts->cap = cap;
  }
  t->due = due;
  t->seq = ts->next_seq++;
  place(ts, ts->count++, t);
  sift_up(ts, ts->count - 1);
  return 0;
}

void mend_timer_disarm(mend_timers *ts, mend_timer *t) {
  if (!t->slot) return;
  size_t i = t->slot - 1;
  t->slot = 0;
  ts->count--;
  if (i == ts->count) return;
  place(ts, i, ts->heap[ts->count]);
  if (i > 0 && earlier(ts->heap[i], ts->heap[(i - 1) / 2])) sift_up(ts, i);
  else sift_down(ts, i);
}

double mend_timers_next_due(const mend_timers *ts) {
  return ts->count ? ts->heap[0]->due : -1;
}

static size_t fire_until(mend_timers *ts, double limit) {
  size_t fired = 0;
  while (ts->count && ts->heap[0]->due <= limit) {
    mend_timer *t = ts->heap[0];
    if (ts->is_virtual && t->due > ts->virtual_now) ts->virtual_now = t->due;
    mend_timer_disarm(ts, t);
    t->fn(t);
    fired++;
  }
  return fired;
}

size_t mend_timers_fire_due(mend_timers *ts) {
  if (ts->is_virtual || ts->fire_deadline <= 0) return fire_until(ts, mend_timers_now(ts));
  /* a ticking host's budget: the timers left are due still, and fire at the next pass */
  size_t fired = 0;
  double now = mend_real_now();
  while (ts->count && ts->heap[0]->due <= now &&
         (fired == 0 || mend_real_now() < ts->fire_deadline)) {
    mend_timer *t = ts->heap[0];
    mend_timer_disarm(ts, t);
    t->fn(t);
    fired++;
  }
  return fired;
}

size_t mend_timers_advance_to(mend_timers *ts, double to) {
  size_t fired = fire_until(ts, to);
  if (to > ts->virtual_now) ts->virtual_now = to;
  return fired;
}

void mend_timers_not_before(mend_timers *ts, double t) {
  if (ts->is_virtual && t > ts->virtual_now) ts->virtual_now = t;
}

void mend_timers_unref(mend_timers *ts) {
  if (ts->uv) uv_unref((uv_handle_t *)ts->uv);
#ifdef __linux__
  if (ts->fd_poll) uv_unref((uv_handle_t *)ts->fd_poll);
#endif
}

void mend_timers_sync(mend_timers *ts) {
  if (ts->is_virtual || !ts->uv) return;
#ifdef __linux__
  if (ts->fd_poll) {
    if (ts->count) arm_timerfd(ts, ts->heap[0]->due);
    else disarm_timerfd(ts);
    return;
  }
#endif
  if (!ts->count) { uv_timer_stop(ts->uv); return; }
  double wait = ts->heap[0]->due - mend_real_now();
  if (!(wait < MEND_TIMERS_LATEST)) wait = MEND_TIMERS_LATEST;
  uint64_t ms = wait <= 0 ? 0 : (uint64_t)(wait * 1000.0 + 0.999);  /* never early */
  uv_timer_start(ts->uv, on_uv_timer, ms, 0);
}
