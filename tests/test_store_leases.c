/*
 * test_store_leases: which worker may write a run. The fence: a worker whose lease ran out (a
 * stall) while another took some of its runs; its next transaction renews its lease and drops
 * every write to the runs it lost, then and later, until it takes one back, and the engine
 * hears which runs those were. A lease is one row per worker: while it lasts nobody claims the
 * worker's runs, and closing the store ends it. A run given back is fenced the same; the looks
 * for claimable work find what there is.
 *
 * Two stores on one real file in a temporary directory (tests/store_case.h). Must never: lean
 * on what another case left in its database.
 */
#include "check.h"
#include "store_case.h"
#include "store/store_int.h"   /* stall(): a test of the SQLite backend itself */

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void note_lost_id(void *ud, const char *id) {
  char *seen = ud;
  size_t n = strlen(seen);
  snprintf(seen + n, 128 - n, "%s%s", n ? "," : "", id);
}

static int history_rows(sqlite3 *db, const char *run) {
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM history WHERE run_id = '%s'", run);
  return raw_int(db, sql);
}

/* Sets an environment variable back to what it was (value, freed), if it had one. */
static void restore_env(const char *name, char *value) {
  if (value) setenv(name, value, 1);
  free(value);
}

/* The worker of `s` stalled: its leases ran out 5 s ago, as far as its fence knows. */
static void stall(mend_store *s) { s->fence_until = (double)time(NULL) - 5; }

/* Two stores on one file; a's worker "wa" holds run g1 (committed), its lease good till
 * now + 30. */
static int two_workers_one_run(const char *path, mend_store **a, mend_store **b) {
  *a = store_at(path, MEND_DURABILITY_PROCESS);
  *b = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(*a && *b);
  if (!*a || !*b) return -1;
  mend_store_set_worker(*a, "wa");
  CHECK_EQ_INT(mend_store_set_fence(*a, "wa", 30), 0);
  mend_run_rec r = run_rec("g1", NULL, "running", 1);
  r.owner = "wa";
  CHECK_EQ_INT(mend_store_insert_run(*a, &r), 0);
  CHECK_EQ_INT(mend_store_commit(*a), 0);
  return 0;
}

static void test_fence(void) {
  /* This test takes the on-time and the late path on purpose, so not the late path for every
   * transaction that MEND_FENCE_LATE=1 asks of the specs. */
  const char *late_env = getenv("MEND_FENCE_LATE");
  char *late_saved = late_env ? strdup(late_env) : NULL;
  unsetenv("MEND_FENCE_LATE");
  const char *path = file_in_dir("fence.db");
  mend_store *a = store_at(path, MEND_DURABILITY_PROCESS);
  mend_store *b = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(a && b);
  if (!a || !b) {
    restore_env("MEND_FENCE_LATE", late_saved);
    return;
  }
  mend_store_set_worker(a, "wa");
  CHECK_EQ_INT(mend_store_set_fence(a, "wa", 30), 0);
  const char *ids[] = {"f1", "f2", "f3"};
  for (int i = 0; i < 3; i++) {
    mend_run_rec r = run_rec(ids[i], NULL, "running", i + 1);
    r.owner = "wa";
    CHECK_EQ_INT(mend_store_insert_run(a, &r), 0);
    mend_step_rec st = step_rec(ids[i], 0, "reserve", "running");
    CHECK_EQ_INT(mend_store_put_step(a, &st), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  char seen[128] = "";
  CHECK_EQ_INT(mend_store_fence_news(a, note_lost_id, seen), 0);   /* on time so far */
  sqlite3 *db = raw_open(path);
  /* the first transaction wrote a's lease, one row for all its runs */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers WHERE owner = 'wa'"), 1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE lease_until IS NOT NULL"), 0);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), 0);   /* a's lease lasts */
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 1), 0);
  json_t *none = mend_store_claim(b, "wb", 30, 10, 0);
  CHECK(none && json_array_size(none) == 0);   /* a's lease lasts: nothing to take */
  json_decref(none);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  json_t *holders = mend_store_lease_holders(b);
  CHECK(holders && json_array_size(holders) == 2);   /* wa, and wb since its claim */
  json_decref(holders);

  /* a stalls past its lease; b takes the oldest of a's runs, and finishes the next one */
  CHECK_EQ_INT(
      sqlite3_exec(db, "UPDATE workers SET lease_until = lease_until - 60 WHERE owner = 'wa'", NULL,
                   NULL, NULL),
      SQLITE_OK);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_GONE);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 1), MEND_CLAIMABLE_FREE | MEND_CLAIMABLE_GONE);
  json_t *taken = mend_store_claim(b, "wb", 30, 1, 0);
  CHECK(taken && json_array_size(taken) == 1 &&
        strcmp(json_string_value(json_array_get(taken, 0)), "f1") == 0);
  json_decref(taken);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  /* it took what it asked for, not all there was: a's row stays, and says there is more */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers WHERE owner = 'wa'"), 1);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_GONE);
  CHECK_EQ_INT(mend_store_take(b, "f2", "wb", 30), 0);
  CHECK_EQ_INT(mend_store_update_run(b, "f2", "succeeded", NULL, 0, 5, NULL), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);

  /* a wakes up past its fence and writes to all three */
  stall(a);
  for (int i = 0; i < 3; i++) {
    mend_history_rec h = {ids[i], "reserve", 6,  "step", "running", "succeeded",
                          1,      NULL,      -1, NULL,   0,         NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
    mend_step_rec st = step_rec(ids[i], 0, "reserve", "succeeded");
    CHECK_EQ_INT(mend_store_update_step(a, &st), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(history_rows(db, "f1"), 0);
  CHECK_EQ_INT(history_rows(db, "f2"), 0);   /* finished by b: no owner now, and not ours */
  CHECK_EQ_INT(history_rows(db, "f3"), 1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM steps WHERE status = 'succeeded'"), 1);
  /* the lease a holds was renewed, and f3 is a's again for everyone */
  CHECK_EQ_INT(
      raw_int(db, "SELECT lease_until > strftime('%s','now') FROM workers WHERE owner = 'wa'"), 1);
  none = mend_store_claim(b, "wb", 30, 10, 0);
  CHECK(none && json_array_size(none) == 0);
  json_decref(none);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(mend_store_fence_news(a, note_lost_id, seen), 1);
  CHECK_STR(seen, "f1,f2");
  json_t *held = mend_store_held(a);
  CHECK(held && json_array_size(held) == 1 &&
        strcmp(json_string_value(json_array_get(held, 0)), "f3") == 0);
  json_decref(held);
  mend_store_fence_verified(a);

  /* on time again, writes to a lost run are still dropped; a repair by a person is not */
  mend_history_rec late = {"f1", "reserve", 7,  "step", "succeeded", "running",
                           2,    NULL,      -1, NULL,   0,           NULL};
  CHECK_EQ_INT(mend_store_append_history(a, &late), 0);
  mend_store_repairing(a, 1);
  mend_history_rec note = {"f2", NULL, 7,  "operator",  NULL, NULL,
                           0,    NULL, -1, "looked at", 0,    NULL};
  CHECK_EQ_INT(mend_store_append_history(a, &note), 0);
  mend_store_repairing(a, 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(history_rows(db, "f1"), 0);
  CHECK_EQ_INT(history_rows(db, "f2"), 1);
  seen[0] = '\0';
  CHECK_EQ_INT(mend_store_fence_news(a, note_lost_id, seen), 0);
  CHECK_STR(seen, "");

  /* taken back, it is a's again */
  CHECK_EQ_INT(mend_store_take(a, "f1", "wa", 30), 0);
  CHECK_EQ_INT(mend_store_append_history(a, &late), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(history_rows(db, "f1"), 1);

  /* A renewal is recorded like a write and moves the fence once it has run: the transaction
   * after it is on time, though the late path's own renewal (a lease of 1 ms) is long over. */
  CHECK_EQ_INT(mend_store_set_fence(a, "wa", 0.001), 0);
  stall(a);
  CHECK_EQ_INT(mend_store_renew(a, "wa", 30), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(
      raw_int(db,
              "SELECT lease_until >= strftime('%s','now') + 20 FROM workers WHERE owner = 'wa'"),
      1);
  CHECK_EQ_INT(mend_store_fence_news(a, note_lost_id, seen), 1);   /* that one began late */
  mend_store_fence_verified(a);
  struct timespec pause = {0, 20 * 1000 * 1000};   /* the 1 ms lease is over */
  nanosleep(&pause, NULL);
  CHECK_EQ_INT(mend_store_append_history(a, &late), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(mend_store_fence_news(a, note_lost_id, seen), 0);

  /* A renewal recorded before a stall may run after the late path renewed: it never shortens
   * the lease. */
  CHECK_EQ_INT(mend_store_renew(a, "wa", 1), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(
      raw_int(db,
              "SELECT lease_until >= strftime('%s','now') + 20 FROM workers WHERE owner = 'wa'"),
      1);

  /* a closes: its lease ends at once, and what it still held is b's to take: nobody's, so
   * that the quick look finds it */
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), 0);
  mend_store_close(a);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers WHERE owner = 'wa'"), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE owner IS NULL AND status = 'running'"),
               2);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_FREE);
  taken = mend_store_claim(b, "wb", 30, 10, 0);
  CHECK(taken && json_array_size(taken) == 2);   /* f1 and f3 */
  json_decref(taken);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), 0);
  sqlite3_close(db);
  mend_store_close(b);
  restore_env("MEND_FENCE_LATE", late_saved);
}

/* A run a worker gave back is no longer its to write: what it records for the run after the
 * release (a stopping worker's attempt that ended late) is dropped, even while its lease is
 * good, and another worker's state of the run stands. Taken back, the run is written again. */
static void test_released_run_is_fenced(void) {
  const char *path = file_in_dir("released.db");
  mend_store *a, *b;
  if (two_workers_one_run(path, &a, &b) != 0) return;
  CHECK_EQ_INT(mend_store_release(a, "g1", "wa"), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  /* another worker takes it and finishes it */
  CHECK_EQ_INT(mend_store_take(b, "g1", "wb", 30), 0);
  CHECK_EQ_INT(mend_store_update_run(b, "g1", "succeeded", NULL, 0, 5, NULL), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  /* the first worker's late writes: dropped, not an error */
  CHECK_EQ_INT(mend_store_update_run(a, "g1", "compensating", NULL, 0, 6, NULL), 0);
  mend_step_rec st = step_rec("g1", 0, "reserve", "failed");
  CHECK_EQ_INT(mend_store_put_step(a, &st), 0);
  mend_history_rec h = {"g1", "reserve", 6,  "step", "running", "failed",
                        1,    NULL,      -1, NULL,   9,         NULL};
  CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  sqlite3 *db = raw_open(path);
  char *status = raw_text(db, "SELECT status FROM runs WHERE id = 'g1'");
  CHECK_STR(status, "succeeded");
  free(status);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM steps WHERE run_id = 'g1'"), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'g1'"), 0);
  /* taken back (a repair hands it to a again), it is a's to write once more */
  CHECK_EQ_INT(mend_store_take(a, "g1", "wa", 30), 0);
  CHECK_EQ_INT(mend_store_update_run(a, "g1", "failed", NULL, 0, 7, NULL), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  status = raw_text(db, "SELECT status FROM runs WHERE id = 'g1'");
  CHECK_STR(status, "failed");
  free(status);
  sqlite3_close(db);
  mend_store_close(a);
  mend_store_close(b);
  remove_db(path);
}

/* A serving worker looks for work every poll. The quick look finds runs nobody holds and
 * workers whose lease ran out, whatever the number of runs held; a claim that took all there
 * was forgets those workers, or the look would find them forever. The thorough look also
 * finds a run whose holder has no row at all. */
static void test_claimable(void) {
  const char *path = file_in_dir("claimable.db");
  mend_store *a, *b;
  if (two_workers_one_run(path, &a, &b) != 0) return;
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), 0);

  /* a worker that crashed long ago, its runs long taken: its row is forgotten by a claim that
   * took all there was, with the runs of one that stalled */
  CHECK_EQ_INT(sqlite3_exec(db, "INSERT INTO workers VALUES('crashed', 1);"
                                "UPDATE workers SET lease_until = 2 WHERE owner = 'wa'",
                            NULL, NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_GONE);
  /* a run nobody holds (as `mend start` records it): a claim of those only takes it, and
   * neither a's run nor the rows of workers gone */
  mend_run_rec free_run = run_rec("g0", NULL, "running", 0.5);
  CHECK_EQ_INT(mend_store_insert_run(b, &free_run), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_FREE | MEND_CLAIMABLE_GONE);
  json_t *taken = mend_store_claim(b, "wb", 30, 10, MEND_CLAIM_FREE);
  CHECK(taken && json_array_size(taken) == 1 &&
        strcmp(json_string_value(json_array_get(taken, 0)), "g0") == 0);
  json_decref(taken);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers"), 3);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_GONE);
  taken = mend_store_claim(b, "wb", 30, 10, 0);
  CHECK(taken && json_array_size(taken) == 1 &&
        strcmp(json_string_value(json_array_get(taken, 0)), "g1") == 0);
  json_decref(taken);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers"), 1);   /* wb */
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), 0);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 1), 0);
  /* the one that stalled writes its row again with its next batch, late as it is */
  stall(a);
  mend_history_rec h = {"g1", NULL, 3, "step", NULL, "running", 1, NULL, -1, NULL, 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers WHERE owner = 'wa' AND lease_until > 100"),
               1);
  CHECK_EQ_INT(history_rows(db, "g1"), 0);   /* g1 is b's now */

  /* a run whose holder has no row (before schema 7, or a bug): only the thorough look sees it */
  CHECK_EQ_INT(sqlite3_exec(db, "INSERT INTO runs(id, workflow, status, created, updated, owner)"
                                " VALUES('g2', 'wf', 'running', 5, 5, 'nobody')",
                            NULL, NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), 0);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 1), MEND_CLAIMABLE_FREE | MEND_CLAIMABLE_GONE);
  taken = mend_store_claim(b, "wb", 30, 10, 0);
  CHECK(taken && json_array_size(taken) == 1);
  json_decref(taken);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 1), 0);
  sqlite3_close(db);
  mend_store_close(a);
  mend_store_close(b);
  remove_db(path);
}

int main(void) {
  store_case_begin("store-leases");
  test_fence();
  test_released_run_is_fenced();
  test_claimable();
  return store_case_end("store_leases");
}
