/*
 * test_kept_start: a start kept in the batch under another process's
 * SQLite write lock (MEND_EDEFERRED) must not run its steps before its insert is committed
 * (the write-ahead rule), and a host told MEND_EDEFERRED ("do not send again") must find that
 * run once the lock goes. A second start without a key while the batch waits joins that
 * batch, and is lost as the first when the engine is freed while the lock lasts: it answers
 * MEND_EDEFERRED too (it answered MEND_OK, and the host could not tell).
 */
#include <mend.h>

#include "check.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lock_case.h"

static char marker[160];

static mend_engine *engine(void) {
  static const char *const files[] = {"fx.lua", NULL};
  return lock_engine(files);
}

int main(void) {
  lock_case_begin("kept-start", "k.db");
  snprintf(marker, sizeof marker, "%s/ran", dir);
  write_file("fx.lua", "return { name = 'fx', steps = { { name = 'a', "
                       "execute = function(ctx, input) if input.m then "
                       "local f = io.open(input.m, 'a') f:write(ctx.run_id, '\\n') f:close() end "
                       "return 1 end } } }\n");
  char id[17] = "";
  sqlite3 *holder = NULL, *look = NULL;
  /* Without a lock, a start answered MEND_OK and its engine freed at once: the run is there
   * (the free commits the batch), the promise MEND_OK makes. */
  mend_engine *E = engine();
  CHECK_EQ_INT(mend_engine_start(E, "fx", "{}", NULL, id, NULL), MEND_OK);
  mend_engine_free(E);
  CHECK_EQ_INT(sqlite3_open(path, &holder), SQLITE_OK);
  CHECK_EQ_INT(sqlite3_open(path, &look), SQLITE_OK);
  {
    char q[200];
    snprintf(q, sizeof q, "SELECT count(*) FROM runs WHERE id = '%s'", id);
    CHECK_EQ_INT(raw_int(look, q), 1);
  }
  /* As tests/test_lock_answers.c: an engine that has run a start (a fresh one meets the
   * lock first with writes of its own, EBUSY). */
  E = engine();
  CHECK_EQ_INT(mend_engine_start(E, "fx", "{}", NULL, id, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  hold(holder);
  char input[300];
  snprintf(input, sizeof input, "{\"m\":\"%s\"}", marker);
  int rc = mend_engine_start(E, "fx", input, NULL, id, NULL);
  fprintf(stderr, "start under lock: %d (%s) id=%s\n", rc, mend_engine_errmsg(E), id);
  CHECK_EQ_INT(rc, MEND_EDEFERRED);
  /* The lock lasts: drive the engine (virtual clock and the loop's turns). */
  for (int i = 0; i < 10; i++) { mend_engine_advance_clock(E, 1); usleep(20 * 1000); }
  /* Write-ahead: the step must not have run while its run's insert is not committed. */
  int ran = access(marker, F_OK) == 0;
  fprintf(stderr, "step ran while its run's insert waits for the lock: %d\n", ran);
  CHECK_EQ_INT(ran, 0);
  /* A second start without a key while the first waits: its answer and what it leaves. */
  char id2[17] = "";
  int rc2 = mend_engine_start(E, "fx", "{}", NULL, id2, NULL);
  fprintf(stderr, "second start under lock: %d (%s) id=%s\n", rc2, mend_engine_errmsg(E), id2);
  /* It is in the same kept batch, lost as the first if the engine is freed now: a host told
   * MEND_OK has no way to know it must keep driving the engine (mend.h: MEND_EDEFERRED). */
  CHECK_EQ_INT(rc2, MEND_EDEFERRED);
  /* The engine freed while the lock lasts (documented: the batch given up, as a crash). */
  mend_engine_free(E);
  let_go(holder);
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE id = '%s'", id);
  int n = raw_int(look, sql);
  fprintf(stderr, "run %s told DEFERRED exists after the free: %d; marker: %d\n", id, n,
          access(marker, F_OK) == 0);
  {
    snprintf(sql, sizeof sql, "SELECT count(*) FROM runs WHERE id = '%s'", id2);
    fprintf(stderr, "second run exists: %d\n", raw_int(look, sql));
  }
  sqlite3_close(holder);
  sqlite3_close(look);
  check_remove_dir(dir);
  return check_done("kept_start");
}
