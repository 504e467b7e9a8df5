/*
 * child: steps that start a run of another workflow and wait for its end (`child = "name"`,
 * issue 18). Owns starting the child (idempotently: its run key is "<parent id>/<step>", or
 * "<parent id>/<step>/<n>" for the n-th after children that ended without success, and the
 * link to its parent is written in the batch that starts it), telling the parent of the
 * child's end (an event named mend.child:<step> in the parent's inbox, so that a parent held
 * anywhere, or by nobody, learns of it as of any event, and each of a group's branches finds
 * its own child's), taking that outcome as the step's,
 * compensating a child that succeeded when its parent compensates (the child run is reopened
 * and its own saga reversed: its history tells it), and cancelling a running child with its
 * parent; it bounds how deep children nest (MEND_CHILD_DEPTH_MAX). Must never: start two
 * children for one start of a step; start one past that depth; take a child's outcome outside the
 * batch that records the step's end; keep a coroutine for a waiting parent.
 */
#include "engine_int.h"

#include <mend.h>

#include <jansson.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "util.h"

#define CHILD_EVENT "mend.child"   /* ends stored before they were named by step */
#define UNDO_REASON "parent_compensated"

static mend_run *find_run(mend_engine *E, const char *id) {
  for (mend_run *r = E->runs; r; r = r->next)
    if (!r->lost && strcmp(r->id, id) == 0) return r;
  return NULL;
}

static void child_event(const char *step, char *out, size_t len) {
  snprintf(out, len, "%s:%s", CHILD_EVENT, step);
}

/* A step starts a child again only after its last one ended without success (a branch its
 * group stopped, run again from the dead-letter queue): each such child has a key of its own,
 * "<parent id>/<step>/<n>" from the second on, so that the new one is not taken for the old
 * one, whose end the step had heard already. A run holding such a key counts as the step's
 * child only if it is linked to the step (a run started by hand with it, or another step's
 * whose name ends in "/<n>", is passed over); the first key's run is the step's either way
 * (one started by hand with it is adopted). */
#define CHILD_GENERATIONS_MAX 1000

/* 0, or -1 if the key would be longer than a run key may be. */
static int child_key(mend_run *r, int i, int gen, char out[MEND_KEY_MAX + 1]) {
  int n = gen <= 1 ? snprintf(out, MEND_KEY_MAX + 1, "%s/%s", r->id, mend__step_name(r, i))
                   : snprintf(out, MEND_KEY_MAX + 1, "%s/%s/%d", r->id, mend__step_name(r, i), gen);
  return n < 0 || n > MEND_KEY_MAX ? -1 : 0;
}

/* Run `id`'s link to its parent: 1 step i of r is its parent, 2 another step of r is, 0 none
 * of r's (no link: a run started by hand), -1 error; *unwell: step i's child ended without
 * success (not in the dead-letter queue, where a person may retry it; one that succeeded is
 * the step's outcome). */
static int linked(mend_run *r, int i, const char *id, int *unwell) {
  json_t *row = mend_store_run(r->E->store, id);
  if (!row) return -1;
  const char *parent = json_string_value(json_object_get(row, "parent_run"));
  const char *pstep = json_string_value(json_object_get(row, "parent_step"));
  const char *status = json_string_value(json_object_get(row, "status"));
  mend_run_status rs;
  int owner = !parent || strcmp(parent, r->id) != 0                  ? 0
              : pstep && strcmp(pstep, r->wf->steps[i].name) == 0 ? 1
                                                                    : 2;
  *unwell = owner == 1 && status && mend_run_status_parse(status, &rs) == 0 &&
            mend_run_status_final(rs) && rs != MEND_RUN_NEEDS_ATTENTION &&
            rs != MEND_RUN_SUCCEEDED;
  json_decref(row);
  return owner;
}

/* The id of step i's child, its newest if the step started more than one: 1, 0 none, -1
 * error (the store failed). */
static int child_of(mend_run *r, int i, char id[MEND_RUN_ID_LEN]) {
  int found = 0;
  for (int gen = 1; gen <= CHILD_GENERATIONS_MAX; gen++) {
    char key[MEND_KEY_MAX + 1], got[MEND_RUN_ID_LEN];
    if (child_key(r, i, gen, key)) break;
    int f = mend_store_find_run_key(r->E->store, key, got, MEND_RUN_ID_LEN), unwell = 0;
    int owner = f == 1 ? linked(r, i, got, &unwell) : 0;
    if (f < 0 || owner < 0) {
      mend__store_failed(r->E);
      return -1;
    }
    if (f == 0) break;
    if (owner != 1) continue;
    memcpy(id, got, MEND_RUN_ID_LEN);
    found = 1;
  }
  return found;
}

/* The key step i starts its child with: the first one free, or that of a child the step
 * started and may still hear the end of. 0; -1 with msg set (the store failed: msg empty). */
static int start_key(mend_run *r, int i, char key[MEND_KEY_MAX + 1], char *msg, size_t len) {
  msg[0] = 0;
  for (int gen = 1; gen <= CHILD_GENERATIONS_MAX; gen++) {
    char id[MEND_RUN_ID_LEN];
    if (child_key(r, i, gen, key)) {
      snprintf(msg, len, "the child's run key (the run's id, the step's name%s) would be longer "
               "than a run key may be (%d bytes, MEND_KEY_MAX)", gen > 1 ? ", its number" : "",
               MEND_KEY_MAX);
      return -1;
    }
    int f = mend_store_find_run_key(r->E->store, key, id, MEND_RUN_ID_LEN), unwell = 0;
    int owner = f == 1 ? linked(r, i, id, &unwell) : 0;
    if (f < 0 || owner < 0) {
      mend__store_failed(r->E);
      return -1;
    }
    /* free; the first key's run started by hand, adopted; or the step's own, to wait for */
    if (f == 0 || (gen == 1 && owner == 0) || (owner == 1 && !unwell)) return 0;
  }
  snprintf(msg, len, "the step started %d child runs, each ended without success: no more are "
           "started (resolve the run, or cancel it)", CHILD_GENERATIONS_MAX);
  return -1;
}

static void ended_before(mend_engine *E, const char *id);

static void fail_now(mend_run *r, mend_error_kind kind, const char *msg) {
  mend_error_info info = {kind, msg, -1, 0, 0};
  mend__attempt_done(r, 0, &info, NULL);
}

/* Step i, pending, starts its child and waits for it. The child's input is input(ctx)'s
 * answer, or the parent's own input. */
/* A child's workflow that no file here loads: the newest version the database keeps, as a run
 * of a version whose file is not here is carried on from its kept script (a worker serving
 * another directory than the one that started the parent). None kept (or it does not load):
 * the start then fails, naming the workflow. Before the step's own Lua: it loads a file's
 * top level on the engine's state. */
static void load_kept_child(mend_engine *E, const char *name) {
  if (mend_engine_workflow(E, name)) return;
  json_t *versions = mend_store_workflows(E->store, name);
  size_t k;
  json_t *v;
  json_array_foreach(versions, k, v) {
    const char *wf = json_string_value(json_object_get(v, "workflow"));
    const char *version = json_string_value(json_object_get(v, "version"));
    if (!wf || strcmp(wf, name) != 0 || !version || !json_is_true(json_object_get(v, "kept")))
      continue;
    char err[400];
    if (!mend_engine_load_version(E, name, version, err, sizeof err))
      mend_engine_log_line(E, "warn", NULL, NULL, 0, "child", err);
    break;   /* the newest kept one, or none */
  }
  json_decref(versions);
}

/* Refuses a child that would nest deeper than MEND_CHILD_DEPTH_MAX: the chain of its parents
 * is walked up in the store (a parent may be held by another worker). 1: refused, msg the
 * fatal error naming the depth and the chain (root first); 0: it may start. */
static int too_deep(mend_run *r, const char *child, char *msg, size_t len) {
  mend_engine *E = r->E;
  const char *names[MEND_CHILD_DEPTH_MAX + 1];
  json_t *rows[MEND_CHILD_DEPTH_MAX + 1];
  int n = 0;
  char id[MEND_RUN_ID_LEN];
  snprintf(id, sizeof id, "%s", mend__root(r)->id);
  while (n <= MEND_CHILD_DEPTH_MAX) {
    json_t *row = mend_store_run(E->store, id);
    if (!row) break;   /* a store failure is the start's to meet */
    rows[n] = row;
    const char *wf = json_string_value(json_object_get(row, "workflow"));
    names[n++] = wf ? wf : "?";
    const char *up = json_string_value(json_object_get(row, "parent_run"));
    if (!up) break;
    snprintf(id, sizeof id, "%s", up);
  }
  int refused = n > MEND_CHILD_DEPTH_MAX;   /* the child would be at depth n */
  if (refused) {
    int w = snprintf(msg, len, "child %s refused: it would be at depth %d of child runs, past the "
                     "bound of %d (chain: ", child, n, MEND_CHILD_DEPTH_MAX);
    /* the chain root first; a long one keeps its two ends */
    for (int k = n - 1; k >= 0 && w >= 0 && (size_t)w < len; k--) {
      if (k < n - 3 && k > 2) {
        if (k == n - 4) w += snprintf(msg + w, len - (size_t)w, "... -> ");
        continue;
      }
      w += snprintf(msg + w, len - (size_t)w, "%s -> ", names[k]);
    }
    if (w >= 0 && (size_t)w < len) snprintf(msg + w, len - (size_t)w, "%s)", child);
  }
  for (int k = 0; k < n; k++) json_decref(rows[k]);
  return refused;
}

void mend__start_child(mend_run *r, int i) {
  mend_engine *E = r->E;
  lua_State *L = E->L;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  st->attempts++;
  st->due = -1;
  mend__step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
  char deep[900];
  if (too_deep(r, def->child, deep, sizeof deep)) {
    fail_now(r, MEND_ERR_FATAL, deep);
    return;
  }
  load_kept_child(E, def->child);
  if (def->child_input_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, def->child_input_ref);
    mend__push_ctx(r, i);
    mend_limits lim;
    mend_limits_init(&lim, "input", E->cfg.instruction_budget, CALL_SECONDS);
    int status = mend__run_pcall(r, &lim, 1, 1);
    if (mend__land_kept_cancel(r)) {   /* it cancelled its parent: its answer is void */
      lua_pop(L, 1);
      return;
    }
    if (status != LUA_OK) {
      /* an attempt that failed as what input raised says: a retryable one is retried */
      mend_error_info info;
      mend__call_failed(r, st, &lim, status, &info);
      mend__attempt_done(r, 0, &info, NULL);
      return;
    }
  } else {
    mend_refs_push(&E->refs, L, r->input_ref);
  }
  char key[MEND_KEY_MAX + 1], id[MEND_RUN_ID_LEN], err[600];
  if (start_key(r, i, key, err, sizeof err)) {
    lua_pop(L, 1);
    if (err[0]) fail_now(r, MEND_ERR_FATAL, err);
    return;
  }
  int existed = 0;
  mend_run *head = E->runs;
  int rc = mend_engine_start_value(E, L, def->child, -1, key, NULL, id, &existed, 0, err,
                                   sizeof err);
  lua_pop(L, 1);
  if (rc) {
    char msg[800];
    snprintf(msg, sizeof msg, "child %s could not start: %s", def->child, err);
    fail_now(r, MEND_ERR_FATAL, msg);
    return;
  }
  if (E->runs != head && E->runs && strcmp(E->runs->id, id) == 0) E->runs->is_child = 1;
  else if (find_run(E, id)) find_run(E, id)->is_child = 1;   /* started here before */
  if (mend_store_set_parent(E->store, id, r->id, def->name)) mend__store_failed(E);
  char detail[300];
  snprintf(detail, sizeof detail, "child run %s (%s)%s", id, def->child,
           existed ? ", started before" : "");
  mend__step_to(r, i, MEND_STEP_WAITING, NULL, -1, detail);
  r->wait_kind = WAIT_EVENT;
  mend__park_soon(r);   /* a child may take days: its parent waits out of memory meanwhile */
  if (existed) ended_before(E, id);
  if (mend__take_child(r, i)) return;
  /* a branch found running after a restart, its group failed for good meanwhile */
  if (mend__group_stopping(r) && r->cur == i && st->status == MEND_STEP_WAITING)
    mend__stop_child(r, i);
}

/* Puts a child's end in its parent's inbox, in this batch, and wakes the parent when it is
 * held here and waits for it. row: the child's stored run (its links); seq: its history's
 * length at this end, which makes the event's key (one event an end: a child retried from the
 * dead-letter queue ends again); results: a JSON object (taken), or NULL. What the end means
 * is the parent's to say, by where it stands (take_child). */
static void tell_parent(mend_engine *E, const char *id, json_t *row, const char *status,
                        long seq, const char *error, json_t *results) {
  const char *parent = json_string_value(json_object_get(row, "parent_run"));
  const char *pstep = json_string_value(json_object_get(row, "parent_step"));
  if (!parent || !pstep) {
    json_decref(results);
    return;
  }
  json_t *p = json_pack("{s:s, s:s, s:s, s:s?, s:o}", "child", id, "step", pstep,
                        "status", status, "error", error,
                        "results", results ? results : json_object());
  char *text = p ? json_dumps(p, JSON_COMPACT) : NULL;
  json_decref(p);
  char key[MEND_RUN_ID_LEN + 48], name[300];
  snprintf(key, sizeof key, "%s/%ld", id, seq);
  child_event(pstep, name, sizeof name);
  if (!text || mend_store_child_end(E->store, id, name, text, key, mend_engine_now(E)))
    mend__store_failed(E);
  free(text);
  mend_run *pr = find_run(E, parent);
  if (!pr && mend__unpark(E, parent, "its child run ended") > 0) pr = find_run(E, parent);
  if (pr) mend__wake_waiting(pr, name);   /* the step, or the branch, that waits for it */
}

/* A run of this key existed before the step started it (a run started by hand with the key):
 * if it has ended already, no end of it will come to say so. */
static void ended_before(mend_engine *E, const char *id) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) {
    mend__store_failed(E);
    return;
  }
  const char *status = json_string_value(json_object_get(row, "status"));
  mend_run_status rs;
  if (status && mend_run_status_parse(status, &rs) == 0 && mend_run_status_final(rs) &&
      rs != MEND_RUN_NEEDS_ATTENTION) {
    json_t *results = json_object();
    size_t k;
    json_t *s;
    json_array_foreach(json_object_get(row, "steps"), k, s) {
      const char *name = json_string_value(json_object_get(s, "name"));
      json_t *v = json_object_get(s, "result");
      if (name) json_object_set(results, name, v ? v : json_null());
    }
    long seq = mend_store_last_history(E->store, id, NULL);
    tell_parent(E, id, row, status, seq, json_string_value(json_object_get(row, "error")),
                rs == MEND_RUN_SUCCEEDED ? results : NULL);
    if (rs != MEND_RUN_SUCCEEDED) json_decref(results);
  }
  json_decref(row);
}

/* The child run r reached `to`, an end (the dead-letter queue too): its parent hears of it. */
void mend__child_ended(mend_run *r, mend_run_status to) {
  mend_engine *E = r->E;
  json_t *row = mend_store_run(E->store, r->id);
  if (!row) {
    mend__store_failed(E);
    return;
  }
  json_t *results = json_object();
  for (int i = 0; to == MEND_RUN_SUCCEEDED && i < r->wf->nsteps; i++) {
    json_t *v = r->steps[i].result ? json_loads(r->steps[i].result, JSON_DECODE_ANY, NULL) : NULL;
    json_object_set_new(results, mend__step_name(r, i), v ? v : json_null());
  }
  tell_parent(E, r->id, row, mend_run_status_name(to), r->history_seq, r->error, results);
  json_decref(row);
}

/* A person resolved child run `id` by hand (it was in the dead-letter queue): going forward
 * its parent's step fails; a compensation settled by hand counts as done. */
void mend__child_resolved(mend_engine *E, const char *id, int rows) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) {
    mend__store_failed(E);
    return;
  }
  /* Read as a view (no wait for another process's lock): the rows the resolve recorded come
   * after the committed ones, and the key is the history's length with them. */
  int committed;
  long seq = mend_store_last_history_view(E->store, id, NULL, &committed);
  if (seq >= 0 && committed) seq += rows;
  tell_parent(E, id, row, "resolved", seq, json_string_value(json_object_get(row, "error")), NULL);
  json_decref(row);
}

/* The outcome of step i's child, from the inbox, when it is there: 1 taken (in this batch), 0
 * not yet. Going forward the step waits for the child's end: succeeded gives the result;
 * compensated, failed or resolved fail the step; the dead-letter queue is no end yet (a
 * person may retry it). Going back, for the end of its undoing: compensated (or resolved by a
 * person, or failed with nothing done) is done, the dead-letter queue a compensation that
 * failed. Anything else (an end of another step's child, or of one cancelled) is consumed and
 * passed over. */
static void reopen_child(mend_run *r, int i, const char *id);

int mend__take_child(mend_run *r, int i) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  int forward = r->status == MEND_RUN_RUNNING && st->status == MEND_STEP_WAITING;
  int back = r->status == MEND_RUN_COMPENSATING && st->status == MEND_STEP_COMPENSATING;
  if (!forward && !back) return 0;
  char name[300];
  child_event(def->name, name, sizeof name);
  for (;;) {
    long long seq;
    char *payload, *key;
    int found = mend_store_next_event(E->store, r->id, name, &seq, &payload, &key);
    /* one stored under the old name, for the one step waiting */
    if (found == 0 && def->group < 0)
      found = mend_store_next_event(E->store, r->id, CHILD_EVENT, &seq, &payload, &key);
    if (found < 0) mend__store_failed(E);
    if (found <= 0) return 0;
    free(key);
    if (mend_store_consume_event(E->store, r->id, seq, def->name, mend_engine_now(E)))
      mend__store_failed(E);
    json_t *p = json_loads(payload, 0, NULL);
    free(payload);
    const char *step = json_string_value(json_object_get(p, "step"));
    const char *child = json_string_value(json_object_get(p, "child"));
    const char *status = json_string_value(json_object_get(p, "status"));
    /* Going back, a child that failed had nothing to undo: it was cancelled with its parent
     * before any of its steps succeeded (one that succeeded is reopened, and ends compensated
     * or in the dead-letter queue). */
    int done = status && (strcmp(status, "compensated") == 0 || strcmp(status, "resolved") == 0 ||
                          (back && strcmp(status, "failed") == 0));
    int relevant = status && (forward ? strcmp(status, "needs_attention") != 0
                                      : strcmp(status, "succeeded") != 0);
    if (back && p && step && child && status && strcmp(status, "succeeded") == 0 &&
        strcmp(step, def->name) == 0) {
      /* The child ended well after the parent began going back (it sat in the dead-letter
       * queue and a person retried it, or a worker elsewhere finished it as the cancel came):
       * its undoing starts now, and the step waits for that end. */
      char id[MEND_RUN_ID_LEN];
      if (child_of(r, i, id) > 0 && strcmp(id, child) == 0) reopen_child(r, i, id);
      json_decref(p);
      continue;
    }
    if (!p || !step || !relevant || strcmp(step, def->name) != 0) {
      json_decref(p);
      continue;
    }
    r->wait_kind = WAIT_NONE;
    char detail[300];
    snprintf(detail, sizeof detail, "child run %s %s", child ? child : "?", status);
    mend__history(r, def->name, "child", NULL, NULL, back ? st->comp_attempts : st->attempts,
                  NULL, -1, detail);
    const char *error = json_string_value(json_object_get(p, "error"));
    char msg[900];
    snprintf(msg, sizeof msg, "child run %s %s%s%s", child ? child : "?", status,
             error ? ": " : "", error ? error : "");
    if (forward && strcmp(status, "succeeded") == 0) {
      char *text = json_dumps(json_object_get(p, "results"), JSON_COMPACT);
      mend__attempt_done(r, 1, NULL, text ? text : "{}");
      free(text);
    } else if (forward) {
      fail_now(r, MEND_ERR_FATAL, msg);
    } else if (done) {
      mend__attempt_done(r, 1, NULL, NULL);
    } else {
      /* The child's own compensation failed: retrying here would change nothing that its
       * dead letter does not say better. */
      st->comp_attempts = def->compensate_retry.max_attempts;
      mend_error_info info = {MEND_ERR_ERROR, msg, -1, 0, 0};
      mend__attempt_done(r, 0, &info, NULL);
    }
    json_decref(p);
    return 1;
  }
}

/* Step i's child `id`, if it succeeded, is reopened to reverse its own saga: here when its
 * workflow is loaded here, else by whichever worker takes it. One not (yet) succeeded is left
 * as it is: a store's reopen takes a succeeded run only. */
static void reopen_child(mend_run *r, int i, const char *id) {
  mend_engine *E = r->E;
  /* A copy here that ended is one about to be let go (its last action queued): the store's
   * run is the one reopened. One still going is being undone already. */
  mend_run *here = find_run(E, id);
  if (!here || mend_run_status_final(here->status)) {
    int reopened = mend_store_reopen_run(E->store, id, UNDO_REASON, NULL, mend_engine_now(E));
    if (reopened < 0) mend__store_failed(E);
    if (reopened == 1) {
      char detail[300];
      snprintf(detail, sizeof detail, "compensated with its parent %s (step %s)", r->id,
               mend__step_name(r, i));
      mend_history_rec h = {id, NULL, mend__history_time(r), "run", "succeeded", "compensating",
                            0, NULL, -1, detail, 0, NULL};
      if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
      char why[400];
      mend_run *c = mend__rebuild(E, id, why, sizeof why, NULL);
      if (c) {
        c->is_child = 1;
        if (mend_store_take(E->store, id, E->owner, mend__lease_until(E))) mend__store_failed(E);
        mend__carry_on(c);
      } else {
        /* Not loaded here: nobody's, for any worker that can to take. */
        mend_engine_log_line(E, "warn", id, NULL, 0, "child", why);
      }
    }
  }
}

/* Step i's child succeeded and the parent compensates: the child is reopened (reopen_child).
 * The step stays compensating until the child's undoing ends. */
void mend__undo_child(mend_run *r, int i) {
  char id[MEND_RUN_ID_LEN];
  int f = child_of(r, i, id);
  if (f <= 0) {
    mend__attempt_done(r, 1, NULL, NULL);   /* nothing was started: nothing to undo */
    return;
  }
  r->wait_kind = WAIT_EVENT;
  reopen_child(r, i, id);
  mend__take_child(r, i);
}

/* The parent r was cancelled while step i waited for its child: the child is cancelled too
 * (here, or asked of the worker that holds it). */
void mend__cancel_child(mend_run *r, int i, const char *who) {
  char id[MEND_RUN_ID_LEN], err[600], by[300];
  if (child_of(r, i, id) <= 0) return;
  snprintf(by, sizeof by, "%s (its parent %s was cancelled)", who ? who : "?", r->id);
  if (mend__cancel_cascade(r->E, id, by, err, sizeof err) < 0)
    mend_engine_log_line(r->E, "warn", id, NULL, 0, "child", err);
}

/* Branch i of a group that failed for good waits for its child: the child is cancelled, as
 * for a cancelled parent, and the branch waits for its end (a success that came first is
 * compensated with the group; a cancelled child undoes itself and fails the branch). */
void mend__stop_child(mend_run *lane, int i) {
  lane->wait_kind = WAIT_EVENT;
  if (mend__take_child(lane, i)) return;
  char id[MEND_RUN_ID_LEN], err[600], by[300];
  if (child_of(lane, i, id) <= 0) return;
  json_t *row = mend_store_run(lane->E->store, id);
  const char *status = row ? json_string_value(json_object_get(row, "status")) : NULL;
  int running = status && strcmp(status, "running") == 0;
  json_decref(row);
  if (!running) return;   /* ending already (a restart found it so): its end is on its way */
  snprintf(by, sizeof by, "run %s (its group %s failed for good)", lane->id,
           lane->wf->steps[lane->wf->steps[i].group].name);
  if (mend__cancel_cascade(lane->E, id, by, err, sizeof err) < 0)
    mend_engine_log_line(lane->E, "warn", id, NULL, 0, "child", err);
}

json_t *mend_engine_children(mend_engine *E, const char *id) {
  return mend_store_children(E->store, id);
}
