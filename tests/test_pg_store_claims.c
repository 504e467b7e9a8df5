/*
 * test_pg_store_claims: who owns a run on PostgreSQL: claims and leases on the server's clock,
 * the fence (a stalled worker's writes to a run another took are dropped and reported), a
 * connection killed between batches (opened again, nothing lost) and mid-batch (not
 * acknowledged, nothing written), a child's end fenced with the child, and a claim that sees
 * a new holder.
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
  CHECK_EQ_INT(
      count("SELECT count(*) FROM runs WHERE id = 'r3' AND status = 'failed' AND error = 'boom'"),
      1);
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

int main(void) {
  if (!pg_case_begin("test_pg_store_claims")) return 0;
  test_claims();
  test_fence();
  test_dropped_connection();
  test_child_end_fenced();
  test_claim_sees_new_holder();
  return pg_case_end("test_pg_store_claims");
}
