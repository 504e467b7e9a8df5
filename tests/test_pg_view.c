/*
 * test_pg_view: the PostgreSQL store's views (src/store/pg/pg_view.c) return what the SQLite
 * store's return for the same rows, and mend copy's core (pg_copy.c) moves those rows. A
 * SQLite store is written through the store API with runs of every kind (finished, failed,
 * waiting with a step in flight and one not begun, dead-lettered, compensated), breakers,
 * audit rows, events, versions, completion tokens and child runs; it is copied into a fresh
 * database of the test cluster (MEND_TEST_PG, tests/pg/cluster.sh run), and every view is
 * compared with json_equal.
 *
 * argv[1]: tests/pg/schema.sql, the agreed tables, for a build without the PostgreSQL store
 * (whose open makes them otherwise).
 */
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "store.h"
#include "store/pg/pg_copy.h"
#include "store/pg/pg_view.h"
#include "store/store_int.h"   /* MEND_SCHEMA_VERSION: the copy must read the current schema */

_Static_assert(MEND_COPY_SQLITE_SCHEMA == MEND_SCHEMA_VERSION,
               "pg_copy.c reads the columns of another SQLite schema: update its SELECTs");

static char err[1024];

static void same(const char *what, json_t *sqlite_v, json_t *pg_v) {
  int eq = sqlite_v && pg_v && json_equal(sqlite_v, pg_v);
  CHECK(eq);
  if (!eq) {
    char *a = sqlite_v ? json_dumps(sqlite_v, JSON_SORT_KEYS | JSON_INDENT(1)) : NULL;
    char *b = pg_v ? json_dumps(pg_v, JSON_SORT_KEYS | JSON_INDENT(1)) : NULL;
    fprintf(stderr, "%s differs (pg error: %s)\n--- sqlite:\n%s\n--- postgresql:\n%s\n", what,
            pg_v ? "" : err, a ? a : "(null)", b ? b : "(null)");
    free(a);
    free(b);
  }
  json_decref(sqlite_v);
  json_decref(pg_v);
}

/* uri with its database replaced by db. */
static char *with_db(const char *uri, const char *db) {
  static char out[1024];
  const char *host = strstr(uri, "://");
  const char *slash = host ? strchr(host + 3, '/') : NULL;
  const char *q = strchr(uri, '?');
  size_t keep = slash ? (size_t)(slash - uri) : (q ? (size_t)(q - uri) : strlen(uri));
  snprintf(out, sizeof out, "%.*s/%s%s", (int)keep, uri, db, q ? q : "");
  return out;
}

static int run_sql(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
  if (!ok) fprintf(stderr, "sql failed: %s: %s\n", sql, PQerrorMessage(c));
  PQclear(r);
  return ok ? 0 : -1;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  return text;
}

static mend_run_rec run_rec(const char *id, const char *wf, const char *version,
                            const char *status, double created) {
  mend_run_rec r = {.id = id,
                    .workflow = wf,
                    .version = version,
                    .source = "wf/order.lua",
                    .status = status,
                    .input = "{\"order\":42,\"items\":[1,2.5],\"s\":\"a\\tb\\n\"}",
                    .created = created,
                    .updated = created + 0.25,
                    .step_names = "[\"reserve\",\"charge\",\"ship\"]",
                    .script = "return { name = 'order' }\n"};
  return r;
}

static mend_step_rec step_rec(const char *run, int idx, const char *name, const char *status,
                              double at) {
  mend_step_rec st = {.run_id = run, .idx = idx, .name = name, .status = status,
                      .attempts = 1, .due = -1, .last_delay = -1, .updated = at};
  return st;
}

static void history(mend_store *s, const char *run, const char *step, double at,
                    const char *event, const char *from, const char *to, int attempt,
                    const char *error, double delay, const char *detail) {
  mend_history_rec h = {.run_id = run, .step = step, .at = at, .event = event,
                        .from_status = from, .to_status = to, .attempt = attempt,
                        .error = error, .delay = delay, .detail = detail};
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
}

/* The rows: five runs of two workflows (three versions), of every kind a person looks at. */
static void fill(mend_store *s) {
  double t0 = 1765000000.123456789;
  mend_store_set_worker(s, "host-a:1:0");
  mend_run_rec r = run_rec("01aaaaaaaa000001", "order", "v1", "succeeded", t0);
  r.run_key = "order-17";
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  for (int i = 0; i < 3; i++) {
    static const char *const names[] = {"reserve", "charge", "ship"};
    mend_step_rec st = step_rec(r.id, i, names[i], "succeeded", t0 + i);
    st.result = i == 1 ? "{\"charge\":\"ch_1\",\"amount\":12.5}" : NULL;
    if (i == 1) { st.idem_key = "charge-order-42"; st.custom_key = 1; st.attempts = 2; }
    CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
    history(s, r.id, names[i], t0 + i, "step", "pending", "running", 1, NULL, -1, NULL);
    history(s, r.id, names[i], t0 + i + 0.5, "step", "running", "succeeded", 1, NULL, -1, NULL);
  }
  history(s, r.id, NULL, t0 + 3, "run", "running", "succeeded", 0, NULL, -1, NULL);

  mend_run_rec f = run_rec("01aaaaaaaa000002", "order", "v1", "failed", t0);   /* same created */
  f.error = "card declined";
  CHECK_EQ_INT(mend_store_insert_run(s, &f), 0);
  CHECK_EQ_INT(mend_store_update_run(s, f.id, "failed", "card declined", 1, t0 + 9, "fatal"), 0);
  mend_step_rec fs = step_rec(f.id, 0, "reserve", "failed", t0 + 1);
  fs.error = "fatal: card declined";
  fs.last_delay = 1.5;
  CHECK_EQ_INT(mend_store_put_step(s, &fs), 0);
  history(s, f.id, "reserve", t0 + 1, "attempt_failed", "running", "retry_wait", 1,
          "timeout", 1.5, "{\"kind\":\"retryable\"}");

  mend_run_rec w = run_rec("01aaaaaaaa000003", "order", "v2", "running", t0 + 10);
  CHECK_EQ_INT(mend_store_insert_run(s, &w), 0);
  mend_step_rec ws = step_rec(w.id, 0, "reserve", "succeeded", t0 + 11);
  CHECK_EQ_INT(mend_store_put_step(s, &ws), 0);
  mend_step_rec wc = step_rec(w.id, 1, "charge", "retry_wait", t0 + 12);
  wc.due = t0 + 100;
  wc.last_delay = 2;
  CHECK_EQ_INT(mend_store_put_step(s, &wc), 0);
  /* an attempt begun since its row: in flight, in history only */
  history(s, w.id, "charge", t0 + 13, "step", "retry_wait", "running", 2, NULL, -1, NULL);
  CHECK_EQ_INT(mend_store_send_event(s, w.id, "approved", "{\"by\":\"ann\"}", "k1", t0 + 14, NULL),
               0);
  CHECK_EQ_INT(mend_store_send_event(s, w.id, "approved", NULL, NULL, t0 + 15, NULL), 0);

  mend_run_rec d = run_rec("01aaaaaaaa000004", "ship", "s1", "needs_attention", t0 + 20);
  d.source = "wf/ship.lua";
  d.step_names = "[\"label\",\"pickup\"]";
  d.script = NULL;
  CHECK_EQ_INT(mend_store_insert_run(s, &d), 0);
  CHECK_EQ_INT(mend_store_update_run(s, d.id, "needs_attention", "compensation failed", 1,
                                     t0 + 21, "compensation_failed"), 0);
  mend_step_rec dl = step_rec(d.id, 0, "label", "compensation_failed", t0 + 21);
  dl.due = 1.0 / 0.0;   /* a wait of math.huge */
  CHECK_EQ_INT(mend_store_put_step(s, &dl), 0);
  mend_dlq_rec q = {.run_id = d.id, .reason = "compensation_failed", .step = "label",
                    .error = "printer on fire", .detail = "{\"tries\":3}", .at = t0 + 21};
  CHECK_EQ_INT(mend_store_put_dlq(s, &q), 0);

  mend_run_rec c = run_rec("01aaaaaaaa000005", "order", "v2", "compensated", t0 + 30);
  CHECK_EQ_INT(mend_store_insert_run(s, &c), 0);
  CHECK_EQ_INT(mend_store_request_cancel(s, c.id), 0);

  /* the waiting run's children (ended and dead-lettered) and its tokens, one used */
  CHECK_EQ_INT(mend_store_set_parent(s, c.id, w.id, "charge"), 0);
  CHECK_EQ_INT(mend_store_set_parent(s, d.id, w.id, "reserve"), 0);
  CHECK_EQ_INT(mend_store_put_token(s, "tok-a", w.id, "charge", 1, t0 + 12), 0);
  CHECK_EQ_INT(mend_store_use_token(s, "tok-a", "{\"ok\":false,\"kind\":\"retryable\"}",
                                    t0 + 12.5), 0);
  CHECK_EQ_INT(mend_store_put_token(s, "tok-b", w.id, "charge", 2, t0 + 13), 0);

  mend_breaker b = {.state = MEND_BREAKER_OPEN, .failures = 5, .successes = 0,
                    .opened_at = t0 + 5, .open_until = t0 + 35};
  CHECK_EQ_INT(mend_store_put_breaker(s, "payments", &b, t0 + 5), 0);
  mend_breaker b2 = {.state = MEND_BREAKER_CLOSED};
  CHECK_EQ_INT(mend_store_put_breaker(s, "Labels", &b2, t0 + 6), 0);
  CHECK_EQ_INT(mend_store_audit(s, t0 + 40, "ann@host", "breaker_reset", "payments", NULL), 0);
  CHECK_EQ_INT(mend_store_audit(s, t0 + 41, "bob@host", "breaker_open", "Labels",
                                "{\"for\":30}"), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
}

/* The last run of a page, as the HTTP API makes its cursor of it. */
static void cursor_of(json_t *page, double *created, char *id, size_t idlen) {
  json_t *last = json_array_get(page, json_array_size(page) - 1);
  *created = json_real_value(json_object_get(last, "created"));
  snprintf(id, idlen, "%s", last ? json_string_value(json_object_get(last, "id")) : "");
}

/* A run inserted into both stores and committed. */
static void insert_both(mend_store *s, mend_store *ps, const char *id, const char *status,
                        double created) {
  mend_run_rec r = run_rec(id, "order", "v2", status, created);
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_insert_run(ps, &r), 0);
  CHECK_EQ_INT(mend_store_commit(ps), 0);
}

/* mend serve's reads through the PostgreSQL store (pg_serve.c): the same pages and counts as
 * SQLite's, and a cursor taken before inserts still names the same place after them. Leaves
 * the rows fill() made as they were. */
static void serve_reads(mend_store *s, const char *path, const char *uri) {
  mend_store *ps = mend_store_open(uri, MEND_DURABILITY_FULL, err, sizeof err);
  if (!ps) {
    fprintf(stderr, "serve_reads: no PostgreSQL store in this build (%s): skipped\n", err);
    return;
  }
  double t0 = 1765000000.123456789;
  same("run_counts", mend_store_run_counts(s), mend_store_run_counts(ps));
  same("runs_page all", mend_store_runs_page(s, NULL, NULL, -1, 0, NULL, 0),
       mend_store_runs_page(ps, NULL, NULL, -1, 0, NULL, 0));
  same("runs_page order", mend_store_runs_page(s, NULL, "order", -1, 0, NULL, 100),
       mend_store_runs_page(ps, NULL, "order", -1, 0, NULL, 100));
  same("runs_page failed", mend_store_runs_page(s, "failed", NULL, -1, 0, NULL, 100),
       mend_store_runs_page(ps, "failed", NULL, -1, 0, NULL, 100));
  same("runs_page since", mend_store_runs_page(s, NULL, NULL, t0 + 10, 0, NULL, 100),
       mend_store_runs_page(ps, NULL, NULL, t0 + 10, 0, NULL, 100));
  same("runs_page none", mend_store_runs_page(s, NULL, "nope", -1, 0, NULL, 100),
       mend_store_runs_page(ps, NULL, "nope", -1, 0, NULL, 100));

  /* Pages of two: the third cursor falls between two runs created at the same instant. */
  double at = 0;
  char id[64] = "";
  int seen = 0;
  for (int page = 0; page < 4; page++) {
    const char *after = page ? id : NULL;
    json_t *a = mend_store_runs_page(s, NULL, NULL, -1, at, after, 2);
    json_t *b = mend_store_runs_page(ps, NULL, NULL, -1, at, after, 2);
    seen += (int)json_array_size(b);
    if (page == 2) CHECK_EQ_INT(json_array_size(b), 1);
    if (page == 3) CHECK_EQ_INT(json_array_size(b), 0);
    if (json_array_size(b)) cursor_of(b, &at, id, sizeof id);
    char what[32];
    snprintf(what, sizeof what, "runs_page page %d", page + 1);
    same(what, a, b);
  }
  CHECK_EQ_INT(seen, 5);

  /* Inserts between pages: a newer run is not on later pages; runs created with the cursor's
   * run are placed by id, before or after it, as in SQLite. */
  json_t *first = mend_store_runs_page(ps, NULL, NULL, -1, 0, NULL, 2);
  cursor_of(first, &at, id, sizeof id);
  CHECK_STR(id, "01aaaaaaaa000004");
  json_decref(first);
  insert_both(s, ps, "01aaaaaaaa000010", "running", t0 + 50);
  insert_both(s, ps, "01aaaaaaaa000000", "running", t0 + 20);
  insert_both(s, ps, "01aaaaaaaa000009", "running", t0 + 20);
  json_t *next = mend_store_runs_page(ps, NULL, NULL, -1, at, id, 2);
  CHECK_STR(json_string_value(json_object_get(json_array_get(next, 0), "id")), "01aaaaaaaa000000");
  CHECK_STR(json_string_value(json_object_get(json_array_get(next, 1), "id")), "01aaaaaaaa000003");
  same("runs_page after inserts", mend_store_runs_page(s, NULL, NULL, -1, at, id, 2), next);
  same("run_counts after inserts", mend_store_run_counts(s), mend_store_run_counts(ps));

  /* Text the server cannot take as text (not UTF-8: from a URL) asked for while a batch is
   * open: answered as SQLite answers it, and the batch still commits. */
  mend_run_rec late = run_rec("01aaaaaaaa000011", "order", "v2", "running", t0 + 60);
  CHECK_EQ_INT(mend_store_insert_run(s, &late), 0);
  CHECK_EQ_INT(mend_store_insert_run(ps, &late), 0);
  same("runs_page in the batch", mend_store_runs_page(s, NULL, NULL, -1, 0, NULL, 1),
       mend_store_runs_page(ps, NULL, NULL, -1, 0, NULL, 1));
  CHECK_EQ_INT(mend_store_batch_open(ps), 1);
  const char *bad = "\xc3(";
  same("runs_page, a cursor not UTF-8", mend_store_runs_page(s, NULL, NULL, -1, t0 + 20, bad, 0),
       mend_store_runs_page(ps, NULL, NULL, -1, t0 + 20, bad, 0));
  same("runs_page, a workflow not UTF-8", mend_store_runs_page(s, NULL, bad, -1, 0, NULL, 0),
       mend_store_runs_page(ps, NULL, bad, -1, 0, NULL, 0));
  CHECK(mend_store_run(ps, bad) == NULL);
  CHECK_EQ_INT(mend_store_not_found(ps), 1);
  CHECK_STR(mend_store_errmsg(ps), "no run \xc3(");
  /* no run has it: both backends say so, as they do of a run */
  CHECK(mend_store_history(s, bad) == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 1);
  CHECK(mend_store_history(ps, bad) == NULL);
  CHECK_EQ_INT(mend_store_not_found(ps), 1);
  CHECK_STR(mend_store_errmsg(ps), "no run \xc3(");
  CHECK(mend_store_history_page(s, bad, 0, 5, 0) == NULL);
  CHECK_EQ_INT(mend_store_not_found(s), 1);
  CHECK(mend_store_history_page(ps, bad, 0, 5, 0) == NULL);
  CHECK_EQ_INT(mend_store_not_found(ps), 1);
  CHECK(mend_store_history_page(ps, "nobody", 0, 0, 3) == NULL);
  CHECK_EQ_INT(mend_store_not_found(ps), 1);
  CHECK_STR(mend_store_errmsg(ps), "no run nobody");
  same("inbox, an id not UTF-8", mend_store_inbox(s, bad), mend_store_inbox(ps, bad));
  same("workflows, a name not UTF-8", mend_store_workflows(s, bad), mend_store_workflows(ps, bad));
  same("runs, a workflow not UTF-8", mend_store_runs(s, NULL, bad, 0),
       mend_store_runs(ps, NULL, bad, 0));
  char key_of[64];
  CHECK_EQ_INT(mend_store_find_run_key(ps, bad, key_of, sizeof key_of), 0);
  mend_breaker none;
  CHECK_EQ_INT(mend_store_get_breaker(ps, bad, &none), 0);
  double left = 0;
  CHECK_EQ_INT(mend_store_owner(ps, bad, key_of, sizeof key_of, &left), 0);
  CHECK_EQ_INT(mend_store_commit(s), 0);
  CHECK_EQ_INT(mend_store_commit(ps), 0);
  json_t *kept = mend_store_run(ps, late.id);
  CHECK(kept != NULL);
  json_decref(kept);

  /* The rows of later checks are fill()'s: the inserted runs go from both. */
  const char *drop = "DELETE FROM runs WHERE id IN ('01aaaaaaaa000010', '01aaaaaaaa000000',"
                     " '01aaaaaaaa000009', '01aaaaaaaa000011')";
  PGconn *c = PQconnectdb(uri);
  CHECK_EQ_INT(run_sql(c, drop), 0);
  PQfinish(c);
  sqlite3 *db = NULL;
  CHECK_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
  CHECK_EQ_INT(sqlite3_exec(db, drop, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  same("runs_page after the deletes", mend_store_runs_page(s, NULL, NULL, -1, 0, NULL, 0),
       mend_store_runs_page(ps, NULL, NULL, -1, 0, NULL, 0));
  mend_store_close(ps);
}

int main(int argc, char **argv) {
  const char *admin = getenv("MEND_TEST_PG");
  if (!admin || !*admin || argc < 2) {
    fprintf(stderr, "test_pg_view: needs MEND_TEST_PG (tests/pg/cluster.sh run) and schema.sql\n");
    return 1;
  }
  PGconn *a = PQconnectdb(admin);
  if (PQstatus(a) != CONNECTION_OK) {
    fprintf(stderr, "connect: %s", PQerrorMessage(a));
    return 1;
  }
  run_sql(a, "DROP DATABASE IF EXISTS mend_pg_view WITH (FORCE)");
  CHECK_EQ_INT(run_sql(a, "CREATE DATABASE mend_pg_view"), 0);
  PGconn *c = PQconnectdb(with_db(admin, "mend_pg_view"));
  CHECK(PQstatus(c) == CONNECTION_OK);
  /* The PostgreSQL store's own tables where this build has it; else the agreed ones. */
  mend_store *made = mend_store_open(with_db(admin, "mend_pg_view"), MEND_DURABILITY_FULL, err,
                                     sizeof err);
  if (made) {
    mend_store_close(made);
  } else {
    const char *schema = slurp(argv[1]);
    CHECK(schema != NULL);
    if (!schema || PQstatus(c) != CONNECTION_OK || run_sql(c, schema) != 0)
      return check_done("pg_view");
  }

  char dir[] = "/tmp/mend_pg_view.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[256];
  snprintf(path, sizeof path, "%s/src.db", dir);
  mend_store *s = mend_store_open(path, MEND_DURABILITY_FULL, err, sizeof err);
  CHECK(s != NULL);
  if (!s) { fprintf(stderr, "open: %s\n", err); return check_done("pg_view"); }
  fill(s);
  /* a run started in the open batch: the copy reads committed rows only, as SQLite does */

  sqlite3 *src = NULL;
  CHECK_EQ_INT(sqlite3_open_v2(path, &src, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  /* A row the target refuses: the copy's error keeps PostgreSQL's later lines, which say
   * which row of which table (only the first line was kept), and writes nothing. */
  CHECK_EQ_INT(run_sql(c, "ALTER TABLE breakers ADD CONSTRAINT mend_test_refuses"
                          " CHECK (false) NOT VALID"), 0);
  CHECK(mend__pg_copy_into(src, c, err, sizeof err) == NULL);
  CHECK(strstr(err, "violates check constraint \"mend_test_refuses\"") != NULL);
  CHECK(strstr(err, "; DETAIL:  Failing row contains") != NULL);
  CHECK(strstr(err, "; CONTEXT:  COPY breakers, line 1") != NULL);
  CHECK(strchr(err, '\n') == NULL);
  CHECK_EQ_INT(run_sql(c, "ALTER TABLE breakers DROP CONSTRAINT mend_test_refuses"), 0);
  json_t *counts = mend__pg_copy_into(src, c, err, sizeof err);
  CHECK(counts != NULL);
  if (!counts) fprintf(stderr, "copy: %s\n", err);
  CHECK_EQ_INT(json_integer_value(json_object_get(counts, "runs")), 5);
  CHECK_EQ_INT(json_integer_value(json_object_get(counts, "history")), 9);
  CHECK_EQ_INT(json_integer_value(json_object_get(counts, "workflow_versions")), 3);
  CHECK_EQ_INT(json_integer_value(json_object_get(counts, "inbox")), 2);
  CHECK_EQ_INT(json_integer_value(json_object_get(counts, "tokens")), 2);
  json_decref(counts);
  /* a second copy into the same (now full) store is refused, and writes nothing */
  json_t *again = mend__pg_copy_into(src, c, err, sizeof err);
  CHECK(again == NULL);
  CHECK(strstr(err, "not empty") != NULL);
  json_decref(again);

  static const char *const ids[] = {"01aaaaaaaa000001", "01aaaaaaaa000002", "01aaaaaaaa000003",
                                    "01aaaaaaaa000004", "01aaaaaaaa000005"};
  char what[64];
  for (int i = 0; i < 5; i++) {
    int nf = -1;
    snprintf(what, sizeof what, "run %s", ids[i]);
    same(what, mend_store_run(s, ids[i]), mend__pg_view_run(c, ids[i], err, sizeof err, &nf));
    CHECK_EQ_INT(nf, 0);
    snprintf(what, sizeof what, "history %s", ids[i]);
    same(what, mend_store_history(s, ids[i]),
         mend__pg_view_history(c, ids[i], err, sizeof err, &nf));
    CHECK_EQ_INT(nf, 0);
    /* its pages: after a seq and bounded, unbounded (the whole), and its tail */
    static const long pages[][3] = {{1, 1, 0}, {0, 2, 0}, {2, 0, 0},
                                    {0, 0, 0}, {0, 0, 2}, {9, 1, 0}};
    for (size_t k = 0; k < sizeof pages / sizeof *pages; k++) {
      snprintf(what, sizeof what, "history page %zu of %s", k, ids[i]);
      same(what, mend_store_history_page(s, ids[i], pages[k][0], pages[k][1], pages[k][2]),
           mend__pg_view_history_page(c, ids[i], pages[k][0], pages[k][1], pages[k][2], err,
                                      sizeof err, &nf));
      CHECK_EQ_INT(nf, 0);   /* past a run's last row (page 5) is [], not "no run" */
    }
    json_t *whole = mend_store_history(s, ids[i]);
    snprintf(what, sizeof what, "history %s, unbounded page", ids[i]);
    same(what, mend_store_history_page(s, ids[i], 0, 0, 0), whole);
    snprintf(what, sizeof what, "inbox %s", ids[i]);
    same(what, mend_store_inbox(s, ids[i]), mend__pg_view_inbox(c, ids[i], 0, 0, err, sizeof err));
    snprintf(what, sizeof what, "children %s", ids[i]);
    same(what, mend_store_children(s, ids[i]), mend__pg_view_children(c, ids[i], err, sizeof err));
  }
  json_t *kids = mend__pg_view_children(c, "01aaaaaaaa000003", err, sizeof err);
  CHECK_EQ_INT(json_array_size(kids), 2);
  json_decref(kids);
  json_t *child = mend__pg_view_run(c, "01aaaaaaaa000005", err, sizeof err, NULL);
  CHECK_STR(json_string_value(json_object_get(child, "parent_run")), "01aaaaaaaa000003");
  CHECK_STR(json_string_value(json_object_get(child, "parent_step")), "charge");
  json_decref(child);
  same("token a", mend_store_token(s, "tok-a"), mend__pg_view_token(c, "tok-a", err, sizeof err));
  same("token b", mend_store_token(s, "tok-b"), mend__pg_view_token(c, "tok-b", err, sizeof err));
  json_t *no_token = mend__pg_view_token(c, "tok-z", err, sizeof err);
  CHECK(no_token == NULL);
  CHECK_STR(err, "");
  int nf = 0;
  json_t *none = mend__pg_view_run(c, "nope", err, sizeof err, &nf);
  CHECK(none == NULL);
  CHECK_EQ_INT(nf, 1);
  CHECK_STR(err, "no run nope");
  CHECK_EQ_INT(PQtransactionStatus(c), PQTRANS_IDLE);

  same("dlq", mend_store_dlq(s), mend__pg_view_dlq(c, 0, NULL, 0, err, sizeof err));
  same("breakers", mend_store_breakers(s), mend__pg_view_breakers(c, err, sizeof err));
  same("audit", mend_store_audit_list(s), mend__pg_view_audit_list(c, err, sizeof err));
  same("workflows", mend_store_workflows(s, NULL),
       mend__pg_view_workflows(c, NULL, err, sizeof err));
  same("workflows order", mend_store_workflows(s, "order"),
       mend__pg_view_workflows(c, "order", err, sizeof err));
  same("runs", mend_store_runs(s, NULL, NULL, 0),
       mend__pg_view_runs(c, NULL, NULL, 0, err, sizeof err));
  same("runs running", mend_store_runs(s, "running", NULL, 0),
       mend__pg_view_runs(c, "running", NULL, 0, err, sizeof err));
  same("runs order 2", mend_store_runs(s, NULL, "order", 2),
       mend__pg_view_runs(c, NULL, "order", 2, err, sizeof err));
  same("runs since, attention", mend_store_runs_where(s, NULL, NULL, 1765000000.2, 1, 0),
       mend__pg_view_runs_where(c, NULL, NULL, 1765000000.2, 1, 0, err, sizeof err));

  serve_reads(s, path, with_db(admin, "mend_pg_view"));

  char *src_a = NULL, *src_b = NULL;
  int nn = -1;
  char *sa = mend_store_version_script(s, "order", "v2", &src_a);
  char *sb = mend__pg_view_version_script(c, "order", "v2", &src_b, err, sizeof err, &nn);
  CHECK(sa && sb && strcmp(sa, sb) == 0);
  CHECK(src_a && src_b && strcmp(src_a, src_b) == 0);
  CHECK_EQ_INT(nn, 0);
  free(sa); free(sb); free(src_a); free(src_b);
  CHECK(mend__pg_view_version_script(c, "ship", "s1", NULL, err, sizeof err, &nn) == NULL);
  CHECK_EQ_INT(nn, 1);

  /* Reads inside an open transaction see its writes and leave it open. */
  CHECK_EQ_INT(run_sql(c, "BEGIN"), 0);
  CHECK_EQ_INT(run_sql(c, "UPDATE runs SET status = 'succeeded' WHERE id = '01aaaaaaaa000003'"), 0);
  json_t *seen = mend__pg_view_run(c, "01aaaaaaaa000003", err, sizeof err, &nf);
  CHECK_STR(json_string_value(json_object_get(seen, "status")), "succeeded");
  json_decref(seen);
  CHECK_EQ_INT(PQtransactionStatus(c), PQTRANS_INTRANS);
  json_t *busy = mend__pg_view_prune(c, 1e12, NULL, 0, err, sizeof err);
  CHECK(busy == NULL);
  CHECK_EQ_INT(run_sql(c, "ROLLBACK"), 0);

  /* prune: the same counts, dry and for real, and the same runs left */
  double before = 1765000000.123456789 + 20;
  same("prune dry", mend_store_prune(s, before, NULL, 1),
       mend__pg_view_prune(c, before, NULL, 1, err, sizeof err));
  same("prune failed", mend_store_prune(s, before, "failed", 0),
       mend__pg_view_prune(c, before, "failed", 0, err, sizeof err));
  /* A view's error keeps PostgreSQL's later lines: here the run a table of the user's holds. */
  CHECK_EQ_INT(run_sql(c, "CREATE TABLE mend_test_hold (run text REFERENCES runs(id));"
                          "INSERT INTO mend_test_hold SELECT id FROM runs"), 0);
  CHECK(mend__pg_view_prune(c, 1e12, NULL, 0, err, sizeof err) == NULL);
  CHECK(strstr(err, "violates foreign key constraint") != NULL);
  CHECK(strstr(err, "; DETAIL:  Key (id)=(") != NULL);
  CHECK(strstr(err, "is still referenced from table \"mend_test_hold\"") != NULL);
  CHECK(strchr(err, '\n') == NULL);
  CHECK_EQ_INT(run_sql(c, "DROP TABLE mend_test_hold"), 0);
  same("prune", mend_store_prune(s, 1e12, NULL, 0),
       mend__pg_view_prune(c, 1e12, NULL, 0, err, sizeof err));
  same("runs after prune", mend_store_runs(s, NULL, NULL, 0),
       mend__pg_view_runs(c, NULL, NULL, 0, err, sizeof err));

  sqlite3_close(src);
  mend_store_close(s);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_EQ_INT(system(cmd), 0);
  PQfinish(c);
  run_sql(a, "DROP DATABASE IF EXISTS mend_pg_view WITH (FORCE)");
  PQfinish(a);
  return check_done("pg_view");
}
