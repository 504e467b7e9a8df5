/*
 * image_check: the checks of a run's image for the engine (mend_store_run_image) that every
 * backend must pass, through the storage interface alone: a run with a map (its items' rows,
 * one in flight), a `when` row, a step not begun, a custom key, a child run, a cancel asked
 * for and an unavailable version, read typed and compared field by field with the view of the
 * same run for people (mend_store_run), which must not change. Included by test_store_records.c
 * and test_pg_store_images.c after check.h.
 */
#ifndef MEND_IMAGE_CHECK_H
#define MEND_IMAGE_CHECK_H

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "transition.h"

#define IMAGE_MAP_ROWS (1 << 20)   /* engine_int.h's MEND_MAP_ROWS: an item's row */

static int image_same_text(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* JSON text from the image against a decoded value from the view. */
static int image_same_json(const char *text, json_t *v) {
  if (!text || !v) return !text && !v;
  json_t *t = json_loads(text, JSON_DECODE_ANY, NULL);
  int same = t && json_equal(t, v);
  json_decref(t);
  return same;
}

static double image_real(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return v ? json_number_value(v) : -1;
}

/* Every field the engine rebuilds from, as the view tells it. */
static void image_check_view(mend_store *s, const char *id, const mend_run_image *img) {
  json_t *run = mend_store_run(s, id);
  CHECK(run != NULL);
  if (!run) return;
  CHECK(image_same_text(img->workflow, json_string_value(json_object_get(run, "workflow"))));
  CHECK(image_same_text(img->version, json_string_value(json_object_get(run, "version"))));
  CHECK_STR(mend_run_status_name(img->status), json_string_value(json_object_get(run, "status")));
  CHECK(image_same_text(img->reason, json_string_value(json_object_get(run, "reason"))));
  CHECK(image_same_text(img->error, json_string_value(json_object_get(run, "error"))));
  CHECK(image_same_text(img->parent_run, json_string_value(json_object_get(run, "parent_run"))));
  CHECK(image_same_text(img->unavailable, json_string_value(json_object_get(run, "unavailable"))));
  CHECK_EQ_INT(img->attention, json_is_true(json_object_get(run, "attention")));
  CHECK_EQ_INT(img->cancel_requested, json_is_true(json_object_get(run, "cancel_requested")));
  CHECK(image_same_json(img->input, json_object_get(run, "input")));
  json_t *steps = json_object_get(run, "steps");
  CHECK_EQ_INT(img->nsteps, json_array_size(steps));
  for (int i = 0; i < img->nsteps && i < (int)json_array_size(steps); i++) {
    const mend_step_image *st = &img->steps[i];
    json_t *v = json_array_get(steps, (size_t)i);
    CHECK_EQ_INT(st->idx, json_integer_value(json_object_get(v, "idx")));
    CHECK(image_same_text(st->name, json_string_value(json_object_get(v, "name"))));
    CHECK_STR(mend_step_status_name(st->status), json_string_value(json_object_get(v, "status")));
    CHECK_EQ_INT(st->attempts, json_integer_value(json_object_get(v, "attempts")));
    CHECK_EQ_INT(st->comp_attempts, json_integer_value(json_object_get(v, "comp_attempts")));
    CHECK_EQ_INT(st->custom_key, json_is_true(json_object_get(v, "custom_key")));
    if (st->custom_key)
      CHECK(
          image_same_text(st->idem_key, json_string_value(json_object_get(v, "idempotency_key"))));
    CHECK(image_same_text(st->error, json_string_value(json_object_get(v, "error"))));
    CHECK(st->due == image_real(v, "due"));
    CHECK(st->last_delay == image_real(v, "last_delay"));
    CHECK_EQ_INT(st->slept, json_is_true(json_object_get(v, "slept")));
    CHECK(image_same_json(st->result, json_object_get(v, "result")));
  }
  json_decref(run);
  double at = 0;
  CHECK_EQ_INT(img->last_seq, mend_store_last_history(s, id, &at));
  CHECK(img->last_at == at);
}

static void image_hist(mend_store *s, const char *run, const char *step, long seq,
                       const char *event, const char *from, const char *to, int attempt,
                       double at, const char *detail) {
  mend_history_rec h = {.run_id = run, .step = step, .at = at, .event = event,
                        .from_status = from, .to_status = to, .attempt = attempt, .delay = -1,
                        .detail = detail, .seq = seq};
  CHECK_EQ_INT(mend_store_append_history(s, &h), 0);
}

static void image_step(mend_store *s, const char *run, int idx, const char *name,
                       const char *status, int attempts, const char *result, const char *error,
                       double due) {
  mend_step_rec st = {.run_id = run, .idx = idx, .name = name, .status = status,
                      .attempts = attempts, .result = result, .error = error, .due = due,
                      .last_delay = -1, .updated = 10};
  CHECK_EQ_INT(mend_store_put_step(s, &st), 0);
}

/* The whole case on an open, empty store. */
static void image_checks(mend_store *s) {
  mend_run_rec r = {.id = "img1", .workflow = "order", .version = "v1", .source = "order.lua",
                    .status = "running", .input = "{\"order\":42,\"items\":[1,2.5]}",
                    .created = 7, .updated = 7, .step_names = "[\"first\",\"fan\",\"third\"]"};
  CHECK_EQ_INT(mend_store_insert_run(s, &r), 0);
  image_hist(s, "img1", "first", 1, "step", "pending", "running", 1, 8, NULL);
  image_step(s, "img1", 0, "first", "succeeded", 1, "{\"id\":\"A-1\",\"n\":0.5}", NULL, -1);
  image_hist(s, "img1", "first", 2, "step", "running", "succeeded", 1, 9, NULL);
  /* the map step: its list in history, its own row waiting on its items */
  image_hist(s, "img1", "fan", 3, "map", NULL, NULL, 0, 9.5, "[10,20,30]");
  image_hist(s, "img1", "third", 4, "when", NULL, NULL, 0, 9.5, "true");
  mend_step_rec fan = {.run_id = "img1", .idx = 1, .name = "fan", .status = "retry_wait",
                       .attempts = 2, .comp_attempts = 1, .idem_key = "k-fan", .custom_key = 1,
                       .error = "busy", .error_kind = "retryable", .error_severity = 2,
                       .error_stopped = 1, .due = 20, .last_delay = 2.5, .updated = 10, .slept = 1};
  CHECK_EQ_INT(mend_store_put_step(s, &fan), 0);
  int item = 2 * IMAGE_MAP_ROWS;   /* (fan's index + 1) * MEND_MAP_ROWS */
  image_step(s, "img1", item, "fan/1", "succeeded", 1, "11", NULL, -1);
  image_hist(s, "img1", "fan/1", 5, "step", "running", "succeeded", 1, 10, NULL);
  image_step(s, "img1", item + 1, "fan/2", "failed", 3, NULL, "boom", -1);
  image_hist(s, "img1", "fan/2", 6, "step", "running", "failed", 3, 10.5, NULL);
  /* fan/3's second attempt began: only history says so */
  image_step(s, "img1", item + 2, "fan/3", "pending", 1, NULL, "retryable", 30);
  image_hist(s, "img1", "fan/3", 7, "step", "pending", "running", 2, 11, NULL);
  image_hist(s, "img1", NULL, 8, "alert", NULL, NULL, 0, 11.5, "{\"kind\":\"attention\"}");
  mend_run_rec c = {.id = "img1-child", .workflow = "order", .version = "v1",
                    .source = "order.lua", .status = "running", .input = "7", .created = 8,
                    .updated = 8, .step_names = "[\"first\",\"fan\",\"third\"]"};
  CHECK_EQ_INT(mend_store_insert_run(s, &c), 0);
  CHECK_EQ_INT(mend_store_set_parent(s, "img1-child", "img1", "fan"), 0);
  CHECK_EQ_INT(mend_store_request_cancel(s, "img1"), 0);
  CHECK_EQ_INT(mend_store_set_unavailable(s, "img1", "version v1 cannot be loaded"), 0);
  mend_run_rec g = {.id = "img2", .workflow = "order", .version = "v2", .source = "order.lua",
                    .status = "running", .input = "not json", .created = 9, .updated = 9,
                    .step_names = "[\"first\"]"};
  CHECK_EQ_INT(mend_store_insert_run(s, &g), 0);
  image_step(s, "img2", 0, "first", "compensating", 1, "[1]", NULL, 40);
  CHECK_EQ_INT(mend_store_update_run(s, "img2", "compensating", "declined", 1, 12, "compensable"),
               0);
  CHECK_EQ_INT(mend_store_commit(s), 0);

  mend_run_image img;
  CHECK_EQ_INT(mend_store_run_image(s, "img1", &img), 0);
  CHECK_STR(img.workflow, "order");
  CHECK_STR(img.version, "v1");
  CHECK(img.status == MEND_RUN_RUNNING);
  CHECK(img.reason == NULL);
  CHECK_EQ_INT(img.cancel_requested, 1);
  CHECK(img.parent_run == NULL);
  CHECK_STR(img.unavailable, "version v1 cannot be loaded");
  CHECK_STR(img.input, "{\"order\":42,\"items\":[1,2.5]}");
  CHECK_EQ_INT(img.nsteps, 6);
  if (img.nsteps == 6) {
    CHECK(img.steps[0].status == MEND_STEP_SUCCEEDED);
    CHECK_STR(img.steps[0].result, "{\"id\":\"A-1\",\"n\":0.5}");   /* the text kept */
    CHECK(img.steps[1].status == MEND_STEP_RETRY_WAIT);
    CHECK_EQ_INT(img.steps[1].attempts, 2);
    CHECK_EQ_INT(img.steps[1].comp_attempts, 1);
    CHECK_EQ_INT(img.steps[1].custom_key, 1);
    CHECK_STR(img.steps[1].idem_key, "k-fan");
    CHECK_STR(img.steps[1].error, "busy");
    CHECK_STR(img.steps[1].error_kind, "retryable");   /* its own value, not read from the text */
    CHECK_EQ_INT(img.steps[1].error_severity, 2);        /* the store keeps what it is given */
    CHECK_EQ_INT(img.steps[1].error_stopped, 1);
    CHECK(img.steps[1].due == 20 && img.steps[1].last_delay == 2.5);
    CHECK_EQ_INT(img.steps[1].slept, 1);
    /* third has no row: pending, no attempt, in its place */
    CHECK_EQ_INT(img.steps[2].idx, 2);
    CHECK_STR(img.steps[2].name, "third");
    CHECK(img.steps[2].status == MEND_STEP_PENDING && img.steps[2].attempts == 0);
    CHECK(img.steps[2].due == -1 && img.steps[2].result == NULL);
    CHECK_EQ_INT(img.steps[3].idx, item);
    CHECK_STR(img.steps[3].result, "11");
    CHECK(img.steps[4].status == MEND_STEP_FAILED);
    CHECK_STR(img.steps[4].error, "boom");
    CHECK(img.steps[4].error_kind == NULL);   /* none given */
    CHECK(img.steps[4].error_severity == 0 && img.steps[4].error_stopped == 0);
    /* in flight: running with that attempt, its wait over */
    CHECK(img.steps[5].status == MEND_STEP_RUNNING);
    CHECK_EQ_INT(img.steps[5].attempts, 2);
    CHECK(img.steps[5].due == -1);
  }
  CHECK_EQ_INT(img.nhistory, 8);
  if (img.nhistory == 8) {
    CHECK_STR(img.history[2].event, "map");
    CHECK_STR(img.history[2].step, "fan");
    CHECK_STR(img.history[2].detail, "[10,20,30]");
    CHECK_STR(img.history[3].event, "when");
    CHECK(img.history[3].detail == NULL);   /* only a map's list is read */
    CHECK_STR(img.history[6].to, "running");
    CHECK_EQ_INT(img.history[6].attempt, 2);
    CHECK(img.history[7].step == NULL && img.history[7].detail == NULL);
  }
  CHECK_EQ_INT(img.last_seq, 8);
  CHECK(img.last_at == 11.5);
  image_check_view(s, "img1", &img);
  mend_run_image_free(&img);

  CHECK_EQ_INT(mend_store_run_image(s, "img1-child", &img), 0);
  CHECK_STR(img.parent_run, "img1");
  CHECK_STR(img.input, "7");
  CHECK_EQ_INT(img.nsteps, 3);
  CHECK_EQ_INT(img.nhistory, 0);
  CHECK(img.last_seq == 0 && img.last_at == -1);
  image_check_view(s, "img1-child", &img);
  mend_run_image_free(&img);

  CHECK_EQ_INT(mend_store_run_image(s, "img2", &img), 0);
  CHECK(img.status == MEND_RUN_COMPENSATING);
  CHECK_STR(img.reason, "compensable");
  CHECK_STR(img.error, "declined");
  CHECK_EQ_INT(img.attention, 1);
  CHECK_STR(img.input, "not json");
  CHECK_EQ_INT(img.nsteps, 1);
  if (img.nsteps == 1)
    CHECK(img.steps[0].status == MEND_STEP_COMPENSATING && img.steps[0].due == 40);
  mend_run_image_free(&img);

  /* in a batch: the image sees it */
  image_hist(s, "img2", "first", 1, "step", "compensating", "compensated", 0, 13, NULL);
  image_step(s, "img2", 0, "first", "compensated", 1, "[1]", NULL, -1);
  CHECK_EQ_INT(mend_store_run_image(s, "img2", &img), 0);
  CHECK_EQ_INT(img.nsteps, 1);
  if (img.nsteps == 1) CHECK(img.steps[0].status == MEND_STEP_COMPENSATED);
  CHECK_EQ_INT(img.last_seq, 1);
  mend_run_image_free(&img);
  CHECK_EQ_INT(mend_store_commit(s), 0);

  memset(&img, 0x5a, sizeof img);
  CHECK_EQ_INT(mend_store_run_image(s, "no-such-run", &img), -1);
  CHECK_EQ_INT(mend_store_not_found(s), 1);
  CHECK_STR(mend_store_errmsg(s), "no run no-such-run");
  CHECK(img.steps == NULL && img.nsteps == 0 && img.workflow == NULL);
  mend_run_image_free(&img);
}

#endif
