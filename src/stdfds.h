/*
 * stdfds: stdin, stdout and stderr made to exist before mend opens anything. A leaf: it knows no
 * engine and no store. Must never: replace a descriptor that is open (the host's, whatever it
 * is); close one.
 */
#ifndef MEND_STDFDS_H
#define MEND_STDFDS_H

/* Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed: a descriptor libuv or
 * SQLite opens would take its number, and libuv aborts when it closes one of those three
 * ("uv__close: Assertion `fd > STDERR_FILENO' failed"). -1 when all three are open now; else
 * the first that stays closed (no /dev/null: a chroot), errno saying why. */
int mend_fill_standard_fds(void);

#endif
