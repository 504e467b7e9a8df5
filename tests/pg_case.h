/*
 * pg_case: what the C tests of the PostgreSQL store share (test_pg_store_*): the server named
 * by MEND_TEST_PG (a libpq URI or conninfo of a role that may create databases), a database of
 * its own for each case (new_case, dropped by drop_case), the store opened on it, SQL run and
 * counted on a connection of the test's own, a row held by another session, and the run and
 * history records the cases write. Included after check.h. Must never: hold a case's own
 * checks (those of its set-up only: a row held).
 */
#ifndef MEND_PG_CASE_H
#define MEND_PG_CASE_H

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/pg/pg_int.h"

static const char *base;     /* MEND_TEST_PG */
static PGconn *admin;        /* to create and drop the cases' databases */
static char conninfo[2048];  /* the current case's database */
static int ncase;

static inline void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Seconds on the monotonic clock, for a bound on how long a call took. */
static inline double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs q on c: 0, or -1 saying why on stderr. */
static inline int sql(PGconn *c, const char *q) {
  PGresult *r = PQexec(c, q);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
  if (!ok) fprintf(stderr, "pg_case: %s: %s", q, PQerrorMessage(c));
  PQclear(r);
  return ok ? 0 : -1;
}

/* base's parameters with dbname (and, if given, password) replaced, as a conninfo string. */
static inline void conninfo_for(char *out, size_t len, const char *dbname, const char *password) {
  PQconninfoOption *opts = PQconninfoParse(base, NULL);
  size_t n = 0;
  out[0] = 0;
  for (PQconninfoOption *o = opts; o && o->keyword; o++) {
    const char *v = o->val;
    if (strcmp(o->keyword, "dbname") == 0) v = dbname;
    if (strcmp(o->keyword, "password") == 0 && password) v = password;
    if (!v || !*v) continue;
    n += (size_t)snprintf(out + n, len - n, "%s='%s' ", o->keyword, v);
  }
  if (password && !strstr(out, "password=")) snprintf(out + n, len - n, "password='%s'", password);
  PQconninfoFree(opts);
}

static inline void new_case(void) {
  char q[128], db[64];
  snprintf(db, sizeof db, "mend_test_%d_%d", (int)getpid(), ++ncase);
  snprintf(q, sizeof q, "DROP DATABASE IF EXISTS %s", db);
  sql(admin, q);
  snprintf(q, sizeof q, "CREATE DATABASE %s", db);
  sql(admin, q);
  conninfo_for(conninfo, sizeof conninfo, db, NULL);
}

static inline void drop_case(void) {
  char q[160];
  snprintf(q, sizeof q, "DROP DATABASE IF EXISTS mend_test_%d_%d WITH (FORCE)", (int)getpid(),
           ncase);
  sql(admin, q);
}

static inline mend_store *open_store(void) {
  char err[1024];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  if (!s) fprintf(stderr, "open: %s\n", err);
  return s;
}

static inline PGconn *raw(void) { return PQconnectdb(conninfo); }

static inline long long count(const char *q) {
  PGconn *c = raw();
  PGresult *r = PQexec(c, q);
  long long n =
      PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) ? atoll(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  PQfinish(c);
  return n;
}

/* How many sessions wait for a lock of `locktype`, once one does (10 s at most). */
static inline long long lock_waiters(const char *locktype) {
  char q[200];
  snprintf(q, sizeof q, "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = '%s'",
           locktype);
  long long waiting = 0;
  for (int i = 0; i < 1000 && waiting < 1; i++) {
    waiting = count(q);
    if (waiting < 1) sleep_s(0.01);
  }
  return waiting;
}

static inline mend_run_rec run_rec(const char *id, const char *owner) {
  return (mend_run_rec){.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                        .status = "running", .input = "{}", .created = 1, .updated = 1,
                        .owner = owner, .step_names = "[\"a\"]"};
}

static inline mend_history_rec hist(const char *run, long seq) {
  return (mend_history_rec){.run_id = run, .step = "a", .at = 2, .event = "step",
                            .from_status = "pending", .to_status = "running", .attempt = 1,
                            .delay = -1, .seq = seq};
}

/* A second session (application_name holder) holding run id's row (`SELECT ... FOR UPDATE`),
 * its transaction left open for the case to end: the connection, its backend pid in *pid. */
static inline PGconn *hold(const char *id, int *pid) {
  PGconn *c = PQconnectdb(conninfo);
  char q[160];
  snprintf(q, sizeof q, "SELECT id FROM runs WHERE id = '%s' FOR UPDATE", id);
  CHECK_EQ_INT(sql(c, "SET application_name = 'holder'"), 0);
  CHECK_EQ_INT(sql(c, "BEGIN"), 0);
  CHECK_EQ_INT(sql(c, q), 0);
  *pid = PQbackendPID(c);
  return c;
}

/* Ends every other session on the case's database, and waits until they are gone. */
static inline void terminate_others(void) {
  PGconn *c = raw();
  sql(c, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE"
         " datname = current_database() AND pid <> pg_backend_pid()");
  PQfinish(c);
}

/* An event callback that counts the events it hears (an int at ud). */
static inline void on_event(void *ud, const char *run_id) {
  (void)run_id;
  (*(int *)ud)++;
}

/* Connects to MEND_TEST_PG's server; 0 (the program skips, saying so) without one. */
static inline int pg_case_begin(const char *suite) {
  base = getenv("MEND_TEST_PG");
  if (!base || !*base) {
    printf("%s: skipped: MEND_TEST_PG names no PostgreSQL server"
           " (a libpq URI, e.g. postgresql://postgres@localhost:5432/postgres)\n", suite);
    return 0;
  }
  admin = PQconnectdb(base);
  if (PQstatus(admin) != CONNECTION_OK) {
    printf("%s: skipped: cannot reach MEND_TEST_PG: %s", suite, PQerrorMessage(admin));
    PQfinish(admin);
    return 0;
  }
  sql(admin, "SET client_min_messages = warning");
  return 1;
}

/* Closes the server's connection and says how the program's checks went. */
static inline int pg_case_end(const char *suite) {
  PQfinish(admin);
  return check_done(suite);
}

#endif
