/*
 * metrics: /metrics in Prometheus' text format, read from the store's JSON views at each
 * scrape: runs by workflow and status (one aggregate query), the dead-letter queue's size,
 * each breaker's state, and the age of the oldest unfinished run. Must never keep counters
 * of its own (several processes share one database: the database is the truth) nor write.
 */
#include "serve_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf { char *p; size_t len, cap; int oom; } buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if (b->p && b->len + (size_t)n < b->cap) { b->len += (size_t)n; return; }
    size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)n;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return; }
    b->p = p;
    b->cap = cap;
  }
}

/* A label value with \, " and newlines escaped, as the format wants. */
static void put_label(buf *b, const char *s) {
  for (; s && *s; s++) {
    if (*s == '\\' || *s == '"') put(b, "\\%c", *s);
    else if (*s == '\n') put(b, "\\n");
    else put(b, "%c", *s);
  }
}

static const char *const STATUSES[] = {"running", "compensating", "succeeded", "compensated",
                                       "failed", "needs_attention", "resolved", NULL};

void serve_metrics(serve_req *r) {
  mend_store *s = mend_engine_store(r->E);
  buf b = {0};
  json_t *dlq = mend_store_dlq(s), *breakers = mend_store_breakers(s);
  json_t *counts = dlq && breakers ? mend_store_run_counts(s) : NULL;
  if (!counts) {
    serve_error(r, 503, "storage", "%s", mend_store_errmsg(s));
    goto done;
  }
  put(&b, "# HELP mend_runs Runs in the database by workflow and status (ended runs until"
          " pruned).\n# TYPE mend_runs gauge\n");
  double oldest = -1;
  long by_status[8] = {0};
  size_t k;
  json_t *row;
  json_array_foreach(counts, k, row) {
    const char *status = json_string_value(json_object_get(row, "status"));
    long n = (long)json_integer_value(json_object_get(row, "runs"));
    put(&b, "mend_runs{workflow=\"");
    put_label(&b, json_string_value(json_object_get(row, "workflow")));
    put(&b, "\",status=\"");
    put_label(&b, status);
    put(&b, "\"} %ld\n", n);
    for (int i = 0; status && STATUSES[i]; i++)
      if (strcmp(status, STATUSES[i]) == 0) by_status[i] += n;
    json_t *o = json_object_get(row, "oldest");
    if (json_is_number(o) && (oldest < 0 || json_number_value(o) < oldest)) oldest = json_number_value(o);
  }
  put(&b, "# HELP mend_runs_by_status Runs in the database by status.\n"
          "# TYPE mend_runs_by_status gauge\n");
  for (int i = 0; STATUSES[i]; i++) put(&b, "mend_runs_by_status{status=\"%s\"} %ld\n", STATUSES[i], by_status[i]);
  put(&b, "# HELP mend_runs_parked Runs that need a person: in the dead-letter queue.\n"
          "# TYPE mend_runs_parked gauge\nmend_runs_parked %zu\n", json_array_size(dlq));
  put(&b, "# HELP mend_dlq_size Runs in the dead-letter queue.\n# TYPE mend_dlq_size gauge\n");
  put(&b, "mend_dlq_size %zu\n", json_array_size(dlq));
  put(&b, "# HELP mend_oldest_unfinished_run_age_seconds Age of the oldest running or compensating"
          " run (0: none).\n# TYPE mend_oldest_unfinished_run_age_seconds gauge\n");
  put(&b, "mend_oldest_unfinished_run_age_seconds %.3f\n",
      oldest < 0 ? 0 : mend_engine_now(r->E) - oldest);
  put(&b, "# HELP mend_breaker_state Circuit breaker state: 0 closed, 1 half-open, 2 open.\n"
          "# TYPE mend_breaker_state gauge\n");
  json_array_foreach(breakers, k, row) {
    const char *st = json_string_value(json_object_get(row, "state"));
    int v = !st ? 0 : strcmp(st, "open") == 0 ? 2 : strcmp(st, "half_open") == 0 ? 1 : 0;
    put(&b, "mend_breaker_state{key=\"");
    put_label(&b, json_string_value(json_object_get(row, "key")));
    put(&b, "\"} %d\n", v);
  }
  if (b.oom) {
    serve_error(r, 500, "internal", "out of memory");
  } else {
    r->req->res.status = 200;
    r->req->res.reason = "OK";
    h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/plain; version=0.0.4; charset=utf-8"));
    h2o_send_inline(r->req, b.p, b.len);
  }
done:
  free(b.p);
  json_decref(dlq);
  json_decref(breakers);
  json_decref(counts);
}
