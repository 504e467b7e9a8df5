/*
 * http: the requests of mend.http on the engine's loop thread, once set up. Owns the engine's
 * half of mend.http: its state (made at the first request, with the I/O thread of http_io.c
 * that performs the requests), the idle easy handles, one request per waiting attempt from its
 * start to the step's resumption with (true, response) or (false, error), the hand-off of a
 * request to the I/O thread and its taking back (a wake of the engine's loop, referenced only
 * while requests are out), an abandoned request's removal, what a status code means
 * (retryable, fatal, returned) and the text each request leaves in its attempt's history
 * detail. The call itself (its table read, the URL and the allow-list, the headers) is
 * http_call.c's, the table a returned response becomes http_resp.c's.
 * Must never: block the loop (no easy_perform, no wait for the I/O thread but its join as the
 * engine closes); touch a request while the I/O thread has it (io_state IO_ADD or IO_MULTI)
 * but for its run and the list it is in, under mx; resume an attempt that is no longer the
 * request's; let one request's options reach the next on a reused handle.
 */
#include "http_int.h"

#include <ctype.h>
#include <stddef.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "json.h"
#include "mend.h"
#include "util.h"

/* ---------------------------------------------------------------- buffers */

/* (The I/O thread's too: curl's writes of an answer grow its buffers.) */
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

/* ---------------------------------------------------------------- the engine's half */

static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void free_handle(uv_handle_t *h) { free(h); }

/* Stopped before its eventfd is closed, as libuv asks of a poll handle. */
static void done_close(struct mend_http *H) {
  uv_poll_stop(H->done_poll);
  close(H->done_fd);
  uv_close((uv_handle_t *)H->done_poll, free_handle);
}

struct mend_http *mend__http_state(mend_engine *E) {
  if (E->http) return E->http;
  static uv_once_t once = UV_ONCE_INIT;
  uv_once(&once, global_init);
  struct mend_http *H = calloc(1, sizeof *H);
  if (!H) return NULL;
  H->E = E;
  H->done_poll = malloc(sizeof *H->done_poll);
  H->done_fd = mend__http_wake_fd();
  if (!H->done_poll || H->done_fd < 0 || uv_mutex_init(&H->mx)) {
    if (H->done_fd >= 0) close(H->done_fd);
    free(H->done_poll);
    free(H);
    return NULL;
  }
  if (uv_poll_init(E->loop, H->done_poll, H->done_fd)) {
    uv_mutex_destroy(&H->mx);
    close(H->done_fd);
    free(H->done_poll);
    free(H);
    return NULL;
  }
  H->done_poll->data = H;
  uv_poll_start(H->done_poll, UV_READABLE, mend__http_on_done);
  uv_unref((uv_handle_t *)H->done_poll);
  if (mend__http_io_start(H)) {
    done_close(H);
    uv_mutex_destroy(&H->mx);
    free(H);
    return NULL;
  }
  E->http = H;
  return H;
}

/* The options of every request, the same for all: set on a new or reset handle only. */
void mend__http_set_fixed(struct mend_http *H, CURL *c) {
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mend__http_on_body);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, mend__http_on_header);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, mend__http_on_open_socket);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, H);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, mend__http_on_close_socket);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, H);
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

void mend__http_req_free(http_req *q) {
  struct mend_http *H = q->H;
  if (q->prev) q->prev->next = q->next;
  else H->reqs = q->next;
  if (q->next) q->next->prev = q->prev;
  free(q->body);
  if (q->target) {   /* the handle must not point at a parse that may be freed now */
    curl_easy_setopt(q->easy, CURLOPT_CURLU, NULL);
    mend__http_url_drop(q->target);
  }
  if (H->nidle < HTTP_IDLE_EASY) {
    if (q->dirty) {   /* nothing of this request's options reaches the next */
      curl_easy_reset(q->easy);
      mend__http_set_fixed(H, q->easy);
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
    mend__http_set_fixed(H, q->easy);
  }
  q->H = H;
  q->next = H->reqs;
  if (H->reqs) H->reqs->prev = q;
  H->reqs = q;
  return q;
}

/* While requests are out the engine's loop waits for them (a run() returns only once they
 * are back); with none, a host's uv_run is not kept going by this handle. */
static void out_changed(struct mend_http *H, int by) {
  int was = H->out;
  H->out += by;
  if (!was && H->out) uv_ref((uv_handle_t *)H->done_poll);
  else if (was && !H->out) uv_unref((uv_handle_t *)H->done_poll);
}

void mend__http_send(http_req *q) {
  struct mend_http *H = q->H;
  out_changed(H, 1);
  uv_mutex_lock(&H->mx);
  q->io_state = IO_ADD;
  mend__http_list_push(&H->to_add, q);
  int wake = mend__http_io_wake(H);
  uv_mutex_unlock(&H->mx);
  if (wake) mend__http_signal(H->io_fd);
}

void mend__http_close(mend_engine *E) {
  struct mend_http *H = E->http;
  if (!H) return;
  mend__http_io_stop(H);
  while (H->reqs) {
    if (H->reqs->run) H->reqs->run->cold->http = NULL;
    mend__http_req_free(H->reqs);
  }
  while (H->nidle) req_destroy(H->idle[--H->nidle]);
  for (int k = 0; k < HTTP_URL_MEMO; k++) mend__http_url_drop(H->memo[k]);
  done_close(H);   /* no wake comes any more: the thread is joined */
  uv_mutex_destroy(&H->mx);
  free(H);
  E->http = NULL;
}

/* The attempt no longer waits for it: a request not taken yet by the I/O thread, or given
 * back and not yet taken here, is freed now; one in the multi handle is taken out there and
 * freed when it comes back (on_done), its run forgotten. */
void mend__abandon_http(mend_run *r) {
  http_req *q = MEND_COLD(r, http);
  if (!q) return;
  struct mend_http *H = q->H;
  q->run = NULL;
  r->cold->http = NULL;
  r->E->externals--;
  int wake = 0;
  uv_mutex_lock(&H->mx);
  int state = q->io_state;
  if (state == IO_ADD) mend__http_list_unlink(&H->to_add, q);
  else if (state == IO_DONE) mend__http_list_unlink(&H->done, q);
  else if (state == IO_MULTI) {
    q->io_cancel = 1;
    mend__http_list_push(&H->cancel, q);
    wake = mend__http_io_wake(H);
  }
  if (state != IO_MULTI) q->io_state = IO_NONE;
  uv_mutex_unlock(&H->mx);
  if (wake) mend__http_signal(H->io_fd);
  if (state != IO_MULTI) {
    mend__http_req_free(q);
    out_changed(H, -1);
  }
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

/* The requests the I/O thread gave back, taken one at a time: resuming a run may abandon
 * another's request (a group's lane failing), which must find it where it is. */
void mend__http_on_done(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  struct mend_http *H = p->data;
  mend_engine *E = H->E;
  mend__http_wake_drain(H->done_fd);   /* before the list: a wake after it is for later ones */
  for (;;) {
    uv_mutex_lock(&H->mx);
    http_req *q = H->done.head;
    if (q) {
      mend__http_list_unlink(&H->done, q);
      q->io_state = IO_NONE;
    } else {
      H->loop_woken = 0;
    }
    uv_mutex_unlock(&H->mx);
    if (!q) break;
    out_changed(H, -1);
    mend_run *r = q->run;
    if (r) {
      r->cold->http = NULL;
      E->externals--;
      push_outcome(r, q, q->io_rc);
    }
    mend__http_req_free(q);
    if (r) mend__resume(r, 2);
  }
  mend__kick(E);
}
