/*
 * test_embed_repair: an operator's work through the C API, with mend.h alone: waiting runs
 * parked out of memory, a stuck run repaired (retried, resolved, cancelled), and a run's
 * history read in pages.
 *
 * Built like every test_embed_* program: against the build tree's libmend (ctest c_embed_repair,
 * under AddressSanitizer in c_sanitized), and against the installed library with pkg-config
 * and with find_package(mend) (tests/embed_*.sh). Its set-up is tests/embed_host.h's. Must
 * never: use more of mend than include/mend.h.
 */
#define _GNU_SOURCE   /* SCHED_BATCH */
#include <dirent.h>
#include <math.h>
#include <mend.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "embed_host.h"

/* A host's waiting runs leave memory with park_after (issue 18): in flight no more while
 * parked, brought back by the host's event, and by their timeout on the virtual clock. */
static void it_parks_waiting_runs_out_of_memory(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  o.park_after = 5;
  mend_engine *E = engine(&o);
  load(E, "wait");
  char a[17], b[17], st[32];
  start(E, "wait", NULL, a);
  start(E, "wait", NULL, b);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 1), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 2);
  CHECK_EQ_INT(mend_engine_advance_clock(E, 10), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 0);
  CHECK(run_has(E, a, "\"waiting\"", 0));
  CHECK_EQ_INT(mend_engine_signal(E, a, "boss_killed", "{\"gold\":5}", NULL), MEND_OK);
  CHECK_EQ_INT(mend_engine_in_flight_count(E), 1);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);   /* and b's timeout, an hour on */
  CHECK_STR(run_status(E, a, st, sizeof st), "succeeded");
  CHECK(run_has(E, a, "\"result\":5", 0));
  CHECK_STR(run_status(E, b, st, sizeof st), "failed");
  CHECK(run_has(E, b, "no event boss_killed within 3600 s", 0));
  mend_engine_free(E);
}

/* The repairs of the operators' issue, through the C API: each refuses with MEND_ESTATE when
 * it makes no sense, and the breaker override is found by key. */
static const char stuck_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'stuck', steps = { { name = 'half', breaker = 'psp', execute = function()\n"
  "  error(mend.compensable('half applied', { severity = 3 })) end } } }\n";

static void it_repairs_through_the_c_api(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = engine(&o);
  load(E, "stuck");
  char id[17], st[32];
  start(E, "stuck", NULL, id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  CHECK_STR(run_status(E, id, st, sizeof st), "needs_attention");
  CHECK_EQ_INT(mend_engine_cancel(E, id, "ops"), MEND_ESTATE);
  CHECK(strstr(mend_engine_errmsg(E), "only a running run can be cancelled") != NULL);
  /* mend.h: a NULL where a call needs a value is MEND_EINVAL; a resolve needs its note */
  CHECK_EQ_INT(mend_engine_resolve_dead_letter(E, id, "ops", NULL), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "needs a note") != NULL);
  CHECK_EQ_INT(mend_engine_resolve_dead_letter(E, id, "ops", ""), MEND_EINVAL);
  CHECK_STR(run_status(E, id, st, sizeof st), "needs_attention");
  CHECK_EQ_INT(mend_engine_resolve_dead_letter(E, id, "ops", "undone by hand"), MEND_OK);
  CHECK_STR(run_status(E, id, st, sizeof st), "resolved");
  CHECK(run_has(E, id, "dlq resolve by ops: undone by hand", 1));
  CHECK_EQ_INT(mend_engine_retry_dead_letter(E, id, "ops"), MEND_ESTATE);
  CHECK_EQ_INT(mend_engine_retry_dead_letter(E, "nope", "ops"), MEND_ENOTFOUND);
  CHECK_EQ_INT(mend_engine_override_breaker(E, "psp", "open", 60, "ops"), MEND_OK);
  CHECK_EQ_INT(mend_engine_override_breaker(E, "nope", "open", 60, "ops"), MEND_ENOTFOUND);
  /* the op is looked at first: a missing breaker had answered MEND_ENOTFOUND to a bad op */
  CHECK_EQ_INT(mend_engine_override_breaker(E, "nope", "flip", 0, "ops"), MEND_EINVAL);
  CHECK_EQ_INT(mend_engine_override_breaker(E, "psp", "flip", 0, "ops"), MEND_EINVAL);
  /* open for ever, or for no time a host meant: refused, as the CLI and HTTP refuse them */
  CHECK_EQ_INT(mend_engine_override_breaker(E, "psp", "open", INFINITY, "ops"), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "must be a finite number, got inf") != NULL);
  CHECK_EQ_INT(mend_engine_override_breaker(E, "psp", "open", NAN, "ops"), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "got nan") != NULL);
  mend_engine_free(E);
}

/* The last row of a history's JSON (each row opens with its seq; a detail is a string). */
static const char *last_row(const char *json) {
  const char *last = NULL;
  for (const char *p = json; (p = strstr(p, "{\"seq\":")) != NULL; p++) last = p;
  return last;
}

/* A history read in pages joins to the whole: each page is the whole's rows in order, none
 * twice, none missing; the tail is its last rows; the paged call refuses bad bounds. */
static void it_reads_a_history_in_pages(void) {
  mend_options o;
  mend_options_init(&o);
  o.virtual_clock = 1;
  mend_engine *E = engine(&o);
  char id[17];
  load(E, "saga");
  start(E, "saga", NULL, id);
  CHECK_EQ_INT(mend_engine_run_all(E), MEND_OK);
  char *whole = NULL, *page = NULL;
  CHECK_EQ_INT(mend_engine_history_json(E, id, &whole), MEND_OK);
  char joined[65536] = "[";
  long long after = 0;
  int pages = 0;
  for (;;) {
    CHECK_EQ_INT(mend_engine_history_page_json(E, id, after, 2, 0, &page), MEND_OK);
    if (!page || strcmp(page, "[]") == 0) break;
    pages++;
    size_t n = strlen(page);
    if (strlen(joined) > 1) strcat(joined, ",");
    strncat(joined, page + 1, n - 2);   /* the rows, without the brackets */
    const char *seq = last_row(page);
    CHECK(seq != NULL);
    if (!seq) break;
    after = atoll(seq + 7);
    mend_free(page);
    page = NULL;
  }
  mend_free(page);
  strcat(joined, "]");
  CHECK(pages >= 3);
  CHECK(strcmp(joined, whole) == 0);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 0, 0, 1, &page), MEND_OK);
  const char *last = whole ? last_row(whole) : NULL;
  CHECK(page && last && strncmp(page + 1, last, strlen(last)) == 0);
  mend_free(page);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, -1, 2, 0, &page), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "after") != NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 0, 0, 0, &page), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "limit") != NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 0, 2, -3, &page), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "tail") != NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, NULL, 0, 2, 0, &page), MEND_EINVAL);
  /* the HTTP API's bounds, the bad value named */
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 0, MEND_HISTORY_PAGE_MAX + 1, 0, &page),
               MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "limit is 10001: a page has 1 to 10000 rows") != NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 0, 0, MEND_HISTORY_PAGE_MAX + 1, &page),
               MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "tail is 10001") != NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 0, 3, 2, &page), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "tail is the last rows") != NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 1, 0, 2, &page), MEND_EINVAL);
  CHECK(strstr(mend_engine_errmsg(E), "after 1") != NULL);
  CHECK(page == NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 0, MEND_HISTORY_PAGE_MAX, 0, &page), MEND_OK);
  CHECK(page && whole && strcmp(page, whole) == 0);
  mend_free(page);
  page = NULL;
  /* an unknown run is not found, the run named; a known one past its last row is [] */
  CHECK_EQ_INT(mend_engine_history_json(E, "nosuchrun", &page), MEND_ENOTFOUND);
  CHECK(page == NULL && strcmp(mend_engine_errmsg(E), "no run nosuchrun") == 0);
  CHECK_EQ_INT(mend_engine_history_page_json(E, "nosuchrun", 0, 5, 0, &page), MEND_ENOTFOUND);
  CHECK(strstr(mend_engine_errmsg(E), "no run nosuchrun") != NULL);
  CHECK_EQ_INT(mend_engine_history_page_json(E, "nosuchrun", 0, 0, 2, &page), MEND_ENOTFOUND);
  CHECK_EQ_INT(mend_engine_history_page_json(E, id, 100000, 5, 0, &page), MEND_OK);
  CHECK(page && strcmp(page, "[]") == 0);
  mend_free(page);
  mend_free(whole);
  CHECK_EQ_INT(mend_engine_free(E), MEND_OK);
}

int main(void) {
  embed_host_begin("embed-repair");
  write_workflow("stuck", stuck_lua);
  it_repairs_through_the_c_api();
  it_parks_waiting_runs_out_of_memory();
  it_reads_a_history_in_pages();
  return embed_host_end("test_embed_repair");
}
