/*
 * test_breaker: a circuit breaker (SPEC section 5) as a specification: what opens it, what
 * does not count, how long it refuses, how half-open probes are rationed, what closes it.
 */
#include "breaker.h"
#include "check.h"

static mend_breaker_policy pol;

static mend_breaker closed_breaker(void) {
  mend_breaker b;
  mend_breaker_init(&b);
  return b;
}

/* Admits one attempt at `now` and records its outcome; returns what record returned. */
static int attempt(mend_breaker *b, double now, mend_breaker_outcome o) {
  double retry_at = -1;
  CHECK_EQ_INT(mend_breaker_admit(b, &pol, now, &retry_at), 1);
  return mend_breaker_record(b, &pol, now, o);
}

/* A breaker opened at t = 100 (open until 130). */
static mend_breaker open_breaker(void) {
  mend_breaker b = closed_breaker();
  for (int i = 0; i < 5; i++) attempt(&b, 96 + i, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);
  CHECK_NEAR(b.opened_at, 100, 0);
  CHECK_NEAR(b.open_until, 130, 0);
  return b;
}

/* A breaker that has just turned half-open at t = 130, its one probe slot free. */
static mend_breaker half_open_breaker(void) {
  mend_breaker b = open_breaker();
  double retry_at;
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 130, &retry_at), 1);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);
  mend_breaker_release(&b);
  return b;
}

static void it_has_the_article_defaults(void) {
  CHECK_EQ_INT(pol.failure_threshold, 5);
  CHECK_NEAR(pol.open_seconds, 30, 0);
  CHECK_EQ_INT(pol.success_threshold, 3);
  CHECK_EQ_INT(pol.half_open_max, 1);
  mend_breaker b = closed_breaker();
  CHECK_EQ_INT(b.state, MEND_BREAKER_CLOSED);
  CHECK_EQ_INT(b.failures, 0);
  CHECK_EQ_INT(b.successes, 0);
  CHECK_EQ_INT(b.probes, 0);
}

static void it_opens_after_5_consecutive_retryable_failures(void) {
  mend_breaker b = closed_breaker();
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(attempt(&b, i, MEND_OUTCOME_RETRYABLE), 0);
  CHECK_EQ_INT(b.state, MEND_BREAKER_CLOSED);            /* 4 do not */
  CHECK_EQ_INT(b.failures, 4);
  CHECK_EQ_INT(attempt(&b, 10, MEND_OUTCOME_RETRYABLE), 1);
  CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);
  CHECK_NEAR(b.opened_at, 10, 0);
  CHECK_NEAR(b.open_until, 40, 0);
}

static void it_resets_the_count_on_a_success_while_closed(void) {
  mend_breaker b = closed_breaker();
  for (int i = 0; i < 4; i++) attempt(&b, i, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(attempt(&b, 5, MEND_OUTCOME_SUCCESS), 0);
  CHECK_EQ_INT(b.failures, 0);
  for (int i = 0; i < 4; i++) attempt(&b, 6 + i, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(b.state, MEND_BREAKER_CLOSED);            /* 4 + success + 4 is not 5 in a row */
  attempt(&b, 11, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);
}

static void it_never_counts_other_outcomes(void) {
  mend_breaker b = closed_breaker();
  for (int i = 0; i < 50; i++) CHECK_EQ_INT(attempt(&b, i, MEND_OUTCOME_OTHER), 0);
  CHECK_EQ_INT(b.state, MEND_BREAKER_CLOSED);
  CHECK_EQ_INT(b.failures, 0);

  /* Interleaved with retryable failures, OTHER neither counts nor breaks the run of them. */
  for (int i = 0; i < 4; i++) {
    attempt(&b, 60 + i, MEND_OUTCOME_RETRYABLE);
    attempt(&b, 60 + i, MEND_OUTCOME_OTHER);
  }
  CHECK_EQ_INT(b.state, MEND_BREAKER_CLOSED);
  CHECK_EQ_INT(b.failures, 4);
  attempt(&b, 70, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);

  /* While half-open, OTHER neither closes nor reopens it; it only frees the probe slot. */
  b = half_open_breaker();
  for (int i = 0; i < 10; i++) CHECK_EQ_INT(attempt(&b, 131 + i, MEND_OUTCOME_OTHER), 0);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);
  CHECK_EQ_INT(b.successes, 0);
  CHECK_EQ_INT(b.probes, 0);
}

static void it_refuses_while_open_until_open_until(void) {
  mend_breaker b = open_breaker();
  const double times[] = {100, 100.5, 115, 129.999};
  for (int i = 0; i < 4; i++) {
    double retry_at = -1;
    CHECK_EQ_INT(mend_breaker_admit(&b, &pol, times[i], &retry_at), 0);
    CHECK_NEAR(retry_at, b.open_until, 0);
    CHECK_NEAR(retry_at, 130, 0);
    CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);
  }
  /* Refused attempts are not counted: nothing about the breaker moved. */
  CHECK_EQ_INT(b.failures, 0);
  CHECK_NEAR(b.open_until, 130, 0);

  /* A late outcome of an attempt admitted before it opened changes nothing. */
  CHECK_EQ_INT(mend_breaker_record(&b, &pol, 110, MEND_OUTCOME_RETRYABLE), 0);
  CHECK_EQ_INT(mend_breaker_record(&b, &pol, 110, MEND_OUTCOME_SUCCESS), 0);
  CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);
  CHECK_NEAR(b.open_until, 130, 0);
}

static void it_turns_half_open_after_open_seconds(void) {
  mend_breaker b = open_breaker();
  double retry_at = -1;
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 130, &retry_at), 1);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);
  CHECK_EQ_INT(b.probes, 1);

  b = open_breaker();                                    /* asked late, long after: same */
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 5000, &retry_at), 1);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);
}

static void it_admits_only_half_open_max_probes_at_once(void) {
  mend_breaker b = half_open_breaker();
  double retry_at = -1;
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 131, &retry_at), 1);
  retry_at = -1;
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 131.5, &retry_at), 0);   /* the second waits */
  CHECK(retry_at > 131.5);
  CHECK(retry_at <= 131.5 + pol.open_seconds);
  CHECK_EQ_INT(b.probes, 1);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);

  /* half_open_max = 3: three go, the fourth waits. */
  mend_breaker_policy wide = pol;
  wide.half_open_max = 3;
  mend_breaker w;
  mend_breaker_init(&w);
  for (int i = 0; i < 5; i++) mend_breaker_record(&w, &wide, 0, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(w.state, MEND_BREAKER_OPEN);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(mend_breaker_admit(&w, &wide, 30 + i, &retry_at), 1);
  retry_at = -1;
  CHECK_EQ_INT(mend_breaker_admit(&w, &wide, 33, &retry_at), 0);
  CHECK(retry_at > 33);
  CHECK_EQ_INT(w.probes, 3);

  /* A short open_seconds still gives a retry_at in the future. */
  mend_breaker_policy quick = pol;
  quick.open_seconds = 0;
  mend_breaker q;
  mend_breaker_init(&q);
  for (int i = 0; i < 5; i++) mend_breaker_record(&q, &quick, 0, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(mend_breaker_admit(&q, &quick, 0, &retry_at), 1);
  retry_at = -1;
  CHECK_EQ_INT(mend_breaker_admit(&q, &quick, 0, &retry_at), 0);
  CHECK(retry_at > 0);
}

static void it_closes_after_3_half_open_successes(void) {
  mend_breaker b = half_open_breaker();
  CHECK_EQ_INT(attempt(&b, 131, MEND_OUTCOME_SUCCESS), 0);
  CHECK_EQ_INT(attempt(&b, 132, MEND_OUTCOME_SUCCESS), 0);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);
  CHECK_EQ_INT(b.successes, 2);
  CHECK_EQ_INT(attempt(&b, 133, MEND_OUTCOME_SUCCESS), 1);
  CHECK_EQ_INT(b.state, MEND_BREAKER_CLOSED);
  CHECK_EQ_INT(b.failures, 0);
  CHECK_EQ_INT(b.successes, 0);
  CHECK_EQ_INT(b.probes, 0);

  /* Closed again, it takes 5 fresh failures to open. */
  for (int i = 0; i < 4; i++) attempt(&b, 140 + i, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(b.state, MEND_BREAKER_CLOSED);
  attempt(&b, 145, MEND_OUTCOME_RETRYABLE);
  CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);
}

static void it_reopens_on_a_half_open_failure(void) {
  mend_breaker b = half_open_breaker();
  attempt(&b, 131, MEND_OUTCOME_SUCCESS);
  attempt(&b, 132, MEND_OUTCOME_SUCCESS);
  CHECK_EQ_INT(attempt(&b, 140, MEND_OUTCOME_RETRYABLE), 1);   /* one failure is enough */
  CHECK_EQ_INT(b.state, MEND_BREAKER_OPEN);
  CHECK_NEAR(b.opened_at, 140, 0);
  CHECK_NEAR(b.open_until, 170, 0);                          /* fresh, not the old 130 */
  CHECK_EQ_INT(b.probes, 0);
  double retry_at = -1;
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 150, &retry_at), 0);
  CHECK_NEAR(retry_at, 170, 0);

  /* And successes counted before the reopening do not carry over to the next half-open. */
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 170, &retry_at), 1);
  CHECK_EQ_INT(b.successes, 0);
  CHECK_EQ_INT(mend_breaker_record(&b, &pol, 171, MEND_OUTCOME_SUCCESS), 0);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);
}

static void it_gives_back_a_probe_slot_on_release(void) {
  mend_breaker b = half_open_breaker();
  double retry_at;
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 131, &retry_at), 1);
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 131, &retry_at), 0);
  mend_breaker_release(&b);                                  /* the probe was abandoned */
  CHECK_EQ_INT(b.probes, 0);
  CHECK_EQ_INT(b.state, MEND_BREAKER_HALF_OPEN);
  CHECK_EQ_INT(mend_breaker_admit(&b, &pol, 132, &retry_at), 1);

  /* Releasing more than was taken (e.g. after a restart lost the count) never goes negative. */
  mend_breaker_release(&b);
  mend_breaker_release(&b);
  CHECK_EQ_INT(b.probes, 0);
  mend_breaker c = closed_breaker();
  mend_breaker_release(&c);
  CHECK_EQ_INT(c.probes, 0);
  CHECK_EQ_INT(c.state, MEND_BREAKER_CLOSED);
}

static void it_parses_state_names(void) {
  const char *names[] = {"closed", "open", "half_open"};
  for (int i = 0; i < 3; i++) {
    mend_breaker_state s = (mend_breaker_state)-1;
    CHECK_EQ_INT(mend_breaker_state_parse(names[i], &s), 0);
    CHECK_EQ_INT(s, i);
    CHECK_STR(mend_breaker_state_name(s), names[i]);
  }
  mend_breaker_state s = MEND_BREAKER_OPEN;
  CHECK_EQ_INT(mend_breaker_state_parse("half-open", &s), -1);
  CHECK_EQ_INT(mend_breaker_state_parse("", &s), -1);
  CHECK_EQ_INT(mend_breaker_state_parse("CLOSED", &s), -1);
  CHECK_EQ_INT(mend_breaker_state_parse(NULL, &s), -1);
  CHECK_EQ_INT(s, MEND_BREAKER_OPEN);
}

int main(void) {
  mend_breaker_policy_default(&pol);
  it_has_the_article_defaults();
  it_opens_after_5_consecutive_retryable_failures();
  it_resets_the_count_on_a_success_while_closed();
  it_never_counts_other_outcomes();
  it_refuses_while_open_until_open_until();
  it_turns_half_open_after_open_seconds();
  it_admits_only_half_open_max_probes_at_once();
  it_closes_after_3_half_open_successes();
  it_reopens_on_a_half_open_failure();
  it_gives_back_a_probe_slot_on_release();
  it_parses_state_names();
  return check_done("breaker");
}
