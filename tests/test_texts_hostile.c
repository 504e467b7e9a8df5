/*
 * test_texts_hostile: texts that are not UTF-8 reaching the engine by the ways test_texts does
 * not take: looked up (a run id, a token: not found), made by a workflow as it runs (an error
 * message, a result, a host call's argument: mended; a step's idempotency_key: the step
 * refused), or written in a workflow file (a workflow's, an event's, a breaker's name: the
 * load refused), and a who holding a C1 control character. After each the engine starts and
 * finishes a run: on PostgreSQL (MEND_TEST_PG, a database of its own) a batch holding such
 * bytes was refused by the server and the engine stopped with it. Each case its own engine
 * (HOSTILE=<case> runs one). Must never: depend on a case's message text.
 */
#include "texts_case.h"

static const char idem_lua[] =
    "return { name = 'idem', steps = { { name = 'charge',\n"
    "  idempotency_key = function(ctx) return ('\\u{e9}'):sub(1, 1) end,\n"
    "  execute = function(ctx) return 1 end } } }\n";

static const char w_raise[] =
    "local mend = require 'mend'\n"
    "return { name = 'w_raise', steps = { { name = 's', retry = { max_attempts = 1 },\n"
    "  execute = function(ctx) error('card ' .. ('\\u{e9}'):sub(1, 1)) end } } }\n";
static const char w_raise_tbl[] =
    "local mend = require 'mend'\n"
    "return { name = 'w_raise_tbl', steps = { { name = 's', retry = { max_attempts = 1 },\n"
    "  execute = function(ctx) error(mend.fatal('card ' .. ('\\u{e9}'):sub(1, 1))) end } } }\n";
static const char w_result[] =
    "local mend = require 'mend'\n"
    "return { name = 'w_result', steps = { { name = 's', retry = { max_attempts = 1 },\n"
    "  execute = function(ctx) return ('\\u{e9}'):sub(1, 1) end } } }\n";
static const char w_result_key[] =
    "local mend = require 'mend'\n"
    "return { name = 'w_result_key', steps = { { name = 's', retry = { max_attempts = 1 },\n"
    "  execute = function(ctx) return { [('\\u{e9}'):sub(1, 1)] = 1 } end } } }\n";
static const char w_call_arg[] =
    "local mend = require 'mend'\n"
    "return { name = 'w_call_arg', steps = { { name = 's', retry = { max_attempts = 1 },\n"
    "  execute = function(ctx) return mend.call('echo', ('\\u{e9}'):sub(1, 1)) end } } }\n";
/* Texts of a workflow file that its load takes (a step's name not UTF-8 is refused there) */
static const char wfname_lua[] =
    "return { name = 'wn' .. ('\\u{e9}'):sub(1, 1), steps = { { name = 'a',\n"
    "  execute = function(ctx) return 1 end } } }\n";
static const char waitfor_lua[] =
    "return { name = 'waitfor', steps = { { name = 'a',\n"
    "  wait_for = 'g' .. ('\\u{e9}'):sub(1, 1) } } }\n";
static const char breaker_lua[] =
    "return { name = 'bk', steps = { { name = 'a', breaker = 'b' .. ('\\u{e9}'):sub(1, 1),\n"
    "  execute = function(ctx) error('down') end } } }\n";

static void echo(void *ud, mend_call *call, const char *args) {
  (void)ud;
  mend_call_return(call, args);
}

static int mend_engine_load_text_name(mend_engine *E, const char *text, char *name) {
  char path[96];
  snprintf(path, sizeof path, "/tmp/mend_texts_%d_wn.lua", (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fputs(text, f);
  fclose(f);
  int rc = mend_engine_load(E, path, name, 32);
  remove(path);
  return rc;
}

/* After each hostile call the engine must still start and finish a run. */
static int goes_on(mend_engine *E, const char *what) {
  char id[17];
  int rc = mend_engine_start(E, "waits", NULL, NULL, id, NULL);
  int rc2 = rc == MEND_OK ? mend_engine_run_all(E) : rc;
  if (rc != MEND_OK || rc2 != MEND_OK) {
    const char *m = mend_engine_errmsg(E);
    fprintf(stderr, "after %s: start %d run_all %d: %s\n", what, rc, rc2, m ? m : "");
    return 0;
  }
  return 1;
}

static void exercise(const char *store, const char *db_path, const char *which) {
  char err[512];
  mend_options o;
  mend_options_init(&o);
  o.db_path = db_path;
  o.virtual_clock = 1;
  mend_engine *E = NULL;
  int rc = mend_engine_new(&o, &E, err, sizeof err);
  CHECK_EQ_INT(rc, MEND_OK);
  if (rc != MEND_OK) return;
  CHECK_EQ_INT(mend_engine_register_function(E, "hand_out", hand_out, NULL), MEND_OK);
  load_text(E, "waits", waits);
  load_text(E, "stuck", stuck_lua);
  load_text(E, "idem", idem_lua);
  /* each its own engine: a load or a run that stops one would hide the cases after it */
  /* a workflow file's names: its load refused, the engine goes on */
  static const struct { const char *which, *text; } loads[] = {
      {"wait_for", waitfor_lua}, {"breaker_load", breaker_lua}, {"wf_name", wfname_lua}};
  for (size_t k = 0; k < sizeof loads / sizeof loads[0]; k++) {
    if (strcmp(which, loads[k].which) != 0) continue;
    rc = mend_engine_load_text_name(E, loads[k].text, (char[32]){0});
    fprintf(stderr, "%s: %s -> %d %s\n", store, which, rc, mend_engine_errmsg(E));
    CHECK(rc != MEND_OK);
    CHECK(goes_on(E, which));
  }
  load_text(E, "w_raise", w_raise);
  load_text(E, "w_raise_tbl", w_raise_tbl);
  load_text(E, "w_result", w_result);
  load_text(E, "w_result_key", w_result_key);
  load_text(E, "w_call_arg", w_call_arg);
  CHECK_EQ_INT(mend_engine_register_function(E, "echo", echo, NULL), MEND_OK);
  char *json = NULL;
  int all = 0;
#define CASE(n, call) if (all || strcmp(which, n) == 0) { \
    rc = (call); fprintf(stderr, "%s: %s -> %d %s\n", store, n, rc, \
        mend_engine_errmsg(E) ? mend_engine_errmsg(E) : ""); \
    mend_free(json); json = NULL; CHECK(goes_on(E, n)); }
  CASE("cancel_id", mend_engine_cancel(E, "r\xff", "ops"));
  CASE("retry_id", mend_engine_retry_dead_letter(E, "r\xff", "ops"));
  CASE("resolve_id", mend_engine_resolve_dead_letter(E, "r\xff", "ops", "paid"));
  CASE("complete_tok", mend_engine_complete(E, "mtk_\xff", "1"));
  CASE("fail_tok", mend_engine_fail(E, "mtk_\xff", "fatal", "x"));
  CASE("run_json", mend_engine_run_json(E, "r\xff", &json));
  CASE("history_json", mend_engine_history_json(E, "r\xff", &json));
  CASE("history_page", mend_engine_history_page_json(E, "r\xff", 0, 10, 0, &json));
  CASE("dlq_page", mend_engine_dlq_page_json(E, "r\xff", 0, 10, &json));
  CASE("breaker_key_valid_unknown",
       mend_engine_override_breaker(E, "nope\xc3\xa9", "open", 0, "ops"));
  CASE("start_workflow", mend_engine_start(E, "w\xff", NULL, NULL, (char[17]){0}, NULL));
  CASE("start_nul_input",
       mend_engine_start(E, "waits", "{\"a\":\"\\u0000\"}", NULL, (char[17]){0}, NULL));
  CASE("signal_nul_payload", mend_engine_signal_by_key(E, "none", "go", "\"\\u0000\"", NULL));
  CASE("w_raise", mend_engine_start(E, "w_raise", NULL, NULL, (char[17]){0}, NULL));
  CASE("w_raise_tbl", mend_engine_start(E, "w_raise_tbl", NULL, NULL, (char[17]){0}, NULL));
  CASE("w_result", mend_engine_start(E, "w_result", NULL, NULL, (char[17]){0}, NULL));
  CASE("w_result_key", mend_engine_start(E, "w_result_key", NULL, NULL, (char[17]){0}, NULL));
  CASE("w_call_arg", mend_engine_start(E, "w_call_arg", NULL, NULL, (char[17]){0}, NULL));
  /* mend.h: who is "UTF-8 with no control character"; U+0085 (NEL) and U+009B (CSI) are C1
   * control characters (Unicode Cc), printed as they are by mend history and the timeline */
  if (strcmp(which, "c1_who") == 0) {
    CHECK_EQ_INT(mend_engine_start_who(E, "waits", NULL, NULL, "eve\xc2\x85" "2026 run done",
                                       (char[17]){0}, NULL), MEND_EINVAL);
    CHECK_EQ_INT(mend_engine_start_who(E, "waits", NULL, NULL, "eve\xc2\x9b" "2J",
                                       (char[17]){0}, NULL), MEND_EINVAL);
  }
  CASE("idem_key", mend_engine_start(E, "idem", NULL, NULL, (char[17]){0}, NULL));
  if (strcmp(which, "idem_key") == 0) {   /* the step refused: the run did not succeed */
    char id[17];
    CHECK_EQ_INT(mend_engine_start(E, "idem", NULL, "k-idem", id, NULL), MEND_OK);
    CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
    CHECK_EQ_INT(mend_engine_run_json(E, id, &json), MEND_OK);
    CHECK(json && strstr(json, "\"status\":\"succeeded\"") == NULL);
    CHECK(json && strstr(json, "not UTF-8") != NULL);
    mend_free(json);
    json = NULL;
  }
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  printf("%s: %s done\n", store, which);
}

static const char *const cases[] = {
    "cancel_id", "retry_id", "resolve_id", "complete_tok", "fail_tok", "run_json",
    "history_json", "history_page", "dlq_page", "breaker_key_valid_unknown", "start_workflow",
    "start_nul_input", "signal_nul_payload", "w_raise", "w_raise_tbl", "w_result",
    "w_result_key", "w_call_arg", "idem_key", "wait_for", "wf_name", "breaker_load", "c1_who",
    NULL};

static void exercise_all(const char *store, const char *db_path) {
  const char *only = getenv("HOSTILE");
  for (const char *const *c = cases; *c; c++)
    if (!only || !*only || strcmp(only, *c) == 0) exercise(store, db_path, *c);
}

int main(void) {
  return texts_each_store(exercise_all, "test_texts_hostile");
}
