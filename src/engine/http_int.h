/*
 * http_int: what the parts of mend.http share (http.c: the requests on the loop thread and what
 * their answers mean; http_io.c: the I/O thread that performs them, curl's multi handle driven
 * by a uv loop of its own; http_call.c: a step's call read and checked, and its request set up;
 * http_resp.c: the response table and the reading of header lines), and which thread owns
 * what. Must never: be included outside src/engine/http*.c.
 */
#ifndef MEND_HTTP_INT_H
#define MEND_HTTP_INT_H

#include "engine_int.h"

#include <curl/curl.h>

#define HTTP_MAX_BYTES (16u << 20)
#define HTTP_TIMEOUT 60.0           /* seconds, the whole request, unless the call says */
#define HTTP_CONNECT_TIMEOUT 10.0
#define HTTP_MAX_CODES 16
#define HTTP_DETAIL_MAX 4000        /* what an attempt's requests may add to its history row */
#define HTTP_BODY_IN_MESSAGE 200

/* URLs checked lately, with what they became: a step calls the same few URLs again and again,
 * and checking one (a parse, four parts copied, the URL printed again) was two thirds of a
 * call's setup. Only allowed URLs are kept, and the allow-list is fixed for an engine's life,
 * so a hit stands for the check. */
#define HTTP_URL_MEMO 8
/* A URL a call gave, checked: its text, the same without credentials (for messages and
 * history), and curl's parse of it, handed to curl with CURLOPT_CURLU so that curl does not
 * parse the text again and print it anew at each request (12k instructions of a W9 request,
 * a sixth of the raw client's). The memo and each request using it hold a reference: curl
 * reads the parse until its request is taken out of the multi handle, so a URL pushed out of
 * the memo meanwhile lives on until the last request lets go. */
typedef struct http_url {
  char *url, *clean;
  CURLU *uh;
  int refs;
} http_url;
void mend__http_url_drop(http_url *u);   /* NULL: nothing */
/* Easy handles kept between requests: making and freeing one per request cost 15k
 * instructions, a sixth of curl's share of a request. At most this many idle. An idle handle
 * holds the options every request has (set_fixed) and none of the options only some calls
 * set (marked by http_req.dirty, and reset away when such a request ends): the next request
 * sets each of its own options anew (see setup), so nothing of one reaches the next, without
 * a reset and the fixed options set again each time (4k instructions a request). A handle
 * idles in its request's structure, with the buffers of the answer's body and headers (up to
 * HTTP_KEEP_BUFFER bytes each): allocating them at each request was 2k instructions, 4 KiB
 * blocks being slow to come by in malloc. */
#define HTTP_IDLE_EASY 256
#define HTTP_KEEP_BUFFER (64u << 10)

/* Two threads share a struct mend_http: the engine's loop thread (everything that touches Lua
 * and the run: the call, the URL memo, a request's easy handle set up, the idle handles, the
 * answer) and the I/O thread (http_io.c: the multi handle, its sockets and timer, on a uv loop
 * of its own). A request goes to the I/O thread through `to_add`, and comes back through
 * `done` once curl is done with it or it was taken out of the multi handle; an easy handle is
 * set up on the loop thread and performed on the I/O thread, never both at once. The lists,
 * each request's io_* fields and the wake flags are under `mx`; the rest of a request is the
 * loop thread's but while the I/O thread has it (io_state IO_ADD or IO_MULTI), when curl
 * writes the answer's buffers and errbuf. */
enum { IO_NONE, IO_ADD, IO_MULTI, IO_DONE };
typedef struct http_list { struct http_req *head, *tail; } http_list;

struct mend_http {
  mend_engine *E;
  /* the loop thread's */
  struct http_req *reqs;     /* every request not freed yet, whichever thread has it */
  http_url *memo[HTTP_URL_MEMO];
  int memo_next;
  struct http_req *idle[HTTP_IDLE_EASY];
  int nidle;
  int out;                   /* requests the I/O thread has or has given back, not yet taken */
  /* On the engine's loop: the I/O thread's wake when it gives requests back (an eventfd,
   * watched). Referenced while requests are out, so that a run() waits for them;
   * unreferenced otherwise, so that a host's uv_run returns once its runs have ended. */
  uv_poll_t *done_poll;
  int done_fd;
  /* under mx */
  uv_mutex_t mx;
  http_list to_add, cancel, done;
  int io_woken, loop_woken;  /* a wake was sent and not yet taken: no second one */
  int stop;                  /* the engine is closing: the I/O thread returns */
  /* the I/O thread's, from its start to its join */
  uv_thread_t thread;
  uv_loop_t io_loop;
  uv_poll_t io_poll;         /* the loop thread's wake (io_fd): requests to add or take out */
  int io_fd;
  CURLM *multi;
  uv_timer_t timer;
  /* A poll handle per socket curl watches, by number. A connection's socket (opened and
   * closed through on_open_socket and on_close_socket) keeps its handle until it is closed,
   * and between requests keeps watching for reading (idle): a kept-alive connection's next
   * request finds its interest as it was, where stopping and starting the handle around each
   * request cost 1.8 epoll_ctl calls a W9 request (libuv's uv_poll_start takes the socket out
   * of epoll before putting it back). An idle socket that becomes readable (the server closed
   * it) is stopped then; curl's own check before reusing a connection finds it closed.
   * Any other socket's handle (a resolver's) is closed when curl stops watching it: curl
   * closes those itself, and a handle must never outlive its number's socket, or closing it
   * later would take the number's next owner out of the loop's epoll set. */
  struct http_sock **byfd;
  int nbyfd;
  /* Connections kept open for later requests: four per request at the most ever in flight.
   * Curl's own default follows the requests in flight now, and an answer's burst (dozens of
   * transfers ended in one poll, the next ones started a turn later) made it close a third of
   * W9's connections and open them again. */
  int in_multi, max_in_multi;
};

typedef struct http_sock {
  uv_poll_t poll;
  curl_socket_t fd;
  struct mend_http *H;
  int connection;   /* opened by on_open_socket: closed by on_close_socket */
  int events;       /* UV_READABLE | UV_WRITABLE the handle watches now; 0: stopped */
  int idle;         /* a connection's socket curl does not watch now (see byfd) */
} http_sock;

typedef struct codes { int n; long v[HTTP_MAX_CODES]; } codes;

struct http_req {
  /* Kept with an idle request (req_new clears what follows H): its handle, the buffers of the
   * answer's body and header lines, and those of the request's header lines. */
  CURL *easy;
  char *out, *hdr;
  size_t cap, hcap;
  /* The request's header lines ("name: value" each ended by a NUL, one after another) and
   * the list curl reads made over them once all are in (finish_headers): a curl_slist_append
   * was two allocations a line, and its freeing two more. */
  char *lines;
  size_t lines_len, lines_cap;
  size_t *line_at;
  struct curl_slist *nodes;
  int nlines, line_cap;
  struct mend_http *H;
  mend_run *run;              /* NULL once the attempt was abandoned */
  struct curl_slist *headers; /* nodes, or NULL */
  char *body;
  size_t len, hlen, max_bytes;
  int too_big, raise, added;
  int dirty;                  /* an option beyond the common ones set: reset the handle after */
  codes retry_on, fatal_on, accept;
  char method[16];
  http_url *target;           /* held until the request is freed */
  const char *url;            /* target's, without credentials: for messages and history */
  double started;             /* real seconds */
  char errbuf[CURL_ERROR_SIZE];
  struct http_req *prev, *next;   /* H->reqs */
  /* under H->mx */
  int io_state;               /* IO_NONE: the loop thread's alone */
  int io_cancel;              /* in H->cancel: to be taken out of the multi handle */
  CURLcode io_rc;             /* IO_DONE: what curl said (CURLE_ABORTED_BY_CALLBACK: taken out) */
  struct http_req *io_prev, *io_next;   /* in to_add, cancel or done */
  struct http_req *io_take;   /* the I/O thread's: the requests it took from to_add at once */
};


/* http.c (the loop thread) */
int mend__http_grow(char **buf, size_t *cap, size_t need);
/* Made, and the I/O thread started, at the first request; NULL: out of memory or no thread. */
struct mend_http *mend__http_state(mend_engine *E);
http_req *mend__http_req_new(struct mend_http *H);   /* NULL: out of memory */
void mend__http_req_free(http_req *q);   /* one the I/O thread does not have (IO_NONE) */
void mend__http_set_fixed(struct mend_http *H, CURL *c);   /* every request's options */
/* Hands a request set up to the I/O thread; it comes back through mend__http_on_done. */
void mend__http_send(http_req *q);

/* http_io.c (the I/O thread, but for start and stop) */
void mend__http_list_push(http_list *l, http_req *q);
void mend__http_list_unlink(http_list *l, http_req *q);
/* The loop thread's side of the lists' wake: 0, or the I/O thread could not be started. */
int mend__http_io_start(struct mend_http *H);
/* The two wakes are eventfds rather than uv_async: a uv_async's receiver spins, and yields
 * the CPU, while its sender is inside its write, which on a loaded machine (both threads and
 * the server on two cores) cost W9's loop 0.25 sched_yield a run. A wake is written only when
 * none is pending (io_woken, loop_woken under mx): one for a burst. */
int mend__http_wake_fd(void);            /* -1: none */
void mend__http_signal(int fd);
void mend__http_wake_drain(int fd);
/* Under mx: 1 if the I/O thread is to be signalled (mend__http_signal(H->io_fd)) once mx is
 * let go, no wake being pending. */
int mend__http_io_wake(struct mend_http *H);
/* Stops the I/O thread and joins it; takes every request out of the multi handle and closes
 * it (the requests stay in H->reqs, IO_NONE, for the loop thread to free). */
void mend__http_io_stop(struct mend_http *H);
/* curl's callbacks for a request's easy handle, run on the I/O thread */
size_t mend__http_on_body(char *data, size_t size, size_t n, void *ud);
size_t mend__http_on_header(char *data, size_t size, size_t n, void *ud);
curl_socket_t mend__http_on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a);
int mend__http_on_close_socket(void *ud, curl_socket_t fd);
/* On the engine's loop, when the I/O thread gave requests back. */
void mend__http_on_done(uv_poll_t *p, int status, int events);

/* http_resp.c */
/* Pushes the response table of an answer: status and body now, headers and json when first
 * read, from hdr (the header lines curl gave, NUL-ended; NULL: none), copied. [-0, +1, m] */
void mend__http_push_response(lua_State *L, long status, const char *hdr, const char *body,
                              size_t len);
/* The next header line of [*p, end) as the response's headers table reads it: its name (as
 * sent) and value; 0 at the end. */
int mend__http_header_next(const char **p, const char *end, const char **name, size_t *nlen,
                           const char **value, size_t *vlen);
/* Whether a header's name, lower-cased, is `lower`. */
int mend__http_header_is(const char *name, size_t nlen, const char *lower);
#endif
