/*
 * print: what `print` of workflow code writes, for a sandboxed engine and one made with
 * buffered_print (`mend worker`). Owns a bounded buffer of lines and their writing to stdout:
 * a line is written at once when stdout can take it, else kept (up to PRINT_BUFFER bytes) and
 * written by the loop when it can; a line that does not fit is dropped and counted, and one
 * notice (on stdout, and in the log) says how many once the buffer could be written again.
 *
 * Must never: block the loop on stdout (a pipe nobody reads fills at 64 KiB, and a blocking
 * write would hold every run and the worker's signals); write more than PIPE_BUF bytes after
 * one look at the descriptor (a pipe that can take some can take that many at once); keep the
 * loop alive for stdout's sake.
 */
#include "engine_int.h"

#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PRINT_BUFFER ((size_t)1 << 20)
/* How often the loop tries again while lines wait. */
#define PRINT_RETRY_MS 20

/* What print's closure holds, anchored in the registry while the engine lives: the engine's
 * buffer, NULL once the engine is gone (print then writes as Lua's does). */
typedef struct print_box {
  mend_print_out *out;
} print_box;

struct mend_print_out {
  mend_engine *E;
  lua_State *L;
  print_box *box;
  int box_ref;
  char *buf;
  size_t off, len;     /* what waits is buf[off..len) */
  long dropped;        /* lines dropped since the last notice */
  uv_timer_t *retry;   /* NULL until lines first had to wait */
};

static void on_retry(uv_timer_t *t);

/* Writes what stdout takes now; 1 once nothing waits. */
static int flush(mend_print_out *o) {
  while (o->off < o->len) {
    struct pollfd p = {STDOUT_FILENO, POLLOUT, 0};
    if (poll(&p, 1, 0) != 1 || !(p.revents & (POLLOUT | POLLERR | POLLHUP))) break;
    size_t n = o->len - o->off < PIPE_BUF ? o->len - o->off : PIPE_BUF;
    ssize_t w = write(STDOUT_FILENO, o->buf + o->off, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {   /* stdout is gone (EPIPE, closed): what waits has nowhere to go */
      o->off = o->len;
      break;
    }
    o->off += (size_t)w;
  }
  if (o->off == o->len) o->off = o->len = 0;
  return o->len == 0;
}

static void append(mend_print_out *o, const char *s, size_t n) {
  if (!o->buf && !(o->buf = malloc(PRINT_BUFFER))) {
    o->dropped++;
    return;
  }
  if (n > PRINT_BUFFER - o->len && o->off > 0) {
    memmove(o->buf, o->buf + o->off, o->len - o->off);
    o->len -= o->off;
    o->off = 0;
  }
  if (n > PRINT_BUFFER - o->len) {
    o->dropped++;
    return;
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
}

/* The one notice of the lines dropped since the last: on stdout, where they are missed, and in
 * the log, which is read when stdout is not. */
static void notice(mend_print_out *o, int on_stdout) {
  char text[160];
  int n = snprintf(text, sizeof text, "mend: %ld line%s of print dropped: stdout was not taking "
                   "them\n", o->dropped, o->dropped == 1 ? "" : "s");
  mend_engine_log_line(o->E, "warn", NULL, NULL, 0, "print", text + 6);
  o->dropped = 0;
  if (on_stdout) {
    append(o, text, (size_t)n);
    flush(o);
  }
}

static void settle(mend_print_out *o) {
  if (flush(o) && o->dropped > 0) notice(o, 1);
  if (o->len == 0 && o->dropped == 0) {
    if (o->retry) uv_timer_stop(o->retry);
    return;
  }
  if (!o->retry) {
    if (!(o->retry = malloc(sizeof *o->retry))) return;
    uv_timer_init(o->E->loop, o->retry);
    o->retry->data = o;
    uv_unref((uv_handle_t *)o->retry);   /* lines waiting for stdout keep no one running */
  }
  if (!uv_is_active((uv_handle_t *)o->retry))
    uv_timer_start(o->retry, on_retry, PRINT_RETRY_MS, PRINT_RETRY_MS);
}

static void on_retry(uv_timer_t *t) { settle(t->data); }

/* print(...) as Lua's (tostring of each argument, tabs between, a newline), into the buffer.
 * Upvalue 1: the engine's mend_print_out. */
static int engine_print(lua_State *L) {
  print_box *box = lua_touserdata(L, lua_upvalueindex(1));
  mend_print_out *o = box->out;
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
    if (i < n) luaL_addchar(&b, '\t');
  }
  luaL_addchar(&b, '\n');
  luaL_pushresult(&b);
  size_t len;
  const char *s = lua_tolstring(L, -1, &len);
  if (!o) {
    fwrite(s, 1, len, stdout);
    fflush(stdout);
    return 0;
  }
  append(o, s, len);
  /* While stdout is full the loop's timer writes: no system call for each line. */
  if (!o->retry || !uv_is_active((uv_handle_t *)o->retry)) settle(o);
  return 0;
}

void mend__print_install(mend_engine *E, lua_State *L) {
  mend_print_out *o = calloc(1, sizeof *o);
  if (!o) return;
  o->E = E;
  o->L = L;
  o->box = lua_newuserdatauv(L, sizeof *o->box, 0);
  o->box->out = o;
  lua_pushvalue(L, -1);
  o->box_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushcclosure(L, engine_print, 1);
  lua_setglobal(L, "print");
  E->print_out = o;
}

static void free_retry(uv_handle_t *h) { free(h); }

void mend__print_close(mend_engine *E) {
  mend_print_out *o = E->print_out;
  if (!o) return;
  flush(o);   /* what stdout takes now; the rest would wait for ever */
  if (o->dropped > 0) notice(o, 0);
  if (o->retry) uv_close((uv_handle_t *)o->retry, free_retry);
  o->box->out = NULL;
  luaL_unref(o->L, LUA_REGISTRYINDEX, o->box_ref);
  free(o->buf);
  free(o);
  E->print_out = NULL;
}
