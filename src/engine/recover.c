/*
 * recover: carrying on runs from the store alone. Owns rebuilding a run in memory from what
 * the store says (the version it started with, its steps, its waits), flagging a run whose
 * version cannot be loaded (once), taking over the runs of dead workers on this host, and
 * claiming unfinished runs that nobody holds, and putting aside a run that took down every
 * worker that ran it (a crash loop). Must never: act on a run before the claim that makes it
 * ours is durable; resume a run with another version's steps; resume a run of a claim that
 * went with its transaction.
 */
#include "engine_int.h"

#include <errno.h>
#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idset.h"
#include "json.h"
#include "log.h"
#include "util.h"

/* ---------------------------------------------------------------- recovery */

/* The workflow a run executes: the version it started with (SPEC section 13), loaded here
 * or from the script the store keeps; by name only for a run that names no version. NULL with
 * the reason in `why` when that version cannot be loaded. */

/* The reason is one of the engine's own static strings; the stored text mapped back to it, or
 * NULL for text this mend does not know. */
const char *mend__known_reason(const char *text) {
  static const char *const reasons[] = {"attempts_exhausted", "fatal", "severity_2", "compensable",
                                        "error", "severity_3", "compensation_failed", "cancelled",
                                        "workflow_error", "timeout", "crash_loop",
                                        "parent_compensated"};
  for (size_t k = 0; text && k < sizeof reasons / sizeof *reasons; k++)
    if (strcmp(text, reasons[k]) == 0) return reasons[k];
  return NULL;
}

static mend_workflow *run_workflow(mend_engine *E, const char *name, const char *version,
                                   char *why, int whylen) {
  if (!name) {
    mend_errorf(why, whylen, "the run names no workflow");
    return NULL;
  }
  if (!version) {
    mend_workflow *wf = mend_engine_workflow(E, name);
    if (!wf) mend_errorf(why, whylen, "workflow \"%s\" is not loaded here", name);
    return wf;
  }
  char err[600];
  mend_workflow *wf = mend_engine_load_version(E, name, version, err, sizeof err);
  if (wf) return wf;
  /* Nothing of that name here and no script of it kept (a workflow registered in code): */
  char *kept = mend_engine_workflow(E, name)
                   ? NULL
                   : mend_store_version_script(E->store, name, version, NULL);
  if (!mend_engine_workflow(E, name) && !kept)
    mend_errorf(why, whylen, "workflow \"%s\" is not loaded here", name);
  else
    mend_errorf(why, whylen, "workflow %s version %s cannot be loaded: %s", name, version, err);
  free(kept);
  return NULL;
}

/* A step's row as the store has it, into the run's memory of it. */
void mend__step_from_image(step_rt *st, const mend_step_image *si) {
  st->status = si->status;
  st->attempts = si->attempts;
  st->comp_attempts = si->comp_attempts;
  st->custom_key = si->custom_key != MEND_KEY_DEFAULT;
  st->reused = si->custom_key == MEND_KEY_REUSED;
  if (st->custom_key) st->idem_key = mend_dupstr(si->idem_key);
  st->error = mend_dupstr(si->error);
  st->err_kind = mend_error_kind_parse(si->error_kind);
  int severity = si->error_severity;
  st->err_severity = severity < 0 ? 0 : severity > 3 ? 3 : (unsigned)severity;
  st->err_stopped = si->error_stopped != 0;
  st->due = si->due;
  st->last_delay = si->last_delay;
  st->result = si->result ? mend_dupstr(si->result) : NULL;
  /* As saga.c decides it when the step fails: by the step's own kind, not the run's reason,
   * which is the kind of the one step that decided the run (two branches of a group may both
   * have failed, each its way; a compensation that failed names the run's reason since). */
  st->compensate_self = st->status == MEND_STEP_FAILED && st->err_kind == MEND_ERR_COMPENSABLE;
}

/* Has no process begun the run yet? Its history then has only what its start wrote and what
 * people and workers that did not take it wrote (a cancel asked for, an alert that its version
 * cannot be loaded): no `claimed` or `recovered` row, no row of a step. A process that started
 * a run and held it may have given it back, or died, before its first step's row was written
 * (a held start commits with whatever commits next): nothing of the run was begun then, and
 * its first take is a claim too. Any other row, of a kind this mend does not know too, says
 * that someone began it: taking it again is a recovery. */
static int never_held(const mend_run_image *img) {
  for (int k = 0; k < img->nhistory; k++) {
    const mend_history_image *row = &img->history[k];
    const char *event = row->event;
    if (row->step || !event) return 0;
    if (strcmp(event, "run") == 0 ? !row->to || strcmp(row->to, "running") != 0
                                  : strcmp(event, "started") != 0 &&
                                        strcmp(event, "operator") != 0 &&
                                        strcmp(event, "alert") != 0)
      return 0;
  }
  return 1;
}

/* Rebuilds a run in memory from its image, without acting on it (see mend__rebuild). */
static mend_run *rebuild_from(mend_engine *E, const char *id, const mend_run_image *img,
                              char *why, int whylen, int *unavailable) {
  if (unavailable) *unavailable = 0;
  why[0] = 0;
  mend_workflow *wf = run_workflow(E, img->workflow, img->version, why, whylen);
  if (!wf && unavailable) *unavailable = img->unavailable ? 2 : 1;
  if (!wf) return NULL;
  /* rows past the steps' are the items of maps (MEND_MAP_ROWS) */
  int rows = 0;
  while (rows < img->nsteps && img->steps[rows].idx < MEND_MAP_ROWS) rows++;
  if (rows != wf->nsteps)
    snprintf(why, (size_t)whylen, "workflow \"%s\" now has %d steps, the run has %d", wf->name,
             wf->nsteps, rows);
  for (int i = 0; !why[0] && i < wf->nsteps; i++) {
    const char *name = img->steps[i].name;
    /* a version is its text: only a run without one, or a damaged row, gets here */
    if (!name || strcmp(name, wf->steps[i].name) != 0)
      snprintf(why, (size_t)whylen, "step #%d is \"%s\" in the run but \"%s\" in the workflow",
               i + 1, name ? name : "?", wf->steps[i].name);
  }
  if (why[0]) {
    /* A run that names no version (a database of an older mend) whose workflow has changed
     * since cannot go on with the steps loaded here, any more than one whose version is
     * gone: flagged once, as that one is, rather than logged at every poll. */
    if (unavailable) *unavailable = img->unavailable ? 2 : 1;
    return NULL;
  }
  /* It loads here: whoever looks for runs to take may take it again. */
  if (img->unavailable && mend_store_set_unavailable(E->store, id, NULL)) mend__store_failed(E);
  mend_run *r = mend__run_new(E, wf, id);
  r->history_seq = (int)img->last_seq;
  r->last_at = img->last_at;
  /* A virtual clock starts at the real time: one behind the run's own moves on to it. */
  mend_timers_not_before(&E->timers, img->last_at);
  r->cancel_asked = img->cancel_requested;
  r->is_child = img->parent_run != NULL;
  r->never_held = (unsigned char)never_held(img);
  r->status = img->status;
  r->attention = img->attention;
  r->error = mend_dupstr(img->error);
  r->reason = mend__known_reason(img->reason);
  /* A run going back always has a reason; one this mend does not know counts as an error. */
  if (!r->reason && r->status != MEND_RUN_RUNNING) r->reason = "error";
  /* Input that is not JSON after all reads as its text, as the view of the run shows it. */
  if (!img->input) lua_pushnil(E->L);
  else if (mend_json_decode(E->L, img->input, strlen(img->input), NULL, 0) != 0)
    lua_pushstring(E->L, img->input);
  r->input_ref = mend_refs_put(&E->refs, E->L, r->ref_shard);
  for (int i = 0; i < wf->nsteps; i++) {
    const mend_step_image *si = &img->steps[i];
    step_rt *st = &r->steps[i];
    mend__step_from_image(st, si);
    st->key_ready = st->custom_key || wf->steps[i].key_ref == LUA_NOREF;
    st->slept = si->slept;
    /* A pending step with no attempt may be one listed from step_names, and a running one may
     * be only in history (write_step): their first write puts the whole row, which is right for
     * a row that exists too. */
    st->has_row = st->status != MEND_STEP_RUNNING &&
                  (st->status != MEND_STEP_PENDING || st->attempts > 0 || st->comp_attempts > 0);
    st->row_unknown = !st->has_row;
    if (st->result && (st->status == MEND_STEP_SUCCEEDED || st->status == MEND_STEP_COMPENSATING))
      mend__set_result(r, i);
    if (st->status == MEND_STEP_FAILED || st->status == MEND_STEP_COMPENSATION_FAILED)
      r->fail_step = i;
  }
  /* when(ctx)'s answers, the order its branches ended in, its maps' lists and items */
  mend__group_restore(r, img);
  mend__reuse_restore(r, img);
  return r;
}

/* Rebuilds a run in memory from the store alone, without acting on it. NULL when the run
 * cannot be resumed by this engine, with the reason in `why`; the run is then left as it is
 * for a person or another worker. *unavailable (if given) says when the reason is that its
 * version cannot be loaded here: 1, or 2 when the store says so already. */
mend_run *mend__rebuild(mend_engine *E, const char *id, char *why, int whylen, int *unavailable) {
  if (unavailable) *unavailable = 0;
  mend_run_image img;
  if (mend_store_run_image(E->store, id, &img) != 0) {
    snprintf(why, (size_t)whylen, "%s", mend_store_errmsg(E->store));
    return NULL;
  }
  mend_run *r = rebuild_from(E, id, &img, why, whylen, unavailable);
  mend_run_image_free(&img);
  return r;
}

/* A run rebuilt from the store: the step it is at, going forward (the first not succeeded) or
 * back (the one being compensated: steps without compensate stay succeeded when skipped, so
 * look past them). */
void mend__find_current_step(mend_run *r) {
  const mend_workflow *wf = r->wf;
  if (r->status == MEND_RUN_RUNNING) {
    r->cur = 0;
    while (r->cur < wf->nsteps && (r->steps[r->cur].status == MEND_STEP_SUCCEEDED ||
                                   r->steps[r->cur].status == MEND_STEP_SKIPPED))
      r->cur = mend__next_top(wf, r->cur);
  } else {
    r->cur = wf->nsteps - 1;
    /* a group is undone through its branches: it has no compensate of its own */
    while (r->cur >= 0 &&
           (!mend__needs_compensation(r, r->cur) || r->steps[r->cur].reused ||
            (!mend__compensable(&wf->steps[r->cur]) && !wf->steps[r->cur].nbranches &&
             wf->steps[r->cur].map_ref == LUA_NOREF)))
      r->cur--;
  }
}

/* Sets a rebuilt run going from where the store says it stood. */
static void schedule_restored(mend_run *r) {
  const mend_workflow *wf = r->wf;
  double now = mend_engine_now(r->E);
  mend__find_current_step(r);
  if (r->status == MEND_RUN_RUNNING) {
    step_rt *st = r->cur < wf->nsteps ? &r->steps[r->cur] : NULL;
    if (st && st->status == MEND_STEP_WAITING) {
      /* Its timeout at the stored due time; its event, from the inbox once the claim is
       * durable (the advance takes it). */
      r->wait_kind = WAIT_EVENT;
      if (st->due >= 0) mend__arm(r, &r->wait, st->due > now ? st->due : now);
      else mend__park_soon(r);
      mend__queue(r, ACT_ADVANCE);
      return;
    }
    if (st && (st->status == MEND_STEP_RETRY_WAIT || st->status == MEND_STEP_BREAKER_OPEN ||
               st->status == MEND_STEP_SLEEPING)) {
      r->wait_kind = st->status == MEND_STEP_RETRY_WAIT ? WAIT_RETRY
                   : st->status == MEND_STEP_BREAKER_OPEN ? WAIT_BREAKER : WAIT_STEP_SLEEP;
      mend__arm(r, &r->wait, st->due > now ? st->due : now);   /* already due: now */
      return;
    }
  } else {
    step_rt *st = r->cur >= 0 ? &r->steps[r->cur] : NULL;
    if (st && st->status == MEND_STEP_COMPENSATING && st->due >= 0) {
      r->wait_kind = WAIT_COMP_RETRY;
      mend__arm(r, &r->wait, st->due > now ? st->due : now);
      return;
    }
  }
  mend__queue(r, ACT_ADVANCE);
}

int mend__cancel_now(mend_run *r, const char *who, char *err, int errlen);

/* The history says who carries the run on, and with which version of its workflow: `claimed`
 * when no process had begun it (never_held), `recovered` when one had (its holder died, its
 * lease ran out, or it gave the run back). */
void mend__recovered_entry(mend_run *r) {
  char detail[700];
  const mend_workflow *wf = r->wf;
  snprintf(detail, sizeof detail, "%s, version %s%s%s%s", r->E->owner,
           wf->version ? wf->version : "?", wf->source ? " (" : "", wf->source ? wf->source : "",
           wf->source ? ")" : "");
  mend__history(r, NULL, r->never_held ? "claimed" : "recovered", NULL,
                mend_run_status_name(r->status), 0, NULL, -1, detail);
  r->never_held = 0;
}

/* Sets a rebuilt run going, or cancels it when a cancel was asked for while nobody held it: the
 * request binds whoever takes the run next. */
void mend__carry_on(mend_run *r) {
  char err[300];
  if (r->cancel_asked && r->status == MEND_RUN_RUNNING) {
    mend__find_current_step(r);
    char who[300];
    mend__cancel_requester(r->E, r->id, who, sizeof who);
    if (mend__cancel_now(r, who, err, sizeof err) == 0) return;
    mend_engine_log_line(r->E, "warn", r->id, NULL, 0, "operator", err);
  }
  schedule_restored(r);
}

double mend__entry_time(mend_engine *E, const char *id);

/* A run whose version cannot be loaded here cannot progress: the store says why, once, with an
 * alert in its history; no worker takes it again before it looks for such runs on purpose
 * (poll_for_runs), and none alerts or logs again while the reason stands. */
static void flag_unavailable(mend_engine *E, const char *id, const char *wf, const char *why,
                             int already) {
  if (already) {
    mend_engine_log_line(E, "debug", id, NULL, 0, "recover", why);
    return;
  }
  json_t *ev = json_pack("{s:s, s:s, s:s, s:s, s:s, s:f}", "kind", "attention", "run_id", id,
                         "workflow", wf ? wf : "?", "reason", "workflow_unavailable", "error", why,
                         "at", mend_engine_now(E));
  if (!ev) { mend__breakdown(E, "out of memory flagging run %s", id); return; }
  mend_engine_log_line(E, "warn", id, NULL, 0, "recover", why);
  if (mend_store_set_unavailable(E->store, id, why)) mend__store_failed(E);
  char *text = json_dumps(ev, JSON_COMPACT);
  mend_history_rec h = {id, NULL, mend__entry_time(E, id), "alert", NULL, NULL, 0, why, -1, text, 0,
                        NULL};
  if (mend_store_append_history(E->store, &h)) mend__store_failed(E);
  free(text);
  json_array_append_new(E->alerts, ev);   /* logged and sent once the batch commits */
}

/* ---------------------------------------------------------------- crash loops */

/* A run whose step takes its process down (a host function that segfaults, a C module's
 * bug) is taken again by the next worker, which goes down too, and so on, while no other run
 * gets done. Each take leaves a row in the run's history (`claimed` the first, `recovered` the
 * next ones), and each attempt a `-> running` row, both committed before the step's code runs;
 * but so has every other run the dead worker had begun, and the store cannot tell the one
 * whose code crashed. A run taken again that many times in a row with an attempt begun and no
 * outcome between is a suspect: its next attempt leaves a `suspect_ran` row committed before
 * its code runs, and commits what the code did right after (attempt.c), so that a run whose
 * code did not crash the worker has no such row, or an outcome after it, or a `suspect_waits`
 * row when its code went on to wait (for a host's answer: the crash was not in its code). At
 * CRASH_LOOP_RUNS such rows with no outcome since, the run is not run again. (Committing
 * around every attempt of a run taken again would hold up a worker that takes the runs of one
 * stopped mid-transaction.) */
#define CRASH_SUSPECT_TAKES 2
#define CRASH_LOOP_RUNS 2

/* Since the run's last outcome (a step or the run going to anything but running), in its
 * image's history: how many of its suspect attempts ended with their worker (*ran), and how
 * many takes of it were followed by an attempt (*takes). A take more than a few leases after
 * the next ends the count: a run whose step waits an hour for a host's answer is taken again
 * at each deploy, not in a loop. */
static void since_outcome(mend_engine *E, const mend_run_image *img, int *ran, int *takes) {
  *ran = *takes = 0;
  int began = 0, waited = 0;
  double later = mend_engine_now(E), window = 5 * E->lease_seconds;
  for (int k = img->nhistory; k-- > 0;) {
    const mend_history_image *row = &img->history[k];
    const char *event = row->event, *to = row->to;
    if (!event) continue;
    if (strcmp(event, "recovered") == 0 || strcmp(event, "claimed") == 0) {
      double at = row->at;
      if (later - at > window) break;
      later = at;
      *takes += began;
      began = 0;
    } else if (strcmp(event, "suspect_waits") == 0) {
      waited = 1;
    } else if (strcmp(event, "suspect_ran") == 0) {
      if (!waited) ++*ran;
      waited = 0;
    } else if (to && strcmp(to, "running") == 0) {
      began = 1;
    } else if (to) {
      break;
    }
  }
}

/* Will the rebuilt run run workflow code as soon as it goes on (no wait in the future)? */
static int runs_code_at_once(mend_run *r) {
  if (r->status != MEND_RUN_RUNNING && r->status != MEND_RUN_COMPENSATING) return 0;
  mend__find_current_step(r);
  if (r->cur < 0 || r->cur >= r->wf->nsteps) return 0;
  const step_rt *st = &r->steps[r->cur];
  if (st->status == MEND_STEP_WAITING) return 0;
  return !(st->due > mend_engine_now(r->E));
}

/* The run goes to the dead-letter queue with reason crash_loop: its step failed (the attempt
 * that crashed counted), nothing compensated on its account. */
static void put_aside(mend_run *r, int crashes) {
  char msg[400];
  int i = r->cur;
  step_rt *st = &r->steps[i];
  /* The step is recorded failed, the one end a step that will not run again has, but the
   * record says what is known: each crash cut an attempt short at an unknown point, so what
   * the last one did (a charge, a message sent) may have taken effect. */
  snprintf(msg, sizeof msg, "crash_loop: the worker stopped during this run's step, %d times in a "
           "row after it was taken again (a host function or C module that crashes?); the "
           "outcome of its last attempt is unknown: what it did may have taken effect; the run "
           "is not run again", crashes);
  if (r->status == MEND_RUN_COMPENSATING) {
    mend__step_to(r, i, MEND_STEP_COMPENSATION_FAILED, msg, -1, NULL);
  } else {
    if (st->status == MEND_STEP_RETRY_WAIT || st->status == MEND_STEP_BREAKER_OPEN ||
        st->status == MEND_STEP_SLEEPING)
      mend__step_to(r, i, MEND_STEP_PENDING, NULL, -1, NULL);
    if (st->status == MEND_STEP_PENDING) {
      st->attempts++;
      mend__step_to(r, i, MEND_STEP_RUNNING, NULL, -1, NULL);
    }
    mend__step_to(r, i, MEND_STEP_FAILED, msg, -1, NULL);
  }
  mend__set_str(&r->error, msg);
  r->fail_step = i;
  r->reason = "crash_loop";
  mend__run_to(r, MEND_RUN_NEEDS_ATTENTION);
  mend__dead_letter(r, r->reason, i, msg,
                    "its worker crashed each time it ran the step, and the outcome of the last "
                    "attempt is unknown: check what the step does (did it take effect?); nothing "
                    "compensated automatically; fix the host function, then mend dlq retry, or "
                    "resolve");
  mend__queue(r, ACT_FINISH);
}

static int restore(mend_engine *E, const char *id) {
  /* Taken over since the claim by a run restored before it (a parent whose cancel was asked
   * while nobody held it cancels its child as it is restored): a second copy would do the
   * run's every action twice, its compensations included. */
  if (mend__find_run(E, id)) return 0;
  char why[700];
  int unavailable = 0;
  mend__park_forget(E, id);   /* ours again after another worker had it: the store's copy counts */
  mend_run_image img;
  mend_run *r = NULL;
  if (mend_store_run_image(E->store, id, &img) != 0) {
    /* The connection went (or the server ended the transaction for a deadlock), and the claim
     * with it: this run is not ours, nor are the rest of the claim. Giving it back would open
     * a new connection, where the next image would read fine: runs that another worker may
     * take would run here. A lost batch, then (reconnect.c). */
    if (mend_store_conn_lost(E->store)) {
      if (E->serving && !E->draining) mend__store_lost(E);
      else mend__breakdown(E, "%s", mend_store_errmsg(E->store));
      return -1;
    }
    snprintf(why, sizeof why, "%s", mend_store_errmsg(E->store));
  } else if (!(r = rebuild_from(E, id, &img, why, sizeof why, &unavailable)) && unavailable)
    flag_unavailable(E, id, img.workflow, why, unavailable == 2);
  if (!r) {
    if (!unavailable) mend_engine_log_line(E, "error", id, NULL, 0, "recover", why);
    mend_run_image_free(&img);
    if (mend_store_release(E->store, id, E->owner)) mend__store_failed(E);
    return -1;
  }
  int ran = 0, takes = 0;
  if (runs_code_at_once(r)) {
    since_outcome(E, &img, &ran, &takes);
    r->suspect = ran > 0 || takes >= CRASH_SUSPECT_TAKES;
  }
  mend_run_image_free(&img);
  mend__recovered_entry(r);
  if (ran >= CRASH_LOOP_RUNS) {
    mend_engine_log_line(E, "error", r->id, NULL, 0, "recover",
                         "its worker stopped each time its step ran: a crash loop");
    put_aside(r, takes);
    return 0;
  }
  mend_engine_log_line(E, "info", r->id, NULL, 0, "recover", "resumed from the store");
  mend__carry_on(r);
  return 0;
}

/* A lease of a worker on this host whose process is gone need not be waited out: a restart
 * after kill -9 takes its runs over at once. A reused pid only makes us wait for the lease. */
int mend__release_dead_local_owners(mend_engine *E) {
  /* It reads every unfinished run's owner: once a second is enough, not every poll, and less
   * often when that read is long (40 ms with 100k runs held), so that it costs the loop at
   * most a twentieth of its time. */
  double now = mend_real_now();
  if (now < E->next_dead_check) return 0;
  int released = 0;
  json_t *owners = mend_store_lease_holders(E->store);
  double took = mend_real_now() - now;
  E->next_dead_check = now + (took * 20 > 1.0 ? took * 20 : 1.0);
  if (!owners) { mend__store_failed(E); return 0; }
  const char *mine_host_end = strchr(E->owner, ':');
  size_t host_len = mine_host_end ? (size_t)(mine_host_end - E->owner) : 0;
  size_t i;
  json_t *o;
  json_array_foreach(owners, i, o) {
    const char *owner = json_string_value(o);
    if (!owner || strcmp(owner, E->owner) == 0 || strncmp(owner, E->owner, host_len + 1) != 0)
      continue;
    long pid = strtol(owner + host_len + 1, NULL, 10);
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
      if (mend_store_release_owner(E->store, owner)) { mend__store_failed(E); break; }
      mend_engine_log_line(E, "info", NULL, NULL, 0, "recover", owner);
      released++;
    }
  }
  json_decref(owners);
  return released;
}

/* Takes the unfinished runs that nobody holds and resumes them; with MEND_CLAIM_FREE in `how`,
 * not those of workers whose lease ran out. Returns how many. */
int mend__claim_and_restore(mend_engine *E, int limit, int how) {
  if (limit <= 0 || E->broken) return 0;
  mend__release_dead_local_owners(E);
  if (E->broken) return 0;
  /* A serving worker takes the newest half first: new work must not wait behind a backlog
   * being recovered, and the oldest half keeps the backlog moving. */
  json_t *ids = mend_store_claim(E->store, E->owner, E->lease_seconds,
                                 E->serving ? (limit + 1) / 2 : limit,
                                 how | (E->serving ? MEND_CLAIM_NEWEST : 0));
  if (ids && E->serving && (int)json_array_size(ids) < limit) {
    json_t *more = mend_store_claim(E->store, E->owner, E->lease_seconds,
                                    limit - (int)json_array_size(ids), how);
    if (more) json_array_extend(ids, more);
    json_decref(more);
    if (!more) { json_decref(ids); ids = NULL; }
  }
  if (!ids) { mend__store_failed(E); return 0; }
  size_t i;
  json_t *id;
  int n = 0;
  /* The claim is durable before any of these runs acts: each is queued behind the batch that
   * holds it. With nothing claimed the write lock must not wait for a turn: commit now. */
  if (json_array_size(ids) == 0) {
    if (mend__commit_counted(E)) mend__store_failed(E);
    json_decref(ids);
    return 0;
  }
  mend__kick(E);
  mend__check_fence(E);   /* a run we lost and now claim again must be let go before it returns */
  if (E->fence_was_late) {
    /* One this engine still has in memory from before a stall (another worker took it, then
     * gave it back) is stale: the store's copy is the run now. */
    id_list claimed = {0};
    json_array_foreach(ids, i, id) mend__add_id(&claimed, json_string_value(id));
    if (claimed.oom) mend__breakdown(E, "out of memory keeping track of lost leases");
    else
      mend__let_go(E, &claimed.set,
                   "claimed again after a stall: the stored run replaces this copy");
    mend_idset_clear(&claimed.set);
  }
  /* A store failure since the claim (mend__store_lost) rolled it back: the rest are not ours. */
  json_array_foreach(ids, i, id) {
    if (E->store_lost || E->broken) break;
    n += restore(E, json_string_value(id)) == 0;
  }
  json_decref(ids);
  return n;
}

int mend_engine_recover_runs(mend_engine *E, int limit) {
  int n = mend__claim_and_restore(E, limit > 0 ? limit : 1 << 30, MEND_CLAIM_UNAVAILABLE);
  /* The claim's batch holds SQLite's write lock until it commits: a host that recovers now and
   * drives its engine later would keep every other process from writing meanwhile. */
  if (!E->broken && mend_store_batch_open(E->store) && mend__commit_now(E)) return -1;
  return E->broken ? -1 : n;
}
