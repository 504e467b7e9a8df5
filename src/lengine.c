/*
 * lengine: engines as Lua userdata ("mend.engine"), the part of mend.core a CLI or a script
 * drives: mend.engine{...} (its options read and checked, the alert and log callbacks into
 * Lua; with sandbox or memory_limit, an engine with a Lua state of its own, as the C API
 * makes, whose workflow code never shares the caller's state), and the methods of an engine
 * (load, start, run, serve, wait, the queries and the repairs), each turning Lua arguments
 * into an engine.h call and its answer into Lua values.
 * The userdata holds a pointer, so that the engine's memory (and its libuv handles) never
 * live inside memory Lua may collect first.
 *
 * Must never: reach the engine's insides (engine.h only); keep a Lua value the engine holds
 * without a registry reference; raise without naming the option or the method.
 */
#include "lmend_int.h"

#include <errno.h>
#include <lauxlib.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "json.h"
#include "log.h"
#include "luadir.h"
#include "mend.h"
#include "timers.h"

#define ENGINE_MT "mend.engine"

typedef struct engine_box {
  mend_engine *E;
  lua_State *L;           /* main state, for callbacks */
  int owned;              /* the engine has a Lua state of its own (sandbox, memory_limit) */
  int alert_ref, log_ref;
  mend_log_sink sink;
} engine_box;

static engine_box *check_engine(lua_State *L) {
  engine_box *b = luaL_checkudata(L, 1, ENGINE_MT);
  if (!b->E) luaL_error(L, "engine is closed");
  return b;
}

mend_engine *mend_lua_engine(lua_State *L, int idx) {
  engine_box *b = luaL_checkudata(L, idx, ENGINE_MT);
  if (!b->E) luaL_error(L, "engine is closed");
  return b->E;
}

/* Where the callbacks of b run: the caller's state, which is the engine's unless the engine
 * has one of its own (its workflow code's, which must never see the caller's functions). */
static lua_State *callback_state(engine_box *b) {
  return b->owned ? b->L : mend_engine_lua(b->E);
}

/* Around a call into an engine with a state of its own: an error of Lua's outside every
 * protected call there (a bug of mend's, or memory running out for the engine itself) breaks
 * the engine and raises here, rather than Lua aborting the process. Nothing of the caller's
 * state runs between the two: the jump lands in this C function. */
#define OWNED_BEGIN(L, b)                                                     \
  jmp_buf panic_jb;                                                           \
  void *panic_saved = NULL;                                                   \
  if ((b)->owned) {                                                           \
    if (mend_engine_panicked((b)->E))                                         \
      return luaL_error((L), "the engine is broken: %s", mend_engine_error((b)->E)); \
    panic_saved = mend_engine_set_panic_exit((b)->E, &panic_jb);              \
    if (setjmp(panic_jb)) {                                                   \
      mend_engine_set_panic_exit((b)->E, panic_saved);                        \
      return luaL_error((L), "the engine is broken: %s", mend_engine_error((b)->E)); \
    }                                                                         \
  }
#define OWNED_END(b) \
  if ((b)->owned) mend_engine_set_panic_exit((b)->E, panic_saved)

static void alert_to_lua(void *ud, json_t *ev) {
  engine_box *b = ud;
  lua_State *L = callback_state(b);
  lua_rawgeti(L, LUA_REGISTRYINDEX, b->alert_ref);
  mend_json_push(L, ev);
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
    mend_engine_log_line(b->E, "error", NULL, NULL, 0, "alert", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
}

static void log_to_lua(void *ud, const mend_log_record *rec) {
  engine_box *b = ud;
  lua_State *L = callback_state(b);
  lua_rawgeti(L, LUA_REGISTRYINDEX, b->log_ref);
  lua_createtable(L, 0, 7);
  lua_pushstring(L, rec->level); lua_setfield(L, -2, "level");
  lua_pushnumber(L, rec->time); lua_setfield(L, -2, "time");
  if (rec->run) { lua_pushstring(L, rec->run); lua_setfield(L, -2, "run"); }
  if (rec->step) { lua_pushstring(L, rec->step); lua_setfield(L, -2, "step"); }
  if (rec->attempt) { lua_pushinteger(L, rec->attempt); lua_setfield(L, -2, "attempt"); }
  lua_pushstring(L, rec->event); lua_setfield(L, -2, "event");
  lua_pushstring(L, rec->message ? rec->message : ""); lua_setfield(L, -2, "message");
  if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1);   /* a broken logger must not stop runs */
}

static const char *opt_field_string(lua_State *L, int idx, const char *field, const char *def) {
  lua_getfield(L, idx, field);
  const char *s = lua_isnil(L, -1) ? def : luaL_checkstring(L, -1);
  lua_pop(L, 1);
  return s;
}

/* mend.engine{db=, clock=, seed=, durability=, log=, log_level=, alert=, ...} -> engine  [-1, +1, e] */
int mend__lengine_new(lua_State *L) {
  if (lua_isnoneornil(L, 1)) { lua_settop(L, 0); lua_newtable(L); }
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const fields[] = {"db", "clock", "seed", "durability", "log", "alert",
                                       "lease", "grace", "max_concurrency",
                                       "instruction_budget", "alert_command", "writer_thread",
                                       "buffered_print", "log_level", "http_allow", "park_after",
                                       "sandbox", "memory_limit", NULL};
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    int known = 0;
    for (const char *const *f = fields; *f; f++)
      known |= lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), *f) == 0;
    if (!known) return luaL_error(L, "mend.engine: unknown option %s", luaL_tolstring(L, -1, NULL));
  }
  mend_engine_config cfg = {0};
  cfg.db_path = opt_field_string(L, 1, "db", ":memory:");
  const char *clock = opt_field_string(L, 1, "clock", "real");
  if (strcmp(clock, "virtual") == 0) cfg.virtual_clock = 1;
  else if (strcmp(clock, "real") != 0) return luaL_error(L, "mend.engine: clock must be \"real\" or \"virtual\", got \"%s\"", clock);
  const char *dur = opt_field_string(L, 1, "durability", "full");
  if (strcmp(dur, "process") == 0) cfg.durability = MEND_DURABILITY_PROCESS;
  else if (strcmp(dur, "full") != 0) return luaL_error(L, "mend.engine: durability must be \"full\" or \"process\", got \"%s\"", dur);
  lua_getfield(L, 1, "seed");
  if (!lua_isnil(L, -1)) {
    if (!lua_isinteger(L, -1)) return luaL_error(L, "mend.engine: seed must be an integer");
    cfg.has_seed = 1;
    cfg.seed = (uint64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  cfg.alert_command = opt_field_string(L, 1, "alert_command", NULL);   /* anchored in opts */
  const char *level = opt_field_string(L, 1, "log_level", "info");
  cfg.log_level = mend_log_level_of(level);
  if (!cfg.log_level)
    return luaL_error(L, "mend.engine: log_level must be \"debug\", \"info\", \"warn\" or \"error\", got \"%s\"", level);
  lua_getfield(L, 1, "writer_thread");
  cfg.writer_thread = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "buffered_print");
  cfg.buffered_print = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "max_concurrency");
  cfg.max_concurrency = (int)luaL_optinteger(L, -1, 0);
  lua_getfield(L, 1, "instruction_budget");
  cfg.instruction_budget = (long)luaL_optinteger(L, -1, 0);
  lua_pop(L, 2);
  lua_getfield(L, 1, "lease");
  cfg.lease_seconds = luaL_optnumber(L, -1, 30);
  lua_getfield(L, 1, "grace");
  cfg.grace_seconds = luaL_optnumber(L, -1, 10);
  lua_getfield(L, 1, "park_after");
  cfg.park_after = luaL_optnumber(L, -1, 0);
  lua_pop(L, 3);
  if (!(cfg.lease_seconds > 0)) return luaL_error(L, "mend.engine: lease must be > 0 seconds");
  /* http_allow = {"a.example", "*.example.com"}: joined with commas, as mend_options has it;
   * the string stays on the stack until the engine has copied it. */
  int at = lua_getfield(L, 1, "http_allow");
  if (at == LUA_TTABLE) {
    int list = lua_gettop(L), parts = 0;
    for (lua_Integer k = 1, n = luaL_len(L, list); k <= n; k++) {
      if (lua_geti(L, list, k) != LUA_TSTRING || strchr(lua_tostring(L, -1), ','))
        return luaL_error(L, "mend.engine: http_allow must be a list of host names");
      if (parts++) { lua_pushliteral(L, ","); lua_insert(L, -2); parts++; }
    }
    lua_concat(L, parts);
    lua_remove(L, list);
  } else if (at != LUA_TNIL && at != LUA_TSTRING) {
    return luaL_error(L, "mend.engine: http_allow must be a list of host names");
  }
  cfg.http_allow = lua_tostring(L, -1);   /* NULL when not given */
  /* sandbox = true or a memory_limit: an engine with a Lua state of its own, as the C API
   * makes, where workflow code is held to them; its `require "mend"` is the C API's. */
  lua_getfield(L, 1, "sandbox");
  cfg.sandbox = lua_toboolean(L, -1);
  lua_getfield(L, 1, "memory_limit");
  lua_Integer limit = luaL_optinteger(L, -1, 0);
  lua_pop(L, 2);
  if (limit < 0) return luaL_error(L, "mend.engine: memory_limit must be >= 0 bytes");
  cfg.memory_limit = (size_t)limit;
  int owned = cfg.sandbox || cfg.memory_limit > 0;
  if (owned) {
    cfg.open_module = mend_lua_open;
    cfg.lua_path = mend_lua_dir_default();
  }
  engine_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  *b = (engine_box){.alert_ref = LUA_NOREF, .log_ref = LUA_NOREF, .owned = owned};
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  b->L = lua_tothread(L, -1);
  lua_pop(L, 1);
  luaL_setmetatable(L, ENGINE_MT);
  int t = lua_getfield(L, 1, "alert");
  if (t == LUA_TFUNCTION) {
    b->alert_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    cfg.alert = alert_to_lua;
    cfg.alert_ud = b;
  } else {
    if (t != LUA_TNIL) return luaL_error(L, "mend.engine: alert must be a function");
    lua_pop(L, 1);
  }
  t = lua_getfield(L, 1, "log");
  if (t == LUA_TFUNCTION) {
    b->log_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    cfg.log = log_to_lua;
    cfg.log_ud = b;
  } else {
    if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "stderr") == 0) {
      mend_log_sink_init(&b->sink, stderr);
      cfg.log = mend_log_to_sink;
      cfg.log_ud = &b->sink;
    } else if (t != LUA_TNIL && !(t == LUA_TBOOLEAN && !lua_toboolean(L, -1))) {
      return luaL_error(L, "mend.engine: log must be false, \"stderr\" or a function");
    }
    lua_pop(L, 1);
  }
  char err[1024];
  b->E = mend_engine_create(owned ? NULL : L, &cfg, err, sizeof err, NULL);
  if (!b->E) {
    lua_pushstring(L, err);   /* the message names the file already: no Lua position */
    return lua_error(L);
  }
  return 1;
}

static int engine_close(lua_State *L) {
  engine_box *b = luaL_checkudata(L, 1, ENGINE_MT);
  if (b->E) {
    mend_engine_destroy(b->E);
    b->E = NULL;
  }
  luaL_unref(L, LUA_REGISTRYINDEX, b->alert_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, b->log_ref);
  b->alert_ref = b->log_ref = LUA_NOREF;
  return 0;
}

/* A workflow that does not load is raised as the loader's message alone: it names the file and
 * line at fault, and the position of the Lua line that asked for the load would only hide it. */
static int load_error(lua_State *L, const char *err) { lua_pushstring(L, err); return lua_error(L); }

/* eng:load(path) -> name  [-0, +1, e] */
static int engine_load(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *path = luaL_checkstring(L, 2);
  char err[1024];
  OWNED_BEGIN(L, b);
  mend_workflow *wf = mend_engine_load_file(b->E, path, err, sizeof err);
  OWNED_END(b);
  if (!wf) return load_error(L, err);
  lua_pushstring(L, wf->name);
  return 1;
}

/* eng:register(def) -> name  [-0, +1, e] */
static int engine_register(lua_State *L) {
  engine_box *b = check_engine(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (b->owned)
    return luaL_error(L, "register: an engine with a state of its own (sandbox, memory_limit) "
                      "loads workflows from files only (eng:load)");
  lua_State *EL = mend_engine_lua(b->E);
  lua_pushvalue(L, 2);
  lua_xmove(L, EL, 1);
  char err[1024];
  mend_workflow *wf = mend_engine_register(b->E, -1, err, sizeof err);
  lua_pop(EL, 1);
  if (!wf) return luaL_error(L, "%s", err);
  lua_pushstring(L, wf->name);
  return 1;
}

/* eng:start(name, input [, {key = k}]) -> run_id, existed  [-0, +2, e] */
static int engine_start(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *name = luaL_checkstring(L, 2);
  const char *key = NULL;
  int detached = 0;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    key = opt_field_string(L, 4, "key", NULL);
    lua_getfield(L, 4, "detached");
    detached = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  lua_settop(L, 4);
  char id[MEND_RUN_ID_LEN], err[1024];
  int existed;
  OWNED_BEGIN(L, b);
  int failed = mend_engine_start_value(b->E, L, name, 3, key, id, &existed, detached, err, sizeof err);
  OWNED_END(b);
  if (failed) return luaL_error(L, "start: %s", err);
  lua_pushstring(L, id);
  lua_pushboolean(L, existed);
  return 2;
}

/* eng:run()  [-0, +0, e] */
static int engine_run(lua_State *L) {
  engine_box *b = check_engine(L);
  OWNED_BEGIN(L, b);
  int failed = mend_engine_run(b->E);
  OWNED_END(b);
  if (failed) return luaL_error(L, "%s", mend_engine_error(b->E));
  return 0;
}

/* eng:advance(seconds)  [-0, +0, e] */
static int engine_advance(lua_State *L) {
  engine_box *b = check_engine(L);
  double seconds = luaL_checknumber(L, 2);
  OWNED_BEGIN(L, b);
  int failed = mend_engine_advance(b->E, seconds);
  OWNED_END(b);
  if (failed) return luaL_error(L, "%s", mend_engine_error(b->E));
  return 0;
}

/* eng:recover([limit]) -> n: resumes unfinished runs nobody holds.  [-0, +1, e] */
static int engine_recover(lua_State *L) {
  engine_box *b = check_engine(L);
  int limit = (int)luaL_optinteger(L, 2, 0);
  OWNED_BEGIN(L, b);
  int n = mend_engine_recover_runs(b->E, limit);
  OWNED_END(b);
  if (n < 0) return luaL_error(L, "%s", mend_engine_error(b->E));
  lua_pushinteger(L, n);
  return 1;
}

/* eng:serve{poll = s, max_in_flight = n}: works as a worker until SIGINT/SIGTERM or
 * eng:stop().  [-0, +0, e] */
/* A function of the serving program's, called every `every` seconds while it serves. */
typedef struct serve_tick {
  uv_timer_t timer;
  engine_box *b;
  int ref;
} serve_tick;

static void on_serve_tick(uv_timer_t *t) {
  serve_tick *st = t->data;
  lua_State *L = callback_state(st->b);
  lua_rawgeti(L, LUA_REGISTRYINDEX, st->ref);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {   /* a broken tick must not stop the worker */
    mend_engine_log_line(st->b->E, "error", NULL, NULL, 0, "tick",
                         lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(not a string)");
    lua_pop(L, 1);
  }
}

static void free_serve_tick(uv_handle_t *h) { free(h->data); }

/* eng:serve{poll =, max_in_flight =, every =, tick = function() end} */
static int engine_serve(lua_State *L) {
  engine_box *b = check_engine(L);
  double poll = 0.1, every = 1;
  int max_in_flight = 0, tick = LUA_NOREF;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "poll");
    poll = luaL_optnumber(L, -1, poll);
    lua_getfield(L, 2, "max_in_flight");
    max_in_flight = (int)luaL_optinteger(L, -1, 0);
    lua_getfield(L, 2, "every");
    every = luaL_optnumber(L, -1, every);
    lua_pop(L, 3);
    if (lua_getfield(L, 2, "tick") == LUA_TFUNCTION) tick = luaL_ref(L, LUA_REGISTRYINDEX);
    else if (!lua_isnil(L, -1)) return luaL_error(L, "serve: tick must be a function");
    else lua_pop(L, 1);
  }
  if (!(poll > 0)) return luaL_error(L, "serve: poll must be > 0 seconds");
  if (!(every > 0)) return luaL_error(L, "serve: every must be > 0 seconds");
  serve_tick *st = NULL;
  if (tick != LUA_NOREF) {
    st = malloc(sizeof *st);
    if (!st) return luaL_error(L, "serve: out of memory");
    st->b = b;
    st->ref = tick;
    st->timer.data = st;
    uv_timer_init(mend_engine_loop(b->E), &st->timer);
    uint64_t ms = (uint64_t)(every * 1000);
    uv_timer_start(&st->timer, on_serve_tick, ms ? ms : 1, ms ? ms : 1);
    uv_unref((uv_handle_t *)&st->timer);
  }
  int rc = mend_engine_serve(b->E, poll, max_in_flight);
  if (st) {
    luaL_unref(L, LUA_REGISTRYINDEX, st->ref);
    uv_close((uv_handle_t *)&st->timer, free_serve_tick);
    uv_run(mend_engine_loop(b->E), UV_RUN_NOWAIT);
  }
  if (rc) {   /* the engine's own words, without a position in the CLI's code */
    lua_pushstring(L, mend_engine_error(b->E));
    return lua_error(L);
  }
  return 0;
}

/* eng:log(level, event, message): a line of the engine's log, as its own are. */
static int engine_log(lua_State *L) {
  engine_box *b = check_engine(L);
  static const char *const levels[] = {"debug", "info", "warn", "error", NULL};
  int level = luaL_checkoption(L, 2, NULL, levels);
  mend_engine_log_line(b->E, levels[level], NULL, NULL, 0, luaL_checkstring(L, 3),
                       luaL_checkstring(L, 4));
  return 0;
}

/* eng:alert{kind =, ...}: an alert that belongs to no run, to wherever the engine's go. */
static int engine_alert(lua_State *L) {
  engine_box *b = check_engine(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  char err[300];
  json_t *ev = mend_json_from_lua(L, 2, "alert", err, sizeof err);
  if (!ev || !json_is_object(ev)) {
    json_decref(ev);
    return luaL_error(L, "alert: %s", ev ? "must be a table of fields" : err);
  }
  mend_engine_alert(b->E, ev);
  json_decref(ev);
  return 0;
}

static int engine_stop(lua_State *L) {
  engine_box *b = check_engine(L);
  mend_engine_stop(b->E);
  return 0;
}

static int is_final_status(const char *st) {
  return st && (strcmp(st, "succeeded") == 0 || strcmp(st, "compensated") == 0 ||
                strcmp(st, "failed") == 0 || strcmp(st, "needs_attention") == 0);
}

/* eng:wait(run_id [, {timeout = s, poll = s}]) -> status | nil, "timeout". Blocks this process
 * (it is for clients such as `mend wait`, not for steps) while another process works.  [-0, +1|2, e] */
static int engine_wait(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *id = luaL_checkstring(L, 2);
  double timeout = -1, poll = 0.05;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "timeout");
    timeout = luaL_optnumber(L, -1, -1);
    lua_getfield(L, 3, "poll");
    poll = luaL_optnumber(L, -1, poll);
    lua_pop(L, 2);
  }
  double deadline = timeout >= 0 ? mend_real_now() + timeout : -1;
  mend_store *st = mend_engine_store(b->E);
  for (;;) {
    json_t *run = mend_store_run(st, id);
    if (!run) return luaL_error(L, "%s", mend_store_errmsg(st));
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

static int engine_now(lua_State *L) {
  engine_box *b = check_engine(L);
  lua_pushnumber(L, mend_engine_now(b->E));
  return 1;
}

static int engine_parked(lua_State *L) {
  engine_box *b = check_engine(L);
  lua_pushinteger(L, mend_engine_parked(b->E));
  return 1;
}

static int engine_in_flight(lua_State *L) {
  engine_box *b = check_engine(L);
  lua_pushinteger(L, mend_engine_in_flight(b->E));
  return 1;
}

static int push_query(lua_State *L, engine_box *b, json_t *v) {
  if (!v) return luaL_error(L, "%s", mend_store_errmsg(mend_engine_store(b->E)));
  mend_json_push(L, v);
  json_decref(v);
  return 1;
}

/* eng:status(id) -> the run's row and steps, or nil when there is no such run; held_by names
 * the live worker that holds it, if one does.  [-0, +1, e] */
static int engine_status(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *id = luaL_checkstring(L, 2);
  json_t *run = mend_store_run(mend_engine_store(b->E), id);
  if (!run && mend_store_not_found(mend_engine_store(b->E))) {
    lua_pushnil(L);
    return 1;
  }
  char owner[128];
  if (run && mend_engine_holder(b->E, id, owner, sizeof owner) == 1)
    json_object_set_new(run, "held_by", json_string(owner));
  json_t *children = run ? mend_engine_children(b->E, id) : NULL;
  if (run && !children) {
    json_decref(run);
    run = NULL;
  }
  if (children && json_array_size(children)) json_object_set_new(run, "children", children);
  else json_decref(children);
  return push_query(L, b, run);
}

/* eng:resume(id) -> "resumed" | "held", worker: carries on here a run no live worker holds
 * (then eng:run() it), or names the one that does.  [-0, +1|2, e] */
static int engine_resume(lua_State *L) {
  engine_box *b = check_engine(L);
  char err[600];
  const char *id = luaL_checkstring(L, 2);
  OWNED_BEGIN(L, b);
  int rc = mend_engine_resume_run(b->E, id, err, sizeof err);
  OWNED_END(b);
  if (rc < 0) return luaL_error(L, "resume: %s", err);
  if (rc == 0) {
    lua_pushliteral(L, "resumed");
    return 1;
  }
  lua_pushliteral(L, "held");
  lua_pushstring(L, err);
  return 2;
}

/* eng:load_version(name, version) -> name: that version, from the script the store keeps.
 * [-0, +1, e] */
static int engine_load_version(lua_State *L) {
  engine_box *b = check_engine(L);
  char err[1024];
  mend_workflow *wf = mend_engine_load_version(b->E, luaL_checkstring(L, 2), luaL_checkstring(L, 3),
                                               err, sizeof err);
  if (!wf) return load_error(L, err);
  lua_pushstring(L, wf->name);
  return 1;
}

static int engine_history(lua_State *L) {
  engine_box *b = check_engine(L);
  return push_query(L, b, mend_store_history(mend_engine_store(b->E), luaL_checkstring(L, 2)));
}

static int engine_dlq(lua_State *L) {
  engine_box *b = check_engine(L);
  return push_query(L, b, mend_store_dlq(mend_engine_store(b->E)));
}

static int engine_breakers(lua_State *L) {
  engine_box *b = check_engine(L);
  return push_query(L, b, mend_store_breakers(mend_engine_store(b->E)));
}

/* eng:runs{status=, workflow=, since=, attention=, limit=} -> list  [-0, +1, e] */
static int engine_runs(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *status = NULL, *workflow = NULL;
  int limit = 0, attention = 0;
  double since = -1;
  if (lua_istable(L, 2)) {
    status = opt_field_string(L, 2, "status", NULL);
    workflow = opt_field_string(L, 2, "workflow", NULL);
    lua_getfield(L, 2, "limit");
    limit = (int)luaL_optinteger(L, -1, 0);
    lua_getfield(L, 2, "since");
    since = luaL_optnumber(L, -1, -1);
    lua_getfield(L, 2, "attention");
    attention = lua_toboolean(L, -1);
    lua_pop(L, 3);
  }
  return push_query(L, b, mend_store_runs_where(mend_engine_store(b->E), status, workflow, since,
                                                attention, limit));
}

/* eng:prune{older_than = s, status =, dry_run =} -> {runs = {status = n}, steps =, history =,
 * dlq =, before =}: ended runs last updated before `before`, s seconds ago on the engine's
 * clock (see store.h).
 * [-0, +1, e] */
static int engine_prune(lua_State *L) {
  engine_box *b = check_engine(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_getfield(L, 2, "older_than");
  int ok;
  double older = lua_tonumberx(L, -1, &ok);
  lua_pop(L, 1);
  if (!ok || !(older >= 0)) return luaL_error(L, "prune: older_than must be seconds >= 0");
  const char *status = opt_field_string(L, 2, "status", NULL);
  lua_getfield(L, 2, "dry_run");
  int dry = lua_toboolean(L, -1);
  lua_pop(L, 1);
  mend_store *st = mend_engine_store(b->E);
  double before = mend_engine_now(b->E) - older;
  json_t *v = mend_store_prune(st, before, status, dry);
  if (!v) return luaL_error(L, "prune: %s", mend_store_errmsg(st));
  json_object_set_new(v, "before", json_real(before));
  return push_query(L, b, v);
}

/* Who did an operation: opts.who, or the user and host of this process. [-0, +1, m] */
static const char *push_who(lua_State *L, int opts) {
  if (lua_istable(L, opts) && lua_getfield(L, opts, "who") == LUA_TSTRING) return lua_tostring(L, -1);
  if (lua_istable(L, opts)) lua_pop(L, 1);
  const char *user = getenv("USER");
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  lua_pushfstring(L, "%s@%s", user ? user : "unknown", host);
  return lua_tostring(L, -1);
}

/* eng:cancel(id [, {who=}]) -> "cancelled" | "requested" | "recorded", why  [-0, +1|2, e] */
static int engine_cancel(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *id = luaL_checkstring(L, 2);
  const char *who = push_who(L, 3);
  char err[600];
  int rc = mend_engine_cancel_run(b->E, id, who, err, sizeof err);
  if (rc < 0) return luaL_error(L, "cancel: %s", err);
  lua_pushstring(L, rc == 1 ? "requested" : rc == 2 ? "recorded" : "cancelled");
  if (rc != 2) return 1;
  lua_pushstring(L, err);   /* why it is not carried on here */
  return 2;
}

/* eng:signal(id, name [, payload [, {key=, run_key=}]]) -> "sent" | "duplicate", run id: sends
 * an event to a running run, by its id or (id nil) by opts.run_key.  [-0, +2, e] */
static int engine_signal(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *id = luaL_optstring(L, 2, NULL);
  const char *name = luaL_checkstring(L, 3);
  const char *key = NULL, *run_key = NULL;
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    key = opt_field_string(L, 5, "key", NULL);
    run_key = opt_field_string(L, 5, "run_key", NULL);
  }
  if (!id && !run_key) return luaL_error(L, "signal: a run id, or opts.run_key, is required");
  char err[1024];
  char *payload = NULL;
  if (!lua_isnoneornil(L, 4)) {
    payload = mend_json_encode(L, 4, "payload", err, sizeof err);
    if (!payload) return luaL_error(L, "signal: %s", err);
  }
  char run_id[MEND_RUN_ID_LEN];
  int rc = mend_engine_send_event(b->E, id, run_key, name, payload, key, run_id, err, sizeof err);
  free(payload);
  if (rc < 0) return luaL_error(L, "signal: %s", err);
  lua_pushstring(L, rc == 1 ? "duplicate" : "sent");
  lua_pushstring(L, run_id);
  return 2;
}

/* eng:complete(token [, result]) -> run id: completes the token a step's attempt handed out;
 * result (any JSON value) is the step's result.  [-0, +1, e] */
static int engine_complete(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *token = luaL_checkstring(L, 2);
  char err[1024];
  char *result = NULL;
  if (!lua_isnoneornil(L, 3)) {
    result = mend_json_encode(L, 3, "result", err, sizeof err);
    if (!result) return luaL_error(L, "complete: %s", err);
  }
  char run_id[MEND_RUN_ID_LEN];
  int rc = mend_engine_settle_token(b->E, token, 1, result, NULL, NULL, run_id, err, sizeof err);
  free(result);
  if (rc < 0) return luaL_error(L, "complete: %s", err);
  lua_pushstring(L, run_id);
  return 1;
}

/* eng:fail(token, {kind = "retryable"|"fatal"|"compensable", message = }) -> run id: fails the
 * token's step as if its execute had raised that error.  [-0, +1, e] */
static int engine_fail(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *token = luaL_checkstring(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  const char *kind = opt_field_string(L, 3, "kind", NULL);
  const char *message = opt_field_string(L, 3, "message", NULL);
  char err[1024], run_id[MEND_RUN_ID_LEN];
  int rc = mend_engine_settle_token(b->E, token, 0, NULL, kind, message, run_id, err, sizeof err);
  if (rc < 0) return luaL_error(L, "fail: %s", err);
  lua_pushstring(L, run_id);
  return 1;
}

/* eng:upgrade(id, version [, {who=}]) -> "upgraded" | "already"  [-0, +1, e] */
static int engine_upgrade(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *id = luaL_checkstring(L, 2);
  const char *version = luaL_checkstring(L, 3);
  const char *who = push_who(L, 4);
  char err[1200];
  int rc = mend_engine_upgrade_run(b->E, id, version, who, err, sizeof err);
  if (rc < 0) return luaL_error(L, "upgrade: %s", err);
  lua_pushstring(L, rc == 1 ? "already" : "upgraded");
  return 1;
}

/* eng:loaded_version(name) -> the version that serves new runs here, or nil  [-0, +1, e] */
static int engine_loaded_version(lua_State *L) {
  engine_box *b = check_engine(L);
  mend_workflow *wf = mend_engine_workflow(b->E, luaL_checkstring(L, 2));
  lua_pushstring(L, wf ? wf->version : NULL);
  return 1;
}

/* eng:workflows([name]) -> the versions the store knows (mend_store_workflows)  [-0, +1, e] */
static int engine_workflows(lua_State *L) {
  engine_box *b = check_engine(L);
  return push_query(L, b, mend_store_workflows(mend_engine_store(b->E), luaL_optstring(L, 2, NULL)));
}

/* eng:dlq_retry(id [, {who=}])  [-0, +0, e] */
static int engine_dlq_retry(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *id = luaL_checkstring(L, 2);
  const char *who = push_who(L, 3);
  char err[600];
  if (mend_engine_dlq_retry(b->E, id, who, err, sizeof err)) return luaL_error(L, "dlq retry: %s", err);
  return 0;
}

/* eng:resolve(id, {note = text [, who =]})  [-0, +0, e] */
static int engine_resolve(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *id = luaL_checkstring(L, 2);
  const char *note = lua_istable(L, 3) ? opt_field_string(L, 3, "note", NULL) : NULL;
  const char *who = push_who(L, 3);
  char err[600];
  if (mend_engine_resolve(b->E, id, who, note, err, sizeof err)) return luaL_error(L, "dlq resolve: %s", err);
  return 0;
}

/* eng:breaker(key, "reset"|"open"|"close" [, {seconds=, who=}])  [-0, +0, e] */
static int engine_breaker(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *key = luaL_checkstring(L, 2);
  const char *op = luaL_checkstring(L, 3);
  double seconds = 0;
  if (lua_istable(L, 4)) {
    lua_getfield(L, 4, "seconds");
    seconds = luaL_optnumber(L, -1, 0);
    lua_pop(L, 1);
  }
  const char *who = push_who(L, 4);
  char err[600];
  if (mend_engine_breaker_set(b->E, key, op, seconds, who, err, sizeof err))
    return luaL_error(L, "breakers %s: %s", op, err);
  return 0;
}

static int engine_audit(lua_State *L) {
  engine_box *b = check_engine(L);
  return push_query(L, b, mend_store_audit_list(mend_engine_store(b->E)));
}

static int engine_tostring(lua_State *L) {
  engine_box *b = luaL_checkudata(L, 1, ENGINE_MT);
  lua_pushfstring(L, "mend.engine (%s)", b->E ? "open" : "closed");
  return 1;
}

/* The metatable of engines, registered once. */
void mend__lengine_open(lua_State *L) {
  static const luaL_Reg engine_methods[] = {
    {"load", engine_load}, {"register", engine_register}, {"start", engine_start},
    {"run", engine_run}, {"advance", engine_advance}, {"now", engine_now},
    {"in_flight", engine_in_flight}, {"parked", engine_parked}, {"status", engine_status}, {"history", engine_history},
    {"dlq", engine_dlq}, {"breakers", engine_breakers}, {"runs", engine_runs},
    {"recover", engine_recover}, {"serve", engine_serve}, {"stop", engine_stop},
    {"wait", engine_wait}, {"cancel", engine_cancel}, {"signal", engine_signal},
    {"complete", engine_complete}, {"fail", engine_fail}, {"dlq_retry", engine_dlq_retry},
    {"resolve", engine_resolve}, {"breaker", engine_breaker}, {"audit", engine_audit},
    {"prune", engine_prune},
    {"resume", engine_resume}, {"load_version", engine_load_version},
    {"log", engine_log}, {"alert", engine_alert},
    {"upgrade", engine_upgrade}, {"workflows", engine_workflows},
    {"loaded_version", engine_loaded_version},
    {"close", engine_close}, {NULL, NULL}};
  if (luaL_newmetatable(L, ENGINE_MT)) {
    luaL_newlib(L, engine_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, engine_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, engine_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, engine_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}
