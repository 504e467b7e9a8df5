/*
 * store: the storage interface. Everything mend keeps (runs, steps, history, breakers, dead
 * letters, versions, events, leases) goes through one table of operations, mend_store_methods,
 * implemented by a backend in files of its own: SQLite (src/store.c, src/store/) and, where
 * built, PostgreSQL (src/store/pg/). mend_store_open picks one from the name of the database.
 * This header speaks in the engine's terms only; nothing outside a backend includes its
 * library's header, and a backend's policies (SQLite's checkpoints and WAL) stay its own.
 *
 * What every backend guarantees:
 * - The batch. Every write joins the open batch. Batches are numbered: open_seq is the one being
 *   recorded, durable_seq the last committed. The engine acts on a transition only once
 *   durable_seq has reached the batch it was written in: the write-ahead rule. A batch commits
 *   whole or not at all; a failed one leaves the engine to stop, and nothing committed before is
 *   touched.
 * - Read your own writes. A read sees the writes of this store's open batch.
 * - Fencing as an outcome. A write to a run this worker no longer holds (another took it while
 *   this one stalled past its lease) is dropped, and the run is reported lost (fence_news). The
 *   engine never acts on a run after it is reported lost. A person's repair (repairing) passes.
 * - Time. Leases are given as durations and kept on the backend's clock (SQLite: this host's
 *   wall clock; PostgreSQL: the server's now()), so that workers agree on who holds what
 *   whatever their clocks say. Every other time in a record (created, updated, at, due, sent)
 *   is the engine's clock, stored as it is and never compared with the backend's.
 * - Views. Queries for people return jansson values (objects and arrays of plain fields) of the
 *   same shape on every backend, so that the Lua API, the CLI and the C API read one shape. The
 *   caller owns (decrefs) what is returned.
 *
 * The records a write carries and the typed image of a run are in store_rec.h, included here.
 * The schema every backend keeps, in SQLite's terms, is described in src/store/schema.c.
 */
#ifndef MEND_STORE_H
#define MEND_STORE_H

#include <jansson.h>
#include "breaker.h"
#include "cpus.h"
#include "store_rec.h"
#include "transition.h"

typedef struct mend_store mend_store;

typedef enum mend_durability {
  MEND_DURABILITY_FULL,     /* synchronous=FULL: a commit survives power loss */
  MEND_DURABILITY_PROCESS   /* synchronous=NORMAL: survives a process crash */
} mend_durability;

/* commit and hand_off: another connection held the write lock past the busy wait; nothing was
 * written and the batch is kept whole, for a later call. */
#define MEND_STORE_BUSY (-2)

/* claim's `how` and claimable's answer (see those methods). */
enum { MEND_CLAIM_NEWEST = 1, MEND_CLAIM_FREE = 2, MEND_CLAIM_UNAVAILABLE = 4 };
enum { MEND_CLAIMABLE_FREE = 1, MEND_CLAIMABLE_GONE = 2 };

/* The operations of a backend. Every backend's store struct begins with a pointer to its table,
 * so that the dispatchers below find it without knowing the struct (a pointer to a struct,
 * converted, points to its first member: C11 6.7.2.1). Methods marked optional may be NULL:
 * the dispatcher then gives the neutral answer. Methods are appended, never reordered. */
typedef struct mend_store_methods {
  const char *name;   /* "sqlite", "postgres" */
  void (*close)(mend_store *s);        /* rolls back an uncommitted batch; NULL: nothing */

  /* The last error, naming the database and the backend's cause. Valid until the next call. */
  const char *(*errmsg)(mend_store *s);
  /* 1 when the last read of a run found none (errmsg: "no run <id>"), 0 after one that did. */
  int (*not_found)(const mend_store *s);

  /* Ends the current batch. 0 if there was none or it committed; -1 on failure (the batch is
   * rolled back; see errmsg); MEND_STORE_BUSY if another connection held the write lock for
   * longer than the busy wait: nothing was written and the batch is kept whole, to be committed
   * by a later call. */
  int (*commit)(mend_store *s);
  /* 1 while the last batch that tried to begin could not, for another connection's write lock
   * (until one begins): a call that failed then lost nothing, and may be made again later.
   * Without a writer thread, writes are only recorded meanwhile; the writer thread tries its
   * batch again by itself, calling `done` at each try. Safe from any thread. */
  int (*locked)(mend_store *s);
  /* While `locked` says so and nothing of this connection waits the lock out (no batch open,
   * the writer thread idle): tries the write lock once now (the busy wait as set) and lets it
   * go. 1 when it was free: the mark is cleared. A caller whose next write would have been the
   * try (a look for work) may find nothing to write, and would leave the mark for good. NULL:
   * the backend has no such lock (see locked). */
  int (*lock_try)(mend_store *s);
  /* How long one statement waits for another connection's lock before giving up (default
   * 5000 ms; <= 0 restores it). */
  void (*set_busy_wait)(mend_store *s, int ms);
  /* The CPUs every thread the store starts from now on runs on (copied; an empty set: where
   * the thread that starts it may run). Before the first commit and start_writer, which start
   * them (optional: NULL in a backend that starts none). */
  void (*set_thread_cpus)(mend_store *s, const mend_cpus *cpus);
  int (*batch_open)(mend_store *s);   /* 1 if writes await a commit or a hand-off */

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
   * writer thread hand-off is mend_store_commit and the numbers move the same way.
   * start_writer: 0 started; 1 declined (a database no other thread could share, such as one in
   * memory: commits stay on the caller's thread); -1 error. */
  int (*start_writer)(mend_store *s, void (*done)(void *ud), void *ud);
  int (*hand_off)(mend_store *s);    /* 0, or -1 (errmsg) */
  int (*writer_busy)(mend_store *s); /* 1 while a handed-off batch is being written */
  /* The recorded writes of the open batch also go to the thread in parts while the caller records
   * (a full log, or a part while the thread is idle), written in the open transaction but not
   * committed: nothing is durable before the hand-off. 1 while the thread writes such a part
   * with nothing queued behind it: not a batch to wait for (a hand-off now queues the rest
   * behind the part and returns). A part that fails rolls the whole batch back. */
  int (*writer_part)(mend_store *s);
  int (*batch_writes)(const mend_store *s);   /* writes of the open batch not committed */
  /* A read (any statement but a recorded write) first runs the open batch's writes recorded so
   * far, on the caller's thread: for a ticking host, the dear part of a piece that reads. In
   * all since this was first called, records run that way and the caller's thread CPU seconds
   * they took; and the records a read now would run. Counting reads the thread's CPU clock
   * twice a flush, a system call (1-4 us on a VM, once a run in a recovery), so a host that
   * never asks (that never ticks) does not pay for it. NULL: reads run nothing first. */
  void (*read_flushes)(mend_store *s, unsigned long *records, double *cpu, int *pending);
  /* Gives back the memory a burst of writes grew, if no batch is using it: for an engine gone
   * idle (its runs all waiting). */
  void (*trim)(mend_store *s);
  unsigned long (*open_seq)(const mend_store *s);
  unsigned long (*durable_seq)(const mend_store *s);
  /* Called with "before_commit" and "after_commit" around each commit, on whichever thread
   * commits (crash tests kill the process there). */
  void (*set_commit_hook)(mend_store *s, void (*hook)(const char *phase));

  /* Writes. Each returns 0 or -1 (errmsg says why). */



  /* The last number in a run's history (0: none), for its holder to count on from; -1 error. */
  long (*last_history_seq)(mend_store *s, const char *run_id);
  /* Same, and the time of that last row in *at (-1: no history). */
  long (*last_history)(mend_store *s, const char *run_id, double *at);
  /* Same, as a view reads (the runs' views): while another process's write lock keeps the
   * write log from being flushed, among committed rows (*committed 1), with no wait for the
   * lock; else with the open batch (*committed 0). NULL: last_history's. */
  long (*last_history_view)(mend_store *s, const char *run_id, double *at, int *committed);
  /* The text kept for a version of a workflow (malloc'ed), and where it was loaded from in
   * *source (malloc'ed, or NULL) when source is not NULL; NULL when none is kept or on error
   * (errmsg says which). */
  char *(*version_script)(mend_store *s, const char *workflow, const char *version, char **source);

  /* 0 inserted; 1 a run with this run key exists (nothing written); -1 error; 2 recorded with
   * r->at_commit, for a backend that looks the key up as the batch is written: inserted
   * only if the key is free then (else none of the run's records of that batch are), the key's
   * run known once the batch is durable (find_run_key_committed). The first run
   * of a workflow version this store sees writes the version's row at once, in the open batch
   * (as a read, it waits for the writer thread and the write lock), unless r->at_commit: then
   * a version committed before is looked up without the lock, and a new one is recorded with
   * the run; later ones only record. */
  int (*insert_run)(mend_store *s, const mend_run_rec *r);
  /* A status other than running or compensating also gives the run's lease back. */
  int (*update_run)(mend_store *s, const char *id, const char *status, const char *error,
                    int attention, double updated, const char *reason);
  /* Insert or replace; st->new_row says which the engine knows it to be, and a backend may
   * insert plainly then, but must still replace a row there (the engine's knowledge is a hint,
   * never a reason to fail the batch). */
  int (*put_step)(mend_store *s, const mend_step_rec *st);
  /* A step row that exists (put at its first transition); fails if there is none. `name`
   * unused. */
  int (*update_step)(mend_store *s, const mend_step_rec *st);
  int (*append_history)(mend_store *s, const mend_history_rec *h);
  int (*put_breaker)(mend_store *s, const char *key, const mend_breaker *b, double updated);
  int (*put_dlq)(mend_store *s, const mend_dlq_rec *d);

  /* Point reads used by the engine while running. */
  /* 1 and the run id copied into id_out if a run with this key exists; 0 if not; -1 error. */
  int (*find_run_key)(mend_store *s, const char *run_key, char *id_out, int id_len);
  /* The same among committed rows only, without waiting for the write log or a lock. */
  int (*find_run_key_committed)(mend_store *s, const char *run_key, char *id_out, int id_len);
  /* 1, a malloc'ed JSON result in *result_out and the id of its run in run_out if a step with
   * this custom idempotency key executed and succeeded (any run) and its effect is there: not
   * a reuse of it (MEND_KEY_REUSED), not compensated, its run not compensating; 0 if none; -1
   * error. */
  int (*find_key_result)(mend_store *s, const char *idem_key, char **result_out, char *run_out,
                         int run_len);
  /* 1 and *b filled if the breaker is stored (probes = 0); 0 if not; -1 error. */
  int (*get_breaker)(mend_store *s, const char *key, mend_breaker *b);

  /* Queries (see the header comment). NULL with errmsg set on error; a missing run gives NULL
   * with errmsg "no run <id>". Fields are named as the columns, with `run_key` as "key",
   * `from_status`/`to_status` as "from"/"to", JSON columns (input, result) decoded, NULLs left
   * out of objects. */
  json_t *(*run)(mend_store *s, const char *id);         /* run object + "steps" array */
  /* array, in seq order; an empty one is a run's only (no such run: NULL, not_found) */
  json_t *(*history)(mend_store *s, const char *id);
  /* A page of it, in seq order, read on the (run, seq) key: tail > 0, its last `tail` rows;
   * else the rows after seq `after`, at most `limit` (limit <= 0: all of them). A run's page
   * past its last row is []; no such run, NULL and not_found. */
  json_t *(*history_page)(mend_store *s, const char *id, long after, long limit, long tail);
  /* The dead letters, oldest first (by `at`, a missing one first as -1, then run id): with
   * after_id, those after (after_at, after_id) only; at most `limit` (<= 0: all of them). */
  json_t *(*dlq)(mend_store *s, double after_at, const char *after_id, long limit);
  json_t *(*breakers)(mend_store *s);                    /* array by key */
  json_t *(*runs)(mend_store *s, const char *status, const char *workflow, int limit);
  /* Same, also filtered by creation time (since < 0: any) and by attention (flagged or in the
   * dead-letter queue). */
  json_t *(*runs_where)(mend_store *s, const char *status, const char *workflow, double since,
                        int attention_only, int limit);
  json_t *(*audit_list)(mend_store *s);                  /* array, in seq order */

  /* Operations of people (repairs). Each joins the current batch. */
  int (*dlq_remove)(mend_store *s, const char *run_id);
  /* Makes `owner` hold the run whatever its lease said (repairs, after checking it was free);
   * owner's lease then lasts at least until lease_until. */
  /* Why no engine could load the run's version (recorded like a transition); NULL: it loads. */
  int (*set_unavailable)(mend_store *s, const char *id, const char *why);
  /* The number of a workflow version in workflow_versions (r's workflow, version, source,
   * step_names and script; created: when first seen), written in the open batch if new. */
  int (*version_number)(mend_store *s, const mend_run_rec *r, long long *id);
  /* Moves a run to version `version_id`; step rows from index `keep_steps` on go (the new
   * version's steps from there are not begun). Clears `unavailable`. */
  int (*move_run)(mend_store *s, const char *id, long long version_id, int keep_steps);
  /* Versions of every workflow (or of `workflow`), newest first within each: workflow, version,
   * first_seen, sources, kept (the script is kept), step_names, unfinished, unavailable. */
  json_t *(*workflows)(mend_store *s, const char *workflow);
  int (*take)(mend_store *s, const char *id, const char *owner, double lease_seconds);
  /* Whether run id's status is `status` as the open batch is written, held so until that batch
   * commits (SQLite's write lock, PostgreSQL's lock on the run's row): 0 it is; 1 it is not,
   * its status in found ("" for no run); -1 error (MEND_STORE_BUSY: another process's lock).
   * A repair of a run nobody holds asks it before it writes, so that of two made at once from
   * one look (two servers) the second finds the first's and is refused. */
  int (*hold_status)(mend_store *s, const char *id, const char *status, char *found, int len);
  int (*request_cancel)(mend_store *s, const char *run_id);
  /* Ids of running runs held by owner whose cancel was asked for (array); NULL on error. */
  json_t *(*cancel_requests)(mend_store *s, const char *owner);
  /* Whether cancel_requests would find anything, asked of committed rows through a connection
   * of its own: no wait for the writer thread, and the open batch's records are not run on the
   * caller's thread to be seen. run()'s looks and a serving worker's polls ask it first, and
   * most find nothing. 0 none; 1 some, or it cannot tell (no such connection, a failed read:
   * the caller reads cancel_requests, which says what is wrong). A cancel request is committed
   * as it is made, so what it cannot see is a run that became owner's in the open batch: found
   * by the first look after that batch. NULL: the caller reads cancel_requests. */
  int (*cancels_requested)(mend_store *s, const char *owner);
  int (*audit)(mend_store *s, double at, const char *who, const char *op, const char *target,
               const char *detail);
  int (*schema_version)(mend_store *s);
  /* The database's sandbox mark (meta.sandbox, schema 17 / PostgreSQL 7): it holds workflows
   * a sandboxed engine ran, so their code is untrusted wherever it is loaded again. set 1:
   * marks it (committed at once, on a connection of its own on PostgreSQL); set -1 clears it
   * (only the host's `mend db trust`); 0 reads it. 1 marked, 0 not, -1 error (errmsg). Called
   * as an engine opens or loads a workflow's text from the store, never on the step path. */
  int (*sandbox_mark)(mend_store *s, int set);
  /* Removes the runs that ended (succeeded, compensated, failed, resolved) and were last updated
   * before `before`, only those of `status` if not NULL, with their steps, history and
   * dead-letter rows, in one transaction of its own (a batch this store has open is committed
   * first). Unfinished runs and runs in the dead-letter queue (needs_attention) are never
   * removed. Their run keys and custom idempotency keys are forgotten with them. dry_run: counts
   * only. Returns {"runs": {status: n, ...}, "steps": n, "history": n, "dlq": n}, or NULL
   * (errmsg). */
  json_t *(*prune)(mend_store *s, double before, const char *status, int dry_run);

  /* Events (schema 10). send: puts an event in a run's inbox at once, in the open batch (a
   * caller commits it); 0 sent, 1 the run's inbox has an event with this key already (nothing
   * written), -1 error. payload: JSON text or NULL (null). who: who sent it (NULL: not told),
   * kept with the event (schema 20). */
  int (*send_event)(mend_store *s, const char *run_id, const char *name, const char *payload,
                    const char *key, double sent, const char *who);
  /* send, only recorded in the open batch like a transition (with a writer thread, no wait for
   * it): the event is durable once that batch is. A key the inbox has already is kept once when
   * the batch is written, and not known here. 0; 1 not recorded (the caller sends and commits,
   * as without it); -1 error. NULL: the backend has none. A backend whose lost batch is not an
   * error (PostgreSQL: the connection dropped, the batch counted as not committed) sends the
   * events it recorded again at the head of the next batch, so that the caller's "sent"
   * holds: it records only events with a key, which keeps each once where a commit whose
   * answer was lost did happen. */
  int (*record_event)(mend_store *s, const char *run_id, const char *name,
                      const char *payload, const char *key, double sent, const char *who);
  /* An event with a key recorded in the open batch, the key looked up as the batch is written
   * (the insert does nothing for a key sent before): 0 and a ticket for event_outcome, 1 not
   * recorded (the caller sends it at once), -1 error. NULL: the backend has none. */
  int (*record_keyed_event)(mend_store *s, const char *run_id, const char *name,
                            const char *payload, const char *key, double sent, const char *who,
                            int *ticket);
  /* Once its batch is durable: 0 the ticket's event was sent, 1 its key had been sent before
   * (nothing kept), -1 not known (its batch failed). */
  int (*event_outcome)(mend_store *s, int ticket);
  /* The ticket is no longer asked about (its answer given, or its client gone): it may be
   * given to another event, even before its batch is written. */
  void (*event_ticket_free)(mend_store *s, int ticket);
  /* The oldest event of `name` the run has not consumed, seeing the open batch: 1 and its seq,
   * payload (malloc'ed JSON text, "null" for none) and key (malloc'ed or NULL); 0 none; -1
   * error. */
  int (*next_event)(mend_store *s, const char *run_id, const char *name, long long *seq,
                    char **payload, char **key);
  /* next_event among committed rows only, through a connection of its own: no wait for the
   * writer thread, and the open batch's recorded writes are not run on the caller's thread to
   * be seen (a few ms in a tick). For a run whose own writes before its wait are durable, and
   * that nothing else takes events from. NULL: the backend has none (the caller uses
   * next_event); the same answers, and 2 when it has no connection of its own. */
  int (*next_committed_event)(mend_store *s, const char *run_id, const char *name,
                              long long *seq, char **payload, char **key);
  /* Opens now what next_committed_event reads with (a reader, a connection: a login takes
   * milliseconds), so that its first use is not inside a tick. batch: a thread the store
   * starts for it runs in SCHED_BATCH (the host's mend_writer_sched), else in the class it
   * inherits. NULL: nothing to open. */
  void (*open_committed_reads)(mend_store *s, int batch);
  /* next_committed_event for n runs at once, sent without waiting for the answer (a ticking
   * host picks it up at a later tick with look_ahead_take): 0 sent; 1 not now (its connection
   * is still being opened: the caller sends it later); -1 not (the caller looks another way).
   * At most one is in flight. NULL: the backend has none. */
  int (*look_ahead)(mend_store *s, int n, const char *const *run_ids, const char *const *names);
  /* Whether look_ahead can be asked now (SQLite: a file database whose thread for looks
   * started). NULL: whenever look_ahead is there. */
  int (*can_look_ahead)(mend_store *s);
  /* The answer to the look sent: 1 and fn called with each (run, name) that has an event, its
   * oldest (payload "null" for none; key NULL for none), as of a moment after look_ahead was
   * called; 0 not here yet (only when !wait); -1 failed or none in flight (the caller looks
   * another way). */
  int (*look_ahead_take)(mend_store *s, int wait,
                         void (*fn)(void *ud, const char *run_id, const char *name, long long seq,
                                    const char *payload, const char *key),
                         void *ud);
  /* When event seq was sent (the sender's clock), seeing the open batch: 1 and *sent; 0 no
   * such event, or none recorded; -1 error. Read only for a wait that takes an event past its
   * deadline, to tell one sent in time from one sent late. */
  int (*event_sent)(mend_store *s, long long seq, double *sent);
  /* Marks it consumed by `step`, recorded in the batch like a transition: the batch fails if
   * it was consumed already. */
  int (*consume_event)(mend_store *s, const char *run_id, long long seq, const char *step,
                       double at);
  /* The highest seq sent so far (0: none); -1 error. Of committed rows through a connection of
   * its own where there is one, as events_after reads (no wait for the writer thread, the open
   * batch's records not run on the caller's thread): an event the open batch sends is then
   * above it, and events_after names its run once the batch is durable, a look too many. */
  long long (*last_event)(mend_store *s);
  /* Runs with events sent after seq `after` (committed ones, through a connection of its own
   * when the database is a file): calls fn for each, in seq order, at most `limit`; returns the
   * highest seq seen (`after` if none), or -1 on error. */
  long long (*events_after)(mend_store *s, long long after, int limit,
                            void (*fn)(void *ud, const char *run_id), void *ud);
  /* A run's inbox in seq order: the events after seq `after`, at most `limit` (<= 0: all). */
  json_t *(*inbox)(mend_store *s, const char *run_id, long long after, long limit);

  /* Leases: which worker executes a run (runs.owner), and until when its lease lasts (one row
   * per worker, real time). A worker claims unfinished runs that nobody holds or whose owner's
   * lease ran out, renews its lease while it works, and releases a run it lets go of. Claims
   * and renewals join the current batch; closing the store ends the lease. */
  /* Tags history rows; before mend_store_start_writer (the thread names rows with it). */
  void (*set_worker)(mend_store *s, const char *worker);
  /* Up to `limit` ids (array) of unfinished runs now held by `owner`: those nobody holds, or
   * whose owner's lease ran out (never the owner's own), oldest first or, with
   * MEND_CLAIM_NEWEST, newest first. MEND_CLAIM_FREE takes only runs nobody holds, without
   * walking the runs held by others; runs whose version could not be loaded (unavailable) are
   * taken only with MEND_CLAIM_UNAVAILABLE. The owner's lease then lasts at least until
   * lease_until. NULL on error. */
  json_t *(*claim)(mend_store *s, const char *owner, double lease_seconds, int limit, int how);
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
  int (*claimable)(mend_store *s, const char *owner, int thorough);
  /* Recorded in the batch like a transition (it runs on the writer thread, if there is one);
   * never shortens the lease. */
  int (*renew)(mend_store *s, const char *owner, double lease_seconds);
  int (*release)(mend_store *s, const char *id, const char *owner);
  /* Workers whose lease is live (array of strings); NULL on error. */
  json_t *(*lease_holders)(mend_store *s);
  /* Gives back every unfinished run held by `owner` (a worker known to be dead), and forgets
   * its lease. */
  int (*release_owner)(mend_store *s, const char *owner);
  /* The fence (src/store/fence.c): a transaction that begins after this worker's leases ran out
   * (`until`, moved on by each renewal) renews them and drops every write to a run another
   * worker took meanwhile. set_fence names the worker and its lease, once, before any write.
   * fence_news calls `lost` with each run found lost since the last call and returns 1 if a
   * transaction began late meanwhile: the engine then matches its runs against mend_store_held
   * (an array of ids; NULL on error), lets go of the others (add_lost), and calls
   * fence_verified. */
  int (*set_fence)(mend_store *s, const char *owner, double lease_seconds);
  int (*fence_news)(mend_store *s, void (*lost)(void *ud, const char *id), void *ud);
  json_t *(*held)(mend_store *s);
  int (*add_lost)(mend_store *s, const char *id);
  void (*fence_verified)(mend_store *s);
  /* While on, the writes recorded are a person's repair of a run nobody holds (resolving a dead
   * letter): the fence lets them through. */
  void (*repairing)(mend_store *s, int on);
  /* 1 and the owner ("" if none) and its lease_until (-1 if none); 0 no run; -1 error. */
  int (*owner)(mend_store *s, const char *id, char *owner_out, int owner_len, double *lease_left);
  /* Same, as a view reads (last_history_view). NULL: owner's. */
  int (*owner_view)(mend_store *s, const char *id, char *owner_out, int owner_len,
                    double *lease_left);
  /* Completion tokens (schema 11), known by their digest only (src/digest.c; schema 13): the
   * store never sees a token. put: records the digest of a token of a run's step's attempt at
   * once in the open batch (a caller commits it; an attempt may have more than one); 0, -1
   * error. of_attempt: a digest of that attempt's tokens if it has one: 1 and *digest
   * (malloc'ed), 0 none, -1 error. */
  int (*put_token)(mend_store *s, const char *digest, const char *run_id, const char *step,
                   int attempt, double made);
  int (*token_of_attempt)(mend_store *s, const char *run_id, const char *step, int attempt,
                          char **digest);
  /* The token's row {digest, run_id, step, attempt, made, used, outcome} or NULL: none (errmsg
   * empty) or an error (errmsg says). */
  json_t *(*token)(mend_store *s, const char *digest);
  /* Marks it and every other token of its attempt used with its outcome (JSON text), in the
   * open batch: 0 done, 1 one of them was used already (nothing written), -1 error. */
  int (*use_token)(mend_store *s, const char *digest, const char *outcome, double at);
  /* Child runs (schema 11). set_parent: names the parent of a run, in the open batch. children:
   * [{run_id, step, workflow, status}] of a parent, in the order started. */
  int (*set_parent)(mend_store *s, const char *id, const char *parent, const char *parent_step);
  json_t *(*children)(mend_store *s, const char *parent);
  /* Puts event `name` in the inbox of the parent of run `child` (none: nothing), recorded in the
   * batch like a transition of the child's (the fence drops it with them). */
  int (*child_end)(mend_store *s, const char *child, const char *name, const char *payload,
                   const char *key, double sent);
  /* Reopens a child run that succeeded so that its own saga is reversed (its parent
   * compensates): status compensating with `reason`, held by `owner` (NULL: nobody), in the
   * open batch. 1 reopened, 0 it had not succeeded (nothing written), -1 error. */
  int (*reopen_run)(mend_store *s, const char *id, const char *reason, const char *owner,
                    double at);
  /* One page of runs, newest first by (created, id), with the filters of mend_store_runs_where
   * (status, workflow NULL: any; since < 0: any) and, after_id not NULL, only the runs after
   * the run (after_created, after_id) in that order: a cursor that inserts do not move. */
  json_t *(*runs_page)(mend_store *s, const char *status, const char *workflow, double since,
                       double after_created, const char *after_id, int limit);
  /* Runs by workflow and status: [{workflow, status, runs, oldest}], oldest the creation time of
   * the oldest running or compensating one (left out when none). */
  json_t *(*run_counts)(mend_store *s);
  /* Wake-ups from other processes (optional: NULL in a backend that has none; the poll finds
   * everything anyway). wake_fd: a socket for the loop to watch for reading, or -1 for now
   * (asked again at the next poll); *opened 1 if it is new, so that wake-ups sent before it
   * were missed. wake_take, when it is readable: 1 another process made work due or sent an
   * event (look now), 0 nothing, -1 the socket is done with (stop watching it first). */
  int (*wake_fd)(mend_store *s, int *opened);
  int (*wake_take)(mend_store *s);
  /* After a call failed: 1 (once) if the failure was the loss of the connection to a server
   * (it restarted, the session was ended), or the server rolled the batch back to end a
   * deadlock: the batch it was writing is not known to be committed and is not retried; later
   * calls reconnect if need be. 0 for any other failure (optional: NULL in a backend without a
   * server). */
  int (*conn_lost)(mend_store *s);
  /* The run as the engine rebuilds it (see mend_run_image), read as one snapshot that sees the
   * open batch: 0 and *img filled; -1 on error (errmsg; not_found says when there is no such
   * run), *img then empty. A status the engine does not know is an error naming it. PostgreSQL
   * reads it in one round trip, SQLite with prepared statements; neither builds JSON. */
  int (*run_image)(mend_store *s, const char *id, mend_run_image *img);
  /* The last failure of a read on the loop thread's own connection (events_after, the inbox's
   * committed looks), where another thread writes errmsg's (optional: NULL, errmsg). */
  const char *(*read_errmsg)(mend_store *s);
  /* 1 when the database this store opened is no longer where it was (a SQLite file deleted or
   * moved: its writes now go to a file no one will open again), with why (naming the file) in
   * why[len]; 0 otherwise. A look of the loop's thread that commits nothing, for a process that
   * may go a long time without a commit (`mend serve`). Optional: NULL (0) for a server. */
  int (*gone)(mend_store *s, char *why, int len);
} mend_store_methods;

#define MEND_STORE_M(s) (*(const mend_store_methods *const *)(const void *)(s))

/* Opens (creating if needed) the database at `path` (":memory:" allowed), sets WAL, the
 * synchronous mode, a busy timeout, creates or checks the schema and prepares every statement.
 * Returns NULL on failure with a message naming the file and the cause in `err` ("mend.db: file
 * is not a database", "mend.db: schema version 7 is newer than this mend (1)"). */
mend_store *mend_store_open(const char *path, mend_durability durability, char *err, int errlen);
/* As mend_store_open, for a database that must be mend's already: none there (":memory:", a
 * missing file) or one with no mend schema (an empty file, an empty PostgreSQL database) is
 * left as it is and not opened: NULL with *none = 1 (may be NULL; err saying so). Upgrading an
 * older schema is still done. */
mend_store *mend_store_open_existing(const char *path, mend_durability durability, int *none,
                                     char *err, int errlen);
/* 1 if `name` names a PostgreSQL database (postgres:// or postgresql://). */
int mend_store_is_postgres(const char *name);
/* Where a database name's database is, read as its backend reads it (storage.c): the one
 * reader of it for every check made before anything opens the name. */
typedef enum {
  MEND_DB_FILE,       /* a SQLite file: its path is in file (a "file:" URI's, %HH decoded) */
  MEND_DB_MEMORY,     /* nothing kept: ":memory:", a URI of ":memory:" or with mode=memory, an
                       * empty name (SQLite's private temporary file) */
  MEND_DB_POSTGRES    /* postgres:// or postgresql:// (a file named "postgres_x.db" is a file) */
} mend_db_kind;
/* The kind of `name`; file[cap] gets the file of MEND_DB_FILE ("" for the others). A path
 * longer than cap is cut there. A "file:" URI is read as SQLite reads it: %HH decoded where
 * two hex digits follow, %00 ending its part, the last mode= the one applied. */
mend_db_kind mend_store_where(const char *name, char *file, size_t cap);

/* Turns SQLite's memory statistics off for the whole process, if SQLite has not started yet:
 * they take a global mutex around every allocation, 9% of the writer thread's work. The mend
 * program and the Lua module call it; a host embedding libmend decides for its own process. */
void mend_store_quiet_memstatus(void);

/* The dispatchers: one per method, with the method's name and arguments. */
static inline void mend_store_close(mend_store *s) {
  if (s) MEND_STORE_M(s)->close(s);
}
static inline const char *mend_store_errmsg(mend_store *s) {
  return s ? MEND_STORE_M(s)->errmsg(s) : "no store";
}
static inline const char *mend_store_read_errmsg(mend_store *s) {
  return MEND_STORE_M(s)->read_errmsg ? MEND_STORE_M(s)->read_errmsg(s) : mend_store_errmsg(s);
}
static inline int mend_store_gone(mend_store *s, char *why, int len) {
  return MEND_STORE_M(s)->gone ? MEND_STORE_M(s)->gone(s, why, len) : 0;
}
static inline int mend_store_not_found(const mend_store *s) {
  return MEND_STORE_M(s)->not_found(s);
}
static inline int mend_store_commit(mend_store *s) {
  return MEND_STORE_M(s)->commit(s);
}
static inline int mend_store_locked(mend_store *s) {
  return MEND_STORE_M(s)->locked ? MEND_STORE_M(s)->locked(s) : 0;
}

static inline int mend_store_lock_try(mend_store *s) {
  return MEND_STORE_M(s)->lock_try ? MEND_STORE_M(s)->lock_try(s) : 1;
}
/* Whether another process's write lock can hold this backend's writes back (SQLite's file
 * lock; it says when, with locked, and can be tried, with lock_try): PostgreSQL's writers wait
 * for rows, not for one lock (its locked says a batch waits for another session's rows). */
static inline int mend_store_has_write_lock(const mend_store *s) {
  return MEND_STORE_M(s)->lock_try != NULL;
}
static inline void mend_store_set_busy_wait(mend_store *s, int ms) {
  if (MEND_STORE_M(s)->set_busy_wait) MEND_STORE_M(s)->set_busy_wait(s, ms);
}
static inline void mend_store_set_thread_cpus(mend_store *s, const mend_cpus *cpus) {
  if (MEND_STORE_M(s)->set_thread_cpus) MEND_STORE_M(s)->set_thread_cpus(s, cpus);
}
static inline int mend_store_batch_open(mend_store *s) {
  return MEND_STORE_M(s)->batch_open(s);
}
static inline int mend_store_start_writer(mend_store *s, void (*done)(void *ud), void *ud) {
  return MEND_STORE_M(s)->start_writer(s, done, ud);
}
static inline int mend_store_hand_off(mend_store *s) {
  return MEND_STORE_M(s)->hand_off(s);
}
static inline int mend_store_writer_busy(mend_store *s) {
  return MEND_STORE_M(s)->writer_busy(s);
}
static inline int mend_store_writer_part(mend_store *s) {
  return MEND_STORE_M(s)->writer_part ? MEND_STORE_M(s)->writer_part(s) : 0;
}
static inline int mend_store_batch_writes(const mend_store *s) {
  return MEND_STORE_M(s)->batch_writes ? MEND_STORE_M(s)->batch_writes(s) : 0;
}
static inline void mend_store_read_flushes(mend_store *s, unsigned long *records,
                                           double *cpu, int *pending) {
  *records = 0;
  *cpu = 0;
  *pending = 0;
  if (MEND_STORE_M(s)->read_flushes) MEND_STORE_M(s)->read_flushes(s, records, cpu, pending);
}
static inline void mend_store_trim(mend_store *s) {
  if (MEND_STORE_M(s)->trim) MEND_STORE_M(s)->trim(s);
}
static inline unsigned long mend_store_open_seq(const mend_store *s) {
  return MEND_STORE_M(s)->open_seq(s);
}
static inline unsigned long mend_store_durable_seq(const mend_store *s) {
  return MEND_STORE_M(s)->durable_seq(s);
}
static inline void mend_store_set_commit_hook(mend_store *s, void (*hook)(const char *phase)) {
  MEND_STORE_M(s)->set_commit_hook(s, hook);
}
static inline long mend_store_last_history_seq(mend_store *s, const char *run_id) {
  return MEND_STORE_M(s)->last_history_seq(s, run_id);
}
static inline long mend_store_last_history_view(mend_store *s, const char *run_id, double *at,
                                                int *committed) {
  *committed = 0;
  if (!MEND_STORE_M(s)->last_history_view) return MEND_STORE_M(s)->last_history(s, run_id, at);
  return MEND_STORE_M(s)->last_history_view(s, run_id, at, committed);
}
static inline long mend_store_last_history(mend_store *s, const char *run_id, double *at) {
  return MEND_STORE_M(s)->last_history(s, run_id, at);
}
static inline char *mend_store_version_script(mend_store *s, const char *workflow,
                                              const char *version, char **source) {
  return MEND_STORE_M(s)->version_script(s, workflow, version, source);
}
static inline int mend_store_insert_run(mend_store *s, const mend_run_rec *r) {
  return MEND_STORE_M(s)->insert_run(s, r);
}
static inline int mend_store_update_run(mend_store *s, const char *id, const char *status,
                                        const char *error, int attention, double updated,
                                        const char *reason) {
  return MEND_STORE_M(s)->update_run(s, id, status, error, attention, updated, reason);
}
static inline int mend_store_put_step(mend_store *s, const mend_step_rec *st) {
  return MEND_STORE_M(s)->put_step(s, st);
}
static inline int mend_store_update_step(mend_store *s, const mend_step_rec *st) {
  return MEND_STORE_M(s)->update_step(s, st);
}
static inline int mend_store_append_history(mend_store *s, const mend_history_rec *h) {
  return MEND_STORE_M(s)->append_history(s, h);
}
static inline int mend_store_put_breaker(mend_store *s, const char *key, const mend_breaker *b,
                                         double updated) {
  return MEND_STORE_M(s)->put_breaker(s, key, b, updated);
}
static inline int mend_store_put_dlq(mend_store *s, const mend_dlq_rec *d) {
  return MEND_STORE_M(s)->put_dlq(s, d);
}
static inline int mend_store_find_run_key(mend_store *s, const char *run_key, char *id_out,
                                          int id_len) {
  return MEND_STORE_M(s)->find_run_key(s, run_key, id_out, id_len);
}
static inline int mend_store_find_run_key_committed(mend_store *s, const char *run_key,
                                                    char *id_out, int id_len) {
  if (!MEND_STORE_M(s)->find_run_key_committed)
    return MEND_STORE_M(s)->find_run_key(s, run_key, id_out, id_len);
  return MEND_STORE_M(s)->find_run_key_committed(s, run_key, id_out, id_len);
}
static inline int mend_store_find_key_result(mend_store *s, const char *idem_key, char **result_out,
                                             char *run_out, int run_len) {
  return MEND_STORE_M(s)->find_key_result(s, idem_key, result_out, run_out, run_len);
}
static inline int mend_store_get_breaker(mend_store *s, const char *key, mend_breaker *b) {
  return MEND_STORE_M(s)->get_breaker(s, key, b);
}
static inline json_t *mend_store_run(mend_store *s, const char *id) {
  return MEND_STORE_M(s)->run(s, id);
}
static inline json_t *mend_store_history(mend_store *s, const char *id) {
  return MEND_STORE_M(s)->history(s, id);
}
static inline json_t *mend_store_history_page(mend_store *s, const char *id, long after,
                                              long limit, long tail) {
  return MEND_STORE_M(s)->history_page(s, id, after, limit, tail);
}
static inline json_t *mend_store_dlq(mend_store *s) { return MEND_STORE_M(s)->dlq(s, 0, NULL, 0); }
static inline json_t *mend_store_dlq_page(mend_store *s, double after_at, const char *after_id,
                                          long limit) {
  return MEND_STORE_M(s)->dlq(s, after_at, after_id, limit);
}
static inline json_t *mend_store_breakers(mend_store *s) {
  return MEND_STORE_M(s)->breakers(s);
}
static inline json_t *mend_store_runs(mend_store *s, const char *status, const char *workflow,
                                      int limit) {
  return MEND_STORE_M(s)->runs(s, status, workflow, limit);
}
static inline json_t *mend_store_runs_where(mend_store *s, const char *status, const char *workflow,
                                            double since, int attention_only, int limit) {
  return MEND_STORE_M(s)->runs_where(s, status, workflow, since, attention_only, limit);
}
static inline json_t *mend_store_audit_list(mend_store *s) {
  return MEND_STORE_M(s)->audit_list(s);
}
static inline int mend_store_dlq_remove(mend_store *s, const char *run_id) {
  return MEND_STORE_M(s)->dlq_remove(s, run_id);
}
static inline int mend_store_set_unavailable(mend_store *s, const char *id, const char *why) {
  return MEND_STORE_M(s)->set_unavailable(s, id, why);
}
static inline int mend_store_version_number(mend_store *s, const mend_run_rec *r, long long *id) {
  return MEND_STORE_M(s)->version_number(s, r, id);
}
static inline int mend_store_move_run(mend_store *s, const char *id, long long version_id,
                                      int keep_steps) {
  return MEND_STORE_M(s)->move_run(s, id, version_id, keep_steps);
}
static inline json_t *mend_store_workflows(mend_store *s, const char *workflow) {
  return MEND_STORE_M(s)->workflows(s, workflow);
}
static inline int mend_store_take(mend_store *s, const char *id, const char *owner,
                                  double lease_seconds) {
  return MEND_STORE_M(s)->take(s, id, owner, lease_seconds);
}
static inline int mend_store_hold_status(mend_store *s, const char *id, const char *status,
                                         char *found, int len) {
  return MEND_STORE_M(s)->hold_status(s, id, status, found, len);
}
static inline int mend_store_request_cancel(mend_store *s, const char *run_id) {
  return MEND_STORE_M(s)->request_cancel(s, run_id);
}
static inline json_t *mend_store_cancel_requests(mend_store *s, const char *owner) {
  return MEND_STORE_M(s)->cancel_requests(s, owner);
}
static inline int mend_store_cancels_requested(mend_store *s, const char *owner) {
  if (!MEND_STORE_M(s)->cancels_requested) return 1;
  return MEND_STORE_M(s)->cancels_requested(s, owner);
}
static inline int mend_store_audit(mend_store *s, double at, const char *who, const char *op,
                                   const char *target, const char *detail) {
  return MEND_STORE_M(s)->audit(s, at, who, op, target, detail);
}
static inline int mend_store_schema_version(mend_store *s) {
  return MEND_STORE_M(s)->schema_version(s);
}
static inline int mend_store_sandbox_mark(mend_store *s, int set) {
  return MEND_STORE_M(s)->sandbox_mark(s, set);
}
static inline json_t *mend_store_prune(mend_store *s, double before, const char *status,
                                       int dry_run) {
  return MEND_STORE_M(s)->prune(s, before, status, dry_run);
}
static inline int mend_store_send_event(mend_store *s, const char *run_id, const char *name,
                                        const char *payload, const char *key, double sent,
                                        const char *who) {
  return MEND_STORE_M(s)->send_event(s, run_id, name, payload, key, sent, who);
}
static inline int mend_store_record_keyed_event(mend_store *s, const char *run_id, const char *name,
                                                const char *payload, const char *key, double sent,
                                                const char *who, int *ticket) {
  if (!MEND_STORE_M(s)->record_keyed_event) return 1;
  return MEND_STORE_M(s)->record_keyed_event(s, run_id, name, payload, key, sent, who, ticket);
}
static inline int mend_store_event_outcome(mend_store *s, int ticket) {
  return MEND_STORE_M(s)->event_outcome(s, ticket);
}
static inline void mend_store_event_ticket_free(mend_store *s, int ticket) {
  MEND_STORE_M(s)->event_ticket_free(s, ticket);
}
static inline int mend_store_can_record_event(mend_store *s) {
  return MEND_STORE_M(s)->record_event != NULL;
}
static inline int mend_store_record_event(mend_store *s, const char *run_id, const char *name,
                                          const char *payload, const char *key, double sent,
                                          const char *who) {
  return MEND_STORE_M(s)->record_event(s, run_id, name, payload, key, sent, who);
}
/* Whether next_committed_event reads without the open batch (and without waiting for the
 * writer thread), rather than answering 2 every time. */
static inline int mend_store_reads_committed_events(mend_store *s) {
  return MEND_STORE_M(s)->next_committed_event != NULL;
}
static inline void mend_store_open_committed_reads(mend_store *s, int batch) {
  if (MEND_STORE_M(s)->open_committed_reads) MEND_STORE_M(s)->open_committed_reads(s, batch);
}
static inline int mend_store_can_look_ahead(mend_store *s) {
  return MEND_STORE_M(s)->look_ahead != NULL &&
         (!MEND_STORE_M(s)->can_look_ahead || MEND_STORE_M(s)->can_look_ahead(s));
}
static inline int mend_store_look_ahead(mend_store *s, int n, const char *const *run_ids,
                                        const char *const *names) {
  return MEND_STORE_M(s)->look_ahead ? MEND_STORE_M(s)->look_ahead(s, n, run_ids, names) : -1;
}
static inline int mend_store_look_ahead_take(mend_store *s, int wait,
                                             void (*fn)(void *ud, const char *run_id,
                                                        const char *name, long long seq,
                                                        const char *payload, const char *key),
                                             void *ud) {
  return MEND_STORE_M(s)->look_ahead_take ? MEND_STORE_M(s)->look_ahead_take(s, wait, fn, ud) : -1;
}
static inline int mend_store_next_committed_event(mend_store *s, const char *run_id,
                                                  const char *name, long long *seq, char **payload,
                                                  char **key) {
  if (!MEND_STORE_M(s)->next_committed_event) return 2;
  return MEND_STORE_M(s)->next_committed_event(s, run_id, name, seq, payload, key);
}
static inline int mend_store_next_event(mend_store *s, const char *run_id, const char *name,
                                        long long *seq, char **payload, char **key) {
  return MEND_STORE_M(s)->next_event(s, run_id, name, seq, payload, key);
}
static inline int mend_store_event_sent(mend_store *s, long long seq, double *sent) {
  return MEND_STORE_M(s)->event_sent(s, seq, sent);
}
static inline int mend_store_consume_event(mend_store *s, const char *run_id, long long seq,
                                           const char *step, double at) {
  return MEND_STORE_M(s)->consume_event(s, run_id, seq, step, at);
}
static inline long long mend_store_last_event(mend_store *s) {
  return MEND_STORE_M(s)->last_event(s);
}
static inline long long mend_store_events_after(mend_store *s, long long after, int limit,
                                                void (*fn)(void *ud, const char *run_id),
                                                void *ud) {
  return MEND_STORE_M(s)->events_after(s, after, limit, fn, ud);
}
static inline json_t *mend_store_inbox(mend_store *s, const char *run_id) {
  return MEND_STORE_M(s)->inbox(s, run_id, 0, 0);
}
static inline json_t *mend_store_inbox_page(mend_store *s, const char *run_id, long long after,
                                            long limit) {
  return MEND_STORE_M(s)->inbox(s, run_id, after, limit);
}
static inline void mend_store_set_worker(mend_store *s, const char *worker) {
  MEND_STORE_M(s)->set_worker(s, worker);
}
static inline json_t *mend_store_claim(mend_store *s, const char *owner, double lease_seconds,
                                       int limit, int how) {
  return MEND_STORE_M(s)->claim(s, owner, lease_seconds, limit, how);
}
static inline int mend_store_claimable(mend_store *s, const char *owner, int thorough) {
  return MEND_STORE_M(s)->claimable(s, owner, thorough);
}
static inline int mend_store_renew(mend_store *s, const char *owner, double lease_seconds) {
  return MEND_STORE_M(s)->renew(s, owner, lease_seconds);
}
static inline int mend_store_release(mend_store *s, const char *id, const char *owner) {
  return MEND_STORE_M(s)->release(s, id, owner);
}
static inline json_t *mend_store_lease_holders(mend_store *s) {
  return MEND_STORE_M(s)->lease_holders(s);
}
static inline int mend_store_release_owner(mend_store *s, const char *owner) {
  return MEND_STORE_M(s)->release_owner(s, owner);
}
static inline int mend_store_set_fence(mend_store *s, const char *owner, double lease_seconds) {
  return MEND_STORE_M(s)->set_fence(s, owner, lease_seconds);
}
static inline int mend_store_fence_news(mend_store *s, void (*lost)(void *ud, const char *id),
                                        void *ud) {
  return MEND_STORE_M(s)->fence_news(s, lost, ud);
}
static inline json_t *mend_store_held(mend_store *s) {
  return MEND_STORE_M(s)->held(s);
}
static inline int mend_store_add_lost(mend_store *s, const char *id) {
  return MEND_STORE_M(s)->add_lost(s, id);
}
static inline void mend_store_fence_verified(mend_store *s) {
  MEND_STORE_M(s)->fence_verified(s);
}
static inline void mend_store_repairing(mend_store *s, int on) {
  MEND_STORE_M(s)->repairing(s, on);
}
static inline int mend_store_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                                   double *lease_left) {
  return MEND_STORE_M(s)->owner(s, id, owner_out, owner_len, lease_left);
}
static inline int mend_store_owner_view(mend_store *s, const char *id, char *owner_out,
                                        int owner_len, double *lease_left) {
  if (!MEND_STORE_M(s)->owner_view)
    return MEND_STORE_M(s)->owner(s, id, owner_out, owner_len, lease_left);
  return MEND_STORE_M(s)->owner_view(s, id, owner_out, owner_len, lease_left);
}

/* new: pg-views */
/* `mend copy`: every run, step, history row, breaker, dead letter, workflow version, inbox
 * event, completion token and audit row (and each run's parent) of the SQLite store at `from` into
 * the empty PostgreSQL store `to` (a libpq URI; its schema made or checked by the PostgreSQL
 * store's open), in one transaction committed only when every count matches. Refused while a
 * worker's lease on `from` lasts, and when `to` has rows. Nobody holds a run after. Returns the
 * counts copied ({"runs": n, ...}) or NULL with a message in err (naming no password).
 * src/store/pg/pg_copy.c */
json_t *mend_store_copy(const char *from, const char *to, char *err, int errlen);

/* `mend db upgrade`: what became of a SQLite file's run keys (src/store/layout.c). */
typedef enum {
  MEND_RUN_KEYS_UPGRADED,   /* runs_key is partial now: the table was made again */
  MEND_RUN_KEYS_CURRENT,    /* partial already (new files, PostgreSQL): nothing done */
  MEND_RUN_KEYS_HELD,       /* refused: a worker's lease on the file lasts (err names them) */
  MEND_RUN_KEYS_FAILED      /* err says why; the file is as it was */
} mend_run_keys_outcome;

/* Makes run_key's uniqueness in the SQLite store at `path` a partial index (schema.c,
 * runs_key_layout), as a new file has it: in one transaction, rowids, keys and every other
 * column and index kept. A mend before schema 16 still running on the file fails every start
 * after it, so it is refused while any worker's lease lasts, unless `despite_leases`. */
mend_run_keys_outcome mend_store_upgrade_run_keys(const char *path, int despite_leases, char *err,
                                                  int errlen);

/* `mend db trust`, mend.trust_db, mend_trust_db: the sandbox mark of the database named `path`
 * cleared (src/trust.c). */
typedef enum {
  MEND_TRUST_CLEARED,       /* it was marked; it is not now */
  MEND_TRUST_UNMARKED,      /* it was not marked: nothing done */
  MEND_TRUST_NO_DATABASE,   /* no file at the path (or ":memory:", or ""): none made (err) */
  MEND_TRUST_FAILED         /* the database failed (err names it); the mark is as it was */
} mend_trust_outcome;
mend_trust_outcome mend_store_trust(const char *path, char *err, int errlen);

/* The sandbox mark of the database at `path`, looked at without making anything: no database
 * (no file, ":memory:", an empty file or PostgreSQL database with no mend schema), marked, not
 * marked, or failed (err says why). trust.c. */
typedef enum {
  MEND_MARK_NO_DATABASE,
  MEND_MARK_ON,
  MEND_MARK_OFF,
  MEND_MARK_FAILED
} mend_mark_look;
mend_mark_look mend_store_mark_look(const char *path, char *err, int errlen);

static inline int mend_store_put_token(mend_store *s, const char *digest, const char *run_id,
                                       const char *step, int attempt, double made) {
  return MEND_STORE_M(s)->put_token(s, digest, run_id, step, attempt, made);
}
static inline int mend_store_token_of_attempt(mend_store *s, const char *run_id, const char *step,
                                              int attempt, char **digest) {
  return MEND_STORE_M(s)->token_of_attempt(s, run_id, step, attempt, digest);
}
static inline json_t *mend_store_token(mend_store *s, const char *digest) {
  return MEND_STORE_M(s)->token(s, digest);
}
static inline int mend_store_use_token(mend_store *s, const char *digest, const char *outcome,
                                       double at) {
  return MEND_STORE_M(s)->use_token(s, digest, outcome, at);
}
static inline int mend_store_set_parent(mend_store *s, const char *id, const char *parent,
                                        const char *parent_step) {
  return MEND_STORE_M(s)->set_parent(s, id, parent, parent_step);
}
static inline json_t *mend_store_children(mend_store *s, const char *parent) {
  return MEND_STORE_M(s)->children(s, parent);
}
static inline int mend_store_child_end(mend_store *s, const char *child, const char *name,
                                       const char *payload, const char *key, double sent) {
  return MEND_STORE_M(s)->child_end(s, child, name, payload, key, sent);
}
static inline int mend_store_reopen_run(mend_store *s, const char *id, const char *reason,
                                        const char *owner, double at) {
  return MEND_STORE_M(s)->reopen_run(s, id, reason, owner, at);
}

static inline json_t *mend_store_runs_page(mend_store *s, const char *status, const char *workflow,
                                           double since, double after_created, const char *after_id,
                                           int limit) {
  return MEND_STORE_M(s)->runs_page(s, status, workflow, since, after_created, after_id, limit);
}
static inline json_t *mend_store_run_counts(mend_store *s) {
  return MEND_STORE_M(s)->run_counts(s);
}
static inline int mend_store_wake_fd(mend_store *s, int *opened) {
  *opened = 0;
  return MEND_STORE_M(s)->wake_fd ? MEND_STORE_M(s)->wake_fd(s, opened) : -1;
}
static inline int mend_store_conn_lost(mend_store *s) {
  return MEND_STORE_M(s)->conn_lost ? MEND_STORE_M(s)->conn_lost(s) : 0;
}
static inline int mend_store_wake_take(mend_store *s) {
  return MEND_STORE_M(s)->wake_take ? MEND_STORE_M(s)->wake_take(s) : -1;
}
static inline int mend_store_run_image(mend_store *s, const char *id, mend_run_image *img) {
  return MEND_STORE_M(s)->run_image(s, id, img);
}

#endif
