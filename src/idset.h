/*
 * idset: a set of run ids (strings of a given length, copied in). The store's fence keeps the
 * runs a worker lost to another in one, and the runs it has looked up in another; the engine
 * uses one to match its runs against those the store says it holds. Must never: keep a
 * caller's pointer (ids are copied in), nor know what an id names.
 */
#ifndef MEND_IDSET_H
#define MEND_IDSET_H

#include <stddef.h>

typedef struct mend_idset {
  char **slots;   /* open addressing, linear probing; NULL is empty */
  size_t cap, count;
} mend_idset;

int  mend_idset_add(mend_idset *s, const char *id, size_t len);   /* 1 added, 0 there, -1 OOM */
int  mend_idset_has(const mend_idset *s, const char *id, size_t len);
void mend_idset_remove(mend_idset *s, const char *id, size_t len);
void mend_idset_clear(mend_idset *s);   /* empty, and its memory given back */

#endif
