/*
 * framing: the one check of a request's framing that h2o 2.2 does not make (RFC 9112, section
 * 6.3): a Content-Length given twice with different values, or given with a Transfer-Encoding.
 * h2o keeps neither header in req->headers and frames the body by the first Content-Length (or
 * by the Transfer-Encoding), so that what a proxy in front framed by another reading would be
 * taken here as the start of the next request: request smuggling. The header block is read
 * where h2o parsed it, at the start of the connection's input, which h2o consumes only once
 * the answer is sent. Must never: parse more of a request than those two headers (h2o parses
 * it), change the input h2o reads, or refuse a request that gives one length, written alike,
 * however often.
 */
#include "serve_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The value of header line [p, e) if its name is `name` (h2o lowercased the names it parsed, in
 * place: compared without case all the same), white space around it dropped; NULL if not. */
static const char *value_of(const char *p, const char *e, const char *name, size_t *vlen) {
  size_t n = strlen(name);
  if ((size_t)(e - p) <= n || strncasecmp(p, name, n) != 0 || p[n] != ':') return NULL;
  const char *v = p + n + 1;
  while (v < e && (*v == ' ' || *v == '\t')) v++;
  while (e > v && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
  *vlen = (size_t)(e - v);
  return v;
}

int serve_framing_refused(h2o_req_t *req, char *why, size_t len) {
  const h2o_conn_callbacks_t *cb = req->conn->callbacks;
  h2o_socket_t *sock = cb->get_socket ? cb->get_socket(req->conn) : NULL;
  if (!sock || !sock->input || !req->entity.base) return 0;
  const char *p = sock->input->bytes, *end = p + sock->input->size;
  /* the request's bytes from its request line up to its body, which starts past the block */
  if (req->entity.base > p && req->entity.base <= end) end = req->entity.base;
  const char *length = NULL, *coding = NULL;
  size_t length_len = 0, coding_len = 0;
  int lines = 0;
  while (p < end) {
    const char *e = memchr(p, '\n', (size_t)(end - p));
    if (!e) break;
    if (lines++ > 0) {
      if (e == p || (e == p + 1 && *p == '\r')) break;   /* the empty line: the block's end */
      size_t vl;
      const char *v = value_of(p, e, "content-length", &vl);
      if (v && length && (vl != length_len || memcmp(v, length, vl) != 0)) {
        snprintf(why, len, "the request gives Content-Length twice, %.*s and %.*s: its body's "
                 "length is not one (RFC 9112, 6.3)", (int)(length_len > 40 ? 40 : length_len),
                 length, (int)(vl > 40 ? 40 : vl), v);
        return 1;
      }
      if (v && !length) length = v, length_len = vl;
      const char *t = value_of(p, e, "transfer-encoding", &vl);
      if (t) coding = t, coding_len = vl;
    }
    p = e + 1;
  }
  if (length && coding) {
    snprintf(why, len, "the request gives both Content-Length (%.*s) and Transfer-Encoding "
             "(%.*s): its body's length is not one (RFC 9112, 6.3)",
             (int)(length_len > 40 ? 40 : length_len), length,
             (int)(coding_len > 40 ? 40 : coding_len), coding);
    return 1;
  }
  return 0;
}
