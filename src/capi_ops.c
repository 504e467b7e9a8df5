/*
 * capi_ops: the calls of include/mend.h that read and repair, over an engine mend_engine_new
 * made (capi.c): a run, its history and its pages, and the dead-letter queue as JSON text;
 * breaker overrides, cancels, dead letters retried or resolved; events sent to runs and
 * completion tokens settled. Each failure mapped to one mend_status by the engine's code.
 * Must never: choose a status from a message's text; run workflow code or drive the engine
 * (those calls are capi.c's, under its panic exit); reach the engine's insides (engine.h only).
 */
#include "mend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "capi_int.h"
#include "engine.h"

/* A view the store gave. NULL: no such run (of_run: the view of a run), or the store failed,
 * which its errmsg names. */
static int dump(mend_engine *engine, json_t *v, int of_run, char **out) {
  if (!v) {
    mend_store *s = mend_engine_store(engine);
    mend_engine_note_error(engine, mend_store_errmsg(s));
    return of_run && mend_store_not_found(s) ? MEND_ENOTFOUND : MEND_ESTORE;
  }
  *out = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
  json_decref(v);
  return *out ? MEND_OK : MEND_ENOMEM;
}

/* The query's arguments, before the store is asked. */
static int query_args(mend_engine *engine, const char *what, const char *run_id, int needs_run,
                      char **json_out) {
  NEED_ENGINE_AS(engine, what);
  if (!json_out) return mend__capi_invalid(engine, "json_out is NULL: pass &json");
  *json_out = NULL;
  if (needs_run && !run_id) return mend__capi_invalid(engine, "the run id is NULL");
  return MEND_OK;
}

MEND_API int mend_engine_run_json(mend_engine *engine, const char *run_id, char **json_out) {
  int rc = query_args(engine, __func__, run_id, 1, json_out);
  if (rc != MEND_OK) return rc;
  return dump(engine, mend_store_run(mend_engine_store(engine), run_id), 1, json_out);
}

MEND_API int mend_engine_history_json(mend_engine *engine, const char *run_id, char **json_out) {
  int rc = query_args(engine, __func__, run_id, 1, json_out);
  if (rc != MEND_OK) return rc;
  return dump(engine, mend_store_history(mend_engine_store(engine), run_id), 1, json_out);
}

/* A page's bounds, as GET /runs/{id}/history takes them: NULL, or what is wrong in buf. */
static const char *page_refused(long long after, long long limit, long long tail, char *buf,
                                size_t n) {
  if (after < 0) snprintf(buf, n, "after is %lld: a seq, 0 for the first page", after);
  else if (tail < 0 || tail > MEND_HISTORY_PAGE_MAX)
    snprintf(buf, n, "tail is %lld: 1 to %d rows, or 0 for pages after a seq", tail,
             MEND_HISTORY_PAGE_MAX);
  else if (tail > 0 && (after || limit))
    snprintf(buf, n,
             "tail is the last rows: give it with after and limit 0 (after %lld, limit %lld)",
             after, limit);
  else if (tail == 0 && (limit < 1 || limit > MEND_HISTORY_PAGE_MAX))
    snprintf(buf, n, "limit is %lld: a page has 1 to %d rows", limit, MEND_HISTORY_PAGE_MAX);
  else return NULL;
  return buf;
}

MEND_API int mend_engine_history_page_json(mend_engine *engine, const char *run_id,
                                           long long after, long long limit, long long tail,
                                           char **json_out) {
  int rc = query_args(engine, __func__, run_id, 1, json_out);
  if (rc != MEND_OK) return rc;
  char why[160];
  if (page_refused(after, limit, tail, why, sizeof why)) return mend__capi_invalid(engine, why);
  return dump(engine, mend_store_history_page(mend_engine_store(engine), run_id, (long)after,
                                              (long)limit, (long)tail), 1, json_out);
}

MEND_API int mend_engine_dlq_json(mend_engine *engine, char **json_out) {
  int rc = query_args(engine, __func__, NULL, 0, json_out);
  if (rc != MEND_OK) return rc;
  return dump(engine, mend_store_dlq(mend_engine_store(engine)), 0, json_out);
}

MEND_API int mend_engine_dlq_page_json(mend_engine *engine, const char *after_run,
                                       double after_at, long long limit, char **json_out) {
  int rc = query_args(engine, __func__, NULL, 0, json_out);
  if (rc != MEND_OK) return rc;
  if (limit < 1 || limit > MEND_HISTORY_PAGE_MAX) {
    char why[120];
    snprintf(why, sizeof why, "limit is %lld: a page has 1 to %d entries", limit,
             MEND_HISTORY_PAGE_MAX);
    return mend__capi_invalid(engine, why);
  }
  if (after_run && !isfinite(after_at)) {
    char why[120];
    snprintf(why, sizeof why, "after_at is %s: the `at` of the last entry of the page before, "
             "-1 if it has none", isnan(after_at) ? "nan" : after_at > 0 ? "inf" : "-inf");
    return mend__capi_invalid(engine, why);
  }
  return dump(engine, mend_store_dlq_page(mend_engine_store(engine), after_at, after_run,
                                          (long)limit), 0, json_out);
}

MEND_API void mend_free(void *p) { free(p); }

static int repair_status(mend_engine *engine, int rc, const char *err) {
  if (rc >= 0) return MEND_OK;
  mend_engine_note_error(engine, err);
  return mend__capi_refusal_status(engine);
}

MEND_API int mend_engine_override_breaker(mend_engine *engine, const char *key, const char *op,
                                          double seconds, const char *who) {
  char err[700];
  NEED_ENGINE(engine);
  if (!key || !op)
    return mend__capi_invalid(engine, "mend_engine_override_breaker: key and op may not be NULL");
  if (mend_engine_breaker_set(engine, key, op, seconds, who, err, sizeof err) == 0) return MEND_OK;
  mend_engine_note_error(engine, err);
  return mend__capi_refusal_status(engine);
}

MEND_API int mend_engine_cancel(mend_engine *engine, const char *run_id, const char *who) {
  char err[700];
  NEED_ENGINE(engine);
  if (!run_id) return mend__capi_invalid(engine, "mend_engine_cancel: the run id is NULL");
  return repair_status(engine, mend_engine_cancel_run(engine, run_id, who, err, sizeof err), err);
}

/* A signal of any of the four calls (what: its name), to the run named by its id or its key. */
static int signal_as(mend_engine *engine, const char *what, int by_key, const char *run,
                     const char *name, const char *payload_json, const char *key,
                     const char *who) {
  char err[1200];
  NEED_ENGINE_AS(engine, what);
  if (!run) {
    snprintf(err, sizeof err, "%s: the run %s is NULL", what, by_key ? "key" : "id");
    return mend__capi_invalid(engine, err);
  }
  const char *run_id = by_key ? NULL : run, *run_key = by_key ? run : NULL;
  if (!name) return mend__capi_invalid(engine, "an event needs a name: name is NULL");
  int rc = mend_engine_send_event(engine, run_id, run_key, name, payload_json, key, who, NULL,
                                  err, sizeof err);
  if (rc >= 0) return MEND_OK;
  mend_engine_note_error(engine, err);
  return rc == MEND_EVENT_ENOTFOUND ? MEND_ENOTFOUND
       : rc == MEND_EVENT_EENDED ? MEND_ESTATE
       : rc == MEND_EVENT_EINVAL ? MEND_EINVAL
       : rc == MEND_EVENT_EDEFERRED ? MEND_EDEFERRED
       : mend_engine_lock_held(engine) ? MEND_EBUSY : MEND_ESTORE;
}

MEND_API int mend_engine_signal(mend_engine *engine, const char *run_id, const char *name,
                                const char *payload_json, const char *key) {
  return signal_as(engine, __func__, 0, run_id, name, payload_json, key, NULL);
}

MEND_API int mend_engine_signal_who(mend_engine *engine, const char *run_id, const char *name,
                                    const char *payload_json, const char *key, const char *who) {
  return signal_as(engine, __func__, 0, run_id, name, payload_json, key, who);
}

MEND_API int mend_engine_signal_by_key(mend_engine *engine, const char *run_key, const char *name,
                                       const char *payload_json, const char *key) {
  return signal_as(engine, __func__, 1, run_key, name, payload_json, key, NULL);
}

MEND_API int mend_engine_signal_by_key_who(mend_engine *engine, const char *run_key,
                                           const char *name, const char *payload_json,
                                           const char *key, const char *who) {
  return signal_as(engine, __func__, 1, run_key, name, payload_json, key, who);
}

static int token_status(mend_engine *engine, const char *what, const char *token, int ok,
                        const char *result, const char *kind, const char *message) {
  char err[1200];
  NEED_ENGINE_AS(engine, what);
  if (!token) return mend__capi_invalid(engine, "the token is NULL");
  int rc =
      mend_engine_settle_token(engine, token, ok, result, kind, message, NULL, err, sizeof err);
  if (rc >= 0) return MEND_OK;
  mend_engine_note_error(engine, err);
  return rc == MEND_TOKEN_ENOTFOUND ? MEND_ENOTFOUND
       : rc == MEND_TOKEN_EUSED ? MEND_EUSED
       : rc == MEND_TOKEN_ESTALE ? MEND_ESTALE
       : rc == MEND_TOKEN_EENDED ? MEND_ESTATE
       : rc == MEND_TOKEN_EINVAL ? MEND_EINVAL
       : mend_engine_lock_held(engine) ? MEND_EBUSY : MEND_ESTORE;
}

MEND_API int mend_engine_complete(mend_engine *engine, const char *token, const char *result_json) {
  return token_status(engine, __func__, token, 1, result_json, NULL, NULL);
}

MEND_API int mend_engine_fail(mend_engine *engine, const char *token, const char *kind,
                              const char *message) {
  return token_status(engine, __func__, token, 0, NULL, kind, message);
}

MEND_API int mend_engine_retry_dead_letter(mend_engine *engine, const char *run_id,
                                           const char *who) {
  char err[700];
  NEED_ENGINE(engine);
  if (!run_id)
    return mend__capi_invalid(engine, "mend_engine_retry_dead_letter: the run id is NULL");
  return repair_status(engine, mend_engine_dlq_retry(engine, run_id, who, err, sizeof err), err);
}

MEND_API int mend_engine_resolve_dead_letter(mend_engine *engine, const char *run_id,
                                             const char *who, const char *note) {
  char err[700];
  NEED_ENGINE(engine);
  if (!run_id)
    return mend__capi_invalid(engine, "mend_engine_resolve_dead_letter: the run id is NULL");
  return repair_status(engine, mend_engine_resolve(engine, run_id, who, note, err, sizeof err),
                       err);
}
