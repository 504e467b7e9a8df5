/*
 * test_pg_store: the PostgreSQL store against a real server, named by MEND_TEST_PG (a libpq
 * URI or conninfo of a role that may create databases); skipped, saying so, without one. Each
 * case gets a database of its own, dropped after. Covers: errors naming the server (unreachable,
 * wrong password never repeated, someone else's database, a newer schema), two stores creating
 * the schema at once, reading the open batch, commit and the batch numbers, the writer thread,
 * a failed write failing its whole batch, claims and leases on the server's clock, the fence
 * (a stalled worker's writes to a run another took are dropped and reported), a connection
 * killed between batches (opened again, nothing lost) and mid-batch (not acknowledged,
 * nothing written), events, completion tokens and child runs (a child's end fenced with the
 * child), the upgrade of a database of schema 1, a claim's runs' images read together, and
 * the CPUs the store's threads run on (thread_cpus).
 */
#include "check.h"
#include "store/pg/pg_int.h"
#include "image_check.h"

#include <mend.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *base;     /* MEND_TEST_PG */
static PGconn *admin;        /* to create and drop the cases' databases */
static char conninfo[2048];  /* the current case's database */
static int ncase;

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void sql(PGconn *c, const char *q) {
  PGresult *r = PQexec(c, q);
  if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
    fprintf(stderr, "test_pg_store: %s: %s", q, PQerrorMessage(c));
  PQclear(r);
}

/* base's parameters with dbname (and, if given, password) replaced, as a conninfo string. */
static void conninfo_for(char *out, size_t len, const char *dbname, const char *password) {
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

static void new_case(void) {
  char q[128], db[64];
  snprintf(db, sizeof db, "mend_test_%d_%d", (int)getpid(), ++ncase);
  snprintf(q, sizeof q, "DROP DATABASE IF EXISTS %s", db);
  sql(admin, q);
  snprintf(q, sizeof q, "CREATE DATABASE %s", db);
  sql(admin, q);
  conninfo_for(conninfo, sizeof conninfo, db, NULL);
}

static void drop_case(void) {
  char q[160];
  snprintf(q, sizeof q, "DROP DATABASE IF EXISTS mend_test_%d_%d WITH (FORCE)", (int)getpid(), ncase);
  sql(admin, q);
}

static mend_store *open_store(void) {
  char err[1024];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  if (!s) fprintf(stderr, "open: %s\n", err);
  return s;
}

static PGconn *raw(void) { return PQconnectdb(conninfo); }

static long long count(const char *q) {
  PGconn *c = raw();
  PGresult *r = PQexec(c, q);
  long long n = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) ? atoll(PQgetvalue(r, 0, 0)) : -1;
  PQclear(r);
  PQfinish(c);
  return n;
}

/* How many sessions wait for a lock of `locktype`, once one does (10 s at most). */
static long long lock_waiters(const char *locktype) {
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

static mend_run_rec run_rec(const char *id, const char *owner) {
  return (mend_run_rec){.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                        .status = "running", .input = "{}", .created = 1, .updated = 1,
                        .owner = owner, .step_names = "[\"a\"]"};
}

static mend_history_rec hist(const char *run, long seq) {
  return (mend_history_rec){.run_id = run, .step = "a", .at = 2, .event = "step",
                            .from_status = "pending", .to_status = "running", .attempt = 1,
                            .delay = -1, .seq = seq};
}

/* ---- cases -------------------------------------------------------------------------------- */

static void test_errors(void) {
  char err[1024], ci[2048];
  /* unreachable: nothing listens on port 1 */
  mend_store *s = mend__pg_open("postgresql://127.0.0.1:1/nowhere?connect_timeout=3",
                                MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "127.0.0.1:1/nowhere") != NULL);
  CHECK(strstr(err, "cannot connect") != NULL);

  /* through the storage interface: a postgres:// name is PostgreSQL's */
  s = mend_store_open("postgres://127.0.0.1:1/elsewhere?connect_timeout=3", MEND_DURABILITY_FULL,
                      err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "127.0.0.1:1/elsewhere: cannot connect") != NULL);

  new_case();
  /* a wrong password: named as such, never repeated (only over TCP with a password method) */
  conninfo_for(ci, sizeof ci, "postgres", "wrong-Pa55word");
  s = mend__pg_open(ci, MEND_DURABILITY_FULL, err, sizeof err);
  if (s) {
    printf("  (the server trusts this connection: no password check)\n");
    mend__pg_close(s);
  } else {
    CHECK(strstr(err, "wrong-Pa55word") == NULL);
    CHECK(strstr(err, "password") != NULL);
  }

  /* someone else's database */
  PGconn *c = raw();
  sql(c, "CREATE TABLE orders(id int)");
  PQfinish(c);
  s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "not a mend database") != NULL);
  CHECK(strstr(err, "mend_test_") != NULL);   /* names the database */
  drop_case();

  /* a newer schema */
  new_case();
  s = open_store();
  CHECK(s != NULL);
  if (s) CHECK_STR(MEND_STORE_M(s)->name, "postgres");
  mend__pg_close(s);
  c = raw();
  sql(c, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  PQfinish(c);
  s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "schema version 99 is newer than this mend") != NULL);
  /* a version no mend wrote is not called newer, nor migrated from */
  static const char *const odd[] = {"0", "-3", "six", ""};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    char q[160];
    c = raw();
    snprintf(q, sizeof q, "UPDATE meta SET value = '%s' WHERE key = 'schema_version'", odd[i]);
    sql(c, q);
    PQfinish(c);
    s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
    CHECK(s == NULL);
    CHECK(strstr(err, "is not a version") != NULL && strstr(err, "newer") == NULL);
  }
  drop_case();
}

static void *open_in_thread(void *arg) {
  char err[1024];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  if (!s) fprintf(stderr, "open in thread: %s\n", err);
  *(int *)arg = s != NULL;
  mend__pg_close(s);
  return NULL;
}

static atomic_int opened = -1;
static void *open_flagged(void *arg) {
  int ok = 0;
  open_in_thread(&ok);
  atomic_store(&opened, ok);
  return arg;
}

static void test_schema_race(void) {
  new_case();
  pthread_t t[4];
  int ok[4] = {0};
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, open_in_thread, &ok[i]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) CHECK(ok[i]);
  CHECK_EQ_INT(count("SELECT value::int FROM meta WHERE key = 'schema_version'"),
               MEND_PG_SCHEMA_VERSION);
  /* A current schema is only read: an open does not queue behind another holding the schema
   * lock (as every `mend start` would behind the others). */
  PGconn *holder = raw();
  PQclear(PQexec(holder, "SELECT pg_advisory_lock(x'4d454e44'::int)"));
  pthread_t u;
  pthread_create(&u, NULL, open_flagged, NULL);
  for (int i = 0; i < 500 && atomic_load(&opened) < 0; i++) sleep_s(0.01);
  CHECK_EQ_INT(atomic_load(&opened), 1);
  PQclear(PQexec(holder, "SELECT pg_advisory_unlock(x'4d454e44'::int)"));
  pthread_join(u, NULL);
  PQfinish(holder);
  drop_case();
}

static void test_batches(void) {
  new_case();
  mend_store *s = open_store(), *other = open_store();
  if (!s || !other) return;
  mend__pg_set_worker(s, "w1");
  unsigned long seq = mend__pg_open_seq(s);
  mend_run_rec r = run_rec("r1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  mend_history_rec h = hist("r1", 1);
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  h.seq = 2;
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  /* read your own writes: the open batch */
  double at;
  CHECK_EQ_INT(mend__pg_last_history(s, "r1", &at), 2);
  CHECK_NEAR(at, 2, 1e-9);
  /* and nobody else's before the commit */
  CHECK_EQ_INT(mend__pg_last_history(other, "r1", NULL), 0);
  CHECK_EQ_INT(mend__pg_commit(other), 0);
  CHECK(mend__pg_durable_seq(s) < seq);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK(mend__pg_durable_seq(s) >= seq);
  CHECK_EQ_INT(mend__pg_last_history(other, "r1", NULL), 2);
  CHECK_EQ_INT(mend__pg_commit(other), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE worker = 'w1'"), 2);
  /* a history number taken: the next free one */
  h.seq = 2;
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT max(seq) FROM history WHERE run_id = 'r1'"), 3);
  /* a batch's numbered rows are sent together, as arrays: text kept as written (quotes,
   * backslashes, commas, braces, the word NULL), NULL kept NULL */
  mend_history_rec odd = hist("r1", 4);
  odd.step = NULL;
  odd.detail = "{\"a\":\"b\\\\c, d\"} NULL \"";
  CHECK_EQ_INT(mend__pg_append_history(s, &odd), 0);
  h.seq = 5;
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'r1' AND seq = 4 AND step IS NULL"
                     " AND error IS NULL AND detail = '{\"a\":\"b\\\\c, d\"} NULL \"'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'r1' AND seq = 5 AND step = 'a'"), 1);
  /* a number among them taken meanwhile: each renumbered as it would be on its own, in order */
  CHECK_EQ_INT(count("INSERT INTO history(run_id, seq, event) VALUES ('r1', 6, 'note') RETURNING seq"), 6);
  h.seq = 6;
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  h.seq = 7;
  h.step = "b";
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  h.step = "a";
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'r1'"), 8);
  CHECK_EQ_INT(count("SELECT seq FROM history WHERE run_id = 'r1' AND step = 'b'"), 8);

  /* a run key: taken is 1, at once */
  mend_run_rec k = run_rec("r2", NULL);
  k.run_key = "key-1";
  CHECK_EQ_INT(mend__pg_insert_run(s, &k), 0);
  k.id = "r3";
  CHECK_EQ_INT(mend__pg_insert_run(s, &k), 1);
  char id[64];
  CHECK_EQ_INT(mend__pg_find_run_key(s, "key-1", id, sizeof id), 1);
  CHECK_STR(id, "r2");
  CHECK_EQ_INT(mend__pg_commit(s), 0);

  /* steps, the custom key's result, breakers */
  mend_step_rec st = {.run_id = "r1", .idx = 0, .name = "a", .status = "succeeded",
                      .attempts = 1, .idem_key = "card-7", .custom_key = 1,
                      .result = "{\"ok\":true}", .due = -1, .last_delay = -1, .updated = 3};
  CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
  char *res = NULL, owner[64];
  CHECK_EQ_INT(mend__pg_find_key_result(s, "card-7", &res, owner, sizeof owner), 1);
  CHECK_STR(res, "{\"ok\":true}");
  free(res);
  mend_breaker b = {.state = MEND_BREAKER_OPEN, .failures = 3, .opened_at = 10, .open_until = 40};
  CHECK_EQ_INT(mend__pg_put_breaker(s, "payments", &b, 11), 0);
  mend_breaker got;
  CHECK_EQ_INT(mend__pg_get_breaker(s, "payments", &got), 1);
  CHECK_EQ_INT(got.state, MEND_BREAKER_OPEN);
  CHECK_EQ_INT(got.failures, 3);
  CHECK_NEAR(got.open_until, 40, 1e-9);
  CHECK_EQ_INT(mend__pg_commit(s), 0);

  /* A batch's step puts go together (pg_arrays.c), and leave what one put after another
   * leaves: a step put twice keeps the last; a run whose steps are also updated in the batch
   * has its puts in their place, before the update. Text kept as written, NULL as NULL. */
  mend_step_rec p1 = {.run_id = "r1", .idx = 1, .name = "b", .status = "running", .attempts = 1,
                      .due = -1, .last_delay = -1, .updated = 4};
  CHECK_EQ_INT(mend__pg_put_step(s, &p1), 0);
  {
    /* The engine's own history rows and step puts are what the arrays take: a record whose
     * values no longer match the arrays' columns would go alone, unseen but for the cost. */
    mend_history_rec hn = hist("r1", 9);
    hn.error = "retryable: busy";
    hn.error_kind = "retryable";
    CHECK_EQ_INT(mend__pg_append_history(s, &hn), 0);
    mend_run_rec nr = run_rec("r4", NULL);
    CHECK_EQ_INT(mend__pg_insert_run(s, &nr), 0);
    CHECK_EQ_INT(mend__pg_update_run(s, "r2", "running", "x", 1, 4, "why"), 0);
    mend_pg *pg = PG(s);
    pg_batch_arrays ar;
    CHECK_EQ_INT(mend__pg_arrays_plan(&ar, pg->cur, 1), 0);
    CHECK_EQ_INT(pg->cur->nrec, 4);
    for (int k = 0; k < 4; k++) CHECK_EQ_INT(mend__pg_arrays_take(&ar, pg->cur, k), 1);
    CHECK_EQ_INT(ar.steps.n, 1);
    CHECK_EQ_INT(ar.hist.n, 1);
    CHECK_EQ_INT(ar.runs.n, 1);
    CHECK_EQ_INT(ar.run_updates.n, 1);
    mend__pg_arrays_free(&ar);
  }
  p1.status = "succeeded";
  p1.result = "{\"q\":\"a\\\\b, {c}\"}";
  CHECK_EQ_INT(mend__pg_put_step(s, &p1), 0);
  mend_step_rec p2 = {.run_id = "r2", .idx = 0, .name = "a", .status = "running", .attempts = 1,
                      .due = -1, .last_delay = -1, .updated = 4};
  CHECK_EQ_INT(mend__pg_put_step(s, &p2), 0);
  p2.status = "failed";
  p2.error = "boom";
  p2.error_kind = "fatal";
  CHECK_EQ_INT(mend__pg_update_step(s, &p2), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'r1' AND idx = 1 AND status ="
                     " 'succeeded' AND result = '{\"q\":\"a\\\\b, {c}\"}' AND error IS NULL"
                     " AND due IS NULL"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'r2' AND idx = 0 AND status ="
                     " 'failed' AND error_kind = 'fatal'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r4'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r2' AND error = 'x' AND reason = 'why'"), 1);

  /* a write that changes nothing fails its whole batch, and nothing of it is written */
  CHECK_EQ_INT(mend__pg_update_run(s, "r1", "succeeded", NULL, 0, 5, NULL), 0);
  mend__pg_update_run(s, "no-such-run", "succeeded", NULL, 0, 5, NULL);
  CHECK(mend__pg_commit(s) != 0);
  CHECK(strstr(mend__pg_errmsg(s), "no run no-such-run") != NULL);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r1' AND status = 'running'"), 1);
  /* the next batch is a batch of its own */
  CHECK_EQ_INT(mend__pg_update_run(s, "r1", "succeeded", NULL, 0, 5, NULL), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r1' AND status = 'succeeded'"), 1);
  mend__pg_close(other);
  mend__pg_close(s);
  drop_case();
}

/* Steps the engine knows to have no row yet (new_row) go by plain insert, not an upsert, and
 * leave what the upsert leaves; one that has a row after all (the engine wrong) is put over it,
 * the batch sent again without the plain insert, never failed: from the transaction's start,
 * or from the savepoint of a flush in an open transaction, the writes before it kept. */
/* A step the engine took for new has a row, in a batch that began after the worker's lease
 * ran out: the renewal the first try made went with its rollback, so the retry must renew
 * again rather than trust it (it broke the batch, and the engine, with "lease ... ended"). */
static void test_new_steps_late(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend__pg_set_fence(s, "a", 1);
  mend_run_rec r = run_rec("late1", "a");
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  mend_step_rec st = {.run_id = "late1", .idx = 0, .name = "a", .status = "running",
                      .attempts = 1, .due = -1, .last_delay = -1, .updated = 1, .new_row = 1};
  CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  sleep_s(1.5);   /* the lease (1 s) ran out, here and on the server */
  st.status = "succeeded";
  st.updated = 2;   /* new_row still 1: the engine wrong */
  CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
  mend_history_rec h = hist("late1", 1);   /* a batch of one write sends it alone */
  mend__pg_append_history(s, &h);
  long inserted = PG(s)->steps_inserted;
  int rc = mend__pg_commit(s);
  CHECK_EQ_INT(PG(s)->steps_inserted - inserted, 1);   /* tried, then put */
  if (rc) fprintf(stderr, "late batch with a step taken for new: %s\n", mend__pg_errmsg(s));
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'late1' AND status = 'succeeded'"), 1);
  mend__pg_close(s);
  drop_case();
}

static void test_new_steps(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_pg *pg = PG(s);
  long inserted = pg->steps_inserted, alone = pg->writes_alone;
  for (int i = 0; i < 3; i++) {
    char id[32];
    snprintf(id, sizeof id, "n%d", i);
    mend_run_rec r = run_rec(id, NULL);
    CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
    mend_step_rec st = {.run_id = id, .idx = 0, .name = "a", .status = "succeeded",
                        .attempts = 1, .result = "{\"n\":1}", .due = -1, .last_delay = 2.5,
                        .updated = 1764892800.123456, .new_row = 1};
    CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
    st.idx = 1;
    st.name = "b";
    st.new_row = 0;   /* not known new: the upsert */
    CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
  }
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->steps_inserted - inserted, 3);
  CHECK_EQ_INT(pg->writes_alone - alone, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE status = 'succeeded' AND attempts = 1"
                     " AND result = '{\"n\":1}' AND due IS NULL AND last_delay = 2.5"
                     " AND updated = 1764892800.123456"), 6);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE idx = 0 AND name = 'a'"), 3);

  /* the engine wrong: n0's step 0 is there; the batch begins the transaction */
  inserted = pg->steps_inserted;
  mend_step_rec again = {.run_id = "n0", .idx = 0, .name = "a", .status = "failed",
                         .attempts = 2, .error = "x", .error_kind = "error", .due = -1,
                         .last_delay = -1, .updated = 5, .new_row = 1};
  mend_step_rec fresh = again;
  fresh.run_id = "n1";
  fresh.idx = 7;
  CHECK_EQ_INT(mend__pg_put_step(s, &again), 0);
  CHECK_EQ_INT(mend__pg_put_step(s, &fresh), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->steps_inserted - inserted, 2);   /* tried, then put */
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'n0' AND idx = 0"
                     " AND status = 'failed' AND attempts = 2 AND error = 'x'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'n1' AND idx = 7"
                     " AND status = 'failed'"), 1);
  /* ... and in an open transaction: back to the flush's savepoint only */
  CHECK_EQ_INT(mend__pg_update_run(s, "n2", "succeeded", NULL, 0, 6, NULL), 0);
  mend_history_rec h = hist("n2", 1);
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  CHECK_EQ_INT(mend__pg_last_history(s, "n2", NULL), 1);   /* sent: the transaction is open */
  again.run_id = "n2";
  again.status = "compensated";
  fresh.run_id = "n2";
  CHECK_EQ_INT(mend__pg_put_step(s, &again), 0);
  CHECK_EQ_INT(mend__pg_put_step(s, &fresh), 0);
  CHECK_EQ_INT(mend__pg_last_history(s, "n2", NULL), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'n2' AND status = 'succeeded'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'n2'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'n2' AND idx = 0"
                     " AND status = 'compensated'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'n2' AND idx = 7"), 1);
  mend__pg_close(s);
  drop_case();
}

/* A batch as the engine writes it, for n runs from `first`: each started, its step put
 * running and then succeeded, two history rows, the run ended. */
static void engine_batch(mend_store *s, int first, int n, long seq) {
  for (int i = first; i < first + n; i++) {
    char id[32];
    snprintf(id, sizeof id, "e%d", i);
    mend_run_rec r = run_rec(id, NULL);
    CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
    mend_step_rec st = {.run_id = id, .idx = 0, .name = "a", .status = "running", .attempts = 1,
                        .due = -1, .last_delay = -1, .updated = 2};
    CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
    mend_history_rec h = hist(id, seq);
    CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
    st.status = "succeeded";
    st.result = "{\"n\":1}";
    CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
    h.seq = seq + 1;
    h.from_status = "running";
    h.to_status = "succeeded";
    CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
    CHECK_EQ_INT(mend__pg_update_run(s, id, "succeeded", NULL, 0, 3, NULL), 0);
  }
}

/* A column with one value in every row of a batch goes as that value alone (pg_arrays.c,
 * pg_schema.c's COL): the rows keep it whatever it is (odd text, NULL, a number), also when
 * one row is all the batch has of a kind, and when the first rows share a value and a later
 * one differs. */
static void test_one_value(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_pg *pg = PG(s);
  const char *odd = "{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{";
  long alone = pg->writes_alone, inserted = pg->steps_inserted;
  /* one run, alone in its array; its history rows share all but seq, and step from the third */
  mend_run_rec r = run_rec("o0", NULL);
  r.input = odd;
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  for (int i = 1; i <= 3; i++) {
    mend_history_rec h = hist("o0", i);
    h.step = i < 3 ? "a" : "b";
    h.detail = odd;
    CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  }
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'o0' AND workflow = 'order'"
                     " AND status = 'running' AND run_key IS NULL AND error IS NULL"
                     " AND created = 1 AND input = '{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'o0' AND at = 2 AND attempt = 1"
                     " AND delay IS NULL AND error IS NULL AND event = 'step'"
                     " AND detail = '{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{'"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM (SELECT string_agg(step, ',' ORDER BY seq) AS s"
                     " FROM history WHERE run_id = 'o0') x WHERE s = 'a,a,b'"), 1);
  /* three runs whose rows differ only by their id */
  for (int i = 1; i <= 3; i++) {
    char id[8];
    snprintf(id, sizeof id, "o%d", i);
    mend_run_rec ri = run_rec(id, NULL);
    CHECK_EQ_INT(mend__pg_insert_run(s, &ri), 0);
  }
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  alone = pg->writes_alone;
  for (int i = 1; i <= 3; i++) {
    char id[8];
    snprintf(id, sizeof id, "o%d", i);
    mend_step_rec st = {.run_id = id, .idx = 0, .name = "a", .status = "succeeded",
                        .attempts = 1, .result = odd, .due = -1, .last_delay = -1,
                        .updated = 7, .new_row = 1};
    CHECK_EQ_INT(mend__pg_put_step(s, &st), 0);
    mend_history_rec h = hist(id, 1);
    h.error = odd;
    CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
    CHECK_EQ_INT(mend__pg_update_run(s, id, "failed", odd, 1, 9, NULL), 0);
  }
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 0);
  CHECK_EQ_INT(pg->steps_inserted - inserted, 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE idx = 0 AND name = 'a' AND attempts = 1"
                     " AND due IS NULL AND updated = 7 AND idem_key IS NULL"
                     " AND result = '{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{'"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id IN ('o1', 'o2', 'o3') AND seq = 1"
                     " AND step = 'a' AND detail IS NULL"
                     " AND error = '{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{'"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id IN ('o1', 'o2', 'o3') AND status = 'failed'"
                     " AND attention = 1 AND updated = 9 AND reason IS NULL"
                     " AND error = '{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{'"), 3);
  mend__pg_close(s);
}

/* A batch's new runs and run updates go as one statement of arrays each (pg_arrays.c), and
 * leave what the statements one by one leave. */
static void test_run_arrays(void) {
  new_case();
  mend_store *s = open_store(), *other = open_store();
  if (!s || !other) return;
  mend_pg *pg = PG(s);
  /* the engine's own batches take the arrays: no write of them goes alone, whether the batch
   * begins its transaction or finds it open (a read came first) */
  long alone = pg->writes_alone;
  engine_batch(s, 0, 3, 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'succeeded' AND owner IS NULL"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE status = 'succeeded' AND result = '{\"n\":1}'"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM history"), 6);
  engine_batch(s, 3, 2, 1);
  CHECK_EQ_INT(mend__pg_last_history(s, "e3", NULL), 2);   /* the transaction is open now */
  engine_batch(s, 5, 2, 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'succeeded'"), 7);
  CHECK_EQ_INT(count("SELECT count(*) FROM history"), 14);

  /* ... and in an open transaction a number taken meanwhile renumbers the rows of that flush
   * alone, the writes before it kept (back to a savepoint, not the transaction's start) */
  engine_batch(s, 7, 1, 1);
  CHECK_EQ_INT(mend__pg_last_history(s, "e7", NULL), 2);
  CHECK_EQ_INT(count("INSERT INTO history(run_id, seq, event) VALUES ('e0', 3, 'note') RETURNING seq"), 3);
  mend_history_rec h = hist("e0", 3);
  h.step = "late";
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  engine_batch(s, 8, 1, 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 3);   /* that flush's history rows */
  alone = pg->writes_alone;
  CHECK_EQ_INT(count("SELECT seq FROM history WHERE run_id = 'e0' AND step = 'late'"), 4);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id IN ('e7', 'e8')"), 4);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id IN ('e7', 'e8') AND status = 'succeeded'"), 2);

  /* text kept as written: quotes, backslashes, commas, braces, the word NULL; NULL as NULL */
  const char *odd = "{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{";
  mend_run_rec q1 = run_rec("q,1", NULL), q2 = run_rec("q\"2", NULL);
  q1.input = odd;
  q2.input = NULL;
  q2.error = odd;
  q2.status = "pending";
  CHECK_EQ_INT(mend__pg_insert_run(s, &q1), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &q2), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "e0", "failed", odd, 1, 5, "NULL"), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "e1", "failed", NULL, 0, 5, NULL), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'q,1' AND input = '{\"a\":\"b\\\\c, d\"}"
                     " NULL \" \\\\ }{' AND error IS NULL AND status = 'running'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'q\"2' AND input IS NULL AND error ="
                     " '{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{' AND status = 'pending'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'e0' AND error = '{\"a\":\"b\\\\c, d\"}"
                     " NULL \" \\\\ }{' AND reason = 'NULL' AND attention = 1"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'e1' AND error IS NULL AND reason IS NULL"
                     " AND status = 'failed'"), 1);
  /* numbers exactly as recorded (a double with no short decimal form, the largest, infinity;
   * a large attempt), an empty text kept empty, not NULL, and text beyond ASCII */
  mend_history_rec hx = hist("e2", 3);
  hx.at = 0.1 + 0.2;
  hx.attempt = 2147483647;
  hx.delay = 1.7976931348623157e308;
  hx.error = "";
  hx.detail = "\xc3\xa9\xe2\x9c\x93 \xf0\x9f\x90\x98";
  CHECK_EQ_INT(mend__pg_append_history(s, &hx), 0);
  hx.seq = 4;
  hx.delay = INFINITY;
  CHECK_EQ_INT(mend__pg_append_history(s, &hx), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "e2", "failed", "", 0, -0.5, NULL), 0);
  alone = pg->writes_alone;
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'e2' AND seq = 3"
                     " AND at = 0.1::float8 + 0.2::float8 AND attempt = 2147483647"
                     " AND delay = 1.7976931348623157e308 AND error = ''"
                     " AND detail = U&'\\00E9\\2713 \\+01F418'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'e2' AND seq = 4"
                     " AND delay = 'Infinity'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'e2' AND error = '' AND updated = -0.5"), 1);

  /* a run inserted and updated in one batch: the update after the insert; a held run's owner
   * kept while it stays live, dropped when it ends */
  mend_run_rec h1 = run_rec("h1", "w"), h2 = run_rec("h2", "w");
  CHECK_EQ_INT(mend__pg_insert_run(s, &h1), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &h2), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "h1", "compensating", "e", 0, 6, "fatal"), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "h2", "succeeded", NULL, 0, 6, NULL), 0);
  long before = pg->writes_alone;
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - before, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'h1' AND status = 'compensating'"
                     " AND owner = 'w' AND reason = 'fatal'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'h2' AND status = 'succeeded'"
                     " AND owner IS NULL"), 1);
  /* a run updated twice in a batch: both, in order (ended, then live again, it has no owner) */
  CHECK_EQ_INT(mend__pg_update_run(s, "h1", "failed", "e", 0, 7, NULL), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "h1", "running", NULL, 0, 8, NULL), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "h2", "failed", NULL, 0, 8, NULL), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'h1' AND status = 'running'"
                     " AND owner IS NULL AND updated = 8"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'h2' AND status = 'failed'"), 1);
  /* a run missing among others fails the whole batch, naming it */
  CHECK_EQ_INT(mend__pg_update_run(s, "h2", "running", NULL, 0, 9, NULL), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "gone", "running", NULL, 0, 9, NULL), 0);
  CHECK_EQ_INT(mend__pg_update_run(s, "e2", "running", NULL, 0, 9, NULL), 0);
  CHECK(mend__pg_commit(s) != 0);
  CHECK(strstr(mend__pg_errmsg(s), "no run gone") != NULL);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'running' AND id IN ('h2', 'e2')"), 0);
#ifdef NDEBUG
  /* a write of a kind the arrays take, recorded with values not their columns: the batch
   * fails, naming it, rather than going alone unseen (a build with assertions stops there) */
  CHECK_EQ_INT(mend__pg_update_run(s, "h2", "running", NULL, 0, 9, NULL), 0);
  mend__pg_rec_begin(pg, P_UPDATE_RUN);
  mend__pg_rec_text(pg, "h2");
  mend__pg_rec_text(pg, "running");
  CHECK_EQ_INT(mend__pg_rec_end(pg), 0);
  CHECK(mend__pg_commit(s) != 0);
  CHECK(strstr(mend__pg_errmsg(s), "update run") && strstr(mend__pg_errmsg(s), "2 values"));
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'h2' AND status = 'running'"), 0);
#endif
  CHECK_EQ_INT(mend__pg_update_run(s, "h2", "running", NULL, 0, 9, NULL), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'h2' AND status = 'running'"), 1);

  /* A transaction sets at most 32 savepoints for its history arrays (a server's cache holds
   * 64 subtransactions a session): past them its rows go one by one; the next transaction
   * has its 32 again. */
  long seq = 10;
  for (int round = 0; round < 2; round++) {
    for (int i = 0; i < 34; i++) {
      before = pg->writes_alone;
      for (int j = 0; j < 2; j++) {
        mend_history_rec hr = hist("h2", seq++);
        CHECK_EQ_INT(mend__pg_append_history(s, &hr), 0);
      }
      CHECK_EQ_INT(mend__pg_last_history(s, "h2", NULL), seq - 1);
      /* the first flush begins the transaction; 32 more set a savepoint each */
      CHECK_EQ_INT(pg->writes_alone - before, i <= 32 ? 0 : 2);
    }
    CHECK_EQ_INT(mend__pg_commit(s), 0);
  }
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'h2' AND seq >= 10"), 136);
  mend__pg_close(other);
  mend__pg_close(s);
  drop_case();
}

static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static int dones;
static void on_done(void *ud) {
  (void)ud;
  pthread_mutex_lock(&done_mu);
  dones++;
  pthread_mutex_unlock(&done_mu);
}

static void test_writer_thread(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  CHECK_EQ_INT(mend__pg_start_writer(s, on_done, NULL), 0);
  unsigned long last = 0;
  for (int b = 0; b < 20; b++) {
    char id[32];
    snprintf(id, sizeof id, "run-%d", b);
    mend_run_rec r = run_rec(id, NULL);
    CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
    for (int i = 1; i <= 700; i++) {   /* more than one chunk of a pipeline */
      mend_history_rec h = hist(id, i);
      mend__pg_append_history(s, &h);
    }
    last = mend__pg_open_seq(s);
    CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  }
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  CHECK(mend__pg_durable_seq(s) >= last);
  CHECK(dones >= 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history"), 20 * 700);
  /* a read waits for the thread and sees everything */
  CHECK_EQ_INT(mend__pg_last_history(s, "run-19", NULL), 700);
  mend__pg_close(s);
  drop_case();
}

static void test_claims(void) {
  new_case();
  mend_store *a = open_store(), *b = open_store();
  if (!a || !b) return;
  mend__pg_set_fence(a, "a", 30);
  mend__pg_set_fence(b, "b", 30);
  for (int i = 0; i < 5; i++) {
    char id[16];
    snprintf(id, sizeof id, "free-%d", i);
    mend_run_rec r = run_rec(id, NULL);
    r.created = i;
    mend__pg_insert_run(a, &r);
  }
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  CHECK(mend__pg_claimable(b, "b", 0) & MEND_CLAIMABLE_FREE);
  json_t *got = mend__pg_claim(b, "b", 30, 3, MEND_CLAIM_FREE);
  CHECK(got && json_array_size(got) == 3);
  CHECK_STR(json_string_value(json_array_get(got, 0)), "free-0");
  json_decref(got);
  /* b's claim is not committed: its rows are locked, a skips them, never waits */
  got = mend__pg_claim(a, "a", 30, 10, 0);
  CHECK(got && json_array_size(got) == 2);
  CHECK_STR(json_string_value(json_array_get(got, 0)), "free-3");
  json_decref(got);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  CHECK_EQ_INT(mend__pg_claimable(b, "b", 1), 0);
  char owner[64];
  double left;
  CHECK_EQ_INT(mend__pg_owner(a, "free-0", owner, sizeof owner, &left), 1);
  CHECK_STR(owner, "b");
  CHECK(left > 20 && left <= 30);
  json_t *holders = mend__pg_lease_holders(a);
  CHECK(holders && json_array_size(holders) == 2);
  json_decref(holders);
  json_t *held = mend__pg_held(a);
  CHECK(held && json_array_size(held) == 2);
  json_decref(held);
  /* closing gives its runs back at once */
  mend__pg_close(b);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE owner IS NULL"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM workers WHERE owner = 'b'"), 0);
  mend__pg_close(a);
  drop_case();
}

static int nlost;
static char lost_id[64];
static void on_lost(void *ud, const char *id) {
  (void)ud;
  nlost++;
  snprintf(lost_id, sizeof lost_id, "%s", id);
}

static void test_fence(void) {
  new_case();
  mend_store *a = open_store(), *b = open_store();
  if (!a || !b) return;
  mend__pg_set_fence(a, "a", 1);
  mend__pg_set_fence(b, "b", 30);
  mend_run_rec r = run_rec("r1", "a");
  mend_run_rec r2 = run_rec("r2", "a"), r3 = run_rec("r3", "a");
  r2.created = r3.created = 2;
  CHECK_EQ_INT(mend__pg_insert_run(a, &r2), 0);
  CHECK_EQ_INT(mend__pg_insert_run(a, &r), 0);
  CHECK_EQ_INT(mend__pg_insert_run(a, &r3), 0);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  CHECK_EQ_INT(mend__pg_fence_news(a, on_lost, NULL), 0);
  /* a stalls past its lease; b takes one of its runs (the limit), r1 */
  sleep_s(1.5);
  CHECK(mend__pg_claimable(b, "b", 0) & MEND_CLAIMABLE_GONE);
  json_t *got = mend__pg_claim(b, "b", 30, 1, 0);
  CHECK(got && json_array_size(got) == 1);
  CHECK_STR(json_string_value(json_array_get(got, 0)), "r1");
  json_decref(got);
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  /* a wakes up and writes to all three: r1's writes are dropped and reported, the others go
   * (as arrays: the lost run's left out of them) */
  mend_history_rec h = hist("r2", 1);
  mend__pg_append_history(a, &h);
  mend__pg_update_run(a, "r2", "succeeded", NULL, 0, 9, NULL);
  h.run_id = "r1";
  mend__pg_append_history(a, &h);
  mend__pg_update_run(a, "r1", "failed", "late", 0, 9, NULL);
  h.run_id = "r3";
  mend__pg_append_history(a, &h);
  mend__pg_update_run(a, "r3", "failed", "boom", 0, 9, NULL);
  long alone = PG(a)->writes_alone;
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  CHECK_EQ_INT(PG(a)->writes_alone - alone, 0);
  nlost = 0;
  CHECK_EQ_INT(mend__pg_fence_news(a, on_lost, NULL), 1);
  CHECK_EQ_INT(nlost, 1);
  CHECK_STR(lost_id, "r1");
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r1' AND status = 'running'"
                     " AND owner = 'b'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'r1'"), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r2' AND status = 'succeeded'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r3' AND status = 'failed' AND error = 'boom'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id IN ('r2', 'r3')"), 2);
  /* later writes to the lost run are dropped too */
  mend__pg_update_run(a, "r1", "failed", "later", 0, 10, NULL);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'r1' AND status = 'running'"), 1);
  json_t *held = mend__pg_held(a);
  CHECK(held && json_array_size(held) == 0);
  json_decref(held);
  mend__pg_fence_verified(a);
  mend__pg_close(a);
  mend__pg_close(b);
  drop_case();
}

/* Ends every other session on the case's database, and waits until they are gone. */
static void terminate_others(void) {
  PGconn *c = raw();
  sql(c, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE"
         " datname = current_database() AND pid <> pg_backend_pid()");
  PQfinish(c);
}

static void test_dropped_connection(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("r1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  /* lost between batches (a server restart, a terminated backend): opened again, nothing lost */
  terminate_others();
  mend_history_rec h0 = hist("r1", 1);
  mend__pg_append_history(s, &h0);
  int rc0 = mend__pg_commit(s);
  if (rc0) fprintf(stderr, "commit after a lost connection: %s\n", mend__pg_errmsg(s));
  CHECK_EQ_INT(rc0, 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM history"), 1);
  terminate_others();
  CHECK_EQ_INT(mend__pg_last_history(s, "r1", NULL), 1);
  PGconn *d = raw();
  sql(d, "DELETE FROM history");
  PQfinish(d);
  CHECK_EQ_INT(mend__pg_start_writer(s, NULL, NULL), 0);
  unsigned long durable = mend__pg_durable_seq(s);
  mend_history_rec h = hist("r1", 1);
  mend__pg_append_history(s, &h);
  CHECK_EQ_INT(mend__pg_last_history(s, "r1", NULL), 1);   /* the batch's transaction is open */
  terminate_others();   /* inside the batch's transaction: that batch fails */
  h.seq = 2;
  mend__pg_append_history(s, &h);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  CHECK_EQ_INT(mend__pg_durable_seq(s), durable);   /* not acknowledged */
  CHECK(mend__pg_commit(s) != 0);                   /* and the engine is told */
  CHECK(strstr(mend__pg_errmsg(s), "mend_test_") != NULL);
  CHECK_EQ_INT(count("SELECT count(*) FROM history"), 0);
  mend__pg_close(s);
  drop_case();
}

/* A ticking host's signal recorded in the batch (no round trip): only with a key and text the
 * server takes (1: the caller sends it); in the inbox once committed; sent again, first and in
 * order, when the transaction holding it is lost with its connection, whether in the loop's
 * open transaction or the writer thread's batch; kept once by its key. */
static void test_recorded_events(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("r1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", "{}", NULL, 1), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", "{}", "k\xff", 1), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "sl\xc3", "{}", "k0", 1), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", "{\"n\":1}", "k1", 1), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox WHERE key = 'k1' AND payload = '{\"n\":1}'"), 1);
  /* lost in the loop's open transaction: k2 sent into it by a read, k3 recorded after */
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k2", 2), 0);
  CHECK_EQ_INT(mend__pg_last_history(s, "r1", NULL), 0);
  terminate_others();
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k3", 3), 0);
  CHECK(mend__pg_commit(s) != 0);   /* told: not known committed */
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k1", 4), 0);   /* kept once */
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox a JOIN inbox b ON a.key = 'k2' AND"
                     " b.key = 'k3' AND a.seq < b.seq"), 1);
  /* lost in the writer thread's batch */
  CHECK_EQ_INT(mend__pg_start_writer(s, NULL, NULL), 0);
  unsigned long durable = mend__pg_durable_seq(s);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k4", 5), 0);
  CHECK_EQ_INT(mend__pg_last_history(s, "r1", NULL), 0);   /* the batch's transaction is open */
  terminate_others();
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k5", 6), 0);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  CHECK_EQ_INT(mend__pg_durable_seq(s), durable);
  CHECK(mend__pg_commit(s) != 0);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k6", 7), 0);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  CHECK(mend__pg_durable_seq(s) > durable);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 6);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox a JOIN inbox b ON a.key = 'k4' AND"
                     " b.key = 'k5' AND a.seq < b.seq JOIN inbox c ON c.key = 'k6' AND"
                     " b.seq < c.seq"), 1);
  mend__pg_close(s);
  drop_case();
}

static void on_event(void *ud, const char *run_id) {
  (void)run_id;
  (*(int *)ud)++;
}

static void test_events(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("r1", NULL);
  mend__pg_insert_run(s, &r);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":1}", "k1", 5), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":2}", "k1", 6), 1);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", NULL, NULL, 7), 0);
  long long seq;
  char *payload, *key;
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq, &payload, &key), 1);
  CHECK_STR(payload, "{\"n\":1}");
  CHECK_STR(key, "k1");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_consume_event(s, "r1", seq, "a", 8), 0);
  long long seq2;
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK(seq2 > seq);
  CHECK_STR(payload, "null");
  free(payload);
  free(key);
  int seen = 0;
  CHECK_EQ_INT(mend__pg_events_after(s, 0, 10, on_event, &seen), 0);   /* not committed yet */
  CHECK_EQ_INT(seen, 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_last_event(s), seq2);
  CHECK_EQ_INT(mend__pg_events_after(s, 0, 10, on_event, &seen), seq2);
  CHECK_EQ_INT(seen, 2);
  /* consumed twice: the batch fails */
  mend__pg_consume_event(s, "r1", seq, "a", 9);
  CHECK(mend__pg_commit(s) != 0);
  mend__pg_close(s);
  drop_case();
}

/* A tick's look at a run's inbox among committed rows (aux: no wait for the writer thread):
 * what the open transaction sent or consumed is not seen yet, what was committed is, by
 * name; a run id the server could not take as text is in no row. */
static void test_committed_events(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("r1", NULL);
  mend__pg_insert_run(s, &r);
  long long seq, seq2;
  char *payload, *key;
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":1}", "k1", 5), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq, &payload, &key), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":2}", "k2", 6), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "shipped", "{\"n\":3}", "k3", 6), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq, &payload, &key), 1);
  CHECK_STR(payload, "{\"n\":1}");
  CHECK_STR(key, "k1");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "shipped", &seq2, &payload, &key), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r2", "paid", &seq2, &payload, &key), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r\xff", "paid", &seq2, &payload, &key), 0);
  /* consumed in the open transaction: the batch's own read moves on, the committed look not */
  CHECK_EQ_INT(mend__pg_consume_event(s, "r1", seq, "a", 7), 0);
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK_STR(key, "k2");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK(seq2 == seq);
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK_STR(key, "k2");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "shipped", &seq2, &payload, &key), 1);
  CHECK_STR(payload, "{\"n\":3}");
  free(payload);
  free(key);
  mend__pg_close(s);
  drop_case();
}

/* run()'s looks and a serving worker's polls ask committed rows first, on aux: a cancel
 * request or an event of the open transaction is not seen until it commits (the look through
 * the batch sees it), one committed is. */
static void test_committed_looks(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("c1", "w1");
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w1"), 0);
  CHECK_EQ_INT(mend__pg_request_cancel(s, "c1"), 0);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w1"), 0);
  json_t *ids = mend__pg_cancel_requests(s, "w1");
  CHECK(ids && json_array_size(ids) == 1);
  json_decref(ids);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w1"), 1);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w2"), 0);   /* held by w1, not w2 */
  CHECK_EQ_INT(mend__pg_last_event(s), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "c1", "go", NULL, NULL, 3), 0);
  CHECK_EQ_INT(mend__pg_last_event(s), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK(mend__pg_last_event(s) > 0);
  mend__pg_close(s);
  drop_case();
}

/* A ticking host's look at many inboxes, sent without waiting and taken later: each pair's
 * oldest committed event not consumed, none of the open batch's; a blocking read on the same
 * connection meanwhile keeps the answer; one look at a time; a connection lost under it is a
 * failed look, and the next one opens it again. */
static int nlooked;
static char looked[8][160];
static void on_look(void *ud, const char *run_id, const char *name, long long seq,
                    const char *payload, const char *key) {
  (void)ud;
  (void)seq;
  if (nlooked < 8)
    snprintf(looked[nlooked++], sizeof looked[0], "%s %s %s %s", run_id, name, payload,
             key ? key : "-");
}

/* look_ahead, waited out while aux is still being opened (1) */
static int look(mend_store *s, int n, const char *const *ids, const char *const *names) {
  int rc = 1;
  for (int i = 0; i < 1000 && (rc = mend__pg_look_ahead(s, n, ids, names)) == 1; i++) sleep_s(0.01);
  return rc;
}

static void test_look_ahead(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r1 = run_rec("r1", NULL), r2 = run_rec("r2", NULL);
  mend__pg_insert_run(s, &r1);
  mend__pg_insert_run(s, &r2);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":1}", "k1", 5), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":2}", "k2", 6), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r2", "paid", NULL, NULL, 7), 0);   /* not committed */
  const char *ids[3] = {"r1", "r2", "r1"}, *names[3] = {"paid", "paid", "shipped"};
  CHECK_EQ_INT(look(s, 3, ids, names), 0);
  CHECK_EQ_INT(mend__pg_look_ahead(s, 3, ids, names), -1);   /* one in flight */
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  CHECK_STR(looked[0], "r1 paid {\"n\":1} k1");
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), -1);   /* none in flight */
  /* taken, not waited for: the answer comes while the caller does other things */
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  long long seq;
  char *payload, *key;
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq, &payload, &key), 1);
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_consume_event(s, "r1", seq, "a", 8), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(look(s, 2, ids, names), 0);
  int rc = 0;
  nlooked = 0;
  for (int i = 0; i < 500 && (rc = mend__pg_look_ahead_take(s, 0, on_look, NULL)) == 0; i++)
    sleep_s(0.01);
  CHECK_EQ_INT(rc, 1);
  CHECK_EQ_INT(nlooked, 2);
  CHECK_STR(looked[0], "r1 paid {\"n\":2} k2");
  CHECK_STR(looked[1], "r2 paid null -");
  /* a blocking read on the same connection (a worker's poll) while a look is out: both answer */
  CHECK_EQ_INT(look(s, 1, ids, names), 0);
  int nev = 0;
  CHECK(mend__pg_events_after(s, 0, 10, on_event, &nev) > 0);
  CHECK_EQ_INT(nev, 3);
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 0, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  /* text the server cannot hold is in no row: no look, the caller reads another way */
  const char *bad[1] = {"r\xff"};
  CHECK_EQ_INT(mend__pg_look_ahead(s, 1, bad, names), -1);
  /* its connection lost under it: a failed look; the next one opens it again */
  terminate_others();
  CHECK(look(s, 1, ids, names) != 0 ||
        mend__pg_look_ahead_take(s, 1, on_look, NULL) == -1);
  PG(s)->aux_retry_at = 0;   /* not the backoff's wait */
  CHECK_EQ_INT(look(s, 1, ids, names), 0);
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  /* a look the server never answers (its backend stopped, as a host gone without a reset):
   * given up with its connection once it is 10 s old, not waited for until keepalive ends it */
  int backend = PQbackendPID(PG(s)->aux);   /* stopped before the look goes: it cannot answer */
  CHECK(backend > 0 && kill(backend, SIGSTOP) == 0);
  CHECK_EQ_INT(look(s, 1, ids, names), 0);
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 0, on_look, NULL), 0);   /* young: not yet */
  PG(s)->look_sent_at -= 11;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 0, on_look, NULL), -1);
  CHECK(strstr(PG(s)->aux_err, "unanswered") != NULL);
  kill(backend, SIGCONT);
  PG(s)->aux_retry_at = 0;
  CHECK_EQ_INT(look(s, 1, ids, names), 0);   /* on a new connection */
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  mend__pg_close(s);
  drop_case();
}

/* A ticking host's first tick opens the second connection on a thread, not in the tick (a
 * login and its statements' preparing, over 100 ms under load): the call returns while the
 * opening is held (in its PREPARE, by a lock on inbox), looks wait for it ("not yet", not a
 * failure), and the first look after it is answered. */
static void *unlock_later(void *arg) {
  sleep_s(3);
  sql(arg, "COMMIT");
  return NULL;
}

/* The Cpus_allowed_list of the first of this process's threads named `comm`, or "". */
static void cpus_of(const char *comm, char *out, size_t len) {
  out[0] = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d)) && !out[0];) {
    char path[300], line[256] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
    if (!f) continue;
    int named = fgets(line, sizeof line, f) && strncmp(line, comm, strlen(comm)) == 0 &&
                line[strlen(comm)] == '\n';
    fclose(f);
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    if (!named || !(f = fopen(path, "r"))) continue;
    char list[64];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "Cpus_allowed_list: %63s", list) == 1) {
        snprintf(out, len, "%s", list);
        break;
      }
    fclose(f);
  }
  if (d) closedir(d);
}

/* mend_options.thread_cpus on PostgreSQL: the second connection's opener (held in its PREPARE
 * by a lock on inbox, to be looked at) and the writer thread run on the CPUs the store was
 * given: here the last this thread may use, fewer than they would inherit on two or more. */
static void test_thread_cpus(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  char mine[64] = "", last[64], err[256] = "", seen[64];
  FILE *f = fopen("/proc/thread-self/status", "r");
  while (f && fgets(err, sizeof err, f))
    if (sscanf(err, "Cpus_allowed_list: %63s", mine) == 1) break;
  if (f) fclose(f);
  const char *tail = mine + strlen(mine);
  while (tail > mine && tail[-1] >= '0' && tail[-1] <= '9') tail--;
  snprintf(last, sizeof last, "%s", tail);
  mend_cpus cpus;
  CHECK_EQ_INT(mend_cpus_parse(last, "thread_cpus", &cpus, err, sizeof err), 0);
  mend_store_set_thread_cpus(s, &cpus);
  PGconn *locker = raw();
  sql(locker, "BEGIN");
  sql(locker, "LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE");
  mend__pg_open_committed_reads(s, 0);
  CHECK(lock_waiters("relation") >= 1);
  cpus_of("mend-pg-open", seen, sizeof seen);
  CHECK_STR(seen, last);
  sql(locker, "COMMIT");
  PQfinish(locker);
  CHECK_EQ_INT(mend__pg_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("r1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  cpus_of("mend-writer", seen, sizeof seen);
  CHECK_STR(seen, last);
  mend__pg_close(s);
  drop_case();
}

static void test_aux_opened_aside(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r1 = run_rec("r1", NULL);
  mend__pg_insert_run(s, &r1);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", NULL, "k1", 5), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  PGconn *locker = raw();
  sql(locker, "BEGIN");
  sql(locker, "LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE");
  pthread_t t;
  pthread_create(&t, NULL, unlock_later, locker);   /* so that a blocking open ends too */
  double t0 = mend__pg_mono();
  mend__pg_open_committed_reads(s, 0);
  CHECK(mend__pg_mono() - t0 < 1.0);
  CHECK(lock_waiters("relation") >= 1);
  const char *ids[1] = {"r1"}, *names[1] = {"paid"};
  CHECK_EQ_INT(mend__pg_look_ahead(s, 1, ids, names), 1);
  CHECK(mend__pg_mono() - t0 < 1.0);
  pthread_join(t, NULL);
  PQfinish(locker);
  CHECK_EQ_INT(look(s, 1, ids, names), 0);
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  mend__pg_close(s);
  drop_case();
}

/* The second connection's opening (a ticking host's first look, or after a restart) happens
 * on the loop's thread while the writer thread may fail a batch: the writer's message is what
 * the engine reads after, never replaced by what aux's opening had before. Aux's opening is
 * held inside its PREPARE by a lock on inbox, and the writer's failure lands meanwhile. */
static void *open_aux(void *arg) { return (void *)(intptr_t)mend__pg_aux(arg); }

static void test_aux_keeps_writer_error(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_pg *p = PG(s);
  PGconn *locker = raw();
  sql(locker, "BEGIN");
  sql(locker, "LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE");
  pthread_t t;
  pthread_create(&t, NULL, open_aux, p);
  CHECK(lock_waiters("relation") >= 1);
  CHECK(mend__pg_exec(p, p->conn, "SELECT no_such_column FROM runs", "the writer's batch") != 0);
  char said[sizeof p->err];
  snprintf(said, sizeof said, "%s", mend__pg_errmsg(s));
  sql(locker, "COMMIT");
  PQfinish(locker);
  void *rc;
  pthread_join(t, &rc);
  CHECK_EQ_INT((int)(intptr_t)rc, 0);
  CHECK(strstr(said, "the writer's batch") != NULL);
  CHECK_STR(mend__pg_errmsg(s), said);
  mend__pg_close(s);
  drop_case();
}

/* With several hosts in the URI, the second connection (and the listening one) goes where the
 * writer's went: the first host, down when the writer connected (a standby lagging behind it,
 * in real life), never hears from it. 127.0.0.2 stands for that host: nothing listens there as the store
 * opens, a socket that counts and drops connections does after. */
static atomic_int gate_accepts;
static void *gate(void *arg) {
  int fd = *(int *)arg, c;
  while ((c = accept(fd, NULL, NULL)) >= 0) {
    atomic_fetch_add(&gate_accepts, 1);
    close(c);
  }
  return NULL;
}

static void test_aux_on_writers_host(void) {
  const char *host = PQhost(admin), *port = PQport(admin);
  if (!host || strcmp(host, "127.0.0.1") != 0) {
    printf("test_pg_store: test_aux_on_writers_host skipped: the server is not on 127.0.0.1\n");
    return;
  }
  new_case();
  char many[sizeof conninfo + 128], err[1024];
  snprintf(many, sizeof many, "%s host='127.0.0.2,127.0.0.1' port='%s,%s'", conninfo, port, port);
  mend_store *s = mend__pg_open(many, MEND_DURABILITY_FULL, err, sizeof err);
  if (!s) fprintf(stderr, "open: %s\n", err);
  CHECK(s != NULL);
  if (!s) return;
  mend_pg *p = PG(s);
  CHECK_STR(PQhost(p->conn), "127.0.0.1");
  int fd = socket(AF_INET, SOCK_STREAM, 0), on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0) {
    printf("test_pg_store: test_aux_on_writers_host skipped: cannot listen on 127.0.0.2\n");
    close(fd);
    mend__pg_close(s);
    drop_case();
    return;
  }
  pthread_t t;
  pthread_create(&t, NULL, gate, &fd);
  CHECK_EQ_INT(mend__pg_aux(p), 0);
  CHECK_STR(PQhost(p->aux), "127.0.0.1");
  CHECK_EQ_INT(atomic_load(&gate_accepts), 0);
  /* the writer reconnected under another name (a failover, in real life): aux follows it */
  char other[sizeof conninfo + 32];
  snprintf(other, sizeof other, "%s host='localhost'", conninfo);
  PGconn *moved = PQconnectdb(other);
  CHECK(PQstatus(moved) == CONNECTION_OK);
  mend__pg_note_writer_host(p, moved);
  CHECK_EQ_INT(mend__pg_aux(p), 0);
  CHECK_STR(PQhost(p->aux), "localhost");
  mend__pg_note_writer_host(p, p->conn);
  PQfinish(moved);
  /* the listening connection too: a NOTIFY is heard only on the server it was sent on */
  int opened = 0;
  CHECK(mend__pg_wake_fd(s, &opened) >= 0);
  CHECK_EQ_INT(opened, 1);
  CHECK_EQ_INT(atomic_load(&gate_accepts), 0);
  shutdown(fd, SHUT_RDWR);
  pthread_join(t, NULL);
  close(fd);
  mend__pg_close(s);
  drop_case();
}

/* A ticking host on PostgreSQL (mend.h): a run's events, sent with keys from the host's frames,
 * are taken once each and in the order sent, from the looks the ticks send ahead; a look still
 * out when the host turns to mend_engine_run_all is answered there. */
static const char *const TWICE =
  "return { name = 'twice', steps = {\n"
  "  { name = 'first', wait_for = 'go' },\n"
  "  { name = 'second', wait_for = 'go' },\n"
  "  { name = 'both', execute = function(ctx)\n"
  "      return { ctx.results.first.n, ctx.results.second.n } end } } }\n";

static int run_result_is(mend_engine *E, const char *id, const char *want) {
  char *json = NULL;
  int ok = mend_engine_run_json(E, id, &json) == MEND_OK && json && strstr(json, want) &&
           strstr(json, "\"succeeded\"");
  if (!ok) fprintf(stderr, "run %s: %s\n", id, json ? json : "(none)");
  free(json);
  return ok;
}

/* The current case's database as a URI: what mend_options.db_path takes for PostgreSQL. */
static void case_uri(char *out, size_t len) {
  PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
  size_t n = (size_t)snprintf(out, len, "postgresql://?");
  for (PQconninfoOption *o = opts; o && o->keyword && n < len; o++)
    if (o->val && *o->val) n += (size_t)snprintf(out + n, len - n, "%s%s=%s", n > 14 ? "&" : "",
                                                 o->keyword, o->val);
  PQconninfoFree(opts);
}

static void test_ticked_events(void) {
  new_case();
  char path[64], err[512], uri[sizeof conninfo + 64];
  case_uri(uri, sizeof uri);
  snprintf(path, sizeof path, "/tmp/mend_pg_twice_%d.lua", (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(TWICE, f);
  fclose(f);
  mend_options o;
  mend_options_init(&o);
  o.db_path = uri;
  mend_engine *E = NULL;
  int rc = mend_engine_new(&o, &E, err, sizeof err);
  if (rc != MEND_OK) fprintf(stderr, "mend_engine_new: %s\n", err);
  CHECK_EQ_INT(rc, MEND_OK);
  if (rc != MEND_OK) return;
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  char a[17], b[17];
  CHECK_EQ_INT(mend_engine_start(E, "twice", NULL, NULL, a, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_start(E, "twice", NULL, NULL, b, NULL), MEND_OK);
  for (int frame = 0; frame < 3000 && mend_engine_in_flight_count(E) > 1; frame++) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    if (frame == 5 || frame == 6)   /* the same key twice: kept once */
      CHECK_EQ_INT(mend_engine_signal(E, a, "go", "{\"n\":1}", "a1"), MEND_OK);
    if (frame == 7) CHECK_EQ_INT(mend_engine_signal(E, a, "go", "{\"n\":2}", "a2"), MEND_OK);
    sleep_s(0.003);
  }
  CHECK(run_result_is(E, a, "[1,2]"));
  /* b's two events in one frame; one more tick sends the looks, and run_all takes them */
  CHECK_EQ_INT(mend_engine_signal(E, b, "go", "{\"n\":1}", "b1"), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal(E, b, "go", "{\"n\":2}", "b2"), MEND_OK);
  for (int frame = 0; frame < 3; frame++) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    sleep_s(0.003);
  }
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK(run_result_is(E, b, "[1,2]"));
  mend_engine_free(E);
  remove(path);
  drop_case();
}

static void test_tokens(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend__pg_set_fence(s, "w", 30);
  mend_run_rec p = run_rec("p1", "w"), c = run_rec("c1", "w");
  CHECK_EQ_INT(mend__pg_insert_run(s, &p), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &c), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);

  /* a token: known by its attempt and by itself, in the open batch */
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-1", "p1", "a", 1, 5.5), 0);
  char *tok = NULL;
  CHECK_EQ_INT(mend__pg_token_of_attempt(s, "p1", "a", 1, &tok), 1);
  CHECK_STR(tok, "tok-1");
  free(tok);
  tok = NULL;
  CHECK_EQ_INT(mend__pg_token_of_attempt(s, "p1", "a", 2, &tok), 0);
  CHECK(tok == NULL);
  json_t *row = mend__pg_token(s, "tok-1");
  CHECK(row != NULL);
  CHECK_STR(json_string_value(json_object_get(row, "run_id")), "p1");
  CHECK_STR(json_string_value(json_object_get(row, "step")), "a");
  CHECK_EQ_INT(json_integer_value(json_object_get(row, "attempt")), 1);
  CHECK_NEAR(json_real_value(json_object_get(row, "made")), 5.5, 0);
  CHECK(json_object_get(row, "used") == NULL);
  json_decref(row);
  CHECK(mend__pg_token(s, "no-such-token") == NULL);
  CHECK_STR(mend__pg_errmsg(s), "");   /* none: not an error */
  /* used once: the second use writes nothing and says so */
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-1", "{\"ok\":true}", 7), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-1", "{\"ok\":false}", 8), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM tokens WHERE digest = 'tok-1' AND used = 7"
                     " AND outcome = '{\"ok\":true}'"), 1);
  row = mend__pg_token(s, "tok-1");
  CHECK(row && json_is_number(json_object_get(row, "used")));
  CHECK_STR(json_string_value(json_object_get(row, "outcome")), "{\"ok\":true}");
  json_decref(row);
  /* an attempt run again has a second token (its first is known by digest only): the use of
   * the first ended it too */
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-2", "p1", "a", 1, 9), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-2", "{\"ok\":false}", 10), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM tokens"), 2);
  /* two tokens of one attempt, neither used: the first use ends both */
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-3", "p1", "a", 2, 11), 0);
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-4", "p1", "a", 2, 12), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-4", "{\"ok\":true}", 13), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-3", "{\"ok\":true}", 14), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM tokens WHERE attempt = 2 AND used = 13"), 2);

  /* a child: linked both ways */
  CHECK_EQ_INT(mend__pg_set_parent(s, "c1", "p1", "ship"), 0);
  json_t *kids = mend__pg_children(s, "p1");
  CHECK(kids && json_array_size(kids) == 1);
  json_t *k = json_array_get(kids, 0);
  CHECK_STR(json_string_value(json_object_get(k, "run_id")), "c1");
  CHECK_STR(json_string_value(json_object_get(k, "step")), "ship");
  CHECK_STR(json_string_value(json_object_get(k, "workflow")), "order");
  CHECK_STR(json_string_value(json_object_get(k, "status")), "running");
  json_decref(kids);
  kids = mend__pg_children(s, "c1");
  CHECK(kids && json_array_size(kids) == 0);
  json_decref(kids);
  json_t *run = mend_store_run(s, "c1");
  CHECK_STR(json_string_value(json_object_get(run, "parent_run")), "p1");
  CHECK_STR(json_string_value(json_object_get(run, "parent_step")), "ship");
  json_decref(run);
  run = mend_store_run(s, "p1");
  CHECK(run && json_object_get(run, "parent_run") == NULL);
  json_decref(run);

  /* its end goes to the parent's inbox, once a key; a run with no parent tells nobody */
  CHECK_EQ_INT(mend__pg_child_end(s, "c1", "mend.child", "{\"status\":\"succeeded\"}", "c1/4", 9), 0);
  CHECK_EQ_INT(mend__pg_child_end(s, "c1", "mend.child", "{\"status\":\"succeeded\"}", "c1/4", 9), 0);
  CHECK_EQ_INT(mend__pg_child_end(s, "p1", "mend.child", "{}", "p1/1", 9), 0);
  long long seq;
  char *payload = NULL, *key = NULL;
  CHECK_EQ_INT(mend__pg_next_event(s, "p1", "mend.child", &seq, &payload, &key), 1);
  CHECK_STR(payload, "{\"status\":\"succeeded\"}");
  CHECK_STR(key, "c1/4");
  free(payload);
  free(key);
  /* held until commit, as every sender holds it: seqs commit in the order taken */
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                     " AND objid::bigint = x'4d454e49'::int AND granted"), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 1);
  int seen = 0;
  CHECK_EQ_INT(mend__pg_events_after(s, 0, 10, on_event, &seen), seq);
  CHECK_EQ_INT(seen, 1);

  /* reopened only once it succeeded, and then nobody's */
  CHECK_EQ_INT(mend__pg_reopen_run(s, "c1", "parent_compensates", NULL, 10), 0);
  mend__pg_update_run(s, "c1", "succeeded", NULL, 0, 10, NULL);
  CHECK_EQ_INT(mend__pg_reopen_run(s, "c1", "parent_compensates", NULL, 11), 1);
  CHECK_EQ_INT(mend__pg_reopen_run(s, "c1", "parent_compensates", NULL, 12), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'c1' AND status = 'compensating'"
                     " AND owner IS NULL AND reason = 'parent_compensates' AND updated = 11"
                     " AND error = 'compensated with its parent'"), 1);
  mend__pg_close(s);
  drop_case();
}

/* A worker that stalled past its lease tells no parent of the end of a child it lost. */
static void test_child_end_fenced(void) {
  new_case();
  mend_store *a = open_store(), *b = open_store();
  if (!a || !b) return;
  mend__pg_set_fence(a, "a", 1);
  mend__pg_set_fence(b, "b", 30);
  mend_run_rec p = run_rec("p1", "b"), c = run_rec("c1", "a"), c2 = run_rec("c2", "a");
  CHECK_EQ_INT(mend__pg_insert_run(b, &p), 0);
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  CHECK_EQ_INT(mend__pg_insert_run(a, &c), 0);
  CHECK_EQ_INT(mend__pg_insert_run(a, &c2), 0);
  CHECK_EQ_INT(mend__pg_set_parent(a, "c1", "p1", "ship"), 0);
  CHECK_EQ_INT(mend__pg_set_parent(a, "c2", "p1", "pack"), 0);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  sleep_s(1.5);
  json_t *got = mend__pg_claim(b, "b", 30, 1, 0);   /* c1, the older */
  CHECK(got && json_array_size(got) == 1);
  CHECK_STR(json_string_value(json_array_get(got, 0)), "c1");
  json_decref(got);
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  mend__pg_update_run(a, "c1", "succeeded", NULL, 0, 9, NULL);
  mend__pg_child_end(a, "c1", "mend.child", "{\"status\":\"succeeded\"}", "c1/3", 9);
  mend__pg_update_run(a, "c2", "succeeded", NULL, 0, 9, NULL);
  mend__pg_child_end(a, "c2", "mend.child", "{\"status\":\"succeeded\"}", "c2/3", 9);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  nlost = 0;
  CHECK_EQ_INT(mend__pg_fence_news(a, on_lost, NULL), 1);
  CHECK_STR(lost_id, "c1");
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox WHERE run_id = 'p1' AND key = 'c1/3'"), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox WHERE run_id = 'p1' AND key = 'c2/3'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'c1' AND status = 'running'"), 1);
  mend__pg_close(a);
  mend__pg_close(b);
  drop_case();
}

/* Two batches whose locks cross, as two workers' may on runs one of them lost: this store's
 * batch tells a parent its child ended (the inbox lock, held until COMMIT), then writes a run
 * whose row another transaction holds (a lease check's FOR UPDATE), which then waits for the
 * inbox lock. The server ends the deadlock by rolling back the batch that waited first, this
 * one (SQLSTATE 40P01): it is told as a batch lost with its connection (not committed, nothing
 * of it written), and the store goes on with the next batch on the same connection. */
static void *commit_in_thread(void *arg) {
  static int rc;
  rc = mend__pg_commit(arg);
  return &rc;
}

static void test_deadlock(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec p = run_rec("p1", NULL), c = run_rec("c1", NULL), x = run_rec("x1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &p), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &c), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &x), 0);
  CHECK_EQ_INT(mend__pg_set_parent(s, "c1", "p1", "ship"), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  PGconn *other = raw();
  sql(other, "BEGIN");
  sql(other, "SELECT id FROM runs WHERE id = 'x1' FOR UPDATE");
  mend__pg_update_run(s, "c1", "succeeded", NULL, 0, 9, NULL);
  mend__pg_child_end(s, "c1", "mend.child", "{\"status\":\"succeeded\"}", "c1/3", 9);
  mend__pg_update_run(s, "x1", "succeeded", NULL, 0, 9, NULL);
  pthread_t t;
  pthread_create(&t, NULL, commit_in_thread, s);
  /* the batch waits for x1's row, holding the inbox lock; then the other asks for that lock */
  CHECK_EQ_INT(lock_waiters("transactionid"), 1);
  PGresult *r = PQexec(other, "SELECT pg_advisory_xact_lock(x'4d454e49'::int)");
  CHECK_EQ_INT(PQresultStatus(r), PGRES_TUPLES_OK);   /* the other goes on */
  PQclear(r);
  void *rc;
  pthread_join(t, &rc);
  CHECK_EQ_INT(*(int *)rc, -1);
  CHECK(strstr(mend__pg_errmsg(s), "deadlock") != NULL);
  CHECK_EQ_INT(mend__pg_conn_lost(s), 1);   /* told as a batch not committed, once */
  CHECK_EQ_INT(mend__pg_conn_lost(s), 0);
  sql(other, "ROLLBACK");
  PQfinish(other);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'succeeded'"), 0);
  /* the next batch, on the same connection, commits */
  mend__pg_update_run(s, "c1", "succeeded", NULL, 0, 10, NULL);
  mend__pg_child_end(s, "c1", "mend.child", "{\"status\":\"succeeded\"}", "c1/3", 10);
  mend__pg_update_run(s, "x1", "succeeded", NULL, 0, 10, NULL);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox WHERE run_id = 'p1' AND key = 'c1/3'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'succeeded'"), 2);
  mend__pg_close(s);
  drop_case();
}

/* A worker's first claim inserts its workers row and takes runs in one transaction. Another
 * worker's claim that began before that commit and reaches those runs after it sees each run's
 * new owner (a row locked for update is read again at its latest version) but not the owner's
 * workers row (the statement's snapshot is older): "an owner with no workers row", whose runs
 * are anyone's. It must not take them: the first worker holds them with a live lease, and both
 * would write to them. The second claim is held between its snapshot and its look at the runs
 * deterministically: its connection finds clock_timestamp() (which the claim's look for workers
 * whose lease ran out calls) in a schema of this case's, ahead of pg_catalog, and there it
 * waits for an advisory lock this case holds until the first claim has committed. */
static void *claim_in_thread(void *arg) {
  return mend__pg_claim(arg, "b", 30, 10, 0);
}

static void test_claim_sees_new_holder(void) {
  new_case();
  PGconn *gate = raw();
  sql(gate, "CREATE SCHEMA gate");
  sql(gate, "CREATE FUNCTION gate.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS $f$"
            " BEGIN IF current_query() LIKE 'WITH gone AS%' THEN"
            " PERFORM pg_advisory_lock_shared(4242); PERFORM pg_advisory_unlock_shared(4242);"
            " END IF; RETURN pg_catalog.clock_timestamp(); END $f$");
  mend_store *setup = open_store();
  if (!setup) return;
  /* the newest run is held by a live worker z: the claim looks for workers gone there first */
  mend_run_rec held = run_rec("held", "z"), free_run = run_rec("free", NULL);
  held.created = 2;
  CHECK_EQ_INT(mend__pg_insert_run(setup, &held), 0);
  CHECK_EQ_INT(mend__pg_insert_run(setup, &free_run), 0);
  CHECK_EQ_INT(mend__pg_commit(setup), 0);
  mend__pg_close(setup);
  sql(gate, "INSERT INTO workers(owner, lease_until) VALUES('z', now() + interval '1 hour')");
  char plain[sizeof conninfo];
  snprintf(plain, sizeof plain, "%s", conninfo);
  snprintf(conninfo + strlen(conninfo), sizeof conninfo - strlen(conninfo),
           " options='-csearch_path=public,gate,pg_catalog'");
  mend_store *b = open_store();
  snprintf(conninfo, sizeof conninfo, "%s", plain);
  mend_store *a = open_store();
  if (!a || !b) return;
  mend__pg_set_fence(a, "a", 30);
  mend__pg_set_fence(b, "b", 30);
  sql(gate, "SELECT pg_advisory_lock(4242)");
  pthread_t t;
  pthread_create(&t, NULL, claim_in_thread, b);
  CHECK_EQ_INT(lock_waiters("advisory"), 1);
  /* a's first transaction: its workers row and its claim of the free run, committed */
  json_t *got = mend__pg_claim(a, "a", 30, 10, 0);
  CHECK(got && json_array_size(got) == 1);
  CHECK_STR(json_string_value(json_array_get(got, 0)), "free");
  json_decref(got);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  sql(gate, "SELECT pg_advisory_unlock(4242)");
  void *rc;
  pthread_join(t, &rc);
  got = rc;
  CHECK(got && json_array_size(got) == 0);
  json_decref(got);
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'free' AND owner = 'a'"), 1);
  mend__pg_close(a);
  mend__pg_close(b);
  PQfinish(gate);
  drop_case();
}

/* A database made by a mend of schema 1 is upgraded at open, its rows kept. */
/* The run's image for the engine: typed, the same as the view says (image_check.h), in one
 * round trip; a status this mend does not know is an error that names it. */
static void test_run_image(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  image_checks(s);
  PGconn *c = raw();
  sql(c, "UPDATE runs SET status = 'bogus' WHERE id = 'img1'");
  PQfinish(c);
  mend_run_image img;
  CHECK_EQ_INT(mend_store_run_image(s, "img1", &img), -1);
  CHECK(strstr(mend_store_errmsg(s), "run img1 has an unknown status \"bogus\"") != NULL);
  CHECK(img.steps == NULL && img.workflow == NULL);
  /* the connection is fine after: the next read answers */
  CHECK_EQ_INT(mend_store_run_image(s, "img2", &img), 0);
  CHECK_EQ_INT(img.nsteps, 1);
  mend_run_image_free(&img);
  mend_store_close(s);
  drop_case();
}

static void test_upgrade(void) {
  new_case();
  PGconn *c = raw();
  sql(c, "BEGIN");
  sql(c, mend__pg_migrations[0]);
  sql(c, "INSERT INTO meta(key, value) VALUES ('application', 'mend'), ('schema_version', '1')");
  sql(c, "INSERT INTO runs(id, workflow, status, created, updated, run_key)"
         " VALUES ('old', 'order', 'succeeded', 1, 2, 'k-old')");
  sql(c, "COMMIT");
  PQfinish(c);
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_tables WHERE tablename = 'tokens'"), 0);
  mend_store *s = open_store();
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(mend__pg_schema_version(s), MEND_PG_SCHEMA_VERSION);
  CHECK_EQ_INT(count("SELECT value::int FROM meta WHERE key = 'schema_version'"),
               MEND_PG_SCHEMA_VERSION);
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_indexes WHERE indexname = 'runs_parent'"), 1);
  /* the key's index holds only runs with a key (fewer index entries a step), and still makes
   * a start with a key taken find the run that has it */
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_indexes WHERE indexname = 'runs_key'"
                     " AND indexdef LIKE '%UNIQUE%WHERE (run_key IS NOT NULL)%'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_constraint WHERE conname = 'runs_run_key_key'"), 0);
  mend_run_rec again = run_rec("new-with-old-key", NULL);
  again.run_key = "k-old";
  CHECK_EQ_INT(mend__pg_insert_run(s, &again), 1);
  char found[64] = "";
  CHECK_EQ_INT(mend__pg_find_run_key(s, "k-old", found, sizeof found), 1);
  CHECK_STR(found, "old");
  mend_run_rec nokey1 = run_rec("no-key-1", NULL), nokey2 = run_rec("no-key-2", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &nokey1), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &nokey2), 0);
  json_t *run = mend_store_run(s, "old");
  CHECK_STR(json_string_value(json_object_get(run, "status")), "succeeded");
  CHECK(run && json_object_get(run, "parent_run") == NULL);
  json_decref(run);
  CHECK_EQ_INT(mend__pg_set_parent(s, "old", "p", "x"), 0);
  CHECK_EQ_INT(mend__pg_put_token(s, "t", "old", "x", 1, 1), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE parent_run = 'p'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id LIKE 'no-key-%' AND run_key IS NULL"), 2);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE run_key = 'k-old'"), 1);
  mend__pg_close(s);
  drop_case();
}

/* A claim's runs read ahead together (pg_image.c): each image is the one a read of that run
 * alone gives (image_check_view), past a chunk's end, with an id that needs quoting in an
 * array; the runs of a chunk are read with its first (a change committed elsewhere since is
 * not in them, as if read at the claim); a write of this batch to one of them since is. */
static void test_claimed_images(void) {
  new_case();
  mend_store *a = open_store(), *b = open_store();
  if (!a || !b) return;
  mend__pg_set_fence(b, "b", 30);
  enum { N = 150 };   /* more than a chunk */
  char ids[N][32];
  for (int i = 0; i < N; i++) {
    if (i == 7) snprintf(ids[i], sizeof ids[i], "q\"u,o{t}e\\%d", i);
    else snprintf(ids[i], sizeof ids[i], "claimed-%03d", i);
    mend_run_rec r = run_rec(ids[i], NULL);
    r.created = i;
    r.step_names = "[\"a\",\"b\"]";
    CHECK_EQ_INT(mend__pg_insert_run(a, &r), 0);
    for (long k = 1; k <= i % 4; k++) {
      mend_history_rec h = hist(ids[i], k);
      h.at = 2 + (double)k;
      CHECK_EQ_INT(mend__pg_append_history(a, &h), 0);
    }
    if (i % 3) {
      mend_step_rec st = {.run_id = ids[i], .idx = 0, .name = "a", .status = "succeeded",
                          .attempts = 1, .result = "{\"n\":1}", .due = -1, .last_delay = -1,
                          .updated = 3};
      if (i % 3 == 2) {   /* a step that failed, its kind and severity beside its text */
        st.status = "failed";
        st.result = NULL;
        st.error = "sold out";
        st.error_kind = "compensable";
        st.error_severity = 3;
      }
      CHECK_EQ_INT(mend__pg_put_step(a, &st), 0);
    }
  }
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  json_t *got = mend__pg_claim(b, "b", 30, 1000, MEND_CLAIM_FREE);
  CHECK(got && json_array_size(got) == N);
  if (!got || json_array_size(got) != N) return;
  mend_run_image img;
  CHECK_EQ_INT(mend_store_run_image(b, ids[0], &img), 0);
  image_check_view(b, ids[0], &img);
  mend_run_image_free(&img);
  /* read with ids[0]: a history row committed by another since is not in ids[1]'s image */
  PGconn *c = raw();
  sql(c, "DELETE FROM history WHERE run_id = 'claimed-001'");
  PQfinish(c);
  CHECK_EQ_INT(mend_store_run_image(b, ids[1], &img), 0);
  CHECK_EQ_INT(img.nhistory, 1);
  CHECK_EQ_INT(img.last_seq, 1);
  mend_run_image_free(&img);
  /* written in this batch since: in the image */
  mend_history_rec h = hist(ids[2], 3);
  h.at = 9;
  CHECK_EQ_INT(mend__pg_append_history(b, &h), 0);
  CHECK_EQ_INT(mend__pg_request_cancel(b, ids[3]), 0);
  /* taken out of order: a later chunk read first, then a write to one of the first chunk */
  CHECK_EQ_INT(mend_store_run_image(b, ids[120], &img), 0);
  image_check_view(b, ids[120], &img);
  mend_run_image_free(&img);
  mend_history_rec h50 = hist(ids[50], 7);
  h50.at = 11;
  CHECK_EQ_INT(mend__pg_append_history(b, &h50), 0);
  CHECK_EQ_INT(mend_store_run_image(b, ids[50], &img), 0);
  CHECK(img.last_seq == 7 && img.last_at == 11);
  mend_run_image_free(&img);
  for (int i = 2; i < N; i++) {
    CHECK_EQ_INT(mend_store_run_image(b, json_string_value(json_array_get(got, (size_t)i)), &img), 0);
    image_check_view(b, json_string_value(json_array_get(got, (size_t)i)), &img);
    CHECK_EQ_INT(img.nsteps, 2);
    if (i == 2) CHECK(img.nhistory == 3 && img.last_seq == 3 && img.last_at == 9);
    if (i == 3) CHECK_EQ_INT(img.cancel_requested, 1);
    if (i == 7) CHECK_STR(img.workflow, "order");
    if (i % 3 == 2) {   /* read ahead, as written */
      CHECK_STR(img.steps[0].error_kind, "compensable");
      CHECK_EQ_INT(img.steps[0].error_severity, 3);
    }
    if (i % 3 == 1) CHECK(img.steps[0].error_kind == NULL && img.steps[0].error_severity == 0);
    mend_run_image_free(&img);
  }
  /* a second take of one is read again, not given twice */
  CHECK_EQ_INT(mend_store_run_image(b, ids[5], &img), 0);
  image_check_view(b, ids[5], &img);
  mend_run_image_free(&img);
  /* read ahead, not taken, and the batch committed: a later read is a fresh one */
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  CHECK_EQ_INT(mend__pg_release_owner(a, "b"), 0);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  json_decref(got);
  got = mend__pg_claim(b, "b", 30, 2, MEND_CLAIM_FREE);
  CHECK(got && json_array_size(got) == 2);
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  c = raw();
  sql(c, "DELETE FROM history WHERE run_id = 'claimed-001'");
  sql(c, "UPDATE runs SET error = 'changed' WHERE id = 'claimed-000'");
  PQfinish(c);
  CHECK_EQ_INT(mend_store_run_image(b, ids[0], &img), 0);
  CHECK_STR(img.error, "changed");
  mend_run_image_free(&img);
  json_decref(got);
  /* a claim whose batch failed (rolled back): the next transaction reads afresh */
  CHECK_EQ_INT(mend__pg_release_owner(a, "b"), 0);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  got = mend__pg_claim(b, "b", 30, 3, MEND_CLAIM_FREE);
  CHECK(got && json_array_size(got) == 3);
  CHECK_EQ_INT(mend_store_run_image(b, ids[0], &img), 0);   /* reads ids[1] and ids[2] too */
  mend_run_image_free(&img);
  CHECK_EQ_INT(mend__pg_update_run(b, "no-such-run", "succeeded", NULL, 0, 1, NULL), 0);
  CHECK(mend__pg_commit(b) != 0);   /* "no run": the claim is rolled back */
  c = raw();
  sql(c, "UPDATE runs SET error = 'after the failure' WHERE id = 'claimed-002'");
  PQfinish(c);
  CHECK_EQ_INT(mend__pg_begin(PG(b)), 0);   /* a new transaction */
  CHECK_EQ_INT(mend_store_run_image(b, ids[2], &img), 0);
  CHECK_STR(img.error, "after the failure");
  mend_run_image_free(&img);
  json_decref(got);
  mend__pg_close(a);
  mend__pg_close(b);
  drop_case();
}

int main(void) {
  base = getenv("MEND_TEST_PG");
  if (!base || !*base) {
    printf("test_pg_store: skipped: MEND_TEST_PG names no PostgreSQL server"
           " (a libpq URI, e.g. postgresql://postgres@localhost:5432/postgres)\n");
    return 0;
  }
  admin = PQconnectdb(base);
  if (PQstatus(admin) != CONNECTION_OK) {
    printf("test_pg_store: skipped: cannot reach MEND_TEST_PG: %s", PQerrorMessage(admin));
    PQfinish(admin);
    return 0;
  }
  sql(admin, "SET client_min_messages = warning");
  test_errors();
  test_schema_race();
  test_batches();
  test_run_arrays();
  test_one_value();
  test_new_steps();
  test_new_steps_late();
  test_writer_thread();
  test_claims();
  test_fence();
  test_dropped_connection();
  test_events();
  test_committed_events();
  test_committed_looks();
  test_look_ahead();
  test_aux_opened_aside();
  test_thread_cpus();
  test_aux_keeps_writer_error();
  test_aux_on_writers_host();
  test_ticked_events();
  test_recorded_events();
  test_tokens();
  test_child_end_fenced();
  test_deadlock();
  test_claim_sees_new_holder();
  test_upgrade();
  test_run_image();
  test_claimed_images();
  PQfinish(admin);
  return check_done("test_pg_store");
}
