/*
 * pg_line: libpq's messages as mend prints them, for every file of src/store/pg/ that reports
 * one (the store, its views, mend copy). Must never: know of a connection or a server's name
 * (callers add those), or be included outside src/store/pg/.
 */
#ifndef MEND_STORE_PG_LINE_H
#define MEND_STORE_PG_LINE_H

#include <stddef.h>

/* A libpq message on one line in out (len bytes with its NUL), its lines joined by "; " (each
 * without "ERROR:  " or "FATAL:  " and its indentation): a later line standing alone in a log
 * or on a terminal reads as a message of its own, yet it says what the first does not (a URI
 * of several hosts has the answering host's cause last; DETAIL names the row, CONTEXT the
 * table and line of a COPY). NULL or empty reads "unknown error". */
void mend__pg_one_line(char *out, size_t len, const char *msg);

#endif
