/*
 * W7: the cost of the circuit-breaker check on an attempt's path, in ns: mend_breaker_admit
 * before the attempt plus mend_breaker_record after it, as the engine calls them (engine.c
 * forward() and breaker_outcome()). Built by bench/run.lua against src/breaker.c.
 *
 *   breaker_bench [iterations]   prints one JSON line
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "breaker.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Keep the compiler from dropping the loop. */
static volatile long sink;

static double bench(long n, int fail_every, int *admitted_out) {
  mend_breaker b;
  mend_breaker_policy p;
  mend_breaker_policy_default(&p);
  p.open_seconds = 0.000001;   /* an open breaker turns half-open at once: every path is taken */
  mend_breaker_init(&b);
  double t = 1000.0, retry_at;
  long admitted = 0;
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    t += 1e-6;
    if (mend_breaker_admit(&b, &p, t, &retry_at)) {
      admitted++;
      mend_breaker_outcome o = fail_every && i % fail_every == 0 ? MEND_OUTCOME_RETRYABLE
                                                                  : MEND_OUTCOME_SUCCESS;
      mend_breaker_record(&b, &p, t, o);
    }
  }
  double secs = now_s() - t0;
  sink += admitted;
  *admitted_out = (int)(admitted > 0);
  return secs * 1e9 / (double)n;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000000;
  int a;
  bench(n / 10, 0, &a);                          /* warm up */
  double closed = bench(n, 0, &a);               /* always closed: the common case */
  double mixed = bench(n, 3, &a);                /* a failure every 3rd: opens, half-opens */
  printf("{\"ns_per_check\":%.3f,\"ns_per_check_mixed\":%.3f,\"seconds\":%.3f,"
         "\"latency\":\"ns per admit+record (C, -O2)\"}\n",
         closed, mixed, (closed + mixed) * (double)n / 1e9);
  return 0;
}
