/*
 * test_store: the store against a real SQLite file in a temporary directory: schema and its
 * version, every record type written, committed and read back, batch visibility across
 * connections, refusal of files that are not mend databases, and a full disk that fails a
 * write without touching what was committed before.
 */
#include "check.h"
#include "raw_sqlite.h"
#include "breaker.h"
#include "store.h"
#include "store/store_int.h"   /* stall(): a test of the SQLite backend itself */
#include "transition.h"
#include "image_check.h"

#include <sqlite3.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static char path_buf[128];

static const char *file_in_dir(const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

static void remove_with_suffix(const char *path, const char *suffix) {
  char p[4096];
  int n = snprintf(p, sizeof p, "%s%s", path, suffix);
  if (n > 0 && (size_t)n < sizeof p) unlink(p);
}

static void remove_db(const char *path) {
  unlink(path);
  remove_with_suffix(path, "-wal");
  remove_with_suffix(path, "-shm");
}

/* A raw connection for what the store does not expose: checking the file from outside. */
static sqlite3 *raw_open(const char *path) {
  sqlite3 *db = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK) {
    fprintf(stderr, "raw open %s: %s\n", path, sqlite3_errmsg(db));
    exit(2);
  }
  return db;
}

static const char *str_field(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

static mend_run_rec run_rec(const char *id, const char *key, const char *status, double created) {
  mend_run_rec r = {.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                    .run_key = key, .status = status, .input = "{\"order\":42,\"items\":[1,2.5]}",
                    .error = NULL, .attention = 0, .created = created, .updated = created};
  return r;
}

static mend_step_rec step_rec(const char *run, int idx, const char *name, const char *status) {
  mend_step_rec st = {.run_id = run, .idx = idx, .name = name, .status = status, .attempts = 1,
                      .comp_attempts = 0, .idem_key = NULL, .custom_key = 0, .result = NULL,
                      .error = NULL, .due = -1, .last_delay = -1, .updated = 10};
  return st;
}

static void test_schema(void) {
  char err[512] = "";
  const char *path = file_in_dir("schema.db");
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) { fprintf(stderr, "open: %s\n", err); return; }
  CHECK_EQ_INT(mend_store_schema_version(s), MEND_SCHEMA_VERSION);
  CHECK_EQ_INT(mend_store_batch_open(s), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);   /* nothing to commit is not an error */
  mend_store_close(s);

  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "PRAGMA user_version"), MEND_SCHEMA_VERSION);
  CHECK_EQ_INT(raw_int(db, "SELECT value FROM meta WHERE key = 'schema_version'"),
               MEND_SCHEMA_VERSION);
  char *mode = raw_text(db, "PRAGMA journal_mode");
  CHECK_STR(mode, "wal");
  free(mode);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                           " AND name IN ('meta','runs','steps','history','breakers','dlq')"), 6);
  sqlite3_close(db);

  /* Reopening an existing database keeps it as it is. */
  s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (s) CHECK_EQ_INT(mend_store_schema_version(s), MEND_SCHEMA_VERSION);
  mend_store_close(s);

  s = mend_store_open(":memory:", MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  mend_store_close(s);
}

static void test_round_trip(void) {
  char err[512] = "";
  const char *path = file_in_dir("trip.db");
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) { fprintf(stderr, "open: %s\n", err); return; }

  mend_run_rec r1 = run_rec("r1", "order-42", "running", 100);
  mend_run_rec r2 = run_rec("r2", NULL, "succeeded", 200);
  r2.workflow = "refund";
  r2.input = NULL;
  mend_run_rec r3 = run_rec("r3", "order-43", "running", 300);
  CHECK_EQ_INT(mend_store_insert_run(s, &r1), 0);
  CHECK_EQ_INT(mend_store_batch_open(s), 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r2), 0);
  CHECK_EQ_INT(mend_store_insert_run(s, &r3), 0);

  /* Written out of order: the query orders by idx. */
  mend_step_rec s1 = step_rec("r1", 1, "charge", "retry_wait");
  s1.error = "timeout";
  s1.due = 150.5;
  s1.last_delay = 2.25;
  s1.attempts = 2;
  mend_step_rec s0 = step_rec("r1", 0, "reserve", "succeeded");
  s0.idem_key = "reserve-42";
  s0.custom_key = 1;
  s0.result = "{\"ok\":true,\"n\":3}";
  CHECK_EQ_INT(mend_store_put_step(s, &s1), 0);
  CHECK_EQ_INT(mend_store_put_step(s, &s0), 0);

  mend_history_rec h[3] = {
    {.run_id = "r1", .step = NULL, .at = 100, .event = "run", .from_status = NULL,
     .to_status = "running", .attempt = 0, .error = NULL, .delay = -1, .detail = NULL},
    {.run_id = "r1", .step = "charge", .at = 101, .event = "attempt_failed",
     .from_status = "running", .to_status = "retry_wait", .attempt = 1, .error = "timeout",
     .delay = 1.5, .detail = "{\"code\":504}"},
    {.run_id = "r1", .step = "charge", .at = 103, .event = "step", .from_status = "retry_wait",
     .to_status = "pending", .attempt = 0, .error = NULL, .delay = -1, .detail = NULL},
  };
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(mend_store_append_history(s, &h[i]), 0);

  mend_breaker b = {.state = MEND_BREAKER_OPEN, .failures = 5, .successes = 0, .probes = 1,
                    .opened_at = 101, .open_until = 131};
  CHECK_EQ_INT(mend_store_put_breaker(s, "payments", &b, 101), 0);
  mend_dlq_rec d = {.run_id = "r3", .reason = "attempts exhausted", .step = "ship",
                    .error = "carrier down", .detail = NULL, .at = 400};
  CHECK_EQ_INT(mend_store_put_dlq(s, &d), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_batch_open(s), 0);

  json_t *run = mend_store_run(s, "r1");
  CHECK(run != NULL);
  if (run) {
    CHECK_STR(str_field(run, "id"), "r1");
    CHECK_STR(str_field(run, "workflow"), "order");
    CHECK_STR(str_field(run, "version"), "v1");
    CHECK_STR(str_field(run, "source"), "order.lua");
    CHECK_STR(str_field(run, "key"), "order-42");
    CHECK_STR(str_field(run, "status"), "running");
    CHECK(json_is_false(json_object_get(run, "attention")));
    CHECK(json_object_get(run, "error") == NULL);        /* NULL columns are left out */
    CHECK_NEAR(json_real_value(json_object_get(run, "created")), 100, 1e-9);
    json_t *input = json_object_get(run, "input");
    CHECK(json_is_object(input));
    CHECK_EQ_INT(json_integer_value(json_object_get(input, "order")), 42);
    CHECK(json_is_real(json_array_get(json_object_get(input, "items"), 1)));
    json_t *steps = json_object_get(run, "steps");
    CHECK_EQ_INT(json_array_size(steps), 2);
    json_t *st0 = json_array_get(steps, 0), *st1 = json_array_get(steps, 1);
    CHECK_EQ_INT(json_integer_value(json_object_get(st0, "idx")), 0);
    CHECK_STR(str_field(st0, "name"), "reserve");
    CHECK_STR(str_field(st0, "status"), "succeeded");
    CHECK_STR(str_field(st0, "idempotency_key"), "reserve-42");
    CHECK(json_is_true(json_object_get(st0, "custom_key")));
    CHECK(json_is_true(json_object_get(json_object_get(st0, "result"), "ok")));
    CHECK(json_object_get(st0, "due") == NULL);
    CHECK(json_object_get(st0, "last_delay") == NULL);
    CHECK(json_object_get(st0, "error") == NULL);
    CHECK_EQ_INT(json_integer_value(json_object_get(st1, "idx")), 1);
    CHECK_STR(str_field(st1, "error"), "timeout");
    CHECK_EQ_INT(json_integer_value(json_object_get(st1, "attempts")), 2);
    CHECK_EQ_INT(json_integer_value(json_object_get(st1, "comp_attempts")), 0);
    CHECK(json_is_false(json_object_get(st1, "custom_key")));
    CHECK_NEAR(json_real_value(json_object_get(st1, "due")), 150.5, 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(st1, "last_delay")), 2.25, 1e-9);
    CHECK(json_object_get(st1, "result") == NULL);
    json_decref(run);
  }

  json_t *hist = mend_store_history(s, "r1");
  CHECK_EQ_INT(json_array_size(hist), 3);
  if (json_array_size(hist) == 3) {
    json_t *h0 = json_array_get(hist, 0), *h1 = json_array_get(hist, 1);
    json_t *h2 = json_array_get(hist, 2);
    CHECK(json_integer_value(json_object_get(h0, "seq")) <
          json_integer_value(json_object_get(h1, "seq")));
    CHECK(json_integer_value(json_object_get(h1, "seq")) <
          json_integer_value(json_object_get(h2, "seq")));
    CHECK_STR(str_field(h0, "event"), "run");
    CHECK(json_object_get(h0, "step") == NULL);
    CHECK(json_object_get(h0, "from") == NULL);
    CHECK(json_object_get(h0, "attempt") == NULL);
    CHECK(json_object_get(h0, "delay") == NULL);
    CHECK_STR(str_field(h0, "to"), "running");
    CHECK_STR(str_field(h1, "run_id"), "r1");
    CHECK_STR(str_field(h1, "step"), "charge");
    CHECK_STR(str_field(h1, "event"), "attempt_failed");
    CHECK_STR(str_field(h1, "from"), "running");
    CHECK_STR(str_field(h1, "to"), "retry_wait");
    CHECK_EQ_INT(json_integer_value(json_object_get(h1, "attempt")), 1);
    CHECK_STR(str_field(h1, "error"), "timeout");
    CHECK_NEAR(json_real_value(json_object_get(h1, "delay")), 1.5, 1e-9);
    CHECK_NEAR(json_real_value(json_object_get(h1, "at")), 101, 1e-9);
    CHECK_STR(str_field(h1, "detail"), "{\"code\":504}");
    CHECK_STR(str_field(h2, "to"), "pending");
  }
  json_decref(hist);
  /* no such run: NULL, and said as a missing run is; a run's page past its last row is [] */
  CHECK(mend_store_history(s, "nobody") == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 1);
  CHECK_STR(mend_store_errmsg(s), "no run nobody");
  CHECK(mend_store_history_page(s, "nobody", 0, 5, 0) == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 1);
  CHECK(mend_store_history_page(s, "nobody", 0, 0, 2) == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 1);
  hist = mend_store_history_page(s, "r1", 99, 5, 0);
  CHECK(json_is_array(hist) && json_array_size(hist) == 0);
  CHECK_EQ_INT(mend_store_not_found(s), 0);
  json_decref(hist);

  json_t *brs = mend_store_breakers(s);
  CHECK_EQ_INT(json_array_size(brs), 1);
  json_t *br = json_array_get(brs, 0);
  CHECK_STR(str_field(br, "key"), "payments");
  CHECK_STR(str_field(br, "state"), mend_breaker_state_name(MEND_BREAKER_OPEN));
  CHECK_EQ_INT(json_integer_value(json_object_get(br, "failures")), 5);
  CHECK_EQ_INT(json_integer_value(json_object_get(br, "successes")), 0);
  CHECK_NEAR(json_real_value(json_object_get(br, "opened_at")), 101, 1e-9);
  CHECK_NEAR(json_real_value(json_object_get(br, "open_until")), 131, 1e-9);
  CHECK_NEAR(json_real_value(json_object_get(br, "updated")), 101, 1e-9);
  json_decref(brs);

  mend_breaker got;
  CHECK_EQ_INT(mend_store_get_breaker(s, "payments", &got), 1);
  CHECK_EQ_INT(got.state, MEND_BREAKER_OPEN);
  CHECK_EQ_INT(got.failures, 5);
  CHECK_EQ_INT(got.probes, 0);     /* probes are not persisted */
  CHECK_NEAR(got.open_until, 131, 1e-9);
  CHECK_EQ_INT(mend_store_get_breaker(s, "nothing", &got), 0);

  /* A second put of the breaker replaces it. */
  b.state = MEND_BREAKER_HALF_OPEN;
  b.successes = 1;
  CHECK_EQ_INT(mend_store_put_breaker(s, "payments", &b, 140), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_get_breaker(s, "payments", &got), 1);
  CHECK_EQ_INT(got.state, MEND_BREAKER_HALF_OPEN);
  CHECK_EQ_INT(got.successes, 1);

  json_t *dlq = mend_store_dlq(s);
  CHECK_EQ_INT(json_array_size(dlq), 1);
  json_t *d0 = json_array_get(dlq, 0);
  CHECK_STR(str_field(d0, "run_id"), "r3");
  CHECK_STR(str_field(d0, "reason"), "attempts exhausted");
  CHECK_STR(str_field(d0, "step"), "ship");
  CHECK_STR(str_field(d0, "error"), "carrier down");
  CHECK(json_object_get(d0, "detail") == NULL);
  CHECK_NEAR(json_real_value(json_object_get(d0, "at")), 400, 1e-9);
  json_decref(dlq);

  /* Runs: newest first, filtered, limited, without steps. */
  json_t *runs = mend_store_runs(s, NULL, NULL, 0);
  CHECK_EQ_INT(json_array_size(runs), 3);
  CHECK_STR(str_field(json_array_get(runs, 0), "id"), "r3");
  CHECK_STR(str_field(json_array_get(runs, 2), "id"), "r1");
  CHECK(json_object_get(json_array_get(runs, 0), "steps") == NULL);
  CHECK(json_object_get(json_array_get(runs, 1), "input") == NULL);   /* r2 had no input */
  json_decref(runs);
  runs = mend_store_runs(s, "running", NULL, 0);
  CHECK_EQ_INT(json_array_size(runs), 2);
  json_decref(runs);
  runs = mend_store_runs(s, NULL, "refund", 0);
  CHECK_EQ_INT(json_array_size(runs), 1);
  CHECK_STR(str_field(json_array_get(runs, 0), "id"), "r2");
  json_decref(runs);
  runs = mend_store_runs(s, "running", "order", 1);
  CHECK_EQ_INT(json_array_size(runs), 1);
  CHECK_STR(str_field(json_array_get(runs, 0), "id"), "r3");
  json_decref(runs);
  runs = mend_store_runs(s, "compensated", NULL, 10);
  CHECK(json_is_array(runs) && json_array_size(runs) == 0);
  json_decref(runs);

  /* Updating a run and replacing a step. */
  CHECK_EQ_INT(mend_store_update_run(s, "r1", "needs_attention", "charge failed", 1, 500, "compensation_failed"), 0);
  s1.status = "failed";
  s1.due = -1;
  s1.attempts = 3;
  CHECK_EQ_INT(mend_store_put_step(s, &s1), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  run = mend_store_run(s, "r1");
  CHECK(run != NULL);
  if (run) {
    CHECK_STR(str_field(run, "status"), "needs_attention");
    CHECK_STR(str_field(run, "error"), "charge failed");
    CHECK(json_is_true(json_object_get(run, "attention")));
    CHECK_NEAR(json_real_value(json_object_get(run, "updated")), 500, 1e-9);
    json_t *st1 = json_array_get(json_object_get(run, "steps"), 1);
    CHECK_EQ_INT(json_array_size(json_object_get(run, "steps")), 2);
    CHECK_STR(str_field(st1, "status"), "failed");
    CHECK_EQ_INT(json_integer_value(json_object_get(st1, "attempts")), 3);
    CHECK(json_object_get(st1, "due") == NULL);
    json_decref(run);
  }

  /* A run that does not exist. */
  CHECK(mend_store_run(s, "r404") == NULL);
  CHECK_STR(mend_store_errmsg(s), "no run r404");

  /* Point reads. */
  char id[64];
  CHECK_EQ_INT(mend_store_find_run_key(s, "order-42", id, sizeof id), 1);
  CHECK_STR(id, "r1");
  CHECK_EQ_INT(mend_store_find_run_key(s, "order-99", id, sizeof id), 0);
  CHECK_EQ_INT(mend_store_find_run_key(s, "order-42", id, 2), -1);   /* does not fit */

  /* r1 is in needs_attention after a compensation failed: a retry goes on undoing its step,
   * so its key is not offered; once it ended succeeded, it is. */
  char *res = NULL, owner[64];
  CHECK_EQ_INT(mend_store_find_key_result(s, "reserve-42", &res, owner, sizeof owner), 0);
  CHECK_EQ_INT(mend_store_update_run(s, "r1", "succeeded", NULL, 0, 500, NULL), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_find_key_result(s, "reserve-42", &res, owner, sizeof owner), 1);
  CHECK_STR(res, "{\"ok\":true,\"n\":3}");
  CHECK_STR(owner, "r1");
  free(res);
  res = NULL;
  CHECK_EQ_INT(mend_store_update_run(s, "r1", "needs_attention", "charge failed", 1, 500,
                                     "compensation_failed"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  /* Only succeeded steps whose key is custom count. */
  mend_step_rec derived = step_rec("r2", 0, "refund", "succeeded");
  derived.idem_key = "derived-1";
  derived.result = "1";
  mend_step_rec failed = step_rec("r2", 1, "notify", "failed");
  failed.idem_key = "custom-failed";
  failed.custom_key = 1;
  failed.result = "2";
  mend_step_rec running = step_rec("r3", 0, "ship", "running");
  running.idem_key = "custom-running";
  running.custom_key = 1;
  CHECK_EQ_INT(mend_store_put_step(s, &derived), 0);
  CHECK_EQ_INT(mend_store_put_step(s, &failed), 0);
  CHECK_EQ_INT(mend_store_put_step(s, &running), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_find_key_result(s, "derived-1", &res, owner, sizeof owner), 0);
  CHECK_EQ_INT(mend_store_find_key_result(s, "custom-failed", &res, owner, sizeof owner), 0);
  CHECK_EQ_INT(mend_store_find_key_result(s, "custom-running", &res, owner, sizeof owner), 0);
  CHECK_EQ_INT(mend_store_find_key_result(s, "unknown", &res, owner, sizeof owner), 0);
  CHECK(res == NULL);
  /* A succeeded custom step with no result gives JSON null. */
  running.status = "succeeded";
  CHECK_EQ_INT(mend_store_put_step(s, &running), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_find_key_result(s, "custom-running", &res, owner, sizeof owner), 1);
  CHECK_STR(res, "null");
  free(res);

  /* A run key is unique: a second run with the same key is not written and says so (1), so
   * that two processes starting the same key race safely; the batch goes on. */
  mend_run_rec dup = run_rec("r9", "order-42", "running", 900);
  mend_run_rec other = run_rec("r10", NULL, "running", 901);
  CHECK_EQ_INT(mend_store_insert_run(s, &other), 0);
  CHECK_EQ_INT(mend_store_insert_run(s, &dup), 1);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK(mend_store_run(s, "r9") == NULL);
  json_t *r10 = mend_store_run(s, "r10");
  CHECK(r10 != NULL);
  json_decref(r10);
  /* A duplicate run id is a real failure, and the failed write fails its whole batch. */
  mend_run_rec dup_id = run_rec("r10", NULL, "running", 902);
  mend_run_rec r11 = run_rec("r11", NULL, "running", 903);
  CHECK_EQ_INT(mend_store_insert_run(s, &r11), 0);
  CHECK_EQ_INT(mend_store_insert_run(s, &dup_id), -1);
  CHECK(strstr(mend_store_errmsg(s), "trip.db: insert run: UNIQUE constraint failed") != NULL);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  CHECK(strstr(mend_store_errmsg(s), "UNIQUE") != NULL);
  CHECK_EQ_INT(mend_store_batch_open(s), 0);
  CHECK(mend_store_run(s, "r11") == NULL);
  /* Updating a run that does not exist is refused, not ignored. */
  CHECK_EQ_INT(mend_store_update_run(s, "r404", "failed", NULL, 0, 1, NULL), -1);
  CHECK(strstr(mend_store_errmsg(s), "no run r404") != NULL);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  /* And the store goes on after a failed batch. */
  CHECK_EQ_INT(mend_store_insert_run(s, &r11), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  json_t *r11_row = mend_store_run(s, "r11");
  CHECK(r11_row != NULL);
  json_decref(r11_row);

  mend_store_close(s);

  /* JSON columns that are not JSON come back as strings. */
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(db, "UPDATE runs SET input = 'not json{' WHERE id = 'r1';"
                                "UPDATE steps SET result = '[1,' WHERE run_id = 'r1' AND idx = 0",
                            NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  run = mend_store_run(s, "r1");
  CHECK(run != NULL);
  if (run) {
    CHECK_STR(str_field(run, "input"), "not json{");
    CHECK_STR(str_field(json_array_get(json_object_get(run, "steps"), 0), "result"), "[1,");
    json_decref(run);
  }
  mend_store_close(s);
}

static void test_batch_visibility(void) {
  char err[512] = "";
  const char *path = file_in_dir("batch.db");
  mend_store *a = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(a != NULL);
  if (!a) { fprintf(stderr, "open: %s\n", err); return; }
  mend_run_rec r = run_rec("b1", "k1", "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &r), 0);

  /* A second connection opens while the first holds its batch, and does not see it. */
  mend_store *b = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(b != NULL);
  if (!b) { fprintf(stderr, "open second: %s\n", err); mend_store_close(a); return; }
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

  a = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(a != NULL);
  if (!a) return;
  v = mend_store_runs(a, NULL, NULL, 0);
  CHECK_EQ_INT(json_array_size(v), 2);
  json_decref(v);
  mend_store_close(a);
}

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
  char err[512] = "";
  const char *path = file_in_dir("full.db");
  CHECK_EQ_INT(sqlite3_auto_extension((void (*)(void))catch_connection), SQLITE_OK);
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
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
  CHECK_EQ_INT(mend__sqlite_checkpoint(s, NULL), frames);   /* the WAL is not reset while it is open */
  /* A passive checkpoint on the writing connection between batches lets the next write start
   * the WAL over, cut back to its limit. */
  char wal_path[4200];
  snprintf(wal_path, sizeof wal_path, "%s-wal", path);
  CHECK(file_size(wal_path) > 8 * 1024 * 1024);
  CHECK_EQ_INT(sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL), SQLITE_OK);
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
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  s->wal_hard_frames = 2048;        /* 8 MiB of 4 KiB pages: the default, 64 MiB, is slow here */
  s->ckpt_pass_delay_ms = 200;      /* each of the thread's passes: longer than the whole stream's gaps */
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
  CHECK_EQ_INT(sqlite3_exec(db,
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE runs(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source TEXT,"
    " run_key TEXT UNIQUE, status TEXT NOT NULL, input TEXT, error TEXT,"
    " attention INTEGER NOT NULL DEFAULT 0, reason TEXT, owner TEXT, lease_until REAL,"
    " cancel_requested INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL);"
    "CREATE TABLE audit(seq INTEGER PRIMARY KEY, at REAL, who TEXT, op TEXT, target TEXT,"
    " detail TEXT);"
    "CREATE INDEX runs_status ON runs(status);"
    "CREATE TABLE steps(run_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT, status TEXT NOT NULL,"
    " attempts INTEGER NOT NULL DEFAULT 0, comp_attempts INTEGER NOT NULL DEFAULT 0, idem_key TEXT,"
    " custom_key INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT, due REAL, last_delay REAL,"
    " updated REAL, slept INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(run_id, idx));"
    "CREATE INDEX steps_custom_key ON steps(idem_key) WHERE custom_key = 1;"
    "CREATE TABLE history(seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step TEXT, at REAL,"
    " event TEXT NOT NULL, from_status TEXT, to_status TEXT, attempt INTEGER, error TEXT,"
    " delay REAL, detail TEXT, worker TEXT);"
    "CREATE INDEX history_run ON history(run_id);"
    "CREATE TABLE breakers(key TEXT PRIMARY KEY, state TEXT NOT NULL, failures INTEGER,"
    " successes INTEGER, opened_at REAL, open_until REAL, updated REAL);"
    "CREATE TABLE dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail TEXT,"
    " at REAL);"
    "INSERT INTO meta VALUES('schema_version', '1');"
    "INSERT INTO runs(id, workflow, status, input, created, updated, owner, lease_until) VALUES"
    " ('a', 'wf', 'running', '{\"n\":1}', 1, 1, 'old', 99), ('b', 'wf', 'succeeded', 'null', 2, 2,"
    " NULL, NULL), ('c', 'wf', 'running', 'null', 3, 3, 'gone', NULL);"
    "INSERT INTO steps(run_id, idx, name, status, attempts, idem_key, custom_key, result) VALUES"
    " ('a', 0, 'one', 'running', 1, 'a/one', 0, NULL),"
    " ('b', 0, 'one', 'succeeded', 1, 'k1', 1, '{\"x\":1}');"
    "INSERT INTO history(seq, run_id, event, to_status, at) VALUES"
    " (10, 'a', 'run', 'running', 1), (11, 'b', 'run', 'running', 2),"
    " (12, 'a', 'step', 'running', 3), (13, 'b', 'run', 'succeeded', 4);"
    "PRAGMA user_version = 1;", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);

  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  if (!s) fprintf(stderr, "upgrade: %s\n", err);
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
  mend_history_rec more = {"a", "one", 5, "step", "running", "succeeded", 1, NULL, -1, NULL, 0, NULL};
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
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'step_names'"), 1);
  /* the lease of run a became its owner's */
  CHECK_EQ_INT(raw_int(db, "SELECT lease_until FROM workers WHERE owner = 'old'"), 99);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE lease_until IS NOT NULL"), 0);
  /* a holder with no lease at all left its run to nobody (schema 7), where a look finds it */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE id = 'c' AND owner IS NULL"), 1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE id = 'a' AND owner = 'old'"), 1);
  sqlite3_close(db);
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
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
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

/* With the writer thread: recorded writes reach the file only at the hand-off, a batch is
 * durable once its number is, and reads in between see what was recorded. */
static void test_writer_thread(void) {
  const char *path = file_in_dir("writer.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
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

/* A store on a file of the test directory, with its writer thread (done(ud) after each job). */
static mend_store *writer_store(const char *path, void (*done)(void *ud), void *ud) {
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  if (!s) {
    fprintf(stderr, "open %s: %s\n", path, err);
    return NULL;
  }
  if (mend_store_start_writer(s, done, ud) != 0) {
    fprintf(stderr, "writer thread: %s\n", mend_store_errmsg(s));
    mend_store_close(s);
    return NULL;
  }
  return s;
}

static void count_job(void *ud) { __atomic_add_fetch((int *)ud, 1, __ATOMIC_SEQ_CST); }

/* More writes in one batch than a log holds (70,000 rows; a log holds 65,536 records): parts
 * go to the writer thread while the rest is recorded, and the batch stays one transaction: nothing is seen or durable before the hand-off, and a failure anywhere in it
 * leaves none of it. */
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

/* History rows written eight to a statement, whose parameters are bound again only where
 * their value changes (writer.c: bind_group_row): each row reads back as written, whatever
 * the same place in the group before it held (NULL, a label's code, other text, a number),
 * across statements and batches. */
static void test_history_group_binds(void) {
  const char *path = file_in_dir("group.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_store_set_worker(s, "host:1:grp");
  CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("g1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  static const char *const names[] = {"step", "run", "pending", "running", "custom"};
  enum { ROWS = 48 };
  for (long n = 1; n <= ROWS; n++) {
    int k = (int)(n * 7 + n / 8 * 3);   /* the same place in the next group: another pattern */
    char detail[32];
    snprintf(detail, sizeof detail, "detail %ld", n);
    mend_history_rec h = {"g1", k % 2 ? "s" : NULL, (double)n, names[k % 5],
                          k % 3 ? NULL : names[(k + 1) % 5], names[(k + 2) % 5], k % 4 ? (int)n : 0,
                          k % 5 ? NULL : "boom", k % 6 ? -1 : (double)n / 2,
                          k % 7 ? NULL : detail, n, k % 5 ? NULL : "fatal"};
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
    if (n == ROWS / 2) CHECK_EQ_INT(mend_store_commit(s), 0);   /* the rest in a second batch */
  }
  CHECK_EQ_INT(mend_store_commit(s), 0);
  sqlite3 *db = raw_open(path);
  sqlite3_stmt *q;
  CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT seq, step, event, from_status, to_status, attempt,"
                                      " error, delay, detail, error_kind, worker, at"
                                      " FROM history_named WHERE run_id = 'g1' ORDER BY seq",
                                  -1, &q, NULL), SQLITE_OK);
  long n = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    n++;
    int k = (int)(n * 7 + n / 8 * 3);
    char detail[32];
    snprintf(detail, sizeof detail, "detail %ld", n);
    const char *step = (const char *)sqlite3_column_text(q, 1);
    const char *from = (const char *)sqlite3_column_text(q, 3);
    const char *error = (const char *)sqlite3_column_text(q, 6);
    const char *det = (const char *)sqlite3_column_text(q, 8);
    const char *kind = (const char *)sqlite3_column_text(q, 9);
    CHECK_EQ_INT(sqlite3_column_int(q, 0), (int)n);
    CHECK(k % 2 ? step && strcmp(step, "s") == 0 : step == NULL);
    CHECK_STR((const char *)sqlite3_column_text(q, 2), names[k % 5]);
    CHECK(k % 3 ? from == NULL : from && strcmp(from, names[(k + 1) % 5]) == 0);
    CHECK_STR((const char *)sqlite3_column_text(q, 4), names[(k + 2) % 5]);
    CHECK(k % 4 ? sqlite3_column_int(q, 5) == (int)n : sqlite3_column_type(q, 5) == SQLITE_NULL);
    CHECK(k % 5 ? error == NULL : error && strcmp(error, "boom") == 0);
    CHECK(k % 6 ? sqlite3_column_type(q, 7) == SQLITE_NULL : sqlite3_column_double(q, 7) == (double)n / 2);
    CHECK(k % 7 ? det == NULL : det && strcmp(det, detail) == 0);
    CHECK(k % 5 ? kind == NULL : kind && strcmp(kind, "fatal") == 0);
    CHECK_STR((const char *)sqlite3_column_text(q, 10), "host:1:grp");
    CHECK(sqlite3_column_double(q, 11) == (double)n);
  }
  CHECK_EQ_INT((int)n, ROWS);
  sqlite3_finalize(q);
  sqlite3_close(db);
  mend_store_close(s);
}

/* Schema 5 writes fewer bytes: a history row names its worker by a number (worker_names), a
 * step's default key is not stored; reads give the name and the key as before, rows written
 * before (a name in history.worker) read as they were, and a number given in a batch that
 * rolls back is asked for again. */
static void test_compact_rows(void) {
  const char *path = file_in_dir("compact.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_store_set_worker(s, "host:1:abc");
  /* a batch that fails (no writer thread: the store goes on after it): the worker's number
   * goes with it, and another process's worker takes that number meanwhile */
  CHECK(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 3, NULL) != 0);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  sqlite3 *db = raw_open(path);
  CHECK(sqlite3_exec(db, "INSERT INTO worker_names(name) VALUES('other:9:z')", NULL, NULL, NULL)
        == SQLITE_OK);
  CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("c1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_step_rec st = step_rec("c1", 0, "reserve", "running");
  CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
  mend_step_rec own = step_rec("c1", 1, "charge", "running");
  own.idem_key = "order-42";
  own.custom_key = 1;
  CHECK_EQ_INT(mend_store_put_step(s, &own), 0);
  for (long n = 1; n <= 10; n++) {   /* in a group of eight and one by one */
    mend_history_rec h = {"c1", NULL, (double)n, "step", NULL, "running", 0, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  }
  /* a name labels does not have goes as it is */
  mend_history_rec odd = {"c1", NULL, 12, "custom", "running", "elsewhere", 0, NULL, -1, NULL, 12, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &odd), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  /* a row from before schema 5, its worker by name */
  CHECK(sqlite3_exec(db, "INSERT INTO history(run_id, seq, at, event, worker)"
                         " VALUES('c1', 11, 11, 'note', 'old:2:def')", NULL, NULL, NULL) == SQLITE_OK);
  /* the number (2: the other worker took 1), kept as text by the column's type: one byte
   * instead of the name's ten */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE worker = '2'"), 11);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM worker_names"), 2);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history h JOIN worker_names w ON w.id = h.worker"
                           " WHERE w.name = 'host:1:abc'"), 11);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM steps WHERE idem_key IS NULL"), 1);
  /* event and statuses as the codes of their names (schema 7), kept as text as well: 1 byte
   * instead of 4 and 7 */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE event = '0' AND to_status = '3'"
                           " AND from_status IS NULL"), 10);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE event = 'custom'"
                           " AND from_status = '3' AND to_status = 'elsewhere'"), 1);
  /* history_named spells all of them out, for the sqlite3 shell */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history_named WHERE event = 'step'"
                           " AND to_status = 'running' AND worker = 'host:1:abc'"), 10);
  json_t *hist = mend_store_history(s, "c1");
  CHECK(hist && json_array_size(hist) == 12);
  for (size_t i = 0; hist && i < 10; i++) {
    CHECK_STR(str_field(json_array_get(hist, i), "worker"), "host:1:abc");
    CHECK_STR(str_field(json_array_get(hist, i), "event"), "step");
    CHECK_STR(str_field(json_array_get(hist, i), "to"), "running");
  }
  CHECK_STR(str_field(json_array_get(hist, 10), "worker"), "old:2:def");
  CHECK_STR(str_field(json_array_get(hist, 10), "event"), "note");
  CHECK_STR(str_field(json_array_get(hist, 11), "event"), "custom");
  CHECK_STR(str_field(json_array_get(hist, 11), "from"), "running");
  CHECK_STR(str_field(json_array_get(hist, 11), "to"), "elsewhere");
  json_decref(hist);
  /* every status and breaker state the engine writes has a code */
  sqlite3_stmt *q;
  CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT count(*) FROM labels WHERE name = ?1", -1, &q, NULL),
               SQLITE_OK);
  const char *names[MEND_STEP__COUNT + MEND_RUN__COUNT + 3];
  int n = 0;
  for (int i = 0; i < MEND_STEP__COUNT; i++) names[n++] = mend_step_status_name((mend_step_status)i);
  for (int i = 0; i < MEND_RUN__COUNT; i++) names[n++] = mend_run_status_name((mend_run_status)i);
  for (int i = 0; i < 3; i++) names[n++] = mend_breaker_state_name((mend_breaker_state)i);
  for (int i = 0; i < n; i++) {
    sqlite3_bind_text(q, 1, names[i], -1, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) == 1);
    if (sqlite3_column_int(q, 0) != 1) fprintf(stderr, "no code for %s\n", names[i]);
    sqlite3_reset(q);
  }
  sqlite3_finalize(q);
  json_t *run = mend_store_run(s, "c1");
  json_t *steps = json_object_get(run, "steps");
  CHECK_STR(str_field(json_array_get(steps, 0), "idempotency_key"), "c1/reserve");
  CHECK_STR(str_field(json_array_get(steps, 1), "idempotency_key"), "order-42");
  json_decref(run);
  sqlite3_close(db);
  mend_store_close(s);
  remove_db(path);
}

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

/* The fence: a worker whose lease ran out (a stall) while another took some of its runs.
 * Its next transaction renews its lease and drops every write to the runs it lost, then and
 * later, until it takes one back; the engine hears which runs those were. A lease is one row
 * per worker: while it lasts nobody claims the worker's runs, and closing the store ends it. */
static void restore_env(const char *name, char *value) {
  if (value) setenv(name, value, 1);
  free(value);
}

/* The worker of `s` stalled: its leases ran out 5 s ago, as far as its fence knows. */
static void stall(mend_store *s) { s->fence_until = (double)time(NULL) - 5; }

/* Two stores on one file; a's worker "wa" holds run g1 (committed), its lease good till now + 30. */
static int two_workers_one_run(const char *path, mend_store **a, mend_store **b) {
  char err[512] = "";
  *a = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  *b = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
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
  mend_history_rec h = {"g1", "reserve", 6, "step", "running", "failed", 1, NULL, -1, NULL, 9, NULL};
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

static void test_fence(void) {
  /* This test takes the on-time and the late path on purpose, so not the late path for every
   * transaction that MEND_FENCE_LATE=1 asks of the specs. */
  const char *late_env = getenv("MEND_FENCE_LATE");
  char *late_saved = late_env ? strdup(late_env) : NULL;
  unsetenv("MEND_FENCE_LATE");
  const char *path = file_in_dir("fence.db");
  char err[512] = "";
  mend_store *a = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  mend_store *b = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
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
  CHECK_EQ_INT(sqlite3_exec(db, "UPDATE workers SET lease_until = lease_until - 60 WHERE owner = 'wa'",
                            NULL, NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_GONE);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 1), MEND_CLAIMABLE_FREE | MEND_CLAIMABLE_GONE);
  json_t *taken = mend_store_claim(b, "wb", 30, 1, 0);
  CHECK(taken && json_array_size(taken) == 1 && strcmp(json_string_value(json_array_get(taken, 0)), "f1") == 0);
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
    mend_history_rec h = {ids[i], "reserve", 6, "step", "running", "succeeded", 1, NULL, -1, NULL, 0, NULL};
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
  CHECK_EQ_INT(raw_int(db, "SELECT lease_until > strftime('%s','now') FROM workers WHERE owner = 'wa'"), 1);
  none = mend_store_claim(b, "wb", 30, 10, 0);
  CHECK(none && json_array_size(none) == 0);
  json_decref(none);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(mend_store_fence_news(a, note_lost_id, seen), 1);
  CHECK_STR(seen, "f1,f2");
  json_t *held = mend_store_held(a);
  CHECK(held && json_array_size(held) == 1 && strcmp(json_string_value(json_array_get(held, 0)), "f3") == 0);
  json_decref(held);
  mend_store_fence_verified(a);

  /* on time again, writes to a lost run are still dropped; a repair by a person is not */
  mend_history_rec late = {"f1", "reserve", 7, "step", "succeeded", "running", 2, NULL, -1, NULL, 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(a, &late), 0);
  mend_store_repairing(a, 1);
  mend_history_rec note = {"f2", NULL, 7, "operator", NULL, NULL, 0, NULL, -1, "looked at", 0, NULL};
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
  CHECK_EQ_INT(raw_int(db, "SELECT lease_until >= strftime('%s','now') + 20 FROM workers WHERE owner = 'wa'"), 1);
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
  CHECK_EQ_INT(raw_int(db, "SELECT lease_until >= strftime('%s','now') + 20 FROM workers WHERE owner = 'wa'"), 1);

  /* a closes: its lease ends at once, and what it still held is b's to take: nobody's, so
   * that the quick look finds it */
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), 0);
  mend_store_close(a);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers WHERE owner = 'wa'"), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE owner IS NULL AND status = 'running'"), 2);
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

/* A run names its workflow version by a number (schema 7): the version, source and step names
 * are written once a version, and read with the run as before. A version numbered in a batch
 * that rolls back is numbered again; another process finds the row there. */
static void test_workflow_versions(void) {
  const char *path = file_in_dir("versions.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  mend_store *other = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s && other);
  if (!s || !other) return;
  mend_run_rec r = run_rec("v1", NULL, "running", 1);
  r.step_names = "[\"a\",\"b\"]";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  r.id = "v2";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_run_rec r2 = r;
  r2.id = "v3";
  r2.version = "v2";   /* the workflow changed */
  CHECK_EQ_INT(mend_store_insert_run(s, &r2), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE version IS NULL AND source IS NULL"
                           " AND step_names IS NULL AND workflow_version IS NOT NULL"), 3);
  CHECK_EQ_INT(raw_int(db, "SELECT count(DISTINCT workflow_version) FROM runs"), 2);
  json_t *run = mend_store_run(s, "v3");
  CHECK_STR(str_field(run, "version"), "v2");
  CHECK_STR(str_field(run, "source"), "order.lua");
  CHECK_EQ_INT((long long)json_array_size(json_object_get(run, "steps")), 2);
  CHECK_STR(str_field(json_array_get(json_object_get(run, "steps"), 1), "name"), "b");
  json_decref(run);
  json_t *list = mend_store_runs(s, NULL, NULL, 10);
  CHECK(list && json_array_size(list) == 3);
  CHECK_STR(str_field(json_array_get(list, 0), "version"), "v2");   /* newest first */
  CHECK_STR(str_field(json_array_get(list, 2), "version"), "v1");
  json_decref(list);

  /* another process has the row already */
  r.id = "v4";
  CHECK_EQ_INT(mend_store_insert_run(other, &r), 0);
  CHECK_EQ_INT(mend_store_commit(other), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);

  /* a version numbered in a batch that fails is gone with it, and numbered again */
  mend_run_rec r3 = r;
  r3.id = "v5";
  r3.version = "v3";
  CHECK_EQ_INT(mend_store_insert_run(s, &r3), 0);
  CHECK(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 3, NULL) != 0);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);
  r3.id = "v6";
  CHECK_EQ_INT(mend_store_insert_run(s, &r3), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 3);
  run = mend_store_run(s, "v6");
  CHECK_STR(str_field(run, "version"), "v3");
  json_decref(run);
  sqlite3_close(db);
  mend_store_close(other);
  mend_store_close(s);
  remove_db(path);
}

/* A version keeps its script (schema 8), written with its first run, kept by a row from before
 * that lacked it once a run of the version brings it, and read back for that version only. */
static void test_version_scripts(void) {
  const char *path = file_in_dir("scripts.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s);
  if (!s) return;
  mend_run_rec r = run_rec("s1", NULL, "running", 1);
  r.script = "return { name = 'order' }";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_run_rec bare = r;   /* a version whose script was not kept (registered in code) */
  bare.id = "s2";
  bare.version = "v9";
  bare.script = NULL;
  CHECK_EQ_INT(mend_store_insert_run(s, &bare), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  char *source = NULL;
  char *text = mend_store_version_script(s, "order", r.version, &source);
  CHECK_STR(text, "return { name = 'order' }");
  CHECK_STR(source, "order.lua");
  free(text);
  free(source);
  CHECK(mend_store_version_script(s, "order", "v9", NULL) == NULL);
  CHECK(strstr(mend_store_errmsg(s), "no script of workflow order version v9 is kept") != NULL);
  CHECK(mend_store_version_script(s, "refund", r.version, NULL) == NULL);
  mend_store_close(s);

  /* another process (a restart) brings the script of a version whose row lacks it */
  s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s);
  if (!s) return;
  bare.id = "s3";
  bare.script = "return { name = 'order', v = 9 }";
  CHECK_EQ_INT(mend_store_insert_run(s, &bare), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  text = mend_store_version_script(s, "order", "v9", NULL);
  CHECK_STR(text, "return { name = 'order', v = 9 }");
  free(text);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);
  sqlite3_close(db);
  mend_store_close(s);
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
  CHECK(taken && json_array_size(taken) == 1 && strcmp(json_string_value(json_array_get(taken, 0)), "g0") == 0);
  json_decref(taken);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers"), 3);
  CHECK_EQ_INT(mend_store_claimable(b, "wb", 0), MEND_CLAIMABLE_GONE);
  taken = mend_store_claim(b, "wb", 30, 10, 0);
  CHECK(taken && json_array_size(taken) == 1 && strcmp(json_string_value(json_array_get(taken, 0)), "g1") == 0);
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
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workers WHERE owner = 'wa' AND lease_until > 100"), 1);
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

/* History rows are numbered by the run's holder (no look-up); a row without a number, or
 * whose number another process took meanwhile, gets the next free one. */
static void test_history_numbers(void) {
  const char *path = file_in_dir("hist.db");
  char err[512] = "";
  mend_store *a = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  mend_store *b = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(a && b);
  if (!a || !b) return;
  /* a records its writes (and runs them in groups) as an engine's store does */
  mend_store_set_worker(a, "holder:1:a");
  CHECK_EQ_INT(mend_store_start_writer(a, NULL, NULL), 0);
  mend_run_rec r = run_rec("h1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &r), 0);
  for (long n = 1; n <= 3; n++) {
    mend_history_rec h = {"h1", NULL, (double)n, "step", NULL, "running", 0, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(mend_store_last_history_seq(b, "h1"), 3);
  CHECK_EQ_INT(mend_store_last_history_seq(b, "nobody"), 0);
  /* another process adds a note (no number: the next free one, 4) */
  mend_history_rec note = {"h1", NULL, 4, "operator", NULL, NULL, 0, NULL, -1, "cancel requested", 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(b, &note), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  /* the holder's count says 4 and 5: 4 is taken, so its rows become 5 and 6, in order */
  for (long n = 4; n <= 5; n++) {
    mend_history_rec h = {"h1", NULL, (double)n + 1, "step", "running", "succeeded", 1, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  json_t *hist = mend_store_history(a, "h1");
  CHECK(hist && json_array_size(hist) == 6);
  for (size_t i = 0; hist && i < json_array_size(hist); i++)
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(hist, i), "seq")), (long long)i + 1);
  CHECK_STR(str_field(json_array_get(hist, 3), "event"), "operator");
  CHECK_STR(str_field(json_array_get(hist, 5), "to"), "succeeded");
  json_decref(hist);
  /* The same with more rows than go in one statement (8): the holder's 7..18 become 8..19,
   * still in the order recorded, whichever statement wrote them. */
  mend_history_rec note2 = {"h1", NULL, 7, "operator", NULL, NULL, 0, NULL, -1, "pause", 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(b, &note2), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  for (long n = 7; n <= 18; n++) {
    mend_history_rec h = {"h1", NULL, 100.0 + (double)n, "step", NULL, "running", 1, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  hist = mend_store_history(a, "h1");
  CHECK(hist && json_array_size(hist) == 19);
  for (size_t i = 0; hist && i < json_array_size(hist); i++) {
    json_t *row = json_array_get(hist, i);
    CHECK_EQ_INT(json_integer_value(json_object_get(row, "seq")), (long long)i + 1);
    if (i >= 7) CHECK(json_real_value(json_object_get(row, "at")) == 100.0 + (double)i);
  }
  CHECK_STR(str_field(json_array_get(hist, 6), "detail"), "pause");
  json_decref(hist);
  /* Rows of one time (a virtual clock, or one turn) whose numbers collide with the holder's
   * own earlier rows once another process took one: none lost, all in order. */
  mend_run_rec r2 = run_rec("h2", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &r2), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  mend_history_rec first = {"h2", NULL, 50, "operator", NULL, NULL, 0, NULL, -1, "note", 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(b, &first), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  for (long n = 1; n <= 16; n++) {
    mend_history_rec h = {"h2", NULL, 60, "step", NULL, "running", (int)n, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  hist = mend_store_history(a, "h2");
  CHECK(hist && json_array_size(hist) == 17);
  for (size_t i = 1; hist && i < json_array_size(hist); i++)
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(hist, i), "attempt")), (long long)i);
  json_decref(hist);
  /* Without a taken number, sixteen rows go in two statements, numbered as recorded. */
  for (long n = 20; n <= 35; n++) {
    mend_history_rec h = {"h1", NULL, 100.0 + (double)n, "step", NULL, "running", 1, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  hist = mend_store_history(a, "h1");
  CHECK(hist && json_array_size(hist) == 35);
  for (size_t i = 19; hist && i < json_array_size(hist); i++)
    CHECK(json_real_value(json_object_get(json_array_get(hist, i), "at")) == 100.0 + (double)i + 1);
  json_decref(hist);
  mend_store_close(a);
  mend_store_close(b);
}

/* A step's row is written at its first transition: the run's step_names list the others, as
 * pending, in their places, with the default key; step_names that are not a list of names
 * are refused by name, not read as no steps. */
static void test_pending_steps(void) {
  const char *path = file_in_dir("pending.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("p1", NULL, "running", 7);
  r.step_names = "[\"reserve\",\"charge\",\"ship\"]";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_step_rec st = step_rec("p1", 1, "charge", "running");
  st.idem_key = "p1/charge";
  CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  json_t *run = mend_store_run(s, "p1");
  CHECK(run != NULL);
  json_t *steps = json_object_get(run, "steps");
  CHECK_EQ_INT((long long)json_array_size(steps), 3);
  const char *names[] = {"reserve", "charge", "ship"};
  const char *status[] = {"pending", "running", "pending"};
  for (size_t i = 0; i < 3 && i < json_array_size(steps); i++) {
    json_t *o = json_array_get(steps, i);
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "idx")), (long long)i);
    CHECK_STR(str_field(o, "name"), names[i]);
    CHECK_STR(str_field(o, "status"), status[i]);
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "attempts")), i == 1 ? 1 : 0);
  }
  CHECK_STR(str_field(json_array_get(steps, 2), "idempotency_key"), "p1/ship");
  CHECK(json_is_false(json_object_get(json_array_get(steps, 0), "custom_key")));
  CHECK(json_object_get(run, "step_names") == NULL);
  json_decref(run);

  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM steps WHERE run_id = 'p1'"), 1);
  CHECK_EQ_INT(sqlite3_exec(db, "UPDATE runs SET step_names = '{\"a\":1}' WHERE id = 'p1'", NULL,
                            NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  CHECK(mend_store_run(s, "p1") == NULL);
  CHECK(strstr(mend_store_errmsg(s), "run p1: step_names is not a JSON array of names") != NULL);
  mend_store_close(s);
}

/* A step's attempt in flight has no row of its own (schema 6): it reads as running from its
 * `-> running` history row, over an older row or none; a later transition's row wins. */
static void hist(mend_store *s, const char *run, const char *step, long seq, const char *from,
                 const char *to, int attempt, double at) {
  mend_history_rec h = {.run_id = run, .step = step, .at = at, .event = "step",
                        .from_status = from, .to_status = to, .attempt = attempt, .delay = -1,
                        .seq = seq, NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
}

static const char *step_status(mend_store *s, const char *run, int idx, long long *attempts) {
  static char out[32];
  json_t *r = mend_store_run(s, run);
  CHECK(r != NULL);
  if (!r) return "";
  json_t *st = json_array_get(json_object_get(r, "steps"), (size_t)idx);
  snprintf(out, sizeof out, "%s", str_field(st, "status"));
  *attempts = json_integer_value(json_object_get(st, "attempts"));
  json_decref(r);
  return out;
}

static void test_attempts_in_flight(void) {
  const char *path = file_in_dir("in_flight.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("f1", NULL, "running", 7);
  r.step_names = "[\"first\",\"second\",\"third\"]";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  /* first: done, and its row says so */
  hist(s, "f1", "first", 1, "pending", "running", 1, 8);
  mend_step_rec st = step_rec("f1", 0, "first", "succeeded");
  st.attempts = 1;
  CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
  hist(s, "f1", "first", 2, "running", "succeeded", 1, 9);
  /* second: attempt 1 went to a retry wait and back to pending (the row), attempt 2 began */
  hist(s, "f1", "second", 3, "pending", "running", 1, 9);
  st = step_rec("f1", 1, "second", "pending");
  st.attempts = 1;
  st.error = "retryable: busy";
  st.due = 11;   /* the retry wait's end, written with the row */
  CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
  hist(s, "f1", "second", 4, "running", "retry_wait", 1, 10);
  hist(s, "f1", "second", 5, "retry_wait", "pending", 1, 11);
  hist(s, "f1", "second", 6, "pending", "running", 2, 11);
  CHECK_EQ_INT(mend_store_commit(s), 0);

  long long attempts = -1;
  CHECK_STR(step_status(s, "f1", 0, &attempts), "succeeded");
  CHECK_EQ_INT(attempts, 1);
  CHECK_STR(step_status(s, "f1", 1, &attempts), "running");
  CHECK_EQ_INT(attempts, 2);
  CHECK_STR(step_status(s, "f1", 2, &attempts), "pending");
  CHECK_EQ_INT(attempts, 0);
  json_t *run = mend_store_run(s, "f1");
  json_t *second = json_array_get(json_object_get(run, "steps"), 1);
  CHECK(json_real_value(json_object_get(second, "updated")) == 11.0);
  CHECK_STR(str_field(second, "error"), "retryable: busy");   /* the last error, as the row says */
  CHECK(json_object_get(second, "due") == NULL);   /* but that wait is over */
  json_decref(run);

  /* third begins with no row at all; second's attempt 2 ends, and its row wins */
  hist(s, "f1", "third", 7, "pending", "running", 1, 12);
  CHECK_STR(step_status(s, "f1", 2, &attempts), "running");
  CHECK_EQ_INT(attempts, 1);
  st = step_rec("f1", 1, "second", "succeeded");
  st.attempts = 2;
  CHECK_EQ_INT(mend_store_update_step(s, &st), 0);
  hist(s, "f1", "second", 8, "running", "succeeded", 2, 13);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(step_status(s, "f1", 1, &attempts), "succeeded");
  CHECK_EQ_INT(attempts, 2);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM steps WHERE run_id = 'f1'"), 2);
  sqlite3_close(db);

  /* rows from before schema 7 name their event and statuses */
  mend_run_rec old = run_rec("f2", NULL, "running", 7);
  old.step_names = "[\"first\"]";
  CHECK_EQ_INT(mend_store_insert_run(s, &old), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  db = raw_open(path);
  CHECK(sqlite3_exec(db, "INSERT INTO history(run_id, seq, step, at, event, from_status, to_status,"
                         " attempt) VALUES('f2', 1, 'first', 8, 'step', 'pending', 'running', 1)",
                     NULL, NULL, NULL) == SQLITE_OK);
  sqlite3_close(db);
  CHECK_STR(step_status(s, "f2", 0, &attempts), "running");
  CHECK_EQ_INT(attempts, 1);
  hist(s, "f2", "first", 2, "running", "failed", 1, 9);   /* and a later row, coded, wins */
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(step_status(s, "f2", 0, &attempts), "pending");

  /* a run that ended has nothing in flight, whatever its history's last rows say */
  CHECK_EQ_INT(mend_store_update_run(s, "f1", "failed", "stopped", 0, 14, "error"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(step_status(s, "f1", 2, &attempts), "pending");
  mend_store_close(s);
  remove_db(path);
}

/* The run's image for the engine: typed, the same as the view says (image_check.h); a status
 * this mend does not know is an error that names it. */
static void test_run_image(void) {
  const char *path = file_in_dir("image.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  image_checks(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(db, "UPDATE steps SET status = 'bogus' WHERE run_id = 'img1' AND idx = 1",
                            NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  mend_run_image img;
  CHECK_EQ_INT(mend_store_run_image(s, "img1", &img), -1);
  CHECK(strstr(mend_store_errmsg(s), "run img1: step #2 has an unknown status \"bogus\"") != NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 0);
  CHECK(img.steps == NULL);
  mend_store_close(s);
  remove_db(path);
}

/* A failed store is not a missing run: a history read that cannot reach the store says so, even
 * after an earlier read found no run (a caller would answer "no run" for a run that exists). */
static void test_failure_is_not_missing(void) {
  const char *path = file_in_dir("failed.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("known", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK(mend_store_history(s, "nope") == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 1);
  s->batch_failed = 1;   /* as a failed flush leaves it */
  CHECK(mend_store_history(s, "known") == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 0);
  CHECK(mend_store_history(s, "nope") == NULL);
  CHECK(mend_store_history_page(s, "known", 0, 5, 0) == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 0);
  s->batch_failed = 0;
  mend_store_close(s);
  remove_db(path);
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
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
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

/* A run's inbox (schema 10): a key sent twice is one event; the oldest event of a name is
 * taken first; an event is consumed once, and a second consumption fails its batch rather
 * than take it twice. Another connection sees only committed events, by seq. */
static int seen_count;
static void count_seen(void *ud, const char *id) {
  (void)ud;
  if (id && strcmp(id, "e1") == 0) seen_count++;
}

static void test_inbox(void) {
  char err[512] = "";
  const char *path = file_in_dir("inbox.db");
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("e1", NULL, "running", 100);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT((int)mend_store_last_event(s), 0);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "tick", "{\"n\":1}", "k1", 101), 0);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "tick", "{\"n\":9}", "k1", 102), 1);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "tick", NULL, NULL, 103), 0);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "other", "2", NULL, 104), 0);
  /* not committed yet: the look of another connection does not see them */
  seen_count = 0;
  CHECK_EQ_INT((int)mend_store_events_after(s, 0, 100, count_seen, NULL), 0);
  CHECK_EQ_INT(seen_count, 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  /* seq grows with each event (a duplicate may use a number up) */
  long long last = mend_store_events_after(s, 0, 100, count_seen, NULL);
  CHECK(last >= 3);
  CHECK_EQ_INT(seen_count, 3);
  CHECK_EQ_INT((int)mend_store_events_after(s, last, 100, count_seen, NULL), (int)last);
  CHECK_EQ_INT(seen_count, 3);
  CHECK_EQ_INT((int)mend_store_last_event(s), (int)last);
  long long seq = 0;
  char *payload = NULL, *key = NULL;
  CHECK_EQ_INT(mend_store_next_event(s, "e1", "tick", &seq, &payload, &key), 1);
  long long first = seq;
  CHECK_STR(payload, "{\"n\":1}");
  CHECK_STR(key, "k1");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend_store_consume_event(s, "e1", seq, "first", 110), 0);
  /* the open batch is seen: the next one is the second, with null for no payload */
  CHECK_EQ_INT(mend_store_next_event(s, "e1", "tick", &seq, &payload, &key), 1);
  CHECK(seq > first);
  CHECK_STR(payload, "null");
  CHECK(key == NULL);
  free(payload);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_next_event(s, "e2", "tick", &seq, &payload, &key), 0);
  /* consumed twice: the batch fails, and nothing of it is kept */
  mend_store_consume_event(s, "e1", first, "again", 120);
  CHECK(mend_store_commit(s) != 0);
  mend_store_close(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM inbox WHERE step = 'first'"), 1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM inbox WHERE step = 'again'"), 0);
  sqlite3_close(db);
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
  CHECK_EQ_INT(mend_store_send_event(s, "c1", "more", NULL, NULL, 3), 0);
  CHECK_EQ_INT((int)mend_store_last_event(s), (int)last);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK((int)mend_store_last_event(s) > (int)last);
  mend_store_close(s);
  sqlite3_close(db);
}

/* Completion tokens (schemas 11 and 13), known by digest: one use an attempt, whichever of
 * its tokens is used first; a token of another attempt is its own. */
static void test_tokens(void) {
  char err[512] = "";
  const char *path = file_in_dir("tokens.db");
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(mend_store_put_token(s, "d1", "t1", "ask", 1, 5), 0);
  CHECK_EQ_INT(mend_store_put_token(s, "d2", "t1", "ask", 1, 6), 0);   /* a second ctx */
  CHECK_EQ_INT(mend_store_put_token(s, "d3", "t1", "ask", 2, 7), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  char *digest = NULL;
  CHECK_EQ_INT(mend_store_token_of_attempt(s, "t1", "ask", 2, &digest), 1);
  CHECK_STR(digest, "d3");
  free(digest);
  CHECK_EQ_INT(mend_store_token_of_attempt(s, "t1", "ask", 3, &digest), 0);
  json_t *row = mend_store_token(s, "d2");
  CHECK(row && json_integer_value(json_object_get(row, "attempt")) == 1);
  CHECK_STR(json_string_value(json_object_get(row, "digest")), "d2");
  json_decref(row);
  CHECK(mend_store_token(s, "nope") == NULL);
  CHECK_EQ_INT(mend_store_use_token(s, "d2", "{\"ok\":true}", 8), 0);
  CHECK_EQ_INT(mend_store_use_token(s, "d1", "{\"ok\":false}", 9), 1);   /* the attempt's answer is in */
  CHECK_EQ_INT(mend_store_use_token(s, "d2", "{\"ok\":false}", 9), 1);
  CHECK_EQ_INT(mend_store_use_token(s, "d3", "{\"ok\":true}", 10), 0);   /* attempt 2's own */
  CHECK_EQ_INT(mend_store_commit(s), 0);
  mend_store_close(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM tokens WHERE attempt = 1 AND used = 8"), 2);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM tokens WHERE used = 10"), 1);
  sqlite3_close(db);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-test-store-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_schema();
  test_tokens();
  test_round_trip();
  test_batch_visibility();
  test_refusals();
  test_disk_full();
  test_checkpoints();
  test_wal_hard_limit();
  test_upgrade_from_1();
  test_flushes_counted_once_asked();
  test_looks_without_the_batch();
  test_writer_thread();
  test_writer_parts();
  test_compact_rows();
  test_history_group_binds();
  test_fence();
  test_released_run_is_fenced();
  test_history_numbers();
  test_pending_steps();
  test_attempts_in_flight();
  test_run_image();
  test_failure_is_not_missing();
  test_claimable();
  test_workflow_versions();
  test_locked();
  test_version_scripts();
  test_inbox();

  check_remove_dir(dir);
  return check_done("store");
}
