/*
 * blocks: small blocks of an engine's own Lua state kept by size class when freed, and given to
 * that state's next allocations of the class, so that most of the state's allocations and frees
 * (a run's tables, strings, coroutine and its stack) are a push or a pop rather than a trip
 * through the C library's bins. Every block is a C library block (malloc, realloc) of at least
 * its class's size, so realloc and free take any of them. Must never: keep more than
 * MEND_BLOCKS_KEEP_BYTES; be given a block it did not make (its class would overstate it); be
 * used from two threads at once (an engine's state is driven by one at a time); count anything
 * (what the memory limit charges is the caller's, by the sizes Lua asks for).
 */
#ifndef MEND_BLOCKS_H
#define MEND_BLOCKS_H

#include <stddef.h>

#define MEND_BLOCKS_MAX 1024     /* the largest block kept: a coroutine's first stack is 720 B */
#define MEND_BLOCKS_STEP 16
/* classes of 24, 40, ... 1032 bytes (blocks.c): the last holds MEND_BLOCKS_MAX */
#define MEND_BLOCKS_CLASSES ((MEND_BLOCKS_MAX - 9) / MEND_BLOCKS_STEP + 1)
#define MEND_BLOCKS_KEEP_BYTES ((size_t)2 << 20)

/* The class of a block of n bytes (1 <= n <= MEND_BLOCKS_MAX), and that class's size. A class
 * is what one of the C library's chunks holds (glibc: 16k bytes with its 8-byte header, so 24,
 * 40, 56, ...): a class of 16k bytes would make Lua's 56-byte Table an 80-byte chunk where
 * malloc(56) makes 64 (300,000 tables: +17%, tests/test_blocks_overhead.c). */
#define MEND_BLOCKS_CHUNK_HEAD 8
static inline int mend_blocks_class_of(size_t n) {
  return n <= MEND_BLOCKS_STEP + MEND_BLOCKS_CHUNK_HEAD
             ? 0 : (int)((n - MEND_BLOCKS_CHUNK_HEAD - 1) / MEND_BLOCKS_STEP);
}
static inline size_t mend_blocks_class_size(int c) {
  return (size_t)(c + 1) * MEND_BLOCKS_STEP + MEND_BLOCKS_CHUNK_HEAD;
}

typedef struct mend_blocks {
  void *head[MEND_BLOCKS_CLASSES];   /* a free list a class, linked through each block's start */
  size_t kept;                       /* the C library's bytes the lists hold (chunks) */
} mend_blocks;

void  mend_blocks_init(mend_blocks *b);
/* Lua's allocator's three cases for blocks up to MEND_BLOCKS_MAX: a block of nsize (ptr NULL),
 * ptr freed (nsize 0; NULL returned), ptr moved to nsize. osize and nsize as lua_Alloc's; either
 * may be above MEND_BLOCKS_MAX, then the C library serves it. NULL if out of memory (ptr kept). */
void *mend_blocks_alloc(mend_blocks *b, void *ptr, size_t osize, size_t nsize);
void  mend_blocks_drop(mend_blocks *b);   /* every kept block freed */

#endif
