/*
 * capi: the public C API of include/mend.h over the engine. Owns the mapping from internal
 * failures to mend_status codes and the JSON text handed to hosts; nothing else.
 */
#include "mend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "log.h"

const char *mend_version(void) { return MEND_VERSION_STRING; }

const char *mend_strerror(int status) {
  switch (status) {
    case MEND_OK: return "ok";
    case MEND_EINVAL: return "invalid argument";
    case MEND_ENOMEM: return "out of memory";
    case MEND_ELOAD: return "workflow failed to load";
    case MEND_ESTORE: return "storage error";
    case MEND_ENOTFOUND: return "not found";
    case MEND_ECLOCK: return "needs a virtual clock";
    default: return "unknown error";
  }
}

void mend_options_init(mend_options *opts) {
  memset(opts, 0, sizeof *opts);
  opts->db_path = ":memory:";
}

/* One sink serves every engine that logs to stderr: it holds only the stream. */
static mend_log_sink stderr_sink;

int mend_engine_new(const mend_options *opts, mend_engine **out, char *err, size_t errlen) {
  mend_options defaults;
  if (!opts) { mend_options_init(&defaults); opts = &defaults; }
  mend_engine_config cfg = {0};
  cfg.db_path = opts->db_path ? opts->db_path : ":memory:";
  cfg.durability = opts->durability == MEND_SYNC_PROCESS ? MEND_DURABILITY_PROCESS : MEND_DURABILITY_FULL;
  cfg.virtual_clock = opts->virtual_clock;
  cfg.has_seed = opts->has_seed;
  cfg.seed = opts->seed;
  if (opts->log_to_stderr) {
    mend_log_sink_init(&stderr_sink, stderr);
    cfg.log = mend_log_to_sink;
    cfg.log_ud = &stderr_sink;
  }
  char msg[1024];
  *out = mend_engine_create(NULL, &cfg, msg, sizeof msg);
  if (!*out) {
    if (err && errlen) snprintf(err, errlen, "%s", msg);
    return MEND_ESTORE;
  }
  return MEND_OK;
}

void mend_engine_free(mend_engine *engine) { mend_engine_destroy(engine); }

const char *mend_engine_errmsg(mend_engine *engine) { return mend_engine_error(engine); }

int mend_engine_load(mend_engine *engine, const char *path, char *name_out, size_t name_len) {
  char err[1024];
  mend_workflow *wf = mend_engine_load_file(engine, path, err, sizeof err);
  if (!wf) {
    mend_engine_note_error(engine, err);
    return MEND_ELOAD;
  }
  if (name_out && name_len) snprintf(name_out, name_len, "%s", wf->name);
  return MEND_OK;
}

int mend_engine_start(mend_engine *engine, const char *workflow, const char *input_json,
                      const char *run_key, char run_id_out[17], int *existed) {
  int ex = 0;
  char err[1024];
  if (!workflow || !run_id_out) return MEND_EINVAL;
  if (!mend_engine_workflow(engine, workflow)) {
    snprintf(err, sizeof err, "no workflow named \"%s\" is loaded", workflow);
    mend_engine_note_error(engine, err);
    return MEND_ENOTFOUND;
  }
  if (mend_engine_start_json(engine, workflow, input_json, run_key, run_id_out, &ex, err, sizeof err)) {
    mend_engine_note_error(engine, err);
    return MEND_EINVAL;
  }
  if (existed) *existed = ex;
  return MEND_OK;
}

int mend_engine_run_all(mend_engine *engine) {
  return mend_engine_run(engine) ? MEND_ESTORE : MEND_OK;
}

int mend_engine_advance_clock(mend_engine *engine, double seconds) {
  return mend_engine_advance(engine, seconds) ? MEND_ECLOCK : MEND_OK;
}

double mend_engine_time(mend_engine *engine) { return mend_engine_now(engine); }

static int dump(json_t *v, char **out) {
  if (!v) return MEND_ENOTFOUND;
  *out = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
  json_decref(v);
  return *out ? MEND_OK : MEND_ENOMEM;
}

int mend_engine_run_json(mend_engine *engine, const char *run_id, char **json_out) {
  return dump(mend_store_run(mend_engine_store(engine), run_id), json_out);
}

int mend_engine_history_json(mend_engine *engine, const char *run_id, char **json_out) {
  return dump(mend_store_history(mend_engine_store(engine), run_id), json_out);
}

int mend_engine_dlq_json(mend_engine *engine, char **json_out) {
  return dump(mend_store_dlq(mend_engine_store(engine)), json_out);
}

void mend_free(void *p) { free(p); }
