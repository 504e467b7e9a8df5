/*
 * batch: the SQLite backend's transaction that group commit ends: begun at the first write
 * (the write lock, the fence's look, the worker's number), committed or rolled back whole, and
 * numbered (open_seq, durable_seq); and whether the database file is still the one opened,
 * asked before each commit and by an idle process (the gone method). Must never: commit a
 * batch one of whose writes failed, or commit into a file deleted or moved since it was opened.
 */
#include "store_int.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The number of this store's worker in worker_names, in the batch just begun (its history
 * rows are written with it). */
static int name_worker(mend_store *s) {
  sqlite3_stmt *q = s->q[Q_NAME_WORKER];
  if (mend__run_bound(s, q, sqlite3_bind_text(q, 1, s->worker, -1, SQLITE_STATIC), "name worker",
                      1))
    return -1;
  q = s->q[Q_WORKER_ID];
  int rc = sqlite3_bind_text(q, 1, s->worker, -1, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    s->worker_id = sqlite3_column_int64(q, 0);
    s->worker_ndigits =
      snprintf(s->worker_digits, sizeof s->worker_digits, "%lld", (long long)s->worker_id);
    s->worker_named = 1;
  } else {
    mend__sql_err(s, "name worker");
    s->batch_failed = 1;
  }
  sqlite3_reset(q);
  return rc == SQLITE_ROW ? 0 : -1;
}

/* MEND_STORE_BUSY when another connection holds the write lock: nothing has run, and the
 * caller keeps what it was about to write. */
int mend__batch_begin(mend_store *s) {
  if (s->batch_failed) return -1;   /* errmsg still names the first failure */
  if (s->in_batch) return 0;
  int rc = mend__step_busy_retry(s, s->q[Q_BEGIN]);
  if (rc != SQLITE_DONE) {
    mend__sql_err(s, "begin");
    sqlite3_reset(s->q[Q_BEGIN]);
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return -1;
    atomic_store(&s->locked, 1);
    return MEND_STORE_BUSY;
  }
  sqlite3_reset(s->q[Q_BEGIN]);
  atomic_store(&s->locked, 0);
  s->in_batch = 1;
  if (mend__fence_at_begin(s) != 0) return -1;
  return s->worker && !s->worker_id ? name_worker(s) : 0;
}

void mend__rollback(mend_store *s) {
  /* SQLite may already have rolled back on its own (SQLITE_FULL, SQLITE_IOERR, ...). */
  if (!sqlite3_get_autocommit(s->db)) {
    sqlite3_step(s->q[Q_ROLLBACK]);
    sqlite3_reset(s->q[Q_ROLLBACK]);
  }
  s->in_batch = 0;
  s->batch_failed = 0;
  if (s->worker_named) s->worker_id = 0;   /* its name went with the batch */
  s->worker_named = 0;
  /* Their rows went with the batch. Not from the writer thread: the loop may be reading them,
   * and a batch that fails there fails the store for good. */
  if (!s->w || !pthread_equal(pthread_self(), s->w->thread))
    mend__forget_versions(s, s->versions_committed);
}

int mend__sqlite_batch_open(mend_store *s) {
  if (s->cur->nrec > 0) return 1;
  writer *w = s->w;
  if (!w) return s->in_batch;
  pthread_mutex_lock(&w->mu);
  int busy = w->busy, part = s->w_part;
  if (!busy) mend__note_durable(s);
  pthread_mutex_unlock(&w->mu);
  /* a part of the open batch on the thread is the batch still open */
  return busy ? part : s->in_batch;
}

/* Whether the database file was deleted or moved since it was opened. In WAL mode SQLite
 * goes on writing to the unlinked file (it checks only in rollback-journal mode), so that every
 * batch after a `rm` would be answered durable and vanish with the process. SQLite's check
 * compares the path's inode with the open file's; a file bind-mounted on its own (a container's
 * volume of one file) and deleted on the host keeps its inode under the path with no link left,
 * which only the link count tells. Two stat(2)s of the absolute path SQLite opened, per commit
 * and per idle poll (mend__sqlite_claimable), far below a commit's own cost. */
int mend__file_gone(mend_store *s, sqlite3 *db) {
  if (strcmp(s->path, ":memory:") == 0 || s->path[0] == 0 || !db) return 0;
  int moved = 0;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) != SQLITE_OK) return 0;
  if (moved) return 1;
  const char *abs = sqlite3_db_filename(db, "main");
  struct stat st;
  return abs && abs[0] && stat(abs, &st) == 0 && st.st_nlink == 0;
}

/* The store's gone method (store.h): asked of the reader, the loop thread's own connection
 * (the writer thread may hold the other), as an idle worker's poll is. The reader is opened at
 * the first look, which must come while the file is there (a reader opened later would be of
 * a new file at that path): one that cannot open then, the path naming nothing, is gone too. */
int mend__sqlite_gone(mend_store *s, char *why, int len) {
  if (strcmp(s->path, ":memory:") == 0 || s->path[0] == 0) return 0;
  struct stat st;
  int opened = mend__open_reader(s) == 0;
  if (opened ? !mend__file_gone(s, s->reader) : stat(s->path, &st) == 0 || errno != ENOENT)
    return 0;
  mend__set_msg(why, len, "%s: the database file was deleted or moved after it was opened; "
                "nothing more is written to it (put it back or start again on a database that "
                "is there)", s->path);
  return 1;
}

/* Ends the open transaction, if any (on whichever thread holds the connection now). */
int mend__commit_batch(mend_store *s) {
  if (!s->in_batch) return 0;
  if (s->batch_failed) {
    /* errmsg keeps the write that failed: that is the cause worth reporting. */
    mend__rollback(s);
    return -1;
  }
  if (mend__file_gone(s, s->db)) {
    mend__set_msg(s->err, sizeof s->err, "%s: commit: the database file was deleted or moved "
                  "after it was opened; nothing more is written to it (put it back or start "
                  "again on a database that is there)", s->path);
    mend__rollback(s);
    return -1;
  }
  if (s->commit_hook) s->commit_hook("before_commit");
  int rc = mend__step_busy_retry(s, s->q[Q_COMMIT]);
  if (rc != SQLITE_DONE) {
    mend__sql_err(s, "commit");
    sqlite3_reset(s->q[Q_COMMIT]);
    mend__rollback(s);
    return -1;
  }
  sqlite3_reset(s->q[Q_COMMIT]);
  s->in_batch = 0;
  s->worker_named = 0;
  s->versions_committed = s->nversions;
  if (s->commit_hook) s->commit_hook("after_commit");
  return 0;
}

int mend__sqlite_commit(mend_store *s) {
  int rc = mend__sync_point(s);
  if (rc == MEND_STORE_BUSY) return rc;   /* nothing began: the batch is kept whole */
  if (rc != 0) {
    if (!s->w || !s->w->failed) mend__rollback(s);
    return -1;
  }
  s->parted = 0;
  if (mend__commit_batch(s) != 0) return -1;
  s->durable_seq = s->open_seq++;
  mend__ckpt_after_commit(s);
  mend__ckpt_between_batches(s);
  return 0;
}
