/*
 * walvfs: a VFS over SQLite's default one that writes the WAL appends of a commit in a few large
 * writes instead of two system calls a frame. SQLite writes each frame as its 24-byte header and
 * then its page; a W1 burst of 10k runs commits some 4,300 frames, and those 8,600 pwrites were
 * a fifth of the writer thread's time on this VM, where a system call is dear.
 *
 * What is held: appends that begin at the WAL's header or at the header of a frame that does
 * not end a commit, and whatever follows them without a gap. The frame that ends a commit (its
 * header carries the database size, which no other frame's does) is the last of them: once its
 * page is in, all of it goes to the file in that same write call, so a commit that cannot be
 * written fails with its error, as without this VFS, and is never announced. Anything else
 * (a commit of one frame, padding, a checksum or page rewritten in place, the rest of a write
 * split at a sync point) goes to the file at once and answers for itself. Before anything else
 * touches the WAL (a read, a sync, a size, a truncation, closing, a lock of the wal-index)
 * what is held is written first, so SQLite sees the file it wrote; when the write lock is let
 * go, what is still held belongs to a transaction that did not commit, and is dropped.
 *
 * Only the WAL of a connection opened with this VFS is buffered; every other file, and every
 * other method, goes straight to the default VFS (locks included, so connections of either VFS
 * on one file see each other's locks).
 */
#include "walvfs.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Big enough for most commits of a burst in a few writes, small enough to stay in the cache. */
#define WAL_BUFFER_BYTES (256 * 1024)
/* The most one write passes to the default VFS: "unix" writes at most 128 KiB - 1 a call, and
 * takes a shorter write for a full disk. */
#define WRITE_MAX (64 * 1024)
/* A frame header (wal.c, "WAL_FRAME_HDRSIZE"): its bytes 4-7 are the database size in pages
 * after a commit, for the frame that ends one, and 0 for every other frame. The WAL's own
 * header (WAL_HDRSIZE) is at offset 0. */
#define FRAME_HEADER_BYTES 24
#define WAL_HEADER_BYTES 32

typedef struct wal_file {
  sqlite3_file base;
  sqlite3_file *real;          /* the default VFS's file, in the memory after this struct */
  struct wal_file *wal;        /* a main database file: its WAL, while open */
  struct wal_file *db;         /* a WAL: its main database file */
  int buffered;                /* a WAL: appends are held */
  int commit_frame;            /* the last write was the header of a commit's last frame */
  int failed;                  /* a flush failed where it could not say so (its code): every
                                * later call fails with it */
  char *buf;
  sqlite3_int64 buf_at;        /* the file offset of buf[0] */
  int buf_len;
} wal_file;

static sqlite3_vfs walvfs;
static sqlite3_vfs *root;

static sqlite3_file *real_of(sqlite3_file *f) { return ((wal_file *)f)->real; }

static int flush(wal_file *w) {
  if (w->failed) return w->failed;
  int rc = SQLITE_OK;
  for (int done = 0; rc == SQLITE_OK && done < w->buf_len; done += WRITE_MAX) {
    int n = w->buf_len - done < WRITE_MAX ? w->buf_len - done : WRITE_MAX;
    rc = w->real->pMethods->xWrite(w->real, w->buf + done, n, w->buf_at + done);
  }
  w->buf_len = 0;
  return rc;
}

/* Before anything else touches a WAL: what is held goes to the file. */
static int settle(wal_file *w) { return w->buffered ? flush(w) : SQLITE_OK; }

static int io_close(sqlite3_file *f) {
  wal_file *w = (wal_file *)f;
  int rc = settle(w);
  int closed = w->real->pMethods->xClose(w->real);
  if (w->db && w->db->wal == w) w->db->wal = NULL;
  if (w->wal) w->wal->db = NULL;
  free(w->buf);
  w->buf = NULL;
  return rc == SQLITE_OK ? closed : rc;
}

static int io_read(sqlite3_file *f, void *p, int n, sqlite3_int64 at) {
  int rc = settle((wal_file *)f);
  if (rc != SQLITE_OK) return rc;
  return real_of(f)->pMethods->xRead(real_of(f), p, n, at);
}

static int ends_commit(const unsigned char *h) { return (h[4] | h[5] | h[6] | h[7]) != 0; }

static int io_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 at) {
  wal_file *w = (wal_file *)f;
  if (!w->buffered) return w->real->pMethods->xWrite(w->real, p, n, at);
  if (w->failed) return w->failed;
  const unsigned char *h = p;
  int follows = w->buf_len > 0 && at == w->buf_at + w->buf_len;
  int starts = (n == WAL_HEADER_BYTES && at == 0) || (n == FRAME_HEADER_BYTES && !ends_commit(h));
  int rc = SQLITE_OK;
  if (w->buf_len > 0 && (!follows || w->buf_len + n > WAL_BUFFER_BYTES || n > WRITE_MAX))
    rc = flush(w);
  if (rc != SQLITE_OK) return rc;
  if (n > WRITE_MAX || !(follows || starts)) {
    w->commit_frame = 0;
    return w->real->pMethods->xWrite(w->real, p, n, at);
  }
  if (w->buf_len == 0) w->buf_at = at;
  memcpy(w->buf + w->buf_len, p, (size_t)n);
  w->buf_len += n;
  /* The page after a commit's last frame header ends the commit: it goes to the file now. */
  int last = w->commit_frame;
  w->commit_frame = n == FRAME_HEADER_BYTES && ends_commit(h);
  return last ? flush(w) : SQLITE_OK;
}

static int io_truncate(sqlite3_file *f, sqlite3_int64 size) {
  int rc = settle((wal_file *)f);
  if (rc != SQLITE_OK) return rc;
  return real_of(f)->pMethods->xTruncate(real_of(f), size);
}

static int io_sync(sqlite3_file *f, int flags) {
  int rc = settle((wal_file *)f);
  if (rc != SQLITE_OK) return rc;
  return real_of(f)->pMethods->xSync(real_of(f), flags);
}

static int io_file_size(sqlite3_file *f, sqlite3_int64 *size) {
  int rc = settle((wal_file *)f);
  if (rc != SQLITE_OK) return rc;
  return real_of(f)->pMethods->xFileSize(real_of(f), size);
}

static int io_lock(sqlite3_file *f, int level) {
  return real_of(f)->pMethods->xLock(real_of(f), level);
}

static int io_unlock(sqlite3_file *f, int level) {
  return real_of(f)->pMethods->xUnlock(real_of(f), level);
}

static int io_check_reserved_lock(sqlite3_file *f, int *out) {
  return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}

static int io_file_control(sqlite3_file *f, int op, void *arg) {
  int rc = settle((wal_file *)f);
  if (rc != SQLITE_OK) return rc;
  return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}

static int io_sector_size(sqlite3_file *f) {
  return real_of(f)->pMethods->xSectorSize(real_of(f));
}

static int io_device_characteristics(sqlite3_file *f) {
  return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}

/* The wal-index belongs to the main database file. Before it says that frames are in the WAL
 * (a barrier, then its header), they must be: a commit's were written with its last frame, and
 * this catches any that were not. A failure here cannot be told to SQLite: every later call
 * fails instead. */
static void io_shm_barrier(sqlite3_file *f) {
  wal_file *w = ((wal_file *)f)->wal;
  if (w && w->buf_len > 0) {
    int rc = flush(w);
    if (rc != SQLITE_OK && !w->failed) w->failed = rc;
  }
  real_of(f)->pMethods->xShmBarrier(real_of(f));
}

static int io_shm_map(sqlite3_file *f, int page, int size, int extend, void volatile **p) {
  return real_of(f)->pMethods->xShmMap(real_of(f), page, size, extend, p);
}

/* Letting go of the write lock (lock 0, wal.c "WAL_WRITE_LOCK") with appends still held ends a
 * transaction that did not commit: SQLite has given up its frames, and another connection may
 * write over them next, so they are dropped, not written. Before any other change of locks
 * they are written, so that no other connection can read the WAL short of them. An unlock is
 * never held back. */
static int io_shm_lock(sqlite3_file *f, int offset, int n, int flags) {
  wal_file *w = ((wal_file *)f)->wal;
  int unlock = (flags & SQLITE_SHM_UNLOCK) != 0;
  if (w && w->buf_len > 0) {
    if (unlock && offset == 0) {
      w->buf_len = 0;
      w->commit_frame = 0;
    } else {
      int rc = flush(w);
      if (rc != SQLITE_OK && !unlock) return rc;
    }
  }
  return real_of(f)->pMethods->xShmLock(real_of(f), offset, n, flags);
}

static int io_shm_unmap(sqlite3_file *f, int delete_flag) {
  return real_of(f)->pMethods->xShmUnmap(real_of(f), delete_flag);
}

static int io_fetch(sqlite3_file *f, sqlite3_int64 at, int n, void **p) {
  int rc = settle((wal_file *)f);
  if (rc != SQLITE_OK) return rc;
  return real_of(f)->pMethods->xFetch(real_of(f), at, n, p);
}

static int io_unfetch(sqlite3_file *f, sqlite3_int64 at, void *p) {
  return real_of(f)->pMethods->xUnfetch(real_of(f), at, p);
}

/* One table for each version a default VFS's files may have, so that SQLite never calls a
 * method of ours whose real one is missing ("unix" is at version 3). */
#define IO_METHODS(version)                                                                     \
  { version, io_close, io_read, io_write, io_truncate, io_sync, io_file_size, io_lock, io_unlock, \
    io_check_reserved_lock, io_file_control, io_sector_size, io_device_characteristics,         \
    io_shm_map, io_shm_lock, io_shm_barrier, io_shm_unmap, io_fetch, io_unfetch, }
static const sqlite3_io_methods io_methods[3] = { IO_METHODS(1), IO_METHODS(2), IO_METHODS(3) };

static int is_ours(const sqlite3_file *f) {
  return f && f->pMethods >= &io_methods[0] && f->pMethods <= &io_methods[2];
}

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out) {
  (void)vfs;
  wal_file *w = (wal_file *)f;
  memset(w, 0, sizeof *w);
  w->real = (sqlite3_file *)(w + 1);
  int rc = root->xOpen(root, name, w->real, flags, out);
  /* An open that failed may still leave a file to close (sqlite3_vfs, "xOpen"). */
  if (!w->real->pMethods) return rc;
  int version = w->real->pMethods->iVersion;
  w->base.pMethods = &io_methods[(version < 1 ? 1 : version > 3 ? 3 : version) - 1];
  if (rc == SQLITE_OK && (flags & SQLITE_OPEN_WAL) && name) {
    sqlite3_file *db = sqlite3_database_file_object(name);
    if (is_ours(db) && (w->buf = malloc(WAL_BUFFER_BYTES)) != NULL) {
      w->db = (wal_file *)db;
      w->db->wal = w;
      w->buffered = 1;
    }
  }
  return rc;
}

static int vfs_delete(sqlite3_vfs *v, const char *name, int sync_dir) {
  (void)v;
  return root->xDelete(root, name, sync_dir);
}

static int vfs_access(sqlite3_vfs *v, const char *name, int flags, int *out) {
  (void)v;
  return root->xAccess(root, name, flags, out);
}

static int vfs_full_pathname(sqlite3_vfs *v, const char *name, int n, char *out) {
  (void)v;
  return root->xFullPathname(root, name, n, out);
}

static void *vfs_dl_open(sqlite3_vfs *v, const char *name) {
  (void)v;
  return root->xDlOpen(root, name);
}

static void vfs_dl_error(sqlite3_vfs *v, int n, char *msg) {
  (void)v;
  root->xDlError(root, n, msg);
}

static void (*vfs_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void) {
  (void)v;
  return root->xDlSym(root, h, sym);
}

static void vfs_dl_close(sqlite3_vfs *v, void *h) {
  (void)v;
  root->xDlClose(root, h);
}

static int vfs_randomness(sqlite3_vfs *v, int n, char *out) {
  (void)v;
  return root->xRandomness(root, n, out);
}

static int vfs_sleep(sqlite3_vfs *v, int us) {
  (void)v;
  return root->xSleep(root, us);
}

static int vfs_current_time(sqlite3_vfs *v, double *out) {
  (void)v;
  return root->xCurrentTime(root, out);
}

static int vfs_get_last_error(sqlite3_vfs *v, int n, char *out) {
  (void)v;
  return root->xGetLastError ? root->xGetLastError(root, n, out) : 0;
}

static int vfs_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *out) {
  (void)v;
  return root->xCurrentTimeInt64(root, out);
}

static int registered = SQLITE_ERROR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void register_once(void) {
  root = sqlite3_vfs_find(NULL);
  if (!root || root->iVersion < 2 || !root->xCurrentTimeInt64) return;
  walvfs = (sqlite3_vfs){
    .iVersion = 2,
    .szOsFile = (int)sizeof(wal_file) + root->szOsFile,
    .mxPathname = root->mxPathname,
    .zName = MEND_WALVFS_NAME,
    .xOpen = vfs_open,
    .xDelete = vfs_delete,
    .xAccess = vfs_access,
    .xFullPathname = vfs_full_pathname,
    .xDlOpen = vfs_dl_open,
    .xDlError = vfs_dl_error,
    .xDlSym = vfs_dl_sym,
    .xDlClose = vfs_dl_close,
    .xRandomness = vfs_randomness,
    .xSleep = vfs_sleep,
    .xCurrentTime = vfs_current_time,
    .xGetLastError = vfs_get_last_error,
    .xCurrentTimeInt64 = vfs_current_time_int64,
  };
  registered = sqlite3_vfs_register(&walvfs, 0);
}

const char *mend_walvfs(void) {
  pthread_once(&once, register_once);
  return registered == SQLITE_OK ? MEND_WALVFS_NAME : NULL;
}
