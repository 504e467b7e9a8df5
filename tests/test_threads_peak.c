/*
 * test_threads_peak (review of perf22): the list of steps' coroutines (src/threads.c) after a
 * peak of listed coroutines (W4: thousands of runs waiting at once). Once they are all taken
 * out and attempts go on one at a time, the list's own bytes (its hash, its slots, its anchors,
 * all in the state and counted against an own state's memory_limit) should come back down, as
 * main's Lua table did when it rehashed: 100,000 listed then taken out kept 3 MiB there and
 * 8.7 MiB here, for the state's life. Fails on perf22: nothing shrinks the hash.
 */
#include "threads.h"
#include "check.h"

#include <lauxlib.h>
#include <lualib.h>

enum { N = 100000 };

int main(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  mend_threads_open(L);
  static char runs[N];
  static lua_State *cos[N];
  lua_gc(L, LUA_GCCOLLECT, 0);
  int base = lua_gc(L, LUA_GCCOUNT, 0);
  for (int i = 0; i < N; i++) {
    cos[i] = lua_newthread(L);
    mend_threads_add(L, cos[i], &runs[i]);
    lua_pop(L, 1);
  }
  /* every thousandth stays listed through the peak's end: still found, and still kept alive
   * (only the list anchors them) when the list is made small again */
  for (int i = 0; i < N; i++)
    if (i % 1000) mend_threads_remove(L, cos[i], &runs[i]);
  for (int i = 0; i < 4 * N; i++) {   /* attempts one at a time afterwards */
    lua_State *co = lua_newthread(L);
    mend_threads_add(L, co, &runs[0]);
    mend_threads_remove(L, co, &runs[0]);
    lua_pop(L, 1);
  }
  lua_gc(L, LUA_GCCOLLECT, 0);
  int found = 0;
  for (int i = 0; i < N; i += 1000) {
    found += mend_threads_find(L, cos[i]) == &runs[i];
    lua_pushthread(cos[i]);   /* a coroutine the collector freed would not survive this */
    found -= !lua_isthread(cos[i], -1);
    lua_pop(cos[i], 1);
    mend_threads_remove(L, cos[i], &runs[i]);
  }
  CHECK_EQ_INT(found, N / 1000);
  lua_gc(L, LUA_GCCOLLECT, 0);
  int kept_kib = lua_gc(L, LUA_GCCOUNT, 0) - base;
  CHECK(kept_kib < 4096);   /* main's table: 3,072 KiB */
  fprintf(stderr, "kept %d KiB after the peak\n", kept_kib);
  lua_close(L);
  return check_done("threads_peak");
}
