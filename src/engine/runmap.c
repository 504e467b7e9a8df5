/*
 * runmap: the runs in flight by id, so that what names a run (an event, a repair, a child's
 * end) finds it without walking every run an engine holds (thousands for a game server, each
 * signal a walk). Chained by mend_run.hnext; a lost copy of a run may share its id with the
 * run that replaced it. Must never: hold a run that is not in the engine's list of runs, nor
 * own one (runs are made and freed in run.c).
 */
#include "engine_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t hash_id(const char *id) {
  uint32_t h = 2166136261u;   /* FNV-1a */
  for (; *id; id++) h = (h ^ (unsigned char)*id) * 16777619u;
  return h;
}

static int grow(mend_engine *E) {
  size_t n = E->runmap_n ? E->runmap_n * 2 : 256;
  mend_run **b = calloc(n, sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < E->runmap_n; i++)
    for (mend_run *r = E->runmap[i], *next; r; r = next) {
      next = r->hnext;
      size_t k = hash_id(r->id) & (n - 1);
      r->hnext = b[k];
      b[k] = r;
    }
  free(E->runmap);
  E->runmap = b;
  E->runmap_n = n;
  return 0;
}

/* Out of memory at a resize, the table only stays fuller than it would like. */
void mend__runmap_add(mend_engine *E, mend_run *r) {
  if ((size_t)E->in_flight >= E->runmap_n && grow(E) && !E->runmap_n) {
    mend__breakdown(E, "out of memory indexing run %s", r->id);
    return;
  }
  size_t k = hash_id(r->id) & (E->runmap_n - 1);
  r->hnext = E->runmap[k];
  E->runmap[k] = r;
}

void mend__runmap_remove(mend_engine *E, mend_run *r) {
  if (!E->runmap_n) return;
  for (mend_run **p = &E->runmap[hash_id(r->id) & (E->runmap_n - 1)]; *p; p = &(*p)->hnext)
    if (*p == r) {
      *p = r->hnext;
      return;
    }
}

mend_run *mend__find_run(mend_engine *E, const char *id) {
  if (!E->runmap_n) return NULL;
  for (mend_run *r = E->runmap[hash_id(id) & (E->runmap_n - 1)]; r; r = r->hnext)
    if (!r->lost && strcmp(r->id, id) == 0) return r;   /* a lost copy is no longer the run */
  return NULL;
}

void mend__runmap_free(mend_engine *E) {
  free(E->runmap);
  E->runmap = NULL;
  E->runmap_n = 0;
}
