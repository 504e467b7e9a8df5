/*
 * backoff: retry policies and the delays they choose (SPEC section 4).
 *
 * Owns the policy record, its defaults, the delay arithmetic of each strategy and jitter mode,
 * and the engine's seedable random generator. Pure functions: no clock, no I/O, no Lua.
 * Delays are seconds as doubles (fractions allowed).
 */
#ifndef MEND_BACKOFF_H
#define MEND_BACKOFF_H

#include <stdint.h>

/* xoshiro256** seeded through splitmix64: fast, and a fixed seed gives a fixed sequence. */
typedef struct mend_rng { uint64_t s[4]; } mend_rng;

void     mend_rng_seed(mend_rng *rng, uint64_t seed);
uint64_t mend_rng_next(mend_rng *rng);
double   mend_rng_uniform(mend_rng *rng);           /* in [0, 1) */

typedef enum mend_strategy {
  MEND_STRATEGY_EXPONENTIAL,   /* initial * multiplier^(n-1) */
  MEND_STRATEGY_LINEAR,        /* initial * n */
  MEND_STRATEGY_FIXED          /* initial */
} mend_strategy;

typedef enum mend_jitter_mode {
  /* d * (1 + jitter * u), u uniform in [-1, 1): the article's +-jitter*delay */
  MEND_JITTER_PROPORTIONAL,
  MEND_JITTER_FULL,            /* uniform in [0, d) */
  /* uniform in [initial, 3 * previous delay), previous = initial at first */
  MEND_JITTER_DECORRELATED
} mend_jitter_mode;

typedef struct mend_retry_policy {
  int max_attempts;            /* attempts in all, first included; >= 1 */
  double initial;              /* seconds, >= 0 */
  double multiplier;           /* >= 1 */
  double max_delay;            /* seconds, >= 0: no delay ever exceeds it */
  double jitter;               /* fraction in [0, 1], used by the proportional mode */
  double max_retry_after;      /* seconds: clamp for a dependency's own retry_after advice */
  mend_strategy strategy;
  mend_jitter_mode jitter_mode;
  int attention_after;         /* flag the run after this many failed attempts; 0 = never */
} mend_retry_policy;

/* SPEC defaults: 5 attempts, 1 s, x2, 60 s cap, 0.2 proportional jitter, exponential, 900 s. */
void mend_retry_policy_default(mend_retry_policy *p);
/* Compensation defaults from the article: 3 attempts, 1 s then 2 s, no jitter. */
void mend_compensate_policy_default(mend_retry_policy *p);

/* Delay before attempt failed+1, after `failed` (>= 1) failed attempts, before jitter,
 * capped at max_delay. */
double mend_backoff_base(const mend_retry_policy *p, int failed);

/* The delay actually used: base, then jitter of the policy's mode, never below 0 and never
 * above max_delay. `previous` is the delay chosen last time for this step (0 if none); only the
 * decorrelated mode reads it. */
double mend_backoff_delay(const mend_retry_policy *p, int failed, double previous, mend_rng *rng);

/* A dependency's retry_after advice, clamped to [0, max_retry_after]. */
double mend_backoff_clamp_retry_after(const mend_retry_policy *p, double retry_after);

const char *mend_strategy_name(mend_strategy s);
int         mend_strategy_parse(const char *name, mend_strategy *out);     /* 0 ok, -1 unknown */
const char *mend_jitter_mode_name(mend_jitter_mode m);
int         mend_jitter_mode_parse(const char *name, mend_jitter_mode *out); /* 0 ok, -1 unknown */

/* Checks every field's range; on a bad one returns -1 and names the field and the problem in
 * `err` ("initial must be >= 0, got -1"). */
int mend_retry_policy_check(const mend_retry_policy *p, char *err, unsigned errlen);

#endif
