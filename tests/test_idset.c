/*
 * test_idset: the set the store's fence keeps lost runs in. Against a plain array as the
 * reference: adds, lookups by length (ids are not NUL-terminated where the store reads them),
 * and removals that must leave every other member findable however the probes collided.
 */
#include "idset.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>

#define N 2000

static void it_finds_what_was_added_by_length(void) {
  mend_idset s = {0};
  CHECK(!mend_idset_has(&s, "a", 1));
  CHECK_EQ_INT(mend_idset_add(&s, "run-1xyz", 5), 1);   /* "run-1" */
  CHECK_EQ_INT(mend_idset_add(&s, "run-1", 5), 0);
  CHECK(mend_idset_has(&s, "run-1abc", 5));
  CHECK(!mend_idset_has(&s, "run-1abc", 6));
  CHECK(!mend_idset_has(&s, "run-", 4));
  CHECK_EQ_INT(s.count, 1);
  mend_idset_clear(&s);
  CHECK_EQ_INT(s.count, 0);
  CHECK(!mend_idset_has(&s, "run-1", 5));
}

static void it_keeps_every_member_findable_through_removals(void) {
  mend_idset s = {0};
  static char ids[N][16];
  static int in[N];
  for (int i = 0; i < N; i++) {
    snprintf(ids[i], sizeof ids[i], "r%d", i * 7919);
    CHECK_EQ_INT(mend_idset_add(&s, ids[i], strlen(ids[i])), 1);
    in[i] = 1;
  }
  srand(5);
  for (int k = 0; k < 3 * N; k++) {
    int i = rand() % N;
    if (in[i]) mend_idset_remove(&s, ids[i], strlen(ids[i]));
    else CHECK_EQ_INT(mend_idset_add(&s, ids[i], strlen(ids[i])), 1);
    in[i] = !in[i];
  }
  int count = 0, wrong = 0;
  for (int i = 0; i < N; i++) {
    count += in[i];
    wrong += mend_idset_has(&s, ids[i], strlen(ids[i])) != in[i];
  }
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(s.count, count);
  mend_idset_remove(&s, "absent", 6);
  CHECK_EQ_INT(s.count, count);
  mend_idset_clear(&s);
}

int main(void) {
  it_finds_what_was_added_by_length();
  it_keeps_every_member_findable_through_removals();
  return check_done("idset");
}
