/*
 * digest: SHA-256 of a completion token, as hex (digest.h). Owns the one call into libcrypto,
 * so that the engine and the SQLite migration that digests old tokens agree byte for byte.
 * Must never: keep or log the text it digests.
 */
#include "digest.h"

#include <openssl/evp.h>
#include <stdio.h>

int mend__digest_hex(const void *p, size_t n, char out[MEND_DIGEST_HEX]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  out[0] = 0;
  if (EVP_Digest(p, n, md, &len, EVP_sha256(), NULL) != 1 || len * 2 + 1 > MEND_DIGEST_HEX)
    return -1;
  static const char hex[] = "0123456789abcdef";
  for (unsigned int i = 0; i < len; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[2 * len] = 0;
  return 0;
}
