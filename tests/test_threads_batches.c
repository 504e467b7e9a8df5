/*
 * test_threads_batches: the list of steps' coroutines (src/threads.c) under
 * attempts in batches, the number listed going from 2 to 13 and back, again and again (a host
 * starting a dozen runs a tick, a breaker letting a dozen through). The hash is made small
 * again when one more entry would fill it below an eighth: at 13 it grows to 32 entries, and
 * at the batch's end (3 of 32) it was rebuilt at 16, so every batch rebuilt it twice, each a
 * hash, an anchors table and a slots array allocated and left to the collector: under
 * callgrind 3.5k instructions an attempt against 2.55k without the shrink (tests here: 11
 * attempts a batch, lua_newthread included), more than the 0.6k the hash saved over main's
 * table (threads.h). Asserted without timing: once the batches repeat, adding and taking out
 * allocates nothing (a Lua table of this size would not rehash either).
 */
#include "threads.h"
#include "check.h"

#include <lauxlib.h>
#include <lualib.h>

static long allocations;
static int counting;

static void *alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud;
  (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  if (counting && nsize > (ptr ? osize : 0)) allocations++;
  return realloc(ptr, nsize);
}

int main(void) {
  lua_State *L = lua_newstate(alloc, NULL);
  luaL_openlibs(L);
  mend_threads_open(L);
  static char runs[16];
  lua_State *co[16];
  for (int i = 0; i < 2; i++) {
    co[i] = lua_newthread(L);
    mend_threads_add(L, co[i], &runs[i]);
    lua_pop(L, 1);
  }
  long batches_counted = 0;
  for (int batch = 0; batch < 1000; batch++) {
    for (int i = 2; i < 13; i++) {
      co[i] = lua_newthread(L);
      counting = batch >= 10;   /* the list's own allocations, not the coroutine's */
      mend_threads_add(L, co[i], &runs[i]);
      counting = 0;
      lua_pop(L, 1);
    }
    counting = batch >= 10;
    for (int i = 2; i < 13; i++) mend_threads_remove(L, co[i], &runs[i]);
    counting = 0;
    batches_counted += batch >= 10;
  }
  fprintf(stderr, "%ld allocations by the list over %ld batches of 11 attempts\n", allocations,
          batches_counted);
  CHECK(allocations == 0);
  for (int i = 0; i < 2; i++) CHECK(mend_threads_find(L, co[i]) == &runs[i]);
  lua_close(L);
  return check_done("threads_batches");
}
