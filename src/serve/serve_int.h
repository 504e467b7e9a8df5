/*
 * serve_int: the insides of mend's HTTP server, shared by the files of src/serve only: the
 * server, a request as the API handlers see it, and the replies they give. The server
 * (server.c) owns sockets, h2o, limits and tokens; request.c reads a request's parts (path,
 * query, body, who); linger.c the last stage of closing a connection whose body was refused;
 * the API (api.c) owns routes and what each does with the engine. Nothing here parses HTTP: h2o
 * does. Must never: be included outside src/serve/.
 */
#ifndef MEND_SERVE_INT_H
#define MEND_SERVE_INT_H

#include <h2o.h>
#include <jansson.h>
#include <stddef.h>

#include "engine.h"

#define SERVE_MAX_SEGMENTS 8

typedef struct mend_server_opts {
  const char *address;     /* "127.0.0.1:7070", "[::1]:7070", "0.0.0.0:8080"; port 0: any */
  const char *token;       /* NULL: none; required for an address other than loopback */
  size_t max_body;         /* bytes of a request body (413 past it); 0: 1 MiB + 64 KiB */
  size_t max_headers;      /* bytes of a request's header fields (431 past it); 0: 16 KiB */
  const char *cors_origin; /* NULL: no CORS headers at all */
  const char *dashboard;   /* the dashboard page (HTML), served at / without a token: it holds
                              no data, and asks for the token itself; NULL: none */
  const char *process;     /* the process that serves, as the history names who did what:
                              "mend worker"; NULL: "mend serve" */
} mend_server_opts;

typedef struct mend_server mend_server;

/* Why a server did not start. BAD_ADDRESS, NEEDS_TOKEN and BAD_CORS are the options' own
 * fault, known before a socket is made (the CLI's usage errors); the others are the system's
 * answer. */
typedef enum mend_server_refusal {
  MEND_SERVER_BAD_ADDRESS = 1,  /* the address is not [HOST]:PORT of an IP address (or localhost) */
  MEND_SERVER_NEEDS_TOKEN,      /* beyond loopback without a token */
  MEND_SERVER_CANNOT_LISTEN,    /* bind or listen failed: a port in use, no permission, ... */
  MEND_SERVER_NO_MEMORY,
  MEND_SERVER_BAD_CORS,         /* cors is not one origin, scheme://host[:port] */
} mend_server_refusal;

/* The options checked as mend_server_start checks them, without an engine or a socket: 0, or
 * a refusal (BAD_ADDRESS, NEEDS_TOKEN, BAD_CORS) with err. */
int mend_server_check(const mend_server_opts *opts, char *err, int errlen);
/* Listens on opts->address on the engine's loop. NULL on failure, *refusal and err saying
 * why. */
mend_server *mend_server_start(mend_engine *E, const mend_server_opts *opts, int *refusal,
                               char *err, int errlen);
/* The address it listens on, with the port the system chose for port 0 ("127.0.0.1:43210"). */
const char *mend_server_address(const mend_server *srv);
/* Stops listening, lets open connections close (forcing them after 0.3 s) and frees h2o's
 * handles, so that the engine's loop can be closed after. The struct stays until free. */
void mend_server_close(mend_server *srv);
void mend_server_free(mend_server *srv);

/* The dashboard page's Content-Security-Policy (csp.c): its own inline scripts allowed by their
 * SHA-256, no other. Malloc'd; NULL when out of memory. */
char *serve_dashboard_csp(const char *page);
/* How many whole inline scripts the page holds, found as the browser finds them: 0 is a page
 * that cannot run (its script cut short or missing), or one holding an <svg> or <math>
 * element (*foreign set, may be NULL), whose content the browser reads by rules csp.c does
 * not follow: its policy allows no script. */
size_t serve_dashboard_scripts(const char *page, int *foreign);

/* A request as a handler sees it: authenticated, body within limits. */
#define MAX_CONNECTIONS 256   /* past it a new connection is closed at once */
/* long polls held at once (wait.c): a quarter of the connections stays for the requests that
 * end the runs they wait on */
#define MAX_WAITERS (MAX_CONNECTIONS * 3 / 4)

typedef struct serve_req {
  h2o_req_t *req;
  mend_server *srv;
  mend_engine *E;
  int post;                              /* a POST: it changes something */
  int other;                             /* neither GET, HEAD nor POST: a 405 of its endpoint */
  int nseg;
  char *seg[SERVE_MAX_SEGMENTS];         /* the path's segments, percent-decoded */
  const char *query;                     /* after '?', or "" */
  size_t query_len;
  const char *who;                       /* who does it, for the history */
} serve_req;

/* Replies. json: steals `body`. error: {"error": {"code": code, "message": ...}}. */
void serve_json(serve_req *r, int status, json_t *body);
void serve_error(serve_req *r, int status, const char *code, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
/* serve_json once what the request wrote is durable (the write-ahead rule for the answer):
 * requests arriving together share one commit. A batch that fails answers 503 instead. */
void serve_json_durable(serve_req *r, int status, json_t *body);
/* The same, the answer made by answer(r, ud) once the batch is durable (ud in the request's
 * pool): for an answer that depends on what the batch found as it was written. */
void serve_when_durable(serve_req *r, void (*answer)(serve_req *r, void *ud), void *ud);
/* A query parameter, percent-decoded into the request's pool, in *out (NULL when absent): 0,
 * or -1 after replying 400 for a malformed one. */
int serve_query(serve_req *r, const char *name, const char **out);
/* A whole number of the query from lo to hi into *out (dflt if absent): 0, or -1 after replying
 * 400 naming the parameter (api.c). */
int serve_query_count(serve_req *r, const char *name, long lo, long hi, long dflt, long *out);
/* A cursor "TIME~ID" a page gave: 0, or -1 when it is not one (api.c). */
int serve_parse_cursor(const char *c, double *time, char *id, size_t idlen);
/* GET /api/v1/dlq and GET /api/v1/runs/{id}/events, a page at a time (lists.c). */
void serve_list_dlq(serve_req *r);
void serve_list_inbox(serve_req *r, const char *id);
/* 0 when every parameter of the query is one of known (NULL-terminated; NULL: none) and none is
 * given twice; else -1 after replying 400 naming it (what: the endpoint, for the message). */
int serve_query_only(serve_req *r, const char *const *known, const char *what);
/* The body as a JSON object (an empty body is {}, a key given twice refused, a key not in
 * known (NULL-terminated) refused: a misspelt field must not be read as absent); NULL after
 * replying 400 naming the fault (what: the endpoint, for the message). */
json_t *serve_body(serve_req *r, const char *const *known, const char *what);

/* request.c: the rest of a request's parts. serve_decode: s[0..n) percent-decoded into the
 * pool ('+' as a space where plus), NULL when malformed or when it holds a NUL. serve_who: who
 * does it, for the history: the X-Mend-Who a client gives and always where the request came
 * from, served by process (NULL: "mend serve"); NULL after replying 400. serve_host_is_loopback:
 * whether the request names this machine's loopback in its Host (or names none).
 * serve_is_json_type: whether its Content-Type is application/json. */
char *serve_decode(h2o_mem_pool_t *pool, const char *s, size_t n, int plus);
const char *serve_who(serve_req *r, const char *process, int with_token);
int serve_host_is_loopback(h2o_req_t *req);
int serve_is_json_type(h2o_req_t *req);

/* framing.c: 1 and why (a message naming the headers and their values) when request req gives
 * Content-Length twice with different values, or Content-Length and Transfer-Encoding: where
 * its body ends is not one reading (RFC 9112, 6.3); 0 otherwise. */
int serve_framing_refused(h2o_req_t *req, char *why, size_t len);

/* linger.c: a connection h2o closes after refusing a body it did not read (413, 400) is closed in
 * two stages, so that the client, still writing, gets the answer rather than a reset.
 * serve_linger_keep: a second descriptor of sock's connection, open past h2o's close of sock
 * (-1 if none). serve_linger: owns that descriptor from then on: ends the sending side, drops
 * what comes until the client closes or a few seconds pass, then closes it. serve_linger_stop:
 * closes every lingering connection of the list now; the list is empty once the loop turned. */
typedef struct serve_lingering serve_lingering;
int serve_linger_keep(h2o_socket_t *sock);
void serve_linger(uv_loop_t *loop, int fd, serve_lingering **list);
void serve_linger_stop(serve_lingering **list);

/* api.c, for wait.c: adds to a run read from the store its `held_by` (the live worker holding
 * it, if one does) and `children` (when it has any), as `mend status --json` shows them; 0, or
 * -1 when the store failed (its error current). */
int serve_run_links(mend_engine *E, json_t *run, const char *id);

/* wait.c: the long poll of GET /api/v1/runs/{id}?wait=S, one set of waiters a server.
 * serve_wait: holds r until run id ends, seconds pass (at most a tick late) or the server
 * stops, then answers it with the run and "wait": "ended", "timeout" or "stopping"; run is the
 * run as the request read it, not ended (stolen). serve_waits_stop: answers every waiter
 * now with the run as it is and lets the timer go (the server closing); no wait is taken
 * after. serve_run_ended: whether a run (the store's view) has ended, as `mend wait` ends. */
typedef struct serve_waits serve_waits;
serve_waits *serve_waits_new(mend_server *srv, mend_engine *E);
void serve_wait(serve_req *r, const char *id, json_t *run, double seconds);
int serve_waits_count(const serve_waits *w);
void serve_waits_stop(serve_waits *w);
void serve_waits_free(serve_waits *w);
int serve_run_ended(const json_t *run);

/* server.c, for wait.c: the server's waiters (NULL: none could be made); the socket of a
 * request's connection (-1: none); a request whose client went away given up: its connection
 * shut, h2o then ends the request and closes the connection, freeing both. */
serve_waits *serve_server_waits(mend_server *srv);
/* server.c, for metrics.c: the requests whose answer waits for the commit of what they wrote. */
int serve_server_commit_waiting(const mend_server *srv);
int serve_req_fd(mend_server *srv, h2o_req_t *req);
void serve_abandon(mend_server *srv, h2o_req_t *req);

/* api.c: answers every request under /api/v1 (and /metrics). */
void serve_api(serve_req *r);

#endif
