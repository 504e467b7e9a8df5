/*
 * two_steps: the workflow `two` the embedding tests run to its end (test_panic,
 * test_closed_fds): a first step that fails once with a retryable error and succeeds on its
 * second attempt, then a second step; so a run of it takes a retry's wait, a history of
 * several rows and two commits at least. Must never: hold a test's checks.
 */
#ifndef MEND_TWO_STEPS_H
#define MEND_TWO_STEPS_H

#include <stdio.h>

static const char two_steps_lua[] =
  "local mend = require 'mend'\n"
  "return { name = 'two', steps = {\n"
  "  { name = 'one', retry = { max_attempts = 3, initial = 0.01 }, execute = function(ctx)\n"
  "      if ctx.attempt == 1 then error(mend.retryable('not yet')) end\n"
  "      return 1\n"
  "    end },\n"
  "  { name = 'two', execute = function() return 2 end } } }\n";

/* Writes it as dir/two.lua, that path in path[len]: 0, or -1 (perror said why). */
static inline int two_steps_write(const char *dir, char *path, size_t len) {
  snprintf(path, len, "%s/two.lua", dir);
  FILE *f = fopen(path, "w");
  if (!f || fputs(two_steps_lua, f) < 0 || fclose(f) != 0) {
    perror(path);
    return -1;
  }
  return 0;
}

#endif
