/*
 * pg_ops: the PostgreSQL store's writes (recorded into the open batch), the point reads the
 * engine makes while running (each sees the open batch: it is sent first, in the open
 * transaction), the operations of people that join the batch at once, workflow versions, and
 * events. Must never: read around the open batch; hand one event to two waits.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writes (recorded) ------------------------------------------------------------------ */

static int same(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

static char *dup(const char *t, int *oom) {
  if (!t) return NULL;
  char *c = strdup(t);
  if (!c) *oom = 1;
  return c;
}

/* The number of a run's workflow version: known, or written (once a version and process) in
 * the open batch, at once. */
static int workflow_version(mend_pg *p, const mend_run_rec *r, long long *id) {
  for (int i = 0; i < p->nversions; i++) {
    const struct pg_version *v = &p->versions[i];
    if (same(v->workflow, r->workflow) && same(v->version, r->version) &&
        same(v->source, r->source) && same(v->step_names, r->step_names)) {
      *id = v->id;
      return 0;
    }
  }
  if (mend__pg_begin(p) != 0) return -1;
  char created[40];
  snprintf(created, sizeof created, "%.17g", r->created);
  const char *v[5] = {r->workflow, r->version, r->source, r->step_names, created};
  PGresult *res = mend__pg_run(p, P_PUT_VERSION, NULL, 5, v, "number a workflow version");
  if (!res) return -1;
  PQclear(res);
  if (!(res = mend__pg_run(p, P_VERSION_ID, NULL, 2, v, "number a workflow version"))) return -1;
  if (PQntuples(res) == 0) {
    mend__pg_msg(p->err, sizeof p->err, "%s: workflow version of %s not found after writing it",
                 p->server, r->workflow);
    PQclear(res);
    p->batch_failed = 1;
    return -1;
  }
  *id = atoll(PQgetvalue(res, 0, 0));
  PQclear(res);
  if (r->script) {
    char num[24];
    snprintf(num, sizeof num, "%lld", *id);
    const char *k[2] = {num, r->script};
    if (!(res = mend__pg_run(p, P_KEEP_SCRIPT, NULL, 2, k, "keep a workflow version's script")))
      return -1;
    PQclear(res);
  }
  int oom = 0;
  if (p->nversions == p->capversions) {
    int cap = p->capversions ? p->capversions * 2 : 8;
    struct pg_version *more = realloc(p->versions, (size_t)cap * sizeof *more);
    if (!more) return 0;   /* not kept: the next run asks the database again */
    p->versions = more;
    p->capversions = cap;
  }
  struct pg_version n = {dup(r->workflow, &oom), dup(r->version, &oom), dup(r->source, &oom),
                         dup(r->step_names, &oom), *id};
  if (!oom) {
    p->versions[p->nversions++] = n;
  } else {
    free(n.workflow);
    free(n.version);
    free(n.source);
    free(n.step_names);
  }
  return 0;
}

int mend__pg_version_number(mend_store *s, const mend_run_rec *r, long long *id) {
  return workflow_version(PG(s), r, id);
}

int mend__pg_insert_run(mend_store *s, const mend_run_rec *r) {
  mend_pg *p = PG(s);
  long long version_id;
  if (workflow_version(p, r, &version_id) != 0) return -1;
  if (!r->run_key) {
    mend__pg_rec_begin(p, P_INSERT_RUN);
    mend__pg_rec_text(p, r->id);
    mend__pg_rec_text(p, r->workflow);
    mend__pg_rec_text(p, r->run_key);
    mend__pg_rec_text(p, r->status);
    mend__pg_rec_text(p, r->input);
    mend__pg_rec_text(p, r->error);
    mend__pg_rec_int(p, r->attention ? 1 : 0);
    mend__pg_rec_real(p, r->created);
    mend__pg_rec_real(p, r->updated);
    mend__pg_rec_text(p, r->owner);
    mend__pg_rec_int(p, version_id);
    if (!r->owner) p->cur->wake = 1;   /* any worker's to take */
    return mend__pg_rec_end(p);
  }
  /* With a run key the caller must hear at once whether the key was taken. */
  if (mend__pg_begin(p) != 0) return -1;
  char att[4], created[40], updated[40], ver[24];
  snprintf(att, sizeof att, "%d", r->attention ? 1 : 0);
  snprintf(created, sizeof created, "%.17g", r->created);
  snprintf(updated, sizeof updated, "%.17g", r->updated);
  snprintf(ver, sizeof ver, "%lld", version_id);
  const char *v[11] = {r->id, r->workflow, r->run_key, r->status, r->input, r->error, att,
                       created, updated, r->owner, ver};
  PGresult *res = mend__pg_run(p, P_INSERT_RUN_KEY, NULL, 11, v, "insert run");
  if (!res) return -1;
  if (!r->owner) p->tx_wake = 1;
  int taken = strcmp(PQcmdTuples(res), "0") == 0;
  PQclear(res);
  return taken;
}

int mend__pg_update_run(mend_store *s, const char *id, const char *status, const char *error,
                        int attention, double updated, const char *reason) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_UPDATE_RUN);
  mend__pg_rec_text(p, id);
  mend__pg_rec_text(p, status);
  mend__pg_rec_text(p, error);
  mend__pg_rec_int(p, attention ? 1 : 0);
  mend__pg_rec_real(p, updated);
  mend__pg_rec_text(p, reason);
  return mend__pg_rec_end(p);
}

static int rec_step(mend_pg *p, int q, const mend_step_rec *st) {
  mend__pg_rec_begin(p, q);
  if (q == P_PUT_STEP && !p->cur->oom) p->cur->recs[p->cur->nrec - 1].new_row = st->new_row != 0;
  mend__pg_rec_text(p, st->run_id);
  mend__pg_rec_int(p, st->idx);
  if (q == P_PUT_STEP) mend__pg_rec_text(p, st->name);
  mend__pg_rec_text(p, st->status);
  mend__pg_rec_int(p, st->attempts);
  mend__pg_rec_int(p, st->comp_attempts);
  mend__pg_rec_text(p, st->idem_key);
  mend__pg_rec_int(p, st->custom_key);
  mend__pg_rec_text(p, st->result);
  mend__pg_rec_text(p, st->error);
  mend__pg_rec_opt_real(p, st->due);
  mend__pg_rec_opt_real(p, st->last_delay);
  mend__pg_rec_real(p, st->updated);
  mend__pg_rec_int(p, st->slept ? 1 : 0);
  mend__pg_rec_text(p, st->awaits);
  mend__pg_rec_text(p, st->error ? st->error_kind : NULL);
  mend__pg_rec_int(p, st->error ? st->error_severity : 0);
  mend__pg_rec_int(p, st->error ? st->error_stopped : 0);
  return mend__pg_rec_end(p);
}

int mend__pg_put_step(mend_store *s, const mend_step_rec *st) {
  return rec_step(PG(s), P_PUT_STEP, st);
}

int mend__pg_update_step(mend_store *s, const mend_step_rec *st) {
  return rec_step(PG(s), P_UPDATE_STEP, st);
}

int mend__pg_append_history(mend_store *s, const mend_history_rec *h) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_APPEND_HISTORY);
  mend__pg_rec_text(p, h->run_id);
  mend__pg_rec_text(p, h->step);
  mend__pg_rec_real(p, h->at);
  mend__pg_rec_text(p, h->event);
  mend__pg_rec_text(p, h->from_status);
  mend__pg_rec_text(p, h->to_status);
  if (h->attempt) mend__pg_rec_int(p, h->attempt);
  else mend__pg_rec_text(p, NULL);
  mend__pg_rec_text(p, h->error);
  mend__pg_rec_opt_real(p, h->delay);
  mend__pg_rec_text(p, h->detail);
  mend__pg_rec_text(p, p->worker);
  mend__pg_rec_text(p, h->error_kind);
  if (h->seq > 0) mend__pg_rec_int(p, h->seq);
  else mend__pg_rec_text(p, NULL);
  return mend__pg_rec_end(p);
}

int mend__pg_put_breaker(mend_store *s, const char *key, const mend_breaker *b, double updated) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_PUT_BREAKER);
  mend__pg_rec_text(p, key);
  mend__pg_rec_text(p, mend_breaker_state_name(b->state));
  mend__pg_rec_int(p, b->failures);
  mend__pg_rec_int(p, b->successes);
  mend__pg_rec_real(p, b->opened_at);
  mend__pg_rec_real(p, b->open_until);
  mend__pg_rec_real(p, updated);
  return mend__pg_rec_end(p);
}

int mend__pg_put_dlq(mend_store *s, const mend_dlq_rec *d) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_PUT_DLQ);
  mend__pg_rec_text(p, d->run_id);
  mend__pg_rec_text(p, d->reason);
  mend__pg_rec_text(p, d->step);
  mend__pg_rec_text(p, d->error);
  mend__pg_rec_text(p, d->detail);
  mend__pg_rec_real(p, d->at);
  return mend__pg_rec_end(p);
}

int mend__pg_set_unavailable(mend_store *s, const char *id, const char *why) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_SET_UNAVAILABLE);
  mend__pg_rec_text(p, id);
  mend__pg_rec_text(p, why);
  return mend__pg_rec_end(p);
}

/* ---- operations that join the batch at once ------------------------------------------------ */

/* Runs a write statement in the open batch (begun if need be): 0 or -1. */
static int write_now(mend_pg *p, int q, int n, const char *const *v, const char *what) {
  if (mend__pg_begin(p) != 0) return -1;
  PGresult *r = mend__pg_run(p, q, NULL, n, v, what);
  if (!r) return -1;
  PQclear(r);
  return 0;
}

int mend__pg_move_run(mend_store *s, const char *id, long long version_id, int keep_steps) {
  mend_pg *p = PG(s);
  char ver[24], keep[24];
  snprintf(ver, sizeof ver, "%lld", version_id);
  snprintf(keep, sizeof keep, "%d", keep_steps);
  const char *a[2] = {id, ver}, *b[2] = {id, keep};
  if (write_now(p, P_MOVE_RUN, 2, a, "move a run to another version") != 0) return -1;
  return write_now(p, P_DROP_STEPS_FROM, 2, b, "move a run to another version");
}

int mend__pg_dlq_remove(mend_store *s, const char *run_id) {
  const char *v[1] = {run_id};
  return write_now(PG(s), P_DLQ_REMOVE, 1, v, "remove from dlq");
}

int mend__pg_request_cancel(mend_store *s, const char *run_id) {
  const char *v[1] = {run_id};
  return write_now(PG(s), P_REQUEST_CANCEL, 1, v, "request cancel");
}

int mend__pg_audit(mend_store *s, double at, const char *who, const char *op,
                   const char *target, const char *detail) {
  char t[40];
  snprintf(t, sizeof t, "%.17g", at);
  const char *v[5] = {t, who, op, target, detail};
  return write_now(PG(s), P_AUDIT, 5, v, "append audit");
}

/* ---- point reads -------------------------------------------------------------------------- */

/* A read in the open transaction, after the batch so far: the result, or NULL (err). Every
 * read here looks rows up by equality: a value the server cannot take as text (not UTF-8: a
 * run key or breaker from a URL) is in no row, and sent would fail the batch's transaction. */
static PGresult *read_now(mend_pg *p, int q, int n, const char *const *v, const char *what) {
  for (int i = 0; i < n; i++)
    if (!mend__pg_text_fits(p, v[i])) return PQmakeEmptyPGresult(p->conn, PGRES_TUPLES_OK);
  if (mend__pg_sync(p) != 0) return NULL;
  return mend__pg_run(p, q, NULL, n, v, what);
}

json_t *mend__pg_cancel_requests(mend_store *s, const char *owner) {
  const char *v[1] = {owner};
  PGresult *r = read_now(PG(s), P_CANCEL_REQUESTS, 1, v, "read cancel requests");
  if (!r) return NULL;
  json_t *ids = json_array();
  for (int i = 0; ids && i < PQntuples(r); i++)
    json_array_append_new(ids, json_string(PQgetvalue(r, i, 0)));
  PQclear(r);
  return ids;
}

long mend__pg_last_history(mend_store *s, const char *run_id, double *at) {
  const char *v[1] = {run_id};
  PGresult *r = read_now(PG(s), P_LAST_SEQ, 1, v, "read the history's length");
  if (!r) return -1;
  int row = PQntuples(r) > 0;
  long seq = row ? atol(PQgetvalue(r, 0, 0)) : 0;
  if (at) *at = row && !PQgetisnull(r, 0, 1) ? atof(PQgetvalue(r, 0, 1)) : -1;
  PQclear(r);
  return seq;
}

long mend__pg_last_history_seq(mend_store *s, const char *run_id) {
  return mend__pg_last_history(s, run_id, NULL);
}

char *mend__pg_version_script(mend_store *s, const char *workflow, const char *version,
                              char **source) {
  mend_pg *p = PG(s);
  if (source) *source = NULL;
  const char *v[2] = {workflow, version};
  PGresult *r = read_now(p, P_VERSION_SCRIPT, 2, v, "read a workflow version's script");
  if (!r) return NULL;
  if (!PQntuples(r)) {
    mend__pg_msg(p->err, sizeof p->err, "%s: no script of workflow %s version %s is kept",
                 p->server, workflow, version);
    PQclear(r);
    return NULL;
  }
  int oom = 0;
  char *text = dup(PG_TEXT(r, 0, 0), &oom);
  if (source && !oom) *source = dup(PG_TEXT(r, 0, 1), &oom);
  PQclear(r);
  if (oom) {
    free(text);
    if (source) {
      free(*source);
      *source = NULL;
    }
    mend__pg_msg(p->err, sizeof p->err, "%s: out of memory reading a workflow version", p->server);
    return NULL;
  }
  return text;
}

int mend__pg_find_run_key(mend_store *s, const char *run_key, char *id_out, int id_len) {
  mend_pg *p = PG(s);
  const char *v[1] = {run_key};
  PGresult *r = read_now(p, P_FIND_RUN_KEY, 1, v, "find run key");
  if (!r) return -1;
  int found = PQntuples(r) > 0;
  if (found && PQgetlength(r, 0, 0) >= id_len) {
    mend__pg_msg(p->err, sizeof p->err, "%s: find run key: run id does not fit in %d bytes",
                 p->server, id_len);
    found = -1;
  } else if (found) {
    memcpy(id_out, PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0) + 1);
  }
  PQclear(r);
  return found;
}

int mend__pg_find_key_result(mend_store *s, const char *idem_key, char **result_out, char *run_out,
                             int run_len) {
  mend_pg *p = PG(s);
  const char *v[1] = {idem_key};
  PGresult *r = read_now(p, P_FIND_KEY_RESULT, 1, v, "find key result");
  if (!r) return -1;
  if (!PQntuples(r)) {
    PQclear(r);
    return 0;
  }
  const char *run = PG_TEXT(r, 0, 1);
  snprintf(run_out, (size_t)run_len, "%s", run ? run : "");
  const char *res = PG_TEXT(r, 0, 0);
  *result_out = strdup(res ? res : "null");   /* a step that returned nothing: JSON null */
  PQclear(r);
  if (!*result_out) {
    mend__pg_msg(p->err, sizeof p->err, "%s: find key result: out of memory", p->server);
    return -1;
  }
  return 1;
}

int mend__pg_get_breaker(mend_store *s, const char *key, mend_breaker *b) {
  mend_pg *p = PG(s);
  const char *v[1] = {key};
  PGresult *r = read_now(p, P_GET_BREAKER, 1, v, "get breaker");
  if (!r) return -1;
  if (!PQntuples(r)) {
    PQclear(r);
    return 0;
  }
  mend_breaker_state st;
  const char *state = PG_TEXT(r, 0, 0);
  if (!state || mend_breaker_state_parse(state, &st) != 0) {
    mend__pg_msg(p->err, sizeof p->err, "%s: get breaker %s: unknown state %s", p->server, key,
                 state ? state : "null");
    PQclear(r);
    return -1;
  }
  b->state = st;
  b->failures = atoi(PQgetvalue(r, 0, 1));
  b->successes = atoi(PQgetvalue(r, 0, 2));
  b->probes = 0;
  b->opened_at = atof(PQgetvalue(r, 0, 3));
  b->open_until = atof(PQgetvalue(r, 0, 4));
  PQclear(r);
  return 1;
}

/* ---- events ------------------------------------------------------------------------------ */

/* Held until commit by every transaction that sends: seqs then commit in the order taken. */
#define INBOX_LOCK "SELECT pg_advisory_xact_lock(x'4d454e49'::int)"

int mend__pg_send_event(mend_store *s, const char *run_id, const char *name,
                        const char *payload, const char *key, double sent, const char *who) {
  mend_pg *p = PG(s);
  if (mend__pg_begin(p) != 0) return -1;
  PGresult *r = mend__pg_run(p, -1, INBOX_LOCK, 0, NULL, "send an event");
  if (!r) return -1;
  PQclear(r);
  char t[40];
  snprintf(t, sizeof t, "%.17g", sent);
  const char *v[6] = {run_id, name, payload, key, t, who};
  if (!(r = mend__pg_run(p, P_SEND_EVENT, NULL, 6, v, "send an event"))) return -1;
  int dup_key = strcmp(PQcmdTuples(r), "0") == 0;
  PQclear(r);
  if (!dup_key) p->tx_wake = 1;   /* its run may be held elsewhere */
  return dup_key;
}

/* The event of r's first row (seq, payload, key), copied, and r cleared: 1, 0 no row, or -1
 * out of memory (nothing kept). */
static int event_of(mend_pg *p, PGresult *r, long long *seq, char **payload, char **key) {
  if (!PQntuples(r)) {
    PQclear(r);
    return 0;
  }
  int oom = 0;
  *seq = atoll(PQgetvalue(r, 0, 0));
  const char *pl = PG_TEXT(r, 0, 1);
  *payload = dup(pl ? pl : "null", &oom);
  *key = dup(PG_TEXT(r, 0, 2), &oom);
  PQclear(r);
  if (oom) {
    free(*payload);
    free(*key);
    *payload = *key = NULL;
    mend__pg_msg(p->err, sizeof p->err, "%s: read a run's inbox: out of memory", p->server);
    return -1;
  }
  return 1;
}

/* In the batch, as a transition is (the engine's ticking host: no round trip, no wait for the
 * writer thread). Only with a key: a batch whose connection is lost is not known committed, so
 * its events are sent again with the next (pg_batch.c), and the key keeps each once. Nor a
 * text the server might refuse, which would fail the batch of every run with it: that one the
 * caller sends on its own. */
int mend__pg_record_event(mend_store *s, const char *run_id, const char *name,
                          const char *payload, const char *key, double sent, const char *who) {
  mend_pg *p = PG(s);
  if (!key || !mend__pg_utf8(run_id) || !mend__pg_utf8(name) || !mend__pg_utf8(key) ||
      (payload && !mend__pg_utf8(payload)) || (who && !mend__pg_utf8(who)))
    return 1;
  int repairing = p->repairing;
  p->repairing = 1;   /* no write of the run's holder: whoever holds it, the fence lets it by */
  mend__pg_rec_begin(p, P_RECORD_EVENT);
  mend__pg_rec_text(p, run_id);
  mend__pg_rec_text(p, name);
  mend__pg_rec_text(p, payload);
  mend__pg_rec_text(p, key);
  mend__pg_rec_real(p, sent);
  mend__pg_rec_text(p, who);
  p->repairing = repairing;
  p->cur->wake = 1;   /* its run may be held elsewhere */
  return mend__pg_rec_end(p);
}

int mend__pg_next_event(mend_store *s, const char *run_id, const char *name, long long *seq,
                        char **payload, char **key) {
  mend_pg *p = PG(s);
  *payload = *key = NULL;
  const char *v[2] = {run_id, name};
  PGresult *r = read_now(p, P_NEXT_EVENT, 2, v, "read a run's inbox");
  if (!r) return -1;
  return event_of(p, r, seq, payload, key);
}

/* On aux, a session of its own: committed rows only, and no wait for the writer thread, whose
 * commit (a round trip and the server's flush) a tick would otherwise wait out. Whatever goes
 * wrong here answers 2, and the caller reads with the open batch, which says what it is. */
int mend__pg_next_committed_event(mend_store *s, const char *run_id, const char *name,
                                  long long *seq, char **payload, char **key) {
  mend_pg *p = PG(s);
  *payload = *key = NULL;
  const char *v[2] = {run_id, name};
  PGresult *r = mend__pg_aux_read(p, P_NEXT_EVENT, 2, v);
  if (!r) return 2;
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    PQclear(r);
    return 2;   /* aux is opened again at its next use */
  }
  return event_of(p, r, seq, payload, key);
}

int mend__pg_consume_event(mend_store *s, const char *run_id, long long seq, const char *step,
                           double at) {
  mend_pg *p = PG(s);
  mend__pg_rec_begin(p, P_CONSUME_EVENT);
  mend__pg_rec_text(p, run_id);
  mend__pg_rec_int(p, seq);
  mend__pg_rec_real(p, at);
  mend__pg_rec_text(p, step);
  return mend__pg_rec_end(p);
}

int mend__pg_event_sent(mend_store *s, long long seq, double *sent) {
  char text[24];
  snprintf(text, sizeof text, "%lld", seq);
  const char *v[1] = {text};
  PGresult *r = read_now(PG(s), P_EVENT_SENT, 1, v, "read a run's inbox");
  if (!r) return -1;
  int row = PQntuples(r) > 0;
  if (row) *sent = atof(PQgetvalue(r, 0, 0));
  PQclear(r);
  return row;
}

long long mend__pg_last_event(mend_store *s) {
  long long seq;
  if (mend__pg_aux_last_event(PG(s), &seq) == 0) return seq;
  /* aux not open yet, or its read failed: in the open transaction, as before */
  PGresult *r = read_now(PG(s), P_LAST_EVENT, 0, NULL, "read the inbox");
  if (!r) return -1;
  seq = PQntuples(r) ? atoll(PQgetvalue(r, 0, 0)) : 0;
  PQclear(r);
  return seq;
}

long long mend__pg_events_after(mend_store *s, long long after, int limit,
                                void (*fn)(void *ud, const char *run_id), void *ud) {
  mend_pg *p = PG(s);
  /* committed events only, and no wait for the writer thread: the look of every poll. A
   * server out of reach is a look that saw nothing: the next poll looks again, and the
   * batches say what is wrong. */
  char a[24], l[24];
  snprintf(a, sizeof a, "%lld", after);
  snprintf(l, sizeof l, "%d", limit);
  const char *v[2] = {a, l};
  PGresult *r = mend__pg_aux_read(p, P_EVENTS_AFTER, 2, v);
  if (!r) return after;
  if (PQresultStatus(r) != PGRES_TUPLES_OK && PQstatus(p->aux) != CONNECTION_OK) {
    PQclear(r);
    return after;   /* opened again at the next look */
  }
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    mend__pg_fail_to(p->aux_err, sizeof p->aux_err, p->aux_server, p->aux, r,
                     "look for new events");
    PQclear(r);
    return -1;
  }
  long long last = after;
  for (int i = 0; i < PQntuples(r); i++) {
    last = atoll(PQgetvalue(r, i, 0));
    fn(ud, PQgetvalue(r, i, 1));
  }
  PQclear(r);
  return last;
}
