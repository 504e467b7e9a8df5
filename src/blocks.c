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

/* Under AddressSanitizer a kept block is poisoned, and a block handed out is poisoned past the
 * bytes asked for: a use after free of a kept block, or a write past the size asked for, is
 * reported as the C library's blocks' are. */
#if defined(__SANITIZE_ADDRESS__)
#define BLOCKS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BLOCKS_ASAN 1
#endif
#endif
#ifdef BLOCKS_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static inline int class_of(size_t n) { return mend_blocks_class_of(n); }
static inline size_t class_size(int c) { return mend_blocks_class_size(c); }
/* What a kept block of class c holds of the C library: its chunk, header and all. */
static inline size_t class_chunk(int c) { return class_size(c) + MEND_BLOCKS_CHUNK_HEAD; }

void mend_blocks_init(mend_blocks *b) {
  memset(b, 0, sizeof *b);
}

/* p, a block of class c's size, handed out for n bytes. */
static void *hand_out(void *p, int c, size_t n) {
  POISON(p, class_size(c));
  UNPOISON(p, n);
  return p;
}

/* ptr (a block of old bytes, old >= 1) freed: kept on its class's list while there is room. */
static void give_back(mend_blocks *b, void *ptr, size_t old) {
  if (old <= MEND_BLOCKS_MAX) {
    int c = class_of(old);
    size_t size = class_size(c);
    UNPOISON(ptr, size);
    if (b->kept + class_chunk(c) <= MEND_BLOCKS_KEEP_BYTES) {
      *(void **)ptr = b->head[c];
      POISON(ptr, size);
      b->head[c] = ptr;
      b->kept += class_chunk(c);
      return;
    }
  }
  free(ptr);
}

static void *take(mend_blocks *b, int c) {
  void *p = b->head[c];
  if (p) {
    UNPOISON(p, sizeof(void *));
    b->head[c] = *(void **)p;
    b->kept -= class_chunk(c);
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
  if (ptr && old <= MEND_BLOCKS_MAX) UNPOISON(ptr, class_size(class_of(old)));
  if (nsize > MEND_BLOCKS_MAX) {
    void *p = realloc(ptr, nsize);
    if (!p && ptr && old <= MEND_BLOCKS_MAX) hand_out(ptr, class_of(old), old);
    return p;
  }
  int c = class_of(nsize);
  if (!ptr) {
    void *p = take(b, c);
    if (!p) p = malloc(class_size(c));
    return p ? hand_out(p, c, nsize) : NULL;
  }
  if (old <= MEND_BLOCKS_MAX && class_of(old) == c) return hand_out(ptr, c, nsize);   /* it fits */
  void *p = take(b, c);
  if (!p) {   /* a block of its class's size, or larger */
    p = realloc(ptr, class_size(c));
    if (!p && old <= MEND_BLOCKS_MAX) hand_out(ptr, class_of(old), old);   /* kept as it was */
    return p ? hand_out(p, c, nsize) : NULL;
  }
  hand_out(p, c, nsize);
  memcpy(p, ptr, old < nsize ? old : nsize);
  give_back(b, ptr, old);
  return p;
}

void mend_blocks_drop(mend_blocks *b) {
  for (int c = 0; c < MEND_BLOCKS_CLASSES; c++) {
    void *p = b->head[c];
    while (p) {
      UNPOISON(p, class_size(c));
      void *next = *(void **)p;
      free(p);
      p = next;
    }
    b->head[c] = NULL;
  }
  b->kept = 0;
}
