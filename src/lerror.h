/*
 * lerror: the `mend.error` object, shared by the engine (which reads what a step raised and
 * raises limits and timeouts) and the Lua binding (mend.retryable, fatal, compensable).
 * Owns its kinds, how one is pushed and read, and its metatable. Must never: run code of the
 * value it reads (no metamethods: fields are read raw).
 */
#ifndef MEND_LERROR_H
#define MEND_LERROR_H

#include <lua.h>

/* Error kinds a step can raise. MEND_ERR_ERROR is any error that is not a mend error. */
typedef enum mend_error_kind {
  MEND_ERR_RETRYABLE, MEND_ERR_FATAL, MEND_ERR_COMPENSABLE, MEND_ERR_TIMEOUT, MEND_ERR_ERROR
} mend_error_kind;

typedef struct mend_error_info {
  mend_error_kind kind;
  const char *message;   /* valid while the value stays on the stack */
  double retry_after;    /* < 0 when not given */
  int severity;          /* 1..3 for compensable, else 0 */
  int stopped;           /* the engine stopped the code (a limit, or an error value it could
                            not read): a workflow_error, for a person to look at */
} mend_error_info;

/* Pushes a new mend error object. [-0, +1, m] */
void mend_lua_push_error(lua_State *L, mend_error_kind kind, const char *message,
                         double retry_after, int severity);
/* Reads the value at idx: 1 and *info if it is a mend error, else 0 with kind ERROR and, for a
 * string, the string as message (NULL for other values). Pushes nothing. [-0, +0, -] */
int mend_lua_read_error(lua_State *L, int idx, mend_error_info *info);
const char *mend_error_kind_name(mend_error_kind k);
/* The kind of that name (as a store keeps it with a step); any other name, or NULL, is
 * MEND_ERR_ERROR. */
mend_error_kind mend_error_kind_parse(const char *name);

/* Registers the metatable of mend errors in L's registry (once). [-0, +0, m] */
void mend_lerror_open(lua_State *L);

#endif
