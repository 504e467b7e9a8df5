/*
 * engine: an engine's life (see engine.h). Owns making one (its Lua state and the limits on
 * that state's memory, its loop, timers, store, leases and writer thread, in that order) and
 * tearing it down (runs given back, handles closed, the store committed last), the accessors of
 * engine.h, the engine's log line and how it breaks down, run ids, and failpoints.
 *
 * Shape of the machine. A run moves by actions: ADVANCE (decide the next transition and write
 * it), EXECUTE and COMPENSATE (call into Lua), FINISH (let go of a run that ended). Every action
 * is queued behind the batch being written and runs only from the pump after that batch has
 * committed, which is how the write-ahead rule holds with one transaction per loop turn.
 * Timers and child processes resume coroutines directly: a wait changes nothing durable, and
 * what the resumed code decides is again written first and acted on after the commit.
 * The rest is in src/engine/, one concern a file, behind src/engine/engine_int.h: pump.c (the
 * pump and its batches: the write-ahead rule), drive.c (run, advance, tick: how a host drives
 * the pump), status.c (the one place statuses change, and the history they write), saga.c
 * (what outcomes mean), attempt.c (coroutines and every call into workflow code), ctx.c (what
 * a step sees of its run: ctx, its waits from Lua), admit.c
 * (breakers and caps), notify.c (alerts and events for the host), events.c (events sent to runs
 * and the steps that wait for them), exec.c, http.c, hostcall.c, load.c (workflows and their
 * versions), lock.c (a lock held by another process, waited out), recover.c, run.c (runs in
 * memory, and their start), worker.c (leases, fence, serving), repair.c.
 *
 * Must never: act on a run (that is the pump's, after a commit); change a status (status.c);
 * leave a handle open or a lease held at destroy.
 */
#include "engine.h"
#include "idset.h"
#include "stdfds.h"
#include "log.h"

#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "breaker.h"
#include "json.h"
#include "guard.h"
#include "lerror.h"
#include "refs.h"
#include "sandbox.h"
#include "timers.h"
#include "transition.h"
#include "util.h"

#include "engine/engine_int.h"

/* ---------------------------------------------------------------- small helpers */

void mend__set_str(char **slot, const char *s) {
  free(*slot);
  *slot = mend_dupstr(s);
}

void mend__breakdown(mend_engine *E, const char *fmt, ...) {
  if (E->broken) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(E->errmsg, sizeof E->errmsg, fmt, ap);
  va_end(ap);
  E->broken = 1;
  mend_timers_unref(&E->timers);   /* a waiting run's due time would hold a host's uv_run */
  mend_engine_log_line(E, "error", NULL, NULL, 0, "engine", E->errmsg);
}

/* A lock held by another process is no failure: nothing was lost, the batch is kept, and the
 * engine waits it out (lock.c). A batch lost with its connection is a lost batch, for a worker
 * and a client engine alike (reconnect.c). Anything else stops the engine. */
void mend__store_failed(mend_engine *E) {
  if (mend_store_locked(E->store)) mend__lock_wait(E);   /* the batch is kept, for later */
  else if (mend_store_conn_lost(E->store) && !E->draining) {
    E->store_failures++;   /* a batch lost: repair.c's repair_done asks */
    mend__store_lost(E);
  } else mend__breakdown(E, "%s", mend_store_errmsg(E->store));
}

/* Commits the batch now, outside the pump (an operation that must be durable before it
 * returns). The batch may hold the pump's own transitions too: if it fails they are rolled
 * back with it, so the engine stops rather than act on them. A lock held by another process
 * is waited for up to the store's default busy wait; then the operation fails, the engine
 * goes on, and the batch is committed once the lock goes. */
int mend__commit_now(mend_engine *E) {
  if (E->broken) return -1;
  mend_store_set_busy_wait(E->store, 0);
  int rc = mend__commit_counted(E);
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  if (rc) {
    if (rc == MEND_STORE_BUSY)
      snprintf(E->errmsg, sizeof E->errmsg, "%s", mend_store_errmsg(E->store));
    mend__store_failed(E);
    return -1;
  }
  return 0;
}

double mend_engine_now(const mend_engine *E) { return mend_timers_now(&E->timers); }
mend_store *mend_engine_store(mend_engine *E) { return E->store; }

json_t *mend_engine_prune(mend_engine *E, double before, const char *status, int dry_run) {
  mend_store_set_busy_wait(E->store, 0);
  json_t *v = mend_store_prune(E->store, before, status, dry_run);
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  return v;
}
lua_State *mend_engine_lua(mend_engine *E) { return E->L; }
uv_loop_t *mend_engine_loop(mend_engine *E) { return E->loop; }
/* A run whose run_finished a ticking host has not heard yet is still in flight to it. */
int mend_engine_in_flight(const mend_engine *E) { return E->in_flight + mend__finished_unheard(E); }
const char *mend_engine_error(const mend_engine *E) { return E->errmsg; }
void mend_engine_note_error(mend_engine *E, const char *msg) {
  if (!E->broken) snprintf(E->errmsg, sizeof E->errmsg, "%s", msg);
}

int mend__logs(const mend_engine *E, const char *level) {
  return E->cfg.log && mend_log_level_of(level) >= E->cfg.log_level;
}

void mend_engine_log_line(mend_engine *E, const char *level, const char *run, const char *step,
                          int attempt, const char *event, const char *message) {
  if (!mend__logs(E, level)) return;
  mend_log_record rec = {level, mend_engine_now(E), run, step, attempt, event, message};
  E->cfg.log(E->cfg.log_ud, &rec);
}

/* Crockford base32: time-ordered ids that sort by creation, with 30 random bits. Within one
 * millisecond an engine counts up from the first id's random part (as monotonic ULIDs do):
 * random parts alone collided, about once per million runs started 20k at a time (W4), and
 * the batch holding the second insert failed. */
void mend__new_run_id(mend_engine *E, char out[MEND_RUN_ID_LEN]) {
  static const char digits[] = "0123456789abcdefghjkmnpqrstvwxyz";
  const uint64_t rnd_mask = (1u << 30) - 1;
  uint64_t ms = (uint64_t)(mend_real_now() * 1000.0);
  uint64_t rnd;
  if (ms <= E->id_ms && E->id_rnd < rnd_mask) {
    ms = E->id_ms;
    rnd = E->id_rnd + 1;
  } else {
    if (ms <= E->id_ms) ms = E->id_ms + 1;   /* 2^30 ids in one millisecond: borrow the next */
    if (getrandom(&rnd, sizeof rnd, 0) != sizeof rnd) rnd = mend_rng_next(&E->rng);
    rnd &= rnd_mask >> 1;   /* room to count up */
  }
  E->id_ms = ms;
  E->id_rnd = rnd;
  for (int i = 9; i >= 0; i--) { out[i] = digits[ms & 31]; ms >>= 5; }
  for (int i = 15; i >= 10; i--) { out[i] = digits[rnd & 31]; rnd >>= 5; }
  out[16] = 0;
}

/* ---------------------------------------------------------------- failpoints */

#ifdef MEND_FAILPOINTS
/* MEND_FAILPOINT="name:N" kills the process with SIGKILL at the Nth time it passes `name`, so
 * crash tests can stop a worker at exactly the instant they mean to prove safe;
 * "name:N:panic" raises a Lua error there instead, at a point of mend__failpoint_lua's (outside
 * every protected call of the state of an engine that has one of its own), as a bug of mend's
 * would: the engine must break, not abort the process. Returns 1 (kill) or 2 (panic) at the
 * Nth pass, else 0. */
static int failpoint_reached(const char *name) {
  static const char *spec;
  static long countdown = -1;
  static char point[64];
  static int panic;
  if (!spec) {
    spec = getenv("MEND_FAILPOINT");
    if (!spec) spec = "";
    const char *colon = strchr(spec, ':');
    if (colon && (size_t)(colon - spec) < sizeof point) {
      memcpy(point, spec, (size_t)(colon - spec));
      countdown = atol(colon + 1);
      panic = strstr(colon + 1, ":panic") != NULL;
    }
  }
  if (countdown > 0 && strcmp(point, name) == 0 && --countdown == 0) return panic ? 2 : 1;
  return 0;
}

void mend__failpoint(const char *name) {
  if (failpoint_reached(name)) raise(SIGKILL);
}

void mend__failpoint_lua(lua_State *L, const char *name) {
  int hit = failpoint_reached(name);
  if (hit == 1) raise(SIGKILL);
  if (hit == 2) luaL_error(L, "failpoint %s: a Lua error outside every protected call", name);
}

/* MEND_PAUSE=name:FILE: at point `name` the process makes FILE and waits (up to 60 s) until it
 * is removed, so that a spec can act between two statements of mend's on cue (a worker's
 * claim between a repair's first look and its transaction). */
void mend__pause_point(const char *name) {
  const char *spec = getenv("MEND_PAUSE");
  const char *colon = spec ? strchr(spec, ':') : NULL;
  if (!colon || strlen(name) != (size_t)(colon - spec) || strncmp(spec, name, strlen(name)) != 0)
    return;
  FILE *f = fopen(colon + 1, "w");
  if (!f) return;
  fclose(f);
  struct timespec ts = {0, 10 * 1000 * 1000};
  for (int i = 0; i < 6000 && access(colon + 1, F_OK) == 0; i++) nanosleep(&ts, NULL);
}
#else
#define mend__failpoint(name) ((void)0)
#endif

/* ---------------------------------------------------------------- children of the loop */

void mend__child_link(mend_engine *E, child *c, int tag) {
  c->tag = tag;
  c->E = E;
  c->prev = NULL;
  c->next = E->children;
  if (E->children) E->children->prev = c;
  E->children = c;
}

/* The child's engine, unlinked; NULL if the engine is gone. */
mend_engine *mend__child_unlink(child *c) {
  mend_engine *E = c->E;
  if (!E) return NULL;
  if (c->prev) c->prev->next = c->next;
  else E->children = c->next;
  if (c->next) c->next->prev = c->prev;
  c->E = NULL;
  return E;
}

/* ---------------------------------------------------------------- life */

/* A loop of 20 MiB string.reps in a fresh process faulted every page of each block afresh:
 * 180 ms for a budget of 10M instructions where reused blocks take 30 ms. Blocks of at least
 * SPARE_MIN_BYTES are kept when freed, and given to an allocation of at least half their size;
 * at most SPARE_MAX_BYTES each and SPARE_TOTAL_BYTES in all, and only until the call that freed
 * them ends. Four: a turn of such a loop frees its buffer, and the collector the strings of
 * earlier turns two at a time. */
#define SPARE_MIN_BYTES ((size_t)1 << 20)
#define SPARE_MAX_BYTES ((size_t)64 << 20)
#define SPARE_TOTAL_BYTES ((size_t)128 << 20)
#define SPARES ((int)(sizeof ((mend_engine *)0)->spare / sizeof ((mend_engine *)0)->spare[0]))

static int keep_spare(mend_engine *E, void *p, size_t size) {
  if (size > SPARE_MAX_BYTES) return 0;
#ifdef __GLIBC__
  /* What the block holds, not what Lua asked for: a string's block (its bytes and a header)
   * then serves the buffer of the next string of the same length, and the other way round. */
  size = malloc_usable_size(p);
#endif
  int k = 0;
  size_t total = 0;
  for (int j = 0; j < SPARES; j++) {
    total += E->spare[j].size;
    if (E->spare[j].size < E->spare[k].size) k = j;   /* an empty slot has size 0 */
  }
  if (E->spare[k].size >= size || total - E->spare[k].size + size > SPARE_TOTAL_BYTES) return 0;
  free(E->spare[k].p);
  E->spare[k].p = p;
  E->spare[k].size = size;
  return 1;
}

/* The smallest kept block that holds size bytes and is not twice as large. */
static void *take_spare(mend_engine *E, size_t size) {
  int best = -1;
  for (int k = 0; k < SPARES; k++)
    if (E->spare[k].size >= size && E->spare[k].size / 2 <= size &&
        (best < 0 || E->spare[k].size < E->spare[best].size))
      best = k;
  if (best < 0) return NULL;
  void *p = E->spare[best].p;
  E->spare[best].p = NULL;
  E->spare[best].size = 0;
  return p;
}

void mend__drop_spare_blocks(mend_engine *E) {
  for (int k = 0; k < SPARES; k++) {
    if (!E->spare[k].p) continue;   /* an engine in its host's state keeps none: no call */
    free(E->spare[k].p);
    E->spare[k].p = NULL;
    E->spare[k].size = 0;
  }
}

/* The allocator of an engine's own Lua state: step code is held to cfg.memory_limit, the
 * engine's own bookkeeping is not (running out there would abort the host). */
static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  mend_engine *E = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    if (old <= MEND_BLOCKS_MAX) mend_blocks_alloc(&E->blocks, ptr, old, 0);
    else if (old < SPARE_MIN_BYTES || !keep_spare(E, ptr, old)) free(ptr);
    E->mem_used -= old;
    return NULL;
  }
  if (E->limit_memory && nsize > old) {
    if (E->mem_used + (nsize - old) > E->mem_limit) {
      E->over_limit = 1;
      if (E->alloc_limits) E->alloc_limits->refused_memory = 1;
      return NULL;
    }
    if (E->alloc_limits && E->cfg.sandbox &&
        mend_limits_refuse_table(E->alloc_limits, ptr, osize, nsize))
      return NULL;
    /* What an allocation is for (a concatenation, string.rep, a table grown) is work no count
     * hook sees, one instruction for any size: its bytes are charged, and it fails once the
     * call is over its limits. */
    if (E->alloc_limits && mend_limits_owe(E->alloc_limits, nsize - old)) return NULL;
    /* A large block grown gets its new pages mapped afresh (mremap, or the heap's top moved):
     * charged before, since a realloc cannot be undone. */
    if (E->alloc_limits && ptr && nsize >= SPARE_MIN_BYTES &&
        mend_limits_owe_pages(E->alloc_limits, (nsize - old) / MEND_PAGE_BYTES))
      return NULL;
  }
  /* A small block, or one made small, is the size classes' (blocks.c); so is a small block
   * grown large, which the C library moves as before. */
  if (nsize <= MEND_BLOCKS_MAX || (ptr && old <= MEND_BLOCKS_MAX)) {
    void *q = mend_blocks_alloc(&E->blocks, ptr, old, nsize);
    if (q) E->mem_used = E->mem_used - old + nsize;
    if (q && nsize > old) E->mem_allocated += nsize - old;
    return q;
  }
  void *p = !ptr && nsize >= SPARE_MIN_BYTES ? take_spare(E, nsize) : NULL;
  if (!p && !ptr && nsize >= SPARE_MIN_BYTES && E->limit_memory && E->alloc_limits) {
    /* A new large block is charged the pages it will fault before it is filled, and refused
     * when the call cannot pay for them. */
    p = malloc(nsize);
    if (p && mend_limits_owe_pages(E->alloc_limits, mend_limits_fresh_pages(p, nsize))) {
      free(p);
      return NULL;
    }
  }
  if (!p) p = realloc(ptr, nsize);
  if (p) E->mem_used = E->mem_used - old + nsize;
  if (p && nsize > old) E->mem_allocated += nsize - old;
  return p;
}

void *mend_engine_set_panic_exit(mend_engine *E, void *jmpbuf) {
  void *before = E->panic_exit;
  E->panic_exit = jmpbuf;
  return before;
}

int mend_engine_panicked(const mend_engine *E) { return E->panicked; }
int mend_engine_in_code(const mend_engine *E) { return E->in_code != NULL || E->loading_code > 0; }
const char *mend_engine_code_running(const mend_engine *E) {
  return E->in_code        ? E->in_code_what
         : E->loading_code ? "a workflow file's code as it loads"
                           : NULL;
}

/* An error outside every protected call of an engine's own state: Lua would abort the process
 * when this returns, so it goes back to the C API's entry point instead, the engine broken. */
static int on_panic(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  mend_engine *E = ud;
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(not a string)";
  mend__breakdown(E,
                  "mend: an error escaped every protected call of the engine's Lua state (a bug of "
                  "mend's, or memory running out): %s",
                  msg);
  /* The calls the error jumps over leave no limits behind them for the allocator or the
   * watchdog to touch, and no code marked running (which would refuse mend_engine_free for
   * ever). */
  E->limit_memory = 0;
  E->alloc_limits = NULL;
  E->in_code = NULL;
  E->loading_code = 0;
  mend_limits_watchdog_reset();
  mend_engine_run_left(E);   /* run()'s look, left started, would hold a host's loop */
  if (E->panic_exit) {
    E->panicked = 1;
    longjmp(*(jmp_buf *)E->panic_exit, 1);
  }
  fprintf(stderr, "%s\n", E->errmsg);
  return 0;
}

int mend_engine_sandbox_kind(const mend_engine *E) {
  return E->cfg.sandbox_by_mark ? 2 : E->cfg.sandbox ? 1 : 0;
}

/* The database as the engine's messages of the mark name it: its path, or "the PostgreSQL
 * database" (a URI may hold a password). */
static const char *db_named(const mend_engine *E) {
  const char *path = E->cfg.db_path ? E->cfg.db_path : ":memory:";
  return mend_store_is_postgres(path) ? "the PostgreSQL database" : path;
}

void mend_engine_sandbox_by_mark_note(const mend_engine *E, char *buf, size_t len) {
  snprintf(buf, len, "%s is marked sandboxed (a sandboxed engine opened it): this engine runs "
           "its workflows' code sandboxed (no io, os or mend.exec; mend.http only to "
           "http_allow's hosts); to run it trusted, open it with no_sandbox (--no-sandbox), or "
           "clear the mark (mend db trust)", db_named(E));
}

/* The database's sandbox mark (store.h: sandbox_mark) against the engine's sandbox: a sandboxed
 * engine marks it, so that the code of the workflows it holds is never run unsandboxed by a
 * command or a host that did not say so; an engine without sandbox on a marked database is
 * refused (its maker makes it again sandboxed) unless told no_sandbox, then it warns. The mark
 * is the host's to see and the workflow's code never reaches the store: sandboxed, it has no
 * io, no mend.engine. 0, or -1 with err and why. */
static int sandbox_mark(mend_engine *E, mend_refusal *why, char *err, int errlen) {
  if (!E->cfg.db_path || strcmp(E->cfg.db_path, ":memory:") == 0)
    return 0;   /* nothing of it outlives this engine */
  int marked = mend_store_sandbox_mark(E->store, 0);
  if (marked >= 0 && E->cfg.sandbox && !marked) {
    marked = mend_store_sandbox_mark(E->store, 1);
    /* for good: a trusted fleet learns it only as its engines open sandboxed */
    if (marked > 0)
      mend_engine_log_line(E, "warn", NULL, NULL, 0, "sandbox",
                           "the database is marked sandboxed now (this engine is sandboxed): "
                           "every engine that opens it from now on runs its workflows "
                           "sandboxed unless told no_sandbox (--no-sandbox); mend db trust "
                           "clears the mark");
  }
  if (marked < 0) {
    *why = MEND_REFUSED_STORE;
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    return -1;
  }
  if (marked && E->cfg.sandbox_by_mark) {
    char msg[700];
    mend_engine_sandbox_by_mark_note(E, msg, sizeof msg);
    mend_engine_log_line(E, "warn", NULL, NULL, 0, "sandbox", msg);
  }
  if (!marked || E->cfg.sandbox) return 0;
  if (!E->cfg.no_sandbox) {
    *why = MEND_REFUSED_SANDBOX;
    snprintf(err, (size_t)errlen, "%s holds workflows a sandboxed engine ran (the database is "
             "marked sandboxed): open it sandboxed, or say no_sandbox (--no-sandbox) to run "
             "their code with the host's powers", db_named(E));
    return -1;
  }
  mend_engine_log_line(E, "warn", NULL, NULL, 0, "sandbox",
                       "the database is marked sandboxed (a sandboxed engine ran its "
                       "workflows) and this engine runs their code unsandboxed (no_sandbox)");
  return 0;
}

mend_engine *mend_engine_create(lua_State *host, const mend_engine_config *cfg, char *err,
                                int errlen, mend_refusal *why) {
  mend_refusal ignored;
  if (!why) why = &ignored;
  /* before the loop, its wake-ups or the store open a descriptor that would take 0, 1 or 2 */
  int closed = mend_fill_standard_fds();
  if (closed >= 0) {
    static const char *const names[] = {"stdin", "stdout", "stderr"};
    snprintf(err, (size_t)errlen, "descriptor %d (%s) is closed and /dev/null cannot be opened "
             "on it (%s): the engine's loop would take that number, and libuv aborts the "
             "process when it closes it; open it before making an engine", closed,
             names[closed], strerror(errno));
    *why = MEND_REFUSED_STATE;
    return NULL;
  }
  /* A game host keeps its frame's core to itself by putting mend's threads elsewhere: they
   * would otherwise inherit the affinity of the host's thread that makes the engine. */
  mend_cpus cpus;
  if (mend_cpus_parse(cfg->thread_cpus, "thread_cpus", &cpus, err, (size_t)errlen) != 0) {
    *why = MEND_REFUSED_INVALID;
    return NULL;
  }
  *why = MEND_REFUSED_NOMEM;
  mend_engine *E = calloc(1, sizeof *E);
  if (!E) { snprintf(err, (size_t)errlen, "out of memory"); return NULL; }
  E->cfg = *cfg;
  E->cfg.thread_cpus = NULL;   /* the host's string, read above: not kept */
  if (!E->cfg.log_level) E->cfg.log_level = MEND_LOG_INFO;
  E->cfg.alert_command = cfg->alert_command ? mend_dupstr(cfg->alert_command) : NULL;
  E->cfg.http_allow = cfg->http_allow ? mend_dupstr(cfg->http_allow) : NULL;
  if (!host) {
    E->mem_limit = cfg->memory_limit > 0 ? cfg->memory_limit : (size_t)-1;
    mend_blocks_init(&E->blocks);
    host = E->owned_state = lua_newstate(limited_alloc, E);
    if (!host) {   /* the half-made state freed its blocks into the size classes on closing */
      mend_blocks_drop(&E->blocks);
      free((char *)E->cfg.alert_command);
      free((char *)E->cfg.http_allow);
      free(E);
      snprintf(err, (size_t)errlen, "out of memory");
      return NULL;
    }
    luaL_openlibs(host);
    if (cfg->open_module) {   /* what `require "mend"` finds: the binding is the C API's */
      luaL_requiref(host, "mend.core", cfg->open_module, 0);
      lua_pop(host, 1);
    }
    if (cfg->lua_path) {
      lua_getglobal(host, "package");
      lua_getfield(host, -1, "path");
      lua_pushfstring(host, "%s/?.lua;%s/?/init.lua;%s", cfg->lua_path, cfg->lua_path,
                      lua_tostring(host, -1));
      lua_setfield(host, -3, "path");
      lua_pop(host, 2);
    }
    lua_atpanic(host, on_panic);
    if (cfg->sandbox) {
      mend__print_install(E, host);   /* before the sandbox's print wraps it */
      mend_sandbox_prepare(host);
    }
  }
  if (cfg->buffered_print && !E->print_out) mend__print_install(E, host);
  lua_rawgeti(host, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(host, -1);
  lua_pop(host, 1);
  E->L = lua_newthread(main);
  E->thread_ref = luaL_ref(main, LUA_REGISTRYINDEX);
  mend_refs_init(&E->refs, E->L);
  mend_threads_open(E->L);
  /* Typed errors need their metatable even when the module was not required yet. */
  mend_lerror_open(E->L);
  if (cfg->loop) E->loop = cfg->loop;
  else {
    uv_loop_init(&E->own_loop);
    E->loop = &E->own_loop;
    E->owns_loop = 1;
  }
  E->pump = malloc(sizeof *E->pump);
  uv_idle_init(E->loop, E->pump);
  E->pump->data = E;
  mend_timers_init(&E->timers, E->loop, cfg->virtual_clock);
  mend__park_init(E);
  uint64_t seed = cfg->seed;
  if (!cfg->has_seed && getrandom(&seed, sizeof seed, 0) != sizeof seed)
    seed = (uint64_t)mend_real_now();
  mend_rng_seed(&E->rng, seed);
  E->alerts = json_array();
  mend__make_ctx_metatable(E);
  E->lease_seconds = cfg->lease_seconds > 0 ? cfg->lease_seconds : 30;
  if (E->cfg.grace_seconds <= 0) E->cfg.grace_seconds = 10;
  char hostname[64] = "host";
  gethostname(hostname, sizeof hostname - 1);
  uint32_t tag;
  if (getrandom(&tag, sizeof tag, 0) != sizeof tag) tag = (uint32_t)mend_rng_next(&E->rng);
  snprintf(E->owner, sizeof E->owner, "%s:%d:%08x", hostname, (int)getpid(), tag);
  E->lease_timer = malloc(sizeof *E->lease_timer);
  uv_timer_init(E->loop, E->lease_timer);
  E->lease_timer->data = E;
  uint64_t renew_ms = (uint64_t)(E->lease_seconds * 1000.0 / 3.0);
  uv_timer_start(E->lease_timer, mend__renew_leases, renew_ms ? renew_ms : 1,
                 renew_ms ? renew_ms : 1);
  uv_unref((uv_handle_t *)E->lease_timer);   /* leases alone must not keep a host's loop alive */
  E->wakeup = malloc(sizeof *E->wakeup);
  uv_async_init(E->loop, E->wakeup, mend__on_wakeup);
  E->wakeup->data = E;
  uv_unref((uv_handle_t *)E->wakeup);
  E->events = json_array();
  E->alerts_handed = json_array();
  E->events_handed = json_array();
  E->events_due = json_array();
  char serr[600];
  const char *db = cfg->db_path ? cfg->db_path : ":memory:";
  E->store = cfg->db_existing
                 ? mend_store_open_existing(db, cfg->durability, NULL, serr, sizeof serr)
                 : mend_store_open(db, cfg->durability, serr, sizeof serr);
  if (!E->store) {
    *why = MEND_REFUSED_STORE;
    snprintf(err, (size_t)errlen, "%s", serr);
    mend_engine_destroy(E);
    return NULL;
  }
  mend_store_set_worker(E->store, E->owner);
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  mend_store_set_thread_cpus(E->store, &cpus);
  /* Every lease this engine takes from now on lasts at least this long. */
  E->fence_until = mend__lease_until(E);
  if (mend_store_set_fence(E->store, E->owner, E->lease_seconds)) {
    *why = MEND_REFUSED_STORE;
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    mend_engine_destroy(E);
    return NULL;
  }
  if (sandbox_mark(E, why, err, errlen)) {
    mend_engine_destroy(E);
    return NULL;
  }
#ifdef MEND_FAILPOINTS
  mend_store_set_commit_hook(E->store, mend__failpoint);
#endif
  /* Statements and commits on a thread of their own, while the loop goes on with the next
   * batch: for an engine on its own loop with a real clock and a file (a virtual clock wants
   * every turn to end in a commit). */
  if (cfg->writer_thread && !cfg->virtual_clock && !cfg->loop) {
    int rc = mend_store_start_writer(E->store, mend__writer_done, E);
    if (rc < 0) {
      *why = MEND_REFUSED_STORE;
      snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
      mend_engine_destroy(E);
      return NULL;
    }
    E->writer = rc == 0;
  }
  return E;
}

static void free_on_close(uv_handle_t *h) { free(h); }

/* A handle still open at destroy belongs to a child process abandoned mid-flight (its pipes
 * and process handle): closing it the usual way frees its request with the last one. */

static void close_stray(uv_handle_t *h, void *arg) {
  (void)arg;
  if (uv_is_closing(h) || !h->data) return;
  uv_close(h,
           *(int *)h->data == CHILD_ALERT ? mend__alert_handle_closed : mend__exec_handle_closed);
}

void mend_engine_destroy(mend_engine *E) {
  if (!E) return;
  E->destroying = 1;
  mend__tp_close(E);
  mend__serve_close(E);   /* a serve a panic of its own state jumped out of left them open */
  /* Runs left unfinished stay in the store as they are; their leases are given back so that
   * another engine can take them at once. */
  if (E->store && !E->broken)
    for (mend_run *r = E->runs; r; r = r->next)
      if (mend_store_release(E->store, r->id, E->owner)) { mend__store_failed(E); break; }
  if (E->store && !E->broken) mend__park_release(E);
  while (E->runs) mend__run_free(E->runs);
  mend__park_close(E);
  mend__http_close(E);
  if (E->store && !E->broken) mend_store_commit(E->store);
  mend__durable_close(E);
  mend_store_close(E->store);
  for (mend_workflow *wf = E->workflows, *next; wf; wf = next) {
    next = wf->next;
    mend_workflow_free(E->L, wf);
  }
  mend_engine_load_failures_free(E);
  mend__breakers_recorded_drop(E, 1);
  mend__repairs_recorded_drop(E, 1);
  for (struct mend_breaker_slot *s = E->breakers, *next; s; s = next) {
    next = s->next;
    free(s->key);
    free(s);
  }
  /* Children still running may report after the engine is gone (on a host's loop). */
  while (E->children) mend__child_unlink(E->children);
  json_decref(E->alerts);
  json_decref(E->events);
  json_decref(E->alerts_handed);
  json_decref(E->events_handed);
  /* not heard, as before a batch's events were: a host that waits for every end ticks until
   * in_flight_count says 0 (mend.h), and no on_event comes from inside a free */
  json_decref(E->events_due);
  free(E->finished_at);
  mend__forget_host_calls(E);
  mend__forget_sent_events(E);
  mend__looks_forget(E);
  mend__runmap_free(E);
  if (E->wakeup) uv_close((uv_handle_t *)E->wakeup, free_on_close);
  mend_timers_close(&E->timers);
  if (E->lease_timer) uv_close((uv_handle_t *)E->lease_timer, free_on_close);
  if (E->lock_timer) uv_close((uv_handle_t *)E->lock_timer, free_on_close);
  if (E->run_look) uv_close((uv_handle_t *)E->run_look, free_on_close);
  mend__print_close(E);
  uv_close((uv_handle_t *)E->pump, free_on_close);
  if (E->owns_loop) {
    uv_run(&E->own_loop, UV_RUN_NOWAIT);   /* let close callbacks run */
    while (uv_loop_close(&E->own_loop) == UV_EBUSY) {
      uv_walk(&E->own_loop, close_stray, NULL);
      uv_run(&E->own_loop, UV_RUN_NOWAIT);
    }
  } else {
    uv_run(E->loop, UV_RUN_NOWAIT);
  }
  luaL_unref(E->L, LUA_REGISTRYINDEX, E->ctx_mt_ref);
  mend_refs_free(&E->refs, E->L);
  luaL_unref(E->L, LUA_REGISTRYINDEX, E->thread_ref);
  if (E->owned_state) lua_close(E->owned_state);
  mend_blocks_drop(&E->blocks);
  mend__drop_spare_blocks(E);
  mend__free_spare_attempts(E);
  free((char *)E->cfg.alert_command);
  free((char *)E->cfg.http_allow);
  mend_textbuf_free(&E->event_detail);
  free(E);
}
