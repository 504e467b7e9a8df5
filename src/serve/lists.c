/*
 * lists: the HTTP API's lists that grow without bound besides the runs, a page at a time: the
 * dead-letter queue (GET /api/v1/dlq) and a run's inbox (GET /api/v1/runs/{id}/events). Each
 * answers the JSON array it always did, at most `limit` entries (MEND_HISTORY_PAGE by default,
 * MEND_HISTORY_PAGE_MAX at most, as a history's page), and a Link rel="next" header exactly
 * when more follow, as a history does: a client that does not page reads the array as before.
 * Must never: read more than one entry past the page, or answer a page from a cursor it did
 * not give.
 */
#include "serve_int.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "mend.h"

/* The page's Link rel="next": `path` with after=`after` (percent-encoded: a '+' of an
 * exponent would be read back as a space) and the page's limit. */
static void link_next(serve_req *r, const char *path, const char *after, long limit) {
  size_t cap = strlen(path) + 3 * strlen(after) + 64;
  char *link = h2o_mem_alloc_pool(&r->req->pool, cap);
  size_t n = (size_t)snprintf(link, cap, "<%s?after=", path);
  for (const unsigned char *p = (const unsigned char *)after; *p && n + 4 < cap; p++) {
    if (isalnum(*p) || strchr("-._~", *p)) link[n++] = (char)*p;
    else n += (size_t)snprintf(link + n, cap - n, "%%%02X", *p);
  }
  n += (size_t)snprintf(link + n, cap - n, "&limit=%ld>; rel=\"next\"", limit);
  h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_LINK, NULL, link, n);
}

static int page_limit(serve_req *r, long *limit) {
  return serve_query_count(r, "limit", 1, MEND_HISTORY_PAGE_MAX, MEND_HISTORY_PAGE, limit);
}

/* The page cut to `limit`: 1 when one more was read (more follow), else 0. */
static int cut(json_t *list, long limit) {
  if (json_array_size(list) <= (size_t)limit) return 0;
  json_array_remove(list, (size_t)limit);
  return 1;
}

void serve_list_dlq(serve_req *r) {
  long limit;
  const char *after;
  if (page_limit(r, &limit) || serve_query(r, "after", &after)) return;
  double at = 0;
  char id[128];
  if (after && serve_parse_cursor(after, &at, id, sizeof id)) {
    serve_error(r, 400, "bad_query", "after \"%s\" is not one this server gave (the Link "
                "header's next page)", after);
    return;
  }
  mend_store *s = mend_engine_store(r->E);
  json_t *list = mend_store_dlq_page(s, at, after ? id : NULL, limit + 1);
  if (!list) {
    serve_error(r, 503, "storage", "%s", mend_store_errmsg(s));
    return;
  }
  if (cut(list, limit)) {
    json_t *last = json_array_get(list, (size_t)limit - 1);
    json_t *t = json_object_get(last, "at");
    char next[200];
    snprintf(next, sizeof next, "%.17g~%s", json_is_number(t) ? json_number_value(t) : -1.0,
             json_string_value(json_object_get(last, "run_id")));
    link_next(r, "/api/v1/dlq", next, limit);
  }
  serve_json(r, 200, list);
}

void serve_list_inbox(serve_req *r, const char *id) {
  long after, limit;
  if (serve_query_count(r, "after", 0, LONG_MAX, 0, &after) || page_limit(r, &limit)) return;
  mend_store *s = mend_engine_store(r->E);
  json_t *run = mend_store_run(s, id);
  if (!run) {
    if (mend_store_not_found(s)) serve_error(r, 404, "not_found", "%s", mend_store_errmsg(s));
    else serve_error(r, 503, "storage", "%s", mend_store_errmsg(s));
    return;
  }
  json_decref(run);
  json_t *list = mend_store_inbox_page(s, id, after, limit + 1);
  if (!list) {
    serve_error(r, 503, "storage", "%s", mend_store_errmsg(s));
    return;
  }
  int more = cut(list, limit);
  /* The store keeps a payload as JSON text; a client gets it as JSON. */
  size_t i;
  json_t *ev;
  json_array_foreach(list, i, ev) {
    const char *text = json_string_value(json_object_get(ev, "payload"));
    json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    if (v) json_object_set_new(ev, "payload", v);
  }
  if (more) {
    /* Made from the run's id, which has a row: never a path the router read leniently. */
    char path[200], seq[32];
    snprintf(path, sizeof path, "/api/v1/runs/%s/events", id);
    json_t *last = json_array_get(list, (size_t)limit - 1);
    snprintf(seq, sizeof seq, "%lld", (long long)json_integer_value(json_object_get(last, "seq")));
    link_next(r, path, seq, limit);
  }
  serve_json(r, 200, list);
}
