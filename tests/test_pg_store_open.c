/*
 * test_pg_store_open: opening the PostgreSQL store and its connections: errors that name the
 * server (unreachable, a wrong password never repeated, someone else's database, a newer
 * schema), two stores creating the schema at once, the upgrade of a database of schema 1, the
 * CPUs the store's threads run on (thread_cpus).
 *
 * Against a real server named by MEND_TEST_PG (tests/pg_case.h: each case gets a database of
 * its own, dropped after; skipped, saying so, without a server). Must never: let one case
 * read what another left.
 */
#include "check.h"
#include "pg_case.h"
#include "store/pg/pg_int.h"

#include <mend.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void test_errors(void) {
  char err[1024], ci[2048];
  /* unreachable: nothing listens on port 1 */
  mend_store *s = mend__pg_open("postgresql://127.0.0.1:1/nowhere?connect_timeout=3",
                                MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "127.0.0.1:1/nowhere") != NULL);
  CHECK(strstr(err, "cannot connect") != NULL);

  /* through the storage interface: a postgres:// name is PostgreSQL's */
  s = mend_store_open("postgres://127.0.0.1:1/elsewhere?connect_timeout=3", MEND_DURABILITY_FULL,
                      err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "127.0.0.1:1/elsewhere: cannot connect") != NULL);

  new_case();
  /* a wrong password: named as such, never repeated (only over TCP with a password method) */
  conninfo_for(ci, sizeof ci, "postgres", "wrong-Pa55word");
  s = mend__pg_open(ci, MEND_DURABILITY_FULL, err, sizeof err);
  if (s) {
    printf("  (the server trusts this connection: no password check)\n");
    mend__pg_close(s);
  } else {
    CHECK(strstr(err, "wrong-Pa55word") == NULL);
    CHECK(strstr(err, "password") != NULL);
  }

  /* someone else's database */
  PGconn *c = raw();
  sql(c, "CREATE TABLE orders(id int)");
  PQfinish(c);
  s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "not a mend database") != NULL);
  CHECK(strstr(err, "mend_test_") != NULL);   /* names the database */
  drop_case();

  /* a newer schema */
  new_case();
  s = open_store();
  CHECK(s != NULL);
  if (s) CHECK_STR(MEND_STORE_M(s)->name, "postgres");
  mend__pg_close(s);
  c = raw();
  sql(c, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  PQfinish(c);
  s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s == NULL);
  CHECK(strstr(err, "schema version 99 is newer than this mend") != NULL);
  /* a version no mend wrote is not called newer, nor migrated from */
  static const char *const odd[] = {"0", "-3", "six", ""};
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    char q[160];
    c = raw();
    snprintf(q, sizeof q, "UPDATE meta SET value = '%s' WHERE key = 'schema_version'", odd[i]);
    sql(c, q);
    PQfinish(c);
    s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
    CHECK(s == NULL);
    CHECK(strstr(err, "is not a version") != NULL && strstr(err, "newer") == NULL);
  }
  drop_case();
}

static void *open_in_thread(void *arg) {
  char err[1024];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);
  if (!s) fprintf(stderr, "open in thread: %s\n", err);
  *(int *)arg = s != NULL;
  mend__pg_close(s);
  return NULL;
}

static atomic_int opened = -1;
static void *open_flagged(void *arg) {
  int ok = 0;
  open_in_thread(&ok);
  atomic_store(&opened, ok);
  return arg;
}

static void test_schema_race(void) {
  new_case();
  pthread_t t[4];
  int ok[4] = {0};
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, open_in_thread, &ok[i]);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) CHECK(ok[i]);
  CHECK_EQ_INT(count("SELECT value::int FROM meta WHERE key = 'schema_version'"),
               MEND_PG_SCHEMA_VERSION);
  /* A current schema is only read: an open does not queue behind another holding the schema
   * lock (as every `mend start` would behind the others). */
  PGconn *holder = raw();
  PQclear(PQexec(holder, "SELECT pg_advisory_lock(x'4d454e44'::int, hashtext(current_schema()))"));
  pthread_t u;
  pthread_create(&u, NULL, open_flagged, NULL);
  for (int i = 0; i < 500 && atomic_load(&opened) < 0; i++) sleep_s(0.01);
  CHECK_EQ_INT(atomic_load(&opened), 1);
  PQclear(PQexec(holder, "SELECT pg_advisory_unlock_all()"));
  pthread_join(u, NULL);
  drop_case();
  /* The schema made in a database where another mend makes its own (a test each, a tenant
   * each) does not wait for it: the lock is the schema's, not the database's (the key an
   * older mend took for any schema held here). */
  new_case();
  PQfinish(holder);
  holder = raw();
  PQclear(PQexec(holder, "SELECT pg_advisory_lock(x'4d454e44'::int)"));
  atomic_store(&opened, -1);
  pthread_create(&u, NULL, open_flagged, NULL);   /* waiting, it would fail after 5 s */
  pthread_join(u, NULL);
  CHECK_EQ_INT(atomic_load(&opened), 1);
  CHECK_EQ_INT(count("SELECT value::int FROM meta WHERE key = 'schema_version'"),
               MEND_PG_SCHEMA_VERSION);
  PQfinish(holder);
  drop_case();
  /* ... and does wait for another making this one: the lock's second key is this schema's */
  new_case();
  holder = raw();
  PQclear(PQexec(holder, "SELECT pg_advisory_lock(x'4d454e44'::int, hashtext(current_schema()))"));
  atomic_store(&opened, -1);
  pthread_create(&u, NULL, open_flagged, NULL);
  CHECK(lock_waiters("advisory") >= 1);
  PQclear(PQexec(holder, "SELECT pg_advisory_unlock_all()"));
  pthread_join(u, NULL);
  CHECK_EQ_INT(atomic_load(&opened), 1);
  PQfinish(holder);
  drop_case();
}

/* An open that gives up waiting for the schema's creation lock names the session holding it:
 * its pid, application and client address (a person looks for it in pg_stat_activity). */
static void test_creation_lock_holder(void) {
  new_case();
  PGconn *holder = raw();
  sql(holder, "SET application_name = 'schema-holder'");
  sql(holder, "SELECT pg_advisory_lock(x'4d454e44'::int, hashtext(current_schema()))");
  char err[1024], want[160];
  mend_store *s = mend__pg_open(conninfo, MEND_DURABILITY_FULL, err, sizeof err);   /* ~4 s */
  CHECK(s == NULL);
  mend__pg_close(s);
  snprintf(want, sizeof want, ": create schema public: its creation lock is held by session %d"
           " (schema-holder), from ", PQbackendPID(holder));
  CHECK(strstr(err, want) != NULL);
  CHECK(strstr(err, "the store cannot be opened while it is held") != NULL);
  if (!strstr(err, want)) fprintf(stderr, "  said: %s\n", err);
  PQfinish(holder);
  drop_case();
}

/* The Cpus_allowed_list of the first of this process's threads named `comm`, or "". */
static void cpus_of(const char *comm, char *out, size_t len) {
  out[0] = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d)) && !out[0];) {
    char path[300], line[256] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = e->d_name[0] == '.' ? NULL : fopen(path, "r");
    if (!f) continue;
    int named = fgets(line, sizeof line, f) && strncmp(line, comm, strlen(comm)) == 0 &&
                line[strlen(comm)] == '\n';
    fclose(f);
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    if (!named || !(f = fopen(path, "r"))) continue;
    char list[64];
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "Cpus_allowed_list: %63s", list) == 1) {
        snprintf(out, len, "%s", list);
        break;
      }
    fclose(f);
  }
  if (d) closedir(d);
}

/* mend_options.thread_cpus on PostgreSQL: the second connection's opener (held in its PREPARE
 * by a lock on inbox, to be looked at) and the writer thread run on the CPUs the store was
 * given: here the last this thread may use, fewer than they would inherit on two or more. */
static void test_thread_cpus(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  char mine[64] = "", last[64], err[256] = "", seen[64];
  FILE *f = fopen("/proc/thread-self/status", "r");
  while (f && fgets(err, sizeof err, f))
    if (sscanf(err, "Cpus_allowed_list: %63s", mine) == 1) break;
  if (f) fclose(f);
  const char *tail = mine + strlen(mine);
  while (tail > mine && tail[-1] >= '0' && tail[-1] <= '9') tail--;
  snprintf(last, sizeof last, "%s", tail);
  mend_cpus cpus;
  CHECK_EQ_INT(mend_cpus_parse(last, "thread_cpus", &cpus, err, sizeof err), 0);
  mend_store_set_thread_cpus(s, &cpus);
  PGconn *locker = raw();
  sql(locker, "BEGIN");
  sql(locker, "LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE");
  mend__pg_open_committed_reads(s, 0);
  CHECK(lock_waiters("relation") >= 1);
  cpus_of("mend-pg-open", seen, sizeof seen);
  CHECK_STR(seen, last);
  sql(locker, "COMMIT");
  PQfinish(locker);
  CHECK_EQ_INT(mend__pg_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("r1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  cpus_of("mend-writer", seen, sizeof seen);
  CHECK_STR(seen, last);
  mend__pg_close(s);
  drop_case();
}

static void test_upgrade(void) {
  new_case();
  PGconn *c = raw();
  sql(c, "BEGIN");
  sql(c, mend__pg_migrations[0]);
  sql(c, "INSERT INTO meta(key, value) VALUES ('application', 'mend'), ('schema_version', '1')");
  sql(c, "INSERT INTO runs(id, workflow, status, created, updated, run_key)"
         " VALUES ('old', 'order', 'succeeded', 1, 2, 'k-old')");
  sql(c, "COMMIT");
  PQfinish(c);
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_tables WHERE tablename = 'tokens'"), 0);
  mend_store *s = open_store();
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(mend__pg_schema_version(s), MEND_PG_SCHEMA_VERSION);
  CHECK_EQ_INT(count("SELECT value::int FROM meta WHERE key = 'schema_version'"),
               MEND_PG_SCHEMA_VERSION);
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_indexes WHERE indexname = 'runs_parent'"), 1);
  /* the key's index holds only runs with a key (fewer index entries a step), and still makes
   * a start with a key taken find the run that has it */
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_indexes WHERE indexname = 'runs_key'"
                     " AND indexdef LIKE '%UNIQUE%WHERE (run_key IS NOT NULL)%'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_constraint WHERE conname = 'runs_run_key_key'"), 0);
  mend_run_rec again = run_rec("new-with-old-key", NULL);
  again.run_key = "k-old";
  CHECK_EQ_INT(mend__pg_insert_run(s, &again), 1);
  char found[64] = "";
  CHECK_EQ_INT(mend__pg_find_run_key(s, "k-old", found, sizeof found), 1);
  CHECK_STR(found, "old");
  mend_run_rec nokey1 = run_rec("no-key-1", NULL), nokey2 = run_rec("no-key-2", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &nokey1), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &nokey2), 0);
  json_t *run = mend_store_run(s, "old");
  CHECK_STR(json_string_value(json_object_get(run, "status")), "succeeded");
  CHECK(run && json_object_get(run, "parent_run") == NULL);
  json_decref(run);
  CHECK_EQ_INT(mend__pg_set_parent(s, "old", "p", "x"), 0);
  CHECK_EQ_INT(mend__pg_put_token(s, "t", "old", "x", 1, 1), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE parent_run = 'p'"), 1);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id LIKE 'no-key-%' AND run_key IS NULL"), 2);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE run_key = 'k-old'"), 1);
  mend__pg_close(s);
  drop_case();
}

/* A schema's name of up to 63 bytes, cut to fit the wake-up channel ("mend_" and 58 of them)
 * inside a character of two bytes: the channel stays UTF-8 text, or every batch that wakes
 * others (a run started) fails on its NOTIFY, and the LISTEN is never made. */
static void test_schema_name_cut(void) {
  new_case();
  char name[64], q[160], ci[2300];
  memset(name, 'a', 57);
  snprintf(name + 57, sizeof name - 57, "\xc3\xa9");   /* 59 bytes: the cut at 58 splits it */
  snprintf(q, sizeof q, "CREATE SCHEMA \"%s\"", name);
  PGconn *c = raw();
  CHECK_EQ_INT(sql(c, q), 0);
  PQfinish(c);
  snprintf(ci, sizeof ci, "%s options='-csearch_path=%s'", conninfo, name);
  char err[1024];
  mend_store *s = mend__pg_open(ci, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) {
    fprintf(stderr, "open: %s\n", err);
    drop_case();
    return;
  }
  mend_run_rec r = run_rec("r1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  int rc = mend__pg_commit(s);
  if (rc != 0) fprintf(stderr, "commit: %s\n", mend__pg_errmsg(s));
  CHECK_EQ_INT(rc, 0);
  int opened = 0;
  CHECK(mend__pg_wake_fd(s, &opened) >= 0);
  mend__pg_close(s);
  drop_case();
}

int main(void) {
  if (!pg_case_begin("test_pg_store_open")) return 0;
  test_errors();
  test_schema_race();
  test_creation_lock_holder();
  test_thread_cpus();
  test_upgrade();
  test_schema_name_cut();
  return pg_case_end("test_pg_store_open");
}
