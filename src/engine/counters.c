/*
 * counters: the engine's side of counters.h. Owns timing a batch from its hand-off to the
 * store until the engine learns it is durable (a commit on the loop, or the writer thread's),
 * the latency buckets, and the calls a host reads the counters with. The counts of runs,
 * attempts, failures and retries are bumped where those happen (run.c, status.c, attempt.c,
 * saga.c), one integer each.
 *
 * Must never: read the clock more than twice a batch; count a batch that wrote nothing;
 * allocate or lock.
 */
#include "engine_int.h"

#include <string.h>

_Static_assert((int)MEND_RUN__COUNT == (int)MEND_RUN_STATUSES, "counters.h: run statuses");
_Static_assert((int)MEND_ERR_ERROR + 1 == (int)MEND_ERROR_KINDS, "counters.h: error kinds");

/* 100 us to 2.5 s: a commit in process mode takes tens of microseconds, one with an fsync
 * milliseconds, one waiting for another process's lock up to the busy wait. */
const uint64_t mend_commit_bucket_ns[MEND_COMMIT_BUCKETS - 1] = {
  100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 25000000, 50000000,
  100000000, 250000000, 500000000, 1000000000, 2500000000u};

static void count_batch(mend_engine *E, uint64_t ns) {
  int k = 0;
  while (k < MEND_COMMIT_BUCKETS - 1 && ns > mend_commit_bucket_ns[k]) k++;
  E->commits.bucket[k]++;
  E->commits.batches++;
  E->commits.latency_ns += ns;
}

/* mend_store_commit, counted when it wrote a batch. A commit with the writer thread busy
 * waits for its batch first, which this one then counts in its own time (the handed batch is
 * counted as it settles, pump.c). */
int mend__commit_counted(mend_engine *E) {
  if (!mend_store_batch_open(E->store)) return mend_store_commit(E->store);
  uint64_t t0 = uv_hrtime();
  int rc = mend_store_commit(E->store);
  if (rc == 0) count_batch(E, uv_hrtime() - t0);
  return rc;
}

/* A batch that wrote something was handed to the writer thread at `at` (taken before the
 * hand-off: the thread may be done with it before the hand-off returns). */
void mend__handed(mend_engine *E, uint64_t at) {
  if (!E->handed_at) E->handed_at = at;
}

/* The batch handed last is durable (or was never more than nothing). */
void mend__handed_durable(mend_engine *E) {
  if (!E->handed_at) return;
  count_batch(E, uv_hrtime() - E->handed_at);
  E->handed_at = 0;
}

void mend_engine_commit_counters(const mend_engine *E, mend_commit_counters *out) {
  *out = E->commits;
}

int mend_engine_workflow_counters(const mend_engine *E, int i, const char **name,
                                  mend_workflow_counters *out) {
  const mend_workflow *wf = E->workflows;
  while (wf && i-- > 0) wf = wf->next;
  if (!wf) return -1;
  *name = wf->name;
  *out = wf->counts;
  return 0;
}
