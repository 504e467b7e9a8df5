/*
 * workflow: loading and checking workflow definitions (a Lua table, usually returned by a
 * script). Owns the C form of a definition: names, policies parsed and checked, and registry
 * references to the Lua functions. A definition that loads is complete and valid: the engine
 * never meets a bad policy at run time. Messages name the file, the step and the field.
 */
#ifndef MEND_WORKFLOW_H
#define MEND_WORKFLOW_H

#include <lua.h>
#include <string.h>
#include "backoff.h"
#include "breaker.h"
#include "counters.h"

typedef struct mend_breaker_slot mend_breaker_slot;   /* the engine's, per breaker key */

typedef struct mend_step_def {
  char *name;
  int name_ref;                               /* the name as a Lua string (ctx.step) */
  int execute_ref, compensate_ref, key_ref;   /* LUA_NOREF when absent */
  mend_retry_policy retry, compensate_retry;
  char *breaker_key;    /* NULL for a group or a map: they execute nothing */
  mend_breaker_policy breaker;
  double timeout;                             /* seconds; 0 = none */
  double sleep;                               /* durable wait before executing; 0 = none */
  char *wait_for;       /* the event it waits for instead of executing; NULL: it executes.
                         * timeout is then how long it waits (0: for ever) */
  int wait_token;       /* `wait = "token"`: after execute, waits for its attempt's token to be
                         * completed or failed (timeout: how long, counted from execute's end) */
  char *child;          /* the workflow of the run it starts and waits for; NULL: none */
  int child_input_ref;  /* input(ctx) -> the child's input; LUA_NOREF: the parent's input */
  mend_breaker_slot *slot;   /* resolved by the engine at registration; NULL with breaker_key */
  int when_ref;         /* when(ctx): false skips the step; LUA_NOREF when absent */
  /* A parallel group (`parallel = {...}`) is a step that executes nothing itself: its
   * nbranches branches follow it in `steps`, each named "<group>/<branch>", and run at the
   * same time, at most max_concurrency at once. A branch names its group's index in `group`
   * (-1 for any other step); `branch` is its own name, the part after the slash. */
  int nbranches, max_concurrency, group;
  const char *branch;
  /* A map (`map = function(ctx) return list end, step = {...}`): map_ref gives the list when
   * the step begins, and item_wf holds the step each item runs (its steps[0]), at most
   * max_concurrency items at once. LUA_NOREF and NULL for any other step. */
  int map_ref;
  struct mend_workflow *item_wf;
} mend_step_def;

typedef struct mend_workflow {
  char *name;
  int name_ref;         /* the name as a Lua string (ctx.workflow) */
  char *version;        /* hash of the script (or of the definition's name for tables) */
  char *source;         /* the file it came from, or "=register" */
  char *script;         /* the file's text, kept with its runs; NULL for tables */
  int def_ref;          /* the definition table, kept alive */
  int nsteps;
  mend_step_def *steps;
  char *step_names;     /* JSON array of the steps' names, kept with each run it starts */
  int has_branching;    /* a group or a `when`: recovery reads the history for their answers */
  int store_free;       /* the engine's, set as it adopts it (mend__workflow_store_free): its
                           runs' pieces read nothing through the store's open batch */
  mend_workflow_counters counts;   /* what the engine did with it (a map's items: their run's) */
  struct mend_workflow *next;
} mend_workflow;

/* The most steps a workflow may have (a group counts with its branches), and the largest
 * workflow file. */
#define MEND_MAX_STEPS 10000
#define MEND_MAX_SOURCE (16 << 20)

/* The event names a token's outcome and a child's end come through the inbox under:
 * "mend.token" and "mend.child", alone or followed by ":STEP". No sender outside the engine may
 * use one, nor a wait_for: it would complete a step without its token, or before its child. */
static inline int mend_event_name_reserved(const char *name) {
  return (strncmp(name, "mend.token", 10) == 0 || strncmp(name, "mend.child", 10) == 0) &&
         (name[10] == '\0' || name[10] == ':');
}

/* The text of the workflow file at `path` (malloc'ed, *len bytes), or NULL and a message. The
 * engine runs it (under its limits, in its sandbox) and checks what it returns with
 * mend_workflow_from_table. */
char *mend_workflow_read(const char *path, size_t *len, char *err, int errlen);
/* A file's version: a hash of its text, as 16 hexadecimal digits. */
void mend_workflow_version_of(const char *text, size_t len, char out[20]);
/* Checks the table at idx, reading it raw; `source` names it in messages. [-0, +0, m] */
mend_workflow *mend_workflow_from_table(lua_State *L, int idx, const char *source,
                                        const char *version, char *err, int errlen);
void mend_workflow_free(lua_State *L, mend_workflow *wf);
int  mend_workflow_step_index(const mend_workflow *wf, const char *name);  /* -1 if none */

/* Parses a retry table at idx over `p` (which holds the defaults to override). Exposed for the
 * engine options and tests. 0 ok; -1 with "retry.initial must be >= 0, got -1" style err. */
int mend_parse_retry(lua_State *L, int idx, const char *what, mend_retry_policy *p,
                     char *err, int errlen);

#endif
