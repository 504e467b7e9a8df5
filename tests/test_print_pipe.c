/*
 * test_print_pipe: `print` of a sandboxed step never blocks the engine on stdout. A child
 * process runs a sandboxed engine whose stdout is a pipe nobody reads (it fills at 64 KiB): a
 * run prints 10 MiB, a second run starts after it, and both must end, the child exiting 0
 * within seconds; the pipe, read once the child is done, holds the first lines, and the log
 * one notice of how many were dropped. Before, the first print past 64 KiB blocked the child
 * for good.
 */
#include <mend.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static const char printer_lua[] =
  "return { name = 'printer', steps = { { name = 'p', execute = function()\n"
  "  local line = string.rep('x', 99)\n"
  "  for i = 1, 100 * 1024 do print(line) end\n"
  "  return 1\n"
  "end } } }\n";

static int child(const char *dir) {
  char db[300], wf[300], err[300], id[2][17];
  snprintf(db, sizeof db, "%s/print.db", dir);
  snprintf(wf, sizeof wf, "%s/printer.lua", dir);
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.durability = MEND_SYNC_PROCESS;
  o.sandbox = 1;
  o.memory_limit = 64u << 20;
  o.log_to_stderr = 1;
  mend_engine *E = NULL;
  if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) return 10;
  if (mend_engine_load(E, wf, NULL, 0) != MEND_OK) return 11;
  for (int k = 0; k < 2; k++) {
    if (mend_engine_start(E, "printer", "{}", NULL, id[k], NULL) != MEND_OK) return 12;
    if (mend_engine_run_all(E) != MEND_OK) return 13;
    char *json = NULL;
    if (mend_engine_run_json(E, id[k], &json) != MEND_OK) return 14;
    int ok = strstr(json, "\"status\":\"succeeded\"") != NULL;
    mend_free(json);
    if (!ok) return 15 + k;
  }
  mend_engine_free(E);
  return 0;
}

int main(void) {
  char dir[] = "/tmp/mend-print-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  char wf[300];
  snprintf(wf, sizeof wf, "%s/printer.lua", dir);
  FILE *f = fopen(wf, "w");
  if (!f || fputs(printer_lua, f) < 0 || fclose(f)) return 2;
  int fds[2];
  if (pipe(fds)) return 2;
  signal(SIGPIPE, SIG_IGN);
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    char log[300];
    snprintf(log, sizeof log, "%s/stderr.log", dir);
    if (!freopen(log, "w", stderr)) _exit(3);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    int rc = child(dir);
    fflush(stderr);
    _exit(rc);
  }
  close(fds[1]);
  /* Nobody reads the pipe while the child runs: it must end on its own. */
  int status = 0, done = 0;
  for (int i = 0; i < 600 && !done; i++) {   /* 30 s: only a blocked child takes that long */
    done = waitpid(pid, &status, WNOHANG) == pid;
    if (!done) nanosleep(&(struct timespec){0, 50000000}, NULL);
  }
  if (!done) {
    fprintf(stderr, "the child is still running after 30 s: print blocked on the full pipe\n");
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  CHECK(done);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (done && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    fprintf(stderr, "child: status %d\n", status);
  /* What the pipe holds: the first lines whole, and the notice of the lines dropped. */
  static char out[1 << 20];
  size_t n = 0;
  ssize_t got;
  while (n < sizeof out - 1 && (got = read(fds[0], out + n, sizeof out - 1 - n)) > 0)
    n += (size_t)got;
  out[n] = 0;
  CHECK(n > 0 && strncmp(out, "xxxxxxxxxx", 10) == 0);
  close(fds[0]);
  char log[300], text[4096] = "";
  snprintf(log, sizeof log, "%s/stderr.log", dir);
  f = fopen(log, "r");
  size_t m = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[m] = 0;
  /* 100k lines of 100 bytes: the buffer of 1 MiB and the pipe's 64 KiB took some 11k. */
  const char *dropped = strstr(text, "lines of print dropped: stdout was not taking them");
  CHECK(dropped != NULL);
  if (!dropped) fprintf(stderr, "child's log: %s\n", text);
  char cmd[120];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return check_done("test_print_pipe");
}
