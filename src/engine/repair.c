/*
 * repair: what people do to runs (SPEC section 8): cancel, retry a dead letter, resolve with a
 * note, and the cancel requests a worker takes from the store (a breaker's override is
 * override.c's; a move to another version, upgrade.c's). Each is recorded in the run's history
 * (or the audit table) with who did it, and refused with a message when it makes no sense now.
 * Must never: repair a run a live worker holds behind its back.
 */
#include "engine_int.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "utf8.h"
#include "util.h"

/* ---------------------------------------------------------------- repairs by people */

static mend_run *in_memory(mend_engine *E, const char *id) {
  for (mend_run *r = E->runs; r; r = r->next)
    if (!r->lost && strcmp(r->id, id) == 0) return r;   /* a lost copy is no longer the run */
  return NULL;
}

/* A repair acts on the run in memory: a parked one is brought back for it. One that cannot
 * be read back while a batch waits for another PostgreSQL session's lock (parked again, for
 * later) is the store's refusal (503, naming the lock), not a run to look for elsewhere; under
 * SQLite's write lock the repair goes on to be made once the lock goes (take_later). */
mend_run *mend__repair_find_run(mend_engine *E, const char *id) {
  mend_run *r = in_memory(E, id);
  if (r) return r;
  int back = mend__unpark(E, id, "a repair or a cancel asks for it");
  if (back > 0) return in_memory(E, id);
  if (back < 0 && mend_store_locked(E->store) && !mend_store_has_write_lock(E->store))
    E->refusal = MEND_REFUSED_STORE;
  return NULL;
}

/* The time for a row of a run this engine does not hold: now, or its last row's if later
 * (read as a view: the committed one while another process's lock keeps the batch). */
double mend__entry_time(mend_engine *E, const char *id) {
  double now = mend_engine_now(E), last = -1;
  int committed;
  if (mend_store_last_history_view(E->store, id, &last, &committed) < 0) mend__store_failed(E);
  return last > now ? last : now;
}

/* A run resolved in a batch not durable yet (repairs_recorded). */
struct mend_repair_recorded {
  struct mend_repair_recorded *next;
  unsigned long seq;
  char id[MEND_RUN_ID_LEN];
};

void mend__repairs_recorded_drop(mend_engine *E, int all) {
  unsigned long durable = all || !E->store ? 0 : mend_store_durable_seq(E->store);
  for (struct mend_repair_recorded **at = &E->repairs_recorded, *x; (x = *at);) {
    if (all || x->seq <= durable) {
      *at = x->next;
      free(x);
    } else {
      at = &x->next;
    }
  }
}

/* Out of memory, not noted: a second resolve under the lock would then be recorded too. */
static void note_resolved(mend_engine *E, const char *id) {
  struct mend_repair_recorded *x = calloc(1, sizeof *x);
  if (!x) return;
  snprintf(x->id, sizeof x->id, "%s", id);
  x->seq = mend_store_open_seq(E->store);
  x->next = E->repairs_recorded;
  E->repairs_recorded = x;
}

static int resolved_recorded(mend_engine *E, const char *id) {
  mend__repairs_recorded_drop(E, 0);
  for (struct mend_repair_recorded *x = E->repairs_recorded; x; x = x->next)
    if (strcmp(x->id, id) == 0) return 1;
  return 0;
}

/* A run no engine holds, for a repair that waits for its batch: taking it over reads it whole
 * and writes its lease at once, which would wait on this thread for another process's write
 * lock (a store that has one). Only the lease is renewed, in the open batch: the caller asks
 * again once that batch is durable (the lock gone), and the repair is made then, as it finds
 * the run. */
static int take_later(mend_engine *E, char *err, int errlen) {
  E->refusal = MEND_REFUSED_STORE;   /* what can fail from here is the database */
  if (mend_store_renew(E->store, E->owner, E->lease_seconds)) mend__store_failed(E);
  if (E->broken) return mend_errorf(err, errlen, "%s", E->errmsg);
  mend__kick(E);
  return MEND_REPAIR_TAKE_LATER;
}

/* A repair made for a caller that waits for its batch (record) is done once recorded: the
 * caller answers once the batch is durable. Else it commits now. */
/* Whether a batch was lost since the repair's look (PostgreSQL: a read's flush or a write sent
 * the repair's writes and the server ended that transaction, a deadlock's victim): the writes
 * made so far are gone; what is committed now would be without them. */
static int repair_lost(const mend_engine *E) { return E->store_failures != E->repair_failures; }

static int repair_done(mend_engine *E, int record, char *err, int errlen) {
  if (repair_lost(E)) {
    E->refusal = MEND_REFUSED_STORE;
    if (!record) mend__commit_now(E);
    return mend_errorf(err, errlen, "the database ended this repair's transaction before it was "
                       "committed (%s): nothing of it was written; try again",
                       mend_store_errmsg(E->store));
  }
  if (!record) return mend__commit_now(E) ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
  if (E->broken) return mend_errorf(err, errlen, "%s", E->errmsg);
  mend__kick(E);
  return 0;
}

/* r: the run, if this engine holds it (it numbers the row); else NULL and the id. */
void mend__operator_entry(mend_engine *E, mend_run *r, const char *id, const char *op,
                          const char *who, const char *note) {
  char detail[1200];
  snprintf(detail, sizeof detail, "%s by %s%s%s", op, who ? who : "?", note ? ": " : "",
           note ? note : "");
  mend_utf8_fix(detail);   /* a long note is cut, maybe inside a character */
  mend_history_rec h = {id, NULL, r ? mend__history_time(r) : mend__entry_time(E, id), "operator",
                        NULL, NULL, 0, NULL, -1, detail, r ? ++r->history_seq : 0, NULL};
  if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
  mend_engine_log_line(E, "info", id, NULL, 0, "operator", detail);
}

/* Reads a run's status and reason from the store (a view: committed rows while another
 * process's lock keeps the batch, with the runs resolved here meanwhile); 0, or -1 with "no run
 * <id>" in err. */
static int stored_status(mend_engine *E, const char *id, char *status, char *reason, int len,
                         char *err, int errlen) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) {
    E->refusal = mend_store_not_found(E->store) ? MEND_REFUSED_NOT_FOUND : MEND_REFUSED_STORE;
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  }
  const char *st = json_string_value(json_object_get(row, "status"));
  const char *why = json_string_value(json_object_get(row, "reason"));
  if (resolved_recorded(E, id)) st = "resolved";
  snprintf(status, (size_t)len, "%s", st ? st : "");
  snprintf(reason, (size_t)len, "%s", why ? why : "");
  json_decref(row);
  return 0;
}

/* The look before a repair of a run nobody holds is not its write: another server may repair
 * the run between them. As the repair's batch is written the run's status is looked at again
 * and held until that batch commits (mend_store_hold_status): 0 when it is `status` still; else
 * -1, refused as once the other repair is seen (409 naming what the run is now, `what` saying
 * why), or 503 when the store cannot look (another process's lock again). */
static int hold_status(mend_engine *E, const char *id, const char *status, const char *what,
                       int record, char *err, int errlen) {
  char found[64];
  /* A caller that waits for the answer here (a command, a host's call) waits out another
   * process's lock as a commit now does (the store's default wait); a server's loop does not
   * (its repair was taken later already, and a lock taken again is its 503). */
  if (!record) mend_store_set_busy_wait(E->store, 0);
  int rc = mend_store_hold_status(E->store, id, status, found, sizeof found);
  if (!record) mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  E->repair_failures = E->store_failures;   /* repair_done: did the store fail since? */
  if (rc == 0) return 0;
  /* Not a lock: the look's failure may have taken the open batch with it (PostgreSQL rolls back
   * a transaction a deadlock ended, and the repairs it held already): the engine must hear of
   * it, or what waits for that batch would be answered as durable. */
  if (rc < 0 && rc != MEND_STORE_BUSY) {
    E->refusal = MEND_REFUSED_STORE;
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    mend__store_failed(E);
    return -1;
  }
  /* The look began the batch's transaction, which holds the run (SQLite: the write lock) until
   * it commits, and a refusal writes nothing to end it: it ends now (or at the turn this
   * kicks), not at this engine's next work, however far off, while another server's repair
   * waits for it. A look another session's lock turned away (PostgreSQL: rolled back to its
   * savepoint) leaves the batch's earlier writes holding their rows, which that session may
   * be waiting for (a deadlock the look was picked to end): a caller that waited commits them
   * now too. */
  if (!record && (rc > 0 || mend_store_batch_open(E->store))) mend__commit_now(E);
  else mend__kick(E);
  if (rc < 0) {
    /* The look gave up for another's lock and wrote nothing: the caller may send it again
     * (503 busy), as under SQLite's write lock; on PostgreSQL no mark of the store says so. */
    E->refusal = MEND_REFUSED_BUSY;
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  }
  E->refusal = found[0] ? MEND_REFUSED_STATE : MEND_REFUSED_NOT_FOUND;
  if (!found[0]) return mend_errorf(err, errlen, "no run %s", id);
  return mend_errorf(err, errlen, "run %s is %s: %s", id, found, what);
}

/* 1 when `owner` (host:pid:tag) is another engine that holds its runs now: its lease lasts
 * and, on this host, its process is there (one killed leaves a lease nobody will renew). */
static int holder_live(const mend_engine *E, const char *owner, double lease_left) {
  if (!owner[0] || strcmp(owner, E->owner) == 0 || lease_left < 0) return 0;
  const char *host_end = strchr(E->owner, ':');
  size_t host_len = host_end ? (size_t)(host_end - E->owner) + 1 : 0;
  if (host_len && strncmp(owner, E->owner, host_len) == 0) {
    long pid = strtol(owner + host_len, NULL, 10);
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 0;
  }
  return 1;
}

/* view: the lease as a view reads it (committed while another process's lock keeps the
 * batch), for a repair that waits for its batch. */
static int holder(mend_engine *E, const char *id, char *owner, int len, int view) {
  double left;
  int found = view ? mend_store_owner_view(E->store, id, owner, len, &left)
                   : mend_store_owner(E->store, id, owner, len, &left);
  if (found < 0) {
    E->refusal = MEND_REFUSED_STORE;
    return mend_errorf(owner, len, "%s", mend_store_errmsg(E->store));
  }
  if (found == 0) owner[0] = 0;
  if (found && strcmp(owner, E->owner) == 0)   /* this engine */
    return in_memory(E, id) != NULL || mend__parked(E, id);
  return found && holder_live(E, owner, left);
}

int mend_engine_holder(mend_engine *E, const char *id, char *owner, int len) {
  return holder(E, id, owner, len, 0);
}

int mend_engine_held_by(mend_engine *E, const char *id, char *owner, int len) {
  return holder(E, id, owner, len, 1);
}

/* Brings a run that no live engine holds into this engine, holding its lease. */
static mend_run *take_over(mend_engine *E, const char *id, char *err, int errlen) {
  char owner[128];
  double left;
  if (mend_store_owner(E->store, id, owner, sizeof owner, &left) < 0) {
    E->refusal = MEND_REFUSED_STORE;
    mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
    return NULL;
  }
  if (holder_live(E, owner, left)) {
    mend_errorf(err, errlen, "run %s is held by worker %s (lease for %.0f s more)", id, owner,
           left);
    return NULL;
  }
  mend_run *r = mend__rebuild(E, id, err, errlen, NULL);
  if (!r) return NULL;
  mend__find_current_step(r);   /* a cancel acts on it */
  if (mend_store_take(E->store, id, E->owner, E->lease_seconds)) mend__store_failed(E);
  return r;
}

/* Cancels a run held in memory: the attempt in flight is abandoned, the steps done are
 * compensated in reverse. */
void mend__unthrottle(mend_run *r) {
  run_fifo *f = r->waiting_in;
  if (!f) return;
  for (mend_run **p = &f->head, *prev = NULL; *p; prev = *p, p = &(*p)->tnext) {
    if (*p != r) continue;
    *p = r->tnext;
    if (f->tail == r) f->tail = prev;
    break;
  }
  r->waiting_in = NULL;
}

int mend__cancel_now(mend_run *r, const char *who, char *err, int errlen) {
  if (r->status != MEND_RUN_RUNNING)
    return mend_errorf(err, errlen, "run %s is %s: only a running run can be cancelled", r->id,
                  mend_run_status_name(r->status));
  mend_engine *E = r->E;
  /* Its coroutine, or a lane's of it, is the one running: closing it there would free the
   * stack the caller stands on. The code has its own way out. */
  if (E->in_code && (E->in_code == r || MEND_COLD(E->in_code, parent) == r))
    return mend_errorf(err, errlen, "run %s cannot be cancelled from its own code: raise "
                       "mend.fatal(...) to stop it (its done steps are compensated)", r->id);
  mend__unthrottle(r);
  int i = r->cur;
  step_rt *st = i < r->wf->nsteps ? &r->steps[i] : NULL;
  int was_running = r->co != NULL || (st && st->status == MEND_STEP_RUNNING);
  int child_waits = st && st->status == MEND_STEP_WAITING && r->wf->steps[i].child;
  mend__give_back(r, r->queued, was_running);
  mend__end_attempt(r);
  mend_timer_disarm(&E->timers, &r->wait);
  r->wait_kind = WAIT_NONE;
  mend__operator_entry(E, r, r->id, "cancel", who, NULL);
  char msg[300];
  snprintf(msg, sizeof msg, "cancelled by %s", who ? who : "?");
  mend__group_stop(r, msg);   /* a group's branches in flight let go too */
  if (st && st->status == MEND_STEP_RUNNING) mend__step_to(r, i, MEND_STEP_FAILED, msg, -1, NULL);
  else if (child_waits) {
    /* What its child did came after every earlier step and may be half done: the step is
     * undone first, as a compensable failure, and stays compensating until the child,
     * cancelled below, has ended (a child that cannot be undone holds the run with it). */
    mend_error_info info = {MEND_ERR_COMPENSABLE, msg, -1, 1, 0};
    mend__step_err_to(r, i, MEND_STEP_FAILED, &info, msg, -1, NULL);
    st->compensate_self = 1;
  } else if (st && st->status != MEND_STEP_PENDING)
    mend__step_to(r, i, MEND_STEP_PENDING, NULL, -1, NULL);
  mend__set_str(&r->error, msg);
  r->reason = "cancelled";
  r->fail_step = i;
  int anything = child_waits;
  for (int j = 0; j < r->wf->nsteps; j++)   /* a branch whose child was cancelled: compensable */
    anything |= j != i && (r->steps[j].status == MEND_STEP_SUCCEEDED ||
                           (r->steps[j].status == MEND_STEP_FAILED && r->steps[j].compensate_self));
  anything |= mend__items_succeeded(r);
  if (!anything) {
    mend__run_to(r, MEND_RUN_FAILED);
    mend__queue(r, ACT_FINISH);
  } else {
    mend__run_to(r, MEND_RUN_COMPENSATING);
    /* a group or a map cancelled in flight undoes its branches or items that succeeded */
    const mend_step_def *def = i < r->wf->nsteps ? &r->wf->steps[i] : NULL;
    r->cur = def && def->nbranches ? i + def->nbranches
           : def && (def->map_ref != LUA_NOREF || child_waits) ? i : i - 1;
    mend__queue(r, ACT_ADVANCE);
  }
  if (child_waits) mend__cancel_child(r, i, who);   /* once this run no longer waits for it */
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

/* A cancel that cascades to run id (its parent was cancelled, its group failed). When the run's
 * own code is what runs now (a step of it, a group branch or map item of it, its when: that
 * code cancelled its parent), closing its coroutine there would free the stack that code stands
 * on: the cancel is kept and lands as that code yields or returns (mend__land_deferred_cancel),
 * whatever the code gave then void. */
int mend__cancel_cascade(mend_engine *E, const char *id, const char *who, char *err, int errlen) {
  mend_run *r = in_memory(E, id);
  if (r && E->in_code && mend__root(E->in_code) == r && r->status == MEND_RUN_RUNNING) {
    if (!mend__run_cold(r)) return mend_errorf(err, errlen, "out of memory");
    if (!r->cold->cancel_by) r->cold->cancel_by = mend_dupstr(who);
    E->cancels_deferred = 1;   /* landed at the next turn, if the code's own end did not */
    mend__kick(E);
    mend_engine_log_line(E, "info", id, NULL, 0, "cancel",
                         "deferred until the run's own code, which is running, yields or returns");
    return 0;
  }
  return mend_engine_cancel_run(E, id, who, err, errlen);
}

/* After run r's code yielded or returned, outside every other run's code: a cancel cascaded to
 * it meanwhile lands now. 1 if it did (what the code gave is void), else 0: none kept, or the
 * run no longer running (it turned back to compensate: the cancel is dropped, the run goes on
 * to its end). */
int mend__land_deferred_cancel(mend_run *r) {
  char *who = MEND_COLD(r, cancel_by);
  if (!who || r->E->in_code) return 0;
  r->cold->cancel_by = NULL;
  char err[300];
  int landed = 0;
  if (r->status != MEND_RUN_RUNNING)
    mend_engine_log_line(r->E, "info", r->id, NULL, 0, "cancel", "the deferred cancel is dropped:"
                         " the run turned back to compensate first");
  else if (mend__cancel_now(r, who, err, sizeof err) < 0)
    mend_engine_log_line(r->E, "warn", r->id, NULL, 0, "cancel", err);
  else
    landed = 1;
  free(who);
  return landed;
}

/* After code of run r's, or of a lane of it, that is not an attempt returned (a when, an
 * idempotency_key, a map's list, a child's input), outside every other code: a cancel that code
 * cascaded back to its run lands now, before what it answered is acted on, as it does when a
 * step's code returns. 1 if it landed: the caller acts on nothing more of the run. */
int mend__land_kept_cancel(mend_run *r) {
  mend_run *root = mend__root(r);
  return MEND_COLD(root, cancel_by) && !r->E->in_code && mend__land_deferred_cancel(root);
}

/* At a turn's start, where no run's code runs: the cancels kept from code that ended without
 * anything to land them (an error's __tostring, read as its step's failure is dealt with; code
 * that ran inside other code). */
void mend__land_deferred_cancels(mend_engine *E) {
  E->cancels_deferred = 0;
  for (mend_run *r = E->runs; r; r = r->next)
    if (MEND_COLD(r, cancel_by)) mend__land_deferred_cancel(r);
}

/* A store refusal while a batch waits for another's lock is that lock's: whatever met it
 * (a begin, a look, a send) ran nothing of its own, so its caller may send it again. */
mend_refusal mend_engine_refusal(const mend_engine *E) {
  if (E->refusal == MEND_REFUSED_STORE && mend_engine_lock_held(E)) return MEND_REFUSED_BUSY;
  return E->refusal;
}

int mend_engine_lock_held(const mend_engine *E) {
  return !E->broken && E->store && mend_store_locked(E->store);
}

static int cancel_run(mend_engine *E, const char *id, const char *who, int record, int take_now,
                      char *err, int errlen) {
  if (mend__who_refused(E, who, err, errlen)) return -1;
  E->refusal = MEND_REFUSED_STATE;
  if (mend__batch_held(E, "cancel", err, errlen)) return -1;
  mend_run *r = mend__repair_find_run(E, id);
  if (r) return mend__cancel_now(r, who, err, errlen);
  if (E->refusal == MEND_REFUSED_STORE)
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  char status[64], reason[64];
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "running") != 0)
    return mend_errorf(err, errlen, "run %s is %s: only a running run can be cancelled", id,
                       status);
  char owner[128];
  int live = holder(E, id, owner, sizeof owner, record);
  if (live < 0) return mend_errorf(err, errlen, "%s", owner);
  char why[400] = "";
  if (!live && record && !take_now && mend_store_has_write_lock(E->store))
    return take_later(E, err, errlen);
  /* Held by a live worker, the run's row is still written (its cancel requested): the look
   * holds it first, so that another session's lock on it is met there, bounded, and not by
   * the batch's writes, which would wait for it without end. */
  if ((!live || !(record && mend_store_has_write_lock(E->store))) &&
      hold_status(E, id, "running", "only a running run can be cancelled", record, err, errlen))
    return -1;
  r = live ? NULL : take_over(E, id, why, sizeof why);
  if (!r) {
    /* Held by a live worker, which cancels at its next poll; or not to be rebuilt here (its
     * workflow is not loaded): whoever takes it next cancels it (carry_on). */
    if (mend_store_request_cancel(E->store, id)) mend__store_failed(E);
    mend_store_repairing(E->store, 1);   /* a note in its history, not a transition */
    mend__operator_entry(E, NULL, id, "cancel requested", who, live ? NULL : why);
    mend_store_repairing(E->store, 0);
    if (repair_done(E, record, err, errlen)) return -1;
    if (!live) snprintf(err, (size_t)errlen, "%s", why);
    return live ? 1 : 2;
  }
  return mend__cancel_now(r, who, err, errlen);
}

int mend_engine_cancel_run(mend_engine *E, const char *id, const char *who, char *err, int errlen) {
  return cancel_run(E, id, who, 0, 0, err, errlen);
}

int mend_engine_cancel_record(mend_engine *E, const char *id, const char *who, int take_now,
                              char *err, int errlen) {
  return cancel_run(E, id, who, 1, take_now, err, errlen);
}

int mend_engine_resume_run(mend_engine *E, const char *id, char *err, int errlen) {
  E->refusal = MEND_REFUSED_STATE;
  if (mend__repair_find_run(E, id)) return 0;
  char status[64], reason[64];
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "running") != 0 && strcmp(status, "compensating") != 0)
    return mend_errorf(err, errlen, "run %s is %s: it has ended", id, status);
  int live = mend_engine_holder(E, id, err, errlen);
  if (live) return live < 0 ? -1 : 1;   /* err: the holder */
  mend_run *r = take_over(E, id, err, errlen);
  if (!r) return -1;
  mend__recovered_entry(r);
  mend_engine_log_line(E, "info", r->id, NULL, 0, "recover", "resumed from the store");
  mend__carry_on(r);
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

/* 1 when run id is a child whose parent is going back (compensating: cancelled, or a later
 * step failed), 0 when not, -1 when the store failed. Its parent waits for it to be undone:
 * retried, its failed step would run forward again only for that to be undone, and a step
 * with no compensate would keep what it did. */
static int parent_going_back(mend_engine *E, const char *id) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) return -1;
  const char *parent = json_string_value(json_object_get(row, "parent_run"));
  int back = 0;
  if (parent) {
    mend_run *pr = in_memory(E, parent);
    if (pr) {
      back = pr->status == MEND_RUN_COMPENSATING;
    } else {
      json_t *prow = mend_store_run(E->store, parent);
      const char *st = prow ? json_string_value(json_object_get(prow, "status")) : NULL;
      back = !prow ? (mend_store_not_found(E->store) ? 0 : -1)
                   : st && strcmp(st, "compensating") == 0;
      json_decref(prow);
    }
  }
  json_decref(row);
  return back;
}

/* The error run id last turned back with, from its history, read a page at a time (a long
 * history must cost a page's memory): the last failure of step `step` (NULL: none), else,
 * turned back by a cancel (its last turn back's reason, `run ... -> compensating`), "cancelled
 * by WHO" of the last cancel an operator asked for. The run's own error by then is its
 * compensation's. A copy to free, or NULL. */
#define TURNED_BACK_PAGE 1000

/* The length of WHO in an operator row's `... by WHO[: note]`: a note follows ": " (WHO may
 * hold a colon of its own, as in "via http 127.0.0.1:7070"). */
static size_t who_len(const char *who) {
  const char *note = strstr(who, ": ");
  return note ? (size_t)(note - who) : strlen(who);
}
static char *turned_back(mend_engine *E, const char *id, const char *step) {
  char *failed = NULL, *canceller = NULL;
  const char *reason = NULL;
  long after = 0;
  for (;;) {
    json_t *page = mend_store_history_page(E->store, id, after, TURNED_BACK_PAGE, 0);
    size_t n = json_is_array(page) ? json_array_size(page) : 0;
    for (size_t k = 0; k < n; k++) {
      json_t *row = json_array_get(page, k);
      const char *ev = json_string_value(json_object_get(row, "event"));
      const char *name = json_string_value(json_object_get(row, "step"));
      const char *to = json_string_value(json_object_get(row, "to"));
      const char *err = json_string_value(json_object_get(row, "error"));
      const char *detail = json_string_value(json_object_get(row, "detail"));
      if (!ev) continue;
      if (step && name && to && err && strcmp(ev, "step") == 0 && strcmp(name, step) == 0 &&
          strcmp(to, "failed") == 0) {
        free(failed);
        failed = mend_dupstr(err);
      } else if (to && detail && strcmp(ev, "run") == 0 && strcmp(to, "compensating") == 0) {
        const char *known = mend__known_reason(detail);
        if (known) reason = known;
      } else if (detail && strcmp(ev, "operator") == 0) {
        const char *who = strncmp(detail, "cancel by ", 10) == 0 ? detail + 10
                        : strncmp(detail, "cancel requested by ", 20) == 0 ? detail + 20 : NULL;
        if (who) {
          free(canceller);
          canceller = mend_dupstr(who);
          if (canceller) canceller[who_len(canceller)] = 0;
        }
      }
      json_int_t seq = json_integer_value(json_object_get(row, "seq"));
      if (seq > after) after = (long)seq;
    }
    json_decref(page);
    if (n < TURNED_BACK_PAGE) break;
  }
  if (!failed && canceller && reason && strcmp(reason, "cancelled") == 0) {
    char msg[300];
    snprintf(msg, sizeof msg, "cancelled by %s", canceller);
    failed = mend_dupstr(msg);
  }
  free(canceller);
  return failed;
}

static int dlq_retry(mend_engine *E, const char *id, const char *who, int record, int take_now,
                     char *err, int errlen) {
  if (mend__who_refused(E, who, err, errlen)) return -1;
  E->refusal = MEND_REFUSED_STATE;
  if (mend__batch_held(E, "retry", err, errlen)) return -1;
  char status[64], reason[64];
  if (mend__repair_find_run(E, id))
    return mend_errorf(err, errlen, "run %s is in flight: it is not in the dead-letter queue", id);
  if (E->refusal == MEND_REFUSED_STORE)
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "needs_attention") != 0)
    return mend_errorf(err, errlen,
                       "run %s is %s: only a run in the dead-letter queue can be retried", id,
                       status);
  if (strcmp(reason, "attempts_exhausted") == 0)
    return mend_errorf(
        err, errlen,
        "run %s was compensated after its attempts ran out: there is nothing left to "
        "resume; start a new run, or resolve this one with a note",
        id);
  if (record && !take_now && mend_store_has_write_lock(E->store)) return take_later(E, err, errlen);
  if (hold_status(E, id, "needs_attention", "only a run in the dead-letter queue can be retried",
                  record, err, errlen))
    return -1;
  int comp = strcmp(reason, "compensation_failed") == 0;
  int back = comp ? 0 : parent_going_back(E, id);
  if (back < 0) {
    E->refusal = MEND_REFUSED_STORE;
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  }
  mend_run *r = take_over(E, id, err, errlen);
  if (!r) return -1;
  /* The step to resume from, found before anything is written. */
  int i = r->wf->nsteps - 1;
  if (comp) while (i >= 0 && r->steps[i].status != MEND_STEP_COMPENSATION_FAILED) i--;
  else i = r->fail_step;
  if (i < 0) {
    mend__run_free(r);
    return mend_errorf(err, errlen, "run %s: no step is %s", id,
                       comp ? "compensation_failed" : "failed");
  }
  mend__operator_entry(E, r, id, "dlq retry", who,
                       back ? "its parent is going back: the run is undone "
                              "from its failed step, not run forward"
                            : NULL);
  if (mend_store_dlq_remove(E->store, id)) mend__store_failed(E);
  if (comp) {
    r->steps[i].comp_attempts = 0;   /* fresh attempts */
    r->steps[i].last_delay = -1;
    /* The run's error goes back to why it turned back: the compensation's error stays with
     * its step, and a run compensated at last would otherwise show it as its cause. A step
     * undone for its own failure (a compensable error, a cancel of a parent waiting for its
     * child) holds its compensation's error now: its failure is in its history. */
    int f = r->fail_step;
    int own =
        f >= 0 && f < r->wf->nsteps && r->steps[f].status == MEND_STEP_FAILED && r->steps[f].error;
    if (own) {
      mend__set_str(&r->error, r->steps[f].error);
    } else {
      char *why = turned_back(E, id, f >= 0 && f < r->wf->nsteps ? r->wf->steps[f].name : NULL);
      if (why) mend__set_str(&r->error, why);
      free(why);
    }
    /* Its reason stays compensation_failed: the reason it turned back for would decide its end
     * again (attempts_exhausted parks a compensated run in the dead-letter queue). */
    mend__run_to(r, MEND_RUN_COMPENSATING);
  } else if (back) {
    /* severity 3 of a child whose parent goes back: the person's go-ahead undoes it from its
     * failed step (compensable: what it did is undone too), as a cancel would have */
    r->steps[i].comp_attempts = 0;
    r->steps[i].last_delay = -1;
    r->steps[i].compensate_self = 1;
    r->reason = "cancelled";
    mend__run_to(r, MEND_RUN_COMPENSATING);
    const mend_step_def *def = &r->wf->steps[i];
    r->cur = def->group >= 0 ? def->group + r->wf->steps[def->group].nbranches : i;
    mend__queue(r, ACT_ADVANCE);
    return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
  } else {   /* severity 3: the failed step again, with fresh attempts */
    /* A branch or a map's item goes again within its group, failed with it: the group, left
     * failed, is taken up as retried (group_forward), its failed branches or items given fresh
     * attempts, the branches the failure stopped started again, and it settles once all end. */
    const mend_step_def *def = &r->wf->steps[i];
    int g = def->group >= 0 ? def->group : def->map_ref != LUA_NOREF ? i : -1;
    if (g >= 0 && r->steps[g].status != MEND_STEP_FAILED) g = -1;
    mend__step_fresh(&r->steps[i]);
    if (i != g)
      mend__step_to(r, i, MEND_STEP_PENDING, NULL, -1, "retried from the dead-letter queue");
    r->reason = NULL;
    mend__set_str(&r->error, NULL);
    r->fail_step = -1;
    mend__run_to(r, MEND_RUN_RUNNING);
    if (g >= 0) i = g;
  }
  r->cur = i;
  mend__queue(r, ACT_ADVANCE);
  return E->broken ? mend_errorf(err, errlen, "%s", E->errmsg) : 0;
}

int mend_engine_dlq_retry(mend_engine *E, const char *id, const char *who, char *err, int errlen) {
  return dlq_retry(E, id, who, 0, 0, err, errlen);
}

int mend_engine_dlq_retry_record(mend_engine *E, const char *id, const char *who, int take_now,
                                 char *err, int errlen) {
  return dlq_retry(E, id, who, 1, take_now, err, errlen);
}

#define RESOLVE_ONLY \
  "only a run in the dead-letter queue, or one that cannot progress (mend runs " \
  "--attention), can be resolved"

/* A run that cannot progress (no engine can load its version) and that no live worker holds:
 * it goes to the dead-letter queue's end state as a dead letter would, running ->
 * needs_attention -> resolved, with nothing of its code run. */
static int resolve_unavailable(mend_engine *E, const char *id, const char *who, const char *note,
                               int record, int take_now, char *err, int errlen) {
  json_t *row = mend_store_run(E->store, id);
  if (!row) {
    E->refusal = mend_store_not_found(E->store) ? MEND_REFUSED_NOT_FOUND : MEND_REFUSED_STORE;
    return mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
  }
  const char *st = json_string_value(json_object_get(row, "status"));
  const char *why = json_string_value(json_object_get(row, "unavailable"));
  mend_run_status from;
  char owner[128];
  int live = 0;
  if (!st || mend_run_status_parse(st, &from) ||
      !mend_run_transition_ok(from, MEND_RUN_NEEDS_ATTENTION) || !why ||
      (live = holder(E, id, owner, sizeof owner, record)) != 0) {
    if (live > 0)
      mend_errorf(err, errlen, "run %s is held by worker %s, which can carry it on", id, owner);
    else if (live < 0) mend_errorf(err, errlen, "%s", owner);
    else mend_errorf(err, errlen, "run %s is %s: " RESOLVE_ONLY, id, st ? st : "?");
    json_decref(row);
    return -1;
  }
  /* As a resolve of a dead letter: looked at again as its batch is written. */
  if (record && !take_now && mend_store_has_write_lock(E->store)) {
    json_decref(row);
    return take_later(E, err, errlen);
  }
  mend__pause_point("resolve_unavailable");
  if (hold_status(E, id, st, RESOLVE_ONLY, record, err, errlen)) {
    json_decref(row);
    return -1;
  }
  /* Who holds it was read before this transaction: a worker may have claimed it since. Read
   * again now that the run is held until the batch commits (its row; SQLite's write lock). */
  if ((live = holder(E, id, owner, sizeof owner, 0)) != 0) {
    E->refusal = live > 0 ? MEND_REFUSED_STATE : MEND_REFUSED_STORE;
    if (live > 0)
      mend_errorf(err, errlen, "run %s is held by worker %s, which can carry it on", id, owner);
    else
      mend_errorf(err, errlen, "%s", owner);
    json_decref(row);
    if (!record) mend__commit_now(E);   /* ends the look's transaction, as a refusal there does */
    else mend__kick(E);
    return -1;
  }
  double now = mend__entry_time(E, id);
  mend_store_repairing(E->store, 1);   /* nobody holds it: no lease to fence */
  if (mend_store_update_run(E->store, id, "resolved", why, 0, now, "workflow_unavailable") ||
      mend_store_set_unavailable(E->store, id, NULL))
    mend__store_failed(E);
  mend_history_rec a = {
      id, NULL, now, "run", st, "needs_attention", 0, why, -1, "workflow_unavailable", 0, NULL};
  mend_history_rec b = {id, NULL, now, "run", "needs_attention", "resolved", 0, NULL,
                        -1, note, 0,   NULL};
  if (mend_store_append_history(E->store, &a) || mend_store_append_history(E->store, &b))
    mend__store_failed(E);
  mend__operator_entry(E, NULL, id, "dlq resolve", who, note);
  mend_store_repairing(E->store, 0);
  json_decref(row);
  if (record && !repair_lost(E)) note_resolved(E, id);
  return repair_done(E, record, err, errlen);
}

static int resolve(mend_engine *E, const char *id, const char *who, const char *note,
                   int record, int take_now, char *err, int errlen) {
  char status[64], reason[64];
  /* a missing argument, whatever the run's state (mend.h: MEND_EINVAL) */
  E->refusal = MEND_REFUSED_INVALID;
  if (!note || !*note)
    return mend_errorf(err, errlen, "resolving a run needs a note saying what was done");
  if (mend__text_refused(E, note, "the note", err, errlen) ||
      mend__who_refused(E, who, err, errlen))
    return -1;
  E->refusal = MEND_REFUSED_STATE;
  if (mend__batch_held(E, "resolve", err, errlen)) return -1;
  if (stored_status(E, id, status, reason, sizeof status, err, errlen)) return -1;
  if (strcmp(status, "resolved") == 0)   /* resolved here, not committed yet: as once it is */
    return mend_errorf(err, errlen, "run %s is resolved: " RESOLVE_ONLY, id);
  if (strcmp(status, "needs_attention") != 0)
    return resolve_unavailable(E, id, who, note, record, take_now, err, errlen);
  /* As a retry does: under another process's lock what is committed may change before this
   * batch is (a resolve or a retry by another server): it is looked at again once it is. */
  if (record && !take_now && mend_store_has_write_lock(E->store)) return take_later(E, err, errlen);
  if (hold_status(E, id, "needs_attention", RESOLVE_ONLY, record, err, errlen)) return -1;
  double now = mend__entry_time(E, id);
  json_t *row = mend_store_run(E->store, id);
  const char *error = row ? json_string_value(json_object_get(row, "error")) : NULL;
  int attention = row ? json_is_true(json_object_get(row, "attention")) : 0;
  mend_store_repairing(E->store, 1);   /* a dead letter is nobody's: no lease to fence */
  if (mend_store_update_run(E->store, id, "resolved", error, attention, now, reason))
    mend__store_failed(E);
  json_decref(row);
  mend_history_rec h = {id, NULL, now, "run", "needs_attention", "resolved", 0, NULL,
                        -1, note, 0,   NULL};
  if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
  mend__operator_entry(E, NULL, id, "dlq resolve", who, note);
  mend_store_repairing(E->store, 0);
  if (mend_store_dlq_remove(E->store, id)) mend__store_failed(E);
  if (!repair_lost(E)) {   /* a resolve not written is heard of by no parent */
    mend__child_resolved(E, id, 2);   /* a parent waiting for it hears of it */
    if (record) note_resolved(E, id);
  }
  return repair_done(E, record, err, errlen);
}

int mend_engine_resolve(mend_engine *E, const char *id, const char *who, const char *note,
                        char *err, int errlen) {
  return resolve(E, id, who, note, 0, 0, err, errlen);
}

int mend_engine_resolve_record(mend_engine *E, const char *id, const char *who, const char *note,
                               int take_now, char *err, int errlen) {
  return resolve(E, id, who, note, 1, take_now, err, errlen);
}

/* Who asked for the cancel a run carries out now, named in its error and history as a cancel
 * done here names its canceller: the last `cancel requested by WHO` row of its history (read a
 * page at a time; the note of why it was not done where it was asked left out), into who. Not
 * found (a request from a database of an older mend): "an operator (requested)". */
void mend__cancel_requester(mend_engine *E, const char *id, char *who, int len) {
  snprintf(who, (size_t)len, "an operator (requested)");
  long after = 0;
  for (;;) {
    json_t *page = mend_store_history_page(E->store, id, after, TURNED_BACK_PAGE, 0);
    size_t n = json_is_array(page) ? json_array_size(page) : 0;
    for (size_t k = 0; k < n; k++) {
      json_t *row = json_array_get(page, k);
      const char *ev = json_string_value(json_object_get(row, "event"));
      const char *detail = json_string_value(json_object_get(row, "detail"));
      if (ev && detail && strcmp(ev, "operator") == 0 &&
          strncmp(detail, "cancel requested by ", 20) == 0)
        snprintf(who, (size_t)len, "%.*s", (int)who_len(detail + 20), detail + 20);
      json_int_t seq = json_integer_value(json_object_get(row, "seq"));
      if (seq > after) after = (long)seq;
    }
    json_decref(page);
    if (n < TURNED_BACK_PAGE) break;
  }
}

void mend__take_cancel_requests(mend_engine *E) {
  /* Most looks find none: asked of committed rows first, so that such a look neither waits for
   * the writer thread nor runs the open batch's records on the loop (a read's sync point). */
  if (mend_store_cancels_requested(E->store, E->owner) == 0) return;
  json_t *ids = mend_store_cancel_requests(E->store, E->owner);
  if (!ids) { mend__store_failed(E); return; }
  size_t i;
  json_t *id;
  json_array_foreach(ids, i, id) {
    mend_run *r = mend__repair_find_run(E, json_string_value(id));
    char err[300];
    /* A parked run brought back for it has honoured the request already as it came back
     * (recover.c, mend__carry_on): no second cancel, and no refusal of one to log. */
    char who[300];
    if (r && r->status == MEND_RUN_RUNNING) mend__cancel_requester(E, r->id, who, sizeof who);
    if (r && r->status == MEND_RUN_RUNNING && mend__cancel_now(r, who, err, sizeof err))
      mend_engine_log_line(E, "warn", r->id, NULL, 0, "operator", err);
  }
  json_decref(ids);
}
