/*
 * exec: the child processes of mend.exec. Owns the request of one call (its pipes, what the
 * process writes, how it ended) from the spawn to the step's resumption with a result table,
 * and lets go of a request whose attempt was abandoned (its answer must not reach a later
 * attempt). Must never: resume an attempt that is no longer the request's; block the loop.
 */
#include "engine_int.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"


struct exec_req {
  child base;             /* CHILD_EXEC */
  uv_process_t proc;
  uv_pipe_t pipes[3];     /* stdin, stdout, stderr */
  int open_handles;
  mend_run *run;          /* NULL once the attempt was abandoned */
  char *out[3];
  size_t len[3], cap[3];
  char *input;
  size_t input_len;
  uv_write_t write;
  int64_t exit_status;
  int term_signal;
  int exited, eofs;
};

static void exec_maybe_done(exec_req *x);

void mend__exec_handle_closed(uv_handle_t *h) {
  exec_req *x = h->data;
  if (--x->open_handles == 0) {
    for (int k = 0; k < 3; k++) free(x->out[k]);
    free(x->input);
    free(x);
  }
}

static void exec_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  exec_req *x = h->data;
  int k = (uv_pipe_t *)h == &x->pipes[1] ? 1 : 2;
  if (x->cap[k] - x->len[k] < suggested) {
    size_t cap = x->cap[k] ? x->cap[k] : 4096;
    while (cap - x->len[k] < suggested) cap *= 2;
    char *p = realloc(x->out[k], cap);
    if (!p) { *buf = uv_buf_init(NULL, 0); return; }
    x->out[k] = p;
    x->cap[k] = cap;
  }
  *buf = uv_buf_init(x->out[k] + x->len[k], (unsigned)(x->cap[k] - x->len[k]));
}

static void exec_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  exec_req *x = s->data;
  int k = (uv_pipe_t *)s == &x->pipes[1] ? 1 : 2;
  if (n > 0) { x->len[k] += (size_t)n; return; }
  if (n < 0) {
    uv_read_stop(s);
    x->eofs++;
    exec_maybe_done(x);
  }
}

static void exec_exit(uv_process_t *p, int64_t status, int signal) {
  exec_req *x = p->data;
  x->exit_status = status;
  x->term_signal = signal;
  x->exited = 1;
  exec_maybe_done(x);
}

static void exec_written(uv_write_t *w, int status) {
  (void)status;
  exec_req *x = w->data;
  if (!uv_is_closing((uv_handle_t *)&x->pipes[0]))
    uv_close((uv_handle_t *)&x->pipes[0], mend__exec_handle_closed);
}

static void exec_close_all(exec_req *x) {
  uv_close((uv_handle_t *)&x->proc, mend__exec_handle_closed);
  uv_close((uv_handle_t *)&x->pipes[1], mend__exec_handle_closed);
  uv_close((uv_handle_t *)&x->pipes[2], mend__exec_handle_closed);
}

static void exec_maybe_done(exec_req *x) {
  if (!x->exited || x->eofs < 2) return;
  mend_engine *E = mend__child_unlink(&x->base);
  mend_run *r = E ? x->run : NULL;
  if (!E) {                 /* the engine is gone: only close */
    exec_close_all(x);
    return;
  }
  E->externals--;
  if (r) {
    r->cold->exec = NULL;
    lua_State *co = r->co;
    lua_createtable(co, 0, 4);
    lua_pushinteger(co, x->exit_status); lua_setfield(co, -2, "status");
    lua_pushinteger(co, x->term_signal); lua_setfield(co, -2, "signal");
    lua_pushlstring(co, x->out[1] ? x->out[1] : "", x->len[1]); lua_setfield(co, -2, "stdout");
    lua_pushlstring(co, x->out[2] ? x->out[2] : "", x->len[2]); lua_setfield(co, -2, "stderr");
  }
  exec_close_all(x);
  if (r) mend__resume(r, 1);
  mend__kick(E);
}

void mend__abandon_exec(mend_run *r) {
  exec_req *x = MEND_COLD(r, exec);
  if (!x) return;
  x->run = NULL;
  uv_process_kill(&x->proc, SIGKILL);
  r->cold->exec = NULL;
}

int mend_engine_exec(lua_State *L, char *err, int errlen) {
  mend_run *r = mend__waiting_run(L, err, errlen);
  if (!r) return -1;
  mend_engine *E = r->E;
  if (E->cfg.sandbox) {   /* a child process would be a way around the sandbox */
    snprintf(err, (size_t)errlen, "not allowed in a sandboxed engine");
    return -1;
  }
  /* made before the child, which it must hold once started */
  if (!mend__run_cold(r)) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
  int n = (int)luaL_len(L, 1);
  if (n < 1) {
    snprintf(err, (size_t)errlen, "needs a program: mend.exec{ \"prog\", \"arg\", ... }");
    return -1;
  }
  char **args = calloc((size_t)n + 1, sizeof *args);
  for (int k = 0; k < n; k++) {
    lua_geti(L, 1, k + 1);
    args[k] = mend_dupstr(luaL_tolstring(L, -1, NULL));
    lua_pop(L, 2);
  }
  char **env = NULL;
  if (lua_getfield(L, 1, "env") == LUA_TTABLE) {
    int m = (int)luaL_len(L, -1);
    env = calloc((size_t)m + 1, sizeof *env);
    for (int k = 0; k < m; k++) {
      lua_geti(L, -1, k + 1);
      env[k] = mend_dupstr(luaL_tolstring(L, -1, NULL));
      lua_pop(L, 2);
    }
  }
  lua_pop(L, 1);
  const char *cwd = NULL;
  if (lua_getfield(L, 1, "cwd") == LUA_TSTRING) cwd = lua_tostring(L, -1);
  exec_req *x = calloc(1, sizeof *x);
  size_t in_len = 0;
  if (lua_getfield(L, 1, "stdin") == LUA_TSTRING) {
    const char *in = lua_tolstring(L, -1, &in_len);
    x->input = malloc(in_len + 1);
    memcpy(x->input, in, in_len);
    x->input_len = in_len;
  }
  lua_pop(L, 1);
  for (int k = 0; k < 3; k++) {
    uv_pipe_init(E->loop, &x->pipes[k], 0);
    x->pipes[k].data = x;
  }
  x->proc.data = x;
  uv_stdio_container_t stdio[3] = {
    {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&x->pipes[0]},
    {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&x->pipes[1]},
    {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&x->pipes[2]},
  };
  uv_process_options_t opt = {.exit_cb = exec_exit, .file = args[0], .args = args, .env = env,
                              .cwd = cwd, .stdio_count = 3, .stdio = stdio};
  int rc = uv_spawn(E->loop, &x->proc, &opt);
  lua_pop(L, 1);   /* cwd */
  for (int k = 0; k < n; k++) free(args[k]);
  free(args);
  if (env) { for (int k = 0; env[k]; k++) free(env[k]); free(env); }
  x->open_handles = 4;
  if (rc) {
    lua_geti(L, 1, 1);
    snprintf(err, (size_t)errlen, "cannot start %s: %s", lua_tostring(L, -1), uv_strerror(rc));
    lua_pop(L, 1);
    /* A failed uv_spawn still leaves the process handle initialised: it must be closed too. */
    uv_close((uv_handle_t *)&x->proc, mend__exec_handle_closed);
    for (int k = 0; k < 3; k++) uv_close((uv_handle_t *)&x->pipes[k], mend__exec_handle_closed);
    return -1;
  }
  E->externals++;
  mend__child_link(E, &x->base, CHILD_EXEC);
  x->run = r;
  r->cold->exec = x;
  r->waiting = 1;
  uv_read_start((uv_stream_t *)&x->pipes[1], exec_alloc, exec_read);
  uv_read_start((uv_stream_t *)&x->pipes[2], exec_alloc, exec_read);
  if (x->input_len) {
    uv_buf_t b = uv_buf_init(x->input, (unsigned)x->input_len);
    x->write.data = x;
    uv_write(&x->write, (uv_stream_t *)&x->pipes[0], &b, 1, exec_written);
  } else {
    uv_close((uv_handle_t *)&x->pipes[0], mend__exec_handle_closed);
  }
  return 0;
}
