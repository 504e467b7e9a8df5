/*
 * test_embed_mark: the database's sandbox mark from a host's side, through mend.h alone: whether
 * an engine is sandboxed and why (mend_engine_sandboxed: asked, made so by the mark, or not),
 * and the mark cleared by the host (mend_trust_db, as `mend db trust`): engines made after it
 * run the code trusted, engines open keep what they are, and a path with no database is
 * refused without one being made there.
 *
 * Built like every test_embed_* program (tests/embed_host.h's set-up; against the build tree's
 * libmend, sanitized in c_sanitized, and against the installed library by tests/embed_*.sh).
 * Must never: use more of mend than include/mend.h.
 */
#include <mend.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "embed_host.h"

/* Whether the workflow's code reached io, at its file's top level and in its step. */
static const char probe_lua[] =
  "local top = io ~= nil\n"
  "return { name = 'probe', steps = { { name = 's', execute = function()\n"
  "  return { top = top, step = io ~= nil }\n"
  "end } } }\n";

static mend_engine *on(const char *db, int sandbox, int no_sandbox) {
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.virtual_clock = 1;
  o.sandbox = sandbox;
  o.no_sandbox = no_sandbox;
  return engine(&o);
}

/* The probe's run on E: 1 its code reached io (top level and step), 0 neither. */
static int reaches_io(mend_engine *E) {
  load(E, "probe");
  char id[17], st[32];
  start(E, "probe", NULL, id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  char *json = run_json(E, id);
  int top = strstr(json, "\"top\":true") != NULL, step = strstr(json, "\"step\":true") != NULL;
  if (top != step) fprintf(stderr, "the top level and the step disagree: %s\n", json);
  CHECK_EQ_INT(top, step);
  mend_free(json);
  return top;
}

/* An engine made on db as on() makes it says `state` (mend_engine_sandboxed), and its code
 * reaches io or not (`io`). */
static void check_engine_on(const char *db, int sandbox, int no_sandbox, int state, int io) {
  mend_engine *E = on(db, sandbox, no_sandbox);
  CHECK_EQ_INT(mend_engine_sandboxed(E), state);
  CHECK_EQ_INT(reaches_io(E), io);
  mend_engine_free(E);
}

static void *sandboxed_elsewhere(void *E) { return (void *)(long)mend_engine_sandboxed(E); }

static void it_says_whether_an_engine_is_sandboxed_and_why(void) {
  char db[128];
  snprintf(db, sizeof db, "%s/says.db", dir);
  check_engine_on(db, 0, 0, MEND_UNSANDBOXED, 1);
  mend_engine *E = on(db, 1, 0);   /* marks the database */
  CHECK_EQ_INT(mend_engine_sandboxed(E), MEND_SANDBOXED);
  /* another thread is refused, as every call that reads the engine: never "unsandboxed" */
  pthread_t t;
  void *other = NULL;
  CHECK_EQ_INT(pthread_create(&t, NULL, sandboxed_elsewhere, E), 0);
  pthread_join(t, &other);
  CHECK_EQ_INT((int)(long)other, -1);
  mend_engine_free(E);
  check_engine_on(db, 0, 0, MEND_SANDBOXED_BY_MARK, 0);
  check_engine_on(db, 0, 1, MEND_UNSANDBOXED, 1);
  CHECK_EQ_INT(mend_engine_sandboxed(NULL), -1);
  /* an in-memory database is never marked */
  E = on(NULL, 1, 0);
  CHECK_EQ_INT(mend_engine_sandboxed(E), MEND_SANDBOXED);
  mend_engine_free(E);
  E = on(NULL, 0, 0);
  CHECK_EQ_INT(mend_engine_sandboxed(E), MEND_UNSANDBOXED);
  mend_engine_free(E);
}

static void it_clears_the_mark_for_the_engines_made_after(void) {
  char db[128], err[512];
  snprintf(db, sizeof db, "%s/trust.db", dir);
  mend_engine *E = on(db, 0, 0);
  mend_engine_free(E);
  int was = -1;
  CHECK_EQ_INT(mend_trust_db(db, &was, err, sizeof err), MEND_OK);
  CHECK_EQ_INT(was, 0);
  CHECK_STR(err, "");
  E = on(db, 1, 0);
  mend_engine_free(E);
  mend_engine *open = on(db, 0, 0);   /* made sandboxed by the mark, and stays so */
  CHECK_EQ_INT(mend_engine_sandboxed(open), MEND_SANDBOXED_BY_MARK);
  CHECK_EQ_INT(mend_trust_db(db, &was, err, sizeof err), MEND_OK);
  CHECK_EQ_INT(was, 1);
  CHECK_EQ_INT(mend_engine_sandboxed(open), MEND_SANDBOXED_BY_MARK);
  CHECK_EQ_INT(reaches_io(open), 0);
  mend_engine_free(open);
  check_engine_on(db, 0, 0, MEND_UNSANDBOXED, 1);
  CHECK_EQ_INT(mend_trust_db(db, NULL, NULL, 0), MEND_OK);   /* nothing to do: no out needed */
}

static void it_refuses_a_path_with_no_database(void) {
  char db[128], err[512] = "";
  int was = -1;
  snprintf(db, sizeof db, "%s/typo.db", dir);
  CHECK_EQ_INT(mend_trust_db(db, &was, err, sizeof err), MEND_ENOTFOUND);
  CHECK(strstr(err, "no database at") != NULL);
  CHECK(strstr(err, "typo.db") != NULL);
  CHECK_EQ_INT(was, 0);
  CHECK(access(db, F_OK) != 0);   /* none made */
  CHECK_EQ_INT(mend_trust_db(":memory:", &was, err, sizeof err), MEND_ENOTFOUND);
  CHECK_EQ_INT(mend_trust_db("", &was, err, sizeof err), MEND_ENOTFOUND);
  CHECK_EQ_INT(mend_trust_db(NULL, &was, err, sizeof err), MEND_EINVAL);
  CHECK(strstr(err, "NULL") != NULL);
  /* a file that is no mend database: the store's error, the file as it was */
  snprintf(db, sizeof db, "%s/notes.txt", dir);
  FILE *f = fopen(db, "w");
  CHECK(f != NULL);
  if (f) {
    fputs("not a database, but long enough for SQLite to read a header of it........\n"
          "..........................................................................\n", f);
    fclose(f);
  }
  CHECK_EQ_INT(mend_trust_db(db, &was, err, sizeof err), MEND_ESTORE);
  CHECK(err[0] != '\0');
}

int main(void) {
  embed_host_begin("embed-mark");
  write_workflow("probe", probe_lua);
  it_says_whether_an_engine_is_sandboxed_and_why();
  it_clears_the_mark_for_the_engines_made_after();
  it_refuses_a_path_with_no_database();
  return embed_host_end("test_embed_mark");
}
