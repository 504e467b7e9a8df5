/*
 * test_embed_dlq_page: mend_engine_dlq_page_json from a host's side: the dead-letter queue a
 * page at a time, in mend_engine_dlq_json's order, each entry once, the next page after the
 * last entry of the one before; a limit out of its bounds refused. The entries are written
 * with the sqlite3 shell: a host makes dead letters only by failing runs, which is not what
 * this reads.
 */
#include "embed_host.h"

int main(void) {
  embed_host_begin("dlq_page");
  char db[160], cmd[800];
  snprintf(db, sizeof db, "%s/dlq.db", dir);
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  mend_engine *E = engine(&o);
  snprintf(cmd, sizeof cmd, "sqlite3 %s \"INSERT INTO dlq(run_id, reason, step, error, detail, at)"
           " VALUES ('d3', 'r', 's', 'e', NULL, 100), ('d1', 'r', 's', 'e', NULL, 100),"
           " ('d2', 'r', 's', 'e', NULL, NULL), ('d0', 'r', 's', 'e', NULL, 200)\"", db);
  CHECK_EQ_INT(system(cmd), 0);
  char *whole = NULL, *page = NULL;
  CHECK_EQ_INT(mend_engine_dlq_json(E, &whole), MEND_OK);
  /* no `at` first, then by time, ties by run id */
  const char *order[] = {"\"d2\"", "\"d1\"", "\"d3\"", "\"d0\""};
  const char *p = whole;
  for (int i = 0; i < 4; i++) {
    const char *at = p ? strstr(p, order[i]) : NULL;
    CHECK(at != NULL);
    p = at;
  }
  /* pages of one, each after the entry before */
  const char *after_run = NULL;
  double after_at = 0;
  const char *runs[] = {"d2", "d1", "d3", "d0"};
  const double ats[] = {-1, 100, 100, 200};
  for (int i = 0; i < 4; i++) {
    CHECK_EQ_INT(mend_engine_dlq_page_json(E, after_run, after_at, 1, &page), MEND_OK);
    char want[40];
    snprintf(want, sizeof want, "\"run_id\":\"%s\"", runs[i]);
    CHECK(page && strstr(page, want) != NULL && strstr(page, "},{") == NULL);
    mend_free(page);
    after_run = runs[i];
    after_at = ats[i];
  }
  CHECK_EQ_INT(mend_engine_dlq_page_json(E, after_run, after_at, 1, &page), MEND_OK);
  CHECK_STR(page, "[]");
  mend_free(page);
  CHECK_EQ_INT(mend_engine_dlq_page_json(E, NULL, 0, 0, &page), MEND_EINVAL);
  /* an `at` no entry has: a pager given one would read no page it can go on from */
  CHECK_EQ_INT(mend_engine_dlq_page_json(E, after_run, NAN, 1, &page), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "after_at is nan") != NULL);
  CHECK_EQ_INT(mend_engine_dlq_page_json(E, after_run, INFINITY, 1, &page), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_dlq_page_json(E, NULL, 0, MEND_HISTORY_PAGE_MAX + 1, &page),
               MEND_EINVAL);
  mend_free(whole);
  mend_engine_free(E);
  return embed_host_end("dlq_page");
}
