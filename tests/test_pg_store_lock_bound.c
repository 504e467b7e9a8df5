/*
 * test_pg_store_lock_bound: while the writer thread's batch is in its first try against another
 * session's row lock (not yet marked as waiting: the mark comes once a try met its bound,
 * write_wait_ms = max(2 s, deadlock_timeout + 1 s)), a commit on the loop's thread (busy wait
 * 0.1 s) answers MEND_STORE_BUSY within its own bound, and a close (a stop) cancels the try
 * rather than wait for it. Needs MEND_TEST_PG (tests/pg_case.h: a database of its own,
 * dropped after; skipped, saying so, without a server).
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

static void test_loop_commit_during_first_try(void) {
  new_case();
  mend_store *s = open_store();
  CHECK(s != NULL);
  if (!s) return;
  printf("write_wait_ms read at connect: %d\n", ((mend_pg *)(void *)s)->write_wait_ms);
  mend_run_rec a = run_rec("run-a", NULL), b = run_rec("run-b", NULL);
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
  printf("loop's commit during the writer's first try: rc %d after %.2f s (busy wait 0.1 s)\n", rc,
         took);
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
  if (!pg_case_begin("test_pg_store_lock_bound")) return 0;
  test_loop_commit_during_first_try();
  return pg_case_end("test_pg_store_lock_bound");
}
