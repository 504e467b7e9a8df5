/*
 * test_curl_memory: a host that uses libcurl itself beside mend's Lua module, which gives
 * libcurl memory functions of its own when nothing set libcurl up before (src/engine/http_mem.c).
 * argv[1] is a case, argv[2] package.cpath, argv[3] package.path. The cases:
 *   before  the host made libcurl objects before libcurl was set up (a header list, a parsed
 *           URL: libcurl makes them on the C library's allocator without being set up), then
 *           a Lua state makes requests, then the host edits and frees those objects from a
 *           thread of its own: they must go back to the C library exactly;
 *   unload  the host uses libcurl after the Lua state that set it up was closed (Lua unloads
 *           the module then): mend's functions must still be mapped;
 *   inited  the host set libcurl up first: mend must leave libcurl's memory alone;
 *   cleanup the host calls curl_global_cleanup once too many (for the setup it thought its
 *           first curl_easy_init made) while an engine lives, then uses libcurl again (which
 *           sets libcurl up anew, on the C library's functions): the engine's requests and
 *           close must still run.
 * Each case checks whether mend's functions are libcurl's (mend_allocates), so that a case
 * cannot pass without the path it is about. Where malloc is not the C library's (an allocator
 * preloaded, as LD_PRELOAD=libjemalloc.so.2 does, or valgrind's heap), mend rightly leaves
 * libcurl's memory to it and no case has its path: each skips (77), saying so.
 */
#define _GNU_SOURCE 1   /* RTLD_DEFAULT */
#include <curl/curl.h>
#include <dlfcn.h>
#include <link.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 200

static struct curl_slist *lists[N];
static CURLU *urls[N];

/* Requests that reach a socket (a refused connection on loopback) and one refused before. */
static const char run_lua[] =
  "local mend = require 'mend'\n"
  "local eng = mend.engine{ db = ':memory:', clock = 'virtual' }\n"
  "local said = {}\n"
  "eng:register{ name = 'w', steps = { { name = 's', execute = function()\n"
  "  for _ = 1, 20 do\n"
  "    local ok, err = pcall(mend.http, { url = 'http://127.0.0.1:1/x', timeout = 5 })\n"
  "    said[#said + 1] = tostring(err)\n"
  "  end\n"
  "  local ok, err = pcall(mend.http, { url = 'ftp://example.com/' })\n"
  "  said[#said + 1] = tostring(err) end } } }\n"
  "local id = eng:start('w', {})\n"
  "eng:run()\n"
  "local st = eng:status(id)\n"
  "eng:close()\n"
  "assert(st.status == 'succeeded', st.status)\n"
  "assert(said[1]:find('127.0.0.1'), said[1])\n"
  "assert(said[#said]:find('not http or https'), said[#said])\n";

static lua_State *state_at(const char *cpath, const char *path) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_pushstring(L, cpath);
  lua_setfield(L, -2, "cpath");
  lua_pushstring(L, path);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  return L;
}

static int run_state(const char *cpath, const char *path) {
  lua_State *L = state_at(cpath, path);
  if (luaL_dostring(L, run_lua) != LUA_OK) {
    fprintf(stderr, "FAIL: %s\n", lua_tostring(L, -1));
    return 1;
  }
  lua_close(L);   /* the module is unloaded here, unless it is kept */
  return 0;
}

/* Whether libcurl's memory is mend's: a string libcurl copies and frees on this thread (one that
 * ran an engine's requests) is then kept by mend and comes back as libcurl's next copy of that
 * size, though the C library handed out a block of that size in between; on the C library's
 * functions that block is the freed string itself (its per-thread cache is last in, first out),
 * or when that cache is full neither is. */
static int mend_allocates(void) {
  char text[512];
  memset(text, 'a', sizeof text);
  text[200] = 0;
  struct curl_slist *l = curl_slist_append(NULL, text);
  if (!l) return -1;
  uintptr_t first = (uintptr_t)l->data;
  size_t u = malloc_usable_size(l->data);
  curl_slist_free_all(l);
  void *between = malloc(u);
  /* a copy the size of the class that block is kept in: the C library may have given more room
   * than 201 bytes ask (a chunk whose rest was too small to split), so a class above */
  text[200] = 'a';
  text[u / 16 * 16 - 1] = 0;
  l = curl_slist_append(NULL, text);
  if (!between || !l) return -1;
  int kept = (uintptr_t)l->data == first && (uintptr_t)between != first;
  curl_slist_free_all(l);
  free(between);
  return kept;
}

/* Whether malloc and its kin are the C library's own, as src/engine/http_mem.c asks before it
 * gives libcurl its functions: not under valgrind's heap tools (a vgpreload_TOOL object beside
 * vgpreload_core), not with another allocator preloaded or linked in. */
static int vg_heap(struct dl_phdr_info *i, size_t size, void *ud) {
  (void)size;
  (void)ud;
  const char *n = i->dlpi_name ? strstr(i->dlpi_name, "/vgpreload_") : NULL;
  return n && strncmp(n, "/vgpreload_core", 15) != 0;
}

static int libc_allocates(void) {
  if (dl_iterate_phdr(vg_heap, NULL)) return 0;
  void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (!libc) return 0;
  static const char *const names[] = { "malloc", "free", "realloc", "calloc",
                                       "malloc_usable_size" };
  int same = 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    same &= dlsym(RTLD_DEFAULT, names[i]) == dlsym(libc, names[i]);
  dlclose(libc);
  return same;
}

static void *edit_and_drop(void *ud) {
  (void)ud;
  for (int k = 0; k < N; k++) {
    lists[k] = curl_slist_append(lists[k], "X-Later: 1");   /* a tagged item on a plain list */
    char *s = NULL;
    if (curl_url_set(urls[k], CURLUPART_PATH, "/a/much/longer/path/than/before/to/grow", 0) ||
        curl_url_get(urls[k], CURLUPART_URL, &s, 0))
      return "a URL refused";
    curl_free(s);
    curl_slist_free_all(lists[k]);
    curl_url_cleanup(urls[k]);
  }
  return NULL;
}

static int case_before(const char *cpath, const char *path) {
  char line[64];
  for (int k = 0; k < N; k++) {
    snprintf(line, sizeof line, "X-Header-%d: %0*d", k, k % 40, k);
    lists[k] = curl_slist_append(NULL, line);
    lists[k] = curl_slist_append(lists[k], "Accept: */*");
    urls[k] = curl_url();
    snprintf(line, sizeof line, "http://h%d.example.com/p/%0*d?q=%d", k, k % 30, k, k);
    if (!lists[k] || !urls[k] || curl_url_set(urls[k], CURLUPART_URL, line, 0)) {
      fprintf(stderr, "FAIL: libcurl refused a list or a URL\n");
      return 1;
    }
  }
  if (run_state(cpath, path)) return 1;
  if (mend_allocates() != 1) {
    fprintf(stderr, "FAIL: mend did not give libcurl its memory functions\n");
    return 1;
  }
  pthread_t t;
  void *why = NULL;
  if (pthread_create(&t, NULL, edit_and_drop, NULL) || pthread_join(t, &why)) {
    fprintf(stderr, "FAIL: no thread\n");
    return 1;
  }
  if (why) {
    fprintf(stderr, "FAIL: %s\n", (const char *)why);
    return 1;
  }
  for (int k = 0; k < 1000; k++) free(malloc((size_t)(k * 37 % 4096) + 1));   /* heap sound */
  printf("ok: objects libcurl made before it was set up went back where they came from\n");
  return 0;
}

static int case_unload(const char *cpath, const char *path) {
  if (run_state(cpath, path)) return 1;
  if (mend_allocates() != 1) {
    fprintf(stderr, "FAIL: mend did not give libcurl its memory functions\n");
    return 1;
  }
  for (int k = 0; k < 100; k++) {
    CURL *c = curl_easy_init();
    CURLU *u = curl_url();
    char *s = NULL;
    if (!c || !u || curl_url_set(u, CURLUPART_URL, "http://example.com/a?b=1", 0) ||
        curl_url_get(u, CURLUPART_URL, &s, 0)) {
      fprintf(stderr, "FAIL: libcurl refused a handle or a URL\n");
      return 1;
    }
    curl_easy_setopt(c, CURLOPT_CURLU, u);
    curl_free(s);
    curl_easy_cleanup(c);
    curl_url_cleanup(u);
  }
  printf("ok: the host used libcurl after the state that set it up was closed\n");
  return 0;
}

static int case_inited(const char *cpath, const char *path) {
  if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
    fprintf(stderr, "FAIL: curl_global_init\n");
    return 1;
  }
  if (run_state(cpath, path)) return 1;
  if (mend_allocates() != 0) {
    fprintf(stderr, "FAIL: mend changed the memory functions of a libcurl set up before it\n");
    return 1;
  }
  curl_global_cleanup();
  printf("ok: a libcurl the host set up kept the C library's allocator\n");
  return 0;
}

static const char open_lua[] =
  "local mend = require 'mend'\n"
  "eng = mend.engine{ db = ':memory:', clock = 'virtual' }\n"
  "eng:register{ name = 'w', steps = { { name = 's', execute = function()\n"
  "  for _ = 1, 5 do pcall(mend.http, { url = 'http://127.0.0.1:1/x', timeout = 5 }) end\n"
  "  end } } }\n"
  "local id = eng:start('w', {})\n"
  "eng:run()\n"
  "assert(eng:status(id).status == 'succeeded')\n";

static const char again_lua[] =
  "local id = eng:start('w', {})\n"
  "eng:run()\n"
  "assert(eng:status(id).status == 'succeeded')\n"
  "eng:close()\n";

static int case_cleanup(const char *cpath, const char *path) {
  lua_State *L = state_at(cpath, path);
  if (luaL_dostring(L, open_lua) != LUA_OK) {
    fprintf(stderr, "FAIL: %s\n", lua_tostring(L, -1));
    return 1;
  }
  if (mend_allocates() != 1) {
    fprintf(stderr, "FAIL: mend did not give libcurl its memory functions\n");
    return 1;
  }
  curl_global_cleanup();   /* the host's, for a setup it did not make */
  CURL *c = curl_easy_init();   /* sets libcurl up anew */
  if (!c) {
    fprintf(stderr, "FAIL: curl_easy_init\n");
    return 1;
  }
  curl_easy_cleanup(c);
  if (luaL_dostring(L, again_lua) != LUA_OK) {
    fprintf(stderr, "FAIL: %s\n", lua_tostring(L, -1));
    return 1;
  }
  lua_close(L);
  printf("ok: an engine outlived the host's extra curl_global_cleanup\n");
  return 0;
}

int main(int argc, char **argv) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  printf("skipped: a sanitizer's allocator is not the C library's (mend leaves libcurl's)\n");
  return 77;
#endif
  if (!libc_allocates()) {
    printf("skipped: malloc is not the C library's here (an allocator preloaded or linked in, "
           "or valgrind's heap): mend leaves libcurl's memory to it, as it must\n");
    return 77;
  }
  unsetenv("MEND_CURL_MEMORY");   /* the cases are about mend's functions, not the shell's */
  if (argc < 4) {
    fprintf(stderr, "usage: test_curl_memory before|unload|inited CPATH PATH\n");
    return 2;
  }
  if (!strcmp(argv[1], "before")) return case_before(argv[2], argv[3]);
  if (!strcmp(argv[1], "unload")) return case_unload(argv[2], argv[3]);
  if (!strcmp(argv[1], "inited")) return case_inited(argv[2], argv[3]);
  if (!strcmp(argv[1], "cleanup")) return case_cleanup(argv[2], argv[3]);
  fprintf(stderr, "test_curl_memory: no case %s\n", argv[1]);
  return 2;
}
