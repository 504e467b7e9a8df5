/*
 * http_raw: the ceiling mend.http is measured against (bench/run.lua, W8). It sends what a
 * step's mend.http sends (a POST of a small JSON body with Content-Type and Idempotency-Key
 * headers) N times to one URL, at most C requests in flight on one libcurl multi handle with
 * kept-alive connections, and nothing else: no engine, no store, no Lua. Prints one JSON line,
 * with the CPU time the requests took (cpu_s: the client is one thread), which the machine's
 * load moves far less than its wall-clock time, and the connections it opened (connects: C
 * when every connection was kept alive, N when the server closed each after its answer).
 * With BODY (a printf format with one %d, the request's number), it sends that body instead:
 * W12 starts runs through mend serve's API with it. A request fails unless answered 2xx.
 *
 *   http_raw URL N C [BODY]
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static size_t discard(char *p, size_t size, size_t n, void *ud) {
  (void)p;
  (void)ud;
  return size * n;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct slot {
  CURL *easy;
  struct curl_slist *headers;
  char body[256];
};

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *body_format = "{\"i\":%d}";

static void start(CURLM *multi, struct slot *s, const char *url, int k) {
  char key[64];
  snprintf(key, sizeof key, "Idempotency-Key: raw/%d", k);
  curl_slist_free_all(s->headers);
  s->headers = curl_slist_append(NULL, "Content-Type: application/json");
  s->headers = curl_slist_append(s->headers, key);
  snprintf(s->body, sizeof s->body, body_format, k);
  curl_easy_setopt(s->easy, CURLOPT_URL, url);
  curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->headers);
  curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, s->body);
  curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
  curl_multi_add_handle(multi, s->easy);
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: http_raw URL N C [BODY]\n");
    return 2;
  }
  if (argc == 5) body_format = argv[4];
  const char *url = argv[1];
  int n = atoi(argv[2]), c = atoi(argv[3]);
  if (n < 1 || c < 1) return 2;
  if (c > n) c = n;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURLM *multi = curl_multi_init();
  struct slot *slots = calloc((size_t)c, sizeof *slots);
  if (!multi || !slots) return 1;
  int sent = 0, done = 0, failed = 0;
  long connects = 0;
  double t0 = now(), cpu0 = cpu_now();
  for (int i = 0; i < c; i++) {
    slots[i].easy = curl_easy_init();
    start(multi, &slots[i], url, ++sent);
  }
  while (done < n) {
    int running = 0;
    curl_multi_perform(multi, &running);
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left))) {
      if (m->msg != CURLMSG_DONE) continue;
      struct slot *s;
      long status = 0;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
      curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
      long opened = 0;
      curl_easy_getinfo(m->easy_handle, CURLINFO_NUM_CONNECTS, &opened);
      connects += opened;
      if (m->data.result != CURLE_OK || status / 100 != 2) failed++;
      done++;
      curl_multi_remove_handle(multi, s->easy);
      if (sent < n) start(multi, s, url, ++sent);   /* the same handle: its connection kept */
    }
    if (done < n) curl_multi_poll(multi, NULL, 0, 100, NULL);
  }
  double secs = now() - t0, cpu = cpu_now() - cpu0;
  printf("{\"requests\":%d,\"concurrency\":%d,\"seconds\":%.3f,\"rps\":%.1f,\"cpu_s\":%.4f,"
         "\"connects\":%ld,\"failed\":%d}\n", n, c, secs, n / secs, cpu, connects, failed);
  for (int i = 0; i < c; i++) {
    curl_easy_cleanup(slots[i].easy);
    curl_slist_free_all(slots[i].headers);
  }
  free(slots);
  curl_multi_cleanup(multi);
  curl_global_cleanup();
  return failed ? 1 : 0;
}
