/*
 * numtext: integers and doubles as decimal text, the same bytes as snprintf's "%lld" and
 * "%.17g", for the PostgreSQL store's write log, which turns a handful of numbers a step into
 * text (a step's counters, every row's times). printf's general machinery (its format parse,
 * and for doubles a multiple-precision expansion of the exact value) was a visible share of
 * the writing process's instructions. Doubles in [1, 2^53), the times of day and counters
 * mend records, are rounded here with one 128-bit product; every other double (below 1, above
 * 2^53, zero, infinities, NaN), and the rare one whose 17 digits carry into an 18th, is left to
 * snprintf. Must never: write other bytes than snprintf would for the same number (the tests
 * compare the two over many values, and the text must read back as the same double).
 */
#include "numtext.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static size_t utoa(char *out, unsigned long long u) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  out[n] = 0;
  return (size_t)n;
}

size_t mend_numtext_int(char *out, long long i) {
  if (i >= 0) return utoa(out, (unsigned long long)i);
  out[0] = '-';
  return 1 + utoa(out + 1, 0ULL - (unsigned long long)i);
}

static const char pairs[] =
  "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
  "8081828384858687888990919293949596979899";

/* snprintf writes the locale's decimal point (a host that called setlocale(LC_ALL, "") in a
 * comma locale: "0,5"), JSON and PostgreSQL read '.': the point, of whatever bytes, becomes
 * '.', as jansson does after its own snprintf. */
static size_t slow_real(char *out, double d) {
  int n = snprintf(out, MEND_NUMTEXT_MAX, "%.17g", d);
  if (n < 0) return 0;
  size_t len = (size_t)n, i = 0;
  while (i < len && strchr("0123456789-+eEinfa", out[i])) i++;
  if (i < len && out[i] != '.') {
    size_t end = i;
    while (end < len && !strchr("0123456789-+eE", out[end])) end++;
    out[i] = '.';
    memmove(out + i + 1, out + end, len - end + 1);
    len -= end - i - 1;
  }
  return len;
}

size_t mend_numtext_real(char *out, double d) {
#ifdef __SIZEOF_INT128__
  static const unsigned long long pow10[17] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL, 100000000ULL,
    1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL, 10000000000000ULL,
    100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL};
  double a = fabs(d);
  if (!(a >= 1.0 && a < 9007199254740992.0)) return slow_real(out, d);
  char *o = out;
  if (d < 0) *o++ = '-';
  unsigned long long ip = (unsigned long long)a;
  if ((double)ip == a) return (size_t)(o - out) + utoa(o, ip);   /* at most 16 digits */
  /* a = m / 2^s exactly: m its 53-bit significand, 1 <= s <= 52 (a is no integer) */
  uint64_t bits;
  memcpy(&bits, &a, sizeof bits);
  unsigned long long m = (bits & ((1ULL << 52) - 1)) | (1ULL << 52);
  int s = 1075 - (int)(bits >> 52);
  int n = 1;   /* digits before the point */
  while (n < 17 && ip >= pow10[n]) n++;
  /* the 17 significant digits: a * 10^(17 - n), rounded to nearest, a tie to even, as glibc's
   * printf does in the default rounding mode; m * 10^16 < 2^107 */
  unsigned __int128 x = (unsigned __int128)m * pow10[17 - n];
  unsigned long long q = (unsigned long long)(x >> s);
  unsigned __int128 r = x & (((unsigned __int128)1 << s) - 1),
                    half = (unsigned __int128)1 << (s - 1);
  if (r > half || (r == half && (q & 1))) q++;
  /* a carry into an 18th digit: never for a double (the one below a power of ten is further
   * from it than half a unit of the 17th digit), kept so that a mistake costs time, not bytes */
  if (q >= 100000000000000000ULL) return slow_real(out, d);
  char dg[18];
  unsigned hi = (unsigned)(q / 100000000), lo = (unsigned)(q % 100000000);
  dg[0] = (char)('0' + hi / 100000000);
  hi %= 100000000;
  for (int i = 3; i >= 0; i--) {   /* two digits at a time, from the right */
    memcpy(dg + 1 + 2 * i, pairs + 2 * (hi % 100), 2);
    memcpy(dg + 9 + 2 * i, pairs + 2 * (lo % 100), 2);
    hi /= 100;
    lo /= 100;
  }
  memcpy(o, dg, (size_t)n);
  o += n;
  int last = 16;   /* %g drops the fraction's trailing zeros, and the point with them */
  while (last >= n && dg[last] == '0') last--;
  if (last >= n) {
    *o++ = '.';
    memcpy(o, dg + n, (size_t)(last - n + 1));
    o += last - n + 1;
  }
  *o = 0;
  return (size_t)(o - out);
#else
  return slow_real(out, d);
#endif
}
