/*
 * idset: an open-addressing hash set of strings. Sets here are small (the runs a worker lost)
 * or short-lived (one check of a worker's runs), so the simplest table that stays O(1) will do:
 * linear probing, at most half full, deletion by shifting the cluster back (no tombstones).
 * Must never: let the table fill past half (probing then has no bound worth the name).
 */
#include "idset.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t hash(const char *id, size_t len) {
  uint64_t h = 1469598103934665603ull;   /* FNV-1a */
  for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)id[i]) * 1099511628211ull;
  return (size_t)(h ^ (h >> 29));
}

static int same(const char *slot, const char *id, size_t len) {
  return strncmp(slot, id, len) == 0 && slot[len] == '\0';
}

/* The slot holding id, or the empty slot where it would go. */
static size_t find(const mend_idset *s, const char *id, size_t len) {
  size_t mask = s->cap - 1, i = hash(id, len) & mask;
  while (s->slots[i] && !same(s->slots[i], id, len)) i = (i + 1) & mask;
  return i;
}

static int grow(mend_idset *s) {
  size_t cap = s->cap ? s->cap * 2 : 16;
  char **slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  mend_idset old = *s;
  s->slots = slots;
  s->cap = cap;
  for (size_t i = 0; i < old.cap; i++) {
    if (!old.slots[i]) continue;
    s->slots[find(s, old.slots[i], strlen(old.slots[i]))] = old.slots[i];
  }
  free(old.slots);
  return 0;
}

int mend_idset_add(mend_idset *s, const char *id, size_t len) {
  if ((s->count + 1) * 2 > s->cap && grow(s) != 0) return -1;
  size_t i = find(s, id, len);
  if (s->slots[i]) return 0;
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  memcpy(copy, id, len);
  copy[len] = '\0';
  s->slots[i] = copy;
  s->count++;
  return 1;
}

int mend_idset_has(const mend_idset *s, const char *id, size_t len) {
  return s->count > 0 && s->slots[find(s, id, len)] != NULL;
}

void mend_idset_remove(mend_idset *s, const char *id, size_t len) {
  if (!s->count) return;
  size_t mask = s->cap - 1, i = find(s, id, len);
  if (!s->slots[i]) return;
  free(s->slots[i]);
  s->slots[i] = NULL;
  s->count--;
  /* Entries after the hole that probed past it move back into it, or lookups would stop at it. */
  for (size_t j = (i + 1) & mask; s->slots[j]; j = (j + 1) & mask) {
    size_t home = hash(s->slots[j], strlen(s->slots[j])) & mask;
    /* j's entry may stay unless its home lies cyclically in (i, j] */
    int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    s->slots[i] = s->slots[j];
    s->slots[j] = NULL;
    i = j;
  }
}

void mend_idset_clear(mend_idset *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->slots[i]);
  free(s->slots);
  s->slots = NULL;
  s->cap = s->count = 0;
}
