/*
 * pg_lease: the PostgreSQL store's half of one worker per run: leases on the server's clock,
 * claims with FOR UPDATE SKIP LOCKED, renewals, owners, and the fence. Must never: let a write
 * of a worker reach a run it no longer holds.
 *
 * The fence. A worker holds its runs while its row in workers has a live lease. Each of its
 * transactions begins by renewing that lease only if it is still live (mend_lease_live, which
 * locks the row until commit); a claim of another worker's runs first locks the rows of
 * workers whose lease ran out, skipping locked ones. So either the worker's transaction holds
 * its row and no claim can take its runs until it commits, or a claim took them first and the
 * worker's transaction fails before writing anything (SQLSTATE MENDL). Then the batch is sent
 * again down the late path: the lease is renewed whatever it said, and the runs the batch
 * writes are looked up (locked) before any write; those another worker holds, or that nobody
 * holds any more, are lost: their writes are dropped, in this batch and every later one, and
 * the engine hears of them (fence_news). Looking up goes on, once per run, until the engine has
 * matched its runs against held() and called fence_verified().
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void news_lock(mend_pg *p) { if (p->w) pthread_mutex_lock(&p->w->mu); }
static void news_unlock(mend_pg *p) { if (p->w) pthread_mutex_unlock(&p->w->mu); }

static int fence_oom(mend_pg *p) {
  mend__pg_msg(p->err, sizeof p->err, "%s: keeping track of lost leases: out of memory",
               p->server);
  return -1;
}

static int note_lost(mend_pg *p, const char *id, size_t len) {
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  memcpy(copy, id, len);
  copy[len] = 0;
  news_lock(p);
  int ok = 1;
  if (p->nlost_new == p->caplost_new) {
    int cap = p->caplost_new ? p->caplost_new * 2 : 16;
    char **more = realloc(p->lost_new, (size_t)cap * sizeof *more);
    if (more) {
      p->lost_new = more;
      p->caplost_new = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) p->lost_new[p->nlost_new++] = copy;
  news_unlock(p);
  if (!ok) free(copy);
  return ok ? 0 : -1;
}

/* A transaction began late (our lease had run out): look up every run written to from now on. */
int mend__pg_fence_late(mend_pg *p) {
  p->fence_checking = 1;
  mend_idset_clear(&p->fence_checked);
  news_lock(p);
  p->fence_late = 1;
  news_unlock(p);
  return 0;
}

void mend__pg_renewed(mend_pg *p, double sent_at, double lease_seconds) {
  if (!p->fence_owner) return;
  p->fence_registered = 1;
  /* The server counted from when it ran the statement, after we sent it. */
  if (sent_at + lease_seconds > p->fence_until) p->fence_until = sent_at + lease_seconds;
}

/* The run a record writes to, or NULL (breakers, renewals). */
static const char *rec_run(const pg_log *log, const pg_rec *r, size_t *len) {
  if (r->q == P_PUT_BREAKER || r->q == P_RENEW || r->n < 1 || log->vals[r->first] < 0)
    return NULL;
  const char *id = log->text + log->vals[r->first];
  *len = strlen(id);
  return id;
}

static int append_quoted(char **buf, size_t *n, size_t *cap, const char *s) {
  size_t need = *n + 2 * strlen(s) + 4;
  if (need > *cap) {
    size_t c = *cap ? *cap * 2 : 256;
    while (c < need) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return -1;
    *buf = b;
    *cap = c;
  }
  char *o = *buf + *n;
  if (*n > 1) *o++ = ',';
  *o++ = '"';
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') *o++ = '\\';
    *o++ = *s;
  }
  *o++ = '"';
  *n = (size_t)(o - *buf);
  return 0;
}

/* While looking up: the ids (an array literal) of runs the log writes to that are neither
 * looked up yet nor started in it. Returns how many, or -1. */
int mend__pg_fence_ids(mend_pg *p, const pg_log *log, char **array) {
  *array = NULL;
  if (!p->fence_checking) return 0;
  mend_idset seen = {0};
  char *buf = NULL;
  size_t n = 1, cap = 0;
  int count = 0;
  for (int k = 0; k < log->nrec; k++) {
    const pg_rec *r = &log->recs[k];
    size_t len;
    const char *id = rec_run(log, r, &len);
    if (!id || r->repair) continue;
    if (r->q == P_INSERT_RUN) {   /* ours from the start */
      if (mend_idset_add(&p->fence_checked, id, len) < 0) goto oom;
      continue;
    }
    if (mend_idset_has(&p->fence_checked, id, len) || mend_idset_has(&p->lost, id, len)) continue;
    int added = mend_idset_add(&seen, id, len);
    if (added < 0) goto oom;
    if (!added) continue;
    if (!buf && !(buf = malloc(cap = 256))) goto oom;
    buf[0] = '{';
    if (append_quoted(&buf, &n, &cap, id) != 0) goto oom;
    count++;
  }
  mend_idset_clear(&seen);
  if (!count) {
    free(buf);
    return 0;
  }
  buf[n++] = '}';   /* append_quoted left room */
  buf[n] = 0;
  *array = buf;
  return count;
oom:
  mend_idset_clear(&seen);
  free(buf);
  return fence_oom(p);
}

/* The rows of P_LEASE_CHECK: a run held by another worker, or by nobody, is lost. Runs not
 * found were started in this batch. */
int mend__pg_fence_result(mend_pg *p, const PGresult *r) {
  for (int i = 0; i < PQntuples(r); i++) {
    const char *id = PQgetvalue(r, i, 0), *owner = PG_TEXT(r, i, 1);
    size_t len = strlen(id);
    if (owner && strcmp(owner, p->fence_owner) == 0) {
      if (mend_idset_add(&p->fence_checked, id, len) < 0) return fence_oom(p);
      continue;
    }
    if (mend_idset_add(&p->lost, id, len) < 0 || note_lost(p, id, len) != 0) return fence_oom(p);
  }
  return 0;
}

/* 1 if the record must not be sent (its run is lost), 0 if it goes, -1 on error. */
int mend__pg_fence_drops(mend_pg *p, const pg_log *log, const pg_rec *r) {
  if (!p->lost.count || r->repair) return 0;
  size_t len;
  const char *id = rec_run(log, r, &len);
  if (!id || r->q == P_INSERT_RUN) return 0;
  return mend_idset_has(&p->lost, id, len);
}

void mend__pg_ours_again(mend_pg *p, const char *id) {
  mend_idset_remove(&p->lost, id, strlen(id));
  if (p->fence_checking && mend_idset_add(&p->fence_checked, id, strlen(id)) < 0) return;
  news_lock(p);
  for (int i = 0; i < p->nlost_new; i++) {
    if (strcmp(p->lost_new[i], id) != 0) continue;
    free(p->lost_new[i]);
    p->lost_new[i--] = p->lost_new[--p->nlost_new];
  }
  news_unlock(p);
}

int mend__pg_lease_at_least(mend_pg *p, const char *owner, double lease_seconds) {
  char secs[40];
  snprintf(secs, sizeof secs, "%.17g", lease_seconds);
  const char *v[2] = {owner, secs};
  double sent = mend__pg_mono();
  PGresult *r = mend__pg_run(p, P_RENEW, NULL, 2, v, "renew the lease");
  if (!r) return -1;
  PQclear(r);
  if (p->fence_owner && strcmp(owner, p->fence_owner) == 0)
    mend__pg_renewed(p, sent, lease_seconds);
  return 0;
}

/* ---- the methods -------------------------------------------------------------------------- */

int mend__pg_set_fence(mend_store *s, const char *owner, double lease_seconds) {
  mend_pg *p = PG(s);
  char *copy = strdup(owner);
  if (!copy) return fence_oom(p);
  if (!p->fence_owner || strcmp(p->fence_owner, owner) != 0) p->fence_registered = 0;
  free(p->fence_owner);
  p->fence_owner = copy;
  p->fence_lease = lease_seconds;
#ifdef MEND_FAILPOINTS
  /* every transaction down the late path (MEND_FENCE_LATE=1 make test), as SQLite's */
  p->fence_late_always = getenv("MEND_FENCE_LATE") != NULL;
#endif
  return 0;
}

int mend__pg_fence_news(mend_store *s, void (*lost)(void *ud, const char *id), void *ud) {
  mend_pg *p = PG(s);
  news_lock(p);
  char **ids = p->lost_new;
  int n = p->nlost_new, late = p->fence_late;
  p->lost_new = NULL;
  p->nlost_new = p->caplost_new = 0;
  p->fence_late = 0;
  news_unlock(p);
  for (int i = 0; i < n; i++) {
    lost(ud, ids[i]);
    free(ids[i]);
  }
  free(ids);
  return late;
}

void mend__pg_repairing(mend_store *s, int on) { PG(s)->repairing = on; }

int mend__pg_add_lost(mend_store *s, const char *id) {
  mend_pg *p = PG(s);
  mend__pg_writer_wait(p);   /* the writer thread reads the set while it writes */
  return mend_idset_add(&p->lost, id, strlen(id)) < 0 ? fence_oom(p) : 0;
}

/* Column 0 of every row, as an array of strings; NULL on error. */
static json_t *strings(PGresult *r) {
  if (!r) return NULL;
  json_t *out = json_array();
  for (int i = 0; out && i < PQntuples(r); i++)
    json_array_append_new(out, json_string(PQgetvalue(r, i, 0)));
  PQclear(r);
  return out;
}

json_t *mend__pg_held(mend_store *s) {
  mend_pg *p = PG(s);
  if (mend__pg_sync(p) != 0) return NULL;
  const char *v[1] = {p->fence_owner};
  return strings(mend__pg_run(p, P_HELD, NULL, 1, v, "read the runs this worker holds"));
}

void mend__pg_fence_verified(mend_store *s) {
  mend_pg *p = PG(s);
  if (mend__pg_sync(p) != 0) return;
  p->fence_checking = 0;
  mend_idset_clear(&p->fence_checked);
}

void mend__pg_set_worker(mend_store *s, const char *worker) {
  mend_pg *p = PG(s);
  free(p->worker);
  p->worker = worker ? strdup(worker) : NULL;
}

int mend__pg_claimable(mend_store *s, const char *owner, int thorough) {
  mend_pg *p = PG(s);
  const int anything = MEND_CLAIMABLE_FREE | MEND_CLAIMABLE_GONE;
  if (mend__pg_aux(p) != 0) return anything;   /* the claim itself will say what is wrong */
  char name[16];
  snprintf(name, sizeof name, "m%d", thorough ? P_CLAIMABLE_THOROUGH : P_CLAIMABLE_QUICK);
  const char *v[1] = {owner};
  PGresult *r = PQexecPrepared(p->aux, name, 1, v, NULL, NULL, 0);
  int found = anything;
  if (PQresultStatus(r) == PGRES_TUPLES_OK)
    found = PQntuples(r) ? atoi(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  return found;
}

#ifdef MEND_FAILPOINTS
/* MEND_PG_END_AFTER_CLAIM=N: the server ends the session right after the Nth claim this
 * process makes (one that took nothing counts too), before anything else of its transaction is
 * sent, as pg_terminate_backend from elsewhere would: the claim goes with it. For the spec of a
 * claim lost that way (spec/pg_reconnect_spec.lua). */
static void end_after_claim(mend_pg *p) {
  static pg_failpoint fp = {"MEND_PG_END_AFTER_CLAIM", -1, 0};
  if (mend__pg_failpoint_hit(&fp))
    PQclear(PQexec(p->conn, "SELECT pg_terminate_backend(pg_backend_pid())"));
}
#endif

json_t *mend__pg_claim(mend_store *s, const char *owner, double lease_seconds, int limit,
                       int how) {
  mend_pg *p = PG(s);
  if (mend__pg_begin(p) != 0 || mend__pg_lease_at_least(p, owner, lease_seconds) != 0)
    return NULL;
  int newest = how & MEND_CLAIM_NEWEST, free_only = how & MEND_CLAIM_FREE;
  int q = free_only ? (newest ? P_CLAIM_FREE_NEWEST : P_CLAIM_FREE_OLDEST)
                    : (newest ? P_CLAIM_NEWEST : P_CLAIM_OLDEST);
  char lim[24];
  snprintf(lim, sizeof lim, "%d", limit);
  const char *v[3] = {owner, lim, how & MEND_CLAIM_UNAVAILABLE ? "true" : "false"};
  PGresult *r = mend__pg_run(p, q, NULL, 3, v, "claim runs");
  if (!r) return NULL;
  for (int i = 0; i < PQntuples(r); i++) mend__pg_ours_again(p, PQgetvalue(r, i, 0));
  mend__pg_pre_claimed(p, r);   /* their images are read ahead, together */
  int n = PQntuples(r);
  json_t *ids = strings(r);
  /* It took all there was: a worker whose lease ran out holds no run now, and its row would
   * only keep claimable() looking. One that was only stalled writes it again (late path). */
  if (ids && !free_only && n < limit) {
    PGresult *g = mend__pg_run(p, P_FORGET_GONE, NULL, 1, v, "forget workers gone");
    if (!g) {
      json_decref(ids);
      return NULL;
    }
    PQclear(g);
  }
#ifdef MEND_FAILPOINTS
  end_after_claim(p);
#endif
  return ids;
}

int mend__pg_renew(mend_store *s, const char *owner, double lease_seconds) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_RENEW);
  mend__pg_rec_text(p, owner);
  mend__pg_rec_real(p, lease_seconds);
  return mend__pg_rec_end(p);
}

int mend__pg_release(mend_store *s, const char *id, const char *owner) {
  mend_pg *p = PG(s);
  if (mend__pg_begin(p) != 0) return -1;
  const char *v[2] = {id, owner};
  PGresult *r = mend__pg_run(p, P_RELEASE, NULL, 2, v, "release lease");
  if (!r) return -1;
  PQclear(r);
  p->tx_wake = 1;
  /* Given back, the run is another worker's to take: nothing more is written to it, unless
   * this worker takes it again. */
  return mend_idset_add(&p->lost, id, strlen(id)) < 0 ? fence_oom(p) : 0;
}

int mend__pg_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                   double *lease_left) {
  mend_pg *p = PG(s);
  /* no run's id (from a URL): sent, it fails the batch */
  if (!mend__pg_text_fits(p, id)) return 0;
  if (mend__pg_sync(p) != 0) return -1;
  const char *v[1] = {id};
  PGresult *r = mend__pg_run(p, P_OWNER, NULL, 1, v, "read lease");
  if (!r) return -1;
  int found = PQntuples(r) > 0;
  if (found) {
    const char *o = PG_TEXT(r, 0, 0);
    mend__pg_msg(owner_out, owner_len, "%s", o ? o : "");
    *lease_left = PQgetisnull(r, 0, 1) ? -1e9 : atof(PQgetvalue(r, 0, 1));
  }
  PQclear(r);
  return found;
}

json_t *mend__pg_lease_holders(mend_store *s) {
  mend_pg *p = PG(s);
  if (mend__pg_sync(p) != 0) return NULL;
  return strings(mend__pg_run(p, P_HOLDERS, NULL, 0, NULL, "read lease holders"));
}

int mend__pg_release_owner(mend_store *s, const char *owner) {
  mend_pg *p = PG(s);
  if (mend__pg_begin(p) != 0) return -1;
  const char *v[1] = {owner};
  for (int i = 0; i < 2; i++) {
    PGresult *r = mend__pg_run(p, i == 0 ? P_FORGET_WORKER : P_RELEASE_OWNER, NULL, 1, v,
                               "release the runs of a dead worker");
    if (!r) return -1;
    PQclear(r);
  }
  p->tx_wake = 1;
  return 0;
}

/* Runs sql in the open transaction; 0, or -1 with the batch failed (its message in err). */
static int look_exec(mend_pg *p, const char *sql) {
  if (mend__pg_exec(p, p->conn, sql, "read a run's status") == 0) return 0;
  p->batch_failed = 1;
  return -1;
}

/* The run's row locked in the open batch's transaction until it commits: another server's
 * repair of it waits for that, then reads what this one wrote. The lock is waited for only
 * busy_ms, or PG_LOOP_LOOK_MS on a loop whose busy wait is shorter (lock_timeout set for this
 * look alone, in a savepoint of its own): another session's lock held longer (psql left open)
 * rolls back to that savepoint only, and the batch, with the writes before it, goes on to
 * commit. After it the transaction keeps a bound of the same length for a command's repair's
 * own writes (pg_wait.c says what a batch that meets it does). */
int mend__pg_hold_status(mend_store *s, const char *id, const char *status, char *found, int len) {
  mend_pg *p = PG(s);
  found[0] = 0;
  if (!mend__pg_text_fits(p, id)) return 1;   /* no run's id (from a URL) */
  if (mend__pg_begin(p) != 0) return -1;
  char set[96];
  int ms = p->busy_ms > 0 ? p->busy_ms : PG_BUSY_MS;
  if (ms < PG_LOOP_LOOK_MS) ms = PG_LOOP_LOOK_MS;
  snprintf(set, sizeof set, "SAVEPOINT mend_look; SET LOCAL lock_timeout = %d", ms);
  if (look_exec(p, set) != 0) return -1;
  p->tx_savepoints++;   /* a subtransaction of its own: counted with the flushes' (pg_batch.c) */
  const char *v[1] = {id};
  char name[16];
  snprintf(name, sizeof name, "m%d", P_RUN_STATUS);
  mend__pg_pre_forget(p, P_RUN_STATUS, id);
  PGresult *r = PQexecPrepared(p->conn, name, 1, v, NULL, NULL, 0);
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    /* lock_not_available (the bound), or picked to end a deadlock while it waited: a lock */
    int deadlock = code && strcmp(code, "40P01") == 0;
    int timed_out = deadlock || (code && strcmp(code, "55P03") == 0);
    mend__pg_fail(p, p->conn, r, "read a run's status");
    PQclear(r);
    if (PQstatus(p->conn) != CONNECTION_OK) {
      p->conn_doomed = p->conn_lost = 1;
      mend__pg_rollback(p);
      return -1;
    }
    /* Whatever failed, the batch's writes before the look are kept: back to the savepoint. */
    if (look_exec(p, "ROLLBACK TO SAVEPOINT mend_look; RELEASE SAVEPOINT mend_look") != 0)
      return -1;
    if (!timed_out) {
      p->batch_failed = 1;   /* not a lock: as any failed statement, the engine hears of it */
      return -1;
    }
    if (deadlock)
      mend__pg_msg(p->err, sizeof p->err, "%s: read a run's status: run %s is locked by another "
                   "session, which waits for this one's (deadlock)", p->server, id);
    else
      mend__pg_msg(p->err, sizeof p->err, "%s: read a run's status: run %s is locked by another "
                   "session (waited %.1f s)", p->server, id, ms / 1000.0);
    return MEND_STORE_BUSY;
  }
  const char *st = PQntuples(r) > 0 ? PG_TEXT(r, 0, 0) : NULL;
  mend__pg_msg(found, len, "%s", st ? st : "");
  PQclear(r);
  /* The repair's writes that follow, on other tables (a dead letter's row, history) that
   * another session could hold too, wait no longer than the look from a command or a host's
   * call: past it the batch fails naming the table (a command exits 1, nothing written). On a
   * loop (serve's 0.1 s look) they wait as before: a failed batch would stop its engine. */
  int after = ms >= PG_WRITE_WAIT_MS ? ms : 0;
  snprintf(set, sizeof set, "RELEASE SAVEPOINT mend_look; SET LOCAL lock_timeout = %d", after);
  if (look_exec(p, set) != 0) return -1;
  p->tx_standing_ms = after;
  return strcmp(found, status) == 0 ? 0 : 1;
}

void mend__pg_set_busy_wait(mend_store *s, int ms) { PG(s)->busy_ms = ms > 0 ? ms : PG_BUSY_MS; }

int mend__pg_take(mend_store *s, const char *id, const char *owner, double lease_seconds) {
  mend_pg *p = PG(s);
  if (mend__pg_begin(p) != 0 || mend__pg_lease_at_least(p, owner, lease_seconds) != 0) return -1;
  const char *v[2] = {id, owner};
  PGresult *r = mend__pg_run(p, P_TAKE, NULL, 2, v, "take run");
  if (!r) return -1;
  PQclear(r);
  mend__pg_ours_again(p, id);
  return 0;
}
