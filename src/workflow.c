/*
 * workflow: turns a definition table into a checked mend_workflow (see workflow.h).
 *
 * Unknown fields are refused everywhere: a misspelt `compensate` would otherwise silently
 * leave a step without compensation, which is the kind of mistake a saga cannot afford.
 * Definitions are read raw (no __index, no __len): reading one runs no code of the workflow,
 * and no size is taken from it on trust. Must never: let a definition with an unknown or
 * ill-typed field load; call workflow code while reading it.
 */
#include "workflow.h"

#include <mend.h>
#include "utf8.h"
#include "util.h"

#include <errno.h>
#include <jansson.h>
#include <lauxlib.h>
#include <math.h>
#include <stdarg.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Refuses keys of the table at idx that are not in `allowed` (NULL-terminated). */
static int check_fields(lua_State *L, int idx, const char *what, const char *const *allowed,
                        char *err, int errlen) {
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pop(L, 1);
      return mend_errorf(err, errlen, "%s has a key that is not a field name", what);
    }
    const char *key = lua_tostring(L, -1);
    int known = 0;
    for (const char *const *a = allowed; *a; a++) known |= strcmp(*a, key) == 0;
    if (!known) {
      mend_errorf(err, errlen, "%s.%s is not a known field", what, key);
      lua_pop(L, 1);
      return -1;
    }
  }
  return 0;
}

/* Reads an optional number field; 1 if present, 0 if absent, -1 if of the wrong type. */
/* t[field] without metamethods. [-0, +1, m] */
static int raw_field(lua_State *L, int idx, const char *field) {
  idx = lua_absindex(L, idx);
  lua_pushstring(L, field);
  return lua_rawget(L, idx);
}

/* Whether the table at `list` is a non-empty list and nothing else: its keys exactly 1 to its
 * length. A step past a hole (`[1] = a, [3] = c`, whose length may be 1) or under a key would
 * be silently left out. Raw: no metamethod runs. [-0, +0, -] */
static int only_list(lua_State *L, int list) {
  lua_Unsigned len = lua_rawlen(L, list), keys = 0;
  int listed = len >= 1;
  lua_pushnil(L);
  while (listed && lua_next(L, list)) {
    lua_pop(L, 1);
    keys++;
    listed = lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1 &&
             (lua_Unsigned)lua_tointeger(L, -1) <= len;
    if (!listed) lua_pop(L, 1);
  }
  return listed && keys == len;
}

static int opt_number(lua_State *L, int idx, const char *field, const char *what, double *out,
                      char *err, int errlen) {
  int t = raw_field(L, idx, field);
  int r = 0;
  if (t == LUA_TNUMBER) { *out = lua_tonumber(L, -1); r = 1; }
  /* no rule of a number holds for NaN, and %g would print it as "-nan" */
  if (r == 1 && isnan(*out))
    r = mend_errorf(err, errlen, "%s.%s must be a number, got NaN", what, field);
  else if (t != LUA_TNIL && t != LUA_TNUMBER)
    r = mend_errorf(err, errlen, "%s.%s must be a number, got %s", what, field, lua_typename(L, t));
  lua_pop(L, 1);
  return r;
}

static int opt_int(lua_State *L, int idx, const char *field, const char *what, int *out,
                   char *err, int errlen) {
  double d = 0;   /* set when r == 1; gcc 12 -O3 cannot see that */
  int r = opt_number(L, idx, field, what, &d, err, errlen);
  if (r == 1) {
    /* 1e12 is an integer to the person who wrote it: say which bound it passed */
    if (d > INT_MAX || d < INT_MIN)
      return mend_errorf(err, errlen, "%s.%s must be an integer %s %d, got %g", what, field,
                         d > 0 ? "of at most" : "of at least", d > 0 ? INT_MAX : INT_MIN, d);
    if (d != floor(d))
      return mend_errorf(err, errlen, "%s.%s must be an integer, got %g", what, field, d);
    *out = (int)d;
  }
  return r;
}

static int opt_string(lua_State *L, int idx, const char *field, const char *what,
                      const char **out, char *err, int errlen) {
  int t = raw_field(L, idx, field);
  int r = 0;
  size_t len = 0;
  if (t == LUA_TSTRING) { *out = lua_tolstring(L, -1, &len); r = 1; }   /* anchored in the table */
  else if (t != LUA_TNIL)
    r = mend_errorf(err, errlen, "%s.%s must be a string, got %s", what, field, lua_typename(L, t));
  /* Read as C strings from here on: "a\0b" would be taken for "a", another step's name. Stored
   * (a workflow's, an event's, a breaker's name), where PostgreSQL takes UTF-8 only. Every
   * string field read here names something (a workflow, step, event, breaker, mode) that
   * callers look up and copy into buffers of MEND_NAME_MAX + 1 bytes. */
  if (r == 1 && strlen(*out) != len)
    r = mend_errorf(err, errlen, "%s.%s holds a NUL byte", what, field);
  else if (r == 1 && !mend_utf8_valid(*out, len))
    r = mend_errorf(err, errlen, "%s.%s is not UTF-8 text", what, field);
  else if (r == 1 && len > MEND_NAME_MAX)
    r = mend_errorf(err, errlen, "%s.%s is %zu bytes long, over the longest name of %d bytes "
                    "(MEND_NAME_MAX)", what, field, len, MEND_NAME_MAX);
  lua_pop(L, 1);
  return r;
}

int mend_parse_retry(lua_State *L, int idx, const char *what, mend_retry_policy *p,
                     char *err, int errlen) {
  static const char *const fields[] = {"max_attempts", "initial", "multiplier", "max_delay",
    "jitter", "strategy", "jitter_mode", "max_retry_after", "attention_after", NULL};
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    return mend_errorf(err, errlen, "%s must be a table, got %s", what, luaL_typename(L, idx));
  if (check_fields(L, idx, what, fields, err, errlen)) return -1;
  const char *name = NULL;
  if (opt_int(L, idx, "max_attempts", what, &p->max_attempts, err, errlen) < 0 ||
      opt_number(L, idx, "initial", what, &p->initial, err, errlen) < 0 ||
      opt_number(L, idx, "multiplier", what, &p->multiplier, err, errlen) < 0 ||
      opt_number(L, idx, "max_delay", what, &p->max_delay, err, errlen) < 0 ||
      opt_number(L, idx, "jitter", what, &p->jitter, err, errlen) < 0 ||
      opt_number(L, idx, "max_retry_after", what, &p->max_retry_after, err, errlen) < 0 ||
      opt_int(L, idx, "attention_after", what, &p->attention_after, err, errlen) < 0)
    return -1;
  int r = opt_string(L, idx, "strategy", what, &name, err, errlen);
  if (r < 0) return -1;
  if (r == 1 && mend_strategy_parse(name, &p->strategy))
    return mend_errorf(err, errlen, "%s.strategy must be exponential, linear or fixed, got \"%s\"",
                       what, name);
  r = opt_string(L, idx, "jitter_mode", what, &name, err, errlen);
  if (r < 0) return -1;
  if (r == 1 && mend_jitter_mode_parse(name, &p->jitter_mode))
    return mend_errorf(err, errlen,
                       "%s.jitter_mode must be proportional, full or decorrelated, got \"%s\"",
                       what, name);
  char why[200];
  if (mend_retry_policy_check(p, why, sizeof why))
    return mend_errorf(err, errlen, "%s.%s", what, why);
  return 0;
}

static int parse_breaker_table(lua_State *L, int idx, const char *what, mend_breaker_policy *p,
                               const char **key, char *err, int errlen) {
  static const char *const fields[] = {"key", "failure_threshold", "open_seconds",
    "success_threshold", "half_open_max", "max_concurrency", NULL};
  if (check_fields(L, idx, what, fields, err, errlen)) return -1;
  if ((key && opt_string(L, idx, "key", what, key, err, errlen) < 0) ||
      opt_int(L, idx, "failure_threshold", what, &p->failure_threshold, err, errlen) < 0 ||
      opt_number(L, idx, "open_seconds", what, &p->open_seconds, err, errlen) < 0 ||
      opt_int(L, idx, "success_threshold", what, &p->success_threshold, err, errlen) < 0 ||
      opt_int(L, idx, "half_open_max", what, &p->half_open_max, err, errlen) < 0 ||
      opt_int(L, idx, "max_concurrency", what, &p->max_concurrency, err, errlen) < 0)
    return -1;
  if (p->failure_threshold < 1)
    return mend_errorf(err, errlen, "%s.failure_threshold must be >= 1, got %d", what,
                       p->failure_threshold);
  if (!(p->open_seconds >= 0))
    return mend_errorf(err, errlen, "%s.open_seconds must be >= 0, got %g", what, p->open_seconds);
  if (p->success_threshold < 1)
    return mend_errorf(err, errlen, "%s.success_threshold must be >= 1, got %d", what,
                       p->success_threshold);
  if (p->half_open_max < 1)
    return mend_errorf(err, errlen, "%s.half_open_max must be >= 1, got %d", what,
                       p->half_open_max);
  if (p->max_concurrency < 0)
    return mend_errorf(err, errlen, "%s.max_concurrency must be >= 0, got %d", what,
                       p->max_concurrency);
  return 0;
}

/* Reads an optional function field into a registry reference. */
static int opt_function_ref(lua_State *L, int idx, const char *field, const char *what,
                            int *ref, char *err, int errlen) {
  int t = raw_field(L, idx, field);
  *ref = LUA_NOREF;
  if (t == LUA_TFUNCTION) { *ref = luaL_ref(L, LUA_REGISTRYINDEX); return 1; }
  lua_pop(L, 1);
  if (t != LUA_TNIL)
    return mend_errorf(err, errlen, "%s.%s must be a function, got %s", what, field,
                       lua_typename(L, t));
  return 0;
}

static void step_free(lua_State *L, mend_step_def *s) {
  free(s->name);
  free(s->breaker_key);
  free(s->wait_for);
  free(s->child);
  luaL_unref(L, LUA_REGISTRYINDEX, s->child_input_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->name_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->execute_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->compensate_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->key_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->when_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, s->map_ref);
  if (s->item_wf) mend_workflow_free(L, s->item_wf);
}

/* The two waits for the world besides wait_for: `wait = "token"` (execute hands a token out,
 * the step waits for it) and `child = "workflow"` (a run of its own, waited for). */
static int parse_outside_waits(lua_State *L, int idx, mend_step_def *s, const char *prefix,
                               char *err, int errlen) {
  char sub[400];
  const char *wait = NULL, *child = NULL;
  if (opt_string(L, idx, "wait", "step", &wait, sub, sizeof sub) < 0 ||
      opt_string(L, idx, "child", "step", &child, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (wait && strcmp(wait, "token") != 0)
    return mend_errorf(err, errlen, "%swait must be \"token\", got \"%s\"", prefix, wait);
  if (wait && s->execute_ref == LUA_NOREF)
    return mend_errorf(err, errlen, "%swait = \"token\" needs execute: it hands ctx:token() to"
                       " whoever completes it", prefix);
  if (wait && s->wait_for)
    return mend_errorf(err, errlen, "%swait and wait_for cannot go together", prefix);
  s->wait_token = wait != NULL;
  if (child && !*child)
    return mend_errorf(err, errlen, "%schild must name a workflow, got \"\"", prefix);
  if (child && (s->execute_ref != LUA_NOREF || s->wait_for || wait))
    return mend_errorf(err, errlen, "%schild cannot go with execute, wait_for or wait: the child"
                       " run's results are the step's result", prefix);
  if (child && raw_field(L, idx, "idempotency_key") != LUA_TNIL) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%schild and idempotency_key cannot go together: the child run"
                       " is keyed by its parent and step", prefix);
  }
  if (child) lua_pop(L, 1);
  if (opt_function_ref(L, idx, "input", "step", &s->child_input_ref, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (s->child_input_ref != LUA_NOREF && !child)
    return mend_errorf(err, errlen, "%sinput goes only with child", prefix);
  if (child) s->child = mend_dupstr(child);
  return 0;
}

/* A step, or with `group` the name of its parallel group, a branch of it (named
 * "<group>/<name>"). */
static int parse_step(lua_State *L, int idx, int n, const char *group,
                      const mend_retry_policy *retry, const mend_retry_policy *comp,
                      const mend_breaker_policy *breaker, mend_step_def *s, char *err, int errlen) {
  static const char *const fields[] = {"name", "execute", "compensate", "retry",
    "compensate_retry", "breaker", "timeout", "idempotency_key", "sleep", "description", "wait_for",
    "when", "wait", "child", "input", NULL};
  char what[200], in[160] = "";
  *s = (mend_step_def){.name_ref = LUA_NOREF, .execute_ref = LUA_NOREF,
                       .compensate_ref = LUA_NOREF, .key_ref = LUA_NOREF, .when_ref = LUA_NOREF,
                       .group = -1, .map_ref = LUA_NOREF,
                       .child_input_ref = LUA_NOREF};
  if (group) snprintf(in, sizeof in, "step \"%s\": ", group);
  const char *kind = group ? "branch" : "step";
  if (!lua_istable(L, idx))
    return mend_errorf(err, errlen, "%s%s #%d must be a table, got %s", in, kind, n,
                       luaL_typename(L, idx));
  const char *name = NULL;
  snprintf(what, sizeof what, "%s%s #%d", in, kind, n);
  if (opt_string(L, idx, "name", what, &name, err, errlen) < 0) return -1;
  if (n == 0) {   /* a map's step: its items are named by their index */
    if (name)
      return mend_errorf(err, errlen, "%sstep.name: a map's step is named by each item's index",
                         in);
    name = "item";
    kind = "step";
  }
  if (!name || !*name) return mend_errorf(err, errlen, "%s%s #%d: name is missing", in, kind, n);
  if (group && strchr(name, '/'))
    return mend_errorf(err, errlen, "%sbranch \"%s\": a branch's name cannot hold a slash", in,
                       name);
  char prefix[400];
  if (n == 0) snprintf(prefix, sizeof prefix, "%s", in);
  else snprintf(prefix, sizeof prefix, "%s%s \"%s\": ", in, kind, name);
  /* Field errors read `step "charge": retry.initial must be >= 0`. */
  char sub[400];
  if (group && raw_field(L, idx, "parallel") != LUA_TNIL) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen,
                       "%sa branch cannot be a parallel group itself (groups do not nest)", prefix);
  }
  if (group) lua_pop(L, 1);
  if (check_fields(L, idx, "step", fields, sub, sizeof sub))
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (group) {
    size_t gl = strlen(group), nl = strlen(name);
    s->name = malloc(gl + 1 + nl + 1);
    if (!s->name) return mend_errorf(err, errlen, "%sout of memory", prefix);
    memcpy(s->name, group, gl);
    s->name[gl] = '/';
    memcpy(s->name + gl + 1, name, nl + 1);
    s->branch = s->name + gl + 1;
  } else {
    s->name = mend_dupstr(name);
  }
  name = s->name;
  lua_pushstring(L, name);
  s->name_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (opt_function_ref(L, idx, "when", "step", &s->when_ref, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  s->retry = *retry;
  s->compensate_retry = *comp;
  s->breaker = *breaker;
  if (opt_function_ref(L, idx, "execute", "step", &s->execute_ref, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (opt_number(L, idx, "sleep", "step", &s->sleep, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (!(s->sleep >= 0))
    return mend_errorf(err, errlen, "%ssleep must be >= 0 seconds, got %g", prefix, s->sleep);
  if (isinf(s->sleep))
    return mend_errorf(err, errlen, "%ssleep must be a finite number of seconds, got %g", prefix,
                       s->sleep);
  const char *wait_for = NULL;
  if (opt_string(L, idx, "wait_for", "step", &wait_for, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (wait_for && !*wait_for)
    return mend_errorf(err, errlen, "%swait_for must name an event, got \"\"", prefix);
  if (wait_for && mend_event_name_reserved(wait_for))
    return mend_errorf(err, errlen, "%swait_for \"%.100s\" names an event of mend's own (a "
                       "token's outcome, a child's end): no one can send it", prefix, wait_for);
  /* A step that waits takes its result from the event: there is nothing of its own to run. */
  if (wait_for && s->execute_ref != LUA_NOREF)
    return mend_errorf(err, errlen, "%swait_for and execute cannot go together: a step either waits"
                       " for an event (its payload is the result) or executes", prefix);
  if (wait_for && raw_field(L, idx, "idempotency_key") != LUA_TNIL) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%swait_for and idempotency_key cannot go together: a step that"
                       " waits executes nothing to key", prefix);
  }
  if (wait_for) lua_pop(L, 1);
  if (wait_for) s->wait_for = mend_dupstr(wait_for);
  if (parse_outside_waits(L, idx, s, prefix, err, errlen)) return -1;
  /* A map's items share one step definition, by whose name tokens and child runs are filed:
   * they would be told apart by nothing. A group's branches have names of their own. */
  if (n == 0 && (s->wait_token || s->child))
    return mend_errorf(err, errlen, "%sstep: %s cannot go in a map's step (its items share one"
                       " step's name): use a parallel group, or a step of its own", prefix,
                       s->child ? "child" : "wait = \"token\"");
  /* A step may be a pure wait: `sleep` and nothing to execute. */
  if (s->execute_ref == LUA_NOREF && s->sleep <= 0 && !wait_for && !s->child)
    return mend_errorf(err, errlen, "%sexecute is missing (a function is required)", prefix);
  if (opt_function_ref(L, idx, "compensate", "step", &s->compensate_ref, sub, sizeof sub) < 0 ||
      opt_function_ref(L, idx, "idempotency_key", "step", &s->key_ref, sub, sizeof sub) < 0 ||
      opt_number(L, idx, "timeout", "step", &s->timeout, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (!(s->timeout >= 0))
    return mend_errorf(err, errlen, "%stimeout must be >= 0, got %g", prefix, s->timeout);
  if (s->child && s->timeout > 0)
    return mend_errorf(err, errlen, "%schild and timeout cannot go together: a child run ends in"
                       " its own time (give its own steps timeouts)", prefix);
  /* A wait that times out is not retried unless the step says so: waiting a week again is a
   * decision, not a default (the workflow's retry is for steps that execute). */
  if (wait_for || s->child) s->retry.max_attempts = 1;
  if (s->child && s->compensate_ref != LUA_NOREF)
    return mend_errorf(err, errlen, "%schild and compensate cannot go together: a child run that"
                       " succeeded is compensated as a whole, by its own saga", prefix);
  if (raw_field(L, idx, "retry") != LUA_TNIL &&
      mend_parse_retry(L, -1, "retry", &s->retry, sub, sizeof sub)) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  }
  lua_pop(L, 1);
  if (raw_field(L, idx, "compensate_retry") != LUA_TNIL &&
      mend_parse_retry(L, -1, "compensate_retry", &s->compensate_retry, sub, sizeof sub)) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  }
  lua_pop(L, 1);
  const char *key = name;
  int t = raw_field(L, idx, "breaker");
  if (t == LUA_TSTRING) {
    size_t len;
    key = lua_tolstring(L, -1, &len);
    if (strlen(key) != len || !mend_utf8_valid(key, len)) {
      lua_pop(L, 1);
      return mend_errorf(err, errlen, "%sbreaker %s", prefix, strlen(key) != len
                         ? "holds a NUL byte" : "is not UTF-8 text");
    }
  } else if (t == LUA_TTABLE) {
    if (parse_breaker_table(L, -1, "breaker", &s->breaker, &key, sub, sizeof sub)) {
      lua_pop(L, 1);
      return mend_errorf(err, errlen, "%s%s", prefix, sub);
    }
  } else if (t != LUA_TNIL) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%sbreaker must be a key (string) or a table, got %s", prefix,
                       lua_typename(L, t));
  }
  s->breaker_key = mend_dupstr(key && *key ? key : name);
  lua_pop(L, 1);
  return 0;
}

/* A parallel group at steps[*at], its branches after it; *at moves past them. The group itself
 * executes nothing: the fields of a step that executes belong in its branches. */
static int parse_group(lua_State *L, int idx, int n, const mend_retry_policy *retry,
                       const mend_retry_policy *comp, const mend_breaker_policy *breaker,
                       mend_workflow *wf, int *at, char *err, int errlen) {
  static const char *const fields[] = {"name", "parallel", "max_concurrency", "when",
    "description", NULL};
  static const char *const elsewhere[] = {"execute", "compensate", "retry", "compensate_retry",
    "breaker", "timeout", "idempotency_key", "sleep", "wait_for", NULL};
  char what[80], sub[400], prefix[200];
  const char *name = NULL;
  idx = lua_absindex(L, idx);   /* the list of branches goes above it */
  snprintf(what, sizeof what, "step #%d", n);
  if (opt_string(L, idx, "name", what, &name, err, errlen) < 0) return -1;
  if (!name || !*name) return mend_errorf(err, errlen, "step #%d: name is missing", n);
  snprintf(prefix, sizeof prefix, "step \"%s\": ", name);
  if (strchr(name, '/'))
    return mend_errorf(err, errlen, "%sa parallel group's name cannot hold a slash", prefix);
  for (const char *const *f = elsewhere; *f; f++) {
    int t = raw_field(L, idx, *f);
    lua_pop(L, 1);
    if (t != LUA_TNIL)
      return mend_errorf(err, errlen, "%s%s belongs in the group's branches: a parallel group"
                         " executes nothing itself", prefix, *f);
  }
  if (check_fields(L, idx, "step", fields, sub, sizeof sub))
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (raw_field(L, idx, "parallel") != LUA_TTABLE) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%sparallel must be a non-empty list of steps (its branches)",
                       prefix);
  }
  int list = lua_absindex(L, -1);
  lua_Unsigned len = lua_rawlen(L, list);
  if (!only_list(L, list)) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%sparallel must be a non-empty list of steps (its branches)",
                       prefix);
  }
  int max = (int)len;
  double d = 0;
  int r = opt_number(L, idx, "max_concurrency", "", &d, sub, sizeof sub);
  if (r < 0 || (r == 1 && (!(d >= 1 && d <= INT_MAX) || d != floor(d)))) {
    lua_pop(L, 1);
    if (r < 0)
      return mend_errorf(err, errlen, "%smax_concurrency must be a positive integer, got %s",
                         prefix, strrchr(sub, ' ') + 1);
    return mend_errorf(err, errlen, "%smax_concurrency must be a positive integer, got %g", prefix,
                       d);
  }
  if (r == 1 && d < max) max = (int)d;
  int g = *at;
  mend_step_def *s = &wf->steps[g];
  *s = (mend_step_def){.name_ref = LUA_NOREF,
                       .execute_ref = LUA_NOREF,
                       .compensate_ref = LUA_NOREF,
                       .key_ref = LUA_NOREF,
                       .when_ref = LUA_NOREF,
                       .group = -1,
                       .map_ref = LUA_NOREF,
                       .retry = *retry,
                       .compensate_retry = *comp,
                       .breaker = *breaker,
                       .nbranches = (int)len,
                       .max_concurrency = max};
  s->name = mend_dupstr(name);
  wf->nsteps = ++*at;
  lua_pushstring(L, name);
  s->name_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (opt_function_ref(L, idx, "when", "step", &s->when_ref, sub, sizeof sub) < 0) {
    lua_pop(L, 1);
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  }
  for (lua_Unsigned b = 1; b <= len; b++) {
    lua_rawgeti(L, list, (lua_Integer)b);
    r = parse_step(L, -1, (int)b, name, retry, comp, breaker, &wf->steps[*at], err, errlen);
    lua_pop(L, 1);
    wf->steps[*at].group = g;
    wf->nsteps = ++*at;   /* so that free releases what this branch took */
    if (r) {
      lua_pop(L, 1);
      return -1;
    }
  }
  lua_pop(L, 1);   /* parallel */
  return 0;
}

/* A map at steps[*at]: the step each item runs is kept in a one-step workflow of its own
 * (item_wf), which the engine runs for each item. */
static int parse_map(lua_State *L, int idx, int n, const mend_retry_policy *retry,
                     const mend_retry_policy *comp, const mend_breaker_policy *breaker,
                     mend_workflow *wf, int *at, char *err, int errlen) {
  static const char *const fields[] = {"name", "map", "step", "max_concurrency", "when",
    "description", NULL};
  static const char *const elsewhere[] = {"execute", "compensate", "retry", "compensate_retry",
    "breaker", "timeout", "idempotency_key", "sleep", "wait_for", "parallel", NULL};
  char what[80], sub[400], prefix[200];
  const char *name = NULL;
  idx = lua_absindex(L, idx);
  snprintf(what, sizeof what, "step #%d", n);
  if (opt_string(L, idx, "name", what, &name, err, errlen) < 0) return -1;
  if (!name || !*name) return mend_errorf(err, errlen, "step #%d: name is missing", n);
  snprintf(prefix, sizeof prefix, "step \"%s\": ", name);
  if (strchr(name, '/'))
    return mend_errorf(err, errlen, "%sa map's name cannot hold a slash", prefix);
  for (const char *const *f = elsewhere; *f; f++) {
    int t = raw_field(L, idx, *f);
    lua_pop(L, 1);
    if (t != LUA_TNIL)
      return mend_errorf(err, errlen, "%s%s belongs in the map's step (step = {...}): a map"
                         " executes nothing itself", prefix, *f);
  }
  if (check_fields(L, idx, "step", fields, sub, sizeof sub))
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  double d = 0;
  int max = 8;
  int r = opt_number(L, idx, "max_concurrency", "", &d, sub, sizeof sub);
  if (r < 0) return mend_errorf(err, errlen, "%smax_concurrency must be a positive integer, got %s",
                                prefix, strrchr(sub, ' ') + 1);
  if (r == 1 && (!(d >= 1 && d <= INT_MAX) || d != floor(d)))
    return mend_errorf(err, errlen, "%smax_concurrency must be a positive integer, got %g", prefix,
                       d);
  if (r == 1) max = (int)d;
  int t = raw_field(L, idx, "step");
  lua_pop(L, 1);
  if (t == LUA_TNIL)
    return mend_errorf(err, errlen, "%sstep is missing: a map needs the step each item runs",
                       prefix);
  if (t != LUA_TTABLE)
    return mend_errorf(err, errlen, "%sstep must be a table, got %s", prefix, lua_typename(L, t));
  int g = *at;
  mend_step_def *s = &wf->steps[g];
  *s = (mend_step_def){.name_ref = LUA_NOREF, .execute_ref = LUA_NOREF, .compensate_ref = LUA_NOREF,
                       .key_ref = LUA_NOREF, .when_ref = LUA_NOREF, .group = -1,
                       .map_ref = LUA_NOREF, .retry = *retry, .compensate_retry = *comp,
                       .breaker = *breaker, .max_concurrency = max};
  s->name = mend_dupstr(name);
  wf->nsteps = ++*at;
  lua_pushstring(L, name);
  s->name_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (opt_function_ref(L, idx, "when", "step", &s->when_ref, sub, sizeof sub) < 0 ||
      opt_function_ref(L, idx, "map", "step", &s->map_ref, sub, sizeof sub) < 0)
    return mend_errorf(err, errlen, "%s%s", prefix, sub);
  if (s->map_ref == LUA_NOREF)
    return mend_errorf(err, errlen, "%smap is missing (a function that returns the list)", prefix);
  mend_workflow *iw = calloc(1, sizeof *iw);
  if (iw) iw->steps = calloc(1, sizeof *iw->steps);
  if (!iw || !iw->steps) {
    free(iw);
    return mend_errorf(err, errlen, "%sout of memory", prefix);
  }
  s->item_wf = iw;
  iw->name = mend_dupstr(wf->name);
  lua_rawgeti(L, LUA_REGISTRYINDEX, wf->name_ref);
  iw->name_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  iw->def_ref = LUA_NOREF;
  raw_field(L, idx, "step");
  r = parse_step(L, -1, 0, name, retry, comp, breaker, &iw->steps[0], err, errlen);
  lua_pop(L, 1);
  iw->nsteps = 1;
  if (r) return -1;
  const mend_step_def *item = &iw->steps[0];
  if (item->wait_for || item->when_ref != LUA_NOREF || item->execute_ref == LUA_NOREF)
    return mend_errorf(err, errlen, "%sstep: %s", prefix,
                       item->wait_for ? "wait_for: an item executes, it does not wait for an event"
                       : item->when_ref != LUA_NOREF ? "when: put it on the map step itself"
                       : "execute is missing (a function is required)");
  /* The map has no retry of its own: a retryable error of its when or its list function is
   * retried by the policy its step carries. */
  s->retry = item->retry;
  return 0;
}

/* The most steps a workflow may have (workflow.h has it where the engine reads it). */

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
  return h;
}

/* The steps' names as a JSON array, or NULL with the reason in err. */
static char *names_json(const mend_workflow *wf, const char *source, char *err, int errlen) {
  json_t *a = json_array();
  for (int i = 0; a && i < wf->nsteps; i++) {
    json_t *name = json_string(wf->steps[i].name);
    if (!name) {
      mend_errorf(err, errlen, "%s: step #%d: its name is not valid UTF-8", source, i + 1);
      json_decref(a);
      return NULL;
    }
    if (json_array_append_new(a, name) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  if (!text) mend_errorf(err, errlen, "%s: out of memory", source);
  return text;
}

mend_workflow *mend_workflow_from_table(lua_State *L, int idx, const char *source,
                                        const char *version, char *err, int errlen) {
  static const char *const fields[] = {"name", "retry", "compensate_retry", "breaker", "steps",
    "description", NULL};
  char sub[480];
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx)) {
    mend_errorf(err, errlen,
                "%s: a workflow must be a table (return { name = ..., steps = {...} }), got %s",
                source, luaL_typename(L, idx));
    return NULL;
  }
  if (check_fields(L, idx, "workflow", fields, sub, sizeof sub)) {
    mend_errorf(err, errlen, "%s: %s", source, sub);
    return NULL;
  }
  const char *name = NULL;
  if (opt_string(L, idx, "name", "workflow", &name, sub, sizeof sub) < 0) {
    mend_errorf(err, errlen, "%s: %s", source, sub);
    return NULL;
  }
  if (!name || !*name) {
    mend_errorf(err, errlen, "%s: workflow name is missing (name = \"...\")", source);
    return NULL;
  }
  mend_retry_policy retry, comp;
  mend_breaker_policy breaker;
  mend_retry_policy_default(&retry);
  mend_compensate_policy_default(&comp);
  mend_breaker_policy_default(&breaker);
  if ((raw_field(L, idx, "retry") != LUA_TNIL &&
       mend_parse_retry(L, -1, "retry", &retry, sub, sizeof sub)) ||
      (lua_pop(L, 1), raw_field(L, idx, "compensate_retry") != LUA_TNIL &&
       mend_parse_retry(L, -1, "compensate_retry", &comp, sub, sizeof sub))) {
    lua_pop(L, 1);
    mend_errorf(err, errlen, "%s: workflow \"%s\": %s", source, name, sub);
    return NULL;
  }
  lua_pop(L, 1);
  int t = raw_field(L, idx, "breaker");
  if (t != LUA_TNIL &&
      (t != LUA_TTABLE || parse_breaker_table(L, -1, "breaker", &breaker, NULL, sub, sizeof sub))) {
    if (t != LUA_TTABLE)
      snprintf(sub, sizeof sub, "breaker must be a table, got %s", lua_typename(L, t));
    lua_pop(L, 1);
    mend_errorf(err, errlen, "%s: workflow \"%s\": %s", source, name, sub);
    return NULL;
  }
  lua_pop(L, 1);
  if (raw_field(L, idx, "steps") != LUA_TTABLE || !only_list(L, lua_absindex(L, -1))) {
    lua_pop(L, 1);
    mend_errorf(err, errlen, "%s: workflow \"%s\": steps must be a non-empty list of steps", source,
                name);
    return NULL;
  }
  int steps = lua_absindex(L, -1);
  if (lua_rawlen(L, steps) > MEND_MAX_STEPS) {
    mend_errorf(err, errlen,
                "%s: workflow \"%s\": %llu steps, over the most a workflow may have (%d)", source,
                name, (unsigned long long)lua_rawlen(L, steps), MEND_MAX_STEPS);
    lua_pop(L, 1);
    return NULL;
  }
  int n = (int)lua_rawlen(L, steps);
  /* A group counts with its branches: they follow it in wf->steps. */
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, steps, i + 1);
    if (lua_istable(L, -1)) {
      if (raw_field(L, -1, "parallel") == LUA_TTABLE) total += lua_rawlen(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    total++;
  }
  if (total > MEND_MAX_STEPS) {
    mend_errorf(err, errlen, "%s: workflow \"%s\": %zu steps with the branches of its groups, over"
                " the most a workflow may have (%d)", source, name, total, MEND_MAX_STEPS);
    lua_pop(L, 1);
    return NULL;
  }
  mend_workflow *wf = calloc(1, sizeof *wf);
  wf->steps = calloc(total, sizeof *wf->steps);
  wf->name = mend_dupstr(name);
  lua_pushstring(L, name);
  wf->name_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  wf->source = mend_dupstr(source);
  wf->def_ref = LUA_NOREF;
  int at = 0;
  for (int i = 0; i < n; i++) {
    int first = at;
    lua_rawgeti(L, steps, i + 1);
    int grouped = 0, mapped = 0;
    if (lua_istable(L, -1)) {
      grouped = raw_field(L, -1, "parallel") != LUA_TNIL;
      mapped = !grouped && raw_field(L, -2, "map") != LUA_TNIL;
      lua_pop(L, grouped ? 1 : 2);
    }
    int r = grouped  ? parse_group(L, -1, i + 1, &retry, &comp, &breaker, wf, &at, sub, sizeof sub)
            : mapped ? parse_map(L, -1, i + 1, &retry, &comp, &breaker, wf, &at, sub, sizeof sub)
                     : parse_step(L, -1, i + 1, NULL, &retry, &comp, &breaker, &wf->steps[at], sub,
                                  sizeof sub);
    if (mapped) grouped = 1;   /* it counted itself in wf->nsteps */
    lua_pop(L, 1);
    if (!grouped) wf->nsteps = ++at;   /* so that free releases what this step took */
    if (r) {
      mend_errorf(err, errlen, "%s: %s", source, sub);
      goto bad;
    }
    for (int k = first; k < at; k++) {
      const mend_step_def *d = &wf->steps[k];
      wf->has_branching |= d->nbranches > 0 || d->when_ref != LUA_NOREF || d->map_ref != LUA_NOREF;
      for (int j = 0; j < k; j++) {
        if (strcmp(wf->steps[j].name, d->name) != 0) continue;
        if (d->group >= 0 && wf->steps[j].group == d->group)
          mend_errorf(err, errlen, "%s: step \"%s\": two branches are named \"%s\"", source,
                      wf->steps[d->group].name, d->branch);
        else
          mend_errorf(err, errlen, "%s: step \"%s\": name is used twice (steps #%d and #%d)",
                      source, d->name, j + 1, k + 1);
        goto bad;
      }
    }
  }
  if (!(wf->step_names = names_json(wf, source, err, errlen))) goto bad;
  lua_pop(L, 1);   /* steps */
  if (version) wf->version = mend_dupstr(version);
  else {
    char v[20];
    snprintf(v, sizeof v, "%016llx", (unsigned long long)fnv1a(name, strlen(name)));
    wf->version = mend_dupstr(v);
  }
  lua_pushvalue(L, idx);
  wf->def_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return wf;
bad:
  lua_pop(L, 1);
  mend_workflow_free(L, wf);
  return NULL;
}

char *mend_workflow_read(const char *path, size_t *len, char *err, int errlen) {
  /* errno says why, for a person: a missing file, no permission, a folder (which opens as a
   * file would, its first read failing with EISDIR). */
  FILE *f = fopen(path, "rb");
  if (!f) {
    mend_errorf(err, errlen, "%s: cannot open workflow file: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0, got;
  char *text = malloc(cap);
  while (text && (got = fread(text + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n < cap) continue;
    char *more = cap < MEND_MAX_SOURCE ? realloc(text, cap *= 2) : NULL;
    if (!more) {
      mend_errorf(err, errlen, "%s: larger than %d bytes, or out of memory", path, MEND_MAX_SOURCE);
      free(text);
      fclose(f);
      return NULL;
    }
    text = more;
  }
  int failed = ferror(f) ? errno : 0;
  fclose(f);
  if (!text || failed) {
    free(text);
    mend_errorf(err, errlen, "%s: cannot read workflow file: %s", path,
                failed ? strerror(failed) : "out of memory");
    return NULL;
  }
  *len = n;
  return text;
}

void mend_workflow_version_of(const char *text, size_t len, char out[20]) {
  snprintf(out, 20, "%016llx", (unsigned long long)fnv1a(text, len));
}

void mend_workflow_free(lua_State *L, mend_workflow *wf) {
  if (!wf) return;
  for (int i = 0; i < wf->nsteps; i++) step_free(L, &wf->steps[i]);
  free(wf->steps);
  luaL_unref(L, LUA_REGISTRYINDEX, wf->def_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, wf->name_ref);
  free(wf->name);
  free(wf->version);
  free(wf->source);
  free(wf->script);
  free(wf->step_names);
  free(wf);
}

int mend_workflow_step_index(const mend_workflow *wf, const char *name) {
  for (int i = 0; i < wf->nsteps; i++)
    if (strcmp(wf->steps[i].name, name) == 0) return i;
  return -1;
}
