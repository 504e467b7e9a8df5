/*
 * test_numtext: the PostgreSQL store's numbers as text must be the bytes snprintf writes
 * ("%lld", "%.17g"), so that a double written reads back as itself. Compared over edge cases
 * (ties to even at the 17th digit, carries into an 18th, powers of ten and their neighbours,
 * every binade of [1, 2^53), the values outside it) and over a million random doubles.
 */
#include "numtext.h"
#include "check.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mismatches;

static void same_as_printf(double d) {
  char want[64], got[MEND_NUMTEXT_MAX];
  snprintf(want, sizeof want, "%.17g", d);
  size_t n = mend_numtext_real(got, d);
  if (strcmp(want, got) != 0 || n != strlen(want)) {
    if (mismatches++ < 10) fprintf(stderr, "  %a: printf %s, numtext %s\n", d, want, got);
  }
  if (isfinite(d)) {
    double back = strtod(got, NULL);
    if (memcmp(&back, &d, sizeof d) != 0) {
      if (mismatches++ < 10) fprintf(stderr, "  %a: %s reads back as %a\n", d, got, back);
    }
  }
}

static void it_writes_integers_as_printf(void) {
  long long v[] = {0, 1, -1, 9, 10, -10, 123456789, LLONG_MAX, LLONG_MIN, LLONG_MIN + 1, INT_MAX,
                   INT_MIN, 1000000000000000000LL};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    char want[32], got[MEND_NUMTEXT_MAX];
    snprintf(want, sizeof want, "%lld", v[i]);
    CHECK_EQ_INT((int)mend_numtext_int(got, v[i]), (int)strlen(want));
    CHECK_STR(got, want);
  }
  for (int i = 0; i < 100000; i++) {
    long long x = (long long)(check_next() >> (check_next() % 64));
    if (i & 1) x = -x;
    char want[32], got[MEND_NUMTEXT_MAX];
    snprintf(want, sizeof want, "%lld", x);
    mend_numtext_int(got, x);
    if (strcmp(want, got) != 0) CHECK_STR(got, want);
  }
}

static void it_writes_edge_doubles_as_printf(void) {
  double v[] = {0.0, -0.0, 1.0, -1.0, 0.5, 0.1, 1.5, 2.5, 9.5, 1e-300, 5e-324, DBL_MIN, DBL_MAX,
                -DBL_MAX, INFINITY, -INFINITY, NAN, 9007199254740991.0, 9007199254740992.0,
                9007199254740993.0, 4503599627370495.5, 4503599627370496.5, 1e16, 1e17,
                1764892800.123456, 1764892800.5, 1234567890123456.25, 1234567890123456.75,
                123456789012345.625, 0.30000000000000004, 1.0000000000000002, 2.0000000000000004,
                99999999999999.992, 9.9999999999999982, 9.9999999999999964};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    same_as_printf(v[i]);
    same_as_printf(-v[i]);
  }
  /* powers of ten and the doubles either side: where a 17th digit carries into an 18th */
  for (int k = -5; k <= 22; k++) {
    double p = pow(10, k);
    double d = p;
    for (int j = 0; j < 40; j++) d = nextafter(d, 0);
    for (int j = 0; j < 80; j++, d = nextafter(d, INFINITY)) same_as_printf(d);
  }
  /* ties at the 17th digit: k + j/2^t with few fraction bits, at every width of k */
  for (int n = 1; n <= 16; n++) {
    for (int t = 1; t <= 8; t++) {
      for (int j = 1; j < (1 << t); j += 2) {
        double k = floor(pow(10, n - 1) * 1.2345678901234567);
        double d = k + ldexp(j, -t);
        if (d < 9007199254740992.0) same_as_printf(d);
      }
    }
  }
}

static void it_writes_random_doubles_as_printf(void) {
  for (int i = 0; i < 300000; i++) {   /* any bit pattern: every range, sign, NaN */
    uint64_t b = check_next();
    double d;
    memcpy(&d, &b, sizeof d);
    same_as_printf(d);
  }
  for (int i = 0; i < 700000; i++) {   /* each binade of [1, 2^53), the fast path's range */
    double d =
        ldexp(1.0 + (double)(check_next() >> 12) / 4503599627370496.0, (int)(check_next() % 53));
    if (i % 3 == 0) d = 1.7e9 + (double)(check_next() % 100000000) / 1e6;   /* times of day */
    same_as_printf(i & 1 ? -d : d);
  }
}

int main(void) {
  it_writes_integers_as_printf();
  it_writes_edge_doubles_as_printf();
  it_writes_random_doubles_as_printf();
  CHECK_EQ_INT(mismatches, 0);
  return check_done("numtext");
}
