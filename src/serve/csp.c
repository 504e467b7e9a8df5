/*
 * csp: the dashboard's Content-Security-Policy, made once from the page when the server
 * starts. Each inline script the page holds is allowed by its SHA-256 (a 'sha256-<base64>'
 * source, the hash a browser takes of the script's text), so that no other script can run: an
 * inline script or an event handler attribute that got into the page (text of a user's that
 * its escaping let through), a javascript: URL, a script from anywhere. The page may talk to
 * its own server only, and be framed by no one.
 * Must never: allow 'unsafe-inline' or 'unsafe-eval' for scripts, nor a script by its origin.
 */
#include "serve_int.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CSP_HEAD "default-src 'none'; script-src"
#define CSP_TAIL "; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; " \
                 "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
/* " 'sha256-" 44 base64 characters "'" */
#define SOURCE_LEN (2 + 7 + 44 + 1)

/* The page is read as the browser's HTML tokenizer reads it, closely enough to find the same
 * script elements: comments (to "-->" or "--!>"), <!...> and <?...> are skipped whole; a start or
 * end tag runs to the first '>' outside a quoted attribute value; the text of a script or of
 * another raw text element (style, title, ...) runs to its end tag, "</name" followed by white
 * space, '/' or '>', whatever else it holds; a script's text as the script data states find
 * its end (script_end); an <svg> or <math> element ends the reading (next_script). */

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* p at "</": whether it is the end tag of name (n bytes). */
static int end_tag_of(const char *p, const char *name, size_t n) {
  return p[0] == '<' && p[1] == '/' && strncasecmp(p + 2, name, n) == 0 &&
         (is_space(p[2 + n]) || p[2 + n] == '/' || p[2 + n] == '>');
}

/* Past the '>' closing the tag whose name ends at p, skipping quoted attribute values; NULL
 * when the page ends first (the browser drops a tag cut short). */
static const char *tag_end(const char *p) {
  for (;;) {
    while (is_space(*p) || *p == '/') p++;
    if (*p == '>') return p + 1;
    if (!*p) return NULL;
    /* an attribute's name: its first character may be '=' */
    p++;
    while (*p && !is_space(*p) && *p != '/' && *p != '>' && *p != '=') p++;
    while (is_space(*p)) p++;
    if (*p != '=') continue;
    p++;
    while (is_space(*p)) p++;
    if (*p == '"' || *p == '\'') {
      const char *q = strchr(p + 1, *p);
      if (!q) return NULL;
      p = q + 1;
    } else {
      while (*p && !is_space(*p) && *p != '>') p++;
    }
  }
}

/* Where the script whose text starts at p ends: the '<' of its end tag, as the tokenizer's
 * script data states find it. "<!--" enters the escaped states, where "</script" still ends the
 * script but "<script" (then white space, '/' or '>') enters the double escaped ones, where
 * "</script" only leaves to the escaped; "-->" (dashes, then '>') leaves either for plain
 * script data. A delimiter that completes "<script" or "</script" inside the escapes is taken
 * by it, never read as the '>' of a "-->". NULL: the page ends first. */
static const char *script_end(const char *p) {
  enum { DATA, ESCAPED, DOUBLE } st = DATA;
  int dashes = 0;   /* '-' just read in an escape, up to 2: then '>' leaves it */
  for (; *p; p++) {
    if (st == DATA) {
      if (*p != '<') continue;
      if (end_tag_of(p, "script", 6)) return p;
      if (strncmp(p, "<!--", 4) == 0) st = ESCAPED, dashes = 2, p += 3;
      continue;
    }
    if (*p == '-') {
      if (dashes < 2) dashes++;
      continue;
    }
    if (*p == '>' && dashes == 2) {
      st = DATA;
      continue;
    }
    dashes = 0;
    if (*p != '<') continue;
    if (st == ESCAPED && end_tag_of(p, "script", 6)) return p;
    if (st == ESCAPED && strncasecmp(p + 1, "script", 6) == 0 &&
        (is_space(p[7]) || p[7] == '/' || p[7] == '>'))
      st = DOUBLE, p += 7;
    else if (st == DOUBLE && end_tag_of(p, "script", 6))
      st = ESCAPED, p += 8;
  }
  return NULL;
}

/* Elements whose text is raw: no tag or comment in it is one. */
static const char *const RAW[] = {"script", "style", "textarea", "title", "xmp", "iframe",
                                  "noembed", "noframes", "noscript"};

/* Past the end of the comment whose "<!--" is at p: "-->", or "--!>" (the tokenizer's comment
 * end bang state); "<!-->" and "<!--->" close at once. NULL: the page ends first. */
static const char *comment_end(const char *p) {
  if (p[4] == '>') return p + 5;
  if (p[4] == '-' && p[5] == '>') return p + 6;
  for (const char *q = p + 4; (q = strstr(q, "--")) != NULL; q++) {
    if (q[2] == '>') return q + 3;
    if (q[2] == '!' && q[3] == '>') return q + 4;
  }
  return NULL;
}

/* The next whole script element at or after *pos: its text at *text, *n bytes, and *pos past
 * its end tag; 0 when there is none left; -1 at an <svg> or <math> element, whose content
 * (foreign: comments in a style, CDATA sections, a script's text without its comments) the
 * browser reads by other rules than these: the page is not read further. */
static int next_script(const char **pos, const char **text, size_t *n) {
  const char *p = *pos;
  while ((p = strchr(p, '<')) != NULL) {
    if (strncmp(p, "<!--", 4) == 0) {
      if (!(p = comment_end(p))) return 0;
    } else if (p[1] == '!' || p[1] == '?' || (p[1] == '/' && !is_alpha(p[2]) && p[2] != '>')) {
      const char *q = strchr(p + 1, '>');   /* a bogus comment */
      if (!q) return 0;
      p = q + 1;
    } else if (p[1] == '/' && is_alpha(p[2])) {
      const char *q = p + 2;
      while (*q && !is_space(*q) && *q != '/' && *q != '>') q++;
      if (!(p = tag_end(q))) return 0;
    } else if (is_alpha(p[1])) {
      const char *name = p + 1, *q = name;
      while (*q && !is_space(*q) && *q != '/' && *q != '>') q++;
      size_t len = (size_t)(q - name);
      if ((len == 3 && strncasecmp(name, "svg", 3) == 0) ||
          (len == 4 && strncasecmp(name, "math", 4) == 0))
        return -1;
      if (!(p = tag_end(q))) return 0;
      if (len == 9 && strncasecmp(name, "plaintext", 9) == 0) return 0;
      for (size_t i = 0; i < sizeof RAW / sizeof RAW[0]; i++) {
        if (strlen(RAW[i]) != len || strncasecmp(name, RAW[i], len) != 0) continue;
        const char *body = p;
        if (i == 0) p = script_end(p);
        else
          while ((p = strchr(p, '<')) != NULL && !end_tag_of(p, RAW[i], len)) p++;
        if (!p) return 0;   /* an element cut short: the browser runs nothing of it */
        if (i == 0) {
          /* an end tag cut short by the page's end: the script never runs */
          if (!(*pos = tag_end(p + 2 + len))) return 0;
          *text = body;
          *n = (size_t)(p - body);
          return 1;
        }
        p += 2 + len;
        break;
      }
    } else {
      p++;
    }
  }
  return 0;
}

size_t serve_dashboard_scripts(const char *page, int *foreign) {
  size_t scripts = 0;
  const char *text;
  size_t n;
  int found;
  for (const char *p = page; (found = next_script(&p, &text, &n)) == 1;) scripts++;
  if (foreign) *foreign = found < 0;
  return found < 0 ? 0 : scripts;
}

/* " 'sha256-...'" of the n bytes at text, as the browser has them: its HTML parser makes
 * every CR LF and lone CR a LF before the script is hashed. */
static int source_of(const char *text, size_t n, char *out) {
  char *norm = malloc(n + 1);
  if (!norm) return -1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (text[i] == '\r') {
      norm[k++] = '\n';
      if (i + 1 < n && text[i + 1] == '\n') i++;
    } else {
      norm[k++] = text[i];
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  int ok = EVP_Digest(norm, k, md, &len, EVP_sha256(), NULL) == 1 && len == 32;
  free(norm);
  if (!ok) return -1;
  memcpy(out, " 'sha256-", 9);
  if (EVP_EncodeBlock((unsigned char *)out + 9, md, (int)len) != 44) return -1;
  out[53] = '\'';
  out[54] = '\0';
  return 0;
}

char *serve_dashboard_csp(const char *page) {
  size_t scripts = serve_dashboard_scripts(page, NULL);   /* foreign: 0, script-src 'none' */
  size_t cap = sizeof CSP_HEAD + sizeof CSP_TAIL + sizeof " 'none'" + scripts * SOURCE_LEN;
  char *csp = malloc(cap);
  if (!csp) return NULL;
  size_t n = (size_t)snprintf(csp, cap, "%s", CSP_HEAD);
  const char *text;
  size_t len;
  for (const char *p = page; scripts && next_script(&p, &text, &len) == 1;) {
    if (source_of(text, len, csp + n) != 0) {
      free(csp);
      return NULL;
    }
    n += strlen(csp + n);
  }
  if (n == sizeof CSP_HEAD - 1) n += (size_t)snprintf(csp + n, cap - n, " 'none'");
  snprintf(csp + n, cap - n, "%s", CSP_TAIL);
  return csp;
}
