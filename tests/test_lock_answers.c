/*
 * test_lock_answers: what a host is told when another process's write lock on a SQLite file
 * holds a start, an event or a repair back, and whether sending it again is safe: MEND_EBUSY
 * means nothing of it was recorded (send it again: one run, one event), MEND_EDEFERRED that it
 * is kept in the batch that waits for the lock and committed once it goes (sending it again
 * would make a second run or event). The lock is a second connection inside BEGIN IMMEDIATE,
 * as the sqlite3 shell holds it. Must never: assert a status without what the database then
 * holds.
 */
#include <mend.h>

#include "check.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lock_case.h"

static mend_engine *engine(void) {
  static const char *const files[] = {"one.lua", "wait.lua", NULL};
  return lock_engine(files);
}

static int count(sqlite3 *db, const char *sql) { return raw_int(db, sql); }

/* The engine's kept batch is committed at its lock timer's next try: the clock is virtual,
 * the timer real, so the test waits for it on the wall clock. */
static void settle(mend_engine *E) {
  for (int i = 0; i < 40; i++) {
    usleep(50 * 1000);
    mend_engine_advance_clock(E, 0.01);
  }
}

int main(void) {
  lock_case_begin("lockans", "lock.db");
  write_file("one.lua", "return { name = 'one', steps = { { name = 'a', execute = function() "
                        "return 1 end } } }\n");
  write_file("wait.lua", "return { name = 'wait', steps = { { name = 'kill', wait_for = 'go', "
                         "timeout = 3600 } } }\n");
  mend_engine *E = engine();
  char id[17] = "", waiting[17] = "";
  CHECK_EQ_INT(mend_engine_start(E, "wait", NULL, NULL, waiting, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  sqlite3 *holder = NULL, *look = NULL;
  CHECK_EQ_INT(sqlite3_open(path, &holder), SQLITE_OK);
  CHECK_EQ_INT(sqlite3_open(path, &look), SQLITE_OK);
  CHECK_STR(mend_strerror(MEND_EBUSY), "held back by a lock, nothing recorded: send it again");
  CHECK_STR(mend_strerror(MEND_EDEFERRED),
            "kept until a lock goes, then committed: do not send it again");

  /* The first start of a version records the version first: held back, nothing recorded. */
  hold(holder);
  CHECK_EQ_INT(mend_engine_start(E, "one", "{}", NULL, id, NULL), MEND_EBUSY);
  let_go(holder);
  CHECK_EQ_INT(count(look, "SELECT count(*) FROM runs"), 1);
  CHECK_EQ_INT(mend_engine_start(E, "one", "{}", NULL, id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK_EQ_INT(count(look, "SELECT count(*) FROM runs WHERE workflow = 'one'"), 1);

  /* A start without a key: kept in the batch, its run's id given; one run once the lock goes. */
  hold(holder);
  CHECK_EQ_INT(mend_engine_start(E, "one", "{}", NULL, id, NULL), MEND_EDEFERRED);
  CHECK_EQ_INT(strlen(id), 16);
  let_go(holder);
  settle(E);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK_EQ_INT(count(look, "SELECT count(*) FROM runs WHERE workflow = 'one'"), 2);
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE id = '%s' AND status = 'succeeded'",
           id);
  CHECK_EQ_INT(count(look, sql), 1);

  /* A start with a key: kept too; sent again once the lock went, the key's run, one run. */
  hold(holder);
  CHECK_EQ_INT(mend_engine_start(E, "one", "{}", "k1", id, NULL), MEND_EDEFERRED);
  let_go(holder);
  settle(E);
  CHECK_EQ_INT(count(look, "SELECT count(*) FROM runs WHERE run_key = 'k1'"), 1);
  char again[17] = "";
  int existed = 0;
  CHECK_EQ_INT(mend_engine_start(E, "one", "{}", "k1", again, &existed), MEND_OK);
  CHECK_EQ_INT(existed, 1);
  CHECK_STR(again, id);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK_EQ_INT(count(look, "SELECT count(*) FROM runs WHERE workflow = 'one'"), 3);

  /* An event without a key: kept in the batch, sent once the lock goes; one event. */
  hold(holder);
  CHECK_EQ_INT(mend_engine_signal(E, waiting, "go", "1", NULL), MEND_EDEFERRED);
  let_go(holder);
  settle(E);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM inbox WHERE run_id = '%s'", waiting);
  CHECK_EQ_INT(count(look, sql), 1);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE id = '%s' AND status = 'succeeded'",
           waiting);
  CHECK_EQ_INT(count(look, sql), 1);

  /* A cancel of a run nobody holds (its engine gone): nothing recorded; sent again, done. */
  CHECK_EQ_INT(mend_engine_start(E, "wait", NULL, NULL, waiting, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  mend_engine_free(E);
  E = engine();
  hold(holder);
  CHECK_EQ_INT(mend_engine_cancel(E, waiting, "ops"), MEND_EBUSY);
  let_go(holder);
  CHECK_EQ_INT(mend_engine_cancel(E, waiting, "ops"), MEND_OK);

  sqlite3_close(holder);
  sqlite3_close(look);
  mend_engine_free(E);
  check_remove_dir(dir);
  return check_done("lock_answers");
}
