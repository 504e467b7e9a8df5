/*
 * breaker: circuit breaker bookkeeping (SPEC section 5).
 *
 * Owns one breaker's state machine (closed, open, half-open), which outcomes count against the
 * dependency, and the half-open probe slots. Pure: time is an argument, never read here;
 * persisting the record is the store's job and waking waiting steps is the engine's.
 */
#include "breaker.h"

#include <string.h>

/* How long a step refused because every half-open probe slot is taken waits before asking
 * again. Short, because a probe usually settles the breaker within one attempt; bounded by
 * open_seconds so a breaker configured to reopen quickly is not outwaited by its own waiters. */
#define PROBE_RETRY_SECONDS 1.0
#define PROBE_RETRY_MIN_SECONDS 0.01

void mend_breaker_policy_default(mend_breaker_policy *p) {
  p->failure_threshold = 5;
  p->open_seconds = 30.0;
  p->success_threshold = 3;
  p->half_open_max = 1;
  p->max_concurrency = 0;
}

void mend_breaker_init(mend_breaker *b) {
  memset(b, 0, sizeof *b);
  b->state = MEND_BREAKER_CLOSED;
}

static void open_at(mend_breaker *b, const mend_breaker_policy *p, double now) {
  b->state = MEND_BREAKER_OPEN;
  b->failures = 0;
  b->successes = 0;
  b->probes = 0;
  b->opened_at = now;
  b->open_until = now + p->open_seconds;
}

static void give_back_probe(mend_breaker *b) {
  /* Floored at 0: probes are not persisted, so after a restart an attempt admitted before it
   * may report back with no slot recorded. */
  if (b->probes > 0) b->probes--;
}

int mend_breaker_admit(mend_breaker *b, const mend_breaker_policy *p, double now,
                       double *retry_at) {
  switch (b->state) {
  case MEND_BREAKER_CLOSED:
    return 1;
  case MEND_BREAKER_OPEN:
    if (now < b->open_until) {
      if (retry_at) *retry_at = b->open_until;
      return 0;
    }
    b->state = MEND_BREAKER_HALF_OPEN;
    b->successes = 0;
    b->probes = 0;
    /* The first caller after the wait is the first probe. */
    /* fall through */
  case MEND_BREAKER_HALF_OPEN:
  default:
    if (b->probes < p->half_open_max) {
      b->probes++;
      return 1;
    }
    if (retry_at) {
      double wait = p->open_seconds < PROBE_RETRY_SECONDS ? p->open_seconds : PROBE_RETRY_SECONDS;
      if (!(wait >= PROBE_RETRY_MIN_SECONDS)) wait = PROBE_RETRY_MIN_SECONDS;
      *retry_at = now + wait;
    }
    return 0;
  }
}

int mend_breaker_record(mend_breaker *b, const mend_breaker_policy *p, double now,
                        mend_breaker_outcome outcome) {
  switch (b->state) {
  case MEND_BREAKER_CLOSED:
    if (outcome == MEND_OUTCOME_SUCCESS) {
      b->failures = 0;
    } else if (outcome == MEND_OUTCOME_RETRYABLE) {
      if (++b->failures >= p->failure_threshold) {
        open_at(b, p, now);
        return 1;
      }
    }
    return 0;
  case MEND_BREAKER_HALF_OPEN:
    give_back_probe(b);
    if (outcome == MEND_OUTCOME_RETRYABLE) {
      open_at(b, p, now);
      return 1;
    }
    if (outcome == MEND_OUTCOME_SUCCESS && ++b->successes >= p->success_threshold) {
      b->state = MEND_BREAKER_CLOSED;
      b->failures = 0;
      b->successes = 0;
      b->probes = 0;
      return 1;
    }
    return 0;
  case MEND_BREAKER_OPEN:
  default:
    /* A late outcome of an attempt admitted before the breaker opened: the breaker has already
     * judged the dependency, and stretching open_until with stragglers would keep it open
     * longer than the policy says. */
    return 0;
  }
}

void mend_breaker_release(mend_breaker *b) {
  if (b->state == MEND_BREAKER_HALF_OPEN) give_back_probe(b);
}

static const char *const state_names[] = {"closed", "open", "half_open"};
#define N_STATES ((int)(sizeof(state_names) / sizeof(state_names[0])))

const char *mend_breaker_state_name(mend_breaker_state s) {
  return (int)s >= 0 && (int)s < N_STATES ? state_names[s] : "unknown";
}

int mend_breaker_state_parse(const char *name, mend_breaker_state *out) {
  if (!name) return -1;
  for (int i = 0; i < N_STATES; i++)
    if (strcmp(state_names[i], name) == 0) {
      *out = (mend_breaker_state)i;
      return 0;
    }
  return -1;
}
