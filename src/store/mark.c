/*
 * mark: the SQLite store's sandbox mark (meta.sandbox, schema 17; store.h: sandbox_mark): read
 * and set on the store's own connection, as an engine opens and before its writer thread
 * starts, in the open batch's transaction if one is open (committed with it) or on its own;
 * read again as an engine loads a workflow's text from the store, just after a read that
 * waited for the writer thread (version_script), which has nothing to do until the loop hands
 * it a batch.
 * Must never: set the mark off but for the host's `mend db trust` (set -1); run on the step
 * path.
 */
#include "store_int.h"

int mend__sqlite_sandbox_mark(mend_store *s, int set) {
  const char *sql = set > 0 ? "UPDATE meta SET value = 'on' WHERE key = 'sandbox'"
                    : set < 0 ? "UPDATE meta SET value = 'off' WHERE key = 'sandbox'"
                              : "SELECT value = 'on' FROM meta WHERE key = 'sandbox'";
  sqlite3_stmt *q = NULL;
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
    mend__sql_err(s, "read the sandbox mark");
    return -1;
  }
  int rc = sqlite3_step(q);
  int on = rc == SQLITE_ROW && sqlite3_column_int(q, 0);
  sqlite3_finalize(q);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
    mend__sql_err(s, set > 0 ? "set the sandbox mark" : set < 0 ? "clear the sandbox mark"
                                                                : "read the sandbox mark");
    return -1;
  }
  return set > 0 ? 1 : set < 0 ? 0 : on;
}
