/*
 * flatjson: a flat JSON object (keys to strings, integers, reals, booleans and null: the shape
 * of the engine's events and alerts) as the text jansson's json_dumps(v, JSON_COMPACT) writes,
 * into a buffer the caller keeps from one object to the next. Header of flatjson.c, which
 * must never write other bytes than json_dumps.
 */
#ifndef MEND_FLATJSON_H
#define MEND_FLATJSON_H

#include <jansson.h>
#include <stddef.h>

/* Text written, kept for the next: zero it to start, mend_textbuf_free to end. */
typedef struct mend_textbuf {
  char *p;
  size_t len, cap;
} mend_textbuf;

/* v's text in b->p (NUL-terminated, valid until b is written again), byte for byte what
 * json_dumps(v, JSON_COMPACT) answers; NULL when v is not a flat object, holds a string that
 * is not UTF-8 (json_dumps refuses it) or memory ran out: the caller asks json_dumps. */
const char *mend_flatjson(const json_t *v, mend_textbuf *b);

void mend_textbuf_free(mend_textbuf *b);

#endif
