/*
 * tick_floor: what this machine alone does to a frame's tick (bench/run.lua, W11f). A 60 Hz
 * frame loop like examples/game_loop.c's, whose "tick" is a fixed piece of arithmetic that
 * takes the budget when nothing interrupts it: no engine, no store, no allocation, no system
 * call inside the piece. Whatever makes a piece last longer than its budget (the scheduler
 * giving the core to another thread, an interrupt, the hypervisor taking the virtual CPU away,
 * which a guest may not see at all) would stretch a tick of mend's alike, so W11's tick times
 * are read against these: the max here is the floor under W11's max.
 * Prints one JSON line: the pieces' wall times (p50, p99, max), how many were over the budget
 * by 10% and over twice it, and how many the kernel preempted (involuntary switches).
 *
 *   tick_floor FRAMES BUDGET_MS [CPU]
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long involuntary(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nivcsw;
}

/* The piece: a chain of multiplications no compiler can shorten (each needs the last). */
static volatile unsigned long sink;
static void piece(long n) {
  unsigned long x = (unsigned long)n;
  for (long k = 0; k < n; k++) x = x * 6364136223846793005UL + 1442695040888963407UL;
  sink = x;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: tick_floor FRAMES BUDGET_MS [CPU]\n");
    return 2;
  }
  long frames = atol(argv[1]);
  double budget = atof(argv[2]) / 1e3;
  if (frames < 1 || !(budget > 0 && budget < 1)) {
    fprintf(stderr, "tick_floor: FRAMES must be at least 1 and BUDGET_MS within (0, 1000)\n");
    return 2;
  }
  int cpu = argc > 3 ? atoi(argv[3]) : -1;
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      perror("tick_floor: sched_setaffinity");
      return 1;
    }
  }
  /* Iterations for the budget: the fastest of many short timings is the one nothing
   * interrupted, which is what a piece costs on its own. */
  const long probe = 20000;
  double best = 1;
  for (int i = 0; i < 200; i++) {
    double t = now();
    piece(probe);
    t = now() - t;
    if (t > 0 && t < best) best = t;
  }
  long n = (long)(probe * budget / best);
  double *took = malloc((size_t)frames * sizeof *took);
  if (!took) return 1;
  long preempted = 0, over10 = 0, over2x = 0;
  const double dt = 1.0 / 60;
  double t0 = now();
  for (long f = 0; f < frames; f++) {
    long v = involuntary();
    double t = now();
    piece(n);
    took[f] = now() - t;
    if (involuntary() > v) preempted++;
    if (took[f] > budget * 1.1) over10++;
    if (took[f] > budget * 2) over2x++;
    double next = t0 + (double)(f + 1) * dt, left = next - now();
    if (left > 0) {
      struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
      nanosleep(&ts, NULL);
    }
  }
  qsort(took, (size_t)frames, sizeof *took, cmp);
  printf("{\"frames\":%ld,\"budget_ms\":%.3f,\"cpu\":%d,\"p50_ms\":%.3f,\"p99_ms\":%.3f,"
         "\"max_ms\":%.3f,\"over_10pct\":%ld,\"over_2x\":%ld,\"preempted\":%ld}\n",
         frames, budget * 1e3, cpu, took[frames / 2] * 1e3, took[frames * 99 / 100] * 1e3,
         took[frames - 1] * 1e3, over10, over2x, preempted);
  free(took);
  return 0;
}
