/*
 * test_pg_store_batches: the PostgreSQL store's batches: reading the open batch, commit and the
 * batch numbers, steps added late, one value and the runs' arrays written in one statement,
 * the writer thread, a failed write failing its whole batch, and a deadlock's victim.
 *
 * Against a real server named by MEND_TEST_PG (tests/pg_case.h: each case gets a database of
 * its own, dropped after; skipped, saying so, without a server). Must never: let one case
 * read what another left.
 */
#include "check.h"
#include "pg_case.h"
#include "store/pg/pg_int.h"

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
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id = 'r1' AND seq = 5 AND step = 'a'"),
               1);
  /* a number among them taken meanwhile: each renumbered as it would be on its own, in order */
  CHECK_EQ_INT(
      count("INSERT INTO history(run_id, seq, event) VALUES ('r1', 6, 'note') RETURNING seq"), 6);
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
  CHECK_EQ_INT(
      count("SELECT count(*) FROM runs WHERE id = 'r2' AND error = 'x' AND reason = 'why'"), 1);

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
  CHECK_EQ_INT(count("SELECT count(*) FROM steps WHERE run_id = 'late1' AND status = 'succeeded'"),
               1);
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
  CHECK_EQ_INT(
      count("SELECT count(*) FROM runs WHERE id IN ('o1', 'o2', 'o3') AND status = 'failed'"
            " AND attention = 1 AND updated = 9 AND reason IS NULL"
            " AND error = '{\"a\":\"b\\\\c, d\"} NULL \" \\\\ }{'"),
      3);
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
  CHECK_EQ_INT(
      count("SELECT count(*) FROM steps WHERE status = 'succeeded' AND result = '{\"n\":1}'"), 3);
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
  CHECK_EQ_INT(
      count("INSERT INTO history(run_id, seq, event) VALUES ('e0', 3, 'note') RETURNING seq"), 3);
  mend_history_rec h = hist("e0", 3);
  h.step = "late";
  CHECK_EQ_INT(mend__pg_append_history(s, &h), 0);
  engine_batch(s, 8, 1, 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(pg->writes_alone - alone, 3);   /* that flush's history rows */
  alone = pg->writes_alone;
  CHECK_EQ_INT(count("SELECT seq FROM history WHERE run_id = 'e0' AND step = 'late'"), 4);
  CHECK_EQ_INT(count("SELECT count(*) FROM history WHERE run_id IN ('e7', 'e8')"), 4);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id IN ('e7', 'e8') AND status = 'succeeded'"),
               2);

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
  CHECK_EQ_INT(
      count("SELECT count(*) FROM runs WHERE id = 'e1' AND error IS NULL AND reason IS NULL"
            " AND status = 'failed'"),
      1);
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
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'e2' AND error = '' AND updated = -0.5"),
               1);

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
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE status = 'running' AND id IN ('h2', 'e2')"),
               0);
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

int main(void) {
  if (!pg_case_begin("test_pg_store_batches")) return 0;
  test_batches();
  test_run_arrays();
  test_one_value();
  test_new_steps();
  test_new_steps_late();
  test_writer_thread();
  test_deadlock();
  return pg_case_end("test_pg_store_batches");
}
