/*
 * metrics: /metrics in Prometheus' text format. Three sources: what this process's engine did
 * since it started (counters, read through mend_engine_*_counters: runs started and ended,
 * attempts, failures by kind, retries, commit batches and their latency as a histogram), and
 * what the database holds now (gauges, read from the store's JSON views at each scrape: runs
 * by workflow and status, the dead-letter queue's size, each breaker's state, the age of the
 * oldest unfinished run), and the long polls this server holds open now (its waiters' list,
 * counted where it is kept: wait.c). Must never keep counts of its own (the engine keeps
 * them; several processes share one database, whose state is read from it) nor write.
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

static const char *const PHASES[MEND_PHASES] = {"execute", "compensate"};
static const char *const KINDS[MEND_ERROR_KINDS] = {"retryable", "fatal", "compensable",
                                                    "timeout", "error"};

static void add_counts(mend_workflow_counters *sum, const mend_workflow_counters *c) {
  sum->runs_started += c->runs_started;
  for (int s = 0; s < MEND_RUN_STATUSES; s++) sum->runs_ended[s] += c->runs_ended[s];
  for (int p = 0; p < MEND_PHASES; p++) {
    sum->attempts[p] += c->attempts[p];
    sum->retries[p] += c->retries[p];
    for (int k = 0; k < MEND_ERROR_KINDS; k++) sum->failures[p][k] += c->failures[p][k];
  }
}

/* A workflow's versions summed under its name (the first version met stands for them all);
 * 0 for a name met before, whose sum was written already. */
static int sum_of(mend_engine *E, int i, const char **name, mend_workflow_counters *sum) {
  mend_workflow_counters c;
  const char *other;
  if (mend_engine_workflow_counters(E, i, name, &c)) return 0;
  for (int j = 0; j < i; j++)
    if (mend_engine_workflow_counters(E, j, &other, &c) == 0 && strcmp(other, *name) == 0) return 0;
  memset(sum, 0, sizeof *sum);
  for (int j = i; mend_engine_workflow_counters(E, j, &other, &c) == 0; j++)
    if (strcmp(other, *name) == 0) add_counts(sum, &c);
  return 1;
}

static int workflows_of(mend_engine *E) {
  mend_workflow_counters c;
  const char *name;
  int n = 0;
  while (mend_engine_workflow_counters(E, n, &name, &c) == 0) n++;
  return n;
}

/* One family of per-workflow counters: `line` writes a workflow's samples. */
typedef void (*family_fn)(buf *b, const char *wf, const mend_workflow_counters *c);

static void family(buf *b, mend_engine *E, const char *name, const char *help, family_fn line) {
  put(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
  int n = workflows_of(E);
  for (int i = 0; i < n; i++) {
    const char *wf;
    mend_workflow_counters c;
    if (sum_of(E, i, &wf, &c)) line(b, wf, &c);
  }
}

static void wf_label(buf *b, const char *metric, const char *wf) {
  put(b, "%s{workflow=\"", metric);
  put_label(b, wf);
  put(b, "\"");
}

static void started_line(buf *b, const char *wf, const mend_workflow_counters *c) {
  wf_label(b, "mend_runs_started_total", wf);
  put(b, "} %llu\n", (unsigned long long)c->runs_started);
}

static void ended_line(buf *b, const char *wf, const mend_workflow_counters *c) {
  for (int s = 2; s < MEND_RUN_STATUSES; s++) {   /* succeeded .. resolved */
    wf_label(b, "mend_runs_ended_total", wf);
    put(b, ",status=\"%s\"} %llu\n", STATUSES[s], (unsigned long long)c->runs_ended[s]);
  }
}

static void attempts_line(buf *b, const char *wf, const mend_workflow_counters *c) {
  for (int p = 0; p < MEND_PHASES; p++) {
    wf_label(b, "mend_step_attempts_total", wf);
    put(b, ",phase=\"%s\"} %llu\n", PHASES[p], (unsigned long long)c->attempts[p]);
  }
}

static void failures_line(buf *b, const char *wf, const mend_workflow_counters *c) {
  for (int p = 0; p < MEND_PHASES; p++)
    for (int k = 0; k < MEND_ERROR_KINDS; k++) {
      wf_label(b, "mend_step_failures_total", wf);
      put(b, ",phase=\"%s\",kind=\"%s\"} %llu\n", PHASES[p], KINDS[k],
          (unsigned long long)c->failures[p][k]);
    }
}

static void retries_line(buf *b, const char *wf, const mend_workflow_counters *c) {
  for (int p = 0; p < MEND_PHASES; p++) {
    wf_label(b, "mend_step_retries_total", wf);
    put(b, ",phase=\"%s\"} %llu\n", PHASES[p], (unsigned long long)c->retries[p]);
  }
}

/* What this process's engine did since it started: Prometheus' counters, reset by a restart. */
static void put_counters(buf *b, mend_engine *E) {
  family(b, E, "mend_runs_started_total", "Runs this process started (recorded), by workflow.",
         started_line);
  family(b, E, "mend_runs_ended_total", "Runs this process brought to an end status, by"
         " workflow and status (needs_attention: a dead letter; each end reached counts).",
         ended_line);
  family(b, E, "mend_step_attempts_total", "Step attempts this process began, by workflow and"
         " phase.", attempts_line);
  family(b, E, "mend_step_failures_total", "Step failures in this process, by workflow, phase"
         " and error kind.", failures_line);
  family(b, E, "mend_step_retries_total", "Step failures this process answered with a retry,"
         " by workflow and phase.", retries_line);
  mend_commit_counters cc;
  mend_engine_commit_counters(E, &cc);
  put(b, "# HELP mend_commit_batches_total Batches of transitions this process committed.\n"
         "# TYPE mend_commit_batches_total counter\nmend_commit_batches_total %llu\n",
      (unsigned long long)cc.batches);
  put(b, "# HELP mend_commit_latency_seconds From a batch handed to the store to its commit"
         " known to the engine.\n# TYPE mend_commit_latency_seconds histogram\n");
  unsigned long long cum = 0;
  for (int k = 0; k < MEND_COMMIT_BUCKETS; k++) {
    cum += cc.bucket[k];
    if (k < MEND_COMMIT_BUCKETS - 1)
      put(b, "mend_commit_latency_seconds_bucket{le=\"%g\"} %llu\n",
          (double)mend_commit_bucket_ns[k] / 1e9, cum);
    else
      put(b, "mend_commit_latency_seconds_bucket{le=\"+Inf\"} %llu\n", cum);
  }
  put(b, "mend_commit_latency_seconds_sum %.9f\nmend_commit_latency_seconds_count %llu\n",
      (double)cc.latency_ns / 1e9, (unsigned long long)cc.batches);
}

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
    if (json_is_number(o) && (oldest < 0 || json_number_value(o) < oldest))
      oldest = json_number_value(o);
  }
  put(&b, "# HELP mend_runs_by_status Runs in the database by status.\n"
          "# TYPE mend_runs_by_status gauge\n");
  for (int i = 0; STATUSES[i]; i++)
    put(&b, "mend_runs_by_status{status=\"%s\"} %ld\n", STATUSES[i], by_status[i]);
  /* One name for the queue's size: parked runs are, elsewhere in mend, runs moved out of
   * memory (README), which no gauge read from the database counts. */
  put(&b, "# HELP mend_dlq_size Runs in the dead-letter queue, waiting for a person.\n"
          "# TYPE mend_dlq_size gauge\n");
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
  put(&b, "# HELP mend_http_waiting_requests Requests held open by this server until their run"
          " ends (GET /api/v1/runs/{id}?wait=S).\n# TYPE mend_http_waiting_requests gauge\n"
          "mend_http_waiting_requests %d\n", serve_waits_count(serve_server_waits(r->srv)));
  put(&b, "# HELP mend_http_commit_waiting_requests Requests held open by this server until what"
          " they wrote is committed (another process holding the database's lock keeps them).\n"
          "# TYPE mend_http_commit_waiting_requests gauge\nmend_http_commit_waiting_requests %d\n",
      serve_server_commit_waiting(r->srv));
  put_counters(&b, r->E);
  if (b.oom) {
    serve_error(r, 500, "internal", "out of memory");
  } else {
    r->req->res.status = 200;
    r->req->res.reason = "OK";
    h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                   H2O_STRLIT("text/plain; version=0.0.4; charset=utf-8"));
    /* unset, h2o sends it chunked, and to an HTTP/1.0 client that asked to keep the
     * connection with neither a length nor a close: it waits for the idle timeout */
    r->req->res.content_length = b.len;
    h2o_send_inline(r->req, b.p, b.len);
  }
done:
  free(b.p);
  json_decref(dlq);
  json_decref(breakers);
  json_decref(counts);
}
