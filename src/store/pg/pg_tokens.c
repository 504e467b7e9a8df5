/*
 * completion tokens and child runs on PostgreSQL: not yet. Each method that would write refuses
 * with an error that says so, so that a workflow using the feature on a PostgreSQL database
 * fails clearly instead of silently; since nothing can be written, the reads answer truly that
 * there is none (a run's children, an attempt's token). Must never: write anything.
 */
#include "store/pg/pg_int.h"

int mend__pg_no_put_token(mend_store *s, const char *token, const char *run_id, const char *step, int attempt, double made) {
  (void)token;
  (void)run_id;
  (void)step;
  (void)attempt;
  (void)made;
  mend__pg_unsupported(s, "completion tokens and child runs");
  return -1;
}
int mend__pg_no_token_of_attempt(mend_store *s, const char *run_id, const char *step, int attempt, char **token) {
  (void)s;
  (void)run_id;
  (void)step;
  (void)attempt;
  *token = NULL;
  return 0;
}
json_t *mend__pg_no_token(mend_store *s, const char *token) {
  (void)token;
  mend__pg_unsupported(s, "completion tokens and child runs");
  return NULL;
}
int mend__pg_no_use_token(mend_store *s, const char *token, const char *outcome, double at) {
  (void)token;
  (void)outcome;
  (void)at;
  mend__pg_unsupported(s, "completion tokens and child runs");
  return -1;
}
int mend__pg_no_set_parent(mend_store *s, const char *id, const char *parent, const char *parent_step) {
  (void)id;
  (void)parent;
  (void)parent_step;
  mend__pg_unsupported(s, "completion tokens and child runs");
  return -1;
}
json_t *mend__pg_no_children(mend_store *s, const char *parent) {
  (void)s;
  (void)parent;
  return json_array();
}
int mend__pg_no_child_end(mend_store *s, const char *child, const char *name, const char *payload, const char *key, double sent) {
  (void)child;
  (void)name;
  (void)payload;
  (void)key;
  (void)sent;
  mend__pg_unsupported(s, "completion tokens and child runs");
  return -1;
}
int mend__pg_no_reopen_run(mend_store *s, const char *id, const char *reason, const char *owner, double at) {
  (void)id;
  (void)reason;
  (void)owner;
  (void)at;
  mend__pg_unsupported(s, "completion tokens and child runs");
  return -1;
}
