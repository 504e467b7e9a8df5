/*
 * image: what the backends share in building a run's image (mend_store_run_image, store.h): the
 * rows appended one by one, then the steps not begun listed from the run's step names and the
 * attempts in flight read from its history, as the view of a run shows them. Must never: be
 * included outside the backends' files.
 */
#ifndef MEND_STORE_IMAGE_H
#define MEND_STORE_IMAGE_H

#include <stddef.h>

#include "store.h"

/* Copies n bytes of t (NULL: NULL); *oom set when memory ran out. */
char *mend__image_text(const char *t, size_t n, int *oom);
/* A new row at the end, zeroed (due and last_delay none); NULL when memory ran out. */
mend_step_image *mend__image_add_step(mend_run_image *img);
mend_history_image *mend__image_add_history(mend_run_image *img);
/* Once every row is in: the steps not begun from step_names (the run's JSON array of its
 * steps' names, NULL: every step has its row), the attempts in flight of a running or
 * compensating run, the last number and time in its history. 0, or -1 with err set. */
int mend__image_finish(mend_run_image *img, const char *id, const char *step_names, char *err,
                       size_t errlen);

#endif
