/*
 * linger: the last stage of a connection closed by h2o after it refused a request whose body
 * it did not read (413, or 400 for the body's framing): the answer is already sent; the
 * sending side is shut after it, then what the client still sends is read and dropped until
 * it closes, for LINGER_MS at most. Closed at once instead, a socket with unread bytes makes
 * the kernel send a reset, and a client still writing its body (as most do: they read nothing
 * before the body is sent) loses the answer that was sent to it.
 * Must never: keep a byte it reads, hold a connection past LINGER_MS, hold more than
 * MAX_LINGERING at once (one past it is closed at once), or leave a handle on the loop once
 * serve_linger_stop's handles have closed.
 */
#include "serve_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINGER_MS 5000
#define MAX_LINGERING 64

struct serve_lingering {
  uv_tcp_t tcp;
  uv_timer_t timer;
  int handles;                 /* of the two, those not yet closed */
  serve_lingering **list, *prev, *next;
};

int serve_linger_keep(h2o_socket_t *sock) {
  int fd = sock ? h2o_socket_get_fd(sock) : -1;
  /* close-on-exec as libuv's own: a process a step starts meanwhile must not hold it open */
  return fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

static void closed(uv_handle_t *h) {
  serve_lingering *l = h->data;
  if (--l->handles > 0) return;
  if (l->prev) l->prev->next = l->next;
  else *l->list = l->next;
  if (l->next) l->next->prev = l->prev;
  free(l);
}

static void finish(serve_lingering *l) {
  if (uv_is_closing((uv_handle_t *)&l->tcp)) return;
  uv_close((uv_handle_t *)&l->tcp, closed);
  uv_close((uv_handle_t *)&l->timer, closed);
}

/* What is read is dropped: one buffer serves every lingering connection. */
static void alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  static char sink[64 << 10];
  (void)h;
  (void)suggested;
  *buf = uv_buf_init(sink, sizeof sink);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  if (n < 0) finish(s->data);
}

static void on_timeout(uv_timer_t *t) { finish(t->data); }

void serve_linger(uv_loop_t *loop, int fd, serve_lingering **list) {
  int count = 0;
  for (serve_lingering *l = *list; l; l = l->next) count++;
  serve_lingering *l = count < MAX_LINGERING ? calloc(1, sizeof *l) : NULL;
  if (!l) {
    close(fd);
    return;
  }
  shutdown(fd, SHUT_WR);
  uv_tcp_init(loop, &l->tcp);
  uv_timer_init(loop, &l->timer);
  l->tcp.data = l->timer.data = l;
  l->handles = 2;
  l->list = list;
  l->next = *list;
  if (*list) (*list)->prev = l;
  *list = l;
  if (uv_tcp_open(&l->tcp, fd) != 0) {
    close(fd);
    finish(l);
    return;
  }
  if (uv_read_start((uv_stream_t *)&l->tcp, alloc, on_read) != 0) {
    finish(l);
    return;
  }
  uv_timer_start(&l->timer, on_timeout, LINGER_MS, 0);
}

void serve_linger_stop(serve_lingering **list) {
  for (serve_lingering *l = *list; l; l = l->next) finish(l);
}
