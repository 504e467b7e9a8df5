/*
 * pg_mark: the PostgreSQL store's sandbox mark (meta.sandbox, schema 7; store.h: sandbox_mark),
 * read and set on a connection of its own that commits at once: the store's connections are
 * the writer's and its batches', which a statement of another kind must not enter; on the
 * server the writer's connection reached (pg_aux.c says why: a multi-host conninfo may list a
 * standby, lagging or read-only). Called as an engine opens and as one loads a workflow's text
 * from the store, just after a read that waited for the writer (p->err is free). A read goes
 * on the side connection of committed reads when it is there (pg_aux.c: the same server), so
 * that loading many stored versions logs in no session each; the first read, the engine's as it
 * opens, is the one made with the schema's read a moment before on the writer's connection
 * (pg_schema.c), so that an open logs in one session, not two. Must never: set the mark off but
 * for the host's `mend db trust` (set -1); run on the step path; leave a connection of its own
 * open.
 */
#include "pg_int.h"

#include <string.h>

/* The mark read on the side connection: 1 on, 0 off, -1 not read there (asked anew aside). */
static int read_on_aux(mend_pg *p) {
  if (mend__pg_aux(p) != 0) return -1;
  PGresult *r = PQexec(p->aux, "SELECT value FROM meta WHERE key = 'sandbox'");
  int rc = PQresultStatus(r) != PGRES_TUPLES_OK ? -1
           : PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "on") == 0;
  PQclear(r);
  return rc;
}

int mend__pg_sandbox_mark(mend_store *s, int set) {
  mend_pg *p = PG(s);
  int read_at_open = p->mark_read;
  p->mark_read = 0;   /* once: a later read is of a mark another process may have set since */
  if (!set && read_at_open) return p->mark_on;
  if (!set) {
    int on = read_on_aux(p);
    if (on >= 0) return on;
  }
  char server[300];
  PGconn *c = NULL;
  pg_at at;
  int known = mend__pg_writer_host(p, &at);
  if (mend__pg_connect_at(p, known ? &at : NULL, p->err, sizeof p->err, server, sizeof server,
                          &c) != 0)
    return -1;
  const char *sql = set > 0 ? "UPDATE meta SET value = 'on' WHERE key = 'sandbox'"
                    : set < 0 ? "UPDATE meta SET value = 'off' WHERE key = 'sandbox'"
                              : "SELECT value FROM meta WHERE key = 'sandbox'";
  PGresult *r = PQexec(c, sql);
  int st = PQresultStatus(r), rc;
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    mend__pg_fail_to(p->err, sizeof p->err, server, c, r,
                     set > 0   ? "set the sandbox mark"
                     : set < 0 ? "clear the sandbox mark"
                               : "read the sandbox mark");
    rc = -1;
  } else if (set) {
    rc = set > 0;
  } else {
    rc = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "on") == 0;
  }
  PQclear(r);
  PQfinish(c);
  return rc;
}
