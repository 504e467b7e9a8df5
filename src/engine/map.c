/*
 * map: maps (SPEC section 12), parallel groups over a list, on group.c's lanes. Owns the list,
 * recorded when the step begins (a `map` row of the history) so that a restart maps the same
 * list; one item-attempt per element in a lane on a one-step workflow (the map's step) whose
 * step state is the item's, each item's row past the run's steps (MEND_MAP_ROWS); which item
 * starts when (those begun before a restart first, then the list in order, once); the map's
 * result (its items' results in list order); its items compensated by a lane one at a time,
 * latest completed first. Must never: write a row for an item that is not its run's (rows are
 * the run's, through step_to and history); ask for the list again once it is recorded.
 */
#include "engine_int.h"

#include <jansson.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

struct map_state *mend__map_of(mend_run *r, int m) {
  struct mend_group *G = MEND_COLD(r, group);
  for (int k = 0; G && k < G->nmaps; k++)
    if (G->maps[k].m == m) return &G->maps[k];
  return NULL;
}

/* A lane on item k (from 0) of map m, not set going. */
static void setup_item(mend_run *l, struct map_state *ms, int k) {
  mend_run *r = l->cold->parent;
  char name[300];
  snprintf(name, sizeof name, "%s/%d", r->wf->steps[ms->m].name, k + 1);
  free(l->cold->item_name);
  l->cold->item_name = mend_dupstr(name);
  l->wf = r->wf->steps[ms->m].item_wf;
  l->steps = &ms->items[k];
  l->cold->item = k + 1;
  l->cold->row_base = (ms->m + 1) * MEND_MAP_ROWS + k;
  l->status = MEND_RUN_RUNNING;
  l->cur = 0;
}

/* Item k, failed for good, goes again from the dead-letter queue: pending with fresh attempts,
 * its row written in the batch of the retry, so that a restart finds it pending, not failed
 * (which would fail the map again with nothing run). The lane that writes it is let go. */
void mend__map_item_retry(mend_run *r, struct map_state *ms, int k) {
  mend_run *l = mend__idle_lane(r);
  if (!l) return;
  setup_item(l, ms, k);
  mend__step_fresh(&ms->items[k]);
  ms->done[k] = 0;   /* its end this time orders its undoing */
  mend__step_to(l, 0, MEND_STEP_PENDING, NULL, -1, "retried from the dead-letter queue");
  l->cur = -1;
}

static void start_item(mend_run *l, struct map_state *ms, int k) {
  setup_item(l, ms, k);
  mend__resume_lane(l, 0);
}

/* A map's pump: the items begun before a restart first, then the others in list order, each
 * once (a cursor, not a walk of the list at every item's end). */
void mend__map_pump(mend_run *r, int busy) {
  struct mend_group *G = r->cold->group;
  struct map_state *ms = mend__map_of(r, G->g);
  int max = r->wf->steps[G->g].max_concurrency;
  for (int k = 0; !ms->resumed && k < ms->n && !r->E->broken; k++) {
    const step_rt *st = &ms->items[k];
    if (mend__settled(st->status) || (st->status == MEND_STEP_PENDING && st->attempts == 0))
      continue;
    /* stopping since before a restart: only the items found running go again (group.c) */
    if (G->stopping && st->status != MEND_STEP_RUNNING) continue;
    mend_run *l = mend__idle_lane(r);
    if (!l) return;
    start_item(l, ms, k);
    busy++;
  }
  ms->resumed = 1;
  while (busy < max && ms->next < ms->n && !G->stopping && !r->E->broken) {
    int k = ms->next++;
    const step_rt *st = &ms->items[k];
    if (mend__settled(st->status) || st->status != MEND_STEP_PENDING || st->attempts > 0) continue;
    mend_run *l = mend__idle_lane(r);
    if (!l) return;
    start_item(l, ms, k);
    busy++;
  }
  if (busy == 0 && !r->E->broken) mend__group_settle(r);
}

/* Map m's state for the list `json` (its text, as recorded): items pending, the list in Lua. */
struct map_state *mend__map_add(mend_run *r, int m, const char *json) {
  struct mend_group *G = r->cold->group;
  mend_engine *E = r->E;
  json_error_t jerr;
  json_t *list = json_loads(json, JSON_DECODE_ANY, &jerr);
  struct map_state *more = list && json_is_array(list)
    ? realloc(G->maps, (size_t)(G->nmaps + 1) * sizeof *more) : NULL;
  if (!more) {
    json_decref(list);
    mend__breakdown(E, "run %s: the list of map %s cannot be read back", r->id,
                    r->wf->steps[m].name);
    return NULL;
  }
  G->maps = more;
  struct map_state *ms = &G->maps[G->nmaps];
  *ms = (struct map_state){.m = m, .n = (int)json_array_size(list), .list_ref = LUA_NOREF};
  ms->items = calloc((size_t)ms->n + 1, sizeof *ms->items);
  ms->done = calloc((size_t)ms->n + 1, sizeof *ms->done);
  char err[200];
  if (!ms->items || !ms->done || mend_json_push_doc(E->L, list, err, sizeof err)) {
    free(ms->items);
    free(ms->done);
    json_decref(list);
    mend__breakdown(E, "run %s: out of memory for the items of map %s", r->id,
                    r->wf->steps[m].name);
    return NULL;
  }
  json_decref(list);
  ms->list_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  const mend_step_def *item = &r->wf->steps[m].item_wf->steps[0];
  for (int k = 0; k < ms->n; k++) {
    ms->items[k].status = MEND_STEP_PENDING;
    ms->items[k].due = ms->items[k].last_delay = -1;
    ms->items[k].key_ready = item->key_ref == LUA_NOREF;
  }
  G->nmaps++;
  return ms;
}

/* Map m begins: its list, asked once it answers, is recorded in the history with the step's
 * `running` (a restart maps the same list). 1 when it failed instead (retried as an attempt
 * when the error is retryable). */
int mend__map_begin(mend_run *r, int m) {
  mend_error_info info;
  char *json = mend__ask_map(r, m, &info);
  if (mend__land_kept_cancel(r)) {   /* it cancelled its parent: its list is void */
    free(json);
    return 1;
  }
  if (!json) {
    mend__fail_before_execute(r, m, &info);
    return 1;
  }
  struct map_state *ms = mend__map_add(r, m, json);
  if (ms) ms->resumed = 1;   /* nothing of it was begun */
  if (ms) mend__history(r, mend__step_name(r, m), "map", NULL, NULL, 0, NULL, -1, json);
  free(json);
  return ms == NULL;
}

int mend__items_succeeded(const mend_run *r) {
  struct mend_group *G = MEND_COLD(r, group);
  for (int j = 0; G && j < G->nmaps; j++)
    for (int k = 0; k < G->maps[j].n; k++)
      if (G->maps[j].items[k].status == MEND_STEP_SUCCEEDED) return 1;
  return 0;
}

void mend__push_item(mend_run *l, lua_State *co) {
  mend_run *r = l->cold->parent;
  struct map_state *ms = r && MEND_COLD(r, group) ? mend__map_of(r, r->cold->group->g) : NULL;
  if (!ms) {
    lua_pushnil(co);
    return;
  }
  mend_refs_push(&l->E->refs, co, ms->list_ref);
  lua_rawgeti(co, -1, l->cold->item);
  lua_remove(co, -2);
}

/* ctx.results[map][k] = item k's result, as items end. */
void mend__set_item_result(mend_run *l) {
  mend_run *r = l->cold->parent;
  lua_State *L = r->E->L;
  const char *name = r->wf->steps[r->cold->group->g].name;
  mend_refs_push(&r->E->refs, L, r->results_ref);
  if (lua_getfield(L, -1, name) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
  }
  char err[256];
  const char *res = l->steps[0].result;
  if (!res || mend_json_decode(L, res, strlen(res), err, sizeof err)) lua_pushnil(L);
  lua_rawseti(L, -2, l->cold->item);
  lua_pop(L, 2);
}

/* Every item succeeded: the map's result is their results in list order. */
void mend__map_settle(mend_run *r, int m) {
  struct map_state *ms = mend__map_of(r, m);
  size_t len = 3;
  for (int k = 0; k < ms->n; k++)
    len += strlen(ms->items[k].result ? ms->items[k].result : "null") + 1;
  char *text = malloc(len);
  if (!text) {
    mend__breakdown(r->E, "out of memory for the result of map %s of run %s", r->wf->steps[m].name,
                    r->id);
    return;
  }
  size_t at = 0;
  text[at++] = '[';
  for (int k = 0; k < ms->n; k++) {
    const char *v = ms->items[k].result ? ms->items[k].result : "null";
    size_t n = strlen(v);
    if (k) text[at++] = ',';
    memcpy(text + at, v, n);
    at += n;
  }
  text[at++] = ']';
  text[at] = 0;
  step_rt *st = &r->steps[m];
  free(st->result);
  st->result = text;
  mend__set_str(&st->error, NULL);
  mend__step_to(r, m, MEND_STEP_SUCCEEDED, NULL, -1, NULL);
  mend__set_result(r, m);
  mend__after_success(r, m, 0);
}

/* Items latest completed first (ties: the later in the list first). */
struct ended { int done, k; };
static int by_done(const void *a, const void *b) {
  const struct ended *x = a, *y = b;
  if (x->done != y->done) return x->done > y->done ? -1 : 1;
  return x->k > y->k ? -1 : x->k < y->k;
}

static int item_needs_compensation(const step_rt *st) {
  return st->status == MEND_STEP_SUCCEEDED || st->status == MEND_STEP_COMPENSATING ||
         st->status == MEND_STEP_COMPENSATION_FAILED ||
         (st->status == MEND_STEP_FAILED && st->compensate_self);
}

/* Undoes the next item of map m, latest completed first, in a lane: 1 when one was begun (the
 * run waits for it: mend__lane_compensated); 0 when none is left, r->cur back at m. */
int mend__map_backward(mend_run *r, int m) {
  struct mend_group *G = mend__group_of(r);
  if (!G) return 1;
  struct map_state *ms = mend__map_of(r, m);
  step_rt *gs = &r->steps[m];
  const mend_step_def *item = &r->wf->steps[m].item_wf->steps[0];
  if (gs->status == MEND_STEP_SUCCEEDED) {
    if (r->E->draining) return 1;
    gs->comp_attempts++;
    mend__step_to(r, m, MEND_STEP_COMPENSATING, NULL, -1, NULL);
  }
  if (ms && item->compensate_ref == LUA_NOREF) {
    if (!ms->skip_logged) {
      ms->skip_logged = 1;
      mend__history(r, r->wf->steps[m].name, "skip_compensate", NULL, NULL, 0, NULL, -1,
                    "the map's step has no compensate");
    }
    ms = NULL;
  }
  if (ms && !ms->order) {
    ms->order = malloc((size_t)ms->n * sizeof *ms->order + 1);
    struct ended *e = malloc((size_t)ms->n * sizeof *e + 1);
    if (!ms->order || !e) {
      free(e);
      mend__breakdown(r->E, "out of memory compensating map %s of run %s", r->wf->steps[m].name,
                      r->id);
      return 1;
    }
    for (int k = 0; k < ms->n; k++) e[k] = (struct ended){ms->done[k], k};
    qsort(e, (size_t)ms->n, sizeof *e, by_done);
    for (int k = 0; k < ms->n; k++) ms->order[k] = e[k].k;
    free(e);
    ms->pos = 0;
  }
  for (; ms && ms->pos < ms->n; ms->pos++) {
    int k = ms->order[ms->pos];
    step_rt *st = &ms->items[k];
    if (!item_needs_compensation(st)) continue;
    if (st->reused) {
      char name[300];
      snprintf(name, sizeof name, "%s/%d", r->wf->steps[m].name, k + 1);
      mend__skip_reused(r, name, st);
      continue;
    }
    if (r->E->draining) return 1;
    mend_run *l = mend__idle_lane(r);
    if (!l) return 1;
    r->cur = m;
    G->g = m;   /* the lane's item is found through it */
    setup_item(l, ms, k);
    l->status = MEND_RUN_COMPENSATING;
    l->wait_kind = WAIT_NONE;
    mend_timer_disarm(&l->E->timers, &l->wait);
    if (st->status == MEND_STEP_COMPENSATING && st->due > mend_engine_now(r->E)) {   /* its retry */
      l->wait_kind = WAIT_COMP_RETRY;
      mend__arm(l, &l->wait, st->due);
    } else {
      mend__lane_backward(l);
    }
    return 1;
  }
  if (gs->status == MEND_STEP_COMPENSATING)
    mend__step_to(r, m, MEND_STEP_COMPENSATED, NULL, -1, NULL);
  G->g = -1;
  r->cur = m;
  return 0;
}

/* An item's compensation attempt (again, after its delay). */
void mend__lane_backward(mend_run *l) {
  if (l->E->draining || l->cur < 0) return;
  step_rt *st = &l->steps[0];
  st->comp_attempts++;
  st->due = -1;
  mend__step_to(l, 0, MEND_STEP_COMPENSATING, NULL, -1, NULL);
  mend__queue(l, ACT_COMPENSATE);
}

/* An item was undone: the run goes on with the next. */
void mend__lane_compensated(mend_run *l) {
  mend_run *r = l->cold->parent;
  l->cur = -1;
  l->status = MEND_RUN_RUNNING;
  struct map_state *ms = mend__map_of(r, r->cold->group->g);
  if (ms) ms->pos++;
  mend__backward(r);
}
