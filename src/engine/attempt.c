/*
 * attempt: an attempt of a step as a coroutine of the engine's Lua state. Owns its start, its
 * resumptions under its limits (budget, deadline, memory), what its end means as an outcome for
 * the saga, and the safe text of what workflow code raised; and every other call from C into
 * workflow code (guarded_pcall: a step's `when`, its idempotency key, a map's list). What the
 * step's code sees of its run (ctx, its methods, the waits it makes from Lua) is ctx.c's.
 * Must never: call workflow code unprotected or outside its limits; run a __close handler of
 * an attempt a limit stopped.
 */
#include "engine_int.h"

#include <lauxlib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "lerror.h"
#include "log.h"
#include "utf8.h"
#include "util.h"

/* When a limit stopped a guarded call that ended with `status`: which, into buf (the sandbox's
 * table bound is one). NULL when none did (the call raised). The memory limit and the table
 * bound are told by the status guarded_pcall gives, whatever lauxlib raised ("not enough
 * memory"). */
static const char *limit_met(mend_engine *E, mend_limits *lim, int status, char *buf, size_t len) {
  if (status == LUA_OK) return NULL;
  if (lim->tripped) return mend_limits_message(lim, buf, len);
  if (status == LUA_ERRMEM && lim->refused_table) {
    snprintf(buf, len, "made a table of more than %d keys outside 1..n, over the sandbox's bound "
             "(README: Limits and sandbox)", MEND_TABLE_NODES);
    return buf;
  }
  if (status != LUA_ERRMEM || !E->owned_state || E->cfg.memory_limit == 0) return NULL;
  snprintf(buf, len, "exceeded the memory limit (%zu bytes)", E->cfg.memory_limit);
  return buf;
}

/* A call of a run's code other than its attempt (`lim`'s what: when, idempotency_key, map, a
 * child step's input) raised, or a limit stopped it (`status`): its kind and fields are read as
 * an attempt's are, since a kind survives wherever it is raised (SPEC section 3), and its text,
 * after what raised it, goes to st->error, where info->message points. Pops the error value. */
void mend__call_failed(mend_run *r, step_rt *st, mend_limits *lim, int status,
                       mend_error_info *info) {
  mend_engine *E = r->E;
  lua_State *L = E->L;
  char msg[600], text[400];
  *info = (mend_error_info){MEND_ERR_ERROR, NULL, -1, 0, 0};
  const char *why = limit_met(E, lim, status, text, sizeof text);
  if (why) {
    info->stopped = 1;
  } else if (mend_lua_read_error(L, -1, info)) {
    why = info->message ? info->message : "";
  } else {
    why = mend__describe(E, r, L, -1, text, sizeof text, &info->stopped);
    info->stopped |= status == LUA_ERRMEM;   /* memory ran out outside every limit */
  }
  snprintf(msg, sizeof msg, "%s: %s", lim->what, why);
  lua_pop(L, 1);
  mend__set_str(&st->error, msg);
  info->message = st->error;
}

/* Calls step i's function `ref` (what: when, idempotency_key, map) with its ctx, held to the
 * limits it sets in *lim: LUA_OK with the one value it returned on the stack, or how it
 * failed, its error popped (mend__call_failed: *info says how, the step's error why). */
static int call_step_fn(mend_run *r, int i, int ref, const char *what, mend_limits *lim,
                        mend_error_info *info) {
  mend_engine *E = r->E;
  lua_rawgeti(E->L, LUA_REGISTRYINDEX, ref);
  mend__push_ctx(r, i);
  mend_limits_init(lim, what, E->cfg.instruction_budget, CALL_SECONDS);
  int status = mend__run_pcall(r, lim, 1, 1);
  if (status != LUA_OK) mend__call_failed(r, &r->steps[i], lim, status, info);
  return status;
}

/* A returned answer that cannot be used: a plain error of the step's. */
static void answer_refused(step_rt *st, const char *msg, mend_error_info *info) {
  mend__set_str(&st->error, msg);
  *info = (mend_error_info){MEND_ERR_ERROR, st->error, -1, 0, 0};
}

/* A step's own idempotency_key(ctx) is asked once; its answer is stored with the step. 0; -1
 * when it failed (*info says how, st->error why). */
int mend__ensure_key(mend_run *r, int i, mend_error_info *info) {
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (st->key_ready || def->key_ref == LUA_NOREF) return 0;
  lua_State *L = r->E->L;
  mend_limits lim;
  if (call_step_fn(r, i, def->key_ref, "idempotency_key", &lim, info) != LUA_OK) return -1;
  if (!lua_isstring(L, -1)) {
    lua_pop(L, 1);
    answer_refused(st, "idempotency_key: must return a string", info);
    return -1;
  }
  size_t len;
  const char *key = lua_tolstring(L, -1, &len);
  /* The key is kept and sent as a C string: "order-7\0x", from a run's input, was the key of
   * the run of "order-7", the service answering it with that run's charge. */
  if (strlen(key) != len) {
    lua_pop(L, 1);
    answer_refused(st, "idempotency_key: a key holding a NUL byte would be the key of its part "
                       "before it", info);
    return -1;
  }
  /* stored with the step: PostgreSQL refuses a batch holding other bytes, and stops the engine
   * (a key cut from an input with string.sub can end inside a character) */
  if (!mend_utf8_valid(key, len)) {
    lua_pop(L, 1);
    answer_refused(st, "idempotency_key: the key is not UTF-8 text", info);
    return -1;
  }
  mend__set_str(&st->idem_key, key);
  lua_pop(L, 1);
  st->custom_key = 1;
  st->key_ready = 1;
  return 0;
}

/* Asks step i's when(ctx): 1 run it, 0 skip it (false or nil); -1 when it failed (*info says
 * how, st->error why). */
int mend__ask_when(mend_run *r, int i, mend_error_info *info) {
  lua_State *L = r->E->L;
  mend_limits lim;
  if (call_step_fn(r, i, r->wf->steps[i].when_ref, "when", &lim, info) != LUA_OK) return -1;
  int yes = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return yes;
}

/* Encoding what a step returns (or a map's list) is work the step asked for, held to its limits:
 * each value (made by jansson, then printed) and each byte of its strings and keys is charged, and
 * the document, built outside the state's allocator, must fit in what the memory limit leaves. */
#define ENCODE_VALUE_BYTES 64u   /* a jansson value, its slot in its parent, malloc's overhead */

typedef struct result_meter {
  mend_engine *E;
  mend_limits *lim;
  long values;
  size_t bytes;
  int over_memory;
} result_meter;

static int meter_result(void *ud, long values, size_t bytes) {
  result_meter *m = ud;
  mend_engine *E = m->E;
  double work = (double)(values - m->values) * MEND_JSON_VALUE_COST +
                (double)(bytes - m->bytes) * MEND_JSON_BYTE_COST;
  m->values = values;
  m->bytes = bytes;
  if (mend_limits_spend(m->lim, work)) return 1;
  if (E->owned_state && E->cfg.memory_limit > 0 &&
      (double)E->mem_used + (double)values * ENCODE_VALUE_BYTES + (double)bytes >
          (double)E->mem_limit) {
    m->over_memory = 1;
    return 1;
  }
  return 0;
}

/* Asks map step i for its list: its JSON text (an array), or NULL when it failed (*info says
 * how, st->error why). */
char *mend__ask_map(mend_run *r, int i, mend_error_info *info) {
  step_rt *st = &r->steps[i];
  mend_engine *E = r->E;
  lua_State *L = E->L;
  mend_limits lim;
  if (call_step_fn(r, i, r->wf->steps[i].map_ref, "map", &lim, info) != LUA_OK) return NULL;
  char msg[600], text[400], why[200];
  int stopped = 0;
  char *json = NULL;
  if (!lua_istable(L, -1)) {
    snprintf(msg, sizeof msg, "map: must return a list, got %s", luaL_typename(L, -1));
  } else if (lua_rawlen(L, -1) == 0 && (lua_pushnil(L), !lua_next(L, -2))) {
    json = mend_dupstr("[]");   /* an empty table is an empty list here */
  } else if (lua_rawlen(L, -1) == 0) {
    lua_pop(L, 2);   /* the key and value lua_next pushed */
    snprintf(msg, sizeof msg, "map: must return a list (a table with keys 1..n), got an object");
  } else {
    result_meter meter = {E, &lim, 0, 0, 0};
    json = mend_json_encode_metered(L, -1, "map's list", text, sizeof text, meter_result, &meter);
    stopped = !json && (lim.tripped || meter.over_memory);
    if (stopped)
      snprintf(msg, sizeof msg, "map: %s as its list was encoded", meter.over_memory
               ? "exceeded the memory limit" : mend_limits_message(&lim, why, sizeof why));
    else if (!json) snprintf(msg, sizeof msg, "map: %s", text);
    else if (json[0] != '[') {
      free(json);
      json = NULL;
      snprintf(msg, sizeof msg, "map: must return a list (a table with keys 1..n), got an object");
    } else if (lua_rawlen(L, -1) >= MEND_MAP_ROWS) {
      free(json);
      json = NULL;
      snprintf(msg, sizeof msg, "map: %llu items, over the most a map may have (%d)",
               (unsigned long long)lua_rawlen(L, -1), MEND_MAP_ROWS - 1);
    }
  }
  lua_pop(L, 1);
  if (!json) {
    answer_refused(st, msg, info);
    info->stopped = stopped;
  }
  return json;
}

/* After a call that met the memory limit: what it left is garbage, but lauxlib's buffers
 * (string.rep, table.concat, string.format...) allocate without the emergency collection
 * that Lua's own allocations get, and would fail the limit on it in the next call. So too
 * after a call that left the state over half the limit and a quarter of it above what the
 * last such collection left: the collector's pace (a cycle when the heap doubles) let
 * garbage of earlier calls fail a benign step's 4 MiB string.rep. */
static void collect_if_over(mend_engine *E) {
  if (E->limit_memory) return;
  int grown = E->mem_limit > 0 && E->mem_used > E->mem_limit / 2 &&
              E->mem_used > E->mem_collected + E->mem_limit / 4;
  if (!E->over_limit && !grown) return;
  E->over_limit = 0;
  lua_gc(E->L, LUA_GCCOLLECT, 0);
  E->mem_collected = E->mem_used;
}

/* Calls into workflow code from C go through here: under `lim`, held to the memory limit,
 * protected. The hook watches E->L for the time of the call, so that the coroutines the code
 * makes on it are watched too. nargs arguments above the function; leaves nres results or the
 * error value. */
int mend__guarded_pcall(mend_engine *E, mend_limits *lim, int nargs, int nres) {
  mend_limits_watch(E->L);
  mend_limits_enter(E->L, lim);
  int limit_was = E->limit_memory;
  mend_limits *charged_was = E->alloc_limits;
  E->limit_memory = 1;
  E->alloc_limits = lim;
  int over_was = E->over_limit;
  E->over_limit = 0;
  int status = lua_pcall(E->L, nargs, nres, 0);
  /* A call that met the memory limit and failed failed for it, whatever lauxlib raised then
   * (its buffers raise "not enough memory" as a plain error). */
  if (status != LUA_OK && E->over_limit) status = LUA_ERRMEM;
  E->over_limit |= over_was;
  E->limit_memory = limit_was;
  E->alloc_limits = charged_was;
  mend_limits_leave(E->L, lim);
  mend_limits_unwatch(E->L);
  collect_if_over(E);
  mend__drop_spare_blocks(E);
  return status;
}

/* Run r's code runs from here to leave_code (engine.h: mend_engine_in_code); `what` is how a
 * refusal of driving the engine from it names that code. Calls nest. */
typedef struct code_mark {
  mend_run *run;
  const char *what;
} code_mark;

static code_mark enter_code(mend_engine *E, mend_run *r, const char *what) {
  code_mark was = {E->in_code, E->in_code_what};
  E->in_code = r;
  E->in_code_what = what;
  return was;
}

static void leave_code(mend_engine *E, code_mark was) {
  E->in_code = was.run;
  E->in_code_what = was.what;
}

/* The code a call under limits named `what` (mend_limits_init) runs, as a refusal names it. */
static const char *code_named(const char *what) {
  static const struct { const char *what, *named; } names[] = {
    {"when", "a when function"}, {"idempotency_key", "an idempotency_key function"},
    {"map", "a map's list function"}, {"input", "a child step's input function"},
    {"the error's __tostring", "an error's __tostring"}};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (strcmp(what, names[k].what) == 0) return names[k].named;
  return "a run's code";
}

/* A call of a run's own code that is not its attempt (when, idempotency_key, a map's list, a
 * child's input): guarded as any call into workflow code, and counted as the run's code, as its
 * steps are (engine.h: mend_engine_in_code), so that it cannot drive, close or cancel the
 * engine from under the run it is deciding for. */
int mend__run_pcall(mend_run *r, mend_limits *lim, int nargs, int nres) {
  mend_engine *E = r->E;
  code_mark was = enter_code(E, r, code_named(lim->what));
  int status = mend__guarded_pcall(E, lim, nargs, nres);
  leave_code(E, was);
  return status;
}

static int push_tostring(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/* The text of an error value that workflow code raised or returned, into buf. Strings and
 * numbers are what they say; for anything else, a __tostring of its own gets a small budget
 * and no second chance: the engine never trusts what a workflow's metamethods do. r: the run
 * whose code raised it (its __tostring is that run's code), or NULL (a file as it loads). */
const char *mend__describe(mend_engine *E, mend_run *r, lua_State *from, int idx, char *buf,
                           size_t len, int *failed) {
  if (failed) *failed = 0;
  idx = lua_absindex(from, idx);
  int t = lua_type(from, idx);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    snprintf(buf, len, "%s", lua_tostring(from, idx));
    return buf;
  }
  snprintf(buf, len, "(error object is a %s value)", lua_typename(from, t));
  if (!luaL_getmetafield(from, idx, "__tostring")) return buf;
  lua_pop(from, 1);
  lua_pushcfunction(E->L, push_tostring);
  lua_pushvalue(from, idx);
  lua_xmove(from, E->L, 1);
  mend_limits lim;
  mend_limits_init(&lim, "the error's __tostring", DESCRIBE_BUDGET, DESCRIBE_SECONDS);
  int status = r ? mend__run_pcall(r, &lim, 1, 1) : mend__guarded_pcall(E, &lim, 1, 1);
  if (status == LUA_OK && lua_type(E->L, -1) == LUA_TSTRING) {
    snprintf(buf, len, "%s", lua_tostring(E->L, -1));
  } else {
    if (failed) *failed = 1;
    char why[200];
    if (limit_met(E, &lim, status, why, sizeof why))
      snprintf(buf, len, "(error object whose __tostring failed: %s)", why);
    else if (lua_type(E->L, -1) == LUA_TSTRING)
      snprintf(buf, len, "(error object whose __tostring failed: %s)", lua_tostring(E->L, -1));
    else
      snprintf(buf, len, "(error object whose __tostring failed)");
  }
  lua_pop(E->L, 1);
  return buf;
}

/* The attempt's coroutine leaves the list of them, which was all that kept it. */
static void unlist_thread(lua_State *L, mend_run *r) { mend_threads_remove(L, r->co, r); }

/* An attempt's state kept for the next is poisoned under AddressSanitizer while it is kept:
 * memory taken again is not poisoned by ASan itself, and a use of the state after its attempt
 * would pass unseen, as it would in a build without it. */
#if defined(__SANITIZE_ADDRESS__)
#define KEPT_POISONED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEPT_POISONED 1
#endif
#endif
#ifdef KEPT_POISONED
#include <sanitizer/asan_interface.h>
#define KEEP_POISONED(a) ASAN_POISON_MEMORY_REGION((a), sizeof *(a))
#define TAKE_POISONED(a) ASAN_UNPOISON_MEMORY_REGION((a), sizeof *(a))
#else
#define KEEP_POISONED(a) ((void)(a))
#define TAKE_POISONED(a) ((void)(a))
#endif

void mend__free_spare_attempts(mend_engine *E) {
  while (E->nspare_attempts) {
    mend_attempt *a = E->spare_attempts[--E->nspare_attempts];
    TAKE_POISONED(a);
    free(a);
  }
}

/* `returned`: its code ran to its end (lua_resume gave LUA_OK), which closed every
 * to-be-closed variable it had: closing the coroutine would run nothing, and is left to the
 * collector (1.5k instructions an attempt in W1: the limits entered and left around it). */
static void end_attempt(mend_run *r, int returned) {
  mend_engine *E = r->E;
  /* Whatever the attempt still waits for is let go: its answer must not reach a later one. */
  mend__abandon_exec(r);
  mend__abandon_http(r);
  mend__abandon_host_call(r);
  mend__run_cold_trim(r);
  if (r->at) mend_timer_disarm(&E->timers, &r->at->deadline);
  if (r->wait_kind == WAIT_SLEEP) mend_timer_disarm(&E->timers, &r->wait);
  r->wait_kind = WAIT_NONE;
  r->waiting = 0;
  if (!r->co) {
    /* A panic between its state being taken and its coroutine made (mend__start_attempt): the
     * state alone is there. */
    free(r->at);
    r->at = NULL;
    return;
  }
  E->attempts--;
  /* A slot came free: the next attempt waiting for this breaker, else for the engine. */
  mend_run *next = NULL;
  if (r->held) {
    r->held->in_flight--;
    next = mend__fifo_pop(&r->held->waiting);
    r->held = NULL;
  }
  if (!next) next = mend__fifo_pop(&E->throttled);
  if (next) mend__admit_next(next);
  /* Closing runs the __close handlers of the attempt's pending to-be-closed variables: under
   * its limits, and not at all once a limit stopped it (Lua would run them unhooked). */
  if (!returned && !r->at->limits.tripped && !mend_limits_stopped(E->L, r->co)) {
    int limit_was = E->limit_memory;
    mend_limits *charged_was = E->alloc_limits;
    E->limit_memory = 1;
    E->alloc_limits = &r->at->limits;
    mend_limits_enter(E->L, &r->at->limits);
    int depth = mend_limits_run_on(r->co);
    /* the handlers are the run's own code (engine.h) */
    code_mark was = enter_code(E, r, "a <close> handler of a step's code");
    mend_closethread(r->co, E->L);
    leave_code(E, was);
    mend_limits_run_off(depth);
    mend_limits_leave(E->L, &r->at->limits);
    E->limit_memory = limit_was;
    E->alloc_limits = charged_was;
  }
  lua_sethook(r->co, NULL, 0, 0);
  unlist_thread(E->L, r);
  r->co = NULL;
  if (E->nspare_attempts == (int)(sizeof E->spare_attempts / sizeof E->spare_attempts[0])) {
    free(r->at);
  } else {
    KEEP_POISONED(r->at);
    E->spare_attempts[E->nspare_attempts++] = r->at;
  }
  r->at = NULL;
  collect_if_over(E);
  mend__drop_spare_blocks(E);
}

void mend__end_attempt(mend_run *r) { end_attempt(r, 0); }

/* Resumes the attempt's coroutine with nargs values on its stack and deals with the outcome. */
void mend__resume(mend_run *r, int nargs) {
  mend_engine *E = r->E;
  lua_State *co = r->co;
  int nres = 0;
  r->waiting = 0;
  mend_limits *charged_was = E->alloc_limits;
  E->limit_memory = 1;
  E->alloc_limits = &r->at->limits;
  mend_limits_enter(E->L, &r->at->limits);
  int depth = mend_limits_run_on(co);
  code_mark was = enter_code(E, r, r->status == MEND_RUN_COMPENSATING ? "a step's compensate"
                                                                      : "a step's code");
  int status = lua_resume(co, E->L, nargs, &nres);
  leave_code(E, was);
  mend_limits_run_off(depth);
  mend_limits_leave(E->L, &r->at->limits);
  E->limit_memory = 0;
  E->alloc_limits = charged_was;
  /* A cancel cascaded to the run while this code ran (the code, or a lane's of the run, cancelled
   * its parent) lands now, whatever the code gave. */
  mend_run *root = mend__root(r);
  if (MEND_COLD(root, cancel_by) && !E->in_code) {
    if (root->status == MEND_RUN_RUNNING) {
      if (status == LUA_OK || status == LUA_YIELD) lua_pop(co, nres);
      mend__land_deferred_cancel(root);
      return;
    }
    mend__land_deferred_cancel(root);   /* compensating: dropped, and this attempt ends as it did */
  }
  if (status == LUA_YIELD && r->waiting) {
    lua_pop(co, nres);
    return;
  }
  /* An attempt that met the memory limit and failed failed for it, whatever the code raised
   * then: a protected call inside the step (the JSON encoder completing a response, a pcall of
   * the step's own) turns the refusal into a plain error ("not enough memory"). */
  if (status != LUA_OK && status != LUA_YIELD && r->at->limits.refused_memory) status = LUA_ERRMEM;
  mend_error_info info = {MEND_ERR_ERROR, NULL, -1, 0, 0};
  char *result = NULL;
  char msg[600];
  int ok = 0;
  result_meter meter = {E, &r->at->limits, 0, 0, 0};
  int tripped_before = r->at->limits.tripped;
  if (status == LUA_YIELD) {
    info.message = "step yielded outside mend.sleep, mend.exec, mend.http or mend.call "
                   "(coroutine.yield in a step?)";
  } else if (status == LUA_OK) {
    if (nres > 0 && mend_lua_read_error(co, -nres, &info)) {
      /* returning a mend error counts as raising it */
    } else {
      char err[400];
      if (nres == 0) lua_pushnil(co), nres = 1;
      result = mend_json_encode_metered(co, -nres, "result", err, sizeof err, meter_result, &meter);
      if (result) ok = 1;
      else {
        snprintf(msg, sizeof msg, "result is not JSON-compatible: %s", err);
        info.message = msg;
      }
    }
  } else {
    int is_mend = mend_lua_read_error(co, -1, &info);
    if (!is_mend) {
      /* An unknown error: keep the message, put the traceback in the log. */
      info.message = mend__describe(E, r, co, -1, msg, sizeof msg, &info.stopped);
      luaL_traceback(E->L, co, msg, 0);
      mend_engine_log_line(E, "error", r->id, mend__step_name(r, r->cur), r->steps[r->cur].attempts,
                           "error", lua_tostring(E->L, -1));
      lua_pop(E->L, 1);
    } else {
      snprintf(msg, sizeof msg, "%s", info.message ? info.message : "");
      info.message = msg;
    }
  }
  if (status == LUA_ERRMEM && r->at->limits.refused_table) {
    snprintf(msg, sizeof msg, "step made a table of more than %d keys outside 1..n, over the "
             "sandbox's bound (README: Limits and sandbox)", MEND_TABLE_NODES);
    info.message = msg;
    info.kind = MEND_ERR_ERROR;
    info.stopped = 1;
  } else if (status == LUA_ERRMEM && E->owned_state && E->cfg.memory_limit > 0) {
    snprintf(msg, sizeof msg, "step exceeded the memory limit (%zu bytes)", E->cfg.memory_limit);
    info.message = msg;
    info.kind = MEND_ERR_ERROR;
    info.stopped = 1;
  }
  if (meter.over_memory) {
    snprintf(msg, sizeof msg, "step exceeded the memory limit (%zu bytes) as its result was "
             "encoded", E->cfg.memory_limit);
    info.message = msg;
    info.retry_after = -1;
    info.kind = MEND_ERR_ERROR;
    info.stopped = 1;
  } else if (r->at->limits.tripped) {
    /* Whatever the code did with the limit's error (caught it, raised another), this is why
     * the attempt ended. */
    ok = 0;
    free(result);
    result = NULL;
    mend_limits_message(&r->at->limits, msg, sizeof msg);
    if (!tripped_before && status == LUA_OK)
      snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " as its result was encoded");
    info.message = msg;
    info.retry_after = -1;
    info.kind = r->at->limits.tripped == MEND_LIMIT_TIMEOUT ? MEND_ERR_TIMEOUT : MEND_ERR_ERROR;
    info.stopped = r->at->limits.tripped == MEND_LIMIT_BUDGET;
  }
  end_attempt(r, status == LUA_OK);
  mend__attempt_done(r, ok, &info, result);
  free(result);
}

void mend__on_deadline(mend_timer *t) {
  mend_run *r = ((mend_attempt *)(void *)((char *)t - offsetof(mend_attempt, deadline)))->run;
  if (!r->co) return;
  mend__end_attempt(r);   /* lets go of the child process or host call it waits for */
  mend_error_info info = {MEND_ERR_TIMEOUT, "step exceeded its timeout", -1, 0, 0};
  mend__attempt_done(r, 0, &info, NULL);
}

void mend__start_attempt(mend_run *r, int compensating) {
  mend_engine *E = r->E;
  lua_State *L = E->L;
  int i = r->cur;
  const mend_step_def *def = &r->wf->steps[i];
  /* An ended attempt's state is taken again rather than a new one made (an allocation and
   * its free an attempt: +0.25% of W1's instructions). */
  mend_attempt *a =
      E->nspare_attempts ? E->spare_attempts[--E->nspare_attempts] : malloc(sizeof *a);
  if (!a) {
    mend__breakdown(E, "out of memory for an attempt of run %s", r->id);
    return;
  }
  TAKE_POISONED(a);
  a->run = r;
  mend_timer_init(&a->deadline, mend__on_deadline);
  mend_limits_init(&a->limits, "step", E->cfg.instruction_budget, def->timeout);
  a->limits.timeout_typed = 1;
  r->at = a;
  mend__failpoint_lua(L, "attempt_state");   /* as lua_newthread running out of memory would */
  lua_State *co = lua_newthread(L);
  r->co = co;
  E->attempts++;
  mend__root(r)->wf->counts.attempts[compensating ? MEND_PHASE_COMPENSATE : MEND_PHASE_EXECUTE]++;
  mend__failpoint_lua(L, compensating ? "compensate" : "execute");
  mend_threads_add(L, co, r);
  lua_pop(L, 1);   /* the list of coroutines keeps this one */
  lua_rawgeti(co, LUA_REGISTRYINDEX, compensating ? def->compensate_ref : def->execute_ref);
  mend__push_ctx_for(r, i, compensating);
  lua_xmove(L, co, 1);
  if (compensating) {
    char err[200];
    const char *res = r->steps[i].result;
    if (!res || mend_json_decode(co, res, strlen(res), err, sizeof err)) lua_pushnil(co);
  } else if (MEND_COLD(r, item)) {
    mend__push_item(r, co);   /* execute(ctx, item) */
  } else {
    mend_refs_push(&E->refs, co, r->input_ref);
  }
  if (def->timeout > 0) mend__arm(r, &a->deadline, mend_engine_now(E) + def->timeout);
  if (def->timeout > 0 || E->cfg.instruction_budget > 0) mend_limits_watch(co);
  /* A suspect of a crash loop (recover.c): that its code runs is durable before it does, and
   * what it did right after, so that a crash now is told apart from one of another run's. */
  int suspect = r->suspect;
  r->suspect = 0;
  if (suspect) {
    mend__history(r, def->name, "suspect_ran", NULL, NULL,
                  compensating ? r->steps[i].comp_attempts : r->steps[i].attempts, NULL, -1,
                  "taken again after its worker stopped during an attempt");
    mend__commit_now(E);   /* a failure breaks the engine, or it waits for the lock */
  }
  mend__resume(r, 2);
  if (suspect) {
    /* Its code waits now (a host's answer, a timer): a crash from here on is not its code's. */
    if (r->co && r->waiting)
      mend__history(r, def->name, "suspect_waits", NULL, NULL,
                    compensating ? r->steps[i].comp_attempts : r->steps[i].attempts, NULL, -1,
                    NULL);
    mend__commit_now(E);
  }
}
