/*
 * hostcall: functions of the program that embeds mend, called from steps through mend.call.
 * Owns the registry of host functions and the life of a call: its arguments as JSON, an
 * answer given at once or later (from the host's own loop), and a call whose attempt or engine
 * went away meanwhile (its answer then only frees it), and the answers whose steps a pump turn
 * resumes. Must never: resume an attempt with an answer meant for an earlier one; resume a step
 * on the host's thread from inside mend_call_return (outside any tick's budget).
 */
#include "engine_int.h"

#include <float.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "lerror.h"
#include "util.h"


struct host_fn {
  char *name;
  mend_engine_host_fn fn;
  void *ud;
  struct host_fn *next;
};

struct mend_host_call {
  mend_engine *E;         /* NULL once the engine was destroyed: the answer only frees it */
  mend_run *run;          /* NULL once the attempt was abandoned */
  mend_host_call *prev, *next;   /* the engine's open calls */
  int dispatching;        /* the host is still inside its function */
  int answered;
  json_t *result;         /* answer given during dispatch */
  json_t *error;          /* {kind, message, retry_after, severity} */
};

int mend_engine_register_host(mend_engine *E, const char *name, mend_engine_host_fn fn, void *ud) {
  struct host_fn *h = calloc(1, sizeof *h);
  if (!h) return -1;
  h->name = mend_dupstr(name);
  h->fn = fn;
  h->ud = ud;
  h->next = E->hosts;
  E->hosts = h;
  return 0;
}

/* Pushes what mend.call's C half returns: true, value | false, error object. [-0, +2, m] */
static void push_answer(lua_State *L, json_t *result, json_t *error) {
  if (error) {
    const char *kind = json_string_value(json_object_get(error, "kind"));
    mend_error_kind k = MEND_ERR_ERROR;
    if (kind && strcmp(kind, "retryable") == 0) k = MEND_ERR_RETRYABLE;
    else if (kind && strcmp(kind, "fatal") == 0) k = MEND_ERR_FATAL;
    else if (kind && strcmp(kind, "compensable") == 0) k = MEND_ERR_COMPENSABLE;
    lua_pushboolean(L, 0);
    mend_lua_push_error(L, k, json_string_value(json_object_get(error, "message")),
                        json_number_value(json_object_get(error, "retry_after")),
                        (int)json_integer_value(json_object_get(error, "severity")));
  } else {
    lua_pushboolean(L, 1);
    mend_json_push(L, result);
  }
}

/* push_answer under lua_pcall: (result, error as light userdata) -> what push_answer pushes. */
static int push_answer_protected(lua_State *L) {
  json_t *result = lua_touserdata(L, 1), *error = lua_touserdata(L, 2);
  lua_settop(L, 0);
  push_answer(L, result, error);
  return 2;
}

static void answer(mend_host_call *call, json_t *result, json_t *error) {
  mend_engine *E = call->E;
  if (call->answered) { json_decref(result); json_decref(error); return; }
  call->answered = 1;
  if (call->dispatching) {   /* answered at once: mend.call returns without yielding */
    call->result = result;
    call->error = error;
    return;
  }
  if (!E) {                  /* the engine is gone: nothing waits for this answer */
    json_decref(result);
    json_decref(error);
    free(call);
    return;
  }
  if (call->prev) call->prev->next = call->next;
  else E->open_calls = call->next;
  if (call->next) call->next->prev = call->prev;
  /* The host answers from its own code, outside any tick: the step resumes in a pump turn (a
   * ticking host's, within its budget), in the order the answers came. */
  call->result = result;
  call->error = error;
  call->prev = call->next = NULL;
  if (E->answered_tail) E->answered_tail->next = call;
  else E->answered_head = call;
  E->answered_tail = call;
  mend__kick(E);
}

/* Whether resuming the oldest answer's step may read through the store (pump.c). */
int mend__answer_needs_store(const mend_engine *E) {
  const mend_run *r = E->answered_head->run;
  return r && mend__piece_needs_store(r);
}

/* The oldest answer resumes its step (or, its attempt abandoned meanwhile, is only freed). */
int mend__resume_answered(mend_engine *E) {
  mend_host_call *call = E->answered_head;
  E->answered_head = call->next;
  if (!E->answered_head) E->answered_tail = NULL;
  mend_run *r = call->run;
  E->externals--;
  if (r) {
    r->cold->host_call = NULL;
    push_answer(r->co, call->result, call->error);
  }
  json_decref(call->result);
  json_decref(call->error);
  free(call);
  if (r) mend__resume(r, 2);
  return r != NULL;
}

int mend_host_return(mend_host_call *call, const char *result_json, char *err, int errlen) {
  json_t *v = json_null();
  if (result_json) {
    v = mend_json_load_in(result_json, strlen(result_json), JSON_ALLOW_NUL, "the result", err,
                          errlen);
    if (!v) return -1;
  }
  answer(call, v, NULL);
  return 0;
}

mend_engine *mend_host_call_engine(const mend_host_call *call) { return call->E; }

int mend_host_fail(mend_host_call *call, const char *kind, const char *message,
                   double retry_after, int severity, char *err, int errlen) {
  /* A call whose engine is gone is only freed: its message goes nowhere. */
  if (call->E && mend__text_refused(call->E, message, "the failure's message", err, errlen))
    return -2;
  /* Not checked again (nocheck): it was above, or goes nowhere. An endless retry_after, which
   * JSON cannot hold, is the longest there is: the policy's max_retry_after clamps it, as it
   * does mend.retryable's. */
  if (retry_after > DBL_MAX) retry_after = DBL_MAX;
  json_t *e = json_object();
  if (!e || json_object_set_new(e, "kind", json_string(kind ? kind : "error")) ||
      json_object_set_new(e, "message", json_string_nocheck(message ? message : "")) ||
      json_object_set_new(e, "retry_after", json_real(retry_after >= 0 ? retry_after : -1)) ||
      (severity > 0 && json_object_set_new(e, "severity", json_integer(severity)))) {
    json_decref(e);
    return -1;
  }
  answer(call, NULL, e);
  return 0;
}

void mend__abandon_host_call(mend_run *r) {
  mend_host_call *call = MEND_COLD(r, host_call);
  if (!call) return;
  call->run = NULL;   /* its answer, when it comes, frees it and goes nowhere */
  r->cold->host_call = NULL;
}

int mend_engine_host_call(lua_State *L, const char *name, int first_arg, char *err, int errlen) {
  mend_run *r = mend__waiting_run(L, err, errlen);
  if (!r) return -1;
  mend_engine *E = r->E;
  struct host_fn *h = E->hosts;
  while (h && strcmp(h->name, name) != 0) h = h->next;
  if (!h) {
    snprintf(err, (size_t)errlen, "no host function named \"%s\"", name);
    return -1;
  }
  json_t *args = json_array();
  for (int i = first_arg; i <= lua_gettop(L); i++) {
    char jerr[300];
    json_t *v = mend_json_from_lua(L, i, "argument", jerr, sizeof jerr);
    if (!v) {
      json_decref(args);
      snprintf(err, (size_t)errlen, "%s", jerr);
      return -1;
    }
    json_array_append_new(args, v);
  }
  mend_host_call *call = calloc(1, sizeof *call);
  if (!call || !mend__run_cold(r)) {
    free(call);
    json_decref(args);
    snprintf(err, (size_t)errlen, "out of memory");
    return -1;
  }
  call->E = E;
  call->run = r;
  call->dispatching = 1;
  E->externals++;
  r->cold->host_call = call;
  h->fn(h->ud, call, args);
  json_decref(args);
  call->dispatching = 0;
  if (!call->answered) {     /* answered later: the engine keeps track until then */
    call->next = E->open_calls;
    if (E->open_calls) E->open_calls->prev = call;
    E->open_calls = call;
  }
  if (call->answered) {
    E->externals--;
    r->cold->host_call = NULL;
    json_t *result = call->result, *error = call->error;
    free(call);
    if (!(E->owned_state && E->cfg.memory_limit > 0)) {   /* nothing but the machine's end raises */
      push_answer(L, result, error);
      json_decref(result);
      json_decref(error);
      return 1;
    }
    /* Protected, so that the answer's document is freed also when making it a Lua value
     * raises (the memory limit): it leaked, with the call, at each answer too large. */
    lua_pushcfunction(L, push_answer_protected);
    lua_pushlightuserdata(L, result);
    lua_pushlightuserdata(L, error);
    int status = lua_pcall(L, 2, 2, 0);
    json_decref(result);
    json_decref(error);
    if (status != LUA_OK) return lua_error(L);
    return 1;
  }
  r->waiting = 1;
  return 0;
}

void mend__forget_host_calls(mend_engine *E) {
  /* Calls the host has not answered yet outlive the engine: their answers only free them. */
  for (mend_host_call *c = E->open_calls; c; c = c->next) {
    c->E = NULL;
    c->run = NULL;
  }
  /* answered: no one holds them */
  for (mend_host_call *c = E->answered_head, *next; c; c = next) {
    next = c->next;
    json_decref(c->result);
    json_decref(c->error);
    free(c);
  }
  E->answered_head = E->answered_tail = NULL;
  for (struct host_fn *h = E->hosts, *next; h; h = next) {
    next = h->next;
    free(h->name);
    free(h);
  }
}
