/*
 * log: formats engine log records for a stream (see log.h). Never fails the caller: a record
 * that cannot be written is dropped. Never sends a workflow's control characters to a terminal.
 */
#include "log.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "utf8.h"

int mend_log_level_of(const char *name) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  for (int i = 0; name && i < 4; i++)
    if (strcmp(name, names[i]) == 0) return i + 1;
  return 0;
}

void mend_log_sink_init(mend_log_sink *s, FILE *out) {
  s->out = out;
  s->human = isatty(fileno(out));
}

/* Whether a terminal would obey or lay out the code point c rather than show it: C1, the line
 * and paragraph separators (a pager breaks the line there) and the bidirectional marks,
 * embeddings, overrides and isolates (a terminal that lays text out both ways reorders it). */
static int obeyed(unsigned long c) {
  return (c >= 0x80 && c <= 0x9f) || c == 0x61c || c == 0x200e || c == 0x200f ||
         (c >= 0x2028 && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

/* Text a workflow wrote (a step's name, an error, a ctx:log line) as a terminal shows it
 * rather than obeys it: C0 controls, DEL, bytes that are not UTF-8 (a raw C1 byte is an escape
 * to a terminal that is not UTF-8's) and the code points obeyed() names spelled out, so that no
 * escape sequence of a workflow's author reaches the terminal of the person reading; a message
 * keeps its line breaks and tabs (a traceback's). */
static void put_shown(FILE *out, const char *s, int keep_lines) {
  const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
  while (p < end) {
    if (*p >= 0x80) {
      size_t len = mend_utf8_len(p, (size_t)(end - p));
      if (len == 0) {
        fprintf(out, "\\x%02x", *p++);
        continue;
      }
      unsigned long c = len == 2 ? (p[0] & 0x1fUL) << 6 | (p[1] & 0x3f)
                      : len == 3 ? (p[0] & 0x0fUL) << 12 | (p[1] & 0x3fUL) << 6 | (p[2] & 0x3f)
                      : 0x10000;   /* past every code point obeyed() names */
      if (obeyed(c)) fprintf(out, "\\u{%lx}", c);
      else fwrite(p, 1, len, out);
      p += len;
      continue;
    }
    if (keep_lines && (*p == '\n' || *p == '\t')) fputc(*p, out);
    else if (*p == '\n') fputs("\\n", out);
    else if (*p == '\t') fputs("\\t", out);
    else if (*p == '\r') fputs("\\r", out);
    else if (*p < 0x20 || *p == 0x7f) fprintf(out, "\\x%02x", *p);
    else fputc(*p, out);
    p++;
  }
}

void mend_log_to_sink(void *ud, const mend_log_record *rec) {
  mend_log_sink *s = ud;
  if (!s->human) {
    const char *msg = rec->message ? rec->message : "";
    json_t *o = json_pack("{s:s, s:f, s:s, s:s}", "level", rec->level, "time", rec->time,
                          "event", rec->event, "message", msg);
    if (!o) {   /* a message that is not UTF-8 (a step's error, as raised): its line, fixed */
      char *fixed = strdup(msg);
      if (fixed) mend_utf8_fix(fixed);
      o = fixed ? json_pack("{s:s, s:f, s:s, s:s}", "level", rec->level, "time", rec->time,
                            "event", rec->event, "message", fixed) : NULL;
      free(fixed);
    }
    if (!o) return;
    if (rec->run) json_object_set_new(o, "run", json_string(rec->run));
    if (rec->step) json_object_set_new(o, "step", json_string(rec->step));
    if (rec->attempt) json_object_set_new(o, "attempt", json_integer(rec->attempt));
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (line) fprintf(s->out, "%s\n", line);
    free(line);
    json_decref(o);
    return;
  }
  time_t t = (time_t)rec->time;
  struct tm tm;
  localtime_r(&t, &tm);
  char when[16];
  strftime(when, sizeof when, "%H:%M:%S", &tm);
  int ms = (int)((rec->time - (double)t) * 1000.0);
  fprintf(s->out, "%s.%03d %-5s %s", when, ms, rec->level, rec->run ? rec->run : "");
  if (rec->step) {
    fputc(' ', s->out);
    put_shown(s->out, rec->step, 0);
  }
  if (rec->attempt) fprintf(s->out, " #%d", rec->attempt);
  fprintf(s->out, " %s: ", rec->event);
  put_shown(s->out, rec->message ? rec->message : "", 1);
  fputc('\n', s->out);
}
