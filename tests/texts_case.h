/*
 * texts_case: what tests/test_texts.c and test_texts_hostile.c share: the workflows both load,
 * a host function handing a token out, and each store to run the cases on (SQLite, then the
 * server MEND_TEST_PG names, in a database of the test's own, dropped after). Must never: hold
 * a case of either test.
 */
#ifndef MEND_TESTS_TEXTS_CASE_H
#define MEND_TESTS_TEXTS_CASE_H

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

/* exercise(store, db_path) on SQLite, then on PostgreSQL when MEND_TEST_PG names a server. */
static int texts_each_store(void (*exercise)(const char *store, const char *db_path),
                            const char *test) {
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
  return check_done(test);
}

#endif
