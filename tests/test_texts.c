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
#include <mend.h>

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static const char waits[] =
    "local mend = require 'mend'\n"
    "return { name = 'waits', steps = {\n"
    "  { name = 'approve', wait_for = 'go' },\n"
    "  { name = 'ask', wait = 'token', retry = { max_attempts = 2 },\n"
    "    execute = function(ctx) mend.call('hand_out', ctx:token()) end } } }\n";
static const char stuck_lua[] =
    "local mend = require 'mend'\n"
    "return { name = 'stuck', steps = { { name = 'half', breaker = 'psp', execute = function()\n"
    "  error(mend.compensable('half applied', { severity = 3 })) end } } }\n";

static void load_text(mend_engine *E, const char *name, const char *text) {
  char path[96];
  snprintf(path, sizeof path, "/tmp/mend_texts_%d_%s.lua", (int)getpid(), name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
  CHECK_EQ_INT(mend_engine_load(E, path, NULL, 0), MEND_OK);
  remove(path);
}

static char token[128];
static void hand_out(void *ud, mend_call *call, const char *args) {
  (void)ud;   /* args is ["mtk_..."] */
  snprintf(token, sizeof token, "%.*s", (int)(strlen(args) > 4 ? strlen(args) - 4 : 0), args + 2);
  mend_call_return(call, NULL);
}

/* The call was refused as invalid, its message naming `what`. */
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

/* MEND_TEST_PG's server, a database of this test's own: its URI into uri, or 0 without one. */
static PGconn *admin;
static char dbname[64];
static int pg_database(char *uri, size_t len) {
  const char *base = getenv("MEND_TEST_PG");
  if (!base || !*base) return 0;
  admin = PQconnectdb(base);
  if (PQstatus(admin) != CONNECTION_OK) {
    fprintf(stderr, "cannot reach MEND_TEST_PG: %s", PQerrorMessage(admin));
    return -1;
  }
  char q[160];
  snprintf(dbname, sizeof dbname, "mend_texts_%d", (int)getpid());
  snprintf(q, sizeof q, "CREATE DATABASE %s", dbname);
  PQclear(PQexec(admin, q));
  PQconninfoOption *opts = PQconninfoParse(base, NULL);
  size_t n = (size_t)snprintf(uri, len, "postgresql://?dbname=%s", dbname);
  for (PQconninfoOption *x = opts; x && x->keyword && n < len; x++)
    if (x->val && *x->val && strcmp(x->keyword, "dbname") != 0)
      n += (size_t)snprintf(uri + n, len - n, "&%s=%s", x->keyword, x->val);
  PQconninfoFree(opts);
  return 1;
}

int main(void) {
  exercise("sqlite", NULL);
  char uri[1024];
  int pg = pg_database(uri, sizeof uri);
  if (pg < 0) CHECK(0);
  if (pg > 0) {
    exercise("postgresql", uri);
    char q[160];
    snprintf(q, sizeof q, "DROP DATABASE IF EXISTS %s WITH (FORCE)", dbname);
    PQclear(PQexec(admin, q));
  } else if (pg == 0) {
    printf("postgresql: skipped: MEND_TEST_PG names no server (tests/pg/cluster.sh run)\n");
  }
  if (admin) PQfinish(admin);
  return check_done("test_texts");
}
