/*
 * override: a breaker set by hand (SPEC section 8: reset, open, close), from the command line,
 * the HTTP API or a host, recorded in the audit table with who did it; and the breakers other
 * processes changed, read back by a serving engine. Must never: change a breaker's counts but
 * as the operation says; answer a recorded override before its batch is durable.
 */
#include "engine_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

/* Overrides recorded in a batch not yet durable, which the view does not show yet. */
struct mend_breaker_recorded {
  char *key;
  mend_breaker_state state;
  unsigned long seq;   /* the batch that holds it */
  struct mend_breaker_recorded *next;
};

/* Forgets the recorded overrides whose batch is durable (committed rows show them), or all. */
void mend__breakers_recorded_drop(mend_engine *E, int all) {
  unsigned long durable = all || !E->store ? 0 : mend_store_durable_seq(E->store);
  for (struct mend_breaker_recorded **at = &E->breakers_recorded, *x; (x = *at);) {
    if (all || x->seq <= durable) {
      *at = x->next;
      free(x->key);
      free(x);
    } else {
      at = &x->next;
    }
  }
}

static void note_recorded(mend_engine *E, const char *key, mend_breaker_state state) {
  struct mend_breaker_recorded *x = E->breakers_recorded;
  while (x && strcmp(x->key, key) != 0) x = x->next;
  if (!x) {
    x = calloc(1, sizeof *x);
    if (!x || !(x->key = strdup(key))) {   /* out of memory: only an audit's "before" is lost */
      free(x);
      return;
    }
    x->next = E->breakers_recorded;
    E->breakers_recorded = x;
  }
  x->state = state;
  x->seq = mend_store_open_seq(E->store);
}

/* A breaker's state as committed, from the view (which waits for no lock): 1 and its state, 0
 * none, -1 error. Only the state: an override keeps nothing else of it. */
static int committed_breaker(mend_engine *E, const char *key, mend_breaker *b) {
  json_t *list = mend_store_breakers(E->store);
  if (!list) return -1;
  int found = 0;
  size_t i;
  json_t *row;
  json_array_foreach(list, i, row) {
    const char *k = json_string_value(json_object_get(row, "key"));
    const char *state = json_string_value(json_object_get(row, "state"));
    if (!k || strcmp(k, key) != 0) continue;
    mend_breaker_init(b);
    found = state && mend_breaker_state_parse(state, &b->state) == 0;
    break;
  }
  json_decref(list);
  /* An override of ours not committed yet is the state the next one changes. */
  mend__breakers_recorded_drop(E, 0);
  for (struct mend_breaker_recorded *x = E->breakers_recorded; found && x; x = x->next)
    if (strcmp(x->key, key) == 0) b->state = x->state;
  return found;
}

static int breaker_set(mend_engine *E, const char *key, const char *op, double seconds,
                       const char *who, mend_breaker_state *state_out, int record, char *err,
                       int errlen) {
  if (mend__text_refused(E, key, "the breaker's key", err, errlen) ||
      mend__who_refused(E, who, err, errlen))
    return -1;
  E->refusal = MEND_REFUSED_INVALID;
  /* inf would open it for ever (no half-open, no probe) and NaN fall to the policy unseen:
   * both are a host's mistake, refused as the CLI and the HTTP API refuse them */
  if (strcmp(op, "open") == 0 && !isfinite(seconds))
    return mend_errorf(err, errlen, "seconds to stay open must be a finite number, got %s",
                       isnan(seconds) ? "nan" : seconds > 0 ? "inf" : "-inf");
  /* before the breaker is looked for: a missing one answered "no breaker" to a bad op */
  if (strcmp(op, "reset") && strcmp(op, "close") && strcmp(op, "open"))
    return mend_errorf(err, errlen, "breaker operation must be reset, open or close, got %s", op);
  struct mend_breaker_slot *s = NULL;
  for (struct mend_breaker_slot *x = E->breakers; x; x = x->next)
    if (strcmp(x->key, key) == 0) s = x;
  /* A slot of steps that only wait has no row: the breaker is the store's, if anyone's. */
  int held = s && s->listed;
  mend_breaker b;
  int found = held     ? 1
              : record ? committed_breaker(E, key, &b)
                       : mend_store_get_breaker(E->store, key, &b);
  if (found < 0) {
    E->refusal = MEND_REFUSED_STORE;
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  }
  if (!found) E->refusal = MEND_REFUSED_NOT_FOUND;
  if (!found)
    return mend_errorf(err, errlen, "no breaker %s (a breaker exists once a step using it has run)",
                       key);
  if (held) b = s->b;
  double now = mend_engine_now(E);
  mend_breaker_state before = b.state;
  if (strcmp(op, "reset") == 0 || strcmp(op, "close") == 0) {
    mend_breaker_init(&b);
  } else {   /* "open": the op was checked above */
    b.state = MEND_BREAKER_OPEN;
    b.failures = b.successes = b.probes = 0;
    b.opened_at = now;
    b.open_until = now + (seconds > 0 ? seconds : s ? s->p.open_seconds : 30);
  }
  if (s) {
    s->b = b;
    s->spell++;
    s->listed = 1;   /* its row is written here */
  }
  if (mend_store_put_breaker(E->store, key, &b, now)) mend__store_failed(E);
  char detail[200];
  snprintf(detail, sizeof detail, "%s -> %s", mend_breaker_state_name(before),
           mend_breaker_state_name(b.state));
  if (mend_store_audit(E->store, now, who, op, key, detail)) mend__store_failed(E);
  E->refusal = MEND_REFUSED_STORE;   /* what can fail from here is the database */
  if (state_out) *state_out = b.state;
  if (record) {   /* the caller waits for the batch */
    if (E->broken) return mend_errorf(err, errlen, "%s", E->errmsg);
    if (!held) note_recorded(E, key, b.state);
    mend__kick(E);
    return 0;
  }
  if (mend__commit_now(E)) return mend_errorf(err, errlen, "%s", E->errmsg);
  return 0;
}

int mend_engine_breaker_set(mend_engine *E, const char *key, const char *op, double seconds,
                            const char *who, char *err, int errlen) {
  return breaker_set(E, key, op, seconds, who, NULL, 0, err, errlen);
}

int mend_engine_breaker_record(mend_engine *E, const char *key, const char *op, double seconds,
                               const char *who, mend_breaker_state *state, char *err, int errlen) {
  return breaker_set(E, key, op, seconds, who, state, 1, err, errlen);
}

/* Other processes change breakers (manual overrides, other workers): a serving engine reads
 * them back now and then. */
void mend__reload_breakers(mend_engine *E) {
  for (struct mend_breaker_slot *s = E->breakers; s; s = s->next) {
    mend_breaker b;
    if (mend_store_get_breaker(E->store, s->key, &b) != 1) continue;
    if (b.state != s->b.state) s->spell++;
    b.probes = b.state == s->b.state ? s->b.probes : 0;
    s->b = b;
  }
}
