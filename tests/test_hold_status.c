/*
 * test_hold_status: mend_store_hold_status on SQLite, with two stores on one file as two
 * servers are. A repair's look at a run's status, as its batch is written, is held until that
 * batch commits: the other store's look waits for it (or fails for the lock, never passes), and
 * then finds what the first wrote. Another process's lock makes the look fail, not answer; an
 * engine's repair of a run nobody holds is then refused as held back by the lock
 * (MEND_EBUSY, HTTP 503 "busy"), not as the run's state (MEND_ESTATE, 409).
 */
#include <mend.h>

#include "check.h"
#include "store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64];
static char path[128];

static mend_store *open_store(void) {
  char err[512] = "";
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  if (!s) {
    fprintf(stderr, "open %s: %s\n", path, err);
    exit(2);
  }
  mend_store_set_busy_wait(s, 20);
  return s;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/mend-test-hold-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  snprintf(path, sizeof path, "%s/hold.db", dir);
  mend_store *a = open_store(), *b = open_store();
  mend_run_rec r = {.id = "d1", .workflow = "order", .version = "v1", .source = "order.lua",
                    .status = "needs_attention", .input = "{}", .created = 1, .updated = 1};
  CHECK_EQ_INT(mend_store_insert_run(a, &r), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);

  char found[64];
  /* a looks and resolves, in its open batch */
  CHECK_EQ_INT(mend_store_hold_status(a, "d1", "needs_attention", found, sizeof found), 0);
  CHECK_EQ_INT(mend_store_update_run(a, "d1", "resolved", NULL, 0, 2, NULL), 0);
  /* b, which looked before a wrote, cannot find it still in the queue while a's batch is open */
  CHECK(mend_store_hold_status(b, "d1", "needs_attention", found, sizeof found) < 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  /* once it is committed, b finds it resolved: its repair is refused, nothing written */
  CHECK_EQ_INT(mend_store_hold_status(b, "d1", "needs_attention", found, sizeof found), 1);
  CHECK_STR(found, "resolved");
  CHECK_EQ_INT(mend_store_hold_status(b, "nope", "needs_attention", found, sizeof found), 1);
  CHECK_STR(found, "");
  CHECK_EQ_INT(mend_store_commit(b), 0);

  /* another process's lock: the look fails for it (503), it does not answer from before */
  sqlite3 *holder = NULL;
  CHECK_EQ_INT(sqlite3_open(path, &holder), SQLITE_OK);
  CHECK_EQ_INT(sqlite3_exec(holder, "BEGIN IMMEDIATE; UPDATE runs SET status = 'running'", NULL,
                            NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(mend_store_hold_status(a, "d1", "resolved", found, sizeof found), MEND_STORE_BUSY);
  CHECK_EQ_INT(sqlite3_exec(holder, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  CHECK_EQ_INT(mend_store_hold_status(a, "d1", "resolved", found, sizeof found), 1);
  CHECK_STR(found, "running");
  CHECK_EQ_INT(mend_store_commit(a), 0);

  /* A dead letter and a running run that nobody holds, repaired by an engine while another
   * process holds the lock. */
  mend_run_rec dl = {.id = "d2", .workflow = "order", .version = "v1", .source = "order.lua",
                     .status = "needs_attention", .input = "{}", .created = 1, .updated = 1};
  mend_run_rec run = {.id = "r1", .workflow = "order", .version = "v1", .source = "order.lua",
                      .status = "running", .input = "{}", .created = 1, .updated = 1};
  CHECK_EQ_INT(mend_store_insert_run(a, &dl), 0);
  CHECK_EQ_INT(mend_store_insert_run(a, &run), 0);
  CHECK_EQ_INT(mend_store_update_run(a, "d2", "needs_attention", "down", 1, 2,
                                     "compensation_failed"), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  mend_options o;
  mend_options_init(&o);
  o.db_path = path;
  mend_engine *E = NULL;
  char err[512] = "";
  CHECK_EQ_INT(mend_engine_new(&o, &E, err, sizeof err), MEND_OK);
  if (E) {
    CHECK_EQ_INT(sqlite3_exec(holder, "BEGIN IMMEDIATE; INSERT INTO meta VALUES('held', 'x')",
                              NULL, NULL, NULL), SQLITE_OK);
    CHECK_EQ_INT(mend_engine_retry_dead_letter(E, "d2", "t"), MEND_EBUSY);
    CHECK_EQ_INT(mend_engine_cancel(E, "r1", "t"), MEND_EBUSY);
    CHECK_EQ_INT(sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
    mend_engine_free(E);
  }
  sqlite3_close(holder);

  mend_store_close(a);
  mend_store_close(b);
  const char *suffix[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    char p[200];
    snprintf(p, sizeof p, "%s%s", path, suffix[i]);
    unlink(p);
  }
  if (rmdir(dir) != 0) perror(dir);
  return check_done("hold_status");
}
