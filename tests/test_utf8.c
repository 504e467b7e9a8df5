/*
 * test_utf8: a step's error text made fit for JSON: after mend_utf8_fix jansson encodes every
 * text (it refused the event, the alert and the log line whole before), a valid text is left
 * as it was, and each byte of what jansson refuses is one '?'; mend_utf8_valid says yes to
 * exactly the texts jansson takes.
 */
#include "utf8.h"
#include "check.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int encodes(const char *s) {
  json_t *v = json_string(s);
  json_decref(v);
  return v != NULL;
}

static void fixed_as(const char *in, const char *want, size_t replaced) {
  char buf[64];
  snprintf(buf, sizeof buf, "%s", in);
  CHECK_EQ_INT(mend_utf8_fix(buf), replaced);
  CHECK_STR(buf, want);
  CHECK(encodes(buf));
}

static void it_leaves_valid_text_alone(void) {
  fixed_as("plain ascii", "plain ascii", 0);
  fixed_as("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
           0);
  fixed_as("\xef\xbf\xbf \xf4\x8f\xbf\xbf", "\xef\xbf\xbf \xf4\x8f\xbf\xbf", 0);   /* the limits */
}

static void it_replaces_each_refused_byte(void) {
  fixed_as("bad \xff byte", "bad ? byte", 1);                  /* never UTF-8 */
  fixed_as("caf\xe9", "caf?", 1);                              /* Latin-1 */
  fixed_as("\xc0\xaf", "??", 2);                               /* overlong '/' */
  fixed_as("\xed\xa0\x80", "???", 3);                          /* a surrogate */
  fixed_as("\xf4\x90\x80\x80", "????", 4);                     /* past U+10FFFF */
  fixed_as("\x80 lone", "? lone", 1);                          /* a continuation alone */
  fixed_as("cut \xe2\x82", "cut ??", 2);                       /* cut at the end */
  fixed_as("\xe2\x82\xc3\xa9", "??\xc3\xa9", 2);               /* cut, then a valid one */
}

/* Random bytes, mostly high ones: whatever they are, the text fixed encodes, keeps its length,
 * and is what it was wherever it was valid. */
static void it_makes_any_text_encodable(void) {
  int bad = 0;
  for (int i = 0; i < 20000; i++) {
    char in[40], out[40];
    size_t n = 1 + check_next() % 38;
    for (size_t j = 0; j < n; j++) {
      unsigned b = (unsigned)(check_next() & 0xff);
      in[j] = (char)(b ? b : 'x');
    }
    in[n] = '\0';
    memcpy(out, in, n + 1);
    size_t replaced = mend_utf8_fix(out);
    size_t same = 0;
    for (size_t j = 0; j < n; j++) same += in[j] == out[j];
    if (!encodes(out) || strlen(out) != n || same + replaced != n || (replaced == 0) != encodes(in))
      bad++;
    /* mend_utf8_valid, which the engine checks stored texts with, takes what jansson takes */
    if (mend_utf8_valid(in, n) != encodes(in) || !mend_utf8_valid(out, n)) bad++;
  }
  CHECK_EQ_INT(bad, 0);
}

int main(void) {
  it_leaves_valid_text_alone();
  it_replaces_each_refused_byte();
  it_makes_any_text_encodable();
  return check_done("utf8");
}
