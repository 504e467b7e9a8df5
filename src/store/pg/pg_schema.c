/*
 * pg_schema: every SQL text of the PostgreSQL store (the statements prepared on each connection,
 * numbered by the P_ enum of pg_int.h), the migrations from each of its schema versions to the
 * next, and the open-time work on the schema: creating or upgrading it under an advisory lock,
 * and refusing a database that is not mend's or is newer than this mend. Must never: hold a
 * statement anywhere else; change a migration that has shipped (add the next one).
 *
 * Lease times are the server's: clock_timestamp(), not now(). now() is when the transaction
 * began, and a batch's transaction may have begun a while before a renewal in it runs: a lease
 * counted from then would end before the worker's own reckoning (sent time + lease) says.
 * Every other time is the engine's clock, stored as given.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE "('running', 'compensating')"

/* The statements of arrays (pg_arrays.c) take column c as an array $c of its values, unnested
 * in the select list (below), or, when every row of the batch has one value there, as that
 * value alone: the array then empty, $(columns + c) the value (NULL when it is NULL). The
 * arrays of one select list are unnested side by side and the shorter padded with NULLs, so
 * coalesce() gives the empty array's column its one value; the first column (the run's id)
 * is always an array, so that there are rows at all. Sent alone, a value is neither parsed
 * out of an array nor copied into one row after row. */
#define ARR(c, T) "unnest($" #c "::" T "[]) AS c" #c
#define COL(c, one, T) "coalesce(c" #c ", $" #one "::" T ")"

/* A batch's step rows, one array a column (pg_arrays.c): P_PUT_STEPS and P_INSERT_STEPS. */
#define STEPS_UNNEST \
  "INSERT INTO steps(run_id, idx, name, status, attempts, comp_attempts, idem_key, custom_key," \
  " result, error, due, last_delay, updated, slept, awaits, error_kind, error_severity," \
  " error_stopped) SELECT " COL(1, 19, "text") ", " COL(2, 20, "bigint") ", " \
  COL(3, 21, "text") ", " COL(4, 22, "text") ", " COL(5, 23, "bigint") ", " \
  COL(6, 24, "bigint") ", " COL(7, 25, "text") ", " COL(8, 26, "bigint") ", " \
  COL(9, 27, "text") ", " COL(10, 28, "text") ", " COL(11, 29, "float8") ", " \
  COL(12, 30, "float8") ", " COL(13, 31, "float8") ", " COL(14, 32, "bigint") ", " \
  COL(15, 33, "text") ", " COL(16, 34, "text") ", " COL(17, 35, "bigint") ", " \
  COL(18, 36, "bigint") " FROM (SELECT " ARR(1, "text") ", " ARR(2, "bigint") ", " \
  ARR(3, "text") ", " ARR(4, "text") ", " ARR(5, "bigint") ", " ARR(6, "bigint") ", " \
  ARR(7, "text") ", " ARR(8, "bigint") ", " ARR(9, "text") ", " ARR(10, "text") ", " \
  ARR(11, "float8") ", " ARR(12, "float8") ", " ARR(13, "float8") ", " ARR(14, "bigint") ", " \
  ARR(15, "text") ", " ARR(16, "text") ", " ARR(17, "bigint") ", " ARR(18, "bigint") ") a"

/* A step put (P_PUT_STEP, P_PUT_STEPS): the row whole, over the one there. */
#define STEP_PUT_SET \
  " ON CONFLICT (run_id, idx) DO UPDATE SET name = excluded.name, status = excluded.status," \
  " attempts = excluded.attempts, comp_attempts = excluded.comp_attempts," \
  " idem_key = excluded.idem_key, custom_key = excluded.custom_key, result = excluded.result," \
  " error = excluded.error, due = excluded.due, last_delay = excluded.last_delay," \
  " updated = excluded.updated, slept = excluded.slept, awaits = excluded.awaits," \
  " error_kind = excluded.error_kind, error_severity = excluded.error_severity," \
  " error_stopped = excluded.error_stopped"

/* An update that changes nothing would lose a transition silently (or consume an event twice):
 * it fails the batch, inside the server, before COMMIT is reached. */
#define CHANGED(what) \
  " RETURNING 1) SELECT mend_changed(count(*), '" what "' || $1::text) FROM u"

const char *const mend__pg_sql[P__COUNT] = {
/* A run without a key (P_INSERT_RUN_KEY has one): a plain insert, not a speculative one. */
#define INSERT_RUN \
    "INSERT INTO runs(id, workflow, run_key, status, input, error, attention, created, updated," \
    " owner, workflow_version) VALUES($1::text, $2::text, $3::text, $4::text, $5::text, $6::text," \
    " $7::bigint, $8::float8, $9::float8, $10::text, $11::bigint)"
  [P_INSERT_RUN] = INSERT_RUN,
  /* A run that is neither running nor compensating is nobody's. */
  [P_UPDATE_RUN] =
    "WITH u AS (UPDATE runs SET status = $2::text, error = $3::text, attention = $4::bigint,"
    " updated = $5::float8, reason = $6::text,"
    " owner = CASE WHEN $2::text IN " LIVE " THEN owner END WHERE id = $1::text" CHANGED("no run "),
  [P_PUT_STEP] =
    "INSERT INTO steps(run_id, idx, name, status, attempts, comp_attempts, idem_key, custom_key,"
    " result, error, due, last_delay, updated, slept, awaits, error_kind, error_severity,"
    " error_stopped) VALUES($1::text,"
    " $2::bigint, $3::text, $4::text, $5::bigint, $6::bigint, $7::text, $8::bigint, $9::text,"
    " $10::text, $11::float8, $12::float8, $13::float8, $14::bigint, $15::text, $16::text,"
    " $17::bigint, $18::bigint)"
    STEP_PUT_SET,
  [P_UPDATE_STEP] =
    "WITH u AS (UPDATE steps SET status = $3::text, attempts = $4::bigint,"
    " comp_attempts = $5::bigint, idem_key = coalesce($6::text, idem_key),"
    " custom_key = $7::bigint, result = $8::text,"
    " error = $9::text, due = $10::float8, last_delay = $11::float8, updated = $12::float8,"
    " slept = $13::bigint, awaits = $14::text, error_kind = $15::text,"
    " error_severity = $16::bigint, error_stopped = $17::bigint"
    " WHERE run_id = $1::text AND idx = $2::bigint"
    CHANGED("no step of run "),
  /* $13: the number the run's holder counts; NULL, or one taken meanwhile by another process
   * (a person's repair), gives the next free one. */
  [P_APPEND_HISTORY] =
    "INSERT INTO history(run_id, seq, step, at, event, from_status, to_status, attempt, error,"
    " delay, detail, worker, error_kind) SELECT $1::text, CASE WHEN $13::bigint IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM history WHERE run_id = $1::text AND seq = $13::bigint)"
    " THEN $13::bigint"
    " ELSE coalesce((SELECT max(seq) FROM history WHERE run_id = $1::text), 0) + 1 END,"
    " $2::text, $3::float8, $4::text, $5::text, $6::text, $7::bigint, $8::text, $9::float8,"
    " $10::text, $11::text, $12::text",
  [P_PUT_BREAKER] =
    "INSERT INTO breakers(key, state, failures, successes, opened_at, open_until, updated)"
    " VALUES($1::text, $2::text, $3::bigint, $4::bigint, $5::float8, $6::float8, $7::float8)"
    " ON CONFLICT (key) DO UPDATE SET state = excluded.state, failures = excluded.failures,"
    " successes = excluded.successes, opened_at = excluded.opened_at,"
    " open_until = excluded.open_until, updated = excluded.updated",
  [P_PUT_DLQ] =
    "INSERT INTO dlq(run_id, reason, step, error, detail, at) VALUES($1::text, $2::text,"
    " $3::text, $4::text, $5::text, $6::float8) ON CONFLICT (run_id) DO UPDATE SET"
    " reason = excluded.reason, step = excluded.step, error = excluded.error,"
    " detail = excluded.detail, at = excluded.at",
  /* Never shorter: a renewal recorded before a stall may run after the late path renewed. */
  [P_RENEW] =
    "INSERT INTO workers(owner, lease_until) VALUES($1::text,"
    " clock_timestamp() + $2::float8 * interval '1 second') ON CONFLICT (owner) DO UPDATE"
    " SET lease_until = greatest(workers.lease_until, excluded.lease_until)",
  [P_CONSUME_EVENT] =
    "WITH u AS (UPDATE inbox SET consumed = $3::float8, step = $4::text WHERE run_id = $1::text"
    " AND seq = $2::bigint AND consumed IS NULL" CHANGED("no unconsumed event of run "),
  /* A child's end, to its parent's inbox, recorded with the child's id first so that the fence
   * drops it with the child's other writes. It takes the lock every sender takes (pg_ops.c),
   * so that its seq commits in order too; only when there is a parent to tell. */
  [P_CHILD_END] =
    "WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(x'4d454e49'::int))"
    " INSERT INTO inbox(run_id, name, payload, key, sent) SELECT r.parent_run, $2::text,"
    " $3::text, $4::text, $5::float8 FROM runs r, l WHERE r.id = $1::text"
    " AND r.parent_run IS NOT NULL AND ($4::text IS NULL OR NOT EXISTS (SELECT 1 FROM inbox i"
    " WHERE i.run_id = r.parent_run AND i.key = $4::text)) ON CONFLICT (run_id, key) DO NOTHING",
  [P_SET_UNAVAILABLE] = "UPDATE runs SET unavailable = $2::text WHERE id = $1::text",
  /* The first statement of a fenced transaction (pg_lease.c): renews a lease that has not run
   * out, holding the worker's row until commit, or fails with SQLSTATE MENDL. */
  [P_LEASE_LIVE] = "SELECT mend_lease_live($1::text, $2::float8)",
  /* The late path: who holds the runs a batch writes, each locked until commit. */
  [P_LEASE_CHECK] = "SELECT id, owner FROM runs WHERE id = ANY($1::text[]) FOR UPDATE",
  [P_PUT_VERSION] =
    "INSERT INTO workflow_versions(workflow, version, source, step_names, first_seen)"
    " SELECT $1::text, $2::text, $3::text, $4::text, $5::float8 WHERE NOT EXISTS (SELECT 1 FROM"
    " workflow_versions WHERE workflow = $1::text AND version IS NOT DISTINCT FROM $2::text)"
    " ON CONFLICT (workflow, version) DO NOTHING",
  [P_VERSION_ID] =
    "SELECT id FROM workflow_versions WHERE workflow = $1::text"
    " AND version IS NOT DISTINCT FROM $2::text ORDER BY id LIMIT 1",
  [P_KEEP_SCRIPT] =
    "UPDATE workflow_versions SET script = $2::text WHERE id = $1::bigint AND script IS NULL",
  [P_FIND_RUN_KEY] = "SELECT id FROM runs WHERE run_key = $1::text",
  /* As Q_FIND_KEY_RESULT: an executing row (1), its effect standing (neither its run nor a
   * run above it compensating or needs_attention). */
  [P_FIND_KEY_RESULT] =
    "SELECT result, run_id FROM steps s WHERE idem_key = $1::text AND custom_key = 1"
    " AND status = 'succeeded' AND NOT EXISTS (WITH RECURSIVE up(id) AS (SELECT s.run_id"
    " UNION SELECT r.parent_run FROM runs r JOIN up ON r.id = up.id"
    " WHERE r.parent_run IS NOT NULL) SELECT 1 FROM runs r JOIN up ON r.id = up.id"
    " WHERE r.status IN ('compensating', 'needs_attention')) ORDER BY updated DESC LIMIT 1",
  [P_GET_BREAKER] =
    "SELECT state, failures, successes, opened_at, open_until FROM breakers WHERE key = $1::text",
  [P_LAST_SEQ] =
    "SELECT seq, at FROM history WHERE run_id = $1::text ORDER BY seq DESC LIMIT 1",
  [P_VERSION_SCRIPT] =
    "SELECT script, source FROM workflow_versions WHERE workflow = $1::text"
    " AND version = $2::text AND script IS NOT NULL ORDER BY id DESC LIMIT 1",
  /* Claims (SKIP LOCKED: workers never wait for each other's claims). A worker whose lease ran
   * out is locked here before its runs are taken; a worker that renews locks its own row first
   * (P_LEASE_LIVE), so exactly one of the two goes on: the fence. Runs whose holder has no row
   * at all are anyone's. A run another worker claimed since this statement began is skipped
   * (its fence moved): the server looks at such a row again in its latest version, while the
   * subqueries still read the workers as they were at the statement's start, where the row of
   * a new worker, committed with its first claim, is missing: its runs would be taken from
   * under it. Never our own runs. */
#define CLAIM(order) \
  "WITH gone AS (SELECT owner FROM workers WHERE lease_until < clock_timestamp()" \
  " AND owner <> $1::text FOR UPDATE SKIP LOCKED)," \
  " c AS (SELECT id FROM runs WHERE status IN " LIVE \
  " AND ($3::boolean OR unavailable IS NULL)" \
  " AND (owner IS NULL OR owner IN (SELECT owner FROM gone) OR (owner <> $1::text AND NOT EXISTS" \
  " (SELECT 1 FROM workers w WHERE w.owner = runs.owner)))" \
  " AND fence = (SELECT f.fence FROM runs f WHERE f.id = runs.id)" \
  " ORDER BY created " order \
  " LIMIT $2::bigint FOR UPDATE SKIP LOCKED)," \
  " u AS (UPDATE runs r SET owner = $1::text, fence = r.fence + 1 FROM c WHERE r.id = c.id" \
  " RETURNING r.id, r.created) SELECT id FROM u ORDER BY created " order
#define CLAIM_FREE(order) \
    "WITH c AS (SELECT id FROM runs WHERE owner IS NULL AND status IN " LIVE \
    " AND ($3::boolean OR unavailable IS NULL) ORDER BY created " order \
    " LIMIT $2::bigint FOR UPDATE SKIP LOCKED)," \
    " u AS (UPDATE runs r SET owner = $1::text, fence = r.fence + 1 FROM c WHERE r.id = c.id" \
    " RETURNING r.id, r.created) SELECT id FROM u ORDER BY created " order
  [P_CLAIM_OLDEST] = CLAIM("ASC"),
  [P_CLAIM_NEWEST] = CLAIM("DESC"),
  [P_CLAIM_FREE_OLDEST] = CLAIM_FREE("ASC"),
  [P_CLAIM_FREE_NEWEST] = CLAIM_FREE("DESC"),
  [P_FORGET_GONE] =
    "DELETE FROM workers WHERE owner IN (SELECT owner FROM workers"
    " WHERE lease_until < clock_timestamp() AND owner <> $1::text FOR UPDATE SKIP LOCKED)",
  [P_RELEASE] = "UPDATE runs SET owner = NULL WHERE id = $1::text AND owner = $2::text",
  [P_OWNER] =
    "SELECT r.owner, extract(epoch FROM w.lease_until - clock_timestamp())::float8"
    " FROM runs r LEFT JOIN workers w ON w.owner = r.owner WHERE r.id = $1::text",
  [P_HOLDERS] =
    "SELECT owner FROM workers WHERE lease_until >= clock_timestamp() ORDER BY owner",
  /* A row another session holds is passed over (its owner's workers row is gone, so it is
   * for any worker to take all the same): a close must not wait for that session. */
  [P_RELEASE_OWNER] =
    "UPDATE runs SET owner = NULL WHERE id IN (SELECT id FROM runs WHERE owner = $1::text"
    " AND status IN " LIVE " FOR UPDATE SKIP LOCKED)",
  /* Deleted first, so that its row is locked: the worker, if it lives, is then late. */
  [P_FORGET_WORKER] = "DELETE FROM workers WHERE owner = $1::text",
  [P_HELD] = "SELECT id FROM runs WHERE owner = $1::text AND status IN " LIVE,
  [P_CLAIMABLE_QUICK] =
    "SELECT (EXISTS (SELECT 1 FROM runs WHERE owner IS NULL AND status IN " LIVE
    " AND unavailable IS NULL))::int + 2 * (EXISTS (SELECT 1 FROM workers"
    " WHERE lease_until < clock_timestamp() AND owner <> $1::text))::int",
  [P_CLAIMABLE_THOROUGH] =
    "SELECT 3 FROM runs WHERE status IN " LIVE " AND unavailable IS NULL AND (owner IS NULL"
    " OR (owner <> $1::text AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.owner = runs.owner"
    " AND w.lease_until >= clock_timestamp()))) LIMIT 1",
  [P_TAKE] =
    "UPDATE runs SET owner = $2::text, fence = fence + 1, cancel_requested = 0"
    " WHERE id = $1::text",
  [P_RUN_STATUS] = "SELECT status FROM runs WHERE id = $1::text FOR UPDATE",
  [P_REQUEST_CANCEL] = "UPDATE runs SET cancel_requested = 1 WHERE id = $1::text",
  [P_CANCEL_REQUESTS] =
    "SELECT id FROM runs WHERE owner = $1::text AND cancel_requested = 1 AND status = 'running'",
  [P_DLQ_REMOVE] = "DELETE FROM dlq WHERE run_id = $1::text",
  [P_AUDIT] =
    "INSERT INTO audit(at, who, op, target, detail) VALUES($1::float8, $2::text, $3::text,"
    " $4::text, $5::text)",
  [P_MOVE_RUN] =
    "UPDATE runs SET workflow_version = $2::bigint, version = NULL, source = NULL,"
    " step_names = NULL, unavailable = NULL WHERE id = $1::text",
  [P_DROP_STEPS_FROM] = "DELETE FROM steps WHERE run_id = $1::text AND idx >= $2::bigint",
  /* Sent under an advisory lock held until commit (pg_ops.c), so that seqs commit in the order
   * they are taken: a look for events after seq n never misses an earlier one committed late.
   * A key the run's inbox has is not inserted at all: ON CONFLICT alone draws the seq first, a
   * gap in the inbox's numbering; the lock is taken before this statement, whose look then
   * sees every key committed. (P_RECORD_EVENT takes it inside the statement, after its
   * snapshot: a key committed in between is still ON CONFLICT's, with its gap.) */
  [P_SEND_EVENT] =
    "INSERT INTO inbox(run_id, name, payload, key, sent, who) SELECT $1::text, $2::text,"
    " $3::text, $4::text, $5::float8, $6::text WHERE $4::text IS NULL"
    " OR NOT EXISTS (SELECT 1 FROM inbox WHERE run_id = $1::text AND key = $4::text)"
    " ON CONFLICT (run_id, key) DO NOTHING",
  /* The same, recorded in a batch: the lock taken by the statement itself (the row comes
   * from the lock's), so that it is taken before the row's seq. */
  [P_RECORD_EVENT] =
    "WITH l AS (SELECT pg_advisory_xact_lock(x'4d454e49'::int))"
    " INSERT INTO inbox(run_id, name, payload, key, sent, who) SELECT $1::text, $2::text,"
    " $3::text, $4::text, $5::float8, $6::text FROM l WHERE $4::text IS NULL"
    " OR NOT EXISTS (SELECT 1 FROM inbox WHERE run_id = $1::text AND key = $4::text)"
    " ON CONFLICT (run_id, key) DO NOTHING",
  [P_NEXT_EVENT] =
    "SELECT seq, payload, key FROM inbox WHERE run_id = $1::text AND name = $2::text"
    " AND consumed IS NULL ORDER BY seq LIMIT 1",
  /* P_NEXT_EVENT for many runs at once: each pair's oldest through the partial index */
  [P_NEXT_EVENTS] =
    "SELECT w.run_id, w.name, e.seq, e.payload, e.key FROM unnest($1::text[], $2::text[])"
    " AS w(run_id, name) CROSS JOIN LATERAL (SELECT seq, payload, key FROM inbox"
    " WHERE run_id = w.run_id AND name = w.name AND consumed IS NULL ORDER BY seq LIMIT 1) e",
  [P_LAST_EVENT] = "SELECT coalesce(max(seq), 0) FROM inbox",
  [P_EVENT_SENT] = "SELECT sent FROM inbox WHERE seq = $1::bigint AND sent IS NOT NULL",
  [P_EVENTS_AFTER] =
    "SELECT seq, run_id FROM inbox WHERE seq > $1::bigint ORDER BY seq LIMIT $2::bigint",
  /* Completion tokens and child runs (schema 2), joining the open batch at once (pg_tokens.c). */
  [P_PUT_TOKEN] =
    "INSERT INTO tokens(digest, run_id, step, attempt, made) VALUES($1::text, $2::text, $3::text,"
    " $4::bigint, $5::float8)",
  [P_TOKEN_OF_ATTEMPT] =
    "SELECT digest FROM tokens WHERE run_id = $1::text AND step = $2::text AND attempt = $3::bigint"
    " LIMIT 1",
  /* Every token of the attempt is used by the first use of any. Two uses at once lock the same
   * rows, and the second finds used set when it rechecks them; a token made after a use is
   * not among the rows, and NOT EXISTS sees the use. */
  [P_USE_TOKEN] =
    "UPDATE tokens SET used = $2::float8, outcome = $3::text WHERE (run_id, step, attempt) ="
    " (SELECT run_id, step, attempt FROM tokens WHERE digest = $1::text) AND used IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM tokens u WHERE u.run_id = tokens.run_id"
    " AND u.step = tokens.step AND u.attempt = tokens.attempt AND u.used IS NOT NULL)",
  [P_SET_PARENT] =
    "UPDATE runs SET parent_run = $2::text, parent_step = $3::text WHERE id = $1::text",
  /* A succeeded run is nobody's (P_UPDATE_RUN): reopened, it is `owner`'s or any worker's. */
  [P_REOPEN_RUN] =
    "UPDATE runs SET status = 'compensating', reason = $2::text, owner = $3::text,"
    " fence = fence + 1, updated = $4::float8, error = 'compensated with its parent'"
    " WHERE id = $1::text AND status = 'succeeded'",
  /* A run's image for the engine (pg_image.c): the columns it rebuilds from; of history, what
   * recovery reads (the details it needs: a map's list of items, the run a reused result is
   * from). */
  [P_IMAGE_RUN] =
    "SELECT r.workflow, coalesce(r.version, v.version), r.status, r.reason, r.error, r.attention,"
    " r.cancel_requested, r.parent_run, r.unavailable, r.input,"
    " coalesce(r.step_names, v.step_names)"
    " FROM runs r LEFT JOIN workflow_versions v ON v.id = r.workflow_version WHERE r.id = $1::text",
  [P_IMAGE_STEPS] =
    "SELECT idx, name, status, attempts, comp_attempts, idem_key, custom_key, result, error, due,"
    " last_delay, slept, error_kind, error_severity, error_stopped FROM steps"
    " WHERE run_id = $1::text ORDER BY idx",
  [P_IMAGE_HISTORY] =
    "SELECT seq, at, step, event, to_status, attempt,"
    " CASE WHEN event IN ('map', 'reused') THEN detail END"
    " FROM history WHERE run_id = $1::text ORDER BY seq",
  /* The same for the runs of a claim, read together: the run's id last. */
  [P_IMAGES_RUN] =
    "SELECT r.workflow, coalesce(r.version, v.version), r.status, r.reason, r.error, r.attention,"
    " r.cancel_requested, r.parent_run, r.unavailable, r.input,"
    " coalesce(r.step_names, v.step_names), r.id FROM runs r"
    " LEFT JOIN workflow_versions v ON v.id = r.workflow_version WHERE r.id = ANY($1::text[])",
  [P_IMAGES_STEPS] =
    "SELECT idx, name, status, attempts, comp_attempts, idem_key, custom_key, result, error, due,"
    " last_delay, slept, error_kind, error_severity, error_stopped, run_id FROM steps"
    " WHERE run_id = ANY($1::text[])"
    " ORDER BY run_id, idx",
  [P_IMAGES_HISTORY] =
    "SELECT seq, at, step, event, to_status, attempt,"
    " CASE WHEN event IN ('map', 'reused') THEN detail END,"
    " run_id FROM history WHERE run_id = ANY($1::text[]) ORDER BY run_id, seq",
  [P_INSERT_RUN_KEY] = INSERT_RUN " ON CONFLICT (run_key) WHERE run_key IS NOT NULL DO NOTHING",
  /* A batch's history rows that carry their number, as arrays in the order recorded
   * (pg_batch.c): a number taken meanwhile fails it (the primary key), and the batch is sent
   * again with P_APPEND_HISTORY's renumbering, row by row. The arrays of these statements are
   * unnested in a select list, side by side (ARR, COL above): rows go to the insert as they
   * are made, where unnest() in FROM would copy them all into a tuple store first. */
  [P_APPEND_HISTORIES] =
    "INSERT INTO history(run_id, step, at, event, from_status, to_status, attempt, error, delay,"
    " detail, worker, error_kind, seq) SELECT " COL(1, 14, "text") ", " COL(2, 15, "text") ", "
    COL(3, 16, "float8") ", " COL(4, 17, "text") ", " COL(5, 18, "text") ", " COL(6, 19, "text")
    ", " COL(7, 20, "bigint") ", " COL(8, 21, "text") ", " COL(9, 22, "float8") ", "
    COL(10, 23, "text") ", " COL(11, 24, "text") ", " COL(12, 25, "text") ", "
    COL(13, 26, "bigint") " FROM (SELECT " ARR(1, "text") ", " ARR(2, "text") ", "
    ARR(3, "float8") ", " ARR(4, "text") ", " ARR(5, "text") ", " ARR(6, "text") ", "
    ARR(7, "bigint") ", " ARR(8, "text") ", " ARR(9, "float8") ", " ARR(10, "text") ", "
    ARR(11, "text") ", " ARR(12, "text") ", " ARR(13, "bigint") ") a",
  /* A batch's step rows put whole, at most one a step (pg_arrays.c), as P_PUT_STEP puts one. */
  [P_PUT_STEPS] = STEPS_UNNEST STEP_PUT_SET,
  /* A batch's steps that have no row yet (mend_step_rec.new_row): a plain insert, not a
   * speculative one (no look into the key's index first, no confirm record in the WAL). A row
   * there after all fails it on the key, and the batch is sent again with P_PUT_STEPS. */
  [P_INSERT_STEPS] = STEPS_UNNEST,
  /* A batch's new runs (pg_arrays.c), as P_INSERT_RUN inserts one. */
  [P_INSERT_RUNS] =
    "INSERT INTO runs(id, workflow, run_key, status, input, error, attention, created, updated,"
    " owner, workflow_version) SELECT " COL(1, 12, "text") ", " COL(2, 13, "text") ", "
    COL(3, 14, "text") ", " COL(4, 15, "text") ", " COL(5, 16, "text") ", " COL(6, 17, "text")
    ", " COL(7, 18, "bigint") ", " COL(8, 19, "float8") ", " COL(9, 20, "float8") ", "
    COL(10, 21, "text") ", " COL(11, 22, "bigint") " FROM (SELECT " ARR(1, "text") ", "
    ARR(2, "text") ", " ARR(3, "text") ", " ARR(4, "text") ", " ARR(5, "text") ", "
    ARR(6, "text") ", " ARR(7, "bigint") ", " ARR(8, "float8") ", " ARR(9, "float8") ", "
    ARR(10, "text") ", " ARR(11, "bigint") ") a",
  /* A batch's run updates, at most one a run (pg_arrays.c), as P_UPDATE_RUN makes one: a run
   * not there fails the batch, naming it (the first not found). */
  [P_UPDATE_RUNS] =
    "WITH u AS (UPDATE runs r SET status = v.status, error = v.error, attention = v.attention,"
    " updated = v.updated, reason = v.reason,"
    " owner = CASE WHEN v.status IN " LIVE " THEN r.owner END FROM (SELECT "
    COL(1, 7, "text") " AS id, " COL(2, 8, "text") " AS status, " COL(3, 9, "text") " AS error, "
    COL(4, 10, "bigint") " AS attention, " COL(5, 11, "float8") " AS updated, "
    COL(6, 12, "text") " AS reason FROM (SELECT " ARR(1, "text") ", " ARR(2, "text") ", "
    ARR(3, "text") ", " ARR(4, "bigint") ", " ARR(5, "float8") ", " ARR(6, "text") ") a) v"
    " WHERE r.id = v.id RETURNING r.id)"
    " SELECT mend_changed(0, 'no run ' || w.id) FROM unnest($1::text[]) AS w(id)"
    " WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.id = w.id)",
};

/* A step keeps the kind of its last error in a column of its own (SQLite's schema 14), so
 * that how it failed is never read back from the text of the message. The rows before get
 * theirs from their text, once, here: the engine wrote every step error as "<kind>: <message>"
 * then; any other text is of kind error. Kept apart from the list below: its number there is
 * the next free one, whatever migrations come before it. */
#define MIGRATE_ERROR_KIND \
  "ALTER TABLE steps ADD COLUMN error_kind TEXT;" \
  "UPDATE steps SET error_kind = CASE" \
  " WHEN left(error, 10) = 'retryable:' THEN 'retryable'" \
  " WHEN left(error, 6) = 'fatal:' THEN 'fatal'" \
  " WHEN left(error, 12) = 'compensable:' THEN 'compensable'" \
  " WHEN left(error, 8) = 'timeout:' THEN 'timeout' ELSE 'error' END" \
  " WHERE error IS NOT NULL;"

/* A step keeps its error's severity and whether the engine stopped its code (SQLite's schema
 * 15), which decide how a group whose branch failed ends after a restart. The rows before get
 * them once, here, from what their run says: a failed step of a run that ended for a severity
 * or a workflow_error failed so; any other compensable error had the default severity, 1. A
 * step transition's history row names its error's kind too (NULL in the rows before: their
 * text names it). Kept apart, as the one above. */
#define MIGRATE_ERROR_DETAIL \
  "ALTER TABLE steps ADD COLUMN error_severity BIGINT NOT NULL DEFAULT 0," \
  " ADD COLUMN error_stopped BIGINT NOT NULL DEFAULT 0;" \
  "UPDATE steps SET error_severity = CASE WHEN status = 'failed' THEN coalesce((SELECT CASE" \
  " r.reason WHEN 'severity_2' THEN 2 WHEN 'severity_3' THEN 3 END FROM runs r" \
  " WHERE r.id = steps.run_id), 1) ELSE 1 END WHERE error_kind = 'compensable';" \
  "UPDATE steps SET error_stopped = 1 WHERE error_kind = 'error' AND status = 'failed'" \
  " AND (SELECT r.reason FROM runs r WHERE r.id = steps.run_id) = 'workflow_error';" \
  "ALTER TABLE history ADD COLUMN error_kind TEXT;"

/* migrations[v] takes a database from version v to v + 1, in the transaction of
 * mend__pg_schema. The tables are SQLite's logical schema (store.h, "Schema"), with the
 * names written out instead of labels and worker numbers, and the server's clock in workers:
 * a new event name (SQLite's labels of schema 21) needs no migration here. */
const char *const mend__pg_migrations[MEND_PG_SCHEMA_VERSION] = {
  "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
  "CREATE TABLE workflow_versions(id BIGSERIAL PRIMARY KEY, workflow TEXT NOT NULL,"
  " version TEXT, source TEXT, step_names TEXT, script TEXT, first_seen DOUBLE PRECISION,"
  " UNIQUE (workflow, version));"
  "CREATE TABLE runs(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source TEXT,"
  " run_key TEXT UNIQUE, status TEXT NOT NULL, input TEXT, error TEXT,"
  " attention BIGINT NOT NULL DEFAULT 0, reason TEXT, owner TEXT, created DOUBLE PRECISION,"
  " updated DOUBLE PRECISION, step_names TEXT, workflow_version BIGINT, unavailable TEXT,"
  " cancel_requested BIGINT NOT NULL DEFAULT 0, fence BIGINT NOT NULL DEFAULT 0);"
  /* exactly the claim predicates: a claim walks what it may take, not what is held */
  "CREATE INDEX runs_live ON runs(created) WHERE status IN " LIVE ";"
  "CREATE INDEX runs_free ON runs(created) WHERE owner IS NULL AND status IN " LIVE ";"
  "CREATE INDEX runs_owner ON runs(owner) WHERE owner IS NOT NULL;"
  "CREATE INDEX runs_cancel ON runs(owner) WHERE cancel_requested = 1;"
  "CREATE INDEX runs_created ON runs(created);"
  "CREATE TABLE workers(owner TEXT PRIMARY KEY, lease_until TIMESTAMPTZ);"
  "CREATE TABLE steps(run_id TEXT NOT NULL, idx BIGINT NOT NULL, name TEXT, status TEXT NOT NULL,"
  " attempts BIGINT NOT NULL DEFAULT 0, comp_attempts BIGINT NOT NULL DEFAULT 0, idem_key TEXT,"
  " custom_key BIGINT NOT NULL DEFAULT 0, result TEXT, error TEXT, due DOUBLE PRECISION,"
  " last_delay DOUBLE PRECISION, updated DOUBLE PRECISION, slept BIGINT NOT NULL DEFAULT 0,"
  " awaits TEXT, PRIMARY KEY (run_id, idx));"
  "CREATE INDEX steps_custom_key ON steps(idem_key) WHERE custom_key = 1;"
  "CREATE TABLE history(run_id TEXT NOT NULL, seq BIGINT NOT NULL, step TEXT,"
  " at DOUBLE PRECISION, event TEXT NOT NULL, from_status TEXT, to_status TEXT, attempt BIGINT,"
  " error TEXT, delay DOUBLE PRECISION, detail TEXT, worker TEXT, PRIMARY KEY (run_id, seq));"
  "CREATE TABLE breakers(key TEXT PRIMARY KEY, state TEXT NOT NULL, failures BIGINT,"
  " successes BIGINT, opened_at DOUBLE PRECISION, open_until DOUBLE PRECISION,"
  " updated DOUBLE PRECISION);"
  "CREATE TABLE dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail TEXT,"
  " at DOUBLE PRECISION);"
  "CREATE TABLE audit(seq BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION, who TEXT, op TEXT,"
  " target TEXT, detail TEXT);"
  "CREATE TABLE inbox(seq BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, name TEXT NOT NULL,"
  " payload TEXT, key TEXT, sent DOUBLE PRECISION, consumed DOUBLE PRECISION, step TEXT,"
  " UNIQUE (run_id, key));"
  "CREATE INDEX inbox_waiting ON inbox(run_id, name, seq) WHERE consumed IS NULL;"
  /* P_LEASE_LIVE: a lease still live is renewed (its row locked until commit); one that ran
   * out is not, and the transaction fails with a code of mend's own. */
  "CREATE FUNCTION mend_lease_live(w TEXT, secs DOUBLE PRECISION) RETURNS void"
  " LANGUAGE plpgsql AS $f$ BEGIN"
  " UPDATE workers SET lease_until = greatest(lease_until,"
  " clock_timestamp() + secs * interval '1 second')"
  " WHERE owner = w AND lease_until >= clock_timestamp();"
  " IF NOT FOUND THEN RAISE EXCEPTION 'the lease of % ran out', w USING ERRCODE = 'MENDL';"
  " END IF; END $f$;"
  "CREATE FUNCTION mend_changed(n BIGINT, what TEXT) RETURNS void LANGUAGE plpgsql AS $f$"
  " BEGIN IF n = 0 THEN RAISE EXCEPTION '%', what USING ERRCODE = 'MENDN'; END IF; END $f$;",
  /* 1 -> 2: completion tokens, one an attempt (a token of an earlier attempt is known, and
   * refused as such), used once, kept with the run; a child run names its parent and the
   * parent's step (SQLite's schema 11). No labels: names are written out here. */
  "CREATE TABLE tokens(token TEXT PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL,"
  " attempt BIGINT NOT NULL, made DOUBLE PRECISION, used DOUBLE PRECISION, outcome TEXT);"
  "CREATE UNIQUE INDEX tokens_attempt ON tokens(run_id, step, attempt);"
  "ALTER TABLE runs ADD COLUMN parent_run TEXT, ADD COLUMN parent_step TEXT;"
  "CREATE INDEX runs_parent ON runs(parent_run) WHERE parent_run IS NOT NULL;",
  /* 2 -> 3: a token is kept as its digest (SHA-256 in hex, as src/digest.c makes it), never as
   * itself; an attempt may have two tokens (its first cannot be read back to hand out again),
   * the first used ending both (SQLite's schema 13). */
  "UPDATE tokens SET token = encode(sha256(convert_to(token, 'UTF8')), 'hex');"
  "ALTER TABLE tokens RENAME COLUMN token TO digest;"
  "DROP INDEX tokens_attempt;"
  "CREATE INDEX tokens_attempt ON tokens(run_id, step, attempt);"
  "UPDATE inbox SET key = encode(sha256(convert_to(key, 'UTF8')), 'hex')"
  " WHERE key IS NOT NULL AND (name = 'mend.token' OR name LIKE 'mend.token:%');",
  /* 3 -> 4: fewer index entries a step. Most runs have no key: their rows need no entry in
   * the key's index (a unique index holds NULLs too). Room on each page for a row's next
   * version: a run's and a step's rows are written again, and a version on the same page
   * costs no new page, and is a HOT update (no index entry) when no indexed column changed,
   * as when a step goes from running to succeeded. */
  "ALTER TABLE runs DROP CONSTRAINT runs_run_key_key;"
  /* A run is held only while live (P_UPDATE_RUN), and the runs of one holder are looked for
   * only when it closes, stalled or died (P_HELD, P_RELEASE_OWNER): among the live runs
   * (runs_live), not in an index of their own that every start and claim writes to. */
  "DROP INDEX runs_owner;"
  "CREATE UNIQUE INDEX runs_key ON runs(run_key) WHERE run_key IS NOT NULL;"
  "ALTER TABLE runs SET (fillfactor = 80);"
  "ALTER TABLE steps SET (fillfactor = 80);",
  /* 4 -> 5 */
  MIGRATE_ERROR_KIND,
  /* 5 -> 6 */
  MIGRATE_ERROR_DETAIL,
  /* 6 -> 7: the sandbox mark, as SQLite's 16 -> 17 (schema.c) */
  "INSERT INTO meta(key, value) VALUES('sandbox', 'off') ON CONFLICT (key) DO NOTHING;",
  /* 7 -> 8: the reuses older mends wrote as executions (custom_key 1), as SQLite's 17 -> 18 */
  "UPDATE steps SET custom_key = 2 WHERE custom_key = 1 AND attempts = 0"
  " AND status IN ('succeeded', 'compensating', 'compensated', 'compensation_failed');",
  /* 8 -> 9: the dead-letter queue in its page order, as SQLite's 18 -> 19; run ids compared
   * bytewise (COLLATE "C"), as the page compares them (pg_view.c). */
  "CREATE INDEX IF NOT EXISTS dlq_page ON dlq ((coalesce(at, -1)), run_id COLLATE \"C\");",
  /* 9 -> 10: who sent an event, as SQLite's 19 -> 20 */
  "ALTER TABLE inbox ADD COLUMN IF NOT EXISTS who TEXT;",
};

/* The advisory lock that makes creating and upgrading a schema one worker's at a time ("mend"
 * in ASCII), one a schema (two keys: the name's hash the second): mends creating schemas of
 * their own in one database (a test each, a tenant each) do not wait for each other's DDL. A
 * mend before this one took the first key alone, which this one does not meet: the two
 * creating one schema at the same moment would meet on its tables' locks instead, and one
 * open fail (nothing half made: the DDL is one transaction). */
#define SCHEMA_LOCK "4d454e44"

/* An open that gave up waiting for this schema's creation lock: MEND_STORE_BUSY, err naming
 * the session that holds it (its pid; its application and client address where the server
 * shows them to this role), so that a person can find the mend or the psql left holding it.
 * Asked once the waiting transaction is rolled back: an aborted one answers nothing. */
static int creation_lock_busy(mend_pg *p) {
  PQclear(PQexec(p->conn, "ROLLBACK"));
  PGresult *r = PQexec(p->conn,
      "SELECT l.pid, a.application_name, host(a.client_addr), a.client_port FROM pg_locks l"
      " LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory'"
      " AND l.granted AND l.pid <> pg_backend_pid()"
      " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
      " AND l.classid = x'" SCHEMA_LOCK "'::int::oid"
      " AND l.objid = hashtext(current_schema())::oid AND l.objsubid = 2 LIMIT 1");
  char holder[300] = "another session";
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
    const char *app = PG_TEXT(r, 0, 1), *addr = PG_TEXT(r, 0, 2), *port = PG_TEXT(r, 0, 3);
    char from[120] = "";
    if (addr) snprintf(from, sizeof from, ", from %s%s%s", addr, port ? " port " : "",
                       port ? port : "");
    else if (port && strcmp(port, "-1") == 0) snprintf(from, sizeof from, ", from a local socket");
    snprintf(holder, sizeof holder, "session %s%s%s%s%s", PQgetvalue(r, 0, 0),
             app && *app ? " (" : "", app && *app ? app : "", app && *app ? ")" : "", from);
  }
  PQclear(r);
  mend__pg_msg(p->err, sizeof p->err, "%s: create schema %s: its creation lock is held by %s",
               p->server, p->schema_name, holder);
  return MEND_STORE_BUSY;
}

static PGresult *one(mend_pg *p, const char *sql, const char *what) {
  PGresult *r = PQexec(p->conn, sql);
  if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
    mend__pg_fail(p, p->conn, r, what);
    PQclear(r);
    return NULL;
  }
  return r;
}

/* What the database holds: 0 with *version (0: no mend schema yet, which may be created), or
 * -1 with the error (no schema to create tables in, not mend's, newer than this mend). */
static int schema_state(mend_pg *p, int *version) {
  PGresult *r;
  if (!(r = one(p, "SELECT current_schema(), to_regclass('meta') IS NOT NULL,"
                   " (SELECT count(*) FROM pg_tables WHERE schemaname = current_schema())",
                "read schema")))
    return -1;
  if (PQgetisnull(r, 0, 0)) {
    PQclear(r);
    mend__pg_msg(p->err, sizeof p->err,
                 "%s: no schema to create mend's tables in (search_path names none that exists)",
                 p->server);
    return -1;
  }
  snprintf(p->schema_name, sizeof p->schema_name, "%s", PQgetvalue(r, 0, 0));
  int has_meta = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
  long tables = atol(PQgetvalue(r, 0, 2));
  PQclear(r);
  *version = 0;
  if (!has_meta) {
    if (tables == 0) return 0;
    mend__pg_msg(p->err, sizeof p->err,
                 "%s: not a mend database (it has tables of its own and no mend schema)",
                 p->server);
    return -1;
  }
  if (!(r = one(p, "SELECT (SELECT value FROM meta WHERE key = 'application'),"
                   " (SELECT value FROM meta WHERE key = 'schema_version')", "read meta")))
    return -1;
  const char *app = PG_TEXT(r, 0, 0), *v = PG_TEXT(r, 0, 1);
  if (!app || strcmp(app, "mend") != 0 || !v) {
    mend__pg_msg(p->err, sizeof p->err,
                 "%s: not a mend database (its meta table does not say application = mend)",
                 p->server);
    PQclear(r);
    return -1;
  }
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < 1) {
    /* not a version any mend wrote: nothing may be migrated from it */
    mend__pg_msg(p->err, sizeof p->err,
                 "%s: not a mend database (its meta table's schema_version \"%.40s\" is not a "
                 "version)", p->server, v);
    PQclear(r);
    return -1;
  }
  PQclear(r);
  if (n > MEND_PG_SCHEMA_VERSION) {
    mend__pg_msg(p->err, sizeof p->err, "%s: schema version %ld is newer than this mend (%d)",
                 p->server, n, MEND_PG_SCHEMA_VERSION);
    return -1;
  }
  *version = (int)n;
  return 0;
}

/* The usual open's one round trip: lock_timeout bounded for the open (PG_OPEN_TRY_MS), and a
 * schema that is current read in one statement (one snapshot: no transaction needed) with
 * what the open wants of it besides, the schema's name (the wake-up channel's, pg_notify.c)
 * and the sandbox mark (pg_mark.c). 1: current, all read; 0: anything else (no meta table, not
 * mend's, older, newer), for the transaction after to read again, and say or do what it must
 * (the SET went with the failed statement: it is sent again); -1: failed on a lock or a lost
 * connection, as the transaction would have. */
#define OPEN_BOUND "SET lock_timeout = " PG_TEXT_OF(PG_OPEN_TRY_MS)

static int schema_current(mend_pg *p) {
  PGresult *r = PQexec(p->conn, OPEN_BOUND "; SELECT current_schema(),"
                       " (SELECT value FROM meta WHERE key = 'application'),"
                       " (SELECT value FROM meta WHERE key = 'schema_version'),"
                       " (SELECT value FROM meta WHERE key = 'sandbox')");
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    int fatal = mend__pg_lock_timed_out(r) || PQstatus(p->conn) != CONNECTION_OK;
    if (fatal) mend__pg_fail(p, p->conn, r, "read schema");
    PQclear(r);
    return fatal ? -1 : 0;
  }
  char want[16];
  snprintf(want, sizeof want, "%d", MEND_PG_SCHEMA_VERSION);
  const char *app = PG_TEXT(r, 0, 1), *v = PG_TEXT(r, 0, 2), *mark = PG_TEXT(r, 0, 3);
  int current = PQntuples(r) == 1 && !PQgetisnull(r, 0, 0) && app && strcmp(app, "mend") == 0 &&
                v && strcmp(v, want) == 0;
  if (current) {
    snprintf(p->schema_name, sizeof p->schema_name, "%s", PQgetvalue(r, 0, 0));
    p->mark_read = 1;
    p->mark_on = mark && strcmp(mark, "on") == 0;
    p->schema_version = MEND_PG_SCHEMA_VERSION;
  }
  PQclear(r);
  return current;
}

/* A schema that is current is only read: every open (each `mend start`, each command) would
 * otherwise queue on the lock behind the others. Only creating or upgrading takes the lock, and
 * reads again under it (READ COMMITTED: what a migration that held it committed is seen).
 * Leaves lock_timeout at the open's bound: the prepare after sets it back (pg.c). 0; -1;
 * MEND_STORE_BUSY when the creation lock was not had within the bound (err names its holder). */
int mend__pg_schema(mend_pg *p) {
  int version;
  int current = schema_current(p);
  if (current != 0) return current > 0 ? 0 : -1;
  if (mend__pg_exec(p, p->conn, OPEN_BOUND, "open") != 0 ||
      mend__pg_exec(p, p->conn, "BEGIN", "create schema") != 0)
    return -1;
  if (schema_state(p, &version) != 0) goto fail;
  if (version == 0 && p->must_exist) {
    mend__pg_msg(p->err, sizeof p->err, "%s: no mend database there (no mend schema)", p->server);
    p->no_schema = 1;
    goto fail;
  }
  if (version < MEND_PG_SCHEMA_VERSION) {
    if (mend__pg_exec(p, p->conn, "SELECT pg_advisory_xact_lock(x'" SCHEMA_LOCK "'::int,"
                      " hashtext(current_schema()))",
                      "wait for another mend creating the schema") != 0) {
      if (p->lock_met) return creation_lock_busy(p);
      goto fail;
    }
    if (schema_state(p, &version) != 0) goto fail;
  }
  if (version < MEND_PG_SCHEMA_VERSION) {
    /* every migration due, the version, and the sandbox mark read back (pg_mark.c: the engine
     * asks for it next) in one round trip: a fresh schema has ten migrations */
    size_t len = 400;
    for (int v = version; v < MEND_PG_SCHEMA_VERSION; v++)
      len += strlen(mend__pg_migrations[v]) + 1;
    char *sql = malloc(len);
    if (!sql) {
      mend__pg_msg(p->err, sizeof p->err, "%s: create schema: out of memory", p->server);
      goto fail;
    }
    size_t at = 0;
    for (int v = version; v < MEND_PG_SCHEMA_VERSION; v++)
      at += (size_t)snprintf(sql + at, len - at, "%s;", mend__pg_migrations[v]);
    snprintf(sql + at, len - at,
             "INSERT INTO meta(key, value) VALUES ('application', 'mend'), ('schema_version', '%d')"
             " ON CONFLICT (key) DO UPDATE SET value = excluded.value;"
             " SELECT value FROM meta WHERE key = 'sandbox'", MEND_PG_SCHEMA_VERSION);
    PGresult *r = PQexec(p->conn, sql);
    free(sql);
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) mend__pg_fail(p, p->conn, r, "create schema");
    p->mark_read = ok;
    p->mark_on = ok && PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "on") == 0;
    PQclear(r);
    if (!ok) goto fail;
  }
  if (mend__pg_exec(p, p->conn, "COMMIT", "create schema") != 0) goto fail;
  p->schema_version = MEND_PG_SCHEMA_VERSION;
  return 0;
fail:
  PQclear(PQexec(p->conn, "ROLLBACK"));
  return -1;
}

/* Every statement in one round trip (a pipeline): a worker's start is one connection's
 * work, not forty-odd round trips of it. */
/* Preparing a write takes its table's lock for writing (ROW EXCLUSIVE, as parse analysis
 * does): a table another session locked by hand (`LOCK TABLE history IN SHARE MODE`) holds
 * the prepare back, and the session sets no lock_timeout of its own (mend__pg_session_sql).
 * Bounded (the store's opening, which the opener tries again: pg.c) to PG_OPEN_TRY_MS:
 * MEND_STORE_BUSY then, err naming the table and the session. Bounded also as a lost
 * connection opens again (pg_batch.c) and as the side connection opens (pg_aux.c): either may
 * be on the loop's thread, which must not wait as long as a lock lasts. The bound is set and
 * set back in the same pipeline: the prepare is one round trip. */
int mend__pg_prepare_to(PGconn *c, char *err, int errlen, const char *server, int bounded) {
  int ok = PQenterPipelineMode(c);
  if (ok && bounded)
    ok = PQsendQueryParams(c, OPEN_BOUND, 0, NULL, NULL, NULL, NULL, 0);
  for (int i = 0; ok && i < P__COUNT; i++) {
    char name[16];
    snprintf(name, sizeof name, "m%d", i);
    ok = PQsendPrepare(c, name, mend__pg_sql[i], 0, NULL);
  }
  if (ok && bounded)
    ok = PQsendQueryParams(c, "SET lock_timeout = 0", 0, NULL, NULL, NULL, NULL, 0);
  if (!ok || !PQpipelineSync(c)) {
    mend__pg_fail_to(err, errlen, server, c, NULL, "prepare statements");
    PQexitPipelineMode(c);
    return -1;
  }
  int failed = 0, locked = 0;
  /* results: the bound's SET, the statements (i from 0), the SET back */
  for (int i = bounded ? -1 : 0; i < P__COUNT + (bounded ? 1 : 0); i++) {
    PGresult *r = PQgetResult(c);
    if (!r) {
      if (!failed) mend__pg_fail_to(err, errlen, server, c, NULL, "prepare statements");
      failed = 1;
      break;
    }
    if (PQresultStatus(r) != PGRES_COMMAND_OK && !failed) {
      char what[40];
      if (i < 0 || i == P__COUNT) snprintf(what, sizeof what, "set lock_timeout");
      else snprintf(what, sizeof what, "prepare statement %d", i);
      mend__pg_fail_to(err, errlen, server, c, r, what);
      failed = 1;
      locked = mend__pg_lock_timed_out(r);
    }
    PQclear(r);
    while ((r = PQgetResult(c))) PQclear(r);   /* the NULL that ends each one's results */
  }
  PGresult *r;
  while ((r = PQgetResult(c))) {   /* the sync */
    ExecStatusType st = PQresultStatus(r);
    PQclear(r);
    if (st == PGRES_PIPELINE_SYNC) break;
  }
  PQexitPipelineMode(c);
  /* a failure undid the pipeline's SETs, the open's SET before them too */
  if (bounded && failed) PQclear(PQexec(c, "SET lock_timeout = 0"));
  if (locked) {
    PQclear(PQexec(c, "DEALLOCATE ALL"));   /* those prepared before it: all again next try */
    char holder[300];
    mend__pg_table_holder(c, holder, sizeof holder);
    mend__pg_msg(err, errlen, "%s: prepare statements: %s", server, holder);
    return MEND_STORE_BUSY;
  }
  return failed ? -1 : 0;
}

int mend__pg_prepare(mend_pg *p, PGconn *c, int bounded) {
  return mend__pg_prepare_to(c, p->err, sizeof p->err, p->server, bounded);
}
