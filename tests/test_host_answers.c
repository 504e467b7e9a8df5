/*
 * test_host_answers: what a step sees of a host function's answer, through include/mend.h
 * alone. An answer the host gets wrong (a kind misspelt, a severity out of its range, bad
 * JSON, a failure's message that is not UTF-8) is refused with MEND_EINVAL and leaves the call
 * open for a right one; and an error mend.call (or mend.sleep) raises
 * itself names the workflow's line that called it, not mend's own code, and why it cannot
 * wait there. It never tests the driving modes or the limits (test_embed_drive, test_hostile).
 */
#include <malloc.h>
#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[64];
static char path[128];

static void write_workflow(const char *text) {
  snprintf(path, sizeof path, "%s/answers.lua", dir);
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f)) {
    perror(path);
    exit(2);
  }
}

static const char *const workflow =
    "local mend = require 'mend'\n"
    "return { name = 'answers',\n"
    "  retry = { max_attempts = 2, initial = 0.01, multiplier = 1, max_delay = 0.01 },\n"
    "  steps = {\n"
    "    { name = 'a', execute = function(ctx, input)\n"
    "        if not input.co then local answer = mend.call(input.fn, input.mode); return answer "
    "end\n"
    "        return coroutine.wrap(function() local a = mend.sleep(1); return a end)()\n"
    "      end },\n"
    "  } }\n";

static mend_engine *engine(int sandbox) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  o.sandbox = sandbox;
  mend_engine *E = NULL;
  char err[512] = "";
  if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) {
    fprintf(stderr, "mend_engine_new: %s\n", err);
    exit(2);
  }
  int rc = mend_engine_load(E, path, NULL, 0);
  if (rc != MEND_OK) fprintf(stderr, "load: %s\n", mend_engine_errmsg(E));
  CHECK_EQ_INT(rc, MEND_OK);
  return E;
}

/* Runs one run of the workflow to its end; its JSON, freed by the caller with mend_free. */
static char *run(mend_engine *E, const char *input) {
  char id[17];
  CHECK_EQ_INT(mend_engine_start(E, "answers", input, NULL, id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  char *json = NULL;
  CHECK_EQ_INT(mend_engine_run_json(E, id, &json), MEND_OK);
  return json ? json : calloc(1, 1);
}

static int has(const char *json, const char *text) {
  if (strstr(json, text)) return 1;
  fprintf(stderr, "expected <%s> in %s\n", text, json);
  return 0;
}

/* The host's answers, each checked as it is made: the first wrong one, then a right one. */
static int refusals, first_attempts;
static void host(void *ud, mend_call *call, const char *args) {
  (void)ud;
  if (strstr(args, "\"bytes\"")) {           /* a message not UTF-8 (Latin-1), then UTF-8 */
    int rc = mend_call_fail(call, "fatal", "compte bloqu\xe9", -1, 0);
    CHECK_EQ_INT(rc, MEND_EINVAL);
    refusals += rc == MEND_EINVAL;
    mend_engine *E = ud;
    CHECK(strstr(mend_engine_errmsg(E), "the failure's message is not UTF-8 text") != NULL);
    CHECK_EQ_INT(mend_call_fail(call, "fatal", "compte bloqu\xc3\xa9", -1, 0), MEND_OK);
  } else if (strstr(args, "\"kind\"")) {     /* a kind misspelt, then a retryable error */
    if (first_attempts++ == 0) {
      int rc = mend_call_fail(call, "retriable", "busy", 0, 0);
      CHECK_EQ_INT(rc, MEND_EINVAL);
      refusals += rc == MEND_EINVAL;
      rc = mend_call_fail(call, "compensable", "half", -1, 7);
      CHECK_EQ_INT(rc, MEND_EINVAL);
      refusals += rc == MEND_EINVAL;
      CHECK_EQ_INT(mend_call_fail(call, "retryable", "busy", 0, 0), MEND_OK);
    } else {
      CHECK_EQ_INT(mend_call_return(call, "\"done\""), MEND_OK);
    }
  } else if (strstr(args, "\"forever\"")) {  /* an endless retry_after, then a value */
    int rc = first_attempts++ == 0 ? mend_call_fail(call, "retryable", "later", 1.0 / 0.0, 0)
                                   : mend_call_return(call, "\"done\"");
    CHECK_EQ_INT(rc, MEND_OK);
    if (rc != MEND_OK) mend_call_return(call, "null");   /* not left open: the run would hang */
  } else if (strstr(args, "\"json\"")) {     /* JSON that is not, then a value */
    CHECK_EQ_INT(mend_call_return(call, "{bad"), MEND_EINVAL);
    CHECK_EQ_INT(mend_call_return(call, "\"ok\""), MEND_OK);
  }
}

/* A failure whose message is not UTF-8 is refused, as a token's is, and the call stays open for
 * one that is (it was kept as it was, and mended on its way to the history). */
static void it_refuses_a_host_error_that_is_not_utf8(void) {
  mend_engine *E = engine(1);
  mend_engine_register_function(E, "host", host, E);
  refusals = 0;
  char *json = run(E, "{\"fn\":\"host\",\"mode\":\"bytes\"}");
  CHECK_EQ_INT(refusals, 1);
  CHECK(has(json, "\"status\":\"failed\""));
  CHECK(has(json, "\"error_kind\":\"fatal\""));
  CHECK(has(json, "compte bloqu\xc3\xa9"));
  mend_free(json);
  mend_engine_free(E);
}

/* A kind that is none of the three, or a compensable severity outside 1..3, is refused and the
 * call stays open: "retriable" was a plain error, never retried, and severity 7 a severity 1. */
static void it_refuses_a_host_error_of_no_known_kind(void) {
  mend_engine *E = engine(1);
  mend_engine_register_function(E, "host", host, NULL);
  refusals = first_attempts = 0;
  char *json = run(E, "{\"fn\":\"host\",\"mode\":\"kind\"}");
  CHECK_EQ_INT(refusals, 2);
  CHECK(has(json, "\"status\":\"succeeded\""));
  CHECK(has(json, "\"attempts\":2"));
  CHECK(has(json, "\"result\":\"done\""));
  mend_free(json);
  json = run(E, "{\"fn\":\"host\",\"mode\":\"json\"}");
  CHECK(has(json, "\"result\":\"ok\""));
  mend_free(json);
  mend_engine_free(E);
}

/* A dependency's advice of an endless retry_after is clamped to the policy's max_retry_after
 * (900 s by default), as mend.retryable's is: the answer was refused (MEND_ENOMEM), and before
 * that it was dropped, the step retried at once. */
static void it_clamps_an_endless_retry_after(void) {
  mend_engine *E = engine(1);
  mend_engine_register_function(E, "host", host, NULL);
  first_attempts = 0;
  char *json = run(E, "{\"fn\":\"host\",\"mode\":\"forever\"}");
  CHECK(has(json, "\"status\":\"succeeded\""));
  CHECK(has(json, "\"attempts\":2"));
  char *id = strstr(json, "\"id\":\""), run_id[17] = "";
  if (id) memcpy(run_id, id + 6, 16);
  char *hist = NULL;
  CHECK_EQ_INT(mend_engine_history_json(E, run_id, &hist), MEND_OK);
  CHECK(hist && has(hist, "\"delay\":900"));
  mend_free(hist);
  mend_free(json);
  mend_engine_free(E);
}

/* An answer given at once that is too large for the memory limit fails the attempt (a dead
 * letter: workflow_error) and is freed: the call and the answer's whole document leaked. */
static char *large_answer;
static void large(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  CHECK_EQ_INT(mend_call_return(call, large_answer), MEND_OK);
}

static void it_frees_an_answer_too_large_for_the_memory_limit(void) {
  size_t n = 300000;   /* numbers: some 10 MB of jansson's values, 5 MB as a Lua table */
  large_answer = malloc(2 * n + 2);
  large_answer[0] = '[';
  for (size_t k = 0; k < n; k++) memcpy(large_answer + 1 + 2 * k, k + 1 < n ? "1," : "1]", 2);
  large_answer[2 * n + 1] = 0;
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  o.sandbox = 1;
  o.memory_limit = 2 << 20;
  mend_engine *E = NULL;
  CHECK_EQ_INT(mend_engine_new(&o, &E, NULL, 0), MEND_OK);
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  mend_engine_register_function(E, "large", large, NULL);
  size_t before = 0;
  for (int i = 0; i < 6; i++) {
    if (i == 1) before = mallinfo2().uordblks;   /* after the first: the engine's own warm-up */
    char *json = run(E, "{\"fn\":\"large\",\"mode\":\"x\"}");
    CHECK(has(json, "\"reason\":\"workflow_error\""));
    CHECK(has(json, "exceeded the memory limit"));
    mend_free(json);
  }
  size_t after = mallinfo2().uordblks;
  /* five leaks would be 50 MB; what the runs' rows and the collector keep is far less */
  if (after > before + (8u << 20)) fprintf(stderr, "heap grew by %zu bytes\n", after - before);
  CHECK(after <= before + (8u << 20));
  mend_engine_free(E);
  free(large_answer);
}

/* mend.call's own errors (no such function) name the workflow's line, sandboxed or not: they
 * named mend's wrapper ("[string \"local call, error = ......\"]:3", ".../mend/init.lua:13"). */
static void it_names_the_workflows_line_in_mend_calls_errors(void) {
  for (int sandbox = 0; sandbox <= 1; sandbox++) {
    mend_engine *E = engine(sandbox);
    char *json = run(E, "{\"fn\":\"nosuch\",\"mode\":\"x\"}");
    CHECK(has(json, "answers.lua:6: mend.call: no host function named \\\"nosuch\\\""));
    mend_free(json);
    mend_engine_free(E);
  }
}

/* mend.sleep (mend.call alike) in a coroutine the step made cannot wait: it said "must be called
 * from a step's execute or compensate", which it was. */
static void it_says_a_steps_own_coroutine_is_needed_to_wait(void) {
  mend_engine *E = engine(1);
  char *json = run(E, "{\"co\":true}");
  CHECK(has(json, "answers.lua:7: mend.sleep: cannot wait inside a coroutine the step made"));
  mend_free(json);
  mend_engine_free(E);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-host-answers-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  write_workflow(workflow);
  it_refuses_a_host_error_that_is_not_utf8();
  it_refuses_a_host_error_of_no_known_kind();
  it_clamps_an_endless_retry_after();
  it_frees_an_answer_too_large_for_the_memory_limit();
  it_names_the_workflows_line_in_mend_calls_errors();
  it_says_a_steps_own_coroutine_is_needed_to_wait();
  unlink(path);
  rmdir(dir);
  return check_done("test_host_answers");
}
