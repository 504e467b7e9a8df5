/*
 * blocks: an engine's own Lua state's small blocks kept by size class (see blocks.h). A state
 * allocates and frees about fifty blocks of under a kilobyte a run (W9: the ctx table and its
 * slots, the coroutine, its stack and call frames, the call's table, the response, strings),
 * and its collector frees them in bursts of thousands: the C library's per-thread cache holds
 * seven of a size, so most would go through its bins (malloc, free and their consolidation,
 * a fifth of the loop thread's instructions). Must never: hand out a block smaller than its
 * class; keep a block past mend_blocks_drop.
 */
#include "blocks.h"

#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define BLOCKS_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BLOCKS_OFF 1
#endif
#endif
#ifndef BLOCKS_OFF
#define BLOCKS_OFF 0
#endif

/* The class of a block of n bytes (1 <= n <= MEND_BLOCKS_MAX), and that class's size. */
static inline int class_of(size_t n) { return (int)((n - 1) / MEND_BLOCKS_STEP); }
static inline size_t class_size(int c) { return (size_t)(c + 1) * MEND_BLOCKS_STEP; }

void mend_blocks_init(mend_blocks *b) {
  memset(b, 0, sizeof *b);
  b->off = BLOCKS_OFF;
}

/* ptr (a block of old bytes, old >= 1) freed: kept on its class's list while there is room. */
static void give_back(mend_blocks *b, void *ptr, size_t old) {
  if (old <= MEND_BLOCKS_MAX && !b->off) {
    int c = class_of(old);
    size_t size = class_size(c);
    if (b->kept + size <= MEND_BLOCKS_KEEP_BYTES) {
      *(void **)ptr = b->head[c];
      b->head[c] = ptr;
      b->kept += size;
      return;
    }
  }
  free(ptr);
}

static void *take(mend_blocks *b, int c) {
  void *p = b->head[c];
  if (p) {
    b->head[c] = *(void **)p;
    b->kept -= class_size(c);
  }
  return p;
}

void *mend_blocks_alloc(mend_blocks *b, void *ptr, size_t osize, size_t nsize) {
  size_t old = ptr ? osize : 0;
  if (ptr && old == 0) old = 1;   /* Lua makes no empty block; were it given one, class 0 */
  if (nsize == 0) {
    if (ptr) give_back(b, ptr, old);
    return NULL;
  }
  if (nsize > MEND_BLOCKS_MAX) return realloc(ptr, nsize);
  int c = class_of(nsize);
  if (!ptr) {
    void *p = take(b, c);
    return p ? p : malloc(class_size(c));
  }
  if (old <= MEND_BLOCKS_MAX && class_of(old) == c) return ptr;   /* the block holds it */
  void *p = take(b, c);
  if (!p) return realloc(ptr, class_size(c));   /* a block of its class's size, or larger */
  memcpy(p, ptr, old < nsize ? old : nsize);
  give_back(b, ptr, old);
  return p;
}

void mend_blocks_drop(mend_blocks *b) {
  for (int c = 0; c < MEND_BLOCKS_CLASSES; c++) {
    void *p = b->head[c];
    while (p) {
      void *next = *(void **)p;
      free(p);
      p = next;
    }
    b->head[c] = NULL;
  }
  b->kept = 0;
}
