/*
 * pg: the PostgreSQL store's connections, errors, opening and closing. The rest is behind
 * pg_int.h: pg_schema.c (every SQL text, the schema's creation), pg_batch.c (the write log,
 * pipelines, the writer thread), pg_ops.c (writes, engine reads, events), pg_lease.c (leases,
 * claims, the fence). Must never: put a password in a message; decide what a transition means.
 *
 * Why a writer thread and not the loop's socket: the SQLite store already hands batches to a
 * thread of its own, and the engine's contract (start_writer, hand_off, writer_busy, done
 * called from any thread) is built for that. The thread uses blocking libpq calls, but in
 * pipeline mode, so a batch is still one round trip (every statement, then COMMIT, then one
 * sync); the loop records the next batch meanwhile. Watching the socket from libuv would save
 * the thread but put libpq's state machine into the engine's loop for no fewer round trips.
 */
#include "pg_int.h"
#include "timers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void mend__pg_msg(char *buf, int len, const char *fmt, ...) {
  va_list ap;
  if (!buf || len <= 0) return;
  va_start(ap, fmt);
  vsnprintf(buf, (size_t)len, fmt, ap);
  va_end(ap);
}

/* RFC 3629's well-formed sequences, which PostgreSQL's check of UTF8 input accepts. */
static int utf8_valid(const unsigned char *t) {
  while (*t) {
    unsigned char c = *t;
    int n = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
          : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (n < 0) return 0;
    unsigned char lo = 0x80, hi = 0xBF;   /* the second byte's range */
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;        /* no UTF-16 surrogates */
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;        /* nothing past U+10FFFF */
    for (int i = 1; i <= n; i++) {
      unsigned char b = t[i];
      if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return 0;
    }
    t += 1 + n;
  }
  return 1;
}

int mend__pg_utf8(const char *t) { return utf8_valid((const unsigned char *)t); }

/* Whether connection c's server can take t as text (what it cannot is in no row). */
int mend__pg_text_fits_on(PGconn *c, const char *t) {
  if (!t) return 1;
  const char *enc = pg_encoding_to_char(PQclientEncoding(c));
  return strcmp(enc, "UTF8") != 0 || utf8_valid((const unsigned char *)t);
}

/* After the writer thread is done with the connection (it may open it again): as every read. */
int mend__pg_text_fits(mend_pg *p, const char *t) {
  if (!t) return 1;
  PGconn *aux = mend__pg_view_aux(p);   /* a view that will read there, not wait for conn */
  if (aux) return mend__pg_text_fits_on(aux, t);
  if (mend__pg_writer_wait(p) != 0 || !p->conn) return 1;   /* the read after says why */
  return mend__pg_text_fits_on(p->conn, t);
}

double mend__pg_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int mend__pg_fail_to(char *err, int errlen, const char *server, PGconn *c, const PGresult *r,
                     const char *what) {
  char cause[1024];
  const char *m = r ? PQresultErrorMessage(r) : NULL;
  if (!m || !*m) m = c ? PQerrorMessage(c) : NULL;
  mend__pg_one_line(cause, sizeof cause, m);
  if (c && PQstatus(c) == CONNECTION_BAD)
    mend__pg_msg(err, errlen, "%s: %s: connection lost: %s", server, what, cause);
  else
    mend__pg_msg(err, errlen, "%s: %s: %s", server, what, cause);
  return -1;
}

int mend__pg_fail(mend_pg *p, PGconn *c, const PGresult *r, const char *what) {
  p->lock_met = mend__pg_lock_timed_out(r);
  return mend__pg_fail_to(p->err, sizeof p->err, p->server, c, r, what);
}

int mend__pg_conflict(const PGresult *r) {
  const char *code = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  return code && strncmp(code, "40", 2) == 0;
}

int mend__pg_exec(mend_pg *p, PGconn *c, const char *sql, const char *what) {
  mend__pg_pre_forget(p, -1, NULL);
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  int ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
  if (!ok) mend__pg_fail(p, c, r, what);
  PQclear(r);
  return ok ? 0 : -1;
}

PGresult *mend__pg_run(mend_pg *p, int q, const char *sql, int n, const char *const *vals,
                       const char *what) {
  PGresult *r;
  mend__pg_pre_forget(p, q, n > 0 ? vals[0] : NULL);
  if (q >= 0) {
    char name[16];
    snprintf(name, sizeof name, "m%d", q);
    r = PQexecPrepared(p->conn, name, n, vals, NULL, NULL, 0);
  } else {
    r = PQexecParams(p->conn, sql, n, NULL, vals, NULL, NULL, 0);
  }
  ExecStatusType st = PQresultStatus(r);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
  mend__pg_fail(p, p->conn, r, what);
  const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);   /* r's: read first */
  int fatal = sev && strcmp(sev, "FATAL") == 0;
  int conflict = mend__pg_conflict(r);
  int timed_out = p->in_batch && mend__pg_lock_timed_out(r);
  if (timed_out)   /* the bound (pg_wait.c): said so */
    mend__pg_lock_told(p, what, PQresultErrorField(r, PG_DIAG_CONTEXT));
  PQclear(r);
  if (fatal || PQstatus(p->conn) != CONNECTION_OK) {
    /* the connection is gone, and the transaction with it: told once (pg_batch.c, flush) */
    p->conn_doomed = 1;
    p->conn_lost = 1;
    mend__pg_rollback(p);
    return NULL;
  }
  if ((conflict || timed_out) && p->in_batch) {
    /* The server chose this batch to end a deadlock, or a lock held it past a repair's bound:
     * rolled back, as with a lost connection, and told the same way, so that a worker reads
     * its runs again rather than stop (a repair told so fails: repair.c, repair_done). */
    p->conn_lost = 1;
    mend__pg_rollback(p);
    return NULL;
  }
  if (p->in_batch) p->batch_failed = 1;
  return NULL;
}

/* "host:port/dbname" from the connection, or from the URI when there is none. */
static void name_server(char *server, int len, PGconn *c) {
  const char *host = c ? PQhost(c) : NULL, *port = c ? PQport(c) : NULL, *db = c ? PQdb(c) : NULL;
  mend__pg_msg(server, len, "%s:%s/%s", host && *host ? host : "localhost",
               port && *port ? port : "5432", db && *db ? db : "?");
}

/* Leases are the server's durations, but a due time or a time in history is a moment every
 * worker must read alike: the engine's clock becomes the server's (timers.h) when this host's
 * is further from it than a round trip could explain. Measured on the connection that writes,
 * when it is opened (not on the side connections, which would only measure it again), halfway
 * through the round trip; left alone when it moved less than CLOCK_SLACK (a reconnect must not
 * make a clock in use jitter). */
#define CLOCK_SLACK 0.5

/* current_setting, not the pg_settings view, which builds every setting's row (ms a read) */
#define CLOCK_SQL "SELECT extract(epoch FROM clock_timestamp())::float8," \
                  " (extract(epoch FROM current_setting('deadlock_timeout')::interval)" \
                  " * 1000)::bigint"

/* CLOCK_SQL's answer r, sent at before and answered at after (mend_host_now). */
static int take_clock(mend_pg *p, PGconn *c, PGresult *r, double before, double after) {
  if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
    mend__pg_fail(p, c, r, "read the server's clock");
    return -1;
  }
  double server = strtod(PQgetvalue(r, 0, 0), NULL);
  /* A batch's try waits for a lock longer than the server waits before it looks for a
   * deadlock: in one, the server picks a victim and the other batch lands, rather than both
   * meeting the bound and trying again, perhaps in step (pg_wait.c). */
  long deadlock_ms = PQgetisnull(r, 0, 1) ? 0 : strtol(PQgetvalue(r, 0, 1), NULL, 10);
  p->write_wait_ms = deadlock_ms + 1000 > PG_WRITE_WAIT_MS && deadlock_ms < 600000
                     ? (int)deadlock_ms + 1000 : PG_WRITE_WAIT_MS;
  double offset = server - (before + after) / 2;
  if (offset < CLOCK_SLACK && offset > -CLOCK_SLACK) offset = 0;
  double now = mend_real_clock_offset_now();
  if (offset - now >= CLOCK_SLACK || now - offset >= CLOCK_SLACK) mend_real_clock_offset(offset);
  return 0;
}

/* clock: the connection that writes (mend__pg_connect), whose session's set-up also reads the
 * server's clock (take_clock), in the same round trip. */
static int connect_to(mend_pg *p, const pg_at *at, char *err, int errlen, char *server,
                      int serverlen, PGconn **out, int clock) {
  /* Earlier keywords are defaults the URI overrides; the later ones override the URI. */
  const char *keys[] = {"connect_timeout", "fallback_application_name", "dbname", "host", "port",
                        "hostaddr", NULL};
  const char *vals[] = {"10", "mend", p->conninfo, NULL, NULL, NULL, NULL};
  if (at) {
    vals[3] = at->host;
    vals[4] = at->port;
    vals[5] = at->hostaddr[0] ? at->hostaddr : NULL;
  } else {
    keys[3] = NULL;
  }
  PGconn *c = PQconnectdbParams(keys, vals, 1);
  if (!c) {
    mend__pg_msg(err, errlen, "%s: cannot connect: out of memory", server);
    return -1;
  }
  name_server(server, serverlen, c);
  if (PQstatus(c) != CONNECTION_OK) {
    char cause[1024];
    mend__pg_one_line(cause, sizeof cause, PQerrorMessage(c));
    /* libpq's own words, which say whether it was the address, the password or the database;
     * a message never repeats the password, but a malformed URI could be echoed: cut it. */
    PQconninfoOption *opts = PQconninfoParse(p->conninfo, NULL);
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
      if (strcmp(o->keyword, "password") != 0 || !o->val || !*o->val) continue;
      char *hit;
      while ((hit = strstr(cause, o->val))) memset(hit, '*', strlen(o->val));
    }
    PQconninfoFree(opts);
    mend__pg_msg(err, errlen, "%s: cannot connect: %s", server, cause);
    PQfinish(c);
    return -1;
  }
  /* One round trip: every command opens a connection, and each costs one. */
  char session[600];
  snprintf(session, sizeof session, "SET synchronous_commit = %s;"
           " SET client_min_messages = warning; %s%s", p->sync_commit ? "on" : "off",
           mend__pg_session_sql, clock ? "; " CLOCK_SQL : "");
  double before = mend_host_now();
  PGresult *r = PQexec(c, session);
  double after = mend_host_now();
  int ok = PQresultStatus(r) == (clock ? PGRES_TUPLES_OK : PGRES_COMMAND_OK);
  if (!ok) mend__pg_fail_to(err, errlen, server, c, r, "set up the session");
  else if (clock) ok = take_clock(p, c, r, before, after) == 0;
  PQclear(r);
  if (!ok) {
    PQfinish(c);
    return -1;
  }
  *out = c;
  return 0;
}

int mend__pg_connect_at(mend_pg *p, const pg_at *at, char *err, int errlen, char *server,
                        int serverlen, PGconn **out) {
  return connect_to(p, at, err, errlen, server, serverlen, out, 0);
}

int mend__pg_connect(mend_pg *p, PGconn **out) {
  return connect_to(p, NULL, p->err, sizeof p->err, p->server, sizeof p->server, out, 1);
}

/* Where conn reached, for the side connections to go to the same server: a connection string
 * may name several hosts, and the first that answers may be a standby behind the primary (or
 * a server other than the writer's, when it was down as the writer connected). */
void mend__pg_note_writer_host(mend_pg *p, PGconn *c) {
  const char *host = PQhost(c), *port = PQport(c), *addr = PQhostaddr(c);
  /* the address too, not the name alone: a name that resolves to a primary and a standby
   * could take a side connection to the standby when the primary refuses it a moment (a full
   * max_connections), libpq going on to the name's next address; none for a socket path */
  if (!host || host[0] == '/' || !addr) addr = "";
  pthread_mutex_lock(&p->at_mu);
  snprintf(p->writer_at.host, sizeof p->writer_at.host, "%s", host ? host : "");
  snprintf(p->writer_at.port, sizeof p->writer_at.port, "%s", port ? port : "");
  snprintf(p->writer_at.hostaddr, sizeof p->writer_at.hostaddr, "%s", addr);
  p->writer_at_known = host && *host;
  if (p->cancel) PQfreeCancel(p->cancel);
  p->cancel = PQgetCancel(c);
  atomic_store(&p->conn_pid, PQbackendPID(c));
  pthread_mutex_unlock(&p->at_mu);
}

/* Cancels what conn runs now (the writer thread's try, waiting for another session's lock):
 * from any thread; a connection idle meanwhile ignores it. */
void mend__pg_cancel_conn(mend_pg *p) {
  char err[256];
  pthread_mutex_lock(&p->at_mu);
  if (p->cancel) PQcancel(p->cancel, err, sizeof err);
  pthread_mutex_unlock(&p->at_mu);
}

int mend__pg_writer_host(mend_pg *p, pg_at *at) {
  pthread_mutex_lock(&p->at_mu);
  int known = p->writer_at_known;
  if (known) *at = p->writer_at;
  pthread_mutex_unlock(&p->at_mu);
  return known;
}

/* A message the server sends on an idle connection is a notice to libpq; FATAL is the server
 * saying it ends the session (a restart, pg_terminate_backend) before the socket closes. */
static void on_notice(void *arg, const PGresult *r) {
  const char *severity = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
  if (severity && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0))
    ((mend_pg *)arg)->conn_doomed = 1;
}

/* For connections whose notices nobody reads: the server's last words on an idle connection
 * (FATAL before a restart) reach libpq as a notice, and the default printer would write them
 * on stderr, outside the worker's log, which has its own line for a lost connection. */
void mend__pg_quiet(void *arg, const PGresult *r) {
  (void)arg;
  (void)r;
}

void mend__pg_watch(mend_pg *p) {
  p->conn_doomed = 0;
  PQsetNoticeReceiver(p->conn, on_notice, p);
}

void mend__pg_close(mend_store *s);
extern const mend_store_methods mend__pg_methods;

#define OPEN_PAUSE_MS 200   /* between two tries of the open */

/* The schema read (made, upgraded) and the statements prepared, each try waiting
 * PG_OPEN_TRY_MS for a table another session locked (LOCK TABLE in psql, another tool's
 * migration) or for the schema's creation lock, for at most PG_BUSY_MS in all (no try begun
 * that would end past it): then the open fails naming the table or the lock, and the session.
 * mend's sessions set lock_timeout to none (pg_wait.c), so nothing else bounds these waits. */
static int open_schema(mend_pg *p) {
  double started = mend__pg_mono();
  for (;;) {
    p->lock_met = 0;
    int rc = mend__pg_schema(p);
    if (rc != 0 && rc != MEND_STORE_BUSY) {
      rc = -1;
      if (p->lock_met) {
        char holder[300];
        mend__pg_table_holder(p->conn, holder, sizeof holder);
        mend__pg_msg(p->err, sizeof p->err, "%s: read the schema: %s", p->server, holder);
        rc = MEND_STORE_BUSY;
      }
    }
    if (rc == 0) rc = mend__pg_prepare(p, p->conn, 1);   /* sets lock_timeout back to none */
    if (rc != MEND_STORE_BUSY) return rc;
    double waited = mend__pg_mono() - started;
    if (waited * 1000 + OPEN_PAUSE_MS + PG_OPEN_TRY_MS > PG_BUSY_MS) {
      char cause[sizeof p->err];
      snprintf(cause, sizeof cause, "%s", p->err);
      mend__pg_msg(p->err, sizeof p->err, "%s (waited %.0f s: the store cannot be opened while"
                   " it is held; try again once it is gone)", cause, waited);
      return -1;
    }
    struct timespec ts = {0, OPEN_PAUSE_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
}

mend_store *mend__pg_open(const char *uri, mend_durability d, char *err, int errlen) {
  return mend__pg_open_ex(uri, d, NULL, err, errlen);
}

mend_store *mend__pg_open_ex(const char *uri, mend_durability d, int *none, char *err, int errlen) {
  mend_pg *p = calloc(1, sizeof *p);
  if (!p || !uri || !(p->conninfo = strdup(uri))) {
    mend__pg_msg(err, errlen, "%s: out of memory", "postgres");
    free(p);
    return NULL;
  }
  p->m = &mend__pg_methods;
  p->cur = &p->logs[0];
  p->open_seq = 1;
  p->sync_commit = d == MEND_DURABILITY_FULL;
  p->must_exist = none != NULL;
  if (none) *none = 0;
  mend__pg_msg(p->server, sizeof p->server, "postgres");
  pthread_mutex_init(&p->at_mu, NULL);
  pthread_mutex_init(&p->wait_mu, NULL);
  if (mend__pg_connect(p, &p->conn) == 0) {
    mend__pg_watch(p);
    mend__pg_note_writer_host(p, p->conn);
  }
  if (!p->conn || open_schema(p) != 0 ||
      mend__pg_wake_init(p) != 0) {
    mend__pg_msg(err, errlen, "%s", p->err);
    if (none) *none = p->no_schema;
    mend__pg_close((mend_store *)(void *)p);
    return NULL;
  }
  return (mend_store *)(void *)p;
}

/* While a batch waits for another session's lock on the writer thread, err is the thread's
 * (each try writes it): what is told is what holds the lock (pg_wait.c), or a view's failure
 * on aux. */
const char *mend__pg_errmsg(mend_store *s) {
  if (!s) return "no store";
  mend_pg *p = PG(s);
  if (p->view_failed) return p->view_err;
  if (atomic_load(&p->waiting) && p->w && mend__handoff_busy(p->w)) return mend__pg_lock_msg(p);
  return p->err;
}
static const char *read_errmsg(mend_store *s) { return PG(s)->aux_err; }
int mend__pg_not_found(const mend_store *s) { return PG(s)->not_found; }
int mend__pg_schema_version(mend_store *s) { return PG(s)->schema_version; }
int mend__pg_conn_lost(mend_store *s) {
  int lost = PG(s)->conn_lost;
  PG(s)->conn_lost = 0;
  return lost;
}

void mend__pg_close(mend_store *s) {
  mend_pg *p = PG(s);
  if (!p) return;
  mend__pg_stop_writer(p);
  if (p->conn && p->in_batch) mend__pg_rollback(p);
  /* Gone: its runs are for any worker to take now, not when its lease ends (as SQLite). */
  if (p->conn && p->fence_registered && PQstatus(p->conn) == CONNECTION_OK) {
    const char *v[1] = {p->fence_owner};
    PGresult *r;
    /* bounded (pg_wait.c): a workers row another session holds leaves the lease to run out */
    int ok = mend__pg_exec(p, p->conn, "BEGIN", "close") == 0 &&
             mend__pg_exec(p, p->conn, "SET LOCAL lock_timeout = " PG_TEXT_OF(PG_CLOSE_WAIT_MS),
                           "close") == 0;
    for (int i = 0; ok && i < 2; i++) {
      r = mend__pg_run(p, i == 0 ? P_FORGET_WORKER : P_RELEASE_OWNER, NULL, 1, v, "close");
      ok = r != NULL;
      PQclear(r);
    }
    const char *nv[2];
    if (ok && mend__pg_notify_args(p, nv)) {   /* the runs given back, for the others */
      ok = (r = mend__pg_run(p, -1, mend__pg_notify_sql, 2, nv, "close")) != NULL;
      PQclear(r);
    }
    if (!ok || mend__pg_exec(p, p->conn, "COMMIT", "close") != 0)
      PQclear(PQexec(p->conn, "ROLLBACK"));
  }
  if (p->conn) PQfinish(p->conn);
  mend__pg_aux_close(p);
  mend__pg_wake_free(p);
  mend__pg_pre_clear(p);
  free(p->conninfo);
  free(p->worker);
  free(p->fence_owner);
  mend_idset_clear(&p->fence_checked);
  mend_idset_clear(&p->lost);
  for (int i = 0; i < p->nlost_new; i++) free(p->lost_new[i]);
  free(p->lost_new);
  for (int i = 0; i < p->nversions; i++) {
    struct pg_version *v = &p->versions[i];
    free(v->workflow);
    free(v->version);
    free(v->source);
    free(v->step_names);
  }
  free(p->versions);
  for (int k = 0; k < 2; k++) mend__pg_log_free(&p->logs[k]);
  mend__pg_log_free(&p->tx_events);
  mend__pg_log_free(&p->carry);
  PQclear(p->look_res);
  if (p->cancel) PQfreeCancel(p->cancel);
  pthread_mutex_destroy(&p->at_mu);
  pthread_mutex_destroy(&p->wait_mu);
  free(p);
}

/* ---- the views for people (pg_view.c, pg-views' half) -------------------------------------
 * Each sees the open batch (sent first, in the open transaction) and names the server in its
 * message. Built without pg_view.c, they say so. */

#if defined(__has_include)
#if __has_include("pg_view.h")
#define MEND_PG_VIEWS 1
#include "pg_view.h"
#endif
#endif

/* The view's message, prefixed with the server's name (but "no run <id>", as SQLite's);
 * NULL through. */
static json_t *viewed(mend_pg *p, json_t *v, const char *msg) {
  if (v) return v;
  if (p->not_found) mend__pg_msg(p->err, sizeof p->err, "%s", msg);
  else mend__pg_msg(p->err, sizeof p->err, "%s: %s", p->server, msg);
  return NULL;
}

/* A view read on aux (pg_wait.c: a batch waits for another session's lock): its failure told
 * in view_err, err being the writer thread's. */
static json_t *viewed_aux(mend_pg *p, json_t *v, const char *msg) {
  if (v) return v;
  p->view_failed = 1;
  if (p->not_found) mend__pg_msg(p->view_err, sizeof p->view_err, "%s", msg);
  else mend__pg_msg(p->view_err, sizeof p->view_err, "%s: %s", p->aux_server, msg);
  return NULL;
}

#ifdef MEND_PG_VIEWS
/* C_ is the connection the view reads on: aux while a batch waits for another session's lock
 * (the committed rows, as SQLite's reader), else conn with the open batch sent first. */
#define VIEW(p, call)                                                        \
  do {                                                                       \
    char verr_[sizeof (p)->err];                                             \
    verr_[0] = 0;                                                            \
    (p)->view_failed = 0;                                                    \
    PGconn *C_ = mend__pg_view_aux(p);                                       \
    if (C_) return viewed_aux((p), call, verr_);                             \
    C_ = (p)->conn;                                                          \
    if (mend__pg_sync(p) != 0) return NULL;                                  \
    json_t *v_ = call;                                                       \
    if (!v_ && (p)->in_batch && PQtransactionStatus((p)->conn) == PQTRANS_INERROR) \
      (p)->batch_failed = 1;                                                 \
    return viewed((p), v_, verr_);                                           \
  } while (0)
#define E_ verr_, sizeof verr_
#else
#define VIEW(p, call)                                                        \
  do {                                                                       \
    return viewed((p), NULL, "this mend was built without the PostgreSQL views"); \
  } while (0)
#endif

/* What a person asks for (an id, a name from a URL) may be text the server cannot take, which
 * would fail the open batch's transaction: no row holds it, so the answer is known here. */
#define NO_SUCH_TEXT(p, t) (!mend__pg_text_fits((p), (t)))

/* An id no run has: "no run <id>", as the views say it. */
static json_t *no_run(mend_pg *p, const char *id) {
  p->not_found = 1;
  mend__pg_msg(p->err, sizeof p->err, "no run %s", id);
  return NULL;
}

static json_t *pg_run(mend_store *s, const char *id) {
  mend_pg *p = PG(s);
  p->not_found = 0;
  if (NO_SUCH_TEXT(p, id)) return no_run(p, id);
  VIEW(p, mend__pg_view_run(C_, id, E_, &p->not_found));
}
/* A run's child runs (mend status, GET /api/v1/runs/{id}): while a batch waits for another
 * session's lock, the committed rows on aux, as a run's. An id no run can have has none. */
json_t *mend__pg_children(mend_store *s, const char *parent) {
  mend_pg *p = PG(s);
  p->not_found = 0;
  if (NO_SUCH_TEXT(p, parent)) return json_array();
  VIEW(p, mend__pg_view_children(C_, parent, E_));
}
/* A run's holder as a view reads it (mend status, GET /api/v1/runs/{id}): while a batch waits
 * for another session's lock, the committed row on aux, not a wait for the writer. */
static json_t *owner_rows(mend_pg *p, const char *id) {
  VIEW(p, mend__pg_view_owner(C_, id, E_));
}
static int pg_owner_view(mend_store *s, const char *id, char *owner_out, int owner_len,
                         double *lease_left) {
  mend_pg *p = PG(s);
  p->not_found = 0;
  if (NO_SUCH_TEXT(p, id)) return 0;
  json_t *rows = owner_rows(p, id);
  if (!rows) return -1;
  json_t *row = json_array_get(rows, 0);
  if (row) {
    const char *o = json_string_value(json_object_get(row, "owner"));
    json_t *left = json_object_get(row, "lease_left");
    mend__pg_msg(owner_out, owner_len, "%s", o ? o : "");
    *lease_left = left ? json_number_value(left) : -1e9;
  }
  json_decref(rows);
  return row != NULL;
}
static json_t *pg_history(mend_store *s, const char *id) {
  mend_pg *p = PG(s);
  p->not_found = 0;
  if (NO_SUCH_TEXT(p, id)) return no_run(p, id);
  VIEW(p, mend__pg_view_history(C_, id, E_, &p->not_found));
}
static json_t *pg_history_page(mend_store *s, const char *id, long after, long limit, long tail) {
  mend_pg *p = PG(s);
  p->not_found = 0;
  if (NO_SUCH_TEXT(p, id)) return no_run(p, id);
  VIEW(p, mend__pg_view_history_page(C_, id, after, limit, tail, E_, &p->not_found));
}
static json_t *pg_dlq(mend_store *s, double after_at, const char *after_id, long limit) {
  mend_pg *p = PG(s);
  if (NO_SUCH_TEXT(p, after_id)) return json_array();
  VIEW(p, mend__pg_view_dlq(C_, after_at, after_id, limit, E_));
}
static json_t *pg_breakers(mend_store *s) {
  mend_pg *p = PG(s);
  VIEW(p, mend__pg_view_breakers(C_, E_));
}
static json_t *pg_runs(mend_store *s, const char *status, const char *workflow, int limit) {
  mend_pg *p = PG(s);
  (void)limit;
  if (NO_SUCH_TEXT(p, status) || NO_SUCH_TEXT(p, workflow)) return json_array();
  VIEW(p, mend__pg_view_runs(C_, status, workflow, limit, E_));
}
static json_t *pg_runs_where(mend_store *s, const char *status, const char *workflow,
                             double since, int attention_only, int limit) {
  mend_pg *p = PG(s);
  (void)since, (void)attention_only, (void)limit;
  if (NO_SUCH_TEXT(p, status) || NO_SUCH_TEXT(p, workflow)) return json_array();
  VIEW(p, mend__pg_view_runs_where(C_, status, workflow, since, attention_only, limit, E_));
}
static json_t *pg_audit_list(mend_store *s) {
  mend_pg *p = PG(s);
  VIEW(p, mend__pg_view_audit_list(C_, E_));
}
static json_t *pg_workflows(mend_store *s, const char *workflow) {
  mend_pg *p = PG(s);
  if (NO_SUCH_TEXT(p, workflow)) return json_array();
  VIEW(p, mend__pg_view_workflows(C_, workflow, E_));
}
static json_t *pg_inbox(mend_store *s, const char *run_id, long long after, long limit) {
  mend_pg *p = PG(s);
  if (NO_SUCH_TEXT(p, run_id)) return json_array();
  VIEW(p, mend__pg_view_inbox(C_, run_id, after, limit, E_));
}
/* A transaction of its own: what this store recorded before is committed first. */
static json_t *pg_prune(mend_store *s, double before, const char *status, int dry_run) {
  mend_pg *p = PG(s);
  (void)before, (void)status, (void)dry_run;
  if (mend__pg_commit(s) != 0) return NULL;
  VIEW(p, mend__pg_view_prune(p->conn, before, status, dry_run, E_));
}

/* ---- the table ------------------------------------------------------------------------------
 * SQLite's policies (checkpoints, the write lock's busy wait, parts of a batch, trimming the
 * log) are left out: the dispatcher answers for them. */
const mend_store_methods mend__pg_methods = {
  .name = "postgres",
  .close = mend__pg_close,
  .errmsg = mend__pg_errmsg,
  .not_found = mend__pg_not_found,
  .commit = mend__pg_commit,
  .batch_open = mend__pg_batch_open,
  .start_writer = mend__pg_start_writer,
  .set_thread_cpus = mend__pg_set_thread_cpus,
  .set_busy_wait = mend__pg_set_busy_wait,
  .hand_off = mend__pg_hand_off,
  .writer_busy = mend__pg_writer_busy,
  .batch_writes = mend__pg_batch_writes,
  .open_seq = mend__pg_open_seq,
  .durable_seq = mend__pg_durable_seq,
  .set_commit_hook = mend__pg_set_commit_hook,
  .last_history_seq = mend__pg_last_history_seq,
  .last_history = mend__pg_last_history,
  .version_script = mend__pg_version_script,
  .insert_run = mend__pg_insert_run,
  .update_run = mend__pg_update_run,
  .put_step = mend__pg_put_step,
  .update_step = mend__pg_update_step,
  .append_history = mend__pg_append_history,
  .put_breaker = mend__pg_put_breaker,
  .put_dlq = mend__pg_put_dlq,
  .find_run_key = mend__pg_find_run_key,
  .find_key_result = mend__pg_find_key_result,
  .get_breaker = mend__pg_get_breaker,
  .run = pg_run,
  .history = pg_history,
  .history_page = pg_history_page,
  .dlq = pg_dlq,
  .breakers = pg_breakers,
  .runs = pg_runs,
  .runs_where = pg_runs_where,
  .audit_list = pg_audit_list,
  .dlq_remove = mend__pg_dlq_remove,
  .set_unavailable = mend__pg_set_unavailable,
  .version_number = mend__pg_version_number,
  .move_run = mend__pg_move_run,
  .workflows = pg_workflows,
  .runs_page = mend__pg_runs_page,
  .run_counts = mend__pg_run_counts,
  .take = mend__pg_take,
  .hold_status = mend__pg_hold_status,
  .locked = mend__pg_locked,
  .request_cancel = mend__pg_request_cancel,
  .cancel_requests = mend__pg_cancel_requests,
  .cancels_requested = mend__pg_cancels_requested,
  .audit = mend__pg_audit,
  .schema_version = mend__pg_schema_version,
  .sandbox_mark = mend__pg_sandbox_mark,
  .prune = pg_prune,
  .send_event = mend__pg_send_event,
  .next_event = mend__pg_next_event,
  .next_committed_event = mend__pg_next_committed_event,
  .record_event = mend__pg_record_event,
  .open_committed_reads = mend__pg_open_committed_reads,
  .look_ahead = mend__pg_look_ahead,
  .look_ahead_take = mend__pg_look_ahead_take,
  .consume_event = mend__pg_consume_event,
  .last_event = mend__pg_last_event,
  .event_sent = mend__pg_event_sent,
  .events_after = mend__pg_events_after,
  .inbox = pg_inbox,
  .set_worker = mend__pg_set_worker,
  .claim = mend__pg_claim,
  .claimable = mend__pg_claimable,
  .renew = mend__pg_renew,
  .release = mend__pg_release,
  .lease_holders = mend__pg_lease_holders,
  .release_owner = mend__pg_release_owner,
  .set_fence = mend__pg_set_fence,
  .fence_news = mend__pg_fence_news,
  .held = mend__pg_held,
  .add_lost = mend__pg_add_lost,
  .fence_verified = mend__pg_fence_verified,
  .repairing = mend__pg_repairing,
  .owner = mend__pg_owner,
  .owner_view = pg_owner_view,
  .put_token = mend__pg_put_token,
  .token_of_attempt = mend__pg_token_of_attempt,
  .token = mend__pg_token,
  .use_token = mend__pg_use_token,
  .set_parent = mend__pg_set_parent,
  .children = mend__pg_children,
  .child_end = mend__pg_child_end,
  .reopen_run = mend__pg_reopen_run,
  .wake_fd = mend__pg_wake_fd,
  .wake_take = mend__pg_wake_take,
  .conn_lost = mend__pg_conn_lost,
  .run_image = mend__pg_run_image,
  .read_errmsg = read_errmsg,
};
