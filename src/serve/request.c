/*
 * request: the parts of a request read for the server and the API: its path segments and query
 * parameters percent-decoded, its body as a JSON object, who does it (X-Mend-Who and the peer),
 * whether it addresses loopback by name, whether its Content-Type is JSON. What a request may
 * do, the token and the limits are the server's (server.c); what it asks of the engine the
 * API's (api.c).
 * Must never: reply except with the 400 of a part that is malformed, keep anything past the
 * request's pool, or take a part it cannot read whole (a malformed escape, a NUL) as read.
 */
#include "serve_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "json.h"

#define WHO_MAX 64

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decodes s[0..n) into the pool ('+' as a space where plus); NULL when malformed or
 * when it holds a NUL. */
char *serve_decode(h2o_mem_pool_t *pool, const char *s, size_t n, int plus) {
  char *out = h2o_mem_alloc_pool(pool, n + 1), *o = out;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      if (i + 2 >= n) return NULL;
      int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
      if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return NULL;
      *o++ = (char)(hi * 16 + lo);
      i += 2;
    } else {
      *o++ = plus && s[i] == '+' ? ' ' : s[i];
    }
  }
  *o = 0;
  return out;
}

/* The name of the query's parameter p[0..n), percent-decoded ("" when it has none); NULL after
 * replying 400 for a malformed escape. */
static const char *param_name(serve_req *r, const char *p, size_t n) {
  if (!memchr(p, '%', n) && !memchr(p, '+', n)) {
    char *name = h2o_mem_alloc_pool(&r->req->pool, n + 1);
    memcpy(name, p, n);
    name[n] = 0;
    return name;
  }
  const char *name = serve_decode(&r->req->pool, p, n, 1);
  if (!name)
    serve_error(r, 400, "bad_query", "a query parameter's name has a malformed percent-escape");
  return name;
}

/* Calls each(r, name, value, value_len, ud) for every parameter of the query, in order (empty
 * ones, "a=1&&b=2", are none), until it returns nonzero; that, or -1 after replying 400. */
static int each_param(serve_req *r, int (*each)(serve_req *, const char *, const char *, size_t,
                                                void *), void *ud) {
  const char *p = r->query, *end = r->query + r->query_len;
  while (p < end) {
    const char *amp = memchr(p, '&', (size_t)(end - p));
    if (!amp) amp = end;
    if (amp > p) {
      const char *eq = memchr(p, '=', (size_t)(amp - p));
      const char *kend = eq ? eq : amp;
      const char *name = param_name(r, p, (size_t)(kend - p));
      if (!name) return -1;
      int rc = each(r, name, eq ? eq + 1 : NULL, eq ? (size_t)(amp - eq - 1) : 0, ud);
      if (rc) return rc;
    }
    p = amp + 1;
  }
  return 0;
}

typedef struct wanted {
  const char *name;
  const char **out;
} wanted;

static int take_value(serve_req *r, const char *name, const char *v, size_t n, void *ud) {
  wanted *w = ud;
  if (strcmp(name, w->name) != 0) return 0;
  *w->out = v ? serve_decode(&r->req->pool, v, n, 1) : "";
  if (*w->out) return 1;
  serve_error(r, 400, "bad_query", "the query parameter %s has a malformed percent-escape", name);
  return -1;
}

int serve_query(serve_req *r, const char *name, const char **out) {
  wanted w = {name, out};
  *out = NULL;
  return each_param(r, take_value, &w) < 0 ? -1 : 0;
}

typedef struct only {
  const char *const *known;
  const char *what;
  const char **seen;   /* the names before, in the pool */
  size_t nseen;
} only;

static int check_param(serve_req *r, const char *name, const char *v, size_t n, void *ud) {
  (void)v;
  (void)n;
  only *o = ud;
  int known = 0;
  for (const char *const *k = o->known; k && *k && !known; k++) known = strcmp(*k, name) == 0;
  if (!known) {
    char takes[200] = "none";
    size_t used = 0;
    for (const char *const *k = o->known; k && *k && used < sizeof takes; k++) {
      int w = snprintf(takes + used, sizeof takes - used, "%s%s", used ? ", " : "", *k);
      used = w < 0 ? sizeof takes : used + (size_t)w;
    }
    serve_error(r, 400, "bad_query", "unknown query parameter \"%s\": %s takes %s", name,
                o->what, takes);
    return -1;
  }
  for (size_t i = 0; i < o->nseen; i++) {
    if (strcmp(o->seen[i], name) == 0) {
      serve_error(r, 400, "bad_query", "the query parameter %s is given twice", name);
      return -1;
    }
  }
  o->seen[o->nseen++] = name;
  return 0;
}

int serve_query_only(serve_req *r, const char *const *known, const char *what) {
  size_t most = 1;   /* parameters: at most one more than the '&'s */
  for (size_t i = 0; i < r->query_len; i++) most += r->query[i] == '&';
  only o = {known, what, h2o_mem_alloc_pool(&r->req->pool, most * sizeof(char *)), 0};
  return each_param(r, check_param, &o) < 0 ? -1 : 0;
}

/* 0 when every key of body is one of known; else -1 after replying 400 unknown_field naming
 * it (bad_field is a known field's bad value: a client tells the two apart by the code). */
static int body_fields_known(serve_req *r, json_t *body, const char *const *known,
                             const char *what) {
  const char *name;
  json_t *v;
  json_object_foreach(body, name, v) {
    const char *const *k = known;
    while (*k && strcmp(*k, name) != 0) k++;
    if (*k) continue;
    char takes[256] = "";
    size_t used = 0;
    for (k = known; *k && used < sizeof takes; k++) {
      int w = snprintf(takes + used, sizeof takes - used, "%s%s", used ? ", " : "", *k);
      used = w < 0 ? sizeof takes : used + (size_t)w;
    }
    /* %.64s: a key is the client's text, of any length */
    serve_error(r, 400, "unknown_field", "unknown field \"%.64s\": %s takes %s", name, what,
                *known ? takes : "no field");
    return -1;
  }
  return 0;
}

json_t *serve_body(serve_req *r, const char *const *known, const char *what) {
  h2o_iovec_t b = r->req->entity;
  if (!b.base || b.len == 0) return json_object();
  json_error_t je;
  /* A key given twice would be read as its last: what the client meant is not known. */
  json_t *v = json_loadb(b.base, b.len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
  if (!v && json_error_code(&je) == json_error_duplicate_key) {
    serve_error(r, 400, "bad_json", "the request body gives a key twice: %s (line %d, column %d)",
                je.text, je.line, je.column);
    return NULL;
  }
  char big[300];
  if (!v && mend_json_too_big(b.base, b.len, &je, big, sizeof big)) {
    serve_error(r, 400, "bad_json", "the request body is not JSON: %s", big);
    return NULL;
  }
  if (!v) {
    serve_error(r, 400, "bad_json", "the request body is not JSON: %s (line %d, column %d)",
                je.text, je.line, je.column);
    return NULL;
  }
  if (!json_is_object(v)) {
    json_decref(v);
    serve_error(r, 400, "bad_json", "the request body must be a JSON object");
    return NULL;
  }
  if (body_fields_known(r, v, known, what) < 0) {
    json_decref(v);
    return NULL;
  }
  /* A field nested deeper than mend encodes from Lua would reach a step (an event's payload,
   * a run's input) that could neither return it nor encode it: refused here, as `mend signal
   * --data` and eng:signal refuse it. */
  const char *name;
  json_t *x;
  json_object_foreach(v, name, x) {
    if (mend_json_depth(x, MEND_JSON_MAX_DEPTH) > MEND_JSON_MAX_DEPTH) {
      serve_error(r, 400, "bad_field", "\"%.64s\" is nested deeper than %d levels",
                  name, MEND_JSON_MAX_DEPTH);
      json_decref(v);
      return NULL;
    }
  }
  return v;
}

static void peer_name(h2o_req_t *req, char *out, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = req->conn->callbacks->get_peername(req->conn, (struct sockaddr *)&ss);
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sl && ss.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    uv_ip4_name(a, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (sl && ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    uv_ip6_name(a, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  snprintf(out, len, "%s:%d", host, port);
}

/* Who does it: the name a client gives in X-Mend-Who (printable ASCII, at most 64 bytes), and
 * always where the request came from. NULL after replying 400. */
const char *serve_who(serve_req *r, const char *process, int with_token) {
  char peer[INET6_ADDRSTRLEN + 8], name[WHO_MAX + 1] = "";
  peer_name(r->req, peer, sizeof peer);
  ssize_t i = h2o_find_header_by_str(&r->req->headers, H2O_STRLIT("x-mend-who"), -1);
  if (i >= 0) {
    /* Two names are no one's: which would the history keep? */
    if (h2o_find_header_by_str(&r->req->headers, H2O_STRLIT("x-mend-who"), i) >= 0) {
      serve_error(r, 400, "bad_header", "X-Mend-Who is given twice: give one name");
      return NULL;
    }
    h2o_iovec_t v = r->req->headers.entries[i].value;
    /* White space around a field's value is not part of it (RFC 9110, 5.5); h2o drops only
     * the leading. */
    while (v.len > 0 && (v.base[v.len - 1] == ' ' || v.base[v.len - 1] == '\t')) v.len--;
    int ok = v.len > 0 && v.len <= WHO_MAX;
    for (size_t k = 0; ok && k < v.len; k++) ok = v.base[k] >= 0x20 && v.base[k] < 0x7f;
    if (!ok) {
      serve_error(r, 400, "bad_header", "X-Mend-Who must be 1 to %d printable ASCII characters",
                  WHO_MAX);
      return NULL;
    }
    memcpy(name, v.base, v.len);
    name[v.len] = 0;
  }
  char buf[200];
  snprintf(buf, sizeof buf, "%s%shttp %s (%s%s)", name, name[0] ? " via " : "", peer,
           process ? process : "mend serve", with_token ? ", token" : "");
  return h2o_strdup(&r->req->pool, buf, strlen(buf)).base;
}

/* Whether a request is addressed to this machine's loopback by name: Host localhost,
 * 127.0.0.0/8 or [::1] (any port), or no Host at all (h2o then puts its default host's in,
 * and no browser sends such a request). A page whose name an attacker's DNS turned to
 * 127.0.0.1 after it loaded (DNS rebinding) speaks to loopback as its own origin, JSON and
 * all; only the name it addresses gives it away. */
int serve_host_is_loopback(h2o_req_t *req) {
  h2o_iovec_t a = req->input.authority;
  if (a.base == (*req->conn->hosts)->authority.hostport.base) return 1;
  char host[INET6_ADDRSTRLEN + 1];
  const char *from = a.base, *to;
  if (a.len > 0 && a.base[0] == '[') {
    from++;
    to = memchr(from, ']', a.len - 1);
  } else {
    to = memchr(from, ':', a.len);
  }
  if (!to) to = a.base + a.len;
  size_t n = (size_t)(to - from);
  if (n == 0 || n >= sizeof host) return 0;
  memcpy(host, from, n);
  host[n] = 0;
  unsigned char addr[16];
  if (from != a.base) return inet_pton(AF_INET6, host, addr) == 1 &&
                             IN6_IS_ADDR_LOOPBACK((struct in6_addr *)addr);
  return strcasecmp(host, "localhost") == 0 ||
         (inet_pton(AF_INET, host, addr) == 1 && addr[0] == 127);
}

int serve_is_json_type(h2o_req_t *req) {
  ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
  if (i < 0) return 0;
  h2o_iovec_t v = req->headers.entries[i].value;
  static const char want[] = "application/json";
  return v.len >= sizeof want - 1 && strncasecmp(v.base, want, sizeof want - 1) == 0 &&
         (v.len == sizeof want - 1 || v.base[sizeof want - 1] == ';' ||
          v.base[sizeof want - 1] == ' ');
}

