/*
 * tickprof: a profile of a ticking host's ticks, piece by piece, for finding what makes a tick
 * run past its budget. Turned on by the environment variable MEND_TICK_PROFILE (a file to
 * append to, or "-" for stderr) when an engine first ticks. For each piece of work a tick does
 * between two of its clock checks (an answer resuming its step, an event reaching its run, an
 * action, the turn's pick-up of durable batches, the hand-off of the open batch, a collector
 * step) it takes the thread's CPU time, wall time, page faults, voluntary context switches
 * (the thread waited: a lock, I/O) and involuntary ones (it was preempted: on a VM that reports
 * no steal time a thread's CPU clock runs on while the hypervisor has its vCPU, and the guest
 * then preempts the thread for the slice it seems to have used, so a dear piece that was
 * preempted is most likely time the thread never ran), the open batch's records a read ran
 * first and the Lua heap's change; for each tick the same in all, with what its pieces did not
 * account for (the loop's own work, timers); for the collector's steps, what they did
 * (marking, the atomic step, sweeping), told apart by the bytes they freed. Prints the pieces
 * and ticks worth a look as they happen, and a table by kind when the engine is freed.
 *
 * Must never: cost more than a call and a pointer test when it is off; change what a tick does
 * or decides (it reads clocks and counters only: the store's totals, the heap's size); run a
 * statement or Lua code.
 */
#define _GNU_SOURCE   /* RUSAGE_THREAD */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <lua.h>

/* A piece dearer than this (CPU seconds), or one that waited or faulted a page in from disk,
 * is printed on its own line. */
#define PIECE_WORTH_A_LINE 0.0003

static const char *const kind_names[MEND_TP_KINDS] = {
  "answer", "event", "advance", "execute", "compensate", "finish", "pickup", "handoff",
  "gc_step", "timers", "other",
};

typedef struct tp_kind {
  long n, dear, waited;
  double cpu, cpu_max, wall_max;
  long minflt, majflt, vcsw;
} tp_kind;

typedef struct tp_sample {
  double cpu, wall, flush_cpu;
  long minflt, majflt, vcsw, ivcsw;
  unsigned long flushed;   /* the open batch's records a read ran first on this thread */
  long kb;                 /* the Lua heap */
  size_t allocated, used;  /* the engine allocator's totals */
  size_t freed;            /* of a difference: the bytes the piece freed */
} tp_sample;

/* Collector pieces (a step or a few, drive.c) by what they did, told apart by counting, not
 * timing: a piece that freed bytes swept; one that freed none marked; the last that freed
 * none before a cycle's first sweep is taken for the one with its atomic step (which
 * re-traverses every live thread and gray-again table). A piece across two phases counts as
 * the later one. */
enum { GC_MARK, GC_ATOMIC, GC_SWEEP, GC_CLASSES };
static const char *const gc_class_names[GC_CLASSES] = {"mark", "atomic", "sweep"};

typedef struct tp_gc {
  long n, dear;
  double cpu, cpu_max;
  double freed, freed_max;
} tp_gc;

struct mend_tickprof {
  FILE *out;
  int own_file;
  tp_kind kinds[MEND_TP_KINDS];
  tp_sample piece0, tick0;
  int in_piece;
  long tick_no;
  double budget;
  /* the tick so far */
  double pieces_cpu, dearest;
  int dearest_kind, npieces;
  /* every tick */
  double *tick_cpu;
  long ticks, ticks_cap, ticks_waited, ticks_faulted, ticks_over;
  long ticks_long, ticks_long_preempted;   /* CPU over 1.5x the budget; of them, preempted */
  double rest_max;
  /* the collector's steps */
  tp_gc gc[GC_CLASSES];
  int gc_swept;             /* this cycle has freed: its atomic step is behind */
  double gc_last_cpu;       /* the last step, if it freed nothing (an atomic candidate) */
  int gc_last_dear;
  long gc_cycles, threads_max;
};

static void sample(mend_engine *E, tp_sample *s) {
  struct timespec ts;
  struct rusage ru;
  int pending;
  mend_store_read_flushes(E->store, &s->flushed, &s->flush_cpu, &pending);
  s->kb = lua_gc(E->L, LUA_GCCOUNT);
  s->allocated = E->mem_allocated;
  s->used = E->mem_used;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  s->cpu = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  s->wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  getrusage(RUSAGE_THREAD, &ru);
  s->minflt = ru.ru_minflt;
  s->majflt = ru.ru_majflt;
  s->vcsw = ru.ru_nvcsw;
  s->ivcsw = ru.ru_nivcsw;
}

static void since(mend_engine *E, const tp_sample *a, tp_sample *d) {
  tp_sample b;
  sample(E, &b);
  d->flushed = b.flushed - a->flushed;
  d->flush_cpu = b.flush_cpu - a->flush_cpu;
  d->kb = b.kb - a->kb;
  /* what was freed: the bytes allocated less the growth of what is in use */
  d->freed = b.allocated - a->allocated - (b.used - a->used);
  d->cpu = b.cpu - a->cpu;
  d->wall = b.wall - a->wall;
  d->minflt = b.minflt - a->minflt;
  d->majflt = b.majflt - a->majflt;
  d->vcsw = b.vcsw - a->vcsw;
  d->ivcsw = b.ivcsw - a->ivcsw;
}

static void add(mend_tickprof *P, int kind, const tp_sample *d) {
  tp_kind *k = &P->kinds[kind];
  k->n++;
  k->cpu += d->cpu;
  if (d->cpu > k->cpu_max) k->cpu_max = d->cpu;
  if (d->wall > k->wall_max) k->wall_max = d->wall;
  if (d->cpu > PIECE_WORTH_A_LINE) k->dear++;
  if (d->vcsw) k->waited++;
  k->minflt += d->minflt;
  k->majflt += d->majflt;
  k->vcsw += d->vcsw;
}

static mend_tickprof *open_profile(void) {
  const char *path = getenv("MEND_TICK_PROFILE");
  if (!path || !*path) return NULL;
  mend_tickprof *P = calloc(1, sizeof *P);
  if (!P) return NULL;
  P->gc_last_cpu = -1;
  if (strcmp(path, "-") == 0) P->out = stderr;
  else {
    P->out = fopen(path, "a");
    P->own_file = 1;
  }
  if (!P->out) {
    fprintf(stderr, "mend: MEND_TICK_PROFILE: cannot open %s\n", path);
    free(P);
    return NULL;
  }
  fprintf(P->out, "# mend tick profile: P tick kind what cpu_ms wall_ms minflt majflt vcsw"
                  " flushed_recs flush_ms lua_kb_delta began_monotonic_s ivcsw\n"
                  "#                    T tick cpu_ms wall_ms pieces pieces_cpu_ms rest_cpu_ms"
                  " minflt majflt vcsw dearest_kind dearest_ms ivcsw\n");
  return P;
}

void mend__tp_tick_begin(mend_engine *E, double budget) {
  if (!E->tprof_tried) {
    E->tprof_tried = 1;
    E->tprof = open_profile();
  }
  mend_tickprof *P = E->tprof;
  if (!P) return;
  P->tick_no++;
  P->budget = budget;
  P->pieces_cpu = P->dearest = 0;
  P->dearest_kind = MEND_TP_OTHER;
  P->npieces = 0;
  P->in_piece = 0;
  sample(E, &P->tick0);
}

void mend__tp_begin(mend_engine *E) {
  mend_tickprof *P = E->tprof;
  if (!P || E->turn_deadline <= 0 || P->in_piece) return;
  P->in_piece = 1;
  sample(E, &P->piece0);
}

static void gc_add(mend_tickprof *P, int cls, double cpu, double freed) {
  tp_gc *g = &P->gc[cls];
  g->n++;
  g->cpu += cpu;
  if (cpu > g->cpu_max) g->cpu_max = cpu;
  if (cpu > PIECE_WORTH_A_LINE) g->dear++;
  g->freed += freed;
  if (freed > g->freed_max) g->freed_max = freed;
}

/* Classifies a collector step (what: "cycle_end" when it ended one); returns its class as it
 * is known now (a step that freed nothing is a mark step until the next one sweeps). */
static int gc_classify(mend_engine *E, mend_tickprof *P, const tp_sample *d, const char *what) {
  double freed = (double)d->freed;
  int cls = freed > 0 ? GC_SWEEP : GC_MARK;
  if (cls == GC_SWEEP && !P->gc_swept && P->gc_last_cpu >= 0) {
    /* the step before this cycle's first sweep was its atomic one, counted as mark */
    tp_gc *m = &P->gc[GC_MARK];
    m->n--;
    m->cpu -= P->gc_last_cpu;
    m->dear -= P->gc_last_dear;
    gc_add(P, GC_ATOMIC, P->gc_last_cpu, 0);
    if (P->gc_last_cpu > PIECE_WORTH_A_LINE)
      fprintf(P->out, "G atomic %.3f threads %d\n", P->gc_last_cpu * 1e3, E->attempts);
  }
  if (cls == GC_SWEEP) P->gc_swept = 1;
  gc_add(P, cls, d->cpu, freed);
  P->gc_last_cpu = cls == GC_MARK ? d->cpu : -1;
  P->gc_last_dear = cls == GC_MARK && d->cpu > PIECE_WORTH_A_LINE;
  if (E->attempts > P->threads_max) P->threads_max = E->attempts;
  if (what && strcmp(what, "cycle_end") == 0) {
    P->gc_cycles++;
    P->gc_swept = 0;
    P->gc_last_cpu = -1;
  }
  return cls;
}

void mend__tp_end(mend_engine *E, int kind, const char *what) {
  mend_tickprof *P = E->tprof;
  if (!P || !P->in_piece) return;
  P->in_piece = 0;
  tp_sample d;
  since(E, &P->piece0, &d);
  add(P, kind, &d);
  char gcwhat[96];
  if (kind == MEND_TP_GC) {
    int cls = gc_classify(E, P, &d, what);
    snprintf(gcwhat, sizeof gcwhat, "%s:freed=%zu:threads=%d%s", gc_class_names[cls], d.freed,
             E->attempts, what ? ":cycle_end" : "");
    what = gcwhat;
  }
  P->pieces_cpu += d.cpu;
  P->npieces++;
  if (d.cpu > P->dearest) {
    P->dearest = d.cpu;
    P->dearest_kind = kind;
  }
  if (d.cpu > PIECE_WORTH_A_LINE || d.vcsw || d.majflt)
    fprintf(P->out, "P %ld %s %s %.3f %.3f %ld %ld %ld %lu %.3f %ld %.6f %ld\n", P->tick_no,
            kind_names[kind], what ? what : "-", d.cpu * 1e3, d.wall * 1e3, d.minflt, d.majflt,
            d.vcsw, d.flushed, d.flush_cpu * 1e3, d.kb, P->piece0.wall, d.ivcsw);
}

void mend__tp_tick_end(mend_engine *E) {
  mend_tickprof *P = E->tprof;
  if (!P) return;
  tp_sample d;
  since(E, &P->tick0, &d);
  double rest = d.cpu - P->pieces_cpu;
  tp_sample r = {.cpu = rest, .wall = rest};
  add(P, MEND_TP_OTHER, &r);
  if (rest > P->rest_max) P->rest_max = rest;
  if (P->ticks == P->ticks_cap) {
    long cap = P->ticks_cap ? 2 * P->ticks_cap : 4096;
    double *t = realloc(P->tick_cpu, (size_t)cap * sizeof *t);
    if (!t) return;
    P->tick_cpu = t;
    P->ticks_cap = cap;
  }
  P->tick_cpu[P->ticks++] = d.cpu;
  if (d.vcsw) P->ticks_waited++;
  if (d.majflt) P->ticks_faulted++;
  int over = d.cpu > P->budget * 1.1;
  P->ticks_over += over;
  if (d.cpu > P->budget * 1.5) {
    P->ticks_long++;
    P->ticks_long_preempted += d.ivcsw > 0;
  }
  if (over || d.vcsw || d.majflt || rest > PIECE_WORTH_A_LINE)
    fprintf(P->out, "T %ld %.3f %.3f %d %.3f %.3f %ld %ld %ld %s %.3f %ld\n", P->tick_no,
            d.cpu * 1e3, d.wall * 1e3, P->npieces, P->pieces_cpu * 1e3, rest * 1e3, d.minflt,
            d.majflt, d.vcsw, kind_names[P->dearest_kind], P->dearest * 1e3, d.ivcsw);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double nearest_rank(const double *v, long n, int p) {
  long i = (n * p + 99) / 100 - 1;
  return n ? v[i < 0 ? 0 : i >= n ? n - 1 : i] : 0;
}

void mend__tp_close(mend_engine *E) {
  mend_tickprof *P = E->tprof;
  if (!P) return;
  E->tprof = NULL;
  qsort(P->tick_cpu, (size_t)P->ticks, sizeof *P->tick_cpu, cmp_double);
  fprintf(P->out, "# ticks %ld: CPU p50 %.3f p99 %.3f max %.3f ms; over budget+10%% %ld;"
                  " over 1.5x %ld (preempted %ld); waited %ld; major faults in %ld;"
                  " rest max %.3f ms\n", P->ticks,
          nearest_rank(P->tick_cpu, P->ticks, 50) * 1e3,
          nearest_rank(P->tick_cpu, P->ticks, 99) * 1e3,
          nearest_rank(P->tick_cpu, P->ticks, 100) * 1e3, P->ticks_over, P->ticks_long,
          P->ticks_long_preempted, P->ticks_waited, P->ticks_faulted, P->rest_max * 1e3);
  fprintf(P->out, "# %-10s %9s %9s %9s %9s %9s %7s %9s %7s %7s\n", "kind", "n", "cpu_ms",
          "mean_us", "max_ms", "maxwall", "dear", "minflt", "majflt", "waited");
  for (int i = 0; i < MEND_TP_KINDS; i++) {
    const tp_kind *k = &P->kinds[i];
    if (!k->n) continue;
    fprintf(P->out, "# %-10s %9ld %9.1f %9.1f %9.3f %9.3f %7ld %9ld %7ld %7ld\n", kind_names[i],
            k->n, k->cpu * 1e3, k->cpu / (double)k->n * 1e6, k->cpu_max * 1e3, k->wall_max * 1e3,
            k->dear, k->minflt, k->majflt, k->waited);
  }
  fprintf(P->out, "# collector: %ld cycles, at most %ld live attempt coroutines at a step\n",
          P->gc_cycles, P->threads_max);
  fprintf(P->out, "# %-10s %9s %9s %9s %9s %7s %11s %11s\n", "gc class", "n", "cpu_ms",
          "mean_us", "max_ms", "dear", "freed_mean", "freed_max");
  for (int i = 0; i < GC_CLASSES; i++) {
    const tp_gc *g = &P->gc[i];
    if (!g->n) continue;
    fprintf(P->out, "# %-10s %9ld %9.1f %9.1f %9.3f %7ld %11.0f %11.0f\n", gc_class_names[i],
            g->n, g->cpu * 1e3, g->cpu / (double)g->n * 1e6, g->cpu_max * 1e3, g->dear,
            g->freed / (double)g->n, g->freed_max);
  }
  if (P->own_file) fclose(P->out);
  else fflush(P->out);
  free(P->tick_cpu);
  free(P);
}
