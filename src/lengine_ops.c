/*
 * lengine_ops: the methods of an engine (mend.engine) for people and the programs they run:
 * waiting for a run's end, the queries (status, history, runs, dlq, breakers, audit, the
 * workflows' versions), prune, and the repairs and messages to runs (cancel, signal, complete
 * and fail a token, upgrade, dlq retry and resolve, breakers), each turning Lua arguments into
 * an engine.h or store.h call and its answer into Lua values. lengine.c registers them with
 * the engine's other methods, behind the same guard.
 *
 * Must never: reach the engine's insides (engine.h only); raise without naming the method.
 */
#include "lmend_int.h"

#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "json.h"
#include "mend.h"
#include "timers.h"

/* Where a wait ends: an end state, or the dead-letter queue (a person must act); a dead letter
 * a person resolved has ended too. */
static int is_final_status(const char *st) {
  return st && (strcmp(st, "succeeded") == 0 || strcmp(st, "compensated") == 0 ||
                strcmp(st, "failed") == 0 || strcmp(st, "needs_attention") == 0 ||
                strcmp(st, "resolved") == 0);
}

/* eng:wait(run_id [, {timeout = s, poll = s}]) -> status | nil, "timeout". Blocks this process
 * (it is for clients such as `mend wait`, not for steps) while another process works.
 * [-0, +1|2, e] */
static int engine_wait(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = mend__check_text(L, 2, "wait", "the run id");
  double timeout = -1, poll = 0.05;
  static const char *const known[] = {"timeout", "poll", NULL};
  mend__opts_known(L, 3, "wait", known);
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "timeout");
    timeout = luaL_optnumber(L, -1, -1);
    lua_getfield(L, 3, "poll");
    poll = luaL_optnumber(L, -1, poll);
    lua_pop(L, 2);
  }
  double deadline = timeout >= 0 ? mend_real_now() + timeout : -1;
  mend_store *st = mend_engine_store(E);
  for (;;) {
    json_t *run = mend_store_run(st, id);
    if (!run) return mend__fail(L, "%s", mend_store_errmsg(st));
    if (is_final_status(json_string_value(json_object_get(run, "status")))) {
      mend_json_push(L, run);
      json_decref(run);
      return 1;
    }
    json_decref(run);
    if (deadline >= 0 && mend_real_now() >= deadline) {
      lua_pushnil(L);
      lua_pushliteral(L, "timeout");
      return 2;
    }
    struct timespec ts = {(time_t)poll, (long)((poll - (double)(time_t)poll) * 1e9)};
    nanosleep(&ts, NULL);
  }
}

static int push_query(lua_State *L, mend_engine *E, json_t *v) {
  if (!v) return mend__fail(L, "%s", mend_store_errmsg(mend_engine_store(E)));
  mend_json_push(L, v);
  json_decref(v);
  return 1;
}

/* eng:status(id) -> the run's row and steps, or nil when there is no such run; held_by names
 * the live worker that holds it, if one does.  [-0, +1, e] */
static int engine_status(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = mend__check_text(L, 2, "status", "the run id");
  json_t *run = mend_store_run(mend_engine_store(E), id);
  if (!run && mend_store_not_found(mend_engine_store(E))) {
    lua_pushnil(L);
    return 1;
  }
  char owner[128];
  int held = run ? mend_engine_held_by(E, id, owner, sizeof owner) : 0;
  if (held == 1) json_object_set_new(run, "held_by", json_string(owner));
  if (held < 0) {
    json_decref(run);
    run = NULL;
  }
  json_t *children = run ? mend_engine_children(E, id) : NULL;
  if (run && !children) {
    json_decref(run);
    run = NULL;
  }
  if (children && json_array_size(children)) json_object_set_new(run, "children", children);
  else json_decref(children);
  return push_query(L, E, run);
}

/* opts[key], a whole number from lo to hi, as GET /runs/{id}/history takes it; dflt when absent.
 * *given says whether it was there. */
static long page_opt(lua_State *L, const char *method, const char *key, long lo, long hi,
                     long dflt, int *given) {
  lua_getfield(L, 3, key);
  long v = dflt;
  *given = !lua_isnil(L, -1);
  if (*given) {
    int ok = 0;   /* a number, not a string that reads as one ("0x10") */
    lua_Integer n = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &ok) : 0;
    if (!ok || n < lo || n > hi) {
      /* "got 10" for limit = "10" would read as a good value: a string is shown as one */
      const char *got = lua_type(L, -1) == LUA_TSTRING
                            ? lua_pushfstring(L, "the string \"%s\"", lua_tostring(L, -1))
                            : luaL_tolstring(L, -1, NULL);
      if (hi == LONG_MAX)
        luaL_error(L, "%s: %s must be a whole number >= %I, got %s", method, key, (lua_Integer)lo,
                   got);
      luaL_error(L, "%s: %s must be a whole number from %I to %I, got %s", method, key,
                 (lua_Integer)lo, (lua_Integer)hi, got);
    }
    v = (long)n;
  }
  lua_pop(L, 1);
  return v;
}

/* eng:history(id) -> the whole history; eng:history(id, {after =, limit =} | {tail =}) -> a
 * page of it (mend_store_history_page), read on the (run, seq) key, with the API's bounds.
 * No such run: nil, "no run <id>", as eng:status gives nil.  [-0, +1|2, e] */
static int engine_history(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = mend__check_text(L, 2, "history", "the run id");
  mend_store *s = mend_engine_store(E);
  json_t *h;
  if (lua_isnoneornil(L, 3)) {
    h = mend_store_history(s, id);
  } else {
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const known[] = {"after", "limit", "tail", NULL};
    mend__opts_known(L, 3, "history", known);
    int has_after, has_limit, has_tail;
    long after = page_opt(L, "history", "after", 0, LONG_MAX, 0, &has_after);
    long limit =
        page_opt(L, "history", "limit", 1, MEND_HISTORY_PAGE_MAX, MEND_HISTORY_PAGE, &has_limit);
    long tail = page_opt(L, "history", "tail", 1, MEND_HISTORY_PAGE_MAX, 0, &has_tail);
    if (has_tail && (has_after || has_limit))
      return luaL_error(L, "history: tail is the last rows: give it without %s",
                        has_after ? "after" : "limit");
    h = mend_store_history_page(s, id, after, has_tail ? 0 : limit, tail);
  }
  if (!h && mend_store_not_found(s)) {
    lua_pushnil(L);
    lua_pushstring(L, mend_store_errmsg(s));
    return 2;
  }
  return push_query(L, E, h);
}

/* eng:dlq() -> every dead letter, oldest first; eng:dlq{limit =, after =} -> a page of them:
 * at most limit (1 to MEND_HISTORY_PAGE_MAX), after the entry `after` (the last of the page
 * before), as GET /api/v1/dlq pages them.  [-0, +1, e] */
static int engine_dlq(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  if (lua_isnoneornil(L, 2)) return push_query(L, E, mend_store_dlq(mend_engine_store(E)));
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const known[] = {"after", "limit", NULL};
  mend__opts_known(L, 2, "dlq", known);
  lua_settop(L, 2);
  lua_pushnil(L);   /* page_opt reads the options at 3 */
  lua_insert(L, 2);
  int given;
  long limit = page_opt(L, "dlq", "limit", 1, MEND_HISTORY_PAGE_MAX, MEND_HISTORY_PAGE, &given);
  double at = 0;
  const char *run = NULL;
  lua_getfield(L, 3, "after");
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TTABLE)
      return luaL_error(L, "dlq: after must be an entry of the page before");
    lua_getfield(L, -1, "run_id");
    lua_getfield(L, -2, "at");
    run = lua_tostring(L, -2);
    at = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
    if (!run)
      return luaL_error(L, "dlq: after must be an entry of the page before (it has no run_id)");
  }
  return push_query(L, E, mend_store_dlq_page(mend_engine_store(E), at, run, limit));
}

static int engine_breakers(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  return push_query(L, E, mend_store_breakers(mend_engine_store(E)));
}

/* eng:runs{status=, workflow=, since=, attention=, limit=} -> list  [-0, +1, e] */
static int engine_runs(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *status = NULL, *workflow = NULL;
  int limit = 0, attention = 0;
  double since = -1;
  static const char *const known[] = {"status", "workflow", "since", "attention", "limit", NULL};
  mend__opts_known(L, 2, "runs", known);
  if (lua_istable(L, 2)) {
    status = mend__opt_string(L, 2, "runs", "status", NULL);
    workflow = mend__opt_string(L, 2, "runs", "workflow", NULL);
    lua_getfield(L, 2, "limit");
    int is = 1;
    lua_Integer n = lua_isnil(L, -1) ? 0 : lua_tointegerx(L, -1, &is);
    /* 0 is none to the store, and a negative one too: given, it is no count of runs (nor is
     * 1.5, which luaL_optinteger refused naming neither the option nor the value) */
    if (!lua_isnil(L, -1) && (!is || n < 1 || n > INT_MAX))
      return luaL_error(L, "runs: limit must be a whole number from 1 to %d, got %s", INT_MAX,
                        luaL_tolstring(L, -1, NULL));
    limit = (int)n;
    lua_getfield(L, 2, "since");
    is = 1;
    since = lua_isnil(L, -1) ? -1 : lua_tonumberx(L, -1, &is);
    /* NaN had been no filter, unsaid, as the store reads a since < 0 */
    if (!is || isnan(since))
      return luaL_error(L, "runs: since must be a time, seconds since the epoch, got %s",
                        luaL_tolstring(L, -1, NULL));
    lua_getfield(L, 2, "attention");
    attention = lua_toboolean(L, -1);
    lua_pop(L, 3);
  }
  return push_query(L, E, mend_store_runs_where(mend_engine_store(E), status, workflow, since,
                                                attention, limit));
}

/* eng:prune{older_than = s, status =, dry_run =} -> {runs = {status = n}, steps =, history =,
 * dlq =, before =}: ended runs last updated before `before`, s seconds ago on the engine's
 * clock (see store.h).
 * [-0, +1, e] */
static int engine_prune(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const known[] = {"older_than", "status", "dry_run", NULL};
  mend__opts_known(L, 2, "prune", known);
  lua_getfield(L, 2, "older_than");
  int ok;
  double older = lua_tonumberx(L, -1, &ok);
  lua_pop(L, 1);
  if (!ok || !(older >= 0)) return luaL_error(L, "prune: older_than must be seconds >= 0");
  const char *status = mend__opt_string(L, 2, "prune", "status", NULL);
  /* the statuses a run ends in, as `mend prune --status` takes them (another, not UTF-8, was
   * the database's own error on PostgreSQL) */
  static const char *const ended[] = {"succeeded", "compensated", "failed", "resolved", NULL};
  const char *const *e = ended;
  while (status && *e && strcmp(status, *e) != 0) e++;
  if (status && !*e)
    return luaL_error(L, "prune: status must be one a run ends in: succeeded, compensated, "
                         "failed, resolved");
  lua_getfield(L, 2, "dry_run");
  int dry = lua_toboolean(L, -1);
  lua_pop(L, 1);
  mend_store *st = mend_engine_store(E);
  double before = mend_engine_now(E) - older;
  json_t *v = mend_engine_prune(E, before, status, dry);
  if (!v) return mend__fail(L, "%s", mend_store_errmsg(st));   /* it names the prune */
  json_object_set_new(v, "before", json_real(before));
  return push_query(L, E, v);
}

/* The options of a repair that takes only who did it. */
static const char *const WHO[] = {"who", NULL};

/* Who did an operation: opts.who (held by opts; the engine checks its text; a refusal names
 * method), or the user and host of this process (pushed).  [-0, +0|1, e] */
static const char *who_of(lua_State *L, const char *method, int opts) {
  const char *who = lua_istable(L, opts) ? mend__opt_string(L, opts, method, "who", NULL) : NULL;
  if (who) return who;
  const char *user = getenv("USER");
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  lua_pushfstring(L, "%s@%s", user ? user : "unknown", host);
  return lua_tostring(L, -1);
}

/* eng:cancel(id [, {who=}]) -> "cancelled" | "requested" | "recorded", why  [-0, +1|2, e] */
static int engine_cancel(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = mend__check_text(L, 2, "cancel", "the run id");
  mend__opts_known(L, 3, "cancel", WHO);
  const char *who = who_of(L, "cancel", 3);
  char err[600];
  int rc = mend_engine_cancel_run(E, id, who, err, sizeof err);
  if (rc < 0) return luaL_error(L, "cancel: %s", err);
  lua_pushstring(L, rc == 1 ? "requested" : rc == 2 ? "recorded" : "cancelled");
  if (rc != 2) return 1;
  lua_pushstring(L, err);   /* why it is not carried on here */
  return 2;
}

/* eng:signal(id, name [, payload [, {key=, run_key=, who=}]]) -> "sent" | "duplicate", run id:
 * sends an event to a running run, by its id or (id nil) by opts.run_key; opts.who is kept
 * with the event.  [-0, +2, e] */
static int engine_signal(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = lua_isnoneornil(L, 2) ? NULL : mend__check_text(L, 2, "signal", "the run id");
  const char *name = mend__check_text(L, 3, "signal", "the event's name");
  const char *key = NULL, *run_key = NULL, *who = NULL;
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    static const char *const known[] = {"key", "run_key", "who", NULL};
    mend__opts_known(L, 5, "signal", known);
    key = mend__opt_string(L, 5, "signal", "key", NULL);   /* the texts: the engine's checks */
    run_key = mend__opt_string(L, 5, "signal", "run_key", NULL);
    who = mend__opt_string(L, 5, "signal", "who", NULL);
  }
  if (!id && !run_key) return luaL_error(L, "signal: a run id, or opts.run_key, is required");
  char err[1024];
  char *payload = NULL;
  if (!lua_isnoneornil(L, 4)) {
    payload = mend_json_encode(L, 4, "payload", err, sizeof err);
    if (!payload) return luaL_error(L, "signal: %s", err);
  }
  char run_id[MEND_RUN_ID_LEN];
  int rc = mend_engine_send_event(E, id, run_key, name, payload, key, who, run_id, err,
                                  sizeof err);
  free(payload);
  if (rc == MEND_EVENT_EDEFERRED) return mend__fail_lock(L, "deferred", run_id, "signal", err);
  if (rc == MEND_EVENT_ESTORE && mend_engine_lock_held(E))
    return mend__fail_lock(L, "busy", NULL, "signal", err);
  if (rc < 0) return luaL_error(L, "signal: %s", err);
  lua_pushstring(L, rc == 1 ? "duplicate" : "sent");
  lua_pushstring(L, run_id);
  return 2;
}

/* eng:complete(token [, result]) -> run id: completes the token a step's attempt handed out;
 * result (any JSON value) is the step's result.  [-0, +1, e] */
static int engine_complete(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *token = mend__check_text(L, 2, "complete", "the token");
  char err[1024];
  char *result = NULL;
  if (!lua_isnoneornil(L, 3)) {
    result = mend_json_encode(L, 3, "result", err, sizeof err);
    if (!result) return luaL_error(L, "complete: %s", err);
  }
  char run_id[MEND_RUN_ID_LEN];
  int rc = mend_engine_settle_token(E, token, 1, result, NULL, NULL, run_id, err, sizeof err);
  free(result);
  if (rc < 0) return luaL_error(L, "complete: %s", err);
  lua_pushstring(L, run_id);
  return 1;
}

/* eng:fail(token, {kind = "retryable"|"fatal"|"compensable", message = }) -> run id: fails the
 * token's step as if its execute had raised that error.  [-0, +1, e] */
static int engine_fail(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *token = mend__check_text(L, 2, "fail", "the token");
  luaL_checktype(L, 3, LUA_TTABLE);
  static const char *const known[] = {"kind", "message", NULL};
  mend__opts_known(L, 3, "fail", known);
  const char *kind = mend__opt_string(L, 3, "fail", "kind", NULL);
  const char *message = mend__opt_string(L, 3, "fail", "message", NULL);
  char err[1024], run_id[MEND_RUN_ID_LEN];
  int rc = mend_engine_settle_token(E, token, 0, NULL, kind, message, run_id, err, sizeof err);
  if (rc < 0) return luaL_error(L, "fail: %s", err);
  lua_pushstring(L, run_id);
  return 1;
}

/* eng:upgrade(id, version [, {who=}]) -> "upgraded" | "already"  [-0, +1, e] */
static int engine_upgrade(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = mend__check_text(L, 2, "upgrade", "the run id");
  const char *version = mend__check_text(L, 3, "upgrade", "the version");
  mend__opts_known(L, 4, "upgrade", WHO);
  const char *who = who_of(L, "upgrade", 4);
  char err[1200];
  int rc = mend_engine_upgrade_run(E, id, version, who, err, sizeof err);
  if (rc < 0) return luaL_error(L, "upgrade: %s", err);
  lua_pushstring(L, rc == 1 ? "already" : "upgraded");
  return 1;
}

/* eng:loaded_version(name) -> the version that serves new runs here, or nil  [-0, +1, e] */
static int engine_loaded_version(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *name = mend__check_text(L, 2, "loaded_version", "the workflow's name");
  mend_workflow *wf = mend_engine_workflow(E, name);
  lua_pushstring(L, wf ? wf->version : NULL);
  return 1;
}

/* eng:workflows([name]) -> the versions the store knows (mend_store_workflows)  [-0, +1, e] */
static int engine_workflows(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *name =
      lua_isnoneornil(L, 2) ? NULL : mend__check_text(L, 2, "workflows", "the workflow's name");
  return push_query(L, E, mend_store_workflows(mend_engine_store(E), name));
}

/* eng:dlq_retry(id [, {who=}])  [-0, +0, e] */
static int engine_dlq_retry(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = mend__check_text(L, 2, "dlq_retry", "the run id");
  mend__opts_known(L, 3, "dlq_retry", WHO);
  const char *who = who_of(L, "dlq_retry", 3);
  char err[600];
  if (mend_engine_dlq_retry(E, id, who, err, sizeof err))
    return luaL_error(L, "dlq_retry: %s", err);
  return 0;
}

/* eng:resolve(id, {note = text [, who =]})  [-0, +0, e] */
static int engine_resolve(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *id = mend__check_text(L, 2, "resolve", "the run id");
  static const char *const known[] = {"note", "who", NULL};
  mend__opts_known(L, 3, "resolve", known);
  const char *note = lua_istable(L, 3) ? mend__opt_string(L, 3, "resolve", "note", NULL) : NULL;
  const char *who = who_of(L, "resolve", 3);
  char err[600];
  if (mend_engine_resolve(E, id, who, note, err, sizeof err))
    return luaL_error(L, "resolve: %s", err);
  return 0;
}

/* eng:breaker(key, "reset"|"open"|"close" [, {seconds=, who=}])  [-0, +0, e] */
static int engine_breaker(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  const char *key = mend__check_text(L, 2, "breaker", "the breaker's key");
  const char *op = luaL_checkstring(L, 3);
  double seconds = 0;
  static const char *const known[] = {"seconds", "who", NULL};
  mend__opts_known(L, 4, "breaker", known);
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "seconds");
    int is = 1;
    seconds = lua_isnil(L, -1) ? 0 : lua_tonumberx(L, -1, &is);
    if (!is)
      return luaL_error(L, "breaker: seconds must be a number, got %s",
                        luaL_tolstring(L, -1, NULL));
    lua_pop(L, 1);
  }
  const char *who = who_of(L, "breaker", 4);
  char err[600];
  if (mend_engine_breaker_set(E, key, op, seconds, who, err, sizeof err))
    return luaL_error(L, "breaker: %s", err);
  return 0;
}

static int engine_audit(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  return push_query(L, E, mend_store_audit_list(mend_engine_store(E)));
}

const luaL_Reg mend__lengine_ops[] = {
  {"wait", engine_wait}, {"status", engine_status}, {"history", engine_history},
  {"dlq", engine_dlq}, {"breakers", engine_breakers}, {"runs", engine_runs},
  {"prune", engine_prune}, {"cancel", engine_cancel}, {"signal", engine_signal},
  {"complete", engine_complete}, {"fail", engine_fail}, {"upgrade", engine_upgrade},
  {"loaded_version", engine_loaded_version}, {"workflows", engine_workflows},
  {"dlq_retry", engine_dlq_retry}, {"resolve", engine_resolve}, {"breaker", engine_breaker},
  {"audit", engine_audit}, {NULL, NULL}};
