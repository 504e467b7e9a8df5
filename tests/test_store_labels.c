/*
 * test_store_labels: a history row's event and statuses are written as the codes of their names in
 * labels (schema 7), every name of the table, however many share a first letter, and a name
 * that is not there (a prefix of one, one with a label as its prefix, the empty name) as it is.
 */
#include "check.h"
#include "raw_sqlite.h"
#include "store.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const not_labels[] = {"ru", "runs", "steps", "s", "", "succeede", "r"};

int main(void) {
  char dir[64], path[128], err[512] = "";
  snprintf(dir, sizeof dir, "/tmp/mend-test-labels-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  snprintf(path, sizeof path, "%s/labels.db", dir);
  mend_store *s = mend_store_open(path, MEND_DURABILITY_PROCESS, err, sizeof err);
  CHECK(s != NULL);
  if (!s) {
    fprintf(stderr, "open: %s\n", err);
    return check_done("labels");
  }
  sqlite3 *db = NULL;
  CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
  sqlite3_stmt *q;
  CHECK(sqlite3_prepare_v2(db, "SELECT name FROM labels ORDER BY code", -1, &q, NULL) == SQLITE_OK);
  char names[64][32];
  int n = 0;
  while (n < 64 && sqlite3_step(q) == SQLITE_ROW)
    snprintf(names[n++], sizeof names[0], "%s", (const char *)sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  CHECK(n >= 31);
  long seq = 0;
  /* each name as the event, and as both statuses in the names' order and the reverse */
  for (int i = 0; i < n; i++) {
    mend_history_rec h = {"r1", NULL, 1.0, names[i], names[n - 1 - i], names[i], 0, NULL, -1,
                          NULL, ++seq, NULL};
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  }
  int nn = (int)(sizeof not_labels / sizeof *not_labels);
  for (int i = 0; i < nn; i++) {
    mend_history_rec h = {"r2", NULL, 1.0, not_labels[i], NULL, not_labels[i], 0, NULL, -1,
                          NULL, i + 1, NULL};
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(s), 0);
  /* each stored as its code's digits, the named view spelling it back */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history h JOIN labels l"
                           " ON h.event = CAST(l.code AS TEXT) AND h.to_status = h.event"
                           " WHERE h.run_id = 'r1' AND h.seq = l.code + 1"), n);
  CHECK_EQ_INT(raw_int(db,
                       "SELECT count(*) FROM history h JOIN labels l"
                       " ON h.from_status = CAST(l.code AS TEXT)"
                       " WHERE h.run_id = 'r1' AND h.seq + l.code = (SELECT count(*) FROM labels)"),
               n);
  CHECK_EQ_INT(raw_int(db,
                       "SELECT count(*) FROM history_named h JOIN labels l"
                       " ON h.event = l.name AND h.to_status = l.name WHERE h.run_id = 'r1'"),
               n);
  /* the others as they are */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'r2'"
                           " AND event = to_status AND event NOT GLOB '[0-9]*'"), nn);
  for (int i = 0; i < nn; i++) {
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM history WHERE run_id = 'r2' AND seq = %d"
             " AND event = '%s'", i + 1, not_labels[i]);
    CHECK_EQ_INT(raw_int(db, sql), 1);
  }
  sqlite3_close(db);
  mend_store_close(s);
  char p[200];
  const char *suffixes[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s%s", path, suffixes[i]);
    unlink(p);
  }
  rmdir(dir);
  return check_done("labels");
}
