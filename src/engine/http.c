/*
 * http: the requests of mend.http once set up. Owns the engine's libcurl multi handle driven by
 * the loop (a uv_poll per socket curl watches, the connections' sockets it opens and closes for
 * curl, one uv_timer for curl's timer), the idle easy handles, the environment's proxies (read
 * once), one request per waiting attempt from its start to the step's resumption with (true,
 * response) or (false, error), what a status code means (retryable, fatal, returned) and the
 * text each request leaves in its attempt's history detail. The call itself (its table read,
 * the URL and the allow-list, the headers) is http_call.c's, the table a returned response
 * becomes http_resp.c's.
 * Must never: block the loop (no easy_perform, no blocking resolver wait on the loop's
 * thread beyond what libcurl's own threaded resolver does); resume an attempt that is no
 * longer the request's; let one request's options reach the next on a reused handle; keep a
 * poll handle past its socket.
 */
#include "http_int.h"

#include <ctype.h>
#include <stddef.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "json.h"
#include "mend.h"
#include "util.h"

/* ---------------------------------------------------------------- buffers */

int mend__http_grow(char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 4096;
  while (c < need) c *= 2;
  char *p = realloc(*buf, c);
  if (!p) return -1;
  *buf = p;
  *cap = c;
  return 0;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
  http_req *q = ud;
  size_t k = size * n;
  if (q->len + k > q->max_bytes) { q->too_big = 1; return 0; }
  if (mend__http_grow(&q->out, &q->cap, q->len + k + 1)) return 0;
  memcpy(q->out + q->len, data, k);
  q->len += k;
  return k;
}

/* Headers of the final response only: a redirect's or a 100's are dropped when the next
 * status line comes. A 101 is an answer curl hands back as final (any other 1xx it reads past)
 * and then reads the connection's new protocol as its body, until the peer closes it: the
 * transfer stops at its status line, and the connection is not used again. */
static size_t on_header(char *data, size_t size, size_t n, void *ud) {
  http_req *q = ud;
  size_t k = size * n;
  if (k >= 5 && strncmp(data, "HTTP/", 5) == 0) {
    q->hlen = 0;
    const char *sp = memchr(data, ' ', k);
    if (sp && (size_t)(data + k - sp) > 4 && strncmp(sp + 1, "101", 3) == 0 &&
        (sp[4] == ' ' || sp[4] == '\r' || sp[4] == '\n')) {
      q->switched = 1;
      return 0;
    }
  }
  if (q->hlen + k > q->max_bytes) { q->too_big = 1; return 0; }
  if (mend__http_grow(&q->hdr, &q->hcap, q->hlen + k + 1)) return 0;
  memcpy(q->hdr + q->hlen, data, k);
  q->hlen += k;
  q->hdr[q->hlen] = 0;
  return k;
}

/* ---------------------------------------------------------------- the loop drives curl */

static void check_done(struct mend_http *H);

static void sock_closed(uv_handle_t *h) { free(h->data); }

static void sock_close(http_sock *s) {
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, sock_closed);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  http_sock *s = p->data;
  struct mend_http *H = s->H;
  if (s->idle) {   /* a kept connection spoke between requests (closed, most likely): curl's
                    * check before it reuses the connection finds out; watched again then */
    uv_poll_stop(&s->poll);
    s->events = 0;
    return;
  }
  int flags = 0;
  if (status < 0) {   /* libuv stopped the handle (POLLERR): a later watch must start it */
    /* with what the socket was watched for, as curl's own poll says it: told of the error
     * alone, curl fails the transfer ("select/poll returned error") before it reads the
     * socket's own error, and a kept connection the server reset as it was reused failed the
     * request instead of sending it again on a new connection */
    flags = CURL_CSELECT_ERR;
    if (s->events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (s->events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
    s->events = 0;
  }
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  int running;
  curl_multi_socket_action(H->multi, s->fd, flags, &running);
  check_done(H);
}

static http_sock *sock_for(struct mend_http *H, curl_socket_t fd) {
  if (fd < 0) return NULL;
  if (fd >= H->nbyfd) {
    int n = H->nbyfd ? H->nbyfd : 64;
    while (n <= fd) n *= 2;
    http_sock **t = realloc(H->byfd, (size_t)n * sizeof *t);
    if (!t) return NULL;
    memset(t + H->nbyfd, 0, (size_t)(n - H->nbyfd) * sizeof *t);
    H->byfd = t;
    H->nbyfd = n;
  }
  http_sock *s = H->byfd[fd];
  if (s) return s;
  s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->fd = fd;
  s->H = H;
  if (uv_poll_init_socket(H->E->loop, &s->poll, fd)) { free(s); return NULL; }
  s->poll.data = s;
  H->byfd[fd] = s;
  return s;
}

static void sock_drop(struct mend_http *H, curl_socket_t fd) {
  if (fd < 0 || fd >= H->nbyfd || !H->byfd[fd]) return;
  sock_close(H->byfd[fd]);
  H->byfd[fd] = NULL;
}

static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
  http_req *q = ud;
  struct mend_http *H = q->H;
  /* The address curl connects to, whatever the name answered before: refused here, the
   * request fails (curl tries the name's next address, if any) and push_outcome says why. */
  if (purpose == CURLSOCKTYPE_IPCXN && H->addr_check) {
    int refused = mend__http_addr_refused(H, &a->addr, q->refused, sizeof q->refused);
    if (refused) {
      q->refused_unknown = refused == 2;
      q->refused_errno = H->route_err;
      return CURL_SOCKET_BAD;
    }
  }
  curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd == CURL_SOCKET_BAD) return fd;
  q->connected = 1;   /* an address tried: its outcome is the request's, not a refusal's */
  sock_drop(H, fd);   /* none should be left for this number; if one is, it is not this socket's */
  http_sock *s = sock_for(H, fd);
  if (s) s->connection = 1;   /* else made when curl first watches it, closed when it stops */
  return fd;
}

static int on_close_socket(void *ud, curl_socket_t fd) {
  sock_drop(ud, fd);   /* while the number is still this socket's */
  return close(fd);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *ud, void *sockp) {
  (void)easy;
  struct mend_http *H = ud;
  http_sock *s = sockp;
  if (what == CURL_POLL_REMOVE) {
    if (s && s->connection) {
      s->idle = 1;
      if (s->events != UV_READABLE) {   /* writable would wake the loop at every turn */
        uv_poll_stop(&s->poll);
        s->events = 0;
      }
      uv_unref((uv_handle_t *)&s->poll);   /* a kept connection keeps no host's loop running */
    } else if (s) {
      sock_drop(H, fd);
    }
    return 0;
  }
  if (!s) {
    s = sock_for(H, fd);
    if (!s) return -1;
    curl_multi_assign(H->multi, fd, s);
  }
  int ev = 0;
  if (what & CURL_POLL_IN) ev |= UV_READABLE;
  if (what & CURL_POLL_OUT) ev |= UV_WRITABLE;
  s->idle = 0;
  uv_ref((uv_handle_t *)&s->poll);
  /* uv_poll_start takes the socket out of epoll and puts it back */
  if (ev == s->events) return 0;
  uv_poll_start(&s->poll, ev, on_poll);
  s->events = ev;
  return 0;
}

static void on_timer(uv_timer_t *t) {
  struct mend_http *H = t->data;
  int running;
  curl_multi_socket_action(H->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_done(H);
}

/* curl asks for its timer; it is acted on from the loop, never from inside this callback. */
static int on_curl_timer(CURLM *multi, long ms, void *ud) {
  (void)multi;
  struct mend_http *H = ud;
  if (ms < 0) uv_timer_stop(H->timer);
  else uv_timer_start(H->timer, on_timer, (uint64_t)ms, 0);
  return 0;
}

static void global_init(void) { mend__http_global_init(); }

/* A variable as curl_getenv reads it: unset and empty alike are none. A value that could not
 * be copied sets *lost: read as none, it would send every later request past its proxy. */
static char *env_value(const char *name, int *lost) {
  const char *v = getenv(name);
  if (!v || !v[0]) return NULL;
  char *s = strdup(v);
  if (!s) *lost = 1;
  return s;
}

/* The proxies curl 7.88 takes from the environment when no option names them (url.c,
 * create_conn_helper_init_proxy and detect_proxy): no_proxy or NO_PROXY; for http,
 * http_proxy (never HTTP_PROXY, which a CGI's request could set), for https, https_proxy or
 * HTTPS_PROXY; then all_proxy or ALL_PROXY. Given to each handle as CURLOPT_NOPROXY and
 * CURLOPT_PROXY ("" where none), which curl then treats as it treats what it read. 0; -1: out
 * of memory (the engine's first call fails, and the next reads them again). */
static int read_proxies(struct mend_http *H) {
  int lost = 0;
  H->no_proxy = env_value("no_proxy", &lost);
  if (!H->no_proxy && !lost) H->no_proxy = env_value("NO_PROXY", &lost);
  char *all = env_value("all_proxy", &lost);
  if (!all && !lost) all = env_value("ALL_PROXY", &lost);
  H->proxy_http = env_value("http_proxy", &lost);
  H->proxy_https = env_value("https_proxy", &lost);
  if (!H->proxy_https && !lost) H->proxy_https = env_value("HTTPS_PROXY", &lost);
  if (!H->proxy_http && all) H->proxy_http = strdup(all);
  if (!H->proxy_https && all) H->proxy_https = strdup(all);
  lost = lost || (all && (!H->proxy_http || !H->proxy_https));
  free(all);
  return lost ? -1 : 0;
}

static void free_proxies(struct mend_http *H) {
  free(H->no_proxy);
  free(H->proxy_http);
  free(H->proxy_https);
}

struct mend_http *mend__http_state(mend_engine *E) {
  if (E->http) return E->http;
  static uv_once_t once = UV_ONCE_INIT;
  uv_once(&once, global_init);
  mend__http_mem_adopt();
  struct mend_http *H = calloc(1, sizeof *H);
  if (!H) return NULL;
  H->E = E;
  H->multi = curl_multi_init();
  H->timer = malloc(sizeof *H->timer);
  if (!H->multi || !H->timer || read_proxies(H)) {
    if (H->multi) curl_multi_cleanup(H->multi);
    free(H->timer);
    free_proxies(H);
    free(H);
    return NULL;
  }
  uv_timer_init(E->loop, H->timer);
  H->timer->data = H;
  curl_multi_setopt(H->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(H->multi, CURLMOPT_SOCKETDATA, H);
  curl_multi_setopt(H->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(H->multi, CURLMOPT_TIMERDATA, H);
  mend__http_addr_init(H);
  E->http = H;
  return H;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud);
static size_t on_header(char *data, size_t size, size_t n, void *ud);
static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a);
static int on_close_socket(void *ud, curl_socket_t fd);

/* The options of every request, the same for all (the request's structure idles with its
 * handle, so pointers to it stay right): set on a new or reset handle only. */
static void set_fixed(struct mend_http *H, http_req *q) {
  CURL *c = q->easy;
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, q->errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, q);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, q);
  curl_easy_setopt(c, CURLOPT_PRIVATE, q);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, q);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, H);
  curl_easy_setopt(c, CURLOPT_NOPROXY, H->no_proxy ? H->no_proxy : "");
  q->on_proxy = 0;
}

static void req_destroy(http_req *q) {
  curl_easy_cleanup(q->easy);
  mend__http_url_drop(q->on_handle);
  free(q->out);
  free(q->hdr);
  free(q->lines);
  free(q->line_at);
  free(q->nodes);
  free(q);
}

void mend__http_req_free(http_req *q) {
  struct mend_http *H = q->H;
  if (q->prev) q->prev->next = q->next;
  else H->reqs = q->next;
  if (q->next) q->next->prev = q->prev;
  if (q->added) H->in_multi--;
  curl_multi_remove_handle(H->multi, q->easy);
  free(q->body);
  if (q->target) {   /* the handle must not point at a parse that may be freed now */
    curl_easy_setopt(q->easy, CURLOPT_CURLU, NULL);
    mend__http_url_drop(q->target);
  }
  if (H->nidle < HTTP_IDLE_EASY) {
    /* A request curl sent again on a new connection (a kept one reset under it) counts on
     * the handle, and before curl 8.17 only a reset sets the count back: kept, the handle
     * would give up on the sixth such send of its life. Such a request made a connection. */
    long connects = 0;
    if (!q->dirty && curl_easy_getinfo(q->easy, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK &&
        connects > 0)
      q->dirty = 1;
    if (q->dirty) {   /* nothing of this request's options reaches the next */
      curl_easy_reset(q->easy);
      mend__http_url_drop(q->on_handle);
      q->on_handle = NULL;
      q->on_timeout_ms = q->on_connect_ms = 0;
      q->on_max_bytes = 0;
      set_fixed(H, q);
    }
    if (q->cap > HTTP_KEEP_BUFFER) { free(q->out); q->out = NULL; q->cap = 0; }
    if (q->hcap > HTTP_KEEP_BUFFER) { free(q->hdr); q->hdr = NULL; q->hcap = 0; }
    if (q->lines_cap > HTTP_KEEP_BUFFER) { free(q->lines); q->lines = NULL; q->lines_cap = 0; }
    H->idle[H->nidle++] = q;
    return;
  }
  req_destroy(q);
}

/* A request's structure: an idle one made as new but for its handle and buffers, or a new one.
 * NULL: out of memory. */
http_req *mend__http_req_new(struct mend_http *H) {
  http_req *q;
  if (H->nidle) {
    q = H->idle[--H->nidle];
    memset((char *)q + offsetof(http_req, H), 0, sizeof *q - offsetof(http_req, H));
    q->lines_len = 0;
    q->nlines = 0;
    if (q->hdr) q->hdr[0] = '\0';   /* push_headers reads it to its end: no last answer's lines */
  } else {
    q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->easy = curl_easy_init();
    if (!q->easy) {
      free(q);
      return NULL;
    }
    set_fixed(H, q);
  }
  q->H = H;
  return q;
}

static void timer_closed(uv_handle_t *h) { free(h); }

void mend__http_close(mend_engine *E) {
  struct mend_http *H = E->http;
  if (!H) return;
  while (H->reqs) {
    if (H->reqs->run) H->reqs->run->cold->http = NULL;
    mend__http_req_free(H->reqs);
  }
  while (H->nidle) req_destroy(H->idle[--H->nidle]);
  for (int k = 0; k < HTTP_URL_MEMO; k++) mend__http_url_drop(H->memo[k]);
  curl_multi_cleanup(H->multi);
  for (int k = 0; k < H->nbyfd; k++)
    if (H->byfd[k]) sock_close(H->byfd[k]);
  free(H->byfd);
  uv_timer_stop(H->timer);
  uv_close((uv_handle_t *)H->timer, timer_closed);
  mend__http_addr_free(H);
  free_proxies(H);
  free(H);
  E->http = NULL;
}

static void note(mend_run *r, http_req *q, const char *outcome);

/* The attempt ended first (its timeout, a cancel): its outcome's row names the request it
 * was waiting on, as it names those that answered. */
void mend__abandon_http(mend_run *r) {
  http_req *q = MEND_COLD(r, http);
  if (!q) return;
  note(r, q, "abandoned at the attempt's end");
  q->run = NULL;
  mend__http_req_free(q);
  r->cold->http = NULL;
  r->E->externals--;
}

/* ---------------------------------------------------------------- outcomes */

static int has_code(const codes *c, long v) {
  for (int k = 0; k < c->n; k++) if (c->v[k] == v) return 1;
  return 0;
}

/* Retry-After in seconds, or as an HTTP date against the engine's clock; -1: none. */
static double retry_after(mend_engine *E, const char *v) {
  if (!v) return -1;
  while (*v == ' ') v++;
  if (isdigit((unsigned char)*v)) {
    /* delay-seconds is digits (RFC 9110; a fraction after them taken): strtod also read
     * "1e3" as 1000 and "0x10" as 16, which are no number of seconds there. Anything else is
     * left to curl's date reader, which takes a date without its weekday, not those. */
    const char *end = v;
    while (isdigit((unsigned char)*end)) end++;
    if (*end == '.') do end++; while (isdigit((unsigned char)*end));
    while (*end == ' ' || *end == '\t' || *end == '\r') end++;   /* OWS: a tab too */
    if (*end == 0) return strtod(v, NULL);
  }
  time_t t = curl_getdate(v, NULL);
  if (t < 0) return -1;
  double d = (double)t - mend_engine_now(E);
  return d > 0 ? d : 0;
}

/* The last Retry-After of the answer's header lines, NUL-ended in buf (cap bytes); NULL when
 * there is none, or one too long to be a time. */
static const char *retry_after_value(const char *hdr, char *buf, size_t cap) {
  if (!hdr) return NULL;
  const char *p = hdr, *end = hdr + strlen(hdr), *name, *value, *found = NULL;
  size_t nlen, vlen, flen = 0;
  while (mend__http_header_next(&p, end, &name, &nlen, &value, &vlen))
    if (mend__http_header_is(name, nlen, "retry-after")) found = value, flen = vlen;
  if (!found || flen >= cap) return NULL;
  memcpy(buf, found, flen);
  buf[flen] = '\0';
  return buf;
}

/* Writes v's digits ending at end; returns where they begin. */
static char *digits_before(char *end, unsigned long long v) {
  do *--end = (char)('0' + v % 10); while (v /= 10);
  return end;
}

/* Appends n bytes of s at line[at], cut where snprintf would cut a line of cap bytes. */
static size_t put(char *line, size_t at, size_t cap, const char *s, size_t n) {
  if (n > cap - 1 - at) n = cap - 1 - at;
  memcpy(line + at, s, n);
  return at + n;
}

/* Adds what the request did to the attempt's history detail: "%s %s -> %s (%.3f s)", written
 * by hand, as snprintf's conversion of the time was most of what the line cost (2.4k
 * instructions a request in W9). The time is rounded to the millisecond as %.3f rounds it but
 * at an exact tie, which a measured time does not care for. */
static void note(mend_run *r, http_req *q, const char *outcome) {
  char line[600];
  double took = mend_real_now() - q->started;
  if (took >= 0 && took < 1e9) {
    unsigned long long ms = (unsigned long long)(took * 1000.0 + 0.5);
    char t[40], *end = t + sizeof t;
    static const char tail[] = " s)";
    end -= sizeof tail - 1;
    memcpy(end, tail, sizeof tail - 1);
    char *b = digits_before(end, 1000 + ms % 1000);   /* "1ddd": the leading 1 becomes '.' */
    *b = '.';
    b = digits_before(b, ms / 1000);
    *--b = '(';
    size_t at = put(line, 0, sizeof line, q->method, strlen(q->method));
    at = put(line, at, sizeof line, " ", 1);
    at = put(line, at, sizeof line, q->url, strlen(q->url));
    at = put(line, at, sizeof line, " -> ", 4);
    at = put(line, at, sizeof line, outcome, strlen(outcome));
    at = put(line, at, sizeof line, " ", 1);
    at = put(line, at, sizeof line, b, (size_t)(t + sizeof t - b));
    line[at] = '\0';
  } else {
    snprintf(line, sizeof line, "%s %s -> %s (%.3f s)", q->method, q->url, outcome, took);
  }
  struct mend_run_cold *c = r->cold;   /* made with its request */
  size_t have = c->http_detail ? strlen(c->http_detail) : 0;
  if (have + strlen(line) + 3 > HTTP_DETAIL_MAX) return;
  char *d = realloc(c->http_detail, have + strlen(line) + 3);
  if (!d) return;
  if (have) memcpy(d + have, "; ", 2), have += 2;
  strcpy(d + have, line);
  c->http_detail = d;
}

static int transient(CURLcode rc) {
  switch (rc) {
    case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: case CURLE_OPERATION_TIMEDOUT: case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_SSL_CONNECT_ERROR:
      return 1;
    default:
      return 0;
  }
}

/* Pushes (true, response) or (false, error) on the attempt's coroutine. */
static void push_outcome(mend_run *r, http_req *q, CURLcode rc) {
  mend_engine *E = r->E;
  lua_State *co = r->co;
  char msg[700], what[64];
  if (q->too_big || rc == CURLE_FILESIZE_EXCEEDED) {
    snprintf(msg, sizeof msg, "mend.http %s %s: response larger than max_bytes (%zu bytes)",
             q->method, q->url, q->max_bytes);
    note(r, q, "too large");
    lua_pushboolean(co, 0);
    mend_lua_push_error(co, MEND_ERR_FATAL, msg, -1, 0);
    return;
  }
  if (q->switched) {
    snprintf(msg, sizeof msg, "mend.http %s %s: the answer is 101 Switching Protocols (the server "
             "would go on in another protocol, a WebSocket's say): mend.http does not upgrade "
             "connections, and the connection is closed", q->method, q->url);
    note(r, q, "101");
    lua_pushboolean(co, 0);
    mend_lua_push_error(co, MEND_ERR_FATAL, msg, -1, 0);
    return;
  }
  if (rc != CURLE_OK && q->refused[0] && !q->connected) {
    char *host = NULL;
    curl_url_get(q->target->uh, CURLUPART_HOST, &host, 0);
    if (q->refused_unknown)
      snprintf(msg, sizeof msg, "mend.http %s %s: host \"%.200s\" is at address %s, not "
               "connected to: the kernel could not be asked whether it is one of this machine's "
               "own addresses (netlink route query: %s)", q->method, q->url, host ? host : "?",
               q->refused, strerror(q->refused_errno));
    else
      snprintf(msg, sizeof msg, "mend.http %s %s: host \"%.200s\" is at address %s, of the "
               "engine's own machine or link (loopback, one of its interfaces' addresses, "
               "link-local or unspecified), which http_allow does not name", q->method, q->url,
               host ? host : "?", q->refused);
    curl_free(host);
    note(r, q, "address refused");
    lua_pushboolean(co, 0);
    mend_lua_push_error(co, q->refused_unknown ? MEND_ERR_RETRYABLE : MEND_ERR_FATAL, msg, -1, 0);
    return;
  }
  if (rc != CURLE_OK) {
    const char *why = q->errbuf[0] ? q->errbuf : curl_easy_strerror(rc);   /* errbuf says more */
    long code = 0;
    /* curl (7.88) refuses a response's header line over CURL_MAX_HTTP_HEADER as out of memory
     * and says nothing more: after the status line, the service's header is the likelier */
    if (rc == CURLE_OUT_OF_MEMORY && !q->errbuf[0] &&
        curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code > 0)
      why = "a header line of the response over curl's limit of 100 KiB (CURL_MAX_HTTP_HEADER), "
            "or out of memory";
    /* and header fields over 300 KiB in all, each line short, as a receive error (7.88 as
     * Debian patches it, 8.3 on): the service answers so every time, no connection broke */
    static const char over[] = "Too large response headers";
    int headers_over = strncmp(q->errbuf, over, sizeof over - 1) == 0;
    if (headers_over)
      snprintf(msg, sizeof msg, "mend.http %s %s: the response's header fields over curl's "
               "limit of 300 KiB in all (%s)", q->method, q->url, q->errbuf);
    else
      snprintf(msg, sizeof msg, "mend.http %s %s: %s", q->method, q->url, why);
    note(r, q, curl_easy_strerror(rc));
    lua_pushboolean(co, 0);
    mend_lua_push_error(co, transient(rc) && !headers_over ? MEND_ERR_RETRYABLE : MEND_ERR_FATAL,
                        msg, -1, 0);
    return;
  }
  long status = 0;
  curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
  char *digits =
      digits_before(what + sizeof what - 1, (unsigned long long)(status < 0 ? 0 : status));
  what[sizeof what - 1] = '\0';
  note(r, q, digits);
  int kind = -1;   /* -1: returned */
  /* an interim answer with no final one (curl 7.88 reads past them or fails the transfer;
   * should a later curl hand one back as the answer): none a step can act on */
  if (status >= 100 && status < 200) {
    snprintf(msg, sizeof msg, "mend.http %s %s: the answer is HTTP %ld, an interim one with no "
             "final answer after it", q->method, q->url, status);
    lua_pushboolean(co, 0);
    mend_lua_push_error(co, MEND_ERR_FATAL, msg, -1, 0);
    return;
  }
  if (q->raise && !has_code(&q->accept, status)) {
    if (has_code(&q->retry_on, status)) kind = MEND_ERR_RETRYABLE;
    else if (has_code(&q->fatal_on, status)) kind = MEND_ERR_FATAL;
    else if (status == 408 || status == 429 || status == 500 || status == 502 ||
             status == 503 || status == 504) kind = MEND_ERR_RETRYABLE;
    else if (status >= 400) kind = MEND_ERR_FATAL;
  }
  if (kind < 0) {   /* headers and json are made if the step reads them (http_resp.c) */
    lua_pushboolean(co, 1);
    mend__http_push_response(co, status, q->hdr, q->out, q->len);
    return;
  }
  int body = (int)(q->len < HTTP_BODY_IN_MESSAGE ? q->len : HTTP_BODY_IN_MESSAGE);
  snprintf(msg, sizeof msg, "HTTP %ld from %s %s%s%.*s", status, q->method, q->url,
           body ? ": " : "", body, q->out ? q->out : "");
  char ra[256];
  lua_pushboolean(co, 0);
  mend_lua_push_error(co, (mend_error_kind)kind, msg,
                      kind == MEND_ERR_RETRYABLE
                          ? retry_after(E, retry_after_value(q->hdr, ra, sizeof ra)) : -1, 0);
}

static void check_done(struct mend_http *H) {
  mend_engine *E = H->E;
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(H->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    http_req *q = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&q);
    CURLcode rc = m->data.result;
    mend_run *r = q->run;
    if (r) {
      r->cold->http = NULL;
      E->externals--;
      push_outcome(r, q, rc);
    }
    mend__http_req_free(q);
    if (r) mend__resume(r, 2);
  }
  mend__kick(E);
}
