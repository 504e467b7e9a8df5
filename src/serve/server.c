/*
 * server: the HTTP side of `mend serve` on the engine's own libuv loop, through h2o (Debian's
 * libh2o, its libuv flavour): the listening socket, connections, the limits on what a request
 * may carry, the bearer token, CORS when asked for, and the JSON replies. Every request is
 * answered on the loop's thread, so the engine is called as any caller on that thread calls it;
 * an answer that says something was written waits there for its batch to be durable.
 * Must never: answer that something was written before its batch is durable, touch a request
 * h2o has disposed of (a client gone before its answer), parse HTTP itself (h2o does; the one
 * framing check h2o lacks is framing.c's), listen beyond loopback without a token, answer a
 * changing request without the token when one is set, or leave a handle on the loop after
 * close (the engine closes its loop after, and takes any handle left for one of its own).
 */
#include "serve_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

/* An event's data may be 1 MiB (MEND_EVENT_DATA_MAX) and the body around it ({"name", "key",
 * "data"}, a client's spacing) must fit too: 64 KiB of room, far more than a name and key take,
 * little enough that the limit still keeps a body much past the largest event out. */
#define DEFAULT_MAX_BODY ((1u << 20) + (64u << 10))
#define DEFAULT_MAX_HEADERS (16u << 10)

typedef struct conn {
  uv_tcp_t tcp;                /* first: h2o's close callback gets the handle */
  mend_server *srv;
  h2o_socket_t *sock;
  int linger_fd;               /* kept open past h2o's close of a refused body (linger.c); -1 */
  int shut;                    /* shut at close (shut()): h2o reads its end and closes it */
  int requests;                /* handed to on_req and not yet disposed of by h2o */
  size_t read_at_req;          /* the socket's bytes read when its last request was handed on */
  struct conn *prev, *next;
} conn;

/* An answer waiting for its batch (serve_json_durable), in the request's pool: h2o disposes
 * of it with the request, whose client may have gone by then. */
typedef struct pending {
  mend_durable_wait wait;
  mend_server *srv;            /* NULL once answered or given up */
  h2o_req_t *req;
  struct pending *prev, *next; /* the server's, to let go at close */
  int status;
  char *text;                  /* the answer, in the request's pool */
  size_t len;
  void (*answer)(serve_req *r, void *ud);   /* or the answer made then (serve_when_durable) */
  void *ud;
} pending;

struct mend_server {
  h2o_globalconf_t config;
  h2o_context_t ctx;
  h2o_accept_ctx_t accept_ctx;
  uv_tcp_t listener;
  mend_engine *E;
  char *token;
  size_t token_len;
  int loopback;
  size_t max_headers;
  size_t max_body;             /* bytes of a request body; one more is 413 */
  char *cors;
  char *dashboard;
  char *dashboard_csp;         /* its Content-Security-Policy (csp.c) */
  char *process;
  char address[INET6_ADDRSTRLEN + 16];
  conn *conns;
  int nconns;
  serve_lingering *lingering;
  pending *pending;
  int npending;                /* requests on `pending` (mend_http_commit_waiting_requests) */
  serve_waits *waits;
  int started, closed;
};

typedef struct serve_handler {
  h2o_handler_t super;
  mend_server *srv;
} serve_handler;

static int errorf(char *err, int errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int errorf(char *err, int errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, (size_t)errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---------------------------------------------------------------- replies */

static const char *reason_of(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Internal Server Error" : "Error";
  }
}

static void add_header(h2o_req_t *req, const h2o_token_t *t, const char *value) {
  h2o_add_header(&req->pool, &req->res.headers, t, NULL, value, strlen(value));
}

static void send_text(serve_req *r, int status, const char *type, const char *text, size_t len) {
  h2o_req_t *req = r->req;
  req->res.status = status;
  req->res.reason = reason_of(status);
  add_header(req, H2O_TOKEN_CONTENT_TYPE, type);
  add_header(req, H2O_TOKEN_CACHE_CONTROL, "no-store");
  h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-content-type-options"), 0,
                        NULL, H2O_STRLIT("nosniff"));
  if (r->srv->cors) {
    add_header(req, H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN, r->srv->cors);
    add_header(req, H2O_TOKEN_VARY, "Origin");
    /* a browser hides other headers from another origin's script, and a history's next page
     * is named in Link */
    h2o_add_header_by_str(&req->pool, &req->res.headers,
                          H2O_STRLIT("access-control-expose-headers"), 0, NULL, H2O_STRLIT("Link"));
  }
  /* h2o_send_inline leaves the length unset, and h2o frames a body of unknown length by
   * closing the connection unless the status is 200 (chunked): a start's 201, an event's 202
   * and every error would each cost the client its kept-alive connection. */
  req->res.content_length = len;
  h2o_send_inline(req, text, len);
}

void serve_json(serve_req *r, int status, json_t *body) {
  char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  json_decref(body);
  if (!text) {
    static const char oom[] = "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
    send_text(r, 500, "application/json", oom, sizeof oom - 1);
    return;
  }
  size_t n = strlen(text);
  text[n] = '\n';   /* json_dumps left room: its terminator */
  send_text(r, status, "application/json", text, n + 1);
  free(text);
}

static void pending_unlink(pending *p) {
  mend_server *srv = p->srv;
  srv->npending--;
  if (p->prev) p->prev->next = p->next;
  else srv->pending = p->next;
  if (p->next) p->next->prev = p->prev;
  p->srv = NULL;
}

static void pending_done(mend_durable_wait *w, const char *err) {
  pending *p = (pending *)w;
  mend_server *srv = p->srv;
  pending_unlink(p);
  serve_req r = {.req = p->req, .srv = srv, .E = srv->E};
  if (err) serve_error(&r, 503, "storage", "%s", err);
  else if (p->answer) p->answer(&r, p->ud);
  else send_text(&r, p->status, "application/json", p->text, p->len);
}

/* h2o frees the request (its client went away, or the answer was sent): no answer is due. */
static void pending_dispose(void *mem) {
  pending *p = mem;
  if (!p->srv) return;
  mend_engine_durable_cancel(p->srv->E, &p->wait);
  pending_unlink(p);
}

static void when_durable(serve_req *r, pending *p);

void serve_json_durable(serve_req *r, int status, json_t *body) {
  char *text = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  json_decref(body);
  pending *p = text ? h2o_mem_alloc_shared(&r->req->pool, sizeof *p, pending_dispose) : NULL;
  if (!p) {
    free(text);
    serve_json(r, 500, NULL);
    return;
  }
  memset(p, 0, sizeof *p);
  size_t n = strlen(text);
  p->text = h2o_mem_alloc_pool(&r->req->pool, n + 1);
  memcpy(p->text, text, n);
  p->text[n] = '\n';
  p->len = n + 1;
  free(text);
  p->status = status;
  when_durable(r, p);
}

void serve_when_durable(serve_req *r, void (*answer)(serve_req *r, void *ud), void *ud) {
  pending *p = h2o_mem_alloc_shared(&r->req->pool, sizeof *p, pending_dispose);
  memset(p, 0, sizeof *p);
  p->answer = answer;
  p->ud = ud;
  when_durable(r, p);
}

static void when_durable(serve_req *r, pending *p) {
  p->req = r->req;
  p->srv = r->srv;
  p->next = r->srv->pending;
  if (p->next) p->next->prev = p;
  r->srv->pending = p;
  r->srv->npending++;
  p->wait.done = pending_done;
  mend_engine_when_durable(r->E, &p->wait);
}

/* Replaces each byte of s that does not begin or continue a well-formed UTF-8 sequence with '?':
 * a message may quote what a client sent (a run id from its URL), and JSON holds only text. */
static void make_utf8(char *s) {
  unsigned char *p = (unsigned char *)s;
  while (*p) {
    int n = *p < 0x80 ? 0 : (*p >> 5) == 6 ? 1 : (*p >> 4) == 14 ? 2 : (*p >> 3) == 30 ? 3 : -1;
    int k = 1;
    while (n > 0 && k <= n && (p[k] & 0xC0) == 0x80) k++;
    unsigned cp = n > 0 ? *p & (0x3Fu >> n) : 0;
    for (int j = 1; n > 0 && k > n && j <= n; j++) cp = cp << 6 | (p[j] & 0x3Fu);
    int bad = n < 0 || k <= n || (n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) ||
              (n == 2 && cp >= 0xD800 && cp <= 0xDFFF) ||
              (n == 3 && (cp < 0x10000 || cp > 0x10FFFF));
    if (bad) {
      *p++ = '?';
      continue;
    }
    p += n + 1;
  }
}

void serve_error(serve_req *r, int status, const char *code, const char *fmt, ...) {
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  make_utf8(msg);
  serve_json(r, status, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg));
}

/* ---------------------------------------------------------------- h2o's own refusals as JSON */

/* A body over the limit (413), or one whose framing is broken (400: a chunked encoding, a
 * Content-Length), is refused by h2o itself, before any handler sees the request, with a text
 * body of its own. An output filter (on the path and on the host's fallback path, where h2o
 * binds a request it refused before routing) swaps that body for the API's JSON error; the
 * status, and h2o closing the connection after it, stay as h2o made them. */
typedef struct json_own_filter {
  h2o_filter_t super;
  size_t max_body;
  mend_server *srv;
} json_own_filter;

typedef struct json_own_stream {
  h2o_ostream_t super;
  h2o_iovec_t body;
  int sent;
} json_own_stream;

static void json_own_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt,
                          h2o_send_state_t state) {
  (void)bufs;
  (void)bufcnt;
  json_own_stream *o = (json_own_stream *)self;
  if (o->sent) {
    h2o_ostream_send_next(self, req, NULL, 0, state);
    return;
  }
  o->sent = 1;
  h2o_ostream_send_next(self, req, &o->body, 1, state);
}

static void json_own_setup(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
  ssize_t ct = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
  static const char json_type[] = "application/json";
  int ours = ct >= 0 && req->res.headers.entries[ct].value.len >= sizeof json_type - 1 &&
             memcmp(req->res.headers.entries[ct].value.base, json_type, sizeof json_type - 1) == 0;
  if ((req->res.status == 413 || req->res.status == 400) && !ours) {
    char text[200];
    int n = req->res.status == 413
      ? snprintf(text, sizeof text, "{\"error\":{\"code\":\"body_too_large\",\"message\":"
                 "\"the request body is over the limit of %zu bytes\"}}\n",
                 ((json_own_filter *)self)->max_body)
      : snprintf(text, sizeof text, "{\"error\":{\"code\":\"bad_request\",\"message\":"
                 "\"the request body's framing is broken (its chunked encoding, its "
                 "Content-Length or its Transfer-Encoding)\"}}\n");
    json_own_stream *o = (json_own_stream *)h2o_add_ostream(req, sizeof *o, slot);
    o->super.do_send = json_own_send;
    o->body = h2o_strdup(&req->pool, text, (size_t)n);
    o->sent = 0;
    if (ct >= 0) h2o_delete_header(&req->res.headers, ct);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("application/json; charset=utf-8"));
    req->res.content_length = o->body.len;
    slot = &o->super.next;
    /* the body h2o did not read is still coming: the connection lingers once closed */
    const h2o_conn_callbacks_t *cb = req->conn->callbacks;
    h2o_socket_t *sock = cb->get_socket ? cb->get_socket(req->conn) : NULL;
    for (conn *c = ((json_own_filter *)self)->srv->conns; c; c = c->next)
      if (c->sock == sock && c->linger_fd < 0) c->linger_fd = serve_linger_keep(sock);
  }
  h2o_setup_next_ostream(req, slot);
}

static void json_own_register(h2o_pathconf_t *path, mend_server *srv) {
  json_own_filter *f = (json_own_filter *)h2o_create_filter(path, sizeof *f);
  f->super.on_setup_ostream = json_own_setup;
  f->max_body = srv->max_body;
  f->srv = srv;
}

/* ---------------------------------------------------------------- requests */

static int token_ok(const mend_server *srv, h2o_req_t *req) {
  ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1);
  if (i < 0) return 0;
  h2o_iovec_t v = req->headers.entries[i].value;
  if (v.len < 7 || strncasecmp(v.base, "Bearer ", 7) != 0) return 0;
  const char *t = v.base + 7;
  size_t n = v.len - 7;
  /* Every byte of the token is compared, whatever was sent: the time says nothing of it. */
  unsigned diff = n != srv->token_len;
  for (size_t k = 0; k < srv->token_len; k++)
    diff |= (unsigned char)srv->token[k] ^ (unsigned char)(k < n ? t[k] : 0);
  return diff == 0;
}

/* The collections whose next segment is an id (a run's, a breaker's, a workflow's name): an
 * empty segment after one of them is most likely a client's id variable left empty. */
static int names_ids(const char *seg) {
  return strcmp(seg, "runs") == 0 || strcmp(seg, "dlq") == 0 || strcmp(seg, "breakers") == 0 ||
         strcmp(seg, "workflows") == 0;
}

static void note_request(mend_server *srv, h2o_req_t *req);
static conn *conn_of(mend_server *srv, h2o_req_t *req);

static int on_req(h2o_handler_t *self, h2o_req_t *req) {
  mend_server *srv = ((serve_handler *)self)->srv;
  note_request(srv, req);
  serve_req r = {.req = req, .srv = srv, .E = srv->E, .query = ""};
  char why[300];
  if (serve_framing_refused(req, why, sizeof why)) {
    /* Where its body ends is not known: what follows is no request to read. The connection
     * is closed after the answer, lingering for what the client still sends. */
    req->http1_is_persistent = 0;
    conn *c = conn_of(srv, req);
    if (c && c->linger_fd < 0) c->linger_fd = serve_linger_keep(c->sock);
    serve_error(&r, 400, "bad_request", "%s", why);
    return 0;
  }
  size_t head = 0;
  for (size_t i = 0; i < req->headers.size; i++)
    head += req->headers.entries[i].name->len + req->headers.entries[i].value.len + 4;
  if (head > srv->max_headers) {
    serve_error(&r, 431, "headers_too_large", "the request's header fields are %zu bytes, over the"
                " limit of %zu", head, srv->max_headers);
    return 0;
  }
  if (req->entity.base && req->entity.len > srv->max_body) {   /* read whole: kept alive */
    serve_error(&r, 413, "body_too_large", "the request body is over the limit of %zu bytes",
                srv->max_body);
    return 0;
  }
  h2o_iovec_t m = req->method;
  int get =
      h2o_memis(m.base, m.len, H2O_STRLIT("GET")) || h2o_memis(m.base, m.len, H2O_STRLIT("HEAD"));
  r.post = h2o_memis(m.base, m.len, H2O_STRLIT("POST"));
  if (srv->cors && h2o_memis(m.base, m.len, H2O_STRLIT("OPTIONS"))) {
    add_header(req, H2O_TOKEN_ACCESS_CONTROL_ALLOW_ORIGIN, srv->cors);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("access-control-allow-methods"),
                          0, NULL, H2O_STRLIT("GET, POST"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("access-control-allow-headers"),
                          0, NULL, H2O_STRLIT("Authorization, Content-Type, X-Mend-Who"));
    add_header(req, H2O_TOKEN_VARY, "Origin");
    req->res.status = 204;
    req->res.reason = "No Content";
    h2o_send_inline(req, "", 0);
    return 0;
  }
  size_t plen = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
  int page = h2o_memis(req->path.base, plen, H2O_STRLIT("/")) ||
             h2o_memis(req->path.base, plen, H2O_STRLIT("/ui"));
  if (page && !get) {
    add_header(req, H2O_TOKEN_ALLOW, "GET, HEAD");
    serve_error(&r, 405, "method_not_allowed", "this endpoint takes GET");
    return 0;
  }
  /* Another method is refused by its endpoint (api.c), whose Allow names its own methods: a
   * client that follows Allow must not be sent from one 405 to another. */
  r.other = !get && !r.post;
  if (page) {
    if (!srv->dashboard) {
      serve_error(&r, 404, "not_found", "the dashboard is not installed with this mend; the API is"
                  " under /api/v1");
      return 0;
    }
    /* One page, its script and style inline: its own script runs, no other (csp.c). */
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("content-security-policy"), 0,
                          NULL, srv->dashboard_csp, strlen(srv->dashboard_csp));
    send_text(&r, 200, "text/html; charset=utf-8", srv->dashboard, strlen(srv->dashboard));
    return 0;
  }
  /* The token: for everything beyond loopback, for every change whenever it is set; a token
   * sent is checked even where none is needed, so that a wrong one is never taken as right.
   * A request to loopback addressed to another name is one from beyond it. */
  int beyond = !srv->loopback || !serve_host_is_loopback(req);
  if (beyond && !srv->token) {
    serve_error(&r, 400, "bad_header", "Host %.*s is not this server's loopback name: without"
                " --token-file it answers only requests addressed to localhost, 127.0.0.1 or"
                " [::1]", (int)req->input.authority.len, req->input.authority.base);
    return 0;
  }
  int has_auth = h2o_find_header(&req->headers, H2O_TOKEN_AUTHORIZATION, -1) >= 0;
  int authed = srv->token && token_ok(srv, req);
  if (srv->token && (r.post || beyond || has_auth) && !authed) {
    add_header(req, H2O_TOKEN_WWW_AUTHENTICATE, "Bearer realm=\"mend\"");
    serve_error(&r, 401, "unauthorized", has_auth ? "the bearer token is not the right one"
                : "this request needs Authorization: Bearer <token>");
    return 0;
  }
  /* A browser on another site can POST a form or text to loopback without asking first;
   * it cannot send application/json without a preflight, which gets no CORS answer. */
  if (r.post && !serve_is_json_type(req)) {
    serve_error(&r, 415, "unsupported_media_type",
                "a POST must have Content-Type: application/json");
    return 0;
  }
  if (req->query_at != SIZE_MAX) {
    r.query = req->path.base + req->query_at + 1;
    r.query_len = req->path.len - req->query_at - 1;
  }
  const char *p = req->path.base, *end = p + plen;
  while (p < end) {
    const char *from = p;
    while (p < end && *p == '/') p++;
    /* An empty segment past the first ("/api/v1/runs//history", "/api/v1/runs/"): an id left
     * empty in a client's path would otherwise take another route (the list, run "history",
     * a 405). Leading slashes are read leniently. */
    if (r.nseg > 0 && (p - from > 1 || p == end)) {
      serve_error(&r, 404, "not_found", "no such endpoint: %.*s (a segment is empty%s)", (int)plen,
                  req->path.base, names_ids(r.seg[r.nseg - 1]) ? ": an id left empty?" : "");
      return 0;
    }
    if (p == end) break;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (!slash) slash = end;
    if (r.nseg == SERVE_MAX_SEGMENTS) {
      serve_error(&r, 404, "not_found", "no such endpoint: %.*s", (int)plen, req->path.base);
      return 0;
    }
    char *s = serve_decode(&req->pool, p, (size_t)(slash - p), 0);
    if (!s) {
      serve_error(&r, 400, "bad_path", "the path has a malformed percent-escape: %.*s", (int)plen,
                  req->path.base);
      return 0;
    }
    r.seg[r.nseg++] = s;
    p = slash;
  }
  if (r.post && !(r.who = serve_who(&r, srv->process, authed))) return 0;
  serve_api(&r);
  return 0;
}

/* ---------------------------------------------------------------- sockets */

static void conn_closed(uv_handle_t *h) {
  conn *c = (conn *)h;
  mend_server *srv = c->srv;
  if (c->prev) c->prev->next = c->next;
  else srv->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  srv->nconns--;
  if (c->linger_fd >= 0) serve_linger(h->loop, c->linger_fd, &srv->lingering);
  free(c);
}

static void free_unaccepted(uv_handle_t *h) { free(h); }

static void on_accept(uv_stream_t *listener, int status) {
  mend_server *srv = listener->data;
  if (status != 0 || srv->closed) return;
  conn *c = calloc(1, sizeof *c);
  if (!c) return;
  uv_tcp_init(listener->loop, &c->tcp);
  c->tcp.data = NULL;
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
    uv_close((uv_handle_t *)&c->tcp, free_unaccepted);
    return;
  }
  if (srv->nconns >= MAX_CONNECTIONS) {   /* one client must not take every descriptor */
    uv_close((uv_handle_t *)&c->tcp, free_unaccepted);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  srv->nconns++;
  c->srv = srv;
  c->linger_fd = -1;
  c->next = srv->conns;
  if (srv->conns) srv->conns->prev = c;
  srv->conns = c;
  c->sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, conn_closed);
  h2o_accept(&srv->accept_ctx, c->sock);
}

/* host:port, [v6]:port; "localhost" is 127.0.0.1. 0, or -1 with err. */
static int parse_address(const char *a, struct sockaddr_storage *ss, int *loopback, char *err,
                         int errlen) {
  char host[INET6_ADDRSTRLEN + 1];
  const char *port_s;
  size_t hlen;
  if (a[0] == '[') {
    const char *close = strchr(a, ']');
    if (!close || close[1] != ':')
      return errorf(err, errlen, "--listen %s: expected [ADDRESS]:PORT", a);
    hlen = (size_t)(close - a - 1);
    if (hlen >= sizeof host) return errorf(err, errlen, "--listen %s: address too long", a);
    memcpy(host, a + 1, hlen);
    port_s = close + 2;
  } else {
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a) return errorf(err, errlen, "--listen %s: expected HOST:PORT", a);
    hlen = (size_t)(colon - a);
    if (hlen >= sizeof host) return errorf(err, errlen, "--listen %s: address too long", a);
    memcpy(host, a, hlen);
    port_s = colon + 1;
  }
  host[hlen] = 0;
  char *endp;
  long port = strtol(port_s, &endp, 10);
  if (!*port_s || *endp || port < 0 || port > 65535)
    return errorf(err, errlen, "--listen %s: the port must be a number from 0 to 65535", a);
  if (strcmp(host, "localhost") == 0) strcpy(host, "127.0.0.1");
  memset(ss, 0, sizeof *ss);
  if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0) {
    *loopback = (ntohl(((struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
  } else if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0) {
    *loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ss)->sin6_addr);
  } else {
    return errorf(err, errlen, "--listen %s: %s is not an IP address (nor localhost)", a, host);
  }
  return 0;
}

static const char *address_of(const mend_server_opts *o) {
  return o->address ? o->address : "127.0.0.1:7070";
}

/* Sent as Access-Control-Allow-Origin, which a browser compares whole with its page's origin:
 * scheme://host[:port] and nothing else (a list, a path or "*" never do what is meant; a line
 * break would add headers of its own to every answer). */
static int is_origin(const char *s) {
  if (!isalpha((unsigned char)*s)) return 0;
  while (isalnum((unsigned char)*s) || *s == '+' || *s == '.' || *s == '-') s++;
  if (strncmp(s, "://", 3) != 0) return 0;
  s += 3;
  if (!*s) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr(".:[]_-", *s)) return 0;
  return 1;
}

/* The address o asks for, into *ss: 0, or the refusal of the options with err. */
static int check_options(const mend_server_opts *o, struct sockaddr_storage *ss, int *loopback,
                         char *err, int errlen) {
  if (parse_address(address_of(o), ss, loopback, err, errlen)) return MEND_SERVER_BAD_ADDRESS;
  if (!*loopback && !(o->token && *o->token)) {
    errorf(err, errlen, "--listen %s is not a loopback address: serving it needs --token-file, and "
           "then every request needs Authorization: Bearer <token>", address_of(o));
    return MEND_SERVER_NEEDS_TOKEN;
  }
  if (o->cors_origin && !is_origin(o->cors_origin)) {
    int n = 0;   /* shown up to a control character, which would end the message's line */
    while (n < 200 && (unsigned char)o->cors_origin[n] >= 0x20) n++;
    const char *rest = !o->cors_origin[n] ? "" : (unsigned char)o->cors_origin[n] < 0x20
                     ? " and a control character" : "...";
    errorf(err, errlen,
           "--cors takes one origin, as a browser names a page's: scheme://host[:port] "
           "(http://dash.example:8080), got \"%.*s\"%s",
           n, o->cors_origin, rest);
    return MEND_SERVER_BAD_CORS;
  }
  return 0;
}

int mend_server_check(const mend_server_opts *o, char *err, int errlen) {
  struct sockaddr_storage ss;
  int loopback = 0;
  return check_options(o, &ss, &loopback, err, errlen);
}

mend_server *mend_server_start(mend_engine *E, const mend_server_opts *o, int *refusal,
                               char *err, int errlen) {
  struct sockaddr_storage ss;
  int loopback = 0;
  if ((*refusal = check_options(o, &ss, &loopback, err, errlen))) return NULL;
  mend_server *srv = calloc(1, sizeof *srv);
  if (!srv) {
    *refusal = MEND_SERVER_NO_MEMORY;
    errorf(err, errlen, "out of memory");
    return NULL;
  }
  srv->E = E;
  srv->loopback = loopback;
  srv->max_headers = o->max_headers ? o->max_headers : DEFAULT_MAX_HEADERS;
  if (o->token && *o->token) {
    srv->token = strdup(o->token);
    srv->token_len = strlen(o->token);
  }
  if (o->cors_origin) srv->cors = strdup(o->cors_origin);
  if (o->dashboard) {
    srv->dashboard = strdup(o->dashboard);
    srv->dashboard_csp = srv->dashboard ? serve_dashboard_csp(srv->dashboard) : NULL;
    if (!srv->dashboard_csp) {
      free(srv->dashboard);
      free(srv->cors);
      free(srv->token);
      free(srv);
      *refusal = MEND_SERVER_NO_MEMORY;
      errorf(err, errlen, "out of memory");
      return NULL;
    }
  }
  if (o->process) srv->process = strdup(o->process);
  uv_loop_t *loop = mend_engine_loop(E);
  uv_tcp_init(loop, &srv->listener);
  srv->listener.data = srv;
  int rc = uv_tcp_bind(&srv->listener, (struct sockaddr *)&ss, 0);
  if (!rc) rc = uv_listen((uv_stream_t *)&srv->listener, 128, on_accept);
  if (rc) {
    *refusal = MEND_SERVER_CANNOT_LISTEN;
    errorf(err, errlen, "--listen %s: %s", address_of(o), uv_strerror(rc));
    srv->closed = 1;
    uv_close((uv_handle_t *)&srv->listener, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    mend_server_free(srv);
    return NULL;
  }
  struct sockaddr_storage bound;
  int blen = sizeof bound;
  uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&bound, &blen);
  char host[INET6_ADDRSTRLEN] = "?";
  if (bound.ss_family == AF_INET6) {
    uv_ip6_name((struct sockaddr_in6 *)&bound, host, sizeof host);
    snprintf(srv->address, sizeof srv->address, "[%s]:%d", host,
             ntohs(((struct sockaddr_in6 *)&bound)->sin6_port));
  } else {
    uv_ip4_name((struct sockaddr_in *)&bound, host, sizeof host);
    snprintf(srv->address, sizeof srv->address, "%s:%d", host,
             ntohs(((struct sockaddr_in *)&bound)->sin_port));
  }
  h2o_config_init(&srv->config);
  srv->max_body = o->max_body ? o->max_body : DEFAULT_MAX_BODY;
  /* h2o refuses a Content-Length past its limit but a chunked body that reaches it: one byte
   * more for h2o, and on_req refuses a body past max_body (a length of max_body + 1) */
  srv->config.max_request_entity_size = srv->max_body < SIZE_MAX ? srv->max_body + 1 : SIZE_MAX;
  srv->config.server_name = h2o_iovec_init(H2O_STRLIT("mend"));
  srv->config.http1.upgrade_to_http2 = 0;   /* HTTP/1.1 only: what the API is tested with */
  h2o_hostconf_t *host_conf =
      h2o_config_register_host(&srv->config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t *path = h2o_config_register_path(host_conf, "/", 0);
  json_own_register(path, srv);
  json_own_register(&host_conf->fallback_path, srv);
  serve_handler *h = (serve_handler *)h2o_create_handler(path, sizeof *h);
  h->super.on_req = on_req;
  h->srv = srv;
  h2o_context_init(&srv->ctx, loop, &srv->config);
  srv->accept_ctx.ctx = &srv->ctx;
  srv->accept_ctx.hosts = srv->config.hosts;
  srv->waits = serve_waits_new(srv, E);
  srv->started = 1;
  return srv;
}

const char *mend_server_address(const mend_server *srv) { return srv->address; }

static void tick(uv_timer_t *t) { (void)t; }

/* Shuts c's socket both ways, once: h2o's next read of it ends, and h2o closes it. */
static void shut(conn *c) {
  uv_os_fd_t fd;
  if (c->shut || uv_is_closing((uv_handle_t *)&c->tcp) || uv_fileno((uv_handle_t *)&c->tcp, &fd))
    return;
  shutdown(fd, SHUT_RDWR);
  c->shut = 1;
}

static conn *conn_of(mend_server *srv, h2o_req_t *req) {
  h2o_socket_t *sock =
      req->conn->callbacks->get_socket ? req->conn->callbacks->get_socket(req->conn) : NULL;
  for (conn *c = srv->conns; sock && c; c = c->next)
    if (c->sock == sock) return c;
  return NULL;
}

/* A request in progress, counted on its connection until h2o disposes of it (its answer
 * written, or its client gone): a stop closes the connections without one at once. */
typedef struct in_progress {
  mend_server *srv;
  h2o_socket_t *sock;
} in_progress;

static void request_done(void *p) {
  in_progress *ip = p;
  for (conn *c = ip->srv->conns; c; c = c->next)
    if (c->sock == ip->sock) {
      c->requests--;
      return;
    }
}

static void note_request(mend_server *srv, h2o_req_t *req) {
  conn *c = conn_of(srv, req);
  if (!c) return;
  in_progress *ip = h2o_mem_alloc_shared(&req->pool, sizeof *ip, request_done);
  *ip = (in_progress){srv, c->sock};
  c->requests++;
  c->read_at_req = c->sock->bytes_read;
}

/* Between requests: none in progress, no answer being written, and nothing come in since the
 * last one began (a client half-way through its next request is waited for as one in
 * progress). A connection that never sent anything is idle too. */
static int idle(const conn *c) {
  /* one h2o is closing is going anyway (its input may be let go already) */
  if (uv_is_closing((const uv_handle_t *)&c->tcp)) return 1;
  return !c->requests && !h2o_socket_is_writing(c->sock) &&
         !(c->sock->input && c->sock->input->size) && c->sock->bytes_read == c->read_at_req;
}

serve_waits *serve_server_waits(mend_server *srv) { return srv->waits; }
int serve_server_commit_waiting(const mend_server *srv) { return srv->npending; }

int serve_req_fd(mend_server *srv, h2o_req_t *req) {
  conn *c = conn_of(srv, req);
  uv_os_fd_t fd;
  if (!c || c->shut || uv_is_closing((uv_handle_t *)&c->tcp) ||
      uv_fileno((uv_handle_t *)&c->tcp, &fd))
    return -1;
  return fd;
}

void serve_abandon(mend_server *srv, h2o_req_t *req) {
  conn *c = conn_of(srv, req);
  if (c) shut(c);
  /* never read: h2o's write of it fails on the shut socket, and h2o ends the request */
  static const char none[] = "{}\n";
  serve_req r = {.req = req, .srv = srv, .E = srv->E};
  send_text(&r, 503, "application/json", none, sizeof none - 1);
}

/* A connection closed under h2o leaves its timeouts armed, which h2o_context_dispose refuses
 * (it aborts): nothing is left to call them, so they are let go first. */
static void unlink_all(h2o_timeout_t *t) {
  if (!t->_entries.next) return;   /* one the context does not set up */
  while (!h2o_linklist_is_empty(&t->_entries))
    h2o_timeout_unlink(H2O_STRUCT_FROM_MEMBER(h2o_timeout_entry_t, _link, t->_entries.next));
}

void mend_server_close(mend_server *srv) {
  if (!srv || srv->closed) return;
  srv->closed = 1;
  uv_loop_t *loop = srv->ctx.loop;
  uv_close((uv_handle_t *)&srv->listener, NULL);
  /* A long poll is answered with the run as it is now: its client learns the server stopped
   * rather than seeing a closed connection, and its answer goes out in the moment below. */
  serve_waits_stop(srv->waits);
  /* A connection between requests (idle keep-alive, or one that sent nothing) is shut at once:
   * h2o reads its end and closes it. One with a request in progress gets a moment for its
   * answer to go out, and is shut as it goes idle, before a next request. Not
   * h2o_context_request_shutdown: its HTTP/2 side arms a timer that h2o_context_dispose then
   * finds armed, and aborts. The timer here only keeps the loop from sleeping past the moment. */
  uv_timer_t t;
  uv_timer_init(loop, &t);
  uv_timer_start(&t, tick, 50, 50);
  uint64_t until = uv_now(loop) + 300;
  while (srv->conns && uv_now(loop) < until) {
    for (conn *c = srv->conns; c; c = c->next)
      if (idle(c)) shut(c);
    uv_run(loop, UV_RUN_ONCE);
  }
  /* A request still waiting for its batch is let go of, not answered: its client sees only a
   * closed connection (said in the log), and what it wrote is committed only if the batch
   * still is, as the engine closes. Its connection is shut first and h2o then given an answer
   * it cannot write: h2o ends the request and closes the connection itself, freeing both.
   * Closed under h2o with its request in flight (h2o reads nothing then), h2o would never
   * learn of it and would keep both, 5 KB a request. */
  int unanswered = 0;
  while (srv->pending) {
    pending *p = srv->pending;
    mend_engine_durable_cancel(srv->E, &p->wait);
    pending_unlink(p);
    h2o_socket_t *sock = p->req->conn->callbacks->get_socket(p->req->conn);
    for (conn *c = srv->conns; c; c = c->next)
      if (c->sock == sock) shut(c);
    serve_req r = {.req = p->req, .srv = srv, .E = srv->E};
    serve_error(&r, 503, "stopping", "the server stopped before this was committed");
    unanswered++;
  }
  /* Every other connection left (one idle before its first request or between two, one in
   * the middle of a request line or a body) is shut too: h2o reads its end and closes it,
   * freeing its connection and its request's memory. Closed under h2o (h2o_socket_close),
   * h2o never learned of it and kept them: 824 bytes a connection, 4 KB more with half a
   * body. */
  for (conn *c = srv->conns; c; c = c->next) shut(c);
  for (until = uv_now(loop) + 300; srv->conns && uv_now(loop) < until;) uv_run(loop, UV_RUN_ONCE);
  if (unanswered) {
    char msg[300];
    snprintf(msg, sizeof msg, "stopping: %d request%s waiting for %s commit (another process "
             "holds the database's lock?) left unanswered, its connection closed: what %s "
             "is kept only if the engine's last commit, as it closes, succeeds", unanswered,
             unanswered == 1 ? "" : "s", unanswered == 1 ? "its" : "their",
             unanswered == 1 ? "it wrote" : "they wrote");
    mend_engine_log_line(srv->E, "warn", NULL, NULL, 0, "serve", msg);
  }
  for (conn *c = srv->conns; c; c = c->next)
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) h2o_socket_close(c->sock);
  uv_close((uv_handle_t *)&t, NULL);
  while (srv->conns) uv_run(loop, UV_RUN_ONCE);
  serve_linger_stop(&srv->lingering);
  while (srv->lingering) uv_run(loop, UV_RUN_ONCE);
  h2o_timeout_t *armed[] = {&srv->ctx.zero_timeout, &srv->ctx.one_sec_timeout,
                            &srv->ctx.hundred_ms_timeout, &srv->ctx.handshake_timeout,
                            &srv->ctx.http1.req_timeout, &srv->ctx.http2.idle_timeout,
                            &srv->ctx.http2.graceful_shutdown_timeout, &srv->ctx.proxy.io_timeout};
  for (size_t i = 0; i < sizeof armed / sizeof armed[0]; i++) unlink_all(armed[i]);
  h2o_context_dispose(&srv->ctx);
  uv_run(loop, UV_RUN_NOWAIT);
}

void mend_server_free(mend_server *srv) {
  if (!srv) return;
  mend_server_close(srv);
  if (srv->started) h2o_config_dispose(&srv->config);
  free(srv->token);
  free(srv->cors);
  free(srv->dashboard);
  free(srv->dashboard_csp);
  free(srv->process);
  serve_waits_free(srv->waits);
  free(srv);
}
