/*
 * parkset: the index of parked runs (parkset.h). Owns packing run ids (16 characters of the
 * alphabet mend__new_run_id writes) into 80 bits, the hash from id to entry, and the heap of due
 * times. Must never: keep a pointer into its arrays across a call that may grow them.
 */
#include "parkset.h"

#include <stdlib.h>
#include <string.h>

static const char digits[] = "0123456789abcdefghjkmnpqrstvwxyz";

static int digit_of(char c) {
  const char *p = c ? strchr(digits, c) : NULL;
  return p ? (int)(p - digits) : -1;
}

static int pack(const char *id, uint64_t *hi, uint32_t *lo) {
  if (strlen(id) != 16) return -1;
  uint64_t h = 0;
  uint32_t l = 0;
  for (int i = 0; i < 16; i++) {
    int d = digit_of(id[i]);
    if (d < 0) return -1;
    if (i < 12) h = h << 5 | (uint64_t)d;
    else l = l << 5 | (uint32_t)d;
  }
  *hi = h;
  *lo = l;
  return 0;
}

static void unpack(const mend_parked *e, char id[17]) {
  uint64_t h = e->hi;
  uint32_t l = e->lo;
  for (int i = 15; i >= 12; i--) { id[i] = digits[l & 31]; l >>= 5; }
  for (int i = 11; i >= 0; i--) { id[i] = digits[h & 31]; h >>= 5; }
  id[16] = 0;
}

static uint32_t hash_of(uint64_t hi, uint32_t lo) {
  uint64_t x = hi ^ ((uint64_t)lo * 0x9e3779b97f4a7c15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* The slot that holds (hi, lo), or the empty one where it would go. */
static uint32_t find_slot(const mend_parkset *p, uint64_t hi, uint32_t lo) {
  uint32_t mask = p->nslot - 1, i = hash_of(hi, lo) & mask;
  while (p->slot[i]) {
    const mend_parked *e = &p->e[p->slot[i] - 1];
    if (e->hi == hi && e->lo == lo) return i;
    i = (i + 1) & mask;
  }
  return i;
}

static int resize_slots(mend_parkset *p, uint32_t n) {
  uint32_t *fresh = calloc(n, sizeof *fresh);
  if (!fresh) return -1;
  free(p->slot);
  p->slot = fresh;
  p->nslot = n;
  for (uint32_t k = 0; k < p->n; k++) p->slot[find_slot(p, p->e[k].hi, p->e[k].lo)] = k + 1;
  return 0;
}

/* ---- the heap of due times */

static int earlier(const mend_parkset *p, uint32_t a, uint32_t b) {
  return p->e[p->heap[a]].due < p->e[p->heap[b]].due;
}

static void heap_swap(mend_parkset *p, uint32_t a, uint32_t b) {
  uint32_t t = p->heap[a];
  p->heap[a] = p->heap[b];
  p->heap[b] = t;
  p->e[p->heap[a]].heap = a;
  p->e[p->heap[b]].heap = b;
}

static void sift_up(mend_parkset *p, uint32_t i) {
  while (i > 0 && earlier(p, i, (i - 1) / 2)) {
    heap_swap(p, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void sift_down(mend_parkset *p, uint32_t i) {
  for (;;) {
    uint32_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < p->nheap && earlier(p, l, m)) m = l;
    if (r < p->nheap && earlier(p, r, m)) m = r;
    if (m == i) return;
    heap_swap(p, i, m);
    i = m;
  }
}

static int heap_insert(mend_parkset *p, uint32_t k) {
  if (p->nheap == p->capheap) {
    uint32_t cap = p->capheap ? p->capheap * 2 : 64;
    uint32_t *more = realloc(p->heap, (size_t)cap * sizeof *more);
    if (!more) return -1;
    p->heap = more;
    p->capheap = cap;
  }
  p->heap[p->nheap] = k;
  p->e[k].heap = p->nheap++;
  sift_up(p, p->e[k].heap);
  return 0;
}

static void heap_remove(mend_parkset *p, uint32_t k) {
  uint32_t i = p->e[k].heap;
  if (i == UINT32_MAX) return;
  p->e[k].heap = UINT32_MAX;
  if (i != --p->nheap) {
    p->heap[i] = p->heap[p->nheap];
    p->e[p->heap[i]].heap = i;
    sift_up(p, i);
    sift_down(p, p->e[p->heap[i]].heap);
  }
}

/* ---- entries */

int mend_parkset_add(mend_parkset *p, const char *id, double due) {
  uint64_t hi;
  uint32_t lo;
  if (pack(id, &hi, &lo)) return -2;
  if ((p->n + 1) * 2 > p->nslot && resize_slots(p, p->nslot ? p->nslot * 2 : 64)) return -1;
  uint32_t s = find_slot(p, hi, lo);
  if (p->slot[s]) {
    uint32_t k = p->slot[s] - 1;
    heap_remove(p, k);
    p->e[k].due = due;
    return due >= 0 && heap_insert(p, k) ? -1 : 0;
  }
  if (p->n == p->cap) {
    uint32_t cap = p->cap ? p->cap * 2 : 64;
    mend_parked *more = realloc(p->e, (size_t)cap * sizeof *more);
    if (!more) return -1;
    p->e = more;
    p->cap = cap;
  }
  uint32_t k = p->n;
  p->e[k] = (mend_parked){due, hi, lo, UINT32_MAX};
  if (due >= 0 && heap_insert(p, k)) return -1;
  p->n++;
  p->slot[s] = k + 1;
  return 1;
}

static void remove_at(mend_parkset *p, uint32_t s) {
  uint32_t k = p->slot[s] - 1, mask = p->nslot - 1;
  heap_remove(p, k);
  /* Backward-shift deletion: every entry after the hole stays reachable from its home slot. */
  p->slot[s] = 0;
  for (uint32_t i = (s + 1) & mask; p->slot[i]; i = (i + 1) & mask) {
    const mend_parked *e = &p->e[p->slot[i] - 1];
    uint32_t home = hash_of(e->hi, e->lo) & mask;
    if (((i - home) & mask) >= ((i - s) & mask)) {
      p->slot[s] = p->slot[i];
      p->slot[i] = 0;
      s = i;
    }
  }
  /* The last entry fills the hole in e. */
  uint32_t last = --p->n;
  if (k != last) {
    p->e[k] = p->e[last];
    p->slot[find_slot(p, p->e[k].hi, p->e[k].lo)] = k + 1;
    if (p->e[k].heap != UINT32_MAX) p->heap[p->e[k].heap] = k;
  }
}

/* After a burst has woken, the arrays go back to a size near what is left (a quarter full at
 * least), so that a worker does not keep the peak's index. */
static void shrink(mend_parkset *p) {
  if (p->cap <= 1024 || p->n >= p->cap / 4) return;
  uint32_t cap = p->cap / 2;
  mend_parked *e = realloc(p->e, (size_t)cap * sizeof *e);
  if (e) { p->e = e; p->cap = cap; }
  if (p->capheap > cap && p->nheap <= cap) {
    uint32_t *h = realloc(p->heap, (size_t)cap * sizeof *h);
    if (h) { p->heap = h; p->capheap = cap; }
  }
  if (p->nslot > 4 * cap) resize_slots(p, p->nslot / 2);   /* on failure the old one stays */
}

int mend_parkset_remove(mend_parkset *p, const char *id) {
  uint64_t hi;
  uint32_t lo;
  if (!p->n || pack(id, &hi, &lo)) return 0;
  uint32_t s = find_slot(p, hi, lo);
  if (!p->slot[s]) return 0;
  remove_at(p, s);
  shrink(p);
  return 1;
}

int mend_parkset_has(const mend_parkset *p, const char *id) {
  uint64_t hi;
  uint32_t lo;
  return p->n && !pack(id, &hi, &lo) && p->slot[find_slot(p, hi, lo)] != 0;
}

double mend_parkset_next_due(const mend_parkset *p) {
  return p->nheap ? p->e[p->heap[0]].due : -1;
}

int mend_parkset_pop_due(mend_parkset *p, double now, char id[17]) {
  if (!p->nheap || p->e[p->heap[0]].due > now) return 0;
  const mend_parked *e = &p->e[p->heap[0]];
  unpack(e, id);
  remove_at(p, find_slot(p, e->hi, e->lo));
  shrink(p);
  return 1;
}

void mend_parkset_id(const mend_parkset *p, uint32_t i, char id[17]) { unpack(&p->e[i], id); }

void mend_parkset_free(mend_parkset *p) {
  free(p->e);
  free(p->heap);
  free(p->slot);
  memset(p, 0, sizeof *p);
}
