/*
 * test_key_reuse: the SQLite store's lookup of a custom idempotency key's result (SPEC section
 * 6) offers only a row that executed the key and whose effect is still there: never a reuse of
 * it (custom_key 2), a compensated row, or one of a run that is compensating or in
 * needs_attention, or whose parent, up to its root, is; and names the run whose result it is.
 * The engine's side (a reusing run passes the step by on its way back) is spec/reuse_spec.lua's.
 */
#include "check.h"
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mend_run_rec run_rec(const char *id, const char *status) {
  mend_run_rec r = {.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                    .status = status, .input = "{}", .created = 1, .updated = 1};
  return r;
}

static mend_step_rec keyed(const char *run, const char *status, int kind, const char *result,
                           double updated) {
  mend_step_rec st = {.run_id = run, .idx = 0, .name = "charge", .status = status,
                      .attempts = kind == MEND_KEY_REUSED ? 0 : 1, .idem_key = "charge-7",
                      .custom_key = kind, .result = result, .due = -1, .last_delay = -1,
                      .updated = updated, .new_row = 1};
  return st;
}

/* The lookup's answer: "run=result", or "none" / "error". */
static const char *look(mend_store *s, char *buf, size_t len) {
  char *res = NULL, owner[64] = "";
  int rc = mend_store_find_key_result(s, "charge-7", &res, owner, sizeof owner);
  if (rc == 1) snprintf(buf, len, "%s=%s", owner, res);
  else snprintf(buf, len, "%s", rc == 0 ? "none" : "error");
  free(res);
  return buf;
}

static void put_run(mend_store *s, const char *id, const char *status) {
  mend_run_rec r = run_rec(id, status);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
}

int main(void) {
  char dir[] = "/tmp/mend-test-key-reuse-XXXXXX", path[128], err[512] = "", buf[128];
  if (!mkdtemp(dir)) return 2;
  snprintf(path, sizeof path, "%s/k.db", dir);
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) {
    fprintf(stderr, "open: %s\n", err);
    return 1;
  }
  put_run(s, "a", "running");
  put_run(s, "b", "running");
  put_run(s, "c", "running");
  /* a executed the key; b reused a's result (a later row) */
  mend_step_rec a = keyed("a", "succeeded", MEND_KEY_OWN, "\"c-1\"", 10);
  mend_step_rec b = keyed("b", "succeeded", MEND_KEY_REUSED, "\"c-1\"", 20);
  CHECK_EQ_INT(mend_store_put_step(s, &a), 0);
  CHECK_EQ_INT(mend_store_put_step(s, &b), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "a=\"c-1\"");

  /* a turns back: while it is compensating its succeeded row is on its way out */
  CHECK_EQ_INT(mend_store_update_run(s, "a", "compensating", NULL, 0, 30, "fatal"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "none");

  /* ...and once it undid the key, b's reuse is no source either */
  a.status = "compensated";
  a.comp_attempts = 1;
  a.new_row = 0;
  a.updated = 40;
  CHECK_EQ_INT(mend_store_update_step(s, &a), 0);
  CHECK_EQ_INT(mend_store_update_run(s, "a", "compensated", NULL, 0, 40, "fatal"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "none");

  /* c executes the key again: its row is the one offered */
  mend_step_rec c = keyed("c", "succeeded", MEND_KEY_OWN, "\"c-2\"", 50);
  CHECK_EQ_INT(mend_store_put_step(s, &c), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "c=\"c-2\"");

  /* c stopped by a failed compensation (needs_attention): a dlq retry goes on undoing it */
  CHECK_EQ_INT(mend_store_update_run(s, "c", "needs_attention", "undo failed", 1, 60,
                                     "compensation_failed"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "none");
  CHECK_EQ_INT(mend_store_update_run(s, "c", "succeeded", NULL, 0, 70, NULL), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "c=\"c-2\"");

  /* a grandchild's row (d under p under root): undone with any run above it going back */
  put_run(s, "root", "running");
  put_run(s, "p", "succeeded");
  put_run(s, "d", "succeeded");
  CHECK_EQ_INT(mend_store_set_parent(s, "p", "root", "k"), 0);
  CHECK_EQ_INT(mend_store_set_parent(s, "d", "p", "k"), 0);
  mend_step_rec d = keyed("d", "succeeded", MEND_KEY_OWN, "\"c-3\"", 80);
  CHECK_EQ_INT(mend_store_put_step(s, &d), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "d=\"c-3\"");
  CHECK_EQ_INT(mend_store_update_run(s, "root", "compensating", NULL, 0, 90, "fatal"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "c=\"c-2\"");   /* the latest whose effect stands */
  CHECK_EQ_INT(mend_store_update_run(s, "root", "needs_attention", "undo failed", 1, 95,
                                     "compensation_failed"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "c=\"c-2\"");
  CHECK_EQ_INT(mend_store_update_run(s, "root", "succeeded", NULL, 0, 99, NULL), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_STR(look(s, buf, sizeof buf), "d=\"c-3\"");

  /* a reuse's row reads back as a reuse (the engine's rebuild tells it from its own key) */
  json_t *run = mend_store_run(s, "b");
  json_t *step = json_array_get(json_object_get(run, "steps"), 0);
  CHECK(json_is_true(json_object_get(step, "reused")));
  CHECK(json_is_true(json_object_get(step, "custom_key")));
  json_decref(run);
  run = mend_store_run(s, "c");
  step = json_array_get(json_object_get(run, "steps"), 0);
  CHECK(json_object_get(step, "reused") == NULL);
  json_decref(run);

  mend_store_close(s);
  unlink(path);
  char side[160];
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
  rmdir(dir);
  return check_done("test_key_reuse");
}
