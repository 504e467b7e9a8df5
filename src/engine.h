/*
 * engine: runs workflows. Owns runs in flight, the order of their transitions, the group-commit
 * pump, step attempts as Lua coroutines, retries, breakers, compensation, dead letters and
 * alerts. The write-ahead rule lives here: whatever a transition announces (an execute, a
 * compensate, the next step) runs only from the pump, after the batch holding that transition
 * has committed. The engine asks the store for SQL and the timers for time; it never sleeps.
 */
#ifndef MEND_ENGINE_H
#define MEND_ENGINE_H

#include <jansson.h>
#include <lua.h>
#include <stdint.h>
#include <uv.h>

#include "log.h"
#include "store.h"
#include "workflow.h"

typedef struct mend_engine mend_engine;

typedef void (*mend_engine_log_fn)(void *ud, const mend_log_record *rec);
/* `event` is an object; the callee must not keep it (incref to keep). */
typedef void (*mend_engine_alert_fn)(void *ud, json_t *event);

/* A host function called from a step (mend.call). `args` is a JSON array. The host answers
 * through mend_host_return / mend_host_fail, now or later (asynchronously, from its loop);
 * the step's coroutine waits meanwhile without blocking anything. */
typedef struct mend_host_call mend_host_call;
typedef void (*mend_engine_host_fn)(void *ud, mend_host_call *call, json_t *args);

typedef struct mend_engine_config {
  const char *db_path;          /* ":memory:" by default */
  int db_existing;              /* db_path must be a mend database already: none there, or one
                                   without mend's schema, is refused, nothing made
                                   (mend_store_open_existing) */
  mend_durability durability;
  int virtual_clock;
  int has_seed;
  uint64_t seed;
  mend_engine_log_fn log;       /* NULL: no log */
  void *log_ud;
  int log_level;                /* records below it are not made (mend_log_level_of); 0: info */
  mend_engine_alert_fn alert;   /* NULL: alerts only in history */
  void *alert_ud;
  uv_loop_t *loop;              /* NULL: the engine owns a loop */
  double lease_seconds;         /* how long a run stays ours without renewal (30) */
  double grace_seconds;         /* how long a stopping worker waits for attempts (10) */
  int max_concurrency;          /* attempts in flight at once; 0: no cap */
  long instruction_budget;      /* Lua instructions per attempt; 0: no budget */
  mend_engine_alert_fn on_event;/* run finished, step failed, breaker changed; NULL: none */
  void *event_ud;
  int writer_thread;            /* commit on a thread of the store's (real clock, file db) */
  int buffered_print;           /* the state's print never blocks on stdout (engine/print.c);
                                   always so in a sandbox */
  /* For an engine that makes its own Lua state (host == NULL) only: */
  size_t memory_limit;          /* bytes step code may hold in the VM; 0: no limit */
  int sandbox;                  /* workflow code in an environment of its own (sandbox.h) */
  int no_sandbox;               /* without sandbox, on a database marked sandboxed (a sandboxed
                                   engine opened it): its workflows' code runs unsandboxed, as
                                   the host said, with a warning. Else such a database is
                                   refused (MEND_REFUSED_SANDBOX) without sandbox */
  int sandbox_by_mark;          /* sandbox set by the maker after MEND_REFUSED_SANDBOX, not by
                                   the host: the engine says so (a warn line as it opens, and
                                   mend.http's refusal of a host names the mark) */
  lua_CFunction open_module;    /* opens mend.core in a state the engine makes; NULL: none */
  const char *lua_path;         /* prepended to package.path (where `require "mend"` is) */
  const char *alert_command;    /* run with `sh -c` for each alert, the event as JSON on stdin */
  const char *http_allow;       /* hosts mend.http may call, comma-separated ("*.x.com" for
                                   names under x.com); NULL: any, or none when sandboxed */
  double park_after;            /* seconds of the engine's clock a waiting run stays in memory
                                   before it is parked (src/engine/park.c); 0: 1 s when
                                   serving, never otherwise; < 0: never */
  int writer_sched;             /* the writer thread's class: MEND_WRITER_SCHED_* (wsched.c) */
  const char *thread_cpus;      /* the CPUs the store's threads run on, "0,2-3" (cpus.h); NULL:
                                   where the engine's thread may. Read by mend_engine_create */
} mend_engine_config;

/* What an engine made sandboxed by the database's mark (sandbox_by_mark) says of it, for a
 * host without a log to show. */
void mend_engine_sandbox_by_mark_note(const mend_engine *E, char *buf, size_t len);
/* 0: not sandboxed; 1: sandboxed as its host asked; 2: sandboxed by the database's mark. */
int mend_engine_sandbox_kind(const mend_engine *E);

/* Why an operation refused or failed (a repair, a start, an advance, the engine's creation):
 * the C API maps each to one mend_status and the HTTP API to one code; the message that goes
 * with it is for people and is never matched. */
typedef enum mend_refusal {
  MEND_REFUSED_STATE, MEND_REFUSED_NOT_FOUND, MEND_REFUSED_INVALID, MEND_REFUSED_STORE,
  MEND_REFUSED_NOMEM, MEND_REFUSED_CLOCK,
  MEND_REFUSED_SANDBOX,  /* the engine's creation only: the database is marked sandboxed and
                            the engine was asked for neither sandbox nor no_sandbox (the C API
                            and mend.engine{} make it again sandboxed) */
  MEND_REFUSED_BUSY,     /* another process's or session's lock held it back before anything
                            of it was recorded: the caller may send it again */
  MEND_REFUSED_DEFERRED  /* a start recorded in the batch that waits for a lock: committed
                            once the lock goes (the run's id given); sent again, a second run */
} mend_refusal;

/* Creates an engine that runs its Lua on L's main state (workflow functions are values of that
 * state). NULL with a message on failure (storage errors name the file) and, when why is not
 * NULL, its cause (MEND_REFUSED_NOMEM or MEND_REFUSED_STORE). */
mend_engine *mend_engine_create(lua_State *L, const mend_engine_config *cfg, char *err, int errlen,
                                mend_refusal *why);
/* Abandons attempts in flight (they resume from the store later), closes the store. */
void mend_engine_destroy(mend_engine *E);
const char *mend_engine_error(const mend_engine *E);   /* the last failure, or "" */
/* Remembers a failure of an operation (not of the engine) for mend_engine_error. */
void mend_engine_note_error(mend_engine *E, const char *msg);

/* Workflows. The engine owns a registered workflow; a second one of the same name replaces
 * the first for new runs. Return the workflow or NULL (err says why). */
mend_workflow *mend_engine_load_file(mend_engine *E, const char *path, char *err, int errlen);
/* table at idx of E's state */
mend_workflow *mend_engine_register(mend_engine *E, int idx, char *err, int errlen);
mend_workflow *mend_engine_workflow(mend_engine *E, const char *name);
/* Why the last load of a file named NAME.lua (in whichever directory) failed, as its error said
 * (the message mend_engine_load_file gave); NULL when no such file failed, or it loaded since.
 * So that a start of a workflow whose file is broken is told so, not that there is no such
 * workflow. */
const char *mend_engine_load_failure(mend_engine *E, const char *name);
/* The files whose last load failed and are still there, as "a.lua (error); ..." in BUF (cut to
 * LEN); returns how many. */
int mend_engine_load_failures_named(mend_engine *E, char *buf, size_t len);
/* Lets go of what load.c keeps of failed loads (at the engine's end). */
void mend_engine_load_failures_free(mend_engine *E);
/* Loads a version of a workflow from the script the store keeps for it (each version started
 * in a store keeps its file's text there), or returns the one loaded already. A version older
 * than one loaded carries its runs on but starts no new ones. NULL with err when the store
 * keeps no script for it or it does not load. */
mend_workflow *mend_engine_load_version(mend_engine *E, const char *name, const char *version,
                                        char *err, int errlen);

#define MEND_RUN_ID_LEN 17    /* 16 characters and the terminator */

/* Starts a run of `workflow` with the Lua value at input_idx as input (of the state L, any
 * thread of E's state). With a run key that exists, copies the existing id and sets *existed.
 * 0 ok; -1 with err. The run's first transition commits before its first step executes.
 * `detached`: only record the run, committed at once, for any worker to take;
 * MEND_START_RECORD: the same, recorded in the open batch only: the caller waits for that
 * batch (mend_engine_when_durable) before it says the run exists. Why a start failed is
 * mend_engine_refusal's: NOT_FOUND (no such workflow), INVALID (its input), STORE. `who`
 * started it (NULL: not told, as a workflow's host or a parent run): a run it makes has a
 * `started` row "by WHO" after its first, in its history as a repair's who is. */
#define MEND_START_RECORD 2
/* *existed after a MEND_START_RECORD with a key that the store looks up as the batch is written
 * (SQLite: it waits for no lock): the run recorded under id_out is the key's only if the key
 * was free then; mend_engine_start_outcome tells, once the batch is durable. */
#define MEND_START_KEY_LATER (-1)
int mend_engine_start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                            const char *run_key, const char *who, char id_out[MEND_RUN_ID_LEN],
                            int *existed, int detached, char *err, int errlen);
/* Once the batch of a start that gave MEND_START_KEY_LATER is durable: the key's run in id_out,
 * and *existed when it is not `recorded` (another start, here or in another process, had the
 * key first). -1 with err: refusal STATE for a key of another workflow's run, STORE. */
int mend_engine_start_outcome(mend_engine *E, const char *workflow, const char *run_key,
                              const char *recorded, char id_out[MEND_RUN_ID_LEN], int *existed,
                              char *err, int errlen);
/* A caller whose answer must wait until what was written so far is durable (the write-ahead
 * rule for an answer given outside the engine, such as an HTTP reply), so that callers arriving
 * together share one commit. The caller owns the struct and keeps it until `done` is called
 * (on the loop's thread, from a pump turn, or at once when the engine is broken) or it is
 * cancelled. err NULL: durable; else why not, and nothing of that batch is known to be kept. */
typedef struct mend_durable_wait mend_durable_wait;
struct mend_durable_wait {
  void (*done)(mend_durable_wait *w, const char *err);
  unsigned long seq;                 /* set by mend_engine_when_durable */
  mend_durable_wait *prev, *next;
  int listed;
  int lost;                          /* waiting when the connection was lost (reconnect.c) */
};
void mend_engine_when_durable(mend_engine *E, mend_durable_wait *w);
/* It is not told: a caller gone before its batch (a client that closed its connection). */
void mend_engine_durable_cancel(mend_engine *E, mend_durable_wait *w);

/* Same, with the input as JSON text. */
int mend_engine_start_json(mend_engine *E, const char *workflow, const char *input_json,
                           const char *run_key, const char *who, char id_out[MEND_RUN_ID_LEN],
                           int *existed, char *err, int errlen);

/* Runs the loop until no run is in flight (a virtual clock jumps to each next timer). 0, or
 * -1 on a storage failure (mend_engine_error says which; nothing uncommitted was announced). */
int mend_engine_run(mend_engine *E);
/* run() was left by a Lua error that jumped out of it (a panic): what it set going for its own
 * time is put back, its look at the store stopped (on a host's loop it would hold the host's
 * uv_run until the engine is freed) and the virtual clock no longer moved by the loop. */
void mend_engine_run_left(mend_engine *E);
/* Virtual clock: moves time on by `seconds`, doing all the work that comes due on the way.
 * 0, or -1 with mend_engine_refusal CLOCK (a real clock) or STORE (mend_engine_error). */
int mend_engine_advance(mend_engine *E, double seconds);
double mend_engine_now(const mend_engine *E);

/* Recovery and workers. Every engine holds the runs it executes through a lease in the store
 * (renewed while it works). recover claims up to `limit` (<= 0: all) unfinished runs that no
 * live engine holds and resumes each from what the store says; returns how many, or -1. */
int mend_engine_recover_runs(mend_engine *E, int limit);
/* 1 when an engine holds run id and is alive (this one, or another whose lease lasts and, on
 * this host, whose process is there), its name in owner; 0 when none does (owner: the last holder,
 * or ""); -1 with the error in owner. */
int mend_engine_holder(mend_engine *E, const char *id, char *owner, int len);
/* The same as a view reads it, for showing (mend status, GET /api/v1/runs/{id}): the committed
 * lease while another process's lock keeps this engine's batch, never a wait for the writer. */
int mend_engine_held_by(mend_engine *E, const char *id, char *owner, int len);
/* Carries on here an unfinished run that no live engine holds (as recovery would, a cancel
 * asked for meanwhile included). 0 resumed (or in flight here already); 1 a live engine holds
 * it (err names it); -1 with err (an ended run, a workflow not loaded here). */
int mend_engine_resume_run(mend_engine *E, const char *id, char *err, int errlen);
/* Works as a worker until stopped (SIGINT, SIGTERM or mend_engine_stop): claims runs every
 * poll_seconds, at most max_in_flight at once (<= 0: no cap). On stop it starts no new
 * attempt, waits for those in flight up to the grace period, then gives back its leases.
 * 0, or -1 on a storage failure. */
int mend_engine_serve(mend_engine *E, double poll_seconds, int max_in_flight);
void mend_engine_stop(mend_engine *E);

/* Game-loop hosts: does the work that is ready (attempts, due timers, I/O, handing batches to
 * the writer thread) for at most about `budget` seconds and returns; never waits for a commit.
 * Returns how many turns it took, -1 if the engine broke. With info: what it did and left. */
typedef struct mend_engine_tick_info {
  double seconds;   /* the tick's own time */
  int actions;      /* actions done */
  int ready;        /* actions ready and left for the next tick (the budget ran out) */
  int timers_due;   /* timers due and left (the budget ran out) */
  int committing;   /* 1: a batch is on the writer thread; what waits for it goes on after */
  /* the account (mend.h: mend_tick_stats) */
  int resumed, delivered, picked_up, heard, handed_off, gc_steps;
  int lua_kb_begin, lua_kb_end;
  double pickup_seconds, work_seconds, gc_seconds, handoff_seconds;
} mend_engine_tick_info;
/* The turns done; -1 the engine broke; -2 a budget NaN, negative or infinite, refused. */
int mend_engine_tick_with(mend_engine *E, double budget, mend_engine_tick_info *info);
int mend_engine_tick_for(mend_engine *E, double budget);
/* Seconds until the engine next has work: 0 now, -1 nothing scheduled. */
double mend_engine_next_due(mend_engine *E);
/* Thread-safe: wakes the engine's loop (for a host completing calls from another thread, it
 * must still call mend_host_return on the engine's thread). */
void mend_engine_wake(mend_engine *E);
/* fn(ud) runs on the loop's thread each time the loop is woken (by mend_engine_wake or by the
 * writer thread), before anything else the wakeup does: how a thread that may not touch the
 * engine gets something said on the engine's own thread. */
void mend_engine_on_wake(mend_engine *E, void (*fn)(void *ud), void *ud);

int mend_engine_register_host(mend_engine *E, const char *name, mend_engine_host_fn fn, void *ud);
/* Completes a host call: the step resumes with the value of `result` (JSON text; NULL: nil).
 * Exactly one of return/fail per call; the call is freed by it. 0, or -1 with err set if the
 * JSON is bad (mend_json_load: a key given twice is bad), the call left open. */
int mend_host_return(mend_host_call *call, const char *result_json, char *err, int errlen);
/* The engine a call is of; NULL once that engine was destroyed. */
mend_engine *mend_host_call_engine(const mend_host_call *call);
/* kind: "retryable" | "fatal" | "compensable"; retry_after < 0 none; severity for compensable.
 * 0; -1 out of memory; -2 with err set, a message that is not UTF-8 (it would be kept, in the
 * step's error and history, as a token's failure is: refused as that one is). The call stays
 * open on a failure. */
int mend_host_fail(mend_host_call *call, const char *kind, const char *message,
                   double retry_after, int severity, char *err, int errlen);
/* Called by the Lua binding of mend.call: starts a host call for the attempt on L; the caller
 * yields unless the host answered at once (returns 1 then, with the results pushed). */
int mend_engine_host_call(lua_State *L, const char *name, int first_arg, char *err, int errlen);

/* Repairs by people (SPEC section 8). Each is recorded in the run's history (or, for breakers,
 * in the audit table) with `who` did it, and refuses with a message when it makes no sense.
 * cancel: a running run compensates what it did; returns 0, or 1 when the run is held by
 * another live worker, which is asked to cancel it (it does within a second), or 2 when it
 * cannot be carried on here (err says why): the request is recorded, and whoever takes the
 * run next cancels it. dlq_retry: a run
 * in the dead-letter queue resumes where it stopped (the failed compensation, or a severity-3
 * step) with fresh attempts. resolve: a person settled it by hand; `note` says how. Runs
 * that retry or cancel here are then executed by this engine (run or serve it). */
int mend_engine_cancel_run(mend_engine *E, const char *id, const char *who, char *err, int errlen);
/* The same, for a caller that waits for the open batch (mend_engine_when_durable) before it
 * answers: a run held elsewhere is looked at as committed rows show it, and its cancel is
 * recorded in the batch (no wait for another process's write lock). A run no engine holds is
 * taken over (read whole, its lease written at once) only with take_now: without, on a store
 * whose writes another process's lock can hold back (SQLite), MEND_REPAIR_TAKE_LATER, and the
 * caller asks again with take_now once the batch is durable. */
#define MEND_REPAIR_TAKE_LATER 3
int mend_engine_cancel_record(mend_engine *E, const char *id, const char *who, int take_now,
                              char *err, int errlen);
/* 1 while the engine's batch waits for another process's or session's lock (not broken):
 * what failed for the store meanwhile failed for that lock. */
int mend_engine_lock_held(const mend_engine *E);
/* Why the last repair above, start or advance refused (see mend_refusal). */
mend_refusal mend_engine_refusal(const mend_engine *E);
/* Sends event `name` to a running run, by its id or (id NULL) by its run key, with a payload
 * (JSON text; NULL: null) and an optional key (the same key twice is one event); `who` sent it
 * (kept with the event; NULL: not told). Durable when
 * it returns: 0 sent, 1 the run has an event of this key already (nothing sent), or one of
 * MEND_EVENT_* with the reason in err. The run's id goes to run_id_out (may be NULL). A run
 * held here and waiting for it goes on at once; one held by a worker elsewhere, at its next
 * poll; one nobody holds, when a worker takes it. */
enum { MEND_EVENT_EINVAL = -1, MEND_EVENT_ENOTFOUND = -2, MEND_EVENT_EENDED = -3,
       MEND_EVENT_ESTORE = -4,
       MEND_EVENT_EDEFERRED = -5   /* another's lock held the commit back: the event is kept in
                                      the batch, sent once the lock goes (MEND_EDEFERRED) */ };
int mend_engine_send_event(mend_engine *E, const char *id, const char *run_key, const char *name,
                           const char *payload, const char *key, const char *who,
                           char run_id_out[MEND_RUN_ID_LEN], char *err, int errlen);
/* Same, recorded in the open batch only: the caller waits for it (mend_engine_when_durable)
 * before it says the event was sent; a run held here takes it once it is durable. With a key
 * and `ticket` (may be NULL), a store that looks the key up as the batch is written (SQLite: it
 * waits for no lock) gives MEND_EVENT_LATER and *ticket: whether the key was sent before is
 * mend_store_event_outcome's once the batch is durable, and the caller gives the ticket back
 * (mend_store_event_ticket_free) once it asked, or will not ask. */
#define MEND_EVENT_LATER 2
int mend_engine_record_event(mend_engine *E, const char *id, const char *run_key, const char *name,
                             const char *payload, const char *key, const char *who,
                             char run_id_out[MEND_RUN_ID_LEN], int *ticket, char *err,
                             int errlen);
/* Completes (ok) or fails the token a step's attempt handed out (ctx:token()): result is
 * JSON text (NULL: null) and becomes the step's result; a failure has a kind (retryable,
 * fatal, compensable) and a message, and the step's policy handles it as if its execute had
 * raised it. Durable when it returns 0 (the run's id in run_id_out, may be NULL); a run held
 * here goes on at once, one held elsewhere at its holder's next poll, one nobody holds when a
 * worker takes it. Or one of MEND_TOKEN_* with the reason in err: no such token, used already,
 * of an attempt that is not the one waiting, the run ended. */
enum { MEND_TOKEN_EINVAL = -1, MEND_TOKEN_ENOTFOUND = -2, MEND_TOKEN_EUSED = -3,
       MEND_TOKEN_ESTALE = -4, MEND_TOKEN_EENDED = -5, MEND_TOKEN_ESTORE = -6 };
int mend_engine_settle_token(mend_engine *E, const char *token, int ok, const char *result,
                             const char *kind, const char *message,
                             char run_id_out[MEND_RUN_ID_LEN], char *err, int errlen);
/* The children a run's steps started: [{run_id, step, workflow, status}], or NULL (errmsg). */
json_t *mend_engine_children(mend_engine *E, const char *id);
int mend_engine_dlq_retry(mend_engine *E, const char *id, const char *who, char *err, int errlen);
/* The same, as mend_engine_cancel_record: a dead letter is no engine's, so without take_now it
 * gives MEND_REPAIR_TAKE_LATER once the run is found retriable. */
int mend_engine_dlq_retry_record(mend_engine *E, const char *id, const char *who, int take_now,
                                 char *err, int errlen);
int mend_engine_resolve(mend_engine *E, const char *id, const char *who, const char *note,
                        char *err, int errlen);
/* The same, recorded for a caller that waits for the open batch, as mend_engine_cancel_record;
 * a second resolve of the run before that batch is durable is refused as it would be after.
 * Under another process's write lock, without take_now, MEND_REPAIR_TAKE_LATER once the run
 * is found resolvable: looked at again once the batch is durable. */
int mend_engine_resolve_record(mend_engine *E, const char *id, const char *who, const char *note,
                               int take_now, char *err, int errlen);
/* Moves an unfinished run that no live worker holds to `version` of its workflow (loaded, or
 * from the store's script), recorded in its history with `who`: 0 moved, 1 on that version
 * already, -1 with err, which names the step when the version does not keep the steps the
 * run has begun (same names, same order). resolve also settles a run that cannot progress
 * (its version cannot be loaded) and that no live worker holds. */
int mend_engine_upgrade_run(mend_engine *E, const char *id, const char *version, const char *who,
                            char *err, int errlen);
/* op: "reset" | "open" | "close"; seconds: how long "open" lasts (<= 0: the policy's). */
int mend_engine_breaker_set(mend_engine *E, const char *key, const char *op, double seconds,
                            const char *who, char *err, int errlen);
/* The same, recorded in the open batch only: the caller waits for that batch
 * (mend_engine_when_durable) before it says it is done; *state is the breaker's state then. A
 * breaker not held here is looked up among committed ones (no wait for a lock). */
int mend_engine_breaker_record(mend_engine *E, const char *key, const char *op, double seconds,
                               const char *who, mend_breaker_state *state, char *err, int errlen);
int mend_engine_in_flight(const mend_engine *E);
/* What this engine did since it was created (counters.h), read on its loop's thread: its
 * commits, and the counters of its i-th workflow version (from 0; names repeat, one per
 * version loaded), with its name: 0, or -1 past the last. */
void mend_engine_commit_counters(const mend_engine *E, mend_commit_counters *out);
int mend_engine_workflow_counters(const mend_engine *E, int i, const char **name,
                                  mend_workflow_counters *out);
int mend_engine_parked(const mend_engine *E);   /* runs held out of memory (park.c) */
/* Alert commands (cfg.alert_command) that could not start or did not exit 0 (notify.c). */
int mend_engine_alert_commands_failed(const mend_engine *E);

/* Where a Lua panic in an engine that owns its state goes (a jmp_buf of the caller's, which
 * the panic handler longjmps to); returns the one before. mend_engine_panicked: it happened,
 * and the engine must not be used again but to be destroyed. */
void *mend_engine_set_panic_exit(mend_engine *E, void *jmpbuf);
int mend_engine_panicked(const mend_engine *E);

/* 1 while a run's own code (a step's execute or compensate, its when, idempotency_key, a map's
 * list function, a child step's input, the __tostring of an error it raised), or a workflow
 * file's top level as it loads (in no run, but as much inside the engine), runs, so that a
 * caller reached from it (a host function, an engine method a workflow holds) is inside the
 * engine: driving it again (run, tick, advance, recover, serve) or destroying it there would
 * pull the running code from under itself, so the bindings refuse those (MEND_ESTATE). */
int mend_engine_in_code(const mend_engine *E);
/* Which code of the run that is, as a refusal names it ("a step's code", "a when function",
 * "an error's __tostring", ...); NULL when none runs. */
const char *mend_engine_code_running(const mend_engine *E);

mend_store *mend_engine_store(mend_engine *E);
/* mend_store_prune as an answer to a person (eng:prune, mend prune): it waits for another
 * process's write lock up to the store's default busy wait, as a start or a repair does, not
 * the loop's short one. */
json_t *mend_engine_prune(mend_engine *E, double before, const char *status, int dry_run);
lua_State  *mend_engine_lua(mend_engine *E);
uv_loop_t  *mend_engine_loop(mend_engine *E);

/* Called by the Lua bindings: the run whose attempt is executing on coroutine L (NULL if L is
 * not a step's coroutine), and the waits a step can make. */
typedef struct mend_run mend_run;
mend_run *mend_engine_current_run(lua_State *L);
/* The longest wait mend.sleep and ctx:sleep take. */
#define MEND_MAX_SLEEP 1e9
/* Arms a wait of `seconds` for the attempt on L; the caller then yields. 0 or -1 (err). */
int mend_engine_sleep(lua_State *L, double seconds, char *err, int errlen);
/* Spawns a process for the attempt on L, which then yields; it is resumed with a result table.
 * `opts` at stack index 1 is the mend.exec table. 0 or -1 (err). */
int mend_engine_exec(lua_State *L, char *err, int errlen);
/* mend.http{...} from a step: starts the request; the step yields and is resumed with (true,
 * response) or (false, mend error). 0, or -1 and err (the request cannot be made). */
int mend_engine_http(lua_State *L, char *err, int errlen);
void mend_engine_log_line(mend_engine *E, const char *level, const char *run, const char *step,
                          int attempt, const char *event, const char *message);
/* Fires an alert that belongs to no run (a workflow file that does not load): logged, given
 * to cfg.alert and the alert command at once, as nothing durable announces it. */
void mend_engine_alert(mend_engine *E, json_t *ev);

#endif
