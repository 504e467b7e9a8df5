/*
 * events: steps that wait for a named event instead of executing (`wait_for`, SPEC section
 * 11). Owns sending an event to a run's inbox (by run id or run key), a step's wait (its
 * status, its due time for the timeout), taking the oldest event of that name from the inbox
 * as the step's result (or the one a look read ahead found: lookahead.c asks, this takes), and
 * a worker's look for events other processes sent to the runs it holds. Must never: consume an
 * event in a batch other than the one that records the step's success (both commit or neither);
 * consume one twice, or out of the order sent; keep a coroutine for a waiting run.
 */
#include "engine_int.h"

#include <mend.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "util.h"

static mend_run *find_run(mend_engine *E, const char *id) { return mend__find_run(E, id); }

static int take_event_as(mend_run *r, int i, int committed);

/* A running run that fails: a branch (an item) of its group (map) failed for good and it
 * compensates once what is in flight ends (the other branches stop first). r: held here, whose
 * group says so while it stops; else row, the store's view of it, whose branch or item rows
 * (named GROUP/BRANCH) say so. A group's own row is not read: retried from the dead-letter
 * queue, a group's branches run again while its row still says failed. */
static int failing(mend_run *r, json_t *row) {
  if (r) {
    struct mend_group *G = MEND_COLD(r, group);
    return G && G->stopping;
  }
  size_t k;
  json_t *st;
  json_array_foreach(json_object_get(row, "steps"), k, st) {
    const char *s = json_string_value(json_object_get(st, "status"));
    const char *name = json_string_value(json_object_get(st, "name"));
    if (s && strcmp(s, "failed") == 0 && name && strchr(name, '/')) return 1;
  }
  return 0;
}

/* A running run whose cancel was asked for and is not done yet: it compensates as the holder
 * takes the request. r held here: kept until its own code yields (a cancel it cascaded), or
 * asked by another process since this engine's last look; else row says so. Whether any cancel
 * of this engine's runs was asked is read of the committed rows at most every CANCELS_FRESH_NS
 * (some 16k instructions on SQLite, a round trip on PostgreSQL: an eighth of a send's cost if
 * asked at each), then which ones only when some were. A failed read is no request. */
#define CANCELS_FRESH_NS 20000000u
static int cancel_pending(mend_engine *E, const char *id, mend_run *r, json_t *row) {
  if (!r) return json_is_true(json_object_get(row, "cancel_requested"));
  if (MEND_COLD(r, cancel_by)) return 1;
  uint64_t now = uv_hrtime();
  if (!E->cancels_asked_at || now - E->cancels_asked_at > CANCELS_FRESH_NS) {
    E->cancels_some = mend_store_cancels_requested(E->store, E->owner) != 0;
    E->cancels_asked_at = now;
  }
  if (!E->cancels_some) return 0;
  json_t *ids = mend_store_cancel_requests(E->store, E->owner);
  size_t k;
  json_t *v;
  int found = 0;
  json_array_foreach(ids, k, v) found |= strcmp(json_string_value(v), id) == 0;
  json_decref(ids);
  return found;
}

const char *mend__run_deaf(mend_engine *E, const char *id, mend_run *r, json_t *row,
                           int failing_too) {
  if (failing_too && failing(r, row))
    return "failing (a step failed for good: it compensates next)";
  if (cancel_pending(E, id, r, row))
    return "being cancelled (its cancel was asked for: it compensates next)";
  return NULL;
}

/* The run, or a lane of its group, that waits for event `name` (any event when NULL; a name of
 * mend's own, "mend.token:<step>" or "mend.child:<step>", for the steps that wait for a token
 * or a child, each of which looks for its own): it takes it from the inbox. committed: the
 * event is durable, and the run alone (no lanes, which could take the same one in this batch)
 * looks among committed events for it. */
static void wake_waiting(mend_run *r, const char *name, int committed) {
  for (int k = -1; ; k++) {
    mend_run *w = k < 0 ? r : mend__lane_at(r, k);
    if (!w) break;
    if (w->wait_kind != WAIT_EVENT || w->cur < 0 || w->cur >= w->wf->nsteps) continue;
    /* A named event wakes the steps that wait for that name; the look at the inbox (no
     * name) also wakes those waiting for a token's outcome or a child's end, which come
     * through the inbox under names of their own. */
    const mend_step_def *d = &w->wf->steps[w->cur];
    int outside = d->wait_token || d->child;
    if (name ? (d->wait_for && strcmp(d->wait_for, name) == 0) ||
               (outside && strncmp(name, "mend.", 5) == 0)
             : d->wait_for || outside)
      take_event_as(w, w->cur, committed && k < 0 && !MEND_COLD(r, group));
  }
}

void mend__wake_waiting(mend_run *r, const char *name) { wake_waiting(r, name, 0); }

/* Takes the oldest event the waiting step i waits for, if the inbox has one: the consumption
 * is recorded in this batch with the step's success. 1 taken, 0 none (or the store failed). */
int mend__take_event(mend_run *r, int i) { return take_event_as(r, i, 0); }

/* Whether the committed rows of r's inbox answer "its oldest event named `name`" as its own
 * open batch would, for an event that is there, once they are read after r's last take is
 * durable: read-your-own-writes only asks for the writes that change that answer, and the
 * engine knows each of them.
 * - Takes: r took none in a batch not yet durable (took_seq) when the rows are read, so none it
 *   took is seen as new: the caller's to check, now for a read now, at its send for a look
 *   (lookahead.c). A lane, or a run with lanes, shares its inbox with others that take from
 *   it: not here.
 * - Events sent to r not yet durable are only those a ticking host sent into the batch
 *   (send_in_batch): each reaches r through mend__deliver_sent_event once durable, which
 *   looks again. Every other send (the host's outside a tick, a token's use) commits before it
 *   returns. An event of r's in no committed row is therefore one r looks for again later;
 *   missing it now only takes it one batch later, never twice nor out of order.
 * - Names of the engine's own ("mend.child:..." and such) are put in the batch by the engine
 *   (a child's end): those are read with the batch. */
static int inbox_committed_is_own(const mend_run *r, const char *name) {
  return !r->lane && !MEND_COLD(r, group) && strncmp(name, "mend.", 5) != 0;
}

/* committed: the caller lets the inbox be read among committed events, on the store's own
 * connection for that, so that a tick does not run the open batch's writes on its thread to see
 * them (1-3 ms for a few records); done only where inbox_committed_is_own says it answers the
 * same. */
static int take_event_as(mend_run *r, int i, int committed) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  /* The other waits for the world come through the inbox too (tokens.c, child.c). */
  if (def->wait_token) return mend__take_token(r, i);
  if (def->child) return mend__take_child(r, i);
  if (st->status != MEND_STEP_WAITING || r->status != MEND_RUN_RUNNING || !def->wait_for) return 0;
  long long seq;
  char *payload, *key;
  int own = committed && inbox_committed_is_own(r, def->wait_for);
  /* A later tick takes what the look finds, sent once r's takes are durable: a wait that begins
   * as the step before takes its event (a look's answer picked up) looks there too. */
  if (own && mend__look_ahead(r, i)) return 0;
  own = own && r->took_seq <= mend_store_durable_seq(E->store);
  int found =
      own ? mend_store_next_committed_event(E->store, r->id, def->wait_for, &seq, &payload, &key)
          : 2;
  if (found == 2)
    found = mend_store_next_event(E->store, r->id, def->wait_for, &seq, &payload, &key);
  if (found < 0) mend__store_failed(E);
  if (found <= 0) return 0;
  return mend__take_looked_event(r, i, seq, payload, key);
}

/* Whether event seq came after the deadline of step i's wait: only asked of a take past that
 * deadline (no worker held the run when it passed, or its timer has not fired yet), which
 * takes an event sent in time however late it reads it, and none sent after. The times are
 * the sender's clock and the waiting engine's; a store that cannot tell is not refused. */
static int sent_late(mend_run *r, int i, long long seq) {
  const step_rt *st = &r->steps[i];
  if (st->due < 0 || mend_engine_now(r->E) <= st->due) return 0;
  double sent;
  int rc = mend_store_event_sent(r->E->store, seq, &sent);
  if (rc < 0) mend__store_failed(r->E);
  return rc == 1 && sent > st->due;
}

/* Takes event seq as step i's result (payload and key are the step's from now on, freed when
 * it does not take it): 1, or 0 when it came after the wait's deadline, which the step's
 * timeout decides (the event stays in the inbox for a later wait of its name). */
int mend__take_looked_event(mend_run *r, int i, long long seq, char *payload, char *key) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  if (sent_late(r, i, seq)) {
    free(payload);
    free(key);
    return 0;
  }
  mend_timer_disarm(&E->timers, &r->wait);
  r->wait_kind = WAIT_NONE;
  if (mend_store_consume_event(E->store, r->id, seq, def->name, mend_engine_now(E)))
    mend__store_failed(E);
  r->took_seq = mend_store_open_seq(E->store);
  json_t *what =
      json_pack("{s:s, s:s?, s:I}", "name", def->wait_for, "key", key, "seq", (json_int_t)seq);
  /* json_dumps was a third of taking an event inside a tick; the same bytes from a kept buffer */
  const char *detail = what ? mend_flatjson(what, &E->event_detail) : NULL;
  char *own = what && !detail ? json_dumps(what, JSON_COMPACT) : NULL;
  json_decref(what);
  mend__history(r, def->name, "event", NULL, NULL, st->attempts, NULL, -1, detail ? detail : own);
  free(own);
  char msg[300];
  snprintf(msg, sizeof msg, "event %s%s%s consumed", def->wait_for, key ? " key " : "",
           key ? key : "");
  mend_engine_log_line(E, "info", r->id, def->name, st->attempts, "event", msg);
  free(key);
  st->due = -1;
  free(st->result);
  st->result = payload;
  mend__set_str(&st->error, NULL);
  mend__step_to(r, i, MEND_STEP_SUCCEEDED, NULL, -1, NULL);
  mend__set_result(r, i);
  /* the next step's writes join this batch; its execute waits for it */
  mend__after_success(r, i, 0);
  if (E->turn_deadline > 0) E->tick_delivered++;
  return 1;
}

/* Step i, pending, waits for its event: from now on only its row and, with a timeout, a timer
 * say so. The inbox may have the event already. */
void mend__await_event(mend_run *r, int i) {
  mend_engine *E = r->E;
  step_rt *st = &r->steps[i];
  const mend_step_def *def = &r->wf->steps[i];
  int timed = def->timeout > 0 && !isinf(def->timeout);
  st->attempts++;
  st->due = timed ? mend_engine_now(E) + def->timeout : -1;
  mend__step_to(r, i, MEND_STEP_WAITING, NULL, timed ? def->timeout : -1, def->wait_for);
  /* Often in a tick's piece (a host call's answer resumed the step before): among committed
   * events where that answers the same (inbox_committed_is_own). */
  if (take_event_as(r, i, 1)) return;
  r->wait_kind = WAIT_EVENT;
  if (timed) mend__arm(r, &r->wait, st->due);
  else mend__park_soon(r);
}

/* The wait's timeout came: an event sent at the last moment still counts. 1 if one was taken;
 * 0: the step failed with a timeout (the caller's policy decides). */
int mend__event_due(mend_run *r, int i, char *msg, size_t len) {
  if (r->wf->steps[i].wait_token) return mend__token_due(r, i, msg, len);
  /* A sent event not durable yet would reach the run later, but the timeout decides now: the
   * batch is read, as the wait's last look must see everything sent before its end. */
  if (mend__take_event(r, i)) return 1;
  const mend_step_def *def = &r->wf->steps[i];
  snprintf(msg, len, "no event %s within %g s", def->wait_for, def->timeout);
  return 0;
}

const char *mend__awaits(const mend_run *r, int i) {
  const mend_step_def *def = &r->wf->steps[i];
  if (r->steps[i].status != MEND_STEP_WAITING) return NULL;
  return def->wait_token ? "token" : def->child ? def->child : def->wait_for;
}

/* ---------------------------------------------------------------- sending */

/* An event a ticking host sent, recorded in batch `seq`: its run looks for it once that batch
 * is durable (the write-ahead rule), in a pump turn, within a tick's budget. */
struct mend_sent_event {
  struct mend_sent_event *next;
  unsigned long seq;
  char run_id[MEND_RUN_ID_LEN];
  char name[];
};

/* A ticking host's signal joins the batch the writer thread writes next instead of committing
 * (and syncing) on the host's thread, when the run is in memory here: whether it may take
 * events is known without a read. A parked run, one held elsewhere, one named by its key, an
 * event the store does not record (PostgreSQL: one without a key) or an engine that does not
 * tick take the path that reads and commits. */
static int joins_batch(mend_engine *E, const mend_run *r) {
  return r && E->writer && E->tick_writer_tried && mend_store_can_record_event(E->store);
}

/* The event reaches its run (if this engine holds it) once its batch is durable. */
static void queue_sent(mend_engine *E, struct mend_sent_event *ev, const char *id,
                       const char *name, size_t nlen) {
  ev->next = NULL;
  ev->seq = mend_store_open_seq(E->store);
  snprintf(ev->run_id, sizeof ev->run_id, "%s", id);
  memcpy(ev->name, name, nlen);
  if (E->sent_tail) E->sent_tail->next = ev;
  else E->sent_head = ev;
  E->sent_tail = ev;
}

/* send_in_batch: the store would not record it (the caller sends and commits it). */
#define NOT_RECORDED 1

static int send_in_batch(mend_engine *E, const char *id, const char *name, const char *text,
                         const char *key, const char *who, char *err, int errlen) {
  size_t nlen = strlen(name) + 1;
  struct mend_sent_event *ev = malloc(sizeof *ev + nlen);
  if (!ev) {
    mend_errorf(err, errlen, "out of memory");
    return MEND_EVENT_ESTORE;
  }
  int recorded = mend_store_record_event(E->store, id, name, text, key, mend_engine_now(E), who);
  if (recorded == 1) {
    free(ev);
    return NOT_RECORDED;
  }
  if (recorded) {
    free(ev);
    mend__store_failed(E);
    mend_errorf(err, errlen, "%s", E->errmsg[0] ? E->errmsg : mend_store_errmsg(E->store));
    return MEND_EVENT_ESTORE;
  }
  queue_sent(E, ev, id, name, nlen);
  char msg[300];
  snprintf(msg, sizeof msg, "event %s%s%s sent with the next batch", name, key ? " key " : "",
           key ? key : "");
  mend_engine_log_line(E, "info", id, NULL, 0, "event", msg);
  mend__kick(E);
  return 0;
}

static int send_keyed_in_batch(mend_engine *E, const char *id, const char *name,
                               const char *text, const char *key, const char *who, int *ticket,
                               char *err, int errlen) {
  size_t nlen = strlen(name) + 1;
  struct mend_sent_event *ev = malloc(sizeof *ev + nlen);
  if (!ev) {
    mend_errorf(err, errlen, "out of memory");
    return MEND_EVENT_ESTORE;
  }
  int recorded = mend_store_record_keyed_event(E->store, id, name, text, key, mend_engine_now(E),
                                               who, ticket);
  if (recorded) {
    free(ev);
    if (recorded == 1) return NOT_RECORDED;
    mend__store_failed(E);
    mend_errorf(err, errlen, "%s", E->errmsg[0] ? E->errmsg : mend_store_errmsg(E->store));
    return MEND_EVENT_ESTORE;
  }
  queue_sent(E, ev, id, name, nlen);   /* a duplicate: the run finds nothing new, and waits on */
  char msg[300];
  snprintf(msg, sizeof msg, "event %s key %s sent with the next batch, unless sent before", name,
           key);
  mend_engine_log_line(E, "info", id, NULL, 0, "event", msg);
  mend__kick(E);
  return MEND_EVENT_LATER;
}

/* Whether delivering the oldest sent event may read through the store: bringing a parked run
 * back does; a run in memory as its pieces do (pump.c). */
int mend__sent_event_needs_store(mend_engine *E) {
  const struct mend_sent_event *ev = E->sent_head;
  mend_run *r = find_run(E, ev->run_id);
  return r ? mend__piece_needs_store(r) : mend__parked(E, ev->run_id);
}

int mend__sent_event_ready(const mend_engine *E) {
  return E->sent_head && E->sent_head->seq <= mend_store_durable_seq(E->store);
}

/* 1 when run id's inbox has an event sent with `key`, 0 when not, -1 when the store failed. */
static int key_in_inbox(mend_engine *E, const char *id, const char *key) {
  json_t *inbox = mend_store_inbox(E->store, id);
  if (!inbox) return -1;
  size_t i;
  json_t *ev;
  int seen = 0;
  json_array_foreach(inbox, i, ev) {
    const char *k = json_string_value(json_object_get(ev, "key"));
    if (k && strcmp(k, key) == 0) seen = 1;
  }
  json_decref(inbox);
  return seen;
}

/* The oldest event sent in a batch now durable reaches its run, if it waits for it (a key sent
 * before was kept once by the store: the run then finds no new event and waits on). */
void mend__deliver_sent_event(mend_engine *E) {
  struct mend_sent_event *ev = E->sent_head;
  E->sent_head = ev->next;
  if (!E->sent_head) E->sent_tail = NULL;
  mend_run *r = find_run(E, ev->run_id);
  if (!r && mend__unpark(E, ev->run_id, "its event came") > 0) r = find_run(E, ev->run_id);
  if (r) wake_waiting(r, ev->name, 1);
  free(ev);
}

void mend__forget_sent_events(mend_engine *E) {
  for (struct mend_sent_event *ev = E->sent_head, *next; ev; ev = next) {
    next = ev->next;
    free(ev);
  }
  E->sent_head = E->sent_tail = NULL;
}

static int send_event(mend_engine *E, const char *id, const char *run_key, const char *name,
                      const char *payload, const char *key, const char *who,
                      char run_id_out[MEND_RUN_ID_LEN], int record, int *ticket, char *err,
                      int errlen);

int mend_engine_send_event(mend_engine *E, const char *id, const char *run_key, const char *name,
                           const char *payload, const char *key, const char *who,
                           char run_id_out[MEND_RUN_ID_LEN], char *err, int errlen) {
  return send_event(E, id, run_key, name, payload, key, who, run_id_out, 0, NULL, err, errlen);
}

int mend_engine_record_event(mend_engine *E, const char *id, const char *run_key, const char *name,
                             const char *payload, const char *key, const char *who,
                             char run_id_out[MEND_RUN_ID_LEN], int *ticket, char *err,
                             int errlen) {
  return send_event(E, id, run_key, name, payload, key, who, run_id_out, 1, ticket, err, errlen);
}

static int send_event(mend_engine *E, const char *id, const char *run_key, const char *name,
                      const char *payload, const char *key, const char *who,
                      char run_id_out[MEND_RUN_ID_LEN], int record, int *ticket, char *err,
                      int errlen) {
  char found_id[MEND_RUN_ID_LEN];
  if (E->broken) {
    mend_errorf(err, errlen, "%s", E->errmsg);
    return MEND_EVENT_ESTORE;
  }
  if (!name || !*name) {
    mend_errorf(err, errlen, "an event needs a name");
    return MEND_EVENT_EINVAL;
  }
  if (mend_event_name_reserved(name)) {
    /* Sent from outside, it would complete a step without its token, or end it before its
     * child. */
    mend_errorf(err, errlen, "the event name \"%.100s\" is mend's own (a token's outcome, a "
                "child's end): mend.token and mend.child, alone or with \":STEP\", cannot be "
                "sent", name);
    return MEND_EVENT_EINVAL;
  }
  if (key && !*key) {
    /* every later event sent with it would be a duplicate of the first */
    mend_errorf(err, errlen, "the event key is empty: give a key, or none");
    return MEND_EVENT_EINVAL;
  }
  if (strlen(name) > MEND_NAME_MAX || (key && strlen(key) > MEND_KEY_MAX) ||
      (run_key && strlen(run_key) > MEND_KEY_MAX)) {
    mend_errorf(err, errlen, "an event's name (at most %d bytes, MEND_NAME_MAX), its key or its "
                "run key (at most %d, MEND_KEY_MAX) is too long", MEND_NAME_MAX, MEND_KEY_MAX);
    return MEND_EVENT_EINVAL;
  }
  if (id && !*id) {
    /* `mend signal "$ID" ev` with ID unset: "no run " would name nothing */
    mend_errorf(err, errlen, "the run id is empty: give the run's id, or its key");
    return MEND_EVENT_EINVAL;
  }
  if (!id && run_key && !*run_key) {
    /* `--run-key "$ORDER"` with ORDER unset: the run was named, by a key that names none */
    mend_errorf(err, errlen, "the run key is empty: give the run's key, or its id");
    return MEND_EVENT_EINVAL;
  }
  if (!id && !run_key) {
    mend_errorf(err, errlen, "an event needs a run: its id or its run key");
    return MEND_EVENT_EINVAL;
  }
  /* Stored (name, key, who) or looked up (a run id or key: PostgreSQL refuses the query) */
  if (mend__text_refused(E, name, "the event's name", err, errlen) ||
      mend__text_refused(E, key, "the event's key", err, errlen) ||
      mend__text_refused(E, id, "the run id", err, errlen) ||
      mend__text_refused(E, run_key, "the run key", err, errlen) ||
      mend__who_refused(E, who, err, errlen))
    return MEND_EVENT_EINVAL;
  char *text = NULL;
  if (payload && strlen(payload) > MEND_EVENT_DATA_MAX) {
    /* measured before it is parsed: a sender's 100 MB is not read, nor stored twice */
    mend_errorf(err, errlen, "the event's payload is %zu bytes of JSON, over the limit of %d "
                "(MEND_EVENT_DATA_MAX, 1 MiB): keep a large document elsewhere and send its "
                "reference", strlen(payload), MEND_EVENT_DATA_MAX);
    return MEND_EVENT_EINVAL;
  }
  if (payload) {
    char jerr[300];
    json_t *v = mend_json_load_in(payload, strlen(payload), 0, "the event's payload", jerr,
                                  sizeof jerr);
    if (!v) {
      mend_errorf(err, errlen, "%s", jerr);
      return MEND_EVENT_EINVAL;
    }
    text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    if (!text) {
      mend_errorf(err, errlen, "out of memory");
      return MEND_EVENT_ESTORE;
    }
  }
  int rc = 0;
  if (!id) {
    /* Recorded, for a caller that waits for its batch: the run is a committed one (a start not
     * yet committed has not been answered to anyone), looked up without the write lock. */
    int f = record ? mend_store_find_run_key_committed(E->store, run_key, found_id, sizeof found_id)
                   : mend_store_find_run_key(E->store, run_key, found_id, sizeof found_id);
    if (f < 0) rc = MEND_EVENT_ESTORE;
    else if (f == 0) rc = MEND_EVENT_ENOTFOUND;
    if (rc) {
      if (rc == MEND_EVENT_ESTORE) mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
      else mend_errorf(err, errlen, "no run with key %s", run_key);
      free(text);
      return rc;
    }
    id = found_id;
  }
  if (strlen(id) >= MEND_RUN_ID_LEN) {
    mend_errorf(err, errlen, "no run %s", id);
    free(text);
    return MEND_EVENT_ENOTFOUND;
  }
  mend_run *r = find_run(E, id);
  const char *status = NULL;
  json_t *row = NULL;
  if (r) {
    status = mend_run_status_name(r->status);
  } else {
    /* A view: while another process's write lock keeps the write log from being flushed, the
     * committed run (query.c), and no wait for the lock. */
    row = mend_store_run(E->store, id);
    if (!row && mend_store_not_found(E->store)) {
      mend_errorf(err, errlen, "no run %s", id);
      free(text);
      return MEND_EVENT_ENOTFOUND;
    }
    if (!row) {
      mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
      free(text);
      return MEND_EVENT_ESTORE;
    }
    status = json_string_value(json_object_get(row, "status"));
  }
  /* A run going back, or ended, waits for nothing any more: the event would never be taken.
   * Nor does a running one that fails (a branch or an item failed for good, the others stop)
   * or whose cancel was asked for: it compensates next. But a key it was sent with before is that
   * event again (a client repeating a send whose answer it lost, after the run went on to its
   * end): it was sent, as a running run's says. */
  const char *deaf = status && strcmp(status, "running") == 0 ? mend__run_deaf(E, id, r, row, 1)
                                                                : NULL;
  if (deaf) status = "failing";
  if (status && strcmp(status, "running") != 0 && key) {
    int seen = key_in_inbox(E, id, key);
    if (seen != 0) {
      json_decref(row);
      free(text);
      if (seen < 0) mend_errorf(err, errlen, "%s", mend_store_errmsg(E->store));
      if (seen > 0 && run_id_out) snprintf(run_id_out, MEND_RUN_ID_LEN, "%s", id);
      return seen < 0 ? MEND_EVENT_ESTORE : 1;
    }
  }
  if (!status || strcmp(status, "running") != 0) {
    mend_run_status rs;
    int ended = status && mend_run_status_parse(status, &rs) == 0 && mend_run_status_final(rs);
    if (deaf)
      mend_errorf(err, errlen, "run %s is %s: it waits for no event any more", id, deaf);
    else
      mend_errorf(err, errlen, ended ? "run %s has ended (%s): events go only to running runs"
                                     : "run %s is %s: events go only to running runs",
                  id, status ? status : "?");
    json_decref(row);
    free(text);
    return MEND_EVENT_EENDED;
  }
  json_decref(row);
  if (run_id_out) snprintf(run_id_out, MEND_RUN_ID_LEN, "%s", id);
  /* One with a key, for a caller that waits for its batch, joins it too: whether its key was
   * sent before is found by its insert as the batch is written, and told by its ticket once the
   * batch is durable (a store without such tickets, or with all of them taken, sends it now). */
  if (ticket && key) {
    int rc = send_keyed_in_batch(E, id, name, text, key, who, ticket, err, errlen);
    if (rc != NOT_RECORDED) {
      free(text);
      return rc;
    }
  }
  /* An event without a key to a run held elsewhere joins the batch too, when its caller waits
   * for the batch: it waits for no lock then. */
  if (joins_batch(E, r) || (record && !r && !key && mend_store_can_record_event(E->store))) {
    int rc = send_in_batch(E, id, name, text, key, who, err, errlen);
    if (rc != NOT_RECORDED) {
      free(text);
      return rc;
    }
  }
  /* A send is an answer to its caller, as a start is: one that commits now waits for another
   * process's lock up to the store's default busy wait, not the loop's own short one (two
   * workers' commits on one file made `mend signal` fail at 0.1 s). A recorded one stays
   * with the loop's: its caller (mend serve) must not hold its thread that long. */
  if (!record) mend_store_set_busy_wait(E->store, 0);
  int sent = mend_store_send_event(E->store, id, name, text, key, mend_engine_now(E), who);
  if (!record) mend_store_set_busy_wait(E->store, LOOP_BUSY_MS);
  if (sent < 0 && !record && mend_store_locked(E->store) && mend_store_can_record_event(E->store)) {
    /* Another process's write lock outlasted the busy wait before anything was written: the
     * event joins the batch the engine keeps, committed once the lock goes (mend.h), and the
     * caller is told of the lock; a key sent again is kept once. */
    char lock_msg[600];
    snprintf(lock_msg, sizeof lock_msg, "%s", mend_store_errmsg(E->store));
    int rc = send_in_batch(E, id, name, text, key, who, err, errlen);
    free(text);
    if (rc == NOT_RECORDED || rc == 0) {
      mend_errorf(err, errlen, "%s%s", lock_msg,
                  rc == 0
                      ? "; the event is kept and sent once the lock goes: do not send it again"
                      : "; nothing of this event was written: send it again once the lock goes");
      return rc == 0 ? MEND_EVENT_EDEFERRED : MEND_EVENT_ESTORE;
    }
    return rc;
  }
  free(text);
  if (record && sent >= 0) {
    /* In the open batch: the caller answers once it is durable, and a run held here that
     * waits for it takes it then (mend__deliver_sent_event), not before. */
    size_t nlen = strlen(name) + 1;
    struct mend_sent_event *ev = sent == 0 ? malloc(sizeof *ev + nlen) : NULL;
    if (sent == 0 && !ev) {
      mend_errorf(err, errlen, "out of memory");
      return MEND_EVENT_ESTORE;
    }
    if (ev) queue_sent(E, ev, id, name, nlen);
    char msg[300];
    snprintf(msg, sizeof msg, "event %s%s%s %s", name, key ? " key " : "", key ? key : "",
             sent == 1 ? "sent before: kept once" : "sent with the next batch");
    mend_engine_log_line(E, "info", id, NULL, 0, "event", msg);
    mend__kick(E);
    return sent;
  }
  /* Durable now, whoever holds the run: a worker elsewhere sees it at its next poll. */
  if (sent < 0 || mend__commit_now(E)) {
    mend__store_failed(E);
    mend_errorf(err, errlen, "%s", E->errmsg[0] ? E->errmsg : mend_store_errmsg(E->store));
    return MEND_EVENT_ESTORE;
  }
  char msg[300];
  snprintf(msg, sizeof msg, "event %s%s%s %s", name, key ? " key " : "", key ? key : "",
           sent == 1 ? "sent before: kept once" : "sent");
  mend_engine_log_line(E, "info", id, NULL, 0, "event", msg);
  /* Held here out of memory: back from the store, and on as if it had been in memory. */
  if (!r && sent == 0 && mend__unpark(E, id, "its event came") > 0) r = find_run(E, id);
  /* Held here and waiting for it: it goes on at once. */
  if (r && sent == 0) {
    wake_waiting(r, name, 0);
    mend__kick(E);
  }
  return sent;
}

/* ---------------------------------------------------------------- events from other processes */

static void note_run(void *ud, const char *id) {
  if (id) json_array_append_new((json_t *)ud, json_string(id));
}

/* A serving worker's look, each poll, for events sent since the last one: a range of the
 * inbox's primary key. The runs it holds that wait are woken, those parked brought back from
 * the store first; any other takes its event when it reaches its wait (or is rebuilt). */
void mend__take_events(mend_engine *E) {
  json_t *ids = json_array();
  if (!ids) return;
  long long last = mend_store_events_after(E->store, E->inbox_seen, 1000, note_run, ids);
  if (last < 0) {
    mend_engine_log_line(E, "warn", NULL, NULL, 0, "event", mend_store_read_errmsg(E->store));
    json_decref(ids);
    return;
  }
  E->inbox_seen = last;
  size_t k;
  json_t *id;
  json_array_foreach(ids, k, id) {
    mend_run *r = find_run(E, json_string_value(id));
    if (!r && mend__unpark(E, json_string_value(id), "its event came") > 0)
      r = find_run(E, json_string_value(id));
    if (r) wake_waiting(r, NULL, 0);
  }
  json_decref(ids);
}

/* From where a serving worker starts looking: the events sent before it are taken by runs as
 * they reach their waits or are rebuilt. */
int mend__events_start(mend_engine *E) {
  long long last = mend_store_last_event(E->store);
  if (last < 0) { mend__store_failed(E); return -1; }
  E->inbox_seen = last;
  E->inbox_started = 1;
  return 0;
}
