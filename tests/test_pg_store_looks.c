/*
 * test_pg_store_looks: a ticking host's looks at events on PostgreSQL and the second connection
 * that makes them: looks committed and read ahead (a lock held elsewhere waits for no one),
 * that connection opened aside, keeping the writer's error, and made to the writer's host.
 *
 * Against a real server named by MEND_TEST_PG (tests/pg_case.h: each case gets a database of
 * its own, dropped after; skipped, saying so, without a server). Must never: let one case
 * read what another left.
 */
#include "check.h"
#include "pg_case.h"
#include "store/pg/pg_int.h"

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

/* run()'s looks and a serving worker's polls ask committed rows first, on aux: a cancel
 * request or an event of the open transaction is not seen until it commits (the look through
 * the batch sees it), one committed is. */
static void test_committed_looks(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r = run_rec("c1", "w1");
  CHECK_EQ_INT(mend__pg_insert_run(s, &r), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w1"), 0);
  CHECK_EQ_INT(mend__pg_request_cancel(s, "c1"), 0);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w1"), 0);
  json_t *ids = mend__pg_cancel_requests(s, "w1");
  CHECK(ids && json_array_size(ids) == 1);
  json_decref(ids);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w1"), 1);
  CHECK_EQ_INT(mend__pg_cancels_requested(s, "w2"), 0);   /* held by w1, not w2 */
  CHECK_EQ_INT(mend__pg_last_event(s), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "c1", "go", NULL, NULL, 3, NULL), 0);
  CHECK_EQ_INT(mend__pg_last_event(s), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK(mend__pg_last_event(s) > 0);
  mend__pg_close(s);
  drop_case();
}

/* A ticking host's look at many inboxes, sent without waiting and taken later: each pair's
 * oldest committed event not consumed, none of the open batch's; a blocking read on the same
 * connection meanwhile keeps the answer; one look at a time; a connection lost under it is a
 * failed look, and the next one opens it again. */
static int nlooked;
static char looked[8][160];
static void on_look(void *ud, const char *run_id, const char *name, long long seq,
                    const char *payload, const char *key) {
  (void)ud;
  (void)seq;
  if (nlooked < 8)
    snprintf(looked[nlooked++], sizeof looked[0], "%s %s %s %s", run_id, name, payload,
             key ? key : "-");
}

/* look_ahead, waited out while aux is still being opened (1) */
static int look(mend_store *s, int n, const char *const *ids, const char *const *names) {
  int rc = 1;
  for (int i = 0; i < 1000 && (rc = mend__pg_look_ahead(s, n, ids, names)) == 1; i++) sleep_s(0.01);
  return rc;
}

static void test_look_ahead(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r1 = run_rec("r1", NULL), r2 = run_rec("r2", NULL);
  mend__pg_insert_run(s, &r1);
  mend__pg_insert_run(s, &r2);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":1}", "k1", 5, NULL), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", "{\"n\":2}", "k2", 6, NULL), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(mend__pg_send_event(s, "r2", "paid", NULL, NULL, 7, NULL), 0);   /* not committed */
  const char *ids[3] = {"r1", "r2", "r1"}, *names[3] = {"paid", "paid", "shipped"};
  CHECK_EQ_INT(look(s, 3, ids, names), 0);
  CHECK_EQ_INT(mend__pg_look_ahead(s, 3, ids, names), -1);   /* one in flight */
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  CHECK_STR(looked[0], "r1 paid {\"n\":1} k1");
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), -1);   /* none in flight */
  /* taken, not waited for: the answer comes while the caller does other things */
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  long long seq;
  char *payload, *key;
  CHECK_EQ_INT(mend__pg_next_event(s, "r1", "paid", &seq, &payload, &key), 1);
  free(payload);
  free(key);
  CHECK_EQ_INT(mend__pg_consume_event(s, "r1", seq, "a", 8), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  CHECK_EQ_INT(look(s, 2, ids, names), 0);
  int rc = 0;
  nlooked = 0;
  for (int i = 0; i < 500 && (rc = mend__pg_look_ahead_take(s, 0, on_look, NULL)) == 0; i++)
    sleep_s(0.01);
  CHECK_EQ_INT(rc, 1);
  CHECK_EQ_INT(nlooked, 2);
  CHECK_STR(looked[0], "r1 paid {\"n\":2} k2");
  CHECK_STR(looked[1], "r2 paid null -");
  /* a blocking read on the same connection (a worker's poll) while a look is out: both answer */
  CHECK_EQ_INT(look(s, 1, ids, names), 0);
  int nev = 0;
  CHECK(mend__pg_events_after(s, 0, 10, on_event, &nev) > 0);
  CHECK_EQ_INT(nev, 3);
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 0, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  /* text the server cannot hold is in no row: no look, the caller reads another way */
  const char *bad[1] = {"r\xff"};
  CHECK_EQ_INT(mend__pg_look_ahead(s, 1, bad, names), -1);
  /* its connection lost under it: a failed look; the next one opens it again */
  terminate_others();
  CHECK(look(s, 1, ids, names) != 0 ||
        mend__pg_look_ahead_take(s, 1, on_look, NULL) == -1);
  PG(s)->aux_retry_at = 0;   /* not the backoff's wait */
  CHECK_EQ_INT(look(s, 1, ids, names), 0);
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  /* a look the server never answers (its backend stopped, as a host gone without a reset):
   * given up with its connection once it is 10 s old, not waited for until keepalive ends it */
  int backend = PQbackendPID(PG(s)->aux);   /* stopped before the look goes: it cannot answer */
  CHECK(backend > 0 && kill(backend, SIGSTOP) == 0);
  CHECK_EQ_INT(look(s, 1, ids, names), 0);
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 0, on_look, NULL), 0);   /* young: not yet */
  PG(s)->look_sent_at -= 11;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 0, on_look, NULL), -1);
  CHECK(strstr(PG(s)->aux_err, "unanswered") != NULL);
  kill(backend, SIGCONT);
  PG(s)->aux_retry_at = 0;
  CHECK_EQ_INT(look(s, 1, ids, names), 0);   /* on a new connection */
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  mend__pg_close(s);
  drop_case();
}

/* A ticking host's first tick opens the second connection on a thread, not in the tick (a
 * login and its statements' preparing, over 100 ms under load): the call returns while the
 * opening is held (in its PREPARE, by a lock on inbox), looks wait for it ("not yet", not a
 * failure), and the first look after it is answered. */
static void *unlock_later(void *arg) {
  sleep_s(3);
  sql(arg, "COMMIT");
  return NULL;
}

static void test_aux_opened_aside(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_run_rec r1 = run_rec("r1", NULL);
  mend__pg_insert_run(s, &r1);
  CHECK_EQ_INT(mend__pg_send_event(s, "r1", "paid", NULL, "k1", 5, NULL), 0);
  CHECK_EQ_INT(mend__pg_commit(s), 0);
  PGconn *locker = raw();
  sql(locker, "BEGIN");
  sql(locker, "LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE");
  pthread_t t;
  pthread_create(&t, NULL, unlock_later, locker);   /* so that a blocking open ends too */
  double t0 = mend__pg_mono();
  mend__pg_open_committed_reads(s, 0);
  CHECK(mend__pg_mono() - t0 < 1.0);
  CHECK(lock_waiters("relation") >= 1);
  const char *ids[1] = {"r1"}, *names[1] = {"paid"};
  CHECK_EQ_INT(mend__pg_look_ahead(s, 1, ids, names), 1);
  CHECK(mend__pg_mono() - t0 < 1.0);
  pthread_join(t, NULL);
  PQfinish(locker);
  /* The opening waited for the lock no longer than PG_OPEN_TRY_MS (it may be the loop's): it
   * failed, and the look after reads another way (-1) until aux opens again, after a backoff. */
  int rc = look(s, 1, ids, names);
  if (rc == -1) {
    sleep_s(0.3);
    rc = look(s, 1, ids, names);
  }
  CHECK_EQ_INT(rc, 0);
  nlooked = 0;
  CHECK_EQ_INT(mend__pg_look_ahead_take(s, 1, on_look, NULL), 1);
  CHECK_EQ_INT(nlooked, 1);
  mend__pg_close(s);
  drop_case();
}

/* The second connection's opening (a ticking host's first look, or after a restart) happens
 * on the loop's thread while the writer thread may fail a batch: the writer's message is what
 * the engine reads after, never replaced by what aux's opening had before. Aux's opening is
 * held inside its PREPARE by a lock on inbox, and the writer's failure lands meanwhile. */
static void *open_aux(void *arg) { return (void *)(intptr_t)mend__pg_aux(arg); }

static void test_aux_keeps_writer_error(void) {
  new_case();
  mend_store *s = open_store();
  if (!s) return;
  mend_pg *p = PG(s);
  PGconn *locker = raw();
  sql(locker, "BEGIN");
  sql(locker, "LOCK TABLE inbox IN ACCESS EXCLUSIVE MODE");
  pthread_t t;
  pthread_create(&t, NULL, open_aux, p);
  CHECK(lock_waiters("relation") >= 1);
  CHECK(mend__pg_exec(p, p->conn, "SELECT no_such_column FROM runs", "the writer's batch") != 0);
  char said[sizeof p->err];
  snprintf(said, sizeof said, "%s", mend__pg_errmsg(s));
  sql(locker, "COMMIT");
  PQfinish(locker);
  void *rc;
  pthread_join(t, &rc);
  CHECK_EQ_INT((int)(intptr_t)rc, 0);
  CHECK(strstr(said, "the writer's batch") != NULL);
  CHECK_STR(mend__pg_errmsg(s), said);
  mend__pg_close(s);
  drop_case();
}

/* With several hosts in the URI, the second connection (the listening one, the mark's) goes
 * where the writer's went: the first host, down when the writer connected (a standby lagging
 * behind it, in real life), never hears from it. 127.0.0.2 stands for that host: nothing
 * listens there as the store opens, a socket that counts and drops connections does after. */
static atomic_int gate_accepts;
static void *gate(void *arg) {
  int fd = *(int *)arg, c;
  while ((c = accept(fd, NULL, NULL)) >= 0) {
    atomic_fetch_add(&gate_accepts, 1);
    close(c);
  }
  return NULL;
}

static void test_aux_on_writers_host(void) {
  const char *host = PQhost(admin), *port = PQport(admin);
  if (!host || strcmp(host, "127.0.0.1") != 0) {
    printf(
        "test_pg_store_looks: test_aux_on_writers_host skipped: the server is not on 127.0.0.1\n");
    return;
  }
  new_case();
  char many[sizeof conninfo + 128], err[1024];
  snprintf(many, sizeof many, "%s host='127.0.0.2,127.0.0.1' port='%s,%s'", conninfo, port, port);
  mend_store *s = mend__pg_open(many, MEND_DURABILITY_FULL, err, sizeof err);
  if (!s) fprintf(stderr, "open: %s\n", err);
  CHECK(s != NULL);
  if (!s) return;
  mend_pg *p = PG(s);
  CHECK_STR(PQhost(p->conn), "127.0.0.1");
  int fd = socket(AF_INET, SOCK_STREAM, 0), on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 8) != 0) {
    printf("test_pg_store_looks: test_aux_on_writers_host skipped: cannot listen on 127.0.0.2\n");
    close(fd);
    mend__pg_close(s);
    drop_case();
    return;
  }
  pthread_t t;
  pthread_create(&t, NULL, gate, &fd);
  CHECK_EQ_INT(mend__pg_aux(p), 0);
  CHECK_STR(PQhost(p->aux), "127.0.0.1");
  CHECK_EQ_INT(atomic_load(&gate_accepts), 0);
  /* the writer reconnected under another name (a failover, in real life): aux follows it */
  char other[sizeof conninfo + 32];
  snprintf(other, sizeof other, "%s host='localhost'", conninfo);
  PGconn *moved = PQconnectdb(other);
  CHECK(PQstatus(moved) == CONNECTION_OK);
  mend__pg_note_writer_host(p, moved);
  CHECK_EQ_INT(mend__pg_aux(p), 0);
  CHECK_STR(PQhost(p->aux), "localhost");
  mend__pg_note_writer_host(p, p->conn);
  PQfinish(moved);
  /* the listening connection too: a NOTIFY is heard only on the server it was sent on */
  int opened = 0;
  CHECK(mend__pg_wake_fd(s, &opened) >= 0);
  CHECK_EQ_INT(opened, 1);
  CHECK_EQ_INT(atomic_load(&gate_accepts), 0);
  /* the sandbox mark too: read on a standby, it may be stale; set there, it fails */
  CHECK_EQ_INT(mend__pg_sandbox_mark(s, 1), 1);
  CHECK_EQ_INT(mend__pg_sandbox_mark(s, 0), 1);
  CHECK_EQ_INT(atomic_load(&gate_accepts), 0);
  shutdown(fd, SHUT_RDWR);
  pthread_join(t, NULL);
  close(fd);
  mend__pg_close(s);
  drop_case();
}

int main(void) {
  if (!pg_case_begin("test_pg_store_looks")) return 0;
  test_committed_looks();
  test_look_ahead();
  test_aux_opened_aside();
  test_aux_keeps_writer_error();
  test_aux_on_writers_host();
  return pg_case_end("test_pg_store_looks");
}
