/*
 * threads: the list of steps' coroutines of a Lua state (threads.h). A full userdata under the
 * registry's "mend.threads" holds a hash of coroutine pointers to runs (open addressing, linear
 * probes); its user values hold what is Lua's: 1 the anchors, an array of the coroutines by
 * slot, 2 the hash's entries, 3 the slots given back. Arrays are userdata, so growing one that
 * runs out of memory raises as any allocation of the state would, and the collector frees
 * those outgrown. Must never: keep a pointer to a coroutine that is not anchored.
 */
#include "threads.h"

#include <stdint.h>
#include <string.h>

#define THREADS_KEY "mend.threads"

struct entry { lua_State *co; void *run; int slot; };

typedef struct tmap {
  struct entry *e;   /* cap entries; co NULL: empty. Taken out by shifting back those after
                        it (no tombstones: they filled the table every few dozen attempts) */
  size_t cap, count;
  int *free_slots;   /* capfree of them, nfree in use */
  int nfree, capfree;
  int next_slot;     /* the anchors' slots 1 .. next_slot - 1 have been used */
} tmap;

static tmap *get(lua_State *L) {
  tmap *m = NULL;
  if (lua_getfield(L, LUA_REGISTRYINDEX, THREADS_KEY) == LUA_TUSERDATA &&
      lua_rawlen(L, -1) == sizeof(tmap))
    m = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return m;
}

void mend_threads_open(lua_State *L) {
  if (get(L)) return;
  tmap *m = lua_newuserdatauv(L, sizeof *m, 3);
  memset(m, 0, sizeof *m);
  m->next_slot = 1;
  lua_createtable(L, 64, 0);
  lua_setiuservalue(L, -2, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, THREADS_KEY);
}

static size_t probe_start(size_t cap, const lua_State *co) {
  uint64_t h = (uint64_t)(uintptr_t)co * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 32) & (cap - 1);
}

static struct entry *find(const tmap *m, const lua_State *co) {
  if (!m || !m->cap) return NULL;
  for (size_t i = probe_start(m->cap, co);; i = (i + 1) & (m->cap - 1)) {
    struct entry *e = &m->e[i];
    if (e->co == co) return e;
    if (!e->co) return NULL;
  }
}

#define SHRINK_ABOVE 1024

/* The hash and the anchors made again for the entries listed and one more, their slots
 * numbered anew from 1 and none given back: the map is at -1. Called when one more entry would
 * fill the hash past three quarters, and when it would fill one of over SHRINK_ABOVE entries
 * below an eighth (a peak of waiting runs over), so that the list's bytes follow what is
 * listed, as a Lua table's do when it rehashes. Everything is allocated before the map
 * changes: if Lua raises, it is as it was.  [m] */
static void rebuild(lua_State *L, tmap *m) {
  size_t cap = 16;
  while (cap < (m->count + 1) * 2) cap *= 2;
  int n = (int)m->count, capfree = 64;
  while (capfree < n + 1) capfree *= 2;
  struct entry *e = lua_newuserdatauv(L, cap * sizeof *e, 0);
  memset(e, 0, cap * sizeof *e);
  lua_createtable(L, n + 1, 0);   /* the array part holds the slot the add takes next */
  int *f = lua_newuserdatauv(L, (size_t)capfree * sizeof *f, 0);
  lua_getiuservalue(L, -4, 1);   /* [m, e, anchors, f, old anchors] */
  int slot = 0;
  for (size_t k = 0; k < m->cap; k++) {
    if (!m->e[k].co) continue;
    lua_rawgeti(L, -1, m->e[k].slot);
    lua_rawseti(L, -4, ++slot);   /* within the array part made above: no allocation */
    size_t i = probe_start(cap, m->e[k].co);
    while (e[i].co) i = (i + 1) & (cap - 1);
    e[i] = (struct entry){m->e[k].co, m->e[k].run, slot};
  }
  lua_pop(L, 1);
  m->e = e;
  m->cap = cap;
  m->free_slots = f;
  m->capfree = capfree;
  m->nfree = 0;
  m->next_slot = slot + 1;
  /* the old hash, anchors and slots go with the collector */
  lua_setiuservalue(L, -4, 3);
  lua_setiuservalue(L, -3, 1);
  lua_setiuservalue(L, -2, 2);
}

/* Room for one more slot given back: the map is at -1. [m] */
static void grow_free(lua_State *L, tmap *m) {
  int cap = m->capfree ? m->capfree * 2 : 64;
  int *f = lua_newuserdatauv(L, (size_t)cap * sizeof *f, 0);
  if (m->nfree) memcpy(f, m->free_slots, (size_t)m->nfree * sizeof *f);
  m->free_slots = f;
  m->capfree = cap;
  lua_setiuservalue(L, -2, 3);
}

/* Entry i emptied, and the entries after it that its place would have been the probe of moved
 * back into the hole, so that every entry stays reachable from its start. */
static void take_out(tmap *m, size_t i) {
  size_t mask = m->cap - 1, j = i;
  for (;;) {
    m->e[i].co = NULL;
    for (;;) {
      j = (j + 1) & mask;
      if (!m->e[j].co) return;
      size_t k = probe_start(m->cap, m->e[j].co);
      /* it stays where it is if its start lies cyclically in (i, j] */
      if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
      break;
    }
    m->e[i] = m->e[j];
    i = j;
  }
}

void mend_threads_add(lua_State *L, lua_State *co, void *run) {
  lua_getfield(L, LUA_REGISTRYINDEX, THREADS_KEY);
  tmap *m = lua_touserdata(L, -1);
  /* shrunk only past SHRINK_ABOVE entries: a few kilobytes are not worth a rebuild, and a
   * dozen attempts let through at once (2 -> 13 -> 2 listed) would rebuild twice a batch */
  if ((m->count + 1) * 4 > m->cap * 3 || (m->cap > SHRINK_ABOVE && (m->count + 1) * 8 < m->cap))
    rebuild(L, m);
  /* A slot given back is used again; a new one first makes room to be given back, so that
   * taking a coroutine out allocates nothing. */
  if (!m->nfree && m->capfree < m->next_slot) grow_free(L, m);
  int slot = m->nfree ? m->free_slots[--m->nfree] : m->next_slot;
  lua_getiuservalue(L, -1, 1);
  lua_pushvalue(L, -3);   /* co */
  lua_rawseti(L, -2, slot);   /* may grow the anchors: nothing is listed until it is kept */
  lua_pop(L, 2);
  if (slot == m->next_slot) m->next_slot++;
  size_t i = probe_start(m->cap, co);
  while (m->e[i].co) i = (i + 1) & (m->cap - 1);
  m->e[i] = (struct entry){co, run, slot};
  m->count++;
}

void *mend_threads_find(lua_State *L, lua_State *co) {
  struct entry *e = find(get(L), co);
  return e ? e->run : NULL;
}

void mend_threads_remove(lua_State *L, lua_State *co, void *run) {
  lua_getfield(L, LUA_REGISTRYINDEX, THREADS_KEY);
  tmap *m = lua_type(L, -1) == LUA_TUSERDATA ? lua_touserdata(L, -1) : NULL;
  struct entry *e = NULL;
  if (m && co) {
    e = find(m, co);
  } else if (m) {
    for (size_t k = 0; k < m->cap && !e; k++)
      if (m->e[k].co && m->e[k].run == run) e = &m->e[k];
  }
  if (!e) {
    lua_pop(L, 1);
    return;
  }
  int slot = e->slot;
  take_out(m, (size_t)(e - m->e));
  m->count--;
  lua_getiuservalue(L, -1, 1);
  lua_pushnil(L);
  lua_rawseti(L, -2, slot);   /* an existing slot: no allocation */
  lua_pop(L, 1);
  m->free_slots[m->nfree++] = slot;   /* room for every slot ever used (mend_threads_add) */
  lua_pop(L, 1);
}

int mend_threads_any(lua_State *L, int (*fn)(lua_State *co, void *ud), void *ud) {
  tmap *m = get(L);
  for (size_t k = 0; m && k < m->cap; k++)
    if (m->e[k].co && fn(m->e[k].co, ud)) return 1;
  return 0;
}
