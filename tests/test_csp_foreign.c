/*
 * test_csp_foreign: pages the HTML tokenizer reads by rules src/serve/csp.c does not follow
 * (<svg> and <math> content: a comment in an SVG style, a CDATA section, an SVG script's text
 * without its comments) get a policy that allows no script, and count no script, so that
 * `mend serve` does not serve them; a comment closed by "--!>" is read as the browser reads
 * it. The hashes are those chromium 156 computed for the scripts it ran (the review of
 * clean26). Must never: test anything but serve_dashboard_csp's script-src and that count.
 */
#include "csp_case.h"

static void expect(const char *page, const char *want, size_t scripts, int foreign) {
  expect_script_src(page, want);
  int f = -1;
  CHECK(serve_dashboard_scripts(page, &f) == scripts);
  CHECK(f == foreign);
}

int main(void) {
  /* chromium ran S: the comment in it is no part of its text; an HTML reading hashes it */
  expect("<svg><script>document.title+='S'<!--x--></script></svg>", "script-src 'none'", 0, 1);
  /* an SVG style is no raw text: the "<script>" in its comment is no script (only Y ran) */
  expect("<svg><style><!--</style><script>document.title+='X'</script>--></style></svg>"
         "<script>document.title+='Y'</script>",
         "script-src 'none'", 0, 1);
  /* CDATA in SVG runs to "]]>", not to the first '>' (only Y ran); <math> alike, any case */
  expect("<svg><![CDATA[ > <script>document.title+='C'</script> ]]></svg>"
         "<script>document.title+='Y'</script>",
         "script-src 'none'", 0, 1);
  expect("<script>document.title+='Y'</script><MATH><mi>x</mi></MATH>", "script-src 'none'", 0, 1);
  /* "<svg" inside a script's text, or in a comment, is no element: Y's hash */
  expect("<!-- <svg> --><script>document.title+='Y'</script>",
         "script-src 'sha256-57NhJoJiZBx4T73HQyRU8DQqOhOA4k/1J30yfzQRjjE='", 1, 0);
  /* "--!>" closes a comment (chromium ran B) */
  expect("<!-- c --!><script>document.title+='B'</script>",
         "script-src 'sha256-a63ABG+7Z+nSYgrpM/5hl47EQOW/YvH/YeSnpC05Wn8='", 1, 0);
  /* "--!" not followed by '>' does not: the comment goes on to its "-->" */
  expect("<!-- c --!x <script>no()</script> --><script>document.title+='B'</script>",
         "script-src 'sha256-a63ABG+7Z+nSYgrpM/5hl47EQOW/YvH/YeSnpC05Wn8='", 1, 0);
  return check_done("csp_foreign");
}
