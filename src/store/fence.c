/*
 * fence: the store's half of one worker per run: leases (claims, renewals, owners, the runs a
 * worker may take) and the fence that checks, when a batch begins, which of a worker's runs
 * another worker took meanwhile. Must never: let a write of a worker reach a run it no longer
 * holds.
 */
#define _GNU_SOURCE   /* mremap */
#include "store_int.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "walvfs.h"

/* ---- fencing ----------------------------------------------------------------------------
 * A worker holds its runs only while their leases last. One that stalls past them (stopped,
 * swapped out, waiting on a lock) may find that another worker took some, and what it then
 * wrote to them would mix two workers' transitions in one run. So each transaction checks,
 * once it holds the write lock (no claim can commit while it does), that it began before our
 * leases ran out (fence_until; claims compare lease_until against the same wall clock). One
 * that began late renews what is still ours, then looks up the holder of each run it writes
 * to, once per run. A run another worker holds is lost: its writes are dropped, in this batch
 * and every later one, and the engine hears of it (mend_store_fence_news) and lets it go.
 * Looking up goes on until the engine has matched its runs against those the store says it
 * holds (mend_store_held, mend_store_fence_verified). */

/* The clock leases are kept on: the wall clock, which other processes on this host share. */
double mend__wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the loop reads of the fence is guarded by the writer's mutex, if there is a writer. */
static void news_lock(mend_store *s) { if (s->w) pthread_mutex_lock(&s->w->mu); }
static void news_unlock(mend_store *s) { if (s->w) pthread_mutex_unlock(&s->w->mu); }

static int fence_oom(mend_store *s) {
  mend__set_msg(s->err, sizeof s->err, "%s: keeping track of lost leases: out of memory", s->path);
  s->batch_failed = 1;
  return -1;
}

int mend__lease_at_least(mend_store *s, const char *owner, double until);

/* Also where the worker's row is first written: before any run it owns can commit. */
int mend__fence_at_begin(mend_store *s) {
  if (!s->fence_owner) return 0;
  int late = mend__wall_now() >= s->fence_until || s->fence_always_late;
  if (!late)
    return s->fence_registered ? 0 : mend__lease_at_least(s, s->fence_owner, s->fence_until);
  double until = mend__wall_now() + s->fence_lease;
  if (mend__lease_at_least(s, s->fence_owner, until) != 0) return -1;
  s->fence_until = until;
  s->fence_checking = 1;
  mend_idset_clear(&s->fence_checked);
  news_lock(s);
  s->fence_news = 1;
  news_unlock(s);
  return 0;
}

static int note_lost(mend_store *s, const char *id, size_t len) {
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  memcpy(copy, id, len);
  copy[len] = '\0';
  news_lock(s);
  int ok = 1;
  if (s->nlost_new == s->caplost_new) {
    int cap = s->caplost_new ? s->caplost_new * 2 : 16;
    char **more = realloc(s->lost_new, (size_t)cap * sizeof *more);
    if (more) {
      s->lost_new = more;
      s->caplost_new = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) s->lost_new[s->nlost_new++] = copy;
  news_unlock(s);
  if (!ok) free(copy);
  return ok ? 0 : -1;
}

/* 1 if the record must not run (it writes to a run this worker no longer holds), -1 on error.
 * A run is ours only while its owner is us: a run another worker finished has no owner, and
 * our stale writes must not reopen it. */
int mend__fence_drops(mend_store *s, const wlog *log, const wrec *r) {
  if ((!s->fence_checking && !s->lost.count) || r->repair) return 0;
  const wval *v = &log->vals[r->first];
  if (r->q == Q_PUT_BREAKER || r->q == Q_RENEW || v->type != V_TEXT) return 0;   /* not a run's */
  const char *id = log->text + v->off;
  size_t len = v->len;
  if (r->q == Q_INSERT_RUN || r->q == Q_INSERT_RUN_KEY)   /* ours from the start */
    return s->fence_checking && mend_idset_add(&s->fence_checked, id, len) < 0 ? fence_oom(s) : 0;
  if (mend_idset_has(&s->lost, id, len)) return 1;
  if (!s->fence_checking || mend_idset_has(&s->fence_checked, id, len)) return 0;
  sqlite3_stmt *q = s->q[Q_OWNER];
  int row = mend__first_row(s, q, sqlite3_bind_text(q, 1, id, (int)len, SQLITE_STATIC),
                      "look up who holds a run");
  if (row < 0) {
    s->batch_failed = 1;
    return -1;
  }
  const char *owner = row ? (const char *)sqlite3_column_text(q, 0) : NULL;
  int other = row && (!owner || strcmp(owner, s->fence_owner) != 0);
  if (row) mend__finish(q);
  if (!other) return mend_idset_add(&s->fence_checked, id, len) < 0 ? fence_oom(s) : 0;
  if (mend_idset_add(&s->lost, id, len) < 0 || note_lost(s, id, len) != 0) return fence_oom(s);
  return 1;
}

/* A renewal has run: our leases last until its time (if it renewed ours). */
static int fence_is(const mend_store *s, const char *owner, size_t len) {
  return s->fence_owner && owner && strlen(s->fence_owner) == len &&
         memcmp(s->fence_owner, owner, len) == 0;
}

void mend__renewed(mend_store *s, const wlog *log, const wrec *r) {
  const wval *owner = &log->vals[r->first], *until = &log->vals[r->first + 1];
  if (owner->type != V_TEXT || until->type != V_REAL) return;
  if (fence_is(s, log->text + owner->off, owner->len) && until->d > s->fence_until)
    s->fence_until = until->d;
}

/* Our lease lasts at least until `until` (renewed now, in the open transaction). */
int mend__lease_at_least(mend_store *s, const char *owner, double until) {
  sqlite3_stmt *q = s->q[Q_RENEW];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, owner));
  BIND(sqlite3_bind_double(q, 2, until));
  if (mend__run_write(s, q, rc, "renew the lease") != 0) return -1;
  if (fence_is(s, owner, strlen(owner))) {
    s->fence_registered = 1;
    if (until > s->fence_until) s->fence_until = until;
  }
  return 0;
}

/* A run is ours again (claimed, taken): its writes count, and a notice that it was lost, not
 * yet given to the engine, is taken back, or the engine would let the new copy go. */
void mend__ours_again(mend_store *s, const char *id) {
  mend_idset_remove(&s->lost, id, strlen(id));
  news_lock(s);
  for (int i = 0; i < s->nlost_new; i++) {
    if (strcmp(s->lost_new[i], id) != 0) continue;
    free(s->lost_new[i]);
    s->lost_new[i--] = s->lost_new[--s->nlost_new];
  }
  news_unlock(s);
}


int mend__sqlite_set_fence(mend_store *s, const char *owner, double lease_seconds) {
  char *copy = strdup(owner);
  if (!copy) return fence_oom(s);
  if (!s->fence_owner || strcmp(s->fence_owner, owner) != 0) s->fence_registered = 0;
  free(s->fence_owner);
  s->fence_owner = copy;
  s->fence_lease = lease_seconds;
  s->fence_until = mend__wall_now() + lease_seconds;
#ifdef MEND_FAILPOINTS
  /* The late path, taken by every transaction: the specs run under it to show that a worker
   * holding all its leases loses nothing to the lookups (MEND_FENCE_LATE=1 make test). */
  s->fence_always_late = getenv("MEND_FENCE_LATE") != NULL;
#endif
  return 0;
}

int mend__sqlite_fence_news(mend_store *s, void (*lost)(void *ud, const char *id), void *ud) {
  news_lock(s);
  char **ids = s->lost_new;
  int n = s->nlost_new, late = s->fence_news;
  s->lost_new = NULL;
  s->nlost_new = s->caplost_new = 0;
  s->fence_news = 0;
  news_unlock(s);
  for (int i = 0; i < n; i++) {
    lost(ud, ids[i]);
    free(ids[i]);
  }
  free(ids);
  return late;
}

void mend__sqlite_repairing(mend_store *s, int on) { s->repairing = on; }

int mend__sqlite_add_lost(mend_store *s, const char *id) {
  return mend_idset_add(&s->lost, id, strlen(id)) < 0 ? fence_oom(s) : 0;
}

/* The id column of every row of a bound statement, as an array of strings; NULL on error. */
static json_t *strings_of(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  json_t *out = json_array();
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW)
      json_array_append_new(out, json_string((const char *)sqlite3_column_text(q, 0)));
  }
  if (rc != SQLITE_DONE) {
    mend__sql_err(s, what);
    json_decref(out);
    out = NULL;
  }
  mend__finish(q);
  return out;
}

json_t *mend__sqlite_held(mend_store *s) {
  if (mend__sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_HELD];
  return strings_of(s, q, mend__bind_text(q, 1, s->fence_owner), "read the runs this worker holds");
}

void mend__sqlite_fence_verified(mend_store *s) {
  if (mend__writer_wait(s) != 0) return;
  s->fence_checking = 0;
  mend_idset_clear(&s->fence_checked);
}


/* ---- leases ----------------------------------------------------------------------------- */

void mend__sqlite_set_worker(mend_store *s, const char *worker) {
  free(s->worker);
  s->worker = NULL;
  s->worker_id = 0;
  if (worker) {
    size_t n = strlen(worker) + 1;
    s->worker = malloc(n);
    if (s->worker) memcpy(s->worker, worker, n);
  }
}

/* Quick: a run nobody holds (runs_free), and a worker other than this one whose lease ran out
 * (its row goes once a claim took its runs), as MEND_CLAIMABLE_* bits. Thorough: any unfinished
 * run nobody holds by a live lease, which walks every run held (see mend_store_claimable). */
static const char *const claimable_sql[2] = {
    "SELECT EXISTS (SELECT 1 FROM runs WHERE owner IS NULL AND status IN ('running',"
    " 'compensating') AND unavailable IS NULL) + 2 * EXISTS (SELECT 1 FROM workers WHERE "
    "lease_until < ?2"
    " AND owner IS NOT ?1)",
    "SELECT 3 FROM runs WHERE status IN ('running', 'compensating') AND unavailable IS NULL"
    " AND (owner IS NULL"
    " OR (owner IS NOT ?1 AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.owner ="
    " runs.owner AND w.lease_until >= ?2))) ORDER BY created DESC LIMIT 1",
};

/* The read-only connection, opened at its first use: 0, or -1 (in memory, or it failed). */
int mend__open_reader(mend_store *s) {
  if (!s->checkpointer) return -1;   /* in memory: no other connection sees it */
  if (s->reader) return 0;
  if (sqlite3_open_v2(s->path, &s->reader,
                      SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI, NULL)
      != SQLITE_OK) {
    sqlite3_close_v2(s->reader);
    s->reader = NULL;
    return -1;
  }
  sqlite3_busy_timeout(s->reader, BUSY_TIMEOUT_MS);
  return 0;
}

int mend__sqlite_claimable(mend_store *s, const char *owner, int thorough) {
  double now = mend__wall_now();
  const int anything = MEND_CLAIMABLE_FREE | MEND_CLAIMABLE_GONE;
  /* in memory, or no reader: only the claim itself can look (and say what is wrong); a file
   * deleted under an idle worker, which commits nothing that would find it out: the claim's
   * commit says so (asked of the reader: the writer thread may hold the other connection) */
  if (mend__open_reader(s) != 0 || mend__file_gone(s, s->reader)) return anything;
  sqlite3_stmt **q = &s->q_claimable[thorough ? 1 : 0];
  if (!*q && sqlite3_prepare_v3(s->reader, claimable_sql[thorough ? 1 : 0], -1,
                                SQLITE_PREPARE_PERSISTENT, q, NULL) != SQLITE_OK)
    return anything;
  int rc = SQLITE_OK;
  BIND(mend__bind_text(*q, 1, owner));
  BIND(sqlite3_bind_double(*q, 2, now));
  if (rc == SQLITE_OK) rc = sqlite3_step(*q);
  int found = rc == SQLITE_ROW ? sqlite3_column_int(*q, 0) : rc == SQLITE_DONE ? 0 : anything;
  sqlite3_reset(*q);
  return found;
}

json_t *mend__sqlite_claim(mend_store *s, const char *owner, double lease_seconds, int limit,
                         int how) {
  double now = mend__wall_now(), lease_until = now + lease_seconds;
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0 ||
      mend__lease_at_least(s, owner, lease_until) != 0)
    return NULL;
  int newest = how & MEND_CLAIM_NEWEST, free_only = how & MEND_CLAIM_FREE;
  int unavailable = (how & MEND_CLAIM_UNAVAILABLE) != 0;
  sqlite3_stmt *q = s->q[free_only ? (newest ? Q_CLAIM_FREE_NEWEST : Q_CLAIM_FREE_OLDEST)
                                   : (newest ? Q_CLAIM_NEWEST : Q_CLAIM_OLDEST)];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, owner));
  if (free_only) {
    BIND(sqlite3_bind_int(q, 2, limit));
    BIND(sqlite3_bind_int(q, 3, unavailable));
  } else {
    BIND(sqlite3_bind_double(q, 2, now));
    BIND(sqlite3_bind_int(q, 3, limit));
    BIND(sqlite3_bind_int(q, 4, unavailable));
  }
  json_t *ids = json_array();
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) continue;
    const char *id = (const char *)sqlite3_column_text(q, 0);
    json_array_append_new(ids, json_string(id));
    mend__ours_again(s, id);
  }
  if (rc != SQLITE_DONE) {
    mend__sql_err(s, "claim runs");
    mend__finish(q);
    s->batch_failed = 1;
    json_decref(ids);
    return NULL;
  }
  mend__finish(q);
  /* It took all there was, in this transaction: a worker whose lease ran out (never this one)
   * holds no run now, and its row would only keep mend_store_claimable looking. A worker that
   * was only stalled writes its row again with its next batch (fence_at_begin). */
  if (!free_only && (int)json_array_size(ids) < limit) {
    q = s->q[Q_FORGET_GONE];
    rc = mend__bind_text(q, 1, owner);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(q, 2, now);
    if (mend__run_write(s, q, rc, "forget workers gone") != 0) {
      json_decref(ids);
      return NULL;
    }
  }
  return ids;
}

/* Recorded like a transition, in the order of the writes around it. */
int mend__sqlite_renew(mend_store *s, const char *owner, double lease_seconds) {
  mend__rec_begin(s, Q_RENEW);
  mend__rec_text(s, owner);
  mend__rec_real(s, mend__wall_now() + lease_seconds);
  return mend__rec_end(s);
}

int mend__sqlite_release(mend_store *s, const char *id, const char *owner) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_RELEASE];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, id));
  BIND(mend__bind_text(q, 2, owner));
  if (mend__run_write(s, q, rc, "release lease") != 0) return -1;
  /* Given back, the run is another worker's to take: nothing more this store records for it is
   * written, unless it takes the run again (ours_again). */
  return mend_idset_add(&s->lost, id, strlen(id)) < 0 ? fence_oom(s) : 0;
}

static int owner_row(mend_store *s, sqlite3_stmt *q, const char *id, char *owner_out,
                     int owner_len, double *lease_left);

int mend__sqlite_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                     double *lease_left) {
  if (mend__sync_point(s) != 0) return -1;
  return owner_row(s, s->q[Q_OWNER], id, owner_out, owner_len, lease_left);
}

int mend__sqlite_owner_view(mend_store *s, const char *id, char *owner_out, int owner_len,
                            double *lease_left) {
  if (mend__view_point(s) != 0) return -1;
  return owner_row(s, mend__view_stmt(s, Q_OWNER), id, owner_out, owner_len, lease_left);
}

static int owner_row(mend_store *s, sqlite3_stmt *q, const char *id, char *owner_out,
                     int owner_len, double *lease_left) {
  int r = mend__first_row(s, q, mend__bind_text(q, 1, id), "read lease");
  if (r != 1) return r;
  const char *o = (const char *)sqlite3_column_text(q, 0);
  mend__set_msg(owner_out, owner_len, "%s", o ? o : "");
  *lease_left = sqlite3_column_type(q, 1) == SQLITE_NULL
                    ? -1e300
                    : sqlite3_column_double(q, 1) - mend__wall_now();
  mend__finish(q);
  return 1;
}

json_t *mend__sqlite_lease_holders(mend_store *s) {
  if (mend__sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_HOLDERS];
  return strings_of(s, q, sqlite3_bind_double(q, 1, mend__wall_now()), "read lease holders");
}

int mend__sqlite_release_owner(mend_store *s, const char *owner) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_RELEASE_OWNER];
  if (mend__run_write(s, q, mend__bind_text(q, 1, owner), "release the runs of a dead worker") != 0)
    return -1;
  q = s->q[Q_FORGET_WORKER];
  return mend__run_write(s, q, mend__bind_text(q, 1, owner), "forget a dead worker");
}
