/*
 * test_embed_cycles: a small host that creates an engine, runs workflows through it (a host
 * function, a sleep, a compensation, a run left in flight) and destroys it, 20 times.
 * tests/embed_valgrind.sh runs it under valgrind: every cycle must give back all it took.
 */
#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char workflow[] =
  "local mend = require 'mend'\n"
  "return { name = 'cycle', retry = { max_attempts = 2, initial = 0.001, jitter = 0 },\n"
  "  steps = {\n"
  "    { name = 'a', execute = function(ctx, input) return mend.call('echo', input.n) end,\n"
  "      compensate = function(ctx, result) ctx:log('undo %s', result) end },\n"
  "    { name = 'b', execute = function(ctx, input)\n"
  "        mend.sleep(0.001)\n"
  "        if input.n % 2 == 1 then error(mend.fatal('odd')) end\n"
  "        return { n = input.n, t = string.rep('x', 1000) }\n"
  "      end },\n"
  "  } }\n";

static void echo(void *ud, mend_call *call, const char *args) {
  (void)ud;
  if (mend_call_return(call, args) != MEND_OK) mend_call_fail(call, "fatal", "bad json", -1, 0);
}

int main(void) {
  char dir[] = "/tmp/mend-cycles-XXXXXX", path[64];
  if (!mkdtemp(dir)) return 2;
  snprintf(path, sizeof path, "%s/cycle.lua", dir);
  FILE *f = fopen(path, "w");
  if (!f) return 2;
  fputs(workflow, f);
  fclose(f);
  int failures = 0;
  for (int cycle = 0; cycle < 20; cycle++) {
    mend_options o;
    mend_options_init(&o);
    o.memory_limit = 64u << 20;
    o.instruction_budget = 10000000;
    o.sandbox = cycle % 2;
    o.has_seed = 1;
    o.seed = (uint64_t)cycle;
    mend_engine *E = NULL;
    char err[256];
    if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) {
      fprintf(stderr, "cycle %d: %s\n", cycle, err);
      return 1;
    }
    mend_engine_register_function(E, "echo", echo, NULL);
    if (mend_engine_load(E, path, NULL, 0) != MEND_OK) {
      fprintf(stderr, "cycle %d: %s\n", cycle, mend_engine_errmsg(E));
      return 1;
    }
    char ids[3][17];
    for (int i = 0; i < 3; i++) {
      char input[32];
      snprintf(input, sizeof input, "{\"n\":%d}", i);
      mend_engine_start(E, "cycle", input, NULL, ids[i], NULL);
    }
    if (mend_engine_run_all(E) != MEND_OK) failures++;
    for (int i = 0; i < 3; i++) {
      char *json = NULL;
      if (mend_engine_run_json(E, ids[i], &json) != MEND_OK) failures++;
      const char *want = i % 2 ? "\"status\":\"compensated\"" : "\"status\":\"succeeded\"";
      if (!json || !strstr(json, want)) {
        fprintf(stderr, "cycle %d run %d: %s\n", cycle, i, json ? json : "(none)");
        failures++;
      }
      mend_free(json);
      if (mend_engine_history_json(E, ids[i], &json) == MEND_OK) mend_free(json);
    }
    /* one run left in flight: the engine gives it back at free */
    char left[17];
    mend_engine_start(E, "cycle", "{\"n\":8}", NULL, left, NULL);
    mend_engine_tick(E, 0.001);
    mend_engine_free(E);
  }
  unlink(path);
  rmdir(dir);
  printf("test_embed_cycles: 20 cycles, %d failures\n", failures);
  return failures ? 1 : 0;
}
