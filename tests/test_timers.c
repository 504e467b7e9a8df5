/*
 * test_timers: the engine's clock when it is the store's rather than this host's (a PostgreSQL
 * server whose clock is minutes away). A timer armed for a moment of the corrected clock must
 * fire at that moment: the kernel's timer counts the host's clock, so the correction must come
 * off before it is armed, or the timer fires minutes early (at once) or minutes late.
 */
#include "timers.h"
#include "check.h"

static double fired_at;

static void on_fire(mend_timer *t) {
  (void)t;
  fired_at = mend_real_now();
}

static void on_guard(uv_timer_t *h) { uv_timer_stop(h); }

/* Runs the loop until the timer fired or `limit` host seconds passed. */
static void run_until_fired(uv_loop_t *loop, double limit) {
  double give_up = mend_host_now() + limit;
  while (fired_at == 0 && mend_host_now() < give_up) uv_run(loop, UV_RUN_ONCE);
}

static void it_fires_at_the_corrected_clocks_moment(double offset) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  mend_real_clock_offset(offset);
  CHECK_NEAR(mend_real_now() - mend_host_now(), offset, 0.01);
  mend_timers ts;
  CHECK_EQ_INT(mend_timers_init(&ts, &loop, 0), 0);
  mend_timer t;
  mend_timer_init(&t, on_fire);
  /* a guard timer so that a timer armed minutes late does not hang the test */
  uv_timer_t guard;
  uv_timer_init(&loop, &guard);
  uv_timer_start(&guard, on_guard, 3000, 0);
  fired_at = 0;
  double due = mend_real_now() + 0.2;
  CHECK_EQ_INT(mend_timer_arm(&ts, &t, due), 0);
  mend_timers_sync(&ts);
  run_until_fired(&loop, 3);
  CHECK(fired_at > 0);            /* not minutes late */
  CHECK(fired_at >= due);         /* not early */
  CHECK(fired_at < due + 1.0);
  uv_timer_stop(&guard);
  uv_close((uv_handle_t *)&guard, NULL);
  mend_timers_close(&ts);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  mend_real_clock_offset(0);
}

int main(void) {
  it_fires_at_the_corrected_clocks_moment(0);
  it_fires_at_the_corrected_clocks_moment(240);    /* the server four minutes ahead */
  it_fires_at_the_corrected_clocks_moment(-240);   /* four minutes behind */
  return check_done("timers");
}
