/*
 * backoff: retry policies and the delays they choose (SPEC section 4).
 *
 * Owns the policy defaults and range checks, each strategy's delay arithmetic, each jitter
 * mode, and the engine's seedable xoshiro256** generator. Pure: it never reads a clock, never
 * sleeps and never touches Lua; the engine turns the delays it returns into timers.
 */
#include "backoff.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void mend_rng_seed(mend_rng *rng, uint64_t seed) {
  /* splitmix64 spreads any seed, 0 included, into a state that is never all zero (the one
   * state xoshiro cannot leave). */
  for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

uint64_t mend_rng_next(mend_rng *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double mend_rng_uniform(mend_rng *rng) {
  /* The top 53 bits fill a double's mantissa exactly, so the result is < 1 by construction. */
  return (double)(mend_rng_next(rng) >> 11) * 0x1.0p-53;
}

void mend_retry_policy_default(mend_retry_policy *p) {
  p->max_attempts = 5;
  p->initial = 1.0;
  p->multiplier = 2.0;
  p->max_delay = 60.0;
  p->jitter = 0.2;
  p->max_retry_after = 900.0;
  p->strategy = MEND_STRATEGY_EXPONENTIAL;
  p->jitter_mode = MEND_JITTER_PROPORTIONAL;
  p->attention_after = 0;
}

void mend_compensate_policy_default(mend_retry_policy *p) {
  mend_retry_policy_default(p);
  p->max_attempts = 3;     /* exponential from 1 s by x2: 1 s, then 2 s */
  p->jitter = 0.0;
}

static double cap(const mend_retry_policy *p, double d) {
  /* Written so that NaN (e.g. 0 * inf from a huge exponent with initial 0) ends up as 0. */
  if (!(d > 0)) return 0;
  return d > p->max_delay ? p->max_delay : d;
}

double mend_backoff_base(const mend_retry_policy *p, int failed) {
  if (failed < 1) failed = 1;
  double d;
  switch (p->strategy) {
  case MEND_STRATEGY_LINEAR: d = p->initial * failed; break;
  case MEND_STRATEGY_FIXED: d = p->initial; break;
  case MEND_STRATEGY_EXPONENTIAL:
  default: d = p->initial * pow(p->multiplier, failed - 1); break;  /* inf is capped below */
  }
  return cap(p, d);
}

double mend_backoff_delay(const mend_retry_policy *p, int failed, double previous, mend_rng *rng) {
  double base = mend_backoff_base(p, failed);
  double u = mend_rng_uniform(rng);
  double d;
  switch (p->jitter_mode) {
  case MEND_JITTER_FULL: d = base * u; break;
  case MEND_JITTER_DECORRELATED: {
    /* AWS's decorrelated jitter: grows from the last delay actually used rather than from the
     * attempt number, so waiting clients drift apart instead of moving in lockstep. */
    double lo = p->initial;
    double prev = previous > lo ? previous : lo;
    double hi = 3 * prev;
    d = hi > lo ? lo + (hi - lo) * u : lo;
    break;
  }
  case MEND_JITTER_PROPORTIONAL:
  default: d = base * (1 + p->jitter * (2 * u - 1)); break;
  }
  return cap(p, d);
}

double mend_backoff_clamp_retry_after(const mend_retry_policy *p, double retry_after) {
  if (!(retry_after > 0)) return 0;
  return retry_after > p->max_retry_after ? p->max_retry_after : retry_after;
}

static const char *const strategy_names[] = {"exponential", "linear", "fixed"};
static const char *const jitter_names[] = {"proportional", "full", "decorrelated"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int parse_name(const char *const *names, int n, const char *name) {
  if (!name) return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return i;
  return -1;
}

const char *mend_strategy_name(mend_strategy s) {
  return (int)s >= 0 && (int)s < COUNT(strategy_names) ? strategy_names[s] : "unknown";
}

int mend_strategy_parse(const char *name, mend_strategy *out) {
  int i = parse_name(strategy_names, COUNT(strategy_names), name);
  if (i < 0) return -1;
  *out = (mend_strategy)i;
  return 0;
}

const char *mend_jitter_mode_name(mend_jitter_mode m) {
  return (int)m >= 0 && (int)m < COUNT(jitter_names) ? jitter_names[m] : "unknown";
}

int mend_jitter_mode_parse(const char *name, mend_jitter_mode *out) {
  int i = parse_name(jitter_names, COUNT(jitter_names), name);
  if (i < 0) return -1;
  *out = (mend_jitter_mode)i;
  return 0;
}

static int bad(char *err, unsigned errlen, const char *field, const char *rule, double got) {
  /* inf meets ">= 0": what it breaks is finiteness, which the rule then names */
  if (err && errlen)
    snprintf(err, errlen, "%s must be %s%s, got %g", field, isinf(got) ? "a finite number " : "",
             rule, got);
  return -1;
}

int mend_retry_policy_check(const mend_retry_policy *p, char *err, unsigned errlen) {
  /* Comparisons are written as !(x ok) so that NaN is refused too; isfinite refuses inf where a
   * finite value is needed for the arithmetic to mean anything. */
  if (p->max_attempts < 1) return bad(err, errlen, "max_attempts", ">= 1", p->max_attempts);
  if (!(p->initial >= 0) || !isfinite(p->initial))
    return bad(err, errlen, "initial", ">= 0", p->initial);
  if (!(p->multiplier >= 1) || !isfinite(p->multiplier))
    return bad(err, errlen, "multiplier", ">= 1", p->multiplier);
  if (!(p->max_delay >= 0) || !isfinite(p->max_delay))
    return bad(err, errlen, "max_delay", ">= 0", p->max_delay);
  if (!(p->jitter >= 0 && p->jitter <= 1))
    return bad(err, errlen, "jitter", "in [0, 1]", p->jitter);
  if (!(p->max_retry_after >= 0) || !isfinite(p->max_retry_after))
    return bad(err, errlen, "max_retry_after", ">= 0", p->max_retry_after);
  if ((int)p->strategy < 0 || (int)p->strategy >= COUNT(strategy_names))
    return bad(err, errlen, "strategy", "exponential, linear or fixed", (int)p->strategy);
  if ((int)p->jitter_mode < 0 || (int)p->jitter_mode >= COUNT(jitter_names))
    return bad(err, errlen, "jitter_mode", "proportional, full or decorrelated",
               (int)p->jitter_mode);
  if (p->attention_after < 0)
    return bad(err, errlen, "attention_after", ">= 0 (0 = never)", p->attention_after);
  if (err && errlen) err[0] = '\0';
  return 0;
}
