/*
 * upgrade: a person moves an unfinished run nobody holds to another version of its workflow
 * (`mend upgrade`, SPEC section 8), recorded in its history with who did it. Owns the check
 * that the new version keeps the steps the run has begun, in their places. Must never: move a
 * run a live worker holds, or one in flight here; change a begun step's row.
 */
#include "engine_int.h"

#include <stdio.h>
#include <string.h>

#include "json.h"
#include "util.h"

int mend_engine_upgrade_run(mend_engine *E, const char *id, const char *version, const char *who,
                            char *err, int errlen) {
  if (mend__who_refused(E, who, err, errlen)) return -1;
  E->refusal = MEND_REFUSED_STATE;
  if (mend__repair_find_run(E, id)) return mend_errorf(err, errlen, "run %s is in flight here", id);
  json_t *row = mend_store_run(E->store, id);
  if (!row) {
    E->refusal = mend_store_not_found(E->store) ? MEND_REFUSED_NOT_FOUND : MEND_REFUSED_STORE;
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  }
  int rc = -1;
  const char *st = json_string_value(json_object_get(row, "status"));
  const char *name = json_string_value(json_object_get(row, "workflow"));
  const char *was = json_string_value(json_object_get(row, "version"));
  json_t *steps = json_object_get(row, "steps");
  char owner[128], lerr[600];
  mend_workflow *wf = NULL;
  int live = 0;
  if (!st || (strcmp(st, "running") != 0 && strcmp(st, "compensating") != 0)) {
    mend_errorf(err, errlen, "run %s is %s: only an unfinished run can be upgraded", id,
                st ? st : "?");
  } else if (was && strcmp(was, version) == 0) {
    rc = 1;   /* on that version already */
  } else if ((live = mend_engine_holder(E, id, owner, sizeof owner)) != 0) {
    if (live < 0) mend_errorf(err, errlen, "%s", owner);
    else
      mend_errorf(err, errlen,
                  "run %s is held by worker %s, which runs it with the version it has: "
                  "stop that worker first (it gives its runs back on SIGTERM), then upgrade",
                  id, owner);
  } else if (!name || !(wf = mend_engine_load_version(E, name, version, lerr, sizeof lerr))) {
    mend_errorf(err, errlen, "version %s of workflow %s cannot be loaded: %s", version,
                name ? name : "?", lerr);
  } else {
    /* The steps the run has begun keep their rows, results and keys: the new version must
     * have the same ones, in the same places. */
    int begun = -1, n = (int)json_array_size(steps);
    for (int i = 0; i < n; i++) {
      /* a map's items come after the steps: their map's place is what must be kept */
      if (json_integer_value(json_object_get(json_array_get(steps, (size_t)i), "idx")) >=
          MEND_MAP_ROWS)
        break;
      const char *s_st =
          json_string_value(json_object_get(json_array_get(steps, (size_t)i), "status"));
      if (s_st && strcmp(s_st, "pending") != 0) begun = i;
    }
    int bad = 0;
    for (int i = 0; !bad && i <= begun; i++) {
      const char *sn = json_string_value(json_object_get(json_array_get(steps, (size_t)i), "name"));
      if (i >= wf->nsteps)
        bad = mend_errorf(err, errlen,
                          "refused: step #%d \"%s\" has begun in run %s, but version %s of %s "
                          "has only %d step%s",
                          i + 1, sn ? sn : "?", id, wf->version, name, wf->nsteps,
                          wf->nsteps == 1 ? "" : "s");
      else if (!sn || strcmp(sn, wf->steps[i].name) != 0)
        bad = mend_errorf(err, errlen,
                          "refused: step #%d is \"%s\" in run %s but \"%s\" in version %s of "
                          "%s: a new version must keep the steps a run has begun, in their order",
                          i + 1, sn ? sn : "?", id, wf->steps[i].name, wf->version, name);
    }
    if (!bad) {
      long long vid;
      mend_run_rec rec = {.workflow = wf->name, .version = wf->version, .source = wf->source,
                          .step_names = wf->step_names, .script = wf->script,
                          .created = mend_engine_now(E)};
      char note[400];
      snprintf(note, sizeof note, "version %s -> %s (%s)", was ? was : "?", wf->version,
               wf->source ? wf->source : "?");
      mend_store_repairing(E->store, 1);   /* nobody holds it: no lease to fence */
      if (mend_store_version_number(E->store, &rec, &vid) ||
          mend_store_move_run(E->store, id, vid, begun + 1))
        mend__store_failed(E);
      mend__operator_entry(E, NULL, id, "upgrade", who, note);
      mend_store_repairing(E->store, 0);
      rc = mend__commit_now(E) ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
    }
  }
  json_decref(row);
  return rc;
}
