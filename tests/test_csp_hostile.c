/*
 * test_csp_hostile: pages where src/serve/csp.c must find the inline script where the
 * browser's HTML parser does. A page whose script is hashed wrong is a
 * dashboard whose own script the browser refuses: a blank page, nothing said by the server.
 * Expected hashes are Python's hashlib of the script's text as the HTML parser delimits it;
 * the script data escapes' (each page's script ran in chromium 156 under exactly its hash).
 * serve_dashboard_scripts counts the same scripts (0: `mend serve` warns of a dead page).
 * Must never: test anything but serve_dashboard_csp's script-src and that count.
 */
#include "csp_case.h"

static void expect(const char *page, const char *want) { expect_script_src(page, want); }

int main(void) {
  /* "<script>" named in an HTML comment before the page's script: no script element there */
  expect("<!-- the <script> below draws it all -->\n<script>real</script>",
         "script-src 'sha256-qjOZbWDokxG00akg2uA8bX+jrhlWxSZi4nOq1Gg+V38='");
  /* "</scripts>" inside the script's text does not end it (not the script's end tag) */
  expect("<script>var s = \"</scripts>\"; x</script>",
         "script-src 'sha256-I5CTgxiAV9d3I3YxfVPzLzziERHsMgSnhaqg5sDsdKE='");
  /* a '>' inside a quoted attribute value does not close the start tag */
  expect("<script data-note=\"a>b\">real</script>",
         "script-src 'sha256-qjOZbWDokxG00akg2uA8bX+jrhlWxSZi4nOq1Gg+V38='");
  /* "<script>" in a style's text, in another tag's quoted attribute, in a title: none is one */
  expect("<style>p::after { content: \"<script>\" }</style><p title='<script>'>"
         "<title><script>no</title><script>real</script>",
         "script-src 'sha256-qjOZbWDokxG00akg2uA8bX+jrhlWxSZi4nOq1Gg+V38='");
  /* the end tag as "</script/>" and "</SCRIPT\n>"; a '>' in single quotes */
  expect("<script type='a>b'>real</script/><script>d</SCRIPT\n>",
         "script-src 'sha256-qjOZbWDokxG00akg2uA8bX+jrhlWxSZi4nOq1Gg+V38=' "
         "'sha256-GKw+c0PwFokMUQ6T+TUmEWnZ4/VlQ2Qpgw+vCTT0+OQ='");
  /* pages that run no script: a comment never closed, a quote never closed, an end tag cut
   * short, a script after <plaintext> */
  expect("<!-- <script>real</script>", "script-src 'none'");
  expect("<script data-x=\"a>real</script>", "script-src 'none'");
  expect("<script>real</script", "script-src 'none'");
  expect("<plaintext><script>real</script>", "script-src 'none'");
  /* The script data escapes: after "<!--" a "<script" makes "</script" close only it, until
   * "-->"; the scripts of these pages ran in chromium under exactly these hashes. */
  expect("<script><!--<script>\nwindow.r.push('B') // </script>\n--></script>",
         "script-src 'sha256-OYY1TnFG8ZjOjiLDmdS3WKyRaVirJc0/UNXcniwa7Yw='");
  expect("<script><!--<script>\nwindow.r.push('C')\n--></script>",
         "script-src 'sha256-0lP/fVEBsxsBUQ0HydEXnK07cDFU1Pj/Rz+5KYLqoWc='");
  /* "</script" in the escape (the double escape left) ends the script */
  expect("<script><!--<script>\n// </script>\nwindow.r.push('D')</script>",
         "script-src 'sha256-25tbc/QrpXRDcSy9KTo89+WnDiYkVg3yUUOp6I27S/Q='");
  /* "<!-->" leaves the escape at once; "<scriptx" is no double escape */
  expect("<script><!--><script>\nwindow.r.push('F')</script>",
         "script-src 'sha256-PqFfMoaSfZ9pzze17MMIEfam6VE5fXGwBhOLJBoqJ80='");
  expect("<script><!--<scriptx>\nwindow.r.push('G')</script>",
         "script-src 'sha256-LnD2N4S7d1W+DBXX2dQTurFV4Wl2AQ5maaiewEFvD4I='");
  /* "->" leaves nothing; "-->" does */
  expect("<script><!--<script>-> // </script>\nwindow.r.push('H')\n--></script>",
         "script-src 'sha256-d0vxDE6FPbxjJ+znTLaLJvVNn92P1sTCF+JLUKTEnxA='");
  /* the names in any case, "<SCRIPT/" and "</Script " */
  expect("<script><!--<SCRIPT/>\n// </Script >\nwindow.r.push('I')</script>",
         "script-src 'sha256-fQevyvWHSQ/T9gZasDCHyIrBe0iA9remy+HMy9BMYAY='");
  /* a double escape the page never leaves: the script never ends, nor runs */
  expect("<script><!--<script>\nwindow.r.push('E')\n</script>", "script-src 'none'");
  CHECK(serve_dashboard_scripts("<!-- <script>real</script>", NULL) == 0);
  CHECK(serve_dashboard_scripts("<script>a</script><!-- --><script>b</script>", NULL) == 2);
  return check_done("csp_hostile");
}
