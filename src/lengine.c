/*
 * lengine: engines as Lua userdata ("mend.engine"), the part of mend.core a CLI or a script
 * drives: mend.engine{...} (its options read and checked, the alert and log callbacks into
 * Lua; with sandbox or memory_limit, an engine with a Lua state of its own, as the C API
 * makes, whose workflow code never shares the caller's state), the methods that drive an
 * engine (load, start, run, advance, recover, resume, serve, stop, close, ...; the others are
 * lengine_ops.c's), and the guard every method of an engine with a state of its own runs
 * under, so that a panic of that state breaks the engine and never aborts the process.
 * The userdata holds a pointer, so that the engine's memory (and its libuv handles) never
 * live inside memory Lua may collect first.
 *
 * Must never: reach the engine's insides (engine.h only); keep a Lua value the engine holds
 * without a registry reference; raise without naming the option or the method; register a
 * method outside the guard.
 */
#include "lmend_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <lauxlib.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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
  int closing;            /* close is destroying it */
  struct serve_tick *tick;   /* eng:serve's tick, while it serves */
  int alert_ref, log_ref;
  mend_log_sink sink;
} engine_box;

int mend__fail(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return lua_error(L);
}

static int lock_error_tostring(lua_State *L) {
  lua_getfield(L, 1, "message");
  return 1;
}

int mend__fail_lock(lua_State *L, const char *code, const char *run, const char *what,
                    const char *err) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, code);
  lua_setfield(L, -2, "code");
  if (run) {
    lua_pushstring(L, run);
    lua_setfield(L, -2, "run");
  }
  lua_pushfstring(L, "%s: %s", what, err);
  lua_setfield(L, -2, "message");
  if (luaL_newmetatable(L, "mend.lock_error")) {
    lua_pushcfunction(L, lock_error_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
  return lua_error(L);
}

static engine_box *check_engine(lua_State *L) {
  engine_box *b = luaL_checkudata(L, 1, ENGINE_MT);
  if (!b->E) luaL_error(L, "engine is closed");
  return b;
}

/* The methods that drive or destroy an engine, called from inside its own run's code (a step
 * that holds the engine in an upvalue): refused, as the engine is running that code (engine.h:
 * mend_engine_in_code). */
static engine_box *check_driving(lua_State *L, const char *method) {
  engine_box *b = check_engine(L);
  if (mend_engine_in_code(b->E))
    luaL_error(L, "%s: called from %s while the engine runs it; such code may start, "
               "signal, cancel or read other runs, not drive or close its engine", method,
               mend_engine_code_running(b->E));
  return b;
}

mend_engine *mend_lua_engine(lua_State *L, int idx) {
  engine_box *b = luaL_checkudata(L, idx, ENGINE_MT);
  if (!b->E) luaL_error(L, "engine is closed");
  return b->E;
}

/* A callback of b's engine into the caller's state, nargs arguments above the function
 * there: a method of the engine called in it may raise past its guard (method_guard), which
 * leaves its own jmp_buf as the engine's panic exit; the exit the engine's code runs under is
 * put back on return.  [-(nargs+1), +0|1] */
static int with_exit_kept(engine_box *b, lua_State *L, int nargs) {
  if (!b->E) return lua_pcall(L, nargs, 0, 0);   /* a line the engine logs as it is made */
  void *exit = mend_engine_set_panic_exit(b->E, NULL);
  mend_engine_set_panic_exit(b->E, exit);
  int rc = lua_pcall(L, nargs, 0, 0);
  mend_engine_set_panic_exit(b->E, exit);
  return rc;
}

/* Where the callbacks of b run: the caller's state, which is the engine's unless the engine
 * has one of its own (its workflow code's, which must never see the caller's functions). */
static lua_State *callback_state(engine_box *b) {
  return b->owned || !b->E ? b->L : mend_engine_lua(b->E);   /* !E: being made, on b->L's */
}

static void alert_to_lua(void *ud, json_t *ev) {
  engine_box *b = ud;
  lua_State *L = callback_state(b);
  lua_rawgeti(L, LUA_REGISTRYINDEX, b->alert_ref);
  mend_json_push(L, ev);
  if (with_exit_kept(b, L, 1) != LUA_OK) {
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
  if (with_exit_kept(b, L, 1) != LUA_OK) lua_pop(L, 1);   /* a broken logger must not stop runs */
}

/* A Lua string may hold a NUL byte; C reads it only up to there: "order-7\0x" would be the run
 * key "order-7", another run's. Refused, naming the method and what it was given for. */
const char *mend__check_text(lua_State *L, int idx, const char *method, const char *what) {
  size_t len;
  const char *s = luaL_checklstring(L, idx, &len);
  if (strlen(s) != len)
    luaL_error(L, "%s: %s holds a NUL byte: it would be cut short there", method, what);
  return s;
}

/* A string only: a number would be made a string on the stack, freed once popped, while the
 * caller goes on reading it; a string stays anchored in its table. */
const char *mend__opt_string(lua_State *L, int idx, const char *method, const char *field,
                             const char *def) {
  lua_getfield(L, idx, field);
  const char *s = def;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: %s must be a string, got %s", method, field, luaL_typename(L, -1));
    s = mend__check_text(L, -1, method, field);
  }
  lua_pop(L, 1);
  return s;
}

void mend__opts_known(lua_State *L, int idx, const char *method, const char *const *known) {
  if (!lua_istable(L, idx)) return;
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    const char *const *k = known;
    if (lua_type(L, -1) == LUA_TSTRING)
      while (*k && strcmp(lua_tostring(L, -1), *k) != 0) k++;
    else
      while (*k) k++;
    if (*k) continue;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (k = known; *k; k++) {
      if (k != known) luaL_addstring(&b, ", ");
      luaL_addstring(&b, *k);
    }
    luaL_pushresult(&b);
    const char *takes = lua_tostring(L, -1);
    const char *name = luaL_tolstring(L, -2, NULL);
    luaL_error(L, "%s: unknown option %s (it takes %s)", method, name, takes);
  }
}

/* mend.engine{db=, clock=, seed=, durability=, log=, log_level=, alert=, ...} -> engine
 * [-1, +1, e] */
/* An element of a list option, at the top of the stack: 1, left there as text, or 0. */
static int host_item(lua_State *L) {
  return lua_type(L, -1) == LUA_TSTRING && !strchr(lua_tostring(L, -1), ',');
}

static void sigpipe_nothing(int sig) { (void)sig; }

void mend_lua_quiet_sigpipe(void) {
  struct sigaction now;
  if (sigaction(SIGPIPE, NULL, &now) != 0 || now.sa_handler != SIG_DFL ||
      (now.sa_flags & SA_SIGINFO))
    return;
  struct sigaction quiet = {0};
  quiet.sa_handler = sigpipe_nothing;
  quiet.sa_flags = SA_RESTART;
  sigemptyset(&quiet.sa_mask);
  sigaction(SIGPIPE, &quiet, NULL);
}

static int cpu_item(lua_State *L) {
  if (!lua_isinteger(L, -1)) return 0;
  lua_pushfstring(L, "%I", lua_tointeger(L, -1));
  lua_remove(L, -2);
  return 1;
}

/* Option `name` of the table at 1 as mend_options has a list: a string as given (or an integer
 * where `integer_ok`), or a Lua list joined with commas, each element taken by `item`. Pushed,
 * for the caller to keep until the engine has read it; NULL when absent. Joined in a buffer: a
 * list as long as a host may give takes no slot of the stack an element. */
static const char *option_list(lua_State *L, const char *name, int (*item)(lua_State *),
                               int integer_ok, const char *refusal) {
  int t = lua_getfield(L, 1, name);
  if (t == LUA_TTABLE) {
    int list = lua_gettop(L);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (lua_Integer k = 1, n = luaL_len(L, list); k <= n; k++) {
      if (k > 1) luaL_addchar(&b, ',');
      lua_geti(L, list, k);
      if (!item(L)) luaL_error(L, "%s", refusal);
      luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    lua_remove(L, list);
  } else if (t != LUA_TNIL && t != LUA_TSTRING && !(integer_ok && lua_isinteger(L, -1))) {
    luaL_error(L, "%s", refusal);
  }
  return lua_tostring(L, -1);
}

/* Option `name` of mend.engine{} (the table at 1) as a whole number from lo to hi, `def` when
 * absent; anything else raises "mend.engine: NAME must be RULE, got VALUE" (luaL_optinteger's
 * "bad argument #-1 to 'mend.core.engine'" named neither the option nor the value). */
static lua_Integer whole_option(lua_State *L, const char *name, lua_Integer def, lua_Integer lo,
                                lua_Integer hi, const char *rule) {
  lua_getfield(L, 1, name);
  int is = 1;
  lua_Integer n = lua_isnil(L, -1) ? def : lua_tointegerx(L, -1, &is);
  if (!is || n < lo || n > hi)
    luaL_error(L, "mend.engine: %s must be %s, got %s", name, rule, luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
  return n;
}

/* Option `name` as a number of seconds, `def` when absent; one that is no number raises as
 * whole_option does (its range is checked by the caller, which says it). */
static double seconds_option(lua_State *L, const char *name, double def, const char *rule) {
  lua_getfield(L, 1, name);
  int is = 1;
  double n = lua_isnil(L, -1) ? def : lua_tonumberx(L, -1, &is);
  if (!is)
    luaL_error(L, "mend.engine: %s must be %s, got %s", name, rule, luaL_tolstring(L, -1, NULL));
  lua_pop(L, 1);
  return n;
}

int mend__lengine_new(lua_State *L) {
  if (lua_isnoneornil(L, 1)) { lua_settop(L, 0); lua_newtable(L); }
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const fields[] = {"db", "clock", "seed", "durability", "log", "alert",
                                       "lease", "grace", "max_concurrency",
                                       "instruction_budget", "alert_command", "writer_thread",
                                       "buffered_print", "log_level", "http_allow", "park_after",
                                       "sandbox", "no_sandbox", "memory_limit", "thread_cpus",
                                       "existing", NULL};
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    int known = 0;
    for (const char *const *f = fields; *f; f++)
      known |= lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), *f) == 0;
    if (!known) return luaL_error(L, "mend.engine: unknown option %s", luaL_tolstring(L, -1, NULL));
  }
  mend_engine_config cfg = {0};
  cfg.db_path = mend__opt_string(L, 1, "mend.engine", "db", ":memory:");
  const char *clock = mend__opt_string(L, 1, "mend.engine", "clock", "real");
  if (strcmp(clock, "virtual") == 0) cfg.virtual_clock = 1;
  else if (strcmp(clock, "real") != 0)
    return luaL_error(L, "mend.engine: clock must be \"real\" or \"virtual\", got \"%s\"", clock);
  const char *dur = mend__opt_string(L, 1, "mend.engine", "durability", "full");
  if (strcmp(dur, "process") == 0) cfg.durability = MEND_DURABILITY_PROCESS;
  else if (strcmp(dur, "full") != 0)
    return luaL_error(L, "mend.engine: durability must be \"full\" or \"process\", got \"%s\"",
                      dur);
  lua_getfield(L, 1, "seed");
  if (!lua_isnil(L, -1)) {
    if (!lua_isinteger(L, -1)) return luaL_error(L, "mend.engine: seed must be an integer");
    cfg.has_seed = 1;
    cfg.seed = (uint64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 1);
  /* anchored in opts */
  cfg.alert_command = mend__opt_string(L, 1, "mend.engine", "alert_command", NULL);
  const char *level = mend__opt_string(L, 1, "mend.engine", "log_level", "info");
  cfg.log_level = mend_log_level_of(level);
  if (!cfg.log_level)
    return luaL_error(
        L, "mend.engine: log_level must be \"debug\", \"info\", \"warn\" or \"error\", got \"%s\"",
        level);
  lua_getfield(L, 1, "writer_thread");
  cfg.writer_thread = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "existing");
  cfg.db_existing = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 1, "buffered_print");
  cfg.buffered_print = lua_toboolean(L, -1);
  lua_pop(L, 1);
  /* as mend_engine_new reads them: a negative one is no "none" (it had been, unsaid), nor is a
   * cap past an int's range what is left of it */
  cfg.max_concurrency = (int)whole_option(L, "max_concurrency", 0, 0, INT_MAX,
                                          "a whole number >= 0 (0: no cap)");
  cfg.instruction_budget = (long)whole_option(L, "instruction_budget", 0, 0, LONG_MAX,
                                              "a whole number >= 0 (0: no budget)");
  cfg.lease_seconds = seconds_option(L, "lease", 30, "a finite number > 0 of seconds");
  cfg.grace_seconds = seconds_option(L, "grace", 10, "a finite number > 0 of seconds");
  cfg.park_after = seconds_option(L, "park_after", 0, "a number of seconds");
  if (!(cfg.lease_seconds > 0 && cfg.lease_seconds < HUGE_VAL))
    return luaL_error(L, "mend.engine: lease must be a finite number > 0 of seconds");
  /* NaN or infinity: a stopping worker would wait for ever for its attempts */
  if (!(cfg.grace_seconds > 0 && cfg.grace_seconds < HUGE_VAL))
    return luaL_error(L, "mend.engine: grace must be a finite number > 0 of seconds");
  if (isnan(cfg.park_after))   /* (< 0 is never, as documented; NaN had been, unsaid) */
    return luaL_error(L, "mend.engine: park_after must be a number of seconds, got nan");
  /* http_allow = {"a.example", "*.example.com"} and thread_cpus = "0,2-3", 1 or {0, 2, 3}: as
   * mend_options has them, on the stack until the engine has copied or read them (it checks
   * thread_cpus: an empty list is refused there). */
  cfg.http_allow = option_list(L, "http_allow", host_item, 0,
                               "mend.engine: http_allow must be a list of host names");
  cfg.thread_cpus = option_list(L, "thread_cpus", cpu_item, 1,
                                "mend.engine: thread_cpus must be a list of CPU numbers or a "
                                "string such as \"0,2-3\"");
  /* sandbox = true or a memory_limit: an engine with a Lua state of its own, as the C API
   * makes, where workflow code is held to them; its `require "mend"` is the C API's. */
  lua_getfield(L, 1, "sandbox");
  cfg.sandbox = lua_toboolean(L, -1);
  lua_getfield(L, 1, "no_sandbox");
  cfg.no_sandbox = lua_toboolean(L, -1);
  lua_pop(L, 2);
  cfg.memory_limit = (size_t)whole_option(L, "memory_limit", 0, 0, LUA_MAXINTEGER,
                                          ">= 0 bytes, a whole number (0: no limit)");
  if (cfg.sandbox && cfg.no_sandbox)
    return luaL_error(L, "mend.engine: sandbox and no_sandbox: give one of them");
  int owned = cfg.sandbox || cfg.memory_limit > 0;
  if (owned) {
    cfg.open_module = mend_lua_open;
    cfg.lua_path = mend_lua_dir_default();
  }
  mend_lua_quiet_sigpipe();   /* a Lua host (lua5.4 with require "mend") has no main.c */
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
  mend_refusal why;
  b->E = mend_engine_create(owned ? NULL : L, &cfg, err, sizeof err, &why);
  if (!b->E && why == MEND_REFUSED_SANDBOX) {
    /* The database holds untrusted workflows: sandboxed, unless the host said no_sandbox. */
    cfg.sandbox = cfg.sandbox_by_mark = 1;
    cfg.open_module = mend_lua_open;
    cfg.lua_path = mend_lua_dir_default();
    b->owned = owned = 1;
    b->E = mend_engine_create(NULL, &cfg, err, sizeof err, NULL);
  }
  if (!b->E) {
    lua_pushstring(L, err);   /* the message names the file already: no Lua position */
    return lua_error(L);
  }
  return 1;
}

/* A workflow that does not load is raised as the loader's message alone: it names the file and
 * line at fault, and the position of the Lua line that asked for the load would only hide it. */
static int load_error(lua_State *L, const char *err) {
  lua_pushstring(L, err);
  return lua_error(L);
}

/* eng:load(path) -> name  [-0, +1, e] */
static int engine_load(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *path = mend__check_text(L, 2, "load", "the path");
  char err[1024];
  mend_workflow *wf = mend_engine_load_file(b->E, path, err, sizeof err);
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

/* eng:start(name, input [, {key = k, detached = b, who = w}]) -> run_id, existed  [-0, +2, e] */
static int engine_start(lua_State *L) {
  engine_box *b = check_engine(L);
  const char *name = mend__check_text(L, 2, "start", "the workflow's name");
  const char *key = NULL, *who = NULL;
  int detached = 0;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    static const char *const known[] = {"key", "detached", "who", NULL};
    mend__opts_known(L, 4, "start", known);
    /* its text and who's: the engine's checks */
    key = mend__opt_string(L, 4, "start", "key", NULL);
    who = mend__opt_string(L, 4, "start", "who", NULL);
    lua_getfield(L, 4, "detached");
    detached = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  lua_settop(L, 4);
  char id[MEND_RUN_ID_LEN], err[1024];
  int existed;
  int failed = mend_engine_start_value(b->E, L, name, 3, key, who, id, &existed, detached, err,
                                       sizeof err);
  if (failed) {
    mend_refusal why = mend_engine_refusal(b->E);
    if (why == MEND_REFUSED_BUSY || why == MEND_REFUSED_DEFERRED)
      return mend__fail_lock(L, why == MEND_REFUSED_BUSY ? "busy" : "deferred",
                             why == MEND_REFUSED_DEFERRED ? id : NULL, "start", err);
    /* the engine's or its store's failure is not the caller's line; a refusal is */
    if (why == MEND_REFUSED_STORE || why == MEND_REFUSED_NOMEM)
      return mend__fail(L, "start: %s", err);
    return luaL_error(L, "start: %s", err);
  }
  lua_pushstring(L, id);
  lua_pushboolean(L, existed);
  return 2;
}

static int run_protected(lua_State *L) {
  lua_pushboolean(L, mend_engine_run(lua_touserdata(L, 1)) != 0);
  return 1;
}

/* eng:run()  [-0, +0, e]
 * An engine on the caller's own state runs in a protected call of it: an error of that state
 * that jumps out of the engine (a panic) puts back what run set going before it goes on up
 * (mend_engine_run_left). An engine with a state of its own is not: its panics go to the
 * guard's exit (method_guard), past any protected call made here, through on_panic, which puts
 * it back. */
static int engine_run(lua_State *L) {
  engine_box *b = check_driving(L, "run");
  /* eng:run("order.lua") ran what was loaded and started, silently ignoring the file */
  if (!lua_isnoneornil(L, 2))
    return luaL_error(L, "run: takes no argument, got %s (it runs the runs started: load a "
                      "workflow with eng:load(path), start one with eng:start(name, input))",
                      luaL_typename(L, 2));
  int failed;
  if (b->owned) {
    failed = mend_engine_run(b->E) != 0;
  } else {
    lua_pushcfunction(L, run_protected);
    lua_pushlightuserdata(L, b->E);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
      mend_engine_run_left(b->E);
      return lua_error(L);
    }
    failed = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  if (failed) return mend__fail(L, "%s", mend_engine_error(b->E));
  return 0;
}

/* eng:advance(seconds)  [-0, +0, e] */
static int engine_advance(lua_State *L) {
  engine_box *b = check_driving(L, "advance");
  double seconds = luaL_checknumber(L, 2);
  int failed = mend_engine_advance(b->E, seconds);
  if (failed) return mend__fail(L, "%s", mend_engine_error(b->E));
  return 0;
}

/* eng:recover([limit]) -> n: resumes unfinished runs nobody holds.  [-0, +1, e] */
static int engine_recover(lua_State *L) {
  engine_box *b = check_driving(L, "recover");
  lua_Integer limit = luaL_optinteger(L, 2, 0);
  /* an int's range: 2^32 + 1 had been a limit of 1, and 2^32 none */
  if (limit < 0 || limit > INT_MAX)
    return luaL_error(L, "recover: limit must be a whole number from 0 (every run) to %d, got %I",
                      INT_MAX, limit);
  int n = mend_engine_recover_runs(b->E, (int)limit);
  if (n < 0) return mend__fail(L, "%s", mend_engine_error(b->E));
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
  if (with_exit_kept(st->b, L, 0) != LUA_OK) {   /* a broken tick must not stop the worker */
    mend_engine_log_line(st->b->E, "error", NULL, NULL, 0, "tick",
                         lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(not a string)");
    lua_pop(L, 1);
  }
}

static void free_serve_tick(uv_handle_t *h) { free(h->data); }

/* The tick closed: when serve returns, or at close when a panic of the engine's own state
 * jumped out of serve (method_guard). */
static void close_serve_tick(lua_State *L, engine_box *b) {
  if (!b->tick) return;
  luaL_unref(L, LUA_REGISTRYINDEX, b->tick->ref);
  uv_close((uv_handle_t *)&b->tick->timer, free_serve_tick);
  b->tick = NULL;
}

/* eng:serve{poll =, max_in_flight =, every =, tick = function() end} */
static int engine_serve(lua_State *L) {
  engine_box *b = check_driving(L, "serve");
  double poll = 0.1, every = 1;
  lua_Integer max_in_flight = 0;
  int tick = LUA_NOREF;
  static const char *const known[] = {"poll", "max_in_flight", "every", "tick", NULL};
  mend__opts_known(L, 2, "serve", known);
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "poll");
    poll = luaL_optnumber(L, -1, poll);
    lua_getfield(L, 2, "max_in_flight");
    max_in_flight = luaL_optinteger(L, -1, 0);
    lua_getfield(L, 2, "every");
    every = luaL_optnumber(L, -1, every);
    lua_pop(L, 3);
    if (lua_getfield(L, 2, "tick") == LUA_TFUNCTION) tick = luaL_ref(L, LUA_REGISTRYINDEX);
    else if (!lua_isnil(L, -1)) return luaL_error(L, "serve: tick must be a function");
    else lua_pop(L, 1);
  }
  /* an int's range: 2^32 + 1 had been a cap of 1, a worker serving one run at a time */
  if (max_in_flight < 0 || max_in_flight > INT_MAX)
    return luaL_error(L, "serve: max_in_flight must be a whole number from 0 (no cap) to %d, "
                      "got %I", INT_MAX, max_in_flight);
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
  b->tick = st;
  int rc = mend_engine_serve(b->E, poll, (int)max_in_flight);
  if (st) {
    close_serve_tick(L, b);
    uv_run(mend_engine_loop(b->E), UV_RUN_NOWAIT);
  }
  if (rc) {   /* the engine's own words, without a position in the CLI's code */
    lua_pushstring(L, mend_engine_error(b->E));
    return lua_error(L);
  }
  return 0;
}

static int engine_close(lua_State *L) {
  engine_box *b = luaL_checkudata(L, 1, ENGINE_MT);
  if (b->E && mend_engine_in_code(b->E)) check_driving(L, "close");
  close_serve_tick(L, b);
  if (b->E) {
    b->closing = 1;   /* a panic as it is destroyed abandons it (method_guard) */
    mend_engine_destroy(b->E);
    b->E = NULL;
  }
  luaL_unref(L, LUA_REGISTRYINDEX, b->alert_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, b->log_ref);
  b->alert_ref = b->log_ref = LUA_NOREF;
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

static int engine_now(lua_State *L) {
  engine_box *b = check_engine(L);
  lua_pushnumber(L, mend_engine_now(b->E));
  return 1;
}

/* eng:sandboxed() -> nil | "asked" | "mark", note: whether the workflows' code runs sandboxed,
 * and why (the host said sandbox, or the database's mark made it so: then what the engine
 * logged of it as it opened, for a host without a log).  [-0, +2, -] */
static int engine_sandboxed(lua_State *L) {
  engine_box *b = check_engine(L);
  int how = mend_engine_sandbox_kind(b->E);
  if (!how) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, how == 2 ? "mark" : "asked");
  if (how == 1) return 1;
  char note[700];
  mend_engine_sandbox_by_mark_note(b->E, note, sizeof note);
  lua_pushstring(L, note);
  return 2;
}

static int engine_parked(lua_State *L) {
  engine_box *b = check_engine(L);
  lua_pushinteger(L, mend_engine_parked(b->E));
  return 1;
}

static int engine_alert_commands_failed(lua_State *L) {
  engine_box *b = check_engine(L);
  lua_pushinteger(L, mend_engine_alert_commands_failed(b->E));
  return 1;
}

static int engine_in_flight(lua_State *L) {
  engine_box *b = check_engine(L);
  lua_pushinteger(L, mend_engine_in_flight(b->E));
  return 1;
}

/* eng:resume(id) -> "resumed" | "held", worker: carries on here a run no live worker holds
 * (then eng:run() it), or names the one that does.  [-0, +1|2, e] */
static int engine_resume(lua_State *L) {
  engine_box *b = check_engine(L);
  char err[600];
  const char *id = mend__check_text(L, 2, "resume", "the run id");
  int rc = mend_engine_resume_run(b->E, id, err, sizeof err);
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
  const char *name = mend__check_text(L, 2, "load_version", "the workflow's name");
  const char *version = mend__check_text(L, 3, "load_version", "the version");
  mend_workflow *wf = mend_engine_load_version(b->E, name, version, err, sizeof err);
  if (!wf) return load_error(L, err);
  lua_pushstring(L, wf->name);
  return 1;
}

static int engine_tostring(lua_State *L) {
  engine_box *b = luaL_checkudata(L, 1, ENGINE_MT);
  lua_pushfstring(L, "mend.engine (%s)", b->E ? "open" : "closed");
  return 1;
}

/* body(L) with b's engine's panic exit set to a jmp_buf of its own: its result, or -1 when a
 * panic of the engine's state jumped out of it (the engine broken; the exit it found put back
 * unless the engine was being destroyed). */
static int under_exit(lua_State *L, engine_box *b, lua_CFunction body) {
  mend_engine *E = b->E;
  jmp_buf jb;
  void *outer = mend_engine_set_panic_exit(E, &jb);
  if (setjmp(jb)) {
    if (!b->closing) mend_engine_set_panic_exit(E, outer);
    return -1;
  }
  int n = body(L);
  if (b->E) mend_engine_set_panic_exit(E, outer);   /* else close freed it */
  return n;
}

/* The methods of an engine with a Lua state of its own run under a guard: an error of that
 * state's outside every protected call there (a bug of mend's, or memory running out for the
 * engine itself) breaks the engine and raises in the caller, rather than Lua aborting the
 * process; a broken engine's methods raise at once, except close. One guard for every method
 * (set_guarded registers them), so that no method can be left out. Its upvalue: the method.
 *
 * The method runs in the guard's own call, so that its errors name it and the caller's line as
 * any C function's do. A method that raises leaves its jmp_buf behind as the engine's panic
 * exit, and that is never jumped to: the engine's state runs only inside a method (or
 * server:run, under the same guard: mend_lua_engine_guarded), which sets its own exit first,
 * and a callback into the caller's state, where a method may raise past its guard, puts the
 * exit it found back when it returns (see with_exit_kept). */
static int method_guard(lua_State *L) {
  lua_CFunction method = lua_tocfunction(L, lua_upvalueindex(1));
  engine_box *b = luaL_testudata(L, 1, ENGINE_MT);
  if (!b || !b->E || !b->owned) return method(L);   /* the caller's own state, or no engine */
  mend_engine *E = b->E;
  if (mend_engine_panicked(E) && method != engine_close)
    return luaL_error(L, "the engine is broken: %s", mend_engine_error(E));
  int n = under_exit(L, b, method);
  if (n >= 0) return n;
  if (b->closing) {   /* half destroyed: left as it is, never touched again */
    b->E = NULL;
    return luaL_error(L, "the engine broke as it closed: %s", mend_engine_error(E));
  }
  return luaL_error(L, "the engine is broken: %s", mend_engine_error(E));
}

int mend_lua_engine_guarded(lua_State *L, int idx, lua_CFunction body) {
  engine_box *b = luaL_checkudata(L, idx, ENGINE_MT);
  if (!b->E) return luaL_error(L, "engine is closed");
  if (!b->owned) return body(L);
  if (mend_engine_panicked(b->E))
    return luaL_error(L, "the engine is broken: %s", mend_engine_error(b->E));
  return under_exit(L, b, body);
}

/* Sets each method of list, under the guard, in the table on top of the stack. */
static void set_guarded(lua_State *L, const luaL_Reg *list) {
  for (const luaL_Reg *m = list; m->name; m++) {
    lua_pushcfunction(L, m->func);
    lua_pushcclosure(L, method_guard, 1);
    lua_setfield(L, -2, m->name);
  }
}

/* The metatable of engines, registered once. */
void mend__lengine_open(lua_State *L) {
  static const luaL_Reg engine_methods[] = {
    {"load", engine_load}, {"register", engine_register}, {"start", engine_start},
    {"run", engine_run}, {"advance", engine_advance}, {"now", engine_now},
    {"sandboxed", engine_sandboxed},
    {"in_flight", engine_in_flight}, {"parked", engine_parked},
    {"alert_commands_failed", engine_alert_commands_failed}, {"recover", engine_recover},
    {"serve", engine_serve}, {"stop", engine_stop}, {"resume", engine_resume},
    {"load_version", engine_load_version}, {"log", engine_log}, {"alert", engine_alert},
    {"close", engine_close}, {NULL, NULL}};
  if (luaL_newmetatable(L, ENGINE_MT)) {
    lua_newtable(L);
    set_guarded(L, engine_methods);
    set_guarded(L, mend__lengine_ops);
    lua_getfield(L, -1, "close");
    lua_setfield(L, -3, "__gc");
    lua_getfield(L, -1, "close");
    lua_setfield(L, -3, "__close");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, engine_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}
