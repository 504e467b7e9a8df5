/*
 * numtext: numbers as the decimal text the PostgreSQL store sends them in, written without
 * printf on the paths a batch takes for every row. Header of numtext.c; pure functions,
 * nothing else.
 */
#ifndef MEND_NUMTEXT_H
#define MEND_NUMTEXT_H

#include <stddef.h>

/* Room enough for either of the two below, with the NUL. */
#define MEND_NUMTEXT_MAX 40

/* i in decimal, as "%lld" writes it; the length written, a NUL after it. */
size_t mend_numtext_int(char *out, long long i);

/* d byte for byte as snprintf's "%.17g" writes it (so text that reads back as the same double),
 * finite or not; the length written, a NUL after it. */
size_t mend_numtext_real(char *out, double d);

#endif
