/*
 * reuse: a step whose custom idempotency key already succeeded in a run that executed it
 * (SPEC section 6). Owns taking that result for the step, marking the step reused (in its
 * row: custom_key MEND_KEY_REUSED; in its history: a `reused` row naming the run the result is
 * from), reading that back after a restart, and passing the step by on the way back: the
 * effect is the executing run's, compensated by that run alone, once (README, Guarantees).
 * Must never: compensate a reused step; offer a reused row as a key's result (the store's
 * lookup takes executing rows only, whose effect is still there).
 */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

/* The run a reused step's result is from is kept after the key's terminator, in the key's own
 * allocation: a waiting run must cost at most 1 KiB, and few steps are reused. */
const char *mend__reused_from(const step_rt *st) {
  if (!st->reused || !st->reused_known || !st->idem_key) return NULL;
  return st->idem_key + strlen(st->idem_key) + 1;
}

/* Keeps the run st's result is from; 0, -1 out of memory (st is reused all the same). */
static int keep_owner(step_rt *st, const char *run) {
  if (!st->idem_key) return 0;
  size_t k = strlen(st->idem_key), n = strlen(run);
  char *both = malloc(k + n + 2);
  if (!both) return -1;
  memcpy(both, st->idem_key, k + 1);
  memcpy(both + k + 1, run, n + 1);
  free(st->idem_key);
  st->idem_key = both;
  st->reused_known = 1;
  return 0;
}

int mend__reuse_key(mend_run *r, int i) {
  step_rt *st = &r->steps[i];
  char *found = NULL;
  char owner[MEND_RUN_ID_LEN + 1];
  int rc = mend_store_find_key_result(r->E->store, st->idem_key, &found, owner, sizeof owner);
  if (rc != 1) return rc;
  st->reused = 1;
  if (keep_owner(st, owner) != 0) {
    free(found);
    mend__breakdown(r->E, "out of memory reusing a result in run %s", r->id);
    return -1;
  }
  mend__set_str(&st->result, found);
  free(found);
  char why[MEND_RUN_ID_LEN + 64];
  snprintf(why, sizeof why, "result reused from run %s: idempotency key already succeeded", owner);
  /* The run it is from, alone as the detail: what a restart reads back (mend__reuse_restore). */
  mend__history(r, mend__step_name(r, i), "reused", NULL, NULL, 0, NULL, -1, owner);
  mend__step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, why);
  return 1;
}

/* On the way back: 1 when step st of r, by that name (a map's item: "<map>/<n>"), reused its
 * result, recorded as passed by once (a walk begun again after a restart passes it silently:
 * comp_skipped, read back by mend__reuse_restore); 0 when it is the run's own to undo. */
int mend__skip_reused(mend_run *r, const char *name, step_rt *st) {
  if (!st->reused) return 0;
  if (st->comp_skipped) return 1;
  st->comp_skipped = 1;
  const char *owner = mend__reused_from(st);
  char why[MEND_RUN_ID_LEN + 96];
  snprintf(why, sizeof why, "result reused from run %s: that run owns its effect",
           owner ? owner : "(another)");
  mend__history(r, name, "skip_compensate", NULL, NULL, 0, NULL, -1, why);
  mend_engine_log_line(r->E, "info", mend__root(r)->id, name, 0, "skip_compensate", why);
  return 1;
}

/* The step of r a history row names: one of its steps, or an item of a map ("<map>/<n>"). */
static step_rt *step_named(mend_run *r, const char *name) {
  int i = mend_workflow_step_index(r->wf, name);
  if (i >= 0) return &r->steps[i];
  if (!r->wf->has_branching) return NULL;
  const char *slash = strrchr(name, '/');
  for (int m = 0; slash && m < r->wf->nsteps; m++) {
    size_t len = strlen(r->wf->steps[m].name);
    if ((size_t)(slash - name) != len || strncmp(name, r->wf->steps[m].name, len)) continue;
    struct map_state *ms = mend__map_of(r, m);
    int n = atoi(slash + 1);
    if (ms && n >= 1 && n <= ms->n) return &ms->items[n - 1];
  }
  return NULL;
}

/* A rebuilt run's reused steps: the run each result is from, from their `reused` rows, and
 * whether its way back passed them by already (their `skip_compensate` rows). */
void mend__reuse_restore(mend_run *r, const mend_run_image *img) {
  for (int k = 0; k < img->nhistory; k++) {
    const mend_history_image *row = &img->history[k];
    if (!row->step || !row->event) continue;
    int skipped = strcmp(row->event, "skip_compensate") == 0;
    if (!skipped && (!row->detail || strcmp(row->event, "reused") != 0)) continue;
    step_rt *st = step_named(r, row->step);
    if (!st || !st->reused) continue;
    if (skipped) {
      st->comp_skipped = 1;
      continue;
    }
    if (st->reused_known) continue;
    if (keep_owner(st, row->detail) != 0) {
      mend__breakdown(r->E, "out of memory rebuilding run %s", r->id);
      return;
    }
  }
}
