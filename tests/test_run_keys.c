/*
 * test_run_keys: run_key's two layouts on SQLite (schema 16, src/store/layout.c). A new file
 * has the partial index; a file of schema 15 opened here only learns its layout (`column`),
 * and a mend of schema 15 still running on it keeps starting runs; `mend db upgrade`'s
 * rebuild keeps every row, key and rowid, is refused while a worker's lease lasts, and
 * failed or killed halfway leaves the file as it was.
 */
#include "check.h"
#include "raw_sqlite.h"
#include "store.h"
#include "store/store_int.h"   /* the migrations: a file of schema 15 made as main made it */

#include <dirent.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[64];

static const char *file_in_dir(const char *name) {
  static char buf[4][128];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static sqlite3 *raw_open(const char *path) {
  sqlite3 *db = NULL;
  if (sqlite3_open(path, &db) != SQLITE_OK) {
    fprintf(stderr, "raw open %s: %s\n", path, sqlite3_errmsg(db));
    exit(2);
  }
  sqlite3_busy_timeout(db, 5000);
  return db;
}

static int file_int(const char *path, const char *sql) {
  sqlite3 *db = raw_open(path);
  int v = raw_int(db, sql);
  sqlite3_close(db);
  return v;
}

static char *file_text(const char *path, const char *sql) {
  sqlite3 *db = raw_open(path);
  char *v = raw_text(db, sql);
  sqlite3_close(db);
  return v;
}

/* The indexes SQLite made for runs' own constraints: the id's, and run_key's in `column`. */
#define AUTOINDEXES \
  "SELECT count(*) FROM sqlite_master WHERE tbl_name = 'runs' AND name LIKE 'sqlite_autoindex_%'"
#define LAYOUT "SELECT value FROM meta WHERE key = 'runs_key_layout'"
#define ORDER "SELECT group_concat(id || ':' || coalesce(run_key, '-'), ' ') FROM" \
              " (SELECT id, run_key FROM runs ORDER BY rowid)"

/* The plan of the store's look-up of a key names the index it uses. */
static int key_lookup_uses(const char *path, const char *index) {
  sqlite3 *db = raw_open(path);
  char sql[256];
  snprintf(sql, sizeof sql, "EXPLAIN QUERY PLAN %s", mend__query_sql[Q_FIND_RUN_KEY]);
  sqlite3_stmt *q;
  int found = 0;
  if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
    while (sqlite3_step(q) == SQLITE_ROW) {
      const char *d = (const char *)sqlite3_column_text(q, 3);
      if (d && strstr(d, index)) found = 1;
    }
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return found;
}

/* A start as the store of schema 15 (main before this change) prepared it, word for word. */
#define MAIN_INSERT_RUN \
  "INSERT INTO runs(id, workflow, run_key, status, input, error, attention, created, updated," \
  " owner, workflow_version) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)" \
  " ON CONFLICT(run_key) DO NOTHING"

/* Steps the old process's prepared start: 1 inserted, 0 the key was taken, -1 it failed. */
static char old_err[256];
static int old_start(sqlite3 *db, sqlite3_stmt *q, const char *id, const char *key) {
  sqlite3_reset(q);
  sqlite3_bind_text(q, 1, id, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q, 2, "order", -1, SQLITE_STATIC);
  if (key) sqlite3_bind_text(q, 3, key, -1, SQLITE_TRANSIENT);
  else sqlite3_bind_null(q, 3);
  sqlite3_bind_text(q, 4, "running", -1, SQLITE_STATIC);
  sqlite3_bind_int(q, 7, 0);
  sqlite3_bind_double(q, 8, 50);
  sqlite3_bind_double(q, 9, 50);
  int rc = sqlite3_step(q);
  sqlite3_reset(q);
  if (rc != SQLITE_DONE) {
    snprintf(old_err, sizeof old_err, "%s", sqlite3_errmsg(db));
    return -1;
  }
  return sqlite3_changes(db) == 1 ? 1 : 0;
}

/* A file of schema 15 as main makes it, with runs a (key ka), b (none), c (key kc). */
static void make_v15(const char *path) {
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(mend__sqlite_digest_fn(db), SQLITE_OK);
  CHECK_EQ_INT(sqlite3_exec(db, "PRAGMA journal_mode = WAL; BEGIN", NULL, NULL, NULL), SQLITE_OK);
  for (int v = 0; v < 15; v++)
    CHECK_EQ_INT(sqlite3_exec(db, mend__migrations[v], NULL, NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(sqlite3_exec(db,
    "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', '15');"
    "PRAGMA user_version = 15;"
    "INSERT INTO runs(id, workflow, run_key, status, created, updated) VALUES"
    " ('a', 'order', 'ka', 'succeeded', 1, 1), ('b', 'order', NULL, 'running', 2, 2),"
    " ('c', 'order', 'kc', 'running', 2, 2);"
    "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
}

static mend_run_rec run_rec(const char *id, const char *key, double created) {
  mend_run_rec r = {.id = id, .workflow = "order", .version = "v1", .source = "order.lua",
                    .run_key = key, .status = "running", .input = "{}", .created = created,
                    .updated = created};
  return r;
}

/* Keyed starts conflict, are found, and runs without a key may be many. */
static void check_keys_work(mend_store *s, const char *taken, const char *taken_by,
                            const char *fresh_id, const char *fresh_key) {
  mend_run_rec again = run_rec("dup", taken, 60);
  CHECK_EQ_INT(mend_store_insert_run(s, &again), 1);
  char found[64] = "";
  CHECK_EQ_INT(mend_store_find_run_key(s, taken, found, sizeof found), 1);
  CHECK_STR(found, taken_by);
  mend_run_rec fresh = run_rec(fresh_id, fresh_key, 61);
  CHECK_EQ_INT(mend_store_insert_run(s, &fresh), 0);
  char n1[32], n2[32];
  snprintf(n1, sizeof n1, "%s-n1", fresh_id);
  snprintf(n2, sizeof n2, "%s-n2", fresh_id);
  mend_run_rec nokey1 = run_rec(n1, NULL, 62), nokey2 = run_rec(n2, NULL, 63);
  CHECK_EQ_INT(mend_store_insert_run(s, &nokey1), 0);
  CHECK_EQ_INT(mend_store_insert_run(s, &nokey2), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_find_run_key(s, fresh_key, found, sizeof found), 1);
  CHECK_STR(found, fresh_id);
}

static void test_new_file(void) {
  const char *path = file_in_dir("new.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) { fprintf(stderr, "open: %s\n", err); return; }
  mend_run_rec first = run_rec("r1", "k1", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &first), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  check_keys_work(s, "k1", "r1", "r2", "k2");
  mend_store_close(s);
  char *layout = file_text(path, LAYOUT);
  CHECK_STR(layout, "partial");
  free(layout);
  CHECK_EQ_INT(file_int(path, AUTOINDEXES), 1);   /* the id's only */
  char *sql = file_text(path, "SELECT sql FROM sqlite_master WHERE name = 'runs_key'");
  CHECK(sql && strstr(sql, "UNIQUE INDEX runs_key ON runs(run_key) WHERE run_key IS NOT NULL"));
  free(sql);
  CHECK(key_lookup_uses(path, "runs_key"));
  CHECK_EQ_INT(file_int(path, "SELECT count(*) FROM runs INDEXED BY runs_key"
                              " WHERE run_key IS NOT NULL"), 2);
  /* nothing to do on it */
  CHECK_EQ_INT(mend_store_upgrade_run_keys(path, 0, err, sizeof err), MEND_RUN_KEYS_CURRENT);
}

/* A mend of schema 15 running on the file when this one opens it keeps starting runs, keyed or
 * not, its statements as they were (a rebuild of runs at open stopped it). */
static void test_older_process_survives(void) {
  const char *path = file_in_dir("v15.db");
  make_v15(path);
  sqlite3 *old = raw_open(path);
  sqlite3_stmt *oldq = NULL;
  CHECK_EQ_INT(sqlite3_prepare_v3(old, MAIN_INSERT_RUN, -1, SQLITE_PREPARE_PERSISTENT, &oldq, NULL),
               SQLITE_OK);
  CHECK_EQ_INT(old_start(old, oldq, "o1", "ko1"), 1);

  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) { fprintf(stderr, "open: %s\n", err); return; }
  CHECK_EQ_INT(mend_store_schema_version(s), MEND_SCHEMA_VERSION);   /* upgraded to this mend's */
  char *layout = file_text(path, LAYOUT);
  CHECK_STR(layout, "column");
  free(layout);
  CHECK_EQ_INT(file_int(path, AUTOINDEXES), 2);   /* the column's UNIQUE is still there */
  check_keys_work(s, "ka", "a", "n1", "kn1");
  /* this mend sees the older one's key, and the older one this mend's */
  mend_run_rec theirs = run_rec("dup2", "ko1", 64);
  CHECK_EQ_INT(mend_store_insert_run(s, &theirs), 1);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(old_start(old, oldq, "o2", "ko2"), 1);
  CHECK_EQ_INT(old_start(old, oldq, "o3", NULL), 1);
  CHECK_EQ_INT(old_start(old, oldq, "o4", "kn1"), 0);
  CHECK_EQ_INT(old_start(old, oldq, "o5", "ko2"), 0);
  /* and its statement prepared again (another of its connections) still finds the constraint */
  sqlite3_stmt *fresh = NULL;
  CHECK_EQ_INT(sqlite3_prepare_v2(old, MAIN_INSERT_RUN, -1, &fresh, NULL), SQLITE_OK);
  CHECK_EQ_INT(old_start(old, fresh, "o6", "ko6"), 1);
  sqlite3_finalize(fresh);
  char found[64] = "";
  CHECK_EQ_INT(mend_store_find_run_key(s, "ko2", found, sizeof found), 1);
  CHECK_STR(found, "o2");
  mend_store_close(s);
  /* reopened: nothing more changes */
  s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  mend_store_close(s);
  CHECK_EQ_INT(file_int(path, AUTOINDEXES), 2);
  CHECK_EQ_INT(old_start(old, oldq, "o7", "ko7"), 1);
  CHECK(key_lookup_uses(path, "sqlite_autoindex_runs_2"));

  /* `mend db upgrade` while the older mend's worker holds a run: refused, naming it */
  char *lease = sqlite3_mprintf("INSERT INTO workers(owner, lease_until) VALUES('old-worker', %f);"
                                "UPDATE runs SET owner = 'old-worker' WHERE id = 'c'",
                                (double)time(NULL) + 60);
  CHECK_EQ_INT(sqlite3_exec(old, lease, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_free(lease);
  char *before = file_text(path, ORDER);
  err[0] = '\0';
  CHECK_EQ_INT(mend_store_upgrade_run_keys(path, 0, err, sizeof err), MEND_RUN_KEYS_HELD);
  CHECK(strstr(err, "old-worker (1 run,") != NULL);
  CHECK(strstr(err, "--despite-leases") != NULL);
  layout = file_text(path, LAYOUT);
  CHECK_STR(layout, "column");
  free(layout);
  CHECK_EQ_INT(old_start(old, oldq, "o8", "ko8"), 1);   /* refused: it ran on untouched */
  free(before);
  before = file_text(path, ORDER);

  /* Given anyway: the older process's start has no constraint to name now (which is why
   * it is a command, never a migration), and every row is as it was, in its order. */
  CHECK_EQ_INT(mend_store_upgrade_run_keys(path, 1, err, sizeof err), MEND_RUN_KEYS_UPGRADED);
  CHECK_EQ_INT(old_start(old, oldq, "o9", "ko9"), -1);
  CHECK(strstr(old_err, "ON CONFLICT clause does not match") != NULL);
  sqlite3_finalize(oldq);
  sqlite3_close(old);
  char *after = file_text(path, ORDER);
  CHECK(before && after && strcmp(before, after) == 0);
  free(before);
  free(after);
  layout = file_text(path, LAYOUT);
  CHECK_STR(layout, "partial");
  free(layout);
  CHECK_EQ_INT(file_int(path, AUTOINDEXES), 1);
  CHECK(key_lookup_uses(path, "runs_key"));
  char *ok = file_text(path, "PRAGMA integrity_check");
  CHECK_STR(ok, "ok");
  free(ok);
  CHECK_EQ_INT(file_int(path, "SELECT owner = 'old-worker' FROM runs WHERE id = 'c'"), 1);
  CHECK_EQ_INT(file_int(path, "SELECT count(*) FROM sqlite_master WHERE name IN"
                              " ('runs_live', 'runs_cancel', 'runs_free', 'runs_parent')"), 4);
  s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (s) check_keys_work(s, "ko8", "o8", "p1", "kp1");
  mend_store_close(s);
}

/* A mend of this version holding the file open while another upgrades it goes on: its start
 * names the partial index as well as the column's. */
static void test_this_version_survives_the_rebuild(void) {
  const char *path = file_in_dir("live.db");
  make_v15(path);
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("l1", "kl1", 10);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_upgrade_run_keys(path, 0, err, sizeof err), MEND_RUN_KEYS_UPGRADED);
  check_keys_work(s, "kl1", "l1", "l2", "kl2");
  check_keys_work(s, "kc", "c", "l3", "kl3");
  mend_store_close(s);
  char *layout = file_text(path, LAYOUT);
  CHECK_STR(layout, "partial");
  free(layout);
}

/* A failure after the old table is gone (an index named runs_key on another table: the
 * rebuild's last CREATE fails) leaves the file as it was. */
static void test_failed_halfway(void) {
  const char *path = file_in_dir("half.db");
  make_v15(path);
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  mend_store_close(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(db, "CREATE INDEX runs_key ON audit(op)", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  char *before = file_text(path, ORDER);
  CHECK_EQ_INT(mend_store_upgrade_run_keys(path, 0, err, sizeof err), MEND_RUN_KEYS_FAILED);
  CHECK(strstr(err, "runs_key") != NULL);
  char *after = file_text(path, ORDER);
  CHECK(before && after && strcmp(before, after) == 0);
  free(before);
  free(after);
  char *layout = file_text(path, LAYOUT);
  CHECK_STR(layout, "column");
  free(layout);
  CHECK_EQ_INT(file_int(path, AUTOINDEXES), 2);
  CHECK_EQ_INT(file_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'runs_16'"), 0);
  char *ok = file_text(path, "PRAGMA integrity_check");
  CHECK_STR(ok, "ok");
  free(ok);
}

/* Many runs, so that the rebuild takes long enough to be killed in the middle of. */
static void add_runs(const char *path, int n) {
  sqlite3 *db = raw_open(path);
  char *sql = sqlite3_mprintf(
    "WITH RECURSIVE i(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM i WHERE k < %d)"
    " INSERT INTO runs(id, workflow, run_key, status, input, created, updated)"
    " SELECT 'm' || k, 'order', iif(k %% 10 = 0, 'mk' || k, NULL), 'succeeded',"
    " '{\"some\":\"input of a run\"}', k, k FROM i", n);
  CHECK_EQ_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_free(sql);
  sqlite3_close(db);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Killed with SIGKILL at several moments of the rebuild: the file is either as before or
 * upgraded whole, never in between. */
static void test_killed(void) {
  const char *timed = file_in_dir("timed.db");
  make_v15(timed);
  add_runs(timed, 100000);
  char err[512] = "";
  double t0 = now_s();
  CHECK_EQ_INT(mend_store_upgrade_run_keys(timed, 0, err, sizeof err), MEND_RUN_KEYS_UPGRADED);
  double took = now_s() - t0;
  int before_commit = 0;
  for (int k = 1; k <= 4; k++) {
    char name[32];
    snprintf(name, sizeof name, "killed%d.db", k);
    const char *path = file_in_dir(name);
    make_v15(path);
    add_runs(path, 100000);
    mend_store_close(mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err));
    char *before = file_text(path, ORDER);
    pid_t pid = fork();
    if (pid == 0) {
      char e[512];
      _exit(mend_store_upgrade_run_keys(path, 0, e, sizeof e) == MEND_RUN_KEYS_UPGRADED ? 0 : 1);
    }
    struct timespec ts = {0, (long)(took * k / 4 * 1e9)};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    char *layout = file_text(path, LAYOUT);
    char *after = file_text(path, ORDER);
    char *ok = file_text(path, "PRAGMA integrity_check");
    CHECK_STR(ok, "ok");
    CHECK(before && after && strcmp(before, after) == 0);
    int column = layout && strcmp(layout, "column") == 0;
    CHECK(column || (layout && strcmp(layout, "partial") == 0));
    CHECK_EQ_INT(file_int(path, AUTOINDEXES), column ? 2 : 1);
    CHECK_EQ_INT(file_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'runs_16'"), 0);
    before_commit += column;
    free(layout);
    free(after);
    free(before);
    free(ok);
    /* and the upgrade given again finishes it */
    CHECK(mend_store_upgrade_run_keys(path, 0, err, sizeof err) != MEND_RUN_KEYS_FAILED);
  }
  printf("run_keys: the rebuild of 100k runs took %.2f s; killed before its commit %d times of 4\n",
         took, before_commit);
}

/* mend db upgrade names a file: a path mistyped is not a
 * new database to make and call current (the CLI's check of the path is skipped for file:
 * URIs, and mend.upgrade_db has none). */
static void test_missing_file_is_not_made(void) {
  const char *path = file_in_dir("typo.db");
  char err[512] = "";
  CHECK_EQ_INT(mend_store_upgrade_run_keys(path, 0, err, sizeof err), MEND_RUN_KEYS_FAILED);
  CHECK(access(path, F_OK) != 0);
  unlink(path);
}

/* A file a mend of an earlier schema 16 made has user_version 16 and runs_key, and no
 * runs_key_layout row: this mend opens it as current, and
 * its upgrade has nothing to do, rather than failing on "no run-key layout in meta". */
static void test_first_schema16_file(void) {
  const char *path = file_in_dir("first16.db");
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  mend_store_close(s);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(sqlite3_exec(db, "DELETE FROM meta WHERE key = 'runs_key_layout'", NULL, NULL,
                            NULL), SQLITE_OK);
  sqlite3_close(db);
  err[0] = '\0';
  mend_run_keys_outcome r = mend_store_upgrade_run_keys(path, 0, err, sizeof err);
  if (r != MEND_RUN_KEYS_CURRENT) fprintf(stderr, "first16: %d %s\n", (int)r, err);
  CHECK_EQ_INT(r, MEND_RUN_KEYS_CURRENT);
}


/* Thirty workers holding leases: the refusal lists as many as fit and says how many more there
 * are (the list used to stop mid-name with no word of the rest), and still ends with what to
 * do. */
static void test_many_holders_counted(void) {
  const char *path = file_in_dir("many.db");
  make_v15(path);
  sqlite3 *db = raw_open(path);
  for (int i = 0; i < 30; i++) {
    char *sql = sqlite3_mprintf("INSERT INTO workers(owner, lease_until) VALUES("
                                "'worker-host-%02d.example.internal-pid-123456', %f)", i,
                                (double)time(NULL) + 60 + i);
    CHECK_EQ_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_free(sql);
  }
  sqlite3_close(db);
  char err[1024] = "";   /* as mend.upgrade_db's */
  CHECK_EQ_INT(mend_store_upgrade_run_keys(path, 0, err, sizeof err), MEND_RUN_KEYS_HELD);
  int listed = 0;
  for (const char *p = err; (p = strstr(p, "pid-123456 (0 runs, its lease lasts")); p++)
    listed++;
  const char *more = strstr(err, ", and ");
  int rest = more ? atoi(more + 6) : 0;
  if (listed + rest != 30 || !more || !strstr(more, " more:"))
    fprintf(stderr, "many holders: %s\n", err);
  CHECK(listed > 0 && rest > 0);
  CHECK_EQ_INT(listed + rest, 30);
  CHECK(more && strstr(more, " more:") != NULL);
  CHECK(strstr(err, "--despite-leases") != NULL);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-test-run-keys-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_new_file();
  test_older_process_survives();
  test_this_version_survives_the_rebuild();
  test_failed_halfway();
  test_killed();
  test_missing_file_is_not_made();
  test_first_schema16_file();
  test_many_holders_counted();
  check_remove_dir(dir);
  return check_done("run_keys");
}
