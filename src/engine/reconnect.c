/*
 * reconnect: an engine whose store lost its connection to the server (PostgreSQL
 * restarted, the session ended with pg_terminate_backend, the network cut). Owns what the
 * engine does then: the failure logged, the batch that failed counted as not committed (its
 * alerts and events never told), every run held here let go and given back, so that the
 * next claim reads it again from the store (what the store has, not what this worker
 * guessed). Must never: act on a transition of that batch; write to one of those runs again
 * unless it is taken anew (a worker's claim, a client engine's resume).
 *
 * Why every run and not those of the failed batch: a batch is built over several turns and
 * the transitions already sent with it are gone with the transaction; the runs in memory
 * are the ones whose state may be ahead of the store, and the store has them all.
 *
 * A client engine (mend run, a host's) claims nothing: it takes its runs back at once, read
 * from the store as a worker's claim would read them. If the server is still away when they
 * are to be given back, it stops with the error: it has no poll to try again at, and its
 * caller would wait for ever.
 */
#include "engine_int.h"

#include <stdio.h>
#include <string.h>

/* Called where the store failed (mend__store_failed): in the middle of anything, so runs are
 * only marked here, and let go at the next turn's fence (mend__store_lost_let_go). The store
 * drops every write to them from now on: no later batch can commit a step of a run whose
 * earlier step went with the failed one. */
void mend__store_lost(mend_engine *E) {
  /* Whoever waits now is told that what it wrote is not known to be kept (at the next turn);
   * again at each failure while the server is away, as each loses its batch. Not by the
   * batch's number: a failed batch leaves it as it was, and a start written after the failure
   * carries it too, in the batch committed once the server is back. */
  for (mend_durable_wait *w = E->durable_head; w; w = w->next) w->lost = 1;
  /* Again while the server is away: the runs are marked already, and the retry is the poll's
   * (worker.c), not a turn at once, which would spin. Said every ten seconds, not every try. */
  if (E->store_lost) {
    double now = mend_real_now();
    if (now < E->store_lost_said + 10) return;
    E->store_lost_said = now;
    mend_engine_log_line(E, "warn", NULL, NULL, 0, "store", mend_store_errmsg(E->store));
    return;
  }
  E->store_lost_said = mend_real_now();
  char msg[1400];
  snprintf(msg, sizeof msg, "%s: the batch being written is not known to be committed, so"
           " nothing in it was acted on; the runs held here are let go and read again from the"
           " store, which reconnects", mend_store_errmsg(E->store));
  mend_engine_log_line(E, "error", NULL, NULL, 0, "store", msg);
  json_array_clear(E->alerts);
  json_array_clear(E->events);
  json_array_clear(E->alerts_handed);
  json_array_clear(E->events_handed);
  for (mend_run *r = E->runs; r; r = r->next)
    if (!r->lost && mend_store_add_lost(E->store, r->id)) break;
  char id[MEND_RUN_ID_LEN];
  for (uint32_t i = 0; i < E->parked.n; i++) {
    mend_parkset_id(&E->parked, i, id);
    if (mend_store_add_lost(E->store, id)) break;
  }
  E->store_lost = 1;
  mend__kick(E);
}

/* Giving the runs back failed (the server is still away): a worker tries again at its next
 * poll; a client engine stops with the error. */
static void given_back_failed(mend_engine *E) {
  if (!E->serving) {
    mend__breakdown(E, "%s", mend_store_errmsg(E->store));
    return;
  }
  E->store_lost = 1;   /* again at the next poll */
  mend__store_failed(E);
}

/* At a turn's fence: the runs marked are let go here and given back in the store, each one
 * free for the next claim (this worker's included). If giving back fails (the server is still
 * away), the store says so again and this is tried at the next turn. */
void mend__store_lost_let_go(mend_engine *E) {
  id_list all = {0};
  for (mend_run *r = E->runs; r; r = r->next)
    if (!r->lost) mend__add_id(&all, r->id);
  char id[MEND_RUN_ID_LEN];
  for (uint32_t i = 0; i < E->parked.n; i++) {
    mend_parkset_id(&E->parked, i, id);
    mend__add_id(&all, id);
  }
  if (all.oom) {
    mend_idset_clear(&all.set);
    mend__breakdown(E, "out of memory letting go of the runs of a lost connection");
    return;
  }
  E->store_lost = 0;
  for (size_t i = 0; i < all.set.cap; i++) {
    if (!all.set.slots[i]) continue;
    if (mend_store_release(E->store, all.set.slots[i], E->owner)) {
      mend_idset_clear(&all.set);
      given_back_failed(E);
      return;
    }
  }
  mend__let_go(E, &all.set, "the store lost its connection while this run had writes not"
               " known to be committed: let go here, to be read again from the store");
  if (mend_store_commit(E->store)) {
    mend_idset_clear(&all.set);
    given_back_failed(E);
    return;
  }
  for (size_t i = 0; !E->serving && !E->broken && i < all.set.cap; i++) {
    if (!all.set.slots[i]) continue;
    char err[600];
    if (mend_engine_resume_run(E, all.set.slots[i], err, sizeof err) < 0)
      mend__breakdown(E, "%s", err);
  }
  mend_idset_clear(&all.set);
  if (E->store_lost_said > 0) {
    mend_engine_log_line(E, "info", NULL, NULL, 0, "store", "reconnected: the runs let go are"
                         " claimed again from the store");
    E->store_lost_said = 0;
  }
  mend__poll_soon(E);
}
