/*
 * mend: durable workflows whose steps are Lua functions.
 *
 * This header is the whole public C API. An engine (mend_engine) loads workflow scripts,
 * starts runs, and executes them on a libuv loop with every state change committed to SQLite
 * before the code it announces runs. Handles are opaque; every function that can fail returns
 * a mend_status (MEND_OK is 0) and leaves a message in mend_engine_errmsg().
 *
 * Threading: one engine belongs to one thread; no function may be called concurrently on the
 * same engine. Different engines on different threads are independent.
 */
#ifndef MEND_H
#define MEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MEND_VERSION_MAJOR 0
#define MEND_VERSION_MINOR 1
#define MEND_VERSION_PATCH 0
#define MEND_VERSION_STRING "0.1.0"

/* The library's version as a string, "0.1.0". */
const char *mend_version(void);

typedef enum mend_status {
  MEND_OK = 0,
  MEND_EINVAL,      /* a bad argument */
  MEND_ENOMEM,      /* out of memory */
  MEND_ELOAD,       /* a workflow script failed to load or check */
  MEND_ESTORE,      /* the database failed (full, locked, not a mend database, ...) */
  MEND_ENOTFOUND,   /* no such run or workflow */
  MEND_ECLOCK       /* the operation needs a virtual clock */
} mend_status;

/* A static description of a status code ("storage error"). */
const char *mend_strerror(int status);

typedef struct mend_engine mend_engine;

typedef enum mend_durability_mode {
  MEND_SYNC_FULL = 0,   /* a committed transition survives power loss (SQLite synchronous=FULL) */
  MEND_SYNC_PROCESS = 1 /* survives a crash of the process, may lose the last commits on power loss */
} mend_durability_mode;

typedef struct mend_options {
  const char *db_path;        /* SQLite file; NULL or ":memory:" keeps nothing on disk */
  mend_durability_mode durability;
  int virtual_clock;          /* 1: time moves only when the engine has nothing else to do */
  int has_seed;               /* 1: seed the random generator (backoff jitter) with `seed` */
  uint64_t seed;
  int log_to_stderr;          /* 1: log records to stderr (JSON lines unless a terminal) */
} mend_options;

/* Fills *opts with defaults: in-memory database, full durability, real clock, random seed. */
void mend_options_init(mend_options *opts);

/* Creates an engine with its own Lua state and its own loop. On failure returns the status and
 * sets *out to NULL; `err` (may be NULL) receives a message naming the cause. */
int mend_engine_new(const mend_options *opts, mend_engine **out, char *err, size_t errlen);
/* Destroys the engine. Runs in flight stay in the database as they are. */
void mend_engine_free(mend_engine *engine);
/* The message of the engine's last failure ("" if none). Valid until the next call. */
const char *mend_engine_errmsg(mend_engine *engine);

/* Loads a workflow script (a Lua file returning a definition). On success copies the
 * workflow's name into name_out (if not NULL). MEND_ELOAD names the file, step and field. */
int mend_engine_load(mend_engine *engine, const char *path, char *name_out, size_t name_len);

/* Starts a run of `workflow` with `input_json` (NULL: null). With a non-NULL `run_key` that was
 * used before, returns the existing run's id instead and sets *existed (may be NULL) to 1.
 * run_id_out must hold 17 bytes. */
int mend_engine_start(mend_engine *engine, const char *workflow, const char *input_json,
                      const char *run_key, char run_id_out[17], int *existed);

/* Runs the engine's loop until no run is in flight. MEND_ESTORE if the database failed. */
int mend_engine_run_all(mend_engine *engine);
/* Virtual clock only: moves time on by `seconds`, doing the work that comes due. */
int mend_engine_advance_clock(mend_engine *engine, double seconds);
/* The engine's clock, seconds since the epoch. */
double mend_engine_time(mend_engine *engine);

/* Queries. Each returns a JSON document in *json_out, to be released with mend_free().
 *  run:     {"id","workflow","status","input","key","error","attention","steps":[...]}
 *  history: [{"seq","at","step","event","from","to","attempt","error","delay","detail"}]
 *  dlq:     [{"run_id","reason","step","error","detail","at"}] */
int mend_engine_run_json(mend_engine *engine, const char *run_id, char **json_out);
int mend_engine_history_json(mend_engine *engine, const char *run_id, char **json_out);
int mend_engine_dlq_json(mend_engine *engine, char **json_out);
void mend_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
