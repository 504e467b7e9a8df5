/*
 * store: everything mend keeps in SQLite (SPEC section 9). Owns the schema, its version check,
 * every SQL statement (prepared once at open), the batch that group commit ends, and the turning
 * of rows into jansson values. No other module writes a query; this one never decides what a
 * transition means.
 */
#include "store.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#define BUSY_TIMEOUT_MS 5000

/* One table of statements so that open prepares them all and close finalizes them all. */
enum {
  Q_BEGIN, Q_COMMIT, Q_ROLLBACK,
  Q_INSERT_RUN, Q_UPDATE_RUN, Q_PUT_STEP, Q_APPEND_HISTORY, Q_PUT_BREAKER, Q_PUT_DLQ,
  Q_FIND_RUN_KEY, Q_FIND_KEY_RESULT, Q_GET_BREAKER,
  Q_CLAIM, Q_RENEW, Q_RELEASE, Q_OWNER, Q_HOLDERS, Q_RELEASE_OWNER,
  Q_DLQ_REMOVE, Q_REQUEST_CANCEL, Q_CANCEL_REQUESTS, Q_AUDIT, Q_AUDIT_LIST, Q_TAKE,
  Q_RUN, Q_STEPS, Q_HISTORY, Q_DLQ, Q_BREAKERS, Q_RUNS,
  Q__COUNT
};

static const char *const query_sql[Q__COUNT] = {
  [Q_BEGIN] = "BEGIN IMMEDIATE",
  [Q_COMMIT] = "COMMIT",
  [Q_ROLLBACK] = "ROLLBACK",
  [Q_INSERT_RUN] =
    "INSERT INTO runs(id, workflow, version, source, run_key, status, input, error, attention,"
    " created, updated, owner, lease_until) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
    " ?12, ?13) ON CONFLICT(run_key) DO NOTHING",
  /* A run that is neither running nor compensating is nobody's: repairs from another process
   * need not wait for its lease, and claims never look at it. */
  [Q_UPDATE_RUN] =
    "UPDATE runs SET status = ?2, error = ?3, attention = ?4, updated = ?5, reason = ?6,"
    " owner = iif(?2 IN ('running', 'compensating'), owner, NULL),"
    " lease_until = iif(?2 IN ('running', 'compensating'), lease_until, NULL) WHERE id = ?1",
  [Q_PUT_STEP] =
    "INSERT INTO steps(run_id, idx, name, status, attempts, comp_attempts, idem_key, custom_key,"
    " result, error, due, last_delay, updated, slept)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
    " ON CONFLICT(run_id, idx) DO UPDATE SET name = excluded.name, status = excluded.status,"
    " attempts = excluded.attempts, comp_attempts = excluded.comp_attempts,"
    " idem_key = excluded.idem_key, custom_key = excluded.custom_key, result = excluded.result,"
    " error = excluded.error, due = excluded.due, last_delay = excluded.last_delay,"
    " updated = excluded.updated, slept = excluded.slept",
  [Q_APPEND_HISTORY] =
    "INSERT INTO history(run_id, step, at, event, from_status, to_status, attempt, error, delay,"
    " detail, worker) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
  [Q_PUT_BREAKER] =
    "INSERT INTO breakers(key, state, failures, successes, opened_at, open_until, updated)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    " ON CONFLICT(key) DO UPDATE SET state = excluded.state, failures = excluded.failures,"
    " successes = excluded.successes, opened_at = excluded.opened_at,"
    " open_until = excluded.open_until, updated = excluded.updated",
  [Q_PUT_DLQ] =
    "INSERT INTO dlq(run_id, reason, step, error, detail, at) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT(run_id) DO UPDATE SET reason = excluded.reason, step = excluded.step,"
    " error = excluded.error, detail = excluded.detail, at = excluded.at",
  [Q_FIND_RUN_KEY] = "SELECT id FROM runs WHERE run_key = ?1",
  /* custom_key = 1 lets SQLite use the partial index on idem_key. */
  [Q_FIND_KEY_RESULT] =
    "SELECT result FROM steps WHERE idem_key = ?1 AND custom_key = 1 AND status = 'succeeded'"
    " ORDER BY updated DESC LIMIT 1",
  [Q_GET_BREAKER] =
    "SELECT state, failures, successes, opened_at, open_until FROM breakers WHERE key = ?1",
  /* Takes unfinished runs nobody holds (owner NULL or lease run out) for `owner`. */
  /* Never our own runs (they are in our memory, whatever their lease says); oldest first, or
   * newest first (?5) so that new work does not wait behind a backlog. */
  [Q_CLAIM] =
    "UPDATE runs SET owner = ?1, lease_until = ?2 WHERE id IN (SELECT id FROM runs"
    " WHERE status IN ('running', 'compensating') AND (owner IS NULL OR (lease_until < ?3"
    " AND owner IS NOT ?1)) ORDER BY CASE WHEN ?5 THEN -created ELSE created END LIMIT ?4)"
    " RETURNING id",
  [Q_RENEW] =
    "UPDATE runs SET lease_until = ?2 WHERE owner = ?1 AND status IN ('running', 'compensating')",
  [Q_RELEASE] = "UPDATE runs SET owner = NULL, lease_until = NULL WHERE id = ?1 AND owner = ?2",
  [Q_OWNER] = "SELECT owner, lease_until FROM runs WHERE id = ?1",
  [Q_HOLDERS] =
    "SELECT DISTINCT owner FROM runs WHERE status IN ('running', 'compensating')"
    " AND owner IS NOT NULL AND lease_until >= ?1",
  [Q_RELEASE_OWNER] =
    "UPDATE runs SET owner = NULL, lease_until = NULL WHERE owner = ?1"
    " AND status IN ('running', 'compensating')",
  [Q_RUN] =
    "SELECT id, workflow, version, source, run_key AS key, status, input, error, attention,"
    " reason, owner, lease_until, created, updated FROM runs WHERE id = ?1",
  [Q_STEPS] =
    "SELECT idx, name, status, attempts, comp_attempts, idem_key AS idempotency_key,"
    " custom_key, result, error, due, last_delay, updated, slept FROM steps WHERE run_id = ?1"
    " ORDER BY idx",
  [Q_HISTORY] =
    "SELECT seq, run_id, step, at, event, from_status AS \"from\", to_status AS \"to\", attempt,"
    " error, delay, detail, worker FROM history WHERE run_id = ?1 ORDER BY seq",
  [Q_DLQ] = "SELECT run_id, reason, step, error, detail, at FROM dlq ORDER BY at, run_id",
  [Q_BREAKERS] =
    "SELECT key, state, failures, successes, opened_at, open_until, updated FROM breakers"
    " ORDER BY key",
  /* A negative LIMIT is no limit in SQLite. */
  [Q_RUNS] =
    "SELECT id, workflow, version, source, run_key AS key, status, input, error, attention,"
    " reason, owner, lease_until, created, updated FROM runs WHERE (?1 IS NULL OR status = ?1)"
    " AND (?2 IS NULL OR workflow = ?2) AND (?4 IS NULL OR created >= ?4)"
    " AND (?5 = 0 OR attention = 1 OR status = 'needs_attention')"
    " ORDER BY created DESC, rowid DESC LIMIT ?3",
  [Q_DLQ_REMOVE] = "DELETE FROM dlq WHERE run_id = ?1",
  [Q_TAKE] = "UPDATE runs SET owner = ?2, lease_until = ?3, cancel_requested = 0 WHERE id = ?1",
  [Q_REQUEST_CANCEL] = "UPDATE runs SET cancel_requested = 1 WHERE id = ?1",
  [Q_CANCEL_REQUESTS] =
    "SELECT id FROM runs WHERE owner = ?1 AND cancel_requested = 1 AND status = 'running'",
  [Q_AUDIT] = "INSERT INTO audit(at, who, op, target, detail) VALUES(?1, ?2, ?3, ?4, ?5)",
  [Q_AUDIT_LIST] = "SELECT seq, at, who, op, target, detail FROM audit ORDER BY seq",
};

/* Version 0 -> 1. Later versions append a migration here and bump MEND_SCHEMA_VERSION. */
static const char *const migrations[MEND_SCHEMA_VERSION] = {
  "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
  "CREATE TABLE runs(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source TEXT,"
  " run_key TEXT UNIQUE, status TEXT NOT NULL, input TEXT, error TEXT,"
  " attention INTEGER NOT NULL DEFAULT 0, reason TEXT, owner TEXT, lease_until REAL,"
  " cancel_requested INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL);"
  "CREATE TABLE audit(seq INTEGER PRIMARY KEY, at REAL, who TEXT, op TEXT, target TEXT,"
  " detail TEXT);"
  "CREATE INDEX runs_status ON runs(status);"
  "CREATE TABLE steps(run_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT, status TEXT NOT NULL,"
  " attempts INTEGER NOT NULL DEFAULT 0, comp_attempts INTEGER NOT NULL DEFAULT 0, idem_key TEXT,"
  " custom_key INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT, due REAL, last_delay REAL,"
  " updated REAL, slept INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(run_id, idx));"
  "CREATE INDEX steps_custom_key ON steps(idem_key) WHERE custom_key = 1;"
  "CREATE TABLE history(seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step TEXT, at REAL,"
  " event TEXT NOT NULL, from_status TEXT, to_status TEXT, attempt INTEGER, error TEXT,"
  " delay REAL, detail TEXT, worker TEXT);"
  "CREATE INDEX history_run ON history(run_id);"
  "CREATE TABLE breakers(key TEXT PRIMARY KEY, state TEXT NOT NULL, failures INTEGER,"
  " successes INTEGER, opened_at REAL, open_until REAL, updated REAL);"
  "CREATE TABLE dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail TEXT,"
  " at REAL);",
};

struct mend_store {
  sqlite3 *db;
  sqlite3 *checkpointer;   /* a second connection, for checkpoints off the loop thread */
  char *path;
  int in_batch;
  /* A write of this batch failed: the whole batch must not commit, or the transitions
   * recorded before the failure would be kept without the one that failed. */
  int batch_failed;
  int version;   /* schema version found or made at open */
  char *worker;  /* written into every history row: who wrote it */
  sqlite3_stmt *q[Q__COUNT];
  char err[1024];
};

static void set_msg(char *buf, int len, const char *fmt, ...) {
  va_list ap;
  if (!buf || len <= 0) return;
  va_start(ap, fmt);
  vsnprintf(buf, (size_t)len, fmt, ap);
  va_end(ap);
}

/* "<path>: <what>: <sqlite errmsg>", read before any reset can change the message. */
static void sql_err(mend_store *s, const char *what) {
  set_msg(s->err, sizeof s->err, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static double now_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The busy handler already waits; this covers the cases where SQLite returns SQLITE_BUSY without
 * calling it (WAL recovery by another connection, for one), still bounded by the busy timeout. */
static int step_busy_retry(sqlite3_stmt *q) {
  double deadline = now_mono() + BUSY_TIMEOUT_MS / 1000.0;
  int rc;
  for (;;) {
    rc = sqlite3_step(q);
    if ((rc & 0xff) != SQLITE_BUSY || now_mono() >= deadline) break;
    sqlite3_reset(q);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return rc;
}

static void finish(sqlite3_stmt *q) {
  sqlite3_reset(q);
  sqlite3_clear_bindings(q);
}

static int batch_begin(mend_store *s) {
  if (s->batch_failed) return -1;   /* errmsg still names the first failure */
  if (s->in_batch) return 0;
  int rc = step_busy_retry(s->q[Q_BEGIN]);
  if (rc != SQLITE_DONE) {
    sql_err(s, "begin");
    sqlite3_reset(s->q[Q_BEGIN]);
    return -1;
  }
  sqlite3_reset(s->q[Q_BEGIN]);
  s->in_batch = 1;
  return 0;
}

static void rollback(mend_store *s) {
  /* SQLite may already have rolled back on its own (SQLITE_FULL, SQLITE_IOERR, ...). */
  if (!sqlite3_get_autocommit(s->db)) {
    sqlite3_step(s->q[Q_ROLLBACK]);
    sqlite3_reset(s->q[Q_ROLLBACK]);
  }
  s->in_batch = 0;
  s->batch_failed = 0;
}

/* Runs a bound write statement; `rc` carries the first binding failure, if any. */
static int run_write(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc != SQLITE_DONE) {
    sql_err(s, what);
    finish(q);
    s->batch_failed = 1;
    return -1;
  }
  finish(q);
  return 0;
}

static int bind_text(sqlite3_stmt *q, int i, const char *v) {
  return v ? sqlite3_bind_text(q, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(q, i);
}

static int bind_opt_real(sqlite3_stmt *q, int i, double v) {
  return v < 0 ? sqlite3_bind_null(q, i) : sqlite3_bind_double(q, i, v);
}

/* Chains binds: the first failing result code wins and later binds are skipped. */
#define BIND(call) do { if (rc == SQLITE_OK) rc = (call); } while (0)

/* ---- open / close ---------------------------------------------------------------------- */

static int exec_sql(mend_store *s, const char *sql, const char *what) {
  if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    sql_err(s, what);
    return -1;
  }
  return 0;
}

/* Runs a one-row, one-column query through a temporary statement (open time only). */
static int query_int(mend_store *s, const char *sql, const char *what, int *out) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
    sql_err(s, what);
    return -1;
  }
  int rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return 0;
  }
  if (rc == SQLITE_DONE) {
    set_msg(s->err, sizeof s->err, "%s: %s: no row", s->path, what);
  } else if ((rc & 0xff) == SQLITE_NOTADB) {
    set_msg(s->err, sizeof s->err, "%s: file is not a database", s->path);
  } else {
    sql_err(s, what);
  }
  sqlite3_finalize(q);
  return -1;
}

static int set_journal_wal(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &q, NULL) != SQLITE_OK) {
    sql_err(s, "set WAL mode");
    return -1;
  }
  int rc = step_busy_retry(q);
  if (rc != SQLITE_ROW) {
    if ((rc & 0xff) == SQLITE_NOTADB)
      set_msg(s->err, sizeof s->err, "%s: file is not a database", s->path);
    else
      sql_err(s, "set WAL mode");
    sqlite3_finalize(q);
    return -1;
  }
  const char *mode = (const char *)sqlite3_column_text(q, 0);
  /* An in-memory database cannot use WAL and needs no durability. */
  int ok = mode && (strcmp(mode, "wal") == 0 || strcmp(mode, "memory") == 0);
  if (!ok)
    set_msg(s->err, sizeof s->err, "%s: cannot use WAL mode (journal mode stays %s)", s->path,
            mode ? mode : "unknown");
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

static int check_version(mend_store *s, int version) {
  if (version > MEND_SCHEMA_VERSION) {
    set_msg(s->err, sizeof s->err, "%s: schema version %d is newer than this mend (%d)",
            s->path, version, MEND_SCHEMA_VERSION);
    return -1;
  }
  if (version < 0) {
    set_msg(s->err, sizeof s->err, "%s: not a mend database (user_version %d)", s->path,
            version);
    return -1;
  }
  return 0;
}

/* Creates or upgrades the schema inside one write transaction; the version is read again there
 * because another process may have created it since the first look. */
static int count_foreign(mend_store *s) {
  int foreign;
  if (query_int(s, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                "read schema", &foreign) != 0)
    return -1;
  if (foreign > 0) {
    set_msg(s->err, sizeof s->err,
            "%s: not a mend database (it has tables of its own and no mend schema)", s->path);
    return -1;
  }
  return 0;
}

static int upgrade_schema(mend_store *s) {
  int version;
  if (exec_sql(s, "BEGIN IMMEDIATE", "create schema") != 0) return -1;
  if (query_int(s, "PRAGMA user_version", "read schema version", &version) != 0) goto fail;
  if (check_version(s, version) != 0) goto fail;
  if (version == 0 && count_foreign(s) != 0) goto fail;
  for (int v = version; v < MEND_SCHEMA_VERSION; v++)
    if (exec_sql(s, migrations[v], "create schema") != 0) goto fail;
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
    set_msg(s->err, sizeof s->err, "%s: not a mend database (no meta table: %s)", s->path,
            sqlite3_errmsg(s->db));
    return -1;
  }
  int rc = sqlite3_step(q), ok = 0;
  if (rc == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(q, 0);
    ok = v && atoi(v) == version;
    if (!ok)
      set_msg(s->err, sizeof s->err,
              "%s: schema version in meta (%s) disagrees with user_version (%d)", s->path,
              v ? v : "null", version);
  } else if (rc == SQLITE_DONE) {
    set_msg(s->err, sizeof s->err, "%s: not a mend database (no schema_version in meta)",
            s->path);
  } else {
    sql_err(s, "read meta");
  }
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

static int open_db(mend_store *s, mend_durability durability) {
  /* The connection belongs to the loop thread alone, so SQLite's per-connection mutexes are
   * pure cost (about 8% of a step). The checkpointer below is shared with a worker thread and
   * keeps its own. */
  int rc = sqlite3_open_v2(s->path, &s->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    set_msg(s->err, sizeof s->err, "%s: cannot open: %s", s->path,
            s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    return -1;
  }
  sqlite3_extended_result_codes(s->db, 1);
  if (sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS) != SQLITE_OK) {
    sql_err(s, "set busy timeout");
    return -1;
  }
  int version;
  /* First read of the file: a file that is not a database is refused here. */
  if (query_int(s, "PRAGMA user_version", "read schema version", &version) != 0) return -1;
  if (check_version(s, version) != 0) return -1;
  /* Someone else's database is refused before anything about it (its journal mode) changes. */
  if (version == 0 ? count_foreign(s) != 0 : check_meta(s, version) != 0) return -1;
  if (set_journal_wal(s) != 0) return -1;
  if (exec_sql(s, durability == MEND_DURABILITY_FULL ? "PRAGMA synchronous = FULL"
                                                     : "PRAGMA synchronous = NORMAL",
               "set synchronous") != 0)
    return -1;
  /* A large batch must not spill the page cache to disk in the middle of its transaction. */
  if (exec_sql(s, "PRAGMA cache_size = -8192", "set cache size") != 0) return -1;
  /* Checkpoints copy the WAL into the database file: done inside a commit they stall the
   * loop for tens of milliseconds. A file database gets a connection of its own for them,
   * which the engine drives from a worker thread (mend_store_checkpoint). */
  if (strcmp(s->path, ":memory:") != 0 && s->path[0] &&
      sqlite3_open_v2(s->path, &s->checkpointer, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
                      NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(s->checkpointer, BUSY_TIMEOUT_MS);
    if (exec_sql(s, "PRAGMA wal_autocheckpoint = 0", "set wal_autocheckpoint") != 0 ||
        exec_sql(s, "PRAGMA journal_size_limit = 67108864", "set journal_size_limit") != 0)
      return -1;
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
  for (int i = 0; i < Q__COUNT; i++) {
    if (sqlite3_prepare_v3(s->db, query_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->q[i], NULL)
        != SQLITE_OK) {
      sql_err(s, "prepare");
      return -1;
    }
  }
  return 0;
}

/* SQLite says "unable to open database file" when WAL mode cannot create its -shm file next to
 * the database: name the likelier cause for a person when the file or its folder is read-only. */
static void explain_read_only(mend_store *s) {
  if (strcmp(s->path, ":memory:") == 0 || s->path[0] == 0) return;
  char dir[4096];
  set_msg(dir, sizeof dir, "%s", s->path);
  char *slash = strrchr(dir, '/');
  if (slash) *(slash == dir ? slash + 1 : slash) = 0;
  else set_msg(dir, sizeof dir, ".");
  int file_ro = access(s->path, F_OK) == 0 && access(s->path, W_OK) != 0;
  int dir_ro = access(dir, W_OK) != 0;
  if (!file_ro && !dir_ro) return;
  size_t n = strlen(s->err);
  set_msg(s->err + n, (int)(sizeof s->err - n), " (%s is read-only: %s)",
          file_ro ? "the file" : "its folder", strerror(errno));
}

mend_store *mend_store_open(const char *path, mend_durability durability, char *err,
                            int errlen) {
  mend_store *s = calloc(1, sizeof *s);
  if (!s || !path || !(s->path = strdup(path))) {
    set_msg(err, errlen, "%s: out of memory", path ? path : "(null)");
    free(s);
    return NULL;
  }
  if (open_db(s, durability) != 0) {
    explain_read_only(s);
    set_msg(err, errlen, "%s", s->err);
    mend_store_close(s);
    return NULL;
  }
  return s;
}

void mend_store_close(mend_store *s) {
  if (!s) return;
  if (s->db && s->in_batch && s->q[Q_ROLLBACK]) rollback(s);
  for (int i = 0; i < Q__COUNT; i++) sqlite3_finalize(s->q[i]);
  /* close_v2 also rolls back whatever a half-finished open left behind. */
  sqlite3_close_v2(s->db);
  sqlite3_close_v2(s->checkpointer);   /* the last connection to close checkpoints the WAL */
  free(s->path);
  free(s->worker);
  free(s);
}

const char *mend_store_errmsg(mend_store *s) { return s ? s->err : "no store"; }

int mend_store_has_checkpointer(const mend_store *s) { return s->checkpointer != NULL; }

int mend_store_checkpoint(mend_store *s, int *wal_frames) {
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

int mend_store_checkpoint_catch_up(mend_store *s) {
  if (!s->checkpointer || s->in_batch) return 0;
  int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  return rc == SQLITE_OK || rc == SQLITE_BUSY ? 0 : -1;
}

int mend_store_batch_open(const mend_store *s) { return s->in_batch; }

int mend_store_commit(mend_store *s) {
  if (!s->in_batch) return 0;
  if (s->batch_failed) {
    /* errmsg keeps the write that failed: that is the cause worth reporting. */
    rollback(s);
    return -1;
  }
  int rc = step_busy_retry(s->q[Q_COMMIT]);
  if (rc != SQLITE_DONE) {
    sql_err(s, "commit");
    sqlite3_reset(s->q[Q_COMMIT]);
    rollback(s);
    return -1;
  }
  sqlite3_reset(s->q[Q_COMMIT]);
  s->in_batch = 0;
  return 0;
}

int mend_store_schema_version(mend_store *s) { return s->version; }

/* ---- writes ---------------------------------------------------------------------------- */

int mend_store_insert_run(mend_store *s, const mend_run_rec *r) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_INSERT_RUN];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, r->id));
  BIND(bind_text(q, 2, r->workflow));
  BIND(bind_text(q, 3, r->version));
  BIND(bind_text(q, 4, r->source));
  BIND(bind_text(q, 5, r->run_key));
  BIND(bind_text(q, 6, r->status));
  BIND(bind_text(q, 7, r->input));
  BIND(bind_text(q, 8, r->error));
  BIND(sqlite3_bind_int(q, 9, r->attention ? 1 : 0));
  BIND(sqlite3_bind_double(q, 10, r->created));
  BIND(sqlite3_bind_double(q, 11, r->updated));
  BIND(bind_text(q, 12, r->owner));
  BIND(bind_opt_real(q, 13, r->owner ? r->lease_until : -1));
  if (run_write(s, q, rc, "insert run") != 0) return -1;
  return sqlite3_changes(s->db) == 0 ? 1 : 0;   /* 1: the run key was taken */
}

int mend_store_update_run(mend_store *s, const char *id, const char *status, const char *error,
                          int attention, double updated, const char *reason) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_UPDATE_RUN];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, id));
  BIND(bind_text(q, 2, status));
  BIND(bind_text(q, 3, error));
  BIND(sqlite3_bind_int(q, 4, attention ? 1 : 0));
  BIND(sqlite3_bind_double(q, 5, updated));
  BIND(bind_text(q, 6, reason));
  if (run_write(s, q, rc, "update run") != 0) return -1;
  if (sqlite3_changes(s->db) == 0) {
    /* An update that changes nothing would lose a transition silently. */
    set_msg(s->err, sizeof s->err, "%s: update run: no run %s", s->path, id ? id : "(null)");
    s->batch_failed = 1;
    return -1;
  }
  return 0;
}

int mend_store_put_step(mend_store *s, const mend_step_rec *st) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_PUT_STEP];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, st->run_id));
  BIND(sqlite3_bind_int(q, 2, st->idx));
  BIND(bind_text(q, 3, st->name));
  BIND(bind_text(q, 4, st->status));
  BIND(sqlite3_bind_int(q, 5, st->attempts));
  BIND(sqlite3_bind_int(q, 6, st->comp_attempts));
  BIND(bind_text(q, 7, st->idem_key));
  BIND(sqlite3_bind_int(q, 8, st->custom_key ? 1 : 0));
  BIND(bind_text(q, 9, st->result));
  BIND(bind_text(q, 10, st->error));
  BIND(bind_opt_real(q, 11, st->due));
  BIND(bind_opt_real(q, 12, st->last_delay));
  BIND(sqlite3_bind_double(q, 13, st->updated));
  BIND(sqlite3_bind_int(q, 14, st->slept ? 1 : 0));
  return run_write(s, q, rc, "put step");
}

int mend_store_append_history(mend_store *s, const mend_history_rec *h) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_APPEND_HISTORY];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, h->run_id));
  BIND(bind_text(q, 2, h->step));
  BIND(sqlite3_bind_double(q, 3, h->at));
  BIND(bind_text(q, 4, h->event));
  BIND(bind_text(q, 5, h->from_status));
  BIND(bind_text(q, 6, h->to_status));
  BIND(h->attempt ? sqlite3_bind_int(q, 7, h->attempt) : sqlite3_bind_null(q, 7));
  BIND(bind_text(q, 8, h->error));
  BIND(bind_opt_real(q, 9, h->delay));
  BIND(bind_text(q, 10, h->detail));
  BIND(bind_text(q, 11, s->worker));
  return run_write(s, q, rc, "append history");
}

int mend_store_put_breaker(mend_store *s, const char *key, const mend_breaker *b, double updated) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_PUT_BREAKER];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, key));
  BIND(bind_text(q, 2, mend_breaker_state_name(b->state)));
  BIND(sqlite3_bind_int(q, 3, b->failures));
  BIND(sqlite3_bind_int(q, 4, b->successes));
  BIND(sqlite3_bind_double(q, 5, b->opened_at));
  BIND(sqlite3_bind_double(q, 6, b->open_until));
  BIND(sqlite3_bind_double(q, 7, updated));
  return run_write(s, q, rc, "put breaker");
}

int mend_store_put_dlq(mend_store *s, const mend_dlq_rec *d) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_PUT_DLQ];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, d->run_id));
  BIND(bind_text(q, 2, d->reason));
  BIND(bind_text(q, 3, d->step));
  BIND(bind_text(q, 4, d->error));
  BIND(bind_text(q, 5, d->detail));
  BIND(sqlite3_bind_double(q, 6, d->at));
  return run_write(s, q, rc, "put dlq");
}

/* ---- point reads ----------------------------------------------------------------------- */

/* Steps a bound read statement to its first row: 1 row, 0 none, -1 error (statement reset). */
static int first_row(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) return 1;
  if (rc == SQLITE_DONE) {
    finish(q);
    return 0;
  }
  sql_err(s, what);
  finish(q);
  return -1;
}

int mend_store_find_run_key(mend_store *s, const char *run_key, char *id_out, int id_len) {
  sqlite3_stmt *q = s->q[Q_FIND_RUN_KEY];
  int r = first_row(s, q, bind_text(q, 1, run_key), "find run key");
  if (r != 1) return r;
  const char *id = (const char *)sqlite3_column_text(q, 0);
  int n = sqlite3_column_bytes(q, 0);
  if (!id || n >= id_len) {
    set_msg(s->err, sizeof s->err, "%s: find run key: run id does not fit in %d bytes", s->path,
            id_len);
    finish(q);
    return -1;
  }
  memcpy(id_out, id, (size_t)n + 1);
  finish(q);
  return 1;
}

int mend_store_find_key_result(mend_store *s, const char *idem_key, char **result_out) {
  sqlite3_stmt *q = s->q[Q_FIND_KEY_RESULT];
  int r = first_row(s, q, bind_text(q, 1, idem_key), "find key result");
  if (r != 1) return r;
  const char *res = (const char *)sqlite3_column_text(q, 0);
  /* A step that returned nothing has a NULL result, which is JSON null to the caller. */
  *result_out = strdup(res ? res : "null");
  finish(q);
  if (!*result_out) {
    set_msg(s->err, sizeof s->err, "%s: find key result: out of memory", s->path);
    return -1;
  }
  return 1;
}

int mend_store_get_breaker(mend_store *s, const char *key, mend_breaker *b) {
  sqlite3_stmt *q = s->q[Q_GET_BREAKER];
  int r = first_row(s, q, bind_text(q, 1, key), "get breaker");
  if (r != 1) return r;
  const char *state = (const char *)sqlite3_column_text(q, 0);
  mend_breaker_state st;
  if (!state || mend_breaker_state_parse(state, &st) != 0) {
    set_msg(s->err, sizeof s->err, "%s: get breaker %s: unknown state %s", s->path, key,
            state ? state : "null");
    finish(q);
    return -1;
  }
  b->state = st;
  b->failures = sqlite3_column_int(q, 1);
  b->successes = sqlite3_column_int(q, 2);
  b->probes = 0;
  b->opened_at = sqlite3_column_double(q, 3);
  b->open_until = sqlite3_column_double(q, 4);
  finish(q);
  return 1;
}

/* ---- queries --------------------------------------------------------------------------- */

static int is_json_column(const char *name) {
  return strcmp(name, "input") == 0 || strcmp(name, "result") == 0;
}

static int is_bool_column(const char *name) {
  return strcmp(name, "attention") == 0 || strcmp(name, "custom_key") == 0 ||
         strcmp(name, "slept") == 0;
}

/* Text that is not valid UTF-8 (written by hand with SQL, say) still comes back, with '?' for
 * the bytes jansson refuses, rather than being dropped or crashing a listing. */
static json_t *text_value(const char *t, size_t n) {
  json_t *v = json_stringn(t, n);
  if (v) return v;
  char *copy = malloc(n + 1);
  if (!copy) return NULL;
  for (size_t i = 0; i < n; i++) copy[i] = (t[i] & 0x80) || t[i] == 0 ? '?' : t[i];
  v = json_stringn(copy, n);
  free(copy);
  return v;
}

/* The current row as an object keyed by column names; NULL columns are left out. */
static json_t *row_object(sqlite3_stmt *q) {
  json_t *o = json_object();
  if (!o) return NULL;
  int n = sqlite3_column_count(q);
  for (int i = 0; i < n; i++) {
    const char *name = sqlite3_column_name(q, i);
    json_t *v = NULL;
    switch (sqlite3_column_type(q, i)) {
    case SQLITE_NULL:
      continue;
    case SQLITE_INTEGER:
      v = is_bool_column(name) ? json_boolean(sqlite3_column_int64(q, i) != 0)
                               : json_integer(sqlite3_column_int64(q, i));
      break;
    case SQLITE_FLOAT:
      v = json_real(sqlite3_column_double(q, i));
      break;
    default: {
      const char *t = (const char *)sqlite3_column_text(q, i);
      size_t len = (size_t)sqlite3_column_bytes(q, i);
      if (!t) continue;
      if (is_json_column(name)) v = json_loadb(t, len, JSON_DECODE_ANY, NULL);
      if (!v) v = text_value(t, len);   /* not JSON after all: keep the text */
      break;
    }
    }
    if (!v || json_object_set_new(o, name, v) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* All rows of a bound statement as an array of objects; NULL on error (errmsg set). */
static json_t *rows_array(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  json_t *a = json_array();
  if (!a) {
    finish(q);
    set_msg(s->err, sizeof s->err, "%s: %s: out of memory", s->path, what);
    return NULL;
  }
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) break;
    json_t *o = row_object(q);
    if (!o || json_array_append_new(a, o) != 0) {
      finish(q);
      json_decref(a);
      set_msg(s->err, sizeof s->err, "%s: %s: out of memory", s->path, what);
      return NULL;
    }
  }
  if (rc != SQLITE_DONE) {
    sql_err(s, what);
    finish(q);
    json_decref(a);
    return NULL;
  }
  finish(q);
  return a;
}

json_t *mend_store_run(mend_store *s, const char *id) {
  sqlite3_stmt *q = s->q[Q_RUN];
  int r = first_row(s, q, bind_text(q, 1, id), "read run");
  if (r < 0) return NULL;
  if (r == 0) {
    set_msg(s->err, sizeof s->err, "no run %s", id ? id : "(null)");
    return NULL;
  }
  json_t *run = row_object(q);
  finish(q);
  if (!run) {
    set_msg(s->err, sizeof s->err, "%s: read run: out of memory", s->path);
    return NULL;
  }
  sqlite3_stmt *qs = s->q[Q_STEPS];
  json_t *steps = rows_array(s, qs, bind_text(qs, 1, id), "read steps");
  if (!steps || json_object_set_new(run, "steps", steps) != 0) {
    json_decref(run);
    return NULL;
  }
  return run;
}

json_t *mend_store_history(mend_store *s, const char *id) {
  sqlite3_stmt *q = s->q[Q_HISTORY];
  return rows_array(s, q, bind_text(q, 1, id), "read history");
}

json_t *mend_store_dlq(mend_store *s) {
  return rows_array(s, s->q[Q_DLQ], SQLITE_OK, "read dlq");
}

json_t *mend_store_breakers(mend_store *s) {
  return rows_array(s, s->q[Q_BREAKERS], SQLITE_OK, "read breakers");
}

json_t *mend_store_runs(mend_store *s, const char *status, const char *workflow, int limit) {
  return mend_store_runs_where(s, status, workflow, -1, 0, limit);
}

json_t *mend_store_runs_where(mend_store *s, const char *status, const char *workflow,
                              double since, int attention_only, int limit) {
  sqlite3_stmt *q = s->q[Q_RUNS];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, status));
  BIND(bind_text(q, 2, workflow));
  BIND(sqlite3_bind_int(q, 3, limit > 0 ? limit : -1));
  BIND(bind_opt_real(q, 4, since));
  BIND(sqlite3_bind_int(q, 5, attention_only ? 1 : 0));
  return rows_array(s, q, rc, "read runs");
}

int mend_store_take(mend_store *s, const char *id, const char *owner, double lease_until) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_TAKE];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, id));
  BIND(bind_text(q, 2, owner));
  BIND(sqlite3_bind_double(q, 3, lease_until));
  return run_write(s, q, rc, "take run");
}

int mend_store_dlq_remove(mend_store *s, const char *run_id) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_DLQ_REMOVE];
  return run_write(s, q, bind_text(q, 1, run_id), "remove from dlq");
}

int mend_store_request_cancel(mend_store *s, const char *run_id) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_REQUEST_CANCEL];
  return run_write(s, q, bind_text(q, 1, run_id), "request cancel");
}

json_t *mend_store_cancel_requests(mend_store *s, const char *owner) {
  sqlite3_stmt *q = s->q[Q_CANCEL_REQUESTS];
  json_t *rows = rows_array(s, q, bind_text(q, 1, owner), "read cancel requests");
  if (!rows) return NULL;
  json_t *ids = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) json_array_append(ids, json_object_get(row, "id"));
  json_decref(rows);
  return ids;
}

int mend_store_audit(mend_store *s, double at, const char *who, const char *op,
                     const char *target, const char *detail) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_AUDIT];
  int rc = SQLITE_OK;
  BIND(sqlite3_bind_double(q, 1, at));
  BIND(bind_text(q, 2, who));
  BIND(bind_text(q, 3, op));
  BIND(bind_text(q, 4, target));
  BIND(bind_text(q, 5, detail));
  return run_write(s, q, rc, "append audit");
}

json_t *mend_store_audit_list(mend_store *s) {
  sqlite3_stmt *q = s->q[Q_AUDIT_LIST];
  return rows_array(s, q, SQLITE_OK, "read audit");
}

/* ---- leases ----------------------------------------------------------------------------- */

void mend_store_set_worker(mend_store *s, const char *worker) {
  free(s->worker);
  s->worker = NULL;
  if (worker) {
    size_t n = strlen(worker) + 1;
    s->worker = malloc(n);
    if (s->worker) memcpy(s->worker, worker, n);
  }
}

json_t *mend_store_claim(mend_store *s, const char *owner, double now, double lease_until,
                         int limit, int newest_first) {
  if (batch_begin(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_CLAIM];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, owner));
  BIND(sqlite3_bind_double(q, 2, lease_until));
  BIND(sqlite3_bind_double(q, 3, now));
  BIND(sqlite3_bind_int(q, 4, limit));
  BIND(sqlite3_bind_int(q, 5, newest_first ? 1 : 0));
  json_t *ids = json_array();
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) json_array_append_new(ids, json_string((const char *)sqlite3_column_text(q, 0)));
  }
  if (rc != SQLITE_DONE) {
    sql_err(s, "claim runs");
    finish(q);
    s->batch_failed = 1;
    json_decref(ids);
    return NULL;
  }
  finish(q);
  return ids;
}

int mend_store_renew(mend_store *s, const char *owner, double lease_until) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_RENEW];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, owner));
  BIND(sqlite3_bind_double(q, 2, lease_until));
  return run_write(s, q, rc, "renew leases");
}

int mend_store_release(mend_store *s, const char *id, const char *owner) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_RELEASE];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, id));
  BIND(bind_text(q, 2, owner));
  return run_write(s, q, rc, "release lease");
}

int mend_store_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                     double *lease_until) {
  sqlite3_stmt *q = s->q[Q_OWNER];
  int r = first_row(s, q, bind_text(q, 1, id), "read lease");
  if (r != 1) return r;
  const char *o = (const char *)sqlite3_column_text(q, 0);
  set_msg(owner_out, owner_len, "%s", o ? o : "");
  *lease_until = sqlite3_column_type(q, 1) == SQLITE_NULL ? -1 : sqlite3_column_double(q, 1);
  finish(q);
  return 1;
}

json_t *mend_store_lease_holders(mend_store *s, double now) {
  sqlite3_stmt *q = s->q[Q_HOLDERS];
  int rc = sqlite3_bind_double(q, 1, now);
  json_t *owners = json_array();
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) json_array_append_new(owners, json_string((const char *)sqlite3_column_text(q, 0)));
  }
  if (rc != SQLITE_DONE) {
    sql_err(s, "read lease holders");
    finish(q);
    json_decref(owners);
    return NULL;
  }
  finish(q);
  return owners;
}

int mend_store_release_owner(mend_store *s, const char *owner) {
  if (batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_RELEASE_OWNER];
  return run_write(s, q, bind_text(q, 1, owner), "release leases of a dead worker");
}
