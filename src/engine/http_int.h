/*
 * http_int: what the parts of mend.http share (http.c: curl driven by the loop, the requests
 * and what their answers mean; http_call.c: a step's call read and checked, and its request
 * set up; http_resp.c: the response table and the reading of header lines). Must never: be
 * included outside src/engine/http*.c.
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

struct mend_http {
  mend_engine *E;
  CURLM *multi;
  uv_timer_t *timer;
  /* A poll handle per socket curl watches, by number. A connection's socket (opened and
   * closed through on_open_socket and on_close_socket) keeps its handle until it is closed,
   * and between requests keeps watching for reading (idle): a kept-alive connection's next
   * request finds its interest as it was, where stopping and starting the handle around each
   * request cost 1.8 epoll_ctl calls a W9 request (libuv's uv_poll_start takes the socket out
   * of epoll before putting it back). An idle socket that becomes readable (the server closed
   * it) is stopped then; curl's own check before reusing a connection finds it closed. An
   * idle socket's handle is unreferenced, as a stopped one was: a host's uv_run still returns
   * once the runs have ended.
   * Any other socket's handle (a resolver's) is closed when curl stops watching it: curl
   * closes those itself, and a handle must never outlive its number's socket, or closing it
   * later would take the number's next owner out of the loop's epoll set. */
  struct http_sock **byfd;
  int nbyfd;
  struct http_req *reqs;     /* in flight, abandoned ones too */
  http_url *memo[HTTP_URL_MEMO];
  int memo_next;
  struct http_req *idle[HTTP_IDLE_EASY];
  int nidle;
  /* Connections kept open for later requests: four per request at the most ever in flight.
   * Curl's own default follows the requests in flight now, and an answer's burst (dozens of
   * transfers ended in one poll, the next ones started a turn later) made it close a third of
   * W9's connections and open them again. */
  int in_multi, max_in_multi;
  /* The addresses a connection may reach (http_addr.c): checked when the engine has an
   * allow-list or a sandbox; loopback allowed (the allow-list names localhost); the addresses
   * the allow-list names (a proxy has no allowance of its own). */
  int addr_check, allow_loopback, nnamed;
  unsigned char (*named)[16];
  /* The errno of the kernel's route query that failed at the last check (http_addr.c), 0 if
   * none: whether the address is this machine's own is then unknown. */
  int route_err;
  int route_fd;            /* the netlink socket of these queries, plus 1; 0: none open */
  unsigned route_seq;      /* the last query's sequence number */
  /* The environment's proxies as curl would read them at each request, read once at the
   * state's making (http.c, read_proxies): curl's own five getenv calls a request each walk
   * the whole environment. NULL: none (an empty variable is none). */
  char *no_proxy, *proxy_http, *proxy_https;
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
  /* The URL whose text the handle holds (CURLOPT_URL, held): the next request to the same URL
   * does not set it again (curl copies the text at each setopt). NULL after a reset. */
  http_url *on_handle;
  /* The limits the handle holds, as last set (0: not set since it was made or reset): the
   * same ones are not set again at each request. */
  long on_timeout_ms, on_connect_ms;
  curl_off_t on_max_bytes;
  /* Whose proxy the handle holds (CURLOPT_PROXY): 0 none set since it was made or reset, 'h'
   * an http URL's, 's' an https URL's. */
  char on_proxy;
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
  char refused[48];           /* an address http_addr.c refused a connection to ("": none) */
  int refused_unknown;        /* ... because the kernel could not be asked whether it is local */
  int refused_errno;          /* ... and why (the query's errno then, not at the answer) */
  int connected;              /* a socket was opened to an address not refused */
  int switched;               /* the answer was 101 Switching Protocols: the transfer stopped */
  struct http_req *prev, *next;
};


/* http_mem.c: libcurl set up (once a process), with its memory in mend's size classes when
 * nothing set it up before; a thread that makes requests keeps freed blocks for the next */
void mend__http_global_init(void);
void mend__http_mem_adopt(void);

/* http.c */
int mend__http_grow(char **buf, size_t *cap, size_t need);
struct mend_http *mend__http_state(mend_engine *E);   /* made at the first request */
http_req *mend__http_req_new(struct mend_http *H);   /* NULL: out of memory */
void mend__http_req_free(http_req *q);

/* The next entry of an allow-list ("a.example, *.b.example": apart by commas, the spaces around
 * each trimmed) from *p on, its text and length; 0 after the last. Every reader of http_allow
 * reads its entries with this, so that they all read the same ones. */
static inline int mend__http_allow_next(const char **p, const char **entry, size_t *len) {
  const char *s = *p;
  while (*s == ' ' || *s == ',') s++;
  if (!*s) {
    *p = s;
    return 0;
  }
  const char *e = s;
  while (*e && *e != ',') e++;
  size_t n = (size_t)(e - s);
  while (n && s[n - 1] == ' ') n--;
  *entry = s;
  *len = n;
  *p = e;
  return 1;
}

/* http_addr.c */
void mend__http_addr_init(struct mend_http *H);   /* at the state's making */
void mend__http_addr_free(struct mend_http *H);   /* at its end */
/* Whether a connection to sa may be made: 0 it may; 1 it must not (an address of the engine's
 * own machine or link the allow-list does not name); 2 it must not, whether it is this
 * machine's own being unknown (the kernel's route query failed: H->route_err). The address is
 * put in `shown`. */
int mend__http_addr_refused(struct mend_http *H, const struct sockaddr *sa, char *shown,
                            size_t cap);

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
