/*
 * test_walvfs: the store's VFS (src/walvfs.c) on real files. Beneath it is a VFS of this test,
 * made the default before walvfs registers, that counts the writes reaching the WAL and can make
 * them fail as a full disk does. What is checked: a commit reaches the WAL in a few writes; it is
 * there, for another connection and for a process killed with SIGKILL, when the commit returns;
 * a write that fails fails its commit and leaves the database as it was, whichever write it is
 * (the commit's last frame, a checksum rewritten in place, padding after a sync); a transaction
 * that spills pages to the WAL reads them back right, and one rolled back on a full disk leaves
 * the connection working once there is room.
 */
#include "check.h"
#include "walvfs.h"

#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a VFS beneath walvfs: counts WAL writes, fails them on demand ---- */

typedef struct under_file {
  sqlite3_file base;
  sqlite3_file *real;
  int is_wal;
} under_file;

static sqlite3_vfs under, *unix_vfs;
static int wal_writes;        /* writes that reached a WAL */
static long long wal_bytes;
static int fail_wal_writes;   /* fail every WAL write as a full disk would */
static int fail_last_header;  /* fail a frame header rewritten over the WAL's last frame */
static int fail_after_sync;   /* fail the first WAL write after a sync of the WAL */
static int synced;
static int failed_writes;     /* writes failed on demand */

#define REAL(f) (((under_file *)(f))->real)

static int u_close(sqlite3_file *f) { return REAL(f)->pMethods->xClose(REAL(f)); }
static int u_read(sqlite3_file *f, void *p, int n, sqlite3_int64 at) {
  return REAL(f)->pMethods->xRead(REAL(f), p, n, at);
}
static int u_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 at) {
  if (((under_file *)f)->is_wal) {
    if (fail_wal_writes || (fail_after_sync && synced)) {
      synced = 0;
      failed_writes++;
      return SQLITE_FULL;
    }
    if (fail_last_header && n == 24) {
      sqlite3_int64 size = 0;
      REAL(f)->pMethods->xFileSize(REAL(f), &size);
      if (at == size - (24 + 4096)) {
        failed_writes++;
        return SQLITE_IOERR_WRITE;
      }
    }
    wal_writes++;
    wal_bytes += n;
  }
  return REAL(f)->pMethods->xWrite(REAL(f), p, n, at);
}
static int u_truncate(sqlite3_file *f, sqlite3_int64 n) {
  return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int u_sync(sqlite3_file *f, int flags) {
  if (((under_file *)f)->is_wal && fail_after_sync) synced = 1;
  return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int u_size(sqlite3_file *f, sqlite3_int64 *n) {
  return REAL(f)->pMethods->xFileSize(REAL(f), n);
}
static int u_lock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xLock(REAL(f), l); }
static int u_unlock(sqlite3_file *f, int l) { return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int u_reserved(sqlite3_file *f, int *o) {
  return REAL(f)->pMethods->xCheckReservedLock(REAL(f), o);
}
static int u_fcntl(sqlite3_file *f, int op, void *a) {
  return REAL(f)->pMethods->xFileControl(REAL(f), op, a);
}
static int u_sector(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int u_device(sqlite3_file *f) { return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f)); }
static int u_shm_map(sqlite3_file *f, int pg, int sz, int ext, void volatile **p) {
  return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, ext, p);
}
static int u_shm_lock(sqlite3_file *f, int off, int n, int flags) {
  return REAL(f)->pMethods->xShmLock(REAL(f), off, n, flags);
}
static void u_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int u_shm_unmap(sqlite3_file *f, int del) {
  return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int u_fetch(sqlite3_file *f, sqlite3_int64 at, int n, void **p) {
  return REAL(f)->pMethods->xFetch(REAL(f), at, n, p);
}
static int u_unfetch(sqlite3_file *f, sqlite3_int64 at, void *p) {
  return REAL(f)->pMethods->xUnfetch(REAL(f), at, p);
}

static const sqlite3_io_methods u_methods = {
  3, u_close, u_read, u_write, u_truncate, u_sync, u_size, u_lock, u_unlock, u_reserved,
  u_fcntl, u_sector, u_device, u_shm_map, u_shm_lock, u_shm_barrier, u_shm_unmap, u_fetch,
  u_unfetch,
};

static int u_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags, int *out) {
  (void)v;
  under_file *u = (under_file *)f;
  u->real = (sqlite3_file *)(u + 1);
  u->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
  int rc = unix_vfs->xOpen(unix_vfs, name, u->real, flags, out);
  u->base.pMethods = u->real->pMethods ? &u_methods : NULL;
  return rc;
}

static void install_under(void) {
  unix_vfs = sqlite3_vfs_find("unix");
  under = *unix_vfs;
  under.zName = "test-under";
  under.szOsFile = (int)sizeof(under_file) + unix_vfs->szOsFile;
  under.xOpen = u_open;
  under.pNext = NULL;
  sqlite3_vfs_register(&under, 1);   /* the default: walvfs is built on it */
}

/* ---- helpers ---- */

static char dir[64];

static const char *db_path(const char *name) {
  static char buf[128];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

static sqlite3 *open_with(const char *path, const char *vfs) {
  sqlite3 *db = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs);
  CHECK_EQ_INT(rc, SQLITE_OK);
  return db;
}

static int exec(sqlite3 *db, const char *sql) {
  int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
  if (rc != SQLITE_OK && !failed_writes && !fail_wal_writes)
    fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
  return rc;
}

static long long int_of(sqlite3 *db, const char *sql) {
  sqlite3_stmt *q = NULL;
  long long v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW)
    v = sqlite3_column_int64(q, 0);
  else
    fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
  sqlite3_finalize(q);
  return v;
}

static void check_intact(sqlite3 *db) {
  sqlite3_stmt *q = NULL;
  sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &q, NULL);
  CHECK_EQ_INT(sqlite3_step(q), SQLITE_ROW);
  CHECK_STR((const char *)sqlite3_column_text(q, 0), "ok");
  sqlite3_finalize(q);
}

/* A new database in WAL mode, synchronous=NORMAL as the store's "process" durability. */
static sqlite3 *new_db(const char *name) {
  sqlite3 *db = open_with(db_path(name), mend_walvfs());
  CHECK_EQ_INT(exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
                        "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)"), SQLITE_OK);
  return db;
}

static int insert_rows(sqlite3 *db, int from, int n) {
  char sql[256];
  snprintf(sql, sizeof sql,
           "WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM c WHERE i < %d)"
           " INSERT INTO t SELECT i, printf('%%0300d', i) FROM c", from, from + n - 1);
  return exec(db, sql);
}

/* ---- tests ---- */

static void a_commit_is_a_few_writes_and_there_when_it_returns(void) {
  sqlite3 *db = new_db("few.db");
  int before = wal_writes;
  long long bytes_before = wal_bytes;
  CHECK_EQ_INT(exec(db, "BEGIN"), SQLITE_OK);
  CHECK_EQ_INT(insert_rows(db, 1, 5000), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "COMMIT"), SQLITE_OK);
  int writes = wal_writes - before;
  long long frames = (wal_bytes - bytes_before) / (24 + 4096);
  /* Some 400 frames: 800 writes without walvfs; at most 64 KiB a write with it. */
  CHECK(frames > 300);
  CHECK(writes <= (wal_bytes - bytes_before) / (64 * 1024) + 2);
  /* Another connection, on the default VFS, sees the commit while this one stays open. */
  sqlite3 *other = open_with(db_path("few.db"), NULL);
  CHECK_EQ_INT(int_of(other, "SELECT count(*) FROM t"), 5000);
  CHECK_EQ_INT(int_of(other, "SELECT sum(length(v)) FROM t"), 5000 * 300);
  sqlite3_close(other);
  sqlite3_close(db);
}

/* The commit returned, then the process died: nothing of it is lost. */
static void a_commit_survives_sigkill(void) {
  int ready[2];
  CHECK_EQ_INT(pipe(ready), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    sqlite3 *db = new_db("killed.db");
    /* a small cache: both transactions spill pages to the WAL before they end */
    int ok = exec(db, "PRAGMA cache_size = 16") == SQLITE_OK && exec(db, "BEGIN") == SQLITE_OK &&
             insert_rows(db, 1, 3000) == SQLITE_OK && exec(db, "COMMIT") == SQLITE_OK;
    /* A second transaction left open: its frames are written or held, never announced. */
    if (ok) ok = exec(db, "BEGIN") == SQLITE_OK && insert_rows(db, 3001, 1000) == SQLITE_OK;
    char c = ok ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  CHECK_EQ_INT(read(ready[0], &c, 1), 1);
  CHECK_EQ_INT(c, 'y');
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  close(ready[0]);
  sqlite3 *db = open_with(db_path("killed.db"), NULL);
  CHECK_EQ_INT(int_of(db, "SELECT count(*) FROM t"), 3000);
  CHECK_EQ_INT(int_of(db, "SELECT max(k) FROM t"), 3000);
  check_intact(db);
  sqlite3_close(db);
}

/* The disk is full when the commit goes to the WAL: the commit fails with that error, another
 * connection sees the database as it was, and once writes succeed again the same connection
 * commits. */
static void a_failed_write_fails_its_commit(void) {
  sqlite3 *db = new_db("full.db");
  CHECK_EQ_INT(insert_rows(db, 1, 100), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "BEGIN"), SQLITE_OK);
  CHECK_EQ_INT(insert_rows(db, 101, 300), SQLITE_OK);   /* less than walvfs holds */
  fail_wal_writes = 1;
  int rc = exec(db, "COMMIT");
  fail_wal_writes = 0;
  CHECK_EQ_INT(rc, SQLITE_FULL);
  if (!sqlite3_get_autocommit(db)) exec(db, "ROLLBACK");
  sqlite3 *other = open_with(db_path("full.db"), NULL);
  CHECK_EQ_INT(int_of(other, "SELECT count(*) FROM t"), 100);
  CHECK_EQ_INT(int_of(db, "SELECT count(*) FROM t"), 100);
  CHECK_EQ_INT(insert_rows(db, 101, 300), SQLITE_OK);
  CHECK_EQ_INT(int_of(other, "SELECT count(*) FROM t"), 400);
  sqlite3_close(other);
  sqlite3_close(db);
  db = open_with(db_path("full.db"), NULL);
  CHECK_EQ_INT(int_of(db, "SELECT count(*) FROM t"), 400);
  sqlite3_close(db);
}

/* A transaction larger than the page cache writes pages to the WAL before it commits (held by
 * walvfs), then reads them back: it must read what it wrote. */
static void a_spilled_transaction_reads_its_pages(void) {
  sqlite3 *db = new_db("spill.db");
  CHECK_EQ_INT(exec(db, "PRAGMA cache_size = 16"), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "BEGIN"), SQLITE_OK);
  CHECK_EQ_INT(insert_rows(db, 1, 4000), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "UPDATE t SET v = printf('%0310d', k) WHERE k % 7 = 0"), SQLITE_OK);
  CHECK_EQ_INT(int_of(db, "SELECT sum(length(v)) FROM t"), 4000LL * 300 + 571 * 10);
  CHECK_EQ_INT(exec(db, "COMMIT"), SQLITE_OK);
  sqlite3 *other = open_with(db_path("spill.db"), NULL);
  CHECK_EQ_INT(int_of(other, "SELECT sum(length(v)) FROM t"), 4000LL * 300 + 571 * 10);
  CHECK_EQ_INT(int_of(other, "SELECT count(*) FROM t WHERE v = printf('%0310d', k)"), 571);
  sqlite3_close(other);
  sqlite3_close(db);
}

/* A transaction that spilled pages and then changed them again has SQLite rewrite the frames'
 * checksums in place before it commits (wal.c, walRewriteChecksums); the last of those writes
 * ends the commit. With journal_size_limit set, as the store sets it, it is the first commit
 * after the WAL started over. That write failing must fail the commit. */
static void a_failed_checksum_rewrite_fails_its_commit(void) {
  sqlite3 *db = new_db("rewrite.db");
  CHECK_EQ_INT(exec(db, "PRAGMA cache_size = 16; PRAGMA journal_size_limit = 67108864"), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "BEGIN"), SQLITE_OK);
  CHECK_EQ_INT(insert_rows(db, 1, 4000), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "UPDATE t SET v = printf('%0310d', k) WHERE k % 7 = 0"), SQLITE_OK);
  failed_writes = 0;
  fail_last_header = 1;
  int rc = exec(db, "COMMIT");
  fail_last_header = 0;
  CHECK_EQ_INT(failed_writes, 1);
  CHECK(rc != SQLITE_OK);
  if (!sqlite3_get_autocommit(db)) exec(db, "ROLLBACK");
  sqlite3 *other = open_with(db_path("rewrite.db"), NULL);
  CHECK_EQ_INT(int_of(other, "SELECT count(*) FROM t"), 0);
  sqlite3_close(other);
  /* the connection goes on: the same transaction commits once writes succeed */
  CHECK_EQ_INT(insert_rows(db, 1, 4000), SQLITE_OK);
  sqlite3_close(db);
  db = open_with(db_path("rewrite.db"), NULL);
  CHECK_EQ_INT(int_of(db, "SELECT count(*) FROM t"), 4000);
  check_intact(db);
  sqlite3_close(db);
}

/* A spilled transaction rolled back while the disk is full: its frames are never needed, the
 * connection works again once there is room, and another connection can write. */
static void a_spill_rolled_back_on_a_full_disk_leaves_the_connection_working(void) {
  sqlite3 *db = new_db("rollback.db");
  CHECK_EQ_INT(exec(db, "PRAGMA cache_size = 16"), SQLITE_OK);
  CHECK_EQ_INT(insert_rows(db, 1, 3000), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "PRAGMA wal_checkpoint(TRUNCATE)"), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "BEGIN"), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "UPDATE t SET v = printf('%0300d', k + 1)"), SQLITE_OK);
  fail_wal_writes = 1;
  exec(db, "ROLLBACK");
  fail_wal_writes = 0;
  CHECK(sqlite3_get_autocommit(db));
  CHECK_EQ_INT(insert_rows(db, 5000, 1), SQLITE_OK);
  CHECK_EQ_INT(int_of(db, "SELECT count(*) FROM t WHERE v = printf('%0300d', k)"), 3001);
  sqlite3 *other = open_with(db_path("rollback.db"), NULL);
  sqlite3_busy_timeout(other, 1000);
  CHECK_EQ_INT(exec(other, "INSERT INTO t VALUES(7777, 'x')"), SQLITE_OK);
  CHECK_EQ_INT(exec(other, "PRAGMA wal_checkpoint(RESTART)"), SQLITE_OK);
  CHECK_EQ_INT(int_of(other, "SELECT count(*) FROM t"), 3002);
  check_intact(other);
  sqlite3_close(other);
  CHECK_EQ_INT(insert_rows(db, 6000, 1), SQLITE_OK);
  sqlite3_close(db);
}

/* synchronous=FULL on a file system that does not promise power-safe overwrites (psow=0):
 * SQLite pads a commit to a sector with copies of its last frame, and splits the frame that
 * crosses the sector at a sync. A write after that sync failing must fail its commit, or the
 * frames announced would not all be there. */
static void a_failed_write_after_a_sync_fails_its_commit(void) {
  char uri[200];
  snprintf(uri, sizeof uri, "file:%s?psow=0", db_path("padded.db"));
  sqlite3 *db = NULL;
  CHECK_EQ_INT(sqlite3_open_v2(uri, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                               SQLITE_OPEN_URI, mend_walvfs()), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
                        "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)"), SQLITE_OK);
  CHECK_EQ_INT(insert_rows(db, 100000, 2000), SQLITE_OK);
  CHECK_EQ_INT(exec(db, "PRAGMA wal_checkpoint(PASSIVE)"), SQLITE_OK);
  CHECK_EQ_INT(insert_rows(db, 50000, 1), SQLITE_OK);   /* the WAL starts over */
  int failed_commits = 0, lying_commits = 0;
  for (int i = 0; i < 20; i++) {
    failed_writes = 0;
    synced = 0;
    fail_after_sync = 1;
    int rc = insert_rows(db, 100 * i + 1, 3);
    fail_after_sync = 0;
    if (failed_writes && rc == SQLITE_OK) lying_commits++;
    if (rc != SQLITE_OK) {
      failed_commits++;
      if (!sqlite3_get_autocommit(db)) exec(db, "ROLLBACK");
    }
  }
  CHECK(failed_commits > 0);   /* the fault was met */
  CHECK_EQ_INT(lying_commits, 0);
  sqlite3 *other = open_with(db_path("padded.db"), NULL);
  check_intact(other);
  sqlite3_close(other);
  sqlite3_close(db);
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-test-walvfs-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  install_under();
  CHECK(mend_walvfs() != NULL);
  a_commit_is_a_few_writes_and_there_when_it_returns();
  a_commit_survives_sigkill();
  a_failed_write_fails_its_commit();
  a_spilled_transaction_reads_its_pages();
  a_failed_checksum_rewrite_fails_its_commit();
  a_spill_rolled_back_on_a_full_disk_leaves_the_connection_working();
  a_failed_write_after_a_sync_fails_its_commit();
  remove_dir();
  return check_done("walvfs");
}
