/*
 * test_csp: the dashboard's Content-Security-Policy as src/serve/csp.c makes it from a page.
 * Each inline script is allowed by the SHA-256 a browser takes of its text (the figures here
 * are Python's hashlib of the same bytes), after CR LF and a lone CR became LF as the HTML
 * parser makes them; a page without a whole script allows none; nothing ever allows
 * 'unsafe-inline' for scripts. It never tests the header on the wire (spec/dashboard_*).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serve/serve_int.h"

static int sources(const char *csp) {
  int n = 0;
  for (const char *p = csp; (p = strstr(p, "'sha256-")) != NULL; p++) n++;
  return n;
}

static const char *script_src(const char *csp, char *out, size_t cap) {
  const char *p = strstr(csp, "script-src");
  const char *end = p ? strchr(p, ';') : NULL;
  size_t n = p && end ? (size_t)(end - p) : 0;
  if (n >= cap) n = cap - 1;
  memcpy(out, p ? p : "", n);
  out[n] = '\0';
  return out;
}

static void expect(const char *page, const char *want) {
  char *csp = serve_dashboard_csp(page);
  char got[256];
  CHECK(csp != NULL);
  if (!csp) return;
  CHECK_STR(script_src(csp, got, sizeof got), want);
  CHECK(strstr(csp, "default-src 'none'") != NULL);
  CHECK(strstr(csp, "connect-src 'self'") != NULL);
  CHECK(strstr(csp, "frame-ancestors 'none'") != NULL);
  free(csp);
}

int main(void) {
  expect("<p>no script</p>", "script-src 'none'");
  expect("", "script-src 'none'");
  expect("<script>cut short", "script-src 'none'");
  expect("<scripts>x</scripts>", "script-src 'none'");
  expect("<html><script>alert(1)</script></html>",
         "script-src 'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI='");
  /* "a\nb\nc" and "d": two scripts, the first with CR LF and a lone CR, a tag in capitals */
  expect("<SCRIPT type=\"text/javascript\">a\r\nb\rc</SCRIPT>\n<script>d</script>",
         "script-src 'sha256-6n+wi3otxGGf+3x7s42VogR5NfoWXXGxLv04UqLm0Mw=' "
         "'sha256-GKw+c0PwFokMUQ6T+TUmEWnZ4/VlQ2Qpgw+vCTT0+OQ='");
  char *csp = serve_dashboard_csp("<script>x</script>");
  CHECK(csp && sources(csp) == 1 && strstr(csp, "'unsafe-inline'; connect-src") != NULL &&
        strstr(csp, "script-src 'unsafe") == NULL);   /* style only */
  free(csp);
  return check_done("csp");
}
