/*
 * admit: may an attempt start now. Owns the breaker slots of an engine (one per breaker key:
 * the breaker's state, its half-open probes, max_concurrency and the attempts waiting for it)
 * and the engine-wide concurrency cap, first come first served. Must never: let an attempt
 * through a breaker that refuses it; lose a waiting attempt when a slot comes free.
 */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

/* ---------------------------------------------------------------- concurrency caps */

void mend__fifo_push(run_fifo *f, mend_run *r) {
  r->tnext = NULL;
  r->waiting_in = f;
  if (f->tail) f->tail->tnext = r;
  else f->head = r;
  f->tail = r;
}

mend_run *mend__fifo_pop(run_fifo *f) {
  mend_run *r = f->head;
  if (!r) return NULL;
  f->head = r->tnext;
  if (!f->head) f->tail = NULL;
  r->waiting_in = NULL;
  return r;
}

/* A run taken from a concurrency queue starts its call in this turn or the next, not behind
 * the open batch: that batch holds others' writes (the success of the attempt that freed the
 * slot), not its own. Its own last transition was durable before its action came up (it
 * queued from do_action) and it writes nothing while it waits (a cancel takes it out first),
 * so the write-ahead rule holds without a commit between two requests of a breaker. */
void mend__admit_next(mend_run *r) {
  if (r->wait_seq <= mend_store_durable_seq(r->E->store)) mend__queue_now(r, r->next_action);
  else mend__queue(r, r->next_action);
}

/* ---------------------------------------------------------------- breakers */

/* The store's row of slot s: its state as the store keeps it, or a closed breaker recorded
 * now (known from then on, so that people can list it and override it). */
static void list_slot(mend_engine *E, struct mend_breaker_slot *s) {
  s->listed = 1;
  int found = mend_store_get_breaker(E->store, s->key, &s->b);
  if (found <= 0) {
    mend_breaker_init(&s->b);
    if (found == 0 && mend_store_put_breaker(E->store, s->key, &s->b, mend_engine_now(E)))
      mend__store_failed(E);
  }
}

struct mend_breaker_slot *mend__breaker_slot(mend_engine *E, const char *key,
                                              const mend_breaker_policy *p, int executes) {
  struct mend_breaker_slot *s = E->breakers;
  while (s && strcmp(s->key, key) != 0) s = s->next;
  if (!s) {
    s = calloc(1, sizeof *s);
    s->key = mend_dupstr(key);
    s->p = *p;
    mend_breaker_init(&s->b);
    s->next = E->breakers;
    E->breakers = s;
  }
  if (executes && !s->listed) list_slot(E, s);
  return s;
}

/* Persists a breaker whose state moved, and tells the history of the run that moved it. */
void mend__breaker_changed(mend_run *r, int i, mend_breaker_state before) {
  struct mend_breaker_slot *s = r->wf->steps[i].slot;
  s->spell++;
  if (mend_store_put_breaker(r->E->store, s->key, &s->b, mend_engine_now(r->E)))
    mend__store_failed(r->E);
  mend__history(r, mend__step_name(r, i), "breaker", mend_breaker_state_name(before),
          mend_breaker_state_name(s->b.state), r->steps[i].attempts, NULL, -1, s->key);
  char msg[300];
  snprintf(msg, sizeof msg, "breaker %s: %s -> %s", s->key, mend_breaker_state_name(before),
           mend_breaker_state_name(s->b.state));
  mend_engine_log_line(r->E, "warn", r->id, mend__step_name(r, i), r->steps[i].attempts, "breaker",
                       msg);
  mend__emit(r->E, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "breaker_changed", "key", s->key,
                       "from", mend_breaker_state_name(before), "to",
                       mend_breaker_state_name(s->b.state), "run_id", r->id));
}

int mend__holds_probe(mend_run *r, int i) {
  const step_rt *st = &r->steps[i];
  const struct mend_breaker_slot *s = r->wf->steps[i].slot;
  return st->probe && s->b.state == MEND_BREAKER_HALF_OPEN &&
         st->probe_spell == (s->spell & 0xfffu);
}

void mend__breaker_outcome(mend_run *r, int i, mend_breaker_outcome outcome) {
  struct mend_breaker_slot *s = r->wf->steps[i].slot;
  if (!s) return;   /* a group's or a map's when that failed: it asked no breaker */
  /* An attempt admitted before the breaker opened, ending while it is half-open, is no probe:
   * it has no slot to give back (giving one would let a second probe in beside the first),
   * and the breaker judged the dependency when it opened, as for a late outcome while open. */
  if (s->b.state == MEND_BREAKER_HALF_OPEN && !mend__holds_probe(r, i)) {
    r->steps[i].probe = 0;
    return;
  }
  r->steps[i].probe = 0;
  mend_breaker before = s->b;
  int changed = mend_breaker_record(&s->b, &s->p, mend_engine_now(r->E), outcome);
  if (changed) mend__breaker_changed(r, i, before.state);
  else if (before.failures != s->b.failures || before.successes != s->b.successes) {
    if (mend_store_put_breaker(r->E->store, s->key, &s->b, mend_engine_now(r->E)))
      mend__store_failed(r->E);
  }
}
