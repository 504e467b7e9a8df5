/*
 * tcp_server: mend attached to a libuv server's own loop (mend_options.uv_loop). Each line a
 * client sends starts a workflow run (examples/request.lua); when the run ends the server
 * answers that client with "RUN_ID STATUS\n". The workflow's "lookup" host function is
 * asynchronous: the server answers it from a timer on its loop, as it would a network call,
 * and the loop serves other clients meanwhile. One thread, one loop, no blocking.
 *
 *   tcp_server [--port N] [REQUEST_LUA]         serve on 127.0.0.1:N (default 7070) until ^C
 *   tcp_server --self-test N [REQUEST_LUA]      serve on a free port, connect a client on the
 *                                               same loop, send N lines, check the N answers
 *                                               (distinct run ids, all succeeded), within 20 s,
 *                                               and a line holding a NUL and an empty line
 *                                               each answered "error ..."
 * A line that cannot be a request (one holding a NUL byte, an empty one) is answered
 * "error ...\n" at once: the client gets one answer per line it sent.
 */
#define _POSIX_C_SOURCE 200809L
#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static uv_loop_t loop;
static mend_engine *E;
static uv_tcp_t server;

/* ---------------------------------------------------------------- connections */

typedef struct conn {
  uv_tcp_t tcp;
  char buf[8192];
  size_t len;
  int closed;
  int refs;          /* runs still to answer, plus one while open */
} conn;

static void conn_unref(conn *c) {
  if (--c->refs == 0) free(c);
}

static void conn_closed(uv_handle_t *h) { conn_unref(h->data); }

static void conn_close(conn *c) {
  if (c->closed) return;
  c->closed = 1;
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

/* A run waiting for its answer to be written to a connection. */
typedef struct waiter {
  char run_id[17];
  conn *c;
  struct waiter *next;
} waiter;

static waiter *waiters;

typedef struct write_req {
  uv_write_t req;
  char text[300];   /* the longest line sent: an error line, which must keep its newline */
} write_req;

static void written(uv_write_t *req, int status) {
  (void)status;
  free(req);
}

static void send_line(conn *c, const char *text) {
  if (c->closed) return;
  write_req *w = malloc(sizeof *w);
  snprintf(w->text, sizeof w->text, "%s", text);
  uv_buf_t b = uv_buf_init(w->text, (unsigned)strlen(w->text));
  if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, written)) free(w);
}

/* Run events: a finished run answers its client. */
static void on_event(void *ud, const char *json) {
  (void)ud;
  if (!strstr(json, "\"run_finished\"")) return;
  const char *id = strstr(json, "\"run_id\":\"");
  const char *st = strstr(json, "\"status\":\"");
  if (!id || !st) return;
  id += 10;
  st += 10;
  for (waiter **p = &waiters; *p; p = &(*p)->next) {
    waiter *w = *p;
    if (strncmp(w->run_id, id, 16) != 0) continue;
    char line[64];
    snprintf(line, sizeof line, "%s %.*s\n", w->run_id, (int)strcspn(st, "\""), st);
    send_line(w->c, line);
    *p = w->next;
    conn_unref(w->c);
    free(w);
    return;
  }
}

/* The line as a JSON string (quotes, backslashes, control characters escaped). */
static void json_string(char *out, size_t len, const char *s) {
  size_t n = 0;
  out[n++] = '"';
  for (; *s && n + 8 < len; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') { out[n++] = '\\'; out[n++] = (char)ch; }
    else if (ch < 0x20) n += (size_t)snprintf(out + n, len - n, "\\u%04x", ch);
    else out[n++] = (char)ch;
  }
  out[n++] = '"';
  out[n] = 0;
}

static void start_request(conn *c, const char *line) {
  char text[1100], input[1200];
  json_string(text, sizeof text, line);
  snprintf(input, sizeof input, "{\"line\":%s}", text);
  waiter *w = calloc(1, sizeof *w);
  if (mend_engine_start(E, "request", input, NULL, w->run_id, NULL) != MEND_OK) {
    char err[300];
    snprintf(err, sizeof err, "error %s\n", mend_engine_errmsg(E));
    send_line(c, err);
    free(w);
    return;
  }
  w->c = c;
  c->refs++;
  w->next = waiters;
  waiters = w;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn *c = h->data;
  *buf = uv_buf_init(c->buf + c->len, (unsigned)(sizeof c->buf - c->len - 1));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  conn *c = s->data;
  if (n < 0) { conn_close(c); return; }
  c->len += (size_t)n;
  char *line = c->buf, *end = c->buf + c->len, *nl;
  while ((nl = memchr(line, '\n', (size_t)(end - line)))) {
    size_t len = (size_t)(nl - line);
    if (len && line[len - 1] == '\r') len--;
    line[len] = 0;
    /* read as a C string it would be cut short at the NUL, its run never answered */
    if (memchr(line, 0, len)) send_line(c, "error a line holds a NUL byte\n");
    else if (!len) send_line(c, "error an empty line is no request\n");   /* it waited for one */
    else start_request(c, line);
    line = nl + 1;
  }
  c->len = (size_t)(end - line);
  memmove(c->buf, line, c->len);
  if (c->len == sizeof c->buf - 1) conn_close(c);   /* a line too long: drop the client */
}

static void on_connection(uv_stream_t *srv, int status) {
  if (status < 0) return;
  conn *c = calloc(1, sizeof *c);
  c->refs = 1;
  uv_tcp_init(&loop, &c->tcp);
  c->tcp.data = c;
  if (uv_accept(srv, (uv_stream_t *)&c->tcp) || uv_read_start((uv_stream_t *)&c->tcp, alloc_cb,
                                                               on_read))
    conn_close(c);
}

/* ---------------------------------------------------------------- the host function */

typedef struct lookup {
  uv_timer_t timer;
  mend_call *call;
  size_t length;
} lookup;

static void lookup_freed(uv_handle_t *h) { free(h->data); }

static void lookup_answer(uv_timer_t *t) {
  lookup *l = t->data;
  char result[64];
  snprintf(result, sizeof result, "{\"length\":%zu}", l->length);
  mend_call_return(l->call, result);
  uv_close((uv_handle_t *)t, lookup_freed);
}

/* lookup(word): answered 5 ms later from the loop, like a reply from another service. */
static void lookup_fn(void *ud, mend_call *call, const char *args) {
  (void)ud;
  lookup *l = calloc(1, sizeof *l);
  l->call = call;
  l->length = strlen(args) >= 4 ? strlen(args) - 4 : 0;   /* ["word"] */
  uv_timer_init(&loop, &l->timer);
  l->timer.data = l;
  uv_timer_start(&l->timer, lookup_answer, 5, 0);
}

/* ---------------------------------------------------------------- the self-test client */

static struct {
  uv_tcp_t tcp;
  uv_connect_t connect;
  uv_write_t write;
  uv_timer_t deadline;
  char *out;
  char in[1 << 16];
  size_t in_len;
  int want, got, bad, errors;
  char (*ids)[17];
} client;

static void finish(void) {
  uv_close((uv_handle_t *)&client.tcp, NULL);
  uv_close((uv_handle_t *)&client.deadline, NULL);
  uv_close((uv_handle_t *)&server, NULL);
}

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(client.in + client.in_len, (unsigned)(sizeof client.in - client.in_len - 1));
}

static void client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)s;
  (void)buf;
  if (n < 0) {
    fprintf(stderr, "tcp_server: the server closed the connection after %d answers\n", client.got);
    client.bad++;
    finish();
    return;
  }
  client.in_len += (size_t)n;
  client.in[client.in_len] = 0;
  char *line = client.in, *nl;
  while ((nl = strchr(line, '\n'))) {
    *nl = 0;
    char id[32], status[32];
    if (strcmp(line, "error a line holds a NUL byte") == 0 ||
        strcmp(line, "error an empty line is no request") == 0) {
      client.errors++;
      line = nl + 1;
      continue;
    }
    if (sscanf(line, "%31s %31s", id, status) != 2 || strlen(id) != 16 ||
        strcmp(status, "succeeded") != 0) {
      fprintf(stderr, "tcp_server: bad answer \"%s\"\n", line);
      client.bad++;
    } else {
      for (int i = 0; i < client.got; i++)
        if (strcmp(client.ids[i], id) == 0) {
          fprintf(stderr, "tcp_server: run id %s answered twice\n", id);
          client.bad++;
        }
      if (client.got < client.want) memcpy(client.ids[client.got], id, 17);
    }
    client.got++;
    line = nl + 1;
  }
  client.in_len = strlen(line);
  memmove(client.in, line, client.in_len + 1);
  if (client.got >= client.want && client.errors == 2) finish();
}

static void client_wrote(uv_write_t *w, int status) {
  (void)w;
  if (status < 0) { client.bad++; finish(); }
}

static void client_connected(uv_connect_t *req, int status) {
  (void)req;
  if (status < 0) {
    fprintf(stderr, "tcp_server: connect: %s\n", uv_strerror(status));
    client.bad++;
    finish();
    return;
  }
  static const char nul_line[] = "GET a\0b\n\n";   /* a NUL, an empty line, amid the requests */
  size_t cap = (size_t)client.want * 32 + sizeof nul_line + 1, len = 0;
  client.out = malloc(cap);
  for (int i = 0; i < client.want; i++) {
    len += (size_t)snprintf(client.out + len, cap - len, "GET item-%d\n", i);
    if (i == 0) {
      memcpy(client.out + len, nul_line, sizeof nul_line - 1);
      len += sizeof nul_line - 1;
    }
  }
  uv_buf_t b = uv_buf_init(client.out, (unsigned)len);
  uv_write(&client.write, (uv_stream_t *)&client.tcp, &b, 1, client_wrote);
  uv_read_start((uv_stream_t *)&client.tcp, client_alloc, client_read);
}

static void client_timeout(uv_timer_t *t) {
  (void)t;
  fprintf(stderr, "tcp_server: timed out with %d of %d answers, %d error lines\n", client.got,
          client.want, client.errors);
  client.bad++;
  finish();
}

/* ---------------------------------------------------------------- main */

static void usage(void) {
  fprintf(stderr, "usage: tcp_server [--port N] [REQUEST_LUA]\n"
                  "       tcp_server --self-test N [REQUEST_LUA]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int port = 7070, self_test = 0;
  const char *workflow = "examples/request.lua";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) port = atoi(argv[++i]);
    else if (strcmp(argv[i], "--self-test") == 0 && i + 1 < argc) self_test = atoi(argv[++i]);
    else if (argv[i][0] == '-') usage();
    else workflow = argv[i];
  }
  uv_loop_init(&loop);
  mend_options o;
  mend_options_init(&o);
  o.uv_loop = &loop;          /* mend runs on the server's loop */
  o.on_event = on_event;
  o.instruction_budget = 1000000;
  o.sandbox = 1;
  char err[512];
  if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) {
    fprintf(stderr, "tcp_server: %s\n", err);
    return 1;
  }
  mend_engine_register_function(E, "lookup", lookup_fn, NULL);
  if (mend_engine_load(E, workflow, NULL, 0) != MEND_OK) {
    fprintf(stderr, "tcp_server: %s\n", mend_engine_errmsg(E));
    return 1;
  }

  struct sockaddr_in addr;
  uv_ip4_addr("127.0.0.1", self_test ? 0 : port, &addr);
  uv_tcp_init(&loop, &server);
  int rc = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
  if (!rc) rc = uv_listen((uv_stream_t *)&server, 128, on_connection);
  if (rc) {
    fprintf(stderr, "tcp_server: listen: %s\n", uv_strerror(rc));
    return 1;
  }
  struct sockaddr_in bound;
  int namelen = sizeof bound;
  uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &namelen);
  port = ntohs(bound.sin_port);

  if (!self_test) {
    printf("tcp_server: listening on 127.0.0.1:%d; one workflow run per line\n", port);
    fflush(stdout);
    uv_run(&loop, UV_RUN_DEFAULT);
    mend_engine_free(E);
    return 0;
  }

  client.want = self_test;
  client.ids = calloc((size_t)self_test, sizeof *client.ids);
  uv_tcp_init(&loop, &client.tcp);
  uv_tcp_connect(&client.connect, &client.tcp, (const struct sockaddr *)&bound, client_connected);
  uv_timer_init(&loop, &client.deadline);
  uv_timer_start(&client.deadline, client_timeout, 20000, 0);
  uv_run(&loop, UV_RUN_DEFAULT);   /* returns when the client and the server have closed */

  int ok = !client.bad && client.got == client.want && client.errors == 2 && !waiters;
  printf("tcp_server: %d requests on 127.0.0.1:%d, %d answers, %d bad, %d error lines\n",
         client.want, port, client.got, client.bad, client.errors);
  mend_engine_free(E);
  uv_run(&loop, UV_RUN_DEFAULT);
  free(client.out);
  free(client.ids);
  if (uv_loop_close(&loop)) {
    fprintf(stderr, "tcp_server: handles left open on the loop\n");
    ok = 0;
  }
  return ok ? 0 : 1;
}
