/*
 * test_pg_store_images: a run's image for the engine read from PostgreSQL: one run's
 * (tests/image_check.h, the checks every backend passes) and a claim's runs' images read
 * together.
 *
 * Against a real server named by MEND_TEST_PG (tests/pg_case.h: each case gets a database of
 * its own, dropped after; skipped, saying so, without a server). Must never: let one case
 * read what another left.
 */
#include "check.h"
#include "pg_case.h"
#include "store/pg/pg_int.h"
#include "image_check.h"

#include <mend.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A database made by a mend of schema 1 is upgraded at open, its rows kept. */
/* The run's image for the engine: typed, the same as the view says (image_check.h), in one
 * round trip; a status this mend does not know is an error that names it. */
static void test_run_image(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  image_checks(s);
  PGconn *c = raw();
  sql(c, "UPDATE runs SET status = 'bogus' WHERE id = 'img1'");
  PQfinish(c);
  mend_run_image img;
  CHECK_EQ_INT(mend_store_run_image(s, "img1", &img), -1);
  CHECK(strstr(mend_store_errmsg(s), "run img1 has an unknown status \"bogus\"") != NULL);
  CHECK(img.steps == NULL && img.workflow == NULL);
  /* the connection is fine after: the next read answers */
  CHECK_EQ_INT(mend_store_run_image(s, "img2", &img), 0);
  CHECK_EQ_INT(img.nsteps, 1);
  mend_run_image_free(&img);
  mend_store_close(s);
  drop_case();
}

/* A claim's runs read ahead together (pg_image.c): each image is the one a read of that run
 * alone gives (image_check_view), past a chunk's end, with an id that needs quoting in an
 * array; the runs of a chunk are read with its first (a change committed elsewhere since is
 * not in them, as if read at the claim); a write of this batch to one of them since is. */
static void test_claimed_images(void) {
  new_case();
  mend_store *a = open_store(), *b = open_store();
  if (!a || !b) return;
  mend__pg_set_fence(b, "b", 30);
  enum { N = 150 };   /* more than a chunk */
  char ids[N][32];
  for (int i = 0; i < N; i++) {
    if (i == 7) snprintf(ids[i], sizeof ids[i], "q\"u,o{t}e\\%d", i);
    else snprintf(ids[i], sizeof ids[i], "claimed-%03d", i);
    mend_run_rec r = run_rec(ids[i], NULL);
    r.created = i;
    r.step_names = "[\"a\",\"b\"]";
    CHECK_EQ_INT(mend__pg_insert_run(a, &r), 0);
    for (long k = 1; k <= i % 4; k++) {
      mend_history_rec h = hist(ids[i], k);
      h.at = 2 + (double)k;
      CHECK_EQ_INT(mend__pg_append_history(a, &h), 0);
    }
    if (i % 3) {
      mend_step_rec st = {.run_id = ids[i], .idx = 0, .name = "a", .status = "succeeded",
                          .attempts = 1, .result = "{\"n\":1}", .due = -1, .last_delay = -1,
                          .updated = 3};
      if (i % 3 == 2) {   /* a step that failed, its kind and severity beside its text */
        st.status = "failed";
        st.result = NULL;
        st.error = "sold out";
        st.error_kind = "compensable";
        st.error_severity = 3;
      }
      CHECK_EQ_INT(mend__pg_put_step(a, &st), 0);
    }
  }
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  json_t *got = mend__pg_claim(b, "b", 30, 1000, MEND_CLAIM_FREE);
  CHECK(got && json_array_size(got) == N);
  if (!got || json_array_size(got) != N) return;
  mend_run_image img;
  CHECK_EQ_INT(mend_store_run_image(b, ids[0], &img), 0);
  image_check_view(b, ids[0], &img);
  mend_run_image_free(&img);
  /* read with ids[0]: a history row committed by another since is not in ids[1]'s image */
  PGconn *c = raw();
  sql(c, "DELETE FROM history WHERE run_id = 'claimed-001'");
  PQfinish(c);
  CHECK_EQ_INT(mend_store_run_image(b, ids[1], &img), 0);
  CHECK_EQ_INT(img.nhistory, 1);
  CHECK_EQ_INT(img.last_seq, 1);
  mend_run_image_free(&img);
  /* written in this batch since: in the image */
  mend_history_rec h = hist(ids[2], 3);
  h.at = 9;
  CHECK_EQ_INT(mend__pg_append_history(b, &h), 0);
  CHECK_EQ_INT(mend__pg_request_cancel(b, ids[3]), 0);
  /* taken out of order: a later chunk read first, then a write to one of the first chunk */
  CHECK_EQ_INT(mend_store_run_image(b, ids[120], &img), 0);
  image_check_view(b, ids[120], &img);
  mend_run_image_free(&img);
  mend_history_rec h50 = hist(ids[50], 7);
  h50.at = 11;
  CHECK_EQ_INT(mend__pg_append_history(b, &h50), 0);
  CHECK_EQ_INT(mend_store_run_image(b, ids[50], &img), 0);
  CHECK(img.last_seq == 7 && img.last_at == 11);
  mend_run_image_free(&img);
  for (int i = 2; i < N; i++) {
    CHECK_EQ_INT(mend_store_run_image(b, json_string_value(json_array_get(got, (size_t)i)), &img),
                 0);
    image_check_view(b, json_string_value(json_array_get(got, (size_t)i)), &img);
    CHECK_EQ_INT(img.nsteps, 2);
    if (i == 2) CHECK(img.nhistory == 3 && img.last_seq == 3 && img.last_at == 9);
    if (i == 3) CHECK_EQ_INT(img.cancel_requested, 1);
    if (i == 7) CHECK_STR(img.workflow, "order");
    if (i % 3 == 2) {   /* read ahead, as written */
      CHECK_STR(img.steps[0].error_kind, "compensable");
      CHECK_EQ_INT(img.steps[0].error_severity, 3);
    }
    if (i % 3 == 1) CHECK(img.steps[0].error_kind == NULL && img.steps[0].error_severity == 0);
    mend_run_image_free(&img);
  }
  /* a second take of one is read again, not given twice */
  CHECK_EQ_INT(mend_store_run_image(b, ids[5], &img), 0);
  image_check_view(b, ids[5], &img);
  mend_run_image_free(&img);
  /* read ahead, not taken, and the batch committed: a later read is a fresh one */
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  CHECK_EQ_INT(mend__pg_release_owner(a, "b"), 0);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  json_decref(got);
  got = mend__pg_claim(b, "b", 30, 2, MEND_CLAIM_FREE);
  CHECK(got && json_array_size(got) == 2);
  CHECK_EQ_INT(mend__pg_commit(b), 0);
  c = raw();
  sql(c, "DELETE FROM history WHERE run_id = 'claimed-001'");
  sql(c, "UPDATE runs SET error = 'changed' WHERE id = 'claimed-000'");
  PQfinish(c);
  CHECK_EQ_INT(mend_store_run_image(b, ids[0], &img), 0);
  CHECK_STR(img.error, "changed");
  mend_run_image_free(&img);
  json_decref(got);
  /* a claim whose batch failed (rolled back): the next transaction reads afresh */
  CHECK_EQ_INT(mend__pg_release_owner(a, "b"), 0);
  CHECK_EQ_INT(mend__pg_commit(a), 0);
  got = mend__pg_claim(b, "b", 30, 3, MEND_CLAIM_FREE);
  CHECK(got && json_array_size(got) == 3);
  CHECK_EQ_INT(mend_store_run_image(b, ids[0], &img), 0);   /* reads ids[1] and ids[2] too */
  mend_run_image_free(&img);
  CHECK_EQ_INT(mend__pg_update_run(b, "no-such-run", "succeeded", NULL, 0, 1, NULL), 0);
  CHECK(mend__pg_commit(b) != 0);   /* "no run": the claim is rolled back */
  c = raw();
  sql(c, "UPDATE runs SET error = 'after the failure' WHERE id = 'claimed-002'");
  PQfinish(c);
  CHECK_EQ_INT(mend__pg_begin(PG(b)), 0);   /* a new transaction */
  CHECK_EQ_INT(mend_store_run_image(b, ids[2], &img), 0);
  CHECK_STR(img.error, "after the failure");
  mend_run_image_free(&img);
  json_decref(got);
  mend__pg_close(a);
  mend__pg_close(b);
  drop_case();
}

int main(void) {
  if (!pg_case_begin("test_pg_store_images")) return 0;
  test_run_image();
  test_claimed_images();
  return pg_case_end("test_pg_store_images");
}
