/*
 * load: the workflows an engine knows. Owns running a workflow's text (its top level under the
 * engine's limits and, in a sandboxed engine, in an environment of its own), keeping each
 * version a run may need (the file's, or the script the store kept for an older one), and
 * finding a workflow by name or by name and version, and why a file's last load failed. Must
 * never: let an older version start new runs; free a version while runs may use it.
 */
#include "engine_int.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox.h"
#include "util.h"

/* ---------------------------------------------------------------- workflows */

static mend_workflow *adopt(mend_engine *E, mend_workflow *wf) {
  if (!wf) return NULL;
  wf->store_free = mend__workflow_store_free(E, wf);
  for (int i = 0; i < wf->nsteps; i++) {
    /* A group or a map executes nothing (its branches and its item do): no breaker, and no
     * row that `mend breakers` would list for it. A step that only waits has a slot (the
     * engine's paths need one) and no row: nothing of it ever asks its breaker. */
    mend_step_def *d = &wf->steps[i];
    if (d->breaker_key)
      d->slot = mend__breaker_slot(E, d->breaker_key, &d->breaker, d->execute_ref != LUA_NOREF);
    mend_step_def *item = d->item_wf ? &d->item_wf->steps[0] : NULL;
    if (item)
      item->slot = mend__breaker_slot(E, item->breaker_key, &item->breaker,
                                      item->execute_ref != LUA_NOREF);
  }
  /* A breaker new to the store was recorded (so that people can list and override it): it is
   * committed now, or an engine that only serves (mend serve) would hold the write
   * transaction open until its first run, and every other process would wait for it. */
  if (mend_store_batch_open(E->store)) mend__commit_now(E);
  /* Newest first: a reloaded workflow serves new runs; the old one stays for runs in flight. */
  wf->next = E->workflows;
  E->workflows = wf;
  return wf;
}

/* Whether a message Lua raised names the file: luaO_chunkid shows "@path" as path, or, past
 * LUA_IDSIZE, as "..." and the path's tail. */
static int names_file(const char *why, const char *path) {
  size_t n = strlen(path);
  if (strncmp(why, path, n) == 0 && why[n] == ':') return 1;
  if (strncmp(why, "...", 3) != 0) return 0;
  const char *colon = strchr(why + 3, ':');
  size_t tail = colon ? (size_t)(colon - why - 3) : 0;
  return tail > 0 && tail <= n && strncmp(path + n - tail, why + 3, tail) == 0;
}

/* Runs a workflow's text (its top level, under the engine's limits and, in a sandboxed engine,
 * in an environment of its own) and checks the definition it returns. `path` names it in
 * messages and is where its `require` looks in a sandbox. */
static mend_workflow *load_text(mend_engine *E, const char *text, size_t len, const char *path,
                                const char *version, char *err, int errlen) {
  lua_State *L = E->L;
  int top = lua_gettop(L);
  lua_pushfstring(L, "@%s", path);
  int status = luaL_loadbufferx(L, text, len, lua_tostring(L, -1), "t");
  if (status == LUA_OK && E->cfg.sandbox && E->owned_state) {
    const char *slash = strrchr(path, '/');
    lua_pushlstring(L, path, slash ? (size_t)(slash - path) : 0);
    mend_sandbox_env(L, lua_tostring(L, -1), E->cfg.lua_path);
    lua_setupvalue(L, -3, 1);
    lua_pop(L, 1);
  }
  if (status == LUA_OK) {
    mend_limits lim;
    mend_limits_init(&lim, "workflow file", E->cfg.instruction_budget, CALL_SECONDS);
    lim.stoppable = 1;   /* a worker told to stop as it loads (guard.h: mend_limits_hear_stop) */
    E->loading_code++;   /* counted as a run's code is (engine.h: mend_engine_in_code) */
    status = mend__guarded_pcall(E, &lim, 0, 1);
    E->loading_code--;
    if (status != LUA_OK && lim.tripped) {
      char why[200];
      mend_errorf(err, errlen, "%s: %s while it loaded", path,
                  mend_limits_message(&lim, why, sizeof why));
      lua_settop(L, top);
      return NULL;
    }
  }
  if (status != LUA_OK) {
    char text_of[600];
    if (status == LUA_ERRMEM && E->owned_state && E->cfg.memory_limit > 0)
      mend_errorf(err, errlen, "%s: exceeded the memory limit (%zu bytes) while it loaded", path,
                  E->cfg.memory_limit);
    else {
      /* Lua puts the file name and line in front of most strings raised as it loads, but not
       * of error(msg, 0) or error(msg, 2), nor of its refusal of a binary chunk; a table (a
       * mend.fatal, an object with __tostring) says nothing of where it came from. */
      int is_string = lua_type(L, -1) == LUA_TSTRING;
      E->loading_code++;   /* the error's __tostring is the file's code too */
      const char *why = mend__describe(E, NULL, L, -1, text_of, sizeof text_of, NULL);
      E->loading_code--;
      if (is_string && names_file(why, path)) mend_errorf(err, errlen, "%s", why);
      else mend_errorf(err, errlen, "%s: %s", path, why);
    }
    lua_settop(L, top);
    return NULL;
  }
  mend_workflow *wf = mend_workflow_from_table(L, -1, path, version, err, errlen);
  lua_settop(L, top);
  /* A script with a NUL byte is not kept: it could not come back whole as text. */
  if (wf && memchr(text, 0, len) == NULL && !(wf->script = malloc(len + 1))) {
    mend_errorf(err, errlen, "%s: out of memory", path);
    mend_workflow_free(L, wf);
    return NULL;
  }
  if (wf && wf->script) {
    memcpy(wf->script, text, len);
    wf->script[len] = 0;
  }
  return wf;
}

/* Text from the store may be a sandboxed engine's, stored after this engine read the mark as
 * it opened: the mark is read again before such text runs in an engine not sandboxed (a
 * load, never on the step path; store.h: sandbox_mark). The files of the host's own workflows
 * dir are the host's and are not asked about. 0, or -1 with err. */
static int store_text_allowed(mend_engine *E, char *err, int errlen) {
  const char *path = E->cfg.db_path ? E->cfg.db_path : ":memory:";
  if (E->cfg.sandbox || E->cfg.no_sandbox || strcmp(path, ":memory:") == 0) return 0;
  int marked = mend_store_sandbox_mark(E->store, 0);
  if (marked < 0) {
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return -1;
  }
  if (!marked) return 0;
  mend_errorf(err, errlen, "the database was marked sandboxed after this engine opened (a "
              "sandboxed engine opened it): its workflows' code is not run unsandboxed here; "
              "restart the engine (it opens sandboxed), open it with no_sandbox "
              "(--no-sandbox), or clear the mark (mend db trust) if its code is trusted");
  return -1;
}

mend_workflow *mend_engine_load_version(mend_engine *E, const char *name, const char *version,
                                        char *err, int errlen) {
  for (mend_workflow *wf = E->workflows; wf; wf = wf->next)
    if (strcmp(wf->name, name) == 0 && wf->version && strcmp(wf->version, version) == 0) return wf;
  char *source = NULL;
  char *text = mend_store_version_script(E->store, name, version, &source);
  if (!text) {
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return NULL;
  }
  if (store_text_allowed(E, err, errlen)) {   /* after the read: the writer waited for */
    free(text);
    free(source);
    return NULL;
  }
  size_t len = strlen(text);
  char v[20];
  mend_workflow_version_of(text, len, v);
  mend_workflow *wf = load_text(E, text, len, source ? source : name, v, err, errlen);
  free(text);
  free(source);
  if (wf && strcmp(wf->name, name) != 0) {
    mend_errorf(err, errlen, "the script kept for %s version %s names workflow \"%s\"", name,
                version, wf->name);
    mend_workflow_free(E->L, wf);
    return NULL;
  }
  if (!wf || !mend_engine_workflow(E, name)) return adopt(E, wf);
  /* An older version: it carries its runs on, and the newest one loaded still serves new runs. */
  mend_workflow **tail = &E->workflows;
  while (*tail) tail = &(*tail)->next;
  adopt(E, wf);
  E->workflows = wf->next;
  wf->next = NULL;
  *tail = wf;
  return wf;
}

/* ---------------------------------------------------------------- failed loads */

/* One a file: the last load's error, kept until the file loads (a worker looks at its files
 * again and again, so one broken file must not grow the list). */
struct mend_load_failure {
  char *path, *err;
  struct mend_load_failure *next;
};

static struct mend_load_failure **failure_of(mend_engine *E, const char *path) {
  struct mend_load_failure **f = &E->load_failures;
  while (*f && strcmp((*f)->path, path) != 0) f = &(*f)->next;
  return f;
}

static void note_load(mend_engine *E, const char *path, const char *err) {
  struct mend_load_failure **at = failure_of(E, path), *f = *at;
  if (!err) {
    if (!f) return;
    *at = f->next;
    free(f->path);
    free(f->err);
    free(f);
    return;
  }
  /* Out of memory, a failure is not kept: a start is then told there is no such workflow. */
  char *copy = strdup(err);
  if (!copy) return;
  if (!f) {
    f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
      free(f);
      free(copy);
      return;
    }
    *at = f;
  }
  free(f->err);
  f->err = copy;
}

/* A file removed since it failed is no failure to report: the workflow is then unknown. Asked
 * only of a start of a workflow this engine has no version of, so one look at the file. */
const char *mend_engine_load_failure(mend_engine *E, const char *name) {
  size_t n = strlen(name);
  for (struct mend_load_failure *f = E->load_failures; f; f = f->next) {
    const char *slash = strrchr(f->path, '/'), *base = slash ? slash + 1 : f->path;
    if (strncmp(base, name, n) != 0 || strcmp(base + n, ".lua") != 0) continue;
    if (access(f->path, F_OK) != 0 && errno == ENOENT) {
      note_load(E, f->path, NULL);
      return NULL;
    }
    return f->err;
  }
  return NULL;
}

/* Every failed file still there, named with its error, for a start of a name no file loaded
 * as: the workflow may be in one of them under another file name, and its name cannot be read
 * from a file that does not load. Each error cut to a line's length: a hint, not the log. */
int mend_engine_load_failures_named(mend_engine *E, char *buf, size_t len) {
  int n = 0;
  size_t at = 0;
  if (len) buf[0] = '\0';
  for (struct mend_load_failure *f = E->load_failures; f; f = f->next) {
    if (access(f->path, F_OK) != 0 && errno == ENOENT) continue;
    const char *slash = strrchr(f->path, '/'), *base = slash ? slash + 1 : f->path;
    if (at < len) {
      int w = snprintf(buf + at, len - at, "%s%s (%.160s)", n ? "; " : "", base, f->err);
      at = w < 0 ? len : at + (size_t)w;
    }
    n++;
  }
  return n;
}

void mend_engine_load_failures_free(mend_engine *E) {
  while (E->load_failures) note_load(E, E->load_failures->path, NULL);
}

mend_workflow *mend_engine_load_file(mend_engine *E, const char *path, char *err, int errlen) {
  size_t len;
  mend_workflow *wf = NULL;
  char *text = mend_workflow_read(path, &len, err, errlen);
  if (text) {
    char version[20];
    mend_workflow_version_of(text, len, version);
    wf = adopt(E, load_text(E, text, len, path, version, err, errlen));
    free(text);
  }
  note_load(E, path, wf ? NULL : err);
  return wf;
}

mend_workflow *mend_engine_register(mend_engine *E, int idx, char *err, int errlen) {
  return adopt(E, mend_workflow_from_table(E->L, idx, "register", NULL, err, errlen));
}

mend_workflow *mend_engine_workflow(mend_engine *E, const char *name) {
  for (mend_workflow *wf = E->workflows; wf; wf = wf->next)
    if (strcmp(wf->name, name) == 0) return wf;
  return NULL;
}
