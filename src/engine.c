/*
 * engine: runs workflows (see engine.h).
 *
 * Shape of the machine. A run moves by actions: ADVANCE (decide the next transition and write
 * it), EXECUTE and COMPENSATE (call into Lua), FINISH (let go of a run that ended). Every action
 * is queued behind the batch being written and runs only from the pump after that batch has
 * committed, which is how the write-ahead rule holds with one transaction per loop turn.
 * Timers and child processes resume coroutines directly: a wait changes nothing durable, and
 * what the resumed code decides is again written first and acted on after the commit.
 *
 * Must never: call Lua while a batch that announces that call is uncommitted; block; apply a
 * transition the table in transition.c refuses.
 */
#include "engine.h"
#include "idset.h"
#include "log.h"

#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#include "lmend.h"
#include "refs.h"
#include "sandbox.h"
#include "timers.h"
#include "transition.h"
#include "util.h"

#if LUA_VERSION_RELEASE_NUM >= 50406
#define mend_closethread(L, from) lua_closethread((L), (from))
#else
#define mend_closethread(L, from) ((void)(from), lua_resetthread(L))
#endif

/* Coroutines of steps are found again from Lua through this registry table: thread -> run. */
#define THREADS_KEY "mend.threads"
/* Actions one loop turn may do before it commits and polls again. */
#define MAX_TURN_ACTIONS 2048
/* Calls into workflow code outside attempts (a file's top level as it loads, a step's
 * idempotency_key) get this long in real seconds, with an instruction budget or without. */
#define CALL_SECONDS 10.0
/* What the engine may spend on the text of a value that workflow code raised. */
#define DESCRIBE_BUDGET 1000000
#define DESCRIBE_SECONDS 0.05
/* Allocations from this size on are charged to the call's limits, at this many bytes an
 * instruction (what filling fresh pages costs against one Lua instruction). */
#define ALLOC_CHARGED (64u << 10)
#define ALLOC_BYTES_PER_INSTRUCTION 32.0

/* Child processes of two kinds share the loop; the tag tells their handles apart at destroy.
 * Each starts with this header: the engine lets go of its live children when destroyed (E is
 * then NULL), since a child's callbacks may come after the engine is gone on a host's loop. */
enum { CHILD_EXEC = 1, CHILD_ALERT };

typedef struct child {
  int tag;
  struct mend_engine *E;
  struct child *prev, *next;
} child;

typedef enum action { ACT_NONE, ACT_ADVANCE, ACT_EXECUTE, ACT_COMPENSATE, ACT_FINISH } action;
typedef enum wait_kind {
  WAIT_NONE, WAIT_RETRY, WAIT_BREAKER, WAIT_SLEEP, WAIT_COMP_RETRY, WAIT_STEP_SLEEP
} wait_kind;

/* Runs waiting for a concurrency slot, first come first served; a run is in one at most. */
typedef struct run_fifo {
  struct mend_run *head, *tail;
} run_fifo;

struct mend_breaker_slot {
  run_fifo waiting;       /* attempts held back by p.max_concurrency */
  int in_flight;          /* attempts through this breaker now */
  char *key;
  mend_breaker b;
  mend_breaker_policy p;
  struct mend_breaker_slot *next;
};

/* Kept for every step of every run in memory, parked ones too (a waiting run must cost at
 * most 1 KiB): small fields are small, and the default key "<run id>/<step>" is made when
 * needed rather than kept. */
typedef struct step_rt {
  mend_step_status status;
  int attempts, comp_attempts;
  unsigned custom_key : 1;        /* idem_key is the step's own key(ctx), not the default */
  unsigned key_ready : 1;
  unsigned compensate_self : 1;   /* failed with a compensable error: it is compensated too */
  unsigned slept : 1;             /* its `sleep` wait is over */
  unsigned has_row : 1;           /* the store has its row (written at its first transition) */
  char *idem_key;                 /* a custom key only; NULL: the default */
  char *result;                   /* JSON */
  char *error;
  double due, last_delay;
} step_rt;

typedef struct exec_req exec_req;

/* Ordered by size, so that a parked run (most of them, with 1M waiting) pays no padding. */
struct mend_run {
  mend_engine *E;
  mend_workflow *wf;
  step_rt *steps;
  char *error;
  const char *reason;     /* why it failed for good: fatal, error, attempts_exhausted, ... */
  /* the attempt in flight */
  lua_State *co;
  mend_limits limits;     /* its instruction budget and real-time deadline */
  double last_at;         /* the time of its last history row: none is written before it */
  mend_timer wait, deadline;
  exec_req *exec;
  mend_host_call *host_call;
  mend_run *tnext;        /* waiting for a concurrency slot */
  run_fifo *waiting_in;   /* which list, if any */
  struct mend_breaker_slot *held; /* the breaker whose concurrency the attempt counts in */
  /* queues */
  mend_run *qnext;
  unsigned long wait_seq;   /* the batch its next action waits for */
  mend_run *prev, *next;  /* runs in flight */
  mend_run_status status;
  int input_ref, results_ref;   /* in E->refs, shard ref_shard */
  int ref_shard;
  int cur;                /* step going forward, or step being compensated going back */
  int fail_step;
  int co_ref;
  int history_seq;        /* the last row of its history: this engine numbers the next ones */
  wait_kind wait_kind;
  action next_action;
  unsigned char attention;
  unsigned char waiting;      /* yielded inside mend.sleep / mend.exec */
  unsigned char queued;       /* in the queue behind the current batch */
  unsigned char lost;         /* another worker took it: let go when its queued action comes up */
  unsigned char admitted;     /* its breaker let the next attempt through already (on_wait) */
  unsigned char cancel_asked; /* rebuilt with a cancel requested: whoever takes it cancels it */
  char id[MEND_RUN_ID_LEN];
};

struct mend_engine {
  lua_State *L;           /* the engine's own thread of the host state */
  int thread_ref;
  lua_State *owned_state; /* set when the engine made its own Lua state */
  uv_loop_t *loop;
  uv_loop_t own_loop;
  int owns_loop;
  uv_idle_t *pump;
  mend_timers timers;
  mend_store *store;
  mend_rng rng;
  uint64_t id_ms, id_rnd;   /* the last run id made (new_run_id) */
  mend_workflow *workflows;
  struct mend_breaker_slot *breakers;
  mend_run *runs;
  int in_flight;
  /* Runs whose next action waits for a batch to be durable, by the batch's number (the store's
   * open_seq when queued) modulo 4: at most the open batch and the one on the writer thread
   * are not durable, and a run found too early is put back (wait_seq). */
  struct { mend_run *head, *tail; } waiting[4];
  unsigned long moved_seq;   /* lists of batches up to this one were moved to ready */
  mend_run *ready_head, *ready_tail;   /* durable: their actions may run */
  int writer;             /* a writer thread commits batches (mend_store_start_writer) */
  json_t *alerts_handed, *events_handed;   /* of the batch on the writer thread */
  unsigned long handed_seq;  /* that batch's number */
  json_t *alerts;         /* fired after the batch that records them commits */
  int externals;          /* child processes in flight */
  int auto_advance;
  int broken;
  char errmsg[1024];
  int ctx_mt_ref;
  mend_refs refs;         /* the runs' long-lived Lua values (refs.h) */
  mend_engine_config cfg;
  /* leases and serving */
  char owner[96];         /* this engine as a lease holder: host:pid:random */
  double lease_seconds;
  double fence_until;     /* our leases last at least until then (the last renewal's) */
  int fence_was_late;     /* a batch began after our leases ran out, at least once */
  uv_timer_t *lease_timer, *poll_timer;
  uint64_t poll_ms;
  uv_signal_t *signals[2];
  int serving, draining, attempts;
  int max_in_flight;
  double grace_deadline;
  double next_reload;     /* when a serving engine next reads breakers and cancel requests */
  double next_dead_check; /* when it next looks for dead workers on this host */
  double next_thorough_look;   /* claimable(): when it next walks every run held */
  double turn_deadline;   /* a ticking host's budget for this turn; 0: none */
  run_fifo throttled;     /* attempts waiting under the global max_concurrency */
  json_t *events;         /* for cfg.on_event, fired after the batch commits */
  struct host_fn *hosts;
  struct mend_host_call *open_calls;
  uv_async_t *wakeup;
  size_t mem_used, mem_limit;
  int limit_memory;       /* 1 while step code runs: only it is held to the limit */
  mend_limits *alloc_limits; /* the limits of the call running, charged for large allocations */
  int over_limit;         /* an allocation was refused for the memory limit: collect after */
  int alert_commands;     /* alert commands still running */
  child *children;        /* child processes whose callbacks may still come */
  uv_timer_t *checkpoint_timer;
  uv_work_t checkpoint_work;
  int checkpointing;      /* a checkpoint runs on a worker thread */
  int wal_frames;         /* the WAL's length, as the last checkpoint found it */
  int wal_copied;         /* of which copied into the database */
  int checkpoint_from;    /* the WAL's length when the last checkpoint began */
  int wal_catch_up;       /* the WAL is long: copy the rest of it between two batches */
  int destroying;
  void *panic_exit;       /* a jmp_buf of the C API's entry point that is running */
  int panicked;
  /* Another process holds the database's write lock (lock_wait): the batch is kept and its
   * commit tried again at lock_retry_at, after lock_delay, doubled at each try up to 1 s. */
  double lock_since;      /* 0: not locked */
  double lock_warned;     /* when the last warning was logged */
  double lock_retry_at, lock_delay;
  uv_timer_t *lock_timer;
  int fence_recheck;      /* a match of our runs against the store's was cut short by a lock */
};

/* ---------------------------------------------------------------- small helpers */

static void set_str(char **slot, const char *s) {
  free(*slot);
  *slot = mend_dupstr(s);
}

static void breakdown(mend_engine *E, const char *fmt, ...) {
  if (E->broken) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(E->errmsg, sizeof E->errmsg, fmt, ap);
  va_end(ap);
  E->broken = 1;
  mend_engine_log_line(E, "error", NULL, NULL, 0, "engine", E->errmsg);
}

static void lock_wait(mend_engine *E);

/* A lock held by another process is no failure: nothing was lost, the batch is kept, and the
 * engine waits it out (lock_wait). Anything else stops the engine. */
static void store_failed(mend_engine *E) {
  if (mend_store_locked(E->store)) lock_wait(E);
  else breakdown(E, "%s", mend_store_errmsg(E->store));
}

/* How long one statement of the loop waits for another process's lock; longer locks are
 * waited out on a timer (lock_wait), so that the loop goes on. */
#define LOOP_BUSY_MS 100
/* Warnings while the lock lasts, this far apart (seconds). */
#define LOCK_WARN_EVERY 3.0

/* Commits the batch now, outside the pump (an operation that must be durable before it
 * returns). The batch may hold the pump's own transitions too: if it fails they are rolled
 * back with it, so the engine stops rather than act on them. A lock held by another process
 * is waited for up to the store's default busy wait; then the operation fails, the engine
 * goes on, and the batch is committed once the lock goes. */
static int commit_now(mend_engine *E) {
  if (E->broken) return -1;
  mend_store_set_busy_wait(E->store, 0);
  int rc = mend_store_commit(E->store);
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  if (rc) {
    if (rc == MEND_STORE_BUSY)
      snprintf(E->errmsg, sizeof E->errmsg, "%s", mend_store_errmsg(E->store));
    store_failed(E);
    return -1;
  }
  return 0;
}

double mend_engine_now(const mend_engine *E) { return mend_timers_now(&E->timers); }
mend_store *mend_engine_store(mend_engine *E) { return E->store; }
lua_State *mend_engine_lua(mend_engine *E) { return E->L; }
uv_loop_t *mend_engine_loop(mend_engine *E) { return E->loop; }
int mend_engine_in_flight(const mend_engine *E) { return E->in_flight; }
const char *mend_engine_error(const mend_engine *E) { return E->errmsg; }
void mend_engine_note_error(mend_engine *E, const char *msg) {
  if (!E->broken) snprintf(E->errmsg, sizeof E->errmsg, "%s", msg);
}

static int logs(const mend_engine *E, const char *level) {
  return E->cfg.log && mend_log_level_of(level) >= E->cfg.log_level;
}

void mend_engine_log_line(mend_engine *E, const char *level, const char *run, const char *step,
                          int attempt, const char *event, const char *message) {
  if (!logs(E, level)) return;
  mend_log_record rec = {level, mend_engine_now(E), run, step, attempt, event, message};
  E->cfg.log(E->cfg.log_ud, &rec);
}

/* Crockford base32: time-ordered ids that sort by creation, with 30 random bits. Within one
 * millisecond an engine counts up from the first id's random part (as monotonic ULIDs do):
 * random parts alone collided, about once per million runs started 20k at a time (W4), and
 * the batch holding the second insert failed. */
static void new_run_id(mend_engine *E, char out[MEND_RUN_ID_LEN]) {
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
 * crash tests can stop a worker at exactly the instant they mean to prove safe. */
static void failpoint(const char *name) {
  static const char *spec;
  static long countdown = -1;
  static char point[64];
  if (!spec) {
    spec = getenv("MEND_FAILPOINT");
    if (!spec) spec = "";
    const char *colon = strchr(spec, ':');
    if (colon && (size_t)(colon - spec) < sizeof point) {
      memcpy(point, spec, (size_t)(colon - spec));
      countdown = atol(colon + 1);
    }
  }
  if (countdown > 0 && strcmp(point, name) == 0 && --countdown == 0) raise(SIGKILL);
}
#else
#define failpoint(name) ((void)0)
#endif

/* ---------------------------------------------------------------- concurrency caps */

static void fifo_push(run_fifo *f, mend_run *r) {
  r->tnext = NULL;
  r->waiting_in = f;
  if (f->tail) f->tail->tnext = r;
  else f->head = r;
  f->tail = r;
}

static mend_run *fifo_pop(run_fifo *f) {
  mend_run *r = f->head;
  if (!r) return NULL;
  f->head = r->tnext;
  if (!f->head) f->tail = NULL;
  r->waiting_in = NULL;
  return r;
}

/* ---------------------------------------------------------------- the pump */

static void pump_cb(uv_idle_t *h);

static int any_waiting(const mend_engine *E) {
  for (int k = 0; k < 4; k++)
    if (E->waiting[k].head) return 1;
  return 0;
}

/* Work a pump turn would do now: actions queued, a batch to commit or being committed, or
 * events and alerts waiting for the commit that comes before them (a run's last turn leaves
 * those behind). */
static int has_ready_work(const mend_engine *E) {
  return E->ready_head || any_waiting(E) || mend_store_batch_open(E->store) ||
         json_array_size(E->events) || json_array_size(E->alerts) ||
         (E->writer && (mend_store_writer_busy(E->store) || json_array_size(E->alerts_handed) ||
                        json_array_size(E->events_handed)));
}

/* Work a turn can do now. While the writer thread holds the only batch there is, a turn would
 * find nothing to do: the thread wakes the loop when it is done (on_wakeup). */
static int lock_waiting(const mend_engine *E) {
  return E->lock_since > 0 && mend_real_now() < E->lock_retry_at;
}

static int turn_has_work(const mend_engine *E) {
  int writing = (E->writer && mend_store_writer_busy(E->store)) || lock_waiting(E);
  return E->ready_head || (!writing && has_ready_work(E));
}

/* With nothing else to do, a run() on the virtual clock moves it to the next timer. */
static int virtual_timers_to_advance(const mend_engine *E) {
  return E->timers.is_virtual && E->auto_advance && !E->externals && E->timers.count;
}

static void kick(mend_engine *E) {
  if (E->destroying) return;   /* the pump handle is closing */
  if (!uv_is_active((uv_handle_t *)E->pump)) uv_idle_start(E->pump, pump_cb);
}

static void child_link(mend_engine *E, child *c, int tag) {
  c->tag = tag;
  c->E = E;
  c->prev = NULL;
  c->next = E->children;
  if (E->children) E->children->prev = c;
  E->children = c;
}

/* The child's engine, unlinked; NULL if the engine is gone. */
static mend_engine *child_unlink(child *c) {
  mend_engine *E = c->E;
  if (!E) return NULL;
  if (c->prev) c->prev->next = c->next;
  else E->children = c->next;
  if (c->next) c->next->prev = c->prev;
  c->E = NULL;
  return E;
}

static void append(mend_run **head, mend_run **tail, mend_run *r) {
  r->qnext = NULL;
  if (*tail) (*tail)->qnext = r;
  else *head = r;
  *tail = r;
}

/* The run's next action is `a`, once what it wrote so far is durable. */
static void queue(mend_run *r, action a) {
  mend_engine *E = r->E;
  unsigned long seq = mend_store_open_seq(E->store);
  r->next_action = a;
  if (r->queued) {
    /* already in a list: only its action changes, and it waits for this batch too */
    if (r->wait_seq < seq) r->wait_seq = seq;
    return;
  }
  r->queued = 1;
  r->wait_seq = seq;
  append(&E->waiting[seq % 4].head, &E->waiting[seq % 4].tail, r);
  kick(E);
}

/* The run's next action is `a` in this turn or the next, without waiting for a commit: for an
 * action that only writes (the write-ahead rule holds its execute back, not its writes). */
static void queue_now(mend_run *r, action a) {
  mend_engine *E = r->E;
  r->next_action = a;
  if (r->queued) return;
  r->queued = 1;
  r->wait_seq = 0;
  append(&E->ready_head, &E->ready_tail, r);
  kick(E);
}

static void arm(mend_run *r, mend_timer *t, double due) {
  mend_engine *E = r->E;
  if (mend_timer_arm(&E->timers, t, due)) { breakdown(E, "out of memory arming a timer"); return; }
  if (E->timers.is_virtual) kick(E);
  else if (t->slot == 1) mend_timers_sync(&E->timers);   /* it is the earliest */
}

/* ---------------------------------------------------------------- writes */

static const char *step_name(mend_run *r, int i) { return r->wf->steps[i].name; }

/* The step's row as it is now: the whole row at its first transition (a step not begun has
 * none: schema 4), an update after. The key is written only when it is the step's own: the
 * default one (run_id/name) is what a row without one reads as (schema 5). An attempt that
 * begins writes no row: its `-> running` history row says so, and the row is written once the
 * attempt ends (schema 6: one row write a step instead of two; 20% of the writer thread's
 * work in W1). */
static void write_step(mend_run *r, int i) {
  step_rt *st = &r->steps[i];
  /* ...but for a key of the step's own just asked for: it is stored before the attempt uses it,
   * as the same key must come back after a crash (ensure_key asks once). */
  if (st->status == MEND_STEP_RUNNING && (st->has_row || !st->custom_key)) return;
  int new_row = !st->has_row;
  const char *idem_key = st->custom_key ? st->idem_key : NULL;
  mend_step_rec rec = {
    .run_id = r->id, .idx = i, .name = step_name(r, i), .status = mend_step_status_name(st->status),
    .attempts = st->attempts, .comp_attempts = st->comp_attempts, .idem_key = idem_key,
    .custom_key = st->custom_key, .result = st->result, .error = st->error, .due = st->due,
    .last_delay = st->last_delay, .updated = mend_engine_now(r->E), .slept = st->slept};
  if ((new_row ? mend_store_put_step : mend_store_update_step)(r->E->store, &rec)) store_failed(r->E);
  else st->has_row = 1;
}

/* A run carried on by another engine (a virtual clock elsewhere, a clock set back) keeps its
 * history in order: no row is older than the one before. */
static double history_time(mend_run *r) {
  double now = mend_engine_now(r->E);
  if (now > r->last_at) r->last_at = now;
  return r->last_at;
}

static void history(mend_run *r, const char *step, const char *event, const char *from,
                    const char *to, int attempt, const char *error, double delay,
                    const char *detail) {
  mend_history_rec h = {r->id, step, history_time(r), event, from, to, attempt, error,
                        delay, detail, ++r->history_seq};
  if (mend_store_append_history(r->E->store, &h)) store_failed(r->E);
}

static void log_transition(mend_run *r, const char *step, int attempt, const char *from,
                           const char *to, const char *error) {
  const char *level = error ? "warn" : "info";
  if (!logs(r->E, level)) return;
  char msg[512];
  if (error) snprintf(msg, sizeof msg, "%s -> %s: %s", from, to, error);
  else snprintf(msg, sizeof msg, "%s -> %s", from, to);
  mend_engine_log_line(r->E, level, r->id, step, attempt, step ? "step" : "run", msg);
}

/* The one place a step changes status. */
static void step_to(mend_run *r, int i, mend_step_status to, const char *error, double delay,
                    const char *detail) {
  step_rt *st = &r->steps[i];
  if (!mend_step_transition_ok(st->status, to)) {
    breakdown(r->E, "bug: illegal step transition %s -> %s (run %s, step %s)",
              mend_step_status_name(st->status), mend_step_status_name(to), r->id, step_name(r, i));
    return;
  }
  const char *from = mend_step_status_name(st->status);
  st->status = to;
  if (error) set_str(&st->error, error);
  int attempt = to >= MEND_STEP_COMPENSATING ? st->comp_attempts : st->attempts;
  write_step(r, i);
  history(r, step_name(r, i), "step", from, mend_step_status_name(to), attempt, error, delay, detail);
  log_transition(r, step_name(r, i), attempt, from, mend_step_status_name(to), error);
}

static void run_to(mend_run *r, mend_run_status to) {
  if (!mend_run_transition_ok(r->status, to)) {
    breakdown(r->E, "bug: illegal run transition %s -> %s (run %s)",
              mend_run_status_name(r->status), mend_run_status_name(to), r->id);
    return;
  }
  const char *from = mend_run_status_name(r->status);
  r->status = to;
  if (mend_store_update_run(r->E->store, r->id, mend_run_status_name(to), r->error, r->attention,
                            mend_engine_now(r->E), r->reason))
    store_failed(r->E);
  history(r, NULL, "run", from, mend_run_status_name(to), 0, NULL, -1, r->reason);
  log_transition(r, NULL, 0, from, mend_run_status_name(to), NULL);
}

/* Records an alert in history now; the hook hears of it once the batch has committed. */
static void alert(mend_run *r, const char *kind, int step, const char *reason, const char *error) {
  mend_engine *E = r->E;
  double now = mend_engine_now(E);
  json_t *ev = json_pack("{s:s, s:s, s:s, s:f}", "kind", kind, "run_id", r->id, "workflow",
                         r->wf->name, "at", now);
  if (step >= 0) json_object_set_new(ev, "step", json_string(step_name(r, step)));
  if (reason) json_object_set_new(ev, "reason", json_string(reason));
  if (error) json_object_set_new(ev, "error", json_string(error));
  char *text = json_dumps(ev, JSON_COMPACT);
  history(r, step >= 0 ? step_name(r, step) : NULL, "alert", NULL, NULL, 0, error, -1, text);
  free(text);
  json_array_append_new(E->alerts, ev);
}

/* An event for the host's metrics (cfg.on_event); like alerts, heard after the commit. */
static void emit(mend_engine *E, json_t *ev) {
  if (!E->cfg.on_event) { json_decref(ev); return; }
  json_object_set_new(ev, "at", json_real(mend_engine_now(E)));
  json_array_append_new(E->events, ev);
}

static void fire_events(mend_engine *E, json_t *events) {
  size_t i;
  json_t *ev;
  json_array_foreach(events, i, ev) E->cfg.on_event(E->cfg.event_ud, ev);
  json_decref(events);
}

/* ---- the alert command: fire and forget, the event as one JSON line on its stdin */

typedef struct alert_proc {
  child base;             /* CHILD_ALERT */
  uv_process_t proc;
  uv_pipe_t in;
  uv_write_t write;
  char *text;
  int open;
} alert_proc;

static void alert_handle_closed(uv_handle_t *h) {
  alert_proc *a = h->data;
  if (--a->open == 0) {
    free(a->text);
    free(a);
  }
}

static void alert_exited(uv_process_t *p, int64_t status, int signal) {
  (void)signal;
  alert_proc *a = p->data;
  mend_engine *E = child_unlink(&a->base);
  if (E) {
    E->alert_commands--;
    if (status != 0) mend_engine_log_line(E, "warn", NULL, NULL, 0, "alert", "alert command failed");
  }
  uv_close((uv_handle_t *)p, alert_handle_closed);
}

static void alert_written(uv_write_t *w, int status) {
  (void)status;
  alert_proc *a = w->data;
  if (!uv_is_closing((uv_handle_t *)&a->in)) uv_close((uv_handle_t *)&a->in, alert_handle_closed);
}

static char *text_for_command(json_t *ev) {
  char *t = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!t) return NULL;
  size_t n = strlen(t);
  char *line = realloc(t, n + 2);
  if (!line) { free(t); return NULL; }
  line[n] = '\n';
  line[n + 1] = 0;
  return line;
}

static void run_alert_command(mend_engine *E, char *text) {
  if (!text) return;
  alert_proc *a = calloc(1, sizeof *a);
  a->text = text;
  uv_pipe_init(E->loop, &a->in, 0);
  a->in.data = a->proc.data = a->write.data = a;
  char *args[] = {"sh", "-c", (char *)E->cfg.alert_command, NULL};
  uv_stdio_container_t stdio[3] = {
    {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&a->in},
    {.flags = UV_INHERIT_FD, .data.fd = 2},   /* its output goes where mend's log goes */
    {.flags = UV_INHERIT_FD, .data.fd = 2},
  };
  uv_process_options_t opt = {.exit_cb = alert_exited, .file = "sh", .args = args,
                              .stdio_count = 3, .stdio = stdio};
  a->open = 2;
  int rc = uv_spawn(E->loop, &a->proc, &opt);
  if (rc) {
    mend_engine_log_line(E, "error", NULL, NULL, 0, "alert", uv_strerror(rc));
    uv_close((uv_handle_t *)&a->proc, alert_handle_closed);
    uv_close((uv_handle_t *)&a->in, alert_handle_closed);
    return;
  }
  E->alert_commands++;
  child_link(E, &a->base, CHILD_ALERT);
  uv_buf_t b = uv_buf_init(a->text, (unsigned)strlen(a->text));
  uv_write(&a->write, (uv_stream_t *)&a->in, &b, 1, alert_written);
}

/* The alerts and events of a batch that is durable now; takes both arrays. */
static void fire_batch(mend_engine *E, json_t *alerts, json_t *events) {
  fire_events(E, events);
  size_t i;
  json_t *ev;
  json_array_foreach(alerts, i, ev) {
    char *text = json_dumps(ev, JSON_COMPACT);
    mend_engine_log_line(E, "warn", json_string_value(json_object_get(ev, "run_id")), NULL, 0,
                         "alert", text);
    free(text);
    if (E->cfg.alert) E->cfg.alert(E->cfg.alert_ud, ev);
    if (E->cfg.alert_command) run_alert_command(E, text_for_command(ev));
  }
  json_decref(alerts);
}

void mend_engine_alert(mend_engine *E, json_t *ev) {
  if (!json_object_get(ev, "at")) json_object_set_new(ev, "at", json_real(mend_engine_now(E)));
  json_t *one = json_array();
  json_array_append(one, ev);
  fire_batch(E, one, json_array());
}

static void dead_letter(mend_run *r, const char *reason, int step, const char *error,
                        const char *detail) {
  mend_dlq_rec d = {r->id, reason, step >= 0 ? step_name(r, step) : NULL, error, detail,
                    mend_engine_now(r->E)};
  if (mend_store_put_dlq(r->E->store, &d)) store_failed(r->E);
  history(r, d.step, "dead_letter", NULL, NULL, 0, error, -1, reason);
  alert(r, "dead_letter", step, reason, error);
}

/* ---------------------------------------------------------------- breakers */

static struct mend_breaker_slot *breaker_slot(mend_engine *E, const char *key,
                                              const mend_breaker_policy *p) {
  for (struct mend_breaker_slot *s = E->breakers; s; s = s->next)
    if (strcmp(s->key, key) == 0) return s;
  struct mend_breaker_slot *s = calloc(1, sizeof *s);
  s->key = mend_dupstr(key);
  s->p = *p;
  int found = mend_store_get_breaker(E->store, key, &s->b);
  if (found <= 0) {
    mend_breaker_init(&s->b);
    /* known from now on, so that people can list it and override it */
    if (found == 0 && mend_store_put_breaker(E->store, key, &s->b, mend_engine_now(E))) store_failed(E);
  }
  s->next = E->breakers;
  E->breakers = s;
  return s;
}

/* Persists a breaker whose state moved, and tells the history of the run that moved it. */
static void breaker_changed(mend_run *r, int i, mend_breaker_state before) {
  struct mend_breaker_slot *s = r->wf->steps[i].slot;
  if (mend_store_put_breaker(r->E->store, s->key, &s->b, mend_engine_now(r->E))) store_failed(r->E);
  history(r, step_name(r, i), "breaker", mend_breaker_state_name(before),
          mend_breaker_state_name(s->b.state), r->steps[i].attempts, NULL, -1, s->key);
  char msg[300];
  snprintf(msg, sizeof msg, "breaker %s: %s -> %s", s->key, mend_breaker_state_name(before),
           mend_breaker_state_name(s->b.state));
  mend_engine_log_line(r->E, "warn", r->id, step_name(r, i), r->steps[i].attempts, "breaker", msg);
  emit(r->E, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "breaker_changed", "key", s->key,
                       "from", mend_breaker_state_name(before), "to",
                       mend_breaker_state_name(s->b.state), "run_id", r->id));
}

static void breaker_outcome(mend_run *r, int i, mend_breaker_outcome outcome) {
  struct mend_breaker_slot *s = r->wf->steps[i].slot;
  mend_breaker before = s->b;
  int changed = mend_breaker_record(&s->b, &s->p, mend_engine_now(r->E), outcome);
  if (changed) breaker_changed(r, i, before.state);
  else if (before.failures != s->b.failures || before.successes != s->b.successes) {
    if (mend_store_put_breaker(r->E->store, s->key, &s->b, mend_engine_now(r->E)))
      store_failed(r->E);
  }
}

/* ---------------------------------------------------------------- forward */

static void finish_failed(mend_run *r);
static void backward(mend_run *r);
static int guarded_pcall(mend_engine *E, mend_limits *lim, int nargs, int nres);
static const char *describe(mend_engine *E, lua_State *from, int idx, char *buf, size_t len);

static void set_result(mend_run *r, int i) {
  lua_State *L = r->E->L;
  mend_refs_push(&r->E->refs, L, r->results_ref);
  char err[256];
  if (mend_json_decode(L, r->steps[i].result, strlen(r->steps[i].result), err, sizeof err))
    lua_pushnil(L);
  lua_setfield(L, -2, step_name(r, i));
  lua_pop(L, 1);
}

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
static void push_ctx(mend_run *r, int i, int compensating) {
  lua_State *L = r->E->L;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  lua_createtable(L, 0, 8);
  lua_pushstring(L, r->id); lua_setfield(L, -2, "run_id");
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->wf->name_ref); lua_setfield(L, -2, "workflow");
  lua_rawgeti(L, LUA_REGISTRYINDEX, def->name_ref); lua_setfield(L, -2, "step");
  lua_pushinteger(L, compensating ? st->comp_attempts : st->attempts); lua_setfield(L, -2, "attempt");
  if (st->custom_key) lua_pushstring(L, st->idem_key);
  else push_default_key(L, r->id, def->name);
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

/* A step's own idempotency_key(ctx) is asked once; its answer is stored with the step. */
static int ensure_key(mend_run *r, int i) {
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (st->key_ready || def->key_ref == LUA_NOREF) return 0;
  mend_engine *E = r->E;
  lua_State *L = E->L;
  lua_rawgeti(L, LUA_REGISTRYINDEX, def->key_ref);
  push_ctx(r, i, 0);
  mend_limits lim;
  mend_limits_init(&lim, "idempotency_key", E->cfg.instruction_budget, CALL_SECONDS);
  int status = guarded_pcall(E, &lim, 1, 1);
  if (status != LUA_OK || !lua_isstring(L, -1)) {
    char msg[400], text[300];
    snprintf(msg, sizeof msg, "idempotency_key: %s",
             status != LUA_OK ? describe(E, L, -1, text, sizeof text) : "must return a string");
    lua_pop(L, 1);
    set_str(&st->error, msg);
    return -1;
  }
  set_str(&st->idem_key, lua_tostring(L, -1));
  lua_pop(L, 1);
  st->custom_key = 1;
  st->key_ready = 1;
  return 0;
}

static void fail_step(mend_run *r, int i, const mend_error_info *info);

/* Asks the breaker of step i for an attempt. When it refuses, the step waits in breaker_open,
 * from pending, retry_wait or breaker_open alike (SPEC section 2), and 1 is returned. */
static int breaker_refuses(mend_run *r, int i) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  double retry_at;
  mend_breaker_state before = def->slot->b.state;
  int admitted = mend_breaker_admit(&def->slot->b, &def->slot->p, mend_engine_now(E), &retry_at);
  if (def->slot->b.state != before) breaker_changed(r, i, before);
  if (admitted) return 0;
  /* Spread the waiters so that they do not all probe at the same instant. */
  double spread = 0.1 * mend_rng_uniform(&E->rng) * (def->slot->p.open_seconds > 1 ? 1 : def->slot->p.open_seconds);
  st->due = retry_at + spread;
  step_to(r, i, MEND_STEP_BREAKER_OPEN, NULL, st->due - mend_engine_now(E), def->breaker_key);
  r->wait_kind = WAIT_BREAKER;
  arm(r, &r->wait, st->due);
  return 1;
}

static void forward(mend_run *r) {
  mend_engine *E = r->E;
  int admitted = r->admitted;   /* for this attempt only */
  r->admitted = 0;
  while (r->cur < r->wf->nsteps && r->steps[r->cur].status == MEND_STEP_SUCCEEDED) r->cur++;
  if (r->cur == r->wf->nsteps) {
    run_to(r, MEND_RUN_SUCCEEDED);
    queue(r, ACT_FINISH);
    return;
  }
  int i = r->cur;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (st->status != MEND_STEP_PENDING && st->status != MEND_STEP_RUNNING) return;  /* waiting */
  if (E->draining) return;   /* parked: its lease is given back when the worker stops */
  if (st->status == MEND_STEP_PENDING) {
    if (ensure_key(r, i)) {
      st->attempts++;
      step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
      mend_error_info info = {MEND_ERR_ERROR, st->error, -1, 0};
      fail_step(r, i, &info);
      return;
    }
    if (st->custom_key) {
      char *found = NULL;
      int r2 = mend_store_find_key_result(E->store, st->idem_key, &found);
      if (r2 < 0) {
        store_failed(E);
        if (!E->broken) queue(r, ACT_ADVANCE);   /* a lock elsewhere: again after the commit */
        return;
      }
      if (r2 == 1) {
        set_str(&st->result, found);
        free(found);
        step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, "result reused: idempotency key already succeeded");
        set_result(r, i);
        r->cur++;
        queue(r, ACT_ADVANCE);
        return;
      }
    }
    if (def->sleep > 0 && !st->slept) {
      /* A durable wait: only its due time is kept, in the step's row; no coroutine. */
      st->due = mend_engine_now(E) + def->sleep;
      step_to(r, i, MEND_STEP_SLEEPING, NULL, def->sleep, NULL);
      r->wait_kind = WAIT_STEP_SLEEP;
      arm(r, &r->wait, st->due);
      return;
    }
    if (def->execute_ref == LUA_NOREF) {
      step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, "a wait step: nothing to execute");
      set_str(&st->result, "null");
      set_result(r, i);
      r->cur = i + 1;
      queue(r, ACT_ADVANCE);
      return;
    }
    if (!admitted && breaker_refuses(r, i)) return;
  }
  /* pending, or running found after a crash: either way a new attempt with the same key */
  st->attempts++;
  st->due = -1;
  step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
  queue(r, ACT_EXECUTE);
}

static void succeed_step(mend_run *r, int i, const char *result_json) {
  step_rt *st = &r->steps[i];
  breaker_outcome(r, i, MEND_OUTCOME_SUCCESS);
  set_str(&st->result, result_json);
  set_str(&st->error, NULL);
  step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, NULL);
  set_result(r, i);
  r->cur = i + 1;
  /* The next step's `running` joins this batch; its execute still waits for the commit that
   * makes both durable. One turn per step instead of two. */
  forward(r);
}

static void fail_step(mend_run *r, int i, const mend_error_info *info) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  int retryable = info->kind == MEND_ERR_RETRYABLE || info->kind == MEND_ERR_TIMEOUT;
  char msg[600];
  snprintf(msg, sizeof msg, "%s: %s", mend_error_kind_name(info->kind), info->message ? info->message : "");
  emit(E, json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:b}", "type", "step_failed", "run_id", r->id,
                    "workflow", r->wf->name, "step", step_name(r, i), "attempt", st->attempts,
                    "error", msg, "will_retry", retryable && st->attempts < def->retry.max_attempts));
  if (def->slot->b.state == MEND_BREAKER_HALF_OPEN || retryable || info->kind != MEND_ERR_ERROR)
    breaker_outcome(r, i, retryable ? MEND_OUTCOME_RETRYABLE : MEND_OUTCOME_OTHER);
  else
    breaker_outcome(r, i, MEND_OUTCOME_OTHER);
  if (retryable && st->attempts < def->retry.max_attempts) {
    double delay = info->retry_after >= 0
      ? mend_backoff_clamp_retry_after(&def->retry, info->retry_after)
      : mend_backoff_delay(&def->retry, st->attempts, st->last_delay > 0 ? st->last_delay : 0, &E->rng);
    st->last_delay = delay;
    st->due = mend_engine_now(E) + delay;
    step_to(r, i, MEND_STEP_RETRY_WAIT, msg, delay, NULL);
    if (def->retry.attention_after > 0 && st->attempts >= def->retry.attention_after && !r->attention) {
      r->attention = 1;
      if (mend_store_update_run(E->store, r->id, mend_run_status_name(r->status), r->error, 1,
                                mend_engine_now(E), r->reason))
        store_failed(E);
      alert(r, "attention", i, "attention_after", msg);
    }
    r->wait_kind = WAIT_RETRY;
    arm(r, &r->wait, st->due);
    return;
  }
  step_to(r, i, MEND_STEP_FAILED, msg, -1, NULL);
  set_str(&r->error, msg);
  r->fail_step = i;
  if (info->kind == MEND_ERR_COMPENSABLE && info->severity >= 3) {
    r->reason = "severity_3";
    run_to(r, MEND_RUN_NEEDS_ATTENTION);
    dead_letter(r, r->reason, i, msg, "severity 3: nothing compensated automatically");
    queue(r, ACT_FINISH);
    return;
  }
  r->reason = retryable ? "attempts_exhausted"
            : info->kind == MEND_ERR_FATAL ? "fatal"
            : info->kind == MEND_ERR_COMPENSABLE ? (info->severity == 2 ? "severity_2" : "compensable")
            : "error";
  st->compensate_self = info->kind == MEND_ERR_COMPENSABLE;
  int anything = st->compensate_self;
  for (int j = 0; j < i; j++) anything |= r->steps[j].status == MEND_STEP_SUCCEEDED;
  if (!anything) { finish_failed(r); return; }
  run_to(r, MEND_RUN_COMPENSATING);
  r->cur = i;
  queue(r, ACT_ADVANCE);
}

/* The run failed for good and compensation (if any) is over. */
static void finish_failed(mend_run *r) {
  if (!r->reason) r->reason = "error";
  if (strcmp(r->reason, "attempts_exhausted") == 0) {
    run_to(r, MEND_RUN_NEEDS_ATTENTION);
    dead_letter(r, r->reason, r->fail_step, r->error,
                r->status == MEND_RUN_NEEDS_ATTENTION ? "attempts exhausted; completed steps compensated" : NULL);
  } else if (r->status == MEND_RUN_COMPENSATING) {
    run_to(r, MEND_RUN_COMPENSATED);
    if (strcmp(r->reason, "severity_2") == 0)
      alert(r, "compensated_with_alert", r->fail_step, "severity_2", r->error);
  } else {
    run_to(r, MEND_RUN_FAILED);
  }
  queue(r, ACT_FINISH);
}

/* ---------------------------------------------------------------- backward */

static int needs_compensation(const mend_run *r, int i) {
  const step_rt *st = &r->steps[i];
  return st->status == MEND_STEP_SUCCEEDED || st->status == MEND_STEP_COMPENSATING ||
         st->status == MEND_STEP_COMPENSATION_FAILED ||
         (st->status == MEND_STEP_FAILED && st->compensate_self);
}

static void backward(mend_run *r) {
  for (; r->cur >= 0; r->cur--) {
    int i = r->cur;
    if (!needs_compensation(r, i)) continue;
    if (r->wf->steps[i].compensate_ref == LUA_NOREF) {
      history(r, step_name(r, i), "skip_compensate", NULL, NULL, 0, NULL, -1, "step has no compensate");
      mend_engine_log_line(r->E, "info", r->id, step_name(r, i), 0, "skip_compensate",
                           "no compensate function: skipped");
      continue;
    }
    if (r->E->draining) return;
    r->steps[i].comp_attempts++;
    r->steps[i].due = -1;
    step_to(r, i, MEND_STEP_COMPENSATING, NULL, -1, NULL);
    queue(r, ACT_COMPENSATE);
    return;
  }
  finish_failed(r);
}

static void compensated(mend_run *r, int i) {
  step_to(r, i, MEND_STEP_COMPENSATED, NULL, -1, NULL);
  r->cur = i - 1;
  backward(r);   /* as succeed_step: the next compensate still waits for the commit */
}

static void compensation_failed(mend_run *r, int i, const mend_error_info *info) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_retry_policy *p = &r->wf->steps[i].compensate_retry;
  char msg[600];
  snprintf(msg, sizeof msg, "%s: %s", mend_error_kind_name(info->kind), info->message ? info->message : "");
  set_str(&st->error, msg);
  if (st->comp_attempts < p->max_attempts) {
    double delay = mend_backoff_delay(p, st->comp_attempts, st->last_delay > 0 ? st->last_delay : 0, &E->rng);
    st->last_delay = delay;
    st->due = mend_engine_now(E) + delay;
    write_step(r, i);
    history(r, step_name(r, i), "compensate_failed", NULL, NULL, st->comp_attempts, msg, delay, NULL);
    mend_engine_log_line(E, "warn", r->id, step_name(r, i), st->comp_attempts, "compensate_failed", msg);
    r->wait_kind = WAIT_COMP_RETRY;
    arm(r, &r->wait, st->due);
    return;
  }
  step_to(r, i, MEND_STEP_COMPENSATION_FAILED, msg, -1, NULL);
  /* Name exactly what is left undone, so a person knows what to repair by hand. */
  char left[1024] = "";
  size_t used = 0;
  for (int j = i; j >= 0; j--) {
    if (j != i && !needs_compensation(r, j)) continue;
    if (j != i && r->wf->steps[j].compensate_ref == LUA_NOREF) continue;
    int n = snprintf(left + used, sizeof left - used, "%s%s", used ? ", " : "", step_name(r, j));
    if (n < 0 || (size_t)n >= sizeof left - used) break;
    used += (size_t)n;
  }
  char detail[1200];
  snprintf(detail, sizeof detail, "not compensated: %s", left);
  set_str(&r->error, msg);
  r->reason = "compensation_failed";
  run_to(r, MEND_RUN_NEEDS_ATTENTION);
  dead_letter(r, "compensation_failed", i, msg, detail);
  queue(r, ACT_FINISH);
}

/* ---------------------------------------------------------------- attempts in Lua */

/* Calls into workflow code from C go through here: under `lim`, held to the memory limit,
 * protected. The hook watches E->L for the time of the call, so that the coroutines the code
 * makes on it are watched too. nargs arguments above the function; leaves nres results or the
 * error value. */
/* After a call that met the memory limit: what it left is garbage, but lauxlib's buffers
 * (string.rep, table.concat, string.format...) allocate without the emergency collection
 * that Lua's own allocations get, and would fail the limit on it in the next call. */
static void collect_if_over(mend_engine *E) {
  if (!E->over_limit || E->limit_memory) return;
  E->over_limit = 0;
  lua_gc(E->L, LUA_GCCOLLECT, 0);
}

static int guarded_pcall(mend_engine *E, mend_limits *lim, int nargs, int nres) {
  mend_limits_watch(E->L);
  mend_limits_enter(E->L, lim);
  int limit_was = E->limit_memory;
  mend_limits *charged_was = E->alloc_limits;
  E->limit_memory = 1;
  E->alloc_limits = lim;
  int status = lua_pcall(E->L, nargs, nres, 0);
  E->limit_memory = limit_was;
  E->alloc_limits = charged_was;
  mend_limits_leave(E->L, lim);
  mend_limits_unwatch(E->L);
  collect_if_over(E);
  return status;
}

static int push_tostring(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/* The text of an error value that workflow code raised or returned, into buf. Strings and
 * numbers are what they say; for anything else, a __tostring of its own gets a small budget
 * and no second chance: the engine never trusts what a workflow's metamethods do. */
static const char *describe(mend_engine *E, lua_State *from, int idx, char *buf, size_t len) {
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
  if (guarded_pcall(E, &lim, 1, 1) == LUA_OK && lua_type(E->L, -1) == LUA_TSTRING)
    snprintf(buf, len, "%s", lua_tostring(E->L, -1));
  else if (lua_type(E->L, -1) == LUA_TSTRING)
    snprintf(buf, len, "(error object whose __tostring failed: %s)", lua_tostring(E->L, -1));
  else
    snprintf(buf, len, "(error object whose __tostring failed)");
  lua_pop(E->L, 1);
  return buf;
}

static void abandon_exec(mend_run *r);
static void abandon_host_call(mend_run *r);

static void end_attempt(mend_run *r) {
  mend_engine *E = r->E;
  /* Whatever the attempt still waits for is let go: its answer must not reach a later one. */
  abandon_exec(r);
  abandon_host_call(r);
  mend_timer_disarm(&E->timers, &r->deadline);
  if (r->wait_kind == WAIT_SLEEP) mend_timer_disarm(&E->timers, &r->wait);
  r->wait_kind = WAIT_NONE;
  r->waiting = 0;
  if (!r->co) return;
  E->attempts--;
  /* A slot came free: the next attempt waiting for this breaker, else for the engine. */
  mend_run *next = NULL;
  if (r->held) {
    r->held->in_flight--;
    next = fifo_pop(&r->held->waiting);
    r->held = NULL;
  }
  if (!next) next = fifo_pop(&E->throttled);
  if (next) queue(next, next->next_action);
  /* Closing runs the __close handlers of the attempt's pending to-be-closed variables: under
   * its limits, and not at all once a limit stopped it (Lua would run them unhooked). */
  if (!r->limits.tripped && !mend_limits_stopped(E->L, r->co)) {
    int limit_was = E->limit_memory;
    mend_limits *charged_was = E->alloc_limits;
    E->limit_memory = 1;
    E->alloc_limits = &r->limits;
    mend_limits_enter(E->L, &r->limits);
    mend_closethread(r->co, E->L);
    mend_limits_leave(E->L, &r->limits);
    E->limit_memory = limit_was;
    E->alloc_limits = charged_was;
  }
  lua_sethook(r->co, NULL, 0, 0);
  lua_getfield(E->L, LUA_REGISTRYINDEX, THREADS_KEY);
  lua_rawgeti(E->L, LUA_REGISTRYINDEX, r->co_ref);
  lua_pushnil(E->L);
  lua_rawset(E->L, -3);
  lua_pop(E->L, 1);
  luaL_unref(E->L, LUA_REGISTRYINDEX, r->co_ref);
  r->co = NULL;
  r->co_ref = LUA_NOREF;
  collect_if_over(E);
}

static void attempt_done(mend_run *r, int ok, mend_error_info *info, const char *result_json) {
  int i = r->cur;
  int back = r->status == MEND_RUN_COMPENSATING;
  if (back) {
    if (ok) compensated(r, i);
    else compensation_failed(r, i, info);
  } else {
    if (ok) succeed_step(r, i, result_json);
    else fail_step(r, i, info);
  }
}

/* Resumes the attempt's coroutine with nargs values on its stack and deals with the outcome. */
static void resume(mend_run *r, int nargs) {
  mend_engine *E = r->E;
  lua_State *co = r->co;
  int nres = 0;
  r->waiting = 0;
  mend_limits *charged_was = E->alloc_limits;
  E->limit_memory = 1;
  E->alloc_limits = &r->limits;
  mend_limits_enter(E->L, &r->limits);
  int status = lua_resume(co, E->L, nargs, &nres);
  mend_limits_leave(E->L, &r->limits);
  E->limit_memory = 0;
  E->alloc_limits = charged_was;
  if (status == LUA_YIELD && r->waiting) {
    lua_pop(co, nres);
    return;
  }
  mend_error_info info = {MEND_ERR_ERROR, NULL, -1, 0};
  char *result = NULL;
  char msg[600];
  int ok = 0;
  if (status == LUA_YIELD) {
    info.message = "step yielded outside mend.sleep or mend.exec (coroutine.yield in a step?)";
  } else if (status == LUA_OK) {
    if (nres > 0 && mend_lua_read_error(co, -nres, &info)) {
      /* returning a mend error counts as raising it */
    } else {
      char err[400];
      if (nres == 0) lua_pushnil(co), nres = 1;
      result = mend_json_encode(co, -nres, "result", err, sizeof err);
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
      info.message = describe(E, co, -1, msg, sizeof msg);
      luaL_traceback(E->L, co, msg, 0);
      mend_engine_log_line(E, "error", r->id, step_name(r, r->cur), r->steps[r->cur].attempts,
                           "error", lua_tostring(E->L, -1));
      lua_pop(E->L, 1);
    } else {
      snprintf(msg, sizeof msg, "%s", info.message ? info.message : "");
      info.message = msg;
    }
  }
  if (r->limits.tripped) {
    /* Whatever the code did with the limit's error (caught it, raised another), this is why
     * the attempt ended. */
    ok = 0;
    free(result);
    result = NULL;
    mend_limits_message(&r->limits, msg, sizeof msg);
    info.message = msg;
    info.retry_after = -1;
    info.kind = r->limits.tripped == MEND_LIMIT_TIMEOUT ? MEND_ERR_TIMEOUT : MEND_ERR_ERROR;
  }
  if (status == LUA_ERRMEM && !r->limits.tripped && E->owned_state && E->cfg.memory_limit > 0) {
    snprintf(msg, sizeof msg, "step exceeded the memory limit (%zu bytes)", E->cfg.memory_limit);
    info.message = msg;
    info.kind = MEND_ERR_ERROR;
  }
  end_attempt(r);
  attempt_done(r, ok, &info, result);
  free(result);
}

static void on_deadline(mend_timer *t) {
  mend_run *r = (mend_run *)(void *)((char *)t - offsetof(mend_run, deadline));
  if (!r->co) return;
  end_attempt(r);   /* lets go of the child process or host call it waits for */
  mend_error_info info = {MEND_ERR_TIMEOUT, "step exceeded its timeout", -1, 0};
  attempt_done(r, 0, &info, NULL);
}

static void start_attempt(mend_run *r, int compensating) {
  mend_engine *E = r->E;
  lua_State *L = E->L;
  int i = r->cur;
  const mend_step_def *def = &r->wf->steps[i];
  lua_State *co = lua_newthread(L);
  r->co = co;
  E->attempts++;
  failpoint(compensating ? "compensate" : "execute");
  lua_getfield(L, LUA_REGISTRYINDEX, THREADS_KEY);
  lua_pushvalue(L, -2);
  lua_pushlightuserdata(L, r);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  r->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_rawgeti(co, LUA_REGISTRYINDEX, compensating ? def->compensate_ref : def->execute_ref);
  push_ctx(r, i, compensating);
  lua_xmove(L, co, 1);
  if (compensating) {
    char err[200];
    const char *res = r->steps[i].result;
    if (!res || mend_json_decode(co, res, strlen(res), err, sizeof err)) lua_pushnil(co);
  } else {
    mend_refs_push(&E->refs, co, r->input_ref);
  }
  mend_limits_init(&r->limits, "step", E->cfg.instruction_budget, def->timeout);
  r->limits.timeout_typed = 1;
  if (def->timeout > 0) arm(r, &r->deadline, mend_engine_now(E) + def->timeout);
  if (def->timeout > 0 || E->cfg.instruction_budget > 0) mend_limits_watch(co);
  resume(r, 2);
}

/* ---------------------------------------------------------------- waits from Lua */

mend_run *mend_engine_current_run(lua_State *L) {
  lua_getfield(L, LUA_REGISTRYINDEX, THREADS_KEY);
  if (!lua_istable(L, -1)) { lua_pop(L, 1); return NULL; }
  lua_pushthread(L);
  lua_rawget(L, -2);
  mend_run *r = lua_touserdata(L, -1);
  lua_pop(L, 2);
  return r && r->co == L ? r : NULL;
}

static void on_wait(mend_timer *t) {
  mend_run *r = (mend_run *)(void *)((char *)t - offsetof(mend_run, wait));
  wait_kind kind = r->wait_kind;
  r->wait_kind = WAIT_NONE;
  switch (kind) {
    case WAIT_SLEEP:
      resume(r, 0);
      break;
    case WAIT_RETRY:
    case WAIT_BREAKER:
      /* A step whose breaker is (still) open goes on waiting there, not through pending. */
      if (!r->E->draining && r->wf->steps[r->cur].execute_ref != LUA_NOREF) {
        if (breaker_refuses(r, r->cur)) break;
        r->admitted = 1;
      }
      step_to(r, r->cur, MEND_STEP_PENDING, NULL, -1, NULL);
      forward(r);
      break;
    case WAIT_COMP_RETRY:
      backward(r);
      break;
    case WAIT_STEP_SLEEP:
      r->steps[r->cur].slept = 1;
      r->steps[r->cur].due = -1;
      step_to(r, r->cur, MEND_STEP_PENDING, NULL, -1, NULL);
      forward(r);
      break;
    case WAIT_NONE:
      break;
  }
}

/* The run whose attempt may wait here: L is its coroutine and can yield now. */
static mend_run *waiting_run(lua_State *L, char *err, int errlen) {
  mend_run *r = mend_engine_current_run(L);
  if (!r) {
    snprintf(err, (size_t)errlen, "must be called from a step's execute or compensate");
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
  mend_run *r = waiting_run(L, err, errlen);
  if (!r) return -1;
  if (!(seconds >= 0)) seconds = 0;
  r->waiting = 1;
  r->wait_kind = WAIT_SLEEP;
  arm(r, &r->wait, mend_engine_now(r->E) + seconds);
  return 0;
}

/* ---------------------------------------------------------------- child processes */

struct exec_req {
  child base;             /* CHILD_EXEC */
  uv_process_t proc;
  uv_pipe_t pipes[3];     /* stdin, stdout, stderr */
  int open_handles;
  mend_run *run;          /* NULL once the attempt was abandoned */
  char *out[3];
  size_t len[3], cap[3];
  char *input;
  size_t input_len;
  uv_write_t write;
  int64_t exit_status;
  int term_signal;
  int exited, eofs;
};

static void exec_maybe_done(exec_req *x);

static void exec_handle_closed(uv_handle_t *h) {
  exec_req *x = h->data;
  if (--x->open_handles == 0) {
    for (int k = 0; k < 3; k++) free(x->out[k]);
    free(x->input);
    free(x);
  }
}

static void exec_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  exec_req *x = h->data;
  int k = (uv_pipe_t *)h == &x->pipes[1] ? 1 : 2;
  if (x->cap[k] - x->len[k] < suggested) {
    size_t cap = x->cap[k] ? x->cap[k] : 4096;
    while (cap - x->len[k] < suggested) cap *= 2;
    char *p = realloc(x->out[k], cap);
    if (!p) { *buf = uv_buf_init(NULL, 0); return; }
    x->out[k] = p;
    x->cap[k] = cap;
  }
  *buf = uv_buf_init(x->out[k] + x->len[k], (unsigned)(x->cap[k] - x->len[k]));
}

static void exec_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  exec_req *x = s->data;
  int k = (uv_pipe_t *)s == &x->pipes[1] ? 1 : 2;
  if (n > 0) { x->len[k] += (size_t)n; return; }
  if (n < 0) {
    uv_read_stop(s);
    x->eofs++;
    exec_maybe_done(x);
  }
}

static void exec_exit(uv_process_t *p, int64_t status, int signal) {
  exec_req *x = p->data;
  x->exit_status = status;
  x->term_signal = signal;
  x->exited = 1;
  exec_maybe_done(x);
}

static void exec_written(uv_write_t *w, int status) {
  (void)status;
  exec_req *x = w->data;
  if (!uv_is_closing((uv_handle_t *)&x->pipes[0]))
    uv_close((uv_handle_t *)&x->pipes[0], exec_handle_closed);
}

static void exec_close_all(exec_req *x) {
  uv_close((uv_handle_t *)&x->proc, exec_handle_closed);
  uv_close((uv_handle_t *)&x->pipes[1], exec_handle_closed);
  uv_close((uv_handle_t *)&x->pipes[2], exec_handle_closed);
}

static void exec_maybe_done(exec_req *x) {
  if (!x->exited || x->eofs < 2) return;
  mend_engine *E = child_unlink(&x->base);
  mend_run *r = E ? x->run : NULL;
  if (!E) {                 /* the engine is gone: only close */
    exec_close_all(x);
    return;
  }
  E->externals--;
  if (r) {
    r->exec = NULL;
    lua_State *co = r->co;
    lua_createtable(co, 0, 4);
    lua_pushinteger(co, x->exit_status); lua_setfield(co, -2, "status");
    lua_pushinteger(co, x->term_signal); lua_setfield(co, -2, "signal");
    lua_pushlstring(co, x->out[1] ? x->out[1] : "", x->len[1]); lua_setfield(co, -2, "stdout");
    lua_pushlstring(co, x->out[2] ? x->out[2] : "", x->len[2]); lua_setfield(co, -2, "stderr");
  }
  exec_close_all(x);
  if (r) resume(r, 1);
  kick(E);
}

static void abandon_exec(mend_run *r) {
  if (!r->exec) return;
  r->exec->run = NULL;
  uv_process_kill(&r->exec->proc, SIGKILL);
  r->exec = NULL;
}

int mend_engine_exec(lua_State *L, char *err, int errlen) {
  mend_run *r = waiting_run(L, err, errlen);
  if (!r) return -1;
  mend_engine *E = r->E;
  if (E->cfg.sandbox) {   /* a child process would be a way around the sandbox */
    snprintf(err, (size_t)errlen, "not allowed in a sandboxed engine");
    return -1;
  }
  int n = (int)luaL_len(L, 1);
  if (n < 1) { snprintf(err, (size_t)errlen, "needs a program: mend.exec{ \"prog\", \"arg\", ... }"); return -1; }
  char **args = calloc((size_t)n + 1, sizeof *args);
  for (int k = 0; k < n; k++) {
    lua_geti(L, 1, k + 1);
    args[k] = mend_dupstr(luaL_tolstring(L, -1, NULL));
    lua_pop(L, 2);
  }
  char **env = NULL;
  if (lua_getfield(L, 1, "env") == LUA_TTABLE) {
    int m = (int)luaL_len(L, -1);
    env = calloc((size_t)m + 1, sizeof *env);
    for (int k = 0; k < m; k++) {
      lua_geti(L, -1, k + 1);
      env[k] = mend_dupstr(luaL_tolstring(L, -1, NULL));
      lua_pop(L, 2);
    }
  }
  lua_pop(L, 1);
  const char *cwd = NULL;
  if (lua_getfield(L, 1, "cwd") == LUA_TSTRING) cwd = lua_tostring(L, -1);
  exec_req *x = calloc(1, sizeof *x);
  size_t in_len = 0;
  if (lua_getfield(L, 1, "stdin") == LUA_TSTRING) {
    const char *in = lua_tolstring(L, -1, &in_len);
    x->input = malloc(in_len + 1);
    memcpy(x->input, in, in_len);
    x->input_len = in_len;
  }
  lua_pop(L, 1);
  for (int k = 0; k < 3; k++) {
    uv_pipe_init(E->loop, &x->pipes[k], 0);
    x->pipes[k].data = x;
  }
  x->proc.data = x;
  uv_stdio_container_t stdio[3] = {
    {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&x->pipes[0]},
    {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&x->pipes[1]},
    {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&x->pipes[2]},
  };
  uv_process_options_t opt = {.exit_cb = exec_exit, .file = args[0], .args = args, .env = env,
                              .cwd = cwd, .stdio_count = 3, .stdio = stdio};
  int rc = uv_spawn(E->loop, &x->proc, &opt);
  lua_pop(L, 1);   /* cwd */
  for (int k = 0; k < n; k++) free(args[k]);
  free(args);
  if (env) { for (int k = 0; env[k]; k++) free(env[k]); free(env); }
  x->open_handles = 4;
  if (rc) {
    lua_geti(L, 1, 1);
    snprintf(err, (size_t)errlen, "cannot start %s: %s", lua_tostring(L, -1), uv_strerror(rc));
    lua_pop(L, 1);
    /* A failed uv_spawn still leaves the process handle initialised: it must be closed too. */
    uv_close((uv_handle_t *)&x->proc, exec_handle_closed);
    for (int k = 0; k < 3; k++) uv_close((uv_handle_t *)&x->pipes[k], exec_handle_closed);
    return -1;
  }
  E->externals++;
  child_link(E, &x->base, CHILD_EXEC);
  x->run = r;
  r->exec = x;
  r->waiting = 1;
  uv_read_start((uv_stream_t *)&x->pipes[1], exec_alloc, exec_read);
  uv_read_start((uv_stream_t *)&x->pipes[2], exec_alloc, exec_read);
  if (x->input_len) {
    uv_buf_t b = uv_buf_init(x->input, (unsigned)x->input_len);
    x->write.data = x;
    uv_write(&x->write, (uv_stream_t *)&x->pipes[0], &b, 1, exec_written);
  } else {
    uv_close((uv_handle_t *)&x->pipes[0], exec_handle_closed);
  }
  return 0;
}

/* ---------------------------------------------------------------- host functions */

struct host_fn {
  char *name;
  mend_engine_host_fn fn;
  void *ud;
  struct host_fn *next;
};

struct mend_host_call {
  mend_engine *E;         /* NULL once the engine was destroyed: the answer only frees it */
  mend_run *run;          /* NULL once the attempt was abandoned */
  mend_host_call *prev, *next;   /* the engine's open calls */
  int dispatching;        /* the host is still inside its function */
  int answered;
  json_t *result;         /* answer given during dispatch */
  json_t *error;          /* {kind, message, retry_after, severity} */
};

int mend_engine_register_host(mend_engine *E, const char *name, mend_engine_host_fn fn, void *ud) {
  struct host_fn *h = calloc(1, sizeof *h);
  if (!h) return -1;
  h->name = mend_dupstr(name);
  h->fn = fn;
  h->ud = ud;
  h->next = E->hosts;
  E->hosts = h;
  return 0;
}

/* Pushes what mend.call's C half returns: true, value | false, error object. [-0, +2, m] */
static void push_answer(lua_State *L, json_t *result, json_t *error) {
  if (error) {
    const char *kind = json_string_value(json_object_get(error, "kind"));
    mend_error_kind k = MEND_ERR_ERROR;
    if (kind && strcmp(kind, "retryable") == 0) k = MEND_ERR_RETRYABLE;
    else if (kind && strcmp(kind, "fatal") == 0) k = MEND_ERR_FATAL;
    else if (kind && strcmp(kind, "compensable") == 0) k = MEND_ERR_COMPENSABLE;
    lua_pushboolean(L, 0);
    mend_lua_push_error(L, k, json_string_value(json_object_get(error, "message")),
                        json_number_value(json_object_get(error, "retry_after")),
                        (int)json_integer_value(json_object_get(error, "severity")));
  } else {
    lua_pushboolean(L, 1);
    mend_json_push(L, result);
  }
}

static void answer(mend_host_call *call, json_t *result, json_t *error) {
  mend_engine *E = call->E;
  if (call->answered) { json_decref(result); json_decref(error); return; }
  call->answered = 1;
  if (call->dispatching) {   /* answered at once: mend.call returns without yielding */
    call->result = result;
    call->error = error;
    return;
  }
  if (!E) {                  /* the engine is gone: nothing waits for this answer */
    json_decref(result);
    json_decref(error);
    free(call);
    return;
  }
  if (call->prev) call->prev->next = call->next;
  else E->open_calls = call->next;
  if (call->next) call->next->prev = call->prev;
  mend_run *r = call->run;
  E->externals--;
  if (r) {
    r->host_call = NULL;
    push_answer(r->co, result, error);
  }
  json_decref(result);
  json_decref(error);
  free(call);
  if (r) resume(r, 2);
  kick(E);
}

int mend_host_return(mend_host_call *call, const char *result_json) {
  json_t *v = json_null();
  if (result_json) {
    json_error_t jerr;
    v = json_loads(result_json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!v) return -1;
  }
  answer(call, v, NULL);
  return 0;
}

void mend_host_fail(mend_host_call *call, const char *kind, const char *message,
                    double retry_after, int severity) {
  json_t *e = json_pack("{s:s, s:s}", "kind", kind ? kind : "error", "message", message ? message : "");
  if (retry_after >= 0) json_object_set_new(e, "retry_after", json_real(retry_after));
  else json_object_set_new(e, "retry_after", json_real(-1));
  if (severity > 0) json_object_set_new(e, "severity", json_integer(severity));
  answer(call, NULL, e);
}

static void abandon_host_call(mend_run *r) {
  if (!r->host_call) return;
  r->host_call->run = NULL;   /* its answer, when it comes, frees it and goes nowhere */
  r->host_call = NULL;
}

int mend_engine_host_call(lua_State *L, const char *name, int first_arg, char *err, int errlen) {
  mend_run *r = waiting_run(L, err, errlen);
  if (!r) return -1;
  mend_engine *E = r->E;
  struct host_fn *h = E->hosts;
  while (h && strcmp(h->name, name) != 0) h = h->next;
  if (!h) {
    snprintf(err, (size_t)errlen, "no host function named \"%s\"", name);
    return -1;
  }
  json_t *args = json_array();
  for (int i = first_arg; i <= lua_gettop(L); i++) {
    char jerr[300];
    json_t *v = mend_json_from_lua(L, i, "argument", jerr, sizeof jerr);
    if (!v) {
      json_decref(args);
      snprintf(err, (size_t)errlen, "%s", jerr);
      return -1;
    }
    json_array_append_new(args, v);
  }
  mend_host_call *call = calloc(1, sizeof *call);
  call->E = E;
  call->run = r;
  call->dispatching = 1;
  E->externals++;
  r->host_call = call;
  h->fn(h->ud, call, args);
  json_decref(args);
  call->dispatching = 0;
  if (!call->answered) {     /* answered later: the engine keeps track until then */
    call->next = E->open_calls;
    if (E->open_calls) E->open_calls->prev = call;
    E->open_calls = call;
  }
  if (call->answered) {
    E->externals--;
    r->host_call = NULL;
    push_answer(L, call->result, call->error);
    json_decref(call->result);
    json_decref(call->error);
    free(call);
    return 1;
  }
  r->waiting = 1;
  return 0;
}

/* ---------------------------------------------------------------- ticking hosts */

int mend_engine_tick_for(mend_engine *E, double budget) {
  double start = mend_real_now();
  E->turn_deadline = start + (budget > 0 ? budget : 0);
  int turns = 0;
  do {
    if (turn_has_work(E)) kick(E);   /* a write outside any run (a load) needs a turn too */
    uv_run(E->loop, UV_RUN_NOWAIT);   /* I/O, due timers, and one pump turn */
    turns++;
  } while (!E->broken && turn_has_work(E) &&   /* not while only the writer thread works */
           mend_real_now() < E->turn_deadline);
  E->turn_deadline = 0;
  return E->broken ? -1 : turns;
}

double mend_engine_next_due(mend_engine *E) {
  if (has_ready_work(E)) return 0;
  double next = mend_timers_next_due(&E->timers);
  if (next < 0) return -1;
  double wait = next - mend_engine_now(E);
  return wait > 0 ? wait : 0;
}

static void on_wakeup(uv_async_t *h) {
  mend_engine *E = h->data;
  kick(E);
  /* Held while the writer thread has a batch, so that the loop waits for it; idle otherwise,
   * as a host's loop must not be kept alive by it. */
  if (!E->writer || !mend_store_writer_busy(E->store)) uv_unref((uv_handle_t *)h);
}

/* On the writer thread, after a batch: the loop takes it from there. */
static void writer_done(void *ud) {
  mend_engine *E = ud;
  uv_async_send(E->wakeup);
}

void mend_engine_wake(mend_engine *E) { uv_async_send(E->wakeup); }

/* ---------------------------------------------------------------- runs */

static void unthrottle(mend_run *r);

static void run_free(mend_run *r) {
  mend_engine *E = r->E;
  unthrottle(r);
  end_attempt(r);
  mend_timer_disarm(&E->timers, &r->wait);
  mend_refs_drop(&E->refs, E->L, r->input_ref);
  mend_refs_drop(&E->refs, E->L, r->results_ref);
  for (int i = 0; i < r->wf->nsteps; i++) {
    free(r->steps[i].idem_key);
    free(r->steps[i].result);
    free(r->steps[i].error);
  }
  free(r->steps);
  free(r->error);
  if (r->prev) r->prev->next = r->next;
  else E->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  E->in_flight--;
  free(r);
}

/* A run leaving its step before the attempt ends (cancelled, or let go): a concurrency slot
 * it was woken for is passed on, and a half-open probe it made is given back. */
static void give_back(mend_run *r, int was_queued, int was_running) {
  mend_engine *E = r->E;
  int i = r->cur;
  if (i < 0 || i >= r->wf->nsteps) return;
  struct mend_breaker_slot *slot = r->wf->steps[i].slot;
  if (was_queued && (r->next_action == ACT_EXECUTE || r->next_action == ACT_COMPENSATE)) {
    mend_run *next = fifo_pop(&slot->waiting);
    if (!next) next = fifo_pop(&E->throttled);
    if (next) queue(next, next->next_action);
  }
  if (was_running && slot->b.state == MEND_BREAKER_HALF_OPEN) mend_breaker_release(&slot->b);
}

/* Frees a run this engine lets go of (another worker took it). */
static void drop_run(mend_run *r, int was_queued) {
  give_back(r, was_queued, r->co != NULL);
  run_free(r);
}

static void do_action(mend_run *r) {
  if (r->lost) {
    drop_run(r, 1);   /* popped from the queue just now */
    return;
  }
  action a = r->next_action;
  r->next_action = ACT_NONE;
  switch (a) {
    case ACT_ADVANCE:
      if (r->status == MEND_RUN_RUNNING) forward(r);
      else if (r->status == MEND_RUN_COMPENSATING) backward(r);
      break;
    case ACT_EXECUTE:
    case ACT_COMPENSATE: {
      /* A stopping worker starts no call: its runs are given back, and the next holder makes
       * the attempt their committed `running` row asks for (as forward() parks). Started here,
       * a call would run on a run another worker may already hold. */
      if (r->E->draining || r->E->destroying) break;
      /* At a cap, wait for a slot: the transition is committed, the call comes later. */
      struct mend_breaker_slot *slot = r->wf->steps[r->cur].slot;
      run_fifo *wait = slot->p.max_concurrency > 0 && slot->in_flight >= slot->p.max_concurrency
        ? &slot->waiting
        : r->E->cfg.max_concurrency > 0 && r->E->attempts >= r->E->cfg.max_concurrency
        ? &r->E->throttled : NULL;
      if (wait) {
        r->next_action = a;
        fifo_push(wait, r);
        break;
      }
      slot->in_flight++;
      r->held = slot;
      start_attempt(r, a == ACT_COMPENSATE);
      break;
    }
    case ACT_FINISH:
      /* its last run_to already gave the lease back (mend_store_update_run) */
      if (r->E->cfg.on_event)
        emit(r->E, json_pack("{s:s, s:s, s:s, s:s}", "type", "run_finished", "run_id", r->id,
                           "workflow", r->wf->name, "status", mend_run_status_name(r->status)));
      run_free(r);
      break;
    case ACT_NONE: break;
  }
}

static json_t *take_array(json_t **a) {
  json_t *taken = *a;
  *a = json_array();
  return taken;
}

static void checkpoint_now(mend_engine *E);
static void checkpoint_if_grown(mend_engine *E);

/* With the writer thread: once it is idle, the alerts and events of the batch it had are heard
 * (if that batch failed, durable_seq did not move and hand_off reports the failure). */
static void settle_writer(mend_engine *E) {
  if (mend_store_writer_busy(E->store)) return;
  checkpoint_if_grown(E);
  if (mend_store_durable_seq(E->store) >= E->handed_seq &&
      (json_array_size(E->alerts_handed) || json_array_size(E->events_handed)))
    fire_batch(E, take_array(&E->alerts_handed), take_array(&E->events_handed));
}

/* A batch of at least this many writes is worth the writer thread even with nothing else
 * ready: timers and I/O go on while it is written. */
#define HAND_OFF_WRITES 1024

/* The most WAL frames the loop copies itself to let the WAL start over (about 8 MiB). */
#define CATCH_UP_FRAMES 2048

/* Ends the open batch: committed here, or handed to the writer thread if it is idle (else the
 * batch grows until it is). Alerts and events are heard once their batch is durable. */
static int end_batch(mend_engine *E) {
  /* A part of this batch on the thread (store.h) is no batch to wait for: the hand-off below
   * follows it. */
  if (E->writer && mend_store_writer_busy(E->store) && !mend_store_writer_part(E->store)) {
    uv_ref((uv_handle_t *)E->wakeup);
    return 0;
  }
  /* With nothing else ready the loop would only wait for the writer thread: committing a small
   * batch here is as fast and saves a hand-off per transition (latency at moderate load). A
   * backlog is worth a second thread: the loop works through it while the thread writes. A
   * long WAL is caught up here too, once the commit leaves nothing open. */
  if (!E->writer || E->wal_catch_up ||
      (!E->ready_head && mend_store_batch_writes(E->store) < HAND_OFF_WRITES)) {
    if (lock_waiting(E)) return 0;   /* its timer kicks the next try */
    int rc = mend_store_commit(E->store);
    if (rc == MEND_STORE_BUSY) { lock_wait(E); return 0; }
    if (rc) { store_failed(E); return -1; }
    checkpoint_if_grown(E);
    if (E->wal_catch_up && !E->checkpointing) {
      /* Only a short tail is copied here; a long one (the end of a burst) goes back to the
       * thread first: 0.4 s on the loop with 1M runs parked. */
      if (mend_store_wal_frames(E->store) - E->wal_copied > CATCH_UP_FRAMES) {
        checkpoint_now(E);
      } else {
        int done = mend_store_checkpoint_catch_up(E->store);
        if (done < 0) { store_failed(E); return -1; }
        if (done) E->wal_catch_up = 0;
      }
    }
    fire_batch(E, take_array(&E->alerts), take_array(&E->events));
    return 0;
  }
  E->handed_seq = mend_store_open_seq(E->store);
  json_array_extend(E->alerts_handed, E->alerts);
  json_array_extend(E->events_handed, E->events);
  json_array_clear(E->alerts);
  json_array_clear(E->events);
  int rc = mend_store_hand_off(E->store);
  if (rc == MEND_STORE_BUSY) { lock_wait(E); return 0; }
  if (rc) { store_failed(E); return -1; }
  if (mend_store_writer_busy(E->store)) uv_ref((uv_handle_t *)E->wakeup);
  else settle_writer(E);   /* nothing was written: durable at once */
  return 0;
}

/* ---------------------------------------------------------------- a lock held elsewhere */

/* Another process holds the database's write lock (the sqlite3 shell inside a transaction, a
 * process stopped mid-write). Nothing is lost: the batch stays recorded and nothing it
 * announces runs until it commits (the write-ahead rule), so the runs simply wait. Without a
 * writer thread the commit is tried again on a timer, 50 ms doubling to 1 s; the writer thread
 * retries its batch by itself (store.c). Either way a warning is logged every few seconds,
 * and a line when the lock goes. Leases are not renewed meanwhile: a lock longer than the
 * lease is a stall like any other, and the fence sorts out what another worker took. */

static void lock_retry(uv_timer_t *t) {
  mend_engine *E = t->data;
  kick(E);
}

static void lock_warn(mend_engine *E, double now) {
  char msg[1200];
  snprintf(msg, sizeof msg, "the database is locked by another process: writes wait"
           " (%.0f s so far), retrying; %s", now - E->lock_since, mend_store_errmsg(E->store));
  mend_engine_log_line(E, "warn", NULL, NULL, 0, "store", msg);
  E->lock_warned = now;
}

static void lock_wait(mend_engine *E) {
  if (E->broken || E->destroying) return;
  double now = mend_real_now();
  if (E->lock_since <= 0) {
    E->lock_since = now;
    E->lock_delay = 0.05;
    lock_warn(E, now);
  } else {
    E->lock_delay = E->lock_delay * 2 > 1 ? 1 : E->lock_delay * 2;
    if (now - E->lock_warned >= LOCK_WARN_EVERY) lock_warn(E, now);
  }
  E->lock_retry_at = now + E->lock_delay;
  if (!E->lock_timer) {
    E->lock_timer = malloc(sizeof *E->lock_timer);
    if (!E->lock_timer) { breakdown(E, "out of memory waiting for a lock"); return; }
    uv_timer_init(E->loop, E->lock_timer);
    E->lock_timer->data = E;
  }
  uv_timer_start(E->lock_timer, lock_retry, (uint64_t)(E->lock_delay * 1000) + 1, 0);
}

/* At each turn: the writer thread's wait heard of, and the end of a lock told. */
static void watch_lock(mend_engine *E) {
  if (mend_store_locked(E->store)) {
    if (E->writer && mend_store_writer_busy(E->store)) {
      double now = mend_real_now();
      if (E->lock_since <= 0) {
        E->lock_since = now;
        lock_warn(E, now);
      } else if (now - E->lock_warned >= LOCK_WARN_EVERY) {
        lock_warn(E, now);
      }
    }
    return;
  }
  if (E->lock_since <= 0) return;
  char msg[160];
  snprintf(msg, sizeof msg, "the database lock is gone after %.1f s: going on",
           mend_real_now() - E->lock_since);
  mend_engine_log_line(E, "info", NULL, NULL, 0, "store", msg);
  E->lock_since = E->lock_retry_at = 0;
  if (E->lock_timer) uv_timer_stop(E->lock_timer);
}

/* ---------------------------------------------------------------- fencing */

/* The store drops every write to a run another worker took while this one stalled past its
 * lease (store.c, "fencing"); here such runs are let go, wherever they are, and the leases
 * renewed before they can run out under a long turn. */

static double lease_until(const mend_engine *E);

static void renew_now(mend_engine *E) {
  if (E->broken || !E->in_flight) return;
  double until = lease_until(E);
  if (mend_store_renew(E->store, E->owner, until)) { store_failed(E); return; }
  E->fence_until = until;
  kick(E);   /* committed by the next turn */
}

typedef struct id_list { mend_idset set; int oom; } id_list;

static void add_id(void *ud, const char *id) {
  id_list *l = ud;
  if (mend_idset_add(&l->set, id, strlen(id)) < 0) l->oom = 1;
}

static int in_hand(const mend_run *r) {
  return r->status == MEND_RUN_RUNNING || r->status == MEND_RUN_COMPENSATING;
}

/* Lets go of the runs in memory whose ids are in `ids`: freed, or, if queued, when their action
 * comes up. Nothing more is written for them. */
static void let_go(mend_engine *E, const mend_idset *ids, const char *why) {
  for (mend_run *r = E->runs, *next; r; r = next) {
    next = r->next;
    if (r->lost || !mend_idset_has(ids, r->id, strlen(r->id))) continue;
    mend_engine_log_line(E, "warn", r->id, NULL, 0, "lease", why);
    if (r->queued) r->lost = 1;
    else drop_run(r, 0);
  }
}

/* Before the turn acts: no action may start for a run that is no longer ours. */
static void check_fence(mend_engine *E) {
  if (E->broken) return;
  /* The renewal timer is late (turns are long): renew now, while a third of the lease is left. */
  if (mend_real_now() >= E->fence_until - E->lease_seconds / 3) renew_now(E);
  id_list lost = {0}, mine = {0};
  if (mend_store_fence_news(E->store, add_id, &lost) || E->fence_recheck) {
    E->fence_was_late = 1;
    /* A batch began late: which runs does the store say are ours? The rest are not. */
    json_t *held = mend_store_held(E->store);
    E->fence_recheck = !held && mend_store_locked(E->store);   /* again at the next turn */
    if (!held) {
      store_failed(E);
      if (lost.set.count && !E->broken) let_go(E, &lost.set, "another worker took this run"
                                               " while this one stalled past its lease: let go"
                                               " here, nothing more written");
      mend_idset_clear(&lost.set);
      return;
    }
    mend_store_fence_news(E->store, add_id, &lost);   /* found by the flush just now */
    size_t i;
    json_t *id;
    json_array_foreach(held, i, id) add_id(&mine, json_string_value(id));
    json_decref(held);
    for (mend_run *r = E->runs; r && !mine.oom; r = r->next) {
      if (!in_hand(r) || r->lost || mend_idset_has(&mine.set, r->id, strlen(r->id))) continue;
      add_id(&lost, r->id);
      if (mend_store_add_lost(E->store, r->id)) store_failed(E);
    }
    mend_idset_clear(&mine.set);
    if (!mine.oom) mend_store_fence_verified(E->store);   /* else the store keeps looking up */
  }
  if (lost.oom || mine.oom) breakdown(E, "out of memory keeping track of lost leases");
  if (lost.set.count) let_go(E, &lost.set, "another worker took this run while this one stalled"
                             " past its lease: let go here, nothing more written");
  mend_idset_clear(&lost.set);
}

/* One turn: do what the durable batches allow, then end the batch that wrote (so that a run
 * released by a commit has its next transition in the very next one). */
static int pump_turn(mend_engine *E) {
  if (E->broken) return -1;
  if (E->writer) settle_writer(E);
  else if (end_batch(E)) return -1;   /* what the last turn wrote, before acting on it */
  watch_lock(E);
  check_fence(E);
  unsigned long durable = mend_store_durable_seq(E->store);
  for (int k = 0; k < 4 && E->moved_seq < durable; k++) {
    unsigned long seq = ++E->moved_seq;
    mend_run *head = E->waiting[seq % 4].head;
    if (!head) continue;
    if (E->ready_tail) E->ready_tail->qnext = head;
    else E->ready_head = head;
    E->ready_tail = E->waiting[seq % 4].tail;
    E->waiting[seq % 4].head = E->waiting[seq % 4].tail = NULL;
  }
  if (E->moved_seq < durable) E->moved_seq = durable;   /* every list was moved */
  int did = 0;
  while (E->ready_head && !E->broken) {
    /* A turn ends at a ticking host's budget, or after MAX_TURN_ACTIONS: a burst of starts
     * must not keep the next commit (and the timers, and I/O) waiting behind all of it. The
     * rest stays ready, ahead of what this turn queues. */
    if (did > 0 && (did >= MAX_TURN_ACTIONS ||
                    (E->turn_deadline > 0 && mend_real_now() >= E->turn_deadline)))
      break;
    mend_run *r = E->ready_head;
    E->ready_head = r->qnext;
    if (!E->ready_head) E->ready_tail = NULL;
    if (r->wait_seq > durable) {
      /* it wrote again after it was queued: it waits for that batch too */
      append(&E->waiting[r->wait_seq % 4].head, &E->waiting[r->wait_seq % 4].tail, r);
      continue;
    }
    r->queued = 0;
    do_action(r);
    did++;
  }
  if (E->writer && !E->broken && end_batch(E)) return -1;
  return did;
}

static void pump_cb(uv_idle_t *h) {
  mend_engine *E = h->data;
  pump_turn(E);
  int writing = E->writer && mend_store_writer_busy(E->store);
  int more = turn_has_work(E);
  if (!more && !E->broken && virtual_timers_to_advance(E)) {
    mend_timers_advance_to(&E->timers, mend_timers_next_due(&E->timers));
    more = 1;
  }
  if (!more || E->broken) {
    uv_idle_stop(E->pump);
    if (!writing) mend_store_trim(E->store);   /* the runs wait: what a burst grew goes back */
  }
}

/* One pass of a loop that blocks (run, serve): a turn if there is work for one, else sleep
 * until something happens. Kicked only with work for a turn: a turn started while the writer
 * thread has the batch does nothing, and the idle pump keeps the loop from sleeping, so kicking
 * every time made the loop spin through the thread's whole write (110k empty turns for 10k
 * runs) and through every wait of its runs. Timers wake it on time (timers.c: a timerfd). */
static void loop_once(mend_engine *E) {
  if (turn_has_work(E) || virtual_timers_to_advance(E)) kick(E);
  uv_run(E->loop, UV_RUN_ONCE);
}

int mend_engine_run(mend_engine *E) {
  E->auto_advance = 1;
  while ((E->in_flight > 0 || has_ready_work(E)) && !E->broken) loop_once(E);
  E->auto_advance = 0;
  /* Alerts of the last runs must reach their command before a one-shot caller exits. */
  double until = mend_real_now() + 5;
  while (!E->broken && E->alert_commands > 0 && mend_real_now() < until)
    uv_run(E->loop, UV_RUN_ONCE);
  return E->broken ? -1 : 0;
}

static void drain(mend_engine *E) {
  while (!E->broken && (E->ready_head || (has_ready_work(E) && !lock_waiting(E)))) pump_turn(E);
}

int mend_engine_advance(mend_engine *E, double seconds) {
  if (!E->timers.is_virtual) {
    snprintf(E->errmsg, sizeof E->errmsg, "advance needs a virtual clock");
    return -1;
  }
  double target = mend_engine_now(E) + (seconds > 0 ? seconds : 0);
  drain(E);
  while (!E->broken) {
    uv_run(E->loop, UV_RUN_NOWAIT);
    drain(E);
    double next = mend_timers_next_due(&E->timers);
    if (next < 0 || next > target) break;
    mend_timers_advance_to(&E->timers, next);
  }
  if (!E->broken) mend_timers_advance_to(&E->timers, target);
  drain(E);
  return E->broken ? -1 : 0;
}

static mend_run *run_new(mend_engine *E, mend_workflow *wf, const char *id) {
  mend_run *r = calloc(1, sizeof *r);
  r->E = E;
  r->wf = wf;
  r->status = MEND_RUN_RUNNING;
  r->co_ref = LUA_NOREF;
  r->input_ref = r->results_ref = LUA_NOREF;
  r->fail_step = -1;
  snprintf(r->id, sizeof r->id, "%s", id);
  r->steps = calloc((size_t)wf->nsteps, sizeof *r->steps);
  for (int i = 0; i < wf->nsteps; i++) {
    step_rt *st = &r->steps[i];
    st->status = MEND_STEP_PENDING;
    st->due = st->last_delay = -1;
    st->key_ready = wf->steps[i].key_ref == LUA_NOREF;
  }
  mend_timer_init(&r->wait, on_wait);
  mend_timer_init(&r->deadline, on_deadline);
  r->ref_shard = mend_refs_shard(&E->refs, E->L);
  lua_newtable(E->L);
  r->results_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  r->next = E->runs;
  if (E->runs) E->runs->prev = r;
  E->runs = r;
  E->in_flight++;
  return r;
}

static double lease_until(const mend_engine *E) { return mend_real_now() + E->lease_seconds; }

static int start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                       const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                       int detached, char *err, int errlen);

/* A start is an answer to its caller: it waits for another process's lock up to the store's
 * default busy wait, then fails naming the lock (the loop's own writes wait on a timer). */
int mend_engine_start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                            const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                            int detached, char *err, int errlen) {
  if (E->store) mend_store_set_busy_wait(E->store, 0);
  int rc = start_value(E, L, workflow, input_idx, run_key, id_out, existed, detached, err, errlen);
  if (E->store) mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  return rc;
}

static int start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                       const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                       int detached, char *err, int errlen) {
  *existed = 0;
  if (E->broken) { snprintf(err, (size_t)errlen, "%s", E->errmsg); return -1; }
  mend_workflow *wf = mend_engine_workflow(E, workflow);
  if (!wf) { snprintf(err, (size_t)errlen, "no workflow named \"%s\" is loaded", workflow); return -1; }
  input_idx = lua_absindex(L, input_idx);
  if (run_key) {
    int found = mend_store_find_run_key(E->store, run_key, id_out, MEND_RUN_ID_LEN);
    if (found < 0) { snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store)); return -1; }
    if (found) { *existed = 1; return 0; }
  }
  char jerr[400];
  json_t *input_doc;
  char *input_json = mend_json_encode_doc(L, input_idx, "input", jerr, sizeof jerr, &input_doc);
  if (!input_json) { snprintf(err, (size_t)errlen, "%s", jerr); return -1; }
  char id[MEND_RUN_ID_LEN];
  new_run_id(E, id);
  double now = mend_engine_now(E);
  mend_run_rec rec = {id, wf->name, wf->version, wf->source, run_key, "running", input_json,
                      NULL, 0, now, now, detached ? NULL : E->owner, wf->step_names, wf->script};
  int ins = mend_store_insert_run(E->store, &rec);
  if (ins < 0) {
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    free(input_json);
    json_decref(input_doc);
    store_failed(E);
    return -1;
  }
  if (ins == 1) {
    /* Another process took the key between our look and our insert: theirs is the run. */
    free(input_json);
    json_decref(input_doc);
    *existed = 1;
    return mend_store_find_run_key(E->store, run_key, id_out, MEND_RUN_ID_LEN) == 1 ? 0 : -1;
  }
  mend_run *r = run_new(E, wf, id);
  history(r, NULL, "run", NULL, "running", 0, NULL, -1, run_key);
  /* The run's input is the JSON form, as a restarted engine will see it: the document the
   * text was printed from, not the text parsed again (5k instructions a start). */
  if (input_doc ? mend_json_push_doc(E->L, input_doc, jerr, sizeof jerr)
                : mend_json_decode(E->L, input_json, strlen(input_json), jerr, sizeof jerr))
    lua_pushnil(E->L);
  r->input_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  free(input_json);
  json_decref(input_doc);
  memcpy(id_out, r->id, MEND_RUN_ID_LEN);
  if (E->broken) { snprintf(err, (size_t)errlen, "%s", E->errmsg); return -1; }
  if (detached) {
    /* Recorded for any worker to take; durable before the caller hears the id. */
    if (commit_now(E)) {
      snprintf(err, (size_t)errlen, "%s", E->errmsg);
      run_free(r);
      return -1;
    }
    run_free(r);
    return 0;
  }
  mend_engine_log_line(E, "info", r->id, NULL, 0, "run", "started");
  /* Its first step's `running` joins the batch of its start: one commit less before the
   * first execute. */
  queue_now(r, ACT_ADVANCE);
  return 0;
}

int mend_engine_start_json(mend_engine *E, const char *workflow, const char *input_json,
                           const char *run_key, char id_out[MEND_RUN_ID_LEN], int *existed,
                           char *err, int errlen) {
  lua_State *L = E->L;
  if (mend_json_decode(L, input_json ? input_json : "null", input_json ? strlen(input_json) : 4,
                       err, errlen))
    return -1;
  int rc = mend_engine_start_value(E, L, workflow, -1, run_key, id_out, existed, 0, err, errlen);
  lua_pop(L, 1);
  return rc;
}

/* ---------------------------------------------------------------- recovery */

static int step_status_of(json_t *o, const char *field, mend_step_status *out) {
  const char *v = json_string_value(json_object_get(o, field));
  return v ? mend_step_status_parse(v, out) : -1;
}

static double real_field(json_t *o, const char *field) {
  json_t *v = json_object_get(o, field);
  return v ? json_number_value(v) : -1;
}

/* Rebuilds a run in memory from the store alone, without acting on it. NULL when the run
 * cannot be resumed by this engine (its workflow is not loaded or has other steps now), with
 * the reason in `why`; the run is then left as it is for a person or another worker. */
static mend_run *rebuild(mend_engine *E, const char *id, char *why, int whylen) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) { snprintf(why, (size_t)whylen, "%s", mend_store_errmsg(E->store)); return NULL; }
  const char *wf_name = json_string_value(json_object_get(row, "workflow"));
  mend_workflow *wf = wf_name ? mend_engine_workflow(E, wf_name) : NULL;
  json_t *steps = json_object_get(row, "steps");
  why[0] = 0;
  if (!wf) snprintf(why, (size_t)whylen, "workflow \"%s\" is not loaded here", wf_name ? wf_name : "?");
  else if ((int)json_array_size(steps) != wf->nsteps)
    snprintf(why, (size_t)whylen, "workflow \"%s\" now has %d steps, the run has %d", wf->name,
             wf->nsteps, (int)json_array_size(steps));
  for (int i = 0; !why[0] && i < wf->nsteps; i++) {
    const char *name = json_string_value(json_object_get(json_array_get(steps, (size_t)i), "name"));
    if (!name || strcmp(name, wf->steps[i].name) != 0)
      snprintf(why, (size_t)whylen, "step #%d is \"%s\" in the run but \"%s\" in the workflow", i + 1,
               name ? name : "?", wf->steps[i].name);
  }
  if (why[0]) {
    json_decref(row);
    return NULL;
  }
  double last_at;
  long seq = mend_store_last_history(E->store, id, &last_at);
  if (seq < 0) {
    snprintf(why, (size_t)whylen, "%s", mend_store_errmsg(E->store));
    json_decref(row);
    return NULL;
  }
  mend_run *r = run_new(E, wf, id);
  r->history_seq = (int)seq;
  r->last_at = last_at;
  /* A virtual clock starts at the real time: one behind the run's own moves on to it. */
  mend_timers_not_before(&E->timers, last_at);
  r->cancel_asked = json_is_true(json_object_get(row, "cancel_requested"));
  mend_run_status_parse(json_string_value(json_object_get(row, "status")), &r->status);
  r->attention = json_is_true(json_object_get(row, "attention"));
  r->error = mend_dupstr(json_string_value(json_object_get(row, "error")));
  /* The reason is one of the engine's own static strings; map the stored text back to it. */
  static const char *const reasons[] = {"attempts_exhausted", "fatal", "severity_2", "compensable",
                                        "error", "severity_3", "compensation_failed", "cancelled"};
  const char *reason = json_string_value(json_object_get(row, "reason"));
  for (size_t k = 0; reason && k < sizeof reasons / sizeof *reasons; k++)
    if (strcmp(reason, reasons[k]) == 0) r->reason = reasons[k];
  /* A run going back always has a reason; one this mend does not know counts as an error. */
  if (!r->reason && strcmp(json_string_value(json_object_get(row, "status")), "running") != 0)
    r->reason = "error";
  mend_json_push(E->L, json_object_get(row, "input"));
  r->input_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  for (int i = 0; i < wf->nsteps; i++) {
    json_t *so = json_array_get(steps, (size_t)i);
    step_rt *st = &r->steps[i];
    step_status_of(so, "status", &st->status);
    st->attempts = (int)json_integer_value(json_object_get(so, "attempts"));
    st->comp_attempts = (int)json_integer_value(json_object_get(so, "comp_attempts"));
    st->custom_key = json_is_true(json_object_get(so, "custom_key"));
    if (st->custom_key) st->idem_key = mend_dupstr(json_string_value(json_object_get(so, "idempotency_key")));
    st->key_ready = st->custom_key || wf->steps[i].key_ref == LUA_NOREF;
    st->error = mend_dupstr(json_string_value(json_object_get(so, "error")));
    st->due = real_field(so, "due");
    st->slept = json_is_true(json_object_get(so, "slept"));
    /* A pending step with no attempt may be one listed from step_names, and a running one may
     * be only in history (write_step): their first write puts the whole row, which is right for
     * a row that exists too. */
    st->has_row = st->status != MEND_STEP_RUNNING &&
                  (st->status != MEND_STEP_PENDING || st->attempts > 0 || st->comp_attempts > 0);
    st->last_delay = real_field(so, "last_delay");
    json_t *result = json_object_get(so, "result");
    if (result) {
      st->result = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY);
      if (st->status == MEND_STEP_SUCCEEDED || st->status == MEND_STEP_COMPENSATING) set_result(r, i);
    }
    if (st->status == MEND_STEP_FAILED || st->status == MEND_STEP_COMPENSATION_FAILED) r->fail_step = i;
    st->compensate_self = st->status == MEND_STEP_FAILED && r->reason &&
      (strcmp(r->reason, "compensable") == 0 || strcmp(r->reason, "severity_2") == 0);
  }
  json_decref(row);
  return r;
}

/* A run rebuilt from the store: the step it is at, going forward (the first not succeeded) or
 * back (the one being compensated: steps without compensate stay succeeded when skipped, so
 * look past them). */
static void find_current_step(mend_run *r) {
  const mend_workflow *wf = r->wf;
  if (r->status == MEND_RUN_RUNNING) {
    r->cur = 0;
    while (r->cur < wf->nsteps && r->steps[r->cur].status == MEND_STEP_SUCCEEDED) r->cur++;
  } else {
    r->cur = wf->nsteps - 1;
    while (r->cur >= 0 && (!needs_compensation(r, r->cur) || wf->steps[r->cur].compensate_ref == LUA_NOREF))
      r->cur--;
  }
}

/* Sets a rebuilt run going from where the store says it stood. */
static void schedule_restored(mend_run *r) {
  const mend_workflow *wf = r->wf;
  double now = mend_engine_now(r->E);
  find_current_step(r);
  if (r->status == MEND_RUN_RUNNING) {
    step_rt *st = r->cur < wf->nsteps ? &r->steps[r->cur] : NULL;
    if (st && (st->status == MEND_STEP_RETRY_WAIT || st->status == MEND_STEP_BREAKER_OPEN ||
               st->status == MEND_STEP_SLEEPING)) {
      r->wait_kind = st->status == MEND_STEP_RETRY_WAIT ? WAIT_RETRY
                   : st->status == MEND_STEP_BREAKER_OPEN ? WAIT_BREAKER : WAIT_STEP_SLEEP;
      arm(r, &r->wait, st->due > now ? st->due : now);   /* already due: now */
      return;
    }
  } else {
    step_rt *st = r->cur >= 0 ? &r->steps[r->cur] : NULL;
    if (st && st->status == MEND_STEP_COMPENSATING && st->due >= 0) {
      r->wait_kind = WAIT_COMP_RETRY;
      arm(r, &r->wait, st->due > now ? st->due : now);
      return;
    }
  }
  queue(r, ACT_ADVANCE);
}

static int cancel_now(mend_run *r, const char *who, char *err, int errlen);

/* Sets a rebuilt run going, or cancels it when a cancel was asked for while nobody held it: the
 * request binds whoever takes the run next. */
static void carry_on(mend_run *r) {
  char err[300];
  if (r->cancel_asked && r->status == MEND_RUN_RUNNING) {
    find_current_step(r);
    if (cancel_now(r, "an operator (requested)", err, sizeof err) == 0) return;
    mend_engine_log_line(r->E, "warn", r->id, NULL, 0, "operator", err);
  }
  schedule_restored(r);
}

static int restore(mend_engine *E, const char *id) {
  char why[300];
  mend_run *r = rebuild(E, id, why, sizeof why);
  if (!r) {
    mend_engine_log_line(E, "error", id, NULL, 0, "recover", why);
    if (mend_store_release(E->store, id, E->owner)) store_failed(E);
    return -1;
  }
  history(r, NULL, "recovered", NULL, mend_run_status_name(r->status), 0, NULL, -1, E->owner);
  mend_engine_log_line(E, "info", r->id, NULL, 0, "recover", "resumed from the store");
  carry_on(r);
  return 0;
}

/* A lease of a worker on this host whose process is gone need not be waited out: a restart
 * after kill -9 takes its runs over at once. A reused pid only makes us wait for the lease. */
static int release_dead_local_owners(mend_engine *E) {
  /* It reads every unfinished run's owner: once a second is enough, not every poll, and less
   * often when that read is long (40 ms with 100k runs held), so that it costs the loop at
   * most a twentieth of its time. */
  double now = mend_real_now();
  if (now < E->next_dead_check) return 0;
  int released = 0;
  json_t *owners = mend_store_lease_holders(E->store, now);
  double took = mend_real_now() - now;
  E->next_dead_check = now + (took * 20 > 1.0 ? took * 20 : 1.0);
  if (!owners) { store_failed(E); return 0; }
  const char *mine_host_end = strchr(E->owner, ':');
  size_t host_len = mine_host_end ? (size_t)(mine_host_end - E->owner) : 0;
  size_t i;
  json_t *o;
  json_array_foreach(owners, i, o) {
    const char *owner = json_string_value(o);
    if (!owner || strcmp(owner, E->owner) == 0 || strncmp(owner, E->owner, host_len + 1) != 0)
      continue;
    long pid = strtol(owner + host_len + 1, NULL, 10);
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
      if (mend_store_release_owner(E->store, owner)) { store_failed(E); break; }
      mend_engine_log_line(E, "info", NULL, NULL, 0, "recover", owner);
      released++;
    }
  }
  json_decref(owners);
  return released;
}

/* Takes the unfinished runs that nobody holds and resumes them; with MEND_CLAIM_FREE in `how`,
 * not those of workers whose lease ran out. Returns how many. */
static int claim_and_restore(mend_engine *E, int limit, int how) {
  if (limit <= 0 || E->broken) return 0;
  release_dead_local_owners(E);
  if (E->broken) return 0;
  /* A serving worker takes the newest half first: new work must not wait behind a backlog
   * being recovered, and the oldest half keeps the backlog moving. */
  json_t *ids = mend_store_claim(E->store, E->owner, mend_real_now(), lease_until(E),
                                 E->serving ? (limit + 1) / 2 : limit,
                                 how | (E->serving ? MEND_CLAIM_NEWEST : 0));
  if (ids && E->serving && (int)json_array_size(ids) < limit) {
    json_t *more = mend_store_claim(E->store, E->owner, mend_real_now(), lease_until(E),
                                    limit - (int)json_array_size(ids), how);
    if (more) json_array_extend(ids, more);
    json_decref(more);
    if (!more) { json_decref(ids); ids = NULL; }
  }
  if (!ids) { store_failed(E); return 0; }
  size_t i;
  json_t *id;
  int n = 0;
  /* The claim is durable before any of these runs acts: each is queued behind the batch that
   * holds it. With nothing claimed the write lock must not wait for a turn: commit now. */
  if (json_array_size(ids) == 0) {
    if (mend_store_commit(E->store)) store_failed(E);
    json_decref(ids);
    return 0;
  }
  kick(E);
  check_fence(E);   /* a run we lost and now claim again must be let go before it returns */
  if (E->fence_was_late) {
    /* One this engine still has in memory from before a stall (another worker took it, then
     * gave it back) is stale: the store's copy is the run now. */
    id_list claimed = {0};
    json_array_foreach(ids, i, id) add_id(&claimed, json_string_value(id));
    if (claimed.oom) breakdown(E, "out of memory keeping track of lost leases");
    else let_go(E, &claimed.set, "claimed again after a stall: the stored run replaces this copy");
    mend_idset_clear(&claimed.set);
  }
  json_array_foreach(ids, i, id) n += restore(E, json_string_value(id)) == 0;
  json_decref(ids);
  return n;
}

int mend_engine_recover_runs(mend_engine *E, int limit) {
  int n = claim_and_restore(E, limit > 0 ? limit : 1 << 30, 0);
  return E->broken ? -1 : n;
}

/* ---------------------------------------------------------------- serving */

static void reload_breakers(mend_engine *E);
static void take_cancel_requests(mend_engine *E);

/* ---- checkpoints, off the loop thread: a commit never stalls on one */

/* Past this many WAL frames (about 32 MiB) passive checkpoints are not keeping up, and the loop
 * lets the WAL start over (wal_catch_up): two fdatasyncs while no commit can happen, which cost
 * more the more WAL is waiting to be written back. At 64 MiB they were 10 and 26 ms, every
 * 0.6 s at 50k steps/s (process durability), and p99 step latency 8.7 ms over 9 s; at 32 MiB,
 * 4.1 ms, with W1 and W3 unchanged (at 16 MiB bursts slowed: W3 lateness +30%). */
#define WAL_FRAMES_LIMIT 8192
/* A checkpoint starts each time the WAL grew by this many frames (about 4 MiB), besides the
 * one a second. A second's worth of small commits (60 MB of WAL at 25k steps/s) copied and
 * synced at once held every commit behind it for 10-30 ms: the database's sync and the WAL's
 * share the disk and ext4's journal (W1p p99 6-10 ms; 2.2-3.3 ms at 500-1000 frames). */
#define CHECKPOINT_FRAMES 1000

/* After a commit: a checkpoint if the WAL grew enough since the last one began. */
static void checkpoint_if_grown(mend_engine *E) {
  if (!E->checkpoint_timer) return;   /* no file, or no second connection for checkpoints */
  int frames = mend_store_wal_frames(E->store);
  if (frames < E->checkpoint_from) E->checkpoint_from = 0;   /* the WAL started over */
  if (E->checkpointing || frames - E->checkpoint_from < CHECKPOINT_FRAMES) return;
  E->checkpoint_from = frames;
  checkpoint_now(E);
}

static void checkpoint_on_thread(uv_work_t *w) {
  mend_engine *E = w->data;
  E->wal_frames = 0;
  E->wal_copied = mend_store_checkpoint(E->store, &E->wal_frames);
  /* A long WAL is copied again at once, a few times: each pass copies only what was committed
   * during the one before, so what the loop copies itself (end_batch) is a few milliseconds of
   * writes, not the second's worth that one pass leaves (a 72 ms stall of the loop in W4). */
  for (int pass = 0; pass < 3 && E->wal_frames > WAL_FRAMES_LIMIT; pass++) {
    int before = E->wal_frames;
    E->wal_copied = mend_store_checkpoint(E->store, &E->wal_frames);
    if (E->wal_frames == before) break;   /* nothing new since: the loop has nothing to copy */
  }
}

static void checkpoint_done(uv_work_t *w, int status) {
  (void)status;
  mend_engine *E = w->data;
  E->checkpointing = 0;
  /* The WAL starts over at the first write after a checkpoint that left nothing behind.
   * Under steady writes there is no such moment, and the WAL would grow without end (to GBs
   * in W4 with 1M runs): the loop copies the last few frames itself between two batches. */
  if (E->wal_frames > WAL_FRAMES_LIMIT) E->wal_catch_up = 1;
}

static void checkpoint_now(mend_engine *E) {
  if (E->checkpointing || E->broken || E->destroying) return;
  E->checkpointing = 1;
  E->checkpoint_work.data = E;
  if (uv_queue_work(E->loop, &E->checkpoint_work, checkpoint_on_thread, checkpoint_done))
    E->checkpointing = 0;
}

static void start_checkpoint(uv_timer_t *t) { checkpoint_now(t->data); }

static void renew_leases(uv_timer_t *t) { renew_now(t->data); }

/* The quick look every poll; the thorough one (it walks every run held: 27 ms with 100k) at the
 * first poll, then at most once in 30 s and in a hundredth of the loop's time. */
static int claimable(mend_engine *E, double now) {
  if (now < E->next_thorough_look) return mend_store_claimable(E->store, E->owner, now, 0);
  double began = mend_real_now();   /* not `now`: the poll may have waited for the writer */
  int found = mend_store_claimable(E->store, E->owner, now, 1);
  double took = mend_real_now() - began;
  E->next_thorough_look = now + (took * 100 > 30.0 ? took * 100 : 30.0);
  return found;
}

static void poll_for_runs(uv_timer_t *t) {
  mend_engine *E = t->data;
  if (E->draining || E->broken) return;
  /* No look for work while another process holds the lock: it would wait for the lock too. */
  if (mend_store_locked(E->store)) {
    uv_timer_start(t, poll_for_runs, E->poll_ms, 0);
    return;
  }
  double now = mend_real_now();
  if (now >= E->next_reload) {
    E->next_reload = now + 1.0;
    reload_breakers(E);
    take_cancel_requests(E);
    if (E->broken) return;
  }
  int room = E->max_in_flight > 0 ? E->max_in_flight - E->in_flight : 1000;
  if (room > 1000) room = 1000;
  /* A dead worker's runs must become claimable first: they are not, until given back. The
   * look of the read-only connection cannot see that yet. */
  int released = release_dead_local_owners(E);
  if (!E->broken && room > 0) {
    /* Runs given back just now are nobody's, in a batch the look cannot see yet. */
    int found = claimable(E, now) | (released ? MEND_CLAIMABLE_FREE : 0);
    /* Runs nobody holds are taken without walking the runs others hold, which is what a
     * claim of every kind costs: only a lease that ran out asks for that. */
    if (found) claim_and_restore(E, room, found & MEND_CLAIMABLE_GONE ? 0 : MEND_CLAIM_FREE);
  }
  /* The next poll is an interval after this one ends, not after it began: a poll that takes
   * longer than the interval must not run back to back and leave the loop no turn between. */
  if (!E->broken) uv_timer_start(t, poll_for_runs, E->poll_ms, 0);
}

static void on_signal(uv_signal_t *h, int signum) {
  mend_engine *E = h->data;
  mend_engine_log_line(E, "info", NULL, NULL, 0, "worker",
                       signum == SIGINT ? "SIGINT: finishing attempts in flight" : "SIGTERM: finishing attempts in flight");
  mend_engine_stop(E);
}

void mend_engine_stop(mend_engine *E) {
  if (E->draining) return;
  E->draining = 1;
  E->grace_deadline = mend_real_now() + E->cfg.grace_seconds;
  if (E->poll_timer) uv_timer_stop(E->poll_timer);
  kick(E);
}

static void close_and_free(uv_handle_t *h) { free(h); }

int mend_engine_serve(mend_engine *E, double poll_seconds, int max_in_flight) {
  E->serving = 1;
  E->max_in_flight = max_in_flight;
  E->poll_timer = malloc(sizeof *E->poll_timer);
  uv_timer_init(E->loop, E->poll_timer);
  E->poll_timer->data = E;
  E->poll_ms = (uint64_t)(poll_seconds * 1000.0);
  if (E->poll_ms < 1) E->poll_ms = 1;
  uv_timer_start(E->poll_timer, poll_for_runs, 0, 0);   /* re-armed by each poll */
  int sigs[2] = {SIGINT, SIGTERM};
  for (int k = 0; k < 2; k++) {
    E->signals[k] = malloc(sizeof *E->signals[k]);
    uv_signal_init(E->loop, E->signals[k]);
    E->signals[k]->data = E;
    uv_signal_start(E->signals[k], on_signal, sigs[k]);
  }
  E->auto_advance = 1;
  while (!E->broken) {
    if (E->draining && (E->attempts == 0 || mend_real_now() >= E->grace_deadline)) break;
    loop_once(E);
  }
  E->auto_advance = 0;
  /* Give back every run still held so that another worker can take it at once. */
  if (!E->broken) {
    for (mend_run *r = E->runs; r; r = r->next)
      if (mend_store_release(E->store, r->id, E->owner)) { store_failed(E); break; }
    if (!E->broken && mend_store_commit(E->store)) store_failed(E);
  }
  uv_close((uv_handle_t *)E->poll_timer, close_and_free);
  E->poll_timer = NULL;
  for (int k = 0; k < 2; k++) {
    uv_close((uv_handle_t *)E->signals[k], close_and_free);
    E->signals[k] = NULL;
  }
  E->serving = 0;
  return E->broken ? -1 : 0;
}

/* ---------------------------------------------------------------- repairs by people */

static mend_run *find_run(mend_engine *E, const char *id) {
  for (mend_run *r = E->runs; r; r = r->next)
    if (!r->lost && strcmp(r->id, id) == 0) return r;   /* a lost copy is no longer the run */
  return NULL;
}

/* The time for a row of a run this engine does not hold: now, or its last row's if later. */
static double entry_time(mend_engine *E, const char *id) {
  double now = mend_engine_now(E), last = -1;
  if (mend_store_last_history(E->store, id, &last) < 0) store_failed(E);
  return last > now ? last : now;
}

/* r: the run, if this engine holds it (it numbers the row); else NULL and the id. */
static void operator_entry(mend_engine *E, mend_run *r, const char *id, const char *op,
                           const char *who, const char *note) {
  char detail[1200];
  snprintf(detail, sizeof detail, "%s by %s%s%s", op, who ? who : "?", note ? ": " : "", note ? note : "");
  mend_history_rec h = {id, NULL, r ? history_time(r) : entry_time(E, id), "operator", NULL, NULL,
                        0, NULL, -1, detail, r ? ++r->history_seq : 0};
  if (mend_store_append_history(E->store, &h)) store_failed(E);
  mend_engine_log_line(E, "info", id, NULL, 0, "operator", detail);
}

/* Reads a run's status and reason from the store; 0, or -1 with "no run <id>" in err. */
static int stored_status(mend_engine *E, const char *id, char *status, char *reason, int len,
                         char *err, int errlen) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  const char *st = json_string_value(json_object_get(row, "status"));
  const char *why = json_string_value(json_object_get(row, "reason"));
  snprintf(status, (size_t)len, "%s", st ? st : "");
  snprintf(reason, (size_t)len, "%s", why ? why : "");
  json_decref(row);
  return 0;
}

/* 1 when `owner` (host:pid:tag) is another engine that holds its runs now: its lease lasts
 * and, on this host, its process is there (one killed leaves a lease nobody will renew). */
static int holder_live(const mend_engine *E, const char *owner, double until) {
  if (!owner[0] || strcmp(owner, E->owner) == 0 || until < mend_real_now()) return 0;
  const char *host_end = strchr(E->owner, ':');
  size_t host_len = host_end ? (size_t)(host_end - E->owner) + 1 : 0;
  if (host_len && strncmp(owner, E->owner, host_len) == 0) {
    long pid = strtol(owner + host_len, NULL, 10);
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
  }
  return 1;
}

int mend_engine_holder(mend_engine *E, const char *id, char *owner, int len) {
  double until;
  int found = mend_store_owner(E->store, id, owner, len, &until);
  if (found < 0) return mend_errorf(owner, len, "%s", mend_store_errmsg(E->store));
  if (found == 0) owner[0] = 0;
  if (found && strcmp(owner, E->owner) == 0) return find_run(E, id) != NULL;   /* this engine */
  return found && holder_live(E, owner, until);
}

/* Brings a run that no live engine holds into this engine, holding its lease. */
static mend_run *take_over(mend_engine *E, const char *id, char *err, int errlen) {
  char owner[128];
  double until;
  if (mend_store_owner(E->store, id, owner, sizeof owner, &until) < 0) {
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return NULL;
  }
  if (holder_live(E, owner, until)) {
    mend_errorf(err, errlen, "run %s is held by worker %s (lease for %.0f s more)", id, owner,
           until - mend_real_now());
    return NULL;
  }
  mend_run *r = rebuild(E, id, err, errlen);
  if (!r) return NULL;
  find_current_step(r);   /* a cancel acts on it */
  if (mend_store_take(E->store, id, E->owner, lease_until(E))) store_failed(E);
  return r;
}

/* Cancels a run held in memory: the attempt in flight is abandoned, the steps done are
 * compensated in reverse. */
static void unthrottle(mend_run *r) {
  run_fifo *f = r->waiting_in;
  if (!f) return;
  for (mend_run **p = &f->head, *prev = NULL; *p; prev = *p, p = &(*p)->tnext) {
    if (*p != r) continue;
    *p = r->tnext;
    if (f->tail == r) f->tail = prev;
    break;
  }
  r->waiting_in = NULL;
}

static int cancel_now(mend_run *r, const char *who, char *err, int errlen) {
  if (r->status != MEND_RUN_RUNNING)
    return mend_errorf(err, errlen, "run %s is %s: only a running run can be cancelled", r->id,
                  mend_run_status_name(r->status));
  mend_engine *E = r->E;
  unthrottle(r);
  int i = r->cur;
  step_rt *st = i < r->wf->nsteps ? &r->steps[i] : NULL;
  int was_running = r->co != NULL || (st && st->status == MEND_STEP_RUNNING);
  give_back(r, r->queued, was_running);
  end_attempt(r);
  mend_timer_disarm(&E->timers, &r->wait);
  r->wait_kind = WAIT_NONE;
  operator_entry(E, r, r->id, "cancel", who, NULL);
  char msg[300];
  snprintf(msg, sizeof msg, "cancelled by %s", who ? who : "?");
  if (st && st->status == MEND_STEP_RUNNING) step_to(r, i, MEND_STEP_FAILED, msg, -1, NULL);
  else if (st && st->status != MEND_STEP_PENDING) step_to(r, i, MEND_STEP_PENDING, NULL, -1, NULL);
  set_str(&r->error, msg);
  r->reason = "cancelled";
  r->fail_step = i;
  int anything = 0;
  for (int j = 0; j < i && j < r->wf->nsteps; j++) anything |= r->steps[j].status == MEND_STEP_SUCCEEDED;
  if (!anything) {
    run_to(r, MEND_RUN_FAILED);
    queue(r, ACT_FINISH);
  } else {
    run_to(r, MEND_RUN_COMPENSATING);
    r->cur = i - 1;
    queue(r, ACT_ADVANCE);
  }
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

int mend_engine_cancel_run(mend_engine *E, const char *id, const char *who, char *err, int errlen) {
  mend_run *r = find_run(E, id);
  if (r) return cancel_now(r, who, err, errlen);
  char status[64], reason[64];
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "running") != 0)
    return mend_errorf(err, errlen, "run %s is %s: only a running run can be cancelled", id, status);
  char owner[128];
  int live = mend_engine_holder(E, id, owner, sizeof owner);
  if (live < 0) return mend_errorf(err, errlen, "%s", owner);
  char why[400] = "";
  r = live ? NULL : take_over(E, id, why, sizeof why);
  if (!r) {
    /* Held by a live worker, which cancels at its next poll; or not to be rebuilt here (its
     * workflow is not loaded): whoever takes it next cancels it (carry_on). */
    if (mend_store_request_cancel(E->store, id)) store_failed(E);
    mend_store_repairing(E->store, 1);   /* a note in its history, not a transition */
    operator_entry(E, NULL, id, "cancel requested", who, live ? NULL : why);
    mend_store_repairing(E->store, 0);
    if (commit_now(E)) return mend_errorf(err, errlen, "%s", E->errmsg);
    if (!live) snprintf(err, (size_t)errlen, "%s", why);
    return live ? 1 : 2;
  }
  return cancel_now(r, who, err, errlen);
}

int mend_engine_resume_run(mend_engine *E, const char *id, char *err, int errlen) {
  if (find_run(E, id)) return 0;
  char status[64], reason[64];
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "running") != 0 && strcmp(status, "compensating") != 0)
    return mend_errorf(err, errlen, "run %s is %s: it has ended", id, status);
  int live = mend_engine_holder(E, id, err, errlen);
  if (live) return live < 0 ? -1 : 1;   /* err: the holder */
  mend_run *r = take_over(E, id, err, errlen);
  if (!r) return -1;
  history(r, NULL, "recovered", NULL, mend_run_status_name(r->status), 0, NULL, -1, E->owner);
  mend_engine_log_line(E, "info", r->id, NULL, 0, "recover", "resumed from the store");
  carry_on(r);
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

int mend_engine_dlq_retry(mend_engine *E, const char *id, const char *who, char *err, int errlen) {
  char status[64], reason[64];
  if (find_run(E, id)) return mend_errorf(err, errlen, "run %s is in flight: it is not in the dead-letter queue", id);
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "needs_attention") != 0)
    return mend_errorf(err, errlen, "run %s is %s: only a run in the dead-letter queue can be retried", id, status);
  if (strcmp(reason, "attempts_exhausted") == 0)
    return mend_errorf(err, errlen, "run %s was compensated after its attempts ran out: there is nothing left to "
                  "resume; start a new run, or resolve this one with a note", id);
  mend_run *r = take_over(E, id, err, errlen);
  if (!r) return -1;
  /* The step to resume from, found before anything is written. */
  int comp = strcmp(reason, "compensation_failed") == 0;
  int i = r->wf->nsteps - 1;
  if (comp) while (i >= 0 && r->steps[i].status != MEND_STEP_COMPENSATION_FAILED) i--;
  else i = r->fail_step;
  if (i < 0) {
    run_free(r);
    return mend_errorf(err, errlen, "run %s: no step is %s", id, comp ? "compensation_failed" : "failed");
  }
  operator_entry(E, r, id, "dlq retry", who, NULL);
  if (mend_store_dlq_remove(E->store, id)) store_failed(E);
  if (comp) {
    r->steps[i].comp_attempts = 0;   /* fresh attempts */
    r->steps[i].last_delay = -1;
    run_to(r, MEND_RUN_COMPENSATING);
  } else {   /* severity 3: the failed step again, with fresh attempts */
    r->steps[i].attempts = 0;
    r->steps[i].last_delay = -1;
    r->steps[i].compensate_self = 0;
    set_str(&r->steps[i].error, NULL);
    step_to(r, i, MEND_STEP_PENDING, NULL, -1, "retried from the dead-letter queue");
    r->reason = NULL;
    set_str(&r->error, NULL);
    r->fail_step = -1;
    run_to(r, MEND_RUN_RUNNING);
  }
  r->cur = i;
  queue(r, ACT_ADVANCE);
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

int mend_engine_resolve(mend_engine *E, const char *id, const char *who, const char *note,
                        char *err, int errlen) {
  char status[64], reason[64];
  if (!note || !*note) return mend_errorf(err, errlen, "resolving a run needs a note saying what was done");
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "needs_attention") != 0)
    return mend_errorf(err, errlen, "run %s is %s: only a run in the dead-letter queue can be resolved", id, status);
  double now = entry_time(E, id);
  json_t *row = mend_store_run(E->store, id);
  const char *error = row ? json_string_value(json_object_get(row, "error")) : NULL;
  int attention = row ? json_is_true(json_object_get(row, "attention")) : 0;
  mend_store_repairing(E->store, 1);   /* a dead letter is nobody's: no lease to fence */
  if (mend_store_update_run(E->store, id, "resolved", error, attention, now, reason)) store_failed(E);
  json_decref(row);
  mend_history_rec h = {id, NULL, now, "run", "needs_attention", "resolved", 0, NULL, -1, note, 0};
  if (mend_store_append_history(E->store, &h)) store_failed(E);
  operator_entry(E, NULL, id, "dlq resolve", who, note);
  mend_store_repairing(E->store, 0);
  if (mend_store_dlq_remove(E->store, id)) store_failed(E);
  if (commit_now(E)) return mend_errorf(err, errlen, "%s", E->errmsg);
  return 0;
}

int mend_engine_breaker_set(mend_engine *E, const char *key, const char *op, double seconds,
                            const char *who, char *err, int errlen) {
  struct mend_breaker_slot *s = NULL;
  for (struct mend_breaker_slot *x = E->breakers; x; x = x->next)
    if (strcmp(x->key, key) == 0) s = x;
  mend_breaker b;
  int found = s ? 1 : mend_store_get_breaker(E->store, key, &b);
  if (found < 0) return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  if (!found) return mend_errorf(err, errlen, "no breaker %s (a breaker exists once a step using it has run)", key);
  if (s) b = s->b;
  double now = mend_engine_now(E);
  mend_breaker_state before = b.state;
  if (strcmp(op, "reset") == 0 || strcmp(op, "close") == 0) {
    mend_breaker_init(&b);
  } else if (strcmp(op, "open") == 0) {
    b.state = MEND_BREAKER_OPEN;
    b.failures = b.successes = b.probes = 0;
    b.opened_at = now;
    b.open_until = now + (seconds > 0 ? seconds : s ? s->p.open_seconds : 30);
  } else {
    return mend_errorf(err, errlen, "breaker operation must be reset, open or close, got %s", op);
  }
  if (s) s->b = b;
  if (mend_store_put_breaker(E->store, key, &b, now)) store_failed(E);
  char detail[200];
  snprintf(detail, sizeof detail, "%s -> %s", mend_breaker_state_name(before), mend_breaker_state_name(b.state));
  if (mend_store_audit(E->store, now, who, op, key, detail)) store_failed(E);
  if (commit_now(E)) return mend_errorf(err, errlen, "%s", E->errmsg);
  return 0;
}

/* Other processes change breakers (manual overrides, other workers): a serving engine reads
 * them back now and then. */
static void reload_breakers(mend_engine *E) {
  for (struct mend_breaker_slot *s = E->breakers; s; s = s->next) {
    mend_breaker b;
    if (mend_store_get_breaker(E->store, s->key, &b) != 1) continue;
    b.probes = b.state == s->b.state ? s->b.probes : 0;
    s->b = b;
  }
}

static void take_cancel_requests(mend_engine *E) {
  json_t *ids = mend_store_cancel_requests(E->store, E->owner);
  if (!ids) { store_failed(E); return; }
  size_t i;
  json_t *id;
  json_array_foreach(ids, i, id) {
    mend_run *r = find_run(E, json_string_value(id));
    char err[300];
    if (r && cancel_now(r, "an operator (requested)", err, sizeof err))
      mend_engine_log_line(E, "warn", r->id, NULL, 0, "operator", err);
  }
  json_decref(ids);
}

/* ---------------------------------------------------------------- workflows */

static mend_workflow *adopt(mend_engine *E, mend_workflow *wf) {
  if (!wf) return NULL;
  for (int i = 0; i < wf->nsteps; i++)
    wf->steps[i].slot = breaker_slot(E, wf->steps[i].breaker_key, &wf->steps[i].breaker);
  /* Newest first: a reloaded workflow serves new runs; the old one stays for runs in flight. */
  wf->next = E->workflows;
  E->workflows = wf;
  return wf;
}

/* Runs a workflow's text (its top level, under the engine's limits and, in a sandboxed engine,
 * in an environment of its own) and checks the definition it returns. `path` names it in
 * messages and is where its `require` looks in a sandbox. */
static mend_workflow *load_text(mend_engine *E, const char *text, size_t len, const char *path,
                                const char *version, char *err, int errlen) {
  lua_State *L = E->L;
  int top = lua_gettop(L);
  lua_pushfstring(L, "@%s", path);
  int status = luaL_loadbufferx(L, text, len, lua_tostring(L, -1), "t");
  if (status == LUA_OK && E->cfg.sandbox && E->owned_state) {
    const char *slash = strrchr(path, '/');
    lua_pushlstring(L, path, slash ? (size_t)(slash - path) : 0);
    mend_sandbox_env(L, lua_tostring(L, -1), E->cfg.lua_path);
    lua_setupvalue(L, -3, 1);
    lua_pop(L, 1);
  }
  if (status == LUA_OK) {
    mend_limits lim;
    mend_limits_init(&lim, "workflow file", E->cfg.instruction_budget, CALL_SECONDS);
    status = guarded_pcall(E, &lim, 0, 1);
    if (status != LUA_OK && lim.tripped) {
      char why[200];
      mend_errorf(err, errlen, "%s: %s while it loaded", path, mend_limits_message(&lim, why, sizeof why));
      lua_settop(L, top);
      return NULL;
    }
  }
  if (status != LUA_OK) {
    char text_of[600];
    if (status == LUA_ERRMEM && E->owned_state && E->cfg.memory_limit > 0)
      mend_errorf(err, errlen, "%s: exceeded the memory limit (%zu bytes) while it loaded", path,
                  E->cfg.memory_limit);
    else   /* Lua's message already starts with the file name and line */
      mend_errorf(err, errlen, "%s", describe(E, L, -1, text_of, sizeof text_of));
    lua_settop(L, top);
    return NULL;
  }
  mend_workflow *wf = mend_workflow_from_table(L, -1, path, version, err, errlen);
  lua_settop(L, top);
  /* A script with a NUL byte is not kept: it could not come back whole as text. */
  if (wf && memchr(text, 0, len) == NULL && !(wf->script = malloc(len + 1))) {
    mend_errorf(err, errlen, "%s: out of memory", path);
    mend_workflow_free(L, wf);
    return NULL;
  }
  if (wf && wf->script) {
    memcpy(wf->script, text, len);
    wf->script[len] = 0;
  }
  return wf;
}

mend_workflow *mend_engine_load_version(mend_engine *E, const char *name, const char *version,
                                        char *err, int errlen) {
  for (mend_workflow *wf = E->workflows; wf; wf = wf->next)
    if (strcmp(wf->name, name) == 0 && wf->version && strcmp(wf->version, version) == 0) return wf;
  char *source = NULL;
  char *text = mend_store_version_script(E->store, name, version, &source);
  if (!text) {
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return NULL;
  }
  size_t len = strlen(text);
  char v[20];
  mend_workflow_version_of(text, len, v);
  mend_workflow *wf = load_text(E, text, len, source ? source : name, v, err, errlen);
  free(text);
  free(source);
  if (wf && strcmp(wf->name, name) != 0) {
    mend_errorf(err, errlen, "the script kept for %s version %s names workflow \"%s\"", name,
                version, wf->name);
    mend_workflow_free(E->L, wf);
    return NULL;
  }
  if (!wf || !mend_engine_workflow(E, name)) return adopt(E, wf);
  /* An older version: it carries its runs on, and the newest one loaded still serves new runs. */
  mend_workflow **tail = &E->workflows;
  while (*tail) tail = &(*tail)->next;
  adopt(E, wf);
  E->workflows = wf->next;
  wf->next = NULL;
  *tail = wf;
  return wf;
}

mend_workflow *mend_engine_load_file(mend_engine *E, const char *path, char *err, int errlen) {
  size_t len;
  char *text = mend_workflow_read(path, &len, err, errlen);
  if (!text) return NULL;
  char version[20];
  mend_workflow_version_of(text, len, version);
  mend_workflow *wf = load_text(E, text, len, path, version, err, errlen);
  free(text);
  return adopt(E, wf);
}

mend_workflow *mend_engine_register(mend_engine *E, int idx, char *err, int errlen) {
  return adopt(E, mend_workflow_from_table(E->L, idx, "register", NULL, err, errlen));
}

mend_workflow *mend_engine_workflow(mend_engine *E, const char *name) {
  for (mend_workflow *wf = E->workflows; wf; wf = wf->next)
    if (strcmp(wf->name, name) == 0) return wf;
  return NULL;
}

/* ---------------------------------------------------------------- life */

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
  const char *msg = lua_tostring(L, -1);
  lua_getfield(L, 1, "run_id");
  lua_getfield(L, 1, "step");
  lua_getfield(L, 1, "attempt");
  const char *run = lua_tostring(L, -3), *step = lua_tostring(L, -2);
  int attempt = (int)lua_tointeger(L, -1);
  mend_engine_log_line(E, "info", run, step, attempt, "log", msg);
  if (run) {
    mend_run *r = mend_engine_current_run(L);
    mend_history_rec h = {run, step, mend_engine_now(E), "log", NULL, NULL, attempt, NULL, -1, msg,
                          r && strcmp(r->id, run) == 0 ? ++r->history_seq : 0};
    if (mend_store_append_history(E->store, &h)) store_failed(E);
  }
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

static void make_ctx_metatable(mend_engine *E) {
  lua_State *L = E->L;
  static const luaL_Reg methods[] = {{"log", ctx_log}, {"now", ctx_now}, {"sleep", ctx_sleep}, {NULL, NULL}};
  lua_createtable(L, 0, 2);
  lua_createtable(L, 0, 4);
  lua_pushlightuserdata(L, E);
  luaL_setfuncs(L, methods, 1);
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "compensating");   /* what ctx.compensating reads outside compensate */
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "ctx");
  lua_setfield(L, -2, "__metatable");   /* every run's ctx shares it: not workflow code's to change */
  E->ctx_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* The allocator of an engine's own Lua state: step code is held to cfg.memory_limit, the
 * engine's own bookkeeping is not (running out there would abort the host). */
static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  mend_engine *E = ud;
  size_t old = ptr ? osize : 0;
  if (nsize == 0) {
    free(ptr);
    E->mem_used -= old;
    return NULL;
  }
  if (E->limit_memory && nsize > old) {
    if (E->mem_used + (nsize - old) > E->mem_limit) {
      E->over_limit = 1;
      return NULL;
    }
    /* What an allocation is for (a concatenation, string.rep, string.format...) is work no
     * count hook sees, one instruction for any size: a large one is charged its bytes and
     * looks at the clock, and fails once the call is over its limits. */
    if (E->alloc_limits && nsize - old >= ALLOC_CHARGED &&
        mend_limits_spend(E->alloc_limits, (double)(nsize - old) / ALLOC_BYTES_PER_INSTRUCTION))
      return NULL;
  }
  void *p = realloc(ptr, nsize);
  if (p) E->mem_used = E->mem_used - old + nsize;
  return p;
}

void *mend_engine_set_panic_exit(mend_engine *E, void *jmpbuf) {
  void *before = E->panic_exit;
  E->panic_exit = jmpbuf;
  return before;
}

int mend_engine_panicked(const mend_engine *E) { return E->panicked; }

/* An error outside every protected call of an engine's own state: Lua would abort the process
 * when this returns, so it goes back to the C API's entry point instead, the engine broken. */
static int on_panic(lua_State *L) {
  void *ud;
  lua_getallocf(L, &ud);
  mend_engine *E = ud;
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "(not a string)";
  breakdown(E, "mend: an error escaped every protected call of the engine's Lua state (a bug of "
            "mend's, or memory running out): %s", msg);
  if (E->panic_exit) {
    E->panicked = 1;
    longjmp(*(jmp_buf *)E->panic_exit, 1);
  }
  fprintf(stderr, "%s\n", E->errmsg);
  return 0;
}

mend_engine *mend_engine_create(lua_State *host, const mend_engine_config *cfg, char *err, int errlen) {
  mend_engine *E = calloc(1, sizeof *E);
  if (!E) { snprintf(err, (size_t)errlen, "out of memory"); return NULL; }
  E->cfg = *cfg;
  if (!E->cfg.log_level) E->cfg.log_level = MEND_LOG_INFO;
  E->cfg.alert_command = cfg->alert_command ? mend_dupstr(cfg->alert_command) : NULL;
  if (!host) {
    E->mem_limit = cfg->memory_limit > 0 ? cfg->memory_limit : (size_t)-1;
    host = E->owned_state = lua_newstate(limited_alloc, E);
    if (!host) { free(E); snprintf(err, (size_t)errlen, "out of memory"); return NULL; }
    luaL_openlibs(host);
    luaL_requiref(host, "mend.core", mend_lua_open, 0);
    lua_pop(host, 1);
    if (cfg->lua_path) {
      lua_getglobal(host, "package");
      lua_getfield(host, -1, "path");
      lua_pushfstring(host, "%s/?.lua;%s/?/init.lua;%s", cfg->lua_path, cfg->lua_path, lua_tostring(host, -1));
      lua_setfield(host, -3, "path");
      lua_pop(host, 2);
    }
    lua_atpanic(host, on_panic);
    if (cfg->sandbox) mend_sandbox_prepare(host);
  }
  lua_rawgeti(host, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(host, -1);
  lua_pop(host, 1);
  E->L = lua_newthread(main);
  E->thread_ref = luaL_ref(main, LUA_REGISTRYINDEX);
  mend_refs_init(&E->refs, E->L);
  lua_getfield(E->L, LUA_REGISTRYINDEX, THREADS_KEY);
  if (lua_isnil(E->L, -1)) {
    lua_newtable(E->L);
    lua_setfield(E->L, LUA_REGISTRYINDEX, THREADS_KEY);
  }
  lua_pop(E->L, 1);
  /* Typed errors need their metatable even when the module was not required yet. */
  luaL_requiref(E->L, "mend.core", mend_lua_open, 0);
  lua_pop(E->L, 1);
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
  uint64_t seed = cfg->seed;
  if (!cfg->has_seed && getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = (uint64_t)mend_real_now();
  mend_rng_seed(&E->rng, seed);
  E->alerts = json_array();
  make_ctx_metatable(E);
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
  uv_timer_start(E->lease_timer, renew_leases, renew_ms ? renew_ms : 1, renew_ms ? renew_ms : 1);
  uv_unref((uv_handle_t *)E->lease_timer);   /* leases alone must not keep a host's loop alive */
  E->wakeup = malloc(sizeof *E->wakeup);
  uv_async_init(E->loop, E->wakeup, on_wakeup);
  E->wakeup->data = E;
  uv_unref((uv_handle_t *)E->wakeup);
  E->events = json_array();
  E->alerts_handed = json_array();
  E->events_handed = json_array();
  char serr[600];
  E->store = mend_store_open(cfg->db_path ? cfg->db_path : ":memory:", cfg->durability, serr, sizeof serr);
  if (!E->store) {
    snprintf(err, (size_t)errlen, "%s", serr);
    mend_engine_destroy(E);
    return NULL;
  }
  mend_store_set_worker(E->store, E->owner);
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  /* Every lease this engine takes from now on lasts at least this long. */
  E->fence_until = lease_until(E);
  if (mend_store_set_fence(E->store, E->owner, E->lease_seconds, E->fence_until)) {
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    mend_engine_destroy(E);
    return NULL;
  }
#ifdef MEND_FAILPOINTS
  mend_store_set_commit_hook(E->store, failpoint);
#endif
  /* Statements and commits on a thread of their own, while the loop goes on with the next
   * batch: for an engine on its own loop with a real clock and a file (a virtual clock wants
   * every turn to end in a commit). */
  if (cfg->writer_thread && !cfg->virtual_clock && !cfg->loop && mend_store_has_checkpointer(E->store)) {
    if (mend_store_start_writer(E->store, writer_done, E)) {
      snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
      mend_engine_destroy(E);
      return NULL;
    }
    E->writer = 1;
  }
  if (mend_store_has_checkpointer(E->store)) {
    E->checkpoint_timer = malloc(sizeof *E->checkpoint_timer);
    uv_timer_init(E->loop, E->checkpoint_timer);
    E->checkpoint_timer->data = E;
    uv_timer_start(E->checkpoint_timer, start_checkpoint, 1000, 1000);
    uv_unref((uv_handle_t *)E->checkpoint_timer);
  }
  return E;
}

static void free_on_close(uv_handle_t *h) { free(h); }

/* A handle still open at destroy belongs to a child process abandoned mid-flight (its pipes
 * and process handle): closing it the usual way frees its request with the last one. */
static void alert_handle_closed(uv_handle_t *h);

static void close_stray(uv_handle_t *h, void *arg) {
  (void)arg;
  if (uv_is_closing(h) || !h->data) return;
  uv_close(h, *(int *)h->data == CHILD_ALERT ? alert_handle_closed : exec_handle_closed);
}

void mend_engine_destroy(mend_engine *E) {
  if (!E) return;
  E->destroying = 1;
  /* A checkpoint on a worker thread uses the store: let it end first. */
  while (E->checkpointing) {
    uv_run(E->loop, UV_RUN_NOWAIT);
    if (E->checkpointing) {
      struct timespec ts = {0, 1000000};
      nanosleep(&ts, NULL);
    }
  }
  if (E->checkpoint_timer) uv_close((uv_handle_t *)E->checkpoint_timer, free_on_close);
  /* Runs left unfinished stay in the store as they are; their leases are given back so that
   * another engine can take them at once. */
  if (E->store && !E->broken)
    for (mend_run *r = E->runs; r; r = r->next)
      if (mend_store_release(E->store, r->id, E->owner)) { store_failed(E); break; }
  while (E->runs) run_free(E->runs);
  if (E->store && !E->broken) mend_store_commit(E->store);
  mend_store_close(E->store);
  for (mend_workflow *wf = E->workflows, *next; wf; wf = next) {
    next = wf->next;
    mend_workflow_free(E->L, wf);
  }
  for (struct mend_breaker_slot *s = E->breakers, *next; s; s = next) {
    next = s->next;
    free(s->key);
    free(s);
  }
  /* Children still running may report after the engine is gone (on a host's loop). */
  while (E->children) child_unlink(E->children);
  json_decref(E->alerts);
  json_decref(E->events);
  json_decref(E->alerts_handed);
  json_decref(E->events_handed);
  /* Calls the host has not answered yet outlive the engine: their answers only free them. */
  for (mend_host_call *c = E->open_calls; c; c = c->next) {
    c->E = NULL;
    c->run = NULL;
  }
  for (struct host_fn *h = E->hosts, *next; h; h = next) {
    next = h->next;
    free(h->name);
    free(h);
  }
  if (E->wakeup) uv_close((uv_handle_t *)E->wakeup, free_on_close);
  mend_timers_close(&E->timers);
  if (E->lease_timer) uv_close((uv_handle_t *)E->lease_timer, free_on_close);
  if (E->lock_timer) uv_close((uv_handle_t *)E->lock_timer, free_on_close);
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
  free((char *)E->cfg.alert_command);
  free(E);
}
