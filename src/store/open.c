/*
 * open: the SQLite backend's connections, opened and closed: the writing connection (walvfs,
 * the busy handler, WAL, synchronous, the WAL hook), the checkpointer's, and at close the reader
 * and the threads; every statement prepared once at open and finalized at close, and a failure
 * to open explained for a person. What the file holds is schema_check.c's to judge. Must never:
 * leave a store half open (a failure closes what was opened), take the write lock to upgrade a
 * database that is up to date, or let the runs a closing worker holds wait for its lease to end
 * when they can be let go of.
 */
#include "store_int.h"
#include "walvfs.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* sqlite3_wal_hook: the WAL's length after each commit. */
static int note_wal(void *ud, sqlite3 *db, const char *name, int frames) {
  (void)db;
  (void)name;
  ((mend_store *)ud)->wal_frames = frames;
  return SQLITE_OK;
}

/* Waits out another connection's write lock, up to busy_ms. SQLite's own handler backs
 * off to sleeps of 100 ms: against another worker's steady batches the lock is free only for
 * moments, and a waiter asleep that long misses them, then gives up after 5 s (two workers on
 * a backlog of 5,000 runs: one of them exited, or both took twice as long as one). */
static int busy_wait(void *ud, int count) {
  const mend_store *s = ud;
  enum { WAIT_US = 250 };
  /* Counted in time, not in calls: on a loaded machine a sleep of 250 us took up to three
   * times as long, and a wait of "5 s" lasted 14. One wait at a time on a thread. */
  static _Thread_local double since;
  double now = mend__now_mono();
  if (count == 0) since = now;
  if (now - since >= s->busy_ms / 1000.0) return 0;
  struct timespec ts = {0, WAIT_US * 1000L};
  nanosleep(&ts, NULL);
  return 1;
}

static int set_journal_wal(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &q, NULL) != SQLITE_OK) {
    mend__sql_err(s, "set WAL mode");
    return -1;
  }
  int rc = mend__step_busy_retry(s, q);
  if (rc != SQLITE_ROW) {
    if ((rc & 0xff) == SQLITE_NOTADB)
      mend__set_msg(s->err, sizeof s->err, "%s: file is not a database", s->path);
    else
      mend__sql_err(s, "set WAL mode");
    sqlite3_finalize(q);
    return -1;
  }
  const char *mode = (const char *)sqlite3_column_text(q, 0);
  /* An in-memory database cannot use WAL and needs no durability. */
  int ok = mode && (strcmp(mode, "wal") == 0 || strcmp(mode, "memory") == 0);
  if (!ok)
    mend__set_msg(s->err, sizeof s->err, "%s: cannot use WAL mode (journal mode stays %s)", s->path,
            mode ? mode : "unknown");
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

/* Numbered history rows go HISTORY_GROUP to a statement: an INSERT's own cost (cursors
 * opened and closed, the statement begun and ended) is a fifth of a small row's, and a run
 * writes eight of them (W1). A row's values are bound as its record holds them (run_id, step,
 * at, event, from, to, attempt, error, delay, detail, worker, error_kind, seq). */
static void history_group_sql(char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "INSERT OR FAIL INTO history(run_id, seq, step, at, event,"
                              " from_status, to_status, attempt, error, delay, detail, worker,"
                              " error_kind) VALUES");
  for (int r = 0; r < HISTORY_GROUP && n < len; r++) {
    int b = r * HISTORY_VALUES;
    n += (size_t)snprintf(buf + n, len - n, "%s(?%d,?%d", r ? "," : "", b + 1, b + 13);
    for (int j = 2; j <= 12 && n < len; j++) n += (size_t)snprintf(buf + n, len - n, ",?%d", b + j);
    if (n < len) n += (size_t)snprintf(buf + n, len - n, ")");
  }
  /* OR FAIL: a number taken stops the statement and keeps the rows before it (append_group).
   * A statement that cannot abort needs no statement journal (a copy of each page it changes,
   * taken before it changes it) nor its savepoints: about 2k instructions of a W9 run. */
}

static int open_db(mend_store *s, mend_durability durability) {
  /* The connection belongs to the loop thread alone, so SQLite's per-connection mutexes are
   * pure cost (about 8% of a step). The checkpointer below is shared with a worker thread and
   * keeps its own. Its commits go to the WAL through walvfs, in a few writes instead of two a
   * page; the other connections only read the WAL, and use the default VFS. */
  int rc = sqlite3_open_v2(s->path, &s->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                               SQLITE_OPEN_URI,
                           mend_walvfs());
  if (rc != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: cannot open: %s", s->path,
            s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    return -1;
  }
  sqlite3_extended_result_codes(s->db, 1);
  if (sqlite3_busy_handler(s->db, busy_wait, s) != SQLITE_OK) {
    mend__sql_err(s, "set busy timeout");
    return -1;
  }
  int version;
  if (mend__schema_found(s, &version) != 0) return -1;
  if (version == 0 && s->must_exist) {   /* before anything of it (its journal mode) changes */
    mend__set_msg(s->err, sizeof s->err, "%s: no mend database there (no mend schema)", s->path);
    s->no_schema = 1;
    return -1;
  }
  if (set_journal_wal(s) != 0) return -1;
  if (mend__exec_sql(s, durability == MEND_DURABILITY_FULL ? "PRAGMA synchronous = FULL"
                                                     : "PRAGMA synchronous = NORMAL",
               "set synchronous") != 0)
    return -1;
  /* A large batch must not spill the page cache to disk in the middle of its transaction. */
  if (mend__exec_sql(s, "PRAGMA cache_size = -8192", "set cache size") != 0) return -1;
  /* Checkpoints copy the WAL into the database file: done inside a commit they stall the
   * loop for tens of milliseconds. A file database gets a connection of its own for them,
   * which a thread of the store's own drives (src/store/checkpoint.c). */
  if (strcmp(s->path, ":memory:") != 0 && s->path[0] &&
      sqlite3_open_v2(s->path, &s->checkpointer,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_URI,
                      NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(s->checkpointer, BUSY_TIMEOUT_MS);
    if (mend__exec_sql(s, "PRAGMA wal_autocheckpoint = 0", "set wal_autocheckpoint") != 0 ||
        mend__exec_sql(s, "PRAGMA journal_size_limit = 67108864", "set journal_size_limit") != 0)
      return -1;
    /* after the pragma, which would take the hook away: it keeps the WAL's length */
    sqlite3_wal_hook(s->db, note_wal, s);
  } else if (s->checkpointer) {
    sqlite3_close_v2(s->checkpointer);   /* a failed open still gives a handle to close */
    s->checkpointer = NULL;
  }
  /* Only a new or older database needs the write lock; an up-to-date one is opened without it,
   * so a second connection can open while the first holds a batch. */
  if (version < MEND_SCHEMA_VERSION) {
    if (mend__upgrade_schema(s) != 0 || mend__check_meta(s, MEND_SCHEMA_VERSION) != 0) return -1;
  }
  s->version = MEND_SCHEMA_VERSION;
  if (mend__load_labels(s) != 0) return -1;
  char group_sql[HISTORY_GROUP * 80 + 256];
  history_group_sql(group_sql, sizeof group_sql);
  for (int i = 0; i < Q__COUNT; i++) {
    const char *sql = i == Q_HISTORY_GROUP ? group_sql : mend__query_sql[i];
    if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->q[i], NULL)
        != SQLITE_OK) {
      mend__sql_err(s, "prepare");
      return -1;
    }
  }
  return 0;
}

/* SQLite says "unable to open database file" when it cannot create the file, or WAL mode its
 * -shm file next to the database: name the likelier cause for a person (a folder that does not
 * exist, or a file or folder that is read-only). */
static void explain_open_failure(mend_store *s) {
  /* the file SQLite opened: a "file:" URI's path, not the name's text */
  char file[4096], dir[4096];
  if (mend_store_where(s->path, file, sizeof file) != MEND_DB_FILE || file[0] == 0) return;
  mend__set_msg(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  if (slash) *(slash == dir ? slash + 1 : slash) = 0;
  else mend__set_msg(dir, sizeof dir, ".");
  size_t n = strlen(s->err);
  int room = (int)(sizeof s->err - n);
  struct stat st;
  if (stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
    size_t len = strlen(file);
    while (len > 1 && file[len - 1] == '/') len--;
    mend__set_msg(s->err + n, room, " (it is a folder: a database is a file; give a path in it, "
                  "as %.*s/mend.db)", (int)len, file);
    return;
  }
  if (stat(file, &st) == 0 && !S_ISREG(st.st_mode)) {
    mend__set_msg(s->err + n, room, " (it is not a regular file: a named pipe or a device? a "
                  "database is a file)");
    return;
  }
  if (access(file, F_OK) == 0 && access(file, W_OK) != 0) {
    int why = errno;
    char shm[4200];
    mend__set_msg(shm, sizeof shm, "%s-shm", file);
    /* SQLite's own cause is then the -shm file's (ENOENT: it could not be made), which reads
     * as if the database were missing: say what is missing and why it is needed. */
    if (access(shm, F_OK) != 0)
      mend__set_msg(s->err, (int)sizeof s->err, "%s: cannot open: the file is read-only (%s), and "
                    "its %s-shm file, which a database in WAL mode needs even to be read, is not "
                    "there and cannot be made: open it where it can be written, or copy it",
                    s->path, strerror(why), file);
    else
      mend__set_msg(s->err + n, room, " (the file is read-only: %s)", strerror(why));
  } else if (access(dir, W_OK) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      mend__set_msg(s->err + n, room, " (its folder %s does not exist)", dir);
    else
      mend__set_msg(s->err + n, room, " (its folder is read-only: %s)", strerror(errno));
  }
}

void mend_store_quiet_memstatus(void) {
  /* Returns SQLITE_MISUSE once SQLite has started in this process; nothing changes then. */
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

mend_store *mend__sqlite_open(const char *path, mend_durability durability, char *err,
                              int errlen) {
  return mend__sqlite_open_ex(path, durability, NULL, err, errlen);
}

mend_store *mend__sqlite_open_ex(const char *path, mend_durability durability, int *none,
                                 char *err, int errlen) {
  mend_store *s = calloc(1, sizeof *s);
  if (s) s->m = &mend__sqlite_methods;
  if (!s || !path || !(s->path = strdup(path))) {
    mend__set_msg(err, errlen, "%s: out of memory", path ? path : "(null)");
    free(s);
    return NULL;
  }
#ifdef MEND_FAILPOINTS
  const char *hold = getenv("MEND_INBOX_READ_HOLD");   /* once: threads read the store */
  if (hold && *hold && !(s->inbox_hold = strdup(hold))) {
    mend__set_msg(err, errlen, "%s: out of memory", path);
    free(s->path);
    free(s);
    return NULL;
  }
#endif
  s->cur = &s->logs[0];
  s->open_seq = 1;
  s->busy_ms = BUSY_TIMEOUT_MS;
  s->must_exist = none != NULL;
  if (none) *none = 0;
  if (open_db(s, durability) != 0) {
    if (none) *none = s->no_schema;
    if (!s->no_schema) explain_open_failure(s);
    mend__set_msg(err, errlen, "%s", s->err);
    mend__sqlite_close(s);
    return NULL;
  }
  return s;
}

void mend__sqlite_close(mend_store *s) {
  if (!s) return;
  mend__stop_writer(s);   /* a batch it holds is finished first */
  if (s->db && s->in_batch && s->q[Q_ROLLBACK]) mend__rollback(s);
  /* Gone: the runs it still owns are for any worker to take now, not when its lease ends.
   * They are let go of, not only the lease: a look for work finds runs nobody holds in an
   * index of their own (runs_free), and the workers that hold runs by their leases. Either
   * both happen or neither, and then the lease runs out as it would after a crash. */
  if (s->fence_registered && s->q[Q_FORGET_WORKER] && sqlite3_get_autocommit(s->db)) {
    int rc = mend__step_busy_retry(s, s->q[Q_BEGIN]);
    sqlite3_reset(s->q[Q_BEGIN]);
    for (int i = 0; rc == SQLITE_DONE && i < 2; i++) {
      sqlite3_stmt *q = s->q[i == 0 ? Q_RELEASE_OWNER : Q_FORGET_WORKER];
      rc = sqlite3_bind_text(q, 1, s->fence_owner, -1, SQLITE_STATIC);
      if (rc == SQLITE_OK) rc = sqlite3_step(q);
      mend__finish(q);
    }
    if (rc == SQLITE_DONE) rc = mend__step_busy_retry(s, s->q[Q_COMMIT]);
    sqlite3_reset(s->q[Q_COMMIT]);
    if (rc != SQLITE_DONE) mend__rollback(s);
  }
  for (int i = 0; i < Q__COUNT; i++) sqlite3_finalize(s->q[i]);
  /* close_v2 also rolls back whatever a half-finished open left behind. */
  sqlite3_close_v2(s->db);
  sqlite3_finalize(s->q_claimable[0]);
  sqlite3_finalize(s->q_claimable[1]);
  sqlite3_finalize(s->q_events_after);
  sqlite3_finalize(s->q_next_committed);
  sqlite3_finalize(s->q_cancels_committed);
  sqlite3_finalize(s->q_last_committed);
  for (int i = 0; i < Q__COUNT; i++) sqlite3_finalize(s->rq[i]);
  mend_idset_clear(&s->key_taken);
  sqlite3_close_v2(s->reader);
  mend__sqlite_look_stop(s);
  mend__ckpt_stop(s);
  sqlite3_close_v2(s->checkpointer);   /* the last connection to close checkpoints the WAL */
  free(s->path);
  free(s->inbox_hold);
  free(s->worker);
  mend__forget_versions(s, 0);
  free(s->versions);
  free(s->fence_owner);
  mend_idset_clear(&s->fence_checked);
  mend_idset_clear(&s->lost);
  for (int i = 0; i < s->nlost_new; i++) free(s->lost_new[i]);
  free(s->lost_new);
  for (int k = 0; k < 3; k++) mend__log_free(&s->logs[k]);
  free(s);
}

