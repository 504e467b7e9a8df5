/*
 * test_threads: the list of steps' coroutines (src/threads.c). Against an array as the
 * reference, through thousands of adds and removals in a random order (entries moved back as
 * others leave must stay findable): each listed coroutine is found with its run, no other is;
 * a listed coroutine outlives full collections with nothing else keeping it, and one taken out
 * is collected; one is taken out by its run alone.
 */
#include "threads.h"
#include "check.h"

#include <lauxlib.h>
#include <lualib.h>

#define N 300

static int is_it(lua_State *co, void *ud) { return co == ud; }

/* Whether the weak table at the registry's "weak" still holds a value under key k. */
static int still_there(lua_State *L, int k) {
  lua_getfield(L, LUA_REGISTRYINDEX, "weak");
  int there = lua_rawgeti(L, -1, k) != LUA_TNIL;
  lua_pop(L, 2);
  return there;
}

int main(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  CHECK(mend_threads_find(L, L) == NULL);   /* no list yet */
  mend_threads_open(L);
  mend_threads_open(L);   /* a second engine of the state finds it */
  CHECK(luaL_dostring(L, "local w = setmetatable({}, {__mode = 'v'}) "
                         "debug.getregistry().weak = w") == LUA_OK);
  static lua_State *cos[N];
  static int listed[N];
  static char runs[N];
  for (int i = 0; i < N; i++) {
    cos[i] = lua_newthread(L);
    lua_getfield(L, LUA_REGISTRYINDEX, "weak");
    lua_pushvalue(L, -2);
    lua_rawseti(L, -2, i + 1);
    lua_pop(L, 1);
    mend_threads_add(L, cos[i], &runs[i]);
    listed[i] = 1;
    lua_pop(L, 1);   /* only the list keeps it now */
  }
  lua_gc(L, LUA_GCCOLLECT);
  lua_gc(L, LUA_GCCOLLECT);
  int found_all = 1;
  for (int i = 0; i < N; i++)
    found_all &= still_there(L, i + 1) && mend_threads_find(L, cos[i]) == &runs[i];
  CHECK(found_all);
  srand(7);
  int wrong = 0;
  for (int round = 0; round < 20000; round++) {
    int i = rand() % N;
    if (listed[i]) {
      mend_threads_remove(L, round % 5 ? cos[i] : NULL, &runs[i]);   /* by its run, now and then */
      listed[i] = 0;
    } else if (still_there(L, i + 1)) {   /* not collected yet: listed again */
      lua_getfield(L, LUA_REGISTRYINDEX, "weak");
      lua_rawgeti(L, -1, i + 1);
      mend_threads_add(L, cos[i], &runs[i]);
      lua_pop(L, 2);
      listed[i] = 1;
    }
    if (round % 1000 == 0) {
      for (int k = 0; k < N; k++)
        if (mend_threads_find(L, cos[k]) != (listed[k] ? &runs[k] : NULL)) wrong++;
    }
  }
  CHECK_EQ_INT(wrong, 0);
  CHECK(!mend_threads_any(L, is_it, L));
  int some = -1;
  for (int i = 0; i < N; i++) if (listed[i]) some = i;
  CHECK(some >= 0 && mend_threads_any(L, is_it, cos[some]));
  /* the listed ones stay, the others go with the collector */
  lua_gc(L, LUA_GCCOLLECT);
  lua_gc(L, LUA_GCCOLLECT);
  int kept = 1, gone = 1;
  for (int i = 0; i < N; i++) {
    if (listed[i]) kept &= still_there(L, i + 1) && mend_threads_find(L, cos[i]) == &runs[i];
    else gone &= !still_there(L, i + 1);
  }
  CHECK(kept);
  CHECK(gone);
  for (int i = 0; i < N; i++)
    if (listed[i]) mend_threads_remove(L, cos[i], &runs[i]);
  lua_gc(L, LUA_GCCOLLECT);
  int none = 1;
  for (int i = 0; i < N; i++) none &= !still_there(L, i + 1);
  CHECK(none);
  CHECK_EQ_INT(lua_gettop(L), 0);
  lua_close(L);
  return check_done("threads");
}
