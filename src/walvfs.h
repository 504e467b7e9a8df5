/*
 * walvfs: the VFS the store's writing connection opens its database with (walvfs.c): the WAL
 * appends of a commit go to the file in a few writes, not two a frame.
 */
#ifndef MEND_WALVFS_H
#define MEND_WALVFS_H

#include <sqlite3.h>

#define MEND_WALVFS_NAME "mend-wal"

/* Registers the VFS once (not as the default); its name, or NULL where it cannot be (the
 * default VFS is too old), and the caller opens with the default VFS instead. */
const char *mend_walvfs(void);

#endif
