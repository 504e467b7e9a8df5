/*
 * http_mem: libcurl's memory, when mend is the first in the process to set libcurl up. Every
 * block libcurl gets is a C library block as malloc made it, with no header: a block freed on a
 * thread that drives an engine's requests is kept in that thread's list of the size class its
 * usable size (malloc_usable_size) fills (at most HTTP_MEM_KEEP_BYTES a thread), for libcurl's
 * next request of that size. libcurl 7.88 allocates and frees some thirty blocks a transfer,
 * among them its 16 KiB receive buffer, whose request makes the C library consolidate the fast
 * bins a Lua state's frees fill: through the C library alone these were ~5k instructions of a
 * W9 run's ~116k on the loop thread (bench/README.md, mem30). Since each block is the C
 * library's own, either side may free it: a block libcurl made before these functions were its
 * comes back here, and one of these goes back to the C library's free when a host sets libcurl
 * up anew on it (after one curl_global_cleanup too many).
 * Must never: hand out a block smaller than asked; keep more than HTTP_MEM_KEEP_BYTES in a
 * thread, or anything past the thread's end; be installed when libcurl was set up before (the
 * host's choice stands), when malloc is not the C library's (malloc_usable_size would not be
 * its), under AddressSanitizer or valgrind's heap tools (which are to see curl's blocks made and
 * freed), or when the code holding these functions could be unloaded while libcurl stays.
 */
#define _GNU_SOURCE 1   /* dladdr, dl_iterate_phdr, RTLD_DEFAULT */
#include "http_int.h"

#include <dlfcn.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define HTTP_MEM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HTTP_MEM_ASAN 1
#endif
#endif

#define SMALL 1024                  /* classes of 16 bytes up to this, then of 1 KiB */
#define LARGE (32u << 10)           /* larger blocks go to the C library and back */
#define CLASSES (SMALL / 16 + (LARGE - SMALL) / 1024)
#define HTTP_MEM_KEEP_BYTES (2u << 20)
#define THREADS 8                   /* threads that keep blocks; others give them back */

/* A kept block's first bytes (every block has room for 16): the next kept block of its class,
 * then its own room as malloc_usable_size said it. */
typedef struct kept { struct kept *next; size_t room; } kept;

typedef struct cache {
  kept *first[CLASSES];
  size_t bytes;                     /* the kept blocks' room */
} cache;

/* Who keeps blocks: a thread in one of these slots, claimed by mend__http_mem_adopt on a thread
 * that makes an engine's requests and given up by the thread's end (the key's destructor). A
 * slot's thread is written only by its owner: another thread never reads its own id there. */
static struct slot { _Atomic uintptr_t thread; cache k; } slots[THREADS];
static pthread_key_t at_exit;
static int ours;                    /* these functions given to libcurl (set once, under uv_once) */

/* The class a request of n bytes (1 <= n <= LARGE) takes: the smallest that holds it. */
static unsigned class_of(size_t n) {
  if (n <= SMALL) return n ? (unsigned)((n - 1) / 16) : 0;
  return SMALL / 16 + (unsigned)((n - SMALL - 1) / 1024);
}
static size_t class_size(unsigned c) {
  if (c < SMALL / 16) return ((size_t)c + 1) * 16;
  return SMALL + ((size_t)(c - SMALL / 16) + 1) * 1024;
}
/* The class a block of u usable bytes can serve: the largest it holds; CLASSES: none. */
static unsigned class_held(size_t u) {
  if (u < 16 || u > LARGE + 1023) return CLASSES;
  if (u < SMALL + 1024) return (unsigned)(u < SMALL ? u / 16 : SMALL / 16) - 1;
  return SMALL / 16 - 1 + (unsigned)((u - SMALL) / 1024);
}

/* A thread's id: its thread pointer where the compiler reads it in one instruction (what glibc's
 * pthread_self returns there too, without the call), else pthread_self. */
static inline uintptr_t self_id(void) {
#if defined(__has_builtin)
#if __has_builtin(__builtin_thread_pointer) && (defined(__x86_64__) || defined(__aarch64__))
  return (uintptr_t)__builtin_thread_pointer();
#endif
#endif
  return (uintptr_t)pthread_self();
}

static cache *mine(void) {
  uintptr_t self = self_id();
  for (int i = 0; i < THREADS; i++)
    if (atomic_load_explicit(&slots[i].thread, memory_order_relaxed) == self) return &slots[i].k;
  return NULL;
}

/* A thread's end: what it kept goes back to the C library and its slot is free again. */
static void release(void *ud) {
  struct slot *s = ud;
  for (unsigned c = 0; c < CLASSES; c++)
    while (s->k.first[c]) {
      kept *b = s->k.first[c];
      s->k.first[c] = b->next;
      free(b);
    }
  s->k.bytes = 0;
  atomic_store_explicit(&s->thread, 0, memory_order_release);
}

static void *mem_malloc(size_t n) {
  if (n > LARGE) return malloc(n);
  unsigned c = class_of(n);
  cache *k = mine();
  if (k && k->first[c]) {
    kept *b = k->first[c];
    k->first[c] = b->next;
    k->bytes -= b->room;
    return b;
  }
  return malloc(class_size(c));
}

static void mem_free(void *p) {
  if (!p) return;
  cache *k = mine();
  size_t u;
  unsigned c;
  if (!k || (c = class_held(u = malloc_usable_size(p))) == CLASSES ||
      k->bytes + u > HTTP_MEM_KEEP_BYTES) {
    free(p);
    return;
  }
  kept *b = p;
  b->next = k->first[c];
  b->room = u;
  k->first[c] = b;
  k->bytes += u;
}

/* Within the block's room it stays (curl's buffers grow a little at a time), unless a large
 * block would keep most of its room unused; a larger one moves into a class, or past LARGE to
 * the C library's realloc (every block is one of its blocks). */
static void *mem_realloc(void *p, size_t n) {
  if (!p) return mem_malloc(n);
  if (!n) n = 1;   /* C's realloc to 0 may free or not; curl never asks for it */
  size_t u = malloc_usable_size(p);
  if (n <= u && (u <= LARGE || n > u / 2)) return p;
  if (n > LARGE) return realloc(p, n);
  void *q = mem_malloc(n);
  if (!q) return NULL;
  memcpy(q, p, n < u ? n : u);
  mem_free(p);
  return q;
}

static void *mem_calloc(size_t k, size_t n) {
  if (n && k > SIZE_MAX / n) return NULL;
  if (k * n > LARGE) return calloc(k, n);
  void *p = mem_malloc(k * n);
  if (p) memset(p, 0, k * n);
  return p;
}

static char *mem_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = mem_malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* valgrind's tools that keep the heap (memcheck, massif, helgrind...) move the C library's
 * malloc to their own at its address, which dlsym cannot tell; each preloads an object named
 * vgpreload_TOOL beside every tool's vgpreload_core (callgrind's only: the heap is glibc's). */
static int names_vg_heap(struct dl_phdr_info *i, size_t size, void *ud) {
  (void)size;
  (void)ud;
  const char *n = i->dlpi_name ? strstr(i->dlpi_name, "/vgpreload_") : NULL;
  return n && strncmp(n, "/vgpreload_core", 15) != 0;
}

/* Whether the process's malloc, free, realloc, calloc and malloc_usable_size are the C library's
 * own (no allocator preloaded or linked into the program, no valgrind): only then does a block
 * either side made go back to the other's free, and tell its size. */
static int libc_allocates(void) {
  if (dl_iterate_phdr(names_vg_heap, NULL)) return 0;
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) return 0;
  static const char *const names[] = { "malloc", "free", "realloc", "calloc",
                                       "malloc_usable_size" };
  int same = 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *used = dlsym(RTLD_DEFAULT, names[i]), *its = dlsym(libc, names[i]);
    if (!used || used != its) same = 0;
  }
  dlclose(libc);
  return same;
}

/* Whether addr is in the program itself (the first object dl_iterate_phdr names), which is
 * never unloaded. */
struct in_main { uintptr_t addr; int first, found; };
static int main_has(struct dl_phdr_info *i, size_t size, void *ud) {
  (void)size;
  struct in_main *m = ud;
  if (!m->first) return 1;
  m->first = 0;
  for (int k = 0; k < i->dlpi_phnum; k++) {
    const ElfW(Phdr) *ph = &i->dlpi_phdr[k];
    uintptr_t lo = i->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && m->addr >= lo && m->addr < lo + ph->p_memsz) m->found = 1;
  }
  return 1;
}

/* These functions stay mapped as long as libcurl may call them: in the program itself, or in
 * a shared object (the Lua module) marked never to be unloaded. 0: they may go. */
static int pinned(void) {
  Dl_info info;
  if (!dladdr((void *)mem_malloc, &info) || !info.dli_fname) return 0;
  struct in_main m = { (uintptr_t)mem_malloc, 1, 0 };
  dl_iterate_phdr(main_has, &m);
  if (m.found) return 1;
  /* the handle is left open on purpose: with it the object is never unloaded */
  return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != NULL;
}

/* A child of fork has only the thread that forked: another thread's slot is a dead thread's,
 * whose id a new thread may be given (glibc reuses the stacks), and whose lists the fork may
 * have caught half changed. They are forgotten (the child's copies of their blocks stay). */
static void forget_others(void) {
  uintptr_t self = self_id();
  for (int i = 0; i < THREADS; i++) {
    uintptr_t t = atomic_load_explicit(&slots[i].thread, memory_order_relaxed);
    if (t && t != self) {
      memset(&slots[i].k, 0, sizeof slots[i].k);
      atomic_store_explicit(&slots[i].thread, 0, memory_order_relaxed);
    }
  }
}

/* MEND_CURL_MEMORY: unset, empty or "mend": these functions where they may be; "libc": the C
 * library's, as libcurl's own. Another value is named on stderr and read as "libc". */
static int wanted(void) {
  const char *v = getenv("MEND_CURL_MEMORY");
  if (!v || !*v || strcmp(v, "mend") == 0) return 1;
  if (strcmp(v, "libc") != 0)
    fprintf(stderr, "mend: MEND_CURL_MEMORY=%.40s is neither mend nor libc: libcurl's memory "
                    "is left the C library's\n", v);
  return 0;
}

void mend__http_global_init(void) {
#ifdef HTTP_MEM_ASAN
  const int allowed = 0 && wanted();   /* AddressSanitizer is to see every block */
#else
  const int allowed = wanted();
#endif
  if (allowed && libc_allocates() && pinned() && pthread_key_create(&at_exit, release) == 0 &&
      pthread_atfork(NULL, NULL, forget_others) == 0) {
    curl_global_init_mem(CURL_GLOBAL_DEFAULT, mem_malloc, mem_free, mem_realloc, mem_strdup,
                         mem_calloc);
    ours = 1;
    return;
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

void mend__http_mem_adopt(void) {
  /* a slot claimed while libcurl was set up before (curl_global_init_mem then does nothing) is
   * never used, and given up at the thread's end */
  if (!ours || mine()) return;
  uintptr_t self = self_id();
  for (int i = 0; i < THREADS; i++) {
    uintptr_t none = 0;
    if (atomic_compare_exchange_strong(&slots[i].thread, &none, self)) {
      if (pthread_setspecific(at_exit, &slots[i])) release(&slots[i]);
      return;
    }
  }
}
