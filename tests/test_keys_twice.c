/*
 * test_keys_twice: JSON text a host hands mend through include/mend.h with a key given twice in
 * one object (a run's input, an event's payload, a token's result, a host call's answer) is
 * refused with MEND_EINVAL and a message naming the key, as the HTTP API refuses such a body:
 * jansson kept the last of the two silently, and which one the host meant is not known. The
 * refused call changes nothing (no run started, no event sent, the token and the call still
 * open), and the right text given next is taken. So is text nested deeper than mend encodes
 * from Lua (MEND_JSON_MAX_DEPTH levels), as the HTTP API refuses such a field: a step given it
 * could neither return it nor encode it, and `mend status` could not print it. It never tests
 * JSON that is not JSON (test_embed_refusals, test_host_answers).
 */
#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tick_host.h"

static char dir[64];
static char path[128];

static const char *const workflow =
    "local mend = require 'mend'\n"
    "return { name = 'twice', steps = {\n"
    "  { name = 'call', execute = function(ctx, input) return mend.call('answer', input) end },\n"
    "  { name = 'event', wait_for = 'go', timeout = 3600 },\n"
    "  { name = 'ask', wait = 'token', retry = { max_attempts = 1 },\n"
    "    execute = function(ctx) mend.call('hand_out', ctx:token()) end } } }\n";

static int names_key(mend_engine *E, const char *key) {
  const char *msg = mend_engine_errmsg(E);
  if (msg && strstr(msg, key) && strstr(msg, "duplicate")) return 1;
  fprintf(stderr, "expected the message to name %s as given twice: %s\n", key,
          msg ? msg : "(none)");
  return 0;
}

/* levels arrays, one in another, in malloc'ed text: [[...]] */
static char *nested(int levels) {
  char *t = malloc((size_t)levels * 2 + 1);
  for (int i = 0; i < levels; i++) t[i] = '[', t[levels * 2 - 1 - i] = ']';
  t[levels * 2] = 0;
  return t;
}

static int names_bound(mend_engine *E) {
  const char *msg = mend_engine_errmsg(E);
  if (msg && strstr(msg, "deeper than 100")) return 1;
  fprintf(stderr, "expected the message to name the bound: %s\n", msg ? msg : "(none)");
  return 0;
}

static int deep;   /* the answers and results given are nested past the bound first */
static int answer_refusals;
static void answer(void *ud, mend_call *call, const char *args) {
  mend_engine *E = ud;
  (void)args;
  if (deep) {
    char *t = nested(101);
    CHECK_EQ_INT(mend_call_return(call, t), MEND_EINVAL);
    answer_refusals += names_bound(E);
    free(t);
  }
  CHECK_EQ_INT(mend_call_return(call, "{\"paid\":false,\"paid\":true}"), MEND_EINVAL);
  answer_refusals += names_key(E, "\"paid\"");
  CHECK_EQ_INT(mend_call_return(call, "{\"paid\":true}"), MEND_OK);
}

static char handed[80];
static void hand_out(void *ud, mend_call *call, const char *args) {
  (void)ud;
  /* args is ["mtk_..."] */
  snprintf(handed, sizeof handed, "%.*s", (int)(strlen(args) > 4 ? strlen(args) - 4 : 0), args + 2);
  mend_call_return(call, NULL);
}

static int has(mend_engine *E, const char *id, const char *text) {
  char *json = NULL;
  mend_engine_run_json(E, id, &json);
  int found = json && strstr(json, text);
  if (!found) fprintf(stderr, "expected <%s> in %s\n", text, json ? json : "(none)");
  mend_free(json);
  return found;
}

/* A ticking host's engine on the virtual clock with the workflow and its two host functions. */
static mend_engine *twice_engine(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = tick_host_engine(&o);
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  CHECK_EQ_INT(mend_engine_register_function(E, "answer", answer, E), MEND_OK);
  CHECK_EQ_INT(mend_engine_register_function(E, "hand_out", hand_out, NULL), MEND_OK);
  return E;
}

static void it_refuses_a_key_given_twice_wherever_json_text_comes_in(void) {
  mend_engine *E = twice_engine();
  char id[17];

  CHECK_EQ_INT(mend_engine_start(E, "twice", "{\"order\":{\"sku\":1,\"sku\":2}}", "k1", id, NULL),
               MEND_EINVAL);
  CHECK(names_key(E, "\"sku\""));
  CHECK_EQ_INT(mend_engine_start(E, "twice", "{\"order\":{\"sku\":2}}", "k1", id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK_EQ_INT(answer_refusals, 1);
  CHECK(has(E, id, "\"waiting\""));

  CHECK_EQ_INT(mend_engine_signal(E, id, "go", "{\"by\":\"ann\",\"by\":\"bob\"}", NULL),
               MEND_EINVAL);
  CHECK(names_key(E, "\"by\""));
  CHECK_EQ_INT(mend_engine_signal_by_key(E, "k1", "go", "[{\"x\":1,\"x\":1}]", NULL), MEND_EINVAL);
  CHECK(names_key(E, "\"x\""));
  CHECK_EQ_INT(mend_engine_signal(E, id, "go", "{\"by\":\"bob\"}", NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK(strncmp(handed, "mtk_", 4) == 0);

  CHECK_EQ_INT(mend_engine_complete(E, handed, "{\"ok\":1,\"ok\":0}"), MEND_EINVAL);
  CHECK(names_key(E, "\"ok\""));
  CHECK_EQ_INT(mend_engine_complete(E, handed, "{\"ok\":1}"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK(has(E, id, "\"status\":\"succeeded\""));
  CHECK(has(E, id, "\"paid\":true"));
  CHECK(has(E, id, "\"by\":\"bob\""));
  CHECK(has(E, id, "\"ok\":1"));
  mend_engine_free(E);
}

static void it_refuses_nesting_deeper_than_mend_encodes_wherever_json_text_comes_in(void) {
  mend_engine *E = twice_engine();
  deep = 1;
  answer_refusals = 0;
  handed[0] = 0;
  char id[17];
  char *over = nested(101), *at = nested(100);

  CHECK_EQ_INT(mend_engine_start(E, "twice", over, "d1", id, NULL), MEND_EINVAL);
  CHECK(names_bound(E));
  CHECK_EQ_INT(mend_engine_start(E, "twice", at, "d1", id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK_EQ_INT(answer_refusals, 2);
  CHECK(has(E, id, "\"waiting\""));

  CHECK_EQ_INT(mend_engine_signal(E, id, "go", over, NULL), MEND_EINVAL);
  CHECK(names_bound(E));
  CHECK_EQ_INT(mend_engine_signal_by_key(E, "d1", "go", over, NULL), MEND_EINVAL);
  CHECK(names_bound(E));
  CHECK_EQ_INT(mend_engine_signal(E, id, "go", at, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK(strncmp(handed, "mtk_", 4) == 0);

  CHECK_EQ_INT(mend_engine_complete(E, handed, over), MEND_EINVAL);
  CHECK(names_bound(E));
  CHECK_EQ_INT(mend_engine_complete(E, handed, at), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK(has(E, id, "\"status\":\"succeeded\""));
  free(over);
  free(at);
  mend_engine_free(E);
}

int main(void) {
  check_make_dir(dir, sizeof dir, "keys-twice");
  snprintf(path, sizeof path, "%s/twice.lua", dir);
  check_write_file(path, workflow);
  it_refuses_a_key_given_twice_wherever_json_text_comes_in();
  it_refuses_nesting_deeper_than_mend_encodes_wherever_json_text_comes_in();
  check_remove_dir(dir);
  return check_done("test_keys_twice");
}
