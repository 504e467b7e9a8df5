/*
 * walvfs: the VFS the store's writing connection opens its database with (walvfs.c): the WAL
 * appends of a commit go to the file in a few writes, not two a frame. Must never: change
 * what SQLite reads back, or announce a commit whose frames are not all written.
 */
#ifndef MEND_WALVFS_H
#define MEND_WALVFS_H

#include <sqlite3.h>

#define MEND_WALVFS_NAME "mend-wal"

/* Registers the VFS once (not as the default); its name, or NULL where it cannot be (the
 * default VFS is too old), and the caller opens with the default VFS instead. It is built on
 * the VFS that is the default at that first call: a host that makes its own VFS the default
 * does so before it opens its first engine. */
const char *mend_walvfs(void);

#endif
