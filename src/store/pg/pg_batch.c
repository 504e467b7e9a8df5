/*
 * pg_batch: how the PostgreSQL store writes. Owns the flush that sends the write log (pg_log.c)
 * as one pipeline in the open transaction (BEGIN and the fence's check first when it begins,
 * COMMIT last when it commits, or reads that must see them last, in the same round trip:
 * mend__pg_sync_reads; rows of one kind together as arrays where pg_arrays.c says they may be,
 * sent again without the arrays that may fail if one did (a history number taken, a step row
 * there that the engine took for new): from the transaction's start, or from a savepoint in
 * one already open), the events of a rolled-back transaction sent again, the batch numbers,
 * and the writer thread that commits a handed-off batch while the loop records the next.
 * Must never: let a read miss a write recorded before it; report a batch durable before the
 * server answered its COMMIT; commit a batch part of which failed.
 */
#include "pg_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- events not known committed ------------------------------------------------------ */

/* An event recorded in a batch was told to its sender as sent: if its transaction is rolled
 * back (the connection lost, the server ending a deadlock), it goes again at the head of the
 * next flush, before anything recorded since, so that events keep their order. Its key keeps
 * it once where the commit did happen but its answer was lost (mend__pg_record_event). */
static void events_not_committed(mend_pg *p) {
  mend__pg_log_keep(&p->carry, &p->tx_events, -1);
  mend__pg_log_clear(&p->tx_events);
}

/* The events to send again, put before log's records; out of memory: log->oom. */
static void carry_first(mend_pg *p, pg_log *log) {
  pg_log both = {0};
  mend__pg_log_keep(&both, &p->carry, -1);
  mend__pg_log_keep(&both, log, -1);
  both.wake = 1;
  if (both.oom) {
    mend__pg_log_free(&both);
    log->oom = 1;
    return;
  }
  pg_log old = *log;
  *log = both;
  mend__pg_log_free(&old);
  mend__pg_log_clear(&p->carry);
}

/* ---- pipelines -------------------------------------------------------------------------- */

/* Commands between two syncs: their results come back while the rest are sent, and a large
 * batch never fills both sockets' buffers at once (blocking libpq would then wait forever). */
#define CHUNK 512

enum { K_BEGIN, K_BOUND, K_LIVE, K_RENEW, K_CHECK, K_SAVEPOINT, K_WRITE, K_RUNS, K_RUN_UPDATES,
       K_NEW_STEPS, K_STEPS, K_HISTORY, K_NOTIFY, K_COMMIT, K_READ };

typedef struct pipe {
  mend_pg *p;
  const pg_log *log;
  int kind[CHUNK];
  const pg_rec *rec[CHUNK];
  int read[CHUNK];       /* K_READ: which of p->reads */
  int n;
  int failed, late;
  int taken;             /* K_HISTORY or K_NEW_STEPS failed on a key already there */
  double sent_at;
} pipe;

static const char *what_of(int kind, const pg_rec *r) {
  static const char *const writes[] = {
    [P_INSERT_RUN] = "insert run", [P_UPDATE_RUN] = "update run", [P_PUT_STEP] = "put step",
    [P_UPDATE_STEP] = "update step", [P_APPEND_HISTORY] = "append history",
    [P_PUT_BREAKER] = "put breaker", [P_PUT_DLQ] = "put dlq", [P_RENEW] = "renew the lease",
    [P_CONSUME_EVENT] = "consume an event", [P_CHILD_END] = "tell a parent its child ended",
    [P_SET_UNAVAILABLE] = "set unavailable",
  };
  switch (kind) {
  case K_BEGIN: return "begin";
  case K_BOUND: return "set lock_timeout";
  case K_LIVE: return "renew the lease";
  case K_RENEW: return "renew the lease";
  case K_CHECK: return "look up who holds a run";
  case K_SAVEPOINT: return "set a savepoint";
  case K_RUNS: return "insert runs";
  case K_RUN_UPDATES: return "update runs";
  case K_NEW_STEPS: return "insert steps";
  case K_STEPS: return "put steps";
  case K_HISTORY: return "append history";
  case K_NOTIFY: return "notify the other workers";
  case K_COMMIT: return "commit";
  case K_READ: return "read";
  default: return r && r->q <= P_SET_UNAVAILABLE ? writes[r->q] : "write";
  }
}

static int pipe_sync(pipe *pp);

static int pipe_send(pipe *pp, int kind, int q, const char *sql, int n, const char *const *vals,
                     const pg_rec *rec) {
  if (pp->n == CHUNK && pipe_sync(pp) != 0) return -1;
  PGconn *c = pp->p->conn;
  int ok;
  if (q >= 0) {
    char name[16];
    snprintf(name, sizeof name, "m%d", q);
    ok = PQsendQueryPrepared(c, name, n, vals, NULL, NULL, 0);
  } else {
    ok = PQsendQueryParams(c, sql, n, NULL, vals, NULL, NULL, 0);
  }
  if (!ok) {
    if (!pp->failed) mend__pg_fail(pp->p, c, NULL, what_of(kind, rec));
    pp->failed = 1;
    return -1;
  }
  pp->kind[pp->n] = kind;
  pp->rec[pp->n++] = rec;
  return 0;
}

int mend__pg_fence_result(mend_pg *p, const PGresult *r);

static void take_result(pipe *pp, int i, PGresult *r) {
  mend_pg *p = pp->p;
  ExecStatusType st = PQresultStatus(r);
  if (st == PGRES_PIPELINE_ABORTED) return;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0)) p->conn_doomed = 1;
    if (!pp->failed) {
      const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      if (pp->kind[i] == K_LIVE && code && strcmp(code, "MENDL") == 0) pp->late = 1;
      if ((pp->kind[i] == K_HISTORY || pp->kind[i] == K_NEW_STEPS) && code &&
          strcmp(code, "23505") == 0)
        pp->taken = 1;
      if (mend__pg_conflict(r)) p->tx_conflict = 1;
      if (mend__pg_lock_timed_out(r)) {
        const char *ctx = PQresultErrorField(r, PG_DIAG_CONTEXT);
        p->tx_lock = 1;
        snprintf(p->lock_context, sizeof p->lock_context, "%s", ctx ? ctx : "");
      }
      mend__pg_fail(p, p->conn, r, what_of(pp->kind[i], pp->rec[i]));
    }
    pp->failed = 1;
    return;
  }
  if (pp->failed) return;
  switch (pp->kind[i]) {
  case K_LIVE:
  case K_RENEW:
    mend__pg_renewed(p, pp->sent_at, p->fence_lease);
    break;
  case K_CHECK:
    if (mend__pg_fence_result(p, r) != 0) pp->failed = 1;
    break;
  case K_READ:
    p->reads->take(p->reads->ud, pp->read[i], r);
    break;
  case K_COMMIT:
    /* COMMIT of a transaction that failed says ROLLBACK, with no error. */
    if (strcmp(PQcmdStatus(r), "COMMIT") != 0) {
      mend__pg_msg(p->err, sizeof p->err, "%s: commit: the transaction was rolled back",
                   p->server);
      pp->failed = 1;
    }
    break;
  default:
    if (pp->rec[i] && pp->rec[i]->q == P_RENEW) {   /* the engine's own renewal */
      const pg_rec *rec = pp->rec[i];
      const char *owner = rec->n > 1 && pp->log->vals[rec->first] >= 0
                              ? pp->log->text + pp->log->vals[rec->first] : NULL;
      if (owner && p->fence_owner && strcmp(owner, p->fence_owner) == 0 &&
          pp->log->vals[rec->first + 1] >= 0)
        mend__pg_renewed(p, pp->sent_at, atof(pp->log->text + pp->log->vals[rec->first + 1]));
    }
    break;
  }
}

static int pipe_sync(pipe *pp) {
  mend_pg *p = pp->p;
  PGconn *c = p->conn;
  if (!PQpipelineSync(c)) {
    if (!pp->failed) mend__pg_fail(p, c, NULL, "send a batch");
    pp->failed = 1;
    pp->n = 0;
    return -1;
  }
  for (int i = 0; i < pp->n; i++) {
    PGresult *r = PQgetResult(c);
    if (!r) {   /* the connection is gone */
      if (!pp->failed) mend__pg_fail(p, c, NULL, what_of(pp->kind[i], pp->rec[i]));
      pp->failed = 1;
      pp->n = 0;
      return -1;
    }
    take_result(pp, i, r);
    PQclear(r);
    while ((r = PQgetResult(c))) {   /* NULL ends each command's results */
      if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
        PQclear(r);
        break;
      }
      PQclear(r);
    }
  }
  pp->n = 0;
  PGresult *r = PQgetResult(c);
  int synced = r && PQresultStatus(r) == PGRES_PIPELINE_SYNC;
  PQclear(r);
  if (!synced) {
    if (!pp->failed) mend__pg_fail(p, c, NULL, "send a batch");
    pp->failed = 1;
  }
  return pp->failed ? -1 : 0;
}

/* How a transaction begins: plain (no fence), checking that our lease is live (the usual), or
 * renewing it whatever it said (a worker's first batch, or one that began late). */
enum { B_PLAIN, B_LIVE, B_LATE };

static int begin_kind(mend_pg *p) {
  if (!p->fence_owner) return B_PLAIN;
  if (!p->fence_registered || p->fence_late_always || mend__pg_mono() >= p->fence_until)
    return B_LATE;
  return B_LIVE;
}

int mend__pg_fence_late(mend_pg *p);
int mend__pg_fence_drops(mend_pg *p, const pg_log *log, const pg_rec *r);
int mend__pg_fence_ids(mend_pg *p, const pg_log *log, char **array);

void mend__pg_rollback(mend_pg *p) {
  if (p->conn && PQstatus(p->conn) == CONNECTION_OK &&
      PQtransactionStatus(p->conn) != PQTRANS_IDLE)
    PQclear(PQexec(p->conn, "ROLLBACK"));
  events_not_committed(p);
  p->in_batch = 0;
  p->batch_failed = 0;
  p->tx_wake = 0;
  /* their rows went with the batch */
  while (p->nversions > p->versions_committed) {
    struct pg_version *v = &p->versions[--p->nversions];
    free(v->workflow);
    free(v->version);
    free(v->source);
    free(v->step_names);
  }
}

#ifdef MEND_FAILPOINTS
/* MEND_PG_END_SESSION=N: the server ends the session in the Nth batch this process commits,
 * after its writes and before its COMMIT, as pg_terminate_backend from elsewhere would: for
 * the specs of a connection lost mid-batch (spec/pg_reconnect_spec.lua). */
static int end_session_now(void) {
  static pg_failpoint fp = {"MEND_PG_END_SESSION", -1, 0};
  return mend__pg_failpoint_hit(&fp);
}

/* MEND_PG_DEADLOCK=N: the Nth batch this process commits fails before its COMMIT as the one
 * the server picks to end a deadlock (SQLSTATE 40P01), which no spec can make happen on cue. */
static int deadlock_now(void) {
  static pg_failpoint fp = {"MEND_PG_DEADLOCK", -1, 0};
  return mend__pg_failpoint_hit(&fp);
}

int mend__pg_failpoint_hit(pg_failpoint *fp) {
  if (fp->at < 0) {
    const char *e = getenv(fp->env);
    fp->at = e ? atol(e) : 0;
  }
  return fp->at > 0 && ++fp->seen == fp->at;
}
#endif

/* The savepoints a transaction may set (flush_once): each that history rows follow is a
 * subtransaction with an id of its own, and past 64 of them in one transaction the server's
 * cache of them overflows (every other session's snapshot then looks them up on disk). */
#define MAX_SAVEPOINTS 32

/* One try of a flush; *late set when the lease turned out to have run out. */
static int flush_once(mend_pg *p, pg_log *log, int commit, int begin, int *late, int *taken) {
  pipe pp = {.p = p, .log = log};
  pg_batch_arrays ar = {0};
  /* History rows as arrays and new steps' rows inserted plainly (pg_arrays.c), unless this is
   * the try that goes without: if a number was taken meanwhile, or a step's row was there, this
   * flush's writes are sent again that way (flush), from the transaction's start when this flush
   * begins it, else from a savepoint set before them. The other arrays fail only as their rows
   * would one by one. */
  int may_fail = !p->rows_one_by_one && (!p->in_batch || p->tx_savepoints < MAX_SAVEPOINTS);
  PGconn *c = p->conn;
  const char **ptrs = NULL;
  char *ids = NULL;
  int began = 0;
  if (PQstatus(c) != CONNECTION_OK) {
    char cause[512];
    mend__pg_one_line(cause, sizeof cause, PQerrorMessage(c));
    mend__pg_msg(p->err, sizeof p->err, "%s: connection lost: %s", p->server, cause);
    return -1;
  }
  if (!PQenterPipelineMode(c)) return mend__pg_fail(p, c, NULL, "enter pipeline mode");
  pp.sent_at = mend__pg_mono();
  /* Another session's lock is waited for this long a try by what the flush sends (pg_wait.c):
   * on a loop's thread no longer than its busy wait (0.1 s), which answers requests between
   * tries. Statements run alone later in the transaction wait as it stands (no bound, or a
   * repair's after its look). */
  int full = p->write_wait_ms > 0 ? p->write_wait_ms : PG_WRITE_WAIT_MS;
  int ms = p->on_writer || p->busy_ms <= 0 || p->busy_ms > full ? full : p->busy_ms;
  char bound[48];
  snprintf(bound, sizeof bound, "SET LOCAL lock_timeout = %d", ms);
  int bounded = 0;
  p->tx_lock_ms = ms;
  if (!p->in_batch && (begin || log->nrec || commit)) {
    int kind = begin_kind(p);
    char secs[40];
    snprintf(secs, sizeof secs, "%.17g", p->fence_lease);
    const char *v[2] = {p->fence_owner, secs};
    if (pipe_send(&pp, K_BEGIN, -1, "BEGIN", 0, NULL, NULL) != 0) goto done;
    began = 1;
    p->tx_standing_ms = 0;
    if (pipe_send(&pp, K_BOUND, -1, bound, 0, NULL, NULL) != 0) goto done;
    bounded = 1;
    if (kind == B_LIVE && pipe_send(&pp, K_LIVE, P_LEASE_LIVE, NULL, 2, v, NULL) != 0) goto done;
    if (kind == B_LATE) {
      if (pipe_send(&pp, K_RENEW, P_RENEW, NULL, 2, v, NULL) != 0) goto done;
      if (p->fence_registered && mend__pg_fence_late(p) != 0) goto done;
    }
  }
  /* Runs not known to be ours since the lease ran out: who holds them, before any write. */
  int nids = mend__pg_fence_ids(p, log, &ids);
  if (nids < 0) {
    pp.failed = 1;
    goto done;
  }
  if (nids > 0) {
    const char *v[1] = {ids};
    if (pipe_send(&pp, K_CHECK, P_LEASE_CHECK, NULL, 1, v, NULL) != 0 || pipe_sync(&pp) != 0)
      goto done;
  }
  if (log->nval && !(ptrs = malloc((size_t)log->nval * sizeof *ptrs))) {
    mend__pg_msg(p->err, sizeof p->err, "%s: sending a batch: out of memory", p->server);
    pp.failed = 1;
    goto done;
  }
  for (int i = 0; i < log->nval; i++) ptrs[i] = log->vals[i] < 0 ? NULL : log->text + log->vals[i];
  int planned = log->nrec > 1 ? mend__pg_arrays_plan(&ar, log, may_fail) : 0;
  if (planned == PG_PLAN_WIDTH) {
    const pg_rec *r = &log->recs[ar.bad];
    mend__pg_msg(p->err, sizeof p->err, "%s: sending a batch: a write (%s) recorded with %d"
                 " values where its statement of arrays has %d columns (a defect of mend)",
                 p->server, what_of(K_WRITE, r), r->n, mend__pg_arrays_width(r->q));
    pp.failed = 1;
    goto done;
  }
  if (planned != 0) {
    mend__pg_msg(p->err, sizeof p->err, "%s: sending a batch: out of memory", p->server);
    pp.failed = 1;
    goto done;
  }
  if (!bounded && log->nrec) {
    if (pipe_send(&pp, K_BOUND, -1, bound, 0, NULL, NULL) != 0) goto done;
    bounded = 1;
  }
  if (p->in_batch && (ar.nhist || ar.nnew_steps)) {
    if (pipe_send(&pp, K_SAVEPOINT, -1, "SAVEPOINT mend_rows", 0, NULL, NULL) != 0) goto done;
    p->tx_savepoints++;
  }
  for (int k = 0; k < log->nrec && !pp.failed; k++) {
    const pg_rec *r = &log->recs[k];
    int drop = mend__pg_fence_drops(p, log, r);
    if (drop < 0) pp.failed = 1;
    if (drop) continue;
    if (mend__pg_arrays_take(&ar, log, k)) continue;
    if (pipe_send(&pp, K_WRITE, r->q, NULL, r->n, ptrs + r->first, r) != 0) goto done;
    p->writes_alone++;
  }
  /* after the rows sent alone, which never depend on these (pg_arrays.c); new runs before the
   * updates that may change them */
  static const int kinds[PG_BATCH_ARRAYS] = {K_RUNS, K_RUN_UPDATES, K_NEW_STEPS, K_STEPS,
                                             K_HISTORY};
  static const int stmts[PG_BATCH_ARRAYS] = {P_INSERT_RUNS, P_UPDATE_RUNS, P_INSERT_STEPS,
                                             P_PUT_STEPS, P_APPEND_HISTORIES};
  pg_arrays *sets[PG_BATCH_ARRAYS] = {&ar.runs, &ar.run_updates, &ar.new_steps, &ar.steps,
                                      &ar.hist};
  for (int i = 0; i < PG_BATCH_ARRAYS && !pp.failed; i++) {
    const char *av[2 * PG_ARRAY_COLS];
    if (!sets[i]->n) continue;
    if (!mend__pg_arrays_end(sets[i], av)) {
      mend__pg_msg(p->err, sizeof p->err, "%s: sending a batch: out of memory", p->server);
      pp.failed = 1;
      goto done;
    }
    if (pipe_send(&pp, kinds[i], stmts[i], NULL, 2 * sets[i]->ncols, av, NULL) != 0) goto done;
    if (kinds[i] == K_NEW_STEPS) p->steps_inserted += sets[i]->n;
  }
  if (bounded && !commit && !pp.failed) {
    char standing[48];
    snprintf(standing, sizeof standing, "SET LOCAL lock_timeout = %d", p->tx_standing_ms);
    if (pipe_send(&pp, K_BOUND, -1, standing, 0, NULL, NULL) != 0) goto done;
  }
  /* reads that must see these writes: in the same round trip */
  for (int i = 0; p->reads && !commit && !pp.failed && i < p->reads->n; i++) {
    if (pipe_send(&pp, K_READ, p->reads->q[i], NULL, 1, p->reads->vals + i, NULL) != 0) goto done;
    pp.read[pp.n - 1] = i;
    p->reads->sent = 1;
  }
  if (log->wake) p->tx_wake = 1;
  /* One notify a transaction, delivered by the server only if the COMMIT after it succeeds. */
  const char *nv[2];
  if (commit && !pp.failed && p->tx_wake && mend__pg_notify_args(p, nv) &&
      pipe_send(&pp, K_NOTIFY, -1, mend__pg_notify_sql, 2, nv, NULL) != 0)
    goto done;
#ifdef MEND_FAILPOINTS
  if (commit && !pp.failed && end_session_now() &&
      pipe_send(&pp, K_WRITE, -1, "SELECT pg_terminate_backend(pg_backend_pid())", 0, NULL, NULL) !=
          0)
    goto done;
  if (commit && !pp.failed && deadlock_now() &&
      pipe_send(&pp, K_WRITE, -1,
                "DO $$BEGIN RAISE EXCEPTION 'deadlock detected (MEND_PG_DEADLOCK)'"
                " USING ERRCODE = '40P01'; END$$",
                0, NULL, NULL) != 0)
    goto done;
#endif
  if (commit && !pp.failed) {
    if (p->commit_hook) p->commit_hook("before_commit");
    if (pipe_send(&pp, K_COMMIT, -1, "COMMIT", 0, NULL, NULL) != 0) goto done;
  }
  if (pp.n) pipe_sync(&pp);
done:
  if (pp.n) pipe_sync(&pp);
  free(ptrs);
  free(ids);
  mend__pg_arrays_free(&ar);
  PQexitPipelineMode(c);
  *late = pp.late;
  *taken = pp.taken;
  if (pp.failed) return -1;
  if (began) {
    p->in_batch = 1;
    p->tx_savepoints = 0;
    p->tx_serial++;   /* a batch that failed leaves open_seq as it was: this tells them apart */
  }
  if (commit) {
    p->in_batch = 0;
    p->tx_wake = 0;
    p->versions_committed = p->nversions;
    if (p->commit_hook) p->commit_hook("after_commit");
  }
  return 0;
}

/* Between transactions: a connection the server closed (a restart, a terminated backend) is
 * opened again before anything is sent on it. The first time, for up to RECONNECT_SECONDS with
 * a backoff that doubles from 0.1 s: a restart is over by then, and the batch goes through
 * with nothing let go. If the server is still away, every later call tries once, at most once
 * a backoff that doubles up to RETRY_MAX_SECONDS, and fails at once in between: a caller that
 * retries (a serving worker) must get its loop back, to hear SIGTERM among other things.
 * Nothing is lost: no transaction was open, and the batch is still in the log. A connection
 * lost inside a transaction is not reopened: that batch fails. The look is a read of what the
 * socket holds, without waiting: the server's last words (FATAL) or the socket's end. */
#define RECONNECT_SECONDS 10.0
#define RETRY_MAX_SECONDS 5.0

/* The prepare bounded as the store's opening is (PG_OPEN_TRY_MS): a table another session
 * locked by hand holds it back as long as the lock lasts, and this may be the loop's thread.
 * MEND_STORE_BUSY then: the server is there, so no use trying again at once. */
static int reopen(mend_pg *p) {
  PGconn *c;
  if (mend__pg_connect(p, &c) != 0) return -1;   /* the server's clock read with it */
  int rc = mend__pg_prepare(p, c, 1);
  if (rc != 0) {
    PQfinish(c);
    return rc == MEND_STORE_BUSY ? rc : -1;
  }
  PQfinish(p->conn);
  p->conn = c;
  mend__pg_watch(p);
  mend__pg_note_writer_host(p, c);
  p->retry_at = p->retry_delay = 0;
  return 0;
}

static int ensure_connected(mend_pg *p) {
  if (p->in_batch) return 0;
  /* PQisBusy parses what was read: a FATAL notice sets conn_doomed */
  if (PQstatus(p->conn) == CONNECTION_OK && PQconsumeInput(p->conn) && !PQisBusy(p->conn) &&
      PQstatus(p->conn) == CONNECTION_OK && !p->conn_doomed)
    return 0;
  if (p->retry_delay > 0) {   /* the long try was spent and failed */
    double now = mend__pg_mono();
    if (now >= p->retry_at) {
      if (reopen(p) == 0) return 0;
      mend__pg_msg(p->retry_err, sizeof p->retry_err, "%s", p->err);
      p->retry_delay = p->retry_delay * 2 > RETRY_MAX_SECONDS ? RETRY_MAX_SECONDS
                                                              : p->retry_delay * 2;
      p->retry_at = now + p->retry_delay;
    }
    mend__pg_msg(p->err, sizeof p->err, "%s: the connection is lost and not back yet (next"
                 " try in %.1f s): %s", p->server, p->retry_at - now, p->retry_err);
    return -1;
  }
  char first[sizeof p->err], cause[512];
  mend__pg_one_line(cause, sizeof cause, PQerrorMessage(p->conn));
  mend__pg_msg(first, sizeof first, "%s: connection lost: %s", p->server, cause);
  double give_up = mend__pg_mono() + RECONNECT_SECONDS, delay = 0.1;
  for (;;) {
    int rc = reopen(p);
    if (rc == 0) return 0;
    /* a lock held by hand, or a stop: tried again later (retry_at), not here */
    if (rc == MEND_STORE_BUSY || (p->on_writer && mend__handoff_stopping(p->w))) break;
    if (mend__pg_mono() + delay > give_up) break;
    struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
    nanosleep(&ts, NULL);
    delay = delay * 2 > 2 ? 2 : delay * 2;
  }
  mend__pg_msg(p->retry_err, sizeof p->retry_err, "%s", p->err);   /* the last try's cause */
  p->retry_delay = 0.5;
  p->retry_at = mend__pg_mono() + p->retry_delay;
  mend__pg_msg(p->err, sizeof p->err, "%s; reconnecting for %.0f s failed: %s", first,
               RECONNECT_SECONDS, p->retry_err);
  return -1;
}

/* Back to the savepoint flush_once set in an open transaction before its writes: 0, or -1. */
static int to_savepoint(mend_pg *p) {
  PGresult *r = PQexec(p->conn, "ROLLBACK TO SAVEPOINT mend_rows");
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
  if (!ok) mend__pg_fail(p, p->conn, r, "roll back to a savepoint");
  PQclear(r);
  return ok ? 0 : -1;
}

/* Sends the log's writes in the open transaction (begun if need be, or if `begin`), and
 * COMMIT after them with `commit`; empties the log. A failure rolls the whole batch back. */
int mend__pg_flush(mend_pg *p, pg_log *log, int commit, int begin) {
  if (p->carry.nrec && !log->oom) carry_first(p, log);
  if (log->oom) {
    mend__pg_msg(p->err, sizeof p->err, "%s: recording a write: out of memory", p->server);
    mend__pg_log_clear(log);
    mend__pg_rollback(p);
    p->batch_failed = 1;
    return -1;
  }
  if (!p->in_batch && ensure_connected(p) != 0) {
    mend__pg_log_keep(&p->carry, log, P_RECORD_EVENT);
    mend__pg_log_clear(log);
    p->conn_lost = 1;   /* nothing sent: told now, and the next batch tries again */
    return -1;
  }
  if (!log->nrec && !p->in_batch && !begin) return 0;
  int late = 0, taken = 0, was_open = p->in_batch, tx_savepoints = p->tx_savepoints;
  p->tx_lock = 0;
  /* What a renewal in a transaction rolled back below had told us is undone with it. */
  double fence_until_was = p->fence_until;
  int registered_was = p->fence_registered;
  int rc = flush_once(p, log, commit, begin, &late, &taken);
  if (rc != 0 && late && !was_open) {
    /* Our lease ran out before this transaction began: nothing in it was written. Again,
     * down the late path (renew, then look up who holds each run written to). */
    mend__pg_rollback(p);
    p->fence_until = 0;
    rc = flush_once(p, log, commit, begin, &late, &taken);
  }
  if (rc != 0 && taken && PQstatus(p->conn) == CONNECTION_OK && !p->conn_doomed &&
      (!was_open || to_savepoint(p) == 0)) {
    /* A history number was taken meanwhile (a person's repair), or a step the engine took for
     * new had a row: nothing of this flush was written (nothing of the transaction, when it
     * began it). Again, history rows each on its own, renumbered where its number is taken,
     * and every step's row put over the one there. */
    if (!was_open) {
      mend__pg_rollback(p);
      p->fence_until = fence_until_was;
      p->fence_registered = registered_was;
    }
    p->tx_savepoints = tx_savepoints;
    p->rows_one_by_one = 1;
    rc = flush_once(p, log, commit, begin, &late, &taken);
    p->rows_one_by_one = 0;
  }
  if (rc != 0 && p->tx_lock && !was_open && PQstatus(p->conn) == CONNECTION_OK &&
      !p->conn_doomed) {
    /* Another session's lock held past the bound, in a transaction this flush began: nothing
     * of it was written. Rolled back, its log kept whole for the next try (pg_wait.c). */
    p->tx_lock = p->tx_conflict = 0;
    mend__pg_rollback(p);
    p->fence_until = fence_until_was;
    p->fence_registered = registered_was;
    p->tx_savepoints = tx_savepoints;
    mend__pg_lock_note(p, p->conn, p->lock_context, 1);
    return MEND_STORE_BUSY;
  }
  if (rc == 0) mend__pg_lock_gone(p);
  /* The batch's events are kept until a commit lands: while they are in the open transaction,
   * or gone with it */
  if (rc == 0 && commit) mend__pg_log_clear(&p->tx_events);
  else mend__pg_log_keep(&p->tx_events, log, P_RECORD_EVENT);
  mend__pg_log_clear(log);
  if (rc != 0) {
    /* The connection gone (the server restarted, the session ended): whether a COMMIT sent
     * was done is not known, so the batch counts as not committed, and the failure is told
     * once, now (conn_lost); the next batch reconnects. A batch the server rolled back to end
     * a deadlock (two workers' locks crossing, as on runs one of them lost: SQLSTATE 40P01)
     * is told the same way: nothing of it was written, and the worker that wrote it reads its
     * runs again and goes on, on the same connection. */
    /* A lock held past the bound in a transaction open before this flush is told so too:
     * its earlier writes cannot be sent again from here (pg_wait.c). */
    int lock = p->tx_lock;
    mend__pg_lock_gone(p);   /* a kept batch, if any, is gone with this one: told as its failure */
    p->conn_lost = PQstatus(p->conn) != CONNECTION_OK || p->conn_doomed || p->tx_conflict || lock;
    p->tx_conflict = p->tx_lock = 0;
    mend__pg_rollback(p);
    if (lock && PQstatus(p->conn) == CONNECTION_OK && !p->conn_doomed)
      mend__pg_lock_note(p, p->conn, p->lock_context, 0);
    p->batch_failed = !p->conn_lost;   /* every call fails until commit() says so too */
  }
  return rc;
}

/* ---- the writer thread -------------------------------------------------------------------- */

static int writer_write(void *store, void *job) { return mend__pg_flush_writer(store, job); }

/* With the writer's lock held: a batch committed is durable. */
static void *writer_settle(void *store, int rc) {
  mend_pg *p = store;
  if (rc == 0 && p->w->job_seq > p->durable_seq) p->durable_seq = p->w->job_seq;
  return NULL;
}

static const mend_handoff_ops writer_ops = {writer_write, writer_settle, NULL};

/* Waits for the writer thread to be done with the connection; -1 if a batch of it failed
 * (every later call fails with its message). */
int mend__pg_writer_wait(mend_pg *p) { return p->w ? mend__handoff_wait(p->w) : 0; }

/* writer_wait for a call that tells its caller: a batch lost with its connection is told
 * once (conn_lost says which), and the next batch reconnects; any other failure stays. */
static int writer_told(mend_pg *p) {
  int rc = mend__pg_writer_wait_bounded(p);
  if (rc == 0 || rc == MEND_STORE_BUSY) return rc;
  if (p->conn_lost) {
    pthread_mutex_lock(&p->w->mu);
    p->w->failed = 0;
    pthread_mutex_unlock(&p->w->mu);
  }
  return -1;
}

int mend__pg_sync(mend_pg *p) {
  if (writer_told(p) != 0 || p->batch_failed) return -1;
  return mend__pg_flush_waiting(p, 0);
}

int mend__pg_sync_reads(mend_pg *p, pg_reads *r) {
  if (writer_told(p) != 0 || p->batch_failed) return -1;
  r->sent = 0;   /* a try that met a lock sends the same reads again */
  p->reads = r;
  int rc = mend__pg_flush_waiting(p, 0);
  p->reads = NULL;
  if (rc != 0) return -1;
  return r->sent ? 0 : 1;
}

int mend__pg_begin(mend_pg *p) {
  if (writer_told(p) != 0 || p->batch_failed) return -1;
  return mend__pg_flush_waiting(p, 1);
}

/* A log holds at most this many records: a larger burst is sent in parts, in the open
 * transaction, rather than held all in memory. */
#define LOG_MAX_RECORDS 65536

/* A write is only recorded: sent at the next read, commit or hand-off, so that a batch costs
 * one round trip however many writes it has (sent at once, each would cost one). Its failure
 * is heard then, and fails the whole batch. Rows of the kinds pg_arrays.c knows go as one
 * statement of arrays a kind (flush_once says when). */
int mend__pg_rec_end(mend_pg *p) {
  pg_log *log = p->cur;
  if (p->npre) {
    const pg_rec *r = log->nrec && !log->oom ? &log->recs[log->nrec - 1] : NULL;
    const char *v0 = r && r->n && log->vals[r->first] >= 0 ? log->text + log->vals[r->first] : NULL;
    mend__pg_pre_forget(p, r ? r->q : -1, v0);
  }
  if (log->oom) return -1;
  if (p->cur->nrec < LOG_MAX_RECORDS) return 0;
  return p->w ? 0 : mend__pg_sync(p);
}

int mend__pg_start_writer(mend_store *s, void (*done)(void *ud), void *ud) {
  mend_pg *p = PG(s);
  if (p->w) return 0;
  int rc = mend__handoff_start(&p->w, &writer_ops, p, &p->cpus, done, ud);
  if (rc == ENOMEM)
    mend__pg_msg(p->err, sizeof p->err, "%s: writer thread: out of memory", p->server);
  else if (rc != 0)
    mend__pg_msg(p->err, sizeof p->err, "%s: writer thread: cannot start", p->server);
  return rc ? -1 : 0;
}

void mend__pg_set_thread_cpus(mend_store *s, const mend_cpus *cpus) { PG(s)->cpus = *cpus; }

/* A stop does not wait out a try of the writer's that waits for another session's lock (its
 * bound is a second past the server's deadlock_timeout): past a short grace the try is
 * cancelled, and its batch given up as a kill would (nothing of it was acted on; its runs are
 * taken again from what was committed). */
#define STOP_GRACE_SECONDS 0.3

void mend__pg_stop_writer(mend_pg *p) {
  if (mend__handoff_stop_soon(p->w, STOP_GRACE_SECONDS)) {
    atomic_store(&p->stop_cancelled, 1);
    mend__pg_cancel_conn(p);
  }
  mend__handoff_stop(p->w);
  p->w = NULL;
}

int mend__pg_commit(mend_store *s) {
  mend_pg *p = PG(s);
  int told = writer_told(p);
  if (told != 0) return told == MEND_STORE_BUSY ? told : -1;   /* BUSY: the batch is kept */
  if (p->batch_failed) {   /* the failure was told when it happened; the batch is gone */
    mend__pg_rollback(p);
    mend__pg_log_clear(p->cur);
    return -1;
  }
  int rc = mend__pg_flush(p, p->cur, 1, 0);
  if (rc == MEND_STORE_BUSY) return rc;   /* kept whole for the next call (pg_wait.c) */
  if (rc != 0) {
    p->batch_failed = 0;   /* told now: the next batch is a batch of its own */
    return -1;
  }
  p->durable_seq = p->open_seq++;
  return 0;
}

int mend__pg_hand_off(mend_store *s) {
  mend_pg *p = PG(s);
  pg_writer *w = p->w;
  if (!w) return mend__pg_commit(s);
  int told = writer_told(p);
  if (told != 0) return told == MEND_STORE_BUSY ? told : -1;   /* BUSY: the batch is kept */
  if (p->batch_failed) return mend__pg_commit(s);
  pthread_mutex_lock(&w->mu);
  if (!p->cur->nrec && !p->in_batch) {
    p->durable_seq = p->open_seq++;   /* nothing to write: all so far is durable */
  } else {
    w->job_seq = p->open_seq++;
    mend__handoff_post(w, p->cur);
    p->cur = p->cur == &p->logs[0] ? &p->logs[1] : &p->logs[0];
  }
  pthread_mutex_unlock(&w->mu);
  return 0;
}

int mend__pg_writer_busy(mend_store *s) {
  pg_writer *w = PG(s)->w;
  return w ? mend__handoff_busy(w) : 0;
}

int mend__pg_batch_open(mend_store *s) {
  mend_pg *p = PG(s);
  if (p->cur->nrec > 0) return 1;
  pg_writer *w = p->w;
  if (!w) return p->in_batch;
  pthread_mutex_lock(&w->mu);
  int busy = w->busy;
  pthread_mutex_unlock(&w->mu);
  return busy ? 0 : p->in_batch;
}

int mend__pg_batch_writes(const mend_store *s) { return PG(s)->cur->nrec; }

/* The numbers are read and moved under the writer's lock when there is one. */
unsigned long mend__pg_open_seq(const mend_store *s) { return PG(s)->open_seq; }
unsigned long mend__pg_durable_seq(const mend_store *s) {
  mend_pg *p = PG(s);
  if (!p->w) return p->durable_seq;
  pthread_mutex_lock(&p->w->mu);
  unsigned long d = p->durable_seq;
  pthread_mutex_unlock(&p->w->mu);
  return d;
}
void mend__pg_set_commit_hook(mend_store *s, void (*hook)(const char *phase)) {
  PG(s)->commit_hook = hook;
}
