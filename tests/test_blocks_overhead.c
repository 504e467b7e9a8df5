/*
 * test_blocks_overhead: what the C library holds for an own state's blocks
 * kept by size class (src/blocks.c), against the same blocks taken from it as Lua asks for
 * them. A class is a multiple of 16 bytes, and glibc makes a block of 16k bytes a chunk of
 * 16k + 16 (its 8-byte header, rounded up): every block of 16k+1 .. 16k+8 bytes costs 16 bytes
 * more than malloc of the asked size would. Lua's Table (56 B) and UpVal (40 B) are such.
 * 1. a state holding 300,000 tables: the C library's bytes in use, classes against malloc,
 *    within 3% (perf25: +17%, each table 56 B in an 80-byte chunk where malloc(56) makes 64;
 *    classes of 16k+8 bytes, glibc's chunks less its header, measured -0.0%).
 * 2. the lists full: what the C library holds for them is within 25% of their cap,
 *    MEND_BLOCKS_KEEP_BYTES (perf25 counts class sizes: 2 MiB of 16-byte blocks are 4 MiB of
 *    chunks).
 * Not sanitized: ASan's allocator keeps no figures for mallinfo2.
 */
#include "blocks.h"
#include "check.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <malloc.h>

/* The C library's bytes in use, its heap's and those it mapped on their own (a large array
 * may be either, by the threshold glibc moves as it goes). */
static size_t in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static mend_blocks B;
static int by_class;

static void *alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  size_t old = ptr ? osize : 0;
  if (by_class && (nsize ? nsize <= MEND_BLOCKS_MAX || (ptr && old <= MEND_BLOCKS_MAX)
                         : old <= MEND_BLOCKS_MAX))
    return mend_blocks_alloc(&B, ptr, old, nsize);
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

/* The C library's bytes in use while a state holds n small tables. */
static size_t held_for_tables(int classes, int n) {
  by_class = classes;
  mend_blocks_init(&B);
  lua_State *L = lua_newstate(alloc, NULL);
  luaL_openlibs(L);
  size_t before = in_use();
  lua_pushinteger(L, n);
  lua_setglobal(L, "N");
  /* the array of N TValues is one large block, the same either way */
  if (luaL_dostring(L, "T = {} for i = 1, N do T[i] = {} end"))
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
  size_t held = in_use() - before;
  lua_close(L);
  mend_blocks_drop(&B);
  return held;
}

int main(void) {
  enum { N = 300000 };
  size_t plain = held_for_tables(0, N), classes = held_for_tables(1, N);
  fprintf(stderr, "%d tables: %zu KiB through malloc, %zu KiB through the classes (%+.1f%%)\n", N,
          plain >> 10, classes >> 10, 100.0 * ((double)classes - (double)plain) / (double)plain);
  CHECK(classes <= plain + plain / 33);

  /* the lists filled with Lua's smallest blocks (8 bytes asked, a 16-byte class): what the
   * C library holds for them against the lists' cap */
  mend_blocks_init(&B);
  size_t before = in_use();
  enum { M = (int)(2 * MEND_BLOCKS_KEEP_BYTES / 16) };
  static void *p[M];
  for (int i = 0; i < M; i++) p[i] = mend_blocks_alloc(&B, NULL, 0, 8);
  for (int i = 0; i < M; i++) mend_blocks_alloc(&B, p[i], 8, 0);
  size_t held = in_use() - before;
  fprintf(stderr, "kept %zu KiB by class, the C library holds %zu KiB for them (cap %zu KiB)\n",
          B.kept >> 10, held >> 10, MEND_BLOCKS_KEEP_BYTES >> 10);
  CHECK(held <= MEND_BLOCKS_KEEP_BYTES + MEND_BLOCKS_KEEP_BYTES / 4);
  mend_blocks_drop(&B);
  return check_done("blocks_overhead");
}
