/*
 * tokens: the store's side of completion tokens and child runs (schema 11): a token's row
 * (its digest, which attempt made it, whether it was used and how), and the links between a
 * parent run and the runs its steps started. Must never: mark a token used twice, or any of
 * an attempt's tokens once one of them was; reopen a run that had not succeeded; be handed a
 * token itself (the engine passes its digest, src/digest.c).
 */
#include "store_int.h"
#include "digest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* mend_token_digest(text) in SQL, for the upgrade that digests the tokens of schema 12. */
static void digest_fn(sqlite3_context *c, int argc, sqlite3_value **argv) {
  (void)argc;
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_null(c);
    return;
  }
  const unsigned char *t = sqlite3_value_text(argv[0]);
  char hex[MEND_DIGEST_HEX];
  if (!t || mend__digest_hex(t, (size_t)sqlite3_value_bytes(argv[0]), hex) != 0) {
    sqlite3_result_error(c, "mend_token_digest: libcrypto gave no SHA-256", -1);
    return;
  }
  sqlite3_result_text(c, hex, -1, SQLITE_TRANSIENT);
}

int mend__sqlite_digest_fn(sqlite3 *db) {
  return sqlite3_create_function(db, "mend_token_digest", 1,
                                 SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, digest_fn, NULL, NULL);
}

int mend__sqlite_put_token(mend_store *s, const char *digest, const char *run_id, const char *step,
                         int attempt, double made) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_PUT_TOKEN];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, digest));
  BIND(mend__bind_text(q, 2, run_id));
  BIND(mend__bind_text(q, 3, step));
  BIND(sqlite3_bind_int(q, 4, attempt));
  BIND(sqlite3_bind_double(q, 5, made));
  return mend__run_write(s, q, rc, "record a token");
}

int mend__sqlite_token_of_attempt(mend_store *s, const char *run_id, const char *step, int attempt,
                                char **digest) {
  *digest = NULL;
  if (mend__sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_TOKEN_OF_ATTEMPT];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, run_id));
  BIND(mend__bind_text(q, 2, step));
  BIND(sqlite3_bind_int(q, 3, attempt));
  int r = mend__first_row(s, q, rc, "read a token");
  if (r <= 0) return r;
  int oom = 0;
  *digest = mend__copy_text((const char *)sqlite3_column_text(q, 0), &oom);
  mend__finish(q);
  if (oom) {
    mend__set_msg(s->err, sizeof s->err, "%s: read a token: out of memory", s->path);
    return -1;
  }
  return 1;
}

json_t *mend__sqlite_token(mend_store *s, const char *digest) {
  s->err[0] = 0;
  if (mend__sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_TOKEN];
  json_t *rows = mend__rows_array(s, q, mend__bind_text(q, 1, digest), "read a token");
  if (!rows) return NULL;
  json_t *row = json_incref(json_array_get(rows, 0));
  json_decref(rows);
  return row;
}

int mend__sqlite_use_token(mend_store *s, const char *digest, const char *outcome, double at) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_USE_TOKEN];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, digest));
  BIND(sqlite3_bind_double(q, 2, at));
  BIND(mend__bind_text(q, 3, outcome));
  if (mend__run_write(s, q, rc, "use a token") != 0) return -1;
  return sqlite3_changes(s->db) == 0 ? 1 : 0;
}

int mend__sqlite_set_parent(mend_store *s, const char *id, const char *parent,
                          const char *parent_step) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_SET_PARENT];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, id));
  BIND(mend__bind_text(q, 2, parent));
  BIND(mend__bind_text(q, 3, parent_step));
  return mend__run_write(s, q, rc, "link a child run");
}

/* A view, as a run's (mend status, GET /api/v1/runs/{id}): while this store's writes wait for
 * another process's lock, the committed rows, rather than a wait with them. */
json_t *mend__sqlite_children(mend_store *s, const char *parent) {
  if (mend__view_point(s) != 0) return NULL;
  sqlite3_stmt *q = mend__view_stmt(s, Q_CHILDREN);
  return mend__rows_array(s, q, mend__bind_text(q, 1, parent), "read child runs");
}

int mend__sqlite_child_end(mend_store *s, const char *child, const char *name, const char *payload,
                         const char *key, double sent) {
  mend__rec_begin(s, Q_CHILD_END);
  mend__rec_text(s, child);
  mend__rec_text(s, name);
  mend__rec_text(s, payload);
  mend__rec_text(s, key);
  mend__rec_real(s, sent);
  return mend__rec_end(s);
}

int mend__sqlite_reopen_run(mend_store *s, const char *id, const char *reason, const char *owner,
                          double at) {
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_REOPEN_RUN];
  int rc = SQLITE_OK;
  BIND(mend__bind_text(q, 1, id));
  BIND(mend__bind_text(q, 2, reason));
  BIND(mend__bind_text(q, 3, owner));
  BIND(sqlite3_bind_double(q, 4, at));
  if (mend__run_write(s, q, rc, "reopen a run") != 0) return -1;
  return sqlite3_changes(s->db) == 1 ? 1 : 0;
}
