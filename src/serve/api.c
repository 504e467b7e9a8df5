/*
 * api: the JSON API under /api/v1 (docs/http-api.md): which path does what, the checks of
 * each request's fields, and the mapping of the engine's refusals to HTTP codes. Every
 * operation is the engine's own (src/engine/repair.c, events, starts) and every read the
 * store's JSON view, as the CLI and the C API use them. Must never: write to the store itself,
 * re-implement an operation, or match an engine message's text to choose a code.
 */
#include "serve_int.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "mend.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000

static const char *const RUN_STATUSES[] = {"running", "compensating", "succeeded", "compensated",
                                           "failed", "needs_attention", "resolved", NULL};

/* The query parameters of the endpoints that take any; every other endpoint takes none. A
 * parameter an endpoint does not know, or one given twice, is refused (400), never ignored:
 * a misspelt `limt` or a second `limit` would be answered as if not given. */
static const char *const RUNS_QUERY[] = {"status", "workflow", "since", "limit", "cursor", NULL};
static const char *const HISTORY_QUERY[] = {"after", "limit", "tail", NULL};
static const char *const RUN_QUERY[] = {"wait", NULL};
static const char *const PAGE_QUERY[] = {"after", "limit", NULL};

/* The longest long poll: under the idle timeouts of the proxies a client may be behind (60 s
 * is nginx's proxy_read_timeout), so that a wait is answered rather than cut. */
#define WAIT_MAX 60

/* 0 after replying 405, with the endpoint's own methods in Allow. */
static int refuse_method(serve_req *r, const char *allow, const char *takes) {
  h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_ALLOW, NULL, allow,
                 strlen(allow));
  h2o_iovec_t m = r->req->method;
  serve_error(r, 405, "method_not_allowed", "method %.*s is not served here: this endpoint takes"
              " %s", (int)m.len, m.base, takes);
  return 0;
}

/* 1 when the request's method is the one the endpoint takes; else 405 and 0. */
static int want_method(serve_req *r, int post) {
  if (r->other || r->post != post)
    return post ? refuse_method(r, "POST", "POST") : refuse_method(r, "GET, HEAD", "GET");
  return 1;
}

/* An endpoint that takes GET (a read) and POST (a write): 1 unless the method is another. */
static int want_either(serve_req *r) {
  return r->other ? refuse_method(r, "GET, HEAD, POST", "GET or POST") : 1;
}

/* Whether the request is of the method the endpoint takes and its query only of the parameters
 * known (NULL: none); else 0 after replying 405 or 400. */
static int want_query(serve_req *r, int post, const char *const *known, const char *what) {
  return want_method(r, post) && serve_query_only(r, known, what) == 0;
}

static int want(serve_req *r, int post) { return want_query(r, post, NULL, "this endpoint"); }

/* A store read that gave NULL: 404 for a missing run, 503 for the store's own failure. */
static void store_failed(serve_req *r) {
  mend_store *s = mend_engine_store(r->E);
  if (mend_store_not_found(s)) serve_error(r, 404, "not_found", "%s", mend_store_errmsg(s));
  else serve_error(r, 503, "storage", "%s", mend_store_errmsg(s));
}

/* An operation the engine refused: its reason chooses the code, its message is for people. */
static void refused(serve_req *r, const char *err) {
  switch (mend_engine_refusal(r->E)) {
    case MEND_REFUSED_NOT_FOUND: serve_error(r, 404, "not_found", "%s", err); break;
    case MEND_REFUSED_INVALID: serve_error(r, 400, "bad_request", "%s", err); break;
    case MEND_REFUSED_STORE: serve_error(r, 503, "storage", "%s", err); break;
    case MEND_REFUSED_BUSY: serve_error(r, 503, "busy", "%s", err); break;
    default: serve_error(r, 409, "conflict", "%s", err); break;
  }
}

/* A body field that must be a non-empty string: 0 and *out (NULL when absent and not
 * required), or -1 after replying 400 naming it. */
static int body_string(serve_req *r, json_t *body, const char *name, int required,
                       const char **out) {
  json_t *v = json_object_get(body, name);
  *out = NULL;
  if (!v || json_is_null(v)) {
    if (!required) return 0;
    serve_error(r, 400, "missing_field", "the body needs \"%s\"", name);
    return -1;
  }
  if (!json_is_string(v) || json_string_length(v) == 0 ||
      strlen(json_string_value(v)) != json_string_length(v)) {
    serve_error(r, 400, "bad_field", "\"%s\" must be a non-empty string", name);
    return -1;
  }
  *out = json_string_value(v);
  return 0;
}

/* body_string for a name or a key, at most `max` bytes (MEND_NAME_MAX, MEND_KEY_MAX): a longer
 * one is a value the field refuses, named as such, rather than the engine's refusal of the
 * operation (which names no field). */
static int body_name(serve_req *r, json_t *body, const char *name, int required, size_t max,
                     const char **out) {
  if (body_string(r, body, name, required, out)) return -1;
  if (*out && strlen(*out) > max) {
    serve_error(r, 400, "bad_field", "\"%s\" must be at most %zu bytes, got %zu", name, max,
                strlen(*out));
    return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------- runs */

/* The workflow `name` as this engine has it: loaded from --workflows, else the newest version
 * the database keeps. NULL after replying 404. */
static int workflow_here(serve_req *r, const char *name) {
  if (mend_engine_workflow(r->E, name)) return 1;
  json_t *versions = mend_store_workflows(mend_engine_store(r->E), name);
  if (!versions) { store_failed(r); return 0; }
  const char *v = json_string_value(json_object_get(json_array_get(versions, 0), "version"));
  char err[600] = "";
  int ok = v && mend_engine_load_version(r->E, name, v, err, sizeof err) != NULL;
  const char *failed = ok || v ? NULL : mend_engine_load_failure(r->E, name);
  /* 503: the request is right, the server cannot serve it until its file is fixed */
  if (failed)
    serve_error(r, 503, "workflow_failed_to_load", "workflow %s cannot start: its file %s.lua "
                "failed to load: %s", name, name, failed);
  else if (!ok && !v) {
    char broken[1024];
    int n = mend_engine_load_failures_named(r->E, broken, sizeof broken);
    serve_error(r, 404, "unknown_workflow", "no workflow %s: it is neither among the files this "
                "server loaded (--workflows) nor recorded in the database%s%s", name,
                n == 0 ? "" : n == 1 ? "; a file that failed to load may hold it: "
                                     : "; files that failed to load may hold it: ",
                n ? broken : "");
  }
  else if (!ok)
    serve_error(r, 409, "workflow_unavailable", "workflow %s version %s cannot be loaded: %s", name,
                v, err);
  json_decref(versions);
  return ok;
}

/* A start the engine refused: for its input (400), for a key that names another workflow's run
 * (409), or for the database: its own failure (503 storage), or another session's lock that
 * held it back before anything of it was recorded (503 busy: send it again). */
static void start_refused(serve_req *r, const char *err) {
  mend_refusal why = mend_engine_refusal(r->E);
  if (why == MEND_REFUSED_STORE) serve_error(r, 503, "storage", "%s", err);
  else if (why == MEND_REFUSED_BUSY) serve_error(r, 503, "busy", "%s", err);
  else if (why == MEND_REFUSED_STATE) serve_error(r, 409, "key_conflict", "%s", err);
  else serve_error(r, 400, "start_refused", "%s", err);
}

/* A keyed start whose key its batch looked up: answered once that batch is durable, with the
 * run that has the key then. */
typedef struct keyed_start {
  char id[MEND_RUN_ID_LEN];
  char *workflow, *key;
} keyed_start;

static void keyed_answer(serve_req *r, void *ud) {
  keyed_start *k = ud;
  char id[MEND_RUN_ID_LEN], err[1024];
  int existed = 0;
  if (mend_engine_start_outcome(r->E, k->workflow, k->key, k->id, id, &existed, err, sizeof err))
    start_refused(r, err);
  else
    serve_json(r, existed ? 200 : 201, json_pack("{s:s,s:s,s:b}", "id", id, "workflow", k->workflow,
                                                 "existed", existed));
}

static char *pool_copy(serve_req *r, const char *t) {
  size_t n = strlen(t) + 1;
  char *c = h2o_mem_alloc_pool(&r->req->pool, n);
  memcpy(c, t, n);
  return c;
}

static void start_run(serve_req *r) {
  static const char *const fields[] = {"workflow", "input", "key", NULL};
  json_t *body = serve_body(r, fields, "POST /api/v1/runs");
  if (!body) return;
  const char *name, *key;
  if (body_name(r, body, "workflow", 1, MEND_NAME_MAX, &name) ||
      body_name(r, body, "key", 0, MEND_KEY_MAX, &key) || !workflow_here(r, name)) {
    json_decref(body);
    return;
  }
  json_t *input = json_object_get(body, "input");
  lua_State *L = mend_engine_lua(r->E);
  if (input) mend_json_push(L, input);
  else lua_pushnil(L);
  char id[MEND_RUN_ID_LEN], err[1024];
  int existed = 0;
  /* Recorded for a worker to take (this process's, with --listen), in the open batch: the
   * answer waits for it, with the starts that came at the same time. One that existed may be
   * in that batch too (the same key twice at once). */
  int rc = mend_engine_start_value(r->E, L, name, lua_gettop(L), key, r->who, id, &existed,
                                   MEND_START_RECORD, err, sizeof err);
  lua_pop(L, 1);
  if (rc) {
    start_refused(r, err);
  } else if (existed == MEND_START_KEY_LATER) {
    keyed_start *k = h2o_mem_alloc_pool(&r->req->pool, sizeof *k);
    memcpy(k->id, id, sizeof k->id);
    k->workflow = pool_copy(r, name);
    k->key = pool_copy(r, key);
    serve_when_durable(r, keyed_answer, k);
  } else {
    serve_json_durable(r, existed ? 200 : 201, json_pack("{s:s,s:s,s:b}", "id", id, "workflow",
                                                         name, "existed", existed));
  }
  json_decref(body);
}

int serve_parse_cursor(const char *c, double *created, char *id, size_t idlen) {
  char *end;
  *created = strtod(c, &end);
  if (end == c || *end != '~' || !isfinite(*created)) return -1;
  size_t n = strlen(end + 1);
  if (n == 0 || n >= idlen) return -1;
  memcpy(id, end + 1, n + 1);
  return 0;
}

/* A whole number of the query from lo to hi into *out (dflt if absent): 0, or -1 after replying
 * 400 naming the parameter. */
int serve_query_count(serve_req *r, const char *name, long lo, long hi, long dflt, long *out) {
  const char *v;
  if (serve_query(r, name, &v)) return -1;
  *out = dflt;
  if (!v) return 0;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (!isdigit((unsigned char)v[0]) || *end || errno == ERANGE || n < lo || n > hi) {
    serve_error(r, 400, "bad_query", "%s must be a whole number from %ld to %ld, got \"%s\"",
                name, lo, hi, v);
    return -1;
  }
  *out = n;
  return 0;
}

/* A number of seconds in a query, as every number there is written: digits, with a fraction
 * of digits after one '.' ("1700000000.25"); -1 for anything else (strtod would take " 5",
 * "+5", "0x5", "1e3", "inf", ".5" and "5."). */
static double decimal(const char *v) {
  size_t digits = strspn(v, "0123456789");
  const char *rest = v + digits;
  if (*rest == '.') {
    size_t fraction = strspn(rest + 1, "0123456789");
    if (!fraction) return -1;
    rest += 1 + fraction;
  }
  if (!digits || *rest) return -1;
  double d = strtod(v, NULL);
  return isfinite(d) ? d : -1;
}

static void list_runs(serve_req *r) {
  const char *status, *workflow, *since_s, *cursor;
  long limit;
  if (serve_query(r, "status", &status) || serve_query(r, "workflow", &workflow) ||
      serve_query(r, "since", &since_s) || serve_query(r, "cursor", &cursor) ||
      serve_query_count(r, "limit", 1, LIST_MAX, LIST_DEFAULT, &limit))
    return;
  if (status) {
    int ok = 0;
    for (const char *const *s = RUN_STATUSES; *s; s++) ok |= strcmp(status, *s) == 0;
    if (!ok) {
      serve_error(r, 400, "bad_query", "status must be one of running, compensating, succeeded, "
                  "compensated, failed, needs_attention, resolved; got \"%s\"", status);
      return;
    }
  }
  if (workflow && !*workflow) {
    /* a client's filter variable left empty: listing every run would answer another question */
    serve_error(r, 400, "bad_query", "workflow is empty: give a workflow's name, or leave the "
                "parameter out");
    return;
  }
  double since = -1;
  if (since_s) {
    since = decimal(since_s);
    if (since < 0) {
      serve_error(r, 400, "bad_query",
                  "since must be a time in seconds since the epoch, got \"%s\"", since_s);
      return;
    }
  }
  double after = 0;
  char after_id[128];
  if (cursor && serve_parse_cursor(cursor, &after, after_id, sizeof after_id)) {
    serve_error(r, 400, "bad_query", "cursor \"%s\" is not one this server gave (next_cursor)",
                cursor);
    return;
  }
  json_t *runs = mend_store_runs_page(mend_engine_store(r->E), status, workflow, since, after,
                                      cursor ? after_id : NULL, (int)limit + 1);
  if (!runs) { store_failed(r); return; }
  json_t *next = json_null();
  if (json_array_size(runs) > (size_t)limit) {
    json_array_remove(runs, (size_t)limit);
    json_t *last = json_array_get(runs, (size_t)limit - 1);
    char buf[200];
    snprintf(buf, sizeof buf, "%.17g~%s", json_number_value(json_object_get(last, "created")),
             json_string_value(json_object_get(last, "id")));
    next = json_string(buf);
  }
  serve_json(r, 200, json_pack("{s:o,s:o}", "runs", runs, "next_cursor", next));
}

/* wait=S: seconds, a decimal number from 0 to WAIT_MAX; *seconds -1 when not given. 0, or -1
 * after replying 400. */
static int query_wait(serve_req *r, double *seconds) {
  const char *v;
  *seconds = -1;
  if (serve_query(r, "wait", &v)) return -1;
  if (!v) return 0;
  double s = decimal(v);
  if (s < 0 || s > WAIT_MAX) {
    serve_error(r, 400, "bad_query", "wait must be a number of seconds from 0 to %d, got \"%s\"",
                WAIT_MAX, v);
    return -1;
  }
  *seconds = s;
  return 0;
}

/* The run; with wait=S, once it has ended (src/serve/wait.c) or S seconds passed. */
int serve_run_links(mend_engine *E, json_t *run, const char *id) {
  char owner[128];
  int held = mend_engine_held_by(E, id, owner, sizeof owner);
  if (held < 0) return -1;
  if (held) json_object_set_new(run, "held_by", json_string(owner));
  json_t *children = mend_engine_children(E, id);
  if (!children) return -1;
  if (json_array_size(children)) json_object_set_new(run, "children", children);
  else json_decref(children);
  return 0;
}

static void get_run(serve_req *r, const char *id) {
  double wait;
  if (query_wait(r, &wait)) return;
  json_t *run = mend_store_run(mend_engine_store(r->E), id);
  if (!run) { store_failed(r); return; }
  if (wait < 0 || serve_run_ended(run) || wait == 0) {
    if (serve_run_links(r->E, run, id)) {
      json_decref(run);
      serve_error(r, 503, "storage", "%s", mend_store_errmsg(mend_engine_store(r->E)));
      return;
    }
  }
  if (wait < 0) { serve_json(r, 200, run); return; }
  if (serve_run_ended(run)) {   /* said once the end is durable (src/serve/wait.c) */
    json_object_set_new(run, "wait", json_string("ended"));
    serve_json_durable(r, 200, run);
    return;
  }
  if (wait == 0) {
    json_object_set_new(run, "wait", json_string("timeout"));
    serve_json(r, 200, run);
    return;
  }
  serve_wait(r, id, run, wait);
}

/* A page of a run's history, never the whole of a long one: the rows after seq `after`, at most
 * `limit` (MEND_HISTORY_PAGE when not given), or its last `tail`. One row more than asked is
 * read so that a Link rel="next" is given exactly when more rows follow the page. */
static void get_history(serve_req *r, const char *id) {
  long after, limit, tail;
  if (serve_query_count(r, "after", 0, LONG_MAX, 0, &after) ||
      serve_query_count(r, "limit", 1, MEND_HISTORY_PAGE_MAX, MEND_HISTORY_PAGE, &limit) ||
      serve_query_count(r, "tail", 1, MEND_HISTORY_PAGE_MAX, 0, &tail))
    return;
  const char *a = NULL, *l = NULL;   /* both read without error above */
  if (tail && !serve_query(r, "after", &a) && !serve_query(r, "limit", &l) && (a || l)) {
    serve_error(r, 400, "bad_query", "tail is the last rows: give it without %s",
                a ? "after" : "limit");
    return;
  }
  mend_store *s = mend_engine_store(r->E);
  json_t *h = mend_store_history_page(s, id, after, tail ? 0 : limit + 1, tail);
  if (!h) { store_failed(r); return; }   /* no such run: 404 */
  if (!tail && json_array_size(h) > (size_t)limit) {
    json_array_remove(h, (size_t)limit);
    long last =
        (long)json_integer_value(json_object_get(json_array_get(h, (size_t)limit - 1), "seq"));
    /* Made from the run's id, not the request's path: a path the router read leniently
     * ("//api/...") would make a reference to another host. The id is a run's (it has rows). */
    size_t cap = strlen(id) + 120;
    char *link = h2o_mem_alloc_pool(&r->req->pool, cap);
    int n = snprintf(link, cap, "</api/v1/runs/%s/history?after=%ld&limit=%ld>; rel=\"next\"", id,
                     last, limit);
    h2o_add_header(&r->req->pool, &r->req->res.headers, H2O_TOKEN_LINK, NULL, link, (size_t)n);
  }
  serve_json(r, 200, h);
}

/* A repair of a run no engine holds: made once the open batch is durable (another process's
 * write lock gone), taking the run over then (MEND_REPAIR_TAKE_LATER). */
typedef struct repair_later {
  char *id;
  const char *who;   /* the request's, in its pool: the answer's serve_req does not carry it */
  const char *note;  /* a resolve's, in its pool */
  int dlq;           /* 1 a dead-letter retry, 2 a resolve, else a cancel */
} repair_later;

static void cancel_now(serve_req *r, const char *id, int take_now);
static void dlq_retry_now(serve_req *r, const char *id, int take_now);
static void resolve_now(serve_req *r, const char *id, const char *note, int take_now);

static void repair_taking(serve_req *r, void *ud) {
  repair_later *k = ud;
  r->who = k->who;
  if (k->dlq == 1) dlq_retry_now(r, k->id, 1);
  else if (k->dlq == 2) resolve_now(r, k->id, k->note, 1);
  else cancel_now(r, k->id, 1);
}

static void repair_when_durable(serve_req *r, const char *id, const char *note, int dlq) {
  repair_later *k = h2o_mem_alloc_pool(&r->req->pool, sizeof *k);
  k->id = pool_copy(r, id);
  k->note = note ? pool_copy(r, note) : NULL;
  k->who = r->who;
  k->dlq = dlq;
  serve_when_durable(r, repair_taking, k);
}

static void cancel_now(serve_req *r, const char *id, int take_now) {
  char err[600] = "";
  /* In the open batch, answered once it is durable, as a start is. */
  int rc = mend_engine_cancel_record(r->E, id, r->who, take_now, err, sizeof err);
  if (rc < 0) { refused(r, err); return; }
  if (rc == MEND_REPAIR_TAKE_LATER) { repair_when_durable(r, id, NULL, 0); return; }
  /* 0: cancelled here (it compensates in this process); 1: its live worker was asked to;
   * 2: recorded for whoever takes it next. */
  static const char *const how[] = {"cancelling", "requested", "recorded"};
  json_t *o = json_pack("{s:s,s:s}", "id", id, "cancel", how[rc]);
  if (rc == 2 && err[0]) json_object_set_new(o, "why", json_string(err));
  serve_json_durable(r, 202, o);
}

/* A body that takes no field: {} or none. NULL after replying 400. */
static int no_body_fields(serve_req *r, const char *what) {
  static const char *const none[] = {NULL};
  json_t *body = serve_body(r, none, what);
  json_decref(body);
  return body != NULL;
}

static void cancel_run(serve_req *r, const char *id) {
  if (no_body_fields(r, "POST /api/v1/runs/{id}/cancel")) cancel_now(r, id, 0);
}

/* An event with a key whose key its batch looked up: answered once that batch is durable, as
 * sent or as a duplicate. Its ticket is given back with the request, answered or not. */
typedef struct keyed_event {
  mend_store *store;
  int ticket;
  char run[MEND_RUN_ID_LEN];
  char *name;
} keyed_event;

static void keyed_event_dispose(void *mem) {
  keyed_event *k = mem;
  mend_store_event_ticket_free(k->store, k->ticket);
}

static void keyed_event_answer(serve_req *r, void *ud) {
  keyed_event *k = ud;
  int dup = mend_store_event_outcome(k->store, k->ticket);
  if (dup < 0)
    serve_error(r, 503, "storage", "event %s to run %s: its batch was not written", k->name,
                k->run);
  else if (dup)
    serve_json(r, 200, json_pack("{s:s,s:s,s:b,s:b}", "run", k->run, "event", k->name, "sent", 0,
                                 "duplicate", 1));
  else
    serve_json(r, 202, json_pack("{s:s,s:s,s:b}", "run", k->run, "event", k->name, "sent", 1));
}

static void send_event(serve_req *r, const char *id) {
  static const char *const to_id[] = {"name", "data", "key", NULL};
  static const char *const to_key[] = {"run_key", "name", "data", "key", NULL};
  json_t *body = id ? serve_body(r, to_id, "POST /api/v1/runs/{id}/events")
                    : serve_body(r, to_key, "POST /api/v1/events");
  if (!body) return;
  const char *name, *key, *run_key = NULL;
  if (body_name(r, body, "name", 1, MEND_NAME_MAX, &name) ||
      body_name(r, body, "key", 0, MEND_KEY_MAX, &key) ||
      (!id && body_name(r, body, "run_key", 1, MEND_KEY_MAX, &run_key))) {
    json_decref(body);
    return;
  }
  json_t *data = json_object_get(body, "data");
  char *payload = data ? mend_json_dumps(data) : NULL;   /* its size counted as eng:signal's */
  char run_id[MEND_RUN_ID_LEN] = "", err[600] = "";
  /* In the open batch, answered once it is durable, as a start is. */
  int ticket = 0;
  int rc = mend_engine_record_event(r->E, id, run_key, name, payload, key, r->who, run_id,
                                    &ticket, err,
                                    sizeof err);
  free(payload);
  switch (rc) {
    case MEND_EVENT_LATER: {   /* sent, or a duplicate: known once its batch is durable */
      keyed_event *k = h2o_mem_alloc_shared(&r->req->pool, sizeof *k, keyed_event_dispose);
      k->store = mend_engine_store(r->E);
      k->ticket = ticket;
      memcpy(k->run, run_id, sizeof k->run);
      k->name = pool_copy(r, name);
      serve_when_durable(r, keyed_event_answer, k);
      break;
    }
    case 0:
      serve_json_durable(r, 202,
                         json_pack("{s:s,s:s,s:b}", "run", run_id, "event", name, "sent", 1));
      break;
    case 1:   /* the first may be in the open batch still */
      serve_json_durable(
          r, 200,
          json_pack("{s:s,s:s,s:b,s:b}", "run", run_id, "event", name, "sent", 0, "duplicate", 1));
      break;
    case MEND_EVENT_EINVAL: serve_error(r, 400, "bad_request", "%s", err); break;
    case MEND_EVENT_ENOTFOUND: serve_error(r, 404, "not_found", "%s", err); break;
    case MEND_EVENT_EENDED: serve_error(r, 409, "conflict", "%s", err); break;
    default:   /* held back by another session's lock, nothing of it recorded: send it again */
      if (mend_engine_lock_held(r->E)) serve_error(r, 503, "busy", "%s", err);
      else serve_error(r, 503, "storage", "%s", err);
      break;
  }
  json_decref(body);
}

/* ---------------------------------------------------------------- dead letters, breakers */

static void dlq_retry_now(serve_req *r, const char *id, int take_now) {
  char err[600] = "";
  int rc = mend_engine_dlq_retry_record(r->E, id, r->who, take_now, err, sizeof err);
  if (rc < 0) refused(r, err);
  else if (rc == MEND_REPAIR_TAKE_LATER) repair_when_durable(r, id, NULL, 1);
  else serve_json_durable(r, 202, json_pack("{s:s,s:s}", "id", id, "dlq", "retrying"));
}

static void resolve_now(serve_req *r, const char *id, const char *note, int take_now) {
  char err[600] = "";
  int rc = mend_engine_resolve_record(r->E, id, r->who, note, take_now, err, sizeof err);
  if (rc < 0) refused(r, err);
  else if (rc == MEND_REPAIR_TAKE_LATER) repair_when_durable(r, id, note, 2);
  else serve_json_durable(r, 200, json_pack("{s:s,s:s}", "id", id, "status", "resolved"));
}

static void dlq_op(serve_req *r, const char *id, const char *op) {
  if (strcmp(op, "retry") == 0) {
    if (no_body_fields(r, "POST /api/v1/dlq/{id}/retry")) dlq_retry_now(r, id, 0);
    return;
  }
  if (strcmp(op, "resolve") != 0) {
    serve_error(r, 404, "not_found", "no dead-letter operation %s (retry, resolve)", op);
    return;
  }
  static const char *const fields[] = {"note", NULL};
  json_t *body = serve_body(r, fields, "POST /api/v1/dlq/{id}/resolve");
  if (!body) return;
  const char *note;
  if (!body_string(r, body, "note", 1, &note)) resolve_now(r, id, note, 0);
  json_decref(body);
}

static void breaker_op(serve_req *r, const char *key, const char *op) {
  if (strcmp(op, "open") != 0 && strcmp(op, "close") != 0 && strcmp(op, "reset") != 0) {
    serve_error(r, 404, "not_found", "no breaker operation %s (open, close, reset)", op);
    return;
  }
  /* seconds is open's: a seconds sent to close or reset is unknown there, not a bad value;
   * null, as on every route, is a field not given (a typed client sends its optional ones) */
  static const char *const fields[] = {"seconds", NULL};
  int open = strcmp(op, "open") == 0;
  char what[48];
  snprintf(what, sizeof what, "POST /api/v1/breakers/{key}/%s", op);
  json_t *body = serve_body(r, fields, what);
  if (!body) return;
  json_t *sec = json_object_get(body, "seconds");
  double seconds = 0;
  if (!open && sec && !json_is_null(sec)) {
    serve_error(r, 400, "unknown_field", "unknown field \"seconds\": %s takes no field", what);
    json_decref(body);
    return;
  }
  if (sec && !json_is_null(sec)) {
    if (!json_is_number(sec) || !(json_number_value(sec) > 0)) {
      serve_error(r, 400, "bad_field", "\"seconds\" must be a number > 0");
      json_decref(body);
      return;
    }
    seconds = json_number_value(sec);
  }
  json_decref(body);
  char err[600] = "";
  mend_breaker_state state;
  /* In the open batch, answered once it is durable, as a start is. */
  if (mend_engine_breaker_record(r->E, key, op, seconds, r->who, &state, err, sizeof err)) {
    refused(r, err);
    return;
  }
  serve_json_durable(r, 200, json_pack("{s:s,s:s,s:s}", "key", key, "op", op, "state",
                                       mend_breaker_state_name(state)));
}

/* ---------------------------------------------------------------- routes */

static void index_page(serve_req *r) {
  serve_json(r, 200,
             json_pack("{s:s,s:[s,s,s,s,s,s,s,s,s,s,s,s,s,s,s,s]}", "api", "mend/v1", "endpoints",
                       "GET /api/v1/runs", "POST /api/v1/runs", "GET /api/v1/runs/{id}[?wait=S]",
                       "GET /api/v1/runs/{id}/history", "GET /api/v1/runs/{id}/events",
                       "POST /api/v1/runs/{id}/cancel", "POST /api/v1/runs/{id}/events",
                       "POST /api/v1/events", "GET /api/v1/dlq", "POST /api/v1/dlq/{id}/retry",
                       "POST /api/v1/dlq/{id}/resolve", "GET /api/v1/breakers",
                       "POST /api/v1/breakers/{key}/{open|close|reset}", "GET /api/v1/workflows",
                       "GET /api/v1/workflows/{name}", "GET /metrics"));
}

static void not_found(serve_req *r) {
  serve_error(r, 404, "not_found", "no such endpoint: %.*s (GET /api/v1 lists them)",
              (int)(r->req->query_at != SIZE_MAX ? r->req->query_at : r->req->path.len),
              r->req->path.base);
}

void serve_metrics(serve_req *r);

void serve_api(serve_req *r) {
  char **s = r->seg;
  int n = r->nseg;
  if (n == 1 && strcmp(s[0], "metrics") == 0) {
    /* a scraper may add parameters of its own (Prometheus' `params:`): ignored */
    if (want_method(r, 0)) serve_metrics(r);
    return;
  }
  if (n < 2 || strcmp(s[0], "api") != 0 || strcmp(s[1], "v1") != 0) { not_found(r); return; }
  s += 2;
  n -= 2;
  mend_store *st = mend_engine_store(r->E);
  json_t *list;
  if (n == 0) {
    if (want(r, 0)) index_page(r);
  } else if (strcmp(s[0], "runs") == 0) {
    if (n == 1) {
      if (!want_either(r)) return;
      if (r->post) { if (want(r, 1)) start_run(r); }
      else if (want_query(r, 0, RUNS_QUERY, "GET /api/v1/runs")) list_runs(r);
    } else if (n == 2) {
      if (want_query(r, 0, RUN_QUERY, "GET /api/v1/runs/{id}")) get_run(r, s[1]);
    } else if (n == 3 && strcmp(s[2], "history") == 0) {
      if (want_query(r, 0, HISTORY_QUERY, "GET /api/v1/runs/{id}/history")) get_history(r, s[1]);
    } else if (n == 3 && strcmp(s[2], "cancel") == 0) {
      if (want(r, 1)) cancel_run(r, s[1]);
    } else if (n == 3 && strcmp(s[2], "events") == 0) {
      if (!want_either(r)) return;
      if (r->post) { if (want(r, 1)) send_event(r, s[1]);
      } else if (want_query(r, 0, PAGE_QUERY, "GET /api/v1/runs/{id}/events"))
        serve_list_inbox(r, s[1]);
    } else {
      not_found(r);
    }
  } else if (strcmp(s[0], "events") == 0 && n == 1) {
    if (want(r, 1)) send_event(r, NULL);
  } else if (strcmp(s[0], "dlq") == 0 && (n == 1 || n == 3)) {
    if (n == 1 && want_query(r, 0, PAGE_QUERY, "GET /api/v1/dlq")) {
      serve_list_dlq(r);
    } else if (n == 3 && want(r, 1)) {
      dlq_op(r, s[1], s[2]);
    }
  } else if (strcmp(s[0], "breakers") == 0 && (n == 1 || n == 3)) {
    if (n == 1 && want(r, 0)) {
      if (!(list = mend_store_breakers(st))) store_failed(r);
      else serve_json(r, 200, list);
    } else if (n == 3 && want(r, 1)) {
      breaker_op(r, s[1], s[2]);
    }
  } else if (strcmp(s[0], "workflows") == 0 && n <= 2) {
    if (!want(r, 0)) return;
    if (!(list = mend_store_workflows(st, n == 2 ? s[1] : NULL))) { store_failed(r); return; }
    if (n == 2 && json_array_size(list) == 0) {
      json_decref(list);
      serve_error(r, 404, "not_found", "no workflow %s is recorded in the database", s[1]);
      return;
    }
    serve_json(r, 200, list);
  } else {
    not_found(r);
  }
}
