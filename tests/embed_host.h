/*
 * embed_host: what the test_embed_* programs share, each a host written against include/mend.h
 * alone (so that tests/embed_*.sh can build them against the installed library too): a
 * directory of workflow files made for the program and removed after it, the workflows more
 * than one program runs, options for a file database and its files removed, the engine's
 * making, loading and starting checked, a run's JSON read, and the host functions answered
 * now (greet, undo) or later (remote, answer_due). Must never: hold a test's own checks, or
 * reach past mend.h.
 */
#ifndef MEND_EMBED_HOST_H
#define MEND_EMBED_HOST_H

#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tick_host.h"

static char dir[64];

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void write_workflow(const char *name, const char *text) {
  tick_host_write(dir, name, text);
}

static inline void load(mend_engine *E, const char *name) {
  char path[128], loaded[64] = "";
  snprintf(path, sizeof path, "%s/%s.lua", dir, name);
  int rc = mend_engine_load(E, path, loaded, sizeof loaded);
  if (rc != MEND_OK) fprintf(stderr, "load %s: %s\n", name, mend_engine_errmsg(E));
  CHECK_EQ_INT(rc, MEND_OK);
  CHECK_STR(loaded, name);
}

static inline mend_engine *engine(const mend_options *opts) { return tick_host_engine(opts); }

static inline void start(mend_engine *E, const char *wf, const char *input, char id[17]) {
  int rc = mend_engine_start(E, wf, input, NULL, id, NULL);
  if (rc != MEND_OK) fprintf(stderr, "start %s: %s\n", wf, mend_engine_errmsg(E));
  CHECK_EQ_INT(rc, MEND_OK);
}

/* Options for engines on a file database of the program's directory, `name` (a file an earlier
 * run left removed), committed as `mode` asks; its path in db (len bytes), which o points to. */
static inline void file_db_options(mend_options *o, char *db, size_t len, const char *name,
                                   mend_durability_mode mode) {
  snprintf(db, len, "%s/%s", dir, name);
  unlink(db);
  mend_options_init(o);
  o->db_path = db;
  o->durability = mode;
}

/* Removes a database file and its WAL and shared-memory files. */
static inline void remove_db_files(const char *db) {
  static const char *const files[] = {"", "-wal", "-shm"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char path[200];
    snprintf(path, sizeof path, "%s%s", db, files[i]);
    unlink(path);
  }
}

/* The run's JSON (a fresh copy each call; the caller frees it with mend_free). */
static inline char *run_json(mend_engine *E, const char *id) {
  char *json = NULL;
  CHECK_EQ_INT(mend_engine_run_json(E, id, &json), MEND_OK);
  return json ? json : calloc(1, 1);
}

/* Does the run's JSON (or history, with hist) contain `text`? Prints it when not. */
static inline int run_has(mend_engine *E, const char *id, const char *text, int hist) {
  char *json = NULL;
  if (hist) mend_engine_history_json(E, id, &json);
  else mend_engine_run_json(E, id, &json);
  int has = json && strstr(json, text) != NULL;
  if (!has) fprintf(stderr, "expected %s of run %s to contain <%s>: %s\n",
                    hist ? "history" : "status", id, text, json ? json : "(none)");
  mend_free(json);
  return has;
}

/* ---------------------------------------------------------------- workflows */

static const char naps_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'naps', steps = {\n"
  "  { name = 'nap', execute = function(ctx) mend.sleep(0.3); return true end },\n"
  "} }\n";

/* Each step leaves about 1.5 MB of garbage behind and tells the host how big the heap is. */
static const char litter_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'litter', steps = {\n"
  "  { name = 'drop', execute = function(ctx)\n"
  "      local t = {}\n"
  "      for i = 1, 20000 do t[i] = { i } end\n"
  "      return mend.call('heap', collectgarbage('count'))\n"
  "    end },\n"
  "} }\n";

/* Each step asks the host to look, from another connection, at what is durable. */
static const char ahead_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'ahead', steps = {\n"
  "  { name = 'one', execute = function(ctx) return mend.call('peek', ctx.run_id, 'one') end },\n"
  "  { name = 'two', execute = function(ctx) return mend.call('peek', ctx.run_id, 'two') end },\n"
  "} }\n";


static const char basic_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'basic', steps = {\n"
  "  { name = 'greet', execute = function(ctx, input) return mend.call('greet', input.who) end },\n"
  "  { name = 'nap', execute = function(ctx) mend.sleep(0.01); return ctx.results.greet end },\n"
  "} }\n";

/* One step that needs nothing of the host. */
static const char plain_lua[] =
  "return { name = 'plain', steps = { { name = 'a', execute = function() return 1 end } } }\n";

/* `remote` is answered by the host later; its mode (the input) chooses the answer. */
static const char saga_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'saga',\n"
  "  retry = { max_attempts = 3, initial = 0.01, max_delay = 0.05, jitter = 0 },\n"
  "  steps = {\n"
  "    { name = 'reserve', execute = function(ctx) return { held = true } end,\n"
  "      compensate = function(ctx) mend.call('undo', 'reserve') end },\n"
  "    { name = 'remote',\n"
  "      execute = function(ctx, input) return mend.call('remote', input.mode, ctx.attempt) end,\n"
  "      compensate = function(ctx) mend.call('undo', 'remote') end },\n"
  "  } }\n";

static const char hog_lua[] =
  "return { name = 'hog', steps = { { name = 'eat', execute = function()\n"
  "  local big, t, i = string.rep('x', 65536), {}, 0\n"
  "  while true do i = i + 1; t[i] = big .. i end\n"
  "end } } }\n";

static const char spin_lua[] =
  "return { name = 'spin', steps = { { name = 'spin', execute = function()\n"
  "  while true do end\n"
  "end } } }\n";

static const char escape_os_lua[] =
  "return { name = 'escape_os', steps = { { name = 'shell', execute = function()\n"
  "  return os.execute('echo pwned')\n"
  "end } } }\n";

static const char escape_io_lua[] =
  "return { name = 'escape_io', steps = { { name = 'read', execute = function()\n"
  "  return io.open('/etc/passwd'):read('a')\n"
  "end } } }\n";

static const char escape_c_lua[] =
  "return { name = 'escape_c', steps = { { name = 'native', execute = function()\n"
  "  return { loadlib = package.loadlib ~= nil, cpath = package.cpath }\n"
  "end } } }\n";

static const char escape_exec_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'escape_exec', steps = { { name = 'spawn', execute = function()\n"
  "  return mend.exec{ 'sh', '-c', 'echo escaped' }\n"
  "end } } }\n";

static const char http_call_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'http_call', steps = { { name = 'get', execute = function(ctx)\n"
  "  local r = mend.http{ url = ctx.input.url }\n"
  "  local fields = 0\n"
  "  for _ in pairs(r) do fields = fields + 1 end\n"
  "  return { fields = fields, length = r.headers['content-length'], whole = r }\n"
  "end } } }\n";

static const char wait_lua[] =
  "return { name = 'wait', steps = {\n"
  "  { name = 'kill', wait_for = 'boss_killed', timeout = 3600 },\n"
  "  { name = 'reward', execute = function(ctx) return ctx.results.kill.gold end } } }\n";

/* ---------------------------------------------------------------- host functions */

/* greet(who): answered at once. */
static int greet_calls;
static inline void greet(void *ud, mend_call *call, const char *args) {
  (void)ud;
  greet_calls++;
  char result[256];
  snprintf(result, sizeof result, "{\"greeting\":\"hello\",\"args\":%s}", args);
  CHECK_EQ_INT(mend_call_return(call, result), MEND_OK);
}

static int undo_calls;
static inline void undo(void *ud, mend_call *call, const char *args) {
  (void)ud;
  (void)args;
  undo_calls++;
  mend_call_return(call, NULL);
}

/* remote(mode, attempt): kept, and answered by the driving loop some time later. */
typedef struct pending {
  mend_call *call;
  char mode[32];
  int attempt;
  double due;
} pending;

static pending calls[64];
static int ncalls;

static inline void remote(void *ud, mend_call *call, const char *args) {
  (void)ud;
  pending *p = &calls[ncalls++];
  p->call = call;
  /* args: ["mode",attempt] */
  if (sscanf(args, "[\"%31[^\"]\",%d]", p->mode, &p->attempt) != 2) {
    fprintf(stderr, "remote: unexpected arguments %s\n", args);
    p->mode[0] = 0;
  }
  p->due = now_s() + 0.02;
}

static inline void answer(pending *p) {
  if (strcmp(p->mode, "value") == 0) {
    mend_call_return(p->call, "{\"answer\":42}");
  } else if (strcmp(p->mode, "retry") == 0) {
    if (p->attempt == 1) mend_call_fail(p->call, "retryable", "busy, come back", 0.05, 0);
    else mend_call_return(p->call, "{\"answer\":43}");
  } else if (strcmp(p->mode, "fatal") == 0) {
    mend_call_fail(p->call, "fatal", "no such account", -1, 0);
  } else if (strcmp(p->mode, "half") == 0) {
    mend_call_fail(p->call, "compensable", "half applied", -1, 2);
  } else if (strcmp(p->mode, "stuck") == 0) {
    mend_call_fail(p->call, "compensable", "state unknown", -1, 3);
  } else {
    mend_call_fail(p->call, "fatal", "bad mode", -1, 0);
  }
}

/* Answers the calls that are due (an answer may start another call: it is kept too). */
static inline void answer_due(void) {
  pending look[64];
  int n = ncalls;
  memcpy(look, calls, sizeof look);
  ncalls = 0;
  double t = now_s();
  for (int i = 0; i < n; i++) {
    if (look[i].due <= t) answer(&look[i]);
    else calls[ncalls++] = look[i];
  }
}

static int alerts_with_alert, events_finished;
static inline void on_alert(void *ud, const char *json) {
  (void)ud;
  if (strstr(json, "\"compensated_with_alert\"")) alerts_with_alert++;
}
static inline void on_event(void *ud, const char *json) {
  (void)ud;
  if (strstr(json, "\"run_finished\"")) events_finished++;
}

/* peek(run, step): from another engine on the same file (peek_engine), is the step's
 * `running` row durable yet? Counted in peeks and peeks_durable. */
static mend_engine *peek_engine;
static int peeks, peeks_durable;

static inline void peek(void *ud, mend_call *call, const char *args) {
  (void)ud;
  char id[17] = "", step[8] = "";
  sscanf(args, "[\"%16[^\"]\",\"%7[^\"]\"]", id, step);
  char *hist = NULL;
  mend_engine_history_json(peek_engine, id, &hist);
  char want[32];
  snprintf(want, sizeof want, "\"step\":\"%s\"", step);
  int seen = 0;   /* a history row of this step, to running */
  for (const char *p = hist; p && !seen && (p = strstr(p, want)); p++) {
    const char *end = strchr(p, '}'), *to = strstr(p, "\"to\":\"running\"");
    seen = to && end && to < end;
  }
  peeks++;
  if (seen) peeks_durable++;
  else fprintf(stderr, "step %s of %s runs before its running row is durable: %s\n", step, id,
               hist ? hist : "(no history)");
  mend_free(hist);
  mend_call_return(call, "true");
}

/* A fresh directory for the program's workflow files (/tmp/mend-NAME-XXXXXX), with the shared
 * workflows written in it. */
static inline void embed_host_begin(const char *name) {
  check_make_dir(dir, sizeof dir, name);
  write_workflow("naps", naps_lua);
  write_workflow("litter", litter_lua);
  write_workflow("ahead", ahead_lua);
  write_workflow("basic", basic_lua);
  write_workflow("plain", plain_lua);
  write_workflow("saga", saga_lua);
  write_workflow("hog", hog_lua);
  write_workflow("spin", spin_lua);
  write_workflow("escape_os", escape_os_lua);
  write_workflow("escape_io", escape_io_lua);
  write_workflow("escape_c", escape_c_lua);
  write_workflow("escape_exec", escape_exec_lua);
  write_workflow("http_call", http_call_lua);
  write_workflow("wait", wait_lua);
}

/* Removes the directory and every file in it, and says how the program's checks went. */
static inline int embed_host_end(const char *suite) {
  check_remove_dir(dir);
  return check_done(suite);
}

#endif
