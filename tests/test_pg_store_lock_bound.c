/*
 * test_pg_store_lock_bound: while the writer thread's batch is in its first try against another
 * session's row lock (not yet marked as waiting: the mark comes once a try met its bound,
 * write_wait_ms = max(2 s, deadlock_timeout + 1 s)), a commit on the loop's thread (busy wait
 * 0.1 s) answers MEND_STORE_BUSY within its own bound, and a close (a stop) cancels the try
 * rather than wait for it. Needs MEND_TEST_PG (skipped without it).
 */
#include "check.h"
#include "store/pg/pg_int.h"

#include <mend.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *base;
static PGconn *admin;
static char conninfo[2048];

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int sql(PGconn *c, const char *q) {
  PGresult *r = PQexec(c, q);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
  if (!ok) fprintf(stderr, "test_pg_store_lock_bound: %s: %s", q, PQerrorMessage(c));
  PQclear(r);
  return ok ? 0 : -1;
}

static long long count(const char *q) {
  PGconn *c = PQconnectdb(conninfo);
  PGresult *r = PQexec(c, q);
  long long n = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) ? atoll(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  PQfinish(c);
  return n;
}

static void new_case(void) {
  char q[160], db[64];
  snprintf(db, sizeof db, "mend_rvw_%d", (int)getpid());
  snprintf(q, sizeof q, "DROP DATABASE IF EXISTS %s", db);
  sql(admin, q);
  snprintf(q, sizeof q, "CREATE DATABASE %s", db);
  sql(admin, q);
  PQconninfoOption *opts = PQconninfoParse(base, NULL);
  size_t n = 0;
  conninfo[0] = 0;
  for (PQconninfoOption *o = opts; o && o->keyword; o++) {
    const char *v = strcmp(o->keyword, "dbname") == 0 ? db : o->val;
    if (v && *v) n += (size_t)snprintf(conninfo + n, sizeof conninfo - n, "%s='%s' ", o->keyword, v);
  }
  PQconninfoFree(opts);
}

static void drop_case(void) {
  char q[160];
  snprintf(q, sizeof q, "DROP DATABASE IF EXISTS mend_rvw_%d WITH (FORCE)", (int)getpid());
  sql(admin, q);
}

static mend_run_rec run_rec(const char *id) {
  return (mend_run_rec){.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                        .status = "running", .input = "{}", .created = 1, .updated = 1,
                        .step_names = "[\"a\"]"};
}

__attribute__((unused)) static mend_history_rec hist(const char *run, long seq) {
  return (mend_history_rec){.run_id = run, .step = "a", .at = 2, .event = "step",
                            .from_status = "pending", .to_status = "running", .attempt = 1,
                            .delay = -1, .seq = seq};
}

/* A second session holding run id's row, its transaction open: its backend pid. */
static PGconn *hold(const char *id, int *pid) {
  PGconn *c = PQconnectdb(conninfo);
  char q[160];
  snprintf(q, sizeof q, "SELECT id FROM runs WHERE id = '%s' FOR UPDATE", id);
  CHECK_EQ_INT(sql(c, "SET application_name = 'holder'"), 0);
  CHECK_EQ_INT(sql(c, "BEGIN"), 0);
  CHECK_EQ_INT(sql(c, q), 0);
  *pid = PQbackendPID(c);
  return c;
}


static void test_loop_commit_during_first_try(void) {
  new_case();
  char err[1024];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  printf("write_wait_ms read at connect: %d\n", ((mend_pg *)(void *)s)->write_wait_ms);
  mend_run_rec a = run_rec("run-a"), b = run_rec("run-b");
  CHECK_EQ_INT(mend__pg_insert_run(s, &a), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &b), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_start_writer(s, NULL, NULL), 0);
  mend__pg_set_busy_wait(s, 100);   /* a loop's */
  int pid;
  PGconn *holder = hold("run-a", &pid);
  CHECK_EQ_INT(mend__pg_update_run(s, "run-a", "succeeded", NULL, 0, 3, NULL), 0);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  sleep_s(0.2);   /* the writer's first try is under way */
  CHECK(mend__pg_writer_busy(s));
  CHECK_EQ_INT(mend__pg_update_run(s, "run-b", "succeeded", NULL, 0, 3, NULL), 0);
  double t0 = mono();
  int rc = mend__pg_commit(s);   /* the loop's commit, busy wait 0.1 s */
  double took = mono() - t0;
  printf("loop's commit during the writer's first try: rc %d after %.2f s (busy wait 0.1 s)\n", rc, took);
  CHECK(took < 0.5);
  t0 = mono();
  mend__pg_close(s);   /* a stop during the next try */
  took = mono() - t0;
  printf("close during the writer's try: %.2f s\n", took);
  CHECK(took < 3);
  sql(holder, "ROLLBACK");
  PQfinish(holder);
  printf("after close: %lld runs succeeded (the batches given up)\n",
         count("SELECT count(*) FROM runs WHERE status = 'succeeded'"));
  drop_case();
}

int main(void) {
  base = getenv("MEND_TEST_PG");
  if (!base || !*base) {
    printf("test_pg_store_lock_bound: skipped: MEND_TEST_PG names no PostgreSQL server\n");
    return 0;
  }
  admin = PQconnectdb(base);
  if (PQstatus(admin) != CONNECTION_OK) {
    printf("test_pg_store_lock_bound: skipped: cannot reach MEND_TEST_PG: %s", PQerrorMessage(admin));
    PQfinish(admin);
    return 0;
  }
  sql(admin, "SET client_min_messages = warning");
  test_loop_commit_during_first_try();
  PQfinish(admin);
  return check_done("test_pg_store_lock_bound");
}
