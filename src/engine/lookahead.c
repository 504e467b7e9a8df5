/*
 * lookahead: a ticking host's looks at committed inboxes, read ahead. Where a run in a tick
 * would look among committed events for the one its step waits for (events.c) and the store
 * can send that look without waiting for it (PostgreSQL, where it is a round trip; SQLite, where
 * a thread of the store's reads it, as a read on the tick's thread waited behind the writer's
 * and checkpointer's hold of a WAL mutex), the look is queued instead; the tick sends every
 * look it queued in one read as it ends, and a later tick takes the answer as it begins, each
 * run taking its event then, in that tick's batch. A look of a run whose last take is not
 * durable yet (its wait began as the step before took a looked event) stays queued until it is.
 * The frame's gap pays for the read, not the frame. Must never: let a tick wait for the
 * answer (a run or an advance may: they block anyway); take an event for a run whose step is
 * not the one that looked, or whose last take was not durable when the look went (the answer
 * could show an event it took as still there); lose a look (a look that failed is read the
 * way it was before, through the open batch); let a run park while its look is out.
 */
#include "engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct mend_look {
  struct mend_look *next;
  int step, attempts;
  unsigned long after;   /* the batch of the run's last take: the look is sent once durable */
  char run_id[MEND_RUN_ID_LEN];
  char name[];
};

int mend__look_ahead(mend_run *r, int i) {
  mend_engine *E = r->E;
  if (E->turn_deadline <= 0 || !mend_store_can_look_ahead(E->store)) return 0;
  const char *name = r->wf->steps[i].wait_for;
  size_t n = strlen(name) + 1;
  struct mend_look *l = malloc(sizeof *l + n);
  if (!l) return 0;   /* read now instead */
  l->next = NULL;
  l->step = i;
  l->attempts = r->steps[i].attempts;
  l->after = r->took_seq;
  memcpy(l->run_id, r->id, sizeof l->run_id);
  memcpy(l->name, name, n);
  if (E->look_queued_tail) E->look_queued_tail->next = l;
  else E->look_queued = l;
  E->look_queued_tail = l;
  E->look_nqueued++;
  if (r->look_out < 255) r->look_out++;
  return 1;
}

/* A look the store could not send or answer: its runs read through the batch instead, and the
 * host hears why once, until a look is answered again (a server away fails every tick's). */
static void look_trouble(mend_engine *E) {
  if (E->look_warned) return;
  E->look_warned = 1;
  char msg[1800];
  snprintf(msg, sizeof msg, "%s (runs read their events through the batch meanwhile)",
           mend_store_read_errmsg(E->store));
  mend_engine_log_line(E, "warn", NULL, NULL, 0, "event", msg);
}

/* The looks queued whose runs' takes are durable by `seq`, in order, taken off the queue; the
 * others stay queued for a later send (a run that took an event in a batch not yet durable
 * would see it in the committed rows as still there). */
static struct mend_look *take_sendable(mend_engine *E, unsigned long seq, int *n) {
  struct mend_look *head = NULL, **tail = &head, **p = &E->look_queued;
  E->look_queued_tail = NULL;
  *n = 0;
  while (*p) {
    struct mend_look *l = *p;
    if (l->after <= seq) {
      *p = l->next;
      l->next = NULL;
      *tail = l;
      tail = &l->next;
      ++*n;
      E->look_nqueued--;
    } else {
      E->look_queued_tail = l;
      p = &l->next;
    }
  }
  return head;
}

/* Puts looks taken by take_sendable back at the queue's head, in their order. */
static void requeue(mend_engine *E, struct mend_look *sent, int n) {
  struct mend_look *last = sent;
  while (last->next) last = last->next;
  last->next = E->look_queued;
  if (!E->look_queued) E->look_queued_tail = last;
  E->look_queued = sent;
  E->look_nqueued += n;
}

void mend__looks_send(mend_engine *E) {
  if (E->look_sent || !E->look_queued) return;
  /* before the send: the answer sees every batch durable by now */
  unsigned long seq = mend_store_durable_seq(E->store);
  int n;
  struct mend_look *sent = take_sendable(E, seq, &n);
  if (!sent) return;   /* every run's take is still in flight: a later tick's end sends them */
  const char **v = malloc(2 * (size_t)n * sizeof *v);
  int k = 0;
  for (struct mend_look *l = sent; v && l; l = l->next, k++) {
    v[k] = l->run_id;
    v[n + k] = l->name;
  }
  int rc = v ? mend_store_look_ahead(E->store, n, v, v + n) : -1;
  free(v);
  if (rc == 1) {   /* the store is not ready to send it: a later tick's end sends it */
    requeue(E, sent, n);
    return;
  }
  if (rc != 0 && v) look_trouble(E);
  E->look_seq = seq;
  E->look_failed = rc != 0;
  E->look_sent = sent;
}

typedef struct { char *run_id, *name, *payload, *key; long long seq; } look_row;
typedef struct { look_row *rows; int n, cap, oom; } look_rows;

static char *dup_or(const char *t, int *oom) {
  if (!t) return NULL;
  char *d = strdup(t);
  if (!d) *oom = 1;
  return d;
}

static void on_row(void *ud, const char *run_id, const char *name, long long seq,
                   const char *payload, const char *key) {
  look_rows *x = ud;
  if (x->oom) return;
  if (x->n == x->cap) {
    int cap = x->cap ? x->cap * 2 : 16;
    look_row *rows = realloc(x->rows, (size_t)cap * sizeof *rows);
    if (!rows) {
      x->oom = 1;
      return;
    }
    x->rows = rows;
    x->cap = cap;
  }
  look_row *w = &x->rows[x->n++];
  w->seq = seq;
  w->run_id = dup_or(run_id, &x->oom);
  w->name = dup_or(name, &x->oom);
  w->payload = dup_or(payload, &x->oom);
  w->key = dup_or(key, &x->oom);
}

static look_row *row_for(look_rows *x, const struct mend_look *l) {
  for (int i = 0; i < x->n; i++)
    if (x->rows[i].run_id && x->rows[i].name && strcmp(x->rows[i].run_id, l->run_id) == 0 &&
        strcmp(x->rows[i].name, l->name) == 0)
      return &x->rows[i];
  return NULL;
}

/* The run still waits where it looked: same step, same wait (an attempt more is a new wait). */
static int still_waiting(const mend_run *r, const struct mend_look *l) {
  return r->status == MEND_RUN_RUNNING && r->cur == l->step && r->wait_kind == WAIT_EVENT &&
         r->steps[l->step].status == MEND_STEP_WAITING &&
         r->steps[l->step].attempts == l->attempts;
}

int mend__looks_pick_up(mend_engine *E, int wait) {
  if (!E->look_sent) return 0;
  look_rows x = {0};
  int rc = E->look_failed ? -1 : mend_store_look_ahead_take(E->store, wait, on_row, &x);
  if (rc == 0) return 0;
  if (rc < 0 && !E->look_failed && !x.oom) look_trouble(E);
  if (rc > 0) E->look_warned = 0;
  if (x.oom) rc = -1;
  struct mend_look *l = E->look_sent;
  E->look_sent = NULL;
  int did = 0;
  for (struct mend_look *next; l; l = next) {
    next = l->next;
    mend_run *r = E->broken ? NULL : mend__find_run(E, l->run_id);
    if (r && r->look_out) r->look_out--;
    if (r && still_waiting(r, l)) {
      look_row *w = rc > 0 ? row_for(&x, l) : NULL;
      if (w && r->took_seq <= E->look_seq) {
        mend__take_looked_event(r, l->step, w->seq, w->payload, w->key);
        w->payload = w->key = NULL;   /* the step's now (freed by it if it came late) */
        free(w->run_id);              /* a second look of the run's finds the step moved on */
        w->run_id = NULL;
        did++;
      } else if (rc < 0 || (w && r->took_seq > E->look_seq)) {
        mend__take_event(r, l->step);   /* the way it was read before: through the batch */
        did++;
      }
    }
    free(l);
  }
  for (int i = 0; i < x.n; i++) {
    free(x.rows[i].run_id);
    free(x.rows[i].name);
    free(x.rows[i].payload);
    free(x.rows[i].key);
  }
  free(x.rows);
  return did;
}

void mend__looks_settle(mend_engine *E) {
  while (!E->broken && (E->look_sent || E->look_queued)) {
    mend__looks_send(E);
    if (!E->look_sent) {   /* the store cannot send it yet, or a take is not durable: read the
                            * other way, now */
      E->look_sent = E->look_queued;
      E->look_queued = E->look_queued_tail = NULL;
      E->look_nqueued = 0;
      E->look_failed = 1;
    }
    mend__looks_pick_up(E, 1);
  }
}

int mend__looks_out(const mend_engine *E) { return E->look_sent || E->look_queued; }

void mend__looks_forget(mend_engine *E) {
  struct mend_look *lists[2] = {E->look_sent, E->look_queued};
  for (int k = 0; k < 2; k++)
    for (struct mend_look *l = lists[k], *next; l; l = next) {
      next = l->next;
      free(l);
    }
  E->look_sent = E->look_queued = E->look_queued_tail = NULL;
  E->look_nqueued = 0;
}
