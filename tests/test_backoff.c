/*
 * test_backoff: retry policies and delays (SPEC section 4) as a specification: exact delays of
 * each strategy, the bounds of each jitter mode, reproducible randomness, clamping, names and
 * the policy check.
 */
#include "backoff.h"
#include "check.h"

#include <stdint.h>

#define DRAWS 100000

static mend_retry_policy no_jitter(mend_strategy s) {
  mend_retry_policy p;
  mend_retry_policy_default(&p);
  p.strategy = s;
  p.jitter = 0;
  return p;
}

static void it_computes_exact_delays_without_jitter(void) {
  mend_rng rng;
  mend_rng_seed(&rng, 1);

  mend_retry_policy p = no_jitter(MEND_STRATEGY_EXPONENTIAL);
  const double expo[] = {1, 2, 4, 8, 16, 32, 60, 60};   /* 64 is capped at max_delay 60 */
  for (int n = 1; n <= 8; n++) {
    CHECK_NEAR(mend_backoff_base(&p, n), expo[n - 1], 1e-12);
    CHECK_NEAR(mend_backoff_delay(&p, n, 0, &rng), expo[n - 1], 1e-12);
  }
  CHECK_NEAR(mend_backoff_base(&p, 5000), 60, 0);     /* overflow to inf is still capped */

  p.multiplier = 1.5;
  p.initial = 0.5;
  CHECK_NEAR(mend_backoff_base(&p, 3), 0.5 * 1.5 * 1.5, 1e-12);

  p = no_jitter(MEND_STRATEGY_LINEAR);
  p.initial = 7;
  const double lin[] = {7, 14, 21, 28, 35, 42, 49, 56, 60, 60};
  for (int n = 1; n <= 10; n++) {
    CHECK_NEAR(mend_backoff_base(&p, n), lin[n - 1], 1e-12);
    CHECK_NEAR(mend_backoff_delay(&p, n, 0, &rng), lin[n - 1], 1e-12);
  }

  p = no_jitter(MEND_STRATEGY_FIXED);
  p.initial = 3;
  for (int n = 1; n <= 10; n++) CHECK_NEAR(mend_backoff_delay(&p, n, 0, &rng), 3, 1e-12);
  p.initial = 90;                                      /* initial above the cap: still capped */
  CHECK_NEAR(mend_backoff_base(&p, 1), 60, 0);

  p = no_jitter(MEND_STRATEGY_EXPONENTIAL);
  p.initial = 0;
  for (int n = 1; n <= 2000; n += 333) CHECK_NEAR(mend_backoff_base(&p, n), 0, 0);
}

/* Draws DRAWS delays and checks they stay in [lo, hi] and actually spread out. */
static void check_spread(const mend_retry_policy *p, int failed, double previous, double lo,
                         double hi, uint64_t seed) {
  mend_rng rng;
  mend_rng_seed(&rng, seed);
  double mn = 1e300, mx = -1e300;
  int out = 0;
  for (int i = 0; i < DRAWS; i++) {
    double d = mend_backoff_delay(p, failed, previous, &rng);
    if (d < lo || d > hi || d < 0 || d > p->max_delay) out++;
    if (d < mn) mn = d;
    if (d > mx) mx = d;
  }
  CHECK_EQ_INT(out, 0);
  /* Not constant: 100k uniform draws come within 1% of both ends of the range. */
  CHECK(mx - mn > 0.98 * (hi - lo));
}

static void it_keeps_each_jitter_mode_within_bounds(void) {
  mend_retry_policy p;
  mend_retry_policy_default(&p);

  /* proportional 0.2 around 8 s (after 4 failures): [6.4, 9.6] */
  p.jitter_mode = MEND_JITTER_PROPORTIONAL;
  check_spread(&p, 4, 0, 8 * 0.8, 8 * 1.2, 42);
  p.jitter = 1;                                         /* the widest: [0, 2d] */
  check_spread(&p, 4, 0, 0, 16, 43);
  p.jitter = 0.2;

  /* proportional near the cap: 60 * 1.2 would exceed max_delay, so it is cut at 60 */
  {
    mend_rng rng;
    mend_rng_seed(&rng, 7);
    int above = 0, at_cap = 0;
    for (int i = 0; i < DRAWS; i++) {
      double d = mend_backoff_delay(&p, 10, 0, &rng);
      if (d > 60 || d < 48) above++;
      if (d == 60) at_cap++;
    }
    CHECK_EQ_INT(above, 0);
    CHECK(at_cap > DRAWS / 3);                          /* about half the draws land on the cap */
  }

  p.jitter_mode = MEND_JITTER_FULL;
  check_spread(&p, 4, 0, 0, 8, 44);
  check_spread(&p, 20, 0, 0, 60, 45);

  p.jitter_mode = MEND_JITTER_DECORRELATED;
  check_spread(&p, 1, 0, 1, 3, 46);                     /* previous = initial at first */
  check_spread(&p, 3, 5, 1, 15, 47);
  check_spread(&p, 3, 40, 1, 60, 48);                   /* 3 * 40 capped at 60 */

  /* A decorrelated chain fed its own output never leaves [initial, max_delay]. */
  {
    mend_rng rng;
    mend_rng_seed(&rng, 49);
    double prev = 0, mn = 1e300, mx = 0;
    for (int i = 0; i < DRAWS; i++) {
      prev = mend_backoff_delay(&p, i % 10 + 1, prev, &rng);
      if (prev < mn) mn = prev;
      if (prev > mx) mx = prev;
    }
    CHECK(mn >= 1);
    CHECK(mx <= 60);
    CHECK(mx - mn > 50);
  }
}

static void it_is_reproducible_from_a_seed(void) {
  mend_rng a, b, c;
  mend_rng_seed(&a, 12345);
  mend_rng_seed(&b, 12345);
  mend_rng_seed(&c, 12346);
  int same = 1, differ = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t x = mend_rng_next(&a), y = mend_rng_next(&b), z = mend_rng_next(&c);
    if (x != y) same = 0;
    if (x != z) differ++;
  }
  CHECK(same);
  CHECK(differ > 990);

  /* Seed 0 is usable (splitmix64 never gives xoshiro the all-zero state). */
  mend_rng_seed(&a, 0);
  uint64_t first = mend_rng_next(&a);
  CHECK(first != 0 || mend_rng_next(&a) != 0);

  /* A delay schedule is reproducible too. */
  mend_retry_policy p;
  mend_retry_policy_default(&p);
  mend_rng_seed(&a, 99);
  mend_rng_seed(&b, 99);
  mend_rng_seed(&c, 100);
  int sched_same = 1, sched_differ = 0;
  for (int n = 1; n <= 5; n++) {
    double x = mend_backoff_delay(&p, n, 0, &a);
    double y = mend_backoff_delay(&p, n, 0, &b);
    double z = mend_backoff_delay(&p, n, 0, &c);
    if (x != y) sched_same = 0;
    if (x != z) sched_differ++;
  }
  CHECK(sched_same);
  CHECK(sched_differ >= 4);

  /* uniform stays in [0, 1) and its mean is about 1/2 */
  mend_rng_seed(&a, 5);
  double sum = 0;
  int bad = 0;
  for (int i = 0; i < DRAWS; i++) {
    double u = mend_rng_uniform(&a);
    if (u < 0 || u >= 1) bad++;
    sum += u;
  }
  CHECK_EQ_INT(bad, 0);
  CHECK_NEAR(sum / DRAWS, 0.5, 0.01);
}

static void it_never_goes_below_zero_nor_above_max_delay(void) {
  const mend_strategy strategies[] = {MEND_STRATEGY_EXPONENTIAL, MEND_STRATEGY_LINEAR,
                                      MEND_STRATEGY_FIXED};
  const mend_jitter_mode modes[] = {MEND_JITTER_PROPORTIONAL, MEND_JITTER_FULL,
                                    MEND_JITTER_DECORRELATED};
  mend_rng rng;
  mend_rng_seed(&rng, 2024);
  int bad = 0;
  for (int s = 0; s < 3; s++)
    for (int m = 0; m < 3; m++) {
      mend_retry_policy p;
      mend_retry_policy_default(&p);
      p.strategy = strategies[s];
      p.jitter_mode = modes[m];
      p.jitter = 1;
      p.max_delay = 10;
      p.initial = 3;
      double prev = 0;
      for (int i = 0; i < 10000; i++) {
        double d = mend_backoff_delay(&p, i % 30 + 1, prev, &rng);
        if (!(d >= 0 && d <= 10)) bad++;
        prev = d;
      }
    }
  CHECK_EQ_INT(bad, 0);

  mend_retry_policy p;
  mend_retry_policy_default(&p);
  p.max_delay = 0;                                     /* a zero cap means retry at once */
  for (int n = 1; n <= 5; n++) CHECK_NEAR(mend_backoff_delay(&p, n, 0, &rng), 0, 0);
}

static void it_clamps_retry_after(void) {
  mend_retry_policy p;
  mend_retry_policy_default(&p);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, 5), 5, 0);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, 0.25), 0.25, 0);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, 900), 900, 0);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, 3600), 900, 0);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, -1), 0, 0);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, 0), 0, 0);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, NAN), 0, 0);
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, INFINITY), 900, 0);
  p.max_retry_after = 10;
  CHECK_NEAR(mend_backoff_clamp_retry_after(&p, 11), 10, 0);
}

static void it_parses_and_names(void) {
  const char *snames[] = {"exponential", "linear", "fixed"};
  for (int i = 0; i < 3; i++) {
    mend_strategy s = (mend_strategy)-1;
    CHECK_EQ_INT(mend_strategy_parse(snames[i], &s), 0);
    CHECK_EQ_INT(s, i);
    CHECK_STR(mend_strategy_name(s), snames[i]);
  }
  const char *jnames[] = {"proportional", "full", "decorrelated"};
  for (int i = 0; i < 3; i++) {
    mend_jitter_mode m = (mend_jitter_mode)-1;
    CHECK_EQ_INT(mend_jitter_mode_parse(jnames[i], &m), 0);
    CHECK_EQ_INT(m, i);
    CHECK_STR(mend_jitter_mode_name(m), jnames[i]);
  }
  const char *unknown[] = {"", "Exponential", "exp", "linear ", "none", "equal", "fixedx"};
  for (unsigned i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    mend_strategy s = MEND_STRATEGY_LINEAR;
    mend_jitter_mode m = MEND_JITTER_FULL;
    CHECK_EQ_INT(mend_strategy_parse(unknown[i], &s), -1);
    CHECK_EQ_INT(mend_jitter_mode_parse(unknown[i], &m), -1);
    CHECK_EQ_INT(s, MEND_STRATEGY_LINEAR);               /* untouched on failure */
    CHECK_EQ_INT(m, MEND_JITTER_FULL);
  }
  mend_strategy s;
  mend_jitter_mode m;
  CHECK_EQ_INT(mend_strategy_parse(NULL, &s), -1);
  CHECK_EQ_INT(mend_jitter_mode_parse(NULL, &m), -1);
}

/* Sets one bad field on a default policy; the check must refuse it and name the field. */
#define REFUSES(field, value, expect) do { \
    mend_retry_policy p_; mend_retry_policy_default(&p_); \
    p_.field = value; \
    char err_[128] = ""; \
    CHECK_EQ_INT(mend_retry_policy_check(&p_, err_, sizeof err_), -1); \
    CHECK_STR(err_, expect); \
  } while (0)

/* Same, for messages whose value part is not worth spelling out (NaN, inf). */
#define REFUSES_NAMING(field, value) do { \
    mend_retry_policy p_; mend_retry_policy_default(&p_); \
    p_.field = value; \
    char err_[128] = ""; \
    CHECK_EQ_INT(mend_retry_policy_check(&p_, err_, sizeof err_), -1); \
    CHECK(strncmp(err_, #field " ", strlen(#field " ")) == 0); \
  } while (0)

static void it_checks_every_field(void) {
  mend_retry_policy p;
  char err[128] = "x";
  mend_retry_policy_default(&p);
  CHECK_EQ_INT(mend_retry_policy_check(&p, err, sizeof err), 0);
  mend_compensate_policy_default(&p);
  CHECK_EQ_INT(mend_retry_policy_check(&p, err, sizeof err), 0);

  REFUSES(max_attempts, 0, "max_attempts must be >= 1, got 0");
  REFUSES(max_attempts, -3, "max_attempts must be >= 1, got -3");
  REFUSES(initial, -1, "initial must be >= 0, got -1");
  REFUSES(multiplier, 0.5, "multiplier must be >= 1, got 0.5");
  REFUSES(max_delay, -0.5, "max_delay must be >= 0, got -0.5");
  REFUSES(jitter, -0.1, "jitter must be in [0, 1], got -0.1");
  REFUSES(jitter, 1.5, "jitter must be in [0, 1], got 1.5");
  REFUSES(max_retry_after, -2, "max_retry_after must be >= 0, got -2");
  REFUSES(attention_after, -1, "attention_after must be >= 0 (0 = never), got -1");
  REFUSES_NAMING(strategy, (mend_strategy)7);
  REFUSES_NAMING(jitter_mode, (mend_jitter_mode)7);
  REFUSES_NAMING(initial, NAN);
  REFUSES_NAMING(initial, INFINITY);
  /* inf is >= 0: the rule it breaks is finiteness, and the message must say so */
  REFUSES(initial, INFINITY, "initial must be a finite number >= 0, got inf");
  REFUSES(multiplier, INFINITY, "multiplier must be a finite number >= 1, got inf");
  REFUSES(max_delay, INFINITY, "max_delay must be a finite number >= 0, got inf");
  REFUSES(max_retry_after, INFINITY, "max_retry_after must be a finite number >= 0, got inf");
  REFUSES_NAMING(multiplier, NAN);
  REFUSES_NAMING(max_delay, NAN);
  REFUSES_NAMING(jitter, NAN);
  REFUSES_NAMING(max_retry_after, NAN);

  /* Edges that are allowed. */
  mend_retry_policy_default(&p);
  p.max_attempts = 1;
  p.initial = 0;
  p.multiplier = 1;
  p.max_delay = 0;
  p.jitter = 1;
  p.max_retry_after = 0;
  p.attention_after = 3;
  CHECK_EQ_INT(mend_retry_policy_check(&p, err, sizeof err), 0);
  p.jitter = 0;
  CHECK_EQ_INT(mend_retry_policy_check(&p, err, sizeof err), 0);

  /* A tiny buffer is truncated, never overrun (ASan would see it). */
  mend_retry_policy_default(&p);
  p.initial = -1;
  char small[8];
  CHECK_EQ_INT(mend_retry_policy_check(&p, small, sizeof small), -1);
  CHECK_STR(small, "initial");
  CHECK_EQ_INT(mend_retry_policy_check(&p, NULL, 0), -1);
}

static void it_has_the_spec_defaults(void) {
  mend_retry_policy p;
  mend_retry_policy_default(&p);
  CHECK_EQ_INT(p.max_attempts, 5);
  CHECK_NEAR(p.initial, 1, 0);
  CHECK_NEAR(p.multiplier, 2, 0);
  CHECK_NEAR(p.max_delay, 60, 0);
  CHECK_NEAR(p.jitter, 0.2, 0);
  CHECK_NEAR(p.max_retry_after, 900, 0);
  CHECK_EQ_INT(p.strategy, MEND_STRATEGY_EXPONENTIAL);
  CHECK_EQ_INT(p.jitter_mode, MEND_JITTER_PROPORTIONAL);
  CHECK_EQ_INT(p.attention_after, 0);

  /* Compensation: 3 attempts, 1 s then 2 s, no jitter, so exactly those delays. */
  mend_compensate_policy_default(&p);
  CHECK_EQ_INT(p.max_attempts, 3);
  CHECK_NEAR(p.jitter, 0, 0);
  mend_rng rng;
  mend_rng_seed(&rng, 3);
  CHECK_NEAR(mend_backoff_delay(&p, 1, 0, &rng), 1, 0);
  CHECK_NEAR(mend_backoff_delay(&p, 2, 1, &rng), 2, 0);
}

int main(void) {
  it_computes_exact_delays_without_jitter();
  it_keeps_each_jitter_mode_within_bounds();
  it_is_reproducible_from_a_seed();
  it_never_goes_below_zero_nor_above_max_delay();
  it_clamps_retry_after();
  it_parses_and_names();
  it_checks_every_field();
  it_has_the_spec_defaults();
  return check_done("backoff");
}
