/*
 * test_embed_sandbox: the limits and the sandbox a host puts around workflow code, through
 * mend.h alone: a hostile script (memory, a spin) stopped with the engine left usable, a
 * sandboxed workflow that cannot reach the OS, io, C modules or exec, a sandbox's HTTP
 * calls only to the hosts allowed, and no host loop kept running by a kept connection.
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest c_embed_sandbox,
 * under AddressSanitizer in c_sanitized), and against the installed library with pkg-config
 * and with find_package(mend) (tests/embed_*.sh). Its set-up is tests/embed_host.h's. Must
 * never: use more of mend than include/mend.h.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <dirent.h>
#include <mend.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "embed_host.h"

/* A script that allocates without bound or never yields is stopped with an error that says
 * why, parked as a workflow_error for a person, and the engine goes on running other runs. */
static void it_stops_hostile_scripts_and_stays_usable(void) {
  mend_options o;
  mend_options_init(&o);
  o.memory_limit = 32u << 20;
  /* Enough for the hog to reach the memory limit with pages mapped afresh, which are charged
   * to the budget (README: Limits and sandbox): 8k of them, some 30M instructions. */
  o.instruction_budget = 50000000;
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "greet", greet, NULL);
  load(E, "hog");
  load(E, "spin");
  load(E, "basic");
  char hog[17], spin[17], ok[17], st[32];
  start(E, "hog", NULL, hog);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, hog, st, sizeof st), "needs_attention");
  CHECK(run_has(E, hog, "memory limit", 0));
  /* What stops the spin is the budget, which its error names; no clock is read: under valgrind
   * on a loaded machine no bound that means anything holds. A spin never stopped would hold
   * run_all for ever: ctest's TIMEOUT for c_embed_* ends the program then. */
  start(E, "spin", NULL, spin);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, spin, st, sizeof st), "needs_attention");
  CHECK(run_has(E, spin, "instruction budget", 0));
  CHECK(run_has(E, spin, "\"reason\":\"workflow_error\"", 0));
  start(E, "basic", "{\"who\":\"after\"}", ok);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, ok, st, sizeof st), "succeeded");
  mend_engine_free(E);
}

/* Sandboxed workflow code has no shell, no files, no native modules; `require "mend"` works. */
static void it_sandboxes_workflow_code(void) {
  mend_options o;
  mend_options_init(&o);
  o.sandbox = 1;
  mend_engine *E = engine(&o);
  mend_engine_register_function(E, "greet", greet, NULL);
  load(E, "escape_os");
  load(E, "escape_io");
  load(E, "escape_c");
  load(E, "escape_exec");
  load(E, "basic");
  char os_run[17], io_run[17], c_run[17], exec_run[17], ok[17], st[32];
  start(E, "escape_os", NULL, os_run);
  start(E, "escape_io", NULL, io_run);
  start(E, "escape_c", NULL, c_run);
  start(E, "escape_exec", NULL, exec_run);
  start(E, "basic", "{\"who\":\"sandboxed\"}", ok);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, os_run, st, sizeof st), "failed");
  CHECK(run_has(E, os_run, "field 'execute'", 0));
  CHECK_STR(run_status(E, io_run, st, sizeof st), "failed");
  CHECK(run_has(E, io_run, "global 'io'", 0));
  CHECK_STR(run_status(E, c_run, st, sizeof st), "failed");
  CHECK(run_has(E, c_run, "global 'package'", 0));
  CHECK_STR(run_status(E, exec_run, st, sizeof st), "failed");
  CHECK(run_has(E, exec_run, "field 'exec'", 0));
  CHECK_STR(run_status(E, ok, st, sizeof st), "succeeded");
  mend_engine_free(E);
}

/* A tiny HTTP server on the host's loop: every request, once its headers are in, gets
 * "200 pong" and the connection is closed. It counts the requests it answered. */
typedef struct pong_conn { uv_tcp_t tcp; char buf[4096]; size_t len; uv_write_t w; } pong_conn;
static int pongs;
static const char pong_reply[] =
  "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\npong";

/* With pong_keep set it answers without closing, and the connection waits for the next
 * request (kept alive, as most servers do); its handles are marked with &pong_keep. */
static int pong_keep;
static const char pong_kept_reply[] = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npong";
static void pong_alloc(uv_handle_t *h, size_t n, uv_buf_t *b);
static void pong_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b);

static void pong_closed(uv_handle_t *h) { free(h); }
static void pong_written(uv_write_t *w, int status) {
  (void)status;
  if (pong_keep) {
    pong_conn *c = (pong_conn *)w->handle;
    c->len = 0;
    uv_read_start(w->handle, pong_alloc, pong_read);
    return;
  }
  uv_close((uv_handle_t *)w->handle, pong_closed);
}
static void pong_alloc(uv_handle_t *h, size_t n, uv_buf_t *b) {
  (void)n;
  pong_conn *c = (pong_conn *)h;
  *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof c->buf - 1 - c->len));
}
static void pong_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  (void)b;
  pong_conn *c = (pong_conn *)s;
  if (n < 0) { uv_close((uv_handle_t *)s, pong_closed); return; }
  c->len += (size_t)n;
  c->buf[c->len] = 0;
  if (!strstr(c->buf, "\r\n\r\n")) return;
  uv_read_stop(s);
  pongs++;
  uv_buf_t out = pong_keep ? uv_buf_init((char *)pong_kept_reply, sizeof pong_kept_reply - 1)
                           : uv_buf_init((char *)pong_reply, sizeof pong_reply - 1);
  uv_write(&c->w, s, &out, 1, pong_written);
}
static void pong_accept(uv_stream_t *server, int status) {
  if (status < 0) return;
  pong_conn *c = calloc(1, sizeof *c);
  uv_tcp_init(server->loop, &c->tcp);
  if (uv_accept(server, (uv_stream_t *)&c->tcp)) {
    uv_close((uv_handle_t *)&c->tcp, pong_closed);
    return;
  }
  if (pong_keep) {
    c->tcp.data = &pong_keep;
    uv_unref((uv_handle_t *)&c->tcp);   /* only the engine's handles may hold the loop */
  }
  uv_read_start((uv_stream_t *)&c->tcp, pong_alloc, pong_read);
}

/* The pong server listening on a free loopback port, and the step's input naming it. */
static void pong_listen(uv_loop_t *loop, uv_tcp_t *server, char *input, size_t len) {
  uv_tcp_init(loop, server);
  server->data = NULL;   /* libuv leaves it unset; pong_close_kept reads every handle's */
  struct sockaddr_in addr, bound;
  uv_ip4_addr("127.0.0.1", 0, &addr);
  CHECK_EQ_INT(uv_tcp_bind(server, (const struct sockaddr *)&addr, 0), 0);
  CHECK_EQ_INT(uv_listen((uv_stream_t *)server, 64, pong_accept), 0);
  int blen = sizeof bound;
  uv_tcp_getsockname(server, (struct sockaddr *)&bound, &blen);
  snprintf(input, len, "{\"url\":\"http://127.0.0.1:%d/ping\"}", ntohs(bound.sin_port));
}

/* Closes the connections the server kept (their data is &pong_keep). It is given every handle
 * on the loop: each one this test makes has its data set. */
static void pong_close_kept(uv_handle_t *h, void *ud) {
  (void)ud;
  if (h->data == &pong_keep && !uv_is_closing(h)) uv_close(h, pong_closed);
}

static int dog_bit;
static void on_dog(uv_timer_t *t) {
  dog_bit = 1;
  uv_stop(t->loop);
}

/* Mode (b) again, over a connection the server keeps open: the engine keeps it for the next
 * request, and the host's uv_run still returns once the run has ended. */
static void it_keeps_no_host_loop_running_with_a_kept_connection(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_tcp_t server;
  char input[128];
  pong_listen(&loop, &server, input, sizeof input);
  uv_unref((uv_handle_t *)&server);
  pong_keep = 1;
  mend_options o;
  mend_options_init(&o);
  o.uv_loop = &loop;
  mend_engine *E = engine(&o);
  load(E, "http_call");
  char id[17], st[32];
  start(E, "http_call", input, id);
  uv_timer_t dog;   /* unreferenced: it fires only if something else holds the loop */
  uv_timer_init(&loop, &dog);
  dog.data = NULL;   /* read by pong_close_kept's walk */
  uv_timer_start(&dog, on_dog, 5000, 0);
  uv_unref((uv_handle_t *)&dog);
  dog_bit = 0;
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_EQ_INT(dog_bit, 0);   /* uv_run returned on its own */
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  CHECK(run_has(E, id, "pong", 0));
  mend_engine_free(E);
  pong_keep = 0;
  uv_walk(&loop, pong_close_kept, NULL);
  uv_close((uv_handle_t *)&dog, NULL);
  uv_close((uv_handle_t *)&server, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_EQ_INT(uv_loop_close(&loop), 0);
}

/* A sandboxed engine calls over HTTP only the hosts the host allows by name; a refused host is
 * a fatal error naming it, and no request leaves. */
static void it_lets_a_sandbox_call_only_allowed_hosts(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_tcp_t server;
  char input[128];
  pong_listen(&loop, &server, input, sizeof input);
  static const char *const allow[] = {"payments.internal,127.0.0.1",
                                      "payments.internal,*.example.com", NULL};
  for (int k = 0; k < 3; k++) {
    mend_options o;
    mend_options_init(&o);
    o.sandbox = 1;
    o.uv_loop = &loop;
    o.http_allow = allow[k];
    mend_engine *E = engine(&o);
    load(E, "http_call");
    char id[17], st[32];
    start(E, "http_call", input, id);
    int before = pongs;
    while (mend_engine_in_flight_count(E) > 0) uv_run(&loop, UV_RUN_ONCE);
    if (k == 0) {
      CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
      CHECK(run_has(E, id, "pong", 0));
      /* the response's headers, made when read, are there for pairs and in the stored result */
      CHECK(run_has(E, id, "\"fields\":3", 0));
      CHECK(run_has(E, id, "\"length\":\"4\"", 0));
      CHECK(run_has(E, id, "\"content-length\":\"4\"", 0));
      CHECK(run_has(E, id, "GET http://127.0.0.1", 1));   /* the request, in the history */
      CHECK_EQ_INT(pongs, before + 1);
    } else {
      CHECK_STR(run_status(E, id, st, sizeof st), "failed");
      CHECK(run_has(E, id, "host \\\"127.0.0.1\\\" is not allowed", 0));
      CHECK_EQ_INT(pongs, before);
    }
    mend_engine_free(E);
  }
  /* A ticking host that sleeps as mend_engine_next_tick says still sees the answer come. */
  mend_options o;
  mend_options_init(&o);
  o.http_allow = "127.0.0.1";
  mend_engine *E = engine(&o);
  load(E, "http_call");
  char id[17], st[32];
  start(E, "http_call", input, id);
  double t0 = now_s();
  while (mend_engine_in_flight_count(E) > 0 && now_s() - t0 < 10) {
    CHECK_EQ_INT(mend_engine_tick(E, 0.005), MEND_OK);
    uv_run(&loop, UV_RUN_NOWAIT);   /* the server's turn */
    double next = mend_engine_next_tick(E);
    if (mend_engine_in_flight_count(E) == 0) break;
    if (next < 0) { CHECK(next >= 0); break; }   /* it would sleep for ever */
    struct timespec ts = {0, (long)((next < 0.05 ? next : 0.05) * 1e9)};
    nanosleep(&ts, NULL);
  }
  CHECK_STR(run_status(E, id, st, sizeof st), "succeeded");
  mend_engine_free(E);
  uv_close((uv_handle_t *)&server, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_EQ_INT(uv_loop_close(&loop), 0);   /* the engine closed every handle it had */
}

int main(void) {
  embed_host_begin("embed-sandbox");
  it_stops_hostile_scripts_and_stays_usable();
  it_sandboxes_workflow_code();
  it_lets_a_sandbox_call_only_allowed_hosts();
  it_keeps_no_host_loop_running_with_a_kept_connection();
  return embed_host_end("test_embed_sandbox");
}
