/*
 * lserve: the Lua face of the HTTP server, the module mend.serve that the mend program opens:
 * listen(engine, {address =, token =, max_body =, max_headers =, cors =, dashboard =,
 * process =}) -> server, or nil, message, code; check(opts) -> true, or nil, message, code
 * (the options as listen checks them, before an engine exists); codes "address" (not
 * [HOST]:PORT of an IP address), "token" (beyond loopback without one), "cors" (not one
 * origin), "listen" (the system refused: a port in use, no permission), "memory";
 * scripts(page) -> how many whole inline scripts a dashboard page holds as the browser finds
 * them (0: a page that cannot run). And server:address(), server:run() (serves until SIGINT
 * or SIGTERM, for `mend serve`; raises naming the file when its database file is deleted or
 * moved), server:close(). Must never outlive its engine's loop: a server holds its engine,
 * and is closed before the engine is (the CLI closes it; a collected one closes itself); never
 * turn the loop outside the guard the engine's methods run under (mend_lua_engine_guarded).
 */
#include <lauxlib.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "lmend.h"
#include "serve.h"
#include "store.h"
#include "serve_int.h"

#define SERVER_MT "mend.server"

typedef struct server_box {
  mend_server *srv;
  mend_engine *E;
  uv_signal_t *signals[2];   /* SIGINT, SIGTERM, while run turns the loop */
  uv_timer_t *watch;         /* the look at the database file, while run turns the loop */
  int stop;                  /* the signal that came; GONE: the database file went */
  char why[512];             /* GONE's cause, naming the file */
} server_box;

enum { GONE = -1 };

/* How often run looks whether its database file is still there (two stat(2)s). A server that
 * is asked only reads commits nothing that would find it out, and would answer from the
 * deleted file for good, its writes refused, until stopped by hand with exit 0. */
#define WATCH_MS 500

static server_box *check_server(lua_State *L) {
  server_box *b = luaL_checkudata(L, 1, SERVER_MT);
  if (!b->srv) luaL_error(L, "the server is closed");
  return b;
}

static const char *opt_string(lua_State *L, const char *field) {
  lua_getfield(L, 2, field);
  const char *s = lua_isnil(L, -1) ? NULL : luaL_checkstring(L, -1);
  lua_pop(L, 1);   /* the string stays alive in the options table */
  return s;
}

static size_t opt_size(lua_State *L, const char *field) {
  lua_getfield(L, 2, field);
  lua_Integer n = luaL_optinteger(L, -1, 0);
  lua_pop(L, 1);
  if (n < 0) luaL_error(L, "listen: %s must be >= 0", field);
  return (size_t)n;
}

/* The options table at 2. */
static mend_server_opts read_opts(lua_State *L) {
  luaL_checktype(L, 2, LUA_TTABLE);
  mend_server_opts o = {0};
  o.address = opt_string(L, "address");
  o.token = opt_string(L, "token");
  o.cors_origin = opt_string(L, "cors");
  o.dashboard = opt_string(L, "dashboard");
  o.process = opt_string(L, "process");
  o.max_body = opt_size(L, "max_body");
  o.max_headers = opt_size(L, "max_headers");
  return o;
}

/* nil, err, the refusal's code: 3 results. */
static int refused(lua_State *L, int refusal, const char *err) {
  static const char *const codes[] = {[MEND_SERVER_BAD_ADDRESS] = "address",
                                      [MEND_SERVER_NEEDS_TOKEN] = "token",
                                      [MEND_SERVER_CANNOT_LISTEN] = "listen",
                                      [MEND_SERVER_NO_MEMORY] = "memory",
                                      [MEND_SERVER_BAD_CORS] = "cors"};
  lua_pushnil(L);
  lua_pushstring(L, err);   /* names the flag and the cause: no Lua position */
  lua_pushstring(L, refusal > 0 && refusal <= MEND_SERVER_BAD_CORS ? codes[refusal] : "listen");
  return 3;
}

static int l_check(lua_State *L) {
  lua_settop(L, 1);
  lua_pushnil(L);
  lua_insert(L, 1);   /* the options at 2, as listen has them */
  mend_server_opts o = read_opts(L);
  char err[700];
  int refusal = mend_server_check(&o, err, sizeof err);
  if (refusal) return refused(L, refusal, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* scripts(page) -> how many whole scripts, and whether it holds an <svg> or <math> element */
static int l_scripts(lua_State *L) {
  int foreign = 0;
  lua_pushinteger(L, (lua_Integer)serve_dashboard_scripts(luaL_checkstring(L, 1), &foreign));
  lua_pushboolean(L, foreign);
  return 2;
}

static int l_listen(lua_State *L) {
  mend_engine *E = mend_lua_engine(L, 1);
  mend_server_opts o = read_opts(L);
  server_box *b = lua_newuserdatauv(L, sizeof *b, 1);
  *b = (server_box){.E = E};
  luaL_setmetatable(L, SERVER_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);   /* the engine lives while its server does */
  char err[700];
  int refusal = 0;
  b->srv = mend_server_start(E, &o, &refusal, err, sizeof err);
  if (!b->srv) return refused(L, refusal, err);
  return 1;
}

static int server_address(lua_State *L) {
  lua_pushstring(L, mend_server_address(check_server(L)->srv));
  return 1;
}

static void on_signal(uv_signal_t *h, int signum) { *(int *)h->data = signum; }
static void free_on_close(uv_handle_t *h) { free(h); }

static void on_watch(uv_timer_t *t) {
  server_box *b = t->data;
  if (!b->stop && mend_store_gone(mend_engine_store(b->E), b->why, (int)sizeof b->why))
    b->stop = GONE;
}

/* The engine's loop turns until a signal comes; runs under the engine's method guard
 * (mend_lua_engine_guarded), with the server at 1. The signal handles live apart from this C
 * frame, so that a panic of the engine's state jumping out of it leaves none behind on a dead
 * stack: the caller closes them either way. */
static int serve_until_signal(lua_State *L) {
  server_box *b = lua_touserdata(L, 1);
  uv_loop_t *loop = mend_engine_loop(b->E);
  static const int sigs[2] = {SIGINT, SIGTERM};
  for (int k = 0; k < 2; k++) {
    uv_signal_t *h = malloc(sizeof *h);
    if (!h) return luaL_error(L, "run: out of memory");
    uv_signal_init(loop, h);
    h->data = &b->stop;
    b->signals[k] = h;
    uv_signal_start(h, on_signal, sigs[k]);
  }
  /* the first look now, while the file is surely there (it opens what later looks ask) */
  if (mend_store_gone(mend_engine_store(b->E), b->why, (int)sizeof b->why)) b->stop = GONE;
  b->watch = malloc(sizeof *b->watch);
  if (!b->watch) return luaL_error(L, "run: out of memory");
  uv_timer_init(loop, b->watch);
  b->watch->data = b;
  uv_timer_start(b->watch, on_watch, WATCH_MS, WATCH_MS);
  while (!b->stop) uv_run(loop, UV_RUN_ONCE);
  return 0;
}

/* The signal handles and the watch run made, closed (freed as the loop next turns, or as the
 * engine is destroyed). */
static void close_signals(server_box *b) {
  for (int k = 0; k < 2; k++) {
    if (b->signals[k]) uv_close((uv_handle_t *)b->signals[k], free_on_close);
    b->signals[k] = NULL;
  }
  if (b->watch) uv_close((uv_handle_t *)b->watch, free_on_close);
  b->watch = NULL;
}

/* server:run() -> "SIGINT" | "SIGTERM": the engine's loop turns (requests, and the runs an
 * operation hands this engine) until a signal comes, or raises naming the file when the
 * database file is deleted or moved, as a worker stops then. A panic of the engine's own state as
 * it turns breaks the engine and raises "the engine is broken: ...", as its methods do. */
static int server_run(lua_State *L) {
  server_box *b = check_server(L);
  if (mend_engine_in_code(b->E))   /* its loop is turning already, under that code */
    return luaL_error(L, "run: called from %s while the engine runs it; such code may "
                      "start, signal, cancel or read other runs, not drive or close its engine",
                      mend_engine_code_running(b->E));
  lua_settop(L, 1);
  lua_getiuservalue(L, 1, 1);   /* the engine, at 2 */
  close_signals(b);             /* a run before that raised out of memory: its one handle */
  b->stop = 0;
  int n = mend_lua_engine_guarded(L, 2, serve_until_signal);
  close_signals(b);
  if (n < 0) return luaL_error(L, "the engine is broken: %s", mend_engine_error(b->E));
  uv_run(mend_engine_loop(b->E), UV_RUN_NOWAIT);
  if (b->stop == GONE) {   /* the cause alone: no place in the caller's code is at fault */
    lua_pushstring(L, b->why);
    return lua_error(L);
  }
  lua_pushstring(L, b->stop == SIGINT ? "SIGINT" : "SIGTERM");
  return 1;
}

static int server_close(lua_State *L) {
  server_box *b = luaL_checkudata(L, 1, SERVER_MT);
  close_signals(b);
  if (b->srv) {
    mend_server_free(b->srv);
    b->srv = NULL;
  }
  return 0;
}

int mend_serve_lua_open(lua_State *L) {
  static const luaL_Reg methods[] = {{"address", server_address}, {"run", server_run},
                                     {"close", server_close}, {NULL, NULL}};
  if (luaL_newmetatable(L, SERVER_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, server_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  static const luaL_Reg funcs[] = {{"listen", l_listen}, {"check", l_check},
                                   {"scripts", l_scripts}, {NULL, NULL}};
  luaL_newlib(L, funcs);
  return 1;
}
