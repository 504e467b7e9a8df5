/*
 * lock: waiting out a write lock that another process holds on the database (someone in the
 * sqlite3 shell, a process stopped mid-write), or on PostgreSQL a row or table another session
 * holds that a batch writes (psql left inside a transaction; src/store/pg/pg_wait.c). Owns the
 * retry of the kept batch on a timer with backoff, the warnings while it lasts, and what is
 * refused meanwhile. Must never: block the loop on the lock; let an action run before the
 * batch that announces it is durable.
 */
#include "engine_int.h"

#include <stdio.h>

#include "log.h"
#include "util.h"

/* Warnings while the lock lasts, this far apart (seconds). */
#define LOCK_WARN_EVERY 3.0

/* ---------------------------------------------------------------- a lock held elsewhere */

/* Another process holds the database's write lock (the sqlite3 shell inside a transaction, a
 * process stopped mid-write). Nothing is lost: the batch stays recorded and nothing it
 * announces runs until it commits (the write-ahead rule), so the runs simply wait. Without a
 * writer thread the commit is tried again on a timer, 50 ms doubling to 1 s; the writer thread
 * retries its batch by itself (src/store/writer.c). Either way a warning is logged every few
 * seconds, and a line when the lock goes. Leases are not renewed meanwhile: a lock longer than the
 * lease is a stall like any other, and the fence sorts out what another worker took. */

/* The timer is due on the loop's clock, cached as the turn that armed it began, while the
 * retry time was read from the real clock later in that turn: it may fire before that time.
 * Its firing is the retry, so the time is let go of here; held to it, the turn that follows
 * would only see the wait still running and arm nothing again (a loop with nothing else to
 * kick it, as mend serve's, then never retried). */
static void lock_retry(uv_timer_t *t) {
  mend_engine *E = t->data;
  E->lock_retry_at = 0;
  mend__kick(E);
}

static void lock_warn(mend_engine *E, double now) {
  char msg[1200];
  /* PostgreSQL's writes wait for another session's rows or tables, not one lock: its
   * message names them (pg_wait.c). */
  const char *what = mend_store_has_write_lock(E->store)
                         ? "the database is locked by another process"
                         : "another session holds a lock the writes need";
  snprintf(msg, sizeof msg, "%s: writes wait (%.0f s so far), retrying; %s", what,
           now - E->lock_since, mend_store_errmsg(E->store));
  mend_engine_log_line(E, "warn", NULL, NULL, 0, "store", msg);
  E->lock_warned = now;
}

void mend__lock_wait(mend_engine *E) {
  if (E->broken || E->destroying) return;
  double now = mend_real_now();
  if (E->lock_since <= 0) {
    E->lock_since = now;
    E->lock_delay = 0.05;
    lock_warn(E, now);
  } else {
    E->lock_delay = E->lock_delay * 2 > 1 ? 1 : E->lock_delay * 2;
    if (now - E->lock_warned >= LOCK_WARN_EVERY) lock_warn(E, now);
  }
  E->lock_retry_at = now + E->lock_delay;
  if (!E->lock_timer) {
    E->lock_timer = malloc(sizeof *E->lock_timer);
    if (!E->lock_timer) { mend__breakdown(E, "out of memory waiting for a lock"); return; }
    uv_timer_init(E->loop, E->lock_timer);
    E->lock_timer->data = E;
  }
  uv_timer_start(E->lock_timer, lock_retry, (uint64_t)(E->lock_delay * 1000) + 1, 0);
}

/* At each turn: the writer thread's wait heard of, and the end of a lock told. */
void mend__watch_lock(mend_engine *E) {
  if (mend_store_locked(E->store)) {
    if (E->writer && mend_store_writer_busy(E->store)) {
      double now = mend_real_now();
      if (E->lock_since <= 0) {
        E->lock_since = now;
        lock_warn(E, now);
      } else if (now - E->lock_warned >= LOCK_WARN_EVERY) {
        lock_warn(E, now);
      }
    }
    return;
  }
  if (E->lock_since <= 0) return;
  char msg[160];
  snprintf(msg, sizeof msg, "%s lock is gone after %.1f s: going on",
           mend_store_has_write_lock(E->store) ? "the database" : "the other session's",
           mend_real_now() - E->lock_since);
  mend_engine_log_line(E, "info", NULL, NULL, 0, "store", msg);
  E->lock_since = E->lock_retry_at = 0;
  if (E->lock_timer) uv_timer_stop(E->lock_timer);
}

int mend__lock_waiting(const mend_engine *E) {
  return E->lock_since > 0 && mend_real_now() < E->lock_retry_at;
}

/* A look for work would meet the lock too, so it waits while something else waits it out: a
 * batch kept for it (its retry is the look at the lock), or the back-off before the next try.
 * A begin that met the lock with nothing to keep (a claim, a release: their writes start with
 * it) leaves the store's mark and no batch to retry; once the back-off is over the lock is
 * tried here, else an idle worker would look for no work until a write of its own began a
 * batch (a lease renewal, seconds later; none while it holds no run), and one whose look then
 * found nothing to write (another worker took the run) would keep the mark, and the lock's
 * start, for good: no "gone", and the next lock told from this one's start. */
int mend__lock_stops_looks(mend_engine *E) {
  if (!mend_store_locked(E->store)) return 0;
  if (mend_store_batch_open(E->store) || (E->writer && mend_store_writer_busy(E->store))) return 1;
  if (mend__lock_waiting(E)) return 1;
  if (mend_store_lock_try(E->store)) {
    mend__kick(E);   /* the turn tells the lock's end */
    return 0;
  }
  mend__lock_wait(E);
  return 1;
}

/* ---------------------------------------------------------------- what is refused meanwhile */

/* While a batch waits for another PostgreSQL session's lock (mend_store_locked), a repair or a
 * start is refused before anything of it is recorded (503, naming the row and the session):
 * recorded, it would wait behind that batch for as long as the lock lasts, its caller
 * unanswered. (On SQLite a repair is recorded and made once the lock goes: take_later; a
 * start waits up to its busy wait.) */
int mend__batch_held(mend_engine *E, const char *what, char *err, int errlen) {
  if (!E->store || !mend_store_locked(E->store) || mend_store_has_write_lock(E->store)) return 0;
  E->refusal = MEND_REFUSED_BUSY;
  mend_errorf(err, errlen, "%s; nothing of this %s was written: try again once it is gone",
              mend_store_errmsg(E->store), what);
  return 1;
}
