/*
 * capi: the public C API of include/mend.h over the engine, but for the calls that read and
 * repair (capi_ops.c, through capi_int.h). Owns the mapping from internal failures to
 * mend_status codes, the adapters from the engine's callbacks to the host's (and the count of
 * those the engine is inside, from which it is not freed), the refusal of what no call can use
 * (a NULL engine or argument, options out of range, an engine freed already), the calls that
 * need no engine (the version, a database's sandbox mark cleared), which thread an engine
 * belongs to (its hand-over by mend_engine_adopt, and the refusal of other threads'
 * calls, told on both threads), and the hint a host gets when mend's own Lua files are not
 * where it looked. Nothing else. Must never: choose a status from a message's text (each of
 * the engine's codes, mend_refusal and the event and token codes, has one status); reach the
 * engine's insides (engine.h only).
 */
#include "mend.h"

#include <lauxlib.h>
#include <lua.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_int.h"
#include "engine.h"
#include "flatjson.h"
#include "log.h"
#include "lmend.h"
#include "luadir.h"

typedef struct handle handle;
static handle *handle_of(mend_engine *E);
static handle *start_driving(mend_engine *E);

/* The entry points that run workflow code run between these two: an error of Lua's outside
 * every protected call (a bug of mend's, or memory running out for the engine itself) comes
 * back here through the state's panic handler, and the engine is broken rather than the host
 * aborted. The callbacks it jumped out of are over. Meanwhile the call counts as driving the
 * engine (mend_engine_adopt). After NEED_ENGINE. */
#define PANIC_EXIT(E)                                            \
  if (mend_engine_panicked(E)) return MEND_EBROKEN;               \
  jmp_buf panic_jb;                                              \
  handle *volatile panic_h = start_driving(E);                   \
  if (!panic_h) return MEND_ESTATE;                              \
  int panic_callbacks = panic_h->side.in_callback;               \
  void *panic_saved = mend_engine_set_panic_exit((E), &panic_jb); \
  if (setjmp(panic_jb)) {                                        \
    mend_engine_set_panic_exit((E), panic_saved);                \
    panic_h->side.in_callback = panic_callbacks;                 \
    atomic_fetch_sub(&panic_h->driving, 1);                      \
    return MEND_EBROKEN;                                         \
  }
#define PANIC_EXIT_END(E)                          \
  do {                                             \
    mend_engine_set_panic_exit((E), panic_saved);  \
    atomic_fetch_sub(&panic_h->driving, 1);        \
  } while (0)

/* A driving call made from inside the engine's own run code (a host function): refused, as the
 * engine is running that code (engine.h: mend_engine_in_code). */
#define NOT_IN_CODE(E, name)                                                                    \
  if (mend_engine_in_code(E)) {                                                                \
    refuse_in_code((E), name);                                                                 \
    return MEND_ESTATE;                                                                        \
  }

static void refuse_in_code(mend_engine *E, const char *name) {
  char msg[300];
  snprintf(msg, sizeof msg, "%s: called from %s (through a host function or callback) while the "
           "engine runs it; answer the call and return instead", name, mend_engine_code_running(E));
  mend_engine_note_error(E, msg);
}

MEND_API const char *mend_version(void) { return MEND_VERSION_STRING; }

/* The last of package.searchers: a host linking libmend.a outside the prefix it was configured
 * for finds no mend Lua files, and Lua's list of paths tried does not say what to do. Its
 * upvalue is the directory that was looked in. */
static int lua_dir_hint(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  if (strcmp(name, "mend") != 0 && strncmp(name, "mend.", 5) != 0) return 0;
  lua_pushfstring(L, "mend's Lua files are not in %s: set MEND_LUA_DIR (or mend_options.lua_path) "
                     "to the directory `pkg-config --variable=luadir mend` prints",
                  lua_tostring(L, lua_upvalueindex(1)));
  return 1;
}

static void add_lua_dir_hint(lua_State *L, const char *dir) {
  int top = lua_gettop(L);
  if (lua_getglobal(L, "package") == LUA_TTABLE &&
      lua_getfield(L, -1, "searchers") == LUA_TTABLE) {
    lua_pushstring(L, dir);
    lua_pushcclosure(L, lua_dir_hint, 1);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  }
  lua_settop(L, top);
}

MEND_API const char *mend_strerror(int status) {
  switch (status) {
    case MEND_OK: return "ok";
    case MEND_EINVAL: return "invalid argument";
    case MEND_ENOMEM: return "out of memory";
    case MEND_ELOAD: return "workflow failed to load";
    case MEND_ESTORE: return "storage error";
    case MEND_ENOTFOUND: return "not found";
    case MEND_ECLOCK: return "needs a virtual clock";
    case MEND_ESTATE: return "not possible in the run's state";
    case MEND_EBROKEN: return "the engine stopped after an internal failure";
    case MEND_EUSED: return "the token was used already";
    case MEND_ESTALE: return "the token is of an attempt that no longer waits for it";
    case MEND_EBUSY: return "held back by a lock, nothing recorded: send it again";
    case MEND_EDEFERRED: return "kept until a lock goes, then committed: do not send it again";
    default: return "unknown error";
  }
}

/* Writes no more than the host's `size` bytes: its options may be older than ours. */
MEND_API void mend_options_init_size(mend_options *opts, size_t size) {
  if (!opts || size < sizeof opts->size) return;
  mend_options d;
  memset(&d, 0, sizeof d);
  d.db_path = ":memory:";
  memset(opts, 0, size);
  memcpy(opts, &d, size < sizeof d ? size : sizeof d);
  opts->size = size;
}

/* What a public engine keeps beside the engine: the host's callbacks and their adapters. */
typedef struct host_side {
  mend_options opts;
  mend_log_sink sink;
  struct host_fn_box *functions;
  int in_callback;        /* callbacks of the host's that the engine is inside now */
  int refusing_free;      /* the log line refusing mend_engine_free is being written */
  mend_textbuf event_text, alert_text;   /* the texts heard, their memory kept for the next */
  int event_busy, alert_busy;            /* a callback is reading that text now */
} host_side;

/* The host's function behind a registered name. */
typedef struct host_fn_box {
  mend_host_fn fn;
  void *ud;
  host_side *side;
  struct host_fn_box *next;
} host_fn_box;

/* The engine is the handle; the host side hangs off a small registry keyed by engine. A host
 * has few engines, so a list is enough. */
struct handle {
  mend_engine *E;
  pthread_t thread;       /* the one it belongs to (mend.h, Threading), changed by adopt */
  host_side side;
  atomic_int driving;     /* calls of the owner's that drive the engine, under way: adopt's */
  /* Calls refused as made from another thread since the engine's thread last said so in its
   * log, and the last one's name (a function's __func__, static): written by the refused
   * thread under the registry's lock, taken on the engine's thread when its loop wakes. */
  atomic_int refused;
  _Atomic(const char *) refused_what;
  struct handle *next;
};

/* Engines on different threads are independent (mend.h), yet they share this list: each walk
 * and change of it holds the lock. A handle found stays valid after only on the thread its
 * engine belongs to (the one that frees it): another thread reads and writes what it needs
 * under the lock, and an engine is taken off the list before it is destroyed, so that one
 * found there may still be woken. */
static handle *handles;
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;

static handle *find_locked(mend_engine *E) {
  handle *h = handles;
  while (h && h->E != E) h = h->next;
  return h;
}

static handle *handle_of(mend_engine *E) {
  pthread_mutex_lock(&handles_lock);
  handle *h = find_locked(E);
  pthread_mutex_unlock(&handles_lock);
  return h;
}

/* A call that may not touch its engine says why here, in its own thread: the engine's message
 * is the owner thread's to write, or gone with the engine. */
static _Thread_local mend_engine *refused_engine;
static _Thread_local const char *refused_why;

#define NO_SUCH_ENGINE \
  "no such engine: it was freed (mend_engine_free), or not made by mend_engine_new"

#define FOREIGN_WHY(start)                                                                     \
  start " from a thread the engine does not belong to, refused: the engine is untouched. Make " \
        "the call on the engine's thread (wake it with mend_engine_wakeup, the one call any "    \
        "thread may make), or have this thread take the engine over with mend_engine_adopt "     \
        "once its thread has stopped using it (mend.h, Threading)"

/* Under the lock, on a thread h's engine does not belong to: the refusal of `what` is counted
 * for the engine's thread to log, and its loop woken to do it (a refusal nobody hears is how a
 * step came to wait for ever). The engine is alive: freeing takes it off the list first. */
static void count_refusal(handle *h, const char *what) {
  atomic_store(&h->refused_what, what);
  atomic_fetch_add(&h->refused, 1);
  mend_engine_wake(h->E);
}

/* Which thread E belongs to, against the caller: 0 this one (*found: its handle; counted as
 * driving it when `drive`, in the same locked section, so that an adopt sees either the count
 * or a thread no longer the owner); 1 another (the refusal of `what` is counted); -1 no such
 * engine. */
static int owned_here(mend_engine *E, const char *what, handle **found, int drive) {
  pthread_mutex_lock(&handles_lock);
  handle *h = find_locked(E);
  int rc = !h ? -1 : pthread_equal(h->thread, pthread_self()) ? 0 : 1;
  if (rc == 1) count_refusal(h, what);
  else if (rc == 0 && drive) atomic_fetch_add(&h->driving, 1);
  pthread_mutex_unlock(&handles_lock);
  *found = h;
  return rc;
}

/* On the engine's thread: the refusals of other threads' calls, in its log. As its loop wakes,
 * and at its next call (a loop with nothing else to do does not run, woken or not). */
static void tell_refusals(void *ud) {
  handle *h = ud;
  int n = atomic_exchange(&h->refused, 0);
  if (n == 0) return;
  char msg[600];
  snprintf(msg, sizeof msg, "%d call%s made from a thread the engine does not belong to %s "
           "refused (the last: %s); the engine is untouched, and a host call answered there is "
           "still open: answer it on this thread, or adopt the engine (mend_engine_adopt)",
           n, n == 1 ? "" : "s", n == 1 ? "was" : "were", atomic_load(&h->refused_what));
  mend_engine_log_line(h->E, "error", NULL, NULL, 0, "engine", msg);
}

/* The handle of E, counted as driving it, when E is still this thread's: an adopt between
 * the call's check and here took it over (NULL: the call is refused). */
static handle *start_driving(mend_engine *E) {
  handle *h = NULL;
  if (owned_here(E, "a call that drives the engine", &h, 1) == 0) return h;
  refused_engine = E;
  refused_why = FOREIGN_WHY("called");
  return NULL;
}

int mend__capi_check_engine(mend_engine *E, const char *what) {
  handle *h = NULL;
  int here = E ? owned_here(E, what, &h, 0) : -1;
  int rc = here < 0 ? MEND_EINVAL : here ? MEND_ESTATE : MEND_OK;
  refused_engine = rc == MEND_OK ? NULL : E;
  refused_why =
      !E         ? "the engine is NULL"
      : here < 0 ? NO_SUCH_ENGINE
                 : FOREIGN_WHY("called");
  if (rc == MEND_OK && atomic_load_explicit(&h->refused, memory_order_relaxed)) tell_refusals(h);
  return rc;
}

int mend__capi_invalid(mend_engine *E, const char *what) {
  mend_engine_note_error(E, what);
  return MEND_EINVAL;
}

/* Every callback into the host goes through one of these adapters, which count it: the engine
 * is inside the callback, and must not be freed from there (mend_engine_free). */
static void log_adapter(void *ud, const mend_log_record *rec) {
  host_side *s = ud;
  s->in_callback++;
  s->opts.log(s->opts.log_ud, rec->level, rec->time, rec->run, rec->step, rec->attempt,
              rec->event, rec->message);
  s->in_callback--;
}

/* An event or alert as its JSON text, written into a buffer kept for the next (flatjson.c:
 * json_dumps was 95% of hearing an event in a tick). A callback that makes another one heard
 * while its own text is in use, or an object that is not flat, gets a text of its own from
 * json_dumps, the same bytes. Text jansson refuses (a string that is not UTF-8) is not heard,
 * as before. */
static void json_adapter(host_side *s, mend_json_fn fn, void *ud, json_t *v, mend_textbuf *buf,
                         int *busy) {
  char *own = NULL;
  const char *text = *busy ? NULL : mend_flatjson(v, buf);
  if (!text) text = own = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!text) return;
  if (!own) *busy = 1;
  s->in_callback++;
  fn(ud, text);
  s->in_callback--;
  if (!own) *busy = 0;
  free(own);
}

static void alert_adapter(void *ud, json_t *ev) {
  host_side *s = ud;
  json_adapter(s, s->opts.alert, s->opts.alert_ud, ev, &s->alert_text, &s->alert_busy);
}

static void event_adapter(void *ud, json_t *ev) {
  host_side *s = ud;
  json_adapter(s, s->opts.on_event, s->opts.event_ud, ev, &s->event_text, &s->event_busy);
}

/* One status for each of the engine's codes (engine.h, mend_refusal). */
static int status_of(mend_refusal why) {
  switch (why) {
    case MEND_REFUSED_NOT_FOUND: return MEND_ENOTFOUND;
    case MEND_REFUSED_INVALID: return MEND_EINVAL;
    case MEND_REFUSED_STORE: return MEND_ESTORE;
    case MEND_REFUSED_NOMEM: return MEND_ENOMEM;
    case MEND_REFUSED_CLOCK: return MEND_ECLOCK;
    case MEND_REFUSED_BUSY: return MEND_EBUSY;
    case MEND_REFUSED_DEFERRED: return MEND_EDEFERRED;
    case MEND_REFUSED_STATE: case MEND_REFUSED_SANDBOX: break;
  }
  return MEND_ESTATE;
}

int mend__capi_refusal_status(mend_engine *engine) {
  return status_of(mend_engine_refusal(engine));
}

MEND_API int mend_engine_new(const mend_options *host_opts, mend_engine **out, char *err,
                             size_t errlen) {
  if (!out) {
    if (err && errlen) snprintf(err, errlen, "mend_engine_new: out is NULL: pass &engine");
    return MEND_EINVAL;
  }
  *out = NULL;
  /* The host's options as far as it knows them; what it does not know keeps its default. */
  mend_options all;
  mend_options_init(&all);
  if (host_opts && host_opts->size == 0) {
    if (err && errlen)
      snprintf(err, errlen, "mend_options.size is 0: set the options up with mend_options_init()");
    return MEND_EINVAL;
  }
  if (host_opts && host_opts->size > sizeof all) {
    if (err && errlen)
      snprintf(err, errlen, "mend_options of %zu bytes come from a newer mend.h than this libmend "
               "(%s, %zu bytes): build against the header of the library you link",
               host_opts->size, MEND_VERSION_STRING, sizeof all);
    return MEND_EINVAL;
  }
  if (host_opts) {
    memcpy(&all, host_opts, host_opts->size);
    all.size = sizeof all;
  }
  const mend_options *opts = &all;
  /* Out of range, each would otherwise be read as something the host did not ask for (a
   * durability of 7 as full, a negative budget or cap as none). */
  char bad[160] = "";
  if (opts->durability != MEND_SYNC_FULL && opts->durability != MEND_SYNC_PROCESS)
    snprintf(bad, sizeof bad, "durability must be MEND_SYNC_FULL or MEND_SYNC_PROCESS, got %d",
             (int)opts->durability);
  else if (opts->max_concurrency < 0)
    snprintf(bad, sizeof bad, "max_concurrency must be >= 0 (0: no cap), got %d",
             opts->max_concurrency);
  else if (opts->instruction_budget < 0)
    snprintf(bad, sizeof bad, "instruction_budget must be >= 0 (0: no budget), got %ld",
             opts->instruction_budget);
  else if (opts->db_path && !opts->db_path[0])
    snprintf(bad, sizeof bad, "db_path: the database name is empty: give a file (or :memory:, "
             "or a postgresql:// URI), or NULL");
  else if (!(opts->park_after >= 0))   /* NaN too: it had been read as never, unsaid */
    snprintf(bad, sizeof bad, "park_after must be a number >= 0 of seconds (0: never), got %g",
             opts->park_after);
  if (bad[0]) {
    if (err && errlen) snprintf(err, errlen, "%s", bad);
    return MEND_EINVAL;
  }
  handle *h = calloc(1, sizeof *h);
  if (!h) return MEND_ENOMEM;
  h->side.opts = *opts;
  host_side *s = &h->side;
  mend_engine_config cfg = {0};
  cfg.db_path = opts->db_path ? opts->db_path : ":memory:";
  cfg.durability =
      opts->durability == MEND_SYNC_PROCESS ? MEND_DURABILITY_PROCESS : MEND_DURABILITY_FULL;
  cfg.virtual_clock = opts->virtual_clock;
  cfg.has_seed = opts->has_seed;
  cfg.seed = opts->seed;
  cfg.loop = opts->uv_loop;
  cfg.max_concurrency = opts->max_concurrency;
  cfg.memory_limit = opts->memory_limit;
  cfg.instruction_budget = opts->instruction_budget;
  cfg.sandbox = opts->sandbox;
  cfg.no_sandbox = opts->no_sandbox;
  cfg.open_module = mend_lua_open;
  cfg.writer_thread = opts->commit_thread;
  cfg.http_allow = opts->http_allow;
  cfg.park_after = opts->park_after > 0 ? opts->park_after : -1;
  cfg.writer_sched = (int)opts->writer_sched;
  cfg.thread_cpus = opts->thread_cpus;
  if (cfg.writer_sched < MEND_WRITER_SCHED_TICKS || cfg.writer_sched > MEND_WRITER_SCHED_BATCH) {
    if (err && errlen)
      snprintf(err, errlen,
               "writer_sched must be MEND_WRITER_SCHED_TICKS, _OTHER or _BATCH, got %d",
               cfg.writer_sched);
    free(h);
    return MEND_EINVAL;
  }
  cfg.lua_path = opts->lua_path ? opts->lua_path : mend_lua_dir_default();
  cfg.log_level = mend_log_level_of(opts->log_level ? opts->log_level : "info");
  if (!cfg.log_level) {
    if (err && errlen)
      snprintf(err, errlen,
               "log_level must be \"debug\", \"info\", \"warn\" or \"error\", got \"%s\"",
               opts->log_level);
    free(h);
    *out = NULL;
    return MEND_EINVAL;
  }
  if (opts->log) {
    cfg.log = log_adapter;
    cfg.log_ud = s;
  } else if (opts->log_to_stderr) {
    mend_log_sink_init(&s->sink, stderr);
    cfg.log = mend_log_to_sink;
    cfg.log_ud = &s->sink;
  }
  if (opts->alert) { cfg.alert = alert_adapter; cfg.alert_ud = s; }
  if (opts->on_event) { cfg.on_event = event_adapter; cfg.event_ud = s; }
  char msg[1024];
  mend_refusal why;
  *out = mend_engine_create(NULL, &cfg, msg, sizeof msg, &why);
  if (!*out && why == MEND_REFUSED_SANDBOX) {   /* a database of untrusted workflows */
    cfg.sandbox = cfg.sandbox_by_mark = 1;
    *out = mend_engine_create(NULL, &cfg, msg, sizeof msg, &why);
  }
  if (!*out) {
    free(h);
    if (err && errlen) snprintf(err, errlen, "%s", msg);
    return status_of(why);
  }
  add_lua_dir_hint(mend_engine_lua(*out), cfg.lua_path);
  h->E = *out;
  h->thread = pthread_self();
  mend_engine_on_wake(*out, tell_refusals, h);
  if (refused_engine == *out) refused_engine = NULL;   /* a freed engine's address, taken again */
  pthread_mutex_lock(&handles_lock);
  h->next = handles;
  handles = h;
  pthread_mutex_unlock(&handles_lock);
  return MEND_OK;
}

MEND_API int mend_engine_sandboxed(mend_engine *engine) {
  return mend__capi_check_engine(engine, __func__) == MEND_OK ? mend_engine_sandbox_kind(engine)
                                                               : -1;
}

MEND_API int mend_trust_db(const char *db_path, int *was_marked, char *err, size_t errlen) {
  if (was_marked) *was_marked = 0;
  char msg[1024];
  int rc;
  if (!db_path) {
    snprintf(msg, sizeof msg, "the database is NULL: give a file or a postgresql:// URI");
    rc = MEND_EINVAL;
  } else {
    mend_trust_outcome r = mend_store_trust(db_path, msg, (int)sizeof msg);
    if (was_marked) *was_marked = r == MEND_TRUST_CLEARED;
    rc = r == MEND_TRUST_NO_DATABASE ? MEND_ENOTFOUND : r == MEND_TRUST_FAILED ? MEND_ESTORE
                                                                                : MEND_OK;
  }
  if (err && errlen) snprintf(err, errlen, "%s", rc == MEND_OK ? "" : msg);
  return rc;
}

/* From inside a callback of the engine's (a host function, the log, an alert, an event) the
 * engine is still running the code that called it, and would return into freed memory: refused,
 * the engine left as it is. A deferred free would need an outermost call to end in, and an
 * engine on the host's own loop calls back from no call of ours. */
MEND_API int mend_engine_free(mend_engine *engine) {
  if (!engine) return MEND_OK;
  NEED_ENGINE(engine);
  handle *owner = handle_of(engine);
  if (mend_engine_in_code(engine) || owner->side.in_callback) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "mend_engine_free: called from %s while the engine runs it; the "
             "engine is not freed: free it after the call that drives it returns",
             mend_engine_in_code(engine) ? mend_engine_code_running(engine)
                                         : "a callback of the engine's");
    mend_engine_note_error(engine, msg);
    if (owner && !owner->side.refusing_free) {   /* the log callback may be what calls us */
      owner->side.refusing_free = 1;
      mend_engine_log_line(engine, "error", NULL, NULL, 0, "engine", msg);
      owner->side.refusing_free = 0;
    }
    return MEND_ESTATE;
  }
  /* Off the list first: another thread that finds it there may wake it (owned_here). */
  pthread_mutex_lock(&handles_lock);
  for (handle **p = &handles; *p; p = &(*p)->next)
    if (*p == owner) {
      *p = owner->next;
      break;
    }
  pthread_mutex_unlock(&handles_lock);
  mend_engine_destroy(engine);
  for (host_fn_box *b = owner->side.functions, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  mend_textbuf_free(&owner->side.event_text);
  mend_textbuf_free(&owner->side.alert_text);
  free(owner);
  return MEND_OK;
}

MEND_API const char *mend_engine_errmsg(mend_engine *engine) {
  if (!engine || engine == refused_engine) return !engine ? "the engine is NULL" : refused_why;
  /* A freed engine is not read, as no call reads it: its message went with it. */
  pthread_mutex_lock(&handles_lock);
  int alive = find_locked(engine) != NULL;
  pthread_mutex_unlock(&handles_lock);
  if (!alive) return NO_SUCH_ENGINE;
  return mend_engine_error(engine);
}

MEND_API int mend_engine_load(mend_engine *engine, const char *path, char *name_out,
                              size_t name_len) {
  char err[1024];
  NEED_ENGINE(engine);
  if (!path) return mend__capi_invalid(engine, "mend_engine_load: path is NULL");
  PANIC_EXIT(engine);
  mend_workflow *wf = mend_engine_load_file(engine, path, err, sizeof err);
  PANIC_EXIT_END(engine);
  if (!wf) {
    mend_engine_note_error(engine, err);
    return MEND_ELOAD;
  }
  if (name_out && name_len) {
    size_t need = strlen(wf->name) + 1;
    snprintf(name_out, name_len, "%s", need <= name_len ? wf->name : "");
    /* a cut name would name another workflow, or none */
    if (need > name_len) {
      snprintf(err, sizeof err, "mend_engine_load: name_out holds %zu bytes, the name of the "
               "workflow loaded from %.600s needs %zu (MEND_NAME_MAX + 1 hold any)", name_len,
               path, need);
      return mend__capi_invalid(engine, err);
    }
  }
  return MEND_OK;
}

/* The engine's host-call type is the public mend_call: one struct, two names. */
static void host_adapter(void *ud, mend_host_call *call, json_t *args) {
  host_fn_box *box = ud;
  char *text = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
  box->side->in_callback++;
  box->fn(box->ud, (mend_call *)call, text ? text : "[]");
  box->side->in_callback--;
  free(text);
}

MEND_API int mend_engine_register_function(mend_engine *engine, const char *name, mend_host_fn fn,
                                           void *ud) {
  NEED_ENGINE(engine);
  if (!name || !fn)
    return mend__capi_invalid(engine, "mend_engine_register_function: name and fn may not be NULL");
  if (!*name)   /* mend.call("") names no function: a host's bug, said where it is made */
    return mend__capi_invalid(engine, "mend_engine_register_function: the name is empty");
  handle *h = handle_of(engine);   /* there: NEED_ENGINE found it, on its own thread */
  host_fn_box *box = malloc(sizeof *box);
  if (!box) return MEND_ENOMEM;
  box->fn = fn;
  box->ud = ud;
  box->side = &h->side;
  box->next = h->side.functions;
  h->side.functions = box;
  return mend_engine_register_host(engine, name, host_adapter, box) ? MEND_ENOMEM : MEND_OK;
}

/* A call answered from a thread its engine does not belong to: refused, the call left open (an
 * answer there would race with the engine's thread), and said so on both threads. One whose
 * engine is gone is answered anywhere: that only frees it. */
static int foreign_call(mend_call *call, const char *what) {
  mend_engine *E = mend_host_call_engine((mend_host_call *)call);
  handle *h;
  if (!E || owned_here(E, what, &h, 0) != 1) return 0;
  refused_engine = E;
  refused_why = FOREIGN_WHY("a host call answered") "; the call stays open";
  return 1;
}

MEND_API int mend_call_return(mend_call *call, const char *result_json) {
  if (!call) return MEND_EINVAL;
  if (foreign_call(call, __func__)) return MEND_ESTATE;
  char err[300], why[400];
  if (mend_host_return((mend_host_call *)call, result_json, err, sizeof err) == 0) return MEND_OK;
  mend_engine *E = mend_host_call_engine((mend_host_call *)call);
  snprintf(why, sizeof why, "mend_call_return: the result is not JSON: %s; the call stays open",
           err);
  if (E) mend_engine_note_error(E, why);
  return MEND_EINVAL;
}

MEND_API int mend_call_fail(mend_call *call, const char *kind, const char *message,
                            double retry_after, int severity) {
  if (!call) return MEND_EINVAL;
  if (foreign_call(call, __func__)) return MEND_ESTATE;
  /* A kind misspelt ("retriable") was a plain error, never retried, and a severity out of its
   * range a severity 1: refused instead, the call left open for a right answer, as bad JSON is. */
  mend_engine *E = mend_host_call_engine((mend_host_call *)call);
  int known = kind && (strcmp(kind, "retryable") == 0 || strcmp(kind, "fatal") == 0 ||
                       strcmp(kind, "compensable") == 0);
  if (!known) {
    if (E) mend_engine_note_error(E, "mend_call_fail: kind must be \"retryable\", \"fatal\" or "
                                     "\"compensable\"; the call stays open");
    return MEND_EINVAL;
  }
  if (strcmp(kind, "compensable") == 0 && (severity < 0 || severity > 3)) {
    if (E) mend_engine_note_error(E, "mend_call_fail: a compensable error's severity must be 1, 2 "
                                     "or 3 (0: 1); the call stays open");
    return MEND_EINVAL;
  }
  char err[200], why[300];
  int rc = mend_host_fail((mend_host_call *)call, kind, message, retry_after, severity, err,
                          sizeof err);
  if (rc == -2) {
    snprintf(why, sizeof why, "mend_call_fail: %s; the call stays open", err);
    if (E) mend_engine_note_error(E, why);
    return MEND_EINVAL;
  }
  return rc ? MEND_ENOMEM : MEND_OK;
}

/* The host's hand-over of an engine between its threads: the old owner's calls have ended
 * (the host's own synchronisation orders them before this one, as SQLite asks of a connection
 * used by one thread at a time). What can be seen of one still under way is seen here: a call
 * that drives the engine, counted under the lock by PANIC_EXIT (start_driving). */
MEND_API int mend_engine_adopt(mend_engine *engine) {
  if (!engine) {
    refused_engine = NULL;
    return MEND_EINVAL;
  }
  pthread_mutex_lock(&handles_lock);
  handle *h = find_locked(engine);
  int rc = !h ? MEND_EINVAL
         : pthread_equal(h->thread, pthread_self()) ? MEND_OK
         : atomic_load(&h->driving) > 0 ? MEND_ESTATE : MEND_OK;
  if (rc == MEND_OK) {
    h->thread = pthread_self();
  } else if (h) {
    count_refusal(h, __func__);
  }
  pthread_mutex_unlock(&handles_lock);
  refused_engine = rc == MEND_OK ? NULL : engine;
  refused_why = !h ? "mend_engine_adopt: no such engine: it was freed (mend_engine_free), or not "
                     "made by mend_engine_new"
                   : "mend_engine_adopt: the thread the engine belongs to is driving it now "
                     "(mend_engine_tick, run_all, advance_clock, recover, load): adopt it once "
                     "that thread has stopped using it";
  return rc;
}

/* A start of either call (what: its name). */
static int start_as(mend_engine *engine, const char *what, const char *workflow,
                    const char *input_json, const char *run_key, const char *who,
                    char run_id_out[17], int *existed) {
  int ex = 0;
  char err[1024];
  NEED_ENGINE_AS(engine, what);
  if (!workflow || !run_id_out) {
    snprintf(err, sizeof err, "%s: workflow and run_id_out may not be NULL", what);
    return mend__capi_invalid(engine, err);
  }
  if (strlen(workflow) <= MEND_NAME_MAX && !mend_engine_workflow(engine, workflow)) {
    snprintf(err, sizeof err, "no workflow named \"%s\" is loaded", workflow);
    mend_engine_note_error(engine, err);
    return MEND_ENOTFOUND;
  }
  if (mend_engine_panicked(engine)) return MEND_EBROKEN;
  if (mend_engine_start_json(engine, workflow, input_json, run_key, who, run_id_out, &ex, err,
                             sizeof err)) {
    mend_engine_note_error(engine, err);
    return mend__capi_refusal_status(engine);
  }
  if (existed) *existed = ex;
  return MEND_OK;
}

MEND_API int mend_engine_start(mend_engine *engine, const char *workflow, const char *input_json,
                               const char *run_key, char run_id_out[17], int *existed) {
  return start_as(engine, __func__, workflow, input_json, run_key, NULL, run_id_out, existed);
}

MEND_API int mend_engine_start_who(mend_engine *engine, const char *workflow,
                                   const char *input_json, const char *run_key, const char *who,
                                   char run_id_out[17], int *existed) {
  return start_as(engine, __func__, workflow, input_json, run_key, who, run_id_out, existed);
}

MEND_API int mend_engine_recover(mend_engine *engine, int *count) {
  NEED_ENGINE(engine);
  NOT_IN_CODE(engine, "mend_engine_recover");
  PANIC_EXIT(engine);
  int n = mend_engine_recover_runs(engine, 0);
  PANIC_EXIT_END(engine);
  if (n < 0) return MEND_ESTORE;
  if (count) *count = n;
  return MEND_OK;
}

MEND_API int mend_engine_run_all(mend_engine *engine) {
  NEED_ENGINE(engine);
  NOT_IN_CODE(engine, "mend_engine_run_all");
  PANIC_EXIT(engine);
  int rc = mend_engine_run(engine);
  PANIC_EXIT_END(engine);
  return rc ? MEND_ESTORE : MEND_OK;
}

MEND_API int mend_engine_tick(mend_engine *engine, double budget) {
  NEED_ENGINE(engine);
  NOT_IN_CODE(engine, "mend_engine_tick");
  PANIC_EXIT(engine);
  int rc = mend_engine_tick_for(engine, budget);
  PANIC_EXIT_END(engine);
  return rc == -2 ? MEND_EINVAL : rc < 0 ? MEND_ESTORE : MEND_OK;
}

MEND_API int mend_engine_tick_ex(mend_engine *engine, double budget, mend_tick_stats *stats,
                                 size_t stats_size) {
  mend_engine_tick_info info = {0};
  NEED_ENGINE(engine);
  NOT_IN_CODE(engine, "mend_engine_tick_ex");
  PANIC_EXIT(engine);
  int rc = mend_engine_tick_with(engine, budget, &info);
  PANIC_EXIT_END(engine);
  if (rc == -2) return MEND_EINVAL;   /* stats untouched */
  if (stats) {
    mend_tick_stats full = {info.seconds, info.actions, info.ready, info.timers_due,
                            info.committing, info.resumed, info.delivered, info.picked_up,
                            info.heard, info.handed_off, info.gc_steps, info.lua_kb_begin,
                            info.lua_kb_end, info.pickup_seconds, info.work_seconds,
                            info.gc_seconds, info.handoff_seconds};
    memcpy(stats, &full, stats_size < sizeof full ? stats_size : sizeof full);
  }
  return rc < 0 ? MEND_ESTORE : MEND_OK;
}

/* The getters that answer a value refuse another thread as check_engine does (they read what
 * the engine's thread writes), answering as for a NULL engine. */
MEND_API double mend_engine_next_tick(mend_engine *engine) {
  return mend__capi_check_engine(engine, __func__) == MEND_OK ? mend_engine_next_due(engine) : -1;
}

/* Under the lock: a worker thread with a host call's answer may wake an engine its thread has
 * just freed (freeing takes it off the list first), and such a wake-up is no read of it. */
MEND_API void mend_engine_wakeup(mend_engine *engine) {
  if (!engine) return;
  pthread_mutex_lock(&handles_lock);
  if (find_locked(engine)) mend_engine_wake(engine);
  pthread_mutex_unlock(&handles_lock);
}

MEND_API int mend_engine_in_flight_count(mend_engine *engine) {
  return mend__capi_check_engine(engine, __func__) == MEND_OK ? mend_engine_in_flight(engine) : 0;
}

MEND_API int mend_engine_advance_clock(mend_engine *engine, double seconds) {
  NEED_ENGINE(engine);
  NOT_IN_CODE(engine, "mend_engine_advance_clock");
  PANIC_EXIT(engine);
  int rc = mend_engine_advance(engine, seconds);
  PANIC_EXIT_END(engine);
  return rc ? mend__capi_refusal_status(engine) : MEND_OK;
}

MEND_API double mend_engine_time(mend_engine *engine) {
  return mend__capi_check_engine(engine, __func__) == MEND_OK ? mend_engine_now(engine) : 0;
}
