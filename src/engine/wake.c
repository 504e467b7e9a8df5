/*
 * wake: a serving worker told by its store that another process made work due or sent an
 * event (PostgreSQL's LISTEN/NOTIFY), and the jitter of its fallback poll. Owns the watch on
 * the store's wake-up socket (a uv_poll), its reopening when the store's connection behind it
 * is gone, and the poll interval's jitter. Must never: act on a wake-up but by looking now
 * (the look reads committed rows, as every poll does); close a socket it still watches (the
 * store closes it, after this file stops watching).
 */
#include "engine_int.h"

#include <stdlib.h>
#include <sys/random.h>

static void close_and_free(uv_handle_t *h) { free(h); }

void mend__wake_stop(mend_engine *E) {
  if (!E->wake_poll) return;
  uv_poll_stop(E->wake_poll);
  uv_close((uv_handle_t *)E->wake_poll, close_and_free);
  E->wake_poll = NULL;
}

static void on_readable(uv_poll_t *h, int status, int events) {
  mend_engine *E = h->data;
  (void)events;
  int woken = status < 0 ? -1 : mend_store_wake_take(E->store);
  if (woken < 0) {
    /* Its connection is gone: watched again, on a new one, from the next poll. Meanwhile
     * the poll's interval is the only wake-up, as where a backend has none. */
    mend__wake_stop(E);
    return;
  }
  if (woken && !E->draining && !E->broken) mend__poll_soon(E);
}

/* After each poll: the store's wake-up socket watched, (re)opened if need be. A socket new
 * since the last poll missed what was sent before it: one more look, now. */
void mend__wake_watch(mend_engine *E) {
  if (E->wake_poll || E->draining || E->broken) return;
  int opened;
  int fd = mend_store_wake_fd(E->store, &opened);
  if (fd < 0) return;
  uv_poll_t *h = malloc(sizeof *h);
  if (!h) return;   /* the poll still finds everything */
  if (uv_poll_init(E->loop, h, fd) != 0) {
    free(h);
    return;
  }
  h->data = E;
  if (uv_poll_start(h, UV_READABLE, on_readable) != 0) {
    uv_close((uv_handle_t *)h, close_and_free);
    return;
  }
  E->wake_poll = h;
  if (opened && E->wake_watched) mend__poll_soon(E);
  E->wake_watched = 1;
}

/* The poll's interval, 0.8 to 1.2 times the one asked for: many workers started together
 * must not all look at once, for ever after. */
uint64_t mend__poll_jitter(uint64_t ms) {
  uint32_t r;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) return ms;
  uint64_t span = ms * 2 / 5;
  return span ? ms - ms / 5 + (uint64_t)r % (span + 1) : ms;
}
