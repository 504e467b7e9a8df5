/*
 * guard: instruction budgets and deadlines for calls into workflow code (see guard.h).
 *
 * The limits in force are found from the registry, not from the thread the hook runs on: a
 * coroutine made by one attempt and resumed by another (through a table that both can reach)
 * is charged to the attempt that resumes it, and a thread never holds a pointer to limits that
 * may be gone.
 *
 * The watchdog (Linux): each OS thread that runs limited calls has a POSIX timer that sends
 * it a real-time signal at the deadline of the call in force, and again every 10 ms while a
 * call runs past it. The handler runs on that thread, between two of its instructions or
 * inside a C function, and only calls lua_sethook (safe from a signal, lua.h) on the threads
 * that this OS thread is running calls on: the stack of threads that mend_limits_enter and
 * mend_limits_run_on keep, a thread pushed before it runs and popped before it may be freed.
 * Nothing is shared with another OS thread, so there is nothing to race on. Unloaded (a
 * host's lua_close unloads the Lua module), it leaves no timer that could signal into it.
 */
#define _GNU_SOURCE
#include "guard.h"

#include <errno.h>
#include <lauxlib.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "lerror.h"
#include "lweak.h"
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
  *lim = (mend_limits){.budget = budget > 0 ? budget : 0, .left = budget, .what = what,
                       .faults_seen = -1};
  if (seconds > 0) lim->deadline = mend_host_now() + seconds;
}

static void hook(lua_State *L, lua_Debug *ar);

/* ---------------------------------------------------------------- the watchdog */

#if defined(__linux__) && defined(SIGEV_THREAD_ID)
#include <signal.h>
#include <unistd.h>

/* Deeper nesting of coroutines than this is left to the count hook (Lua allows about 200). */
#define WATCH_THREADS 256
#define REPOKE_NS 10000000L
#define MAX_REPOKES 10

typedef struct watchdog {
  timer_t timer;
  int forked;                      /* a child of fork: the timer stayed with the parent */
  _Atomic long long deadline_ns;   /* the call in force's deadline, CLOCK_REALTIME; 0: none */
  _Atomic long long armed_ns;      /* when the timer fires; 0: it does not */
  volatile sig_atomic_t depth;
  volatile sig_atomic_t repokes;   /* since the deadline passed */
  lua_State *volatile threads[WATCH_THREADS];
} watchdog;

static _Thread_local watchdog *tl_watchdog;
static _Thread_local int tl_no_timer;
static pthread_once_t watch_once = PTHREAD_ONCE_INIT;
static pthread_key_t watch_key;
static int watch_signal;   /* 0: the watchdog is off in this process */

/* Every thread the calls of this OS thread run on stops at its next instruction. */
static int watch_poke(watchdog *w) {
  int n = w->depth;
  for (int i = 0; i < n && i < WATCH_THREADS; i++) {
    lua_State *t = w->threads[i];
    /* A thread without the hook is not under limits (or is trusted code's own hook). */
    if (t && lua_gethook(t) == hook) lua_sethook(t, hook, LUA_MASKCOUNT, 1);
  }
  return n;
}

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The timer at `at` (CLOCK_REALTIME nanoseconds). Safe from the handler. */
static void timer_at(watchdog *w, long long at) {
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  its.it_value.tv_sec = (time_t)(at / 1000000000LL);
  its.it_value.tv_nsec = (long)(at % 1000000000LL);
  if (timer_settime(w->timer, TIMER_ABSTIME, &its, NULL) == 0)
    atomic_store_explicit(&w->armed_ns, at, memory_order_relaxed);
}

/* The timer is left armed when a call ends (two system calls for every resumption of an
 * attempt cost a frame loop milliseconds a tick): firing for a call that is over, it arms
 * itself for the deadline of the call now in force, if any. */
static void on_watchdog(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)uc;
  if (si->si_code != SI_TIMER) return;
  watchdog *w = si->si_value.sival_ptr;
  if (!w) return;
  int saved = errno;
  atomic_store_explicit(&w->armed_ns, 0, memory_order_relaxed);
  long long deadline = atomic_load_explicit(&w->deadline_ns, memory_order_relaxed);
  long long now = now_ns();
  if (deadline > now) {
    timer_at(w, deadline);
  } else if (deadline > 0 && watch_poke(w) > 0 && w->repokes < MAX_REPOKES) {
    /* Again soon, a few times, while the call runs: a poke can be undone by the hook it
     * interrupted. Not for ever: a host function that blocks past the deadline would see its
     * system calls interrupted every 10 ms. */
    w->repokes++;
    timer_at(w, now + REPOKE_NS);
  }
  errno = saved;
}

/* Watchdogs whose timer exists, in every OS thread. */
static atomic_int live_timers;

static void free_watchdog(void *p) {
  watchdog *w = p;
  if (!w->forked) {
    timer_delete(w->timer);
    atomic_fetch_sub(&live_timers, 1);
  }
  free(w);
}

static void after_fork(void) {
  if (tl_watchdog) tl_watchdog->forked = 1;
}

static void watch_init(void) {
  if (pthread_key_create(&watch_key, free_watchdog)) return;
  pthread_atfork(NULL, NULL, after_fork);
  /* A signal the host handles already is the host's: the count hook alone then. */
  int sig = SIGRTMAX - 3;
  struct sigaction old;
  if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_watchdog;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, NULL) == 0) watch_signal = sig;
}

/* This OS thread's watchdog, made the first time a call is limited on it; NULL: none. */
static watchdog *get_watchdog(void) {
  watchdog *w = tl_watchdog;
  if (w && !w->forked) return w;
  if (tl_no_timer) return NULL;
  pthread_once(&watch_once, watch_init);
  if (!watch_signal) return NULL;
  if (!w && !(w = calloc(1, sizeof *w))) return NULL;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = watch_signal;
  ev.sigev_value.sival_ptr = w;
  ev._sigev_un._tid = gettid();
  if (timer_create(CLOCK_REALTIME, &ev, &w->timer) != 0) {
    free(w);
    tl_watchdog = NULL;
    pthread_setspecific(watch_key, NULL);
    tl_no_timer = 1;
    return NULL;
  }
  atomic_fetch_add(&live_timers, 1);
  w->forked = 0;
  atomic_store(&w->deadline_ns, 0);
  atomic_store(&w->armed_ns, 0);
  w->depth = 0;
  tl_watchdog = w;
  pthread_setspecific(watch_key, w);
  return w;
}

/* This code unloaded (a host's lua_close unloads the Lua module) or the process ending: a
 * timer left armed (on_watchdog) would signal into a handler that is gone, and a thread's
 * exit would call a key destructor that is gone. The timer of this thread goes, the key goes,
 * and the signal is ignored while another thread's timer may still fire, else given back. */
__attribute__((destructor)) static void watch_unload(void) {
  if (!watch_signal) return;
  watchdog *w = tl_watchdog;
  tl_watchdog = NULL;
  if (w) free_watchdog(w);
  pthread_key_delete(watch_key);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = atomic_load(&live_timers) > 0 ? SIG_IGN : SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(watch_signal, &sa, NULL);
  watch_signal = 0;
}

static int watch_push(watchdog *w, lua_State *co) {
  int d = w->depth;
  if (d < WATCH_THREADS) {
    w->threads[d] = co;
    atomic_signal_fence(memory_order_seq_cst);
    w->depth = d + 1;
  }
  return d;
}

static void watch_pop(watchdog *w, int depth) {
  if (depth < w->depth) w->depth = depth;
  atomic_signal_fence(memory_order_seq_cst);
}

/* `deadline` (mend_host_now seconds; 0: none) is the one in force: the timer fires by then. */
static void watch_deadline(watchdog *w, double deadline) {
  long long at = deadline > 0 ? (long long)(deadline * 1e9) : 0;
  atomic_store_explicit(&w->deadline_ns, at, memory_order_relaxed);
  w->repokes = 0;
  long long armed = atomic_load_explicit(&w->armed_ns, memory_order_relaxed);
  if (at > 0 && (armed == 0 || armed > at)) timer_at(w, at);
}

int mend_limits_run_on(lua_State *co) {
  watchdog *w = tl_watchdog;
  return w && !w->forked ? watch_push(w, co) : 0;
}

void mend_limits_run_off(int depth) {
  watchdog *w = tl_watchdog;
  if (w && !w->forked) watch_pop(w, depth);
}

/* A trip stops the threads that resumed the one it raised on too, not 10,000 instructions
 * later: each of those may be a long one. */
static void watch_poke_all(void) {
  watchdog *w = tl_watchdog;
  if (w && !w->forked) watch_poke(w);
}

void mend_limits_watchdog_reset(void) {
  watchdog *w = tl_watchdog;
  if (!w || w->forked) return;
  watch_pop(w, 0);
  watch_deadline(w, 0);
}

static void watch_enter(lua_State *L, mend_limits *lim) {
  watchdog *w = get_watchdog();
  lim->watch_depth = 0;
  if (!w) return;
  lim->watch_depth = watch_push(w, L);
  watch_deadline(w, lim->deadline);
}

static void watch_leave(mend_limits *lim) {
  watchdog *w = tl_watchdog;
  if (!w || w->forked) return;
  watch_pop(w, lim->watch_depth);
  watch_deadline(w, lim->prev ? lim->prev->deadline : 0);
}
#else
int mend_limits_run_on(lua_State *co) { (void)co; return 0; }
void mend_limits_run_off(int depth) { (void)depth; }
void mend_limits_watchdog_reset(void) {}
static void watch_poke_all(void) {}
static void watch_enter(lua_State *L, mend_limits *lim) { (void)L; (void)lim; }
static void watch_leave(mend_limits *lim) { (void)lim; }
#endif

/* ---------------------------------------------------------------- limits in force */

void mend_limits_enter(lua_State *L, mend_limits *lim) {
  lim->prev = mend_limits_current(L);
  lua_pushlightuserdata(L, lim);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &current_key);
  watch_enter(L, lim);
}

void mend_limits_leave(lua_State *L, mend_limits *lim) {
  watch_leave(lim);
  if (lim->prev) lua_pushlightuserdata(L, lim->prev);
  else lua_pushnil(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &current_key);
  lim->prev = NULL;
}

const char *mend_limits_message(const mend_limits *lim, char *buf, size_t len) {
  if (lim->tripped == MEND_LIMIT_STOPPED)
    snprintf(buf, len, "%s was stopped: its process was told to stop (%s)", lim->what,
             mend_limits_stop_heard() == SIGINT ? "SIGINT" : "SIGTERM");
  else if (lim->tripped == MEND_LIMIT_BUDGET)
    snprintf(buf, len, "%s exceeded its instruction budget (%ld instructions)", lim->what,
             lim->budget);
  else if (lim->tripped == MEND_LIMIT_TIMEOUT)
    snprintf(buf, len, "%s exceeded its timeout", lim->what);
  else
    snprintf(buf, len, "%s is within its limits", lim->what);
  return buf;
}

int mend_limits_spend(mend_limits *lim, double spent) {
  if (lim->tripped) return 1;
  if (lim->budget > 0) {
    lim->left = spent >= (double)lim->left ? 0 : lim->left - (long)spent;
    if (lim->left <= 0) lim->tripped = MEND_LIMIT_BUDGET;
  }
  if (!lim->tripped && lim->deadline > 0 && mend_host_now() >= lim->deadline)
    lim->tripped = MEND_LIMIT_TIMEOUT;
  if (!lim->tripped && lim->stoppable && mend_limits_stop_heard())
    lim->tripped = MEND_LIMIT_STOPPED;
  return lim->tripped != MEND_LIMIT_OK;
}

/* ---------------------------------------------------------------- a stop heard */

static atomic_int stop_heard;   /* lock-free on every platform mend builds on */
static atomic_int stops_heard;  /* how many: one heard in a hold goes on when it ends, once */
static int hear_depth, stops_before;
static struct sigaction heard_before[2];
static const int stop_signals[2] = {SIGINT, SIGTERM};

static void on_stop_signal(int sig) {
  atomic_store_explicit(&stop_heard, sig, memory_order_relaxed);
  atomic_fetch_add_explicit(&stops_heard, 1, memory_order_relaxed);
}

int mend_limits_stop_heard(void) { return atomic_load_explicit(&stop_heard, memory_order_relaxed); }

int mend_limits_hear_stop(int on) {
  if (on && hear_depth++ == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    stops_before = atomic_load(&stops_heard);
    for (int k = 0; k < 2; k++) sigaction(stop_signals[k], &sa, &heard_before[k]);
  } else if (!on && hear_depth > 0 && --hear_depth == 0) {
    int heard = atomic_load(&stops_heard) != stops_before ? mend_limits_stop_heard() : 0;
    for (int k = 0; k < 2; k++) {
      sigaction(stop_signals[k], &heard_before[k], NULL);
      void (*was)(int) = heard_before[k].sa_handler;
      /* SA_SIGINFO's handler shares the union: a function either way unless DFL or IGN */
      if (heard == stop_signals[k] && was != SIG_DFL && was != SIG_IGN) raise(heard);
    }
  }
  return mend_limits_stop_heard();
}

/* The page faults this thread took since the last look, to be charged; the first look only
 * sets where counting starts (a look costs a system call: none for a call that allocates
 * little). */
static long new_faults(mend_limits *lim) {
#ifdef RUSAGE_THREAD
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
  long now = ru.ru_minflt + ru.ru_majflt;
  lim->since_look = 0;
  if (lim->faults_seen < 0) {
    lim->faults_seen = now;
    return 0;
  }
  /* Pages charged ahead (mend_limits_owe_pages) put faults_seen ahead of the count. */
  if (now <= lim->faults_seen) return 0;
  long d = now - lim->faults_seen;
  lim->faults_seen = now;
  return d;
#else
  (void)lim;
  return 0;
#endif
}

static int tripped_by_allocation(mend_limits *lim, double spent) {
  if (!mend_limits_spend(lim, spent)) return 0;
  /* The failed allocation raises a memory error that a pcall may catch, and the next one makes
   * Lua collect the whole state before it fails again: the hook raises at the next instruction
   * instead of up to MEND_LIMITS_EVERY later. */
  watch_poke_all();
  return 1;
}

/* The seconds a fresh page takes to fault in on this machine, as the deadline's refusal
 * counts them: the MEND_FAULT_SECONDS environment variable when it is a positive number
 * (tests), else measured once a process, at the first need, on MEND_FAULT_SAMPLE pages of a
 * fresh mapping aligned as a huge page (so that transparent huge pages, where the kernel maps
 * them, are in the figure), times MEND_FAULT_SHARE: a block is refused only if it would surely
 * end past its deadline.
 * The thread's CPU time is what is measured, so that a loaded machine's preemption does not
 * make faults look dearer than they are. */
static double fault_seconds = MEND_FAULT_SECONDS;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static atomic_int fault_known;

static double cpu_now(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void measure_faults(void) {
  const char *env = getenv("MEND_FAULT_SECONDS");
  if (env && *env) {
    char *end;
    double v = strtod(env, &end);
    if (*end == 0 && isfinite(v) && v > 0) {
      fault_seconds = v;
      return;
    }
  }
  size_t huge = (size_t)2 << 20, len = MEND_FAULT_SAMPLE * MEND_PAGE_BYTES;
  char *map = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return;
  volatile char *p = (char *)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
  double t0 = cpu_now();
  for (size_t i = 0; i < MEND_FAULT_SAMPLE; i++) p[i * MEND_PAGE_BYTES] = 1;
  double t1 = cpu_now();
  munmap(map, len + huge);
  if (t0 < 0 || t1 <= t0) return;
  double each = (t1 - t0) / MEND_FAULT_SAMPLE * MEND_FAULT_SHARE;
  fault_seconds = each < MEND_FAULT_SECONDS_MIN ? MEND_FAULT_SECONDS_MIN : each;
}

double mend_limits_fault_seconds(void) {
  pthread_once(&fault_once, measure_faults);
  atomic_store(&fault_known, 1);
  return fault_seconds;
}

/* The pages the measure faulted in are not the call's, whose thread made it: left out of its
 * count. */
static double page_seconds(mend_limits *lim) {
  if (atomic_load(&fault_known)) return fault_seconds;
#ifdef RUSAGE_THREAD
  struct rusage a, b;
  int counted = lim->faults_seen >= 0 && getrusage(RUSAGE_THREAD, &a) == 0;
  double each = mend_limits_fault_seconds();
  if (counted && getrusage(RUSAGE_THREAD, &b) == 0)
    lim->faults_seen += (b.ru_minflt + b.ru_majflt) - (a.ru_minflt + a.ru_majflt);
  return each;
#else
  (void)lim;
  return mend_limits_fault_seconds();
#endif
}

int mend_limits_owe_pages(mend_limits *lim, size_t pages) {
  if (lim->faults_seen < 0) new_faults(lim);
  if (lim->faults_seen >= 0) lim->faults_seen += (long)pages;
  /* Under a deadline, a block whose pages cannot be faulted in before it comes is refused, and
   * the call stopped for its timeout: filling it is one C call, which the watchdog cannot cut
   * short (a 64 MiB block: 16k faults, some 240 ms), and which would end past it anyway. */
  double each = !lim->tripped && lim->deadline > 0 && pages > 0 ? page_seconds(lim) : 0;
  if (!lim->tripped && lim->deadline > 0 && pages > 0 &&
      mend_host_now() + (double)pages * each >= lim->deadline) {
    lim->tripped = MEND_LIMIT_TIMEOUT;
    watch_poke_all();
    return 1;
  }
  return tripped_by_allocation(lim, (double)pages * MEND_FAULT_INSTRUCTIONS);
}

size_t mend_limits_fresh_pages(const void *p, size_t n) {
#if defined(__linux__)
  uintptr_t start = (uintptr_t)p & ~(uintptr_t)(MEND_PAGE_BYTES - 1);
  uintptr_t end = ((uintptr_t)p + n + MEND_PAGE_BYTES - 1) & ~(uintptr_t)(MEND_PAGE_BYTES - 1);
  size_t pages = (end - start) / MEND_PAGE_BYTES, fresh = 0;
  unsigned char vec[4096];
  for (size_t done = 0; done < pages; done += sizeof vec) {
    size_t k = pages - done < sizeof vec ? pages - done : sizeof vec;
    if (mincore((void *)(start + done * MEND_PAGE_BYTES), k * MEND_PAGE_BYTES, vec) != 0)
      return 0;
    for (size_t i = 0; i < k; i++) fresh += !(vec[i] & 1);
  }
  return fresh;
#else
  (void)p;
  (void)n;
  return 0;
#endif
}

int mend_limits_settle(mend_limits *lim) {
  size_t debt = lim->alloc_debt;
  lim->alloc_debt = 0;
  double spent = (double)(debt / MEND_ALLOC_BYTES_PER_INSTRUCTION);
  lim->since_look += debt;
  if (lim->faults_seen < 0 || lim->since_look >= MEND_FAULT_LOOK)
    spent += (double)new_faults(lim) * MEND_FAULT_INSTRUCTIONS;
  return tripped_by_allocation(lim, spent);
}

/* sizeof(Node) of Lua 5.4 with 64-bit values and pointers (lobject.h). */
#if LUA_VERSION_NUM == 504 && !LUA_32BITS
#define NODE_BYTES 24u
#else
#define NODE_BYTES 0u
#endif

/* The block lauxlib's buffers keep their text in is allocated afresh too, right after the
 * 16-byte full userdata that holds it (newbox, then resizebox, in lauxlib.c): 48 bytes with
 * Lua 5.4's tag of a userdata. */
#define BOX_TAG 7u
#define BOX_BYTES 48u

int mend_limits_refuse_table(mend_limits *lim, const void *ptr, size_t osize, size_t nsize) {
  int after_box = lim->after_box;
  lim->after_box = !ptr && osize == BOX_TAG && nsize == BOX_BYTES;
  /* Lua allocates a node vector afresh (luaM_newvector: no block, tag 0) before it moves a
   * single key, so refusing it fails the assignment with a memory error and changes nothing. */
  if (!NODE_BYTES || ptr || osize != 0 || after_box ||
      nsize <= (size_t)NODE_BYTES * MEND_TABLE_NODES || nsize % NODE_BYTES)
    return 0;
  size_t nodes = nsize / NODE_BYTES;
  if (nodes & (nodes - 1)) return 0;
  lim->refused_table = 1;
  return 1;
}

static void mark_stopped(lua_State *L) {
  mend_weak_table(L, &stopped_key);
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
  watch_poke_all();
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
