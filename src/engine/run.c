/*
 * run: a run in memory. Owns making one (from a start, or for a run rebuilt from the store)
 * with its steps and Lua values, starting a run (idempotently by run key, a key of another
 * workflow's run refused; its first transition written into the open batch, its first action
 * queued behind it), and letting a
 * run go (given back to the store's pool, or dropped once it ended). Must never: act on a run
 * before the batch that records its start is durable.
 */
#include "engine_int.h"

#include <mend.h>

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

/* ---------------------------------------------------------------- starting runs */

/* A run and its steps are one block: one allocation and one free a run rather than two, of the
 * few mend itself makes for a one-step run (W9). Where the steps begin in it: */
#define STEPS_AT \
  ((sizeof(mend_run) + _Alignof(step_rt) - 1) / _Alignof(step_rt) * _Alignof(step_rt))

mend_run *mend__run_new(mend_engine *E, mend_workflow *wf, const char *id) {
  mend_run *r = calloc(1, STEPS_AT + (size_t)wf->nsteps * sizeof(step_rt));
  r->E = E;
  r->wf = wf;
  r->status = MEND_RUN_RUNNING;
  r->input_ref = r->results_ref = LUA_NOREF;
  r->fail_step = -1;
  for (size_t n = 0; n + 1 < sizeof r->id && id[n]; n++) r->id[n] = id[n];   /* calloc'd */
  r->steps = (step_rt *)((char *)r + STEPS_AT);
  for (int i = 0; i < wf->nsteps; i++) {
    step_rt *st = &r->steps[i];
    st->status = MEND_STEP_PENDING;
    st->due = st->last_delay = -1;
    st->key_ready = wf->steps[i].key_ref == LUA_NOREF;
  }
  mend_timer_init(&r->wait, mend__on_wait);
  r->ref_shard = mend_refs_shard(&E->refs, E->L);
  /* Sized for a short saga's results: each of the first steps' set_result would rehash it
   * (0, 1, 2, 4 slots; 2.7k instructions a run in W1), a longer one grows as it goes. */
  lua_createtable(E->L, 0, wf->nsteps < 4 ? wf->nsteps : 4);
  r->results_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  r->next = E->runs;
  if (E->runs) E->runs->prev = r;
  E->runs = r;
  E->in_flight++;
  mend__runmap_add(E, r);
  return r;
}

double mend__lease_until(const mend_engine *E) { return mend_real_now() + E->lease_seconds; }

static int start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                       const char *run_key, const char *who, char id_out[MEND_RUN_ID_LEN],
                       int *existed, int detached, char *err, int errlen);

/* A start is an answer to its caller: it waits for another process's lock up to the store's
 * default busy wait, then fails naming the lock (the loop's own writes wait on a timer). */
int mend_engine_start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                            const char *run_key, const char *who, char id_out[MEND_RUN_ID_LEN],
                            int *existed, int detached, char *err, int errlen) {
  if (E->store) mend_store_set_busy_wait(E->store, 0);
  int rc = start_value(E, L, workflow, input_idx, run_key, who, id_out, existed, detached, err,
                       errlen);
  if (E->store) mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  return rc;
}

/* A run key names one run of one workflow: a start of workflow wf with the key of a run of
 * another is refused (MEND_REFUSED_STATE), so that a key reused across workflows by mistake
 * does not hand its caller another workflow's run and result. 0 when the run is wf's. */
static int key_of_other(mend_engine *E, const char *workflow, const char *run_key,
                        const char *id, char *err, int errlen) {
  json_t *run = mend_store_run(E->store, id);
  if (!run) {
    E->refusal = MEND_REFUSED_STORE;
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    return -1;
  }
  const char *other = json_string_value(json_object_get(run, "workflow"));
  int rc = 0;
  if (!other || strcmp(other, workflow) != 0) {
    E->refusal = MEND_REFUSED_STATE;
    snprintf(err, (size_t)errlen, "run key %s names run %s, a run of workflow %s, not %s: a run "
             "key belongs to one workflow's run", run_key, id, other ? other : "?", workflow);
    rc = -1;
  }
  json_decref(run);
  return rc;
}

/* Whether what a start just wrote is in a batch kept for another process's lock (SQLite's
 * file lock; the batch committed once the lock goes): the start is then kept as the batch is,
 * and its caller must not send it again. PostgreSQL's writers wait for rows, not for a lock a
 * batch is kept for. */
static int in_batch_kept_for_lock(const mend_engine *E) {
  return mend_store_has_write_lock(E->store) && mend_engine_lock_held(E);
}

/* A start kept in the batch that waits for a lock: -1, MEND_REFUSED_DEFERRED, its run's id in
 * id_out, and err (the lock's message) told what that means for its caller. */
static int start_kept(mend_engine *E, const char id[MEND_RUN_ID_LEN], char *err, int errlen) {
  E->refusal = MEND_REFUSED_DEFERRED;
  size_t n = strlen(err);
  if ((int)n < errlen)
    snprintf(err + n, (size_t)errlen - n, "; run %s is started, kept until the lock goes and "
             "committed then: do not start it again", id);
  return -1;
}

static int start_value(mend_engine *E, lua_State *L, const char *workflow, int input_idx,
                       const char *run_key, const char *who, char id_out[MEND_RUN_ID_LEN],
                       int *existed, int detached, char *err, int errlen) {
  *existed = 0;
  /* A broken engine is one whose store failed (an engine whose Lua panicked is the C API's
   * MEND_EBROKEN before it gets here). */
  E->refusal = MEND_REFUSED_STORE;
  if (E->broken) { snprintf(err, (size_t)errlen, "%s", E->errmsg); return -1; }
  if (mend__batch_held(E, "start", err, errlen)) return -1;
  if (strlen(workflow) > MEND_NAME_MAX) {
    E->refusal = MEND_REFUSED_INVALID;
    snprintf(err, (size_t)errlen, "a workflow name of %zu bytes, over the longest name of %d "
             "bytes (MEND_NAME_MAX)", strlen(workflow), MEND_NAME_MAX);
    return -1;
  }
  if (run_key && !*run_key) {
    /* an unset shell variable (--key "$ORDER"): every such start would be one run */
    E->refusal = MEND_REFUSED_INVALID;
    snprintf(err, (size_t)errlen, "the run key is empty: give a key, or none");
    return -1;
  }
  if (run_key && strlen(run_key) > MEND_KEY_MAX) {
    E->refusal = MEND_REFUSED_INVALID;
    snprintf(err, (size_t)errlen, "a run key of %zu bytes, over the longest key of %d bytes "
             "(MEND_KEY_MAX)", strlen(run_key), MEND_KEY_MAX);
    return -1;
  }
  if (mend__text_refused(E, run_key, "the run key", err, errlen) ||
      mend__who_refused(E, who, err, errlen))
    return -1;
  mend_workflow *wf = mend_engine_workflow(E, workflow);
  if (!wf) {
    E->refusal = MEND_REFUSED_NOT_FOUND;
    snprintf(err, (size_t)errlen, "no workflow named \"%s\" is loaded", workflow);
    return -1;
  }
  input_idx = lua_absindex(L, input_idx);
  /* A start only recorded may leave its key to the batch that records it (a store that looks
   * it up there): it then waits for no lock here, and its caller hears the key's run once the
   * batch is durable (mend_engine_start_outcome). What is committed is looked at first. */
  int record = detached == MEND_START_RECORD;
  if (run_key) {
    int found = record
                    ? mend_store_find_run_key_committed(E->store, run_key, id_out, MEND_RUN_ID_LEN)
                    : mend_store_find_run_key(E->store, run_key, id_out, MEND_RUN_ID_LEN);
    if (found < 0) { snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store)); return -1; }
    if (found) {
      if (key_of_other(E, wf->name, run_key, id_out, err, errlen)) return -1;
      *existed = 1;
      return 0;
    }
  }
  char jerr[400];
  json_t *input_doc;
  char *input_json = mend_json_encode_doc(L, input_idx, "input", jerr, sizeof jerr, &input_doc);
  if (!input_json) {
    E->refusal = MEND_REFUSED_INVALID;
    snprintf(err, (size_t)errlen, "%s", jerr);
    return -1;
  }
  char id[MEND_RUN_ID_LEN];
  mend__new_run_id(E, id);
  double now = mend_engine_now(E);
  mend_run_rec rec = {id, wf->name, wf->version, wf->source, run_key, "running", input_json,
                      NULL, 0, now, now, detached ? NULL : E->owner, wf->step_names, wf->script,
                      record};
  int ins = mend_store_insert_run(E->store, &rec);
  /* Another process's write lock met as the insert was run (SQLite): the insert is kept in
   * the batch that waits for the lock and committed once it goes, so the run is made as any
   * other, and its caller told that it is kept (MEND_REFUSED_DEFERRED): a start without a key
   * sent again would be a second run. Anything else that met a lock recorded nothing of it. */
  int kept = ins == MEND_STORE_BUSY && in_batch_kept_for_lock(E);
  if (kept) {
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    mend__store_failed(E);   /* the lock's wait, the batch kept */
    ins = 0;
  } else if (ins == 0 && in_batch_kept_for_lock(E)) {
    /* Joined a batch already kept for a lock: kept as that batch is, and said so (an engine
     * freed while the lock lasts gives it up), not MEND_OK as if it would be written. */
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    kept = 1;
  }
  if (ins < 0) {
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    free(input_json);
    json_decref(input_doc);
    mend__store_failed(E);
    size_t n = strlen(err);
    if (mend_engine_lock_held(E) && (int)n < errlen)   /* MEND_REFUSED_BUSY: said so */
      snprintf(err + n, (size_t)errlen - n, "; nothing of this start was written: start it "
               "again once the lock goes");
    return -1;
  }
  if (ins == 1) {
    /* Another process took the key between our look and our insert: theirs is the run. */
    free(input_json);
    json_decref(input_doc);
    if (mend_store_find_run_key(E->store, run_key, id_out, MEND_RUN_ID_LEN) == 1) {
      if (key_of_other(E, wf->name, run_key, id_out, err, errlen)) return -1;
      *existed = 1;
      return 0;
    }
    snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    return -1;
  }
  if (ins == 2) *existed = MEND_START_KEY_LATER;
  else wf->counts.runs_started++;   /* a key found free later is counted by start_outcome */
  mend_run *r = mend__run_new(E, wf, id);
  mend__history(r, NULL, "run", NULL, "running", 0, NULL, -1, run_key);
  if (who) {   /* a row of its own: an `operator` row is a repair, which readers look for */
    char detail[400];
    snprintf(detail, sizeof detail, "by %s", who);
    mend__history(r, NULL, "started", NULL, NULL, 0, NULL, -1, detail);
  }
  /* The run's input is the JSON form, as a restarted engine will see it: the document the
   * text was printed from, not the text parsed again (5k instructions a start). */
  if (input_doc ? mend_json_push_doc(E->L, input_doc, jerr, sizeof jerr)
                : mend_json_decode(E->L, input_json, strlen(input_json), jerr, sizeof jerr))
    lua_pushnil(E->L);
  r->input_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  free(input_json);
  json_decref(input_doc);
  memcpy(id_out, r->id, MEND_RUN_ID_LEN);
  if (E->broken) { snprintf(err, (size_t)errlen, "%s", E->errmsg); return -1; }
  if (detached == MEND_START_RECORD) {
    /* Recorded for any worker to take; the caller waits for its batch. */
    mend__run_free(r);
    return 0;
  }
  if (detached) {
    /* Recorded for any worker to take; durable before the caller hears the id. A SQLite
     * commit that waited out its busy wait keeps the batch, this start in it. */
    if (kept || mend__commit_now(E)) {
      if (!kept) snprintf(err, (size_t)errlen, "%s", E->errmsg);
      kept = kept || in_batch_kept_for_lock(E);
      mend__run_free(r);
      return kept ? start_kept(E, id_out, err, errlen) : -1;
    }
    mend__run_free(r);
    return 0;
  }
  mend_engine_log_line(E, "info", r->id, NULL, 0, "run", "started");
  /* Its first step's `running` joins the batch of its start: one commit less before the
   * first execute. */
  mend__queue_now(r, ACT_ADVANCE);
  return kept ? start_kept(E, id_out, err, errlen) : 0;
}

int mend_engine_start_outcome(mend_engine *E, const char *workflow, const char *run_key,
                              const char *recorded, char id_out[MEND_RUN_ID_LEN], int *existed,
                              char *err, int errlen) {
  *existed = 0;
  E->refusal = MEND_REFUSED_STORE;
  int found = mend_store_find_run_key_committed(E->store, run_key, id_out, MEND_RUN_ID_LEN);
  if (found <= 0) {
    if (found < 0) snprintf(err, (size_t)errlen, "%s", mend_store_errmsg(E->store));
    else snprintf(err, (size_t)errlen, "the start of run key %s is not recorded", run_key);
    return -1;
  }
  /* The key was another's as the batch was written: its run, unless of another workflow. */
  *existed = strcmp(id_out, recorded) != 0;
  if (*existed) return key_of_other(E, workflow, run_key, id_out, err, errlen);
  mend_workflow *wf = mend_engine_workflow(E, workflow);
  if (wf) wf->counts.runs_started++;
  return 0;
}

int mend_engine_start_json(mend_engine *E, const char *workflow, const char *input_json,
                           const char *run_key, const char *who, char id_out[MEND_RUN_ID_LEN],
                           int *existed, char *err, int errlen) {
  lua_State *L = E->L;
  char jerr[200];
  if (mend_json_decode_in(L, input_json ? input_json : "null", input_json ? strlen(input_json) : 4,
                          jerr, sizeof jerr)) {
    snprintf(err, (size_t)errlen, "the input is not JSON: %s", jerr);
    E->refusal = MEND_REFUSED_INVALID;
    return -1;
  }
  int rc = mend_engine_start_value(E, L, workflow, -1, run_key, who, id_out, existed, 0, err,
                                   errlen);
  lua_pop(L, 1);
  return rc;
}

/* ---------------------------------------------------------------- letting runs go */

void mend__run_free(mend_run *r) {
  if (r->lane) {   /* a lane whose run is gone, dropped from the queue */
    mend__lane_free(r);
    return;
  }
  mend_engine *E = r->E;
  mend__group_free(r);
  mend__unthrottle(r);
  mend__park_unlist(r);
  mend__end_attempt(r);
  mend_timer_disarm(&E->timers, &r->wait);
  mend_refs_drop(&E->refs, E->L, r->input_ref);
  mend_refs_drop(&E->refs, E->L, r->results_ref);
  for (int i = 0; i < r->wf->nsteps; i++) {
    free(r->steps[i].idem_key);
    free(r->steps[i].result);
    free(r->steps[i].error);
  }
  free(r->error);
  if (r->cold) {
    free(r->cold->http_detail);
    free(r->cold->cancel_by);
  }
  free(r->cold);
  mend__runmap_remove(E, r);
  if (r->prev) r->prev->next = r->next;
  else E->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  E->in_flight--;
  free(r);
}

struct mend_run_cold *mend__run_cold(mend_run *r) {
  if (!r->cold) r->cold = calloc(1, sizeof *r->cold);
  return r->cold;
}

void mend__run_cold_trim(mend_run *r) {
  struct mend_run_cold *c = r->cold;
  if (c && !r->lane && !c->exec && !c->http && !c->http_detail && !c->host_call && !c->group &&
      !c->parent && !c->item_name && !c->item && !c->row_base && !c->cancel_by) {
    free(c);
    r->cold = NULL;
  }
}

/* A run leaving its step before the attempt ends (cancelled, or let go): a concurrency slot
 * it was woken for is passed on, and a half-open probe it made is given back. */
void mend__give_back(mend_run *r, int was_queued, int was_running) {
  mend_engine *E = r->E;
  int i = r->cur;
  if (i < 0 || i >= r->wf->nsteps) return;
  struct mend_breaker_slot *slot = r->wf->steps[i].slot;
  if (!slot) return;   /* a group or a map: its lanes' slots are theirs to give back */
  if (was_queued && (r->next_action == ACT_EXECUTE || r->next_action == ACT_COMPENSATE)) {
    mend_run *next = mend__fifo_pop(&slot->waiting);
    if (!next) next = mend__fifo_pop(&E->throttled);
    if (next) mend__admit_next(next);
  }
  if (was_running && r->steps[i].probe) {
    if (mend__holds_probe(r, i)) mend_breaker_release(&slot->b);
    r->steps[i].probe = 0;
  }
}

/* Frees a run this engine lets go of (another worker took it). */
void mend__drop_run(mend_run *r, int was_queued) {
  mend__give_back(r, was_queued, r->co != NULL);
  mend__run_free(r);
}
