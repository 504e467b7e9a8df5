/*
 * pages and counts of runs (mend serve) on PostgreSQL: not yet. Each method refuses with an error that says so, so that a
 * workflow using the feature on a PostgreSQL database fails clearly instead of silently.
 * Must never: write anything.
 */
#include "store/pg/pg_int.h"

json_t *mend__pg_no_runs_page(mend_store *s, const char *status, const char *workflow, double since, double after_created, const char *after_id, int limit) {
  (void)status;
  (void)workflow;
  (void)since;
  (void)after_created;
  (void)after_id;
  (void)limit;
  mend__pg_unsupported(s, "pages and counts of runs (mend serve)");
  return NULL;
}
json_t *mend__pg_no_run_counts(mend_store *s) {
  mend__pg_unsupported(s, "pages and counts of runs (mend serve)");
  return NULL;
}
