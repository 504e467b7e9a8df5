/*
 * store: the SQLite backend of the storage interface (store.h): everything mend keeps, in a
 * SQLite file (SPEC section 9). This file owns opening and closing (three connections, pragmas,
 * the schema's creation and version check, statements prepared once), errors, the batch that
 * group commit ends, workflow versions, and the backend's table of methods. The rest is in
 * src/store/ behind store_int.h: schema.c (every SQL text), writer.c (the write log, the writer
 * thread, writes), checkpoint.c (the WAL), query.c (reads and views), fence.c (leases, the
 * fence), inbox.c (events), prune.c (forgetting ended runs).
 * No other module writes a query; the store never decides what a transition means.
 */
#define _GNU_SOURCE   /* mremap */
#include "store/store_int.h"
#include "walvfs.h"

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
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>


/* One table of statements so that open prepares them all and close finalizes them all. */

void mend__set_msg(char *buf, int len, const char *fmt, ...) {
  va_list ap;
  if (!buf || len <= 0) return;
  va_start(ap, fmt);
  vsnprintf(buf, (size_t)len, fmt, ap);
  va_end(ap);
}

/* What "disk I/O error" alone does not say: the system's cause when SQLite kept it (a disk
 * full as a file is opened), else a file size limit (RLIMIT_FSIZE) that a write may have met,
 * whose errno SQLite does not keep. "" when neither is known. */
static const char *io_cause(sqlite3 *db) {
  static _Thread_local char cause[160];
  struct rlimit rl;
  cause[0] = 0;
  if (sqlite3_system_errno(db))
    snprintf(cause, sizeof cause, " (%s)", strerror(sqlite3_system_errno(db)));
  else if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    snprintf(cause, sizeof cause, " (this process may write no file past %llu bytes: its file "
             "size limit, RLIMIT_FSIZE, `ulimit -f`)", (unsigned long long)rl.rlim_cur);
  return cause;
}

/* "<path>: <what>: <sqlite errmsg>", read before any reset can change the message. */
static void db_err(mend_store *s, sqlite3 *db, const char *what) {
  int code = sqlite3_extended_errcode(db) & 0xff;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    mend__set_msg(s->err, sizeof s->err, "%s: %s: database is locked by another process (waited %.1f s)",
            s->path, what, (db == s->db ? s->busy_ms : BUSY_TIMEOUT_MS) / 1000.0);
  else if (code == SQLITE_IOERR || code == SQLITE_CANTOPEN)
    mend__set_msg(s->err, sizeof s->err, "%s: %s: %s%s", s->path, what, sqlite3_errmsg(db),
                  io_cause(db));
  else
    mend__set_msg(s->err, sizeof s->err, "%s: %s: %s", s->path, what, sqlite3_errmsg(db));
}

void mend__sql_err(mend_store *s, const char *what) { db_err(s, s->db, what); }

void mend__stmt_err(mend_store *s, sqlite3_stmt *q, const char *what) {
  if (q) db_err(s, sqlite3_db_handle(q), what);
  else mend__set_msg(s->err, sizeof s->err, "%s: %s: its statement could not be prepared on the "
                     "read-only connection", s->path, what);
}

double mend__now_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

/* The busy handler already waits; this covers the cases where SQLite returns SQLITE_BUSY without
 * calling it (WAL recovery by another connection, for one), still bounded by busy_ms. */
int mend__step_busy_retry(const mend_store *s, sqlite3_stmt *q) {
  double deadline = mend__now_mono() + s->busy_ms / 1000.0;
  int rc;
  for (;;) {
    rc = sqlite3_step(q);
    if ((rc & 0xff) != SQLITE_BUSY || mend__now_mono() >= deadline) break;
    sqlite3_reset(q);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return rc;
}

void mend__finish(sqlite3_stmt *q) {
  sqlite3_reset(q);
  sqlite3_clear_bindings(q);
}

int mend__fence_at_begin(mend_store *s);

int mend__run_bound(mend_store *s, sqlite3_stmt *q, int rc, const char *what, int keep);

/* The number of this store's worker in worker_names, in the batch just begun (its history
 * rows are written with it). */
static int name_worker(mend_store *s) {
  sqlite3_stmt *q = s->q[Q_NAME_WORKER];
  if (mend__run_bound(s, q, sqlite3_bind_text(q, 1, s->worker, -1, SQLITE_STATIC), "name worker", 1))
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

void mend__free_version(struct wf_version *v) {
  free(v->workflow);
  free(v->version);
  free(v->source);
  free(v->step_names);
}

/* Drops the known workflow versions from `from` on. */
static void forget_versions(mend_store *s, int from) {
  while (s->nversions > from) mend__free_version(&s->versions[--s->nversions]);
  if (s->versions_committed > s->nversions) s->versions_committed = s->nversions;
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
    forget_versions(s, s->versions_committed);
}

/* Runs a bound write statement; `rc` carries the first binding failure, if any. Its bindings
 * are cleared after, unless kept: a recorded write binds every parameter again. */
int mend__run_bound(mend_store *s, sqlite3_stmt *q, int rc, const char *what, int keep) {
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc != SQLITE_DONE) mend__sql_err(s, what);   /* before the reset, which may change it */
  if (keep) sqlite3_reset(q);
  else mend__finish(q);
  if (rc == SQLITE_DONE) return 0;
  s->batch_failed = 1;
  return -1;
}

int mend__run_write(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  return mend__run_bound(s, q, rc, what, 0);
}

int mend__bind_text(sqlite3_stmt *q, int i, const char *v) {
  return v ? sqlite3_bind_text(q, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(q, i);
}

int mend__bind_opt_real(sqlite3_stmt *q, int i, double v) {
  return v < 0 ? sqlite3_bind_null(q, i) : sqlite3_bind_double(q, i, v);
}


int mend__sync_point(mend_store *s);
void mend__note_durable(mend_store *s);
static void history_group_sql(char *buf, size_t len);

int mend__label_code(const mend_store *s, const char *name) {
  for (int i = 0; i < s->nlabels; i++)
    if (s->labels[i].name[0] == name[0] && strcmp(s->labels[i].name, name) == 0)
      return s->labels[i].code;
  return -1;
}

static int load_labels(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT code, name FROM labels ORDER BY code", -1, &q, NULL)
      != SQLITE_OK) {
    mend__sql_err(s, "read labels");
    return -1;
  }
  int rc;
  s->nlabels = 0;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW && s->nlabels < LABELS_MAX) {
    const char *name = (const char *)sqlite3_column_text(q, 1);
    struct label *l = &s->labels[s->nlabels];
    if (!name || strlen(name) >= sizeof l->name) continue;
    strcpy(l->name, name);
    l->code = sqlite3_column_int(q, 0);
    s->nlabels++;
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) mend__sql_err(s, "read labels");
  sqlite3_finalize(q);
  s->code_step = mend__label_code(s, "step");
  s->code_running = mend__label_code(s, "running");
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}
void mend__stop_writer(mend_store *s);
void mend__log_free(wlog *log);

/* ---- open / close ---------------------------------------------------------------------- */

static int exec_sql(mend_store *s, const char *sql, const char *what) {
  if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    mend__sql_err(s, what);
    return -1;
  }
  return 0;
}

/* Runs a one-row, one-column query through a temporary statement (open time only). */
static int query_int(mend_store *s, const char *sql, const char *what, int *out) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
    mend__sql_err(s, what);
    return -1;
  }
  int rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return 0;
  }
  if (rc == SQLITE_DONE) {
    mend__set_msg(s->err, sizeof s->err, "%s: %s: no row", s->path, what);
  } else if ((rc & 0xff) == SQLITE_NOTADB) {
    mend__set_msg(s->err, sizeof s->err, "%s: file is not a database", s->path);
  } else {
    mend__sql_err(s, what);
  }
  sqlite3_finalize(q);
  return -1;
}

/* 1 when the database has tables of its own (not SQLite's), 0 when none; -1 on error. */
static int has_tables(mend_store *s) {
  int tables;
  if (query_int(s, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                "read schema", &tables) != 0)
    return -1;
  return tables > 0;
}

/* The schema version meta names, or 0 when there is no meta table or row. */
static int meta_version(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &q,
                         NULL) != SQLITE_OK)
    return 0;
  int v = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
  sqlite3_finalize(q);
  return v;
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

static int check_version(mend_store *s, int version) {
  if (version > MEND_SCHEMA_VERSION) {
    mend__set_msg(s->err, sizeof s->err, "%s: schema version %d is newer than this mend (%d)",
            s->path, version, MEND_SCHEMA_VERSION);
    return -1;
  }
  if (version < 0) {
    mend__set_msg(s->err, sizeof s->err, "%s: not a mend database (user_version %d)", s->path,
            version);
    return -1;
  }
  return 0;
}

/* Creates or upgrades the schema inside one write transaction; the version is read again there
 * because another process may have created it since the first look. Two processes creating a
 * new file at once have been seen to find the other's tables with user_version still 0: meta,
 * written in the same transaction, then says which version they are; tables and no meta are
 * given a moment (the other's transaction may not be visible whole yet) before the file is
 * called someone else's. */
static int upgrade_schema(mend_store *s) {
  int version;
  for (int tries = 0;; tries++) {
    if (exec_sql(s, "BEGIN IMMEDIATE", "create schema") != 0) return -1;
    if (query_int(s, "PRAGMA user_version", "read schema version", &version) != 0) goto fail;
    if (check_version(s, version) != 0) goto fail;
    if (version != 0) break;
    int tables = has_tables(s);
    if (tables < 0) goto fail;
    if (!tables) break;
    version = meta_version(s);
    if (version > 0) {
      if (check_version(s, version) != 0) goto fail;
      break;
    }
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    if (tries == 40) {
      mend__set_msg(s->err, sizeof s->err,
                    "%s: not a mend database (it has tables of its own and no mend schema)", s->path);
      return -1;
    }
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
  }
  if (version < MEND_SCHEMA_VERSION && mend__sqlite_digest_fn(s->db) != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: create schema: %s", s->path, sqlite3_errmsg(s->db));
    goto fail;
  }
  for (int v = version; v < MEND_SCHEMA_VERSION; v++)
    if (exec_sql(s, mend__migrations[v], "create schema") != 0) goto fail;
  /* No process can be running on a file that did not exist: a new one takes run_key's
   * partial index at once (schema.c, runs_key_layout). */
  if (version == 0 && exec_sql(s, mend__runs_key_rebuild, "create schema") != 0) goto fail;
  if (version < MEND_SCHEMA_VERSION) {
    char sql[160];
    snprintf(sql, sizeof sql,
             "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', '%d');"
             "PRAGMA user_version = %d;", MEND_SCHEMA_VERSION, MEND_SCHEMA_VERSION);
    if (exec_sql(s, sql, "write schema version") != 0) goto fail;
  }
  if (exec_sql(s, "COMMIT", "create schema") != 0) goto fail;
  return 0;
fail:
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return -1;
}

/* user_version says mend; meta must agree, or this is someone else's database. */
static int check_meta(mend_store *s, int version) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &q,
                         NULL) != SQLITE_OK) {
    mend__set_msg(s->err, sizeof s->err, "%s: not a mend database (no meta table: %s)", s->path,
            sqlite3_errmsg(s->db));
    return -1;
  }
  int rc = sqlite3_step(q), ok = 0;
  if (rc == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(q, 0);
    ok = v && atoi(v) == version;
    if (!ok)
      mend__set_msg(s->err, sizeof s->err,
              "%s: schema version in meta (%s) disagrees with user_version (%d)", s->path,
              v ? v : "null", version);
  } else if (rc == SQLITE_DONE) {
    mend__set_msg(s->err, sizeof s->err, "%s: not a mend database (no schema_version in meta)",
            s->path);
  } else {
    mend__sql_err(s, "read meta");
  }
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

static int open_db(mend_store *s, mend_durability durability) {
  /* The connection belongs to the loop thread alone, so SQLite's per-connection mutexes are
   * pure cost (about 8% of a step). The checkpointer below is shared with a worker thread and
   * keeps its own. Its commits go to the WAL through walvfs, in a few writes instead of two a
   * page; the other connections only read the WAL, and use the default VFS. */
  int rc = sqlite3_open_v2(s->path, &s->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
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
  /* First read of the file: a file that is not a database is refused here. */
  if (query_int(s, "PRAGMA user_version", "read schema version", &version) != 0) return -1;
  if (check_version(s, version) != 0) return -1;
  /* Someone else's database is refused before anything about it (its journal mode) changes.
   * The two reads are two snapshots: tables seen after a user_version of 0 may be those of a
   * mend that created the file in between, whose version is then read again. */
  if (version == 0) {
    int tables = has_tables(s);
    if (tables < 0) return -1;
    if (tables && query_int(s, "PRAGMA user_version", "read schema version", &version) != 0)
      return -1;
    if (tables && version == 0 && meta_version(s) == 0) {
      mend__set_msg(s->err, sizeof s->err,
                    "%s: not a mend database (it has tables of its own and no mend schema)", s->path);
      return -1;
    }
    if (check_version(s, version) != 0) return -1;
  }
  if (version > 0 && check_meta(s, version) != 0) return -1;
  if (set_journal_wal(s) != 0) return -1;
  if (exec_sql(s, durability == MEND_DURABILITY_FULL ? "PRAGMA synchronous = FULL"
                                                     : "PRAGMA synchronous = NORMAL",
               "set synchronous") != 0)
    return -1;
  /* A large batch must not spill the page cache to disk in the middle of its transaction. */
  if (exec_sql(s, "PRAGMA cache_size = -8192", "set cache size") != 0) return -1;
  /* Checkpoints copy the WAL into the database file: done inside a commit they stall the
   * loop for tens of milliseconds. A file database gets a connection of its own for them,
   * which a thread of the store's own drives (src/store/checkpoint.c). */
  if (strcmp(s->path, ":memory:") != 0 && s->path[0] &&
      sqlite3_open_v2(s->path, &s->checkpointer, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
                      NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(s->checkpointer, BUSY_TIMEOUT_MS);
    if (exec_sql(s, "PRAGMA wal_autocheckpoint = 0", "set wal_autocheckpoint") != 0 ||
        exec_sql(s, "PRAGMA journal_size_limit = 67108864", "set journal_size_limit") != 0)
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
    if (upgrade_schema(s) != 0 || check_meta(s, MEND_SCHEMA_VERSION) != 0) return -1;
  }
  s->version = MEND_SCHEMA_VERSION;
  if (load_labels(s) != 0) return -1;
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

/* Numbered history rows go HISTORY_GROUP to a statement: an INSERT's own cost (cursors
 * opened and closed, the statement begun and ended) is a fifth of a small row's, and a run
 * writes eight of them (W1). A row's values are bound as its record holds them (run_id, step,
 * at, event, from, to, attempt, error, delay, detail, worker, error_kind, seq). */
static void history_group_sql(char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "INSERT INTO history(run_id, seq, step, at, event,"
                              " from_status, to_status, attempt, error, delay, detail, worker,"
                              " error_kind) VALUES");
  for (int r = 0; r < HISTORY_GROUP && n < len; r++) {
    int b = r * HISTORY_VALUES;
    n += (size_t)snprintf(buf + n, len - n, "%s(?%d,?%d", r ? "," : "", b + 1, b + 13);
    for (int j = 2; j <= 12 && n < len; j++) n += (size_t)snprintf(buf + n, len - n, ",?%d", b + j);
    if (n < len) n += (size_t)snprintf(buf + n, len - n, ")");
  }
  /* No ON CONFLICT: a number taken aborts the statement and backs out its rows (append_group). */
}

/* SQLite says "unable to open database file" when it cannot create the file, or WAL mode its
 * -shm file next to the database: name the likelier cause for a person (a folder that does not
 * exist, or a file or folder that is read-only). */
static void explain_open_failure(mend_store *s) {
  if (strcmp(s->path, ":memory:") == 0 || s->path[0] == 0) return;
  char dir[4096];
  mend__set_msg(dir, sizeof dir, "%s", s->path);
  char *slash = strrchr(dir, '/');
  if (slash) *(slash == dir ? slash + 1 : slash) = 0;
  else mend__set_msg(dir, sizeof dir, ".");
  size_t n = strlen(s->err);
  int room = (int)(sizeof s->err - n);
  if (access(s->path, F_OK) == 0 && access(s->path, W_OK) != 0) {
    int why = errno;
    char shm[4200];
    mend__set_msg(shm, sizeof shm, "%s-shm", s->path);
    /* SQLite's own cause is then the -shm file's (ENOENT: it could not be made), which reads
     * as if the database were missing: say what is missing and why it is needed. */
    if (access(shm, F_OK) != 0)
      mend__set_msg(s->err, (int)sizeof s->err, "%s: cannot open: the file is read-only (%s), and "
                    "its %s-shm file, which a database in WAL mode needs even to be read, is not "
                    "there and cannot be made: open it where it can be written, or copy it",
                    s->path, strerror(why), s->path);
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
  if (open_db(s, durability) != 0) {
    explain_open_failure(s);
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
  forget_versions(s, 0);
  free(s->versions);
  free(s->fence_owner);
  mend_idset_clear(&s->fence_checked);
  mend_idset_clear(&s->lost);
  for (int i = 0; i < s->nlost_new; i++) free(s->lost_new[i]);
  free(s->lost_new);
  for (int k = 0; k < 3; k++) mend__log_free(&s->logs[k]);
  free(s);
}

int mend__sqlite_not_found(const mend_store *s) { return s->not_found; }

const char *mend__sqlite_errmsg(mend_store *s) { return s ? s->err : "no store"; }

/* A passive checkpoint on the checkpointer's connection: the frames copied (0 when busy), and
 * the WAL's length in *wal_frames; -1 on error. */
int mend__sqlite_checkpoint(mend_store *s, int *wal_frames) {
  if (wal_frames) *wal_frames = 0;
  if (!s->checkpointer) return 0;
  int log = 0, done = 0;
  /* A connection that has read nothing does not know the file is in WAL mode, and its
   * checkpoint would quietly do nothing: read first. */
  sqlite3_exec(s->checkpointer, "SELECT 1 FROM sqlite_master LIMIT 1", NULL, NULL, NULL);
  int rc = sqlite3_wal_checkpoint_v2(s->checkpointer, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  if (wal_frames) *wal_frames = log > 0 ? log : 0;
  if (rc == SQLITE_BUSY) return 0;
  return rc == SQLITE_OK ? (done > 0 ? done : 0) : -1;
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
static int sqlite_gone(mend_store *s, char *why, int len) {
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

int mend__sqlite_schema_version(mend_store *s) { return s->version; }

const mend_store_methods mend__sqlite_methods = {
  .name = "sqlite",
  .close = mend__sqlite_close,
  .errmsg = mend__sqlite_errmsg,
  .not_found = mend__sqlite_not_found,
  .commit = mend__sqlite_commit,
  .locked = mend__sqlite_locked,
  .lock_try = mend__sqlite_lock_try,
  .set_busy_wait = mend__sqlite_set_busy_wait,
  .set_thread_cpus = mend__sqlite_set_thread_cpus,
  .batch_open = mend__sqlite_batch_open,
  .start_writer = mend__sqlite_start_writer,
  .hand_off = mend__sqlite_hand_off,
  .writer_busy = mend__sqlite_writer_busy,
  .writer_part = mend__sqlite_writer_part,
  .batch_writes = mend__sqlite_batch_writes,
  .read_flushes = mend__sqlite_read_flushes,
  .trim = mend__sqlite_trim,
  .open_seq = mend__sqlite_open_seq,
  .durable_seq = mend__sqlite_durable_seq,
  .set_commit_hook = mend__sqlite_set_commit_hook,
  .last_history_seq = mend__sqlite_last_history_seq,
  .last_history = mend__sqlite_last_history,
  .last_history_view = mend__sqlite_last_history_view,
  .version_script = mend__sqlite_version_script,
  .insert_run = mend__sqlite_insert_run,
  .update_run = mend__sqlite_update_run,
  .put_step = mend__sqlite_put_step,
  .update_step = mend__sqlite_update_step,
  .append_history = mend__sqlite_append_history,
  .put_breaker = mend__sqlite_put_breaker,
  .put_dlq = mend__sqlite_put_dlq,
  .find_run_key = mend__sqlite_find_run_key,
  .find_run_key_committed = mend__sqlite_find_run_key_committed,
  .find_key_result = mend__sqlite_find_key_result,
  .get_breaker = mend__sqlite_get_breaker,
  .run = mend__sqlite_run,
  .history = mend__sqlite_history,
  .history_page = mend__sqlite_history_page,
  .dlq = mend__sqlite_dlq,
  .breakers = mend__sqlite_breakers,
  .runs = mend__sqlite_runs,
  .runs_where = mend__sqlite_runs_where,
  .audit_list = mend__sqlite_audit_list,
  .dlq_remove = mend__sqlite_dlq_remove,
  .set_unavailable = mend__sqlite_set_unavailable,
  .version_number = mend__sqlite_version_number,
  .move_run = mend__sqlite_move_run,
  .workflows = mend__sqlite_workflows,
  .take = mend__sqlite_take,
  .hold_status = mend__sqlite_hold_status,
  .request_cancel = mend__sqlite_request_cancel,
  .cancel_requests = mend__sqlite_cancel_requests,
  .cancels_requested = mend__sqlite_cancels_requested,
  .audit = mend__sqlite_audit,
  .schema_version = mend__sqlite_schema_version,
  .prune = mend__sqlite_prune,
  .send_event = mend__sqlite_send_event,
  .record_event = mend__sqlite_record_event,
  .record_keyed_event = mend__sqlite_record_keyed_event,
  .event_outcome = mend__sqlite_event_outcome,
  .event_ticket_free = mend__sqlite_event_ticket_free,
  .next_committed_event = mend__sqlite_next_committed_event,
  .open_committed_reads = mend__sqlite_open_committed_reads,
  .can_look_ahead = mend__sqlite_can_look_ahead,
  .look_ahead = mend__sqlite_look_ahead,
  .look_ahead_take = mend__sqlite_look_ahead_take,
  .next_event = mend__sqlite_next_event,
  .consume_event = mend__sqlite_consume_event,
  .last_event = mend__sqlite_last_event,
  .event_sent = mend__sqlite_event_sent,
  .events_after = mend__sqlite_events_after,
  .inbox = mend__sqlite_inbox,
  .set_worker = mend__sqlite_set_worker,
  .claim = mend__sqlite_claim,
  .claimable = mend__sqlite_claimable,
  .renew = mend__sqlite_renew,
  .release = mend__sqlite_release,
  .lease_holders = mend__sqlite_lease_holders,
  .release_owner = mend__sqlite_release_owner,
  .set_fence = mend__sqlite_set_fence,
  .fence_news = mend__sqlite_fence_news,
  .held = mend__sqlite_held,
  .add_lost = mend__sqlite_add_lost,
  .fence_verified = mend__sqlite_fence_verified,
  .repairing = mend__sqlite_repairing,
  .owner = mend__sqlite_owner,
  .owner_view = mend__sqlite_owner_view,
  .put_token = mend__sqlite_put_token,
  .token_of_attempt = mend__sqlite_token_of_attempt,
  .token = mend__sqlite_token,
  .use_token = mend__sqlite_use_token,
  .set_parent = mend__sqlite_set_parent,
  .children = mend__sqlite_children,
  .child_end = mend__sqlite_child_end,
  .reopen_run = mend__sqlite_reopen_run,
  .runs_page = mend__sqlite_runs_page,
  .run_counts = mend__sqlite_run_counts,
  .run_image = mend__sqlite_run_image,
  .gone = sqlite_gone,
};
