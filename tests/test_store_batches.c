/*
 * test_store_batches: the SQLite store's batches: what another connection sees of an open one,
 * the writer thread (hand-off, a batch in parts, a failure in it, reads that flush it and the
 * looks that do not), and another process's write lock, which a batch waits out whole.
 *
 * Against a real file in a temporary directory (tests/store_case.h). Must never: lean on what
 * another case left in its database.
 */
#include "check.h"
#include "store_case.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void test_batch_visibility(void) {
  const char *path = file_in_dir("batch.db");
  mend_store *a = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(a != NULL);
  if (!a) return;
  mend_run_rec r = run_rec("b1", "k1", "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &r), 0);

  /* A second connection opens while the first holds its batch, and does not see it. */
  mend_store *b = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(b != NULL);
  if (!b) { mend_store_close(a); return; }
  json_t *v = mend_store_run(b, "b1");
  CHECK(v == NULL);
  json_decref(v);
  char id[64];
  CHECK_EQ_INT(mend_store_find_run_key(b, "k1", id, sizeof id), 0);
  /* The writing connection reads its own batch. */
  v = mend_store_run(a, "b1");
  CHECK(v != NULL);
  json_decref(v);

  CHECK_EQ_INT(mend_store_commit(a), 0);
  v = mend_store_run(b, "b1");
  CHECK(v != NULL);
  json_decref(v);
  CHECK_EQ_INT(mend_store_find_run_key(b, "k1", id, sizeof id), 1);

  /* Closing with a batch open rolls it back. */
  mend_run_rec r2 = run_rec("b2", "k2", "running", 2);
  CHECK_EQ_INT(mend_store_insert_run(a, &r2), 0);
  mend_store_close(a);
  v = mend_store_run(b, "b2");
  CHECK(v == NULL);
  CHECK_STR(mend_store_errmsg(b), "no run b2");
  /* And the write lock went with it: the other connection can write. */
  CHECK_EQ_INT(mend_store_insert_run(b, &r2), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  mend_store_close(b);

  a = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(a != NULL);
  if (!a) return;
  v = mend_store_runs(a, NULL, NULL, 0);
  CHECK_EQ_INT(json_array_size(v), 2);
  json_decref(v);
  mend_store_close(a);
}

static int writer_batches;

static void count_batch(void *ud) {
  (void)ud;
  __atomic_add_fetch(&writer_batches, 1, __ATOMIC_SEQ_CST);
}

/* A read's flush of the open batch is counted (two system calls of the thread's CPU clock) only
 * once someone asked for the count: an engine that never ticks does not pay for it, in a
 * recovery once a run. */
static void test_flushes_counted_once_asked(void) {
  const char *path = file_in_dir("flushes.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("f1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  json_t *hist = mend_store_history(s, "f1");   /* runs the insert first: not counted */
  json_decref(hist);
  unsigned long flushed;
  double cpu;
  int pending;
  mend_store_read_flushes(s, &flushed, &cpu, &pending);
  CHECK_EQ_INT((int)flushed, 0);
  CHECK(cpu == 0);
  mend_history_rec h = {"f1", NULL, 1, "run", NULL, "running", 0, NULL, -1, NULL, 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  hist = mend_store_history(s, "f1");   /* asked: counted */
  CHECK(hist && json_array_size(hist) == 1);
  json_decref(hist);
  mend_store_read_flushes(s, &flushed, &cpu, &pending);
  CHECK_EQ_INT((int)flushed, 1);
  mend_store_close(s);
}

/* A store on a file of the test directory, with its writer thread (done(ud) after each job). */
static mend_store *writer_store(const char *path, void (*done)(void *ud), void *ud) {
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  if (!s) return NULL;
  if (mend_store_start_writer(s, done, ud) != 0) {
    fprintf(stderr, "writer thread: %s\n", mend_store_errmsg(s));
    mend_store_close(s);
    return NULL;
  }
  return s;
}

/* run()'s looks and a serving worker's polls at what other processes ask (a cancel, an event)
 * read committed rows through the reader: a look that finds nothing neither waits for the
 * writer thread nor runs the open batch's records on its thread, and what another connection
 * committed is seen at once. */
static void test_looks_without_the_batch(void) {
  const char *path = file_in_dir("looks.db");
  mend_store *s = writer_store(path, NULL, NULL);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("c1", NULL, "running", 1);
  r.owner = "w1";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  mend_history_rec h = {"c1", NULL, 1, "run", NULL, "running", 0, NULL, -1, NULL, 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  unsigned long flushed;
  double cpu;
  int pending;
  mend_store_read_flushes(s, &flushed, &cpu, &pending);
  CHECK_EQ_INT(pending, 1);
  CHECK_EQ_INT(mend_store_cancels_requested(s, "w1"), 0);
  CHECK_EQ_INT((int)mend_store_last_event(s), 0);
  mend_store_read_flushes(s, &flushed, &cpu, &pending);
  CHECK_EQ_INT(pending, 1);   /* still only recorded */
  CHECK_EQ_INT((int)flushed, 0);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(db, "UPDATE runs SET cancel_requested = 1 WHERE id = 'c1';"
                                "INSERT INTO inbox(run_id, name, sent) VALUES('c1', 'go', 2)",
                            NULL, NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(mend_store_cancels_requested(s, "w1"), 1);
  CHECK_EQ_INT(mend_store_cancels_requested(s, "w2"), 0);   /* held by w1, not w2 */
  long long last = mend_store_last_event(s);
  CHECK(last >= 1);
  mend_store_read_flushes(s, &flushed, &cpu, &pending);
  CHECK_EQ_INT(pending, 1);
  /* the full read goes through the batch, and finds the same */
  json_t *ids = mend_store_cancel_requests(s, "w1");
  CHECK(ids && json_array_size(ids) == 1);
  CHECK_STR(json_string_value(json_array_get(ids, 0)), "c1");
  json_decref(ids);
  mend_store_read_flushes(s, &flushed, &cpu, &pending);
  CHECK_EQ_INT(pending, 0);
  /* an event this store sends is in no look until its batch is durable */
  CHECK_EQ_INT(mend_store_send_event(s, "c1", "more", NULL, NULL, 3, NULL), 0);
  CHECK_EQ_INT((int)mend_store_last_event(s), (int)last);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK((int)mend_store_last_event(s) > (int)last);
  mend_store_close(s);
  sqlite3_close(db);
}

/* With the writer thread: recorded writes reach the file only at the hand-off, a batch is
 * durable once its number is, and reads in between see what was recorded. */
static void test_writer_thread(void) {
  const char *path = file_in_dir("writer.db");
  mend_store *s = store_at(path, MEND_DURABILITY_FULL);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(mend_store_start_writer(s, count_batch, NULL), 0);
  unsigned long first = mend_store_open_seq(s);
  CHECK(mend_store_durable_seq(s) < first);
  mend_run_rec r = run_rec("w1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_history_rec h = {"w1", NULL, 1, "run", NULL, "running", 0, NULL, -1, NULL, 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  CHECK(mend_store_batch_open(s));
  /* nothing has run yet: another connection sees no run */
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), 0);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  CHECK_EQ_INT(mend_store_open_seq(s), first + 1);
  /* the next batch is recorded while the first may still be written */
  mend_history_rec h2 = {"w1", NULL, 2, "run", "running", "succeeded", 0, NULL, -1, NULL, 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &h2), 0);
  CHECK_EQ_INT(mend_store_update_run(s, "w1", "succeeded", NULL, 0, 2, NULL), 0);
  /* what a read would run first on this thread, and what it ran, for a ticking engine's
   * estimate of its next piece */
  unsigned long flushed0, flushed1;
  double cpu0, cpu1;
  int pending;
  mend_store_read_flushes(s, &flushed0, &cpu0, &pending);
  CHECK_EQ_INT(pending, 2);
  /* a read waits for the writer, then sees both batches (the second not yet committed) */
  json_t *hist = mend_store_history(s, "w1");
  CHECK(hist && json_array_size(hist) == 2);
  json_decref(hist);
  mend_store_read_flushes(s, &flushed1, &cpu1, &pending);
  CHECK_EQ_INT(pending, 0);
  CHECK_EQ_INT((int)(flushed1 - flushed0), 2);
  CHECK(cpu1 > cpu0);
  CHECK(mend_store_durable_seq(s) >= first);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 1);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  while (mend_store_writer_busy(s)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CHECK(mend_store_durable_seq(s) >= first + 1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 2);
  char *status = raw_text(db, "SELECT status FROM runs WHERE id = 'w1'");
  CHECK(status && strcmp(status, "succeeded") == 0);
  free(status);
  CHECK(__atomic_load_n(&writer_batches, __ATOMIC_SEQ_CST) >= 1);
  /* nothing recorded: a hand-off makes the open batch durable at once */
  unsigned long open = mend_store_open_seq(s);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  CHECK_EQ_INT(mend_store_durable_seq(s), open);
  /* a failing batch (an update of no run) fails every later call with its cause */
  CHECK_EQ_INT(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 3, NULL), 0);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  CHECK(strstr(mend_store_errmsg(s), "update run: no run nobody") != NULL);
  CHECK(mend_store_history(s, "w1") == NULL);
  mend_store_close(s);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 2);
  sqlite3_close(db);
}

static void count_job(void *ud) { __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST); }

/* More writes in one batch than a log holds (70,000 rows; a log holds 65,536 records): parts
 * go to the writer thread while the rest is recorded, and the batch stays one transaction: nothing
 * is seen or durable before the hand-off, and a failure anywhere in it leaves none of it. */
static void writer_parts(const char *name, int fail) {
  const char *path = file_in_dir(name);
  int jobs = 0;
  mend_store *s = writer_store(path, count_job, &jobs);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("big", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  unsigned long open = mend_store_open_seq(s), durable = mend_store_durable_seq(s);
  enum { ROWS = 70000 };
  for (int i = 1; i <= ROWS; i++) {
    mend_history_rec h = {"big", NULL, i, "note", NULL, NULL, 0, NULL, -1, "x", i, NULL};
    if (mend_store_append_history(s, &h) != 0) { CHECK(0); break; }
  }
  /* parts went to the thread (it says so when done with each, as after a batch) */
  for (int ms = 0; ms < 10000 && !__atomic_load_n(&jobs, __ATOMIC_SEQ_CST); ms++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CHECK(__atomic_load_n(&jobs, __ATOMIC_SEQ_CST) >= 1);
  CHECK_EQ_INT(mend_store_batch_writes(s), ROWS + 1);   /* passed in parts or not, all counted */
  sqlite3 *db = raw_open(path);
  CHECK(mend_store_batch_open(s));
  CHECK_EQ_INT(mend_store_open_seq(s), open);          /* the part took no batch number */
  CHECK_EQ_INT(mend_store_durable_seq(s), durable);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 0);
  if (fail) CHECK_EQ_INT(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 3, NULL), 0);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  if (fail) {
    CHECK_EQ_INT(mend_store_commit(s), -1);
    CHECK(strstr(mend_store_errmsg(s), "update run: no run nobody") != NULL);
    CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), 0);
    CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 0);
  } else {
    CHECK_EQ_INT(mend_store_commit(s), 0);
    CHECK(mend_store_durable_seq(s) >= open);
    CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'big'"), ROWS);
    CHECK_EQ_INT(raw_int(db, "SELECT max(seq) FROM history"), ROWS);
  }
  mend_store_close(s);
  sqlite3_close(db);
  remove_db(path);
}

/* The first run of a workflow version writes the version's row at once (it waits for the
 * write lock); the tests below hold the lock from another connection before the run they
 * record, so the store knows the version from a run before. */
static void know_version(mend_store *s) {
  mend_run_rec r = run_rec("known", NULL, "succeeded", 0.5);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
}

/* A hand-off while the thread writes a part of the same batch (held up here by another
 * connection's write lock) queues the rest behind it and returns at once; the batch is
 * durable, whole, only once the thread has committed it. */
static void writer_queued_rest(void) {
  const char *path = file_in_dir("queued.db");
  int jobs = 0;
  mend_store *s = writer_store(path, count_job, &jobs);
  CHECK(s != NULL);
  if (!s) return;
  know_version(s);
  sqlite3 *db = raw_open(path);
  CHECK(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
  mend_run_rec r = run_rec("q", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  enum { ROWS = 3000 };   /* the thread is idle at record 1,024: a part goes, and waits */
  for (int i = 1; i <= ROWS; i++) {
    mend_history_rec h = {"q", NULL, i, "note", NULL, NULL, 0, NULL, -1, NULL, i, NULL};
    if (mend_store_append_history(s, &h) != 0) { CHECK(0); break; }
  }
  CHECK(mend_store_writer_part(s));
  unsigned long seq = mend_store_open_seq(s);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  CHECK_EQ_INT(mend_store_open_seq(s), seq + 1);
  CHECK(mend_store_writer_busy(s));          /* returned with the part still held up */
  CHECK(!mend_store_writer_part(s));         /* and the rest queued: no second hand-off */
  CHECK(mend_store_durable_seq(s) < seq);
  /* the next batch is recorded meanwhile */
  CHECK_EQ_INT(mend_store_update_run(s, "q", "succeeded", NULL, 0, 2, NULL), 0);
  CHECK(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
  for (int ms = 0; ms < 10000 && mend_store_writer_busy(s); ms++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CHECK(mend_store_durable_seq(s) >= seq);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'q'"), ROWS);
  char *status = raw_text(db, "SELECT status FROM runs WHERE id = 'q'");
  CHECK(status && strcmp(status, "running") == 0);   /* the next batch is not committed */
  free(status);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  status = raw_text(db, "SELECT status FROM runs WHERE id = 'q'");
  CHECK(status && strcmp(status, "succeeded") == 0);
  free(status);
  mend_store_close(s);
  sqlite3_close(db);
  remove_db(path);
}

/* A write that fails in an early part: later calls fail with its cause (not at once: the
 * thread finds it while the caller records), and nothing of the batch is committed. */
static void writer_part_fails(void) {
  const char *path = file_in_dir("part-fails.db");
  mend_store *s = writer_store(path, NULL, NULL);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("early", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 3, NULL), 0);
  int refused = 0;
  for (int i = 1; i <= 200000 && !refused; i++) {
    mend_history_rec h = {"early", NULL, i, "note", NULL, NULL, 0, NULL, -1, NULL, i, NULL};
    refused = mend_store_append_history(s, &h) != 0;
  }
  CHECK(refused);   /* at the latest when a full log waits for the failed part */
  CHECK(strstr(mend_store_errmsg(s), "update run: no run nobody") != NULL);
  /* the failed batch's write lock is let go at once, not kept until the store closes */
  sqlite3 *db = raw_open(path);
  CHECK(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
  CHECK(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  mend_store_close(s);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 0);
  sqlite3_close(db);
  remove_db(path);
}

/* The writer thread cannot begin its transaction (another process holds the write lock): it
 * waits, and the batch is not durable meanwhile. Closed while the lock lasts, the store gives
 * the batch up after the busy timeout (5 s), as a crash would: nothing of it is in the file. */
static void writer_begin_fails(void) {
  const char *path = file_in_dir("begin-fails.db");
  mend_store *s = writer_store(path, NULL, NULL);
  CHECK(s != NULL);
  if (!s) return;
  know_version(s);
  mend_store_set_busy_wait(s, 20);   /* as an engine's loop has it */
  sqlite3 *db = raw_open(path);
  CHECK(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK);
  mend_run_rec r = run_rec("b1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  unsigned long seq = mend_store_open_seq(s);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  CHECK_EQ_INT(mend_store_writer_busy(s), 1);
  CHECK_EQ_INT(mend_store_locked(s), 1);
  CHECK(mend_store_durable_seq(s) < seq);
  mend_store_close(s);
  CHECK(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE id = 'b1'"), 0);
  sqlite3_close(db);
  remove_db(path);
}

/* A batch that fails on the writer thread, while the loop records the next run of a workflow
 * version that batch numbered: the store fails, and says why (TSan: no race on the versions
 * the store knows). */
static void writer_fails_with_new_version(void) {
  const char *path = file_in_dir("fails-version.db");
  for (int round = 0; round < 20; round++) {
    mend_store *s = writer_store(path, NULL, NULL);
    CHECK(s != NULL);
    if (!s) return;
    mend_run_rec r = run_rec("n1", NULL, "running", 1);
    CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
    CHECK_EQ_INT(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 2, NULL), 0);
    CHECK_EQ_INT(mend_store_hand_off(s), 0);
    r.id = "n2";
    mend_store_insert_run(s, &r);   /* may hear of the failure already, or not yet */
    CHECK_EQ_INT(mend_store_commit(s), -1);
    CHECK(strstr(mend_store_errmsg(s), "no run nobody") != NULL);
    mend_store_close(s);
    remove_db(path);
  }
}

static void test_writer_parts(void) {
  writer_parts("parts.db", 0);
  writer_parts("parts-fail.db", 1);
  writer_part_fails();
  writer_begin_fails();
  writer_fails_with_new_version();
  writer_queued_rest();
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Another process's write lock (the sqlite3 shell inside BEGIN IMMEDIATE) is no failure: a
 * batch that cannot begin is kept whole and reported as MEND_STORE_BUSY, nothing of it reaches
 * the file, and it commits complete once the lock goes. The writer thread waits it out by
 * itself. */
static void test_locked(void) {
  const char *path = file_in_dir("locked.db");
  mend_store *s = store_at(path, MEND_DURABILITY_FULL);
  CHECK(s != NULL);
  if (!s) return;
  mend_store_set_busy_wait(s, 20);
  mend_run_rec r = run_rec("l1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_locked(s), 0);

  sqlite3 *holder = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(holder, "BEGIN IMMEDIATE; INSERT INTO meta VALUES('held', 'x')",
                            NULL, NULL, NULL), SQLITE_OK);
  unsigned long durable = mend_store_durable_seq(s);
  mend_history_rec h = {"l1", NULL, 1, "run", NULL, "running", 0, NULL, -1, NULL, 0, NULL};
  /* the first write finds the lock; it is kept, and later ones are only recorded */
  CHECK_EQ_INT(mend_store_append_history(s, &h), MEND_STORE_BUSY);
  CHECK_EQ_INT(mend_store_locked(s), 1);
  CHECK(strstr(mend_store_errmsg(s), "database is locked by another process") != NULL);
  CHECK_EQ_INT(mend_store_update_run(s, "l1", "succeeded", NULL, 0, 2, NULL), 0);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(mend_store_commit(s), MEND_STORE_BUSY);
  CHECK_EQ_INT(mend_store_durable_seq(s), durable);
  CHECK(mend_store_batch_open(s));
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 0);
  char *status = raw_text(db, "SELECT status FROM runs WHERE id = 'l1'");
  CHECK(status && strcmp(status, "running") == 0);
  free(status);
  CHECK_EQ_INT(sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_locked(s), 0);
  CHECK(mend_store_durable_seq(s) > durable);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'l1'"), 1);
  status = raw_text(db, "SELECT status FROM runs WHERE id = 'l1'");
  CHECK(status && strcmp(status, "succeeded") == 0);
  free(status);

  /* With the writer thread: a hand-off returns at once, the thread waits, the batch commits
   * whole after the lock. */
  CHECK_EQ_INT(mend_store_start_writer(s, count_batch, NULL), 0);
  CHECK_EQ_INT(sqlite3_exec(holder, "BEGIN IMMEDIATE; INSERT INTO meta VALUES('held', 'x')",
                            NULL, NULL, NULL), SQLITE_OK);
  mend_run_rec r2 = run_rec("l2", NULL, "running", 3);
  CHECK_EQ_INT(mend_store_insert_run(s, &r2), 0);
  mend_history_rec h2 = {"l2", NULL, 3, "run", NULL, "running", 0, NULL, -1, NULL, 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &h2), 0);
  unsigned long open = mend_store_open_seq(s);
  CHECK_EQ_INT(mend_store_hand_off(s), 0);
  sleep_ms(300);
  CHECK_EQ_INT(mend_store_writer_busy(s), 1);
  CHECK_EQ_INT(mend_store_locked(s), 1);
  CHECK(mend_store_durable_seq(s) < open);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), 1);
  CHECK_EQ_INT(sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  for (int i = 0; i < 500 && mend_store_writer_busy(s); i++) sleep_ms(10);
  CHECK_EQ_INT(mend_store_writer_busy(s), 0);
  CHECK_EQ_INT(mend_store_locked(s), 0);
  CHECK(mend_store_durable_seq(s) >= open);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), 2);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'l2'"), 1);
  mend_store_close(s);
  sqlite3_close(db);
  sqlite3_close(holder);
}

int main(void) {
  store_case_begin("store-batches");
  test_batch_visibility();
  test_flushes_counted_once_asked();
  test_looks_without_the_batch();
  test_writer_thread();
  test_writer_parts();
  test_locked();
  return store_case_end("store_batches");
}
