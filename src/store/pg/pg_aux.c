/*
 * pg_aux: the PostgreSQL store's second connection (aux), the loop thread's own once open:
 * opening it on the server the writer's connection reached (on a thread of its own for a
 * ticking host, whose tick must not log in), its blocking reads of committed rows, and the
 * inbox looks a ticking host sends on it without waiting and picks up at a later tick. Must
 * never: write p->err or p->server (the writer thread writes them while aux is opened or read:
 * aux's failures go to aux_err, and a caller that reports one copies it); go to a server other
 * than the writer's (a multi-host URI may list a lagging standby first); block in a look sent
 * ahead unless asked to.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

enum { LOOK_NONE, LOOK_SENT, LOOK_KEPT };

/* A look unanswered this long is given up with its connection, its runs read through the
 * batch: a server gone without a reset (a host down, a partition) would otherwise hold every
 * later look until the kernel's keepalive ends the connection, two hours by default. */
#define LOOK_STALE_S 10.0

/* The answer of a look in flight, waited for and kept: aux is free for a blocking read. */
static void keep_look(mend_pg *p) {
  if (p->look_state != LOOK_SENT) return;
  PQsetnonblocking(p->aux, 0);
  PGresult *r, *first = NULL;
  while ((r = PQgetResult(p->aux))) {
    if (!first) first = r;
    else PQclear(r);
  }
  p->look_res = first;   /* NULL: the connection went, the look failed */
  p->look_state = LOOK_KEPT;
}

/* A connection to the writer's server with every statement prepared: 0, or -1 (aux_err).
 * On the loop's thread or the opener's, never both at once (aux_opening). */
static int connect_aux(mend_pg *p, PGconn **out) {
  pg_at at;
  int known = mend__pg_writer_host(p, &at);
  PGconn *c;
  int rc = mend__pg_connect_at(p, known ? &at : NULL, p->aux_err, sizeof p->aux_err,
                               p->aux_server, sizeof p->aux_server, &c);
  if (rc == 0 && mend__pg_prepare_to(c, p->aux_err, sizeof p->aux_err, p->aux_server, 1) != 0) {
    PQfinish(c);
    rc = -1;
  }
  if (rc == 0) PQsetNoticeReceiver(c, mend__pg_quiet, NULL);
  *out = rc == 0 ? c : NULL;
  return rc;
}

/* Opened again when lost (a server restart), at most once a backoff that doubles from 0.1 s to
 * 10 s while it fails: a serving worker looks through it every poll. */
static void opened(mend_pg *p, PGconn *c) {
  p->aux = c;
  p->aux_backoff = c ? 0 : p->aux_backoff ? (p->aux_backoff * 2 > 10 ? 10 : p->aux_backoff * 2)
                                          : 0.1;
  p->aux_retry_at = c ? 0 : mend__pg_mono() + p->aux_backoff;
}

static void *open_on_thread(void *arg) {
  mend_pg *p = arg;
  prctl(PR_SET_NAME, "mend-pg-open", 0, 0, 0);   /* told from the host's threads in perf, top -H */
  PGconn *c;
  if (connect_aux(p, &c) != 0) c = NULL;
  p->aux_new = c;
  atomic_store(&p->aux_opened, 1);
  return NULL;
}

/* The opener thread's connection taken, waiting for it if wait: 1 if none is opening now. */
static int adopt(mend_pg *p, int wait) {
  if (!p->aux_opening) return 1;
  if (!wait && !atomic_load(&p->aux_opened)) return 0;
  pthread_join(p->aux_opener, NULL);
  p->aux_opening = 0;
  atomic_store(&p->aux_opened, 0);
  opened(p, p->aux_new);
  p->aux_new = NULL;
  return 1;
}

/* Open, and on the server the writer's connection is on now: after a writer that reconnected
 * elsewhere (a failover), the committed rows to read are on its new server. */
static int aux_usable(mend_pg *p) {
  if (!p->aux || PQstatus(p->aux) != CONNECTION_OK) return 0;
  pg_at at;
  if (!mend__pg_writer_host(p, &at)) return 1;
  const char *host = PQhost(p->aux), *port = PQport(p->aux), *addr = PQhostaddr(p->aux);
  return strcmp(host ? host : "", at.host) == 0 && strcmp(port ? port : "", at.port) == 0 &&
         (!at.hostaddr[0] || strcmp(addr ? addr : "", at.hostaddr) == 0);
}

/* Whatever was of the old one: a look sent on it failed with it. */
static void drop_aux(mend_pg *p) {
  if (p->look_state == LOOK_SENT) {
    p->look_state = LOOK_KEPT;
    p->look_res = NULL;
  }
  if (p->aux) PQfinish(p->aux);
  p->aux = NULL;
}

void mend__pg_aux_open_soon(mend_pg *p) {
  if (p->aux_opening || aux_usable(p)) return;
  drop_aux(p);
  if (mend__pg_mono() < p->aux_retry_at) return;
  atomic_store(&p->aux_opened, 0);
  p->aux_new = NULL;
  /* without a thread, the first use opens it where it is */
  p->aux_opening = mend_thread_start(&p->aux_opener, &p->cpus, NULL, open_on_thread, p) == 0;
}

void mend__pg_aux_close(mend_pg *p) {
  adopt(p, 1);
  if (p->aux) PQfinish(p->aux);
  p->aux = NULL;
}

int mend__pg_aux(mend_pg *p) {
  adopt(p, 1);
  if (aux_usable(p)) {
    keep_look(p);
    return 0;
  }
  drop_aux(p);
  if (mend__pg_mono() < p->aux_retry_at) return -1;
  PGconn *c;
  opened(p, connect_aux(p, &c) == 0 ? c : NULL);
  return p->aux ? 0 : -1;
}

void mend__pg_open_committed_reads(mend_store *s, int batch) {
  (void)batch;   /* the opener's thread only logs in: it takes no tick's CPU */
  mend__pg_aux_open_soon(PG(s));
}

PGresult *mend__pg_aux_read(mend_pg *p, int q, int n, const char *const *v) {
  if (mend__pg_aux(p) != 0) return NULL;
  for (int i = 0; i < n; i++)
    if (!mend__pg_text_fits_on(p->aux, v[i])) return PQmakeEmptyPGresult(p->aux, PGRES_TUPLES_OK);
  char name[16];
  snprintf(name, sizeof name, "m%d", q);
  return PQexecPrepared(p->aux, name, n, v, NULL, NULL, 0);
}

int mend__pg_cancels_requested(mend_store *s, const char *owner) {
  const char *v[1] = {owner};
  PGresult *r = mend__pg_aux_read(PG(s), P_CANCEL_REQUESTS, 1, v);
  int some = !r || PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) > 0;
  PQclear(r);   /* a connection that went is opened again at aux's next use */
  return some;
}

int mend__pg_aux_last_event(mend_pg *p, long long *seq) {
  /* Asked as run() or serving begins: a login here would hold up every short `mend run`, so
   * it starts on its thread, for the first look. */
  if (!adopt(p, 0) || !aux_usable(p)) {
    mend__pg_aux_open_soon(p);
    return -1;
  }
  PGresult *r = mend__pg_aux_read(p, P_LAST_EVENT, 0, NULL);
  int ok = r && PQresultStatus(r) == PGRES_TUPLES_OK;
  if (ok) *seq = PQntuples(r) ? atoll(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  return ok ? 0 : -1;
}

/* ---------------------------------------------------------------- looks sent ahead */

typedef struct { char *a; size_t len, cap; } text_array;

/* t as the next element of an array literal ("{...}"): 0, or -1 out of memory. */
static int array_put(text_array *x, const char *t) {
  size_t n = strlen(t), need = x->len + 2 * n + 5;
  if (need > x->cap) {
    size_t cap = x->cap ? x->cap * 2 : 1024;
    while (cap < need) cap *= 2;
    char *a = realloc(x->a, cap);
    if (!a) return -1;
    x->a = a;
    x->cap = cap;
  }
  char *o = x->a + x->len;
  *o++ = x->len ? ',' : '{';
  *o++ = '"';
  for (size_t i = 0; i < n; i++) {
    if (t[i] == '"' || t[i] == '\\') *o++ = '\\';
    *o++ = t[i];
  }
  *o++ = '"';
  x->len = (size_t)(o - x->a);
  return 0;
}

static int array_end(text_array *x) {
  if (!x->len && array_put(x, "") != 0) return -1;   /* never sent empty: n > 0 */
  x->a[x->len++] = '}';
  x->a[x->len] = 0;
  return 0;
}

int mend__pg_look_ahead(mend_store *s, int n, const char *const *run_ids,
                        const char *const *names) {
  mend_pg *p = PG(s);
  if (n <= 0 || p->look_state != LOOK_NONE) return -1;
  if (!adopt(p, 0)) return 1;   /* still logging in: not in a tick's time */
  if (!aux_usable(p)) {
    if (mend__pg_mono() < p->aux_retry_at) return -1;   /* it failed just now: read another way */
    mend__pg_aux_open_soon(p);
    if (p->aux_opening) return 1;
    if (mend__pg_aux(p) != 0) return -1;
  }
  keep_look(p);
  text_array ids = {0}, nm = {0};
  int ok = 1;
  for (int i = 0; ok && i < n; i++)
    ok = mend__pg_text_fits_on(p->aux, run_ids[i]) && mend__pg_text_fits_on(p->aux, names[i]) &&
         array_put(&ids, run_ids[i]) == 0 && array_put(&nm, names[i]) == 0;
  ok = ok && array_end(&ids) == 0 && array_end(&nm) == 0;
  char name[16];
  snprintf(name, sizeof name, "m%d", P_NEXT_EVENTS);
  const char *v[2] = {ids.a, nm.a};
  /* Non-blocking only while sending: what a blocking read does on aux is unchanged. A query
   * this small leaves in one write; what PQflush leaves is flushed at the take. */
  int sent = ok && PQsetnonblocking(p->aux, 1) == 0 &&
             PQsendQueryPrepared(p->aux, name, 2, v, NULL, NULL, 0);
  free(ids.a);
  free(nm.a);
  if (!sent) {
    if (ok) mend__pg_fail_to(p->aux_err, sizeof p->aux_err, p->aux_server, p->aux, NULL,
                             "send a look at the inboxes");
    PQsetnonblocking(p->aux, 0);
    return -1;
  }
  (void)PQflush(p->aux);   /* a failure here is the connection's: the take says so */
  p->look_state = LOOK_SENT;
  p->look_sent_at = mend__pg_mono();
  return 0;
}

int mend__pg_look_ahead_take(mend_store *s, int wait,
                             void (*fn)(void *ud, const char *run_id, const char *name,
                                        long long seq, const char *payload, const char *key),
                             void *ud) {
  mend_pg *p = PG(s);
  if (p->look_state == LOOK_NONE) return -1;
  if (p->look_state == LOOK_SENT) {
    if (!wait && (PQflush(p->aux) < 0 || !PQconsumeInput(p->aux))) {
      keep_look(p);   /* the connection went: its results say so */
    } else if (!wait && PQisBusy(p->aux)) {
      double out = mend__pg_mono() - p->look_sent_at;
      if (out < LOOK_STALE_S && aux_usable(p)) return 0;
      mend__pg_msg(p->aux_err, sizeof p->aux_err, "%s: a look at the inboxes %s", p->aux_server,
                   out < LOOK_STALE_S ? "sent before the writer moved to another server"
                                      : "unanswered for 10 s: its connection dropped");
      drop_aux(p);   /* the look failed with it */
      p->look_state = LOOK_NONE;
      return -1;
    } else {
      keep_look(p);
    }
  }
  PGresult *r = p->look_res;
  p->look_res = NULL;
  p->look_state = LOOK_NONE;
  if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
    if (r) mend__pg_fail_to(p->aux_err, sizeof p->aux_err, p->aux_server, p->aux, r,
                            "look at the inboxes");
    PQclear(r);
    return -1;   /* aux, if gone, is opened again at its next use */
  }
  for (int i = 0; i < PQntuples(r); i++) {
    const char *pl = PG_TEXT(r, i, 3);
    fn(ud, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), atoll(PQgetvalue(r, i, 2)),
       pl ? pl : "null", PG_TEXT(r, i, 4));
  }
  PQclear(r);
  return 1;
}
