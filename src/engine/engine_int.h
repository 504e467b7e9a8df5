/*
 * engine_int: the insides of the engine, shared by its files (src/engine.c and src/engine/)
 * and by nothing else: the engine and run structures, the action and wait kinds, and the
 * functions one engine file calls in another (named mend__*, as libuv names its own).
 * Everything outside the engine goes through engine.h. Must never: be included outside the
 * engine's files; include the Lua binding's headers (lmend.h, lmend_int.h).
 */
#ifndef MEND_ENGINE_INT_H
#define MEND_ENGINE_INT_H

#include <jansson.h>
#include <stdatomic.h>
#include <lua.h>
#include <uv.h>

#include "backoff.h"
#include "blocks.h"
#include "breaker.h"
#include "engine.h"
#include "flatjson.h"
#include "guard.h"
#include "idset.h"
#include "lerror.h"
#include "parkset.h"
#include "refs.h"
#include "threads.h"
#include "timers.h"
#include "transition.h"

#if LUA_VERSION_RELEASE_NUM >= 50406
#define mend_closethread(L, from) lua_closethread((L), (from))
#else
#define mend_closethread(L, from) ((void)(from), lua_resetthread(L))
#endif

/* How long one statement of the loop waits for another process's lock; longer locks are
 * waited out on a timer (lock_wait), so that the loop goes on. */
#define LOOP_BUSY_MS 100
/* How often a serving engine tries again the runs whose version no engine could load. */
#define UNAVAILABLE_LOOK_SECONDS 30.0
/* Actions one loop turn may do before it commits and polls again. */
#define MAX_TURN_ACTIONS 2048
/* Calls into workflow code outside attempts (a file's top level as it loads, a step's
 * idempotency_key) get this long in real seconds, with an instruction budget or without. */
#define CALL_SECONDS 10.0
/* What the engine may spend on the text of a value that workflow code raised. */
#define DESCRIBE_BUDGET 1000000
#define DESCRIBE_SECONDS 0.05

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
  WAIT_NONE, WAIT_RETRY, WAIT_BREAKER, WAIT_SLEEP, WAIT_COMP_RETRY, WAIT_STEP_SLEEP,
  WAIT_EVENT   /* a `wait_for` step; the timer is armed only with a timeout */
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
  /* Counts the breaker's changes of state: a probe belongs to the half-open spell it was
   * admitted in, and an attempt still out when that spell ended holds no slot of a later one. */
  unsigned spell;
  int listed;             /* its row was looked up (and made if missing) in the store */
  struct mend_breaker_slot *next;
};

/* Kept for every step of every run in memory, waiting ones too until they are parked (a
 * waiting run must cost at most 1 KiB): small fields are small, and the default key
 * "<run id>/<step>" is made when needed rather than kept. */
typedef struct step_rt {
  mend_step_status status;
  int attempts, comp_attempts;
  unsigned custom_key : 1;        /* idem_key is the step's own key(ctx), not the default */
  unsigned reused : 1;            /* its result was another execution's of that key (reuse.c) */
  unsigned reused_known : 1;      /* the run it is from is kept with the key (mend__reused_from) */
  unsigned key_ready : 1;
  unsigned compensate_self : 1;   /* failed with a compensable error: it is compensated too */
  unsigned slept : 1;             /* its `sleep` wait is over */
  unsigned has_row : 1;           /* the store has its row (written at its first transition) */
  unsigned row_unknown : 1;       /* without has_row, a row may be there all the same (a run
                                     rebuilt from its image: a step with none known) */
  unsigned when_done : 1;         /* its when(ctx) answered (recorded: never asked again) */
  unsigned comp_skipped : 1;      /* its way back passed it: no compensate, or reused */
  unsigned err_kind : 3;          /* the mend_error_kind of `error`, stored with it */
  unsigned err_severity : 2;      /* a compensable error's severity (1..3); 0 for the others */
  unsigned err_stopped : 1;       /* the engine stopped the code: a workflow_error */
  unsigned probe : 1;             /* its attempt took a half-open probe slot of its breaker */
  unsigned probe_spell : 12;      /* in this spell (the slot's spell, wrapped) */
  char *idem_key;                 /* a custom key only; NULL: the default */
  char *result;                   /* JSON */
  char *error;
  double due, last_delay;
} step_rt;

typedef struct exec_req exec_req;
typedef struct http_req http_req;

/* What only some runs use, kept apart so that the many runs waiting in memory do not pay for
 * it: made when a field is first set (mend__run_cold) and freed with the run, or once every
 * field is empty again (mend__run_cold_trim). A lane has its own from its start to its end,
 * so that group.c and map.c reach a lane's directly; elsewhere read a field through
 * MEND_COLD. */
struct mend_run_cold {
  /* the attempt's call in flight */
  exec_req *exec;
  http_req *http;         /* mend.http's request in flight */
  char *http_detail;      /* its requests, for the history row of its outcome */
  mend_host_call *host_call;
  /* A parallel group's branches run in lanes (group.c): a lane is a mend_run of its own for
   * the attempt's state, sharing its run's steps and Lua values, and in no list of runs. */
  struct mend_group *group;   /* a run's lanes, made at its first group; NULL before */
  mend_run *parent;       /* a lane's run; NULL for a run */
  char *item_name;        /* a lane on an item of a map: its name ("charge/3") */
  /* A lane on an item of a map: its number from 1 (0: none), and where its row is among the
   * run's rows (MEND_MAP_ROWS). */
  int item, row_base;
  /* A cancel cascaded to the run while its own code ran (that code, or a lane's of the run,
   * cancelled its parent): who asked; it lands as the code yields or returns
   * (mend__land_deferred_cancel, mend__land_kept_cancel). */
  char *cancel_by;
};
/* A cold field of run r: its zero value while r has none made. */
#define MEND_COLD(r, f) ((r)->cold ? (r)->cold->f : 0)

/* An attempt's own state, taken as it starts and let go as it ends (attempt.c; the engine
 * keeps the last one for the next), so that a run between attempts (a retry wait) holds none
 * of it. */
typedef struct mend_attempt {
  mend_limits limits;     /* its instruction budget and real-time deadline */
  mend_timer deadline;
  mend_run *run;          /* whose: the deadline's callback finds it here */
} mend_attempt;

/* Ordered by size, so that a run waiting in memory (until park.c parks it) pays no padding. */
struct mend_run {
  mend_engine *E;
  mend_workflow *wf;
  step_rt *steps;
  char *error;
  const char *reason;     /* why it failed for good: fatal, error, attempts_exhausted, ... */
  /* the attempt in flight */
  lua_State *co;
  mend_attempt *at;       /* set with co */
  double last_at;         /* the time of its last history row: none is written before it */
  mend_timer wait;
  struct mend_run_cold *cold;   /* NULL until one of its fields is set */
  mend_run *tnext;        /* waiting for a concurrency slot */
  run_fifo *waiting_in;   /* which list, if any */
  struct mend_breaker_slot *held; /* the breaker whose concurrency the attempt counts in */
  /* queues */
  mend_run *qnext;
  unsigned long wait_seq;   /* the batch its next action waits for */
  unsigned long took_seq;   /* the batch that took its last event: its inbox as committed is
                             * its own only once that batch is durable (events.c) */
  mend_run *prev, *next;  /* runs in flight */
  mend_run *hnext;        /* its chain in the engine's runmap */
  mend_run *pprev, *pnext;  /* waiting for something, to be parked (park.c) */
  double idle_since;      /* when it began to wait, on the engine's clock */
  mend_run_status status;
  int input_ref, results_ref;   /* in E->refs, shard ref_shard */
  int ref_shard;
  int cur;                /* step going forward, or step being compensated going back */
  int fail_step;
  int history_seq;        /* the last row of its history: this engine numbers the next ones */
  wait_kind wait_kind;
  action next_action;
  unsigned char attention;
  unsigned char waiting;      /* yielded inside mend.sleep / mend.exec */
  unsigned char suspect;      /* taken again with an attempt its dead worker began (recover.c) */
  unsigned char queued;       /* in the queue behind the current batch */
  unsigned char lost;         /* another worker took it: let go when its queued action comes up */
  unsigned char admitted;     /* its breaker let the next attempt through already (on_wait) */
  unsigned char cancel_asked; /* rebuilt with a cancel requested: whoever takes it cancels it */
  unsigned char is_child;     /* started by a parent's step: its end is told to the parent */
  unsigned char lane;         /* a lane of a group (parent NULL once its run is gone) */
  unsigned char park_listed;  /* in E->park_head's list */
  unsigned char look_out;     /* its inbox looks sent ahead, not answered (lookahead.c) */
  unsigned char never_held;   /* rebuilt before any process took or ran it (recover.c) */
  char id[MEND_RUN_ID_LEN];
};

/* print of workflow code in a sandboxed or buffered_print engine: a bounded buffer the loop
 * writes (print.c). */
typedef struct mend_print_out mend_print_out;
/* Sets L's global print to the engine's, which never blocks on stdout. */
void mend__print_install(mend_engine *E, lua_State *L);
/* Writes what stdout takes now, and lets go of the rest. */
void mend__print_close(mend_engine *E);

struct mend_engine {
  lua_State *L;           /* the engine's own thread of the host state */
  int thread_ref;
  lua_State *owned_state; /* set when the engine made its own Lua state */
  uv_loop_t *loop;
  uv_loop_t own_loop;
  mend_print_out *print_out;   /* a sandboxed engine's print (print.c); NULL: none */
  int owns_loop;
  uv_idle_t *pump;
  mend_timers timers;
  mend_store *store;
  mend_rng rng;
  uint64_t id_ms, id_rnd;   /* the last run id made (new_run_id) */
  mend_workflow *workflows;
  struct mend_load_failure *load_failures;   /* files whose last load failed (load.c) */
  struct mend_breaker_slot *breakers;
  /* Overrides this engine recorded of breakers it does not hold, until their batch is durable:
   * what a later override's audit says it changed, while committed rows do not show them yet
   * (repair.c). */
  struct mend_breaker_recorded *breakers_recorded;
  /* Runs this engine resolved by a person's hand, recorded, until their batch is durable: a
   * repair after one, reading committed rows, answers as it would once it is (repair.c). */
  struct mend_repair_recorded *repairs_recorded;
  mend_run *runs;
  /* States of ended attempts, kept for the next ones (attempt.c): with many attempts in
   * flight (W9's 64) one kept state served few of them, each other one a malloc and a free. */
  mend_attempt *spare_attempts[64];
  int nspare_attempts;
  int in_flight;
  /* Runs whose next action waits for a batch to be durable, by the batch's number (the store's
   * open_seq when queued) modulo 4: at most the open batch and the one on the writer thread
   * are not durable, and a run found too early is put back (wait_seq). */
  struct { mend_run *head, *tail; size_t n; } waiting[4];
  unsigned long moved_seq;   /* lists of batches up to this one were moved to ready */
  mend_run *ready_head, *ready_tail;   /* durable: their actions may run */
  size_t ready_n;         /* runs in the ready list: a tick reports it without a walk */
  mend_run **runmap;      /* the runs in flight by id (runmap.c) */
  size_t runmap_n;
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
  double poll_ended;      /* when the last look for work ended (real time) */
  uv_poll_t *wake_poll;   /* the store's wake-up socket (wake.c) */
  int store_lost;         /* the store lost its connection: runs to let go (reconnect.c) */
  double store_lost_said; /* when that was last logged; 0 when not lost */
  int wake_watched;       /* one was watched before: a new one looks at once */
  uv_signal_t *signals[2];
  int serving, draining, attempts;
  int max_in_flight;
  double grace_deadline;
  double next_reload;     /* when a serving engine next reads breakers and cancel requests */
  double next_dead_check; /* when it next looks for dead workers on this host */
  double next_thorough_look;   /* claimable(): when it next walks every run held */
  double next_unavailable_look;   /* when it next tries runs no worker could load */
  double turn_deadline;   /* a ticking host's budget for this turn; 0: none */
  double tick_piece;      /* what a tick expects its next action to cost (pump.c, drive.c) */
  /* callers waiting for a batch to be durable, in the order of their batches (pump.c) */
  mend_durable_wait *durable_head, *durable_tail;
  /* A piece that reads the store runs the open batch's recorded writes first (store.h:
   * read_flushes), at a cost that grows with the batch: counted apart (pump.c). */
  double tick_flush;              /* what running them cost such a piece */
  double tick_flush_recs;         /* how many records it ran, on average */
  unsigned tick_since_flush;      /* pieces since the last one that ran records */
  unsigned long tick_flushed_recs; /* the store's totals when the piece began */
  double tick_flushed_cpu;
  unsigned long tick_did; /* actions done in this tick */
  /* What this tick's time went to (mend_tick_stats' account, drive.c): pieces by kind, and
   * the wall clock of its pick-ups, read in pump.c only while a tick runs. */
  int tick_resumed, tick_delivered, tick_gc_steps;
  unsigned store_failures;    /* batches lost with their transaction (engine.c) */
  unsigned repair_failures;   /* store_failures as a repair's look ended (repair.c) */
  mend_textbuf event_detail;  /* a taken event's history detail, its memory kept (events.c) */
  double tick_pickup_seconds;
  int tick_writer_tried;  /* a tick started (or could not start) the writer thread */
  int tick_reads_opened;  /* a tick opened the store's reads of committed events (drive.c) */
  int cancels_deferred;   /* a run holds a cancel kept while its code ran (repair.c) */
  atomic_int writer_sched_want;  /* the writer thread's class, as the loop wants it (wsched.c) */
  atomic_int writer_sched_busy;  /* 1 while one thread moves the writer thread (wsched.c) */
  int writer_sched_now;   /* the class it is in, under writer_sched_busy */
  int writer_tid;         /* the writer thread's id once it told the loop of a batch; 0 before */
  double tick_gc_piece;   /* what a step of the Lua collector costs a tick (drive.c) */
  size_t tick_gc_base;    /* KB in use when the last cycle a tick ran ended */
  int tick_gc_cycle;      /* a tick began a cycle of the collector, not ended yet */
  int tick_gc_stopped;    /* ticks run the collector: Lua's own pace is stopped (drive.c) */
  size_t tick_gc_mark;    /* mem_allocated when the last tick paid the collector */
  double tick_gc_owed;    /* bytes allocated whose collector steps are still owed */
  struct mend_tickprof *tprof;   /* MEND_TICK_PROFILE's profile of the ticks (tickprof.c) */
  int tprof_tried;
  run_fifo throttled;     /* attempts waiting under the global max_concurrency */
  json_t *events;         /* for cfg.on_event, fired after the batch commits */
  json_t *events_due;     /* of durable batches, heard in order from events_heard (notify.c) */
  size_t events_heard;
  unsigned long events_heard_n;   /* every one heard so far: the tick profile's count */
  /* Where the run_finished events not heard yet are, oldest first, as positions counted over
   * every event ever due (events_heard_n is the next one heard): each one's run is still in
   * flight for the host (mend_engine_in_flight) until it is heard (notify.c). */
  unsigned long *finished_at;
  size_t finished_head, finished_n, finished_cap;
  struct host_fn *hosts;
  struct mend_host_call *open_calls;
  /* answered, their steps resumed by a pump turn, in the order answered (hostcall.c) */
  struct mend_host_call *answered_head, *answered_tail;
  /* events a ticking host sent in a batch not yet durable: their runs look for them once it
   * is (events.c) */
  struct mend_sent_event *sent_head, *sent_tail;
  /* a ticking host's inbox looks (lookahead.c): queued in this tick, and the read in flight;
   * look_seq: the durable batch when it went; look_failed: it could not be sent */
  struct mend_look *look_queued, *look_queued_tail, *look_sent;
  int look_nqueued, look_failed;
  int look_warned;        /* a failed look was told (lookahead.c: look_trouble) */
  unsigned long look_seq;
  uv_async_t *wakeup;
  void (*on_wake)(void *ud);      /* the host side's, on the loop's thread (mend_engine_on_wake) */
  void *on_wake_ud;
  size_t mem_used, mem_limit;
  size_t mem_allocated;   /* bytes the Lua state allocated, in all: a tick's collector pace */
  int limit_memory;       /* 1 while step code runs: only it is held to the limit */
  mend_limits *alloc_limits; /* the limits of the call running, charged for large allocations */
  int over_limit;         /* an allocation was refused for the memory limit: collect after */
  size_t mem_collected;   /* mem_used after the last collection collect_if_over made */
  /* Large blocks the state freed, kept for its next large allocations until the call that
   * freed them ends (limited_alloc in engine.c): the C library hands a block this large back
   * to the system, and a fresh one faults a page every 4 KiB. */
  struct spare_block { void *p; size_t size; } spare[4];
  mend_blocks blocks;     /* the own state's small blocks, kept by size class (blocks.c) */
  int alert_commands;     /* alert commands still running */
  int alert_commands_failed;   /* alert commands that could not start or did not exit 0 */
  child *children;        /* child processes whose callbacks may still come */
  int destroying;
  mend_refusal refusal;   /* why the last repair refused */
  mend_run *in_code;      /* the run (or lane) whose code runs now: mend__resume's */
  const char *in_code_what;   /* which of its code that is, as refusals name it */
  int loading_code;       /* a workflow file's top level runs (load.c), in no run: as run code */
  void *panic_exit;       /* a jmp_buf of the C API's entry point that is running */
  int panicked;
  /* Another process holds the database's write lock (lock_wait): the batch is kept and its
   * commit tried again at lock_retry_at, after lock_delay, doubled at each try up to 1 s. */
  double lock_since;      /* 0: not locked */
  double lock_warned;     /* when the last warning was logged */
  double lock_retry_at, lock_delay;
  uv_timer_t *lock_timer;
  int fence_recheck;      /* a match of our runs against the store's was cut short by a lock */
  long long inbox_seen;   /* a serving engine has looked at the events sent up to this seq */
  int inbox_started;      /* inbox_seen was set: a look since then takes what came after it */
  /* events.c: when (uv_hrtime, ns; 0 never) a send to a run held here last asked the store
   * whether any cancel of this engine's runs was requested, and whether one was */
  uint64_t cancels_asked_at;
  int cancels_some;
  uv_timer_t *run_look;   /* run()'s look for what other processes send (drive.c); closed at free */
  struct mend_http *http; /* mend.http's libcurl multi handle, made at the first request */
  /* park.c: runs kept out of memory while they wait */
  mend_parkset parked;
  double park_after;      /* engine seconds a run waits in memory before it is parked; 0: never */
  mend_run *park_head, *park_tail;   /* runs that began to wait, oldest first */
  mend_timer park_sweep, park_wake;
  int parked_since_give_back;
  /* counters.c */
  mend_commit_counters commits;
  uint64_t handed_at;     /* uv_hrtime() when the batch on the writer thread was handed; 0: none */
};
/* Run ids gathered from the store (the fence, claims); oom: one could not be kept. */
typedef struct id_list { mend_idset set; int oom; } id_list;

/* ---- engine.c: an engine's life, its log line, its breakdown, run ids, failpoints */
void mend__breakdown(mend_engine *E, const char *fmt, ...);
/* Frees the large blocks limited_alloc kept for reuse. */
void mend__drop_spare_blocks(mend_engine *E);
void mend__child_link(mend_engine *E, child *c, int tag);
mend_engine *mend__child_unlink(child *c);
int mend__commit_now(mend_engine *E);
void mend__failpoint(const char *name);
#ifdef MEND_FAILPOINTS
/* mend__failpoint, at a point where L is in no protected call: "name:N:panic" raises there. */
void mend__failpoint_lua(lua_State *L, const char *name);
/* A pause for a spec between two statements (engine.c, MEND_PAUSE). */
void mend__pause_point(const char *name);
#else
#define mend__failpoint_lua(L, name) ((void)(L), (void)(name))
#define mend__pause_point(name) ((void)(name))
#endif
int mend__logs(const mend_engine *E, const char *level);
void mend__new_run_id(mend_engine *E, char out[MEND_RUN_ID_LEN]);
void mend__set_str(char **slot, const char *s);
void mend__store_failed(mend_engine *E);
/* recover.c: a run's stored reason as the engine's static string; NULL when not one. */
const char *mend__known_reason(const char *text);

/* ---- pump.c: the write-ahead rule: queues, actions, batches, a pump turn */
void mend__append(mend_run **head, mend_run **tail, mend_run *r);
void mend__arm(mend_run *r, mend_timer *t, double due);
void mend__do_action(mend_run *r);
int mend__end_batch(mend_engine *E);
int mend__has_ready_work(const mend_engine *E);
void mend__kick(mend_engine *E);
void mend__on_wakeup(uv_async_t *h);
void mend__pump_cb(uv_idle_t *h);
int mend__pump_turn(mend_engine *E);
void mend__queue(mend_run *r, action a);
void mend__queue_now(mend_run *r, action a);
void mend__settle_writer(mend_engine *E);
double mend__thread_cpu_now(void);
double mend__tick_next_piece(mend_engine *E);
int mend__turn_has_work(const mend_engine *E);
int mend__virtual_timers_to_advance(const mend_engine *E);
void mend__writer_done(void *ud);
int mend__writer_holds_batch(mend_engine *E);
/* While the writer thread holds a batch, a ticking host's pieces that read nothing through the
 * store still run (pump.c): */
#define MEND_TICK_DEFER_SECONDS 0.001   /* a piece that would read: tried again this much later */
int mend__workflow_store_free(const mend_engine *E, const mend_workflow *wf);
int mend__tick_store_held(mend_engine *E);
int mend__piece_needs_store(const mend_run *r);
int mend__defer_wait(mend_run *r);
void mend__durable_fire(mend_engine *E);
void mend__durable_close(mend_engine *E);

/* ---- tickprof.c: a ticking host's pieces of work, profiled (MEND_TICK_PROFILE) */
typedef struct mend_tickprof mend_tickprof;
enum {
  MEND_TP_ANSWER, MEND_TP_EVENT, MEND_TP_ADVANCE, MEND_TP_EXECUTE, MEND_TP_COMPENSATE,
  MEND_TP_FINISH, MEND_TP_PICKUP, MEND_TP_HANDOFF, MEND_TP_GC, MEND_TP_TIMERS, MEND_TP_OTHER,
  MEND_TP_KINDS
};
void mend__tp_tick_begin(mend_engine *E, double budget);
void mend__tp_tick_end(mend_engine *E);
void mend__tp_begin(mend_engine *E);
void mend__tp_end(mend_engine *E, int kind, const char *what);
void mend__tp_close(mend_engine *E);

/* ---- counters.c: what the engine did, for its host's metrics */
int mend__commit_counted(mend_engine *E);
void mend__handed(mend_engine *E, uint64_t at);
void mend__handed_durable(mend_engine *E);

/* ---- drive.c: run, advance, tick */
void mend__loop_once(mend_engine *E);

/* ---- status.c: the one place statuses change, and the history they write */
void mend__dead_letter(mend_run *r, const char *reason, int step, const char *error,
                       const char *detail);
void mend__history(mend_run *r, const char *step, const char *event, const char *from,
                   const char *to, int attempt, const char *error, double delay,
                   const char *detail);
double mend__history_time(mend_run *r);
void mend__run_to(mend_run *r, mend_run_status to);
const char *mend__step_name(mend_run *r, int i);
/* A transition; `error` (NULL: the step keeps the one it has) is of kind MEND_ERR_ERROR, the
 * engine's own (a cancel, a crash loop); mend__step_err_to gives what the step's code raised
 * (its kind, severity and whether the engine stopped it), which is stored with it for a
 * restart to act on (never read from its text). */
void mend__step_to(mend_run *r, int i, mend_step_status to, const char *error, double delay,
                   const char *detail);
void mend__step_err_to(mend_run *r, int i, mend_step_status to, const mend_error_info *info,
                       const char *error, double delay, const char *detail);
/* What the step's error was raised as, kept beside its text (NULL: the engine's own). */
void mend__step_error_of(step_rt *st, const mend_error_info *info);
void mend__write_step(mend_run *r, int i);

/* ---- run.c: runs in memory, and their start */
void mend__drop_run(mend_run *r, int was_queued);
void mend__give_back(mend_run *r, int was_queued, int was_running);
double mend__lease_until(const mend_engine *E);
void mend__run_free(mend_run *r);
/* r's cold fields, made (zeroed) when it has none; NULL when out of memory. */
struct mend_run_cold *mend__run_cold(mend_run *r);
/* Frees r's cold fields once every one is empty. */
void mend__run_cold_trim(mend_run *r);
mend_run *mend__run_new(mend_engine *E, mend_workflow *wf, const char *id);

/* ---- lock.c: a write lock held by another process, waited out */
void mend__lock_wait(mend_engine *E);
int mend__lock_waiting(const mend_engine *E);
int mend__lock_stops_looks(mend_engine *E);
void mend__watch_lock(mend_engine *E);
/* 1 (refusal and err set) when a batch waits for another PostgreSQL session's lock: `what`
 * (a start, a repair) is refused before anything of it is recorded. */
int mend__batch_held(mend_engine *E, const char *what, char *err, int errlen);

/* ---- saga.c: what outcomes mean: forward, backward, the ends of waits */
void mend__after_success(mend_run *r, int i, int queue);
void mend__attempt_done(mend_run *r, int ok, mend_error_info *info, const char *result_json);
/* Code of step i's that decides before its execute (its when, its idempotency_key, a map's
 * list) failed: an attempt that failed as info says, retried as one when retryable (SPEC
 * section 3: a kind survives wherever it is raised). */
void mend__fail_before_execute(mend_run *r, int i, const mend_error_info *info);
void mend__fail_run(mend_run *r, int i, const mend_error_info *info, const char *msg,
                    int was_waiting);
void mend__backward(mend_run *r);
void mend__forward(mend_run *r);
int mend__needs_compensation(const mend_run *r, int i);
void mend__on_wait(mend_timer *t);
void mend__set_result(mend_run *r, int i);

/* ---- attempt.c: attempts as coroutines, and every call into workflow code */
const char *mend__describe(mend_engine *E, mend_run *r, lua_State *from, int idx, char *buf,
                           size_t len, int *failed);
void mend__end_attempt(mend_run *r);
void mend__free_spare_attempts(mend_engine *E);   /* the ended attempts' states kept for reuse */
int mend__ask_when(mend_run *r, int i, mend_error_info *info);
/* A guarded call of a step's code outside its attempt ended with `status`, not LUA_OK: *info
 * is what it raised (its kind kept) or the limit that stopped it. Pops the error value. */
void mend__call_failed(mend_run *r, step_rt *st, mend_limits *lim, int status,
                       mend_error_info *info);
char *mend__ask_map(mend_run *r, int i, mend_error_info *info);
int mend__ensure_key(mend_run *r, int i, mend_error_info *info);
/* reuse.c: step i's custom key already succeeded elsewhere: 1 its result taken (the step
 * succeeded, reused), 0 none to take, -1 the store failed (asked again later). */
int mend__reuse_key(mend_run *r, int i);
int mend__skip_reused(mend_run *r, const char *name, step_rt *st);
const char *mend__reused_from(const step_rt *st);   /* NULL: not reused, or not known */
void mend__reuse_restore(mend_run *r, const mend_run_image *img);
int mend__guarded_pcall(mend_engine *E, mend_limits *lim, int nargs, int nres);
int mend__run_pcall(mend_run *r, mend_limits *lim, int nargs, int nres);
void mend__on_deadline(mend_timer *t);
void mend__resume(mend_run *r, int nargs);
void mend__start_attempt(mend_run *r, int compensating);

/* ---- ctx.c: what a step's code sees of its run, and its waits from Lua */
void mend__make_ctx_metatable(mend_engine *E);
/* Pushes a new ctx table for step i, of its compensation with `compensating`. [-0, +1, m] */
void mend__push_ctx_for(mend_run *r, int i, int compensating);
void mend__push_ctx(mend_run *r, int i);   /* not compensating */
mend_run *mend__waiting_run(lua_State *L, char *err, int errlen);

/* ---- admit.c: breaker slots and concurrency caps */
void mend__breaker_changed(mend_run *r, int i, mend_breaker_state before);
/* Whether step i's attempt holds a probe slot of its breaker's present half-open spell. */
int mend__holds_probe(mend_run *r, int i);
void mend__breaker_outcome(mend_run *r, int i, mend_breaker_outcome outcome);
/* The slot of breaker `key`, made at a workflow's load. `executes`: a step of it executes (its
 * attempts ask the breaker), so the store gets the breaker's row now, for people to list and
 * override; a step that only waits (wait_for, a child, a sleep with nothing to execute) asks it
 * nothing, and gets no row. */
struct mend_breaker_slot *mend__breaker_slot(mend_engine *E, const char *key,
                                             const mend_breaker_policy *p, int executes);
mend_run *mend__fifo_pop(run_fifo *f);
void mend__fifo_push(run_fifo *f, mend_run *r);
void mend__admit_next(mend_run *r);

/* ---- notify.c: alerts and events, heard after the batch that records them commits */
void mend__alert(mend_run *r, const char *kind, int step, const char *reason, const char *error);
void mend__alert_handle_closed(uv_handle_t *h);
void mend__emit(mend_engine *E, json_t *ev);
/* A run's run_finished, its end durable: heard in the turn it leaves the engine, whatever the
 * open batch holds (after what is due before it). */
void mend__emit_finished(mend_engine *E, json_t *ev);
void mend__fire_batch(mend_engine *E, json_t *alerts, json_t *events);
int mend__events_due(const mend_engine *E);
int mend__finished_unheard(const mend_engine *E);
void mend__hear_events(mend_engine *E);

/* ---- group.c: parallel groups, their lanes, their compensation in order of completion */
struct mend_group {
  int g;                  /* the group going forward now; -1: none */
  int nlanes;
  mend_run **lanes;       /* a lane is idle when its cur is -1 */
  int stopping;           /* a branch failed for good: no attempt of another starts */
  int fail_branch;
  mend_error_info info;   /* how it failed; its text is fail_msg */
  char *fail_msg;
  int *done_seq;          /* per step: the history row that settled it (compensation order) */
  struct map_state *maps; /* the maps begun, by step */
  int nmaps;
};

int mend__group_backward(mend_run *r, int g);
void mend__group_forward(mend_run *r, int g);
void mend__group_free(mend_run *r);
struct mend_group *mend__group_of(mend_run *r);
void mend__group_restore(mend_run *r, const mend_run_image *img);
void mend__step_from_image(step_rt *st, const mend_step_image *si);
void mend__group_settle(mend_run *r);
void mend__group_stop(mend_run *r, const char *why);
int mend__group_stopping(const mend_run *lane);
mend_run *mend__idle_lane(mend_run *r);
mend_run *mend__lane_at(mend_run *r, int k);
void mend__lane_done(mend_run *lane);
void mend__lane_failed(mend_run *lane, int i, const mend_error_info *info, const char *msg);
void mend__lane_free(mend_run *lane);
void mend__lane_stop(mend_run *lane);
void mend__resume_lane(mend_run *l, int b);
int mend__settled(mend_step_status s);
void mend__step_fresh(step_rt *st);

/* ---- map.c: maps, groups over a list, on group.c's lanes */
/* A map begun: its list (in E->refs), its items' states, in the same order. */
struct map_state {
  int m, n;
  step_rt *items;
  int *done;              /* per item: the history row that settled it */
  int list_ref;           /* the list, a Lua table: item k is execute's second argument */
  int *order, pos;        /* compensation: items latest completed first, how far */
  int skip_logged;
  int next;               /* items before it were started (the pump goes through the list once) */
  int resumed;            /* the items begun before a restart have their lanes again */
};
int mend__items_succeeded(const mend_run *r);
void mend__lane_backward(mend_run *lane);
void mend__lane_compensated(mend_run *lane);
struct map_state *mend__map_add(mend_run *r, int m, const char *json);
int mend__map_backward(mend_run *r, int m);
int mend__map_begin(mend_run *r, int m);
struct map_state *mend__map_of(mend_run *r, int m);
void mend__map_pump(mend_run *r, int busy);
void mend__map_item_retry(mend_run *r, struct map_state *ms, int k);
void mend__map_settle(mend_run *r, int m);
void mend__push_item(mend_run *lane, lua_State *co);
void mend__set_item_result(mend_run *lane);
/* An item's row: (m + 1) * MEND_MAP_ROWS + its index, m its map step's; past any step's. */
#define MEND_MAP_ROWS (1 << 20)

/* The run a lane belongs to: history rows and the run's own fields are its. */
static inline mend_run *mend__root(mend_run *r) {
  mend_run *p = MEND_COLD(r, parent);
  return p ? p : r;
}
/* The step after step i going forward: past a group's branches. */
static inline int mend__next_top(const mend_workflow *wf, int i) {
  return i + 1 + wf->steps[i].nbranches;
}

/* ---- events.c: steps that wait for events; the inbox */
void mend__await_event(mend_run *r, int i);
int mend__event_due(mend_run *r, int i, char *msg, size_t len);
int mend__events_start(mend_engine *E);
int mend__take_event(mend_run *r, int i);
/* The event a look read ahead found (lookahead.c): taken as mend__take_event takes one; the
 * payload and key (malloc'ed) are the step's from now on. 1 taken; 0 it was sent after the
 * wait's deadline, and left in the inbox (payload and key freed). */
int mend__take_looked_event(mend_run *r, int i, long long seq, char *payload, char *key);
void mend__take_events(mend_engine *E);
void mend__wake_waiting(mend_run *r, const char *name);

/* ---- tokens.c: completion tokens (wait = "token") */
void mend__await_token(mend_run *r, int i);
int mend__ctx_token(lua_State *L);
int mend__take_token(mend_run *r, int i);
int mend__token_due(mend_run *r, int i, char *msg, size_t len);
/* A malloc'ed copy of the len bytes of text with every token in it masked, for what is
 * stored (ctx:log's history row); NULL when it holds none (or out of memory). */
char *mend__mask_tokens(const char *text, size_t len);

/* ---- child.c: child runs (child = "workflow") */
void mend__cancel_child(mend_run *r, int i, const char *who);
void mend__child_ended(mend_run *r, mend_run_status to);
/* rows: the history rows the caller recorded for the run in the open batch (counted when the
 * history read shows committed rows only). */
void mend__child_resolved(mend_engine *E, const char *id, int rows);
void mend__start_child(mend_run *r, int i);
void mend__stop_child(mend_run *lane, int i);
int mend__take_child(mend_run *r, int i);
void mend__undo_child(mend_run *r, int i);
/* A step has something to undo when it compensates: its compensate, or its child's saga. */
#define mend__compensable(def) ((def)->compensate_ref != LUA_NOREF || (def)->child != NULL)
/* What a waiting step's row says it waits for (steps.awaits). */
const char *mend__awaits(const mend_run *r, int i);
/* ---- lookahead.c: a ticking host's looks at committed inboxes, read ahead */
/* 1: step i's look at r's committed inbox is queued for the tick's read (a later tick takes
 * its answer); 0: not in a tick, or the store reads without a round trip: read now. */
int mend__look_ahead(mend_run *r, int i);
void mend__looks_send(mend_engine *E);                /* as a tick ends */
int mend__looks_pick_up(mend_engine *E, int wait);    /* as a tick begins: events taken */
void mend__looks_settle(mend_engine *E);              /* every look answered, waiting */
int mend__looks_out(const mend_engine *E);
void mend__looks_forget(mend_engine *E);

/* ---- park.c: runs kept out of memory while they wait for something */
void mend__park_close(mend_engine *E);
void mend__park_forget(mend_engine *E, const char *id);
void mend__park_init(mend_engine *E);
void mend__park_match(mend_engine *E, const mend_idset *mine, const char *why);
int mend__park_release(mend_engine *E);
void mend__park_serving(mend_engine *E);
void mend__park_soon(mend_run *r);
void mend__park_unlist(mend_run *r);
int mend__parked(const mend_engine *E, const char *id);
int mend__unpark(mend_engine *E, const char *id, const char *why);

/* ---- exec.c: mend.exec's child processes */
void mend__abandon_exec(mend_run *r);
void mend__exec_handle_closed(uv_handle_t *h);

/* ---- http.c: mend.http's requests on the loop */
void mend__abandon_http(mend_run *r);
void mend__http_close(mend_engine *E);

/* ---- hostcall.c: functions of the host, called from steps */
void mend__abandon_host_call(mend_run *r);
void mend__forget_host_calls(mend_engine *E);
int mend__resume_answered(mend_engine *E);
int mend__sent_event_ready(const mend_engine *E);
int mend__sent_event_needs_store(mend_engine *E);
int mend__answer_needs_store(const mend_engine *E);
void mend__deliver_sent_event(mend_engine *E);
void mend__forget_sent_events(mend_engine *E);
void mend__runmap_add(mend_engine *E, mend_run *r);
void mend__runmap_remove(mend_engine *E, mend_run *r);
mend_run *mend__find_run(mend_engine *E, const char *id);
void mend__runmap_free(mend_engine *E);

/* ---- recover.c: runs rebuilt from the store, claims */
void mend__carry_on(mend_run *r);
int mend__claim_and_restore(mend_engine *E, int limit, int how);
void mend__find_current_step(mend_run *r);
mend_run *mend__rebuild(mend_engine *E, const char *id, char *why, int whylen, int *unavailable);
void mend__recovered_entry(mend_run *r);
int mend__release_dead_local_owners(mend_engine *E);

/* ---- worker.c: leases, the fence, serving */
void mend__add_id(void *ud, const char *id);
void mend__check_fence(mend_engine *E);
void mend__let_go(mend_engine *E, const mend_idset *ids, const char *why);
void mend__renew_leases(uv_timer_t *t);
void mend__poll_soon(mend_engine *E);   /* the next look for work now (or 10 ms after the last) */
/* What serving opened (the poll timer, the signal handlers, the store's wake-up), closed; again
 * at destroy, for a serve that a panic of the engine's own state jumped out of. */
void mend__serve_close(mend_engine *E);
/* wake.c */
void mend__wake_watch(mend_engine *E);
void mend__wake_stop(mend_engine *E);
uint64_t mend__poll_jitter(uint64_t ms);
/* reconnect.c */
void mend__store_lost(mend_engine *E);
void mend__store_lost_let_go(mend_engine *E);

/* ---- texts.c: what a caller gives that is stored */
/* -1 with err "WHAT is not UTF-8 text" and refusal MEND_REFUSED_INVALID when s is not UTF-8;
 * 0 when it is, or NULL. */
int mend__text_refused(mend_engine *E, const char *s, const char *what, char *err, int errlen);
/* -1 with err naming the rule and refusal MEND_REFUSED_INVALID unless who is NULL (not told) or
 * 1 to MEND_WHO_MAX bytes of UTF-8 with no control character; 0 then. */
int mend__who_refused(mend_engine *E, const char *who, char *err, int errlen);

/* ---- repair.c: people's repairs */
/* Forgets the overrides recorded of breakers not held once their batch is durable, or all. */
void mend__breakers_recorded_drop(mend_engine *E, int all);
/* The same of the runs resolved (repairs_recorded). */
void mend__repairs_recorded_drop(mend_engine *E, int all);
/* The run in memory, brought back if parked; NULL (refusal MEND_REFUSED_STORE when a batch
 * waits for another PostgreSQL session's lock) if not held here. */
mend_run *mend__repair_find_run(mend_engine *E, const char *id);
/* An `operator` row of run id's history (r: the run, if held here): op by who, and a note. */
void mend__operator_entry(mend_engine *E, mend_run *r, const char *id, const char *op,
                          const char *who, const char *note);
int mend__cancel_now(mend_run *r, const char *who, char *err, int errlen);
/* Who asked for the cancel of run id that another process requested (repair.c). */
void mend__cancel_requester(mend_engine *E, const char *id, char *who, int len);
int mend__cancel_cascade(mend_engine *E, const char *id, const char *who, char *err, int errlen);
int mend__land_deferred_cancel(mend_run *r);
int mend__land_kept_cancel(mend_run *r);
void mend__land_deferred_cancels(mend_engine *E);
double mend__entry_time(mend_engine *E, const char *id);
void mend__reload_breakers(mend_engine *E);
void mend__take_cancel_requests(mend_engine *E);
/* events.c: why running run id takes no event and no token's outcome any more, though it still
 * says running (it fails, or its cancel was asked for: it compensates next), as text for "run
 * ID is ...": r if held here, else row, the store's view of it. NULL: it takes them. */
const char *mend__run_deaf(mend_engine *E, const char *id, mend_run *r, json_t *row,
                           int failing_too);
void mend__unthrottle(mend_run *r);
/* wsched.c: the writer thread's scheduling class (mend_writer_sched). */
void mend__writer_sched_want(mend_engine *E, int ticked);
void mend__writer_sched_apply(mend_engine *E);

#endif
