/*
 * http_call: a step's mend.http call, up to the request handed to curl: the call's table read
 * and checked, the URL checked against the host allow-list (and the URLs checked lately
 * remembered with their parse, which curl is given), the method, body, timeouts and codes of
 * the call, the Idempotency-Key and User-Agent headers, and the options set on the request's
 * easy handle.
 * Must never: send a request to a host the allow-list refuses; leave an option of one call
 * on a handle for the next (an option beyond the common ones marks the request dirty); free
 * a URL's parse while a request holds it; trust a size or a count from the call's table
 * without its bound.
 */
#include "http_int.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json.h"
#include "mend.h"
#include "util.h"

/* The fields a call's table may have. They are read in one pass over the few the table has
 * (read_fields) rather than by a look-up each: sixteen lua_getfield were 3k instructions a
 * request. */
enum { F_URL, F_BODY, F_JSON, F_METHOD, F_HEADERS, F_IDEMPOTENCY_HEADER, F_TIMEOUT,
       F_CONNECT_TIMEOUT, F_MAX_BYTES, F_CA_FILE, F_RETRY_ON, F_FATAL_ON, F_ACCEPT, F_RAISE,
       F__COUNT };
#define FIELD(s) { s, sizeof s - 1 }
static const struct { const char *s; size_t n; } field_name[F__COUNT] = {
  FIELD("url"), FIELD("body"), FIELD("json"), FIELD("method"), FIELD("headers"),
  FIELD("idempotency_header"), FIELD("timeout"), FIELD("connect_timeout"), FIELD("max_bytes"),
  FIELD("ca_file"), FIELD("retry_on"), FIELD("fatal_on"), FIELD("accept"), FIELD("raise"),
};
#undef FIELD

/* mend's User-Agent goes among a request's own headers (setup). CURLOPT_USERAGENT would be
 * printed twice by curl at each request, 80 instructions a byte through its formatter (4.4k a
 * request against 2k as a header); it is set only where it is also what a CONNECT sends: an
 * https URL when the environment names a proxy curl may take for it (read_proxies, http.c),
 * and then the request's own header still wins with the server, as before. */
#define HTTP_USER_AGENT "mend/" MEND_VERSION_STRING
static int proxy_may_tunnel(struct mend_http *H, const char *url) {
  return strncmp(url, "https:", 6) == 0 && H->proxy_https;
}

/* The environment's proxy for the URL's scheme on the handle (http.c, read_proxies), set only
 * when the handle holds another's: curl copies the text at each setopt. */
static void set_proxy(http_req *q) {
  char which = strncmp(q->url, "https:", 6) == 0 ? 's' : 'h';
  if (q->on_proxy == which) return;
  const char *p = which == 's' ? q->H->proxy_https : q->H->proxy_http;
  /* curl frees the old value before it copies the new: a copy that fails leaves no proxy
   * option, and curl then reads the environment itself, as mend read it. The next request on
   * the handle sets it again. */
  q->on_proxy = curl_easy_setopt(q->easy, CURLOPT_PROXY, p ? p : "") == CURLE_OK ? which : 0;
}

/* Puts the fields of the call's table (at 1) in F__COUNT stack slots after base, nil where
 * absent. A table with a metatable is read a field at a time, so that its __index answers as
 * it always did. */
static void read_fields(lua_State *L, int base) {
  luaL_checkstack(L, F__COUNT + 8, "mend.http");
  lua_settop(L, base + F__COUNT);
  if (lua_getmetatable(L, 1)) {
    lua_pop(L, 1);
    for (int f = 0; f < F__COUNT; f++) {
      lua_getfield(L, 1, field_name[f].s);
      lua_replace(L, base + 1 + f);
    }
    return;
  }
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      size_t n;
      const char *k = lua_tolstring(L, -2, &n);
      for (int f = 0; f < F__COUNT; f++) {
        if (field_name[f].n == n && memcmp(field_name[f].s, k, n) == 0) {
          lua_copy(L, -1, base + 1 + f);
          break;
        }
      }
    }
    lua_pop(L, 1);
  }
}

/* The stack slot of field f (read_fields put it after base): read where it is, not pushed
 * and popped at each use. */
#define SLOT(base, f) ((base) + 1 + (f))

static int read_codes(lua_State *L, int base, int f, codes *c, char *err, int errlen) {
  const char *field_s = field_name[f].s;
  c->n = 0;
  int t = lua_type(L, SLOT(base, f));
  if (t == LUA_TNIL) return 0;
  if (t != LUA_TTABLE) {
    snprintf(err, (size_t)errlen, "%s must be a list of status codes", field_s);
    return -1;
  }
  int n = (int)luaL_len(L, SLOT(base, f));
  for (int k = 1; k <= n; k++) {
    lua_geti(L, SLOT(base, f), k);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    lua_pop(L, 1);
    if (!ok || v < 100 || v > 599 || c->n == HTTP_MAX_CODES) {
      snprintf(err, (size_t)errlen, "%s must be a list of at most %d status codes (100-599)",
               field_s, HTTP_MAX_CODES);
      return -1;
    }
    c->v[c->n++] = (long)v;
  }
  return 0;
}

static double opt_seconds(lua_State *L, int base, int f, double def, char *err, int errlen) {
  int t = lua_type(L, SLOT(base, f));
  double v = def;
  if (t != LUA_TNIL) {
    v = lua_tonumber(L, SLOT(base, f));
    if (t != LUA_TNUMBER || !(v > 0)) {
      snprintf(err, (size_t)errlen, "%s must be a number of seconds > 0", field_name[f].s);
      v = -1;
    } else if (v > 1e6) {
      v = 1e6;   /* about 11 days: any longer is "no limit", and stays a long in ms */
    }
  }
  return v;
}

static int opt_bool(lua_State *L, int base, int f, int def) {
  return lua_isnil(L, SLOT(base, f)) ? def : lua_toboolean(L, SLOT(base, f));
}

/* pattern "*.example.com" matches any name under example.com; others match exactly. */
/* An address written as a host ("[::1]", "10.0.0.1", and the forms a resolver reads as one:
 * "127.1", "2130706433"): a DNS name's last label is never all digits. */
static int host_is_address(const char *host, size_t hn) {
  if (host[0] == '[') return 1;
  const char *last = host + hn;
  while (last > host && last[-1] != '.') last--;
  if (last == host + hn) return 0;
  for (const char *c = last; c < host + hn; c++)
    if (*c < '0' || *c > '9') return 0;
  return 1;
}

/* A wildcard names the hosts under a domain, never an address that ends as its text does
 * ("*.0.0.1" is no domain of 127.0.0.1): an address is allowed only by its own entry. An IPv6
 * address is named with or without the brackets its URL needs ("::1" or "[::1]"), as the
 * address check (http_addr.c) reads either. */
static int host_allowed(const char *list, const char *host) {
  if (!list) return 0;
  size_t hn = strlen(host);
  int address = host_is_address(host, hn);
  const char *bare = host;   /* an IPv6 host without its brackets */
  size_t bn = hn;
  if (hn >= 2 && host[0] == '[' && host[hn - 1] == ']') bare++, bn -= 2;
  const char *p;
  size_t n;
  while (mend__http_allow_next(&list, &p, &n)) {
    if (n >= 2 && p[0] == '*' && p[1] == '.') {
      size_t sn = n - 1;   /* ".example.com" */
      if (!address && hn > sn && strncasecmp(host + hn - sn, p + 1, sn) == 0) return 1;
    } else if (n && n == hn && strncasecmp(host, p, n) == 0) {
      return 1;
    } else if (bare != host && n && n == bn && strncasecmp(bare, p, n) == 0) {
      return 1;
    }
  }
  return 0;
}

void mend__http_url_drop(http_url *u) {
  if (!u || --u->refs > 0) return;
  curl_url_cleanup(u->uh);
  free(u->url);
  free(u->clean);
  free(u);
}

/* url for a message about it, its user and password (before an '@' in what follows "//", up to
 * the path) shown as "***": the text may not parse, so this reads it as text. */
static const char *url_shown(const char *url, char *buf, size_t n) {
  const char *auth = strstr(url, "//");
  if (!auth) return url;
  auth += 2;
  size_t end = strcspn(auth, "/?#");
  const char *at = NULL;
  for (size_t i = 0; i < end; i++)
    if (auth[i] == '@') at = auth + i;
  if (!at) return url;
  snprintf(buf, n, "%.*s***%s", (int)(auth - url), url, at);
  return buf;
}

/* Parses and checks the URL: http or https, a host the engine allows. Sets q->target (held)
 * and q->url (without user and password). */
static int check_url(mend_engine *E, http_req *q, const char *url, char *err, int errlen) {
  struct mend_http *H = q->H;
  for (int k = 0; k < HTTP_URL_MEMO; k++) {
    if (H->memo[k] && strcmp(H->memo[k]->url, url) == 0) {
      q->target = H->memo[k];
      q->target->refs++;
      q->url = q->target->clean;
      return 0;
    }
  }
  /* Parsed without flags: curl's own parse of a URL text adds only guessing a missing scheme
   * and taking schemes it does not know, both refused here. */
  CURLU *u = curl_url(), *shown = NULL;
  http_url *t = calloc(1, sizeof *t);
  char *scheme = NULL, *host = NULL, buf[300];
  int rc = -1;
  if (!u || !t) { snprintf(err, (size_t)errlen, "out of memory"); goto out; }
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK) {
    snprintf(err, (size_t)errlen, "bad url \"%.200s\"", url_shown(url, buf, sizeof buf));
    goto out;
  }
  curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
  if (!scheme || (strcasecmp(scheme, "http") && strcasecmp(scheme, "https"))) {
    snprintf(err, (size_t)errlen, "url \"%.200s\" is not http or https",
             url_shown(url, buf, sizeof buf));
    goto out;
  }
  if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host) {
    snprintf(err, (size_t)errlen, "url \"%.200s\" has no host", url_shown(url, buf, sizeof buf));
    goto out;
  }
  if ((E->cfg.sandbox || E->cfg.http_allow) && !host_allowed(E->cfg.http_allow, host)) {
    snprintf(err, (size_t)errlen, "host \"%.200s\" is not allowed (http_allow: %.200s)%s", host,
             E->cfg.http_allow ? E->cfg.http_allow : "none",
             E->cfg.sandbox_by_mark ? "; this engine is sandboxed because the database is marked "
                                      "sandboxed (README: Limits and sandbox)" : "");
    goto out;
  }
  /* curl reads the user and password from u; messages and history show the URL without */
  shown = curl_url_dup(u);
  char *clean = NULL;
  if (shown) {
    curl_url_set(shown, CURLUPART_USER, NULL, 0);
    curl_url_set(shown, CURLUPART_PASSWORD, NULL, 0);
    if (curl_url_get(shown, CURLUPART_URL, &clean, 0) == CURLUE_OK) {
      t->clean = mend_dupstr(clean);
      curl_free(clean);
    }
  }
  t->url = mend_dupstr(url);
  if (!t->clean || !t->url) {
    snprintf(err, (size_t)errlen, "out of memory");
    goto out;
  }
  t->uh = u;
  u = NULL;
  t->refs = 2;   /* the memo's and this request's */
  int k = H->memo_next;
  H->memo_next = (k + 1) % HTTP_URL_MEMO;
  mend__http_url_drop(H->memo[k]);
  H->memo[k] = t;
  q->target = t;
  q->url = t->clean;
  t = NULL;
  rc = 0;
out:
  if (t) {
    free(t->url);
    free(t->clean);
    free(t);
  }
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(shown);
  curl_url_cleanup(u);
  return rc;
}

/* "name: value" whole, however long (a bearer token can run to kilobytes). */
/* value NULL: send no header of that name, curl's own included. */
static int add_header(http_req *q, const char *name, const char *value) {
  /* curl reads "Name:" with nothing but blanks after the colon as "send no Name" (its own
   * Host, Accept or User-Agent included); "Name;" is how it sends one empty. */
  int none = !value;
  if (none || !value[strspn(value, " \t")]) value = "";
  size_t n = strlen(name), v = strlen(value);
  if (mend__http_grow(&q->lines, &q->lines_cap, q->lines_len + n + v + 3)) return -1;
  if (q->nlines == q->line_cap) {
    int c = q->line_cap ? q->line_cap * 2 : 8;
    size_t *at = realloc(q->line_at, (size_t)c * sizeof *at);
    if (!at) return -1;
    q->line_at = at;
    struct curl_slist *nodes = realloc(q->nodes, (size_t)c * sizeof *nodes);
    if (!nodes) return -1;
    q->nodes = nodes;
    q->line_cap = c;
  }
  char *line = q->lines + q->lines_len;
  memcpy(line, name, n);
  if (v) {
    memcpy(line + n, ": ", 2);
    memcpy(line + n + 2, value, v + 1);
  } else {
    memcpy(line + n, none ? ":" : ";", 2);
  }
  q->line_at[q->nlines++] = q->lines_len;
  q->lines_len += n + v + 3;
  return 0;
}

/* The list curl reads, over the lines once all are in (the buffer may have moved as it grew). */
static void finish_headers(http_req *q) {
  for (int k = 0; k < q->nlines; k++) {
    q->nodes[k].data = q->lines + q->line_at[k];
    q->nodes[k].next = k + 1 < q->nlines ? &q->nodes[k + 1] : NULL;
  }
  q->headers = q->nlines ? q->nodes : NULL;
}

/* An HTTP header's name is a token (RFC 9110 5.1): curl reads others its own way ("Host;" is
 * its Host with an empty value, sent as "Host:: x"), past the checks made of the name here. */
static int is_token(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s))) return 0;
  return 1;
}

/* Reads the call's table (at 1), sets the request up and starts it. 0: the step yields; -1:
 * err says why it cannot be made (a fatal error for the step). */
static int setup(mend_run *r, http_req *q, lua_State *L, char *err, int errlen) {
  mend_engine *E = r->E;
  int base = lua_gettop(L);
  read_fields(L, base);
  if (lua_type(L, SLOT(base, F_URL)) != LUA_TSTRING) {
    snprintf(err, (size_t)errlen, "needs a url: mend.http{ url = \"https://...\" }");
    return -1;
  }
  const char *url = lua_tostring(L, SLOT(base, F_URL));
  if (check_url(E, q, url, err, errlen)) return -1;
  CURL *c = q->easy;
  /* A URL's user and password stay in the handle's state past its request: reset after. */
  if (strcmp(url, q->url) != 0) q->dirty = 1;
  /* The text too, though the parse overrides it: curl up to 8.11 keeps it as the request's
   * own URL (its effective URL), which it would otherwise print back from the parse on a new
   * handle and leave at the first request's on a reused one. From 8.12 curl drops the text
   * once a parse is set and prints the URL from the parse at every transfer: correct still,
   * but most of what the parse saves is spent again there (Debian 12 has 7.88). A reused
   * handle that holds this URL's text already keeps it: mend follows no redirect, the one
   * thing that would make curl's record of it another URL. */
  if (q->on_handle != q->target) {
    curl_easy_setopt(c, CURLOPT_URL, url);
    q->target->refs++;
    mend__http_url_drop(q->on_handle);
    q->on_handle = q->target;
  }
  curl_easy_setopt(c, CURLOPT_CURLU, q->target->uh);
  set_proxy(q);
  /* the body: a string, or json = value encoded */
  int has_type = 0, has_key = 0, has_agent = 0;
  size_t body_len = 0;
  int bt = lua_type(L, SLOT(base, F_BODY));
  int jt = lua_type(L, SLOT(base, F_JSON));
  if (bt != LUA_TNIL && jt != LUA_TNIL) {
    snprintf(err, (size_t)errlen, "give body or json, not both");
    return -1;
  }
  if (bt != LUA_TNIL) {
    if (bt != LUA_TSTRING) { snprintf(err, (size_t)errlen, "body must be a string"); return -1; }
    const char *b = lua_tolstring(L, SLOT(base, F_BODY), &body_len);
    q->body = malloc(body_len + 1);
    if (!q->body) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
    memcpy(q->body, b, body_len);
  } else if (jt != LUA_TNIL) {
    char jerr[300];
    q->body = mend_json_encode(L, SLOT(base, F_JSON), "json", jerr, sizeof jerr);
    if (!q->body) { snprintf(err, (size_t)errlen, "%s", jerr); return -1; }
    body_len = strlen(q->body);
  }
  int mt = lua_type(L, SLOT(base, F_METHOD));
  const char *method =
      mt == LUA_TSTRING ? lua_tostring(L, SLOT(base, F_METHOD)) : q->body ? "POST" : "GET";
  size_t mn = strlen(method);
  if (mn == 0 || mn >= sizeof q->method) {
    snprintf(err, (size_t)errlen, "bad method");
    return -1;
  }
  for (size_t k = 0; k <= mn; k++) q->method[k] = (char)toupper((unsigned char)method[k]);
  for (size_t k = 0; k < mn; k++)
    if (!isalpha((unsigned char)q->method[k])) {
      snprintf(err, (size_t)errlen, "bad method \"%s\"", method);
      return -1;
    }
  /* a reused handle's last request may have had a body: as a new handle has none */
  if (!q->body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)-1);
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  if (strcmp(q->method, "HEAD") == 0) {
    /* curl sends a HEAD without its body: a call that gave one would not know it was dropped */
    if (q->body) {
      snprintf(err, (size_t)errlen, "a HEAD request has no body");
      return -1;
    }
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if ((strcmp(q->method, "GET") != 0 || q->body) &&
             !(q->body && strcmp(q->method, "POST") == 0)) {
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);   /* a body is POSTed by default */
  }
  if (q->body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
  }
  /* headers */
  int ht = lua_type(L, SLOT(base, F_HEADERS));
  if (ht == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, SLOT(base, F_HEADERS))) {
      /* false: no such header, curl's own included (its Accept, its Expect on a large body) */
      int none = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
      if (lua_type(L, -2) != LUA_TSTRING || !(none || lua_isstring(L, -1))) {
        snprintf(err, (size_t)errlen, "headers must map names to strings (or false: none)");
        return -1;
      }
      size_t nlen, vlen = 0;
      const char *name = lua_tolstring(L, -2, &nlen);
      const char *value = none ? "" : lua_tolstring(L, -1, &vlen);
      /* Read as C strings from here: a NUL would end "Host\0x" as "Host", past the checks. */
      if (strlen(name) != nlen || strlen(value) != vlen) {
        snprintf(err, (size_t)errlen, "header \"%.100s\" has a NUL byte", name);
        return -1;
      }
      if (!is_token(name) || strpbrk(value, "\r\n")) {
        snprintf(err, (size_t)errlen, "header \"%.100s\" %s", name, !is_token(name)
                 ? "is not a header name (letters, digits and !#$%&'*+-.^_`|~ only)"
                 : "has a newline in its value");
        return -1;
      }
      /* The allow-list is of the hosts a request is for: a Host of the call's own would reach
       * any site served at an allowed host's address (a shared proxy's other names). */
      if ((E->cfg.sandbox || E->cfg.http_allow) && strcasecmp(name, "host") == 0) {
        snprintf(err, (size_t)errlen, "header \"%.100s\" is not allowed with http_allow: the "
                 "host is the url's", name);
        return -1;
      }
      /* The request's framing is curl's, from the body: a length of the call's own that is
       * not the body's leaves bytes a kept-alive connection reads as the next request, which
       * may be another run's, and that run then gets the answer to them. */
      if (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0) {
        snprintf(err, (size_t)errlen, "header \"%.100s\" is not the call's to set: the request is "
                 "framed by its body", name);
        return -1;
      }
      if (strcasecmp(name, "content-type") == 0) has_type = 1;
      if (strcasecmp(name, "idempotency-key") == 0) {
        /* One empty key on every run's calls would make them one call to a service that
         * dedupes by it: none is false (or idempotency_header = false). */
        if (!none && !vlen) {
          snprintf(err, (size_t)errlen, "header \"%.100s\" is empty: give false to send none",
                   name);
          return -1;
        }
        has_key = 1;
      }
      if (strcasecmp(name, "user-agent") == 0) has_agent = 1;
      /* Compression is asked for by the call, and then curl both offers it and decodes the
       * answer ("" offers every encoding it has). Not by default: offering it cost a seventh
       * of a small request's instructions, for answers most services send plain. */
      if (strcasecmp(name, "accept-encoding") == 0) {
        if (!none) {   /* none is curl's default: nothing offered */
          q->dirty = 1;
          curl_easy_setopt(q->easy, CURLOPT_ACCEPT_ENCODING, value);   /* copied */
        }
      } else if (add_header(q, name, none ? NULL : value)) {
        snprintf(err, (size_t)errlen, "out of memory");
        return -1;
      }
      lua_pop(L, 1);
    }
  } else if (ht != LUA_TNIL) {
    snprintf(err, (size_t)errlen, "headers must be a table");
    return -1;
  }
  /* A body of the call's own is its bytes, of no type mend knows: curl would call it a form
   * (application/x-www-form-urlencoded), which a service may parse as one. */
  if ((!has_type && (jt != LUA_TNIL || q->body) &&
       add_header(q, "Content-Type", jt != LUA_TNIL ? "application/json" : NULL)) ||
      (!has_agent && add_header(q, "User-Agent", HTTP_USER_AGENT))) {
    snprintf(err, (size_t)errlen, "out of memory");
    return -1;
  }
  if (proxy_may_tunnel(q->H, q->url)) {
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_USERAGENT, HTTP_USER_AGENT);
  }
  if (!has_key && opt_bool(L, base, F_IDEMPOTENCY_HEADER, 1) && strcmp(q->method, "GET") &&
      strcmp(q->method, "HEAD")) {
    int i = r->cur;
    const step_rt *st = &r->steps[i];
    /* ctx.idempotency_key's: a map's item or a branch is named for itself ("charge/3"). A
     * compensation's requests carry it with "/compensate": the undo is another effect, and a
     * service that keeps keys across its endpoints would answer a refund sent with its
     * charge's key with the charge, refunding nothing. */
    static const char undo[] = "/compensate";
    size_t ul = st->status == MEND_STEP_COMPENSATING ? sizeof undo - 1 : 0;
    const char *key = st->custom_key && !ul ? st->idem_key : NULL;
    char small[256], *built = NULL;
    if (!key) {
      const char *head = st->custom_key ? st->idem_key : r->id;
      const char *name = st->custom_key ? "" : mend__step_name(r, i);
      size_t hn = strlen(head), nn = strlen(name), sep = st->custom_key ? 0 : 1;
      size_t need = hn + sep + nn + ul + 1;
      built = need <= sizeof small ? small : malloc(need);
      if (!built) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
      memcpy(built, head, hn);
      if (sep) built[hn] = '/';
      memcpy(built + hn + sep, name, nn);
      memcpy(built + hn + sep + nn, undo, ul);
      built[need - 1] = 0;
      key = built;
    }
    int bad = strpbrk(key, "\r\n") != NULL;
    int rc = bad ? 0 : add_header(q, "Idempotency-Key", key);
    if (built != small) free(built);
    if (bad) { snprintf(err, (size_t)errlen, "the idempotency key has a newline"); return -1; }
    if (rc) { snprintf(err, (size_t)errlen, "out of memory"); return -1; }
  }
  finish_headers(q);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, q->headers);   /* NULL: none, on a reused handle too */
  /* limits and mapping */
  double timeout = opt_seconds(L, base, F_TIMEOUT, HTTP_TIMEOUT, err, errlen);
  double connect = opt_seconds(L, base, F_CONNECT_TIMEOUT, HTTP_CONNECT_TIMEOUT, err, errlen);
  if (timeout < 0 || connect < 0) return -1;
  /* 0 ms would mean no timeout to curl: a tiny one is 1 ms */
  long timeout_ms = timeout * 1000 < 1 ? 1L : (long)(timeout * 1000);
  long connect_ms = connect * 1000 < 1 ? 1L : (long)(connect * 1000);
  if (timeout_ms != q->on_timeout_ms) {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    q->on_timeout_ms = timeout_ms;
  }
  if (connect_ms != q->on_connect_ms) {
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    q->on_connect_ms = connect_ms;
  }
  /* The answer is held outside the state's allocator until it is whole: no larger than what
   * the workflow's code may hold, the default included. */
  q->max_bytes = HTTP_MAX_BYTES;
  if (E->cfg.memory_limit && E->cfg.memory_limit < q->max_bytes) q->max_bytes = E->cfg.memory_limit;
  if (!lua_isnil(L, SLOT(base, F_MAX_BYTES))) {
    lua_Integer v = lua_tointeger(L, SLOT(base, F_MAX_BYTES));
    if (v <= 0) { snprintf(err, (size_t)errlen, "max_bytes must be an integer > 0"); return -1; }
    if (E->cfg.memory_limit && (lua_Unsigned)v > E->cfg.memory_limit) {
      snprintf(err, (size_t)errlen, "max_bytes of %lld is over the memory limit (%zu bytes)",
               (long long)v, E->cfg.memory_limit);
      return -1;
    }
    q->max_bytes = (size_t)v;
  }
  if ((curl_off_t)q->max_bytes != q->on_max_bytes) {
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)q->max_bytes);
    q->on_max_bytes = (curl_off_t)q->max_bytes;
  }
  int ca = lua_type(L, SLOT(base, F_CA_FILE));
  /* curl opens the file and reads it to its end on the loop's thread: a FIFO or /dev/stdin
   * held the engine until its writer closed it, and any other path of the host is read. */
  if (ca != LUA_TNIL && E->cfg.sandbox) {
    snprintf(err, (size_t)errlen, "ca_file is not available in a sandbox (it names a file of "
             "the host's)");
    return -1;
  }
  if (ca == LUA_TSTRING) {
    q->dirty = 1;
    curl_easy_setopt(c, CURLOPT_CAINFO, lua_tostring(L, SLOT(base, F_CA_FILE)));   /* copied */
  }
  if (read_codes(L, base, F_RETRY_ON, &q->retry_on, err, errlen) ||
      read_codes(L, base, F_FATAL_ON, &q->fatal_on, err, errlen) ||
      read_codes(L, base, F_ACCEPT, &q->accept, err, errlen)) return -1;
  q->raise = opt_bool(L, base, F_RAISE, 1);
  return 0;
}

typedef struct setup_args {
  mend_run *r;
  http_req *q;
  char *err;
  int errlen, rc;
} setup_args;

static int setup_call(lua_State *L) {
  setup_args *a = lua_touserdata(L, 2);
  lua_settop(L, 1);
  a->rc = setup(a->r, a->q, L, a->err, a->errlen);
  return 0;
}

int mend_engine_http(lua_State *L, char *err, int errlen) {
  mend_run *r = mend__waiting_run(L, err, errlen);
  if (!r) return -1;
  mend_engine *E = r->E;
  luaL_checktype(L, 1, LUA_TTABLE);
  struct mend_http *H = mend__http_state(E);
  http_req *q = H && mend__run_cold(r) ? mend__http_req_new(H) : NULL;
  if (!q) {
    snprintf(err, (size_t)errlen, "out of memory");
    return -1;
  }
  q->next = H->reqs;
  if (H->reqs) H->reqs->prev = q;
  H->reqs = q;
  /* Protected: the call's table is the workflow's, and its metamethods (an __index, a list's
   * __len, a limit's error raised inside them) may raise out of the setup, which must not
   * leave the request (its easy handle, outside any memory limit) behind. */
  int top = lua_gettop(L);
  setup_args a = {r, q, err, errlen, -1};
  lua_pushcfunction(L, setup_call);
  lua_pushvalue(L, 1);
  lua_pushlightuserdata(L, &a);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
    mend__http_req_free(q);
    return lua_error(L);
  }
  int rc = a.rc;
  lua_settop(L, top);
  if (rc == 0) {
    q->started = mend_real_now();
    if (curl_multi_add_handle(H->multi, q->easy) != CURLM_OK) {
      snprintf(err, (size_t)errlen, "cannot start the request");
      rc = -1;
    } else {
      q->added = 1;
      if (++H->in_multi > H->max_in_multi) {
        H->max_in_multi = H->in_multi;
        curl_multi_setopt(H->multi, CURLMOPT_MAXCONNECTS, 4L * H->max_in_multi);
      }
    }
  }
  if (rc) {
    mend__http_req_free(q);
    return -1;
  }
  E->externals++;
  q->run = r;
  r->cold->http = q;
  r->waiting = 1;
  return 0;
}
