/*
 * pg_line: libpq's messages on one line (the contract is in pg_line.h). Must never: drop a
 * line that is not an indented hint; write past out's length.
 */
#include "pg_line.h"

#include <string.h>

/* The indented lines libpq adds ("\tThis probably means the server terminated abnormally",
 * "\tIs the server running on that host") are hints to a person at psql, left out. */
void mend__pg_one_line(char *out, size_t len, const char *msg) {
  if (!out || len == 0) return;
  if (!msg || !*msg) msg = "unknown error";
  size_t n = 0;
  while (*msg && n + 1 < len) {
    int hint = *msg == '\t';
    if (strncmp(msg, "ERROR:  ", 8) == 0 || strncmp(msg, "FATAL:  ", 8) == 0) msg += 8;
    size_t line = hint ? 0 : strcspn(msg, "\n");
    while (line && (msg[line - 1] == ' ' || msg[line - 1] == '\r')) line--;
    if (line) {
      if (n && n + 2 < len) { out[n++] = ';'; out[n++] = ' '; }
      size_t take = line < len - 1 - n ? line : len - 1 - n;
      memcpy(out + n, msg, take);
      n += take;
    }
    msg += strcspn(msg, "\n");
    if (*msg) msg++;
  }
  out[n] = 0;
}
