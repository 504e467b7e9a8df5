/*
 * test_pg_store_events: events and completion tokens in the PostgreSQL store: events recorded
 * and committed, the wake-ups they send, events heard by a ticked engine, and tokens
 * completed, failed and refused.
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

/* A ticking host's signal recorded in the batch (no round trip): only with a key and text the
 * server takes (1: the caller sends it); in the inbox once committed; sent again, first and in
 * order, when the transaction holding it is lost with its connection, whether in the loop's
 * open transaction or the writer thread's batch; kept once by its key. */
static void test_recorded_events(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("r1", NULL);
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", "{}", NULL, 1, NULL), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", "{}", "k\xff", 1, NULL), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "sl\xc3", "{}", "k0", 1, NULL), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", "{\"n\":1}", "k1", 1, NULL), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox WHERE key = 'k1' AND payload = '{\"n\":1}'"), 1);
  /* lost in the loop's open transaction: k2 sent into it by a read, k3 recorded after */
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k2", 2, NULL), 0);
  CHECK_EQ_INT(mend__pg_last_history(s, "r1", NULL), 0);
  terminate_others();
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k3", 3, NULL), 0);
  CHECK(mend__pg_commit(s) != 0);   /* told: not known committed */
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 1);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k1", 4, NULL), 0);   /* kept once */
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 3);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox a JOIN inbox b ON a.key = 'k2' AND"
                     " b.key = 'k3' AND a.seq < b.seq"), 1);
  /* lost in the writer thread's batch */
  CHECK_EQ_INT(mend__pg_start_writer(s, NULL, NULL), 0);
  unsigned long durable = mend__pg_durable_seq(s);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k4", 5, NULL), 0);
  CHECK_EQ_INT(mend__pg_last_history(s, "r1", NULL), 0);   /* the batch's transaction is open */
  terminate_others();
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k5", 6, NULL), 0);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  CHECK_EQ_INT(mend__pg_durable_seq(s), durable);
  CHECK(mend__pg_commit(s) != 0);
  CHECK_EQ_INT(mend__pg_record_event(s, "r1", "slain", NULL, "k6", 7, NULL), 0);
  CHECK_EQ_INT(mend__pg_hand_off(s), 0);
  while (mend__pg_writer_busy(s)) sleep_s(0.01);
  CHECK(mend__pg_durable_seq(s) > durable);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 6);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox a JOIN inbox b ON a.key = 'k4' AND"
                     " b.key = 'k5' AND a.seq < b.seq JOIN inbox c ON c.key = 'k6' AND"
                     " b.seq < c.seq"), 1);
  mend__pg_close(s);
  drop_case();
}

static void test_events(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("r1", NULL);
  mend__pg_insert_run(s, &r);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":1}", "k1", 5, NULL), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":2}", "k1", 6, NULL), 1);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", NULL, NULL, 7, NULL), 0);
  long long seq;
  char *payload, *key;
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq, &payload, &key), 1);
  CHECK_STR(payload, "{\"n\":1}");
  CHECK_STR(key, "k1");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_consume_event(s, "r1", seq, "a", 8), 0);
  long long seq2;
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK(seq2 > seq);
  CHECK_STR(payload, "null");
  free(payload);
  free(key);
  int seen = 0;
  CHECK_EQ_INT(mend__pg_events_after(s, 0, 10, on_event, &seen), 0);   /* not committed yet */
  CHECK_EQ_INT(seen, 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_last_event(s), seq2);
  CHECK_EQ_INT(mend__pg_events_after(s, 0, 10, on_event, &seen), seq2);
  CHECK_EQ_INT(seen, 2);
  /* consumed twice: the batch fails */
  mend__pg_consume_event(s, "r1", seq, "a", 9);
  CHECK(mend__pg_commit(s) != 0);
  mend__pg_close(s);
  drop_case();
}

/* A tick's look at a run's inbox among committed rows (aux: no wait for the writer thread):
 * what the open transaction sent or consumed is not seen yet, what was committed is, by
 * name; a run id the server could not take as text is in no row. */
static void test_committed_events(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("r1", NULL);
  mend__pg_insert_run(s, &r);
  long long seq, seq2;
  char *payload, *key;
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":1}", "k1", 5, NULL), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq, &payload, &key), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":2}", "k2", 6, NULL), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "shipped", "{\"n\":3}", "k3", 6, NULL), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq, &payload, &key), 1);
  CHECK_STR(payload, "{\"n\":1}");
  CHECK_STR(key, "k1");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "shipped", &seq2, &payload, &key), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r2", "paid", &seq2, &payload, &key), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r\xff", "paid", &seq2, &payload, &key), 0);
  /* consumed in the open transaction: the batch's own read moves on, the committed look not */
  CHECK_EQ_INT(mend__pg_consume_event(s, "r1", seq, "a", 7), 0);
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK_STR(key, "k2");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK(seq2 == seq);
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "paid", &seq2, &payload, &key), 1);
  CHECK_STR(key, "k2");
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_next_committed_event(s, "r1", "shipped", &seq2, &payload, &key), 1);
  CHECK_STR(payload, "{\"n\":3}");
  free(payload);
  free(key);
  mend__pg_close(s);
  drop_case();
}

/* A ticking host on PostgreSQL (mend.h): a run's events, sent with keys from the host's frames,
 * are taken once each and in the order sent, from the looks the ticks send ahead; a look still
 * out when the host turns to mend_engine_run_all is answered there. */
static const char *const TWICE =
  "return { name = 'twice', steps = {\n"
  "  { name = 'first', wait_for = 'go' },\n"
  "  { name = 'second', wait_for = 'go' },\n"
  "  { name = 'both', execute = function(ctx)\n"
  "      return { ctx.results.first.n, ctx.results.second.n } end } } }\n";

static int run_result_is(mend_engine *E, const char *id, const char *want) {
  char *json = NULL;
  int ok = mend_engine_run_json(E, id, &json) == MEND_OK && json && strstr(json, want) &&
           strstr(json, "\"succeeded\"");
  if (!ok) fprintf(stderr, "run %s: %s\n", id, json ? json : "(none)");
  free(json);
  return ok;
}

/* The current case's database as a URI: what mend_options.db_path takes for PostgreSQL. */
static void case_uri(char *out, size_t len) {
  PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
  size_t n = (size_t)snprintf(out, len, "postgresql://?");
  for (PQconninfoOption *o = opts; o && o->keyword && n < len; o++)
    if (o->val && *o->val) n += (size_t)snprintf(out + n, len - n, "%s%s=%s", n > 14 ? "&" : "",
                                                 o->keyword, o->val);
  PQconninfoFree(opts);
}

static void test_ticked_events(void) {
  new_case();
  char path[64], err[512], uri[sizeof conninfo + 64];
  case_uri(uri, sizeof uri);
  snprintf(path, sizeof path, "/tmp/mend_pg_twice_%d.lua", (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(TWICE, f);
  fclose(f);
  mend_options o;
  mend_options_init(&o);
  o.db_path = uri;
  mend_engine *E = NULL;
  int rc = mend_engine_new(&o, &E, err, sizeof err);
  if (rc != MEND_OK) fprintf(stderr, "mend_engine_new: %s\n", err);
  CHECK_EQ_INT(rc, MEND_OK);
  if (rc != MEND_OK) return;
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  char a[17], b[17];
  CHECK_EQ_INT(mend_engine_start(E, "twice", NULL, NULL, a, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_start(E, "twice", NULL, NULL, b, NULL), MEND_OK);
  for (int frame = 0; frame < 3000 && mend_engine_in_flight_count(E) > 1; frame++) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    if (frame == 5 || frame == 6)   /* the same key twice: kept once */
      CHECK_EQ_INT(mend_engine_signal(E, a, "go", "{\"n\":1}", "a1"), MEND_OK);
    if (frame == 7) CHECK_EQ_INT(mend_engine_signal(E, a, "go", "{\"n\":2}", "a2"), MEND_OK);
    sleep_s(0.003);
  }
  CHECK(run_result_is(E, a, "[1,2]"));
  /* b's two events in one frame; one more tick sends the looks, and run_all takes them */
  CHECK_EQ_INT(mend_engine_signal(E, b, "go", "{\"n\":1}", "b1"), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal(E, b, "go", "{\"n\":2}", "b2"), MEND_OK);
  for (int frame = 0; frame < 3; frame++) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.002), MEND_OK);
    sleep_s(0.003);
  }
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK(run_result_is(E, b, "[1,2]"));
  mend_engine_free(E);
  remove(path);
  drop_case();
}

static void test_tokens(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend__pg_set_fence(s, "w", 30);
  mend_run_rec p = run_rec("p1", "w"), c = run_rec("c1", "w");
  CHECK_EQ_INT(mend__pg_insert_run(s, &p), 0);
  CHECK_EQ_INT(mend__pg_insert_run(s, &c), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);

  /* a token: known by its attempt and by itself, in the open batch */
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-1", "p1", "a", 1, 5.5), 0);
  char *tok = NULL;
  CHECK_EQ_INT(mend__pg_token_of_attempt(s, "p1", "a", 1, &tok), 1);
  CHECK_STR(tok, "tok-1");
  free(tok);
  tok = NULL;
  CHECK_EQ_INT(mend__pg_token_of_attempt(s, "p1", "a", 2, &tok), 0);
  CHECK(tok == NULL);
  json_t *row = mend__pg_token(s, "tok-1");
  CHECK(row != NULL);
  CHECK_STR(json_string_value(json_object_get(row, "run_id")), "p1");
  CHECK_STR(json_string_value(json_object_get(row, "step")), "a");
  CHECK_EQ_INT(json_integer_value(json_object_get(row, "attempt")), 1);
  CHECK_NEAR(json_real_value(json_object_get(row, "made")), 5.5, 0);
  CHECK(json_object_get(row, "used") == NULL);
  json_decref(row);
  CHECK(mend__pg_token(s, "no-such-token") == NULL);
  CHECK_STR(mend__pg_errmsg(s), "");   /* none: not an error */
  /* used once: the second use writes nothing and says so */
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-1", "{\"ok\":true}", 7), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-1", "{\"ok\":false}", 8), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM tokens WHERE digest = 'tok-1' AND used = 7"
                     " AND outcome = '{\"ok\":true}'"), 1);
  row = mend__pg_token(s, "tok-1");
  CHECK(row && json_is_number(json_object_get(row, "used")));
  CHECK_STR(json_string_value(json_object_get(row, "outcome")), "{\"ok\":true}");
  json_decref(row);
  /* an attempt run again has a second token (its first is known by digest only): the use of
   * the first ended it too */
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-2", "p1", "a", 1, 9), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-2", "{\"ok\":false}", 10), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM tokens"), 2);
  /* two tokens of one attempt, neither used: the first use ends both */
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-3", "p1", "a", 2, 11), 0);
  CHECK_EQ_INT(mend__pg_put_token(s, "tok-4", "p1", "a", 2, 12), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-4", "{\"ok\":true}", 13), 0);
  CHECK_EQ_INT(mend__pg_use_token(s, "tok-3", "{\"ok\":true}", 14), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM tokens WHERE attempt = 2 AND used = 13"), 2);

  /* a child: linked both ways */
  CHECK_EQ_INT(mend__pg_set_parent(s, "c1", "p1", "ship"), 0);
  json_t *kids = mend__pg_children(s, "p1");
  CHECK(kids && json_array_size(kids) == 1);
  json_t *k = json_array_get(kids, 0);
  CHECK_STR(json_string_value(json_object_get(k, "run_id")), "c1");
  CHECK_STR(json_string_value(json_object_get(k, "step")), "ship");
  CHECK_STR(json_string_value(json_object_get(k, "workflow")), "order");
  CHECK_STR(json_string_value(json_object_get(k, "status")), "running");
  json_decref(kids);
  kids = mend__pg_children(s, "c1");
  CHECK(kids && json_array_size(kids) == 0);
  json_decref(kids);
  json_t *run = mend_store_run(s, "c1");
  CHECK_STR(json_string_value(json_object_get(run, "parent_run")), "p1");
  CHECK_STR(json_string_value(json_object_get(run, "parent_step")), "ship");
  json_decref(run);
  run = mend_store_run(s, "p1");
  CHECK(run && json_object_get(run, "parent_run") == NULL);
  json_decref(run);

  /* its end goes to the parent's inbox, once a key; a run with no parent tells nobody */
  CHECK_EQ_INT(mend__pg_child_end(s, "c1", "mend.child", "{\"status\":\"succeeded\"}", "c1/4", 9),
               0);
  CHECK_EQ_INT(mend__pg_child_end(s, "c1", "mend.child", "{\"status\":\"succeeded\"}", "c1/4", 9),
               0);
  CHECK_EQ_INT(mend__pg_child_end(s, "p1", "mend.child", "{}", "p1/1", 9), 0);
  long long seq;
  char *payload = NULL, *key = NULL;
  CHECK_EQ_INT(mend__pg_next_event(s, "p1", "mend.child", &seq, &payload, &key), 1);
  CHECK_STR(payload, "{\"status\":\"succeeded\"}");
  CHECK_STR(key, "c1/4");
  free(payload);
  free(key);
  /* held until commit, as every sender holds it: seqs commit in the order taken */
  CHECK_EQ_INT(count("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                     " AND objid::bigint = x'4d454e49'::int AND granted"), 1);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM inbox"), 1);
  int seen = 0;
  CHECK_EQ_INT(mend__pg_events_after(s, 0, 10, on_event, &seen), seq);
  CHECK_EQ_INT(seen, 1);

  /* reopened only once it succeeded, and then nobody's */
  CHECK_EQ_INT(mend__pg_reopen_run(s, "c1", "parent_compensates", NULL, 10), 0);
  mend__pg_update_run(s, "c1", "succeeded", NULL, 0, 10, NULL);
  CHECK_EQ_INT(mend__pg_reopen_run(s, "c1", "parent_compensates", NULL, 11), 1);
  CHECK_EQ_INT(mend__pg_reopen_run(s, "c1", "parent_compensates", NULL, 12), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(count("SELECT count(*) FROM runs WHERE id = 'c1' AND status = 'compensating'"
                     " AND owner IS NULL AND reason = 'parent_compensates' AND updated = 11"
                     " AND error = 'compensated with its parent'"), 1);
  mend__pg_close(s);
  drop_case();
}

int main(void) {
  if (!pg_case_begin("test_pg_store_events")) return 0;
  test_events();
  test_committed_events();
  test_ticked_events();
  test_recorded_events();
  test_tokens();
  return pg_case_end("test_pg_store_events");
}
