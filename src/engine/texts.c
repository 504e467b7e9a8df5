/*
 * texts: whether a text a caller gives the engine may be stored: a run key, an event's name and
 * key, who did something, a resolve's note, a breaker's key, a token's failure. Every door (the
 * C API, the Lua API, HTTP) reaches the engine through the calls that check here, so each text
 * is checked once, where it enters. PostgreSQL refuses a batch holding bytes that are not
 * UTF-8, and the engine stops with it; a who is also printed as it is (mend history, the
 * timeline), so it holds no control character. Must never: change a text (a refused one is
 * the caller's to mend), or look at the store.
 */
#include "engine_int.h"

#include <mend.h>
#include <string.h>

#include "utf8.h"
#include "util.h"

int mend__text_refused(mend_engine *E, const char *s, const char *what, char *err, int errlen) {
  if (!s || mend_utf8_valid(s, strlen(s))) return 0;
  E->refusal = MEND_REFUSED_INVALID;
  return mend_errorf(err, errlen, "%s is not UTF-8 text", what);
}

int mend__who_refused(mend_engine *E, const char *who, char *err, int errlen) {
  if (!who) return 0;
  size_t n = strlen(who);
  if (n == 0 || n > MEND_WHO_MAX) {
    E->refusal = MEND_REFUSED_INVALID;
    return mend_errorf(err, errlen, "who must be 1 to %d bytes, got %zu", MEND_WHO_MAX, n);
  }
  if (mend__text_refused(E, who, "who", err, errlen)) return -1;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *u = (const unsigned char *)who + i;
    /* C0, DEL, and C1 (U+0080..U+009F, UTF-8 C2 80..C2 9F: CSI among them, which a terminal
     * obeys as ESC [ ) */
    if (u[0] < 0x20 || u[0] == 0x7f || (u[0] == 0xc2 && u[1] >= 0x80 && u[1] <= 0x9f)) {
      E->refusal = MEND_REFUSED_INVALID;
      return mend_errorf(err, errlen, "who holds a control character (byte %zu)", i + 1);
    }
  }
  return 0;
}
