/*
 * transition: the state machines of steps and runs (SPEC section 2), in one place.
 *
 * Owns the status enums, their names, and the table of legal transitions. Every status change
 * in the engine is checked here; an illegal one is refused (the engine treats that as a bug and
 * says so loudly), never silently applied.
 */
#ifndef MEND_TRANSITION_H
#define MEND_TRANSITION_H

typedef enum mend_step_status {
  MEND_STEP_PENDING,
  MEND_STEP_RUNNING,
  MEND_STEP_RETRY_WAIT,
  MEND_STEP_BREAKER_OPEN,
  MEND_STEP_SLEEPING,      /* a durable wait before the step executes (`sleep = seconds`) */
  MEND_STEP_WAITING,       /* waits for a named event instead of executing (`wait_for`) */
  MEND_STEP_SKIPPED,       /* its `when(ctx)` said no: never executed, never compensated */
  MEND_STEP_SUCCEEDED,
  MEND_STEP_FAILED,
  MEND_STEP_COMPENSATING,
  MEND_STEP_COMPENSATED,
  MEND_STEP_COMPENSATION_FAILED,
  MEND_STEP__COUNT
} mend_step_status;

typedef enum mend_run_status {
  MEND_RUN_RUNNING,        /* moving forward */
  MEND_RUN_COMPENSATING,   /* moving backward */
  MEND_RUN_SUCCEEDED,
  MEND_RUN_COMPENSATED,
  MEND_RUN_FAILED,         /* failed with nothing to compensate */
  MEND_RUN_NEEDS_ATTENTION,/* in the dead-letter queue */
  MEND_RUN_RESOLVED,       /* taken out of the dead-letter queue by a person, with a note */
  MEND_RUN__COUNT
} mend_run_status;

/* 1 if from -> to is legal, 0 if not. Legal step transitions:
 *   pending -> running | breaker_open | sleeping | waiting
 *           | succeeded (its key already succeeded: result reused; or a pure wait step ended)
 *           | skipped (its `when(ctx)` returned false, or its group was skipped)
 *   sleeping -> pending
 *   waiting -> succeeded (its event consumed) | retry_wait | failed (timed out)
 *            | pending (cancelled)
 *   running -> succeeded | retry_wait | failed | running (re-execution after a crash)
 *            | waiting (executed, waits for its token; or started its child)
 *   retry_wait -> pending | breaker_open
 *   breaker_open -> pending | breaker_open
 *   succeeded | failed -> compensating
 *   failed -> pending (repair: a severity-3 step retried from the dead-letter queue)
 *   compensating -> compensated | compensation_failed | compensating (a compensation retry)
 *   compensation_failed -> compensating (repair from the dead-letter queue)
 * Legal run transitions:
 *   running -> compensating | succeeded | failed | needs_attention
 *   compensating -> compensated | needs_attention
 *   needs_attention -> running | compensating (repair) | resolved (settled by hand)
 */
int mend_step_transition_ok(mend_step_status from, mend_step_status to);
int mend_run_transition_ok(mend_run_status from, mend_run_status to);

/* succeeded, failed, skipped, compensated, compensation_failed */
int mend_step_status_final(mend_step_status s);
/* succeeded, compensated, failed, needs_attention, resolved */
int mend_run_status_final(mend_run_status s);

const char *mend_step_status_name(mend_step_status s);  /* "retry_wait" */
int         mend_step_status_parse(const char *name, mend_step_status *out); /* 0 ok, -1 */
const char *mend_run_status_name(mend_run_status s);
int         mend_run_status_parse(const char *name, mend_run_status *out);

#endif
