/*
 * ctx: what a step's code sees of its run. Owns the ctx table an attempt is given (its fields,
 * the idempotency key, the metatable every run's ctx shares) and its methods (ctx:log, ctx:now,
 * ctx:sleep; ctx:token is tokens.c's), and the waits a step makes from Lua (mend.sleep,
 * ctx:sleep): which run may wait here, and its timer armed. Must never: resume a coroutine or
 * end an attempt (attempt.c); let a step write in another run's history (the run is the one
 * whose coroutine calls, never ctx.run_id).
 */
#include "engine_int.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "utf8.h"

/* A step's default idempotency key, run_id/step. */
static void push_default_key(lua_State *L, const char *run_id, const char *step) {
  char buf[256];
  size_t a = strlen(run_id), b = strlen(step);
  if (a + 1 + b > sizeof buf) {
    lua_pushfstring(L, "%s/%s", run_id, step);
    return;
  }
  memcpy(buf, run_id, a);
  buf[a] = '/';
  memcpy(buf + a + 1, step, b);
  lua_pushlstring(L, buf, a + 1 + b);
}

/* Pushes a new ctx table for step i. [-0, +1, m]
 * One ctx an attempt: a third of the loop thread's work in W1 (7.4k instructions), most of it
 * the table's slots and the garbage they make. Seven fields fill a table of eight slots, where
 * eight took sixteen: `compensating` is set only when true, and reads false through the
 * metatable otherwise (make_ctx_metatable); names come from references made at registration,
 * the key from one copy instead of lua_pushfstring's pieces. */
void mend__push_ctx_for(mend_run *r, int i, int compensating) {
  lua_State *L = r->E->L;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  lua_createtable(L, 0, 8);
  lua_pushstring(L, r->id); lua_setfield(L, -2, "run_id");
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->wf->name_ref); lua_setfield(L, -2, "workflow");
  const char *item_name = MEND_COLD(r, item_name);
  if (item_name) lua_pushstring(L, item_name);
  else lua_rawgeti(L, LUA_REGISTRYINDEX, def->name_ref);
  lua_setfield(L, -2, "step");
  lua_pushinteger(L, compensating ? st->comp_attempts : st->attempts);
  lua_setfield(L, -2, "attempt");
  if (st->custom_key) lua_pushstring(L, st->idem_key);
  else push_default_key(L, r->id, item_name ? item_name : def->name);
  lua_setfield(L, -2, "idempotency_key");
  mend_refs_push(&r->E->refs, L, r->input_ref); lua_setfield(L, -2, "input");
  mend_refs_push(&r->E->refs, L, r->results_ref); lua_setfield(L, -2, "results");
  if (compensating) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "compensating");
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->E->ctx_mt_ref);
  lua_setmetatable(L, -2);
}

void mend__push_ctx(mend_run *r, int i) { mend__push_ctx_for(r, i, 0); }

mend_run *mend_engine_current_run(lua_State *L) {
  mend_run *r = mend_threads_find(L, L);
  return r && r->co == L ? r : NULL;
}

/* An attempt's coroutine, not L, suspended in a resume of another (status "normal"). */
static int resuming_another(lua_State *co, void *L) {
  lua_Debug ar;
  return co != L && lua_status(co) == LUA_OK && lua_getstack(co, 0, &ar);
}

/* Whether some attempt's coroutine is suspended in a resume of another: L, which is none of
 * theirs, then runs in a coroutine a step made. */
static int in_a_steps_coroutine(lua_State *L) { return mend_threads_any(L, resuming_another, L); }

/* The run whose attempt may wait here: L is its coroutine and can yield now. */
mend_run *mend__waiting_run(lua_State *L, char *err, int errlen) {
  mend_run *r = mend_engine_current_run(L);
  if (!r) {
    snprintf(err, (size_t)errlen, "%s", in_a_steps_coroutine(L)
             ? "cannot wait inside a coroutine the step made: call it in the step's own code"
             : "must be called from a step's execute or compensate");
    return NULL;
  }
  if (!lua_isyieldable(L)) {
    snprintf(err, (size_t)errlen, "cannot wait here (inside a metamethod, an iterator of "
             "string.gsub, a table.sort comparator, or another C function)");
    return NULL;
  }
  return r;
}

int mend_engine_sleep(lua_State *L, double seconds, char *err, int errlen) {
  mend_run *r = mend__waiting_run(L, err, errlen);
  if (!r) return -1;
  if (!(seconds >= 0)) seconds = 0;
  /* An endless wait is a bug, and the timers' clock cannot hold one. */
  if (seconds > MEND_MAX_SLEEP) {
    snprintf(err, (size_t)errlen, "a sleep of %g seconds is longer than the longest (%g, about "
             "31 years)", seconds, MEND_MAX_SLEEP);
    return -1;
  }
  r->waiting = 1;
  r->wait_kind = WAIT_SLEEP;
  mend__arm(r, &r->wait, mend_engine_now(r->E) + seconds);
  return 0;
}

static int ctx_log(lua_State *L) {
  mend_engine *E = lua_touserdata(L, lua_upvalueindex(1));
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = lua_gettop(L);
  luaL_Buffer b;
  /* ctx:log("charged %s", id) formats; ctx:log(a, b) joins like print. */
  if (n >= 2 && lua_type(L, 2) == LUA_TSTRING && strchr(lua_tostring(L, 2), '%')) {
    lua_getglobal(L, "string");
    lua_getfield(L, -1, "format");
    for (int k = 2; k <= n; k++) lua_pushvalue(L, k);
    lua_call(L, n - 1, 1);
  } else {
    luaL_buffinit(L, &b);
    for (int k = 2; k <= n; k++) {
      if (k > 2) luaL_addchar(&b, ' ');
      luaL_tolstring(L, k, NULL);
      luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
  }
  size_t msg_len = 0;
  const char *msg = lua_tolstring(L, -1, &msg_len);
  /* Writing a row to the store and a line to the log is C work no hook sees: 1 MiB lines took
   * 10 ms each, and a loop of them filled the disk at the budget's pace of some 1 instruction
   * a MiB. A byte is charged as an instruction. */
  mend_limits_charge(L, 256.0 + (double)msg_len);
  lua_getfield(L, 1, "step");
  lua_getfield(L, 1, "attempt");
  const char *step = lua_tostring(L, -2);
  int attempt = (int)lua_tointeger(L, -1);
  /* A line that is not UTF-8 is made so here, as a step's error is, before the log and the
   * history see it: the store reads such a row back with every byte past ASCII as '?', the
   * valid characters too, and PostgreSQL refuses it. */
  char *fixed = NULL;
  if (!mend_utf8_valid(msg, strlen(msg)) && (fixed = strdup(msg)) != NULL) {
    mend_utf8_fix(fixed);
    msg = fixed;
    msg_len = strlen(fixed);
  }
  /* The run written is the one whose step calls, never ctx.run_id: a step may set that, or
   * pass a table of its own as ctx, and would write in another run's history. */
  mend_run *r = mend_engine_current_run(L);
  if (r) r = mend__root(r);   /* a branch's lane writes in its run's history */
  mend_engine_log_line(E, "info", r ? r->id : NULL, step, attempt, "log", msg);
  if (r) {
    /* The log may be how a token is handed out; the history is in the store, which must
     * not be enough to complete a step. */
    char *masked = mend__mask_tokens(msg, msg_len);
    mend_history_rec h = {r->id, step, mend_engine_now(E), "log", NULL, NULL, attempt, NULL, -1,
                          masked ? masked : msg, ++r->history_seq, NULL};
    if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
    free(masked);
  }
  free(fixed);
  return 0;
}

static int ctx_now(lua_State *L) {
  mend_engine *E = lua_touserdata(L, lua_upvalueindex(1));
  lua_pushnumber(L, mend_engine_now(E));
  return 1;
}

static int ctx_sleep(lua_State *L) {
  char err[200];
  double s = luaL_checknumber(L, 2);
  if (mend_engine_sleep(L, s, err, sizeof err)) return luaL_error(L, "ctx:sleep: %s", err);
  return lua_yield(L, 0);
}

void mend__make_ctx_metatable(mend_engine *E) {
  lua_State *L = E->L;
  static const luaL_Reg methods[] = {{"log", ctx_log}, {"now", ctx_now}, {"sleep", ctx_sleep},
                                     {"token", mend__ctx_token}, {NULL, NULL}};
  lua_createtable(L, 0, 2);
  lua_createtable(L, 0, 4);
  lua_pushlightuserdata(L, E);
  luaL_setfuncs(L, methods, 1);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "compensating");   /* what ctx.compensating reads outside compensate */
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "ctx");
  /* every run's ctx shares it: not workflow code's to change */
  lua_setfield(L, -2, "__metatable");
  E->ctx_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}
