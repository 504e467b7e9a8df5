/*
 * test_parkset: the index of parked runs. Against plain arrays as the reference: ids packed and
 * given back as they were, ids that are not run ids refused, removals and due-time changes in
 * any order leaving every other entry findable, and due entries popped earliest first.
 */
#include "parkset.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>

#define N 3000

static const char digits[] = "0123456789abcdefghjkmnpqrstvwxyz";

static void make_id(char id[17], unsigned seed) {
  for (int i = 0; i < 16; i++) {
    seed = seed * 1103515245u + 12345u;
    id[i] = digits[(seed >> 16) & 31];
  }
  id[16] = 0;
}

static void it_gives_ids_back_and_refuses_others(void) {
  mend_parkset p = {0};
  CHECK_EQ_INT(mend_parkset_add(&p, "01jd0000000zzzzz", 5), 1);
  CHECK_EQ_INT(mend_parkset_add(&p, "01jd0000000zzzzz", 3), 0);
  CHECK_EQ_INT(mend_parkset_add(&p, "short", 1), -2);
  CHECK_EQ_INT(mend_parkset_add(&p, "01jd0000000zzzzU", 1), -2);   /* not in the alphabet */
  CHECK(mend_parkset_has(&p, "01jd0000000zzzzz"));
  CHECK(!mend_parkset_has(&p, "01jd0000000zzzzy"));
  CHECK_EQ_INT(p.n, 1);
  CHECK_NEAR(mend_parkset_next_due(&p), 3, 0);
  char id[17];
  CHECK_EQ_INT(mend_parkset_pop_due(&p, 2.9, id), 0);
  CHECK_EQ_INT(mend_parkset_pop_due(&p, 3, id), 1);
  CHECK_STR(id, "01jd0000000zzzzz");
  CHECK_EQ_INT(p.n, 0);
  CHECK_EQ_INT(mend_parkset_add(&p, "zzzzzzzzzzzzzzzz", -1), 1);   /* no due time */
  CHECK_NEAR(mend_parkset_next_due(&p), -1, 0);
  mend_parkset_id(&p, 0, id);
  CHECK_STR(id, "zzzzzzzzzzzzzzzz");
  mend_parkset_free(&p);
}

static void it_keeps_entries_and_their_order_through_changes(void) {
  mend_parkset p = {0};
  static char ids[N][17];
  static double due[N];
  static int in[N];
  srand(7);
  for (int i = 0; i < N; i++) {
    make_id(ids[i], (unsigned)i * 2654435761u);
    due[i] = i % 3 == 0 ? -1 : rand() % 1000;
    CHECK_EQ_INT(mend_parkset_add(&p, ids[i], due[i]), 1);
    in[i] = 1;
  }
  for (int k = 0; k < 4 * N; k++) {
    int i = rand() % N;
    if (k % 3 == 0 && in[i]) {
      due[i] = rand() % 1000;
      CHECK_EQ_INT(mend_parkset_add(&p, ids[i], due[i]), 0);
    } else if (in[i]) {
      CHECK_EQ_INT(mend_parkset_remove(&p, ids[i]), 1);
      in[i] = 0;
    } else {
      CHECK_EQ_INT(mend_parkset_add(&p, ids[i], due[i]), 1);
      in[i] = 1;
    }
  }
  int count = 0, wrong = 0;
  for (int i = 0; i < N; i++) {
    count += in[i];
    wrong += mend_parkset_has(&p, ids[i]) != in[i];
  }
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(p.n, count);
  /* popped in due order, each one that was in and timed, none twice */
  char id[17];
  double last = -1;
  int popped = 0, order = 0, unknown = 0;
  while (mend_parkset_pop_due(&p, 500, id)) {
    int found = -1;
    for (int i = 0; i < N && found < 0; i++) if (in[i] && strcmp(ids[i], id) == 0) found = i;
    if (found < 0) { unknown++; continue; }
    order += due[found] < last || due[found] > 500 || due[found] < 0;
    last = due[found];
    in[found] = 0;
    popped++;
  }
  int left_due = 0;
  for (int i = 0; i < N; i++) left_due += in[i] && due[i] >= 0 && due[i] <= 500;
  CHECK_EQ_INT(unknown, 0);
  CHECK_EQ_INT(order, 0);
  CHECK_EQ_INT(left_due, 0);
  CHECK(popped > 0);
  CHECK_EQ_INT(p.n, count - popped);
  mend_parkset_free(&p);
  CHECK_EQ_INT(p.n, 0);
}

static void it_gives_back_its_arrays_after_a_burst(void) {
  mend_parkset p = {0};
  static char ids[N][17];
  for (int i = 0; i < N; i++) {
    make_id(ids[i], (unsigned)i * 40503u + 7u);
    CHECK_EQ_INT(mend_parkset_add(&p, ids[i], i % 2 ? i : -1), 1);
  }
  uint32_t peak = p.cap, peak_slots = p.nslot;
  for (int i = 10; i < N; i++) CHECK_EQ_INT(mend_parkset_remove(&p, ids[i]), 1);
  CHECK(p.cap < peak);
  CHECK(p.nslot < peak_slots);
  CHECK_EQ_INT(p.n, 10);
  for (int i = 0; i < N; i++) CHECK_EQ_INT(mend_parkset_has(&p, ids[i]), i < 10);
  char id[17];
  for (int i = 1; i < 10; i += 2) {
    CHECK_EQ_INT(mend_parkset_pop_due(&p, 1e9, id), 1);
    CHECK_STR(id, ids[i]);
  }
  CHECK_EQ_INT(mend_parkset_pop_due(&p, 1e9, id), 0);
  CHECK_EQ_INT(p.n, 5);
  mend_parkset_free(&p);
}

int main(void) {
  it_gives_ids_back_and_refuses_others();
  it_keeps_entries_and_their_order_through_changes();
  it_gives_back_its_arrays_after_a_burst();
  return check_done("parkset");
}
