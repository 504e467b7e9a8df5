/*
 * pg_wait: how long the PostgreSQL store's batches wait for a lock another session holds (a
 * run's row held in psql, `BEGIN; SELECT ... FOR UPDATE;` left open; a table locked by hand),
 * and what is told meanwhile. Owns the bound (lock_timeout, set in each batch's transaction),
 * the reading of a try that met it, the mark that a batch waits (mend_store_locked) and its
 * message naming the row and the session that holds it. Must never: give up a batch for the
 * lock but as the store closes (the batch is kept and tried again until it lands: its writes
 * were acted on by no one yet, and the write-ahead rule holds them all); write p->err from the loop
 * while the writer thread may (the mark's message is a buffer of its own, under its own lock).
 *
 * The design. What a flush sends (a batch's recorded writes, its BEGIN's lease renewal) waits for
 * another session's lock at most PG_WRITE_WAIT_MS a try, or a second more than the server's
 * deadlock_timeout when that is longer, so that in a deadlock the server picks a victim first (SET
 * LOCAL lock_timeout before it; on a loop's thread no longer than its busy wait, 0.1 s, so that
 * the loop answers between tries); past them the transaction's standing value comes back (none; a
 * command's repair after its look: the look's bound), so a statement run alone waits as it did. A
 * try that met the bound (SQLSTATE 55P03) in a transaction it began itself is rolled back whole:
 * nothing of it was written, and the log that holds it is kept and sent again after a backoff (50
 * ms doubling to 1 s), by the writer thread on its own, or by the engine's lock timer without one
 * (commit answers MEND_STORE_BUSY), as SQLite's batches wait out another process's write lock
 * (lock.c: the same warnings, claims held back meanwhile). So the writes land once the lock goes,
 * once each, and in their order. A flush on the caller's thread, and its wait for the writer
 * thread's batch, last no longer than the caller's busy wait (MEND_STORE_BUSY: the engine refuses
 * what needed it, 503, and tries the batch again later). While it waits the loop does not wait
 * with it: the views (a run, its history, a page of runs) read the committed rows on the side
 * connection, as SQLite's read on its reader. The engine's own reads still wait for the batch
 * (they must see it), as long as the caller's busy wait. The batch is one transaction, so the
 * engine's other runs' writes in it wait too: a batch is the unit the write-ahead rule acts on,
 * and splitting off one run's writes would need a transaction per run. A try in a transaction open
 * before it (a repair's look began it; a read sent earlier writes) cannot be sent again whole: it
 * fails as a deadlock does (nothing of it written, told once as a lost batch). A repair's
 * statement after its look that meets the look's bound is told so too, naming the table (pg.c):
 * the repair fails, the engine goes on.
 *
 * Timeouts set on the role or the database (statement_timeout, lock_timeout,
 * idle_in_transaction_session_timeout) are set back to none as each session opens, as pg_dump
 * does: mend bounds its own waits (the store's opening too: pg.c), and a statement cut off by
 * a role's timeout (57014) would be a failure of the store, which breaks an engine.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const mend__pg_session_sql =
    "SET statement_timeout = 0; SET lock_timeout = 0; SET idle_in_transaction_session_timeout = 0";

int mend__pg_lock_timed_out(const PGresult *r) {
  const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  return code && strcmp(code, "55P03") == 0;
}

/* The tables whose rows a batch writes, and the column that names the run (or the worker). */
static const char *key_of(const char *table) {
  static const char *const keys[][2] = {
    {"runs", "id"}, {"steps", "run_id"}, {"history", "run_id"}, {"dlq", "run_id"},
    {"inbox", "run_id"}, {"tokens", "run_id"}, {"workers", "owner"},
  };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (strcmp(table, keys[i][0]) == 0) return keys[i][1];
  return NULL;
}

/* The server's context of a lock wait: `while updating tuple (0,5) in relation "runs"`. */
static int tuple_of(const char *context, char *tid, size_t tidlen, char *table, size_t tablelen) {
  const char *t = context ? strstr(context, "tuple (") : NULL;
  if (!t) return 0;
  t += 6;
  const char *end = strchr(t, ')');
  const char *rel = strstr(t, "relation \"");
  if (!end || !rel || (size_t)(end - t + 1) >= tidlen) return 0;
  memcpy(tid, t, (size_t)(end - t + 1));
  tid[end - t + 1] = 0;
  rel += 10;
  const char *q = strchr(rel, '"');
  if (!q || (size_t)(q - rel) >= tablelen) return 0;
  memcpy(table, rel, (size_t)(q - rel));
  table[q - rel] = 0;
  return 1;
}

static void set_msg(mend_pg *p, const char *msg) {
  pthread_mutex_lock(&p->wait_mu);
  snprintf(p->wait_msg, sizeof p->wait_msg, "%s", msg);
  pthread_mutex_unlock(&p->wait_mu);
}

/* A granted lock on a table of the schema that a write conflicts with, another session's. */
static const char table_lock_sql[] =
    "SELECT c.relname, l.pid, a.application_name FROM pg_locks l"
    " JOIN pg_class c ON c.oid = l.relation LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.granted AND l.pid <> pg_backend_pid() AND l.mode IN ('ShareLock',"
    " 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')"
    " AND c.relnamespace = current_schema()::regnamespace LIMIT 1";

void mend__pg_table_holder(PGconn *c, char *out, size_t n) {
  PGresult *r = PQexec(c, table_lock_sql);
  int found = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
  const char *app = found ? PG_TEXT(r, 0, 2) : NULL;
  if (found)
    snprintf(out, n, "table %s is locked by session %s%s%s%s", PQgetvalue(r, 0, 0),
             PQgetvalue(r, 0, 1), app && *app ? " (" : "", app && *app ? app : "",
             app && *app ? ")" : "");
  else
    snprintf(out, n, "a table is locked by another session");
  PQclear(r);
}

/* After a try that met the bound: who holds what it waited for, asked on c (conn rolled back
 * and idle, this thread's; or aux, the loop's, while conn's transaction is the one that
 * failed). A row: by the transaction id in its xmax, which the holder's lock names. A
 * table: by a granted lock on it that a write conflicts with. */
void mend__pg_lock_note(mend_pg *p, PGconn *c, const char *context, int mark) {
  char tid[64], table[64], sql[900], msg[sizeof p->wait_msg];
  const char *key = NULL;
  int row = tuple_of(context, tid, sizeof tid, table, sizeof table) && (key = key_of(table));
  if (row)
    snprintf(sql, sizeof sql, "SELECT t.%s, l.pid, a.application_name FROM %s t"
             " LEFT JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = t.xmax"
             " AND l.granted AND l.mode = 'ExclusiveLock' AND l.pid <> pg_backend_pid()"
             " LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE t.ctid = $1::tid LIMIT 1",
             key, table);
  else
    snprintf(sql, sizeof sql, "%s", table_lock_sql);
  const char *v[1] = {tid};
  PGresult *r = PQexecParams(c, sql, row ? 1 : 0, NULL, row ? v : NULL, NULL, NULL, 0);
  int found = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
  const char *what = found ? PG_TEXT(r, 0, 0) : NULL;
  const char *pid = found ? PG_TEXT(r, 0, 1) : NULL;
  const char *app = found ? PG_TEXT(r, 0, 2) : NULL;
  char holder[160];
  if (pid) snprintf(holder, sizeof holder, "session %s%s%s%s", pid, app && *app ? " (" : "",
                    app && *app ? app : "", app && *app ? ")" : "");
  else snprintf(holder, sizeof holder, "another session");
  if (row && what && strcmp(table, "runs") == 0)
    snprintf(msg, sizeof msg, "%s: run %s is locked by %s: its writes wait", p->server, what,
             holder);
  else if (row && what)
    snprintf(msg, sizeof msg, "%s: a row of table %s of %s %s is locked by %s: its writes wait",
             p->server, table, strcmp(table, "workers") == 0 ? "worker" : "run", what, holder);
  else if (!row && what)
    snprintf(msg, sizeof msg, "%s: table %s is locked by %s: writes wait", p->server, what,
             holder);
  else
    snprintf(msg, sizeof msg, "%s: a row a batch writes is locked by another session: writes"
             " wait", p->server);
  PQclear(r);
  if (!mark) {   /* the batch failed for it: told as its failure */
    mend__pg_msg(p->err, sizeof p->err, "%s (waited %.1f s; the batch was rolled back)", msg,
                 p->tx_lock_ms / 1000.0);
    return;
  }
  mend__pg_msg(p->err, sizeof p->err, "%s", msg);   /* this thread's, as the try's failure */
  set_msg(p, msg);
  atomic_store(&p->waiting, 1);
}

/* A statement run alone in the open transaction (a repair's write after its look) that met
 * the bound: the transaction is aborted, so nothing more can be asked on conn, and aux is not
 * this thread's to ask on; told from the server's context alone. */
void mend__pg_lock_told(mend_pg *p, const char *what, const char *context) {
  char tid[64], table[64];
  if (tuple_of(context, tid, sizeof tid, table, sizeof table))
    mend__pg_msg(p->err, sizeof p->err, "%s: %s: a row of table %s is locked by another session"
                 " (waited %.1f s; the batch was rolled back)", p->server, what, table,
                 p->tx_standing_ms / 1000.0);
  else
    mend__pg_msg(p->err, sizeof p->err, "%s: %s: a lock is held by another session (waited %.1f"
                 " s; the batch was rolled back)", p->server, what, p->tx_standing_ms / 1000.0);
}

void mend__pg_lock_gone(mend_pg *p) { atomic_store(&p->waiting, 0); }

int mend__pg_locked(mend_store *s) { return atomic_load(&PG(s)->waiting); }

/* The loop's copy of the mark's message: the writer thread may be writing the next. */
const char *mend__pg_lock_msg(mend_pg *p) {
  pthread_mutex_lock(&p->wait_mu);
  snprintf(p->wait_seen, sizeof p->wait_seen, "%s", p->wait_msg);
  pthread_mutex_unlock(&p->wait_mu);
  return p->wait_seen;
}

/* While a batch waits for a lock (on the writer thread, or kept in the log for the engine's
 * next try), a view reads the committed rows on aux rather than wait with it; NULL: read as
 * usual, on conn. Nothing the batch holds was told to anyone yet (an answer waits for its
 * batch), so no one misses a write they were told of. */
PGconn *mend__pg_view_aux(mend_pg *p) {
  if (!atomic_load(&p->waiting)) return NULL;
  if (!p->cur->nrec && !(p->w && mend__handoff_busy(p->w))) return NULL;
  return mend__pg_aux(p) == 0 ? p->aux : NULL;
}

/* Another try is waited for this long (doubling from 50 ms up to 1 s), a tenth more or less
 * at random: two engines whose batches cross each other's locks and both meet their bound
 * before the server looks for a deadlock (a loop's tries of 0.1 s always do) roll back and
 * try again; in step they could cross again each time. */
static double jittered(double delay) {
  double t = mend__pg_mono() * 1e6;   /* its microseconds: random enough, and any thread's */
  return delay * (0.9 + 0.2 * (t - 1000.0 * (double)(long long)(t / 1000.0)) / 1000.0);
}

/* How long a caller on its own thread waits for another session's lock: its busy wait (a
 * loop's 0.1 s; a caller that waits, PG_BUSY_MS) and no longer, so that a loop answers
 * between its tries and nothing waits without end. */
static double caller_bound(const mend_pg *p) {
  return (p->busy_ms > 0 ? p->busy_ms : PG_BUSY_MS) / 1000.0;
}

/* A batch that met another session's lock past the bound (pg_wait.c) is tried again after
 * 50 ms, then twice as long each time up to 1 s, for as long as the lock lasts: this thread
 * waits, the loop goes on recording the next batch and is told at each try (done: it warns,
 * mend_store_locked). Once the store is closing it gives the batch up after the try under way,
 * as a crash would (nothing in it was acted on; its runs are taken and their work done again
 * from what was committed): a stop (SIGTERM) must not wait as long as the lock lasts. */
int mend__pg_flush_writer(mend_pg *p, pg_log *job) {
  pg_writer *w = p->w;
  double delay = 0.05;
  int rc;
  p->on_writer = 1;
  while ((rc = mend__pg_flush(p, job, 1, 0)) == MEND_STORE_BUSY) {
    pthread_mutex_lock(&w->mu);
    mend__handoff_tell(w);
    if (w->stop) {
      pthread_mutex_unlock(&w->mu);
      mend__pg_msg(p->err, sizeof p->err, "%s: closing: a batch waiting for another session's"
                   " lock was given up, not written: %s", p->server, mend__pg_lock_msg(p));
      mend__pg_log_clear(job);
      mend__pg_lock_gone(p);
      p->on_writer = 0;
      return -1;
    }
    double d = jittered(delay);
    mend__handoff_nap(w, &d);
    delay = delay * 2 > 1 ? 1 : delay * 2;
  }
  if (rc != 0 && atomic_load(&p->stop_cancelled))   /* a try the stop cancelled (pg_batch.c) */
    mend__pg_msg(p->err, sizeof p->err, "%s: closing: a batch under way was cancelled, not"
                 " written", p->server);
  p->on_writer = 0;
  return rc;
}

/* A flush on the caller's thread (a read, a transaction begun): tried again while another
 * session's lock holds it back, for as long as the caller waits (caller_bound); past it,
 * MEND_STORE_BUSY with the batch kept whole (the try was rolled back), the mark set and its
 * message in err: the engine answers the read's caller so (503) and commits the batch once
 * the lock goes, as its lock timer does for a commit. The views do not come here while a
 * batch waits (pg_wait.c). */
int mend__pg_flush_waiting(mend_pg *p, int begin) {
  double delay = 0.05, until = mend__pg_mono() + caller_bound(p);
  int rc;
  while ((rc = mend__pg_flush(p, p->cur, 0, begin)) == MEND_STORE_BUSY) {
    if (mend__pg_mono() >= until) return rc;
    double d = jittered(delay);
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
    delay = delay * 2 > 1 ? 1 : delay * 2;
  }
  return rc;
}

/* Whether the writer's session waits for another session's lock now (its try under way, not
 * yet at its bound, so not yet marked): asked on aux, the loop's. If so the mark is set here,
 * naming the holder, as the try's end would set it. */
static int writer_blocked(mend_pg *p) {
  int pid = atomic_load(&p->conn_pid);
  if (pid <= 0 || mend__pg_aux(p) != 0) return 0;
  char v0[16];
  snprintf(v0, sizeof v0, "%d", pid);
  const char *v[1] = {v0};
  PGresult *r = PQexecParams(p->aux, "SELECT b.pid, b.application_name FROM pg_stat_activity b"
                             " WHERE b.pid = ANY (pg_blocking_pids($1::int)) LIMIT 1", 1, NULL,
                             v, NULL, NULL, 0);
  int blocked = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
  if (blocked) {
    const char *app = PG_TEXT(r, 0, 1);
    char msg[sizeof p->wait_msg];
    snprintf(msg, sizeof msg, "%s: a batch's writes wait for a lock held by session %s%s%s%s",
             p->aux_server, PQgetvalue(r, 0, 0), app && *app ? " (" : "", app && *app ? app : "",
             app && *app ? ")" : "");
    set_msg(p, msg);
    atomic_store(&p->waiting, 1);
  }
  PQclear(r);
  return blocked;
}

/* Waits for the writer thread to be done with the connection, as mend__handoff_wait does;
 * but while its batch waits for another session's lock, no longer than the caller waits
 * (caller_bound, from when this wait began): MEND_STORE_BUSY then, the writer keeping conn
 * and its batch (errmsg names the lock). Whether it waits is known from the mark once a try
 * met its bound, and before that (a try's bound is a second past the server's
 * deadlock_timeout) by asking the server (writer_blocked). A writer slow for any other reason
 * is waited for: its batch will end. */
int mend__pg_writer_wait_bounded(mend_pg *p) {
  pg_writer *w = p->w;
  if (!w) return 0;
  double until = mend__pg_mono() + caller_bound(p);
  pthread_mutex_lock(&w->mu);
  while (w->busy || w->in_done) {
    if (mend__pg_mono() >= until) {
      int busy = w->busy;
      pthread_mutex_unlock(&w->mu);
      if (atomic_load(&p->waiting) || (busy && writer_blocked(p))) return MEND_STORE_BUSY;
      until = mend__pg_mono() + caller_bound(p);
      pthread_mutex_lock(&w->mu);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  int failed = w->failed;
  if (w->ops->idle) w->ops->idle(w->store);
  pthread_mutex_unlock(&w->mu);
  return failed ? -1 : 0;
}
