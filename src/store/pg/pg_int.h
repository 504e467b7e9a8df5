/*
 * pg_int: the insides of the PostgreSQL store, shared by the files of src/store/pg/ and by
 * nothing else: struct mend_pg, the write log, the statement numbers, and the helpers one file
 * calls in another (mend__pg_*). Must never: be included outside src/store/pg/.
 *
 * Threads: the connection `conn` belongs to the loop's thread, except while the writer thread
 * writes a handed-off batch on it (w->busy); every call that uses it first waits for the
 * writer (mend__pg_sync). `aux` is a second connection (pg_aux.c), the loop thread's alone,
 * opened at its first use on the server conn is on, for looks at committed rows that must not
 * wait for the writer (claimable, events_after, a ticking host's inbox looks); what goes wrong
 * on it is told in aux_err, never in err, which the writer thread writes.
 */
#ifndef MEND_STORE_PG_INT_H
#define MEND_STORE_PG_INT_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "../../idset.h"
#include "../../store.h"
#include "../handoff.h"
#include "pg.h"
#include "pg_line.h"

/* PostgreSQL's own schema versions (meta 'schema_version'), unrelated to SQLite's. */
#define MEND_PG_SCHEMA_VERSION 10

/* Statements prepared on every connection at open (pg_schema.c holds their text). The write
 * statements (P_INSERT_RUN .. P_SET_UNAVAILABLE) are the ones a batch records. */
enum {
  P_INSERT_RUN, P_UPDATE_RUN, P_PUT_STEP, P_UPDATE_STEP, P_APPEND_HISTORY, P_PUT_BREAKER,
  P_PUT_DLQ, P_RENEW, P_CONSUME_EVENT, P_CHILD_END, P_SET_UNAVAILABLE,
  P_LEASE_LIVE, P_LEASE_CHECK, P_PUT_VERSION, P_VERSION_ID, P_KEEP_SCRIPT,
  P_FIND_RUN_KEY, P_FIND_KEY_RESULT, P_GET_BREAKER, P_LAST_SEQ, P_VERSION_SCRIPT,
  P_CLAIM_OLDEST, P_CLAIM_NEWEST, P_CLAIM_FREE_OLDEST, P_CLAIM_FREE_NEWEST, P_FORGET_GONE,
  P_RELEASE, P_OWNER, P_HOLDERS, P_RELEASE_OWNER, P_FORGET_WORKER, P_HELD,
  P_CLAIMABLE_QUICK, P_CLAIMABLE_THOROUGH,
  P_TAKE, P_RUN_STATUS, P_REQUEST_CANCEL, P_CANCEL_REQUESTS, P_DLQ_REMOVE, P_AUDIT,
  P_MOVE_RUN, P_DROP_STEPS_FROM,
  P_SEND_EVENT, P_NEXT_EVENT, P_LAST_EVENT, P_EVENTS_AFTER, P_EVENT_SENT,
  P_PUT_TOKEN, P_TOKEN_OF_ATTEMPT, P_USE_TOKEN, P_SET_PARENT, P_REOPEN_RUN,
  P_IMAGE_RUN, P_IMAGE_STEPS, P_IMAGE_HISTORY,
  P_IMAGES_RUN, P_IMAGES_STEPS, P_IMAGES_HISTORY, P_INSERT_RUN_KEY, P_APPEND_HISTORIES, P_PUT_STEPS,
  P_INSERT_RUNS, P_UPDATE_RUNS, P_INSERT_STEPS, P_RECORD_EVENT, P_NEXT_EVENTS,
  P__COUNT
};
extern const char *const mend__pg_sql[P__COUNT];
extern const char *const mend__pg_migrations[MEND_PG_SCHEMA_VERSION];

/* The write log: a batch's writes with their values copied (text, as libpq sends them), sent
 * as one pipeline at the next flush, in the order written. */
typedef struct pg_rec { int q, first, n, repair, new_row; } pg_rec;   /* new_row: P_PUT_STEP's */
typedef struct pg_log {
  pg_rec *recs;
  int nrec, caprec;
  long *vals;          /* offset of each value in text, or -1 for NULL */
  int nval, capval;
  char *text;
  size_t ntext, captext;
  int oom;
  int wake;            /* a write in it makes work due for others (pg_notify.c) */
} pg_log;

/* The writer thread (handoff.h); its job is a pg_log, the batch being written. */
typedef mend_handoff pg_writer;

struct pg_version { char *workflow, *version, *source, *step_names; long long id; };
/* Reads sent in the pipeline of a flush, after its writes (mend__pg_sync_reads): n prepared
 * statements (P_*) of one value each; take is given each one's result, in order. */
typedef struct pg_reads {
  int n;
  const int *q;
  const char *const *vals;
  void (*take)(void *ud, int i, const PGresult *r);
  void *ud;
  int sent;
} pg_reads;

/* A claimed run's image, read with those of the runs claimed after it (pg_image.c). */
typedef struct pg_pre {
  char *id;
  mend_run_image img;
  char *step_names;
  int state;                   /* PRE_WAITING, PRE_READY, PRE_GONE */
} pg_pre;

/* Where a connection reached: host, port and (over TCP) the address it reached. */
typedef struct pg_at { char host[256], port[32], hostaddr[64]; } pg_at;

typedef struct mend_pg {
  const mend_store_methods *m;   /* first: the dispatcher reads it (store.h) */
  PGconn *conn, *aux;
  double aux_retry_at, aux_backoff;   /* reconnecting aux (pg_aux.c) */
  char aux_err[1536], aux_server[300];   /* aux's own messages: err is the writer's */
  /* aux opened on a thread of its own (a ticking host's first tick must not log in): the
   * thread's connection, or NULL if it failed, once aux_opened says it is done */
  pthread_t aux_opener;
  int aux_opening;
  mend_cpus cpus;         /* where the opener and the writer thread run (set_thread_cpus) */
  atomic_int aux_opened;
  PGconn *aux_new;
  /* A ticking host's inbox look sent on aux and not yet taken (pg_aux.c): LOOK_SENT while its
   * answer is on the way, LOOK_KEPT once a blocking read on aux had to take it first. */
  int look_state;
  PGresult *look_res;
  double look_sent_at;    /* mend__pg_mono() as the look in flight went */
  /* where conn reached, written by whichever thread opened conn, read by aux's opening */
  pthread_mutex_t at_mu;
  pg_at writer_at;
  int writer_at_known;
  int conn_doomed;             /* the server said it ends conn's session (mend__pg_watch) */
  char *conninfo;
  char server[300];            /* host:port/dbname, for messages: never the password */
  char err[1536];
  int in_batch;                /* a transaction is open on conn */
  int batch_failed;
  int not_found;
  pg_log logs[2], *cur;
  /* Events recorded in batches (mend__pg_record_event) not known committed: those sent in the
   * open transaction, and those to send again at the head of the next flush because the
   * transaction that held them was rolled back (pg_batch.c). */
  pg_log tx_events, carry;
  pg_writer *w;
  unsigned long open_seq, durable_seq;
  void (*commit_hook)(const char *phase);
  int schema_version;
  int must_exist;   /* opened only if mend's schema is there (mend_store_open_existing) */
  int no_schema;    /* ... and it was not */
  char schema_name[64];  /* current_schema() as the schema was read: the wake-up channel's */
  /* The sandbox mark as the schema was read at open (meta.sandbox): the engine's open asks for
   * it next, and this answer is as fresh as a read then (pg_mark.c). mark_read: 1 until used. */
  int mark_read, mark_on;
  int sync_commit;             /* 1: synchronous_commit stays on (MEND_DURABILITY_FULL) */
  char *worker;                /* names the history rows this store writes */
  /* fence (pg_lease.c) */
  char *fence_owner;
  double fence_lease;
  double fence_until;          /* our lease lasts at least until then, by the monotonic clock */
  int fence_registered, fence_checking, fence_late, fence_late_always, repairing;
  mend_idset fence_checked, lost;
  char **lost_new;
  int nlost_new, caplost_new;
  struct pg_version *versions;
  int nversions, capversions, versions_committed;
  struct pg_wake *wake;        /* LISTEN/NOTIFY (pg_notify.c) */
  int tx_wake;                 /* the open transaction notifies at COMMIT; conn's owner's */
  int conn_lost;               /* the last failure was the connection's (mend__pg_conn_lost) */
  int rows_one_by_one;         /* this flush sends no statement of arrays that may fail: history
                                  rows one statement each, new steps' rows as puts (pg_batch.c) */
  int tx_savepoints;           /* set in the open transaction (pg_batch.c) */
  long writes_alone;           /* recorded writes sent one statement each, since the open: what
                                  test_pg_store_batches reads to see that the arrays took a batch */
  long steps_inserted;         /* step rows sent by plain insert (P_INSERT_STEPS), likewise */
  int busy_ms;                 /* how long a repair's look waits for a row (set_busy_wait) */
  int tx_conflict;             /* the server rolled the open batch back (a deadlock): SQLSTATE 40 */
  int write_wait_ms;           /* a writer's try's bound: PG_WRITE_WAIT_MS, or longer than the
                                  server's deadlock_timeout (pg.c's take_clock) */
  int lock_met;                /* the last failure (mend__pg_fail) met a lock_timeout: 55P03 */
  /* A try of a batch met another session's lock past its bound (pg_wait.c): SQLSTATE 55P03,
   * and the server's context of it (which row). */
  int on_writer;               /* the writer thread is flushing (its tries wait the full bound) */
  int tx_lock, tx_lock_ms;      /* tx_lock_ms: the bound the last flush's writes waited under */
  int tx_standing_ms;          /* lock_timeout of the open transaction between flushes (0: none) */
  char lock_context[512];
  /* A batch waits for another session's lock (mend_store_locked), and what holds it: the
   * message is written by whichever thread tried the batch, under wait_mu; wait_seen is the
   * loop's copy. */
  atomic_int waiting;
  atomic_int conn_pid;          /* conn's backend: what the writer's try waits for (pg_wait.c) */
  PGcancel *cancel;            /* conn's cancel key, under at_mu: a stop cancels a try */
  atomic_int stop_cancelled;   /* the stop sent it (pg_batch.c) */
  pthread_mutex_t wait_mu;
  char wait_msg[700], wait_seen[700];
  int view_failed;             /* the last view read on aux and failed: view_err says why */
  char view_err[1536];
  double retry_at, retry_delay;  /* reconnecting after the long try failed (pg_batch.c) */
  char retry_err[512];
  pg_reads *reads;             /* for the flush under way (mend__pg_sync_reads) */
  /* the runs claimed in the open transaction, their images read a chunk at a time */
  pg_pre *pre;
  int npre, cappre, pre_lo, pre_hi, pre_hint;
  unsigned long pre_seq;       /* open_seq of the transaction that claimed them */
  unsigned long tx_serial, pre_tx;   /* transactions begun on conn; the claim's */
} mend_pg;

#define PG(s) ((mend_pg *)(void *)(s))
/* How long a repair's look waits for a run's row another session holds, unless told. */
#define PG_BUSY_MS 5000
/* The least a look on a loop (a busy wait shorter than this: mend serve's 0.1 s) waits for a
 * run's row: another server's repair of the run holds it from its own look until its batch
 * commits, which on a loaded machine takes longer than 0.1 s: a look that gave up sooner
 * would answer 503 where the user relies on a 409 (docs/http-api.md). Below the server's
 * default deadlock_timeout (1 s), so that the look gives up before the server looks for a
 * deadlock it would be part of (pg_lease.c). */
#define PG_LOOP_LOOK_MS 500
/* How long one try of a batch on the writer thread waits for another session's lock before it
 * is rolled back and tried again (pg_wait.c); on the caller's thread, busy_ms if shorter.
 * Longer than the server's deadlock_timeout (1 s by default; write_wait_ms when the server's
 * is longer): in a deadlock the server picks the batch to roll back first. */
#define PG_WRITE_WAIT_MS 2000
/* How long a closing store waits for another session's lock: the writer thread's batch for
 * the try under way and no more, the lease given back this long (pg_wait.c). */
#define PG_CLOSE_WAIT_MS 1000
/* Opening the store (its schema read or made, its statements prepared) waits for a table
 * another session locked this long a try, and tries for PG_BUSY_MS in all (pg.c). */
#define PG_OPEN_TRY_MS 1000
#define PG_TEXT_OF_(x) #x
#define PG_TEXT_OF(x) PG_TEXT_OF_(x)

/* pg_wait.c */
/* SET back, as a session opens, the timeouts a role or database may set: none of them. */
extern const char *const mend__pg_session_sql;
int mend__pg_lock_timed_out(const PGresult *r);   /* SQLSTATE 55P03: a lock_timeout */
/* After a try that met the bound, on conn idle again: what holds the lock (context: the
 * server's context of the failure), told by the mark (mark), or as the batch's failure in err. */
void mend__pg_lock_note(mend_pg *p, PGconn *c, const char *context, int mark);
/* The same told in err from a failed statement's context alone (what: the statement's). */
void mend__pg_lock_told(mend_pg *p, const char *what, const char *context);
void mend__pg_lock_gone(mend_pg *p);
const char *mend__pg_lock_msg(mend_pg *p);
PGconn *mend__pg_view_aux(mend_pg *p);
/* The writer thread's job flushed and committed, tried again while another session's lock
 * holds it (until the store closes); and the caller's open batch flushed, likewise. */
int mend__pg_flush_writer(mend_pg *p, pg_log *job);
int mend__pg_flush_waiting(mend_pg *p, int begin);
/* mend__handoff_wait, bounded while the writer's batch waits for a lock: MEND_STORE_BUSY. */
int mend__pg_writer_wait_bounded(mend_pg *p);
void mend__pg_cancel_conn(mend_pg *p);
int mend__pg_locked(mend_store *s);
/* "table T is locked by session N (app)": a granted lock on a table of the schema that a
 * write conflicts with, held by another session, asked on c (idle). */
void mend__pg_table_holder(PGconn *c, char *out, size_t n);

/* pg.c */
void mend__pg_msg(char *buf, int len, const char *fmt, ...);
/* 1 when the server can take t as text (NULL too); 0 when it would refuse it (not UTF-8 on a
 * UTF8 connection), which means no row holds it: a read can answer "none" without asking.
 * Waits for the writer thread first, as a read does. */
int mend__pg_text_fits(mend_pg *p, const char *t);
int mend__pg_text_fits_on(PGconn *c, const char *t);
int mend__pg_utf8(const char *t);   /* RFC 3629's well-formed UTF-8 */
/* err = "<server>: <what>: <PostgreSQL's message>" (on one line); returns -1. */
int mend__pg_fail(mend_pg *p, PGconn *c, const PGresult *r, const char *what);
/* The same into err (errlen), naming server: for a connection whose messages are its own. */
int mend__pg_fail_to(char *err, int errlen, const char *server, PGconn *c, const PGresult *r,
                     const char *what);
/* Did the server roll the transaction back for its clash with another (SQLSTATE class 40: a
 * deadlock, 40P01, or a serialization failure)? Then nothing of it was written. */
int mend__pg_conflict(const PGresult *r);
double mend__pg_mono(void);
/* Runs a prepared statement (P_*) or, with q < 0, sql, on conn in the open transaction (or
 * none): the result (PQclear it), or NULL with err set and, in a batch, the batch failed. */
PGresult *mend__pg_run(mend_pg *p, int q, const char *sql, int n, const char *const *vals,
                       const char *what);
/* A one-off statement outside any batch on a connection: 0 or -1 (err). */
int mend__pg_exec(mend_pg *p, PGconn *c, const char *sql, const char *what);
/* The connection that writes, to where the URI says (err, server): its session set up and the
 * engine's clock set to the server's when this host's is far from it (timers.h). */
int mend__pg_connect(mend_pg *p, PGconn **out);
/* A connection to at (NULL: where the URI says), its failure told in err and the server it
 * reached named in server (not p's): 0, or -1. */
int mend__pg_connect_at(mend_pg *p, const pg_at *at, char *err, int errlen, char *server,
                        int serverlen, PGconn **out);
/* Where conn reached, kept for the side connections (any thread); and read: 1 if known. */
void mend__pg_note_writer_host(mend_pg *p, PGconn *c);
int mend__pg_writer_host(mend_pg *p, pg_at *at);
/* pg_aux.c */
/* aux ready for a blocking read: opened if need be (at most once a backoff while it fails), a
 * look in flight taken off the wire first: 0, or -1. */
int mend__pg_aux(mend_pg *p);
/* Starts opening aux on a thread, unless it is open, opening, or waiting out its backoff; the
 * next use takes it (a look sent ahead only once it is done, a blocking read waiting). */
void mend__pg_aux_open_soon(mend_pg *p);
void mend__pg_aux_close(mend_pg *p);
/* Prepared statement q read on aux (committed rows, no wait for the writer thread): its result
 * (to check: the connection may be gone), no rows where a value cannot be text there (it is in
 * no row), or NULL when aux cannot be opened. */
PGresult *mend__pg_aux_read(mend_pg *p, int q, int n, const char *const *v);
/* mend_store_last_event among committed rows, on aux: 0, or -1 (read it another way). */
int mend__pg_aux_last_event(mend_pg *p, long long *seq);
void mend__pg_watch(mend_pg *p);   /* conn_doomed from conn's notices */

/* pg_batch.c: before any statement but a recorded write (reads see the open batch). */
int  mend__pg_sync(mend_pg *p);
/* mend__pg_sync with reads after the writes, in the same round trip: 0 sent and taken; 1 not
 * sent, for no batch is open and nothing was recorded (the caller reads by itself); -1 error
 * (a read that failed fails the batch, as any statement of it). */
int  mend__pg_sync_reads(mend_pg *p, pg_reads *r);
int  mend__pg_writer_wait(mend_pg *p);      /* the connection is the caller's: 0, or -1 */
/* Sends log's writes in the open transaction (begun if need be, or if `begin`), COMMIT after
 * them with `commit`; empties the log: 0, -1 (the batch rolled back), or MEND_STORE_BUSY (another
 * session's lock past the bound, in a transaction it began: nothing written, the log kept). */
int  mend__pg_flush(mend_pg *p, pg_log *log, int commit, int begin);
int  mend__pg_begin(mend_pg *p);            /* opens the transaction (fenced): 0 or -1 */
void mend__pg_rollback(mend_pg *p);
void mend__pg_rec_begin(mend_pg *p, int q);
void mend__pg_rec_text(mend_pg *p, const char *t);
void mend__pg_rec_int(mend_pg *p, long long i);
void mend__pg_rec_real(mend_pg *p, double d);
void mend__pg_rec_opt_real(mend_pg *p, double d);   /* < 0: NULL */
int  mend__pg_rec_end(mend_pg *p);
void mend__pg_log_free(pg_log *log);
void mend__pg_log_clear(pg_log *log);   /* empty, its memory kept */
/* Appends src's records of statement q (every record when q < 0) to dst, values copied; out of
 * memory: dst->oom. */
void mend__pg_log_keep(pg_log *dst, const pg_log *src, int q);
void mend__pg_stop_writer(mend_pg *p);

/* pg_lease.c */
int  mend__pg_fence_begin(mend_pg *p);      /* in a transaction just begun */
int  mend__pg_fence_check(mend_pg *p, const pg_log *log);   /* late: which runs are lost */
int  mend__pg_fence_drops(mend_pg *p, const pg_log *log, const pg_rec *r);
void mend__pg_renewed(mend_pg *p, double sent_at, double lease_seconds);
int  mend__pg_lease_at_least(mend_pg *p, const char *owner, double lease_seconds);
void mend__pg_ours_again(mend_pg *p, const char *id);

#ifdef MEND_FAILPOINTS
/* A crash-test failpoint armed by an environment variable naming N: hit on its Nth look in
 * this process (pg_batch.c). */
typedef struct pg_failpoint {
  const char *env;
  long at, seen;   /* at: -1 until the variable is read, 0 when unset */
} pg_failpoint;
int mend__pg_failpoint_hit(pg_failpoint *fp);
#endif

/* pg_arrays.c: a batch's rows of one kind as one statement of arrays */
#define PG_ARRAY_COLS 18
#define PG_RUN_COLS 11       /* P_INSERT_RUN's values, P_INSERT_RUNS' arrays */
#define PG_RUN_UPDATE_COLS 6 /* P_UPDATE_RUN's values, P_UPDATE_RUNS' arrays */
#define PG_HISTORY_COLS 13   /* P_APPEND_HISTORY's values, P_APPEND_HISTORIES' arrays */
#define PG_STEP_COLS 18      /* P_PUT_STEP's values, P_PUT_STEPS' arrays */
enum { PG_TAKE_ALONE, PG_TAKE_HISTORY, PG_TAKE_STEP, PG_TAKE_SUPERSEDED, PG_TAKE_RUN,
       PG_TAKE_RUN_UPDATE, PG_TAKE_NEW_STEP };
/* A column whose rows all have one value so far is kept as that value (one, in the log's text)
 * and written out as an array only when a row differs (varied): it goes as the value alone. */
typedef struct pg_arrays {
  char *a[PG_ARRAY_COLS];
  size_t len[PG_ARRAY_COLS], cap[PG_ARRAY_COLS];
  const char *one[PG_ARRAY_COLS];
  unsigned char varied[PG_ARRAY_COLS];
  int ncols, n, oom;
} pg_arrays;
typedef struct pg_batch_arrays {
  unsigned char *take;   /* PG_TAKE_ of each record of the log */
  pg_arrays runs, run_updates, new_steps, steps, hist;   /* in the order they are sent */
  int nhist;             /* history rows the plan takes */
  int nnew_steps;        /* step rows it inserts plainly */
  int bad;               /* PG_PLAN_WIDTH: the record */
} pg_batch_arrays;
#define PG_BATCH_ARRAYS 5
/* A record of a kind the arrays take whose number of values is not its statement's: the
 * code that records it and the arrays' columns disagree, a programming error. */
#define PG_PLAN_WIDTH (-2)
/* `may_fail`: statements of arrays that may fail where the rows one by one would not go (history
 * rows, and new step rows inserted plainly: P_INSERT_STEPS); without it they go alone, or with
 * the step puts that replace. 0; -1 out of memory; PG_PLAN_WIDTH (bad). */
int  mend__pg_arrays_plan(pg_batch_arrays *b, const pg_log *log, int may_fail);
int  mend__pg_arrays_take(pg_batch_arrays *b, const pg_log *log, int k);   /* 1: in arrays */
/* How many values a record of statement q has when the arrays may take it; -1 for any other q. */
int  mend__pg_arrays_width(int q);
/* The statement's 2 * ncols values: column c's array at v[c], its one value at v[ncols + c]
 * (pg_schema.c's ARR and COL). NULL: out of memory. */
const char **mend__pg_arrays_end(pg_arrays *a, const char **v);
void mend__pg_arrays_free(pg_batch_arrays *b);

/* pg_schema.c */
int mend__pg_schema(mend_pg *p);   /* creates, upgrades, checks: 0, -1 or MEND_STORE_BUSY */
/* bounded: a table another session locked is waited for PG_OPEN_TRY_MS (MEND_STORE_BUSY). */
int mend__pg_prepare(mend_pg *p, PGconn *c, int bounded);
int mend__pg_prepare_to(PGconn *c, char *err, int errlen, const char *server, int bounded);

/* The methods (store.h's table of them is filled in pg.c), by file. */
/* pg.c */
const char *mend__pg_errmsg(mend_store *s);
int mend__pg_not_found(const mend_store *s);
int mend__pg_schema_version(mend_store *s);
int mend__pg_sandbox_mark(mend_store *s, int set);
void mend__pg_close(mend_store *s);
/* pg_batch.c */
int mend__pg_start_writer(mend_store *s, void (*done)(void *ud), void *ud);
void mend__pg_set_thread_cpus(mend_store *s, const mend_cpus *cpus);
int mend__pg_commit(mend_store *s);
int mend__pg_hand_off(mend_store *s);
int mend__pg_writer_busy(mend_store *s);
int mend__pg_batch_open(mend_store *s);
int mend__pg_batch_writes(const mend_store *s);
unsigned long mend__pg_open_seq(const mend_store *s);
unsigned long mend__pg_durable_seq(const mend_store *s);
void mend__pg_set_commit_hook(mend_store *s, void (*hook)(const char *phase));
/* pg_lease.c */
int mend__pg_set_fence(mend_store *s, const char *owner, double lease_seconds);
int mend__pg_fence_news(mend_store *s, void (*lost)(void *ud, const char *id), void *ud);
void mend__pg_repairing(mend_store *s, int on);
int mend__pg_add_lost(mend_store *s, const char *id);
json_t *mend__pg_held(mend_store *s);
void mend__pg_fence_verified(mend_store *s);
void mend__pg_set_worker(mend_store *s, const char *worker);
int mend__pg_claimable(mend_store *s, const char *owner, int thorough);
json_t *mend__pg_claim(mend_store *s, const char *owner, double lease_seconds, int limit, int how);
int mend__pg_renew(mend_store *s, const char *owner, double lease_seconds);
int mend__pg_release(mend_store *s, const char *id, const char *owner);
int mend__pg_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                   double *lease_left);
json_t *mend__pg_lease_holders(mend_store *s);
int mend__pg_release_owner(mend_store *s, const char *owner);
int mend__pg_take(mend_store *s, const char *id, const char *owner, double lease_seconds);
void mend__pg_set_busy_wait(mend_store *s, int ms);
int mend__pg_hold_status(mend_store *s, const char *id, const char *status, char *found, int len);
/* pg_ops.c */
int mend__pg_version_number(mend_store *s, const mend_run_rec *r, long long *id);
int mend__pg_insert_run(mend_store *s, const mend_run_rec *r);
int mend__pg_update_run(mend_store *s, const char *id, const char *status, const char *error,
                        int attention, double updated, const char *reason);
int mend__pg_put_step(mend_store *s, const mend_step_rec *st);
int mend__pg_update_step(mend_store *s, const mend_step_rec *st);
int mend__pg_append_history(mend_store *s, const mend_history_rec *h);
int mend__pg_put_breaker(mend_store *s, const char *key, const mend_breaker *b, double updated);
int mend__pg_put_dlq(mend_store *s, const mend_dlq_rec *d);
int mend__pg_set_unavailable(mend_store *s, const char *id, const char *why);
int mend__pg_move_run(mend_store *s, const char *id, long long version_id, int keep_steps);
int mend__pg_dlq_remove(mend_store *s, const char *run_id);
int mend__pg_request_cancel(mend_store *s, const char *run_id);
int mend__pg_audit(mend_store *s, double at, const char *who, const char *op,
                   const char *target, const char *detail);
json_t *mend__pg_cancel_requests(mend_store *s, const char *owner);
int mend__pg_cancels_requested(mend_store *s, const char *owner);
long mend__pg_last_history(mend_store *s, const char *run_id, double *at);
long mend__pg_last_history_seq(mend_store *s, const char *run_id);
char *mend__pg_version_script(mend_store *s, const char *workflow, const char *version,
                              char **source);
int mend__pg_find_run_key(mend_store *s, const char *run_key, char *id_out, int id_len);
int mend__pg_find_key_result(mend_store *s, const char *idem_key, char **result_out, char *run_out,
                             int run_len);
int mend__pg_get_breaker(mend_store *s, const char *key, mend_breaker *b);
int mend__pg_send_event(mend_store *s, const char *run_id, const char *name,
                        const char *payload, const char *key, double sent, const char *who);
int mend__pg_next_event(mend_store *s, const char *run_id, const char *name, long long *seq,
                        char **payload, char **key);
int mend__pg_record_event(mend_store *s, const char *run_id, const char *name,
                          const char *payload, const char *key, double sent, const char *who);
int mend__pg_next_committed_event(mend_store *s, const char *run_id, const char *name,
                                  long long *seq, char **payload, char **key);
void mend__pg_open_committed_reads(mend_store *s, int batch);
int mend__pg_look_ahead(mend_store *s, int n, const char *const *run_ids, const char *const *names);
int mend__pg_look_ahead_take(mend_store *s, int wait,
                             void (*fn)(void *ud, const char *run_id, const char *name,
                                        long long seq, const char *payload, const char *key),
                             void *ud);
int mend__pg_consume_event(mend_store *s, const char *run_id, long long seq, const char *step,
                           double at);
long long mend__pg_last_event(mend_store *s);
int mend__pg_event_sent(mend_store *s, long long seq, double *sent);
long long mend__pg_events_after(mend_store *s, long long after, int limit,
                                void (*fn)(void *ud, const char *run_id), void *ud);

#define PG_TEXT(r, row, col) (PQgetisnull((r), (row), (col)) ? NULL : PQgetvalue((r), (row), (col)))

/* pg_tokens.c: completion tokens and child runs */
int mend__pg_put_token(mend_store *s, const char *digest, const char *run_id, const char *step,
                       int attempt, double made);
int mend__pg_token_of_attempt(mend_store *s, const char *run_id, const char *step, int attempt,
                              char **digest);
json_t *mend__pg_token(mend_store *s, const char *digest);
int mend__pg_use_token(mend_store *s, const char *digest, const char *outcome, double at);
int mend__pg_set_parent(mend_store *s, const char *id, const char *parent,
                        const char *parent_step);
json_t *mend__pg_children(mend_store *s, const char *parent);
int mend__pg_child_end(mend_store *s, const char *child, const char *name, const char *payload,
                       const char *key, double sent);
int mend__pg_reopen_run(mend_store *s, const char *id, const char *reason, const char *owner,
                        double at);

/* pg_notify.c: wake-ups. notify_args fills the values of notify_sql (0: none to send). */
int  mend__pg_wake_init(mend_pg *p);
void mend__pg_wake_free(mend_pg *p);
extern const char *const mend__pg_notify_sql;
int  mend__pg_notify_args(const mend_pg *p, const char *v[2]);
int  mend__pg_wake_fd(mend_store *s, int *opened);
int  mend__pg_wake_take(mend_store *s);
/* 1 once after a failure that was the connection's: nothing of that batch is known to be
 * committed, and the next batch reconnects. */
int  mend__pg_conn_lost(mend_store *s);
void mend__pg_quiet(void *arg, const PGresult *r);   /* a notice receiver that drops them */

/* pg_serve.c: pages and counts of runs (mend serve) */
json_t *mend__pg_runs_page(mend_store *s, const char *status, const char *workflow,
                           double since, double after_created, const char *after_id,
                           int limit);
json_t *mend__pg_run_counts(mend_store *s);
/* pg_image.c: a run's image for the engine, in one round trip; a claim's runs' images read
 * together. pre_claimed keeps the ids a claim returned (column 0 of r); pre_forget drops what
 * a statement q (its first value v0) may change of the images read ahead; pre_clear drops all. */
int mend__pg_run_image(mend_store *s, const char *id, mend_run_image *img);
void mend__pg_pre_claimed(mend_pg *p, const PGresult *r);
void mend__pg_pre_forget(mend_pg *p, int q, const char *v0);
void mend__pg_pre_clear(mend_pg *p);

#endif
