/*
 * refs: references from C to Lua values that runs hold for as long as they live (their input,
 * their results table), kept out of the registry.
 *
 * Why not luaL_ref in the registry: the registry is written at every attempt, so Lua's
 * collector marks it gray again and traverses all of it in its atomic phase, which cannot be
 * interrupted. With a million runs parked that is two million slots, and every timer waits
 * behind it (W4 in bench/README.md). Here each run's references go into a shard, a table of
 * its own that holds about a thousand runs; runs are given shards in the order they start, so
 * the shards of long-parked runs stay untouched and the collector does not go back to them.
 * Must never: put a run's value in the registry (one root there holds the shards).
 */
#ifndef MEND_REFS_H
#define MEND_REFS_H

#include <lua.h>

typedef struct mend_refs {
  int root;          /* registry reference of the table of shard tables */
  int *live;         /* per shard: references held */
  int *assigned;     /* per shard: runs given it while it was current */
  int nshards, cap;
  int current;       /* shard new runs get; -1 before the first */
} mend_refs;

void mend_refs_init(mend_refs *R, lua_State *L);
void mend_refs_free(mend_refs *R, lua_State *L);
/* The shard a new run keeps its references in; -1 out of memory. */
int  mend_refs_shard(mend_refs *R, lua_State *L);
/* Pops the value on top of L into `shard`; returns its reference (LUA_NOREF for nil). */
int  mend_refs_put(mend_refs *R, lua_State *L, int shard);
void mend_refs_push(const mend_refs *R, lua_State *L, int ref);   /* nil for LUA_NOREF */
void mend_refs_drop(mend_refs *R, lua_State *L, int ref);

#endif
