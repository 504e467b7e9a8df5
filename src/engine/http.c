/*
 * http: the requests of mend.http. Owns the engine's libcurl multi handle driven by the loop
 * (a uv_poll per socket curl watches, the connections' sockets it opens and closes for curl,
 * one uv_timer for curl's timer), the idle easy handles and the URLs checked lately, one
 * request per waiting attempt from its start to the step's resumption with (true, response)
 * or (false, error), what a status code means (retryable, fatal, returned), the
 * Idempotency-Key header, the host allow-list and the text each request leaves in its
 * attempt's history detail.
 * Must never: block the loop (no easy_perform, no blocking resolver wait on the loop's
 * thread beyond what libcurl's own threaded resolver does); resume an attempt that is no
 * longer the request's; send a request to a host the allow-list refuses; let one request's
 * options reach the next on a reused handle; keep a poll handle past its socket.
 */
#include "engine_int.h"

#include <curl/curl.h>
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

#define HTTP_MAX_BYTES (16u << 20)
#define HTTP_TIMEOUT 60.0           /* seconds, the whole request, unless the call says */
#define HTTP_CONNECT_TIMEOUT 10.0
#define HTTP_MAX_CODES 16
#define HTTP_DETAIL_MAX 4000        /* what an attempt's requests may add to its history row */
#define HTTP_BODY_IN_MESSAGE 200

/* URLs checked lately, with what they became: a step calls the same few URLs again and again,
 * and checking one (a parse, four parts copied, the URL printed again) was two thirds of a
 * call's setup. Only allowed URLs are kept, and the allow-list is fixed for an engine's life,
 * so a hit stands for the check. */
#define HTTP_URL_MEMO 8
/* Easy handles kept between requests: making and freeing one per request cost 15k
 * instructions, a sixth of curl's share of a request. At most this many idle. An idle handle
 * holds the options every request has (set_fixed) and none of the options only some calls
 * set (marked by http_req.dirty, and reset away when such a request ends): the next request
 * sets each of its own options anew (see setup), so nothing of one reaches the next, without
 * a reset and the fixed options set again each time (4k instructions a request). A handle
 * idles in its request's structure, with the buffers of the answer's body and headers (up to
 * HTTP_KEEP_BUFFER bytes each): allocating them at each request was 2k instructions, 4 KiB
 * blocks being slow to come by in malloc. */
#define HTTP_IDLE_EASY 256
#define HTTP_KEEP_BUFFER (64u << 10)

struct mend_http {
  mend_engine *E;
  CURLM *multi;
  uv_timer_t *timer;
  /* A poll handle per socket curl watches, by number. A connection's socket (opened and
   * closed through on_open_socket and on_close_socket) keeps its handle, stopped between
   * requests, until it is closed: a kept-alive connection is watched again for its next
   * request without a handle made and closed around each (an ioctl and epoll_ctl calls).
   * Any other socket's handle (a resolver's) is closed when curl stops watching it: curl
   * closes those itself, and a handle must never outlive its number's socket, or closing it
   * later would take the number's next owner out of the loop's epoll set. */
  struct http_sock **byfd;
  int nbyfd;
  struct http_req *reqs;     /* in flight, abandoned ones too */
  struct { char *url, *clean; } memo[HTTP_URL_MEMO];
  int memo_next;
  struct http_req *idle[HTTP_IDLE_EASY];
  int nidle;
  /* Connections kept open for later requests: four per request at the most ever in flight.
   * Curl's own default follows the requests in flight now, and an answer's burst (dozens of
   * transfers ended in one poll, the next ones started a turn later) made it close a third of
   * W9's connections and open them again. */
  int in_multi, max_in_multi;
};

typedef struct http_sock {
  uv_poll_t poll;
  curl_socket_t fd;
  struct mend_http *H;
  int connection;   /* opened by on_open_socket: closed by on_close_socket */
} http_sock;

typedef struct codes { int n; long v[HTTP_MAX_CODES]; } codes;

struct http_req {
  /* Kept with an idle request (req_new clears what follows H): its handle, the buffers of the
   * answer's body and header lines, and those of the request's header lines. */
  CURL *easy;
  char *out, *hdr;
  size_t cap, hcap;
  /* The request's header lines ("name: value" each ended by a NUL, one after another) and
   * the list curl reads made over them once all are in (finish_headers): a curl_slist_append
   * was two allocations a line, and its freeing two more. */
  char *lines;
  size_t lines_len, lines_cap;
  size_t *line_at;
  struct curl_slist *nodes;
  int nlines, line_cap;
  struct mend_http *H;
  mend_run *run;              /* NULL once the attempt was abandoned */
  struct curl_slist *headers; /* nodes, or NULL */
  char *body;
  size_t len, hlen, max_bytes;
  int too_big, raise, added;
  int dirty;                  /* an option beyond the common ones set: reset the handle after */
  codes retry_on, fatal_on, accept;
  char method[16];
  char *url;                  /* without credentials: for messages and history */
  double started;             /* real seconds */
  char errbuf[CURL_ERROR_SIZE];
  struct http_req *prev, *next;
};

/* ---------------------------------------------------------------- buffers */

static int grow(char **buf, size_t *cap, size_t need) {
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
  if (grow(&q->out, &q->cap, q->len + k + 1)) return 0;
  memcpy(q->out + q->len, data, k);
  q->len += k;
  return k;
}

/* Headers of the final response only: a redirect's or a 100's are dropped when the next
 * status line comes. */
static size_t on_header(char *data, size_t size, size_t n, void *ud) {
  http_req *q = ud;
  size_t k = size * n;
  if (k >= 5 && strncmp(data, "HTTP/", 5) == 0) q->hlen = 0;
  if (q->hlen + k > q->max_bytes) { q->too_big = 1; return 0; }
  if (grow(&q->hdr, &q->hcap, q->hlen + k + 1)) return 0;
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
  int flags = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
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
  (void)purpose;
  struct mend_http *H = ud;
  curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd == CURL_SOCKET_BAD) return fd;
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
    if (s && s->connection) uv_poll_stop(&s->poll);
    else if (s) sock_drop(H, fd);
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
  uv_poll_start(&s->poll, ev, on_poll);
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

static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static struct mend_http *http_state(mend_engine *E) {
  if (E->http) return E->http;
  static uv_once_t once = UV_ONCE_INIT;
  uv_once(&once, global_init);
  struct mend_http *H = calloc(1, sizeof *H);
  if (!H) return NULL;
  H->E = E;
  H->multi = curl_multi_init();
  H->timer = malloc(sizeof *H->timer);
  if (!H->multi || !H->timer) {
    if (H->multi) curl_multi_cleanup(H->multi);
    free(H->timer);
    free(H);
    return NULL;
  }
  uv_timer_init(E->loop, H->timer);
  H->timer->data = H;
  curl_multi_setopt(H->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(H->multi, CURLMOPT_SOCKETDATA, H);
  curl_multi_setopt(H->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(H->multi, CURLMOPT_TIMERDATA, H);
  E->http = H;
  return H;
}

static size_t on_body(char *data, size_t size, size_t n, void *ud);
static size_t on_header(char *data, size_t size, size_t n, void *ud);
static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a);
static int on_close_socket(void *ud, curl_socket_t fd);

/* The options of every request, the same for all: set on a new or reset handle only. */
static void set_fixed(struct mend_http *H, CURL *c) {
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, H);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, H);
}

/* mend's User-Agent goes among a request's own headers (setup). CURLOPT_USERAGENT would be
 * printed twice by curl at each request, 80 instructions a byte through its formatter (4.4k a
 * request against 2k as a header); it is set only where it is also what a CONNECT sends: an
 * https URL when the environment names a proxy curl may take for it (it reads the same
 * variables), and then the request's own header still wins with the server, as before. */
#define HTTP_USER_AGENT "mend/" MEND_VERSION_STRING
static int proxy_may_tunnel(const char *url) {
  return strncmp(url, "https:", 6) == 0 &&
         (getenv("https_proxy") || getenv("HTTPS_PROXY") || getenv("all_proxy") ||
          getenv("ALL_PROXY"));
}

static void req_destroy(http_req *q) {
  curl_easy_cleanup(q->easy);
  free(q->out);
  free(q->hdr);
  free(q->lines);
  free(q->line_at);
  free(q->nodes);
  free(q);
}

static void req_free(http_req *q) {
  struct mend_http *H = q->H;
  if (q->prev) q->prev->next = q->next;
  else H->reqs = q->next;
  if (q->next) q->next->prev = q->prev;
  if (q->added) H->in_multi--;
  curl_multi_remove_handle(H->multi, q->easy);
  free(q->body);
  free(q->url);
  if (H->nidle < HTTP_IDLE_EASY) {
    if (q->dirty) {   /* nothing of this request's options reaches the next */
      curl_easy_reset(q->easy);
      set_fixed(H, q->easy);
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
static http_req *req_new(struct mend_http *H) {
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
    set_fixed(H, q->easy);
  }
  q->H = H;
  return q;
}

static void timer_closed(uv_handle_t *h) { free(h); }

void mend__http_close(mend_engine *E) {
  struct mend_http *H = E->http;
  if (!H) return;
  while (H->reqs) {
    if (H->reqs->run) H->reqs->run->http = NULL;
    req_free(H->reqs);
  }
  while (H->nidle) req_destroy(H->idle[--H->nidle]);
  for (int k = 0; k < HTTP_URL_MEMO; k++) {
    free(H->memo[k].url);
    free(H->memo[k].clean);
  }
  curl_multi_cleanup(H->multi);
  for (int k = 0; k < H->nbyfd; k++)
    if (H->byfd[k]) sock_close(H->byfd[k]);
  free(H->byfd);
  uv_timer_stop(H->timer);
  uv_close((uv_handle_t *)H->timer, timer_closed);
  free(H);
  E->http = NULL;
}

void mend__abandon_http(mend_run *r) {
  if (!r->http) return;
  r->http->run = NULL;
  req_free(r->http);
  r->http = NULL;
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
    char *end;
    double s = strtod(v, &end);
    while (*end == ' ' || *end == '\r') end++;
    if (*end == 0) return s;
  }
  time_t t = curl_getdate(v, NULL);
  if (t < 0) return -1;
  double d = (double)t - mend_engine_now(E);
  return d > 0 ? d : 0;
}

/* Pushes the headers as a table of lower-case names; a repeated one is joined with ", ". */
static void push_headers(lua_State *co, http_req *q, const char **retry_after_v) {
  int lines = 0;   /* sized once: grown from empty, the table was rehashed at each power of 2 */
  for (const char *p = q->hdr; p && (p = strchr(p, '\n')); p++) lines++;
  lua_createtable(co, 0, lines);
  if (!q->hdr) return;
  char *line = q->hdr;
  while (*line) {
    char *eol = strchr(line, '\n');
    char *next = eol ? eol + 1 : line + strlen(line);
    if (eol) *eol = 0;
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r') line[--n] = 0;
    char *colon = strncmp(line, "HTTP/", 5) == 0 ? NULL : strchr(line, ':');
    if (colon) {
      *colon = 0;
      for (char *p = line; *p; p++) *p = (char)tolower((unsigned char)*p);
      char *v = colon + 1;
      while (*v == ' ' || *v == '\t') v++;
      if (strcmp(line, "retry-after") == 0) *retry_after_v = v;
      /* The name made a Lua string once, for the look and the set: lua_getfield and
       * lua_setfield made it twice (the buffer's text changes between lines). */
      lua_pushstring(co, line);
      lua_pushvalue(co, -1);
      if (lua_rawget(co, -3) == LUA_TSTRING) {
        lua_pushstring(co, ", ");
        lua_pushstring(co, v);
        lua_concat(co, 3);
      } else {
        lua_pop(co, 1);
        lua_pushstring(co, v);
      }
      lua_rawset(co, -3);
    }
    line = next;
  }
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
  size_t have = r->http_detail ? strlen(r->http_detail) : 0;
  if (have + strlen(line) + 3 > HTTP_DETAIL_MAX) return;
  char *d = realloc(r->http_detail, have + strlen(line) + 3);
  if (!d) return;
  if (have) memcpy(d + have, "; ", 2), have += 2;
  strcpy(d + have, line);
  r->http_detail = d;
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
  if (rc != CURLE_OK) {
    snprintf(msg, sizeof msg, "mend.http %s %s: %s", q->method, q->url,
             q->errbuf[0] ? q->errbuf : curl_easy_strerror(rc));   /* errbuf says more */
    note(r, q, curl_easy_strerror(rc));
    lua_pushboolean(co, 0);
    mend_lua_push_error(co, transient(rc) ? MEND_ERR_RETRYABLE : MEND_ERR_FATAL, msg, -1, 0);
    return;
  }
  long status = 0;
  curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &status);
  char *digits = digits_before(what + sizeof what - 1, (unsigned long long)(status < 0 ? 0 : status));
  what[sizeof what - 1] = '\0';
  note(r, q, digits);
  int kind = -1;   /* -1: returned */
  if (q->raise && !has_code(&q->accept, status)) {
    if (has_code(&q->retry_on, status)) kind = MEND_ERR_RETRYABLE;
    else if (has_code(&q->fatal_on, status)) kind = MEND_ERR_FATAL;
    else if (status == 408 || status == 429 || status == 500 || status == 502 ||
             status == 503 || status == 504) kind = MEND_ERR_RETRYABLE;
    else if (status >= 400) kind = MEND_ERR_FATAL;
  }
  const char *ra = NULL;
  lua_createtable(co, 0, 4);
  lua_pushinteger(co, status); lua_setfield(co, -2, "status");
  push_headers(co, q, &ra);
  const char *ctype = NULL;
  if (lua_getfield(co, -1, "content-type") == LUA_TSTRING) ctype = lua_tostring(co, -1);
  int is_json = ctype && strstr(ctype, "json");
  lua_pop(co, 1);
  lua_setfield(co, -2, "headers");
  lua_pushlstring(co, q->out ? q->out : "", q->len); lua_setfield(co, -2, "body");
  if (is_json && q->len) {
    char err[200];
    if (mend_json_decode(co, q->out, q->len, err, sizeof err) == 0) lua_setfield(co, -2, "json");
  }
  if (kind < 0) {
    lua_pushboolean(co, 1);
    lua_insert(co, -2);
    return;
  }
  lua_pop(co, 1);
  int body = (int)(q->len < HTTP_BODY_IN_MESSAGE ? q->len : HTTP_BODY_IN_MESSAGE);
  snprintf(msg, sizeof msg, "HTTP %ld from %s %s%s%.*s", status, q->method, q->url,
           body ? ": " : "", body, q->out ? q->out : "");
  lua_pushboolean(co, 0);
  mend_lua_push_error(co, (mend_error_kind)kind, msg,
                      kind == MEND_ERR_RETRYABLE ? retry_after(E, ra) : -1, 0);
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
      r->http = NULL;
      E->externals--;
      push_outcome(r, q, rc);
    }
    req_free(q);
    if (r) mend__resume(r, 2);
  }
  mend__kick(E);
}

/* ---------------------------------------------------------------- the call */

/* The fields a call's table may have. They are read in one pass over the few the table has
 * (read_fields) rather than by a look-up each: sixteen lua_getfield were 3k instructions a
 * request. */
enum { F_URL, F_BODY, F_JSON, F_METHOD, F_HEADERS, F_IDEMPOTENCY_HEADER, F_TIMEOUT,
       F_CONNECT_TIMEOUT, F_MAX_BYTES, F_CA_FILE, F_RETRY_ON, F_FATAL_ON, F_ACCEPT, F_RAISE,
       F__COUNT };
#define FIELD(s) { s, sizeof s - 1 }
static const struct { const char *s; size_t n; } field_name[F__COUNT] = {
  FIELD("url"), FIELD("body"), FIELD("json"), FIELD("method"), FIELD("headers"),
  FIELD("idempotency_header"), FIELD("timeout"), FIELD("connect_timeout"), FIELD("max_bytes"),
  FIELD("ca_file"), FIELD("retry_on"), FIELD("fatal_on"), FIELD("accept"), FIELD("raise"),
};
#undef FIELD

/* Puts the fields of the call's table (at 1) in F__COUNT stack slots after base, nil where
 * absent. A table with a metatable is read a field at a time, so that its __index answers as
 * it always did. */
static void read_fields(lua_State *L, int base) {
  luaL_checkstack(L, F__COUNT + 8, "mend.http");
  lua_settop(L, base + F__COUNT);
  if (lua_getmetatable(L, 1)) {
    lua_pop(L, 1);
    for (int f = 0; f < F__COUNT; f++) {
      lua_getfield(L, 1, field_name[f].s);
      lua_replace(L, base + 1 + f);
    }
    return;
  }
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      size_t n;
      const char *k = lua_tolstring(L, -2, &n);
      for (int f = 0; f < F__COUNT; f++) {
        if (field_name[f].n == n && memcmp(field_name[f].s, k, n) == 0) {
          lua_copy(L, -1, base + 1 + f);
          break;
        }
      }
    }
    lua_pop(L, 1);
  }
}

/* Pushes the field f (read_fields put it after base); its type. */
static int field(lua_State *L, int base, int f) {
  lua_pushvalue(L, base + 1 + f);
  return lua_type(L, -1);
}

static int read_codes(lua_State *L, int base, int f, codes *c, char *err, int errlen) {
  const char *field_s = field_name[f].s;
  c->n = 0;
  int t = field(L, base, f);
  if (t == LUA_TNIL) { lua_pop(L, 1); return 0; }
  if (t != LUA_TTABLE) {
    snprintf(err, (size_t)errlen, "%s must be a list of status codes", field_s);
    lua_pop(L, 1);
    return -1;
  }
  int n = (int)luaL_len(L, -1);
  for (int k = 1; k <= n; k++) {
    lua_geti(L, -1, k);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok || v < 100 || v > 599 || c->n == HTTP_MAX_CODES) {
      snprintf(err, (size_t)errlen, "%s must be a list of at most %d status codes (100-599)",
               field_s, HTTP_MAX_CODES);
      lua_pop(L, 1);
      return -1;
    }
    c->v[c->n++] = (long)v;
  }
  lua_pop(L, 1);
  return 0;
}

static double opt_seconds(lua_State *L, int base, int f, double def, char *err, int errlen) {
  int t = field(L, base, f);
  double v = def;
  if (t != LUA_TNIL) {
    v = lua_tonumber(L, -1);
    if (t != LUA_TNUMBER || !(v > 0)) {
      snprintf(err, (size_t)errlen, "%s must be a number of seconds > 0", field_name[f].s);
      v = -1;
    } else if (v > 1e6) {
      v = 1e6;   /* about 11 days: any longer is "no limit", and stays a long in ms */
    }
  }
  lua_pop(L, 1);
  return v;
}

static int opt_bool(lua_State *L, int base, int f, int def) {
  int t = field(L, base, f);
  int v = t == LUA_TNIL ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* pattern "*.example.com" matches any name under example.com; others match exactly. */
static int host_allowed(const char *list, const char *host) {
  if (!list) return 0;
  size_t hn = strlen(host);
  const char *p = list;
  while (*p) {
    while (*p == ' ' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    size_t n = (size_t)(e - p);
    while (n && p[n - 1] == ' ') n--;
    if (n >= 2 && p[0] == '*' && p[1] == '.') {
      size_t sn = n - 1;   /* ".example.com" */
      if (hn > sn && strncasecmp(host + hn - sn, p + 1, sn) == 0) return 1;
    } else if (n && n == hn && strncasecmp(host, p, n) == 0) {
      return 1;
    }
    p = e;
  }
  return 0;
}

/* Parses and checks the URL: http or https, a host the engine allows. Sets q->url (without
 * user and password). */
static int check_url(mend_engine *E, http_req *q, const char *url, char *err, int errlen) {
  struct mend_http *H = q->H;
  for (int k = 0; k < HTTP_URL_MEMO; k++) {
    if (H->memo[k].url && strcmp(H->memo[k].url, url) == 0) {
      q->url = mend_dupstr(H->memo[k].clean);
      if (q->url) return 0;
      snprintf(err, (size_t)errlen, "out of memory");
      return -1;
    }
  }
  CURLU *u = curl_url();
  if (!u) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
  char *scheme = NULL, *host = NULL;
  int rc = -1;
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
    snprintf(err, (size_t)errlen, "bad url \"%.200s\"", url);
    goto out;
  }
  curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
  if (!scheme || (strcasecmp(scheme, "http") && strcasecmp(scheme, "https"))) {
    snprintf(err, (size_t)errlen, "url \"%.200s\" is not http or https", url);
    goto out;
  }
  if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host) {
    snprintf(err, (size_t)errlen, "url \"%.200s\" has no host", url);
    goto out;
  }
  if ((E->cfg.sandbox || E->cfg.http_allow) && !host_allowed(E->cfg.http_allow, host)) {
    snprintf(err, (size_t)errlen, "host \"%.200s\" is not allowed (http_allow: %.200s)", host,
             E->cfg.http_allow ? E->cfg.http_allow : "none");
    goto out;
  }
  curl_url_set(u, CURLUPART_USER, NULL, 0);
  curl_url_set(u, CURLUPART_PASSWORD, NULL, 0);
  char *clean = NULL;
  if (curl_url_get(u, CURLUPART_URL, &clean, 0) == CURLUE_OK) {
    q->url = mend_dupstr(clean);
    curl_free(clean);
  }
  rc = q->url ? 0 : -1;
  if (rc) {
    snprintf(err, (size_t)errlen, "out of memory");
    goto out;
  }
  char *mu = mend_dupstr(url), *mc = mend_dupstr(q->url);
  if (mu && mc) {   /* not remembered if memory is short: checked again next time */
    int k = H->memo_next;
    H->memo_next = (k + 1) % HTTP_URL_MEMO;
    free(H->memo[k].url);
    free(H->memo[k].clean);
    H->memo[k].url = mu;
    H->memo[k].clean = mc;
  } else {
    free(mu);
    free(mc);
  }
out:
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(u);
  return rc;
}

/* "name: value" whole, however long (a bearer token can run to kilobytes). */
static int add_header(http_req *q, const char *name, const char *value) {
  size_t n = strlen(name), v = strlen(value);
  if (grow(&q->lines, &q->lines_cap, q->lines_len + n + v + 3)) return -1;
  if (q->nlines == q->line_cap) {
    int c = q->line_cap ? q->line_cap * 2 : 8;
    size_t *at = realloc(q->line_at, (size_t)c * sizeof *at);
    if (!at) return -1;
    q->line_at = at;
    struct curl_slist *nodes = realloc(q->nodes, (size_t)c * sizeof *nodes);
    if (!nodes) return -1;
    q->nodes = nodes;
    q->line_cap = c;
  }
  char *line = q->lines + q->lines_len;
  memcpy(line, name, n);
  memcpy(line + n, ": ", 2);
  memcpy(line + n + 2, value, v + 1);
  q->line_at[q->nlines++] = q->lines_len;
  q->lines_len += n + v + 3;
  return 0;
}

/* The list curl reads, over the lines once all are in (the buffer may have moved as it grew). */
static void finish_headers(http_req *q) {
  for (int k = 0; k < q->nlines; k++) {
    q->nodes[k].data = q->lines + q->line_at[k];
    q->nodes[k].next = k + 1 < q->nlines ? &q->nodes[k + 1] : NULL;
  }
  q->headers = q->nlines ? q->nodes : NULL;
}

/* Reads the call's table (at 1), sets the request up and starts it. 0: the step yields; -1:
 * err says why it cannot be made (a fatal error for the step). */
static int setup(mend_run *r, http_req *q, lua_State *L, char *err, int errlen) {
  mend_engine *E = r->E;
  int base = lua_gettop(L);
  read_fields(L, base);
  if (field(L, base, F_URL) != LUA_TSTRING) {
    snprintf(err, (size_t)errlen, "needs a url: mend.http{ url = \"https://...\" }");
    return -1;
  }
  const char *url = lua_tostring(L, -1);
  if (check_url(E, q, url, err, errlen)) return -1;
  CURL *c = q->easy;
  /* A URL's user and password stay in the handle's state past its request: reset after. */
  if (strcmp(url, q->url) != 0) q->dirty = 1;
  curl_easy_setopt(c, CURLOPT_URL, url);
  lua_pop(L, 1);
  /* the body: a string, or json = value encoded */
  int has_type = 0, has_key = 0, has_agent = 0;
  size_t body_len = 0;
  int bt = field(L, base, F_BODY);
  int jt = field(L, base, F_JSON);
  if (bt != LUA_TNIL && jt != LUA_TNIL) {
    snprintf(err, (size_t)errlen, "give body or json, not both");
    return -1;
  }
  if (bt != LUA_TNIL) {
    if (bt != LUA_TSTRING) { snprintf(err, (size_t)errlen, "body must be a string"); return -1; }
    const char *b = lua_tolstring(L, -2, &body_len);
    q->body = malloc(body_len + 1);
    if (!q->body) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
    memcpy(q->body, b, body_len);
  } else if (jt != LUA_TNIL) {
    char jerr[300];
    q->body = mend_json_encode(L, -1, "json", jerr, sizeof jerr);
    if (!q->body) { snprintf(err, (size_t)errlen, "%s", jerr); return -1; }
    body_len = strlen(q->body);
  }
  lua_pop(L, 2);
  int mt = field(L, base, F_METHOD);
  const char *method = mt == LUA_TSTRING ? lua_tostring(L, -1) : q->body ? "POST" : "GET";
  size_t mn = strlen(method);
  if (mn == 0 || mn >= sizeof q->method) {
    snprintf(err, (size_t)errlen, "bad method");
    return -1;
  }
  for (size_t k = 0; k <= mn; k++) q->method[k] = (char)toupper((unsigned char)method[k]);
  for (size_t k = 0; k < mn; k++)
    if (!isalpha((unsigned char)q->method[k])) { snprintf(err, (size_t)errlen, "bad method \"%s\"", method); return -1; }
  lua_pop(L, 1);
  if (!q->body) {   /* a reused handle's last request may have had a body: as a new handle has none */
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)-1);
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  if (strcmp(q->method, "HEAD") == 0) {
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (strcmp(q->method, "GET") != 0 && !(q->body && strcmp(q->method, "POST") == 0)) {
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);   /* a body is POSTed by default */
  }
  if (q->body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
  }
  /* headers */
  int ht = field(L, base, F_HEADERS);
  if (ht == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1)) {
        snprintf(err, (size_t)errlen, "headers must map names to strings");
        return -1;
      }
      const char *name = lua_tostring(L, -2);
      if (strpbrk(name, ":\r\n") || strpbrk(lua_tostring(L, -1), "\r\n")) {
        snprintf(err, (size_t)errlen, "header \"%.100s\" has a newline or a colon", name);
        return -1;
      }
      if (strcasecmp(name, "content-type") == 0) has_type = 1;
      if (strcasecmp(name, "idempotency-key") == 0) has_key = 1;
      if (strcasecmp(name, "user-agent") == 0) has_agent = 1;
      /* Compression is asked for by the call, and then curl both offers it and decodes the
       * answer ("" offers every encoding it has). Not by default: offering it cost a seventh
       * of a small request's instructions, for answers most services send plain. */
      if (strcasecmp(name, "accept-encoding") == 0) {
        q->dirty = 1;
        curl_easy_setopt(q->easy, CURLOPT_ACCEPT_ENCODING, lua_tostring(L, -1));   /* copied */
      } else if (add_header(q, name, lua_tostring(L, -1))) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
      lua_pop(L, 1);
    }
  } else if (ht != LUA_TNIL) {
    snprintf(err, (size_t)errlen, "headers must be a table");
    return -1;
  }
  lua_pop(L, 1);
  if ((jt != LUA_TNIL && !has_type && add_header(q, "Content-Type", "application/json")) ||
      (!has_agent && add_header(q, "User-Agent", HTTP_USER_AGENT))) {
    snprintf(err, (size_t)errlen, "out of memory");
    return -1;
  }
  if (proxy_may_tunnel(q->url)) {
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_USERAGENT, HTTP_USER_AGENT);
  }
  if (!has_key && opt_bool(L, base, F_IDEMPOTENCY_HEADER, 1) && strcmp(q->method, "GET") &&
      strcmp(q->method, "HEAD")) {
    int i = r->cur;
    const step_rt *st = &r->steps[i];
    /* ctx.idempotency_key's: a map's item or a branch is named for itself ("charge/3") */
    const char *key = st->custom_key ? st->idem_key : NULL;
    char small[256], *built = NULL;
    if (!key) {
      const char *name = r->item_name ? r->item_name : r->wf->steps[i].name;
      size_t idn = strlen(r->id), nn = strlen(name);
      built = idn + nn + 2 <= sizeof small ? small : malloc(idn + nn + 2);
      if (!built) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
      memcpy(built, r->id, idn);
      built[idn] = '/';
      memcpy(built + idn + 1, name, nn + 1);
      key = built;
    }
    int bad = strpbrk(key, "\r\n") != NULL;
    int rc = bad ? 0 : add_header(q, "Idempotency-Key", key);
    if (built != small) free(built);
    if (bad) { snprintf(err, (size_t)errlen, "the idempotency key has a newline"); return -1; }
    if (rc) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
  }
  finish_headers(q);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, q->headers);   /* NULL: none, on a reused handle too */
  /* limits and mapping */
  double timeout = opt_seconds(L, base, F_TIMEOUT, HTTP_TIMEOUT, err, errlen);
  double connect = opt_seconds(L, base, F_CONNECT_TIMEOUT, HTTP_CONNECT_TIMEOUT, err, errlen);
  if (timeout < 0 || connect < 0) return -1;
  /* 0 ms would mean no timeout to curl: a tiny one is 1 ms */
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout * 1000 < 1 ? 1L : (long)(timeout * 1000));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect * 1000 < 1 ? 1L : (long)(connect * 1000));
  q->max_bytes = HTTP_MAX_BYTES;
  if (field(L, base, F_MAX_BYTES) != LUA_TNIL) {
    lua_Integer v = lua_tointeger(L, -1);
    if (v <= 0) { snprintf(err, (size_t)errlen, "max_bytes must be an integer > 0"); return -1; }
    q->max_bytes = (size_t)v;
  }
  lua_pop(L, 1);
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)q->max_bytes);
  if (field(L, base, F_CA_FILE) == LUA_TSTRING) {
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_CAINFO, lua_tostring(L, -1));   /* copied by curl */
  }
  lua_pop(L, 1);
  if (read_codes(L, base, F_RETRY_ON, &q->retry_on, err, errlen) ||
      read_codes(L, base, F_FATAL_ON, &q->fatal_on, err, errlen) ||
      read_codes(L, base, F_ACCEPT, &q->accept, err, errlen)) return -1;
  q->raise = opt_bool(L, base, F_RAISE, 1);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, q->errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, q);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, q);
  curl_easy_setopt(c, CURLOPT_PRIVATE, q);
  return 0;
}

int mend_engine_http(lua_State *L, char *err, int errlen) {
  mend_run *r = mend__waiting_run(L, err, errlen);
  if (!r) return -1;
  mend_engine *E = r->E;
  luaL_checktype(L, 1, LUA_TTABLE);
  struct mend_http *H = http_state(E);
  http_req *q = H ? req_new(H) : NULL;
  if (!q) {
    snprintf(err, (size_t)errlen, "out of memory");
    return -1;
  }
  q->next = H->reqs;
  if (H->reqs) H->reqs->prev = q;
  H->reqs = q;
  int top = lua_gettop(L);
  int rc = setup(r, q, L, err, errlen);
  lua_settop(L, top);
  if (rc == 0) {
    q->started = mend_real_now();
    if (curl_multi_add_handle(H->multi, q->easy) != CURLM_OK) {
      snprintf(err, (size_t)errlen, "cannot start the request");
      rc = -1;
    } else {
      q->added = 1;
      if (++H->in_multi > H->max_in_multi) {
        H->max_in_multi = H->in_multi;
        curl_multi_setopt(H->multi, CURLMOPT_MAXCONNECTS, 4L * H->max_in_multi);
      }
    }
  }
  if (rc) {
    req_free(q);
    return -1;
  }
  E->externals++;
  q->run = r;
  r->http = q;
  r->waiting = 1;
  return 0;
}
