/*
 * pg_notify: wake-ups between workers through LISTEN/NOTIFY. Owns the channel's name (one per
 * schema, so that stores in different schemas of one database do not wake each other), the
 * NOTIFY a committing batch sends when it made work due for others or sent an event (at most
 * one a batch, inside its transaction: PostgreSQL delivers it only if the COMMIT succeeds), and
 * the listening connection whose socket the engine's loop watches. Must never: be the source of
 * truth (a notify is a hint to look now; the poll still finds everything, notifies or not);
 * block the loop for long (the listening connection is opened again at most once a backoff).
 *
 * Why a connection of its own: `conn` belongs to the writer thread while it commits, and a
 * connection in a transaction or pipeline cannot be read for notifies by another thread.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pg_wake {
  char channel[64];     /* PostgreSQL cuts identifiers at 63 bytes */
  char tag[48];         /* this store's payload: its own notifies wake nobody here */
  PGconn *listen;
  int dead;             /* its socket said it is gone: closed at the next wake_fd */
  double retry_at, backoff;
};

/* The channel is "mend_" and the schema's name; identifiers are cut at NAMEDATALEN - 1. */
int mend__pg_wake_init(mend_pg *p) {
  struct pg_wake *w = calloc(1, sizeof *w);
  if (!w) {
    mend__pg_msg(p->err, sizeof p->err, "%s: out of memory", p->server);
    return -1;
  }
  /* the name read with the schema at open (pg_schema.c): no round trip of its own; cut
   * between characters, not inside one (pg_notify refuses text that is not UTF-8) */
  size_t n = strnlen(p->schema_name, 58);
  while (n > 0 && ((unsigned char)p->schema_name[n] & 0xC0) == 0x80) n--;
  snprintf(w->channel, sizeof w->channel, "mend_%.*s", (int)n, p->schema_name);
  snprintf(w->tag, sizeof w->tag, "%ld.%p", (long)getpid(), (void *)p);
  p->wake = w;
  return 0;
}

void mend__pg_wake_free(mend_pg *p) {
  if (!p->wake) return;
  if (p->wake->listen) PQfinish(p->wake->listen);
  free(p->wake);
  p->wake = NULL;
}

/* On the connection that commits, before COMMIT: "pg_notify" takes its channel as text, so the
 * schema's name needs no quoting here. */
const char *const mend__pg_notify_sql = "SELECT pg_notify($1, $2)";

int mend__pg_notify_args(const mend_pg *p, const char *v[2]) {
  if (!p->wake) return 0;
  v[0] = p->wake->channel;
  v[1] = p->wake->tag;
  return 1;
}

/* ---- listening ------------------------------------------------------------------------- */

static void drop_listen(struct pg_wake *w) {
  if (w->listen) PQfinish(w->listen);
  w->listen = NULL;
  w->dead = 0;
}

/* The socket of the listening connection, opened (with LISTEN) if need be, or -1 while it
 * cannot be (the next try after a backoff that doubles from 0.1 s to 10 s). *opened says that
 * it was opened just now: notifies sent before are lost, so the caller looks once more. */
int mend__pg_wake_fd(mend_store *s, int *opened) {
  mend_pg *p = PG(s);
  struct pg_wake *w = p->wake;
  *opened = 0;
  if (!w) return -1;
  if (w->listen && !w->dead && PQstatus(w->listen) == CONNECTION_OK) return PQsocket(w->listen);
  drop_listen(w);
  double now = mend__pg_mono();
  if (now < w->retry_at) return -1;
  /* Its failures are its own (p->err is the writer thread's), and NOTIFY reaches only the
   * listeners of the server it is sent on: the writer's (pg_aux.c says why it is named). */
  char err[512], server[300];
  pg_at at;
  int known = mend__pg_writer_host(p, &at);
  PGconn *c = NULL;
  int rc = mend__pg_connect_at(p, known ? &at : NULL, err, sizeof err, server, sizeof server, &c);
  if (rc == 0) {
    char *ident = PQescapeIdentifier(c, w->channel, strlen(w->channel));
    char sql[160];
    snprintf(sql, sizeof sql, "LISTEN %s", ident ? ident : "\"mend\"");
    PQfreemem(ident);
    PGresult *r = ident ? PQexec(c, sql) : NULL;
    rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : -1;
    PQclear(r);
    if (rc == 0 && PQsetnonblocking(c, 1) != 0) rc = -1;
    if (rc == 0) PQsetNoticeReceiver(c, mend__pg_quiet, NULL);
    if (rc != 0) PQfinish(c);
  }
  if (rc != 0) {
    w->backoff = w->backoff ? (w->backoff * 2 > 10 ? 10 : w->backoff * 2) : 0.1;
    w->retry_at = now + w->backoff;
    return -1;
  }
  w->listen = c;
  w->backoff = w->retry_at = 0;
  *opened = 1;
  return PQsocket(c);
}

/* What the socket brought: 1 if another store sent a wake-up, 0 if not, -1 if the connection
 * is gone (the caller stops watching its socket, then asks wake_fd for a new one, which
 * closes this one). */
int mend__pg_wake_take(mend_store *s) {
  struct pg_wake *w = PG(s)->wake;
  if (!w || !w->listen) return -1;
  if (!PQconsumeInput(w->listen) || PQstatus(w->listen) != CONNECTION_OK) {
    w->dead = 1;
    return -1;
  }
  int woken = 0;
  PGnotify *n;
  while ((n = PQnotifies(w->listen))) {
    if (!n->extra || strcmp(n->extra, w->tag) != 0) woken = 1;
    PQfreemem(n);
  }
  return woken;
}
