/*
 * group: parallel groups (SPEC section 12), and the lanes that maps run on too. Owns a run's
 * lanes, one per branch (or item) in flight, each a mend_run of its own for an attempt's state
 * (coroutine, timers, breaker slot) over the run's shared steps, so that saga.c and attempt.c
 * drive a branch as they drive a step; which branch starts when (at most max_concurrency at
 * once, those begun before a restart first); the group's end (its result, a table by branch
 * name) or its failure (no new attempt once a branch failed for good; attempts in flight end
 * and are recorded first); the order of completion that compensation undoes in reverse, read
 * back from the history after a restart, with when(ctx)'s answers. Maps, groups over a list,
 * are map.c's. Must never: write a row for a lane that is not its run's (rows are the run's,
 * through step_to and history); leave a lane armed or queued once its run is gone.
 */
#include "engine_int.h"

#include <jansson.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"
#include "util.h"

static int is_map(const mend_run *r, int g) { return r->wf->steps[g].map_ref != LUA_NOREF; }

struct mend_group *mend__group_of(mend_run *r) {
  if (MEND_COLD(r, group)) return r->cold->group;
  struct mend_group *G = mend__run_cold(r) ? calloc(1, sizeof *G) : NULL;
  int *done = G ? calloc((size_t)r->wf->nsteps, sizeof *done) : NULL;
  if (!done) {
    free(G);
    mend__breakdown(r->E, "out of memory for the parallel group of run %s", r->id);
    return NULL;
  }
  G->g = -1;
  G->done_seq = done;
  r->cold->group = G;
  return G;
}

mend_run *mend__lane_at(mend_run *r, int k) {
  struct mend_group *G = MEND_COLD(r, group);
  return G && k < G->nlanes ? G->lanes[k] : NULL;
}

static mend_run *new_lane(mend_run *r) {
  struct mend_group *G = r->cold->group;
  mend_run **more = realloc(G->lanes, (size_t)(G->nlanes + 1) * sizeof *more);
  mend_run *l = more ? calloc(1, sizeof *l) : NULL;
  if (more) G->lanes = more;
  if (l && !mend__run_cold(l)) {
    free(l);
    l = NULL;
  }
  if (!l) {
    mend__breakdown(r->E, "out of memory for a branch of run %s", r->id);
    return NULL;
  }
  l->E = r->E;
  l->wf = r->wf;
  l->steps = r->steps;
  l->status = MEND_RUN_RUNNING;
  l->input_ref = r->input_ref;
  l->results_ref = r->results_ref;
  l->ref_shard = r->ref_shard;
  l->fail_step = -1;
  l->cur = -1;
  l->cold->parent = r;
  l->lane = 1;
  l->cold->item = 0;
  l->cold->row_base = 0;
  memcpy(l->id, r->id, sizeof l->id);
  mend_timer_init(&l->wait, mend__on_wait);
  G->lanes[G->nlanes++] = l;
  return l;
}

static void start_branch(mend_run *l, int b) {
  mend_run *r = l->cold->parent;
  l->wf = r->wf;
  l->steps = r->steps;
  l->cold->item = 0;
  l->cold->row_base = 0;
  free(l->cold->item_name);
  l->cold->item_name = NULL;
  l->status = MEND_RUN_RUNNING;
  mend__resume_lane(l, b);
}

/* Sets a lane going on branch b (or its item) from where its row says it stands (a restart
 * finds branches waiting, sleeping or running). Its first move waits for the batch that holds
 * the group's `running`. */
void mend__resume_lane(mend_run *l, int b) {
  step_rt *st = &l->steps[b];
  double now = mend_engine_now(l->E);
  l->cur = b;
  l->wait_kind = WAIT_NONE;
  switch (st->status) {
    case MEND_STEP_RETRY_WAIT:
    case MEND_STEP_BREAKER_OPEN:
    case MEND_STEP_SLEEPING:
      l->wait_kind = st->status == MEND_STEP_RETRY_WAIT ? WAIT_RETRY
                   : st->status == MEND_STEP_BREAKER_OPEN ? WAIT_BREAKER : WAIT_STEP_SLEEP;
      mend__arm(l, &l->wait, st->due > now ? st->due : now);
      break;
    case MEND_STEP_WAITING:
      l->wait_kind = WAIT_EVENT;
      if (st->due >= 0) mend__arm(l, &l->wait, st->due > now ? st->due : now);
      mend__queue(l, ACT_ADVANCE);
      break;
    default:
      mend__queue(l, ACT_ADVANCE);
  }
}

int mend__settled(mend_step_status s) {
  return s == MEND_STEP_SUCCEEDED || s == MEND_STEP_SKIPPED || s == MEND_STEP_FAILED;
}

/* Starts the branches a lane is free for, then settles the group once no lane is busy. */
mend_run *mend__idle_lane(mend_run *r) {
  struct mend_group *G = r->cold->group;
  for (int k = 0; k < G->nlanes; k++)
    if (G->lanes[k]->cur < 0 && !G->lanes[k]->queued) return G->lanes[k];
  return new_lane(r);
}

static void pump(mend_run *r) {
  struct mend_group *G = r->cold->group;
  int g = G->g;
  const mend_step_def *def = &r->wf->steps[g];
  int busy = 0;
  for (int k = 0; k < G->nlanes; k++) busy += G->lanes[k]->cur >= 0;
  if (is_map(r, g)) {
    mend__map_pump(r, busy);
    return;
  }
  /* Branches begun before a restart first: they held the slots then. A group stopping since
   * before the restart starts only those found running (their calls may have had effects: they
   * end and are recorded); the others that had begun go back to pending, as stop_lane does. */
  for (int pass = 0; pass < (G->stopping ? 1 : 2) && !r->E->broken; pass++)
    for (int b = g + 1; b <= g + def->nbranches && busy < def->max_concurrency; b++) {
      const step_rt *st = &r->steps[b];
      int begun = st->status != MEND_STEP_PENDING || st->attempts > 0 || st->slept;
      if (mend__settled(st->status) || begun != (pass == 0)) continue;
      int taken = 0;
      for (int k = 0; k < G->nlanes; k++)
        taken |= G->lanes[k]->cur == b && !G->lanes[k]->cold->item;
      if (taken) continue;
      if (G->stopping && st->status != MEND_STEP_RUNNING &&
          !(st->status == MEND_STEP_WAITING &&
            (r->wf->steps[b].child || r->wf->steps[b].wait_token))) {
        if (st->status != MEND_STEP_PENDING) {
          r->steps[b].due = -1;
          mend__step_to(r, b, MEND_STEP_PENDING, NULL, -1,
                        "stopped: another branch failed for good");
        }
        continue;
      }
      mend_run *l = mend__idle_lane(r);
      if (!l) return;
      start_branch(l, b);
      busy++;
    }
  if (busy == 0 && !r->E->broken) mend__group_settle(r);
}

/* A group taken up again after a restart in which a branch (or an item) had failed for good
 * already: it is stopping, as it was, so that no new attempt starts and it fails when its
 * lanes in flight (those found running go again with their keys) have ended, with the kind,
 * severity and stop the branch's row keeps (how it failed decides how the run ends). */
static void restore_stopping(mend_run *r, int g) {
  struct mend_group *G = r->cold->group;
  struct map_state *ms = is_map(r, g) ? mend__map_of(r, g) : NULL;
  int n = ms ? ms->n : r->wf->steps[g].nbranches;
  for (int k = 0; k < n; k++) {
    const step_rt *st = ms ? &ms->items[k] : &r->steps[g + 1 + k];
    if (st->status != MEND_STEP_FAILED) continue;
    G->stopping = 1;
    G->fail_branch = ms ? k : g + 1 + k;
    G->info = (mend_error_info){.kind = (mend_error_kind)st->err_kind, .retry_after = -1,
                                .severity = (int)st->err_severity, .stopped = st->err_stopped};
    G->fail_msg = mend_dupstr(st->error ? st->error : "failed for good before a restart");
    return;
  }
}

void mend__group_forward(mend_run *r, int g) {
  struct mend_group *G = mend__group_of(r);
  if (!G) return;
  step_rt *st = &r->steps[g];
  const mend_step_def *def = &r->wf->steps[g];
  if (st->status == MEND_STEP_FAILED) {
    /* Retried from the dead-letter queue: every branch that failed goes again with fresh
     * attempts (the one the retry named is pending already), and a branch's old end no longer
     * orders its undoing; the failure's error is no longer the group's. */
    mend__set_str(&st->error, NULL);
    mend__step_to(r, g, MEND_STEP_PENDING, NULL, -1, "retried from the dead-letter queue");
    for (int b = g + 1; b <= g + def->nbranches; b++) {
      if (r->steps[b].status == MEND_STEP_FAILED) {
        mend__step_fresh(&r->steps[b]);
        mend__step_to(r, b, MEND_STEP_PENDING, NULL, -1, "retried from the dead-letter queue");
      }
      if (!mend__settled(r->steps[b].status)) G->done_seq[b] = 0;
    }
    /* a map keeps its list; its failed items go again */
    struct map_state *ms = mend__map_of(r, g);
    for (int k = 0; ms && k < ms->n; k++)
      if (ms->items[k].status == MEND_STEP_FAILED) mend__map_item_retry(r, ms, k);
    if (ms) ms->next = ms->resumed = 0;
  }
  if (st->status == MEND_STEP_PENDING) {
    if (r->E->draining) return;
    if (is_map(r, g) && !mend__map_of(r, g) && mend__map_begin(r, g)) return;
    char detail[120];
    snprintf(detail, sizeof detail, "%d %s, at most %d at once",
             is_map(r, g) ? mend__map_of(r, g)->n : def->nbranches,
             is_map(r, g) ? "items" : "branches", def->max_concurrency);
    st->attempts++;
    mend__step_to(r, g, MEND_STEP_RUNNING, NULL, -1, detail);
  }
  if (is_map(r, g) && !mend__map_of(r, g)) {
    mend__breakdown(r->E, "bug: run %s: map %s is running but its list is not known", r->id,
                    def->name);
    return;
  }
  if (G->g != g) {
    G->g = g;
    G->stopping = 0;
    restore_stopping(r, g);
  }
  pump(r);
}

/* No lane is busy: the group ends, succeeded (its result a table by branch name, skipped ones
 * left out) or failed with the first branch that failed for good. */
void mend__group_settle(mend_run *r) {
  struct mend_group *G = r->cold->group;
  int g = G->g;
  const mend_step_def *def = &r->wf->steps[g];
  G->g = -1;
  if (G->stopping) {
    G->stopping = 0;
    char *msg = G->fail_msg;
    G->fail_msg = NULL;
    mend_error_info info = G->info;
    info.message = msg;
    char detail[300];
    if (is_map(r, g))
      snprintf(detail, sizeof detail, "item %d failed for good", G->fail_branch + 1);
    else
      snprintf(detail, sizeof detail, "branch %s failed for good",
               r->wf->steps[G->fail_branch].branch);
    mend__step_err_to(r, g, MEND_STEP_FAILED, &info, msg, -1, detail);
    mend__fail_run(r, is_map(r, g) ? g : G->fail_branch, &info, msg ? msg : "", 0);
    free(msg);
    return;
  }
  if (is_map(r, g)) {
    mend__map_settle(r, g);
    return;
  }
  json_t *result = json_object();
  for (int b = g + 1; result && b <= g + def->nbranches; b++) {
    if (r->steps[b].status != MEND_STEP_SUCCEEDED) continue;
    const char *text = r->steps[b].result ? r->steps[b].result : "null";
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    json_object_set_new(result, r->wf->steps[b].branch, v ? v : json_null());
  }
  char *text = result ? json_dumps(result, JSON_COMPACT) : NULL;
  json_decref(result);
  if (!text) {
    mend__breakdown(r->E, "out of memory for the result of group %s of run %s", def->name, r->id);
    return;
  }
  step_rt *st = &r->steps[g];
  free(st->result);
  st->result = text;
  mend__set_str(&st->error, NULL);
  mend__step_to(r, g, MEND_STEP_SUCCEEDED, NULL, -1, NULL);
  mend__set_result(r, g);
  mend__after_success(r, g, 0);
}

/* The history row just written settled step i: compensation undoes it in that order. */
static void note_done(mend_run *r, int i) {
  struct mend_group *G = MEND_COLD(r, group);
  if (G && i >= 0 && !G->done_seq[i]) G->done_seq[i] = r->history_seq;
}

static void note_lane_done(mend_run *l) {
  mend_run *r = l->cold->parent;
  if (!l->cold->item) {
    note_done(r, l->cur);
    return;
  }
  struct map_state *ms = mend__map_of(r, r->cold->group->g);
  if (ms && !ms->done[l->cold->item - 1]) ms->done[l->cold->item - 1] = r->history_seq;
}

void mend__lane_done(mend_run *l) {
  mend_run *r = l->cold->parent;
  note_lane_done(l);
  l->cur = -1;
  l->wait_kind = WAIT_NONE;
  pump(r);
}

int mend__group_stopping(const mend_run *l) {
  const mend_run *r = MEND_COLD(l, parent);   /* called for runs too */
  struct mend_group *G = r ? MEND_COLD(r, group) : NULL;
  return G && G->stopping;
}

/* A lane whose branch waits for its child run: the child is cancelled when the group stops,
 * and the branch waits for its end (child.c), which may be a success that came first. */
static int child_waits(const mend_run *l) {
  return l->cur >= 0 && !l->cold->item && l->steps[l->cur].status == MEND_STEP_WAITING &&
         l->wf->steps[l->cur].child;
}

/* A lane whose branch waits for its token: an outcome accepted before the group stopped is
 * taken (and compensated with the group if it was a success); none, it stops waiting. */
static int token_waits(const mend_run *l) {
  return l->cur >= 0 && !l->cold->item && l->steps[l->cur].status == MEND_STEP_WAITING &&
         l->wf->steps[l->cur].wait_token;
}

/* A lane with an attempt in flight, or about to make the call its committed `running`
 * announces, or found `running` after a restart (its call may have had its effect: it is
 * executed again with its key, as any step found running), or waiting for a child run: it
 * ends and is recorded before the group gives up, and is compensated if it succeeded. */
static int in_flight(const mend_run *l) {
  return l->co || l->waiting_in || (l->queued && l->next_action == ACT_EXECUTE) ||
         (l->cur >= 0 && l->steps[l->cur].status == MEND_STEP_RUNNING) || child_waits(l);
}

/* A lane whose branch waits (or has not begun its attempt) is let go: its wait ends, the
 * branch goes back to pending, with why. */
static void stop_lane(mend_run *l) {
  int b = l->cur;
  if (b < 0) return;
  mend_timer_disarm(&l->E->timers, &l->wait);
  l->wait_kind = WAIT_NONE;
  if (l->queued) l->next_action = ACT_NONE;
  switch (l->steps[b].status) {
    case MEND_STEP_RETRY_WAIT:
    case MEND_STEP_BREAKER_OPEN:
    case MEND_STEP_SLEEPING:
    case MEND_STEP_WAITING:
      l->steps[b].due = -1;
      mend__step_to(l, b, MEND_STEP_PENDING, NULL, -1,
                    l->cold->item ? "stopped: another item failed for good"
                                  : "stopped: another branch failed for good");
      break;
    case MEND_STEP_RUNNING:   /* not reached: in_flight and mend__forward let it end first */
      mend__step_to(l, b, MEND_STEP_FAILED,
                    l->cold->item ? "not executed again: another item failed for good"
                                  : "not executed again: another branch failed for good", -1, NULL);
      note_lane_done(l);
      break;
    default:
      break;
  }
  l->cur = -1;
}

void mend__lane_stop(mend_run *l) {
  mend_run *r = l->cold->parent;
  stop_lane(l);
  if (MEND_COLD(r, group) && r->cold->group->g >= 0) pump(r);
}

void mend__lane_failed(mend_run *l, int i, const mend_error_info *info, const char *msg) {
  mend_run *r = l->cold->parent;
  struct mend_group *G = r->cold->group;
  note_lane_done(l);
  l->cur = -1;
  l->wait_kind = WAIT_NONE;
  if (!G->stopping) {
    G->stopping = 1;
    G->fail_branch = l->cold->item ? l->cold->item - 1 : i;
    G->info = *info;
    G->info.message = NULL;
    G->fail_msg = mend_dupstr(msg);
    mend_engine_log_line(r->E, "warn", r->id, mend__step_name(l, i), l->steps[i].attempts, "group",
                         "failed for good: no new attempt of the other branches starts");
    for (int k = 0; k < G->nlanes; k++) {
      if (G->lanes[k]->cur < 0) continue;
      /* saga.c's forward of a stopping lane: stop_child, or the token's outcome or a stop */
      if (child_waits(G->lanes[k]) || token_waits(G->lanes[k]))
        mend__queue(G->lanes[k], ACT_ADVANCE);
      else if (!in_flight(G->lanes[k])) stop_lane(G->lanes[k]);
    }
  }
  pump(r);
}

/* Cancelled while the group goes on: every lane lets go now, its attempt abandoned; the child
 * runs its branches waited for are cancelled with it, once no lane waits any more (a child
 * that ends at once tells its parent, which must find nothing waiting), and those branches are
 * compensated with the group: the run's compensation waits for each such child's end. */
/* A group at rest (its run read back from the store, its lanes never made here, as for a
 * cancel of a run no worker holds): its branches move as its lanes' would. */
static void stop_at_rest(mend_run *r, const char *why) {
  int g = r->cur;
  if (g < 0 || g >= r->wf->nsteps || !r->wf->steps[g].nbranches) return;
  for (int b = g + 1; b <= g + r->wf->steps[g].nbranches; b++) {
    step_rt *st = &r->steps[b];
    if (st->status == MEND_STEP_WAITING && r->wf->steps[b].child) {
      mend_error_info info = {MEND_ERR_COMPENSABLE, why, -1, 1, 0};
      mend__step_err_to(r, b, MEND_STEP_FAILED, &info, why, -1, NULL);
      st->compensate_self = 1;
      note_done(r, b);
      mend__cancel_child(r, b, why);
    } else if (st->status == MEND_STEP_RUNNING) {
      mend__step_to(r, b, MEND_STEP_FAILED, why, -1, NULL);
    } else if (st->status == MEND_STEP_WAITING || st->status == MEND_STEP_RETRY_WAIT ||
               st->status == MEND_STEP_SLEEPING || st->status == MEND_STEP_BREAKER_OPEN) {
      mend__step_to(r, b, MEND_STEP_PENDING, NULL, -1, why);
    }
  }
}

void mend__group_stop(mend_run *r, const char *why) {
  struct mend_group *G = MEND_COLD(r, group);
  if (!G || G->g < 0) {
    stop_at_rest(r, why);
    return;
  }
  int *children = calloc((size_t)G->nlanes + 1, sizeof *children), nchildren = 0;
  for (int k = 0; k < G->nlanes; k++) {
    mend_run *l = G->lanes[k];
    int b = l->cur;
    if (b < 0) continue;
    int was_running = l->co != NULL || l->steps[b].status == MEND_STEP_RUNNING;
    mend__unthrottle(l);
    mend__give_back(l, l->queued, was_running);
    mend__end_attempt(l);
    mend_timer_disarm(&l->E->timers, &l->wait);
    l->wait_kind = WAIT_NONE;
    if (l->queued) l->next_action = ACT_NONE;
    if (child_waits(l) && children) {
      children[nchildren++] = b;
      /* What its child did may be half done: the branch is undone with the group, first (its
       * row is the latest settled), and stays compensating until the child has ended. */
      mend_error_info info = {MEND_ERR_COMPENSABLE, why, -1, 1, 0};
      mend__step_err_to(l, b, MEND_STEP_FAILED, &info, why, -1, NULL);
      l->steps[b].compensate_self = 1;
      note_done(r, b);
    } else if (l->steps[b].status == MEND_STEP_RUNNING)
      mend__step_to(l, b, MEND_STEP_FAILED, why, -1, NULL);
    else if (l->steps[b].status != MEND_STEP_PENDING)
      mend__step_to(l, b, MEND_STEP_PENDING, NULL, -1, why);
    l->cur = -1;
  }
  G->g = -1;
  G->stopping = 0;
  for (int k = 0; k < nchildren; k++) mend__cancel_child(r, children[k], why);
  free(children);
}

/* ---------------------------------------------------------------- backward */

/* Undoes the next branch of group g, latest completed first. 1 when one was begun (or waits
 * for its retry); 0 when none is left, r->cur back at g. */
int mend__group_backward(mend_run *r, int g) {
  struct mend_group *G = mend__group_of(r);
  if (!G) return 1;
  const mend_step_def *def = &r->wf->steps[g];
  double now = mend_engine_now(r->E);
  step_rt *gs = &r->steps[g];
  if (gs->status == MEND_STEP_SUCCEEDED) {   /* undone as a whole: its status says so */
    if (r->E->draining) return 1;
    gs->comp_attempts++;
    mend__step_to(r, g, MEND_STEP_COMPENSATING, NULL, -1, NULL);
  }
  for (;;) {
    int next = -1;
    for (int b = g + 1; b <= g + def->nbranches; b++) {
      if (!mend__needs_compensation(r, b) || r->steps[b].comp_skipped) continue;
      if (next < 0 || G->done_seq[b] > G->done_seq[next] ||
          (G->done_seq[b] == G->done_seq[next] && b > next))
        next = b;
    }
    if (next < 0) break;
    step_rt *st = &r->steps[next];
    if (mend__skip_reused(r, mend__step_name(r, next), st)) continue;
    if (!mend__compensable(&r->wf->steps[next])) {
      st->comp_skipped = 1;
      mend__history(r, mend__step_name(r, next), "skip_compensate", NULL, NULL, 0, NULL, -1,
                    "step has no compensate");
      mend_engine_log_line(r->E, "info", r->id, mend__step_name(r, next), 0, "skip_compensate",
                           "no compensate function: skipped");
      continue;
    }
    if (r->E->draining) return 1;
    r->cur = next;
    if (st->status == MEND_STEP_COMPENSATING && st->due > now) {   /* its retry, after a restart */
      r->wait_kind = WAIT_COMP_RETRY;
      mend__arm(r, &r->wait, st->due);
      return 1;
    }
    st->comp_attempts++;
    st->due = -1;
    mend__step_to(r, next, MEND_STEP_COMPENSATING, NULL, -1, NULL);
    if (r->wf->steps[next].child) mend__undo_child(r, next);   /* its child's saga, reversed */
    else mend__queue(r, ACT_COMPENSATE);
    return 1;
  }
  if (gs->status == MEND_STEP_COMPENSATING)
    mend__step_to(r, g, MEND_STEP_COMPENSATED, NULL, -1, NULL);
  r->cur = g;
  return 0;
}

/* ---------------------------------------------------------------- life */

/* A run rebuilt from the store: the order its branches settled in and the when(ctx) answers
 * recorded, from its history. */
void mend__group_restore(mend_run *r, const mend_run_image *img) {
  if (!r->wf->has_branching) return;
  struct mend_group *G = mend__group_of(r);
  if (!G) return;
  for (int k = 0; k < img->nhistory; k++) {
    const mend_history_image *row = &img->history[k];
    const char *step = row->step, *event = row->event, *to = row->to;
    if (!step || !event) continue;
    int i = mend_workflow_step_index(r->wf, step);
    if (i < 0) continue;
    if (strcmp(event, "when") == 0) r->steps[i].when_done = 1;
    else if (strcmp(event, "step") == 0 && to &&
             (strcmp(to, "succeeded") == 0 || strcmp(to, "failed") == 0))
      G->done_seq[i] = (int)row->seq;
    else if (strcmp(event, "map") == 0 && !mend__map_of(r, i)) {
      if (!row->detail || !mend__map_add(r, i, row->detail)) break;
    }
  }
  /* a branch going forward again since a retry from the dead-letter queue: its next end
   * orders its undoing (one being undone keeps the end it is undone for) */
  for (int i = 0; r->status == MEND_RUN_RUNNING && i < r->wf->nsteps; i++)
    if (r->wf->steps[i].group >= 0 && !mend__settled(r->steps[i].status)) G->done_seq[i] = 0;
  /* the items' rows, past the steps' */
  for (int k = 0; k < img->nsteps; k++) {
    const mend_step_image *so = &img->steps[k];
    long long idx = so->idx;
    struct map_state *ms =
        idx >= MEND_MAP_ROWS ? mend__map_of(r, (int)(idx / MEND_MAP_ROWS) - 1) : NULL;
    int n = (int)(idx % MEND_MAP_ROWS);
    if (!ms || n >= ms->n) continue;
    step_rt *st = &ms->items[n];
    mend__step_from_image(st, so);
    st->key_ready = st->key_ready || st->custom_key;
    st->has_row = 1;
  }
  /* the order they ended in, and ctx.results[map] of those that succeeded */
  for (int k = 0; k < img->nhistory; k++) {
    const mend_history_image *row = &img->history[k];
    const char *step = row->step, *event = row->event, *to = row->to;
    const char *slash = step ? strrchr(step, '/') : NULL;
    if (!slash || !event || strcmp(event, "step") != 0 || !to ||
        (strcmp(to, "succeeded") != 0 && strcmp(to, "failed") != 0))
      continue;
    for (int j = 0; j < G->nmaps; j++) {
      struct map_state *ms = &G->maps[j];
      const char *name = r->wf->steps[ms->m].name;
      size_t len = strlen(name);
      if ((size_t)(slash - step) != len || strncmp(step, name, len) != 0) continue;
      int n = atoi(slash + 1);
      /* an item retried from the dead-letter queue ended again: its last end orders its undoing */
      if (n >= 1 && n <= ms->n) ms->done[n - 1] = (int)row->seq;
    }
  }
  for (int j = 0; j < G->nmaps; j++) {
    struct map_state *ms = &G->maps[j];
    lua_State *L = r->E->L;
    mend_refs_push(&r->E->refs, L, r->results_ref);
    lua_newtable(L);
    for (int n = 0; n < ms->n; n++) {
      const step_rt *st = &ms->items[n];
      if (!st->result ||
          (st->status != MEND_STEP_SUCCEEDED && st->status != MEND_STEP_COMPENSATING))
        continue;
      char err[200];
      if (mend_json_decode(L, st->result, strlen(st->result), err, sizeof err)) lua_pushnil(L);
      lua_rawseti(L, -2, n + 1);
    }
    lua_setfield(L, -2, r->wf->steps[ms->m].name);
    lua_pop(L, 1);
  }
}

void mend__lane_free(mend_run *l) {
  mend__unthrottle(l);
  mend__end_attempt(l);
  mend_timer_disarm(&l->E->timers, &l->wait);
  free(l->cold->http_detail);
  free(l->cold->item_name);
  free(l->cold);
  free(l);
}

/* The run is let go: its lanes with it. One still in the pump's queue is freed when it comes
 * up (do_action drops a lost run). */
void mend__group_free(mend_run *r) {
  struct mend_group *G = MEND_COLD(r, group);
  if (!G) return;
  for (int k = 0; k < G->nlanes; k++) {
    mend_run *l = G->lanes[k];
    mend__unthrottle(l);
    mend__end_attempt(l);
    mend_timer_disarm(&l->E->timers, &l->wait);
    l->cur = -1;
    if (l->queued && !l->E->destroying) {
      l->lost = 1;
      l->cold->parent = NULL;
    } else {
      mend__lane_free(l);
    }
  }
  for (int j = 0; j < G->nmaps; j++) {
    struct map_state *ms = &G->maps[j];
    for (int k = 0; k < ms->n; k++) {
      free(ms->items[k].idem_key);
      free(ms->items[k].result);
      free(ms->items[k].error);
    }
    free(ms->items);
    free(ms->done);
    free(ms->order);
    mend_refs_drop(&r->E->refs, r->E->L, ms->list_ref);
  }
  free(G->maps);
  free(G->lanes);
  free(G->done_seq);
  free(G->fail_msg);
  free(G);
  r->cold->group = NULL;
  mend__run_cold_trim(r);
}
