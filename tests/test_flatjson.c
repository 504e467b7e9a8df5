/*
 * test_flatjson: a host hears each event and alert as the text json_dumps(v, JSON_COMPACT)
 * wrote before flatjson.c did the writing; the two are compared byte for byte over every kind
 * of event the engine makes (built with the engine's own json_pack formats), with unusual
 * strings (quotes, backslashes, every control character, DEL, '/', UTF-8 of every length,
 * strings that are not UTF-8, embedded NULs), integers at their limits and reals of every
 * range, and over random objects of that shape.
 */
#include "flatjson.h"
#include "check.h"

#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mismatches, compared;

/* flatjson's text of v and json_dumps's, the same (both NULL when jansson refuses v). */
static void same_as_jansson(json_t *v, mend_textbuf *b) {
  char *want = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER);
  const char *got = mend_flatjson(v, b);
  compared++;
  if ((!want) != (!got) || (want && strcmp(want, got) != 0)) {
    if (mismatches++ < 10)
      fprintf(stderr, "  jansson %s\n  flatjson %s\n", want ? want : "(refused)",
              got ? got : "(refused)");
  }
  free(want);
}

/* The engine's three events, as pump.c, saga.c and admit.c make them, with notify.c's time. */
static json_t *run_finished(const char *id, const char *wf, const char *status, double at) {
  json_t *ev = json_pack("{s:s, s:s, s:s, s:s}", "type", "run_finished", "run_id", id,
                         "workflow", wf, "status", status);
  if (ev) json_object_set_new(ev, "at", json_real(at));
  return ev;
}

static json_t *step_failed(const char *id, const char *wf, const char *step, int attempt,
                           const char *error, int will_retry, double at) {
  json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:b}", "type", "step_failed", "run_id",
                         id, "workflow", wf, "step", step, "attempt", attempt, "error", error,
                         "will_retry", will_retry);
  if (ev) json_object_set_new(ev, "at", json_real(at));
  return ev;
}

static json_t *breaker_changed(const char *key, const char *from, const char *to, const char *id,
                               double at) {
  json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "breaker_changed", "key", key,
                         "from", from, "to", to, "run_id", id);
  if (ev) json_object_set_new(ev, "at", json_real(at));
  return ev;
}

/* An alert as notify.c's mend__alert makes it. */
static json_t *alert(const char *kind, const char *id, const char *wf, double at, const char *step,
                     const char *reason, const char *error) {
  json_t *ev =
      json_pack("{s:s, s:s, s:s, s:f}", "kind", kind, "run_id", id, "workflow", wf, "at", at);
  if (step) json_object_set_new(ev, "step", json_string(step));
  if (reason) json_object_set_new(ev, "reason", json_string(reason));
  if (error) json_object_set_new(ev, "error", json_string(error));
  return ev;
}

static const char *const odd[] = {
  "", "plain", "say \"hi\"", "back\\slash\\", "a/b </script>", "tab\there", "line\nbreak\r\n",
  "\b\f", "\x01\x02\x1f", "\x7f del", "caf\xc3\xa9", "\xe2\x82\xac euro", "\xf0\x9f\x98\x80 emoji",
  "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf", "mixed \"\xc3\xa9\"\t\\\x1b[0m", "{\"json\":[1,2]}",
  "retryable: payment declined (\"card\": 4242)",
};

/* not UTF-8: a stray continuation, an overlong form, a surrogate, past U+10FFFF, cut short */
static const char *const not_utf8[] = {
  "\x80", "a\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
  "\xf5\x80\x80\x80", "\xff", "cut \xe2\x82", "cut \xc3",
};

static const double reals[] = {
  0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 1.5, 1e-5, 1e-300, 5e-324, DBL_MIN, DBL_MAX, -DBL_MAX, 1e16,
  1e17, 1e21, 1e22, 123456789012345678.0, 9007199254740993.0, 1764892800.123456, 1764892800.5,
  1764892800.0, 0.016666666666666666, 3600.0, 1.2345678901234567e-300, -1.2345678901234567e-300,
  -1.2345678901234567e+300, 2.2250738585072014e-308,
};

static void it_writes_every_kind_of_event_as_jansson(void) {
  mend_textbuf b = {0};
  size_t n = sizeof odd / sizeof *odd, nr = sizeof reals / sizeof *reals;
  for (size_t i = 0; i < n; i++) {
    const char *s = odd[i], *t = odd[(i + 3) % n];
    double at = reals[i % nr];
    json_t *ev[] = {
      run_finished("0123456789abcdef", s, "succeeded", at),
      run_finished(s, "quest", t, -at),
      step_failed("0123456789abcdef", "quest", s, 1, t, 1, at),
      step_failed(t, s, "slay", INT_MAX, s, 0, 1764892800.25),
      step_failed("id", "wf", "step", INT_MIN, "", 0, at),
      breaker_changed(s, "closed", "open", t, at),
      breaker_changed("payments", t, s, "id", at),
      alert("compensated_with_alert", "id", s, at, t, s, t),
      alert(s, t, "wf", at, NULL, NULL, s),
    };
    for (size_t k = 0; k < sizeof ev / sizeof *ev; k++) {
      CHECK(ev[k] != NULL);
      same_as_jansson(ev[k], &b);
      json_decref(ev[k]);
    }
  }
  /* run_finished as notify.c kept it, a key added and deleted before the host hears it */
  json_t *ev = run_finished("id", "wf", "failed", 12.5);
  json_object_set_new(ev, "_finished", json_true());
  json_object_del(ev, "_finished");
  same_as_jansson(ev, &b);
  json_decref(ev);
  mend_textbuf_free(&b);
}

static void it_writes_numbers_and_strings_as_jansson(void) {
  mend_textbuf b = {0};
  json_t *o = json_object();
  long long ints[] = {0,   1,       -1,      9,         10,        99,
                      100, INT_MAX, INT_MIN, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
    json_object_set_new(o, "n", json_integer(ints[i]));
    same_as_jansson(o, &b);
  }
  for (size_t i = 0; i < sizeof reals / sizeof *reals; i++) {
    json_object_set_new(o, "x", json_real(reals[i]));
    same_as_jansson(o, &b);
    json_object_set_new(o, "x", json_real(-reals[i]));
    same_as_jansson(o, &b);
  }
  for (int k = -320; k <= 308; k++) {   /* every exponent's text: its sign and zeros dropped */
    json_object_set_new(o, "x", json_real(pow(10, k)));
    same_as_jansson(o, &b);
    json_object_set_new(o, "x", json_real(-3.25 * pow(10, k)));
    same_as_jansson(o, &b);
  }
  for (int c = 0; c < 256; c++) {   /* every byte alone, and inside text */
    char s[8] = {'a', (char)c, 'z', 0};
    json_object_set_new(o, "s", json_stringn_nocheck(s + 1, 1));
    same_as_jansson(o, &b);
    json_object_set_new(o, "s", json_stringn_nocheck(s, 3));
    same_as_jansson(o, &b);
  }
  for (size_t i = 0; i < sizeof not_utf8 / sizeof *not_utf8; i++) {
    json_object_set_new(o, "s", json_string_nocheck(not_utf8[i]));
    same_as_jansson(o, &b);
    json_object_set_new(o, "s", json_string("fine"));
    json_object_set_new(o, not_utf8[i], json_true());   /* a key that is not UTF-8 */
    same_as_jansson(o, &b);
    json_object_del(o, not_utf8[i]);
  }
  json_object_set_new(o, "s", json_stringn("nul\0inside", 10));
  json_object_set_new(o, "t", json_true());
  json_object_set_new(o, "f", json_false());
  json_object_set_new(o, "z", json_null());
  json_object_set_new(o, "key \"quoted\"\n", json_string("v"));
  same_as_jansson(o, &b);
  json_object_del(o, "n");   /* insertion order, a key deleted and set again last */
  json_object_set_new(o, "n", json_integer(7));
  same_as_jansson(o, &b);
  json_t *empty = json_object();
  same_as_jansson(empty, &b);
  json_decref(empty);
  json_decref(o);
  mend_textbuf_free(&b);
}

static void it_refuses_what_is_not_flat(void) {
  mend_textbuf b = {0};
  json_t *v = json_pack("{s:[i]}", "a", 1);
  CHECK(mend_flatjson(v, &b) == NULL);
  json_decref(v);
  v = json_pack("{s:{}}", "a");
  CHECK(mend_flatjson(v, &b) == NULL);
  json_decref(v);
  v = json_array();
  CHECK(mend_flatjson(v, &b) == NULL);
  json_decref(v);
  CHECK(mend_flatjson(NULL, &b) == NULL);
  mend_textbuf_free(&b);
}

/* Random strings of the bytes that matter among plain ones, random numbers, in random objects. */
static void it_writes_random_objects_as_jansson(void) {
  static const char alphabet[] =
      "ab\"\\/\n\t\x01\x1f\x7f\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x80\xff";
  mend_textbuf b = {0};
  for (int i = 0; i < 20000; i++) {
    json_t *o = json_object();
    int keys = (int)(check_next() % 9);
    for (int k = 0; k < keys; k++) {
      char key[8], s[64];
      snprintf(key, sizeof key, "k%d", (int)(check_next() % 12));
      size_t len = check_next() % sizeof s;
      int plain = (int)(check_next() % 4);   /* mostly plain runs: the 8-byte path, and its ends */
      for (size_t j = 0; j < len; j++)
        s[j] = check_next() % 8 < (uint64_t)plain * 2 + 1
                   ? (char)('A' + check_next() % 58)
                   : alphabet[check_next() % (sizeof alphabet - 1)];
      uint64_t bits = check_next();
      double d;
      memcpy(&d, &bits, sizeof d);
      switch (check_next() % 5) {
        case 0: json_object_set_new(o, key, json_stringn_nocheck(s, len)); break;
        case 1: json_object_set_new(o, key, json_integer((json_int_t)check_next())); break;
        case 2: if (isfinite(d)) json_object_set_new(o, key, json_real(d)); break;
        case 3:
          json_object_set_new(o, key, json_real(1.7e9 + (double)(check_next() % 100000000) / 1e6));
          break;
        default: json_object_set_new(o, key, json_boolean(check_next() & 1)); break;
      }
    }
    same_as_jansson(o, &b);
    json_decref(o);
  }
  mend_textbuf_free(&b);
}

/* A host may set its locale (a game localised with setlocale(LC_ALL, "")): jansson writes a
 * real with '.' whatever LC_NUMERIC says (strconv.c converts the locale's decimal point), so
 * the host's text is JSON in every locale. Needs a locale whose decimal point is ','
 * (de_DE.UTF-8; LOCPATH may name a directory localedef wrote it to): skipped without one. */
static void it_writes_reals_with_a_point_in_a_comma_locale(void) {
  if (!setlocale(LC_NUMERIC, "de_DE.UTF-8") && !setlocale(LC_NUMERIC, "de_DE.utf8")) {
    fprintf(stderr, "  no de_DE locale: the comma locale case is skipped\n");
    return;
  }
  mend_textbuf b = {0};
  const double xs[] = {0.5, -0.25, 1e-7, 3.2731802469906564e-254, 1e300, 9007199254740993.0 * 4,
                       1.5, 1796490732.7931044};
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
    json_t *o = json_pack("{s:s, s:f}", "type", "run_finished", "at", xs[i]);
    same_as_jansson(o, &b);
    json_decref(o);
  }
  setlocale(LC_NUMERIC, "C");
  mend_textbuf_free(&b);
}

int main(void) {
  it_writes_every_kind_of_event_as_jansson();
  it_writes_numbers_and_strings_as_jansson();
  it_refuses_what_is_not_flat();
  it_writes_random_objects_as_jansson();
  it_writes_reals_with_a_point_in_a_comma_locale();
  CHECK_EQ_INT(mismatches, 0);
  CHECK(compared > 20000);
  return check_done("flatjson");
}
