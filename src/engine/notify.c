/*
 * notify: what the engine tells the world besides its store. Owns alerts (a run that needs a
 * person: recorded in the run's history with the batch, heard after the batch commits, by the
 * host's alert function and the alert command, fire and forget, the event as one JSON line on
 * its stdin) and events for the host's metrics, heard in their order, a ticking host's a few at
 * a time (so a batch's events may be heard after a later batch's alerts). Must never: make an
 * alert or an event heard before the batch that records it is durable; wait for an alert
 * command.
 */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

/* Records an alert in history now; the hook hears of it once the batch has committed. */
void mend__alert(mend_run *r, const char *kind, int step, const char *reason, const char *error) {
  mend_engine *E = r->E;
  double now = mend_engine_now(E);
  json_t *ev = json_pack("{s:s, s:s, s:s, s:f}", "kind", kind, "run_id", r->id, "workflow",
                         r->wf->name, "at", now);
  if (step >= 0) json_object_set_new(ev, "step", json_string(mend__step_name(r, step)));
  if (reason) json_object_set_new(ev, "reason", json_string(reason));
  if (error) json_object_set_new(ev, "error", json_string(error));
  char *text = json_dumps(ev, JSON_COMPACT);
  mend__history(r, step >= 0 ? mend__step_name(r, step) : NULL, "alert", NULL, NULL, 0, error, -1,
                text);
  free(text);
  json_array_append_new(E->alerts, ev);
}

/* An event for the host's metrics (cfg.on_event); like alerts, heard after the commit. */
void mend__emit(mend_engine *E, json_t *ev) {
  if (!E->cfg.on_event) { json_decref(ev); return; }
  json_object_set_new(ev, "at", json_real(mend_engine_now(E)));
  json_array_append_new(E->events, ev);
}

int mend__events_due(const mend_engine *E) {
  return E->events_heard < json_array_size(E->events_due);
}

/* The events of durable batches, heard in their order. A ticking host hears them while its
 * tick has time, at least one a call, the rest at its next pieces: each is a JSON text and the
 * host's callback (some 5 us), and a wave of quests ending together had a tick's pick-up hear
 * up to 1 ms of them in one go (W11, 1 ms budget). The size is read again after each callback,
 * which may end a batch of its own. */
void mend__hear_events(mend_engine *E) {
  while (E->events_heard < json_array_size(E->events_due)) {
    json_t *ev = json_incref(json_array_get(E->events_due, E->events_heard++));
    if (E->finished_head < E->finished_n && E->finished_at[E->finished_head] == E->events_heard_n)
      E->finished_head++;   /* a run's end: out of flight as the host hears it */
    E->events_heard_n++;
    E->cfg.on_event(E->cfg.event_ud, ev);
    json_decref(ev);
    if (E->turn_deadline > 0 && mend_real_now() >= E->turn_deadline) break;
  }
  size_t n = json_array_size(E->events_due);
  if (E->events_heard >= n) {
    json_array_clear(E->events_due);
    E->events_heard = 0;
  } else if (E->events_heard >= 64 && E->events_heard * 2 >= n) {
    /* ticks that always leave some must not keep every event they heard */
    json_t *rest = json_array();
    for (size_t i = E->events_heard; i < n; i++)
      json_array_append(rest, json_array_get(E->events_due, i));
    json_decref(E->events_due);
    E->events_due = rest;
    E->events_heard = 0;
  }
}

/* Its end is durable already, so it joins what is due at once rather than the open batch's
 * events: a lease renewal in that batch would leave it for a later turn. Until it is heard the
 * run counts as in flight, so that a host that stops ticking at 0 has heard every end even when
 * its tick had no time left to hear them all. */
void mend__emit_finished(mend_engine *E, json_t *ev) {
  if (!E->cfg.on_event || !ev) { json_decref(ev); return; }
  if (E->finished_head == E->finished_n) E->finished_head = E->finished_n = 0;
  if (E->finished_n == E->finished_cap) {
    if (E->finished_head > 0) {   /* those heard make room */
      memmove(E->finished_at, E->finished_at + E->finished_head,
              (E->finished_n - E->finished_head) * sizeof *E->finished_at);
      E->finished_n -= E->finished_head;
      E->finished_head = 0;
    } else {
      size_t cap = E->finished_cap ? 2 * E->finished_cap : 64;
      unsigned long *at = realloc(E->finished_at, cap * sizeof *at);
      if (!at) { json_decref(ev); return; }   /* not heard: the run leaves flight now */
      E->finished_at = at;
      E->finished_cap = cap;
    }
  }
  json_object_set_new(ev, "at", json_real(mend_engine_now(E)));
  E->finished_at[E->finished_n++] =
      E->events_heard_n + json_array_size(E->events_due) - E->events_heard;
  if (json_array_append_new(E->events_due, ev)) E->finished_n--;
}

int mend__finished_unheard(const mend_engine *E) { return (int)(E->finished_n - E->finished_head); }

/* ---- the alert command: fire and forget, the event as one JSON line on its stdin */

typedef struct alert_proc {
  child base;             /* CHILD_ALERT */
  uv_process_t proc;
  uv_pipe_t in;
  uv_write_t write;
  char *text;
  int open;
} alert_proc;

void mend__alert_handle_closed(uv_handle_t *h) {
  alert_proc *a = h->data;
  if (--a->open == 0) {
    free(a->text);
    free(a);
  }
}

static void alert_exited(uv_process_t *p, int64_t status, int signal) {
  alert_proc *a = p->data;
  mend_engine *E = mend__child_unlink(&a->base);
  if (E) {
    E->alert_commands--;
    if (status != 0 || signal != 0) {
      E->alert_commands_failed++;
      char msg[96];
      if (signal) snprintf(msg, sizeof msg, "alert command failed (killed by signal %d)", signal);
      else snprintf(msg, sizeof msg, "alert command failed (exit status %lld)", (long long)status);
      mend_engine_log_line(E, "warn", NULL, NULL, 0, "alert", msg);
    }
  }
  uv_close((uv_handle_t *)p, mend__alert_handle_closed);
}

static void alert_written(uv_write_t *w, int status) {
  (void)status;
  alert_proc *a = w->data;
  if (!uv_is_closing((uv_handle_t *)&a->in))
    uv_close((uv_handle_t *)&a->in, mend__alert_handle_closed);
}

static char *text_for_command(json_t *ev) {
  char *t = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!t) return NULL;
  size_t n = strlen(t);
  char *line = realloc(t, n + 2);
  if (!line) { free(t); return NULL; }
  line[n] = '\n';
  line[n + 1] = 0;
  return line;
}

static void run_alert_command(mend_engine *E, char *text) {
  if (!text) return;
  alert_proc *a = calloc(1, sizeof *a);
  a->text = text;
  uv_pipe_init(E->loop, &a->in, 0);
  a->in.data = a->proc.data = a->write.data = a;
  char *args[] = {"sh", "-c", (char *)E->cfg.alert_command, NULL};
  uv_stdio_container_t stdio[3] = {
    {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&a->in},
    {.flags = UV_INHERIT_FD, .data.fd = 2},   /* its output goes where mend's log goes */
    {.flags = UV_INHERIT_FD, .data.fd = 2},
  };
  uv_process_options_t opt = {.exit_cb = alert_exited, .file = "sh", .args = args,
                              .stdio_count = 3, .stdio = stdio};
  a->open = 2;
  int rc = uv_spawn(E->loop, &a->proc, &opt);
  if (rc) {
    E->alert_commands_failed++;
    mend_engine_log_line(E, "error", NULL, NULL, 0, "alert", uv_strerror(rc));
    uv_close((uv_handle_t *)&a->proc, mend__alert_handle_closed);
    uv_close((uv_handle_t *)&a->in, mend__alert_handle_closed);
    return;
  }
  E->alert_commands++;
  mend__child_link(E, &a->base, CHILD_ALERT);
  uv_buf_t b = uv_buf_init(a->text, (unsigned)strlen(a->text));
  uv_write(&a->write, (uv_stream_t *)&a->in, &b, 1, alert_written);
}

/* The alerts and events of a batch that is durable now; takes both arrays. */
void mend__fire_batch(mend_engine *E, json_t *alerts, json_t *events) {
  if (E->cfg.on_event) json_array_extend(E->events_due, events);
  json_decref(events);
  mend__hear_events(E);
  size_t i;
  json_t *ev;
  json_array_foreach(alerts, i, ev) {
    char *text = json_dumps(ev, JSON_COMPACT);
    mend_engine_log_line(E, "warn", json_string_value(json_object_get(ev, "run_id")), NULL, 0,
                         "alert", text);
    free(text);
    if (E->cfg.alert) E->cfg.alert(E->cfg.alert_ud, ev);
    if (E->cfg.alert_command) run_alert_command(E, text_for_command(ev));
  }
  json_decref(alerts);
}

int mend_engine_alert_commands_failed(const mend_engine *E) { return E->alert_commands_failed; }

void mend_engine_alert(mend_engine *E, json_t *ev) {
  if (!json_object_get(ev, "at")) json_object_set_new(ev, "at", json_real(mend_engine_now(E)));
  json_t *one = json_array();
  json_array_append(one, ev);
  mend__fire_batch(E, one, json_array());
}
