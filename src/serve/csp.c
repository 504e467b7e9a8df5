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

/* The first "<script" opening a tag (followed by '>' or a space) at or after p, or NULL. */
static const char *script_tag(const char *p) {
  for (; (p = strchr(p, '<')) != NULL; p++)
    if (strncasecmp(p, "<script", 7) == 0 && (p[7] == '>' || p[7] == ' ' || p[7] == '\t' ||
                                             p[7] == '\n' || p[7] == '\r' || p[7] == '/'))
      return p;
  return NULL;
}

static const char *script_end(const char *p) {
  for (; (p = strchr(p, '<')) != NULL; p++)
    if (strncasecmp(p, "</script", 8) == 0) return p;
  return NULL;
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
  size_t scripts = 0;
  for (const char *p = page; (p = script_tag(p)) != NULL; p++) scripts++;
  size_t cap = sizeof CSP_HEAD + sizeof CSP_TAIL + sizeof " 'none'" + scripts * SOURCE_LEN;
  char *csp = malloc(cap);
  if (!csp) return NULL;
  size_t n = (size_t)snprintf(csp, cap, "%s", CSP_HEAD);
  for (const char *p = page; (p = script_tag(p)) != NULL; p++) {
    const char *open = strchr(p, '>');
    const char *close = open ? script_end(open + 1) : NULL;
    if (!close) break;   /* a tag cut short: the browser runs nothing of it */
    if (source_of(open + 1, (size_t)(close - open - 1), csp + n) != 0) {
      free(csp);
      return NULL;
    }
    n += strlen(csp + n);
    p = close;
  }
  if (n == sizeof CSP_HEAD - 1) n += (size_t)snprintf(csp + n, cap - n, " 'none'");
  snprintf(csp + n, cap - n, "%s", CSP_TAIL);
  return csp;
}
