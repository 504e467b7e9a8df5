/*
 * refs: long-lived references of runs, in shards outside the registry (see refs.h for why).
 * A reference is shard * SHARD_SLOTS + slot, where slot is luaL_ref's index in the shard.
 * Must never: put a run's value in the registry (only the root that holds the shards is there).
 */
#include "refs.h"

#include <lauxlib.h>
#include <stdlib.h>

#define RUNS_PER_SHARD 1024
/* Runs hold two references each and luaL_ref reuses freed slots, so a shard's slots stay far
 * below this. */
#define SHARD_SLOTS 65536

void mend_refs_init(mend_refs *R, lua_State *L) {
  *R = (mend_refs){.root = LUA_NOREF, .current = -1};
  lua_newtable(L);
  R->root = luaL_ref(L, LUA_REGISTRYINDEX);
}

void mend_refs_free(mend_refs *R, lua_State *L) {
  luaL_unref(L, LUA_REGISTRYINDEX, R->root);
  free(R->live);
  free(R->assigned);
  *R = (mend_refs){.root = LUA_NOREF, .current = -1};
}

static int new_shard(mend_refs *R, lua_State *L) {
  if (R->nshards == R->cap) {
    int cap = R->cap ? R->cap * 2 : 16;
    int *live = realloc(R->live, (size_t)cap * sizeof *live);
    if (!live) return -1;
    R->live = live;
    int *assigned = realloc(R->assigned, (size_t)cap * sizeof *assigned);
    if (!assigned) return -1;
    R->assigned = assigned;
    R->cap = cap;
  }
  int s = R->nshards;
  lua_rawgeti(L, LUA_REGISTRYINDEX, R->root);
  lua_newtable(L);
  lua_rawseti(L, -2, s + 1);
  lua_pop(L, 1);
  R->live[s] = R->assigned[s] = 0;
  R->nshards++;
  return s;
}

int mend_refs_shard(mend_refs *R, lua_State *L) {
  if (R->current >= 0 && R->assigned[R->current] < RUNS_PER_SHARD) {
    R->assigned[R->current]++;
    return R->current;
  }
  /* A shard whose runs have all ended is used again; the scan runs once per RUNS_PER_SHARD
   * starts, over shards that number runs / 1024. */
  int s = -1;
  for (int i = 0; i < R->nshards; i++)
    if (i != R->current && R->live[i] == 0) { s = i; break; }
  if (s < 0 && (s = new_shard(R, L)) < 0) return -1;
  R->current = s;
  R->assigned[s] = 1;
  return s;
}

int mend_refs_put(mend_refs *R, lua_State *L, int shard) {
  if (shard < 0 || lua_isnil(L, -1)) { lua_pop(L, 1); return LUA_NOREF; }
  lua_rawgeti(L, LUA_REGISTRYINDEX, R->root);
  lua_rawgeti(L, -1, shard + 1);
  lua_rotate(L, -3, -1);              /* value on top, its shard below */
  int slot = luaL_ref(L, -2);
  lua_pop(L, 2);
  if (slot <= 0 || slot >= SHARD_SLOTS) return LUA_NOREF;
  R->live[shard]++;
  return shard * SHARD_SLOTS + slot;
}

void mend_refs_push(const mend_refs *R, lua_State *L, int ref) {
  if (ref <= 0 || R->root == LUA_NOREF) { lua_pushnil(L); return; }
  lua_rawgeti(L, LUA_REGISTRYINDEX, R->root);
  lua_rawgeti(L, -1, ref / SHARD_SLOTS + 1);
  lua_rawgeti(L, -1, ref % SHARD_SLOTS);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

void mend_refs_drop(mend_refs *R, lua_State *L, int ref) {
  if (ref <= 0 || R->root == LUA_NOREF) return;   /* the engine's Lua side is gone already */
  int shard = ref / SHARD_SLOTS;
  lua_rawgeti(L, LUA_REGISTRYINDEX, R->root);
  lua_rawgeti(L, -1, shard + 1);
  luaL_unref(L, -1, ref % SHARD_SLOTS);
  lua_pop(L, 1);
  /* A shard whose runs have all gone (ended, or parked out of memory) is made anew: a table
   * keeps the slots it grew to, 32 KB a shard, 30 B a parked run. */
  if (--R->live[shard] == 0 && shard != R->current) {
    lua_newtable(L);
    lua_rawseti(L, -2, shard + 1);
  }
  lua_pop(L, 1);
}
