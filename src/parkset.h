/*
 * parkset: the index of the runs an engine holds but keeps out of memory (parked, see
 * src/engine/park.c): for each, its id packed into 12 bytes and the time it is due to wake, if
 * any, in 24 bytes, with a hash of the ids (4 bytes a slot, half full at most) and a min-heap of
 * the timed ones (4 bytes each). Knows nothing of runs, stores or clocks; must never hold
 * anything per run beyond that entry, nor take an id that is not a run id (it cannot pack it).
 */
#ifndef MEND_PARKSET_H
#define MEND_PARKSET_H

#include <stddef.h>
#include <stdint.h>

typedef struct mend_parked {
  double due;      /* < 0: no due time (woken only by what it waits for) */
  uint64_t hi;     /* the id's first 12 characters, 5 bits each */
  uint32_t lo;     /* its last 4 */
  uint32_t heap;   /* its place in the heap; UINT32_MAX when untimed */
} mend_parked;

typedef struct mend_parkset {
  mend_parked *e;  /* dense: removal moves the last entry into the hole */
  uint32_t n, cap;
  uint32_t *heap;  /* indexes into e, by due */
  uint32_t nheap, capheap;
  uint32_t *slot;  /* open addressing, linear probing: index into e + 1; 0 is empty */
  uint32_t nslot;  /* a power of two, or 0 */
} mend_parkset;

/* 1 added, 0 there already (its due time replaced), -1 out of memory, -2 not a run id. */
int    mend_parkset_add(mend_parkset *p, const char *id, double due);
int    mend_parkset_remove(mend_parkset *p, const char *id);   /* 1 removed, 0 not there */
int    mend_parkset_has(const mend_parkset *p, const char *id);
/* The earliest due time, or -1 when no entry has one. */
double mend_parkset_next_due(const mend_parkset *p);
/* Removes the earliest entry due at or before `now` and writes its id: 1, or 0 when none is. */
int    mend_parkset_pop_due(mend_parkset *p, double now, char id[17]);
/* The id of entry i (0 <= i < n), for a walk over them all. */
void   mend_parkset_id(const mend_parkset *p, uint32_t i, char id[17]);
void   mend_parkset_free(mend_parkset *p);   /* empty, and its memory given back */

#endif
