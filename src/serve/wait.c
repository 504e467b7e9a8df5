/*
 * wait: the long poll of GET /api/v1/runs/{id}?wait=S (docs/http-api.md): a request held open
 * until its run ends (an end state or the dead-letter queue, as `mend wait` and eng:wait end),
 * until S seconds pass, or until the server stops, then answered with the run as GET
 * /api/v1/runs/{id} gives it and a field "wait" saying which ("ended", "timeout", "stopping");
 * "ended" once the batch that holds the end is durable, as every answer that says a thing
 * happened waits for its commit.
 * The run may be executed by this process or by a `mend worker` of the same database: the end
 * is learnt from the store, as eng:wait learns it, on the loop. One timer serves every waiter:
 * at each tick each waited run is read once by its id (a point read), however many requests
 * wait on it; at most MAX_WAITERS wait at once, so a tick's reads are bounded and connections
 * are left for the requests that end the runs (an event, a cancel). (An aggregate over the
 * runs table as a change signal cost a full scan a tick: half a second with a million runs.)
 * A client that went away is noticed by a look at its socket (h2o reads nothing while a
 * request is in flight) and its waiter let go; a client that shut its sending side is taken
 * as gone, as nginx takes it (499). Must never: block the loop (no read but the store's
 * ordinary point reads, no sleep), read a waited run twice a tick, keep a waiter past its
 * request (h2o disposes of it with the request's pool), or leave its timer on the loop after
 * the server closed.
 */
#include "serve_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define TICK_MS 200           /* the waited runs read while anyone waits */
#define PROBE_MS 1000         /* the clients' sockets looked at */

typedef struct waiter {
  serve_waits *w;             /* NULL once answered or given up */
  h2o_req_t *req;
  char *id;                   /* in the request's pool */
  uint64_t deadline;          /* the loop's ms */
  struct waiter *prev, *next;
} waiter;

struct serve_waits {
  mend_server *srv;
  mend_engine *E;
  uv_timer_t timer;
  int timer_on, closed;
  waiter *list;
  int n;
  uint64_t next_probe;
};

static int is_final(const char *st) {
  return st && (strcmp(st, "succeeded") == 0 || strcmp(st, "compensated") == 0 ||
                strcmp(st, "failed") == 0 || strcmp(st, "needs_attention") == 0 ||
                strcmp(st, "resolved") == 0);
}

int serve_run_ended(const json_t *run) {
  return is_final(json_string_value(json_object_get(run, "status")));
}

static void unlink_waiter(waiter *x) {
  serve_waits *w = x->w;
  if (x->prev) x->prev->next = x->next;
  else w->list = x->next;
  if (x->next) x->next->prev = x->prev;
  x->w = NULL;
  w->n--;
}

/* h2o frees the request (answered, or its connection closed): nothing is due. */
static void waiter_dispose(void *mem) {
  waiter *x = mem;
  if (x->w) unlink_waiter(x);
}

/* Answers x with run (stolen; NULL: the store's failure or the run gone, from the store's
 * last error) and how the wait ended. */
static void answer(waiter *x, json_t *run, const char *how) {
  serve_waits *w = x->w;
  unlink_waiter(x);
  serve_req r = {.req = x->req, .srv = w->srv, .E = w->E};
  if (!run) {
    mend_store *s = mend_engine_store(w->E);
    if (mend_store_not_found(s)) serve_error(&r, 404, "not_found", "%s", mend_store_errmsg(s));
    else serve_error(&r, 503, "storage", "%s", mend_store_errmsg(s));
    return;
  }
  if (serve_run_links(w->E, run, x->id)) {
    json_decref(run);
    serve_error(&r, 503, "storage", "%s", mend_store_errmsg(mend_engine_store(w->E)));
    return;
  }
  /* a read sees this process's open batch: the end may not be committed yet */
  int ended = strcmp(how, "ended") == 0;
  json_object_set_new(run, "wait", json_string(how));
  if (ended) serve_json_durable(&r, 200, run);
  else serve_json(&r, 200, run);
}

/* 1 when the client of x closed its end (or its socket failed): no answer can reach it. */
static int client_gone(waiter *x) {
  int fd = serve_req_fd(x->w->srv, x->req);
  if (fd < 0) return 1;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* The run id, read this tick: runs (an object by id; NULL: none could be made) keeps each
 * read for the waiters after that wait on the same run. A reference of the caller's; NULL when
 * the read failed (the store's error is then current: answered at once). */
static json_t *read_once(serve_waits *w, json_t *runs, const char *id) {
  json_t *run = runs ? json_object_get(runs, id) : NULL;
  if (run) return json_incref(run);
  run = mend_store_run(mend_engine_store(w->E), id);
  if (run && runs) json_object_set(runs, id, run);   /* not kept (no memory): read again */
  return run;
}

static void stop_timer(serve_waits *w) {
  if (w->timer_on) uv_timer_stop(&w->timer);
  w->timer_on = 0;
}

static void tick(uv_timer_t *t) {
  serve_waits *w = t->data;
  uint64_t now = uv_now(t->loop);
  if (now >= w->next_probe) {
    w->next_probe = now + PROBE_MS;
    for (waiter *x = w->list, *next; x; x = next) {
      next = x->next;
      if (!client_gone(x)) continue;
      mend_server *srv = w->srv;
      unlink_waiter(x);
      serve_abandon(srv, x->req);   /* h2o ends the request; its pool's dispose finds x let go */
    }
  }
  json_t *runs = json_object();
  for (waiter *x = w->list, *next; x; x = next) {
    next = x->next;
    int due = now >= x->deadline;
    json_t *run = read_once(w, runs, x->id);
    if (!run) answer(x, NULL, NULL);
    else if (serve_run_ended(run)) answer(x, json_deep_copy(run), "ended");
    else if (due) answer(x, json_deep_copy(run), "timeout");
    json_decref(run);
  }
  json_decref(runs);
  if (!w->list) stop_timer(w);
}

serve_waits *serve_waits_new(mend_server *srv, mend_engine *E) {
  serve_waits *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->srv = srv;
  w->E = E;
  uv_timer_init(mend_engine_loop(E), &w->timer);
  w->timer.data = w;
  return w;
}

void serve_wait(serve_req *r, const char *id, json_t *run, double seconds) {
  serve_waits *w = serve_server_waits(r->srv);
  if (!w) {
    json_decref(run);
    serve_error(r, 500, "internal", "out of memory");
    return;
  }
  if (w->closed) {   /* a request that came on an open connection as the server stops */
    json_object_set_new(run, "wait", json_string("stopping"));
    serve_json(r, 200, run);
    return;
  }
  if (w->n >= MAX_WAITERS) {   /* the rest of the connections are for the requests that end runs */
    json_object_set_new(run, "wait", json_string("busy"));
    serve_json(r, 200, run);
    return;
  }
  json_decref(run);
  waiter *x = h2o_mem_alloc_shared(&r->req->pool, sizeof *x, waiter_dispose);
  memset(x, 0, sizeof *x);
  size_t n = strlen(id) + 1;
  x->id = h2o_mem_alloc_pool(&r->req->pool, n);
  memcpy(x->id, id, n);
  x->req = r->req;
  x->w = w;
  uint64_t now = uv_now(mend_engine_loop(r->E));
  x->deadline = now + (uint64_t)(seconds * 1000.0 + 0.5);
  x->next = w->list;
  if (x->next) x->next->prev = x;
  w->list = x;
  w->n++;
  if (!w->timer_on) {
    w->timer_on = 1;
    w->next_probe = now + PROBE_MS;
    uv_timer_start(&w->timer, tick, TICK_MS, TICK_MS);
  }
}

int serve_waits_count(const serve_waits *w) { return w ? w->n : 0; }

void serve_waits_stop(serve_waits *w) {
  if (!w || w->closed) return;
  w->closed = 1;
  json_t *runs = json_object();
  while (w->list) {
    waiter *x = w->list;
    json_t *run = read_once(w, runs, x->id);
    answer(x, run ? json_deep_copy(run) : NULL, serve_run_ended(run) ? "ended" : "stopping");
    json_decref(run);
  }
  json_decref(runs);
  stop_timer(w);
  uv_close((uv_handle_t *)&w->timer, NULL);
}

void serve_waits_free(serve_waits *w) {
  if (!w) return;
  free(w);
}
