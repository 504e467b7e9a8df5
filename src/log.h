/*
 * log: where the engine's log records go when the host gives no function of its own. JSON
 * lines (level, time, run, step, attempt, event, message) when the stream is not a terminal,
 * so that machines can read them; short readable lines when a person is watching. Owns the
 * record a log line is. Must never: know the engine (include none of its headers); fail the
 * caller (a record that cannot be written is dropped).
 */
#ifndef MEND_LOG_H
#define MEND_LOG_H

#include <stdio.h>

/* One line of an engine's log, as it is given to a log function. */
typedef struct mend_log_record {
  const char *level;      /* "debug" | "info" | "warn" | "error" */
  double time;
  const char *run, *step; /* NULL when not about one */
  int attempt;            /* 0 when not about one */
  const char *event;      /* "step", "run", "log", "alert", ... */
  const char *message;
} mend_log_record;

typedef struct mend_log_sink {
  FILE *out;
  int human;     /* 1 when out is a terminal */
} mend_log_sink;

/* Levels by rank: debug 1, info 2, warn 3, error 4; 0 for a name that is none of them. */
enum { MEND_LOG_DEBUG = 1, MEND_LOG_INFO, MEND_LOG_WARN, MEND_LOG_ERROR };
int mend_log_level_of(const char *name);

void mend_log_sink_init(mend_log_sink *s, FILE *out);
/* A mend_engine_log_fn: ud is a mend_log_sink. */
void mend_log_to_sink(void *ud, const mend_log_record *rec);

#endif
