/*
 * tokens: completion tokens (`wait = "token"`, issue 18). Owns ctx:token() (a token of 128
 * random bits from the OS for the attempt that asks, its digest recorded and durable before
 * the step's code sees it; the token itself lives only in the attempt's ctx, so a reader of
 * the store cannot complete a step), the step's wait once its execute returned, and
 * completing or failing a token from anywhere: the token is marked used and its outcome put
 * in the run's inbox (named mend.token:<step>, one name a step, as a group's branches wait
 * side by side) in one commit, so that whichever worker holds the run, or takes it next,
 * learns of it as it learns of events. Must never: accept a token twice, or one of an attempt
 * other than the one waiting; take an outcome in a batch other than the one that records the
 * step's end, or one meant for another step; hand the store a token rather than its digest
 * (what a workflow logs goes to the log as it is, and to the history masked).
 */
#include "engine_int.h"

#include <ctype.h>
#include <jansson.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "digest.h"
#include "json.h"
#include "log.h"
#include "util.h"

#define TOKEN_EVENT "mend.token"   /* outcomes stored before they were named by step */
#define TOKEN_BYTES 16
#define TOKEN_PREFIX "mtk_"

static mend_run *find_run(mend_engine *E, const char *id) {
  for (mend_run *r = E->runs; r; r = r->next)
    if (!r->lost && strcmp(r->id, id) == 0) return r;
  return NULL;
}

/* 0 and the text in out (TOKEN_PREFIX and 32 hex digits), or -1: the OS gave no randomness,
 * and a guessable token is worse than none. */
static int new_token(char out[64]) {
  unsigned char b[TOKEN_BYTES];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  int k = snprintf(out, 64, "%s", TOKEN_PREFIX);
  for (size_t i = 0; i < sizeof b; i++) k += snprintf(out + k, (size_t)(64 - k), "%02x", b[i]);
  return 0;
}

/* Where an execution's ctx keeps its token: a key no Lua code can spell. */
static const char ctx_token_key = 0;

/* The digest of a token as the store knows it; -1 when libcrypto failed. */
static int digest_of(const char *token, char out[MEND_DIGEST_HEX]) {
  return mend__digest_hex(token, strlen(token), out);
}

char *mend__mask_tokens(const char *text, size_t len) {
  size_t plen = strlen(TOKEN_PREFIX);
  char *out = NULL;
  for (size_t i = 0; i + plen + 2 * TOKEN_BYTES <= len; i++) {
    if (memcmp(text + i, TOKEN_PREFIX, plen) != 0) continue;
    size_t k = 0;
    while (k < 2 * TOKEN_BYTES && isxdigit((unsigned char)text[i + plen + k])) k++;
    if (k < 2 * TOKEN_BYTES) continue;
    if (!out) {
      if (!(out = malloc(len + 1))) return NULL;
      memcpy(out, text, len);
      out[len] = 0;
    }
    memset(out + i + plen, '*', 2 * TOKEN_BYTES);
    i += plen + 2 * TOKEN_BYTES - 1;
  }
  return out;
}

/* ctx:token() -> the token of this attempt (the same one however often it is asked), kept in
 * its ctx: the store has only its digest and could not give it back. A step run again after
 * its worker stopped is a new attempt with a token of its own; should an attempt ever get a
 * second ctx, it gets a second token, and the first use of either ends both (use_token). */
int mend__ctx_token(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  mend_run *r = mend_engine_current_run(L);
  if (!r) return luaL_error(L, "ctx:token: must be called from a step's execute");
  mend_engine *E = r->E;
  const mend_step_def *def = &r->wf->steps[r->cur];
  if (r->status != MEND_RUN_RUNNING)
    return luaL_error(L, "ctx:token: a compensation has no token to wait for");
  if (!def->wait_token)
    return luaL_error(L,
                      "ctx:token: step \"%s\" does not wait for a token (declare wait = \"token\")",
                      def->name);
  int attempt = r->steps[r->cur].attempts;
  if (lua_rawgetp(L, 1, &ctx_token_key) == LUA_TSTRING) return 1;
  lua_pop(L, 1);
  char token[64], digest[MEND_DIGEST_HEX];
  if (new_token(token)) return luaL_error(L, "ctx:token: the OS gave no random bytes (getrandom)");
  if (digest_of(token, digest)) return luaL_error(L, "ctx:token: libcrypto gave no SHA-256");
  /* Durable before the step hands it out: a completion may come back at once, from anywhere. */
  if (mend_store_put_token(E->store, digest, r->id, def->name, attempt, mend_engine_now(E)) ||
      mend__commit_now(E)) {
    mend__store_failed(E);
    return luaL_error(L, "ctx:token: the token could not be recorded: %s",
                      E->errmsg[0] ? E->errmsg : mend_store_errmsg(E->store));
  }
  lua_pushstring(L, token);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, 1, &ctx_token_key);
  return 1;
}

/* Execute of step i returned: the step waits for its attempt's token. An attempt that asked
 * for none has nothing anyone could complete: that is the workflow's bug. */
void mend__await_token(mend_run *r, int i) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  char *token = NULL;
  int f = mend_store_token_of_attempt(E->store, r->id, def->name, st->attempts, &token);
  free(token);
  if (f <= 0) {
    if (f < 0) mend__store_failed(E);
    mend_error_info info = {MEND_ERR_ERROR, "wait = \"token\": execute returned without asking"
                            " for ctx:token(), so nothing can complete the step", -1, 0, 0};
    mend__attempt_done(r, 0, &info, NULL);
    return;
  }
  int timed = def->timeout > 0 && !isinf(def->timeout);
  st->due = timed ? mend_engine_now(E) + def->timeout : -1;
  mend__set_str(&st->result, NULL);
  mend__step_to(r, i, MEND_STEP_WAITING, NULL, timed ? def->timeout : -1, "a token");
  if (mend__take_token(r, i)) return;
  if (mend__group_stopping(r)) {   /* a branch whose execute ended after its group failed */
    mend__lane_stop(r);
    return;
  }
  r->wait_kind = WAIT_EVENT;
  if (timed) mend__arm(r, &r->wait, st->due);   /* parked if it lasts, as every armed wait */
  else mend__park_soon(r);
}

static void token_event(const char *step, char *out, size_t len) {
  snprintf(out, len, "%s:%s", TOKEN_EVENT, step);
}

/* The oldest outcome in the inbox for the token of the attempt that waits: taken in this
 * batch. Outcomes of other attempts cannot be there (settle refuses them) but for one sent as
 * the attempt ended: those are consumed and named in the history. 1 taken, 0 none. */
int mend__take_token(mend_run *r, int i) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (st->status != MEND_STEP_WAITING || r->status != MEND_RUN_RUNNING) return 0;
  char name[300];
  token_event(def->name, name, sizeof name);
  for (;;) {
    long long seq;
    char *payload, *key;
    int found = mend_store_next_event(E->store, r->id, name, &seq, &payload, &key);
    /* one stored under the old name, for the one step waiting */
    if (found == 0 && def->group < 0)
      found = mend_store_next_event(E->store, r->id, TOKEN_EVENT, &seq, &payload, &key);
    if (found < 0) mend__store_failed(E);
    if (found <= 0) return 0;
    if (mend_store_consume_event(E->store, r->id, seq, def->name, mend_engine_now(E)))
      mend__store_failed(E);
    json_t *p = json_loads(payload, 0, NULL);
    free(payload);
    free(key);
    const char *step = json_string_value(json_object_get(p, "step"));
    int attempt = (int)json_integer_value(json_object_get(p, "attempt"));
    if (!p || !step || strcmp(step, def->name) != 0 || attempt != st->attempts) {
      char msg[300];
      snprintf(msg, sizeof msg, "the outcome of a token of %s attempt %d came too late: ignored",
               step ? step : "?", attempt);
      mend__history(r, def->name, "token", NULL, NULL, st->attempts, msg, -1, NULL);
      json_decref(p);
      continue;
    }
    mend_timer_disarm(&E->timers, &r->wait);
    r->wait_kind = WAIT_NONE;
    st->due = -1;
    int ok = json_is_true(json_object_get(p, "ok"));
    mend__history(r, def->name, "token", NULL, NULL, st->attempts, NULL, -1,
                  ok ? "completed" : "failed");
    mend_engine_log_line(E, "info", r->id, def->name, st->attempts, "token",
                         ok ? "token completed" : "token failed");
    if (ok) {
      json_t *res = json_object_get(p, "result");
      char *text = res ? json_dumps(res, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
      mend__set_str(&st->result, text ? text : "null");
      free(text);
      mend__set_str(&st->error, NULL);
      mend__step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, NULL);
      mend__set_result(r, i);
      mend__after_success(r, i, 0);   /* a branch's lane is done; a run goes on */
    } else {
      const char *kind = json_string_value(json_object_get(p, "kind"));
      const char *message = json_string_value(json_object_get(p, "message"));
      mend_error_info info = {MEND_ERR_FATAL, message ? message : "failed by its token", -1, 0, 0};
      if (kind && strcmp(kind, "retryable") == 0) info.kind = MEND_ERR_RETRYABLE;
      else if (kind && strcmp(kind, "compensable") == 0)
        info.kind = MEND_ERR_COMPENSABLE, info.severity = 1;
      mend__attempt_done(r, 0, &info, NULL);
    }
    json_decref(p);
    return 1;
  }
}

int mend__token_due(mend_run *r, int i, char *msg, size_t len) {
  if (mend__take_token(r, i)) return 1;
  snprintf(msg, len, "no completion of the token within %g s", r->wf->steps[i].timeout);
  return 0;
}

/* ---------------------------------------------------------------- completing */

/* A running run that takes no outcome any more (it fails, or its cancel was asked for: it
 * compensates next, and the outcome would lie in its inbox for ever) says why in its status.
 * in_flight: the token's attempt is still running, in a group that fails: its outcome is
 * taken as the attempt ends (the branch succeeds, and is compensated with the group), so only
 * a cancel, which abandons the attempt, makes the run deaf to it. */
static void deaf_status(mend_engine *E, const char *id, mend_run *r, json_t *row, char *status,
                        size_t len, int in_flight) {
  const char *deaf =
      strcmp(status, "running") == 0 ? mend__run_deaf(E, id, r, row, !in_flight) : NULL;
  if (deaf) snprintf(status, len, "%s", deaf);
}

/* Where the attempt that made a token stands: from memory when the run is held here, else
 * from the store. 0 and status/attempts/due (-1: none), or an MEND_TOKEN_* code with err. */
static int attempt_now(mend_engine *E, const char *run_id, const char *step, int attempt,
                       char *run_status, size_t rslen, char *step_status, size_t sslen,
                       int *attempts, double *due, char *err, int errlen) {
  *due = -1;
  mend_run *r = find_run(E, run_id);
  if (r) {
    snprintf(run_status, rslen, "%s", mend_run_status_name(r->status));
    for (int i = 0; i < r->wf->nsteps; i++) {
      if (strcmp(r->wf->steps[i].name, step) != 0) continue;
      snprintf(step_status, sslen, "%s", mend_step_status_name(r->steps[i].status));
      *attempts = r->steps[i].attempts;
      *due = r->steps[i].due;
      deaf_status(E, run_id, r, NULL, run_status, rslen,
                  r->steps[i].status == MEND_STEP_RUNNING && *attempts == attempt);
      return 0;
    }
    deaf_status(E, run_id, r, NULL, run_status, rslen, 0);
    mend_errorf(err, errlen, "run %s has no step %s", run_id, step);
    return MEND_TOKEN_ESTALE;
  }
  json_t *row = mend_store_run(E->store, run_id);
  if (!row) {
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return mend_store_not_found(E->store) ? MEND_TOKEN_ENOTFOUND : MEND_TOKEN_ESTORE;
  }
  snprintf(run_status, rslen, "%s", json_string_value(json_object_get(row, "status")));
  size_t k;
  json_t *s;
  int rc = MEND_TOKEN_ESTALE, in_flight = 0;
  mend_errorf(err, errlen, "run %s has no step %s", run_id, step);
  json_array_foreach(json_object_get(row, "steps"), k, s) {
    const char *name = json_string_value(json_object_get(s, "name"));
    if (!name || strcmp(name, step) != 0) continue;
    const char *st = json_string_value(json_object_get(s, "status"));
    snprintf(step_status, sslen, "%s", st ? st : "");
    *attempts = (int)json_integer_value(json_object_get(s, "attempts"));
    json_t *d = json_object_get(s, "due");
    if (json_is_number(d)) *due = json_number_value(d);
    in_flight = st && strcmp(st, "running") == 0 && *attempts == attempt;
    rc = 0;
  }
  deaf_status(E, run_id, NULL, row, run_status, rslen, in_flight);
  json_decref(row);
  return rc;
}

int mend_engine_settle_token(mend_engine *E, const char *token, int ok, const char *result,
                             const char *kind, const char *message,
                             char run_id_out[MEND_RUN_ID_LEN], char *err, int errlen) {
  if (E->broken) {
    mend_errorf(err, errlen, "%s", E->errmsg);
    return MEND_TOKEN_ESTORE;
  }
  if (!token || !*token || strlen(token) > 200) {
    mend_errorf(err, errlen, "a token is needed (the text ctx:token() gave)");
    return MEND_TOKEN_EINVAL;
  }
  if (!ok && (!kind || (strcmp(kind, "retryable") != 0 && strcmp(kind, "fatal") != 0 &&
                        strcmp(kind, "compensable") != 0))) {
    mend_errorf(err, errlen,
                "the kind of a failure must be retryable, fatal or compensable, got %s",
                kind ? kind : "none");
    return MEND_TOKEN_EINVAL;
  }
  /* A failure's message is kept in the step's error and history: as a raised one would be, but
   * given by a caller, who hears why it is refused rather than finding it mended. */
  if (!ok && mend__text_refused(E, message, "the failure's message", err, errlen))
    return MEND_TOKEN_EINVAL;
  json_t *res = NULL;
  if (ok && result) {
    char jerr[300];
    res = mend_json_load_in(result, strlen(result), 0, "the result", jerr, sizeof jerr);
    if (!res) {
      mend_errorf(err, errlen, "%s", jerr);
      return MEND_TOKEN_EINVAL;
    }
  }
  char digest[MEND_DIGEST_HEX];
  if (digest_of(token, digest)) {
    json_decref(res);
    mend_errorf(err, errlen, "libcrypto gave no SHA-256 of the token");
    return MEND_TOKEN_ESTORE;
  }
  json_t *row = mend_store_token(E->store, digest);
  if (!row) {
    json_decref(res);
    if (mend_store_errmsg(E->store)[0]) {
      mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
      return MEND_TOKEN_ESTORE;
    }
    mend_errorf(err, errlen, "no token %s", token);
    return MEND_TOKEN_ENOTFOUND;
  }
  char run_id[MEND_RUN_ID_LEN], step[256];
  snprintf(run_id, sizeof run_id, "%s", json_string_value(json_object_get(row, "run_id")));
  snprintf(step, sizeof step, "%s", json_string_value(json_object_get(row, "step")));
  int attempt = (int)json_integer_value(json_object_get(row, "attempt"));
  int used = json_is_number(json_object_get(row, "used"));
  json_decref(row);
  int rc = 0;
  if (used) {
    mend_errorf(err, errlen, "token of run %s step %s attempt %d was used already: a token is"
                " single use", run_id, step, attempt);
    rc = MEND_TOKEN_EUSED;
  }
  char rs[100] = "", ss[32] = "";
  int now_attempts = 0;
  double due = -1;
  if (!rc)
    rc = attempt_now(E, run_id, step, attempt, rs, sizeof rs, ss, sizeof ss, &now_attempts, &due,
                     err, errlen);
  if (!rc && strcmp(rs, "running") != 0) {
    mend_errorf(err, errlen, "run %s is %s: its tokens are of no use any more", run_id, rs);
    rc = MEND_TOKEN_EENDED;
  } else if (!rc && now_attempts != attempt) {
    mend_errorf(err, errlen, "the token is of attempt %d of step %s, which is at attempt %d now:"
                " a token of an earlier attempt is refused", attempt, step, now_attempts);
    rc = MEND_TOKEN_ESTALE;
  } else if (!rc && strcmp(ss, "running") != 0 && strcmp(ss, "waiting") != 0) {
    mend_errorf(err, errlen, "attempt %d of step %s is over (%s): its token is refused", attempt,
                step, ss);
    rc = MEND_TOKEN_ESTALE;
  } else if (!rc && strcmp(ss, "waiting") == 0 && due >= 0 && mend_engine_now(E) > due) {
    /* The deadline is the step's: a worker that was not there to see it pass (killed,
     * stopped) must not find an answer that came after it, and take it. */
    mend_errorf(err, errlen, "attempt %d of step %s timed out %.3f s before this answer: its"
                " token is refused", attempt, step, mend_engine_now(E) - due);
    rc = MEND_TOKEN_ESTALE;
  }
  if (rc) {
    json_decref(res);
    return rc;
  }
  json_t *p = ok ? json_pack("{s:s, s:i, s:b, s:o?}", "step", step, "attempt", attempt, "ok", 1,
                             "result", res)
                 : json_pack("{s:s, s:i, s:b, s:s, s:s?}", "step", step, "attempt", attempt, "ok",
                             0, "kind", kind, "message", message);
  if (!ok) json_decref(res);
  char *text = p ? json_dumps(p, JSON_COMPACT) : NULL;
  json_decref(p);
  if (!text) {
    mend_errorf(err, errlen, "out of memory");
    return MEND_TOKEN_ESTORE;
  }
  double now = mend_engine_now(E);
  char name[300];
  token_event(step, name, sizeof name);
  /* An answer to its caller: another process's lock is waited for as a start waits for it. */
  mend_store_set_busy_wait(E->store, 0);
  int u = mend_store_use_token(E->store, digest, text, now);
  if (u == 0 && mend_store_send_event(E->store, run_id, name, text, digest, now, NULL) < 0) u = -1;
  mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  free(text);
  if (u < 0 || mend__commit_now(E)) {
    mend__store_failed(E);
    mend_errorf(err, errlen, "%s", E->errmsg[0] ? E->errmsg : mend_store_errmsg(E->store));
    return MEND_TOKEN_ESTORE;
  }
  if (u == 1) {
    mend_errorf(err, errlen, "token of run %s step %s attempt %d was used already: a token is"
                " single use", run_id, step, attempt);
    return MEND_TOKEN_EUSED;
  }
  if (run_id_out) snprintf(run_id_out, MEND_RUN_ID_LEN, "%s", run_id);
  char msg[300];
  snprintf(msg, sizeof msg, "token of step %s attempt %d %s", step, attempt,
           ok ? "completed" : "failed");
  mend_engine_log_line(E, "info", run_id, step, attempt, "token", msg);
  /* Held here and waiting for it (the run, or a branch's lane): it goes on at once. */
  mend_run *r = find_run(E, run_id);
  if (!r && mend__unpark(E, run_id, "its token was used") > 0) r = find_run(E, run_id);
  if (r) {
    mend__wake_waiting(r, name);
    mend__kick(E);
  }
  return 0;
}
