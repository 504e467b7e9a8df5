/*
 * counters: what one engine did since it was created, as plain integers: runs started and
 * ended, step attempts, failures by kind, retries (per workflow version, kept in its
 * mend_workflow), and batches committed with their latency (per engine). The engine bumps them
 * on its loop's thread; a host reads them there (mend serve's /metrics, src/serve/metrics.c)
 * through mend_engine_counters and mend_engine_workflow_counters (engine.h).
 *
 * Must never: take a lock, allocate, or read the clock per event (the pump's hot path bumps
 * them); hold anything read from the database (several processes share one: what is in it is
 * read from it at each scrape, not counted here).
 */
#ifndef MEND_COUNTERS_H
#define MEND_COUNTERS_H

#include <stdint.h>

/* Phases of a step's work, and the kinds of error a step fails with (as lerror.h's
 * mend_error_kind: retryable, fatal, compensable, timeout, error). */
enum { MEND_PHASE_EXECUTE, MEND_PHASE_COMPENSATE, MEND_PHASES };
enum { MEND_ERROR_KINDS = 5 };
/* Run statuses (transition.h's mend_run_status): running .. resolved. */
enum { MEND_RUN_STATUSES = 7 };

typedef struct mend_workflow_counters {
  uint64_t runs_started;                      /* recorded by this engine (detached ones too) */
  uint64_t runs_ended[MEND_RUN_STATUSES];     /* by the end status reached here, each time one
                                                 is reached (a dead letter retried that then
                                                 succeeds counts in needs_attention and in
                                                 succeeded) */
  uint64_t attempts[MEND_PHASES];             /* attempts begun (execute, compensate) */
  uint64_t failures[MEND_PHASES][MEND_ERROR_KINDS];   /* step failures by phase and kind */
  uint64_t retries[MEND_PHASES];              /* failures answered by a retry after a delay */
} mend_workflow_counters;

/* Commit latency: from a batch handed to the store (committed on the loop, or handed to the
 * writer thread) to the engine learning it is durable. Upper bounds of the buckets in
 * nanoseconds; the last bucket (+Inf) has none. */
#define MEND_COMMIT_BUCKETS 15
extern const uint64_t mend_commit_bucket_ns[MEND_COMMIT_BUCKETS - 1];

typedef struct mend_commit_counters {
  uint64_t batches;                        /* batches committed (that wrote something) */
  uint64_t bucket[MEND_COMMIT_BUCKETS];    /* batches by latency, each in the first bucket whose
                                              bound it does not pass: not cumulative */
  uint64_t latency_ns;                     /* the sum of their latencies */
} mend_commit_counters;

#endif
