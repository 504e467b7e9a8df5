/*
 * stdfds: see stdfds.h. Called by the mend command first thing and by every engine as it is
 * made, before its loop opens a descriptor. A descriptor 0, 1 or 2 that is closed is a number
 * the next open takes; /dev/null there makes it what a process started without it would
 * expect (reads end, writes vanish). Must never: touch a descriptor that is open; close one.
 */
#include "stdfds.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static _Thread_local int errno_kept;

int mend_fill_standard_fds(void) {
  int unfilled = -1;
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    /* the lowest free number: fd itself, since those below it are open by now (or another
     * thread took fd in between, and got a descriptor of its own) */
    int got = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    int why = errno;
    if (got >= 0 && got != fd) close(got);
    if (got < 0 && unfilled < 0 && fcntl(fd, F_GETFD) == -1) {
      unfilled = fd;
      errno_kept = why;
    }
  }
  if (unfilled >= 0) errno = errno_kept;
  return unfilled;
}
