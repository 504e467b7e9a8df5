/*
 * csp_case: what the tests of src/serve/csp.c share: a page's script-src, as the server would
 * send it, checked against the one expected. Must never: hold a case of a test.
 */
#ifndef MEND_TESTS_CSP_CASE_H
#define MEND_TESTS_CSP_CASE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serve/serve_int.h"

/* The script-src directive of page's policy is want, exactly. */
static void expect_script_src(const char *page, const char *want) {
  char *csp = serve_dashboard_csp(page);
  CHECK(csp != NULL);
  if (!csp) return;
  const char *p = strstr(csp, "script-src");
  const char *end = p ? strchr(p, ';') : NULL;
  char got[512] = "";
  if (p && end && (size_t)(end - p) < sizeof got) memcpy(got, p, (size_t)(end - p));
  if (strcmp(got, want) != 0) fprintf(stderr, "page %s\n  got  %s\n  want %s\n", page, got, want);
  CHECK_STR(got, want);
  free(csp);
}

#endif
