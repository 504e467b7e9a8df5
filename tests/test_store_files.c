/*
 * test_store_files: the SQLite store and its database file: refusal of files that are not mend
 * databases (left as they were), a full disk that fails a write without touching what was
 * committed before, the WAL kept in bounds by checkpoints, and the upgrade in place of a
 * database of schema 1.
 *
 * Against a real file in a temporary directory (tests/store_case.h). Must never: lean on what
 * another case left in its database.
 */
#include "check.h"
#include "store_case.h"
#include "store/store_int.h"   /* the checkpointer: a test of the SQLite backend itself */

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void test_refusals(void) {
  char err[512] = "";
  const char *path = file_in_dir("notes.txt");
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  for (int i = 0; i < 200; i++) fputs("these are notes, not a database\n", f);
  fclose(f);
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  mend_store_close(s);
  CHECK(strstr(err, "notes.txt") != NULL);
  CHECK(strstr(err, "not a database") != NULL);
  /* The file is left as it was. */
  f = fopen(path, "r");
  char line[64] = "";
  CHECK(f && fgets(line, sizeof line, f));
  if (f) fclose(f);
  CHECK_STR(line, "these are notes, not a database\n");

  path = file_in_dir("future.db");
  sqlite3 *db = raw_open(path);
  char future[256], newer[8];
  snprintf(newer, sizeof newer, "%d", MEND_SCHEMA_VERSION + 1);
  snprintf(future, sizeof future, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
           "INSERT INTO meta VALUES('schema_version', '%s'); PRAGMA user_version = %s",
           newer, newer);
  CHECK_EQ_INT(sqlite3_exec(db, future, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  err[0] = '\0';
  s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  mend_store_close(s);
  CHECK(strstr(err, "future.db") != NULL);
  CHECK(strstr(err, "newer") != NULL);
  CHECK(strstr(err, newer) != NULL);

  path = file_in_dir("foreign.db");
  db = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(db, "CREATE TABLE contacts(name TEXT)", NULL, NULL, NULL),
               SQLITE_OK);
  sqlite3_close(db);
  err[0] = '\0';
  s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  mend_store_close(s);
  CHECK(strstr(err, "foreign.db") != NULL);
  CHECK(strstr(err, "not a mend database") != NULL);
  /* Someone else's database is not touched: no mend tables, journal mode unchanged. */
  db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM sqlite_master"), 1);
  char *mode = raw_text(db, "PRAGMA journal_mode");
  CHECK_STR(mode, "delete");
  free(mode);
  sqlite3_close(db);

  /* user_version says mend but there is no meta: not ours either. */
  path = file_in_dir("liar.db");
  db = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(db, "CREATE TABLE t(x); PRAGMA user_version = 1", NULL, NULL, NULL),
               SQLITE_OK);
  sqlite3_close(db);
  err[0] = '\0';
  s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  mend_store_close(s);
  CHECK(strstr(err, "liar.db: not a mend database") != NULL);

  err[0] = '\0';
  s = mend_store_open("/nonexistent-dir/x/mend.db", MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "/nonexistent-dir/x/mend.db: ") != NULL);
}

/* The store's own connection, caught as SQLite opens it, so that the test can cap the database
 * size there (max_page_count is a per-connection setting) without a test hook in the store. */
static sqlite3 *caught;

/* The store's own connection is the first it opens (the second is its checkpointer). */
static int catch_connection(sqlite3 *db, char **errmsg, const sqlite3_api_routines *api) {
  (void)errmsg;
  (void)api;
  if (!caught) caught = db;
  return SQLITE_OK;
}

static void test_disk_full(void) {
  const char *path = file_in_dir("full.db");
  CHECK_EQ_INT(sqlite3_auto_extension((void (*)(void))catch_connection), SQLITE_OK);
  mend_store *s = store_at(path, MEND_DURABILITY_FULL);
  sqlite3_cancel_auto_extension((void (*)(void))catch_connection);
  CHECK(s != NULL && caught != NULL);
  if (!s || !caught) return;

  for (int i = 0; i < 20; i++) {
    char rid[16];
    snprintf(rid, sizeof rid, "f%d", i);
    mend_run_rec r = run_rec(rid, NULL, "running", i);
    CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
    mend_history_rec h = {.run_id = rid, .at = i, .event = "run", .to_status = "running",
                          .delay = -1, NULL};
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(s), 0);

  /* The disk is full: no page beyond those in use now. */
  CHECK_EQ_INT(sqlite3_exec(caught, "PRAGMA max_page_count = 1", NULL, NULL, NULL), SQLITE_OK);
  size_t big = 64 * 1024;
  char *input = malloc(big + 3);
  CHECK(input != NULL);
  if (!input) return;
  input[0] = '"';
  memset(input + 1, 'x', big);
  input[big + 1] = '"';
  input[big + 2] = '\0';
  mend_run_rec huge = run_rec("huge", NULL, "running", 1000);
  huge.input = input;
  mend_history_rec h = {.run_id = "f0", .at = 999, .event = "step", .to_status = "pending",
                        .delay = -1, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);   /* fits: joins the batch */
  int rc = mend_store_insert_run(s, &huge);
  if (rc == 0) rc = mend_store_commit(s);
  else CHECK_EQ_INT(mend_store_commit(s), -1);
  CHECK_EQ_INT(rc, -1);
  CHECK(strstr(mend_store_errmsg(s), "full.db: ") != NULL);
  CHECK(strstr(mend_store_errmsg(s), "database or disk is full") != NULL);
  CHECK_EQ_INT(mend_store_batch_open(s), 0);
  free(input);

  /* What was committed before is intact; the failed batch left nothing behind. */
  sqlite3 *db = raw_open(path);
  char *check = raw_text(db, "PRAGMA integrity_check");
  CHECK_STR(check, "ok");
  free(check);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), 20);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 20);
  sqlite3_close(db);
  json_t *runs = mend_store_runs(s, NULL, NULL, 0);
  CHECK_EQ_INT(json_array_size(runs), 20);
  json_decref(runs);
  json_t *run = mend_store_run(s, "f7");
  CHECK(run && json_is_object(json_object_get(run, "input")));
  json_decref(run);
  CHECK(mend_store_run(s, "huge") == NULL);

  /* Space comes back: the store carries on. */
  CHECK_EQ_INT(sqlite3_exec(caught, "PRAGMA max_page_count = 1000000", NULL, NULL, NULL),
               SQLITE_OK);
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  json_t *hist = mend_store_history(s, "f0");
  CHECK_EQ_INT(json_array_size(hist), 2);
  json_decref(hist);
  mend_store_close(s);
}

/* 400 commits of an 8 KiB input each: well over SQLite's default of 1000 WAL frames. */
static void write_big_runs(mend_store *s, const char *prefix, int n) {
  char *input = malloc(8192 + 3);
  if (!input) return;
  input[0] = '"';
  memset(input + 1, 'y', 8192);
  input[8193] = '"';
  input[8194] = 0;
  for (int i = 0; i < n; i++) {
    char rid[16];
    snprintf(rid, sizeof rid, "%s%d", prefix, i);
    mend_run_rec r = run_rec(rid, NULL, "running", i);
    r.input = input;
    CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
    CHECK_EQ_INT(mend_store_commit(s), 0);
  }
  free(input);
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Commits never checkpoint a file database; the backend's checkpoints do (on its own
 * connection), so the WAL does not grow without bound. An in-memory store has none. */
static void test_checkpoints(void) {
  char err[512] = "";
  mend_store *mem = mend_store_open(":memory:", MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(mem != NULL && mem->checkpointer == NULL);
  CHECK_EQ_INT(mend__sqlite_checkpoint(mem, NULL), 0);
  mend_store_close(mem);
  const char *path = file_in_dir("ckpt.db");
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL && s->checkpointer != NULL);
  if (!s) return;
  s->no_auto_checkpoint = 1;   /* by hand here; the thread's policy is tested below */
  write_big_runs(s, "c", 400);
  /* No commit checkpointed: ours copies every frame written since the store opened. */
  int wal = 0;
  int frames = mend__sqlite_checkpoint(s, &wal);
  if (frames <= 1000) fprintf(stderr, "checkpointed %d frames\n", frames);
  CHECK(frames > 1000);
  CHECK_EQ_INT(wal, frames);
  /* the WAL is not reset while it is open */
  CHECK_EQ_INT(mend__sqlite_checkpoint(s, NULL), frames);
  /* A passive checkpoint on the writing connection between batches lets the next write start
   * the WAL over, cut back to its limit. */
  char wal_path[4200];
  snprintf(wal_path, sizeof wal_path, "%s-wal", path);
  CHECK(file_size(wal_path) > 8 * 1024 * 1024);
  CHECK_EQ_INT(sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL),
               SQLITE_OK);
  mend_run_rec after = run_rec("after", NULL, "running", 1000);
  CHECK_EQ_INT(mend_store_insert_run(s, &after), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  int wal_after = 0;
  mend__sqlite_checkpoint(s, &wal_after);
  CHECK(wal_after < 100);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), 401);
  sqlite3_close(db);
  mend_store_close(s);

  /* Left to itself, the store's thread copies the WAL into the database as it grows: the
   * database file holds the rows without anyone asking. */
  const char *auto_path = file_in_dir("ckpt-auto.db");
  s = mend_store_open(auto_path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  write_big_runs(s, "a", 400);
  long size = 0;
  for (int i = 0; i < 100 && (size = file_size(auto_path)) < 3 * 1024 * 1024; i++) {
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  if (size < 3 * 1024 * 1024) fprintf(stderr, "database file %ld bytes\n", size);
  CHECK(size >= 3 * 1024 * 1024);
  mend_store_close(s);
}

/* A stream of batches faster than the checkpoint thread's passes (a thread starved on a loaded
 * machine, made slow here on purpose) cannot grow the WAL past its hard limit: the writing
 * connection copies the WAL itself between two batches, and the batches wait for it. Nothing
 * is lost on the way. */
static void test_wal_hard_limit(void) {
  const char *path = file_in_dir("ckpt-hard.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  s->wal_hard_frames = 2048;        /* 8 MiB of 4 KiB pages: the default, 64 MiB, is slow here */
  /* each of the thread's passes: longer than the whole stream's gaps */
  s->ckpt_pass_delay_ms = 200;
  CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  char *input = malloc(8192 + 3);
  if (!input) return;
  input[0] = '"';
  memset(input + 1, 'z', 8192);
  input[8193] = '"';
  input[8194] = 0;
  char wal_path[4200];
  snprintf(wal_path, sizeof wal_path, "%s-wal", path);
  long wal_max = 0;
  int batches = 400, per_batch = 10;   /* about 40 MB of WAL frames in all */
  for (int b = 0; b < batches; b++) {
    for (int i = 0; i < per_batch; i++) {
      char rid[24];
      snprintf(rid, sizeof rid, "h%d-%d", b, i);
      mend_run_rec r = run_rec(rid, NULL, "running", i);
      r.input = input;
      CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
    }
    CHECK_EQ_INT(mend_store_hand_off(s), 0);
    long wal = file_size(wal_path);
    if (wal > wal_max) wal_max = wal;
  }
  free(input);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  long wal = file_size(wal_path);
  if (wal > wal_max) wal_max = wal;
  /* The limit plus a batch or two (about 35 frames each) and the pass the copy waited for. */
  if (wal_max > 12L * 1024 * 1024) fprintf(stderr, "WAL grew to %ld bytes\n", wal_max);
  CHECK(wal_max <= 12L * 1024 * 1024);
  mend_store_close(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs"), batches * per_batch);
  sqlite3_close(db);
}

/* A database written by schema version 1 (as the first release left it) is upgraded in place:
 * nothing is lost, and each run's history is numbered 1, 2, ... in its old order. */
static void test_upgrade_from_1(void) {
  const char *path = file_in_dir("v1.db");
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(
      sqlite3_exec(
          db,
          "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
          "CREATE TABLE runs(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source "
          "TEXT,"
          " run_key TEXT UNIQUE, status TEXT NOT NULL, input TEXT, error TEXT,"
          " attention INTEGER NOT NULL DEFAULT 0, reason TEXT, owner TEXT, lease_until REAL,"
          " cancel_requested INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL);"
          "CREATE TABLE audit(seq INTEGER PRIMARY KEY, at REAL, who TEXT, op TEXT, target TEXT,"
          " detail TEXT);"
          "CREATE INDEX runs_status ON runs(status);"
          "CREATE TABLE steps(run_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT, status TEXT "
          "NOT NULL,"
          " attempts INTEGER NOT NULL DEFAULT 0, comp_attempts INTEGER NOT NULL DEFAULT 0, "
          "idem_key TEXT,"
          " custom_key INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT, due REAL, last_delay "
          "REAL,"
          " updated REAL, slept INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(run_id, idx));"
          "CREATE INDEX steps_custom_key ON steps(idem_key) WHERE custom_key = 1;"
          "CREATE TABLE history(seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step TEXT, at REAL,"
          " event TEXT NOT NULL, from_status TEXT, to_status TEXT, attempt INTEGER, error TEXT,"
          " delay REAL, detail TEXT, worker TEXT);"
          "CREATE INDEX history_run ON history(run_id);"
          "CREATE TABLE breakers(key TEXT PRIMARY KEY, state TEXT NOT NULL, failures INTEGER,"
          " successes INTEGER, opened_at REAL, open_until REAL, updated REAL);"
          "CREATE TABLE dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail "
          "TEXT,"
          " at REAL);"
          "INSERT INTO meta VALUES('schema_version', '1');"
          "INSERT INTO runs(id, workflow, status, input, created, updated, owner, lease_until) "
          "VALUES"
          " ('a', 'wf', 'running', '{\"n\":1}', 1, 1, 'old', 99), ('b', 'wf', 'succeeded', 'null', "
          "2, 2,"
          " NULL, NULL), ('c', 'wf', 'running', 'null', 3, 3, 'gone', NULL);"
          "INSERT INTO steps(run_id, idx, name, status, attempts, idem_key, custom_key, result) "
          "VALUES"
          " ('a', 0, 'one', 'running', 1, 'a/one', 0, NULL),"
          " ('b', 0, 'one', 'succeeded', 1, 'k1', 1, '{\"x\":1}');"
          "INSERT INTO history(seq, run_id, event, to_status, at) VALUES"
          " (10, 'a', 'run', 'running', 1), (11, 'b', 'run', 'running', 2),"
          " (12, 'a', 'step', 'running', 3), (13, 'b', 'run', 'succeeded', 4);"
          "PRAGMA user_version = 1;",
          NULL, NULL, NULL),
      SQLITE_OK);
  sqlite3_close(db);

  mend_store *s = store_at(path, MEND_DURABILITY_FULL);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(mend_store_schema_version(s), MEND_SCHEMA_VERSION);
  json_t *h = mend_store_history(s, "a");
  CHECK(h && json_array_size(h) == 2);
  CHECK_EQ_INT((int)json_integer_value(json_object_get(json_array_get(h, 0), "seq")), 1);
  CHECK_EQ_INT((int)json_integer_value(json_object_get(json_array_get(h, 1), "seq")), 2);
  CHECK(strcmp(json_string_value(json_object_get(json_array_get(h, 1), "event")), "step") == 0);
  json_decref(h);
  /* history goes on after the old rows */
  mend_history_rec more = {"a", "one", 5,  "step", "running", "succeeded",
                           1,   NULL,  -1, NULL,   0,         NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &more), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  h = mend_store_history(s, "a");
  CHECK(h && json_array_size(h) == 3);
  CHECK_EQ_INT((int)json_integer_value(json_object_get(json_array_get(h, 2), "seq")), 3);
  CHECK_STR(str_field(json_array_get(h, 0), "event"), "run");   /* named, as written then */
  CHECK_STR(str_field(json_array_get(h, 0), "to"), "running");
  CHECK_STR(str_field(json_array_get(h, 2), "event"), "step");  /* a code, read as its name */
  CHECK_STR(str_field(json_array_get(h, 2), "to"), "succeeded");
  json_decref(h);
  json_t *run = mend_store_run(s, "a");
  CHECK(run && json_array_size(json_object_get(run, "steps")) == 1);
  CHECK_EQ_INT((int)json_integer_value(json_object_get(json_object_get(run, "input"), "n")), 1);
  json_decref(run);
  char *found = NULL, owner[64];
  CHECK_EQ_INT(mend_store_find_key_result(s, "k1", &found, owner, sizeof owner), 1);
  CHECK(found && strcmp(found, "{\"x\":1}") == 0);
  free(found);
  mend_store_close(s);
  db = raw_open(path);
  char *live = raw_text(db, "SELECT sql FROM sqlite_master WHERE name = 'runs_live'");
  CHECK(live && strstr(live, "(created) WHERE status IN ('running', 'compensating')"));
  free(live);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'runs_cancel'"), 1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'history_run'"), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history"), 5);
  CHECK_EQ_INT(
      raw_int(db, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'step_names'"), 1);
  /* the lease of run a became its owner's */
  CHECK_EQ_INT(raw_int(db, "SELECT lease_until FROM workers WHERE owner = 'old'"), 99);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE lease_until IS NOT NULL"), 0);
  /* a holder with no lease at all left its run to nobody (schema 7), where a look finds it */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE id = 'c' AND owner IS NULL"), 1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE id = 'a' AND owner = 'old'"), 1);
  sqlite3_close(db);
}

int main(void) {
  store_case_begin("store-files");
  test_refusals();
  test_disk_full();
  test_checkpoints();
  test_wal_hard_limit();
  test_upgrade_from_1();
  return store_case_end("store_files");
}
