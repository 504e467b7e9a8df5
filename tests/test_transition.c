/*
 * test_transition: the step and run state machines (SPEC section 2) as a specification. The
 * expected tables below are written independently of src/transition.c, by name, from the SPEC
 * diagram and the header's list; every (from, to) pair of both machines is checked against them.
 */
#include "transition.h"
#include "check.h"

struct edge { const char *from, *to; };

static const struct edge step_edges[] = {
  {"pending", "running"},
  {"pending", "breaker_open"},
  {"pending", "succeeded"},                /* idempotency key already succeeded: result reused */
  {"running", "succeeded"},
  {"running", "retry_wait"},
  {"running", "failed"},
  {"running", "running"},                  /* re-execution after a crash */
  {"retry_wait", "pending"},
  {"retry_wait", "breaker_open"},
  {"breaker_open", "pending"},
  {"breaker_open", "breaker_open"},
  {"pending", "sleeping"},                 /* a durable wait before the step */
  {"sleeping", "pending"},
  {"pending", "waiting"},                  /* waits for an event instead of executing */
  {"waiting", "succeeded"},                /* its event consumed */
  {"waiting", "retry_wait"},               /* timed out, retried: it waits again */
  {"waiting", "failed"},                   /* timed out for good */
  {"waiting", "pending"},                  /* cancelled while waiting */
  {"running", "waiting"},                  /* executed: waits for its token; or started its child */
  {"pending", "skipped"},                  /* when(ctx) said no, or its group was skipped */
  {"succeeded", "compensating"},
  {"failed", "compensating"},
  {"compensating", "compensated"},
  {"compensating", "compensation_failed"},
  {"compensating", "compensating"},        /* a compensation retry */
  {"compensation_failed", "compensating"}, /* repair from the dead-letter queue */
  {"failed", "pending"},                   /* repair: a severity-3 step retried */
};

static const struct edge run_edges[] = {
  {"running", "compensating"},
  {"running", "succeeded"},
  {"running", "failed"},
  {"running", "needs_attention"},
  {"compensating", "compensated"},
  {"compensating", "needs_attention"},
  {"needs_attention", "running"},
  {"needs_attention", "compensating"},
  {"needs_attention", "resolved"},         /* settled by hand, with a note */
};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const step_names[] = {
  "pending", "running", "retry_wait", "breaker_open", "sleeping", "waiting", "skipped",
  "succeeded", "failed",
  "compensating",
  "compensated", "compensation_failed"};
static const char *const run_names[] = {
  "running", "compensating", "succeeded", "compensated", "failed", "needs_attention",
  "resolved"};

static int expected(const struct edge *edges, int n, const char *from, const char *to) {
  for (int i = 0; i < n; i++)
    if (strcmp(edges[i].from, from) == 0 && strcmp(edges[i].to, to) == 0) return 1;
  return 0;
}

static void it_names_every_status_and_round_trips(void) {
  CHECK_EQ_INT(N(step_names), MEND_STEP__COUNT);
  CHECK_EQ_INT(N(run_names), MEND_RUN__COUNT);
  for (int i = 0; i < MEND_STEP__COUNT; i++) {
    mend_step_status s = (mend_step_status)-1;
    CHECK_EQ_INT(mend_step_status_parse(step_names[i], &s), 0);
    CHECK_STR(mend_step_status_name(s), step_names[i]);
  }
  for (int i = 0; i < MEND_RUN__COUNT; i++) {
    mend_run_status r = (mend_run_status)-1;
    CHECK_EQ_INT(mend_run_status_parse(run_names[i], &r), 0);
    CHECK_STR(mend_run_status_name(r), run_names[i]);
  }
  CHECK_STR(mend_step_status_name(MEND_STEP_RETRY_WAIT), "retry_wait");
  CHECK_STR(mend_step_status_name(MEND_STEP_BREAKER_OPEN), "breaker_open");
  CHECK_STR(mend_step_status_name(MEND_STEP_COMPENSATION_FAILED), "compensation_failed");
  CHECK_STR(mend_run_status_name(MEND_RUN_NEEDS_ATTENTION), "needs_attention");

  const char *unknown[] = {"", "Running", "retry-wait", "breaker open", "done", "dead"};
  for (int i = 0; i < N(unknown); i++) {
    mend_step_status s = MEND_STEP_FAILED;
    mend_run_status r = MEND_RUN_FAILED;
    CHECK_EQ_INT(mend_step_status_parse(unknown[i], &s), -1);
    CHECK_EQ_INT(mend_run_status_parse(unknown[i], &r), -1);
    CHECK_EQ_INT(s, MEND_STEP_FAILED);
    CHECK_EQ_INT(r, MEND_RUN_FAILED);
  }
  mend_step_status s;
  mend_run_status r;
  CHECK_EQ_INT(mend_step_status_parse("pending", &s), 0);
  CHECK_EQ_INT(mend_run_status_parse("pending", &r), -1);          /* a step word, not a run's */
  CHECK_EQ_INT(mend_step_status_parse("needs_attention", &s), -1);
  CHECK_EQ_INT(mend_step_status_parse(NULL, &s), -1);
  CHECK_EQ_INT(mend_run_status_parse(NULL, &r), -1);
}

static void it_allows_exactly_the_step_transitions_listed(void) {
  int legal = 0;
  for (int f = 0; f < MEND_STEP__COUNT; f++)
    for (int t = 0; t < MEND_STEP__COUNT; t++) {
      int want = expected(step_edges, N(step_edges), step_names[f], step_names[t]);
      int got = mend_step_transition_ok((mend_step_status)f, (mend_step_status)t);
      if (want != got)
        fprintf(stderr, "step %s -> %s: expected %s\n", step_names[f], step_names[t],
                want ? "legal" : "refused");
      CHECK_EQ_INT(got, want);
      legal += got;
    }
  CHECK_EQ_INT(legal, N(step_edges));
  /* A few that must never happen, spelled out. */
  CHECK(!mend_step_transition_ok(MEND_STEP_RETRY_WAIT, MEND_STEP_RUNNING));
  CHECK(!mend_step_transition_ok(MEND_STEP_BREAKER_OPEN, MEND_STEP_RUNNING));
  CHECK(!mend_step_transition_ok(MEND_STEP_SUCCEEDED, MEND_STEP_RUNNING));
  CHECK(!mend_step_transition_ok(MEND_STEP_COMPENSATED, MEND_STEP_COMPENSATING));
  CHECK(!mend_step_transition_ok(MEND_STEP_FAILED, MEND_STEP_RUNNING));
  CHECK(!mend_step_transition_ok(MEND_STEP_SKIPPED, MEND_STEP_COMPENSATING));   /* never undone */
  CHECK(!mend_step_transition_ok(MEND_STEP_SKIPPED, MEND_STEP_RUNNING));
  /* Out-of-range values are refused, not looked up. */
  CHECK(!mend_step_transition_ok(MEND_STEP__COUNT, MEND_STEP_RUNNING));
  CHECK(!mend_step_transition_ok(MEND_STEP_PENDING, MEND_STEP__COUNT));
  CHECK(!mend_step_transition_ok((mend_step_status)-1, MEND_STEP_RUNNING));
}

static void it_allows_exactly_the_run_transitions_listed(void) {
  int legal = 0;
  for (int f = 0; f < MEND_RUN__COUNT; f++)
    for (int t = 0; t < MEND_RUN__COUNT; t++) {
      int want = expected(run_edges, N(run_edges), run_names[f], run_names[t]);
      int got = mend_run_transition_ok((mend_run_status)f, (mend_run_status)t);
      if (want != got)
        fprintf(stderr, "run %s -> %s: expected %s\n", run_names[f], run_names[t],
                want ? "legal" : "refused");
      CHECK_EQ_INT(got, want);
      legal += got;
    }
  CHECK_EQ_INT(legal, N(run_edges));
  CHECK(!mend_run_transition_ok(MEND_RUN_SUCCEEDED, MEND_RUN_COMPENSATING));
  CHECK(!mend_run_transition_ok(MEND_RUN_COMPENSATED, MEND_RUN_RUNNING));
  CHECK(!mend_run_transition_ok(MEND_RUN_FAILED, MEND_RUN_NEEDS_ATTENTION));
  CHECK(!mend_run_transition_ok(MEND_RUN_COMPENSATING, MEND_RUN_RUNNING));
  CHECK(!mend_run_transition_ok(MEND_RUN_RUNNING, MEND_RUN_RUNNING));
  CHECK(!mend_run_transition_ok(MEND_RUN__COUNT, MEND_RUN_RUNNING));
  CHECK(!mend_run_transition_ok(MEND_RUN_RUNNING, (mend_run_status)-1));
}

static void it_knows_which_statuses_are_final(void) {
  /* Steps: the settled statuses, with no attempt in flight or due. */
  const char *final_steps[] = {"succeeded", "failed", "skipped", "compensated",
                               "compensation_failed"};
  for (int i = 0; i < MEND_STEP__COUNT; i++) {
    int want = 0;
    for (int j = 0; j < N(final_steps); j++)
      if (strcmp(final_steps[j], step_names[i]) == 0) want = 1;
    CHECK_EQ_INT(mend_step_status_final((mend_step_status)i), want);
  }
  const char *final_runs[] = {"succeeded", "compensated", "failed", "needs_attention",
                              "resolved"};
  for (int i = 0; i < MEND_RUN__COUNT; i++) {
    int want = 0;
    for (int j = 0; j < N(final_runs); j++)
      if (strcmp(final_runs[j], run_names[i]) == 0) want = 1;
    CHECK_EQ_INT(mend_run_status_final((mend_run_status)i), want);
  }
}

int main(void) {
  it_names_every_status_and_round_trips();
  it_allows_exactly_the_step_transitions_listed();
  it_allows_exactly_the_run_transitions_listed();
  it_knows_which_statuses_are_final();
  return check_done("transition");
}
