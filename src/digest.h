/*
 * digest: what the store keeps of a completion token instead of the token, SHA-256 through
 * OpenSSL's libcrypto, in the lowercase hex that PostgreSQL's encode(sha256(...), 'hex') gives
 * too (its migration digests old tokens in SQL). Must never: keep or log the text it digests.
 */
#ifndef MEND_DIGEST_H
#define MEND_DIGEST_H

#include <stddef.h>

#define MEND_DIGEST_HEX 65   /* 64 hex digits and the NUL */

/* The digest of the n bytes at p, as hex in out. 0, or -1 when libcrypto failed (out is ""). */
int mend__digest_hex(const void *p, size_t n, char out[MEND_DIGEST_HEX]);

#endif
