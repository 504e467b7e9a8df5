/*
 * writer: how the store writes. Owns the write log (a step's writes recorded with their values
 * and run as statements at the next flush, in the order written), the writer thread that
 * commits handed-off batches while the loop goes on, and the write operations themselves.
 * Must never: let a read miss a write recorded before it; report a batch durable before its
 * COMMIT returned.
 */
#define _GNU_SOURCE   /* mremap */
#include "store_int.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include "walvfs.h"

/* ---- the write log and the writer thread ------------------------------------------------ */

static const char *const record_what[Q__COUNT] = {
  [Q_INSERT_RUN] = "insert run", [Q_INSERT_RUN_KEY] = "insert run",
  [Q_INSERT_RUN_NEWV] = "insert run", [Q_PUT_VERSION] = "number a workflow version",
  [Q_KEEP_SCRIPT] = "keep a workflow version's script",
  [Q_KEEP_SCRIPT_NEWV] = "keep a workflow version's script",
  [Q_UPDATE_RUN] = "update run", [Q_PUT_STEP] = "put step",
  [Q_UPDATE_STEP] = "update step", [Q_APPEND_HISTORY] = "append history",
  [Q_HISTORY_GROUP] = "append history",
  [Q_PUT_BREAKER] = "put breaker", [Q_PUT_DLQ] = "put dlq", [Q_RENEW] = "renew the lease",
  [Q_CONSUME_EVENT] = "consume an event",
  [Q_SEND_EVENT] = "send an event", [Q_SEND_EVENT_KEY] = "send an event",
  [Q_AUDIT] = "append audit", [Q_DLQ_REMOVE] = "remove from dlq",
  [Q_REQUEST_CANCEL] = "request cancel", [Q_SET_UNAVAILABLE] = "mark a run unavailable",
  [Q_CHILD_END] = "tell a parent its child ended",
};

/* A log's arrays live in pages of their own (mmap), not in the heap: a burst grows them to
 * megabytes, and the heap would keep that memory once they are given back (300 B per parked
 * run in W4), while munmap returns it at once. */
static void *pages_resize(void *p, size_t old_bytes, size_t new_bytes) {
  void *q = p ? mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE)
              : mmap(NULL, new_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return q == MAP_FAILED ? NULL : q;
}

static void pages_free(void *p, size_t bytes) {
  if (p) munmap(p, bytes);
}

static int grow(void **p, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int n = *cap ? *cap * 2 : 1024;
  while (n < need) n *= 2;
  void *q = pages_resize(*p, (size_t)*cap * size, (size_t)n * size);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

void mend__log_free(wlog *log) {
  pages_free(log->recs, (size_t)log->caprec * sizeof *log->recs);
  pages_free(log->vals, (size_t)log->capval * sizeof *log->vals);
  pages_free(log->text, log->captext);
  memset(log, 0, sizeof *log);
}

/* Starts a record of statement q in the current log; its values follow in order. */
void mend__rec_begin(mend_store *s, int q) {
  wlog *log = s->cur;
  if (grow((void **)&log->recs, &log->caprec, log->nrec + 1, sizeof *log->recs)) {
    log->oom = 1;
    return;
  }
  log->recs[log->nrec++] = (wrec){q, log->nval, 0, s->repairing};
}

/* A value's place when the log's array is full (one value in thousands), or NULL. */
static __attribute__((noinline)) wval *rec_value_grown(mend_store *s) {
  wlog *log = s->cur;
  if (log->oom || grow((void **)&log->vals, &log->capval, log->nval + 1, sizeof *log->vals)) {
    log->oom = 1;
    return NULL;
  }
  log->recs[log->nrec - 1].n++;
  return &log->vals[log->nval++];
}

/* The next value's place in the record begun last, or NULL. Inlined: about ninety values a
 * W9 run, where the call was a third of what placing one cost. */
static inline wval *rec_value(mend_store *s) {
  wlog *log = s->cur;
  if (__builtin_expect(log->nval < log->capval && !log->oom, 1)) {
    log->recs[log->nrec - 1].n++;
    return &log->vals[log->nval++];
  }
  return rec_value_grown(s);
}

void mend__rec_text(mend_store *s, const char *t) {
  wval *v = rec_value(s);
  if (!v) return;
  if (!t) { v->type = V_NULL; return; }
  wlog *log = s->cur;
  size_t n = strlen(t);
  if (n > INT_MAX) { log->oom = 1; v->type = V_NULL; return; }   /* no bigger text binds */
  if (log->ntext + n + 1 > log->captext) {
    size_t cap = log->captext ? log->captext * 2 : 65536;
    while (cap < log->ntext + n + 1) cap *= 2;
    char *text = pages_resize(log->text, log->captext, cap);
    if (!text) { log->oom = 1; v->type = V_NULL; return; }
    log->text = text;
    log->captext = cap;
  }
  memcpy(log->text + log->ntext, t, n + 1);
  *v = (wval){.type = V_TEXT, .len = (unsigned)n, .off = log->ntext};
  log->ntext += n + 1;
}

/* The store's worker, named when the row is written (bind_worker): no text kept. */
static void rec_worker(mend_store *s) {
  wval *v = rec_value(s);
  if (v) *v = s->worker ? (wval){.type = V_WORKER} : (wval){.type = V_NULL};
}

void mend__rec_int(mend_store *s, sqlite3_int64 i) {
  wval *v = rec_value(s);
  if (v) *v = (wval){.type = V_INT, .i = i};
}

/* A label's code: as its digits if they are at hand (code_digits), else as a number. */
static void rec_code(mend_store *s, int code) {
  wval *v = rec_value(s);
  if (v) *v = (wval){.type = code >= 0 && code < LABELS_MAX ? V_CODE : V_INT, .i = code};
}

void mend__rec_real(mend_store *s, double d) {
  wval *v = rec_value(s);
  if (v) *v = (wval){.type = V_REAL, .d = d};
}

static void rec_opt_real(mend_store *s, double d) {
  wval *v = rec_value(s);
  if (v) *v = d < 0 ? (wval){.type = V_NULL} : (wval){.type = V_REAL, .d = d};
}

int mend__fence_drops(mend_store *s, const wlog *log, const wrec *r);
void mend__renewed(mend_store *s, const wlog *log, const wrec *r);

/* The worker's number (batch_begin got it); its name if the number could not be had. */
static int bind_worker(const mend_store *s, sqlite3_stmt *q, int i) {
  if (s->worker_id)
    return sqlite3_bind_text(q, i, s->worker_digits, s->worker_ndigits, SQLITE_STATIC);
  return s->worker ? sqlite3_bind_text(q, i, s->worker, -1, SQLITE_STATIC)
                   : sqlite3_bind_null(q, i);
}

static const char *const code_digits[] = {
  "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
  "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32",
  "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46", "47", "48",
  "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61", "62", "63",
};
/* a code below LABELS_MAX has its digits here, one or two of them (bind_values) */
_Static_assert(sizeof code_digits / sizeof *code_digits == LABELS_MAX && LABELS_MAX <= 100,
               "code_digits holds the codes below LABELS_MAX");

/* Value v as parameter i of q, as a value of `type`. */
static int bind_one(const mend_store *s, sqlite3_stmt *q, const wlog *log, const wval *v,
                    int type, int i) {
  switch (type) {
  case V_INT: return sqlite3_bind_int64(q, i, v->i);
  case V_REAL: return sqlite3_bind_double(q, i, v->d);
  case V_TEXT: return sqlite3_bind_text(q, i, log->text + v->off, (int)v->len, SQLITE_STATIC);
  case V_WORKER: return bind_worker(s, q, i);
  case V_CODE: return sqlite3_bind_text(q, i, code_digits[v->i], v->i < 10 ? 1 : 2, SQLITE_STATIC);
  default: return sqlite3_bind_null(q, i);
  }
}

static int bind_values(const mend_store *s, sqlite3_stmt *q, const wlog *log, const wrec *r,
                       int at, int null_last) {
  int rc = SQLITE_OK;
  for (int j = 0; j < r->n; j++) {
    const wval *v = &log->vals[r->first + j];
    BIND(bind_one(s, q, log, v, null_last && j == r->n - 1 ? V_NULL : v->type, at + j + 1));
  }
  return rc;
}

/* A parameter, as far as binding it again can be skipped: NULL (zero: a new statement's), a
 * label's code, the worker by its number, an integer; any other value is bound each time (its
 * text lives in a log that is reused). Half of a history row's values are one of these, most
 * often what the same parameter held in the group before, and so are most of a run's and a
 * step's (their NULL error, key and times, their zero counts): a bind is about 150
 * instructions, and a W9 run bound about ninety. */
enum { SLOT_NULL, SLOT_CODE, SLOT_WORKER, SLOT_INT, SLOT_OTHER };

/* Binds a record's values to q from parameter at + 1 on, skipping those that the same
 * parameter holds already by `slots` (what each parameter of q holds now; q's bindings are
 * never cleared, and nothing else binds it). */
static int bind_kept(mend_store *s, sqlite3_stmt *q, const wlog *log, const wrec *r,
                     struct group_slot *slots, int at) {
  int rc = SQLITE_OK;
  for (int j = 0; j < r->n && rc == SQLITE_OK; j++) {
    const wval *v = &log->vals[r->first + j];
    struct group_slot *slot = &slots[at + j];
    unsigned char kind = SLOT_OTHER;
    sqlite3_int64 val = 0;
    if (v->type == V_CODE) kind = SLOT_CODE, val = v->i;
    else if (v->type == V_WORKER && s->worker_id) kind = SLOT_WORKER, val = s->worker_id;
    else if (v->type == V_INT) kind = SLOT_INT, val = v->i;
    else if (v->type == V_NULL) kind = SLOT_NULL;
    if (kind != SLOT_OTHER && slot->kind == kind && slot->val == val) continue;
    rc = bind_one(s, q, log, v, v->type, at + j + 1);
    /* a bind that failed may have left the parameter NULL or as it was */
    *slot = (struct group_slot){rc == SQLITE_OK ? kind : SLOT_OTHER, val};
  }
  return rc;
}

/* The slots of statement k if its parameters are bound by bind_kept (the statements of runs'
 * and steps' rows, every parameter a value of the record), else NULL. */
static struct group_slot *kept_slots(mend_store *s, int k) {
  switch (k) {
  case Q_INSERT_RUN: return s->row_slots[0];
  case Q_INSERT_RUN_KEY: return s->row_slots[1];
  case Q_INSERT_RUN_NEWV: return s->row_slots[2];
  case Q_UPDATE_RUN: return s->row_slots[3];
  case Q_PUT_STEP: return s->row_slots[4];
  case Q_UPDATE_STEP: return s->row_slots[5];
  default: return NULL;
  }
}

/* Binds a record's values to q, and NULL to any parameter past them, so that no value of an
 * earlier record stays bound (flush_log resets without clearing: 3% of the writer thread).
 * With null_last, its last value as NULL. The first failing result code, if any. */
static int bind_record(const mend_store *s, sqlite3_stmt *q, const wlog *log, const wrec *r,
                       int null_last) {
  int rc = SQLITE_OK;
  for (int j = r->n; j < sqlite3_bind_parameter_count(q); j++) BIND(sqlite3_bind_null(q, j + 1));
  BIND(bind_values(s, q, log, r, 0, null_last));
  return rc;
}

/* Binds record r to statement k (k's bindings kept, r->n its parameters): only the values that
 * changed. */
static int bind_row(mend_store *s, int k, const wlog *log, const wrec *r) {
  struct group_slot *slots = kept_slots(s, k);
  sqlite3_stmt *q = s->q[k];
  if (slots && r->n == sqlite3_bind_parameter_count(q) && r->n <= ROW_VALUES)
    return bind_kept(s, q, log, r, slots, 0);
  if (slots)   /* bound whole: what the slots say is no longer known */
    for (int j = 0; j < ROW_VALUES; j++) slots[j].kind = SLOT_OTHER;
  return bind_record(s, q, log, r, 0);
}

/* One history row. Its number taken (another process wrote to the run's history): the next
 * free one. */
static int append_one(mend_store *s, const wlog *log, const wrec *r) {
  sqlite3_stmt *q = s->q[Q_APPEND_HISTORY];
  if (mend__run_bound(s, q, bind_record(s, q, log, r, 0), record_what[r->q], 1) != 0) return -1;
  if (sqlite3_changes(s->db) > 0) return 0;
  return mend__run_bound(s, q, bind_record(s, q, log, r, 1), record_what[r->q], 1);
}

/* Numbered history rows one by one, in order (a group not full, or the rest of one that a
 * taken number stopped). */
static int append_each(mend_store *s, const wlog *log, const int *ks, int n) {
  for (int g = 0; g < n; g++)
    if (append_one(s, log, &log->recs[ks[g]]) != 0) return -1;
  return 0;
}

/* HISTORY_GROUP numbered rows in one statement. Should one of their numbers be taken (another
 * process wrote to the run's history), the statement stops there (OR FAIL), the rows before
 * it written, and the rest go one by one (append_one), so that a run's rows stay in the order
 * recorded: those written have their own numbers, lower than any the rest are given. */
static int append_group(mend_store *s, const wlog *log, const int *ks) {
  sqlite3_stmt *q = s->q[Q_HISTORY_GROUP];
  int rc = SQLITE_OK;
  for (int g = 0; g < HISTORY_GROUP; g++)
    BIND(bind_kept(s, q, log, &log->recs[ks[g]], s->group_slots, g * HISTORY_VALUES));
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  int taken = rc != SQLITE_DONE && sqlite3_extended_errcode(s->db) == SQLITE_CONSTRAINT_PRIMARYKEY;
  int written = taken ? sqlite3_changes(s->db) : 0;   /* the rows before the one taken */
  if (rc != SQLITE_DONE && !taken) mend__sql_err(s, record_what[Q_HISTORY_GROUP]);
  sqlite3_reset(q);
  if (rc == SQLITE_DONE) return 0;
  if (!taken || written < 0 || written >= HISTORY_GROUP) {
    s->batch_failed = 1;
    return -1;
  }
  return append_each(s, log, ks + written, HISTORY_GROUP - written);
}

/* A record that can go in a group: a history row of the usual shape with its number. */
static int groupable(const wlog *log, const wrec *r) {
  return r->q == Q_APPEND_HISTORY && r->n == HISTORY_VALUES &&
         log->vals[r->first + 12].type == V_INT && log->vals[r->first + 2].type == V_REAL;
}

static void log_clear(wlog *log) {
  log->nrec = log->nval = 0;
  log->ntext = 0;
  log->oom = 0;
}

/* A record of a run whose keyed insert found its key taken, in this batch: the run is not
 * there, and the key's run is another's (mend__sqlite_insert_run). */
static int of_key_taken(const mend_store *s, const wlog *log, const wrec *r) {
  const wval *v = &log->vals[r->first];
  if (r->q == Q_PUT_BREAKER || r->q == Q_RENEW || r->n == 0 || v->type != V_TEXT) return 0;
  return mend_idset_has(&s->key_taken, log->text + v->off, v->len);
}

/* Runs the statements of `log` in the open transaction (begun if need be), then empties it;
 * or, if the transaction cannot begin for another connection's lock, runs none of them and
 * keeps them (MEND_STORE_BUSY). */
static int flush_log(mend_store *s, wlog *log) {
  int ok = 1;
  if (!s->in_batch && s->key_taken.count) mend_idset_clear(&s->key_taken);   /* a new batch */
  if (log->oom) {
    mend__set_msg(s->err, sizeof s->err, "%s: recording a write: out of memory", s->path);
    s->batch_failed = 1;
    ok = 0;
  } else if (log->nrec) {
    int begun = mend__batch_begin(s);
    if (begun == MEND_STORE_BUSY) return begun;   /* the log is kept for the next try */
    if (begun != 0) ok = 0;
  }
  /* Numbered history rows wait for a group; nothing else in a batch reads history, and their
   * numbers, not their order, place them. A row without a number (the next free one) goes
   * after those before it. */
  int group[HISTORY_GROUP], ng = 0;
  for (int k = 0; ok && k < log->nrec; k++) {
    const wrec *r = &log->recs[k];
    if (s->key_taken.count && of_key_taken(s, log, r)) continue;
    int drop = mend__fence_drops(s, log, r);
    if (drop) {
      if (drop < 0) ok = 0;
      continue;
    }
    if (groupable(log, r)) {
      group[ng++] = k;
      if (ng == HISTORY_GROUP) {
        if (append_group(s, log, group) != 0) ok = 0;
        ng = 0;
      }
      continue;
    }
    sqlite3_stmt *q = s->q[r->q];
    if (r->q == Q_APPEND_HISTORY) {
      if (ok && append_each(s, log, group, ng) != 0) ok = 0;
      ng = 0;
      if (ok && append_one(s, log, r) != 0) ok = 0;
    } else if (mend__run_bound(s, q, bind_row(s, r->q, log, r), record_what[r->q], 1) != 0) {
      ok = 0;
    } else if (r->q == Q_RENEW) {
      mend__renewed(s, log, r);
    } else if ((r->q == Q_INSERT_RUN_KEY || r->q == Q_INSERT_RUN_NEWV) &&
               sqlite3_changes(s->db) == 0) {
      const wval *id = &log->vals[r->first];
      if (log->vals[r->first + 2].type != V_TEXT) {   /* no key: its version's row is missing */
        mend__set_msg(s->err, sizeof s->err, "%s: insert run: its workflow version is not "
                      "recorded", s->path);
        s->batch_failed = 1;
        ok = 0;
      } else if (mend_idset_add(&s->key_taken, log->text + id->off, id->len) < 0) {
        mend__set_msg(s->err, sizeof s->err, "%s: insert run: out of memory", s->path);
        s->batch_failed = 1;
        ok = 0;
      }
    } else if (r->q == Q_SEND_EVENT_KEY) {
      mend__event_outcome(s, r->repair, sqlite3_changes(s->db) != 0);
    } else if ((r->q == Q_UPDATE_RUN || r->q == Q_UPDATE_STEP || r->q == Q_CONSUME_EVENT) &&
               sqlite3_changes(s->db) == 0) {
      /* An update that changes nothing would lose a transition silently; an event found
       * consumed already would be consumed twice. */
      const wval *id = &log->vals[r->first];
      mend__set_msg(s->err, sizeof s->err, "%s: %s: no %s %s", s->path, record_what[r->q],
                    r->q == Q_UPDATE_RUN    ? "run"
                    : r->q == Q_UPDATE_STEP ? "step of run"
                                            : "unconsumed event of run",
                    id->type == V_TEXT ? log->text + id->off : "(null)");
      s->batch_failed = 1;
      ok = 0;
    }
  }
  if (ok && append_each(s, log, group, ng) != 0) ok = 0;
  /* What a burst grew is given back once batches are small again (or the engine is idle:
   * mend_store_trim), so that memory once the runs wait is what they need; not while the
   * burst goes on, where each batch would fault its pages in again and each unmap stop the
   * other core for a TLB shootdown (W1 10k full: 38k -> 55k steps/s). */
  if (log->caprec > 4096 && log->nrec < log->caprec / 8) mend__log_free(log);
  log_clear(log);
  return ok ? 0 : -1;
}

/* A log holds at most this many records: a burst larger than that (a host starting 100k runs
 * in one turn) is written in parts, in the same batch, rather than held all in memory. At most
 * about 14 MB of values (16 B each, ~13 a record) besides their text. */
#define LOG_MAX_RECORDS 65536

/* A part of the open batch goes to an idle writer thread every this many records: the
 * thread runs statements while the loop records more, rather than wait for the whole batch.
 * Without, in a W1 burst each thread idled a quarter of the time, one waiting for the other. */
#define PART_RECORDS 1024

static int pass_part(mend_store *s);
static int writer_idle(mend_store *s);

/* Ends a record: without a writer thread it runs now, as every write did before there was one;
 * with one, a record that could not be kept fails now, and a full log goes to the thread. */
int mend__rec_end(mend_store *s) {
  /* With a writer thread, batch_failed is the thread's: a failure is heard through
   * writer_wait (sync_point, pass_part). */
  /* While another connection holds the lock, writes are only recorded: the commit that
   * follows it runs them, rather than each write waiting for the lock. */
  if (!s->w) return s->batch_failed ? -1 : atomic_load(&s->locked) ? 0 : mend__sync_point(s);
  if (s->cur->oom) return mend__sync_point(s);
  if (s->cur->nrec >= LOG_MAX_RECORDS) return pass_part(s);
  if (s->cur->nrec % PART_RECORDS == 0 && writer_idle(s)) return pass_part(s);
  return 0;
}

/* A batch that cannot begin for another connection's lock is tried again, after 50 ms, then
 * twice as long each time up to 1 s, for as long as the lock lasts: this thread may wait, the
 * loop goes on recording the next batch. Once the store is closing it tries for
 * BUSY_TIMEOUT_MS more, then gives the batch up (as a crash would: nothing in it was acted on). */
static int writer_flush(mend_store *s, wlog *job) {
  writer *w = s->w;
  double delay = 0.05, give_up = -1;
  int rc;
  while ((rc = flush_log(s, job)) == MEND_STORE_BUSY) {
    pthread_mutex_lock(&w->mu);
    mend__handoff_tell(w);   /* the loop warns while it lasts (mend_store_locked) */
    if (w->stop && give_up < 0) give_up = mend__now_mono() + BUSY_TIMEOUT_MS / 1000.0;
    if (give_up >= 0 && mend__now_mono() >= give_up) {
      pthread_mutex_unlock(&w->mu);
      log_clear(job);
      return -1;
    }
    mend__handoff_nap(w, &delay);
  }
  return rc;
}

/* On the writer thread: a batch written and committed, or a part of one written. w_part is
 * read without the lock: it is set before the job is handed over and changed only by
 * writer_settle, on this thread. */
static int writer_write(void *store, void *job) {
  mend_store *s = store;
  int part = s->w_part;
  mend__ckpt_between_batches(s);
  int rc = writer_flush(s, job);
  if (!part) {
    int committed = mend__commit_batch(s);   /* rolls back if the flush failed */
    if (rc == 0) rc = committed;       /* (a BEGIN that failed left nothing to roll back) */
    if (committed == 0) mend__ckpt_after_commit(s);
  } else if (rc != 0) {
    mend__rollback(s);   /* the batch is lost: its write lock is not kept for the rest */
  }
  return rc;
}

/* With the writer's lock held, after a job: the rest of a batch whose part was written. */
static void *writer_settle(void *store, int rc) {
  (void)rc;
  mend_store *s = store;
  writer *w = s->w;
  wlog *next = s->w_part ? s->w_next : NULL;
  s->w_next = NULL;
  s->w_part = 0;
  if (next && w->failed) {
    log_clear(next);   /* the rest of a failed batch is never written on its own */
    return NULL;
  }
  if (next) w->job_seq = s->w_next_seq;   /* it came while its part was written: on with it */
  return next;
}

/* With the writer's lock held and the writer idle: its last batch, if it committed, is durable. */
void mend__note_durable(mend_store *s) {
  writer *w = s->w;
  if (!w->failed && w->job_seq > s->durable_seq) s->durable_seq = w->job_seq;
}

static void writer_idle_hook(void *store) { mend__note_durable(store); }

static const mend_handoff_ops writer_ops = {writer_write, writer_settle, writer_idle_hook};

/* Waits for the writer thread to be done with the connection; -1 if a batch of it failed. */
int mend__writer_wait(mend_store *s) { return s->w ? mend__handoff_wait(s->w) : 0; }

/* Before any statement but a recorded write: the connection is this thread's again and the
 * writes recorded so far have run (in the open transaction). */
int mend__sync_point(mend_store *s) {
  if (mend__writer_wait(s) != 0) return -1;
  if (s->batch_failed) return -1;
  int n = s->cur->nrec;
  /* Without a writer thread each write ran as it ended (mend__rec_end): nothing to count, and
   * no clock read per write; nor while no one asked for the count. */
  if (!n || !s->w || !s->count_flushes) return flush_log(s, s->cur);
  /* What the caller's thread paid for running the records (store.h: read_flushes). */
  struct timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  int rc = flush_log(s, s->cur);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  s->flushed_recs += (unsigned long)n;
  s->flushed_cpu += (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  return rc;
}

int mend__sqlite_start_writer(mend_store *s, void (*done)(void *ud), void *ud) {
  if (s->w) return 0;
  /* In memory, the thread would gain nothing: no fsync to wait for, no second connection. */
  if (!s->checkpointer) return 1;
  int rc = mend__handoff_start(&s->w, &writer_ops, s, &s->cpus, done, ud);
  if (rc == ENOMEM)
    mend__set_msg(s->err, sizeof s->err, "%s: writer thread: out of memory", s->path);
  else if (rc != 0)
    mend__set_msg(s->err, sizeof s->err, "%s: writer thread: %s", s->path, strerror(rc));
  return rc ? -1 : 0;
}

void mend__stop_writer(mend_store *s) {
  mend__handoff_stop(s->w);
  s->w = NULL;
}

int mend__sqlite_writer_busy(mend_store *s) { return s->w ? mend__handoff_busy(s->w) : 0; }

/* With the writer's lock held: a log neither recording nor with the thread. */
static wlog *free_log(mend_store *s) {
  writer *w = s->w;
  wlog *log = s->logs;
  while (log == s->cur || log == w->job || log == s->w_next) log++;
  return log;
}

/* With the writer thread idle: the log recorded so far becomes its job, the batch (numbered)
 * or a part of it, and recording goes on in a free log. */
static void give_job(mend_store *s, int part) {
  writer *w = s->w;
  pthread_mutex_lock(&w->mu);
  s->w_part = part;
  if (!part) w->job_seq = s->open_seq++;
  mend__handoff_post(w, s->cur);
  s->cur = free_log(s);
  pthread_mutex_unlock(&w->mu);
}

int mend__sqlite_hand_off(mend_store *s) {
  if (!s->w) return mend__sqlite_commit(s);
  writer *w = s->w;
  if (!s->cur->oom) {
    /* A part of this batch on the thread: the rest follows it there, no waiting here. */
    pthread_mutex_lock(&w->mu);
    int queued = w->busy && s->w_part && !s->w_next && !w->failed;
    if (queued) {
      s->w_next = s->cur;
      s->w_next_seq = s->open_seq++;
      s->cur = free_log(s);
      s->parted = 0;
    }
    pthread_mutex_unlock(&w->mu);
    if (queued) return 0;
  }
  if (mend__writer_wait(s) != 0) return -1;
  if (s->cur->oom) return flush_log(s, s->cur);
  if (!s->cur->nrec && !s->in_batch) {
    s->durable_seq = s->open_seq++;   /* nothing to write: all so far is durable */
    return 0;
  }
  s->parted = 0;
  give_job(s, 0);
  return 0;
}

/* A full log of the open batch goes to the writer thread, to be written in the transaction
 * and not committed: the caller goes on recording into another log. Written here instead,
 * these parts were a sixth of the loop thread's time in W1 (it waited for the thread, then
 * ran the statements itself). The batch's sequence number is not taken: nothing is durable
 * until it is handed off whole. */
static int pass_part(mend_store *s) {
  if (mend__writer_wait(s) != 0 || s->batch_failed) return -1;
  s->parted += s->cur->nrec;
  give_job(s, 1);
  return 0;
}

static int writer_idle(mend_store *s) {
  writer *w = s->w;
  pthread_mutex_lock(&w->mu);
  int idle = !w->busy && !w->in_done;
  pthread_mutex_unlock(&w->mu);
  return idle;
}

int mend__sqlite_writer_part(mend_store *s) {
  writer *w = s->w;
  if (!w) return 0;
  pthread_mutex_lock(&w->mu);
  int part = w->busy && s->w_part && !s->w_next;
  pthread_mutex_unlock(&w->mu);
  return part;
}

#define TRIM_KEEP_BYTES (256u << 10)

void mend__sqlite_trim(mend_store *s) {
  if (s->cur->nrec || s->in_batch) return;
  int idle = 1;
  if (s->w) {
    pthread_mutex_lock(&s->w->mu);
    idle = !s->w->job;
    pthread_mutex_unlock(&s->w->mu);
  }
  /* A small log is no burst's: freed, the next small batch (one HTTP start, then idle again)
   * would map its pages and fault them in anew, which tripled what such a start costs. */
  for (int k = 0; idle && k < 3; k++) {
    wlog *log = &s->logs[k];
    size_t bytes = (size_t)log->caprec * sizeof *log->recs +
                   (size_t)log->capval * sizeof *log->vals + (size_t)log->captext;
    if (bytes > TRIM_KEEP_BYTES) mend__log_free(log);
  }
}

int mend__sqlite_batch_writes(const mend_store *s) { return s->cur->nrec + s->parted; }
void mend__sqlite_read_flushes(mend_store *s, unsigned long *records, double *cpu, int *pending) {
  s->count_flushes = 1;
  *records = s->flushed_recs;
  *cpu = s->flushed_cpu;
  *pending = s->w ? s->cur->nrec : 0;
}
int mend__sqlite_locked(mend_store *s) { return atomic_load(&s->locked); }

int mend__sqlite_lock_try(mend_store *s) {
  if (!atomic_load(&s->locked)) return 1;
  if (s->in_batch || s->batch_failed || (s->cur && s->cur->nrec) || mend__sqlite_writer_busy(s))
    return 0;
  int rc = mend__step_busy_retry(s, s->q[Q_BEGIN]);
  sqlite3_reset(s->q[Q_BEGIN]);
  if (rc != SQLITE_DONE) return 0;
  sqlite3_step(s->q[Q_ROLLBACK]);   /* nothing was written: nothing to lose */
  sqlite3_reset(s->q[Q_ROLLBACK]);
  atomic_store(&s->locked, 0);
  return 1;
}
void mend__sqlite_set_busy_wait(mend_store *s, int ms) {
  s->busy_ms = ms > 0 ? ms : BUSY_TIMEOUT_MS;
}

void mend__sqlite_set_thread_cpus(mend_store *s, const mend_cpus *cpus) { s->cpus = *cpus; }
unsigned long mend__sqlite_open_seq(const mend_store *s) { return s->open_seq; }
unsigned long mend__sqlite_durable_seq(const mend_store *s) { return s->durable_seq; }
void mend__sqlite_set_commit_hook(mend_store *s, void (*hook)(const char *phase)) {
  s->commit_hook = hook;
}

/* ---- writes ---------------------------------------------------------------------------- */

int mend__first_row(mend_store *s, sqlite3_stmt *q, int rc, const char *what);

char *mend__copy_text(const char *t, int *oom) {
  if (!t) return NULL;
  size_t n = strlen(t) + 1;
  char *c = malloc(n);
  if (c) memcpy(c, t, n);
  else *oom = 1;
  return c;
}

int mend__sqlite_insert_run(mend_store *s, const mend_run_rec *r) {
  sqlite3_int64 version_id;
  if (mend__workflow_version(s, r, &version_id) != 0) return -1;
  /* With a run key the caller must hear at once whether the key was taken; unless it asked
   * for the key to be looked up as the batch is written, by the insert itself: then the run's
   * other records of the batch go only if it was inserted (flush_log), and the key's run is
   * the committed one once the batch is (mend_store_find_run_key_committed). */
  int later = r->run_key && r->at_commit;
  if (r->run_key && !later && mend__sync_point(s) != 0) return -1;
  /* A version numbered as the batch is written: the insert takes its number there. */
  mend__rec_begin(s, version_id == 0 ? Q_INSERT_RUN_NEWV : later ? Q_INSERT_RUN_KEY : Q_INSERT_RUN);
  mend__rec_text(s, r->id);
  mend__rec_text(s, r->workflow);
  mend__rec_text(s, r->run_key);
  mend__rec_text(s, r->status);
  mend__rec_text(s, r->input);
  mend__rec_text(s, r->error);
  mend__rec_int(s, r->attention ? 1 : 0);
  mend__rec_real(s, r->created);
  mend__rec_real(s, r->updated);
  mend__rec_text(s, r->owner);
  if (version_id) {
    mend__rec_int(s, version_id);
  } else {
    mend__rec_text(s, r->version);
    mend__rec_text(s, r->source);
    mend__rec_text(s, r->step_names);
  }
  if (!r->run_key) return mend__rec_end(s);
  if (later) return mend__rec_end(s) < 0 ? -1 : 2;
  /* MEND_STORE_BUSY: another connection's lock kept the batch from beginning, the insert
   * kept in it (committed once the lock goes) */
  int flushed = flush_log(s, s->cur);
  if (flushed != 0) return flushed == MEND_STORE_BUSY ? flushed : -1;
  return sqlite3_changes(s->db) == 0 ? 1 : 0;   /* 1: the run key was taken */
}

int mend__sqlite_update_run(mend_store *s, const char *id, const char *status, const char *error,
                          int attention, double updated, const char *reason) {
  mend__rec_begin(s, Q_UPDATE_RUN);
  mend__rec_text(s, id);
  mend__rec_text(s, status);
  mend__rec_text(s, error);
  mend__rec_int(s, attention ? 1 : 0);
  mend__rec_real(s, updated);
  mend__rec_text(s, reason);
  return mend__rec_end(s);
}

/* A step row: Q_PUT_STEP names the step, Q_UPDATE_STEP keeps the name it has. */
static int rec_step(mend_store *s, int q, const mend_step_rec *st) {
  mend__rec_begin(s, q);
  mend__rec_text(s, st->run_id);
  mend__rec_int(s, st->idx);
  if (q == Q_PUT_STEP) mend__rec_text(s, st->name);
  mend__rec_text(s, st->status);
  mend__rec_int(s, st->attempts);
  mend__rec_int(s, st->comp_attempts);
  mend__rec_text(s, st->idem_key);
  mend__rec_int(s, st->custom_key);
  mend__rec_text(s, st->result);
  mend__rec_text(s, st->error);
  rec_opt_real(s, st->due);
  rec_opt_real(s, st->last_delay);
  mend__rec_real(s, st->updated);
  mend__rec_int(s, st->slept ? 1 : 0);
  mend__rec_text(s, st->awaits);
  mend__rec_text(s, st->error ? st->error_kind : NULL);
  mend__rec_int(s, st->error ? st->error_severity : 0);
  mend__rec_int(s, st->error ? st->error_stopped : 0);
  return mend__rec_end(s);
}

int mend__sqlite_put_step(mend_store *s, const mend_step_rec *st) {
  return rec_step(s, Q_PUT_STEP, st);
}

int mend__sqlite_update_step(mend_store *s, const mend_step_rec *st) {
  return rec_step(s, Q_UPDATE_STEP, st);
}

/* A name in labels goes as its code (schema 7); any other, as it is. */
static void rec_label(mend_store *s, const char *name) {
  int code = name ? mend__label_code(s, name) : -1;
  if (code >= 0) rec_code(s, code);
  else mend__rec_text(s, name);
}

int mend__sqlite_append_history(mend_store *s, const mend_history_rec *h) {
  mend__rec_begin(s, Q_APPEND_HISTORY);
  mend__rec_text(s, h->run_id);
  mend__rec_text(s, h->step);
  mend__rec_real(s, h->at);
  rec_label(s, h->event);
  rec_label(s, h->from_status);
  rec_label(s, h->to_status);
  if (h->attempt) mend__rec_int(s, h->attempt);
  else mend__rec_text(s, NULL);
  mend__rec_text(s, h->error);
  rec_opt_real(s, h->delay);
  mend__rec_text(s, h->detail);
  rec_worker(s);
  mend__rec_text(s, h->error_kind);
  if (h->seq > 0) mend__rec_int(s, h->seq);   /* last: append_one binds it NULL if taken */
  else mend__rec_text(s, NULL);
  return mend__rec_end(s);
}

int mend__sqlite_put_breaker(mend_store *s, const char *key, const mend_breaker *b,
                             double updated) {
  mend__rec_begin(s, Q_PUT_BREAKER);
  mend__rec_text(s, key);
  mend__rec_text(s, mend_breaker_state_name(b->state));
  mend__rec_int(s, b->failures);
  mend__rec_int(s, b->successes);
  mend__rec_real(s, b->opened_at);
  mend__rec_real(s, b->open_until);
  mend__rec_real(s, updated);
  return mend__rec_end(s);
}

int mend__sqlite_put_dlq(mend_store *s, const mend_dlq_rec *d) {
  mend__rec_begin(s, Q_PUT_DLQ);
  mend__rec_text(s, d->run_id);
  mend__rec_text(s, d->reason);
  mend__rec_text(s, d->step);
  mend__rec_text(s, d->error);
  mend__rec_text(s, d->detail);
  mend__rec_real(s, d->at);
  return mend__rec_end(s);
}
