/*
 * guard: instruction budgets and deadlines for calls into workflow code (see guard.h).
 *
 * The limits in force are found from the registry, not from the thread the hook runs on: a
 * coroutine made by one attempt and resumed by another (through a table that both can reach)
 * is charged to the attempt that resumes it, and a thread never holds a pointer to limits that
 * may be gone.
 */
#include "guard.h"

#include <lauxlib.h>
#include <stdio.h>

#include "lerror.h"
#include "timers.h"

/* The registry key (its address) of the limits in force, a light userdata. */
static const char current_key = 'L';
/* The registry key of a table with weak keys: the threads a trip raised on. Lua calls no hook
 * in code that runs while an error raised by a hook is on its way (a message handler) nor,
 * once such an error killed a coroutine, in the __close handlers that closing it would run. */
static const char stopped_key = 'S';

mend_limits *mend_limits_current(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &current_key);
  mend_limits *lim = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return lim;
}

void mend_limits_init(mend_limits *lim, const char *what, long budget, double seconds) {
  *lim = (mend_limits){.budget = budget > 0 ? budget : 0, .left = budget, .what = what};
  if (seconds > 0) lim->deadline = mend_real_now() + seconds;
}

void mend_limits_enter(lua_State *L, mend_limits *lim) {
  lim->prev = mend_limits_current(L);
  lua_pushlightuserdata(L, lim);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &current_key);
}

void mend_limits_leave(lua_State *L, mend_limits *lim) {
  if (lim->prev) lua_pushlightuserdata(L, lim->prev);
  else lua_pushnil(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &current_key);
  lim->prev = NULL;
}

const char *mend_limits_message(const mend_limits *lim, char *buf, size_t len) {
  if (lim->tripped == MEND_LIMIT_BUDGET)
    snprintf(buf, len, "%s exceeded its instruction budget (%ld instructions)", lim->what,
             lim->budget);
  else if (lim->tripped == MEND_LIMIT_TIMEOUT)
    snprintf(buf, len, "%s exceeded its timeout", lim->what);
  else
    snprintf(buf, len, "%s is within its limits", lim->what);
  return buf;
}

static void hook(lua_State *L, lua_Debug *ar);

int mend_limits_spend(mend_limits *lim, double spent) {
  if (lim->tripped) return 1;
  if (lim->budget > 0) {
    lim->left = spent >= (double)lim->left ? 0 : lim->left - (long)spent;
    if (lim->left <= 0) lim->tripped = MEND_LIMIT_BUDGET;
  }
  if (!lim->tripped && lim->deadline > 0 && mend_real_now() >= lim->deadline)
    lim->tripped = MEND_LIMIT_TIMEOUT;
  return lim->tripped != MEND_LIMIT_OK;
}

static void mark_stopped(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &stopped_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &stopped_key);
  }
  lua_pushthread(L);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

int mend_limits_stopped(lua_State *L, lua_State *co) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &stopped_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushthread(co);
  lua_xmove(co, L, 1);
  int stopped = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return stopped;
}

static int trip_error(lua_State *L, const mend_limits *lim) {
  /* From now on every instruction raises again: a pcall that caught the error gets to run
   * one instruction of its caller before the error is on its way up once more. */
  if (lua_gethookcount(L) != 1 || lua_gethook(L) != hook) lua_sethook(L, hook, LUA_MASKCOUNT, 1);
  mark_stopped(L);
  char msg[200];
  mend_limits_message(lim, msg, sizeof msg);
  if (lim->tripped == MEND_LIMIT_TIMEOUT && lim->timeout_typed)
    mend_lua_push_error(L, MEND_ERR_TIMEOUT, msg, -1, 0);
  else
    lua_pushstring(L, msg);
  return lua_error(L);
}

static void hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  mend_limits *lim = mend_limits_current(L);
  int every = lua_gethookcount(L);
  if (lim && mend_limits_spend(lim, every)) {
    trip_error(L, lim);
    return;
  }
  /* A thread left at every instruction by a call that tripped works for a new one. */
  if (every != MEND_LIMITS_EVERY) lua_sethook(L, hook, LUA_MASKCOUNT, MEND_LIMITS_EVERY);
}

void mend_limits_charge(lua_State *L, double instructions) {
  mend_limits *lim = mend_limits_current(L);
  if (lim && mend_limits_spend(lim, instructions)) trip_error(L, lim);
}

void mend_limits_watch(lua_State *co) { lua_sethook(co, hook, LUA_MASKCOUNT, MEND_LIMITS_EVERY); }
void mend_limits_unwatch(lua_State *co) { lua_sethook(co, NULL, 0, 0); }
