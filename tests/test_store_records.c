/*
 * test_store_records: the SQLite store's records written, committed and read back: the schema
 * and its version, runs, steps, history, breakers, the dead-letter queue, completion tokens and
 * a run's inbox, and what reads make of them (steps not written yet, an attempt in flight, the
 * run's image, a failed store that is not a missing run).
 *
 * Against a real file in a temporary directory (tests/store_case.h). Must never: lean on what
 * another case left in its database.
 */
#include "check.h"
#include "store_case.h"
#include "breaker.h"
#include "image_check.h"
#include "store/store_int.h"   /* batch_failed: a test of the SQLite backend itself */

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Completion tokens (schemas 11 and 13), known by digest: one use an attempt, whichever of
 * its tokens is used first; a token of another attempt is its own. */
static void test_tokens(void) {
  const char *path = file_in_dir("tokens.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
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
  /* the attempt's answer is in */
  CHECK_EQ_INT(mend_store_use_token(s, "d1", "{\"ok\":false}", 9), 1);
  CHECK_EQ_INT(mend_store_use_token(s, "d2", "{\"ok\":false}", 9), 1);
  CHECK_EQ_INT(mend_store_use_token(s, "d3", "{\"ok\":true}", 10), 0);   /* attempt 2's own */
  CHECK_EQ_INT(mend_store_commit(s), 0);
  mend_store_close(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM tokens WHERE attempt = 1 AND used = 8"), 2);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM tokens WHERE used = 10"), 1);
  sqlite3_close(db);
}

static void test_round_trip(void) {
  const char *path = file_in_dir("trip.db");
  mend_store *s = store_at(path, MEND_DURABILITY_FULL);
  CHECK(s != NULL);
  if (!s) return;

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
  CHECK_EQ_INT(mend_store_update_run(s, "r1", "needs_attention", "charge failed", 1, 500,
                                     "compensation_failed"),
               0);
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
  s = store_at(path, MEND_DURABILITY_FULL);
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

/* A step's row is written at its first transition: the run's step_names list the others, as
 * pending, in their places, with the default key; step_names that are not a list of names
 * are refused by name, not read as no steps. */
static void test_pending_steps(void) {
  const char *path = file_in_dir("pending.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
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
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
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
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  image_checks(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(
      sqlite3_exec(db, "UPDATE steps SET status = 'bogus' WHERE run_id = 'img1' AND idx = 1", NULL,
                   NULL, NULL),
      SQLITE_OK);
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
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
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

/* A run's inbox (schema 10): a key sent twice is one event; the oldest event of a name is
 * taken first; an event is consumed once, and a second consumption fails its batch rather
 * than take it twice. Another connection sees only committed events, by seq. */
static int seen_count;

static void count_seen(void *ud, const char *id) {
  (void)ud;
  if (id && strcmp(id, "e1") == 0) seen_count++;
}

static void test_inbox(void) {
  const char *path = file_in_dir("inbox.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("e1", NULL, "running", 100);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT((int)mend_store_last_event(s), 0);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "tick", "{\"n\":1}", "k1", 101, NULL), 0);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "tick", "{\"n\":9}", "k1", 102, NULL), 1);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "tick", NULL, NULL, 103, NULL), 0);
  CHECK_EQ_INT(mend_store_send_event(s, "e1", "other", "2", NULL, 104, NULL), 0);
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

int main(void) {
  store_case_begin("store-records");
  test_schema();
  test_tokens();
  test_round_trip();
  test_pending_steps();
  test_attempts_in_flight();
  test_run_image();
  test_failure_is_not_missing();
  test_inbox();
  return store_case_end("store_records");
}
