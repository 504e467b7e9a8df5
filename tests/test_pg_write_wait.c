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
#include "pg_case.h"
#include "store/pg/pg_int.h"

#include <mend.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void test_writer_waits(void) {
  new_case();
  mend_store *s = open_store();
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec a = run_rec("run-a", NULL), b = run_rec("run-b", NULL);
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
  mend_store *s = open_store();
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec a = run_rec("run-a", NULL);
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
  if (!pg_case_begin("test_pg_write_wait")) return 0;
  test_writer_waits();
  test_commit_kept();
  return pg_case_end("test_pg_write_wait");
}
