/*
 * pg_tokens: completion tokens and child runs on PostgreSQL (schema 2), the store's side of
 * what src/store/tokens.c does for SQLite: a token's row (which attempt made it, whether it
 * was used and how), and the links between a parent run and the runs its steps started.
 * Tokens, links and reopening join the open batch at once, as on SQLite (the caller hears at
 * once whether a token was used already or a run reopened); a child's end is recorded like
 * the child's other transitions, so that the fence drops it with them. Must never: mark a
 * token used twice; reopen a run that had not succeeded; read around the open batch.
 */
#include "pg_int.h"
#include "pg_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs statement q in the open batch (begun if need be): its result, or NULL (err set). */
static PGresult *write_now(mend_pg *p, int q, int n, const char *const *v, const char *what) {
  if (mend__pg_begin(p) != 0) return NULL;
  return mend__pg_run(p, q, NULL, n, v, what);
}

static int changed(PGresult *r) { return strcmp(PQcmdTuples(r), "0") != 0; }

int mend__pg_put_token(mend_store *s, const char *digest, const char *run_id, const char *step,
                       int attempt, double made) {
  char a[24], t[40];
  snprintf(a, sizeof a, "%d", attempt);
  snprintf(t, sizeof t, "%.17g", made);
  const char *v[5] = {digest, run_id, step, a, t};
  PGresult *r = write_now(PG(s), P_PUT_TOKEN, 5, v, "record a token");
  if (!r) return -1;
  PQclear(r);
  return 0;
}

int mend__pg_token_of_attempt(mend_store *s, const char *run_id, const char *step, int attempt,
                              char **digest) {
  mend_pg *p = PG(s);
  *digest = NULL;
  char a[24];
  snprintf(a, sizeof a, "%d", attempt);
  const char *v[3] = {run_id, step, a};
  if (mend__pg_sync(p) != 0) return -1;
  PGresult *r = mend__pg_run(p, P_TOKEN_OF_ATTEMPT, NULL, 3, v, "read a token");
  if (!r) return -1;
  if (!PQntuples(r)) {
    PQclear(r);
    return 0;
  }
  *digest = strdup(PQgetvalue(r, 0, 0));
  PQclear(r);
  if (!*digest) {
    mend__pg_msg(p->err, sizeof p->err, "%s: read a token: out of memory", p->server);
    return -1;
  }
  return 1;
}

/* A view's answer, its message prefixed with the server's name. */
static json_t *viewed(mend_pg *p, json_t *v, const char *msg) {
  if (!v && msg[0]) mend__pg_msg(p->err, sizeof p->err, "%s: %s", p->server, msg);
  return v;
}

json_t *mend__pg_token(mend_store *s, const char *digest) {
  mend_pg *p = PG(s);
  p->err[0] = 0;
  if (mend__pg_sync(p) != 0) return NULL;
  char err[sizeof p->err];
  return viewed(p, mend__pg_view_token(p->conn, digest, err, sizeof err), err);
}

int mend__pg_use_token(mend_store *s, const char *digest, const char *outcome, double at) {
  char t[40];
  snprintf(t, sizeof t, "%.17g", at);
  const char *v[3] = {digest, t, outcome};
  PGresult *r = write_now(PG(s), P_USE_TOKEN, 3, v, "use a token");
  if (!r) return -1;
  int used_before = !changed(r);
  PQclear(r);
  return used_before;
}

int mend__pg_set_parent(mend_store *s, const char *id, const char *parent,
                        const char *parent_step) {
  const char *v[3] = {id, parent, parent_step};
  PGresult *r = write_now(PG(s), P_SET_PARENT, 3, v, "link a child run");
  if (!r) return -1;
  PQclear(r);
  return 0;
}

int mend__pg_child_end(mend_store *s, const char *child, const char *name, const char *payload,
                       const char *key, double sent) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_CHILD_END);
  mend__pg_rec_text(p, child);
  mend__pg_rec_text(p, name);
  mend__pg_rec_text(p, payload);
  mend__pg_rec_text(p, key);
  mend__pg_rec_real(p, sent);
  return mend__pg_rec_end(p);
}

int mend__pg_reopen_run(mend_store *s, const char *id, const char *reason, const char *owner,
                        double at) {
  char t[40];
  snprintf(t, sizeof t, "%.17g", at);
  const char *v[4] = {id, reason, owner, t};
  PGresult *r = write_now(PG(s), P_REOPEN_RUN, 4, v, "reopen a run");
  if (!r) return -1;
  int reopened = changed(r);
  PQclear(r);
  mend_pg *p = PG(s);
  if (reopened && owner && p->fence_owner && strcmp(owner, p->fence_owner) == 0)
    mend__pg_ours_again(p, id);   /* ours now, as after a take */
  return reopened;
}
