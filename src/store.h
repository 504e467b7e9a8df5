/*
 * store: everything mend keeps in SQLite (SPEC section 9). The store owns SQL; no other module
 * writes a query.
 *
 * Write path: every write joins the current batch, a transaction opened by the first write
 * after a commit; mend_store_commit() ends it. The engine commits once per loop turn (group
 * commit) and only then runs the code the batch's transitions announce: that is the write-ahead
 * rule. A failed commit rolls the batch back and leaves the engine to stop; nothing committed
 * before is touched.
 *
 * Read path: queries return jansson values (objects and arrays of plain fields) so that the Lua
 * API, the CLI and the C API read the same shape. The caller owns (decrefs) what is returned.
 *
 * Schema (version MEND_SCHEMA_VERSION, kept in PRAGMA user_version and in meta):
 *   meta(key TEXT PRIMARY KEY, value TEXT)
 *   runs(id TEXT PRIMARY KEY, workflow TEXT, version TEXT, source TEXT, run_key TEXT UNIQUE,
 *        status TEXT, input TEXT (JSON), error TEXT, attention INTEGER, reason TEXT (why it
 *        failed for good), owner TEXT (the worker executing it), lease_until REAL (not
 *        written since schema 4: see workers), created REAL, updated REAL, step_names TEXT
 *        (JSON array: its steps, in order), workflow_version INTEGER (since schema 7, where
 *        version, source and step_names are; they are NULL in the run then), unavailable
 *        TEXT (since schema 9: why no engine could load its version; such runs are claimed
 *        only on purpose, now and then))
 *        + indexes on created for unfinished runs, and for those nobody holds (runs_free)
 *   workflow_versions(id INTEGER PRIMARY KEY, workflow TEXT, version TEXT, source TEXT,
 *        step_names TEXT, script TEXT (the file's text, since schema 8; NULL for workflows
 *        registered in code), first_seen REAL (since schema 9)): written by the first run of
 *        a version a store sees, at once, or when a version is recorded for an upgrade
 *   workers(owner TEXT PRIMARY KEY, lease_until REAL) WITHOUT ROWID: a worker holds its
 *        runs while its lease lasts; one row renewed, however many runs it holds
 *   steps(run_id TEXT, idx INTEGER, name TEXT, status TEXT, attempts INTEGER,
 *         comp_attempts INTEGER, idem_key TEXT (NULL: the default, run_id/name, and read
 *         as that), custom_key INTEGER, result TEXT (JSON),
 *         error TEXT, due REAL, last_delay REAL, updated REAL, slept INTEGER,
 *         PRIMARY KEY(run_id, idx))
 *         + index on idem_key for custom keys; a step has a row from its first transition
 *         on (before that it is pending, listed from runs.step_names); a row is not written
 *         when an attempt begins (schema 6): a step whose last history row is `-> running`
 *         reads as running, with that attempt
 *   history(run_id TEXT, seq INTEGER (1, 2, ... within the run), step TEXT, at REAL,
 *           event TEXT, from_status TEXT, to_status TEXT (since schema 7 the code of a name
 *           in labels, as text by the column's type, or the name if labels has none; before,
 *           the name; read as the name), attempt INTEGER, error TEXT,
 *           delay REAL, detail TEXT, worker TEXT (who wrote it: since schema 5 the id of its
 *           name in worker_names, as text by the column's type; before, the name; read as
 *           the name), PRIMARY KEY(run_id, seq)) WITHOUT ROWID; append-only
 *   worker_names(id INTEGER PRIMARY KEY, name TEXT UNIQUE): the workers that wrote history
 *   labels(code INTEGER PRIMARY KEY, name TEXT UNIQUE): event and status names history codes
 *   history_named: a view of history with codes and worker numbers read as names
 *   breakers(key TEXT PRIMARY KEY, state TEXT, failures INTEGER, successes INTEGER,
 *            opened_at REAL, open_until REAL, updated REAL)
 *   dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail TEXT, at REAL)
 *   audit(seq INTEGER PRIMARY KEY, at REAL, who TEXT, op TEXT, target TEXT, detail TEXT):
 *        operations by people that concern no single run (breaker overrides)
 *   inbox(seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, name TEXT, payload TEXT (JSON),
 *        key TEXT (UNIQUE with run_id where set), sent REAL, consumed REAL, step TEXT (the
 *        step that consumed it)) (schema 10): events sent to runs, consumed once each, in seq
 *        order; + index on (run_id, name, seq) of those not consumed. steps.awaits (schema
 *        10): the event a waiting step waits for
 *   runs also has cancel_requested INTEGER: a cancel asked for by another process (indexed by
 *        owner where set)
 * Nullable text fields are passed as NULL; a delay or due time of < 0 is stored as NULL.
 */
#ifndef MEND_STORE_H
#define MEND_STORE_H

#include <jansson.h>
#include "breaker.h"

#define MEND_SCHEMA_VERSION 10

typedef struct mend_store mend_store;

typedef enum mend_durability {
  MEND_DURABILITY_FULL,     /* synchronous=FULL: a commit survives power loss */
  MEND_DURABILITY_PROCESS   /* synchronous=NORMAL: survives a process crash */
} mend_durability;

/* Opens (creating if needed) the database at `path` (":memory:" allowed), sets WAL, the
 * synchronous mode, a busy timeout, creates or checks the schema and prepares every statement.
 * Returns NULL on failure with a message naming the file and the cause in `err` ("mend.db: file
 * is not a database", "mend.db: schema version 7 is newer than this mend (1)"). */
mend_store *mend_store_open(const char *path, mend_durability durability, char *err, int errlen);
void mend_store_close(mend_store *s);        /* rolls back an uncommitted batch */
/* Turns SQLite's memory statistics off for the whole process, if SQLite has not started yet:
 * they take a global mutex around every allocation, 9% of the writer thread's work. The mend
 * program and the Lua module call it; a host embedding libmend decides for its own process. */
void mend_store_quiet_memstatus(void);

/* Checkpoints: a file database does not checkpoint inside commits; the owner calls
 * mend_store_checkpoint (a passive checkpoint on a connection of its own) now and then, from
 * any one thread other than the loop's if it likes. Returns the WAL frames copied into the
 * database (0 when busy: tried again next time), or -1 on error. */
int mend_store_has_checkpointer(const mend_store *s);
int mend_store_checkpoint(mend_store *s, int *wal_frames);   /* *wal_frames: the WAL's length */
/* On the loop's own connection, between batches: copies the frames written since the last
 * checkpoint, so that the next write starts the WAL over (and cuts the file back to 64 MiB).
 * Under a steady stream of writes passive checkpoints never copy all of the WAL, and it would
 * grow without end. A checkpoint that waits for the writer instead (RESTART) held it back for
 * 0.6-1.4 s on this machine; this copies only what the last passive checkpoint left.
 * 1 done; 0 not now (a batch is open, or another checkpoint runs): try again later; -1 error. */
int mend_store_checkpoint_catch_up(mend_store *s);
/* The WAL's length in frames after the last commit (read once the writer thread is idle). */
int mend_store_wal_frames(const mend_store *s);

/* The last error, naming the file and the SQLite cause. Valid until the next call. */
const char *mend_store_errmsg(mend_store *s);
/* 1 when the last read of a run found none (errmsg: "no run <id>"), 0 after one that did. */
int mend_store_not_found(const mend_store *s);

/* Ends the current batch. 0 if there was none or it committed; -1 on failure (the batch is
 * rolled back; see errmsg); MEND_STORE_BUSY if another connection held the write lock for
 * longer than the busy wait: nothing was written and the batch is kept whole, to be committed
 * by a later call. */
#define MEND_STORE_BUSY (-2)
int mend_store_commit(mend_store *s);
/* 1 while the last batch that tried to begin could not, for another connection's write lock
 * (until one begins): a call that failed then lost nothing, and may be made again later.
 * Without a writer thread, writes are only recorded meanwhile; the writer thread tries its
 * batch again by itself, calling `done` at each try. Safe from any thread. */
int mend_store_locked(mend_store *s);
/* How long one statement waits for another connection's lock before giving up (default
 * 5000 ms; <= 0 restores it). */
void mend_store_set_busy_wait(mend_store *s, int ms);
int mend_store_batch_open(mend_store *s);   /* 1 if writes await a commit or a hand-off */

/* The writer thread. Once started, writes are recorded (values copied) rather than run, and
 * mend_store_hand_off() gives the recorded batch to a thread of the store's own, which runs its
 * statements and commits while the caller records the next batch. That thread is the only one
 * using the connection until it is done; every other call (reads, immediate writes,
 * mend_store_commit) first waits for it, then runs the recorded writes in the open transaction,
 * so it sees them. `done` is called on the writer thread after each batch (to wake a loop),
 * and at each try of a batch that waits for another connection's lock (mend_store_locked).
 * A failed batch is rolled back and every later call fails with its message.
 *
 * Batches are numbered: writes recorded now belong to batch mend_store_open_seq(); every batch
 * up to mend_store_durable_seq() is committed. A caller that must not act before some writes
 * are durable notes the open number and waits for the durable one to reach it. Without a
 * writer thread hand-off is mend_store_commit and the numbers move the same way. */
int  mend_store_start_writer(mend_store *s, void (*done)(void *ud), void *ud);
int  mend_store_hand_off(mend_store *s);    /* 0, or -1 (errmsg) */
int  mend_store_writer_busy(mend_store *s); /* 1 while a handed-off batch is being written */
/* The recorded writes of the open batch also go to the thread in parts while the caller records
 * (a full log, or a part while the thread is idle), written in the open transaction but not
 * committed: nothing is durable before the hand-off. 1 while the thread writes such a part
 * with nothing queued behind it: not a batch to wait for (a hand-off now queues the rest
 * behind the part and returns). A part that fails rolls the whole batch back. */
int  mend_store_writer_part(mend_store *s);
int  mend_store_batch_writes(const mend_store *s);   /* writes of the open batch not committed */
/* Gives back the memory a burst of writes grew, if no batch is using it: for an engine gone
 * idle (its runs all waiting). */
void mend_store_trim(mend_store *s);
unsigned long mend_store_open_seq(const mend_store *s);
unsigned long mend_store_durable_seq(const mend_store *s);
/* Called with "before_commit" and "after_commit" around each commit, on whichever thread
 * commits (crash tests kill the process there). */
void mend_store_set_commit_hook(mend_store *s, void (*hook)(const char *phase));

/* Writes. Each returns 0 or -1 (errmsg says why). */
typedef struct mend_run_rec {
  const char *id, *workflow, *version, *source, *run_key, *status, *input, *error;
  int attention;
  double created, updated;
  const char *owner;       /* NULL: any worker may take it; else held while the owner's lease lasts */
  const char *step_names;  /* JSON array of its steps' names: the rows not yet written */
  const char *script;      /* the version's text, kept with it (NULL: none, as registered) */
} mend_run_rec;

typedef struct mend_step_rec {
  const char *run_id;
  int idx;
  const char *name, *status;
  int attempts, comp_attempts;
  const char *idem_key;    /* in an update, NULL keeps the row's */
  int custom_key;          /* 1 if idem_key came from the step's own idempotency_key function */
  const char *result;      /* JSON text or NULL */
  const char *error;
  double due;              /* when a wait ends; < 0 none */
  double last_delay;       /* last backoff delay chosen; < 0 none */
  double updated;
  int slept;               /* its `sleep` wait is over */
  const char *awaits;      /* the event a waiting step waits for; NULL otherwise */
} mend_step_rec;

typedef struct mend_history_rec {
  const char *run_id, *step;      /* step NULL for run-level events */
  double at;
  const char *event;              /* "step", "run", "attempt_failed", "alert", ... */
  const char *from_status, *to_status;
  int attempt;                    /* 0 when not about an attempt */
  const char *error;
  double delay;                   /* < 0 none */
  const char *detail;             /* free text or JSON */
  long seq;                       /* > 0: its number in the run's history, counted by the run's
                                     holder; 0: the next free one, looked up */
} mend_history_rec;

/* The last number in a run's history (0: none), for its holder to count on from; -1 error. */
long mend_store_last_history_seq(mend_store *s, const char *run_id);
/* Same, and the time of that last row in *at (-1: no history). */
long mend_store_last_history(mend_store *s, const char *run_id, double *at);
/* The text kept for a version of a workflow (malloc'ed), and where it was loaded from in
 * *source (malloc'ed, or NULL) when source is not NULL; NULL when none is kept or on error
 * (errmsg says which). */
char *mend_store_version_script(mend_store *s, const char *workflow, const char *version,
                                char **source);

typedef struct mend_dlq_rec {
  const char *run_id, *reason, *step, *error, *detail;
  double at;
} mend_dlq_rec;

/* 0 inserted; 1 a run with this run key exists (nothing written); -1 error. The first run
 * of a workflow version this store sees writes the version's row at once, in the open batch
 * (as a read, it waits for the writer thread and the write lock); later ones only record. */
int mend_store_insert_run(mend_store *s, const mend_run_rec *r);
/* A status other than running or compensating also gives the run's lease back. */
int mend_store_update_run(mend_store *s, const char *id, const char *status, const char *error,
                          int attention, double updated, const char *reason);
int mend_store_put_step(mend_store *s, const mend_step_rec *st);      /* insert or replace */
/* A step row that exists (put at its first transition); fails if there is none. `name`
 * unused. */
int mend_store_update_step(mend_store *s, const mend_step_rec *st);
int mend_store_append_history(mend_store *s, const mend_history_rec *h);
int mend_store_put_breaker(mend_store *s, const char *key, const mend_breaker *b, double updated);
int mend_store_put_dlq(mend_store *s, const mend_dlq_rec *d);

/* Point reads used by the engine while running. */
/* 1 and the run id copied into id_out if a run with this key exists; 0 if not; -1 error. */
int mend_store_find_run_key(mend_store *s, const char *run_key, char *id_out, int id_len);
/* 1 and a malloc'ed JSON result in *result_out if some step with this custom idempotency key
 * succeeded (any run); 0 if none; -1 error. */
int mend_store_find_key_result(mend_store *s, const char *idem_key, char **result_out);
/* 1 and *b filled if the breaker is stored (probes = 0); 0 if not; -1 error. */
int mend_store_get_breaker(mend_store *s, const char *key, mend_breaker *b);

/* Queries (see the header comment). NULL with errmsg set on error; a missing run gives NULL
 * with errmsg "no run <id>". Fields are named as the columns, with `run_key` as "key",
 * `from_status`/`to_status` as "from"/"to", JSON columns (input, result) decoded, NULLs left
 * out of objects. */
json_t *mend_store_run(mend_store *s, const char *id);         /* run object + "steps" array */
json_t *mend_store_history(mend_store *s, const char *id);     /* array, in seq order */
json_t *mend_store_dlq(mend_store *s);                         /* array, oldest first */
json_t *mend_store_breakers(mend_store *s);                    /* array by key */
json_t *mend_store_runs(mend_store *s, const char *status, const char *workflow, int limit);
/* Same, also filtered by creation time (since < 0: any) and by attention (flagged or in the
 * dead-letter queue). */
json_t *mend_store_runs_where(mend_store *s, const char *status, const char *workflow,
                              double since, int attention_only, int limit);
json_t *mend_store_audit_list(mend_store *s);                  /* array, in seq order */

/* Operations of people (repairs). Each joins the current batch. */
int     mend_store_dlq_remove(mend_store *s, const char *run_id);
/* Makes `owner` hold the run whatever its lease said (repairs, after checking it was free);
 * owner's lease then lasts at least until lease_until. */
/* Why no engine could load the run's version (recorded like a transition); NULL: it loads. */
int     mend_store_set_unavailable(mend_store *s, const char *id, const char *why);
/* The number of a workflow version in workflow_versions (r's workflow, version, source,
 * step_names and script; created: when first seen), written in the open batch if new. */
int     mend_store_version_number(mend_store *s, const mend_run_rec *r, long long *id);
/* Moves a run to version `version_id`; step rows from index `keep_steps` on go (the new
 * version's steps from there are not begun). Clears `unavailable`. */
int     mend_store_move_run(mend_store *s, const char *id, long long version_id, int keep_steps);
/* Versions of every workflow (or of `workflow`), newest first within each: workflow, version,
 * first_seen, sources, kept (the script is kept), step_names, unfinished, unavailable. */
json_t *mend_store_workflows(mend_store *s, const char *workflow);
int     mend_store_take(mend_store *s, const char *id, const char *owner, double lease_until);
int     mend_store_request_cancel(mend_store *s, const char *run_id);
/* Ids of running runs held by owner whose cancel was asked for (array); NULL on error. */
json_t *mend_store_cancel_requests(mend_store *s, const char *owner);
int     mend_store_audit(mend_store *s, double at, const char *who, const char *op,
                         const char *target, const char *detail);
int     mend_store_schema_version(mend_store *s);
/* Removes the runs that ended (succeeded, compensated, failed, resolved) and were last updated
 * before `before`, only those of `status` if not NULL, with their steps, history and
 * dead-letter rows, in one transaction of its own (a batch this store has open is committed
 * first). Unfinished runs and runs in the dead-letter queue (needs_attention) are never
 * removed. Their run keys and custom idempotency keys are forgotten with them. dry_run: counts
 * only. Returns {"runs": {status: n, ...}, "steps": n, "history": n, "dlq": n}, or NULL
 * (errmsg). */
json_t *mend_store_prune(mend_store *s, double before, const char *status, int dry_run);

/* Events (schema 10). send: puts an event in a run's inbox at once, in the open batch (a
 * caller commits it); 0 sent, 1 the run's inbox has an event with this key already (nothing
 * written), -1 error. payload: JSON text or NULL (null). */
int     mend_store_send_event(mend_store *s, const char *run_id, const char *name,
                              const char *payload, const char *key, double sent);
/* The oldest event of `name` the run has not consumed, seeing the open batch: 1 and its seq,
 * payload (malloc'ed JSON text, "null" for none) and key (malloc'ed or NULL); 0 none; -1
 * error. */
int     mend_store_next_event(mend_store *s, const char *run_id, const char *name,
                              long long *seq, char **payload, char **key);
/* Marks it consumed by `step`, recorded in the batch like a transition: the batch fails if
 * it was consumed already. */
int     mend_store_consume_event(mend_store *s, const char *run_id, long long seq,
                                 const char *step, double at);
/* The highest seq sent so far (0: none); -1 error. */
long long mend_store_last_event(mend_store *s);
/* Runs with events sent after seq `after` (committed ones, through a connection of its own
 * when the database is a file): calls fn for each, in seq order, at most `limit`; returns the
 * highest seq seen (`after` if none), or -1 on error. */
long long mend_store_events_after(mend_store *s, long long after, int limit,
                                  void (*fn)(void *ud, const char *run_id), void *ud);
json_t *mend_store_inbox(mend_store *s, const char *run_id);   /* array, in seq order */

/* Leases: which worker executes a run (runs.owner), and until when its lease lasts (one row
 * per worker, real time). A worker claims unfinished runs that nobody holds or whose owner's
 * lease ran out, renews its lease while it works, and releases a run it lets go of. Claims
 * and renewals join the current batch; closing the store ends the lease. */
/* Tags history rows; before mend_store_start_writer (the thread names rows with it). */
void    mend_store_set_worker(mend_store *s, const char *worker);
/* Up to `limit` ids (array) of unfinished runs now held by `owner`: those nobody holds, or
 * whose owner's lease ran out (never the owner's own), oldest first or, with
 * MEND_CLAIM_NEWEST, newest first. MEND_CLAIM_FREE takes only runs nobody holds, without
 * walking the runs held by others; runs whose version could not be loaded (unavailable) are
 * taken only with MEND_CLAIM_UNAVAILABLE. The owner's lease then lasts at least until lease_until.
 * NULL on error. */
enum { MEND_CLAIM_NEWEST = 1, MEND_CLAIM_FREE = 2, MEND_CLAIM_UNAVAILABLE = 4 };
json_t *mend_store_claim(mend_store *s, const char *owner, double now, double lease_until,
                         int limit, int how);
/* 0 if a claim now would surely find nothing; else MEND_CLAIMABLE_FREE if there are runs
 * nobody holds (MEND_CLAIM_FREE takes them) and MEND_CLAIMABLE_GONE if there may be runs of a
 * worker whose lease ran out (only a claim of every kind takes them). It reads committed rows
 * through a connection of its own, so it neither waits for the writer thread nor ends a batch
 * early: a serving worker looks every poll, and most polls find nothing.
 * The quick look costs what there is to take. It relies on every holder of a run having a
 * row in workers, which a worker writes before the first run it holds commits and deletes
 * only when it holds none. The thorough one does not: it walks every run held, and is the
 * once-in-a-while check that no run is left with a holder that has no row (a database from
 * before schema 7, or a bug); it says FREE | GONE for anything it finds. */
enum { MEND_CLAIMABLE_FREE = 1, MEND_CLAIMABLE_GONE = 2 };
int     mend_store_claimable(mend_store *s, const char *owner, double now, int thorough);
/* Recorded in the batch like a transition (it runs on the writer thread, if there is one);
 * never shortens the lease. */
int     mend_store_renew(mend_store *s, const char *owner, double lease_until);
int     mend_store_release(mend_store *s, const char *id, const char *owner);
/* Workers whose lease is live (array of strings); NULL on error. */
json_t *mend_store_lease_holders(mend_store *s, double now);
/* Gives back every unfinished run held by `owner` (a worker known to be dead), and forgets
 * its lease. */
int     mend_store_release_owner(mend_store *s, const char *owner);
/* The fence (store.c, "fencing"): a transaction that begins after this worker's leases ran out
 * (`until`, moved on by each renewal) renews them and drops every write to a run another
 * worker took meanwhile. set_fence names the worker and its lease, once, before any write.
 * fence_news calls `lost` with each run found lost since the last call and returns 1 if a
 * transaction began late meanwhile: the engine then matches its runs against mend_store_held
 * (an array of ids; NULL on error), lets go of the others (add_lost), and calls
 * fence_verified. */
int     mend_store_set_fence(mend_store *s, const char *owner, double lease_seconds, double until);
int     mend_store_fence_news(mend_store *s, void (*lost)(void *ud, const char *id), void *ud);
json_t *mend_store_held(mend_store *s);
int     mend_store_add_lost(mend_store *s, const char *id);
void    mend_store_fence_verified(mend_store *s);
/* While on, the writes recorded are a person's repair of a run nobody holds (resolving a dead
 * letter): the fence lets them through. */
void    mend_store_repairing(mend_store *s, int on);
/* 1 and the owner ("" if none) and its lease_until (-1 if none); 0 no run; -1 error. */
int     mend_store_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                         double *lease_until);

/* new: serve */
/* One page of runs, newest first by (created, id), with the filters of mend_store_runs_where
 * (status, workflow NULL: any; since < 0: any) and, after_id not NULL, only the runs after
 * the run (after_created, after_id) in that order: a cursor that inserts do not move. */
json_t *mend_store_runs_page(mend_store *s, const char *status, const char *workflow,
                             double since, double after_created, const char *after_id,
                             int limit);
/* Runs by workflow and status: [{workflow, status, runs, oldest}], oldest the creation time of
 * the oldest running or compensating one (left out when none). */
json_t *mend_store_run_counts(mend_store *s);

#endif
