/*
 * look: the SQLite backend's looks ahead (store.h: look_ahead, look_ahead_take). A ticking
 * host's look at committed inboxes is read by a thread of the store's own, on a read-only
 * connection of its own, while the host's frame goes on: a read on the loop thread begins a
 * WAL read transaction, which takes a mutex of SQLite's that the writer and checkpoint threads
 * of this process hold too, and a tick waited behind them for up to tens of milliseconds
 * (issue 24). Owns that thread (started by open_committed_reads, stopped by close) and its
 * connection. Must never: touch the store's other connections or its error text from the
 * thread; answer a look with rows read before it was asked; have two looks in flight.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

typedef struct look_ans { long long seq; char *payload, *key; int found; } look_ans;

struct mend_look_thread {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* the thread: asked or stop; the loop: answered */
  int stop, asked, answered, failed;
  int n;
  char **ids, **names;      /* the look in flight, the loop's copies */
  look_ans *ans;
  char err[512];            /* why the look failed, the thread's */
  /* the thread's alone */
  sqlite3 *db;
  sqlite3_stmt *q;
  sqlite3_stmt *txn[2];     /* BEGIN, COMMIT */
};

static void free_look(struct mend_look_thread *t) {
  for (int i = 0; i < t->n; i++) {
    free(t->ids[i]);
    free(t->names[i]);
    if (t->ans) {
      free(t->ans[i].payload);
      free(t->ans[i].key);
    }
  }
  free(t->ids);
  free(t->names);
  free(t->ans);
  t->ids = t->names = NULL;
  t->ans = NULL;
  t->n = 0;
}

static int fail(struct mend_look_thread *t, const char *path, const char *what) {
  snprintf(t->err, sizeof t->err, "%s: %s: %s", path, what,
           t->db ? sqlite3_errmsg(t->db) : "no connection");
  return -1;
}

/* One read transaction for the whole look: one snapshot, one begin of a WAL read. */
static int read_look(struct mend_look_thread *t, const char *path, const char *hold) {
  if (!t->db) {
    int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI;
    if (sqlite3_open_v2(path, &t->db, flags, NULL) != SQLITE_OK) {
      fail(t, path, "open a connection to look at inboxes");
      sqlite3_close_v2(t->db);
      t->db = NULL;
      return -1;
    }
    sqlite3_busy_timeout(t->db, BUSY_TIMEOUT_MS);
  }
  if (!t->q && sqlite3_prepare_v3(t->db, mend__query_sql[Q_NEXT_EVENT], -1,
                                  SQLITE_PREPARE_PERSISTENT, &t->q, NULL) != SQLITE_OK)
    return fail(t, path, "read a run's inbox");
  /* BEGIN and COMMIT prepared once: sqlite3_exec parsed them again at every look, a third of
   * the thread's instructions (game_loop, callgrind) */
  for (int k = 0; k < 2; k++)
    if (!t->txn[k] && sqlite3_prepare_v3(t->db, k ? "COMMIT" : "BEGIN", -1,
                                         SQLITE_PREPARE_PERSISTENT, &t->txn[k], NULL) != SQLITE_OK)
      return fail(t, path, "read a run's inbox");
  mend__inbox_read_hold(hold, t->n, (const char *const *)t->names);
  int began = sqlite3_step(t->txn[0]);
  sqlite3_reset(t->txn[0]);
  if (began != SQLITE_DONE) return fail(t, path, "read a run's inbox");
  int rc = SQLITE_OK;
  for (int i = 0; i < t->n && rc == SQLITE_OK; i++) {
    rc = sqlite3_bind_text(t->q, 1, t->ids[i], -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(t->q, 2, t->names[i], -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(t->q);
    if (rc == SQLITE_ROW) {
      look_ans *a = &t->ans[i];
      const char *p = (const char *)sqlite3_column_text(t->q, 1);
      const char *k = (const char *)sqlite3_column_text(t->q, 2);
      a->seq = (long long)sqlite3_column_int64(t->q, 0);
      a->payload = strdup(p ? p : "null");
      a->key = k ? strdup(k) : NULL;
      a->found = 1;
      rc = !a->payload || (k && !a->key) ? SQLITE_NOMEM : SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
      rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) fail(t, path, "read a run's inbox");
    sqlite3_reset(t->q);
    sqlite3_clear_bindings(t->q);
  }
  sqlite3_step(t->txn[1]);   /* a read: nothing to lose */
  sqlite3_reset(t->txn[1]);
  return rc == SQLITE_OK ? 0 : -1;
}

static void *look_main(void *arg) {
  mend_store *s = arg;
  struct mend_look_thread *t = s->look;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    while (!t->stop && !(t->asked && !t->answered)) pthread_cond_wait(&t->cv, &t->mu);
    if (t->stop) break;
    pthread_mutex_unlock(&t->mu);
    /* the look is the thread's until answered */
    int failed = read_look(t, s->path, s->inbox_hold) != 0;
    pthread_mutex_lock(&t->mu);
    t->failed = failed;
    t->answered = 1;
    pthread_cond_broadcast(&t->cv);
  }
  pthread_mutex_unlock(&t->mu);
  sqlite3_finalize(t->q);
  sqlite3_finalize(t->txn[0]);
  sqlite3_finalize(t->txn[1]);
  sqlite3_close_v2(t->db);
  return NULL;
}

void mend__sqlite_look_start(mend_store *s, int batch) {
  if (s->look || !s->checkpointer || !s->path) return;   /* in memory: nothing to look at */
  struct mend_look_thread *t = calloc(1, sizeof *t);
  if (!t) return;   /* no thread: the engine reads on its own thread, as before */
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, NULL);
  s->look = t;
  if (mend_thread_start(&t->thread, &s->cpus, "mend-look", look_main, s) != 0) {
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
    s->look = NULL;
    return;
  }
  /* It serves ticking hosts only, and is woken as a tick ends (mend__looks_send): in
   * SCHED_OTHER, having slept most of the time, it took the CPU from the ticking thread at
   * once where they shared one (W11 unpinned: 69% of the game thread's preemptions,
   * bench/README, tick21). In SCHED_BATCH a wake-up never preempts; it keeps its share of the
   * CPU (wsched.c does the same for the commit thread). A host that keeps mend's threads in
   * its own class (MEND_WRITER_SCHED_OTHER) keeps this one there too. Set here rather than by
   * the thread itself, so that it holds from the first look on: a thread not yet scheduled on
   * a busy machine would have served its first looks in the class it was born in. */
  if (batch) {
    struct sched_param sp = {0};
    pthread_setschedparam(t->thread, SCHED_BATCH, &sp);   /* refused: it stays as it was */
  }
}

void mend__sqlite_look_stop(mend_store *s) {
  struct mend_look_thread *t = s->look;
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  t->stop = 1;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, NULL);
  free_look(t);
  pthread_cond_destroy(&t->cv);
  pthread_mutex_destroy(&t->mu);
  free(t);
  s->look = NULL;
}

int mend__sqlite_can_look_ahead(mend_store *s) { return s->look != NULL; }

int mend__sqlite_look_ahead(mend_store *s, int n, const char *const *run_ids,
                            const char *const *names) {
  struct mend_look_thread *t = s->look;
  if (!t || t->asked || n <= 0) return -1;
  char **ids = calloc((size_t)n, sizeof *ids), **nm = calloc((size_t)n, sizeof *nm);
  look_ans *ans = calloc((size_t)n, sizeof *ans);
  int oom = !ids || !nm || !ans;
  for (int i = 0; i < n && !oom; i++) {
    ids[i] = strdup(run_ids[i]);
    nm[i] = strdup(names[i]);
    oom = !ids[i] || !nm[i];
  }
  pthread_mutex_lock(&t->mu);
  t->ids = ids;
  t->names = nm;
  t->ans = ans;
  t->n = ids && nm ? n : 0;
  if (oom) {
    free_look(t);
    pthread_mutex_unlock(&t->mu);
    return -1;
  }
  t->asked = 1;
  t->answered = t->failed = 0;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return 0;
}

int mend__sqlite_look_ahead_take(mend_store *s, int wait,
                                 void (*fn)(void *ud, const char *run_id, const char *name,
                                            long long seq, const char *payload, const char *key),
                                 void *ud) {
  struct mend_look_thread *t = s->look;
  if (!t || !t->asked) return -1;
  pthread_mutex_lock(&t->mu);
  if (!t->answered && !wait) {
    pthread_mutex_unlock(&t->mu);
    return 0;
  }
  while (!t->answered) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);   /* answered: the thread waits for the next look */
  int failed = t->failed;
  if (failed) mend__set_msg(s->err, sizeof s->err, "%s", t->err);
  for (int i = 0; i < t->n && !failed; i++)
    if (t->ans[i].found)
      fn(ud, t->ids[i], t->names[i], t->ans[i].seq, t->ans[i].payload, t->ans[i].key);
  pthread_mutex_lock(&t->mu);
  free_look(t);
  t->asked = t->answered = 0;
  pthread_mutex_unlock(&t->mu);
  return failed ? -1 : 1;
}
