/*
 * test_store_rows: how the SQLite store keeps its rows small and numbered: workers, events and
 * statuses by code (schemas 5 and 7), history rows eight to a statement, history numbered by
 * the run's holder, a workflow version (and its script) written once for all its runs.
 *
 * Against a real file in a temporary directory (tests/store_case.h). Must never: lean on what
 * another case left in its database.
 */
#include "check.h"
#include "store_case.h"
#include "transition.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

/* Schema 5 writes fewer bytes: a history row names its worker by a number (worker_names), a
 * step's default key is not stored; reads give the name and the key as before, rows written
 * before (a name in history.worker) read as they were, and a number given in a batch that
 * rolls back is asked for again. */
static void test_compact_rows(void) {
  const char *path = file_in_dir("compact.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  mend_store_set_worker(s, "host:1:abc");
  /* a batch that fails (no writer thread: the store goes on after it): the worker's number
   * goes with it, and another process's worker takes that number meanwhile */
  CHECK(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 3, NULL) != 0);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  sqlite3 *db = raw_open(path);
  CHECK(sqlite3_exec(db, "INSERT INTO worker_names(name) VALUES('other:9:z')", NULL, NULL, NULL)
        == SQLITE_OK);
  CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("c1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_step_rec st = step_rec("c1", 0, "reserve", "running");
  CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
  mend_step_rec own = step_rec("c1", 1, "charge", "running");
  own.idem_key = "order-42";
  own.custom_key = 1;
  CHECK_EQ_INT(mend_store_put_step(s, &own), 0);
  for (long n = 1; n <= 10; n++) {   /* in a group of eight and one by one */
    mend_history_rec h = {"c1", NULL, (double)n, "step", NULL, "running",
                          0,    NULL, -1,        NULL,   n,    NULL};
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
  }
  /* a name labels does not have goes as it is */
  mend_history_rec odd = {"c1", NULL, 12, "custom", "running", "elsewhere",
                          0,    NULL, -1, NULL,     12,        NULL};
  CHECK_EQ_INT(mend_store_append_history(s, &odd), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  /* a row from before schema 5, its worker by name */
  CHECK(sqlite3_exec(db,
                     "INSERT INTO history(run_id, seq, at, event, worker)"
                     " VALUES('c1', 11, 11, 'note', 'old:2:def')",
                     NULL, NULL, NULL) == SQLITE_OK);
  /* the number (2: the other worker took 1), kept as text by the column's type: one byte
   * instead of the name's ten */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE worker = '2'"), 11);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM worker_names"), 2);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history h JOIN worker_names w ON w.id = h.worker"
                           " WHERE w.name = 'host:1:abc'"), 11);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM steps WHERE idem_key IS NULL"), 1);
  /* event and statuses as the codes of their names (schema 7), kept as text as well: 1 byte
   * instead of 4 and 7 */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE event = '0' AND to_status = '3'"
                           " AND from_status IS NULL"), 10);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history WHERE event = 'custom'"
                           " AND from_status = '3' AND to_status = 'elsewhere'"), 1);
  /* history_named spells all of them out, for the sqlite3 shell */
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM history_named WHERE event = 'step'"
                           " AND to_status = 'running' AND worker = 'host:1:abc'"), 10);
  json_t *hist = mend_store_history(s, "c1");
  CHECK(hist && json_array_size(hist) == 12);
  for (size_t i = 0; hist && i < 10; i++) {
    CHECK_STR(str_field(json_array_get(hist, i), "worker"), "host:1:abc");
    CHECK_STR(str_field(json_array_get(hist, i), "event"), "step");
    CHECK_STR(str_field(json_array_get(hist, i), "to"), "running");
  }
  CHECK_STR(str_field(json_array_get(hist, 10), "worker"), "old:2:def");
  CHECK_STR(str_field(json_array_get(hist, 10), "event"), "note");
  CHECK_STR(str_field(json_array_get(hist, 11), "event"), "custom");
  CHECK_STR(str_field(json_array_get(hist, 11), "from"), "running");
  CHECK_STR(str_field(json_array_get(hist, 11), "to"), "elsewhere");
  json_decref(hist);
  /* every status and breaker state the engine writes has a code */
  sqlite3_stmt *q;
  CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT count(*) FROM labels WHERE name = ?1", -1, &q, NULL),
               SQLITE_OK);
  const char *names[MEND_STEP__COUNT + MEND_RUN__COUNT + 3];
  int n = 0;
  for (int i = 0; i < MEND_STEP__COUNT; i++)
    names[n++] = mend_step_status_name((mend_step_status)i);
  for (int i = 0; i < MEND_RUN__COUNT; i++) names[n++] = mend_run_status_name((mend_run_status)i);
  for (int i = 0; i < 3; i++) names[n++] = mend_breaker_state_name((mend_breaker_state)i);
  for (int i = 0; i < n; i++) {
    sqlite3_bind_text(q, 1, names[i], -1, SQLITE_STATIC);
    CHECK(sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) == 1);
    if (sqlite3_column_int(q, 0) != 1) fprintf(stderr, "no code for %s\n", names[i]);
    sqlite3_reset(q);
  }
  sqlite3_finalize(q);
  json_t *run = mend_store_run(s, "c1");
  json_t *steps = json_object_get(run, "steps");
  CHECK_STR(str_field(json_array_get(steps, 0), "idempotency_key"), "c1/reserve");
  CHECK_STR(str_field(json_array_get(steps, 1), "idempotency_key"), "order-42");
  json_decref(run);
  sqlite3_close(db);
  mend_store_close(s);
  remove_db(path);
}

/* History rows written eight to a statement, whose parameters are bound again only where
 * their value changes (writer.c: bind_kept): each row reads back as written, whatever
 * the same place in the group before it held (NULL, a label's code, other text, a number),
 * across statements and batches. */
static void test_history_group_binds(void) {
  const char *path = file_in_dir("group.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  mend_store_set_worker(s, "host:1:grp");
  CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  mend_run_rec r = run_rec("g1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  static const char *const names[] = {"step", "run", "pending", "running", "custom"};
  enum { ROWS = 48 };
  for (long n = 1; n <= ROWS; n++) {
    int k = (int)(n * 7 + n / 8 * 3);   /* the same place in the next group: another pattern */
    char detail[32];
    snprintf(detail, sizeof detail, "detail %ld", n);
    mend_history_rec h = {"g1", k % 2 ? "s" : NULL, (double)n, names[k % 5],
                          k % 3 ? NULL : names[(k + 1) % 5], names[(k + 2) % 5], k % 4 ? (int)n : 0,
                          k % 5 ? NULL : "boom", k % 6 ? -1 : (double)n / 2,
                          k % 7 ? NULL : detail, n, k % 5 ? NULL : "fatal"};
    CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
    if (n == ROWS / 2) CHECK_EQ_INT(mend_store_commit(s), 0);   /* the rest in a second batch */
  }
  CHECK_EQ_INT(mend_store_commit(s), 0);
  sqlite3 *db = raw_open(path);
  sqlite3_stmt *q;
  CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT seq, step, event, from_status, to_status, attempt,"
                                      " error, delay, detail, error_kind, worker, at"
                                      " FROM history_named WHERE run_id = 'g1' ORDER BY seq",
                                  -1, &q, NULL), SQLITE_OK);
  long n = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    n++;
    int k = (int)(n * 7 + n / 8 * 3);
    char detail[32];
    snprintf(detail, sizeof detail, "detail %ld", n);
    const char *step = (const char *)sqlite3_column_text(q, 1);
    const char *from = (const char *)sqlite3_column_text(q, 3);
    const char *error = (const char *)sqlite3_column_text(q, 6);
    const char *det = (const char *)sqlite3_column_text(q, 8);
    const char *kind = (const char *)sqlite3_column_text(q, 9);
    CHECK_EQ_INT(sqlite3_column_int(q, 0), (int)n);
    CHECK(k % 2 ? step && strcmp(step, "s") == 0 : step == NULL);
    CHECK_STR((const char *)sqlite3_column_text(q, 2), names[k % 5]);
    CHECK(k % 3 ? from == NULL : from && strcmp(from, names[(k + 1) % 5]) == 0);
    CHECK_STR((const char *)sqlite3_column_text(q, 4), names[(k + 2) % 5]);
    CHECK(k % 4 ? sqlite3_column_int(q, 5) == (int)n : sqlite3_column_type(q, 5) == SQLITE_NULL);
    CHECK(k % 5 ? error == NULL : error && strcmp(error, "boom") == 0);
    CHECK(k % 6 ? sqlite3_column_type(q, 7) == SQLITE_NULL
                : sqlite3_column_double(q, 7) == (double)n / 2);
    CHECK(k % 7 ? det == NULL : det && strcmp(det, detail) == 0);
    CHECK(k % 5 ? kind == NULL : kind && strcmp(kind, "fatal") == 0);
    CHECK_STR((const char *)sqlite3_column_text(q, 10), "host:1:grp");
    CHECK(sqlite3_column_double(q, 11) == (double)n);
  }
  CHECK_EQ_INT((int)n, ROWS);
  sqlite3_finalize(q);
  sqlite3_close(db);
  mend_store_close(s);
}

/* A run's and a step's rows, whose statements' parameters are bound again only where their
 * value changes (writer.c: bind_kept): each row reads back as written, whatever the row
 * before it held in the same place (NULL, a number, other text), across batches; a number
 * and a NULL, or two numbers, are never taken for each other. */
static void test_row_binds(void) {
  const char *path = file_in_dir("rowbinds.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s != NULL);
  if (!s) return;
  CHECK_EQ_INT(mend_store_start_writer(s, NULL, NULL), 0);
  enum { RUNS = 24 };
  char ids[RUNS][16], keys[RUNS][16], texts[RUNS][16];
  for (int n = 0; n < RUNS; n++) {
    snprintf(ids[n], sizeof ids[n], "rb%02d", n);
    snprintf(keys[n], sizeof keys[n], "key%02d", n);
    snprintf(texts[n], sizeof texts[n], "text %d", n);
    int k = n * 5 + n / 4;   /* a pattern the next row does not repeat */
    mend_run_rec r = run_rec(ids[n], k % 3 ? NULL : keys[n], "running", n);
    r.error = k % 2 ? NULL : texts[n];
    r.attention = k % 4 == 1;
    r.owner = k % 5 ? NULL : "someone";
    CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
    mend_step_rec st = step_rec(ids[n], k % 2, "s", k % 3 ? "succeeded" : "failed");
    st.attempts = k % 4;
    st.comp_attempts = k % 3 ? 0 : 1;
    st.idem_key = k % 5 ? NULL : keys[n];
    st.custom_key = k % 5 ? 0 : 1;
    st.result = k % 2 ? texts[n] : NULL;
    st.error = k % 3 ? NULL : texts[n];
    st.error_kind = "fatal";
    st.error_severity = k % 3 ? 0 : 1 + k % 2;
    st.due = k % 4 ? -1 : n;
    st.slept = k % 2;
    st.new_row = 1;
    CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
    if (n == RUNS / 2) CHECK_EQ_INT(mend_store_commit(s), 0);   /* the rest in a second batch */
  }
  CHECK_EQ_INT(mend_store_commit(s), 0);
  sqlite3 *db = raw_open(path);
  sqlite3_stmt *q;
  CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT idx, status, attempts, comp_attempts, custom_key,"
                                      " result, error, error_severity, due, slept, typeof(attempts)"
                                      " FROM steps WHERE run_id = ?1", -1, &q, NULL), SQLITE_OK);
  for (int n = 0; n < RUNS; n++) {   /* the steps' rows as put */
    int k = n * 5 + n / 4;
    sqlite3_bind_text(q, 1, ids[n], -1, SQLITE_STATIC);
    CHECK_EQ_INT(sqlite3_step(q), SQLITE_ROW);
    const char *result = (const char *)sqlite3_column_text(q, 5);
    const char *error = (const char *)sqlite3_column_text(q, 6);
    CHECK_EQ_INT(sqlite3_column_int(q, 0), k % 2);
    CHECK_STR((const char *)sqlite3_column_text(q, 1), k % 3 ? "succeeded" : "failed");
    CHECK_EQ_INT(sqlite3_column_int(q, 2), k % 4);
    CHECK_STR((const char *)sqlite3_column_text(q, 10), "integer");
    CHECK_EQ_INT(sqlite3_column_int(q, 3), k % 3 ? 0 : 1);
    CHECK_EQ_INT(sqlite3_column_int(q, 4), k % 5 ? 0 : 1);
    CHECK(k % 2 ? result && strcmp(result, texts[n]) == 0 : result == NULL);
    CHECK(k % 3 ? error == NULL : error && strcmp(error, texts[n]) == 0);
    CHECK_EQ_INT(sqlite3_column_int(q, 7), k % 3 ? 0 : 1 + k % 2);
    CHECK(k % 4 ? sqlite3_column_type(q, 8) == SQLITE_NULL : sqlite3_column_double(q, 8) == n);
    CHECK_EQ_INT(sqlite3_column_int(q, 9), k % 2);
    sqlite3_reset(q);
  }
  sqlite3_finalize(q);
  for (int n = 0; n < RUNS; n++) {   /* and each changed, in another pattern */
    int k = n * 7 + n / 3;
    CHECK_EQ_INT(mend_store_update_run(s, ids[n], k % 2 ? "succeeded" : "failed",
                                       k % 3 ? NULL : texts[n], k % 4 == 2, 100 + n,
                                       k % 5 ? NULL : "why"), 0);
    int k0 = n * 5 + n / 4;
    mend_step_rec st = step_rec(ids[n], k0 % 2, "s", "succeeded");
    st.attempts = k % 3;
    st.result = k % 2 ? NULL : texts[n];
    st.last_delay = k % 4 ? -1 : 0.5 * n;
    CHECK_EQ_INT(mend_store_update_step(s, &st), 0);
  }
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(sqlite3_prepare_v2(db, "SELECT r.run_key, r.error, r.attention, r.owner, r.status,"
                                      " r.reason, r.updated, s.idx, s.attempts, s.comp_attempts,"
                                      " s.idem_key, s.custom_key, s.result, s.error_severity,"
                                      " s.due, s.slept, s.last_delay, typeof(s.attempts)"
                                      " FROM runs r JOIN steps s ON s.run_id = r.id"
                                      " WHERE r.id = ?1", -1, &q, NULL), SQLITE_OK);
  for (int n = 0; n < RUNS; n++) {
    int k0 = n * 5 + n / 4, k = n * 7 + n / 3;
    sqlite3_bind_text(q, 1, ids[n], -1, SQLITE_STATIC);
    CHECK_EQ_INT(sqlite3_step(q), SQLITE_ROW);
    const char *key = (const char *)sqlite3_column_text(q, 0);
    const char *error = (const char *)sqlite3_column_text(q, 1);
    const char *owner = (const char *)sqlite3_column_text(q, 3);
    const char *reason = (const char *)sqlite3_column_text(q, 5);
    const char *idem = (const char *)sqlite3_column_text(q, 10);
    const char *result = (const char *)sqlite3_column_text(q, 12);
    CHECK(k0 % 3 ? key == NULL : key && strcmp(key, keys[n]) == 0);
    CHECK(k % 3 ? error == NULL : error && strcmp(error, texts[n]) == 0);
    CHECK_EQ_INT(sqlite3_column_int(q, 2), k % 4 == 2);
    /* a finished run gives its owner back */
    CHECK(owner == NULL);
    CHECK_STR((const char *)sqlite3_column_text(q, 4), k % 2 ? "succeeded" : "failed");
    CHECK(k % 5 ? reason == NULL : reason && strcmp(reason, "why") == 0);
    CHECK(sqlite3_column_double(q, 6) == 100 + n);
    CHECK_EQ_INT(sqlite3_column_int(q, 7), k0 % 2);
    CHECK_EQ_INT(sqlite3_column_int(q, 8), k % 3);
    CHECK_STR((const char *)sqlite3_column_text(q, 17), "integer");
    CHECK_EQ_INT(sqlite3_column_int(q, 9), 0);
    CHECK(k0 % 5 ? idem == NULL : idem && strcmp(idem, keys[n]) == 0);
    CHECK_EQ_INT(sqlite3_column_int(q, 11), 0);   /* the update's custom_key, 0 */
    CHECK(k % 2 ? result == NULL : result && strcmp(result, texts[n]) == 0);
    CHECK_EQ_INT(sqlite3_column_int(q, 13), 0);
    CHECK(sqlite3_column_type(q, 14) == SQLITE_NULL);
    CHECK_EQ_INT(sqlite3_column_int(q, 15), 0);
    CHECK(k % 4 ? sqlite3_column_type(q, 16) == SQLITE_NULL
                : sqlite3_column_double(q, 16) == 0.5 * n);
    sqlite3_reset(q);
  }
  sqlite3_finalize(q);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM steps"), RUNS);
  sqlite3_close(db);
  mend_store_close(s);
  remove_db(path);
}

/* History rows are numbered by the run's holder (no look-up); a row without a number, or
 * whose number another process took meanwhile, gets the next free one. */
static void test_history_numbers(void) {
  const char *path = file_in_dir("hist.db");
  mend_store *a, *b;
  CHECK_EQ_INT(holder_and_other(path, &a, &b), 0);
  if (!a || !b) return;
  mend_run_rec r = run_rec("h1", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &r), 0);
  for (long n = 1; n <= 3; n++) {
    mend_history_rec h = {"h1", NULL, (double)n, "step", NULL, "running",
                          0,    NULL, -1,        NULL,   n,    NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  CHECK_EQ_INT(mend_store_last_history_seq(b, "h1"), 3);
  CHECK_EQ_INT(mend_store_last_history_seq(b, "nobody"), 0);
  /* another process adds a note (no number: the next free one, 4) */
  mend_history_rec note = {"h1", NULL, 4,  "operator",         NULL, NULL,
                           0,    NULL, -1, "cancel requested", 0,    NULL};
  CHECK_EQ_INT(mend_store_append_history(b, &note), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  /* the holder's count says 4 and 5: 4 is taken, so its rows become 5 and 6, in order */
  for (long n = 4; n <= 5; n++) {
    mend_history_rec h = {"h1", NULL, (double)n + 1, "step", "running", "succeeded", 1,
                          NULL, -1,   NULL,          n,      NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  json_t *hist = mend_store_history(a, "h1");
  CHECK(hist && json_array_size(hist) == 6);
  for (size_t i = 0; hist && i < json_array_size(hist); i++)
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(hist, i), "seq")),
                 (long long)i + 1);
  CHECK_STR(str_field(json_array_get(hist, 3), "event"), "operator");
  CHECK_STR(str_field(json_array_get(hist, 5), "to"), "succeeded");
  json_decref(hist);
  /* The same with more rows than go in one statement (8): the holder's 7..18 become 8..19,
   * still in the order recorded, whichever statement wrote them. */
  mend_history_rec note2 = {"h1", NULL, 7, "operator", NULL, NULL, 0, NULL, -1, "pause", 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(b, &note2), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  for (long n = 7; n <= 18; n++) {
    mend_history_rec h = {"h1", NULL, 100.0 + (double)n, "step", NULL, "running", 1, NULL, -1, NULL,
                          n,    NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  hist = mend_store_history(a, "h1");
  CHECK(hist && json_array_size(hist) == 19);
  for (size_t i = 0; hist && i < json_array_size(hist); i++) {
    json_t *row = json_array_get(hist, i);
    CHECK_EQ_INT(json_integer_value(json_object_get(row, "seq")), (long long)i + 1);
    if (i >= 7) CHECK(json_real_value(json_object_get(row, "at")) == 100.0 + (double)i);
  }
  CHECK_STR(str_field(json_array_get(hist, 6), "detail"), "pause");
  json_decref(hist);
  /* A number taken in the middle of a group: the rows before it are written by the group,
   * the holder's 4..8 become 5..9, none twice, none lost. */
  mend_run_rec r3 = run_rec("h3", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &r3), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  mend_history_rec mid = {"h3", NULL, 200, "operator", NULL, NULL, 0, NULL, -1, "mid", 4, NULL};
  CHECK_EQ_INT(mend_store_append_history(b, &mid), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  for (long n = 1; n <= 8; n++) {
    mend_history_rec h = {"h3", NULL, 300.0 + (double)n, "step", NULL, "running", 1, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  hist = mend_store_history(a, "h3");
  CHECK(hist && json_array_size(hist) == 9);
  for (size_t i = 0; hist && i < json_array_size(hist); i++) {
    json_t *row = json_array_get(hist, i);
    CHECK_EQ_INT(json_integer_value(json_object_get(row, "seq")), (long long)i + 1);
    if (i == 3) CHECK_STR(str_field(row, "detail"), "mid");
    else CHECK(json_real_value(json_object_get(row, "at")) == 300.0 + (double)(i < 3 ? i + 1 : i));
  }
  json_decref(hist);
  /* Rows of one time (a virtual clock, or one turn) whose numbers collide with the holder's
   * own earlier rows once another process took one: none lost, all in order. */
  mend_run_rec r2 = run_rec("h2", NULL, "running", 1);
  CHECK_EQ_INT(mend_store_insert_run(a, &r2), 0);
  CHECK_EQ_INT(mend_store_commit(a), 0);
  mend_history_rec first = {"h2", NULL, 50, "operator", NULL, NULL, 0, NULL, -1, "note", 0, NULL};
  CHECK_EQ_INT(mend_store_append_history(b, &first), 0);
  CHECK_EQ_INT(mend_store_commit(b), 0);
  for (long n = 1; n <= 16; n++) {
    mend_history_rec h = {"h2", NULL, 60, "step", NULL, "running", (int)n, NULL, -1, NULL, n, NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  hist = mend_store_history(a, "h2");
  CHECK(hist && json_array_size(hist) == 17);
  for (size_t i = 1; hist && i < json_array_size(hist); i++)
    CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(hist, i), "attempt")),
                 (long long)i);
  json_decref(hist);
  /* Without a taken number, sixteen rows go in two statements, numbered as recorded. */
  for (long n = 20; n <= 35; n++) {
    mend_history_rec h = {"h1", NULL, 100.0 + (double)n, "step", NULL, "running", 1, NULL, -1, NULL,
                          n,    NULL};
    CHECK_EQ_INT(mend_store_append_history(a, &h), 0);
  }
  CHECK_EQ_INT(mend_store_commit(a), 0);
  hist = mend_store_history(a, "h1");
  CHECK(hist && json_array_size(hist) == 35);
  for (size_t i = 19; hist && i < json_array_size(hist); i++)
    CHECK(json_real_value(json_object_get(json_array_get(hist, i), "at")) == 100.0 + (double)i + 1);
  json_decref(hist);
  mend_store_close(a);
  mend_store_close(b);
}

/* A run names its workflow version by a number (schema 7): the version, source and step names
 * are written once a version, and read with the run as before. A version numbered in a batch
 * that rolls back is numbered again; another process finds the row there. */
static void test_workflow_versions(void) {
  const char *path = file_in_dir("versions.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  mend_store *other = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s && other);
  if (!s || !other) return;
  mend_run_rec r = run_rec("v1", NULL, "running", 1);
  r.step_names = "[\"a\",\"b\"]";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  r.id = "v2";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_run_rec r2 = r;
  r2.id = "v3";
  r2.version = "v2";   /* the workflow changed */
  CHECK_EQ_INT(mend_store_insert_run(s, &r2), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM runs WHERE version IS NULL AND source IS NULL"
                           " AND step_names IS NULL AND workflow_version IS NOT NULL"), 3);
  CHECK_EQ_INT(raw_int(db, "SELECT count(DISTINCT workflow_version) FROM runs"), 2);
  json_t *run = mend_store_run(s, "v3");
  CHECK_STR(str_field(run, "version"), "v2");
  CHECK_STR(str_field(run, "source"), "order.lua");
  CHECK_EQ_INT((long long)json_array_size(json_object_get(run, "steps")), 2);
  CHECK_STR(str_field(json_array_get(json_object_get(run, "steps"), 1), "name"), "b");
  json_decref(run);
  json_t *list = mend_store_runs(s, NULL, NULL, 10);
  CHECK(list && json_array_size(list) == 3);
  CHECK_STR(str_field(json_array_get(list, 0), "version"), "v2");   /* newest first */
  CHECK_STR(str_field(json_array_get(list, 2), "version"), "v1");
  json_decref(list);

  /* another process has the row already */
  r.id = "v4";
  CHECK_EQ_INT(mend_store_insert_run(other, &r), 0);
  CHECK_EQ_INT(mend_store_commit(other), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);

  /* a version numbered in a batch that fails is gone with it, and numbered again */
  mend_run_rec r3 = r;
  r3.id = "v5";
  r3.version = "v3";
  CHECK_EQ_INT(mend_store_insert_run(s, &r3), 0);
  CHECK(mend_store_update_run(s, "nobody", "succeeded", NULL, 0, 3, NULL) != 0);
  CHECK_EQ_INT(mend_store_commit(s), -1);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);
  r3.id = "v6";
  CHECK_EQ_INT(mend_store_insert_run(s, &r3), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 3);
  run = mend_store_run(s, "v6");
  CHECK_STR(str_field(run, "version"), "v3");
  json_decref(run);
  sqlite3_close(db);
  mend_store_close(other);
  mend_store_close(s);
  remove_db(path);
}

/* A version keeps its script (schema 8), written with its first run, kept by a row from before
 * that lacked it once a run of the version brings it, and read back for that version only. */
static void test_version_scripts(void) {
  const char *path = file_in_dir("scripts.db");
  mend_store *s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s);
  if (!s) return;
  mend_run_rec r = run_rec("s1", NULL, "running", 1);
  r.script = "return { name = 'order' }";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  mend_run_rec bare = r;   /* a version whose script was not kept (registered in code) */
  bare.id = "s2";
  bare.version = "v9";
  bare.script = NULL;
  CHECK_EQ_INT(mend_store_insert_run(s, &bare), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  char *source = NULL;
  char *text = mend_store_version_script(s, "order", r.version, &source);
  CHECK_STR(text, "return { name = 'order' }");
  CHECK_STR(source, "order.lua");
  free(text);
  free(source);
  CHECK(mend_store_version_script(s, "order", "v9", NULL) == NULL);
  CHECK(strstr(mend_store_errmsg(s), "no script of workflow order version v9 is kept") != NULL);
  CHECK(mend_store_version_script(s, "refund", r.version, NULL) == NULL);
  mend_store_close(s);

  /* another process (a restart) brings the script of a version whose row lacks it */
  s = store_at(path, MEND_DURABILITY_PROCESS);
  CHECK(s);
  if (!s) return;
  bare.id = "s3";
  bare.script = "return { name = 'order', v = 9 }";
  CHECK_EQ_INT(mend_store_insert_run(s, &bare), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  text = mend_store_version_script(s, "order", "v9", NULL);
  CHECK_STR(text, "return { name = 'order', v = 9 }");
  free(text);
  sqlite3 *db = raw_open(path);
  CHECK_EQ_INT(raw_int(db, "SELECT count(*) FROM workflow_versions"), 2);
  sqlite3_close(db);
  mend_store_close(s);
  remove_db(path);
}

int main(void) {
  store_case_begin("store-rows");
  test_compact_rows();
  test_history_group_binds();
  test_row_binds();
  test_history_numbers();
  test_workflow_versions();
  test_version_scripts();
  return store_case_end("store_rows");
}
