/*
 * test_blocks_newstate: an engine that cannot make its own Lua state (lua_newstate runs out of
 * memory part way) gives back everything it took: the blocks the half-made state freed while
 * closing, which its size classes (src/blocks.c) keep, and its copies of the configuration's
 * strings. A host that retries an engine after a failure must not lose memory each time. The
 * failure is injected by this program's lua_newstate, which stands in front of Lua's (the
 * engine is linked statically; Lua is a shared library) and refuses the state's Nth
 * allocation; what stays allocated is read from the C library (mallinfo2). Not sanitized:
 * ASan's allocator keeps no figures for mallinfo2.
 */
#define _GNU_SOURCE
#include "engine.h"
#include "check.h"

#include <dlfcn.h>
#include <lua.h>
#include <malloc.h>

static lua_Alloc real_alloc;
static int refuse_at, calls;

static void *failing_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  if (nsize > 0 && ++calls == refuse_at) return NULL;
  return real_alloc(ud, ptr, osize, nsize);
}

lua_State *lua_newstate(lua_Alloc f, void *ud) {
  typedef lua_State *(*newstate_fn)(lua_Alloc, void *);
  newstate_fn real = (newstate_fn)dlsym(RTLD_NEXT, "lua_newstate");
  real_alloc = f;
  calls = 0;
  return real(refuse_at ? failing_alloc : f, ud);
}

/* Bytes the C library holds for the program after engines failed to be made, each with its
 * state's allocation `at` refused, `times` times. */
static size_t after_failures(int at, int times, int *failed) {
  mend_engine_config cfg = {0};
  cfg.alert_command = "true";
  cfg.http_allow = "example.com";
  char err[256];
  refuse_at = at;
  for (int i = 0; i < times; i++) {
    mend_refusal why = MEND_REFUSED_STATE;
    mend_engine *E = mend_engine_create(NULL, &cfg, err, sizeof err, &why);
    if (E) mend_engine_destroy(E);
    else *failed += why == MEND_REFUSED_NOMEM;
  }
  refuse_at = 0;
  return mallinfo2().uordblks;
}

int main(void) {
  int failed = 0;
  /* the failure at the start, in the middle and near the end of lua_newstate's allocations
   * (it makes about twenty; the first is the state itself, which frees nothing) */
  for (int at = 2; at <= 12; at += 5) {
    size_t before = after_failures(at, 50, &failed);   /* the C library's own caches settle */
    size_t after = after_failures(at, 500, &failed);
    if (after > before + 4096)
      fprintf(stderr, "refused at %d: %zu bytes more after 500 failures\n", at, after - before);
    CHECK(after <= before + 4096);
  }
  CHECK_EQ_INT(failed, 3 * 550);
  return check_done("blocks_newstate");
}
