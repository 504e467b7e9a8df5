/*
 * inbox: the events sent to runs, kept until the run ends: sent once per key, consumed once,
 * in the order sent, in the transaction of the step that takes them. Must never: hand one
 * event to two waits.
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

/* ---- events ---------------------------------------------------------------------------- */

int mend__open_reader(mend_store *s);

int mend__sqlite_send_event(mend_store *s, const char *run_id, const char *name,
                            const char *payload, const char *key, double sent, const char *who) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_SEND_EVENT];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, run_id));
  BIND(mend__bind_text(q, 2, name));
  BIND(mend__bind_text(q, 3, payload));
  BIND(mend__bind_text(q, 4, key));
  BIND(sqlite3_bind_double(q, 5, sent));
  BIND(mend__bind_text(q, 6, who));
  if (mend__run_write(s, q, rc, "send an event") != 0) return -1;
  return sqlite3_changes(s->db) == 0 ? 1 : 0;
}

/* An event's record of query q (Q_SEND_EVENT, Q_SEND_EVENT_KEY), marked `repair` (wrec): an
 * event is no write of the run's holder, and whoever holds the run, the fence lets it pass. */
static int rec_event(mend_store *s, int q, int repair, const char *run_id, const char *name,
                     const char *payload, const char *key, double sent, const char *who) {
  int repairing = s->repairing;
  s->repairing = repair;
  mend__rec_begin(s, q);
  mend__rec_text(s, run_id);
  mend__rec_text(s, name);
  mend__rec_text(s, payload);
  mend__rec_text(s, key);
  mend__rec_real(s, sent);
  mend__rec_text(s, who);
  s->repairing = repairing;
  return mend__rec_end(s);
}

int mend__sqlite_record_event(mend_store *s, const char *run_id, const char *name,
                              const char *payload, const char *key, double sent,
                              const char *who) {
  return rec_event(s, Q_SEND_EVENT, 1, run_id, name, payload, key, sent, who);
}

/* ---- keyed events whose key is looked up as their batch is written ------------------------
 * A ticket names one such event: slot (ticket - 1) % EVENT_TICKETS of event_outcome, in its
 * generation (ticket - 1) / EVENT_TICKETS, so that a ticket given back and taken again is never
 * set by the write of the event it named before (its client left, its batch still waits). A
 * slot holds gen << 2 | state. */
enum { TICKET_FREE, TICKET_WAITING, TICKET_SENT, TICKET_DUPLICATE };
#define TICKET_GENS (1u << 22)   /* a ticket stays a positive int */

static unsigned ticket_slot(int ticket) { return (unsigned)(ticket - 1) % EVENT_TICKETS; }
static unsigned ticket_gen(int ticket) { return (unsigned)(ticket - 1) / EVENT_TICKETS; }

/* On the thread that flushes: what the ticket's insert found (sent: the key was free). */
void mend__event_outcome(mend_store *s, int ticket, int sent) {
  unsigned want = ticket_gen(ticket) << 2 | TICKET_WAITING;
  atomic_compare_exchange_strong(&s->event_outcome[ticket_slot(ticket)], &want,
                                 ticket_gen(ticket) << 2 | (sent ? TICKET_SENT : TICKET_DUPLICATE));
}

int mend__sqlite_record_keyed_event(mend_store *s, const char *run_id, const char *name,
                                    const char *payload, const char *key, double sent,
                                    const char *who, int *ticket) {
  unsigned k = 0, v = 0;
  int found = 0;
  for (unsigned n = 0; n < EVENT_TICKETS && !found; n++) {
    k = (s->ticket_at + n) % EVENT_TICKETS;
    v = atomic_load(&s->event_outcome[k]);
    found = (v & 3) == TICKET_FREE;
  }
  if (!found) return 1;   /* as many wait already: this one is sent at once */
  s->ticket_at = k + 1;
  unsigned gen = ((v >> 2) + 1) % TICKET_GENS;
  atomic_store(&s->event_outcome[k], gen << 2 | TICKET_WAITING);
  *ticket = (int)(gen * EVENT_TICKETS + k + 1);
  /* its record's ticket, and no write of the run's holder (fence) */
  if (rec_event(s, Q_SEND_EVENT_KEY, *ticket, run_id, name, payload, key, sent, who) == 0)
    return 0;
  mend__sqlite_event_ticket_free(s, *ticket);
  return -1;
}

int mend__sqlite_event_outcome(mend_store *s, int ticket) {
  unsigned v = atomic_load(&s->event_outcome[ticket_slot(ticket)]);
  if (v >> 2 != ticket_gen(ticket)) return -1;
  return (v & 3) == TICKET_SENT ? 0 : (v & 3) == TICKET_DUPLICATE ? 1 : -1;
}

void mend__sqlite_event_ticket_free(mend_store *s, int ticket) {
  unsigned gen = ticket_gen(ticket);
  atomic_store(&s->event_outcome[ticket_slot(ticket)], gen << 2 | TICKET_FREE);
}

/* The event of the inbox row q stands on (seq, payload, key), copied before q is reset: 1, or
 * -1 out of memory (nothing kept). */
static int copy_event(mend_store *s, sqlite3_stmt *q, long long *seq, char **payload,
                      char **key) {
  int oom = 0;
  *seq = (long long)sqlite3_column_int64(q, 0);
  const char *p = (const char *)sqlite3_column_text(q, 1);
  *payload = mend__copy_text(p ? p : "null", &oom);
  *key = mend__copy_text((const char *)sqlite3_column_text(q, 2), &oom);
  if (oom) {
    free(*payload);
    free(*key);
    *payload = *key = NULL;
    mend__set_msg(s->err, sizeof s->err, "%s: read a run's inbox: out of memory", s->path);
    return -1;
  }
  return 1;
}

int mend__sqlite_next_event(mend_store *s, const char *run_id, const char *name,
                          long long *seq, char **payload, char **key) {
  *payload = *key = NULL;
  if (mend__sync_point(s) != 0) return -1;
  mend__inbox_read_hold(s->inbox_hold, 1, &name);
  sqlite3_stmt *q = s->q[Q_NEXT_EVENT];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, run_id));
  BIND(mend__bind_text(q, 2, name));
  int r = mend__first_row(s, q, rc, "read a run's inbox");
  if (r <= 0) return r;
  int rc_copy = copy_event(s, q, seq, payload, key);
  mend__finish(q);
  return rc_copy;
}

#ifdef MEND_FAILPOINTS
/* Tests hold an inbox read back on purpose, to show which thread waits for it:
 * MEND_INBOX_READ_HOLD names a file while whose existence a read of the event it names (any
 * event when it is empty) waits (read as the store opens: set it before the engine starts). */
#define HOLD_MAX_USEC 20000000   /* a test that forgets its file fails, rather than hangs */
static int held(const char *path, int n, const char *const *names) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char want[256];
  size_t len = fread(want, 1, sizeof want - 1, f);
  fclose(f);
  want[len] = 0;
  for (int i = 0; i < n; i++)
    if (len == 0 || strcmp(want, names[i]) == 0) return 1;
  return 0;
}

void mend__inbox_read_hold(const char *hold, int n, const char *const *names) {
  for (long t = 0; hold && t < HOLD_MAX_USEC && held(hold, n, names); t += 500) usleep(500);
}
#else
void mend__inbox_read_hold(const char *hold, int n, const char *const *names) {
  (void)hold;
  (void)n;
  (void)names;
}
#endif

/* The looks' thread too: a ticking host's first tick opens what its reads use. */
void mend__sqlite_open_committed_reads(mend_store *s, int batch) {
  (void)mend__open_reader(s);
  mend__sqlite_look_start(s, batch);
}

int mend__sqlite_next_committed_event(mend_store *s, const char *run_id, const char *name,
                                      long long *seq, char **payload, char **key) {
  *payload = *key = NULL;
  if (mend__open_reader(s) != 0) return 2;
  if (!s->q_next_committed &&
      sqlite3_prepare_v3(s->reader, mend__query_sql[Q_NEXT_EVENT], -1, SQLITE_PREPARE_PERSISTENT,
                         &s->q_next_committed, NULL) != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: read a run's inbox: %s", s->path,
                  sqlite3_errmsg(s->reader));
    return -1;
  }
  sqlite3_stmt *q = s->q_next_committed;
  mend__inbox_read_hold(s->inbox_hold, 1, &name);
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, run_id));
  BIND(mend__bind_text(q, 2, name));
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc != SQLITE_ROW) {
    if (rc != SQLITE_DONE)
      mend__set_msg(s->err, sizeof s->err, "%s: read a run's inbox: %s", s->path,
                    sqlite3_errmsg(s->reader));
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? 0 : -1;
  }
  int rc_copy = copy_event(s, q, seq, payload, key);
  sqlite3_reset(q);
  return rc_copy;
}

int mend__sqlite_consume_event(mend_store *s, const char *run_id, long long seq,
                             const char *step, double at) {
  mend__rec_begin(s, Q_CONSUME_EVENT);
  mend__rec_text(s, run_id);
  mend__rec_int(s, (sqlite3_int64)seq);
  mend__rec_real(s, at);
  mend__rec_text(s, step);
  return mend__rec_end(s);
}

int mend__sqlite_event_sent(mend_store *s, long long seq, double *sent) {
  if (mend__sync_point(s) != 0) return -1;
  sqlite3_stmt *q = NULL;
  int rc = sqlite3_prepare_v2(s->db, "SELECT sent FROM inbox WHERE seq = ?1 AND sent IS NOT NULL",
                              -1, &q, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 1, (sqlite3_int64)seq);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  int row = rc == SQLITE_ROW;
  if (row) *sent = sqlite3_column_double(q, 0);
  else if (rc != SQLITE_DONE)
    mend__set_msg(s->err, sizeof s->err, "%s: read a run's inbox: %s", s->path,
                  sqlite3_errmsg(s->db));
  sqlite3_finalize(q);
  return row ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

long long mend__sqlite_last_event(mend_store *s) {
  sqlite3_stmt *q = mend__reader_stmt(s, &s->q_last_committed, Q_LAST_EVENT);
  if (q) {
    int rc = sqlite3_step(q);
    long long seq = rc == SQLITE_ROW ? (long long)sqlite3_column_int64(q, 0) : -1;
    sqlite3_reset(q);
    if (seq >= 0) return seq;   /* else through the batch, which says what is wrong */
  }
  if (mend__sync_point(s) != 0) return -1;
  q = s->q[Q_LAST_EVENT];
  int r = mend__first_row(s, q, SQLITE_OK, "read the inbox");
  if (r <= 0) return r;
  long long seq = (long long)sqlite3_column_int64(q, 0);
  mend__finish(q);
  return seq;
}

long long mend__sqlite_events_after(mend_store *s, long long after, int limit,
                                  void (*fn)(void *ud, const char *run_id), void *ud) {
  static const char sql[] = "SELECT seq, run_id FROM inbox WHERE seq > ?1 ORDER BY seq LIMIT ?2";
  sqlite3_stmt *q;
  if (mend__open_reader(s) == 0) {
    /* committed events only, and no wait for the writer thread: the look of every poll */
    if (!s->q_events_after && sqlite3_prepare_v3(s->reader, sql, -1, SQLITE_PREPARE_PERSISTENT,
                                                 &s->q_events_after, NULL) != SQLITE_OK) {
      mend__set_msg(s->err, sizeof s->err, "%s: look for new events: %s", s->path,
              sqlite3_errmsg(s->reader));
      return -1;
    }
    q = s->q_events_after;
  } else {
    if (mend__sync_point(s) != 0) return -1;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
      mend__sql_err(s, "look for new events");
      return -1;
    }
  }
  int rc = SQLITE_OK;
  BIND(sqlite3_bind_int64(q, 1, (sqlite3_int64)after));
  BIND(sqlite3_bind_int(q, 2, limit));
  long long last = after;
  while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    last = (long long)sqlite3_column_int64(q, 0);
    fn(ud, (const char *)sqlite3_column_text(q, 1));
    rc = SQLITE_OK;
  }
  if (rc != SQLITE_DONE)
    mend__set_msg(s->err, sizeof s->err, "%s: look for new events: %s", s->path,
            sqlite3_errmsg(q == s->q_events_after ? s->reader : s->db));
  if (q == s->q_events_after) sqlite3_reset(q);
  else sqlite3_finalize(q);
  return rc == SQLITE_DONE ? last : -1;
}

json_t *mend__sqlite_inbox(mend_store *s, const char *run_id, long long after, long limit) {
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = mend__view_stmt(s, Q_INBOX);
  int rc = mend__bind_text(q, 1, run_id);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 2, after);
  if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 3, limit > 0 ? limit : -1);
  return mend__rows_array(s, q, rc, "read a run's inbox");
}

json_t *mend__sqlite_audit_list(mend_store *s) {
  if (mend__sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_AUDIT_LIST];
  return mend__rows_array(s, q, SQLITE_OK, "read audit");
}
