/*
 * image: a run's image for the engine (mend_store_run_image), the parts every backend builds
 * the same way: its rows kept, the steps not begun listed from the run's step names, attempts
 * in flight found in its history, and freeing it. It must give the answers the view of a run
 * (mend_store_run) gives for the same rows, and must never read or write a database.
 */
#include "store/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

char *mend__image_text(const char *t, size_t n, int *oom) {
  if (!t) return NULL;
  char *c = malloc(n + 1);
  if (!c) {
    *oom = 1;
    return NULL;
  }
  memcpy(c, t, n);
  c[n] = 0;
  return c;
}

/* Room for one more of n items: the array doubles at 8, 16, 32, ... items. */
static int room(void **items, int n, size_t size) {
  if (n > 0 && (n < 8 || (n & (n - 1)) != 0)) return 0;
  void *p = realloc(*items, (size_t)(n ? 2 * n : 8) * size);
  if (!p) return -1;
  *items = p;
  return 0;
}

mend_step_image *mend__image_add_step(mend_run_image *img) {
  void *items = img->steps;
  if (room(&items, img->nsteps, sizeof *img->steps) != 0) return NULL;
  img->steps = items;
  mend_step_image *st = &img->steps[img->nsteps++];
  memset(st, 0, sizeof *st);
  st->due = st->last_delay = -1;
  return st;
}

mend_history_image *mend__image_add_history(mend_run_image *img) {
  void *items = img->history;
  if (room(&items, img->nhistory, sizeof *img->history) != 0) return NULL;
  img->history = items;
  mend_history_image *h = &img->history[img->nhistory++];
  memset(h, 0, sizeof *h);
  h->at = -1;
  return h;
}

static void free_step(mend_step_image *st) {
  free(st->name);
  free(st->idem_key);
  free(st->error);
  free(st->error_kind);
  free(st->result);
}

void mend_run_image_free(mend_run_image *img) {
  if (!img) return;
  free(img->workflow);
  free(img->version);
  free(img->reason);
  free(img->error);
  free(img->input);
  free(img->unavailable);
  free(img->parent_run);
  for (int i = 0; i < img->nsteps; i++) free_step(&img->steps[i]);
  free(img->steps);
  for (int i = 0; i < img->nhistory; i++) {
    free(img->history[i].step);
    free(img->history[i].event);
    free(img->history[i].to);
    free(img->history[i].detail);
  }
  free(img->history);
  memset(img, 0, sizeof *img);
}

/* A step has no row until its first transition: the run's step names give the ones not begun,
 * pending with no attempt. */
static int list_pending(mend_run_image *img, const char *id, const char *step_names, char *err,
                        size_t errlen) {
  if (!step_names) return 0;   /* a run from before schema 4: every step has its row */
  json_t *names = json_loads(step_names, JSON_DECODE_ANY, NULL);
  int bad = !json_is_array(names);
  size_t n = bad ? 0 : json_array_size(names);
  for (size_t i = 0; !bad && i < n; i++) {
    if ((int)i < img->nsteps && img->steps[i].idx == (int)i) continue;
    const char *name = json_string_value(json_array_get(names, i));
    if (!name) {
      bad = 1;
      break;
    }
    if (!mend__image_add_step(img)) goto oom;
    /* moved up to make room at i */
    mend_step_image fresh = img->steps[img->nsteps - 1];
    memmove(&img->steps[i + 1], &img->steps[i], (size_t)(img->nsteps - 1 - (int)i) * sizeof fresh);
    int oom = 0;
    fresh.idx = (int)i;
    fresh.status = MEND_STEP_PENDING;
    fresh.name = mend__image_text(name, strlen(name), &oom);
    img->steps[i] = fresh;
    if (oom) goto oom;
  }
  json_decref(names);
  if (bad) snprintf(err, errlen, "run %s: step_names is not a JSON array of names", id);
  return bad ? -1 : 0;
oom:
  json_decref(names);
  snprintf(err, errlen, "read steps: out of memory");
  return -1;
}

/* A step's row says what its last attempt came to; an attempt begun since is only in history
 * (its `-> running` row): such a step is running, with that attempt, its wait over. */
static int show_in_flight(mend_run_image *img, char *err, size_t errlen) {
  int n = img->nsteps;
  long long *attempt_1 = calloc(n ? (size_t)n : 1, sizeof *attempt_1);
  if (!attempt_1) {
    snprintf(err, errlen, "read steps: out of memory");
    return -1;
  }
  for (int k = 0; k < img->nhistory; k++) {
    const mend_history_image *h = &img->history[k];
    if (!h->step || !h->event || strcmp(h->event, "step") != 0) continue;
    for (int i = 0; i < n; i++) {
      if (!img->steps[i].name || strcmp(img->steps[i].name, h->step) != 0) continue;
      attempt_1[i] = h->to && strcmp(h->to, "running") == 0 ? 1 + (long long)h->attempt : 0;
      break;
    }
  }
  for (int i = 0; i < n; i++) {
    if (!attempt_1[i]) continue;
    img->steps[i].status = MEND_STEP_RUNNING;
    img->steps[i].attempts = (int)(attempt_1[i] - 1);
    img->steps[i].due = -1;
  }
  free(attempt_1);
  return 0;
}

int mend__image_finish(mend_run_image *img, const char *id, const char *step_names, char *err,
                       size_t errlen) {
  if (list_pending(img, id, step_names, err, errlen) != 0) return -1;
  /* A finished run has no attempt in flight. */
  if ((img->status == MEND_RUN_RUNNING || img->status == MEND_RUN_COMPENSATING) &&
      show_in_flight(img, err, errlen) != 0)
    return -1;
  img->last_seq = 0;
  img->last_at = -1;
  if (img->nhistory > 0) {
    img->last_seq = img->history[img->nhistory - 1].seq;
    img->last_at = img->history[img->nhistory - 1].at;
  }
  return 0;
}
