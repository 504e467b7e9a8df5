/*
 * utf8: UTF-8 as jansson accepts it, for texts the engine writes into JSON (events, alerts,
 * logs, the HTTP API) whose bytes come from what workflow code raised. Header of utf8.c, which
 * must never change a text that is valid.
 */
#ifndef MEND_UTF8_H
#define MEND_UTF8_H

#include <stddef.h>

/* The length of the UTF-8 sequence at s (n bytes left) as jansson's utf8_check_full accepts it
 * (no overlong form, no surrogate, nothing past U+10FFFF); 0 when it refuses it. */
size_t mend_utf8_len(const unsigned char *s, size_t n);

/* 1 when the n bytes at s are UTF-8 as mend_utf8_len accepts each sequence (a NUL among them is
 * ASCII: the caller decides on it), else 0: what the stores keep (PostgreSQL refuses a batch
 * holding other bytes, and the engine stops with it). */
int mend_utf8_valid(const char *s, size_t n);

/* s made UTF-8 in place: each byte of a sequence jansson would refuse (a stray byte, an
 * overlong form, a sequence cut short, as snprintf cuts a long message) becomes '?'. Returns
 * how many bytes it replaced. */
size_t mend_utf8_fix(char *s);

#endif
