/*
 * guard: how much of the machine one call into workflow code may take. Owns the count hook
 * that holds such code to an instruction budget and a real-time deadline on every thread it
 * runs on, and the bookkeeping of which limits are in force. The engine owns the memory limit
 * (its allocator) and decides what a tripped limit means for a run.
 *
 * Must never: let Lua code of a call go on once its limits tripped (the hook then raises at
 * every instruction, so pcall, xpcall or a coroutine cannot swallow the error for long);
 * run workflow code itself.
 */
#ifndef MEND_GUARD_H
#define MEND_GUARD_H

#include <lua.h>

/* Instructions between two looks of the hook at the clock and the budget. */
#define MEND_LIMITS_EVERY 10000

typedef enum mend_limit_trip {
  MEND_LIMIT_OK, MEND_LIMIT_BUDGET, MEND_LIMIT_TIMEOUT
} mend_limit_trip;

typedef struct mend_limits {
  long budget;                 /* instructions in all; 0: none */
  long left;
  double deadline;             /* mend_real_now() seconds; 0: none */
  struct mend_limits *prev;    /* the limits in force when these began */
  const char *what;            /* "step", "workflow load", ...: names the call in messages */
  unsigned char tripped;       /* a mend_limit_trip */
  unsigned char timeout_typed; /* a trip by time raises a mend timeout error, not a string */
} mend_limits;

/* Sets lim up for a new call: `budget` instructions (0: none), `seconds` of real time (<= 0:
 * none). Nothing is in force until mend_limits_enter. */
void mend_limits_init(mend_limits *lim, const char *what, long budget, double seconds);
/* Puts lim in force in L's state (until mend_limits_leave); calls nest. */
void mend_limits_enter(lua_State *L, mend_limits *lim);
void mend_limits_leave(lua_State *L, mend_limits *lim);
/* Installs the hook on a thread that will run workflow code. Threads it creates inherit it. */
void mend_limits_watch(lua_State *co);
void mend_limits_unwatch(lua_State *co);
/* The limits in force in L's state, or NULL. */
mend_limits *mend_limits_current(lua_State *L);
/* Charges work done in C on behalf of workflow code (`instructions` of it) to the limits in
 * force and looks at the clock; raises as the hook does when they trip. [-0, +0, v] */
void mend_limits_charge(lua_State *L, double instructions);
/* Takes `instructions` from lim and looks at the clock, without raising (for the engine's
 * allocator, which charges what large allocations copy): 1 if lim is tripped. */
int mend_limits_spend(mend_limits *lim, double instructions);
/* Was co stopped by a trip? Its __close handlers must not run then: Lua would run them
 * with hooks off. [-0, +0, m] */
int mend_limits_stopped(lua_State *L, lua_State *co);
/* What a tripped lim says: "step exceeded its instruction budget (N instructions)". */
const char *mend_limits_message(const mend_limits *lim, char *buf, size_t len);

#endif
