/*
 * store_int: the insides of the SQLite store, shared by its files (src/store.c, its table of
 * methods, and src/store/) and by nothing else: the statement numbers, the write log, the writer
 * thread, struct mend_store, and the functions one store file calls in another (mend__*). Must
 * never: be included outside the store's files (nor may sqlite3.h be, outside them).
 */
#ifndef MEND_STORE_INT_H
#define MEND_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stddef.h>

#include "idset.h"
#include "store.h"
#include "store/handoff.h"
#include "store/sqlite.h"

#define MEND_SCHEMA_VERSION 21   /* kept in PRAGMA user_version and in meta */

#define BUSY_TIMEOUT_MS 5000
#define HISTORY_GROUP 8
#define HISTORY_VALUES 13   /* the values of a history record (mend_store_append_history) */
#define ROW_STATEMENTS 6    /* the statements of runs' and steps' rows (writer.c: kept_slots) */
#define ROW_VALUES 18       /* the most values one of them takes (a step's row) */
#define LABELS_MAX 64       /* more names than that are written out, as before schema 7 */

/* Keyed events that may wait for their batch at once (inbox.c); more are sent at once. */
#define EVENT_TICKETS 256

enum {
  Q_BEGIN,
  Q_COMMIT,
  Q_ROLLBACK,
  Q_BEGIN_READ,
  Q_INSERT_RUN,
  Q_INSERT_RUN_KEY,
  Q_INSERT_RUN_NEWV,
  Q_UPDATE_RUN,
  Q_PUT_STEP,
  Q_UPDATE_STEP,
  Q_APPEND_HISTORY,
  Q_PUT_BREAKER,
  Q_PUT_DLQ,
  Q_HISTORY_GROUP,
  Q_NAME_WORKER,
  Q_WORKER_ID,
  Q_PUT_VERSION,
  Q_VERSION_ID,
  Q_FIND_RUN_KEY,
  Q_FIND_KEY_RESULT,
  Q_GET_BREAKER,
  Q_LAST_SEQ,
  Q_CLAIM_OLDEST,
  Q_CLAIM_NEWEST,
  Q_CLAIM_FREE_OLDEST,
  Q_CLAIM_FREE_NEWEST,
  Q_RENEW,
  Q_RELEASE,
  Q_OWNER,
  Q_HOLDERS,
  Q_RELEASE_OWNER,
  Q_HELD,
  Q_FORGET_WORKER,
  Q_FORGET_GONE,
  Q_DLQ_REMOVE,
  Q_REQUEST_CANCEL,
  Q_CANCEL_REQUESTS,
  Q_AUDIT,
  Q_AUDIT_LIST,
  Q_TAKE,
  Q_RUN_STATUS,
  Q_VERSION_SCRIPT,
  Q_KEEP_SCRIPT,
  Q_KEEP_SCRIPT_NEWV,
  Q_SET_UNAVAILABLE,
  Q_MOVE_RUN,
  Q_DROP_STEPS_FROM,
  Q_WORKFLOWS,
  Q_RUN,
  Q_STEPS,
  Q_IN_FLIGHT,
  Q_HISTORY,
  Q_HISTORY_AFTER,
  Q_HISTORY_TAIL,
  Q_RUN_EXISTS,
  Q_DLQ,
  Q_BREAKERS,
  Q_RUNS,
  Q_SEND_EVENT,
  Q_SEND_EVENT_KEY,
  Q_NEXT_EVENT,
  Q_CONSUME_EVENT,
  Q_LAST_EVENT,
  Q_INBOX,
  /* new: tokens */
  Q_PUT_TOKEN,
  Q_TOKEN_OF_ATTEMPT,
  Q_TOKEN,
  Q_USE_TOKEN,
  Q_SET_PARENT,
  Q_CHILDREN,
  Q_REOPEN_RUN,
  Q_CHILD_END,
  Q_IMAGE_RUN,
  Q_IMAGE_STEPS,
  Q_IMAGE_HISTORY,
  Q__COUNT
};

/* ---- the write log ----------------------------------------------------------------------
 * The writes of a step (runs, steps, history, breakers, dead letters) are recorded here, values
 * copied, and run as statements at the next flush: at once on a store without a writer thread;
 * with one, on the writer thread when the batch is handed off, or on the caller's thread before
 * any other statement (a read must see them). Either way they run in the order written, but
 * for numbered history rows, which go in groups (flush_log): only a history row without a number
 * reads them, and it goes after them. */
/* V_WORKER: the store's worker. V_CODE: a label's code (schema 7), for a column declared TEXT:
 * bound as its digits, which the column keeps as they are, rather than as a number SQLite turns
 * into them (sqlite3VdbeMemStringify, 3.5% of the writer thread in W1; -1.5% net). */
enum { V_NULL, V_INT, V_REAL, V_TEXT, V_WORKER, V_CODE };
/* 16 bytes: a burst records some 200 of these a run, written on the loop's core and read on
 * the writer's (at 40 bytes, reading them was 7% of the writer thread). */
typedef struct wval {
  int type;
  unsigned len;      /* V_TEXT: its length (SQLite takes no more than INT_MAX) */
  union {
    sqlite3_int64 i;
    double d;
    size_t off;      /* V_TEXT: where in the log's text */
  };
} wval;
/* repair: see mend_store_repairing; a Q_SEND_EVENT_KEY's is its ticket (inbox.c), never 0: an
 * event passes the fence whoever holds its run. */
typedef struct wrec { int q, first, n, repair; } wrec;
typedef struct wlog {
  wrec *recs;
  int nrec, caprec;
  wval *vals;
  int nval, capval;
  char *text;
  size_t ntext, captext;
  int oom;           /* a record could not be kept: the batch must fail */
} wlog;

/* The writer thread (handoff.h) commits handed-off batches (its job: a wlog) while the loop
 * goes on with the next one; a batch that failed there fails every later call (errmsg says
 * why). */
typedef mend_handoff writer;

struct mend_store {
  const mend_store_methods *m;   /* first: the dispatchers of store.h read it */
  sqlite3 *db;
  sqlite3 *checkpointer;   /* a second connection, for checkpoints off the loop thread */
  sqlite3 *reader;         /* a third, read-only: looks that need not see our own batch */
  sqlite3_stmt *q_claimable[2];   /* on reader: quick, thorough (mend_store_claimable) */
  sqlite3_stmt *q_events_after;   /* on reader: mend_store_events_after */
  sqlite3_stmt *q_next_committed; /* on reader: mend_store_next_committed_event */
  sqlite3_stmt *q_cancels_committed; /* on reader: mend_store_cancels_requested */
  sqlite3_stmt *q_last_committed;    /* on reader: mend_store_last_event */
  /* The views' statements on the reader, prepared at their first use: while the write log
   * cannot be flushed (another process's write lock), a view shows the committed rows
   * (mend__view_point). */
  sqlite3_stmt *rq[Q__COUNT];
  int view_committed;      /* the view being read is on the reader (loop thread only) */
  /* Runs of the open batch whose keyed insert found the key taken (Q_INSERT_RUN_KEY): their
   * other records in the batch are dropped. Written by whichever thread flushes. */
  mend_idset key_taken;
  /* Keyed events recorded with their ticket (inbox.c): what their insert found, set by the
   * thread that flushes, read by the loop once the batch is durable. */
  _Atomic unsigned event_outcome[EVENT_TICKETS];
  unsigned ticket_at;      /* where the loop looks for a free ticket next */
  char *path;
  char *inbox_hold;   /* MEND_INBOX_READ_HOLD as the store opened (failpoints: tests) */
  int in_batch;
  /* A write of this batch failed: the whole batch must not commit, or the transitions
   * recorded before the failure would be kept without the one that failed. */
  int batch_failed;
  int version;   /* schema version found or made at open */
  char *worker;  /* written into every history row: who wrote it */
  char worker_digits[24];   /* worker_id as history.worker keeps it (text, as a V_CODE) */
  int worker_ndigits;
  sqlite3_int64 worker_id;  /* its number in worker_names, once the open batch or one before
                             * has it; 0: not yet */
  int worker_named;         /* the open batch gave it the number: gone if it rolls back */
  /* The workflow versions this store knows the number of (workflow_versions); those from
   * versions_committed on were numbered by the open batch, and go if it rolls back. */
  struct wf_version { char *workflow, *version, *source, *step_names; sqlite3_int64 id; } *versions;
  int nversions, capversions, versions_committed;
  /* The names history rows write as codes (schema 7), read from labels at open. */
  struct label { char name[32]; int code; } labels[LABELS_MAX];
  int nlabels;
  /* the labels by their first byte: the first's index + 1 (0: none), then each next's */
  unsigned char label_first[256], label_next[LABELS_MAX];
  int code_step, code_running;   /* -1: not in labels */
  sqlite3_stmt *q[Q__COUNT];
  /* What each parameter of q[Q_HISTORY_GROUP] holds now, so that append_group binds only the
   * ones that change (writer.c: group_slot). Only append_group binds that statement and
   * nothing clears its bindings; a statement is prepared with every parameter NULL, which is
   * what a zeroed slot says. */
  struct group_slot {
    unsigned char kind;
    sqlite3_int64 val;
  } group_slots[HISTORY_GROUP * HISTORY_VALUES];
  /* The same for each statement a run's rows are written by (writer.c: kept_slots): only
   * flush_log binds them, and never clears their bindings. */
  struct group_slot row_slots[ROW_STATEMENTS][ROW_VALUES];
  char err[1024];
  int not_found;            /* the last read of a run found none */
  wlog logs[3];   /* recording, and up to two with the writer thread (a part, the rest) */
  wlog *cur;              /* the log this thread records into */
  int parted;             /* records of the open batch passed to the writer thread in parts */
  /* Records a statement other than a recorded write ran first on the caller's thread, and
   * that thread's CPU seconds for them, in all since count_flushes was set: by the first
   * mend_store_read_flushes. */
  unsigned long flushed_recs;
  double flushed_cpu;
  int count_flushes;
  /* How long one statement waits for another connection's lock (busy_wait); the engine's
   * loop asks for a short one and waits out a longer lock on a timer instead. Set by the loop,
   * read by the writer thread's statements too. */
  atomic_int busy_ms;
  int must_exist;            /* opened only if mend's schema is there (mend_store_open_existing) */
  int no_schema;             /* ... and it was not */
  /* The last batch could not begin: another connection holds the write lock. Written on
   * whichever thread begins batches, read by the loop (mend_store_locked). */
  atomic_int locked;
  writer *w;              /* NULL: writes run at once, commits on the caller's thread */
  /* The writer thread's job is a part of the open batch (written, not committed), and the rest
   * of that batch, handed off while the part is written: under w->mu. */
  int w_part;
  wlog *w_next;
  unsigned long w_next_seq;
  unsigned long open_seq, durable_seq;   /* batch numbers: recording, last committed */
  void (*commit_hook)(const char *phase);
  int wal_frames;         /* the WAL's length after the last commit (sqlite3_wal_hook) */
  struct ckpt *ckpt;      /* the checkpoint thread (checkpoint.c), from the first commit on */
  struct mend_look_thread *look;   /* the looks' thread (look.c), from the first tick on */
  int no_auto_checkpoint; /* tests that checkpoint by hand */
  int wal_hard_frames;    /* tests: the WAL's hard limit in frames (0: checkpoint.c's) */
  int ckpt_pass_delay_ms; /* tests: each of the thread's passes takes this much longer */
  mend_cpus cpus;         /* where the writer and checkpoint threads run (set_thread_cpus) */
  /* The fence (see "fencing" below). fence_news, lost_new and nlost_new are shared with the
   * loop and guarded by the writer's mutex; the rest belongs to whichever thread writes. */
  char *fence_owner;
  double fence_lease, fence_until;
  int fence_checking;       /* a transaction began late: each run's holder is looked up */
  int fence_registered;     /* the worker's row (its lease) is in the database */
  int repairing;            /* writes recorded now are a person's repair (not fenced) */
  int fence_always_late;    /* a test's: every transaction takes the late path */
  mend_idset fence_checked; /* runs looked up since then, and still ours */
  mend_idset lost;          /* runs another worker took: their writes are dropped */
  int fence_news;           /* a transaction began late since the engine last heard */
  char **lost_new;          /* lost, and not yet told to the engine */
  int nlost_new, caplost_new;
};

/* Chains binds: the first failing result code wins and later binds are skipped. */
#define BIND(call) do { if (rc == SQLITE_OK) rc = (call); } while (0)

/* ---- schema.c: every SQL text of the store */
extern const char *const mend__query_sql[Q__COUNT];
extern const char *const mend__migrations[MEND_SCHEMA_VERSION];
extern const char *const mend__runs_key_rebuild;
extern const char *const mend__runs_key_layout_sql;
extern const char *const mend__runs_key_holders_sql;
extern const char *const mend__runs_key_index_sql;
extern const char *const mend__runs_own_schema_sql;

/* ---- stmt.c: statements run, and their errors */
int mend__bind_opt_real(sqlite3_stmt *q, int i, double v);
int mend__bind_text(sqlite3_stmt *q, int i, const char *v);
/* sqlite3_exec of sql on the writing connection: -1 with errmsg naming `what` (open time). */
int mend__exec_sql(mend_store *s, const char *sql, const char *what);
void mend__finish(sqlite3_stmt *q);
double mend__now_mono(void);
int mend__run_bound(mend_store *s, sqlite3_stmt *q, int rc, const char *what, int keep);
int mend__run_write(mend_store *s, sqlite3_stmt *q, int rc, const char *what);
__attribute__((format(printf, 3, 4)))
void mend__set_msg(char *buf, int len, const char *fmt,
              ...);
void mend__sql_err(mend_store *s, const char *what);
/* sqlite3_step, retried on SQLITE_BUSY for as long as the busy wait allows. */
int mend__step_busy_retry(const mend_store *s, sqlite3_stmt *q);
/* mend__sql_err for a statement's failure, named from its own connection. */
void mend__stmt_err(mend_store *s, sqlite3_stmt *q, const char *what);

/* ---- batch.c: the batch begun, committed, rolled back; the file still there */
int mend__batch_begin(mend_store *s);
int mend__commit_batch(mend_store *s);
/* 1 when the database file was deleted or moved since db (s's connection, or its reader,
 * each on the thread that holds it) opened it. */
int mend__file_gone(mend_store *s, sqlite3 *db);
void mend__rollback(mend_store *s);
int mend__sqlite_gone(mend_store *s, char *why, int len);

/* ---- schema_check.c: what the file holds, judged at open; the schema made or upgraded */
int mend__check_meta(mend_store *s, int version);
int mend__label_code(const mend_store *s, const char *name);
int mend__load_labels(mend_store *s);
int mend__schema_found(mend_store *s, int *version);
int mend__upgrade_schema(mend_store *s);

/* ---- versions.c: workflow versions numbered */
/* Drops the known workflow versions from `from` on. */
void mend__forget_versions(mend_store *s, int from);
void mend__free_version(struct wf_version *v);

/* ---- writer.c: the write log, the writer thread, writes */
char *mend__copy_text(const char *t, int *oom);
void mend__log_free(wlog *log);
void mend__note_durable(mend_store *s);
void mend__rec_begin(mend_store *s, int q);
int mend__rec_end(mend_store *s);
void mend__rec_int(mend_store *s, sqlite3_int64 i);
void mend__rec_real(mend_store *s, double d);
void mend__rec_text(mend_store *s, const char *t);
void mend__stop_writer(mend_store *s);
int mend__sync_point(mend_store *s);
int mend__workflow_version(mend_store *s, const mend_run_rec *r, sqlite3_int64 *id);
int mend__writer_wait(mend_store *s);

/* ---- query.c: reads and views */
int mend__first_row(mend_store *s, sqlite3_stmt *q, int rc, const char *what);
json_t *mend__rows_array(mend_store *s, sqlite3_stmt *q, int rc, const char *what);
/* Query k's statement on the reader, prepared into *slot at its first use: NULL when there is
 * no reader (in memory, it failed to open) or the statement cannot be prepared on it. */
sqlite3_stmt *mend__reader_stmt(mend_store *s, sqlite3_stmt **slot, int k);
/* Before a view's statements: 0 and the rows to show chosen (view_committed), or -1 with
 * errmsg. Its statements are then mend__view_stmt's (NULL if it cannot be prepared: the read
 * helpers below say so). */
int mend__view_point(mend_store *s);
sqlite3_stmt *mend__view_stmt(mend_store *s, int k);

/* ---- fence.c: leases and the fence */
int mend__fence_at_begin(mend_store *s);
int mend__fence_drops(mend_store *s, const wlog *log, const wrec *r);
double mend__wall_now(void);
int mend__lease_at_least(mend_store *s, const char *owner, double until);
int mend__open_reader(mend_store *s);
void mend__ours_again(mend_store *s, const char *id);
void mend__renewed(mend_store *s, const wlog *log, const wrec *r);


/* ---- checkpoint.c: the WAL policy. after_commit on the thread that just committed; between
 * batches on the thread that holds the writing connection, with no transaction open. */
void mend__ckpt_after_commit(mend_store *s);
void mend__ckpt_between_batches(mend_store *s);
void mend__ckpt_stop(mend_store *s);

/* ---- look.c: a ticking host's looks at committed inboxes, read on a thread of their own. */
void mend__sqlite_look_start(mend_store *s, int batch);
void mend__sqlite_look_stop(mend_store *s);
/* inbox.c: in a build with failpoints, an inbox read of the n events `names` waits here while
 * the file `hold` (the store's inbox_hold) is there (tests). */
void mend__inbox_read_hold(const char *hold, int n, const char *const *names);

/* ---- the methods (store.h says what each does), and their table ---- */
extern const mend_store_methods mend__sqlite_methods;
void mend__sqlite_close(mend_store *s);
int mend__sqlite_checkpoint(mend_store *s, int *wal_frames);
const char *mend__sqlite_errmsg(mend_store *s);
int mend__sqlite_not_found(const mend_store *s);
int mend__sqlite_commit(mend_store *s);
int mend__sqlite_locked(mend_store *s);
int mend__sqlite_lock_try(mend_store *s);
void mend__sqlite_set_busy_wait(mend_store *s, int ms);
void mend__sqlite_set_thread_cpus(mend_store *s, const mend_cpus *cpus);
int mend__sqlite_batch_open(mend_store *s);
int mend__sqlite_start_writer(mend_store *s, void (*done)(void *ud), void *ud);
int mend__sqlite_hand_off(mend_store *s);
int mend__sqlite_writer_busy(mend_store *s);
int mend__sqlite_writer_part(mend_store *s);
int mend__sqlite_batch_writes(const mend_store *s);
void mend__sqlite_trim(mend_store *s);
unsigned long mend__sqlite_open_seq(const mend_store *s);
unsigned long mend__sqlite_durable_seq(const mend_store *s);
void mend__sqlite_set_commit_hook(mend_store *s, void (*hook)(const char *phase));
long mend__sqlite_last_history_seq(mend_store *s, const char *run_id);
long mend__sqlite_last_history(mend_store *s, const char *run_id, double *at);
long mend__sqlite_last_history_view(mend_store *s, const char *run_id, double *at, int *committed);
char *mend__sqlite_version_script(mend_store *s, const char *workflow, const char *version,
                                  char **source);
int mend__sqlite_insert_run(mend_store *s, const mend_run_rec *r);
int mend__sqlite_update_run(mend_store *s, const char *id, const char *status, const char *error,
                            int attention, double updated, const char *reason);
int mend__sqlite_put_step(mend_store *s, const mend_step_rec *st);
int mend__sqlite_update_step(mend_store *s, const mend_step_rec *st);
int mend__sqlite_append_history(mend_store *s, const mend_history_rec *h);
int mend__sqlite_put_breaker(mend_store *s, const char *key, const mend_breaker *b, double updated);
int mend__sqlite_put_dlq(mend_store *s, const mend_dlq_rec *d);
int mend__sqlite_find_run_key(mend_store *s, const char *run_key, char *id_out, int id_len);
int mend__sqlite_find_run_key_committed(mend_store *s, const char *run_key, char *id_out,
                                        int id_len);
int mend__sqlite_find_key_result(mend_store *s, const char *idem_key, char **result_out,
                                 char *run_out, int run_len);
int mend__sqlite_get_breaker(mend_store *s, const char *key, mend_breaker *b);
json_t *mend__sqlite_run(mend_store *s, const char *id);
int mend__sqlite_run_image(mend_store *s, const char *id, mend_run_image *img);
json_t *mend__sqlite_history(mend_store *s, const char *id);
json_t *mend__sqlite_history_page(mend_store *s, const char *id, long after, long limit, long tail);
json_t *mend__sqlite_dlq(mend_store *s, double after_at, const char *after_id, long limit);
json_t *mend__sqlite_breakers(mend_store *s);
json_t *mend__sqlite_runs(mend_store *s, const char *status, const char *workflow, int limit);
json_t *mend__sqlite_runs_where(mend_store *s, const char *status, const char *workflow,
                                double since, int attention_only, int limit);
json_t *mend__sqlite_audit_list(mend_store *s);
int mend__sqlite_dlq_remove(mend_store *s, const char *run_id);
int mend__sqlite_set_unavailable(mend_store *s, const char *id, const char *why);
int mend__sqlite_version_number(mend_store *s, const mend_run_rec *r, long long *id);
int mend__sqlite_move_run(mend_store *s, const char *id, long long version_id, int keep_steps);
json_t *mend__sqlite_workflows(mend_store *s, const char *workflow);
int mend__sqlite_take(mend_store *s, const char *id, const char *owner, double lease_seconds);
int mend__sqlite_hold_status(mend_store *s, const char *id, const char *status, char *found,
                             int len);
int mend__sqlite_request_cancel(mend_store *s, const char *run_id);
json_t *mend__sqlite_cancel_requests(mend_store *s, const char *owner);
int mend__sqlite_cancels_requested(mend_store *s, const char *owner);
int mend__sqlite_audit(mend_store *s, double at, const char *who, const char *op,
                       const char *target, const char *detail);
int mend__sqlite_schema_version(mend_store *s);
int mend__sqlite_sandbox_mark(mend_store *s, int set);
json_t *mend__sqlite_prune(mend_store *s, double before, const char *status, int dry_run);
int mend__sqlite_send_event(mend_store *s, const char *run_id, const char *name,
                            const char *payload, const char *key, double sent, const char *who);
void mend__sqlite_read_flushes(mend_store *s, unsigned long *records, double *cpu, int *pending);
int mend__sqlite_next_committed_event(mend_store *s, const char *run_id, const char *name,
                                      long long *seq, char **payload, char **key);
void mend__sqlite_open_committed_reads(mend_store *s, int batch);
int mend__sqlite_can_look_ahead(mend_store *s);
int mend__sqlite_look_ahead(mend_store *s, int n, const char *const *run_ids,
                            const char *const *names);
int mend__sqlite_look_ahead_take(mend_store *s, int wait,
                                 void (*fn)(void *ud, const char *run_id, const char *name,
                                            long long seq, const char *payload, const char *key),
                                 void *ud);
int mend__sqlite_record_event(mend_store *s, const char *run_id, const char *name,
                              const char *payload, const char *key, double sent,
                              const char *who);
int mend__sqlite_record_keyed_event(mend_store *s, const char *run_id, const char *name,
                                    const char *payload, const char *key, double sent,
                                    const char *who, int *ticket);
int mend__sqlite_event_outcome(mend_store *s, int ticket);
void mend__sqlite_event_ticket_free(mend_store *s, int ticket);
void mend__event_outcome(mend_store *s, int ticket, int sent);
int mend__sqlite_next_event(mend_store *s, const char *run_id, const char *name, long long *seq,
                            char **payload, char **key);
int mend__sqlite_consume_event(mend_store *s, const char *run_id, long long seq, const char *step,
                               double at);
long long mend__sqlite_last_event(mend_store *s);
int mend__sqlite_event_sent(mend_store *s, long long seq, double *sent);
long long mend__sqlite_events_after(mend_store *s, long long after, int limit,
                                    void (*fn)(void *ud, const char *run_id), void *ud);
json_t *mend__sqlite_inbox(mend_store *s, const char *run_id, long long after, long limit);
void mend__sqlite_set_worker(mend_store *s, const char *worker);
json_t *mend__sqlite_claim(mend_store *s, const char *owner, double lease_seconds, int limit,
                           int how);
int mend__sqlite_claimable(mend_store *s, const char *owner, int thorough);
int mend__sqlite_renew(mend_store *s, const char *owner, double lease_seconds);
int mend__sqlite_release(mend_store *s, const char *id, const char *owner);
json_t *mend__sqlite_lease_holders(mend_store *s);
int mend__sqlite_release_owner(mend_store *s, const char *owner);
int mend__sqlite_set_fence(mend_store *s, const char *owner, double lease_seconds);
int mend__sqlite_fence_news(mend_store *s, void (*lost)(void *ud, const char *id), void *ud);
json_t *mend__sqlite_held(mend_store *s);
int mend__sqlite_add_lost(mend_store *s, const char *id);
void mend__sqlite_fence_verified(mend_store *s);
void mend__sqlite_repairing(mend_store *s, int on);
int mend__sqlite_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                       double *lease_left);
int mend__sqlite_owner_view(mend_store *s, const char *id, char *owner_out, int owner_len,
                            double *lease_left);

/* completion tokens and child runs (tokens.c) */
int mend__sqlite_put_token(mend_store *s, const char *digest, const char *run_id, const char *step,
                           int attempt, double made);
int mend__sqlite_token_of_attempt(mend_store *s, const char *run_id, const char *step, int attempt,
                                  char **digest);
json_t *mend__sqlite_token(mend_store *s, const char *token);
int mend__sqlite_use_token(mend_store *s, const char *digest, const char *outcome, double at);
/* Registers mend_token_digest(text) on db, for the migration to schema 13: SQLITE_OK or not. */
int mend__sqlite_digest_fn(sqlite3 *db);
int mend__sqlite_set_parent(mend_store *s, const char *id, const char *parent,
                            const char *parent_step);
json_t *mend__sqlite_children(mend_store *s, const char *parent);
int mend__sqlite_child_end(mend_store *s, const char *child, const char *name, const char *payload,
                           const char *key, double sent);
int mend__sqlite_reopen_run(mend_store *s, const char *id, const char *reason, const char *owner,
                            double at);

/* pages and counts of runs for mend serve (runs_page.c, run_counts.c) */
json_t *mend__sqlite_runs_page(mend_store *s, const char *status, const char *workflow,
                               double since, double after_created, const char *after_id, int limit);
json_t *mend__sqlite_run_counts(mend_store *s);

#endif
