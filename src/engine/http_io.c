/*
 * http_io: the I/O thread of mend.http. Owns the thread (started at an engine's first request,
 * stopped and joined as the engine closes), its uv loop, libcurl's multi handle driven by that
 * loop (a uv_poll per socket curl watches, the connections' sockets it opens and closes for
 * curl, one uv_timer for curl's timer), curl's writes of an answer's body and header lines, and
 * the I/O thread's half of the hand-off: requests taken from `to_add` into the multi handle,
 * taken out again when the loop thread abandons them (`cancel`), and given back through `done`
 * with one wake of the engine's loop for a burst. The request's setup and what its answer
 * means are the loop thread's (http.c, http_call.c).
 * Must never: touch Lua, a run or the engine's loop but for its wake; read or write a request
 * the loop thread has (io_state IO_NONE or IO_DONE); block its loop; keep a poll handle past
 * its socket; hold mx across a call into curl that does I/O.
 */
#include "http_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* ---------------------------------------------------------------- the lists */

void mend__http_list_push(http_list *l, http_req *q) {
  q->io_next = NULL;
  q->io_prev = l->tail;
  if (l->tail) l->tail->io_next = q;
  else l->head = q;
  l->tail = q;
}

void mend__http_list_unlink(http_list *l, http_req *q) {
  if (q->io_prev) q->io_prev->io_next = q->io_next;
  else l->head = q->io_next;
  if (q->io_next) q->io_next->io_prev = q->io_prev;
  else l->tail = q->io_prev;
  q->io_prev = q->io_next = NULL;
}

/* ---------------------------------------------------------------- curl writes the answer */

size_t mend__http_on_body(char *data, size_t size, size_t n, void *ud) {
  http_req *q = ud;
  size_t k = size * n;
  if (q->len + k > q->max_bytes) { q->too_big = 1; return 0; }
  if (mend__http_grow(&q->out, &q->cap, q->len + k + 1)) return 0;
  memcpy(q->out + q->len, data, k);
  q->len += k;
  return k;
}

/* Headers of the final response only: a redirect's or a 100's are dropped when the next
 * status line comes. */
size_t mend__http_on_header(char *data, size_t size, size_t n, void *ud) {
  http_req *q = ud;
  size_t k = size * n;
  if (k >= 5 && strncmp(data, "HTTP/", 5) == 0) q->hlen = 0;
  if (q->hlen + k > q->max_bytes) { q->too_big = 1; return 0; }
  if (mend__http_grow(&q->hdr, &q->hcap, q->hlen + k + 1)) return 0;
  memcpy(q->hdr + q->hlen, data, k);
  q->hlen += k;
  q->hdr[q->hlen] = 0;
  return k;
}

/* ---------------------------------------------------------------- giving requests back */

/* Out of the multi handle, into `done` (mx held by the caller). 1: the engine's loop is to be
 * woken (no wake was pending). */
static int give_back(struct mend_http *H, http_req *q, CURLcode rc) {
  if (q->io_cancel) {
    mend__http_list_unlink(&H->cancel, q);
    q->io_cancel = 0;
  }
  q->io_state = IO_DONE;
  q->io_rc = rc;
  mend__http_list_push(&H->done, q);
  if (H->loop_woken) return 0;
  H->loop_woken = 1;
  return 1;
}

static void check_done(struct mend_http *H) {
  CURLMsg *m;
  int left, wake = 0;
  while ((m = curl_multi_info_read(H->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    http_req *q = NULL;
    CURL *easy = m->easy_handle;
    CURLcode rc = m->data.result;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&q);
    curl_multi_remove_handle(H->multi, easy);   /* m is no longer valid */
    H->in_multi--;
    uv_mutex_lock(&H->mx);
    wake |= give_back(H, q, rc);
    uv_mutex_unlock(&H->mx);
  }
  if (wake) mend__http_signal(H->done_fd);
}

/* ---------------------------------------------------------------- the loop drives curl */

static void sock_closed(uv_handle_t *h) { free(h->data); }

static void sock_close(http_sock *s) {
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, sock_closed);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  http_sock *s = p->data;
  struct mend_http *H = s->H;
  if (s->idle) {   /* a kept connection spoke between requests (closed, most likely): curl's
                    * check before it reuses the connection finds out; watched again then */
    uv_poll_stop(&s->poll);
    s->events = 0;
    return;
  }
  int flags = 0;
  if (status < 0) {   /* libuv stopped the handle (POLLERR): a later watch must start it */
    flags = CURL_CSELECT_ERR;
    s->events = 0;
  }
  if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  int running;
  curl_multi_socket_action(H->multi, s->fd, flags, &running);
  check_done(H);
}

static http_sock *sock_for(struct mend_http *H, curl_socket_t fd) {
  if (fd < 0) return NULL;
  if (fd >= H->nbyfd) {
    int n = H->nbyfd ? H->nbyfd : 64;
    while (n <= fd) n *= 2;
    http_sock **t = realloc(H->byfd, (size_t)n * sizeof *t);
    if (!t) return NULL;
    memset(t + H->nbyfd, 0, (size_t)(n - H->nbyfd) * sizeof *t);
    H->byfd = t;
    H->nbyfd = n;
  }
  http_sock *s = H->byfd[fd];
  if (s) return s;
  s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->fd = fd;
  s->H = H;
  if (uv_poll_init_socket(&H->io_loop, &s->poll, fd)) { free(s); return NULL; }
  s->poll.data = s;
  H->byfd[fd] = s;
  return s;
}

static void sock_drop(struct mend_http *H, curl_socket_t fd) {
  if (fd < 0 || fd >= H->nbyfd || !H->byfd[fd]) return;
  sock_close(H->byfd[fd]);
  H->byfd[fd] = NULL;
}

curl_socket_t mend__http_on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
  (void)purpose;
  struct mend_http *H = ud;
  curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd == CURL_SOCKET_BAD) return fd;
  sock_drop(H, fd);   /* none should be left for this number; if one is, it is not this socket's */
  http_sock *s = sock_for(H, fd);
  if (s) s->connection = 1;   /* else made when curl first watches it, closed when it stops */
  return fd;
}

int mend__http_on_close_socket(void *ud, curl_socket_t fd) {
  sock_drop(ud, fd);   /* while the number is still this socket's */
  return close(fd);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *ud, void *sockp) {
  (void)easy;
  struct mend_http *H = ud;
  http_sock *s = sockp;
  if (what == CURL_POLL_REMOVE) {
    if (s && s->connection) {
      s->idle = 1;
      if (s->events != UV_READABLE) {   /* writable would wake the loop at every turn */
        uv_poll_stop(&s->poll);
        s->events = 0;
      }
    } else if (s) {
      sock_drop(H, fd);
    }
    return 0;
  }
  if (!s) {
    s = sock_for(H, fd);
    if (!s) return -1;
    curl_multi_assign(H->multi, fd, s);
  }
  int ev = 0;
  if (what & CURL_POLL_IN) ev |= UV_READABLE;
  if (what & CURL_POLL_OUT) ev |= UV_WRITABLE;
  s->idle = 0;
  if (ev == s->events) return 0;   /* uv_poll_start takes the socket out of epoll and puts it back */
  uv_poll_start(&s->poll, ev, on_poll);
  s->events = ev;
  return 0;
}

static void on_timer(uv_timer_t *t) {
  struct mend_http *H = t->data;
  int running;
  curl_multi_socket_action(H->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_done(H);
}

/* curl asks for its timer; it is acted on from the loop, never from inside this callback. */
static int on_curl_timer(CURLM *multi, long ms, void *ud) {
  (void)multi;
  struct mend_http *H = ud;
  if (ms < 0) uv_timer_stop(&H->timer);
  else uv_timer_start(&H->timer, on_timer, (uint64_t)ms, 0);
  return 0;
}

/* ---------------------------------------------------------------- the loop thread's wake */

/* Requests to add, then those to take out: a request abandoned before the I/O thread took it
 * never reaches it (http.c takes it back from to_add), so a cancel always finds its request in
 * the multi handle. */
static void on_io_wake(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  struct mend_http *H = p->data;
  mend__http_wake_drain(H->io_fd);   /* before the lists: a wake after it is for later ones */
  uv_mutex_lock(&H->mx);
  if (H->stop) {
    uv_mutex_unlock(&H->mx);
    uv_stop(&H->io_loop);
    return;
  }
  /* Chained by io_take, the I/O thread's own link: once IO_MULTI a request may be put in
   * `cancel` by the loop thread (its io_prev and io_next), and its cancel comes with the next
   * wake, after it was added. */
  http_req *add = H->to_add.head;
  for (http_req *q = add; q; q = q->io_next) {
    q->io_state = IO_MULTI;
    q->io_take = q->io_next;
  }
  H->to_add.head = H->to_add.tail = NULL;
  H->io_woken = 0;
  uv_mutex_unlock(&H->mx);
  int wake = 0;
  for (http_req *q = add, *next; q; q = next) {
    next = q->io_take;
    if (curl_multi_add_handle(H->multi, q->easy) != CURLM_OK) {
      uv_mutex_lock(&H->mx);
      wake |= give_back(H, q, CURLE_FAILED_INIT);
      uv_mutex_unlock(&H->mx);
      continue;
    }
    if (++H->in_multi > H->max_in_multi) {
      H->max_in_multi = H->in_multi;
      curl_multi_setopt(H->multi, CURLMOPT_MAXCONNECTS, 4L * H->max_in_multi);
    }
  }
  uv_mutex_lock(&H->mx);
  while (H->cancel.head) {
    http_req *q = H->cancel.head;
    mend__http_list_unlink(&H->cancel, q);
    q->io_cancel = 0;
    uv_mutex_unlock(&H->mx);
    curl_multi_remove_handle(H->multi, q->easy);   /* may close its connection */
    H->in_multi--;
    uv_mutex_lock(&H->mx);
    wake |= give_back(H, q, CURLE_ABORTED_BY_CALLBACK);
  }
  uv_mutex_unlock(&H->mx);
  if (wake) mend__http_signal(H->done_fd);
}

int mend__http_io_wake(struct mend_http *H) {
  if (H->io_woken) return 0;
  H->io_woken = 1;
  return 1;
}

int mend__http_wake_fd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

void mend__http_signal(int fd) {
  uint64_t one = 1;
  ssize_t n = write(fd, &one, sizeof one);   /* EAGAIN only with 2^64-2 wakes pending */
  (void)n;
}

void mend__http_wake_drain(int fd) {
  uint64_t n;
  ssize_t k = read(fd, &n, sizeof n);   /* EAGAIN: nothing was pending */
  (void)k;
}

/* ---------------------------------------------------------------- start and stop */

static void io_main(void *arg) {
  struct mend_http *H = arg;
#ifdef __linux__
  prctl(PR_SET_NAME, "mend-http", 0, 0, 0);   /* a host's profiler tells it from the loop */
#endif
  uv_run(&H->io_loop, UV_RUN_DEFAULT);
}

int mend__http_io_start(struct mend_http *H) {
  if (uv_loop_init(&H->io_loop)) return -1;
  H->multi = curl_multi_init();
  if (!H->multi) goto fail_loop;
  H->io_fd = mend__http_wake_fd();
  if (H->io_fd < 0) goto fail_multi;
  if (uv_poll_init(&H->io_loop, &H->io_poll, H->io_fd)) goto fail_fd;
  H->io_poll.data = H;
  uv_poll_start(&H->io_poll, UV_READABLE, on_io_wake);
  uv_timer_init(&H->io_loop, &H->timer);
  H->timer.data = H;
  curl_multi_setopt(H->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(H->multi, CURLMOPT_SOCKETDATA, H);
  curl_multi_setopt(H->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(H->multi, CURLMOPT_TIMERDATA, H);
  if (uv_thread_create(&H->thread, io_main, H) == 0) return 0;
  uv_close((uv_handle_t *)&H->timer, NULL);
  uv_close((uv_handle_t *)&H->io_poll, NULL);
  uv_run(&H->io_loop, UV_RUN_NOWAIT);
fail_fd:
  close(H->io_fd);
fail_multi:
  curl_multi_cleanup(H->multi);
  H->multi = NULL;
fail_loop:
  uv_loop_close(&H->io_loop);
  return -1;
}

void mend__http_io_stop(struct mend_http *H) {
  uv_mutex_lock(&H->mx);
  H->stop = 1;
  uv_mutex_unlock(&H->mx);
  mend__http_signal(H->io_fd);
  uv_thread_join(&H->thread);
  /* The thread is gone: its loop, multi handle and the requests it had are this thread's. */
  for (http_req *q = H->reqs; q; q = q->next) {
    if (q->io_state == IO_MULTI) curl_multi_remove_handle(H->multi, q->easy);
    q->io_state = IO_NONE;
    q->io_cancel = 0;
  }
  H->to_add.head = H->to_add.tail = H->cancel.head = H->cancel.tail = NULL;
  H->done.head = H->done.tail = NULL;
  curl_multi_cleanup(H->multi);   /* closes the kept connections through on_close_socket */
  H->multi = NULL;
  for (int k = 0; k < H->nbyfd; k++)
    if (H->byfd[k]) sock_close(H->byfd[k]);
  free(H->byfd);
  H->byfd = NULL;
  H->nbyfd = 0;
  uv_timer_stop(&H->timer);
  uv_close((uv_handle_t *)&H->timer, NULL);
  uv_close((uv_handle_t *)&H->io_poll, NULL);
  uv_run(&H->io_loop, UV_RUN_NOWAIT);   /* the close callbacks */
  uv_loop_close(&H->io_loop);
  close(H->io_fd);
}
