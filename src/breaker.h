/*
 * breaker: circuit breaker bookkeeping (SPEC section 5).
 *
 * Owns the state machine of one breaker: closed, open, half-open; counting only retryable
 * failures; admitting a limited number of half-open probes. Pure: time comes in as an argument,
 * persistence is the store's job, scheduling of waiting steps is the engine's.
 */
#ifndef MEND_BREAKER_H
#define MEND_BREAKER_H

typedef enum mend_breaker_state {
  MEND_BREAKER_CLOSED,
  MEND_BREAKER_OPEN,
  MEND_BREAKER_HALF_OPEN
} mend_breaker_state;

typedef struct mend_breaker_policy {
  int failure_threshold;   /* consecutive retryable failures that open it (5) */
  double open_seconds;     /* how long it stays open before half-open (30) */
  int success_threshold;   /* consecutive half-open successes that close it (3) */
  int half_open_max;       /* probes admitted at once while half-open (1) */
  int max_concurrency;     /* attempts through this breaker at once, in one engine; 0: no cap */
} mend_breaker_policy;

typedef struct mend_breaker {
  mend_breaker_state state;
  int failures;            /* consecutive retryable failures while closed */
  int successes;           /* consecutive successes while half-open */
  int probes;              /* half-open probes in flight (not persisted: 0 after a restart) */
  double opened_at;        /* when it last opened */
  double open_until;       /* when an open breaker turns half-open */
} mend_breaker;

typedef enum mend_breaker_outcome {
  MEND_OUTCOME_SUCCESS,
  MEND_OUTCOME_RETRYABLE,  /* counts against the dependency */
  MEND_OUTCOME_OTHER       /* business or unknown error: says nothing about health */
} mend_breaker_outcome;

void mend_breaker_policy_default(mend_breaker_policy *p);
void mend_breaker_init(mend_breaker *b);     /* closed, zero counts */

/* May an attempt go now? Returns 1 and (if half-open) takes a probe slot; an open breaker whose
 * time is up turns half-open here. Returns 0 when the attempt must wait, with *retry_at set to
 * when to ask again (open_until while open; now + a short interval while half-open probes are
 * all taken). The caller adds jitter. */
int mend_breaker_admit(mend_breaker *b, const mend_breaker_policy *p, double now, double *retry_at);

/* Record the outcome of an admitted attempt. Returns 1 if the state changed. A failure while
 * half-open opens it again; success_threshold successes close it; failure_threshold consecutive
 * retryable failures while closed open it. OTHER only gives back a half-open probe slot. */
int mend_breaker_record(mend_breaker *b, const mend_breaker_policy *p, double now,
                        mend_breaker_outcome outcome);

/* An admitted attempt ended without an outcome (abandoned): give back its probe slot. */
void mend_breaker_release(mend_breaker *b);

const char *mend_breaker_state_name(mend_breaker_state s);
int         mend_breaker_state_parse(const char *name, mend_breaker_state *out); /* 0 ok, -1 */

#endif
