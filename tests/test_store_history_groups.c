/*
 * test_store_history_groups: hostile cases for the writer's history groups (one INSERT OR FAIL
 * statement of several rows) and its kept bindings (values bound only when changed): a full
 * disk in the middle of a group (no statement journal: SQLite rolls the whole transaction
 * back itself), a number taken in the middle of a group holding rows of several runs, and the
 * kept bindings across a batch that failed and one that follows it.
 *
 * Against a real file in a temporary directory (tests/store_case.h). Must never: lean on what
 * another case left in its database.
 */
#include "check.h"
#include "store_case.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sqlite3 *caught;

static int catch_connection(sqlite3 *db, char **errmsg, const sqlite3_api_routines *api) {
  (void)errmsg;
  (void)api;
  if (!caught) caught = db;
  return SQLITE_OK;
}

static mend_history_rec row(const char *run, long seq, double at, const char *detail) {
  return (mend_history_rec){.run_id = run, .at = at, .event = "step", .step = "s",
                            .to_status = "running", .attempt = 1, .delay = -1,
                            .detail = detail, .seq = seq};
}

/* A full disk while the group writes its rows: the batch fails as a whole, reports the full
 * disk, and the same writes go through once there is space, numbered as recorded. */
static void test_full_disk_in_group(int with_writer) {
  char name[32];
  snprintf(name, sizeof name, "fullgroup%d.db", with_writer);
  const char *path = file_in_dir(name);
  caught = NULL;
  CHECK_EQ_INT(sqlite3_auto_extension((void (*)(void))catch_connection), SQLITE_OK);
  mend_store *s = store_at(path, MEND_DURABILITY_FULL);
  sqlite3_cancel_auto_extension((void (*)(void))catch_connection);
  CHECK(s != NULL && caught != NULL);
  if (!s || !caught) return;
  mend_store_set_worker(s, "holder:1:full");
  if (with_writer) CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("g", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);

  size_t big = 6000;
  char *detail = malloc(big + 1);
  if (!detail) return;
  memset(detail, 'd', big);
  detail[big] = 0;
  CHECK_EQ_INT(sqlite3_exec(caught, "PRAGMA max_page_count = 1", NULL, NULL, NULL), SQLITE_OK);
  mend_run_rec other = run_rec("g2", NULL, "running", 2);
  int rc = mend_store_insert_run(s, &other);
  for (long n = 1; n <= 8 && rc == 0; n++) {
    mend_history_rec h = row("g", n, (double)n, detail);
    rc = mend_store_append_history(s, &h);
  }
  if (rc == 0) rc = mend_store_commit(s);
  else mend_store_commit(s);
  CHECK_EQ_INT(rc, -1);
  CHECK(strstr(mend_store_errmsg(s), "database or disk is full") != NULL);
  /* the group's statement is the one the disk stopped (its rows need overflow pages) */
  CHECK(strstr(mend_store_errmsg(s), "append history") != NULL);
  CHECK_EQ_INT(mend_store_batch_open(s), 0);

  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'g'"), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE id = 'g2'"), 0);
  sqlite3_close(db);

  CHECK_EQ_INT(sqlite3_exec(caught, "PRAGMA max_page_count = 1000000", NULL, NULL, NULL),
               SQLITE_OK);
  CHECK_EQ_INT(mend_store_insert_run(s, &other), 0);
  for (long n = 1; n <= 8; n++) {
    mend_history_rec h = row("g", n, (double)n, n % 2 ? detail : "small");
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(s), 0);
  json_t *hist = mend_store_history(s, "g");
  CHECK(hist && json_array_size(hist) == 8);
  for (size_t i = 0; hist && i < json_array_size(hist); i++) {
    json_t *h = json_array_get(hist, i);
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "seq")), (long long)i + 1);
    CHECK(json_real_value(json_object_get(h, "at")) == (double)i + 1);
  }
  json_decref(hist);
  db = raw_open(path);
  char *check = raw_text(db, "PRAGMA integrity_check");
  CHECK_STR(check, "ok");
  free(check);
  sqlite3_close(db);
  free(detail);
  mend_store_close(s);
}

/* A number of run B taken in the middle of a group that holds rows of runs A and B: every row
 * once, each run's rows numbered in the order recorded. */
static void test_taken_in_mixed_group(void) {
  const char *path = file_in_dir("mixed.db");
  mend_store *a, *b;
  CHECK_EQ_INT(holder_and_other(path, &a, &b), 0);
  if (!a || !b) return;
  mend_run_rec ra = run_rec("A", NULL, "running", 1), rb = run_rec("B", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &ra), 0);
  CHECK_EQ_INT(mend_store_insert_run(a, &rb), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  mend_history_rec note = {.run_id = "B", .at = 1, .event = "operator", .delay = -1,
                           .detail = "note", .seq = 2};
  CHECK_EQ_INT(mend_store_append_history(b, &note), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  /* A1 B1 A2 B2(taken) A3 B3 A4 B4, then A5..A8 in a second group */
  for (long n = 1; n <= 4; n++) {
    mend_history_rec ha = row("A", n, 10.0 + (double)n, NULL);
    mend_history_rec hb = row("B", n, 20.0 + (double)n, NULL);
    CHECK_EQ_INT(mend_store_append_history(a, &ha), 0);
    CHECK_EQ_INT(mend_store_append_history(a, &hb), 0);
  }
  for (long n = 5; n <= 12; n++) {
    mend_history_rec ha = row("A", n, 10.0 + (double)n, NULL);
    CHECK_EQ_INT(mend_store_append_history(a, &ha), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  json_t *hist = mend_store_history(a, "A");
  CHECK(hist && json_array_size(hist) == 12);
  for (size_t i = 0; hist && i < json_array_size(hist); i++) {
    json_t *h = json_array_get(hist, i);
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "seq")), (long long)i + 1);
    CHECK(json_real_value(json_object_get(h, "at")) == 11.0 + (double)i);
  }
  json_decref(hist);
  hist = mend_store_history(a, "B");
  CHECK(hist && json_array_size(hist) == 5);
  double want[] = {21, 0, 22, 23, 24};
  for (size_t i = 0; hist && i < json_array_size(hist); i++) {
    json_t *h = json_array_get(hist, i);
    CHECK_EQ_INT(json_integer_value(json_object_get(h, "seq")), (long long)i + 1);
    if (i == 1) CHECK_STR(str_field(h, "detail"), "note");
    else CHECK(json_real_value(json_object_get(h, "at")) == want[i]);
  }
  json_decref(hist);
  mend_store_close(a);
  mend_store_close(b);
}

/* A row of a group that breaks NOT NULL (OR FAIL stops there too, the rows before it written):
 * not taken for a number taken; the batch fails whole and says why. */
static void test_not_null_in_group(void) {
  const char *path = file_in_dir("notnull.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  mend_run_rec r = run_rec("N", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  int rc = 0;
  for (long n = 1; n <= 8 && rc == 0; n++) {
    mend_history_rec h = row("N", n, (double)n, NULL);
    if (n == 5) h.event = NULL;
    rc = mend_store_append_history(s, &h);
  }
  if (rc == 0) rc = mend_store_commit(s);
  else mend_store_commit(s);
  CHECK_EQ_INT(rc, -1);
  CHECK(strstr(mend_store_errmsg(s), "NOT NULL") != NULL);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE run_id = 'N'"), 0);
  sqlite3_close(db);
  mend_history_rec h = row("N", 1, 1, NULL);
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  json_t *hist = mend_store_history(s, "N");
  CHECK(hist && json_array_size(hist) == 1);
  json_decref(hist);
  mend_store_close(s);
}

/* Many batches of a holder of two runs whose rows share its groups, while another process
 * numbers rows of either run too (one past the last it sees, as an adopting engine does):
 * a number taken anywhere in a group. Each of the holder's rows once, every run's in the order
 * recorded (its `at`), every number once. */
static void test_taken_at_random(void) {
  const char *path = file_in_dir("random.db");
  mend_store *a, *b;
  CHECK_EQ_INT(holder_and_other(path, &a, &b), 0);
  if (!a || !b) return;
  const char *runs[2] = {"R", "S"};
  for (int i = 0; i < 2; i++) {
    mend_run_rec r = run_rec(runs[i], NULL, "running", 1);
    CHECK_EQ_INT(mend_store_insert_run(a, &r), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  unsigned seed = 26;
  long count[2] = {0, 0}, mine = 0, theirs = 0;   /* count: a's idea of each run's last number */
  for (int it = 0; it < 400; it++) {
    seed = seed * 1103515245u + 12345u;
    int ntake = (int)(seed >> 16) % 3;
    for (int k = 0; k < ntake; k++) {
      seed = seed * 1103515245u + 12345u;
      const char *run = runs[(seed >> 16) & 1];
      mend_history_rec note = {.run_id = run, .at = -1, .event = "operator", .delay = -1,
                               .detail = "note", .seq = mend_store_last_history_seq(b, run) + 1};
      int rc = mend_store_append_history(b, &note);
      if (rc == 0) rc = mend_store_commit(b);
      CHECK_EQ_INT(rc, 0);
      theirs++;
    }
    seed = seed * 1103515245u + 12345u;
    int n = 1 + (int)((seed >> 16) % 20);
    for (int k = 0; k < n; k++) {
      seed = seed * 1103515245u + 12345u;
      int i = (seed >> 16) & 1;
      mend_history_rec h = row(runs[i], ++count[i], (double)++mine, NULL);
      CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
    }
    CHECK_EQ_INT(mend_store_commit(a), 0);
    for (int i = 0; i < 2; i++) count[i] = mend_store_last_history_seq(a, runs[i]);
  }
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE at >= 0"), mine);
  CHECK_EQ_INT(raw_int(db, "SELECT count(DISTINCT at) FROM history WHERE at >= 0"), mine);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE at < 0"), theirs);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history x JOIN history y ON x.run_id ="
                           " y.run_id AND x.at >= 0 AND y.at > x.at AND y.seq < x.seq"), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM (SELECT run_id, count(*) AS n, max(seq) AS m"
                           " FROM history GROUP BY run_id) WHERE n != m"), 0);
  sqlite3_close(db);
  mend_store_close(a);
  mend_store_close(b);
}

int main(void) {
  store_case_begin("store-history-groups");
  test_full_disk_in_group(0);
  test_full_disk_in_group(1);
  test_taken_in_mixed_group();
  test_not_null_in_group();
  test_taken_at_random();
  return store_case_end("store_history_groups");
}
