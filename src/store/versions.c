/*
 * versions: the numbers of workflow versions in workflow_versions, which each run's row names:
 * the ones this store knows, looked up among committed rows, or written (once a version and
 * process) with the first run of a version new to the database. Must never: give a run a
 * number another version has; keep a number of a batch that was rolled back (batch.c forgets
 * them).
 */
#include "store_int.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

static int same_text(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

/* Keeps the number of r's version (0: recorded in a batch, its number not known yet) in the
 * store's list, as `known` if it is there already; out of memory it is not kept, and the next
 * run asks the database again. */
static void remember_version(mend_store *s, struct wf_version *known, const mend_run_rec *r,
                             sqlite3_int64 id) {
  if (known) {
    known->id = id;
    return;
  }
  int oom = 0;
  if (s->nversions == s->capversions) {
    int cap = s->capversions ? s->capversions * 2 : 8;
    struct wf_version *more = realloc(s->versions, (size_t)cap * sizeof *more);
    if (more) {
      s->versions = more;
      s->capversions = cap;
    } else {
      oom = 1;
    }
  }
  struct wf_version v = {mend__copy_text(r->workflow, &oom), mend__copy_text(r->version, &oom),
                         mend__copy_text(r->source, &oom), mend__copy_text(r->step_names, &oom),
                         id};
  if (!oom) s->versions[s->nversions++] = v;
  else mend__free_version(&v);
}

/* The version's number among committed rows, on the reader (no wait for the write lock): 1 and
 * *id, 0 none, -1 it cannot be read there (the caller reads and writes it at once). */
static int committed_version(mend_store *s, const char *const values[4], sqlite3_int64 *id) {
  sqlite3_stmt *q = mend__reader_stmt(s, &s->rq[Q_VERSION_ID], Q_VERSION_ID);
  if (!q) return -1;
  int rc = SQLITE_OK;
  for (int k = 0; k < 4; k++) BIND(mend__bind_text(q, k + 1, values[k]));
  int found = mend__first_row(s, q, rc, "number a workflow version");
  if (found != 1) return found;
  *id = sqlite3_column_int64(q, 0);
  mend__finish(q);
  return 1;
}

/* A version not committed yet, recorded in the open batch for a caller that waits for it: its
 * row (and its script) go in as the batch is written, and its runs take its number there
 * (Q_INSERT_RUN_NEWV). Not a run's write: the fence lets it pass. */
static int record_version(mend_store *s, const mend_run_rec *r) {
  int repairing = s->repairing;
  s->repairing = 1;
  mend__rec_begin(s, Q_PUT_VERSION);
  mend__rec_text(s, r->workflow);
  mend__rec_text(s, r->version);
  mend__rec_text(s, r->source);
  mend__rec_text(s, r->step_names);
  mend__rec_real(s, r->created);
  if (r->script) {
    mend__rec_begin(s, Q_KEEP_SCRIPT_NEWV);
    mend__rec_text(s, r->workflow);
    mend__rec_text(s, r->version);
    mend__rec_text(s, r->source);
    mend__rec_text(s, r->step_names);
    mend__rec_text(s, r->script);
  }
  s->repairing = repairing;
  return mend__rec_end(s);
}

/* The number of a run's workflow version in workflow_versions: known, or written (once a
 * version and process) in the open batch, which it joins before the run is recorded. For a
 * caller that waits for its batch (r->at_commit), a version committed before is looked up
 * without the write lock, and a new one is recorded: *id 0, numbered as the batch is written. */
int mend__workflow_version(mend_store *s, const mend_run_rec *r, sqlite3_int64 *id) {
  struct wf_version *known = NULL;
  for (int i = 0; i < s->nversions && !known; i++) {
    struct wf_version *v = &s->versions[i];
    if (same_text(v->workflow, r->workflow) && same_text(v->version, r->version) &&
        same_text(v->source, r->source) && same_text(v->step_names, r->step_names))
      known = v;
  }
  if (known && known->id) {
    *id = known->id;
    return 0;
  }
  const char *const values[4] = {r->workflow, r->version, r->source, r->step_names};
  if (r->at_commit) {
    int found = committed_version(s, values, id);
    if (found == 1) {
      remember_version(s, known, r, *id);
      if (!r->script) return 0;
      mend__rec_begin(s, Q_KEEP_SCRIPT);   /* a version an older mend wrote has none */
      mend__rec_int(s, *id);
      mend__rec_text(s, r->script);
      return mend__rec_end(s);
    }
    if (found == 0) {
      *id = 0;
      if (record_version(s, r) != 0) return -1;
      remember_version(s, known, r, 0);
      return 0;
    }
  }
  if (mend__sync_point(s) != 0 || mend__batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_PUT_VERSION];
  int rc = SQLITE_OK;
  for (int k = 0; k < 4; k++) BIND(mend__bind_text(q, k + 1, values[k]));
  BIND(sqlite3_bind_double(q, 5, r->created));
  if (mend__run_write(s, q, rc, "number a workflow version") != 0) return -1;
  q = s->q[Q_VERSION_ID];
  for (int k = 0; k < 4; k++) BIND(mend__bind_text(q, k + 1, values[k]));
  int found = mend__first_row(s, q, rc, "number a workflow version");
  if (found <= 0) {
    if (found == 0)
      mend__set_msg(s->err, sizeof s->err,
                    "%s: workflow version of %s not found after"
                    " writing it",
                    s->path, r->workflow);
    s->batch_failed = 1;
    return -1;
  }
  *id = sqlite3_column_int64(q, 0);
  mend__finish(q);
  if (r->script) {
    q = s->q[Q_KEEP_SCRIPT];
    rc = SQLITE_OK;
    BIND(sqlite3_bind_int64(q, 1, *id));
    BIND(mend__bind_text(q, 2, r->script));
    if (mend__run_write(s, q, rc, "keep a workflow version's script") != 0) return -1;
  }
  remember_version(s, known, r, *id);
  return 0;
}

void mend__free_version(struct wf_version *v) {
  free(v->workflow);
  free(v->version);
  free(v->source);
  free(v->step_names);
}

/* Drops the known workflow versions from `from` on. */
void mend__forget_versions(mend_store *s, int from) {
  while (s->nversions > from) mend__free_version(&s->versions[--s->nversions]);
  if (s->versions_committed > s->nversions) s->versions_committed = s->nversions;
}
