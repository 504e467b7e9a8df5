/*
 * checkpoint: the SQLite backend's WAL policy. Commits never checkpoint (wal_autocheckpoint is
 * off: a checkpoint inside a commit stalls it for tens of milliseconds); a thread of the
 * store's own copies the WAL into the database on a second connection, once a second and each
 * time the WAL grew by CHECKPOINT_FRAMES; and between two batches the connection that writes
 * copies the short tail a busy WAL keeps, so that the next write can start the WAL over; past
 * a hard limit it copies the whole WAL itself before the next batch, whatever the thread is
 * doing, so that a stream of writes faster than the thread's passes cannot grow the WAL
 * without bound (its writes wait for that copy). Owns that thread (started at the first
 * commit of a file database, stopped by close) and those thresholds. Must never: run a
 * statement on the writing connection while a batch is open, or wait for the writer while
 * holding the checkpoint lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "store_int.h"

/* Past this many WAL frames (about 32 MiB) passive checkpoints are not keeping up, and the
 * writing connection lets the WAL start over (catch-up): two fdatasyncs while no commit can
 * happen, which cost more the more WAL is waiting to be written back. At 64 MiB they were 10 and
 * 26 ms, every 0.6 s at 50k steps/s (process durability), and p99 step latency 8.7 ms over 9 s;
 * at 32 MiB, 4.1 ms, with W1 and W3 unchanged (at 16 MiB bursts slowed: W3 lateness +30%). */
#define WAL_FRAMES_LIMIT 8192
/* A checkpoint starts each time the WAL grew by this many frames (about 4 MiB), besides the
 * one a second. A second's worth of small commits (60 MB of WAL at 25k steps/s) copied and
 * synced at once held every commit behind it for 10-30 ms: the database's sync and the WAL's
 * share the disk and ext4's journal (W1p p99 6-10 ms; 2.2-3.3 ms at 500-1000 frames). */
#define CHECKPOINT_FRAMES 1000
/* The most WAL frames the writing connection copies itself between batches (about 8 MiB); a
 * longer tail goes back to the thread first: 0.4 s of a stalled loop with 1M runs parked. */
#define CATCH_UP_FRAMES 2048
/* Past this many WAL frames (about 64 MiB, the journal_size_limit the WAL is cut back to) the
 * writing connection copies the WAL itself between two batches, after the thread's pass if one
 * is running: the catch-up above waits for an idle thread and a short tail, which a steady
 * stream never gives (80 MB/s under ASan on a loaded machine grew the WAL to 76-166 MB). */
#define WAL_FRAMES_HARD 16384

struct ckpt {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_cond_t idle_cv;   /* running went to 0 */
  int wanted, stop, running;
  int held;                 /* the writing connection copies the WAL itself: no pass begins */
  int hard_from;            /* the WAL's length at the last copy past the hard limit */
  int from;                 /* the WAL's length when the last checkpoint was asked for */
  atomic_int frames;        /* the WAL's length, as the last checkpoint found it */
  atomic_int copied;        /* of which copied into the database */
  atomic_int catch_up;      /* the WAL is long: copy the rest between two batches */
};

static void run_passes(mend_store *s, struct ckpt *c) {
  if (s->ckpt_pass_delay_ms > 0) {
    struct timespec d = {s->ckpt_pass_delay_ms / 1000, (s->ckpt_pass_delay_ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
  }
  int frames = 0;
  int copied = mend__sqlite_checkpoint(s, &frames);
  /* A long WAL is copied again at once, a few times: each pass copies only what was committed
   * during the one before, so what the writing connection copies itself is a few milliseconds
   * of writes, not the second's worth that one pass leaves (a 72 ms stall of the loop in W4). */
  for (int pass = 0; pass < 3 && frames > WAL_FRAMES_LIMIT; pass++) {
    int before = frames;
    copied = mend__sqlite_checkpoint(s, &frames);
    if (frames == before) break;   /* nothing new since: nothing left to copy between batches */
  }
  atomic_store(&c->frames, frames);
  atomic_store(&c->copied, copied);
  /* The WAL starts over at the first write after a checkpoint that left nothing behind. Under
   * a steady stream of writes that never happens: the writing connection copies the rest. */
  if (frames > WAL_FRAMES_LIMIT) atomic_store(&c->catch_up, 1);
}

static void *ckpt_main(void *arg) {
  mend_store *s = arg;
  struct ckpt *c = s->ckpt;
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    if (!c->wanted) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_sec += 1;
      int rc = 0;
      while (!c->wanted && !c->stop && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->cv, &c->mu, &until);
      if (c->stop) break;
    }
    while (c->held && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    if (c->stop) break;
    c->wanted = 0;
    c->running = 1;
    pthread_mutex_unlock(&c->mu);
    run_passes(s, c);
    pthread_mutex_lock(&c->mu);
    c->running = 0;
    pthread_cond_broadcast(&c->idle_cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static struct ckpt *start(mend_store *s) {
  if (s->ckpt || !s->checkpointer || s->no_auto_checkpoint) return s->ckpt;
  struct ckpt *c = calloc(1, sizeof *c);
  if (!c) return NULL;   /* no thread: the WAL is checkpointed when the store closes */
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  pthread_cond_init(&c->idle_cv, NULL);
  s->ckpt = c;
  if (mend_thread_start(&c->thread, &s->cpus, "mend-ckpt", ckpt_main, s) != 0) {
    pthread_cond_destroy(&c->idle_cv);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    s->ckpt = NULL;
  }
  return s->ckpt;
}

static void wake(struct ckpt *c) {
  pthread_mutex_lock(&c->mu);
  c->wanted = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static int running(struct ckpt *c) {
  pthread_mutex_lock(&c->mu);
  int r = c->running || c->wanted;
  pthread_mutex_unlock(&c->mu);
  return r;
}

void mend__ckpt_after_commit(mend_store *s) {
  struct ckpt *c = start(s);
  if (!c) return;
  int frames = s->wal_frames;
  if (frames < c->from) c->from = 0;   /* the WAL started over */
  if (frames - c->from >= CHECKPOINT_FRAMES) {
    c->from = frames;
    wake(c);
  }
}

/* Past the hard limit: the thread's pass, if one runs, ends; none begins; the writing
 * connection copies every frame no reader still needs, and the next write starts the WAL over.
 * Once for each CHECKPOINT_FRAMES of growth, so that a reader that keeps an old snapshot (and
 * the WAL with it) does not make every batch wait for a pass. */
static void copy_past_hard_limit(mend_store *s, struct ckpt *c) {
  pthread_mutex_lock(&c->mu);
  c->held = 1;
  while (c->running) pthread_cond_wait(&c->idle_cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  pthread_mutex_lock(&c->mu);
  c->held = 0;
  c->hard_from = s->wal_frames;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (rc == SQLITE_OK) atomic_store(&c->catch_up, 0);
}

void mend__ckpt_between_batches(mend_store *s) {
  struct ckpt *c = s->ckpt;
  if (!c || s->in_batch) return;
  int hard = s->wal_hard_frames > 0 ? s->wal_hard_frames : WAL_FRAMES_HARD;
  if (s->wal_frames < c->hard_from) c->hard_from = 0;   /* the WAL started over */
  if (s->wal_frames > hard && s->wal_frames - c->hard_from >= CHECKPOINT_FRAMES) {
    copy_past_hard_limit(s, c);
    return;
  }
  if (!atomic_load(&c->catch_up) || running(c)) return;
  if (s->wal_frames - atomic_load(&c->copied) > CATCH_UP_FRAMES) {
    wake(c);   /* a long tail: the thread first */
    return;
  }
  /* On the writing connection, between batches: copies the frames written since the last
   * checkpoint, so that the next write starts the WAL over (and cuts the file back to 64 MiB).
   * A checkpoint that waits for the writer instead (RESTART) held it back for 0.6-1.4 s. */
  if (sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) == SQLITE_OK)
    atomic_store(&c->catch_up, 0);
}

void mend__ckpt_stop(mend_store *s) {
  struct ckpt *c = s->ckpt;
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  pthread_cond_destroy(&c->idle_cv);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  free(c);
  s->ckpt = NULL;
}

/* A passive checkpoint on the checkpointer's connection: the frames copied (0 when busy), and
 * the WAL's length in *wal_frames; -1 on error. */
int mend__sqlite_checkpoint(mend_store *s, int *wal_frames) {
  if (wal_frames) *wal_frames = 0;
  if (!s->checkpointer) return 0;
  int log = 0, done = 0;
  /* A connection that has read nothing does not know the file is in WAL mode, and its
   * checkpoint would quietly do nothing: read first. */
  sqlite3_exec(s->checkpointer, "SELECT 1 FROM sqlite_master LIMIT 1", NULL, NULL, NULL);
  int rc = sqlite3_wal_checkpoint_v2(s->checkpointer, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  if (wal_frames) *wal_frames = log > 0 ? log : 0;
  if (rc == SQLITE_BUSY) return 0;
  return rc == SQLITE_OK ? (done > 0 ? done : 0) : -1;
}
