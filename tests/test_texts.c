/*
 * test_texts: the texts a host gives the engine through include/mend.h that a store keeps (a
 * run key, an event's name and key, who did something, a resolve's note, a breaker's key, a
 * token failure's message), checked where they enter the engine: one that is not UTF-8, and a
 * who outside its rule (MEND_WHO_MAX), is MEND_EINVAL with a message naming which text, and
 * the engine goes on. On SQLite, and on PostgreSQL when MEND_TEST_PG names a server (a
 * database of its own, dropped after), where a batch holding such bytes was refused by the
 * server and the engine stopped with it. Also the who that mend_engine_start_who and
 * mend_engine_signal_who record.
 */
#include "texts_case.h"

static int refused(mend_engine *E, int rc, const char *what) {
  const char *msg = mend_engine_errmsg(E);
  if (rc == MEND_EINVAL && msg && strstr(msg, what)) return 1;
  fprintf(stderr, "expected MEND_EINVAL naming <%s>, got %d: %s\n", what, rc, msg ? msg : "");
  return 0;
}

static int run_has(mend_engine *E, const char *id, const char *text, int history) {
  char *json = NULL;
  if (history) mend_engine_history_json(E, id, &json);
  else mend_engine_run_json(E, id, &json);
  int found = json && strstr(json, text);
  if (!found) fprintf(stderr, "expected <%s> in %s\n", text, json ? json : "(none)");
  mend_free(json);
  return found;
}

static void exercise(const char *store, const char *db_path) {
  char err[512];
  mend_options o;
  mend_options_init(&o);
  o.db_path = db_path;
  o.virtual_clock = 1;
  mend_engine *E = NULL;
  int rc = mend_engine_new(&o, &E, err, sizeof err);
  if (rc != MEND_OK) fprintf(stderr, "%s: mend_engine_new: %s\n", store, err);
  CHECK_EQ_INT(rc, MEND_OK);
  if (rc != MEND_OK) return;
  CHECK_EQ_INT(mend_engine_register_function(E, "hand_out", hand_out, NULL), MEND_OK);
  load_text(E, "waits", waits);
  load_text(E, "stuck", stuck_lua);

  /* starts */
  char id[17], other[17];
  CHECK(refused(E, mend_engine_start(E, "waits", NULL, "k\xff", id, NULL),
                "the run key is not UTF-8 text"));
  CHECK(refused(E, mend_engine_start_who(E, "waits", NULL, NULL, "b\xff" "b", id, NULL),
                "who is not UTF-8 text"));
  CHECK(refused(E, mend_engine_start_who(E, "waits", NULL, NULL, "", id, NULL),
                "who must be 1 to 256 bytes, got 0"));
  char who[300];
  memset(who, 'w', 257);
  who[257] = 0;
  CHECK(refused(E, mend_engine_start_who(E, "waits", NULL, NULL, who, id, NULL),
                "who must be 1 to 256 bytes, got 257"));
  CHECK(refused(E, mend_engine_start_who(E, "waits", NULL, NULL, "eve\n2026 run done", id, NULL),
                "who holds a control character (byte 4)"));
  memcpy(who + 254, "\xc3\xa9", 3);   /* 256 bytes, a two-byte character last */
  CHECK_EQ_INT(mend_engine_start_who(E, "waits", NULL, "order-1", who, id, NULL), MEND_OK);
  char by[sizeof who + 32];
  snprintf(by, sizeof by, "\"detail\":\"by %s\"", who);
  CHECK(run_has(E, id, by, 1));
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);

  /* events */
  CHECK(refused(E, mend_engine_signal(E, id, "g\xc0o", NULL, NULL),
                "the event's name is not UTF-8 text"));
  CHECK(refused(E, mend_engine_signal(E, id, "go", NULL, "k\xff"),
                "the event's key is not UTF-8 text"));
  CHECK(refused(E, mend_engine_signal(E, "r\xff", "go", NULL, NULL),
                "the run id is not UTF-8 text"));
  CHECK(refused(E, mend_engine_signal_by_key(E, "order\xff", "go", NULL, NULL),
                "the run key is not UTF-8 text"));
  CHECK(refused(E, mend_engine_signal_who(E, id, "go", NULL, NULL, "\xed\xa0\x80"),
                "who is not UTF-8 text"));
  CHECK(refused(E, mend_engine_signal_by_key_who(E, "order-1", "go", NULL, NULL, "a\x7f"),
                "who holds a control character (byte 2)"));

  /* repairs, a breaker, a token's failure */
  char stuck[17];
  CHECK_EQ_INT(mend_engine_start(E, "stuck", NULL, NULL, stuck, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK(run_has(E, stuck, "\"needs_attention\"", 0));
  CHECK(refused(E, mend_engine_cancel(E, id, "\xff"), "who is not UTF-8 text"));
  CHECK(refused(E, mend_engine_retry_dead_letter(E, stuck, "ops\t"),
                "who holds a control character"));
  CHECK(refused(E, mend_engine_resolve_dead_letter(E, stuck, "ops", "paid \xe9"),
                "the note is not UTF-8 text"));
  CHECK(refused(E, mend_engine_resolve_dead_letter(E, stuck, "\xc0\xaf", "paid"),
                "who is not UTF-8 text"));
  CHECK(refused(E, mend_engine_override_breaker(E, "psp\xff", "open", 0, "ops"),
                "the breaker's key is not UTF-8 text"));
  CHECK(refused(E, mend_engine_override_breaker(E, "psp", "open", 0, "o\xffps"),
                "who is not UTF-8 text"));
  CHECK_EQ_INT(mend_engine_signal_who(E, id, "go", "1", "k1", "bob"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK(token[0] != 0);
  CHECK(refused(E, mend_engine_fail(E, token, "fatal", "card \xff declined"),
                "the failure's message is not UTF-8 text"));

  /* the engine goes on: the same calls with good texts are taken */
  CHECK_EQ_INT(mend_engine_complete(E, token, "2"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK(run_has(E, id, "\"succeeded\"", 0));
  CHECK_EQ_INT(mend_engine_override_breaker(E, "psp", "open", 0, "ops"), MEND_OK);
  /* a note longer than the history row's detail, cut inside a character there */
  char note[1400];
  size_t n = 0;
  for (; n + 2 < sizeof note - 1; n += 2) memcpy(note + n, "\xc3\xa9", 2);
  note[n] = 0;
  CHECK_EQ_INT(mend_engine_resolve_dead_letter(E, stuck, "ops", note), MEND_OK);
  CHECK(run_has(E, stuck, "\"resolved\"", 0));
  CHECK_EQ_INT(mend_engine_start_who(E, "waits", NULL, NULL, "carol", other, NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_EQ_INT(mend_engine_signal_by_key_who(E, "order-1", "go", NULL, "k2", "bob"), MEND_ESTATE);
  CHECK_EQ_INT(mend_engine_signal_who(E, other, "go", NULL, "k3", "bob"), MEND_OK);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK(run_has(E, other, "\"detail\":\"by carol\"", 1));
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
  printf("%s: done\n", store);
}

int main(void) {
  return texts_each_store(exercise, "test_texts");
}
