/*
 * mend: durable workflows whose steps are Lua functions.
 *
 * This header is the whole public C API. An engine (mend_engine) loads workflow scripts,
 * starts runs, and executes them on a libuv loop with every state change committed to SQLite
 * before the code it announces runs. A host needs neither libuv nor Lua headers to use it.
 *
 * Errors: every function that can fail returns a mend_status (MEND_OK is 0); the engine keeps
 * a message naming the cause, read with mend_engine_errmsg(). A NULL engine, or a NULL where a
 * call needs a value (a run id, a path, an out pointer), is MEND_EINVAL (mend_engine_free(NULL)
 * excepted: MEND_OK, as free(NULL)).
 *
 * Threading: an engine belongs to one thread at a time: the one that created it, until
 * another takes it over with mend_engine_adopt(). No function may be called on it from
 * another thread, except mend_engine_wakeup() and mend_engine_adopt(): one that returns a
 * status returns MEND_ESTATE there, the engine untouched, mend_engine_errmsg() on that thread
 * says why, and the engine's thread logs the refusal (an error line, event "engine") when its
 * loop next turns. Engines on different threads are independent. Callbacks (log, alert, event,
 * host functions) run on the engine's thread, from inside mend_engine_run_all(),
 * mend_engine_tick() or the host's own uv_run(); from a
 * callback a host may call mend_call_return() and mend_call_fail(), and read the engine's
 * queries; mend_engine_free() from any callback gets MEND_ESTATE, the engine left as it was;
 * a callback reached from a run's code (a host function called by a step; a log line of a
 * step, of a when, idempotency_key or map's list function, of a child step's input) that
 * drives it (run_all, tick, tick_ex, advance_clock, recover) gets MEND_ESTATE. The event and
 * alert callbacks are heard between pieces of work, outside any run's code: they may drive it
 * (a nested call does the work that is ready, and hears the events after theirs).
 *
 * Three ways to drive an engine:
 *  - it owns its loop, and mend_engine_run_all() blocks until no run is in flight (on the
 *    virtual clock, until the runs left wait only for the world);
 *  - it attaches to the host's libuv loop (mend_options.uv_loop), and the host's uv_run()
 *    drives it;
 *  - the host calls mend_engine_tick() from its frame loop: mend does the work that is ready
 *    for at most the budget and returns at once, never blocking; mend_engine_next_tick() says
 *    when it next has work, so the host can sleep until then.
 */
#ifndef MEND_H
#define MEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MEND_API __attribute__((visibility("default")))
#else
#define MEND_API
#endif

#define MEND_VERSION_MAJOR 0
#define MEND_VERSION_MINOR 2
#define MEND_VERSION_PATCH 0
#define MEND_VERSION_STRING "0.2.0"

/* The library's version as a string, "0.2.0" (may differ from the header's at run time). */
MEND_API const char *mend_version(void);

typedef enum mend_status {
  MEND_OK = 0,
  MEND_EINVAL,      /* a bad argument (bad JSON, unknown option value) */
  MEND_ENOMEM,      /* out of memory */
  MEND_ELOAD,       /* a workflow script failed to load or check */
  MEND_ESTORE,      /* the database failed (full, not a mend database, ...) */
  MEND_ENOTFOUND,   /* no such run or workflow (mend_trust_db: no database) */
  MEND_ECLOCK,      /* the operation needs a virtual clock */
  MEND_ESTATE,      /* the operation makes no sense now (e.g. retrying a succeeded run) */
  MEND_EBROKEN,     /* the engine stopped for good after an internal failure (its message
                       says which); free it and make a new one */
  MEND_EUSED,       /* a completion token that was completed or failed already */
  MEND_ESTALE,      /* a completion token of an attempt that no longer waits for it */
  /* Another process's write lock (SQLite) or another session's row or table lock
   * (PostgreSQL) held the call back. The engine is not at fault and goes on. The two codes
   * tell a host whether to send the call again: */
  MEND_EBUSY,       /* nothing of it was recorded: send it again (once the lock goes) */
  MEND_EDEFERRED    /* it is accepted and kept in the batch that waits for the lock, and
                       committed once the lock goes: do not send it again (a start: its run's
                       id is given; sent again, it would start a second run). Kept in this
                       engine: one freed while the lock lasts gives the batch up, as a crash
                       would (keep driving the engine until the lock goes) */
} mend_status;

/* A static description of a status code ("storage error"). */
MEND_API const char *mend_strerror(int status);

typedef struct mend_engine mend_engine;
typedef struct mend_call mend_call;

typedef enum mend_durability_mode {
  /* a committed transition survives power loss (SQLite synchronous=FULL) */
  MEND_SYNC_FULL = 0,
  /* survives a crash of the process, may lose the last commits on power loss */
  MEND_SYNC_PROCESS = 1
} mend_durability_mode;

/* A log record: level is "debug" | "info" | "warn" | "error"; run and step may be NULL. */
typedef void (*mend_log_fn)(void *ud, const char *level, double time, const char *run,
                            const char *step, int attempt, const char *event, const char *message);
/* An alert or event, as a JSON object (valid during the call only). Alerts: {"kind":
 * "attention" | "dead_letter" | "compensated_with_alert", "run_id", "workflow", "step",
 * "reason", "error", "at"}. Events: {"type": "run_finished" | "step_failed" |
 * "breaker_changed", ...}. */
typedef void (*mend_json_fn)(void *ud, const char *json);

/* A host function that workflow steps call with mend.call(name, ...). `args_json` is a JSON
 * array of the arguments. The host answers exactly once, with mend_call_return() or
 * mend_call_fail(), either before returning (synchronous) or later from its loop
 * (asynchronous); the step waits without blocking anything meanwhile. */
typedef void (*mend_host_fn)(void *ud, mend_call *call, const char *args_json);

/* The class the kernel schedules mend's commit thread in (and the thread that reads a ticking
 * host's inbox looks, which follows it: SCHED_BATCH unless MEND_WRITER_SCHED_OTHER). With fewer
 * cores than busy threads, the kernel runs the thread woken to commit a batch at once on the core
 * of the thread that handed it over, in the middle of that thread's tick (W11 under load: up to a
 * fifth of the hand-offs). In SCHED_BATCH it keeps its full share of the CPU, so commits are not
 * starved, but it does not preempt the thread that woke it: it runs when that thread sleeps,
 * another core is free, or that thread's time slice ends. The thread takes a new class after its
 * next batch. */
typedef enum mend_writer_sched {
  MEND_WRITER_SCHED_TICKS = 0,   /* SCHED_BATCH once the engine is ticked, as the host's other
                                    threads under mend_engine_run_all */
  MEND_WRITER_SCHED_OTHER = 1,   /* always as the host's other threads (SCHED_OTHER) */
  MEND_WRITER_SCHED_BATCH = 2    /* always SCHED_BATCH */
} mend_writer_sched;

typedef struct mend_options {
  size_t size;                /* sizeof(mend_options) where the host was compiled, set by
                                 mend_options_init: a later libmend, whose options have grown,
                                 reads the host's as they were, and the fields it adds keep
                                 their defaults */
  const char *db_path;        /* SQLite file; NULL or ":memory:" keeps nothing on disk */
  mend_durability_mode durability;
  int virtual_clock;          /* 1: time moves only by mend_engine_advance_clock() or when
                                 mend_engine_run_all() has nothing else to do */
  int has_seed;               /* 1: seed the random generator (backoff jitter) with `seed` */
  uint64_t seed;
  void *uv_loop;              /* a uv_loop_t * of the host to attach to; NULL: the engine's own */
  int max_concurrency;        /* attempts in flight at once; 0: no cap */
  size_t memory_limit;        /* bytes that workflow code may hold in the engine's Lua VM;
                                 an attempt over it is stopped like one over its budget;
                                 0: no limit */
  long instruction_budget;    /* Lua instructions per attempt; over it the attempt is stopped
                                 and the run parked in the dead-letter queue (workflow_error);
                                 0: no budget */
  int sandbox;                /* 1: each workflow file runs in an environment of its own, built
                                 from an allow-list: no io, os.execute, debug, package, binary
                                 chunks, mend.exec (README: Limits and sandbox) */
  const char *lua_path;       /* where mend's Lua files are (require "mend"); NULL: $MEND_LUA_DIR,
                                 else the source tree for a build-tree libmend, else the
                                 install's share/mend/lua (found relative to libmend.so) */
  mend_log_fn log;            /* NULL and log_to_stderr 0: no log */
  void *log_ud;
  int log_to_stderr;          /* 1 and no log function: JSON lines (text on a terminal) */
  mend_json_fn alert;         /* alerts (attention, dead letters); NULL: only in history */
  void *alert_ud;
  mend_json_fn on_event;      /* events for the host's metrics; NULL: none */
  void *event_ud;
  const char *log_level;      /* the least level logged: "debug", "info" (NULL), "warn" or
                                 "error"; transitions are info, failures warn */
  int commit_thread;          /* 1: statements and commits on a thread of mend's own, while the
                                 loop goes on with the next batch (more throughput from a file
                                 database); with the engine's own loop and a real clock only,
                                 else ignored. 0: on the thread that drives the engine, until
                                 the first mend_engine_tick() (ticks imply 1) */
  const char *http_allow;     /* the hosts mend.http may call, comma-separated (a host name
                                 never holds a comma): "payments.internal,*.example.com", where
                                 "*.example.com" is any name under example.com. NULL: any host,
                                 except in a sandbox, where NULL allows none. With a list (or
                                 a sandbox) a loopback, unspecified or link-local address, or
                                 one the kernel delivers to this machine, is
                                 connected to only if the list names it or "localhost"
                                 (docs/lua-api.md). Copied by mend_engine_new */
  double park_after;          /* seconds of the engine's clock a run waiting for an event, a
                                 due time or a retry stays in memory; then it is parked out of
                                 it until its event, due time or a cancel brings it back from
                                 the database (README: Waiting for events). 0: never;
                                 < 0 or NaN: MEND_EINVAL */
  mend_writer_sched writer_sched;  /* the scheduling class of the thread that commits
                                 (commit_thread, ticks): see mend_writer_sched */
  const char *thread_cpus;    /* the CPUs mend's own threads run on (the commit thread, the
                                 checkpoint thread, SQLite's inbox looks of a ticking host,
                                 PostgreSQL's connection opener), listed as
                                 Linux lists them: "1", "2-3", "0,2-3". NULL: where the thread
                                 that makes the engine may run, whose affinity they inherit (a
                                 game thread pinned to a core pins them to it too). Threads of
                                 the libraries mend drives (libcurl's resolver) are not mend's:
                                 they run where the engine's thread may, as do the processes a
                                 step starts (mend.exec) and alert commands. Read by
                                 mend_engine_new */
  int no_sandbox;             /* 1 with sandbox 0: a database marked sandboxed (a sandboxed
                                 engine opened it, README: Limits and sandbox) runs its
                                 workflows' code unsandboxed all the same, with a warning in
                                 the log. 0: such a database makes the engine sandboxed */
} mend_options;

/* Fills *opts with defaults: in-memory database, full durability, real clock, random seed,
 * own loop, no limits, no sandbox, no log, commits on the loop's thread. Call it first: it
 * sets `size`, without which mend_engine_new refuses the options. */
#define mend_options_init(opts) mend_options_init_size((opts), sizeof(mend_options))
MEND_API void mend_options_init_size(mend_options *opts, size_t size);

/* Creates an engine with its own Lua state; opts NULL gives the defaults mend_options_init
 * sets. On failure returns the status, sets *out to NULL (out NULL: MEND_EINVAL), and writes
 * a message naming the cause into err (if not NULL). MEND_EINVAL: an option out of
 * its range (an empty db_path, a durability other than the two modes, a negative
 * max_concurrency or instruction_budget, an unknown log_level or writer_sched, a thread_cpus
 * that names no CPU or one this process may not use: absent, offline, outside its cpuset).
 * Any of descriptors 0, 1 and 2 (stdin, stdout, stderr) that is closed is opened on /dev/null
 * first: libuv aborts the process when it closes a descriptor of its own numbered 0 to 2, which
 * the engine's loop would otherwise get. MEND_ESTATE, naming it, when one cannot be (no
 * /dev/null: a chroot). A host that gives its own uv_loop must make that loop with them open:
 * its descriptors are taken before the engine is made. They must stay open while the engine
 * lives: a host that closes one later (a daemon detaching) gives its number to the next
 * descriptor the engine opens (a reconnection, a mend.exec's pipe). */
MEND_API int mend_engine_new(const mend_options *opts, mend_engine **out, char *err, size_t errlen);
/* Destroys the engine. Runs in flight stay in the database as they are, their leases given
 * back, for this or another engine to resume. Host calls still open stay valid: answering them
 * afterwards only frees them. MEND_OK; MEND_ESTATE, the engine left as it was, when called from
 * inside one of its callbacks (a host function, the log, an alert, an event: the engine is
 * running the code that called them), with an error-level log line and mend_engine_errmsg
 * saying so: free it once the call that drives it (mend_engine_run_all, tick, ...) returns.
 * An engine freed already: MEND_EINVAL, nothing of it read; so is every call returning a status
 * on it, until a new engine is made at its address (do not keep the pointer). NULL: MEND_OK,
 * nothing done, as free(NULL). */
MEND_API int mend_engine_free(mend_engine *engine);
/* The message of the engine's last failure ("" if none). Valid until the next call. A NULL or
 * freed engine: a message saying so (nothing of a freed engine is read). */
MEND_API const char *mend_engine_errmsg(mend_engine *engine);

/* Whether an engine runs its workflows' code sandboxed (README: Limits and sandbox), and why. */
typedef enum mend_sandboxing {
  MEND_UNSANDBOXED = 0,        /* trusted code: options without sandbox, on a database not
                                  marked sandboxed, or with no_sandbox */
  MEND_SANDBOXED = 1,          /* mend_options.sandbox said so */
  MEND_SANDBOXED_BY_MARK = 2   /* the database is marked sandboxed (a sandboxed engine opened
                                  it) and the options said neither sandbox nor no_sandbox:
                                  mend_engine_new made the engine sandboxed, and its log has a
                                  warn line (event "sandbox") naming the database and the ways
                                  out (no_sandbox, mend_trust_db) */
} mend_sandboxing;
/* A mend_sandboxing, fixed when the engine was made: clearing the mark (mend_trust_db) changes
 * no engine open now. -1 for a NULL or freed engine, and from a thread it does not belong to
 * (refused as the calls that return a status are: Threading, above), which a host that tests
 * the answer for truth reads as sandboxed. */
MEND_API int mend_engine_sandboxed(mend_engine *engine);

/* Clears the sandbox mark of the database `db_path` (a SQLite file, or a postgresql:// URI), as
 * `mend db trust` and mend.trust_db do: the host's decision that the code of its workflows,
 * those a sandboxed engine stored among them, is trusted again. Engines made on it afterwards
 * run that code unsandboxed unless told sandbox; engines open now keep what they are, and a
 * sandboxed one opened again marks it again. It takes the database, not an engine: an engine's
 * sandbox is fixed as it is made (one the mark made sandboxed stays so until it is made again),
 * and an engine made to clear it would run the recovery of its runs first. Any thread, no
 * engine needed. *was_marked (may be NULL): 1 the mark was there and is cleared, 0 the
 * database was not marked (nothing done). MEND_OK; MEND_EINVAL: db_path NULL; MEND_ENOTFOUND:
 * no mend database there (no such file, "", ":memory:", an empty file or PostgreSQL database
 * with no mend schema), and none is made; MEND_ESTORE: the database
 * failed (its schema is newer than this mend's, it is not a mend database, a lock held it past
 * the busy wait), the mark as it was. A message naming the cause goes into err (if not NULL). */
MEND_API int mend_trust_db(const char *db_path, int *was_marked, char *err, size_t errlen);

/* The longest name, in bytes, of a workflow, a step, an event, a breaker a workflow names (a
 * workflow file with a longer one does not load; a call given one fails with MEND_EINVAL), and
 * of a run key. A breaker named by default after a step of a group or a map is
 * "group/step", which may be longer: mend_engine_override_breaker takes any length. */
#define MEND_NAME_MAX 512
#define MEND_KEY_MAX 1024
/* Who did something, as the history and audit rows keep it ("by WHO"): 1 to MEND_WHO_MAX bytes
 * of UTF-8 with no control character, C0, DEL or C1 (mend history and the timeline print it
 * as it is). A call given another ("" too) is MEND_EINVAL, its message naming the rule; NULL
 * is "not told". */
#define MEND_WHO_MAX 256

/* How deep child runs nest: a run started by a step (`child = "name"`) is one deeper than its
 * parent, a run started otherwise is at depth 0. A child step whose child would be deeper than
 * MEND_CHILD_DEPTH_MAX fails with a fatal error naming the depth and the chain of workflows
 * (its run compensates), so that a workflow that starts itself ends instead of filling the
 * database with runs. */
#define MEND_CHILD_DEPTH_MAX 32
/* The most bytes of JSON text an event's payload may have, from any sender (the C and Lua
 * APIs, `mend signal --data`, POST /api/v1/runs/{id}/events): 1 MiB, `mend serve`'s default
 * --max-body. A larger one is MEND_EINVAL, nothing sent: an event is kept in the inbox and in
 * the run's history, and a run carries it in memory; put a large document elsewhere and send
 * its reference. */
#define MEND_EVENT_DATA_MAX (1024 * 1024)

/* Loads a workflow script (a Lua file returning a definition). On success copies the
 * workflow's name into name_out (if not NULL; MEND_NAME_MAX + 1 bytes hold any): a name_len
 * too small for it is MEND_EINVAL, name_out "", the workflow loaded all the same.
 * MEND_ELOAD names the file, step and field. */
MEND_API int mend_engine_load(mend_engine *engine, const char *path, char *name_out,
                              size_t name_len);

/* Registers a host function under `name` for mend.call. Not from a callback. MEND_EINVAL for
 * a NULL or empty name or a NULL fn. */
MEND_API int mend_engine_register_function(mend_engine *engine, const char *name, mend_host_fn fn,
                                           void *ud);
/* Answers a host call with a JSON value (NULL: nil). MEND_EINVAL if the JSON is bad (a key given
 * twice in one object or nesting past 100 levels is, as in mend_engine_start;
 * mend_engine_errmsg says which), MEND_ESTATE
 * from a thread the call's engine does not belong to (the call stays open: answer it on the
 * engine's thread, after mend_engine_wakeup() if it sleeps). Frees the call. */
MEND_API int mend_call_return(mend_call *call, const char *result_json);
/* Answers a host call with a typed error: kind "retryable" (retry_after >= 0 is the dependency's
 * advice, clamped by the policy's max_retry_after; < 0 or NaN none), "fatal", or "compensable"
 * (severity 1..3; 0 is 1). The message (NULL: none) is UTF-8 text: it is kept in the step's error
 * and history, as mend_engine_fail's is. Frees the call: MEND_OK. MEND_EINVAL: call is NULL, or
 * kind is none of the three, a compensable severity is outside 0..3 or the message is not UTF-8
 * (the call stays open: answer it again; mend_engine_errmsg says which); MEND_ESTATE from a
 * thread the call's engine does not belong to (the call stays open, as with mend_call_return);
 * MEND_ENOMEM (the call stays open). */
MEND_API int mend_call_fail(mend_call *call, const char *kind, const char *message,
                            double retry_after, int severity);

/* Makes the calling thread the one the engine belongs to, for a host that moves its work
 * between threads (a pool of workers that each frame takes whichever engine is due). The
 * thread it belonged to must have stopped using it, and the host must order that thread's
 * last call before this one (a mutex, a queue, a join: whatever hands the engine over), as
 * SQLite asks of a connection used by one thread at a time. From then on every call,
 * callbacks included (the log, alerts, events, host functions), is this thread's; host calls
 * still open are answered here, and a loop the engine attaches to (mend_options.uv_loop) must
 * be run here. MEND_OK (also when it belongs to this thread already); MEND_EINVAL: no such
 * engine (NULL, or freed); MEND_ESTATE: its thread is driving it now (inside
 * mend_engine_tick, run_all, advance_clock, recover or load: what can be seen of a hand-over
 * made too early), nothing changed, logged as any refusal. */
MEND_API int mend_engine_adopt(mend_engine *engine);

/* Starts a run of `workflow` with `input_json` (NULL: null). With a non-NULL `run_key` that was
 * used before, returns the existing run's id instead and sets *existed (may be NULL) to 1.
 * run_id_out must hold 17 bytes. The run executes as the engine is driven. MEND_ENOTFOUND: no
 * such workflow is loaded; MEND_EINVAL: input_json is not JSON (an object that gives a key twice,
 * at any depth, is not: which of the two was meant is not known; the message names the key),
 * is nested deeper than 100 levels (arrays and objects in one another: the most mend encodes,
 * as the HTTP API refuses; the message names the bound), or
 * run_key is "" (as an unset shell variable gives: a key, or NULL) or is not UTF-8 (a store keeps
 * only text: the message names which text);
 * MEND_ESTATE: `run_key` names a run of another workflow (nothing started; the message names
 * that run and its workflow);
 * A lock held elsewhere is no failure of the engine (it goes on; the message names the lock):
 * MEND_EBUSY: nothing of the start was recorded (on PostgreSQL while a batch waits for a row
 * or a table another session holds; on SQLite the first start of a workflow version, whose
 * version is written first, or a keyed start behind a batch that waits already): start it
 * again once the lock goes. MEND_EDEFERRED (SQLite): the start waited out its busy wait for
 * another process's write lock, or joined a batch already kept for one, and is kept in that
 * batch; run_id_out holds
 * its run's id, committed once the lock goes, and the run goes on then: do not start it
 * again (without a run key it would be a second run; with one, sent again once the lock went,
 * it answers that run, *existed 1). A run key makes any start safe to send again.
 * MEND_ESTORE: the database failed; that stops the engine, as mend_engine_run_all would. */
MEND_API int mend_engine_start(mend_engine *engine, const char *workflow, const char *input_json,
                               const char *run_key, char run_id_out[17], int *existed);
/* mend_engine_start() that records who started the run (NULL: not told, as mend_engine_start):
 * a `started` row "by WHO" in its history, as `mend start --who`, X-Mend-Who and eng:start's
 * {who=} record it. MEND_EINVAL, nothing started, for a who outside the rule of MEND_WHO_MAX. */
MEND_API int mend_engine_start_who(mend_engine *engine, const char *workflow,
                                   const char *input_json, const char *run_key, const char *who,
                                   char run_id_out[17], int *existed);
/* Resumes the unfinished runs of the database that no live engine holds. *count (may be NULL)
 * receives how many. */
MEND_API int mend_engine_recover(mend_engine *engine, int *count);

/* Runs the engine's own loop until no run is in flight; on the virtual clock, also once the
 * runs left wait only for the world (an event sent to them, say: nothing of the engine's own
 * is due), as eng:run() returns: mend_engine_in_flight_count() says how many.
 * MEND_ESTORE if the database failed. */
MEND_API int mend_engine_run_all(mend_engine *engine);
/* Does the work that is ready for about `budget` seconds at most and returns; never blocks.
 * Between pieces of work (an action of a run, a due timer) it looks at its clock, and stops
 * when the next piece would not fit, at the cost pieces have had; the first piece always runs.
 * A piece that runs step code runs it to its next wait (mend.call, mend.sleep, a return) and
 * cannot be cut short: the instruction budget (mend_options.instruction_budget) is what bounds
 * it, so a step doing heavy work between waits makes a long tick.
 * With a file database, a real clock and the engine's own loop, commits and their syncs are
 * never the tick's, in either durability mode: from the first tick they are handed to a
 * thread of mend's own (commit_thread is implied; that first tick commits what was written
 * before it). A run's next action still waits until the batch that announced it is durable:
 * it runs in the first tick after the thread reports it. mend_call_return() and
 * mend_call_fail() only queue the answer: its step resumes in the next tick, within the
 * budget; mend_engine_signal() to a run in memory joins the next batch (see there). Not
 * bounded by the tick: mend_engine_start() with a run key, and a signal to a run named by
 * its key or kept out of memory (parked), commit before they return.
 * MEND_EINVAL for a budget that is NaN, negative or infinite (nothing done; 0 does the first
 * piece); MEND_ESTORE if the database failed. */
MEND_API int mend_engine_tick(mend_engine *engine, double budget);

/* What a tick did and what it left undone, so that a host can give more time in a quiet frame
 * (work left and time left in the frame) or less in a busy one. */
typedef struct mend_tick_stats {
  double seconds;   /* the tick's own time */
  int actions;      /* actions of runs done (a transition, an attempt started or ended...) */
  int ready;        /* actions that were ready and are left for the next tick: out of budget */
  int timers_due;   /* timers due (retries, sleeps, timeouts) left for the next tick */
  int committing;   /* 1: a batch is being committed on mend's thread; what waits for it goes on
                       in a tick after it is durable */
  /* What the tick's time went to, for a host that profiles its frames (a tick past its budget:
   * was it the runs' work, the collector, a pick-up?). Counts are this tick's; the times are
   * the wall clock of its phases, which make up `seconds` but for a few clock reads. Wall
   * clock, not CPU: the host reads its thread's CPU clock and context switches around the
   * call to tell mend's work from time the OS took (examples/game_loop.c). */
  int resumed;      /* of actions: steps resumed with a host function's answer */
  int delivered;    /* events taken by steps waiting for them (mend_engine_signal's, or found
                       in the inbox by a look) */
  int picked_up;    /* batches found durable (their runs' next actions made ready) */
  int heard;        /* events heard by on_event in this tick */
  int handed_off;   /* 1: the tick handed its batch to mend's commit thread */
  int gc_steps;     /* steps of Lua's collector (from the first tick, ticks run it) */
  int lua_kb_begin, lua_kb_end;   /* the Lua heap, KB, as the tick began and as it ended */
  double pickup_seconds;    /* picking up: durable batches, their events heard, looks' answers */
  double work_seconds;      /* the pieces: answers, events, actions (step code), timers */
  double gc_seconds;        /* the collector's steps */
  double handoff_seconds;   /* ending the batch and handing it off, inbox looks sent */
} mend_tick_stats;
/* mend_engine_tick() that fills *stats (if not NULL) as the tick ends. Call it through
 * mend_engine_tick_stats(engine, budget, &stats): a later libmend whose stats have grown
 * writes only the fields the host knows. */
#define mend_engine_tick_stats(engine, budget, stats) \
  mend_engine_tick_ex((engine), (budget), (stats), sizeof *(stats))
MEND_API int mend_engine_tick_ex(mend_engine *engine, double budget, mend_tick_stats *stats,
                                 size_t stats_size);
/* Seconds until the engine next has work: 0 at once, -1 nothing scheduled. While HTTP requests
 * or child processes of steps are in flight, at most 0.01: their answers arrive on the loop;
 * while mend's commit thread writes a batch, at most 0.001. This, in_flight_count and time
 * answer -1, 0 and 0 for a NULL or freed engine, and from another thread, refused as the
 * calls that return a status are (Threading, above). */
MEND_API double mend_engine_next_tick(mend_engine *engine);
/* Thread-safe: wakes the loop the engine runs on. An engine freed already (its thread freed it
 * while another had a host call's answer to hand over) is not woken, nothing of it read. */
MEND_API void mend_engine_wakeup(mend_engine *engine);
/* Runs in flight (held in memory by this engine). A run leaves this count in the turn that
 * delivers its run_finished event (once its end is durable): a host that stops ticking when
 * it falls to 0 has heard every end. */
MEND_API int mend_engine_in_flight_count(mend_engine *engine);
/* Virtual clock only: moves time on by `seconds`, doing the work that comes due. MEND_ECLOCK
 * with a real clock; MEND_EINVAL if seconds is negative, NaN or would make the clock infinite;
 * MEND_ESTORE if the database failed. */
MEND_API int mend_engine_advance_clock(mend_engine *engine, double seconds);
/* The engine's clock, seconds since the epoch. */
MEND_API double mend_engine_time(mend_engine *engine);

/* Queries. Each returns a JSON document in *json_out, to be released with mend_free().
 *  run:     {"id","workflow","status","input","key","error","attention","steps":[...]}
 *  history: [{"seq","at","step","event","from","to","attempt","error","delay","detail"}]
 *  dlq:     [{"run_id","reason","step","error","detail","at"}]
 * MEND_ENOTFOUND: no such run (run and history: the message names the run);
 * MEND_ESTORE: the database failed. */
MEND_API int mend_engine_run_json(mend_engine *engine, const char *run_id, char **json_out);
MEND_API int mend_engine_history_json(mend_engine *engine, const char *run_id, char **json_out);
/* The most rows a page of a history has, on every surface (this API, eng:history, mend
 * history, GET /api/v1/runs/{id}/history), and the rows of one whose reader names no limit. */
#define MEND_HISTORY_PAGE_MAX 10000
#define MEND_HISTORY_PAGE 1000
/* A page of a run's history, in seq order, as history above: tail > 0, its last `tail` rows;
 * tail 0, the rows after seq `after` (0: from the first), at most `limit`. The next page is
 * after = the last row's seq; fewer than `limit` rows mean the history ends there (for now);
 * a known run past its last row gives []. MEND_EINVAL, as the HTTP API refuses them: after
 * negative; tail outside 0 to MEND_HISTORY_PAGE_MAX; tail > 0 with after or limit not 0;
 * limit outside 1 to MEND_HISTORY_PAGE_MAX with tail 0. */
MEND_API int mend_engine_history_page_json(mend_engine *engine, const char *run_id,
                                           long long after, long long limit, long long tail,
                                           char **json_out);
MEND_API int mend_engine_dlq_json(mend_engine *engine, char **json_out);
/* A page of the dead-letter queue, in dlq's order (oldest first by `at`, an entry without one
 * first, then by run id): at most `limit` entries (1 to MEND_HISTORY_PAGE_MAX, else
 * MEND_EINVAL), those after the entry (after_run, after_at) given: the last of the page
 * before, its `at` (-1 if it has none; not finite: MEND_EINVAL); after_run NULL: from the
 * first. Fewer than `limit` entries: the queue ends there (for now). GET /api/v1/dlq pages it
 * so. */
MEND_API int mend_engine_dlq_page_json(mend_engine *engine, const char *after_run,
                                       double after_at, long long limit, char **json_out);
MEND_API void mend_free(void *p);

/* Repairs (recorded in the run's history with `who`): see the README, "Operating mend".
 * MEND_ESTATE with a message when the operation makes no sense for the run; MEND_EINVAL when an
 * argument it needs is missing (a resolve's note NULL or ""), when a note is not UTF-8, or when
 * who (NULL: recorded as "?") breaks the rule of MEND_WHO_MAX; MEND_EBUSY when another
 * process's or session's lock held it back (nothing of it written: try again once it goes);
 * MEND_ESTORE when the database ended the repair's transaction before its commit (nothing of
 * it written: try again). A repair of a run this engine holds is recorded in its batch:
 * MEND_OK, made once that batch is committed. */
MEND_API int mend_engine_cancel(mend_engine *engine, const char *run_id, const char *who);
MEND_API int mend_engine_retry_dead_letter(mend_engine *engine, const char *run_id,
                                           const char *who);
MEND_API int mend_engine_resolve_dead_letter(mend_engine *engine, const char *run_id,
                                             const char *who, const char *note);
/* Sends event `name` to a running run: a step `wait_for = name` takes the oldest one it has
 * not taken, and its payload (JSON text; NULL: null) is the step's result. The event is durable
 * when this returns, whether the run waits for it yet or not. With a non-NULL `key`, sending
 * the same key to the same run again is one event (MEND_OK, nothing sent). MEND_ENOTFOUND: no
 * such run; MEND_ESTATE: the run has ended, is compensating, fails (a step of it failed for
 * good) or is being cancelled (its cancel asked for, not done yet): it compensates next,
 * waiting for no event any more; MEND_EINVAL: bad JSON (a key
 * given twice in one object or nesting past 100 levels is, as in mend_engine_start), a key or
 * run key that is "", a name, key, run id or run key that is not UTF-8 (the message names
 * which), a payload over MEND_EVENT_DATA_MAX bytes, or a name of mend's own ("mend.token"
 * or "mend.child", alone or followed by ":STEP": a token's outcome and a child's end come
 * under them).
 * by_key: the run is the one started with that run key. Being durable on return, a signal
 * commits (in MEND_SYNC_FULL, an fsync) on the caller's thread, after the batch the commit
 * thread may be writing. Except in an engine that ticks (mend_engine_tick), to a run it holds
 * in memory, named by its id: there MEND_OK means the run exists and is running, so the
 * event is accepted; it joins the batch mend's thread writes next, and
 * is durable once that batch is (a crash before then loses it; a tick or two later). The
 * run takes it only once it is durable. A key sent before is then kept once when that
 * batch is written (MEND_OK either way, as always). On PostgreSQL the same holds for an event
 * with a key (one lost with its batch's connection is sent again with the next batch, and
 * kept once by its key); one without a key commits before this returns.
 * A lock held elsewhere past the store's busy wait (another process's write lock on SQLite,
 * another session's row or table lock on PostgreSQL) is no failure of the engine, which goes
 * on: MEND_EDEFERRED (SQLite): the event is kept in the batch that waits for the lock and
 * sent once it goes: do not send it again (without a key it would be sent twice).
 * MEND_EBUSY: nothing of it was recorded (PostgreSQL): send it again once the lock goes (with
 * a key, a second send is kept once in any case). An event that joined a ticking engine's
 * batch is MEND_OK as above, committed once the lock goes. MEND_ESTORE: the database failed. */
MEND_API int mend_engine_signal(mend_engine *engine, const char *run_id, const char *name,
                                const char *payload_json, const char *key);
MEND_API int mend_engine_signal_by_key(mend_engine *engine, const char *run_key,
                                       const char *name, const char *payload_json,
                                       const char *key);
/* The two above, with who sent the event (NULL: not told): kept with it, as `mend signal --who`
 * and X-Mend-Who keep theirs (GET /api/v1/runs/{id}/events shows it). MEND_EINVAL, nothing
 * sent, for a who outside the rule of MEND_WHO_MAX. */
MEND_API int mend_engine_signal_who(mend_engine *engine, const char *run_id, const char *name,
                                    const char *payload_json, const char *key, const char *who);
MEND_API int mend_engine_signal_by_key_who(mend_engine *engine, const char *run_key,
                                           const char *name, const char *payload_json,
                                           const char *key, const char *who);
/* Completes the token a step's attempt handed out (ctx:token(); the step declares wait =
 * "token"): result_json (NULL: null) becomes the step's result. fail: the step fails as if
 * its execute had raised an error of `kind` ("retryable", "fatal" or "compensable") with
 * `message` (may be NULL), and its policy handles it. Durable when it returns MEND_OK.
 * MEND_ENOTFOUND: no such token; MEND_EUSED: it was completed or failed already (a token is
 * single use); MEND_ESTALE: it is of an attempt that no longer waits (an earlier attempt, one
 * that timed out); MEND_ESTATE: its run has ended, fails or is being cancelled (as for
 * mend_engine_signal); MEND_EINVAL: bad JSON (a key given twice in
 * one object or nesting past 100 levels is, as in mend_engine_start) or kind, or a message that
 * is not UTF-8 (as
 * mend_call_fail's is). */
MEND_API int mend_engine_complete(mend_engine *engine, const char *token, const char *result_json);
MEND_API int mend_engine_fail(mend_engine *engine, const char *token, const char *kind,
                              const char *message);
/* Overrides a circuit breaker by hand (recorded in the audit table with `who`): op is "reset",
 * "close" or "open" (for `seconds`, <= 0: its policy's). MEND_ENOTFOUND: no such breaker;
 * MEND_EINVAL: another op (whether the breaker exists or not), a key that is not UTF-8, a who
 * outside the rule of MEND_WHO_MAX, or "open" for
 * `seconds` that are not finite (NaN, an infinity). */
MEND_API int mend_engine_override_breaker(mend_engine *engine, const char *key, const char *op,
                                          double seconds, const char *who);

#ifdef __cplusplus
}
#endif
#endif
