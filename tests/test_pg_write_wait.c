/*
 * test_pg_write_wait: the PostgreSQL store's batches against another session's lock, on a real
 * server named by MEND_TEST_PG (skipped without one; a database of its own, dropped after).
 * The writer thread's batch on a run whose row a second session holds (`SELECT ... FOR
 * UPDATE`, its transaction left open): the store says it waits (mend_store_locked) naming the
 * run and the session, the views answer from the committed rows without waiting for the
 * thread, and the batch lands once when the lock goes, its writes whole and once. The same
 * batch committed on the caller's thread: MEND_STORE_BUSY, kept, committed by a later call.
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
  if (!ok) fprintf(stderr, "test_pg_write_wait: %s: %s", q, PQerrorMessage(c));
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
  snprintf(db, sizeof db, "mend_wait_%d", (int)getpid());
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
  snprintf(q, sizeof q, "DROP DATABASE IF EXISTS mend_wait_%d WITH (FORCE)", (int)getpid());
  sql(admin, q);
}

static mend_run_rec run_rec(const char *id) {
  return (mend_run_rec){.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                        .status = "running", .input = "{}", .created = 1, .updated = 1,
                        .step_names = "[\"a\"]"};
}

static mend_history_rec hist(const char *run, long seq) {
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

static void test_writer_waits(void) {
  new_case();
  char err[1024];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec a = run_rec("run-a"), b = run_rec("run-b");
  CHECK_EQ_INT(mend__pg_insert_run(s, &a), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &b), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_start_writer(s, NULL, NULL), 0);
  int pid;
  PGconn *holder = hold("run-a", &pid);
  /* a batch writing both runs: run-b's row first, then run-a's, held */
  CHECK_EQ_INT(mend__pg_update_run(s, "run-b", "succeeded", NULL, 0, 3, NULL), 0);
  mend_history_rec h = hist("run-a", 1);
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "run-a", "succeeded", NULL, 0, 3, NULL), 0);
  unsigned long seq = mend__pg_open_seq(s);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  double t0 = mono();
  while (!mend_store_locked(s) && mono() - t0 < 10) sleep_s(0.02);
  CHECK(mend_store_locked(s));
  CHECK(mend__pg_writer_busy(s));
  char want[96];
  snprintf(want, sizeof want, "run run-a is locked by session %d (holder)", pid);
  CHECK(strstr(mend_store_errmsg(s), want) != NULL);
  if (!strstr(mend_store_errmsg(s), want)) fprintf(stderr, "  message: %s\n", mend_store_errmsg(s));
  /* views answer from the committed rows, without waiting for the thread */
  t0 = mono();
  json_t *run = mend_store_run(s, "run-b");
  CHECK(run != NULL);
  CHECK_STR(json_string_value(json_object_get(run, "status")), "running");
  json_decref(run);
  json_t *hl = mend_store_history(s, "run-a");
  CHECK(hl != NULL && json_array_size(hl) == 0);
  json_decref(hl);
  CHECK(mono() - t0 < 1);
  CHECK(mend__pg_writer_busy(s));   /* still waiting: nothing let go */
  CHECK(mend__pg_durable_seq(s) < seq);
  sleep_s(2.5);   /* another try */
  CHECK_EQ_INT(sql(holder, "COMMIT"), 0);
  PQfinish(holder);
  t0 = mono();
  while (mend__pg_writer_busy(s) && mono() - t0 < 10) sleep_s(0.02);
  CHECK(!mend__pg_writer_busy(s));
  CHECK(mend__pg_durable_seq(s) >= seq);
  CHECK(!mend_store_locked(s));
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'succeeded'"), 2);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'run-a'"), 1);
  mend__pg_close(s);
  drop_case();
}

/* Without the writer thread: commit says BUSY and keeps the batch; a later commit lands it. */
static void test_commit_kept(void) {
  new_case();
  char err[1024];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec a = run_rec("run-a");
  CHECK_EQ_INT(mend__pg_insert_run(s, &a), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  int pid;
  PGconn *holder = hold("run-a", &pid);
  mend_history_rec h = hist("run-a", 1);
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "run-a", "succeeded", NULL, 0, 3, NULL), 0);
  double t0 = mono();
  CHECK_EQ_INT(mend__pg_commit(s), MEND_STORE_BUSY);
  CHECK(mono() - t0 < PG_WRITE_WAIT_MS / 1000.0 + 2);
  CHECK(mend_store_locked(s));
  CHECK(strstr(mend_store_errmsg(s), "run run-a is locked by session") != NULL);
  json_t *run = mend_store_run(s, "run-a");   /* the committed row, at once */
  CHECK(run != NULL);
  CHECK_STR(json_string_value(json_object_get(run, "status")), "running");
  json_decref(run);
  CHECK_EQ_INT(sql(holder, "COMMIT"), 0);
  PQfinish(holder);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK(!mend_store_locked(s));
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'succeeded'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'run-a'"), 1);
  mend__pg_close(s);
  drop_case();
}

int main(void) {
  base = getenv("MEND_TEST_PG");
  if (!base || !*base) {
    printf("test_pg_write_wait: skipped: MEND_TEST_PG names no PostgreSQL server\n");
    return 0;
  }
  admin = PQconnectdb(base);
  if (PQstatus(admin) != CONNECTION_OK) {
    printf("test_pg_write_wait: skipped: cannot reach MEND_TEST_PG: %s", PQerrorMessage(admin));
    PQfinish(admin);
    return 0;
  }
  sql(admin, "SET client_min_messages = warning");
  test_writer_waits();
  test_commit_kept();
  PQfinish(admin);
  return check_done("test_pg_write_wait");
}
