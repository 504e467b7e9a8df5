/*
 * test_blocks: the size classes of an engine's own Lua state (src/blocks.c). A freed block is
 * given to the next allocation of its class; a block moved within its class stays where it is
 * and one moved out of it keeps its bytes; no more than MEND_BLOCKS_KEEP_BYTES are kept; and a
 * Lua state allocating through it runs code whose tables and strings come and go, its own count
 * of bytes (collectgarbage "count") the sum of the sizes it asked for, as with the C library.
 */
#include "blocks.h"
#include "check.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static void it_gives_a_freed_block_to_the_next_of_its_class(void) {
  mend_blocks b;
  mend_blocks_init(&b);
  void *p = mend_blocks_alloc(&b, NULL, 0, 40);
  CHECK(p != NULL);
  memset(p, 'a', 40);
  CHECK(mend_blocks_alloc(&b, p, 40, 0) == NULL);
  CHECK_EQ_INT(b.kept, 48);
  void *q = mend_blocks_alloc(&b, NULL, 0, 33);   /* 25..40: the same class (a 48-byte chunk) */
  CHECK(q == p);
  CHECK_EQ_INT(b.kept, 0);
  void *r = mend_blocks_alloc(&b, NULL, 0, 49);   /* the next class: a block of its own */
  CHECK(r != NULL && r != p);
  mend_blocks_alloc(&b, q, 33, 0);
  mend_blocks_alloc(&b, r, 49, 0);
  CHECK_EQ_INT(b.kept, 48 + 64);
  mend_blocks_drop(&b);
  CHECK_EQ_INT(b.kept, 0);
  CHECK(b.head[1] == NULL && b.head[2] == NULL);
}

static void it_moves_a_block_keeping_its_bytes(void) {
  mend_blocks b;
  mend_blocks_init(&b);
  unsigned char *p = mend_blocks_alloc(&b, NULL, 0, 20);
  for (int i = 0; i < 20; i++) p[i] = (unsigned char)i;
  CHECK(mend_blocks_alloc(&b, p, 20, 24) == p);   /* 1..24: its class holds it */
  unsigned char *q = mend_blocks_alloc(&b, p, 24, 700);   /* to another class */
  CHECK(q != NULL);
  for (int i = 0; i < 20; i++) CHECK_EQ_INT(q[i], i);
  unsigned char *r = mend_blocks_alloc(&b, q, 700, 5000);   /* out of the classes */
  CHECK(r != NULL);
  for (int i = 0; i < 20; i++) CHECK_EQ_INT(r[i], i);
  unsigned char *s = mend_blocks_alloc(&b, r, 5000, 10);   /* back into one */
  CHECK(s != NULL);
  for (int i = 0; i < 10; i++) CHECK_EQ_INT(s[i], i);
  memset(s, 0, 10);   /* the bytes asked for (test_blocks_sizes: the class is its own) */
  mend_blocks_alloc(&b, s, 10, 0);
  mend_blocks_drop(&b);
}

static void it_keeps_no_more_than_its_bound(void) {
  mend_blocks b;
  mend_blocks_init(&b);
  enum { N = 3000 };
  static void *ps[N];
  for (int i = 0; i < N; i++) ps[i] = mend_blocks_alloc(&b, NULL, 0, 1024);
  for (int i = 0; i < N; i++) mend_blocks_alloc(&b, ps[i], 1024, 0);
  CHECK(b.kept <= MEND_BLOCKS_KEEP_BYTES);   /* full: not one more 1024-byte block's chunk */
  CHECK(b.kept + mend_blocks_class_size(mend_blocks_class_of(1024)) + MEND_BLOCKS_CHUNK_HEAD >
        MEND_BLOCKS_KEEP_BYTES);
  mend_blocks_drop(&b);
}

struct counted { mend_blocks b; size_t used; };

static void *counted_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  struct counted *c = ud;
  size_t old = ptr ? osize : 0;
  void *p = mend_blocks_alloc(&c->b, ptr, osize, nsize);
  if (nsize == 0 || p) c->used = c->used - old + nsize;
  return p;
}

static void it_serves_a_lua_state(void) {
  struct counted c = {.used = 0};
  mend_blocks_init(&c.b);
  lua_State *L = lua_newstate(counted_alloc, &c);
  CHECK(L != NULL);
  luaL_openlibs(L);
  const char *code =
    "local keep, n = {}, 0\n"
    "for i = 1, 20000 do\n"
    "  local t = { i = i, s = ('x'):rep(i % 300), co = coroutine.create(function() end) }\n"
    "  t[#t + 1] = t.s .. i\n"
    "  coroutine.resume(t.co)\n"
    "  if i % 7 == 0 then keep[#keep + 1] = t end\n"
    "  if #keep > 500 then keep = {} ; collectgarbage() end\n"
    "end\n"
    "for _, t in ipairs(keep) do n = n + (t[1] == t.s .. t.i and 1 or 0) end\n"
    "return n, #keep";
  CHECK_EQ_INT(luaL_dostring(L, code), LUA_OK);
  CHECK_EQ_INT(lua_tointeger(L, -2), lua_tointeger(L, -1));
  lua_settop(L, 0);
  lua_gc(L, LUA_GCCOLLECT);
  size_t lua_bytes = (size_t)lua_gc(L, LUA_GCCOUNT) * 1024 + (size_t)lua_gc(L, LUA_GCCOUNTB);
  CHECK_EQ_INT(c.used, lua_bytes);   /* what a memory limit is held to: Lua's sizes */
  lua_close(L);
  CHECK_EQ_INT(c.used, 0);
  mend_blocks_drop(&c.b);
}

int main(void) {
  it_gives_a_freed_block_to_the_next_of_its_class();
  it_moves_a_block_keeping_its_bytes();
  it_keeps_no_more_than_its_bound();
  it_serves_a_lua_state();
  return check_done("blocks");
}
