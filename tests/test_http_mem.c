/*
 * test_http_mem: src/engine/http_mem.c's functions called directly (the file is included, so
 * its static functions and slots are in reach): every block keeps its bytes through each realloc
 * path; a thread's kept bytes never pass the bound; a thread's end gives its blocks and slot
 * back; the C library's blocks of every kind (aligned, mapped, calloc'd) go through mend's free
 * and realloc; a child of fork forgets the slots of its parent's other threads.
 */
#include "engine/http_mem.c"

#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
#define CHECK(c)                                                                 \
  do {                                                                           \
    if (!(c)) { fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } \
  } while (0)

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31 + seed);
}
static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 31 + seed)) return 0;
  return 1;
}

static int held(void) {
  int n = 0;
  for (int i = 0; i < THREADS; i++) n += atomic_load(&slots[i].thread) != 0;
  return n;
}

static void reallocs(void) {
  volatile size_t huge = SIZE_MAX;   /* unknown to the compiler, which refuses a known one */
  static const size_t sizes[] = { 16, 1000, 1025, 32768, 32769, 5u << 20, 40000, 20, 0 };
  unsigned char *a = mem_malloc(10);
  size_t had = 10;
  fill(a, had, 1);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *b = mem_realloc(a, sizes[i]);
    size_t kept = sizes[i] ? (sizes[i] < had ? sizes[i] : had) : 1;
    CHECK(b && same(b, kept, (unsigned)i + 1));
    if (!b) return;
    a = b;
    had = sizes[i] ? sizes[i] : 1;
    fill(a, had, (unsigned)i + 2);
  }
  CHECK(mem_realloc(a, huge) == NULL && same(a, 1, 10));   /* refused, left whole */
  mem_free(a);
  CHECK(mem_malloc(huge) == NULL);
  CHECK(mem_calloc(huge / 2, 3) == NULL);
  unsigned char *z = mem_calloc(3, 40000);
  CHECK(z != NULL);
  for (int i = 0; z && i < 120000; i++)
    if (z[i]) { CHECK(!"calloc's block is zero"); break; }
  mem_free(z);
}

/* A thread that makes requests: its blocks kept in its slot if it got one (there are THREADS),
 * given straight back if not. Returns whether it got one. */
static void *a_thread(void *ud) {
  (void)ud;
  mend__http_mem_adopt();
  cache *k = mine();
  void *v[1000];
  static const size_t sizes[] = { 1, 17, 1024, 1025, 32768 };
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    for (int i = 0; i < 1000; i++) v[i] = mem_malloc(sizes[s]);
    for (int i = 0; i < 1000; i++) mem_free(v[i]);
    CHECK(!k || k->bytes <= HTTP_MEM_KEEP_BYTES);
  }
  CHECK(!k || k->bytes > 0);
  return k ? (void *)1 : NULL;
}

/* The bound in memory, not in class sizes: a thread freeing the C library's blocks of 2040
 * usable bytes (a host's header lines, say, through curl_slist_free_all) keeps at most
 * HTTP_MEM_KEEP_BYTES of them, counted as the C library holds them. */
static void *bound_in_memory(void *ud) {
  (void)ud;
  mend__http_mem_adopt();
  cache *k = mine();
  if (!k) return NULL;
  for (int i = 0; i < 4096; i++) mem_free(malloc(2040));
  size_t room = 0;
  for (unsigned c = 0; c < CLASSES; c++)
    for (void *b = k->first[c]; b; b = *(void **)b) room += malloc_usable_size(b);
  if (room > HTTP_MEM_KEEP_BYTES)
    fprintf(stderr, "kept %zu bytes of the C library's, counted %zu, bound %u\n", room,
            k->bytes, HTTP_MEM_KEEP_BYTES);
  CHECK(room <= HTTP_MEM_KEEP_BYTES);
  return (void *)1;
}

static void foreign(void) {
  void *m;
  CHECK(posix_memalign(&m, 4096, 100) == 0);
  mem_free(m);
  CHECK(posix_memalign(&m, 65536, 300000) == 0);
  m = mem_realloc(m, 10);
  mem_free(m);
  unsigned char *big = malloc(64u << 20);
  fill(big, 100, 9);
  big = mem_realloc(big, 128u << 20);
  CHECK(big && same(big, 100, 9));
  mem_free(big);
  unsigned char *f = malloc(5);
  fill(f, 5, 8);
  f = mem_realloc(f, 3000);
  CHECK(f && same(f, 5, 8));
  mem_free(f);
  mem_free(strdup("x"));
  mem_free(calloc(1, 1 << 20));
  /* and the other way: a block these functions kept, freed by the C library */
  void *k = mem_malloc(100);
  mem_free(k);
  free(mem_malloc(100));
}

int main(void) {
  unsetenv("MEND_CURL_MEMORY");   /* else a shell's MEND_CURL_MEMORY=libc skips every check */
  mend__http_global_init();
  if (!ours) {
    printf("skipped: libcurl's memory is the C library's here (a sanitizer, valgrind or a "
           "preloaded allocator)\n");
    return 77;
  }
  reallocs();
  int kept = 0;
  for (int round = 0; round < 3; round++) {   /* more threads than slots, at once */
    pthread_t t[THREADS + 2];
    for (int i = 0; i < THREADS + 2; i++) CHECK(pthread_create(&t[i], NULL, a_thread, NULL) == 0);
    for (int i = 0; i < THREADS + 2; i++) {
      void *got = NULL;
      pthread_join(t[i], &got);
      kept += got != NULL;
    }
    CHECK(held() == 0);   /* each thread's end gave its slot back */
  }
  CHECK(kept >= 3);
  for (int i = 0; i < 2 * THREADS; i++) {   /* one after another: each finds a slot free */
    pthread_t t;
    void *got = NULL;
    CHECK(pthread_create(&t, NULL, a_thread, NULL) == 0 && pthread_join(t, &got) == 0 && got);
  }
  CHECK(held() == 0);
  {
    pthread_t t;
    void *got = NULL;
    CHECK(pthread_create(&t, NULL, bound_in_memory, NULL) == 0 && pthread_join(t, &got) == 0 &&
          got);
  }
  mend__http_mem_adopt();
  foreign();
  /* a slot of a thread the child of a fork lacks: in the child only this thread's remains */
  atomic_store(&slots[THREADS - 1].thread, (uintptr_t)1);
  pid_t pid = fork();
  if (pid == 0) _exit(held() == 1 && mine() != NULL ? 0 : 1);
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0);
  atomic_store(&slots[THREADS - 1].thread, 0);
  for (int k = 0; k < 1000; k++) free(malloc((size_t)(k * 37 % 70000) + 1));   /* heap sound */
  if (failures) return 1;
  printf("ok: libcurl's memory functions\n");
  return 0;
}
