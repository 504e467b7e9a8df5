/*
 * test_closed_fds: a host started with stdin, stdout and stderr closed (a daemon that closed
 * them, a service manager that gave none) makes an engine on a database file, runs a workflow
 * with a retry to its end and frees the engine. The descriptors the engine opens (libuv's
 * loop, its wake-ups, SQLite's files) must not take the numbers 0 to 2: libuv aborts when it
 * closes one of those ("uv__close: Assertion `fd > STDERR_FILENO' failed"). The work runs in a
 * child process, so that an abort is reported here rather than ending the test silently.
 */
#include <fcntl.h>
#include <mend.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "two_steps.h"

/* In the child, its standard descriptors closed: 0 when the run succeeded and the engine was
 * freed; what went wrong is written to `report` (a descriptor above 2). */
static int child(const char *dir, int report) {
  char db[300], wf[300], err[300], id[17];
  snprintf(db, sizeof db, "%s/closed.db", dir);
  snprintf(wf, sizeof wf, "%s/two.lua", dir);
  for (int fd = 0; fd <= 2; fd++) close(fd);
  mend_options o;
  mend_options_init(&o);
  o.db_path = db;
  o.durability = MEND_SYNC_FULL;
  o.commit_thread = 1;
  mend_engine *E = NULL;
  if (mend_engine_new(&o, &E, err, sizeof err) != MEND_OK) {
    dprintf(report, "mend_engine_new: %s\n", err);
    return 1;
  }
  char *json = NULL;
  int rc = mend_engine_load(E, wf, NULL, 0);
  if (rc == MEND_OK) rc = mend_engine_start(E, "two", "{}", NULL, id, NULL);
  if (rc == MEND_OK) rc = mend_engine_run_all(E);
  if (rc == MEND_OK) rc = mend_engine_run_json(E, id, &json);
  if (rc != MEND_OK) dprintf(report, "engine: %s\n", mend_engine_errmsg(E));
  int ok = rc == MEND_OK && json && strstr(json, "\"status\":\"succeeded\"");
  if (rc == MEND_OK && !ok) dprintf(report, "run: %s\n", json ? json : "(none)");
  mend_free(json);
  if (mend_engine_free(E) != MEND_OK) return 1;
  return ok ? 0 : 1;
}

int main(void) {
  char dir[] = "/tmp/mend-closed-fds-XXXXXX";
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char wf[300];
  if (two_steps_write(dir, wf, sizeof wf) != 0) return 1;
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    perror("pipe");
    return 1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    int report = fcntl(pipefd[1], F_DUPFD, 3);   /* above 2, whatever pipe gave */
    _exit(child(dir, report));
  }
  close(pipefd[1]);
  char said[2048];
  ssize_t n, got = 0;
  while ((n = read(pipefd[0], said + got, sizeof said - 1 - (size_t)got)) > 0) got += n;
  said[got > 0 ? got : 0] = 0;
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) fprintf(stderr, "the host died of signal %d\n", WTERMSIG(status));
  if (*said) fprintf(stderr, "%s", said);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  check_remove_dir(dir);
  return check_done("test_closed_fds");
}
