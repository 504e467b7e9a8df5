/*
 * test_embed_events: events and completion tokens through the C API, with mend.h alone: the
 * event callback's exact JSON text, signals to waiting runs, and tokens completed, failed
 * and refused (each refusal with its code).
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest c_embed_events,
 * under AddressSanitizer in c_sanitized), and against the installed library with pkg-config
 * and with find_package(mend) (tests/embed_*.sh). Its set-up is tests/embed_host.h's. Must
 * never: use more of mend than include/mend.h.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <dirent.h>
#include <mend.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "embed_host.h"

/* The host hears each event as JSON text, byte for byte what json_dumps wrote before capi
 * wrote it itself (flatjson.c, issue 24): keys in their order, quotes, backslashes and control
 * characters escaped as jansson escapes them, UTF-8 and '/' as they are, the time a number; a
 * byte that is not UTF-8 as '?' (jansson refused the event whole). */
static const char odd_fail_lua[] =
    "local mend = require 'mend'\n"
    "return { name = 'odd_fail', steps = {\n"
    "  { name = 'bad', retry = { max_attempts = 1 }, execute = function(ctx)\n"
    "      error(mend.fatal('say \"hi\"\\\\ back\\n\\ttab \\1 caf\\195\\169 \\226\\130\\172 / "
    "\\255')) end } } }\n";

static char *heard[8];
static int nheard;
static void keep_event(void *ud, const char *json) {
  (void)ud;
  if (nheard < 8) heard[nheard++] = strdup(json);
}

/* text is `prefix`, then a number, then "}" */
static int event_is(const char *text, const char *prefix) {
  if (!text || strncmp(text, prefix, strlen(prefix)) != 0) {
    fprintf(stderr, "heard  %s\nwanted %s<number>}\n", text ? text : "(nothing)", prefix);
    return 0;
  }
  char *end;
  strtod(text + strlen(prefix), &end);
  return end != text + strlen(prefix) && strcmp(end, "}") == 0;
}

static void it_hears_events_as_exact_json_text(void) {
  mend_options o;
  mend_options_init(&o);
  o.on_event = keep_event;
  mend_engine *E = engine(&o);
  load(E, "odd_fail");
  char id[17], want[512];
  start(E, "odd_fail", NULL, id);
  nheard = 0;
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(nheard, 2);
  snprintf(want, sizeof want,
           "{\"type\":\"step_failed\",\"run_id\":\"%s\",\"workflow\":\"odd_fail\","
           "\"step\":\"bad\",\"attempt\":1,\"error\":\"fatal: say \\\"hi\\\"\\\\ back\\n\\ttab "
           "\\u0001 caf\xc3\xa9 \xe2\x82\xac / ?\",\"will_retry\":false,\"at\":",
           id);
  CHECK(event_is(heard[0], want));
  snprintf(want, sizeof want,
           "{\"type\":\"run_finished\",\"run_id\":\"%s\",\"workflow\":\"odd_fail\","
           "\"status\":\"failed\",\"at\":",
           id);
  CHECK(event_is(heard[1], want));
  for (int i = 0; i < nheard; i++) free(heard[i]);
  mend_engine_free(E);
}

/* Events through the C API (issue 18): a host hands a player's action to the run that waits
 * for it; by run id or by the run's key, once per key, refused for an ended or unknown run. A
 * run key belongs to its workflow's run: another workflow's start with it is refused. */
static void it_sends_events_through_the_c_api(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = engine(&o);
  load(E, "wait");
  char id[17], id2[17], st[32];
  start(E, "wait", NULL, id);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK(run_has(E, id, "\"waiting\"", 0));
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{\"gold\":50}", "k1"), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", "{\"gold\":99}", "k1"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  CHECK(run_has(E, id, "\"result\":50", 0));
  CHECK(!run_has(E, id, "\"gold\":99", 0));
  CHECK(run_has(E, id, "\"key\\\":\\\"k1\\\"", 1));
  CHECK_EQ_INT(mend_engine_signal(E, id, "boss_killed", NULL, NULL), MEND_ESTATE);
  CHECK(strstr(mend_engine_errmsg(E), "has ended (succeeded)") != NULL);
  CHECK_EQ_INT(mend_engine_signal(E, "nosuchrun", "boss_killed", NULL, NULL), MEND_ENOTFOUND);
  CHECK_EQ_INT(mend_engine_signal(E, id, NULL, NULL, NULL), MEND_EINVAL);

  int existed = 0;
  CHECK_EQ_INT(mend_engine_start(E, "wait", NULL, "quest-17", id2, &existed), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal_by_key(E, "quest-17", "boss_killed", "{bad", NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_signal_by_key(E, "quest-17", "boss_killed", "{\"gold\":7}", NULL),
               MEND_OK);
  CHECK_EQ_INT(mend_engine_signal_by_key(E, "nokey", "boss_killed", NULL, NULL), MEND_ENOTFOUND);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id2, st, sizeof st), "succeeded");
  CHECK(run_has(E, id2, "\"result\":7", 0));
  /* the key of that wait run, given with another workflow: refused, nothing started */
  load(E, "plain");
  char id3[17] = "";
  existed = 0;
  CHECK_EQ_INT(mend_engine_start(E, "plain", NULL, "quest-17", id3, &existed), MEND_ESTATE);
  CHECK(strstr(mend_engine_errmsg(E), "a run of workflow wait, not plain") != NULL);
  CHECK(existed == 0);
  CHECK_EQ_INT(mend_engine_start(E, "wait", NULL, "quest-17", id3, &existed), MEND_OK);
  CHECK(existed == 1 && strcmp(id3, id2) == 0);
  mend_engine_free(E);
}

/* Completion tokens through the C API (issue 18): the step hands its token to the host (here
 * through a host function; in practice to any system), which completes or fails it later;
 * a token is single use, and each refusal has its code. */
static const char token_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'token', steps = {\n"
  "  { name = 'ask', wait = 'token', retry = { max_attempts = 1 },\n"
  "    execute = function(ctx) mend.call('hand_out', ctx:token()) end },\n"
  "  { name = 'done', execute = function(ctx) return ctx.results.ask end } } }\n";

static const char token2_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'token2', steps = {\n"
  "  { name = 'ask', wait = 'token', retry = { max_attempts = 2, initial = 1, jitter = 0 },\n"
  "    execute = function(ctx)\n"
  "      mend.call('hand_out', ctx:token())\n"
  "      if ctx.attempt == 1 then error(mend.retryable('mail server busy')) end\n"
  "    end } } }\n";

static char handed[80];
static void hand_out(void *ud, mend_call *call, const char *args) {
  (void)ud;
  /* args is ["mtk_..."] */
  snprintf(handed, sizeof handed, "%.*s", (int)(strlen(args) > 4 ? strlen(args) - 4 : 0), args + 2);
  mend_call_return(call, NULL);
}

static void it_completes_tokens_through_the_c_api(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = engine(&o);
  CHECK_EQ_INT(mend_engine_register_function(E, "hand_out", hand_out, NULL), MEND_OK);
  load(E, "token");
  char id[17], id2[17], st[32], first[80];
  start(E, "token", NULL, id);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK(strncmp(handed, "mtk_", 4) == 0 && strlen(handed) == 36);
  CHECK(run_has(E, id, "\"waiting\"", 0));
  snprintf(first, sizeof first, "%s", handed);
  CHECK_EQ_INT(mend_engine_complete(E, first, "{bad"), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_complete(E, first, "{\"by\":\"host\"}"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  CHECK(run_has(E, id, "\"by\":\"host\"", 0));
  CHECK_EQ_INT(mend_engine_complete(E, first, NULL), MEND_EUSED);
  CHECK(strstr(mend_engine_errmsg(E), "a token is single use") != NULL);
  CHECK_STR(mend_strerror(MEND_EUSED), "the token was used already");
  CHECK_EQ_INT(mend_engine_complete(E, "mtk_nosuch", NULL), MEND_ENOTFOUND);

  start(E, "token", NULL, id2);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK(strcmp(handed, first) != 0);
  CHECK_EQ_INT(mend_engine_fail(E, handed, "maybe", NULL), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_fail(E, handed, "fatal", "rejected by the host"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id2, st, sizeof st), "failed");
  CHECK(run_has(E, id2, "fatal: rejected by the host", 0));
  CHECK_EQ_INT(mend_engine_fail(E, handed, "fatal", NULL), MEND_EUSED);

  /* The first attempt hands its token out, then fails: its token is refused from then on. */
  char id3[17];
  load(E, "token2");
  start(E, "token2", NULL, id3);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 0.5), MEND_OK);
  snprintf(first, sizeof first, "%s", handed);
  CHECK(run_has(E, id3, "\"retry_wait\"", 0));
  CHECK_EQ_INT(mend_engine_complete(E, first, NULL), MEND_ESTALE);
  CHECK(strstr(mend_engine_errmsg(E), "attempt 1 of step ask is over (retry_wait)") != NULL);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 2), MEND_OK);
  CHECK(strcmp(handed, first) != 0);
  CHECK_EQ_INT(mend_engine_complete(E, first, NULL), MEND_ESTALE);
  CHECK(strstr(mend_engine_errmsg(E), "a token of an earlier attempt is refused") != NULL);
  CHECK_EQ_INT(mend_engine_complete(E, handed, "2"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id3, st, sizeof st), "succeeded");
  mend_engine_free(E);
}

int main(void) {
  embed_host_begin("embed-events");
  write_workflow("odd_fail", odd_fail_lua);
  write_workflow("token", token_lua);
  write_workflow("token2", token2_lua);
  it_hears_events_as_exact_json_text();
  it_sends_events_through_the_c_api();
  it_completes_tokens_through_the_c_api();
  return embed_host_end("test_embed_events");
}
