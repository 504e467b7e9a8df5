/*
 * capi_int: what the files of the public C API share (capi.c, capi_ops.c): the check every
 * call makes of its engine, and the status of a refusal. Must never: be included outside
 * those two files; hold anything of the engine's (engine.h is its door).
 */
#ifndef MEND_CAPI_INT_H
#define MEND_CAPI_INT_H

#include "mend.h"

/* MEND_OK when the call may go on with E: not NULL, made here and not freed, and on the
 * thread E belongs to (a call from another would race with everything that thread does). */
int mend__capi_check_engine(mend_engine *E, const char *what);
/* MEND_EINVAL, with `what` as the engine's message. */
int mend__capi_invalid(mend_engine *E, const char *what);
/* The one status of the engine's last refusal (engine.h, mend_refusal). */
int mend__capi_refusal_status(mend_engine *E);

#define NEED_ENGINE_AS(E, what)                                 \
  do {                                                          \
    int need_rc_ = mend__capi_check_engine((E), (what));        \
    if (need_rc_ != MEND_OK) return need_rc_;                   \
  } while (0)
#define NEED_ENGINE(E) NEED_ENGINE_AS((E), __func__)

#endif
