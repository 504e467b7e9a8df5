/*
 * transition: the state machines of steps and runs (SPEC section 2), in one place.
 *
 * Owns the status names and the tables of legal transitions. It only answers; refusing loudly
 * is the caller's job, and nothing here changes a status.
 */
#include "transition.h"

#include <string.h>

#define S(x) MEND_STEP_##x
#define R(x) MEND_RUN_##x

/* [from][to] = 1 when legal. Designated initializers keep each row next to the header's list. */
static const unsigned char step_ok[MEND_STEP__COUNT][MEND_STEP__COUNT] = {
  [S(PENDING)] = {[S(RUNNING)] = 1, [S(BREAKER_OPEN)] = 1, [S(SLEEPING)] = 1, [S(WAITING)] = 1,
                  [S(SUCCEEDED)] = 1 /* its idempotency key already succeeded: result reused */,
                  [S(SKIPPED)] = 1 /* when(ctx) said no */},
  [S(RUNNING)] = {[S(SUCCEEDED)] = 1, [S(RETRY_WAIT)] = 1, [S(FAILED)] = 1,
                  [S(WAITING)] = 1 /* executed: waits for its token, or started its child */,
                  [S(RUNNING)] = 1 /* re-execution after a crash */},
  [S(RETRY_WAIT)] = {[S(PENDING)] = 1, [S(BREAKER_OPEN)] = 1},
  [S(BREAKER_OPEN)] = {[S(PENDING)] = 1, [S(BREAKER_OPEN)] = 1 /* waits again, new retry_at */},
  [S(SLEEPING)] = {[S(PENDING)] = 1},
  [S(WAITING)] = {[S(SUCCEEDED)] = 1 /* its event consumed */, [S(RETRY_WAIT)] = 1,
                  [S(FAILED)] = 1 /* timed out */, [S(PENDING)] = 1 /* cancelled */},
  [S(SKIPPED)] = {0},
  [S(SUCCEEDED)] = {[S(COMPENSATING)] = 1},
  [S(FAILED)] = {[S(COMPENSATING)] = 1, [S(PENDING)] = 1 /* repair: retried with fresh attempts */},
  [S(COMPENSATING)] = {[S(COMPENSATED)] = 1, [S(COMPENSATION_FAILED)] = 1,
                       [S(COMPENSATING)] = 1 /* a compensation retry */},
  [S(COMPENSATED)] = {0},
  [S(COMPENSATION_FAILED)] = {[S(COMPENSATING)] = 1 /* repair from the dead-letter queue */},
};

static const unsigned char run_ok[MEND_RUN__COUNT][MEND_RUN__COUNT] = {
  [R(RUNNING)] = {[R(COMPENSATING)] = 1, [R(SUCCEEDED)] = 1, [R(FAILED)] = 1,
                  [R(NEEDS_ATTENTION)] = 1},
  [R(COMPENSATING)] = {[R(COMPENSATED)] = 1, [R(NEEDS_ATTENTION)] = 1},
  [R(SUCCEEDED)] = {0},
  [R(COMPENSATED)] = {0},
  [R(FAILED)] = {0},
  [R(NEEDS_ATTENTION)] = {[R(RUNNING)] = 1, [R(COMPENSATING)] = 1 /* repair */,
                          [R(RESOLVED)] = 1 /* settled by hand */},
  [R(RESOLVED)] = {0},
};

/* Out-of-range values come from corrupt rows or bugs; they must be refused, not index past
 * the tables. */
static int step_valid(mend_step_status s) { return (int)s >= 0 && (int)s < MEND_STEP__COUNT; }
static int run_valid(mend_run_status s) { return (int)s >= 0 && (int)s < MEND_RUN__COUNT; }

int mend_step_transition_ok(mend_step_status from, mend_step_status to) {
  return step_valid(from) && step_valid(to) && step_ok[from][to];
}

int mend_run_transition_ok(mend_run_status from, mend_run_status to) {
  return run_valid(from) && run_valid(to) && run_ok[from][to];
}

int mend_step_status_final(mend_step_status s) {
  return s == MEND_STEP_SUCCEEDED || s == MEND_STEP_FAILED || s == MEND_STEP_SKIPPED ||
         s == MEND_STEP_COMPENSATED ||
         s == MEND_STEP_COMPENSATION_FAILED;
}

int mend_run_status_final(mend_run_status s) {
  return s == MEND_RUN_SUCCEEDED || s == MEND_RUN_COMPENSATED || s == MEND_RUN_FAILED ||
         s == MEND_RUN_NEEDS_ATTENTION || s == MEND_RUN_RESOLVED;
}

static const char *const step_names[MEND_STEP__COUNT] = {
  [S(PENDING)] = "pending",
  [S(RUNNING)] = "running",
  [S(RETRY_WAIT)] = "retry_wait",
  [S(BREAKER_OPEN)] = "breaker_open",
  [S(SLEEPING)] = "sleeping",
  [S(WAITING)] = "waiting",
  [S(SKIPPED)] = "skipped",
  [S(SUCCEEDED)] = "succeeded",
  [S(FAILED)] = "failed",
  [S(COMPENSATING)] = "compensating",
  [S(COMPENSATED)] = "compensated",
  [S(COMPENSATION_FAILED)] = "compensation_failed",
};

static const char *const run_names[MEND_RUN__COUNT] = {
  [R(RUNNING)] = "running",
  [R(COMPENSATING)] = "compensating",
  [R(SUCCEEDED)] = "succeeded",
  [R(COMPENSATED)] = "compensated",
  [R(FAILED)] = "failed",
  [R(NEEDS_ATTENTION)] = "needs_attention",
  [R(RESOLVED)] = "resolved",
};

const char *mend_step_status_name(mend_step_status s) {
  return step_valid(s) ? step_names[s] : "unknown";
}

const char *mend_run_status_name(mend_run_status s) {
  return run_valid(s) ? run_names[s] : "unknown";
}

int mend_step_status_parse(const char *name, mend_step_status *out) {
  if (!name) return -1;
  for (int i = 0; i < MEND_STEP__COUNT; i++)
    if (strcmp(step_names[i], name) == 0) {
      *out = (mend_step_status)i;
      return 0;
    }
  return -1;
}

int mend_run_status_parse(const char *name, mend_run_status *out) {
  if (!name) return -1;
  for (int i = 0; i < MEND_RUN__COUNT; i++)
    if (strcmp(run_names[i], name) == 0) {
      *out = (mend_run_status)i;
      return 0;
    }
  return -1;
}
