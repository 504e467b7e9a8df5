/*
 * guard: how much of the machine one call into workflow code may take. Owns the count hook
 * that holds such code to an instruction budget and a real-time deadline on every thread it
 * runs on, and the bookkeeping of which limits are in force. The engine owns the memory limit
 * (its allocator) and decides what a tripped limit means for a run.
 *
 * Also owns the watchdog: the hook counts instructions, and one instruction may take seconds
 * (comparing long strings, copying a million arguments, next over a large emptied array), so
 * while a call with a deadline runs, a timer of the thread signals it at the deadline and the
 * signal's handler makes every thread the call runs on stop at its next instruction.
 *
 * Also owns a stop asked of the process (SIGINT, SIGTERM) while no loop listens for it: a
 * worker's workflow file may take seconds to load, and one told to stop meanwhile stops it
 * rather than finish it (mend_limits_hear_stop).
 *
 * Must never: let Lua code of a call go on once its limits tripped (the hook then raises at
 * every instruction, so pcall, xpcall or a coroutine cannot swallow the error for long);
 * run workflow code itself; touch from the signal handler a thread that is not running a
 * call of this OS thread, or anything but the hook of one.
 */
#ifndef MEND_GUARD_H
#define MEND_GUARD_H

#include <lua.h>

/* Instructions between two looks of the hook at the clock and the budget. */
#define MEND_LIMITS_EVERY 10000

typedef enum mend_limit_trip {
  MEND_LIMIT_OK, MEND_LIMIT_BUDGET, MEND_LIMIT_TIMEOUT, MEND_LIMIT_STOPPED
} mend_limit_trip;

/* Ordered by size: every attempt in flight holds one (engine_int.h), so it has no padding. */
typedef struct mend_limits {
  long budget;                 /* instructions in all; 0: none */
  long left;
  double deadline;             /* mend_host_now() seconds; 0: none */
  struct mend_limits *prev;    /* the limits in force when these began */
  const char *what;            /* "step", "workflow load", ...: names the call in messages */
  size_t alloc_debt;           /* bytes allocated under these limits and not yet charged */
  size_t since_look;           /* bytes charged since the page faults were last looked at */
  long faults_seen;            /* the thread's page faults charged up to; -1: not looked yet */
  int watch_depth;             /* the watchdog's threads when these began */
  unsigned char tripped;       /* a mend_limit_trip */
  unsigned char timeout_typed; /* a trip by time raises a mend timeout error, not a string */
  unsigned char refused_table; /* an allocation was refused: a table over MEND_TABLE_NODES */
  unsigned char refused_memory; /* an allocation was refused: over the engine's memory limit */
  unsigned char after_box;     /* the last allocation was the box of a lauxlib buffer */
  unsigned char stoppable;     /* a stop heard (mend_limits_hear_stop) trips it: STOPPED */
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
/* co is resumed (mend_limits_run_on) and back (run_off, given what run_on returned) under
 * the limits in force: the watchdog stops it at the deadline too. Calls nest. */
int mend_limits_run_on(lua_State *co);
void mend_limits_run_off(int depth);
/* Forgets every thread the watchdog knew and stops its timer (a Lua panic left calls without
 * their leave: their threads may go). */
void mend_limits_watchdog_reset(void);
/* The limits in force in L's state, or NULL. */
mend_limits *mend_limits_current(lua_State *L);
/* Charges work done in C on behalf of workflow code (`instructions` of it) to the limits in
 * force and looks at the clock; raises as the hook does when they trip. [-0, +0, v] */
void mend_limits_charge(lua_State *L, double instructions);
/* Takes `instructions` from lim and looks at the clock, without raising: 1 if lim is tripped. */
int mend_limits_spend(mend_limits *lim, double instructions);

/* What allocating costs, against one Lua instruction (4.4-6 ns on this 2-core virtual machine,
 * loaded or not). A block costs its malloc, its free and the collector's walk over it, and its
 * bytes some 0.05 ns each to fill where the memory is reused: an allocation the count hook
 * never sees (a string.rep, a concatenation, a table grown) is charged MEND_ALLOC_EACH bytes
 * more than its size, at MEND_ALLOC_BYTES_PER_INSTRUCTION bytes an instruction. Memory mapped
 * afresh costs far more, a page fault for each 4 KiB page the first time it is written (14-15
 * us of CPU on this machine, 3.6 ns a byte): each such page is charged MEND_FAULT_INSTRUCTIONS
 * on top, so that a loop of fresh allocations ends within about the time of its budget of
 * plain instructions too. The faults are counted, not guessed: the thread's own count
 * (getrusage RUSAGE_THREAD) is looked at every MEND_FAULT_LOOK bytes of allocation, and a
 * large block's fresh pages are charged before it is filled (mend_limits_owe_pages), so that
 * one the budget cannot pay for is refused instead (README: Limits and sandbox). */
#define MEND_FAULT_INSTRUCTIONS 3000
/* The same page's time, for a call under a deadline (mend_limits_owe_pages): measured once a
 * process (mend_limits_fault_seconds), MEND_FAULT_SAMPLE pages, MEND_FAULT_SHARE of what they
 * took, so that only a block that would surely end past it is refused; MEND_FAULT_SECONDS where
 * it cannot be measured, MEND_FAULT_SECONDS_MIN at the least. */
#define MEND_FAULT_SECONDS 10e-6
#define MEND_FAULT_SECONDS_MIN 0.1e-6
#define MEND_FAULT_SAMPLE ((size_t)512)
#define MEND_FAULT_SHARE 0.7
/* The seconds a fresh page takes to fault in here, as the refusal counts them: the environment
 * variable MEND_FAULT_SECONDS when set to a positive number (tests), else measured the first
 * time it is needed (a few ms, once a process). Thread-safe. */
double mend_limits_fault_seconds(void);
#define MEND_FAULT_LOOK ((size_t)1 << 20)
#define MEND_ALLOC_BYTES_PER_INSTRUCTION 8
#define MEND_ALLOC_EACH 256
/* Debt is settled (taken off the budget, the clock looked at) once it reaches this: a look at
 * the clock for every small allocation would cost more than the allocation. */
#define MEND_ALLOC_SETTLE ((size_t)64 << 10)
int mend_limits_settle(mend_limits *lim);
/* `pages` about to be mapped afresh for a call under lim, charged before they are: 1 when lim
 * is tripped (the allocation is to fail), as mend_limits_owe. The thread's count of faults
 * then leaves them out. */
int mend_limits_owe_pages(mend_limits *lim, size_t pages);
/* How many of the pages of [p, p + n) are not yet mapped in (mincore): what writing the block
 * will fault. 0 where that cannot be told. */
size_t mend_limits_fresh_pages(const void *p, size_t n);
/* The size of a page, for mend_limits_owe_pages. */
#define MEND_PAGE_BYTES ((size_t)4096)
/* For the allocator of a state whose code runs under lim: `bytes` more are being allocated.
 * 1: lim is tripped (the allocation is to fail), and every thread the limited calls of this OS
 * thread run on stops at its next instruction. A block as large as MEND_ALLOC_SETTLE is charged
 * before it is made, so that one over the budget is never filled. */
static inline int mend_limits_owe(mend_limits *lim, size_t bytes) {
  lim->alloc_debt += bytes + MEND_ALLOC_EACH;
  return lim->alloc_debt >= MEND_ALLOC_SETTLE ? mend_limits_settle(lim) : 0;
}
/* The most keys a table holds outside its array part (1..n) in sandboxed code. Lua hashes
 * integer and float keys without a seed: keys that all collide make the rehash that grows a
 * table quadratic in its size, one instruction that nothing can stop (85 ms at this size on a
 * loaded machine, 20 s at 16 times it). */
#define MEND_TABLE_NODES 16384
/* For the allocator of a sandboxed state, every allocation while workflow code runs under
 * lim: 1 when the block asked for is the hash part of a table larger than MEND_TABLE_NODES,
 * to be refused: a new block of a power of two of Lua 5.4's 24-byte nodes, and not a string
 * buffer's. An array made at once ({...}, table.pack, a decoded JSON array) of exactly 3 *
 * 2^k / 2 values, 49152 or more, has that size too and is refused as well. */
int mend_limits_refuse_table(mend_limits *lim, const void *ptr, size_t osize, size_t nsize);
/* Was co stopped by a trip? Its __close handlers must not run then: Lua would run them
 * with hooks off. [-0, +0, m] */
int mend_limits_stopped(lua_State *L, lua_State *co);
/* From `on` (1) to the matching 0, SIGINT and SIGTERM are heard here in place of whoever
 * handled them (nobody, or a loop's uv_signal): the handler only notes the signal, and a call
 * under stoppable limits then trips at its next look, as at its deadline. At 0 the handlers
 * replaced are back, and a signal heard meanwhile goes on to one that is a function (raised
 * again, once), for the loop that listens to do what it does with it. Calls nest. Returns the
 * signal heard since the process began (0: none); a stop is not taken back. Main thread only. */
int mend_limits_hear_stop(int on);
/* The signal heard (mend_limits_hear_stop), 0 when none was. Async-signal-safe. */
int mend_limits_stop_heard(void);

/* What a tripped lim says: "step exceeded its instruction budget (N instructions)". */
const char *mend_limits_message(const mend_limits *lim, char *buf, size_t len);

#endif
