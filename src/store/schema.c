/*
 * schema: every SQL text of the SQLite store: the statements prepared once at open (numbered
 * by the Q_ enum of store_int.h) and the migrations from each schema version to the next, each
 * with its reason. Must never: hold a statement anywhere else; change a migration that has
 * shipped (add the next one).
 *
 * Schema (version MEND_SCHEMA_VERSION, kept in PRAGMA user_version and in meta):
 *   meta(key TEXT PRIMARY KEY, value TEXT)
 *   runs(id TEXT PRIMARY KEY, workflow TEXT, version TEXT, source TEXT, run_key TEXT (unique: see
 *        runs_key_layout below), status TEXT, input TEXT (JSON), error TEXT, attention INTEGER,
 *        reason TEXT (why it failed for good), owner TEXT (the worker executing it), lease_until
 *        REAL (not written since schema 4: see workers), created REAL, updated REAL, step_names
 *        TEXT (JSON array: its steps, in order), workflow_version INTEGER (since schema 7, where
 *        version, source and step_names are; they are NULL in the run then), unavailable TEXT
 *        (since schema 9: why no engine could load its version; such runs are claimed only on
 *        purpose, now and then))
 *        + indexes on created for unfinished runs, and for those nobody holds (runs_free)
 *   workflow_versions(id INTEGER PRIMARY KEY, workflow TEXT, version TEXT, source TEXT,
 *        step_names TEXT, script TEXT (the file's text, since schema 8; NULL for workflows
 *        registered in code), first_seen REAL (since schema 9)): written by the first run of
 *        a version a store sees, at once, or when a version is recorded for an upgrade
 *   workers(owner TEXT PRIMARY KEY, lease_until REAL) WITHOUT ROWID: a worker holds its
 *        runs while its lease lasts; one row renewed, however many runs it holds
 *   steps(run_id TEXT, idx INTEGER, name TEXT, status TEXT, attempts INTEGER,
 *         comp_attempts INTEGER, idem_key TEXT (NULL: the default, run_id/name, and read
 *         as that), custom_key INTEGER (mend_key_kind: 0 the default key, 1 the step's own,
 *         2 its own with a result reused from another row, whose effect is that run's: since
 *         schema 18, whose migration marks the reuses older mends wrote as 1), result TEXT (JSON),
 *         error TEXT, due REAL, last_delay REAL, updated REAL, slept INTEGER,
 *         PRIMARY KEY(run_id, idx))
 *         + index on idem_key for custom keys; a step has a row from its first transition
 *         on (before that it is pending, listed from runs.step_names); a row is not written
 *         when an attempt begins (schema 6): a step whose last history row is `-> running`
 *         reads as running, with that attempt
 *   history(run_id TEXT, seq INTEGER (1, 2, ... within the run), step TEXT, at REAL,
 *           event TEXT, from_status TEXT, to_status TEXT (since schema 7 the code of a name
 *           in labels, as text by the column's type, or the name if labels has none; before,
 *           the name; read as the name), attempt INTEGER, error TEXT,
 *           delay REAL, detail TEXT, worker TEXT (who wrote it: since schema 5 the id of its
 *           name in worker_names, as text by the column's type; before, the name; read as
 *           the name), PRIMARY KEY(run_id, seq)) WITHOUT ROWID; append-only
 *   worker_names(id INTEGER PRIMARY KEY, name TEXT UNIQUE): the workers that wrote history
 *   labels(code INTEGER PRIMARY KEY, name TEXT UNIQUE): event and status names history codes
 *   history_named: a view of history with codes and worker numbers read as names
 *   breakers(key TEXT PRIMARY KEY, state TEXT, failures INTEGER, successes INTEGER,
 *            opened_at REAL, open_until REAL, updated REAL)
 *   dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail TEXT, at REAL)
 *        + dlq_page on (coalesce(at, -1), run_id) (schema 19): the order of its pages
 *   audit(seq INTEGER PRIMARY KEY, at REAL, who TEXT, op TEXT, target TEXT, detail TEXT):
 *        operations by people that concern no single run (breaker overrides)
 *   inbox(seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, name TEXT, payload TEXT (JSON),
 *        key TEXT (UNIQUE with run_id where set), sent REAL, consumed REAL, step TEXT (the
 *        step that consumed it)) (schema 10): events sent to runs, consumed once each, in seq
 *        order; + index on (run_id, name, seq) of those not consumed. steps.awaits (schema
 *        10): the event a waiting step waits for
 *   tokens(token TEXT PRIMARY KEY, run_id TEXT, step TEXT, attempt INTEGER, made REAL, used
 *        REAL, outcome TEXT (JSON)) (schema 11): completion tokens, one an attempt that asked
 *        for one (UNIQUE(run_id, step, attempt)); used once. runs.parent_run, runs.parent_step
 *        (schema 11): the run and step that started a child run (indexed where set)
 *   labels gain `skipped` and `when` (schema 12: steps skipped by their when(ctx)), and
 *        `claimed` (schema 21: a worker's first take of a run no process held before)
 *   tokens.token becomes tokens.digest (schema 13): the SHA-256 of the token in hex
 *        (src/digest.c), never the token, so that whoever reads the database cannot complete
 *        a step; as a token cannot be read back, an attempt that asked from a second ctx would
 *        get a second one, so (run_id, step, attempt) is indexed, not unique, and the first
 *        use ends them all. A completion's inbox row is keyed by the digest too
 *   inbox.who TEXT (schema 20): who sent the event, as a repair's history row names who
 *   steps.error_kind TEXT (schema 14): the kind of the step's error by its name (retryable,
 *        fatal, compensable, timeout, error), written with it; NULL with no error
 *   steps.error_severity INTEGER, steps.error_stopped INTEGER (schema 15, both NOT NULL
 *        DEFAULT 0): a compensable error's severity (1..3), and 1 when the engine stopped the
 *        step's code (a limit: a workflow_error), so that a group taken up after a restart
 *        ends as its branch failed; history.error_kind TEXT (schema 15): the kind of a step
 *        transition's error, as steps.error_kind (NULL for other rows), in history_named too
 *   runs also has cancel_requested INTEGER: a cancel asked for by another process (indexed by
 *        owner where set)
 *   meta.runs_key_layout (schema 16): how run_key is kept unique. `column`: the UNIQUE column
 *        of schema 1, whose index holds an entry for every run, with a key or not (files made
 *        before schema 16); `partial`: runs_key, a unique index of the runs that have a key
 *        (as on PostgreSQL), which a new file has from birth. A file goes from one to the
 *        other only on purpose (mend_store_upgrade_run_keys, `mend db upgrade`): the table is
 *        made again, and a mend before schema 16 still running on the file would fail every
 *        start after it. The statements below work on both.
 *   meta.sandbox (schema 17): `on` once a sandboxed engine opened the file: its workflows'
 *        code is untrusted, and engines open it sandboxed unless told not to (engine.c)
 * Nullable text fields are passed as NULL; a delay or due time of < 0 is stored as NULL.
 */
#include "store_int.h"

/* A history row as every read of it gives it, up to its WHERE. */
#define HISTORY_ROW                                                                             \
  "seq, run_id, step, at, event, from_status AS \"from\", to_status AS \"to\", attempt, error," \
  " error_kind, delay, detail, worker FROM history_named"

/* The target of a start's ON CONFLICT: with its WHERE it names the UNIQUE column's index
 * (layout `column`) and runs_key (layout `partial`) alike, so one text serves both. */
#define RUN_KEY_TARGET "ON CONFLICT(run_key) WHERE run_key IS NOT NULL DO NOTHING"

#define INSERT_RUN_SQL \
  "INSERT INTO runs(id, workflow, run_key, status, input, error, attention, created, updated," \
  " owner, workflow_version) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)" \
  " " RUN_KEY_TARGET

/* A key the run's inbox has is not inserted at all: an insert ignored for it would still draw
 * the next seq (AUTOINCREMENT), a gap in the inbox's numbering. OR IGNORE stays the key's
 * guard. */
#define SEND_EVENT_SQL \
  "INSERT OR IGNORE INTO inbox(run_id, name, payload, key, sent, who)" \
  " SELECT ?1, ?2, ?3, ?4, ?5, ?6" \
  " WHERE ?4 IS NULL OR NOT EXISTS (SELECT 1 FROM inbox WHERE run_id = ?1 AND key = ?4)"

const char *const mend__query_sql[Q__COUNT] = {
  [Q_BEGIN] = "BEGIN IMMEDIATE",
  [Q_COMMIT] = "COMMIT",
  [Q_ROLLBACK] = "ROLLBACK",
  [Q_BEGIN_READ] = "BEGIN",
  /* version, source and step_names are the workflow version's (workflow_version), and NULL
   * here since schema 7. */
  [Q_INSERT_RUN] = INSERT_RUN_SQL,
  /* The same, recorded: the key is looked up as the batch is written (writer.c). */
  [Q_INSERT_RUN_KEY] = INSERT_RUN_SQL,
  /* The same, its version numbered in this batch: ?11-?13 its version, source and step names
   * (writer.c). The WHERE keeps ON CONFLICT from reading as a join's ON. */
  [Q_INSERT_RUN_NEWV] =
    "INSERT INTO runs(id, workflow, run_key, status, input, error, attention, created, updated,"
    " owner, workflow_version) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, id"
    " FROM workflow_versions WHERE workflow = ?2 AND version IS ?11 AND source IS ?12"
    " AND step_names IS ?13 " RUN_KEY_TARGET,
  [Q_PUT_VERSION] =
    "INSERT INTO workflow_versions(workflow, version, source, step_names, first_seen)"
    " SELECT ?1, ?2, ?3, ?4, ?5"
    " WHERE NOT EXISTS (SELECT 1 FROM workflow_versions WHERE workflow = ?1 AND version IS ?2"
    " AND source IS ?3 AND step_names IS ?4)",
  [Q_VERSION_ID] =
    "SELECT id FROM workflow_versions WHERE workflow = ?1 AND version IS ?2 AND source IS ?3"
    " AND step_names IS ?4",
  /* A run that is neither running nor compensating is nobody's: repairs from another process
   * need not wait for its lease, and claims never look at it. */
  [Q_UPDATE_RUN] =
    "UPDATE runs SET status = ?2, error = ?3, attention = ?4, updated = ?5, reason = ?6,"
    " owner = iif(?2 IN ('running', 'compensating'), owner, NULL) WHERE id = ?1",
  [Q_PUT_STEP] =
    "INSERT INTO steps(run_id, idx, name, status, attempts, comp_attempts, idem_key, custom_key,"
    " result, error, due, last_delay, updated, slept, awaits, error_kind, error_severity,"
    " error_stopped)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
    " ON CONFLICT(run_id, idx) DO UPDATE SET name = excluded.name, status = excluded.status,"
    " attempts = excluded.attempts, comp_attempts = excluded.comp_attempts,"
    " idem_key = excluded.idem_key, custom_key = excluded.custom_key, result = excluded.result,"
    " error = excluded.error, due = excluded.due, last_delay = excluded.last_delay,"
    " updated = excluded.updated, slept = excluded.slept, awaits = excluded.awaits,"
    " error_kind = excluded.error_kind, error_severity = excluded.error_severity,"
    " error_stopped = excluded.error_stopped",
  /* The row exists (written when the run started): only what a transition changes. A NULL
   * key keeps the one the row has (the engine names a key only once it is the step's own). */
  [Q_UPDATE_STEP] =
    "UPDATE steps SET status = ?3, attempts = ?4, comp_attempts = ?5,"
    " idem_key = coalesce(?6, idem_key),"
    " custom_key = ?7, result = ?8, error = ?9, due = ?10, last_delay = ?11, updated = ?12,"
    " slept = ?13, awaits = ?14, error_kind = ?15, error_severity = ?16, error_stopped = ?17"
    " WHERE run_id = ?1 AND idx = ?2",
  /* ?13 (the last) is the number the run's holder keeps count of (no look-up: 12% of the
   * writer thread's work in W1); NULL, or a number another process took meanwhile, makes it
   * the next free one (flush_log runs it again without). */
  [Q_APPEND_HISTORY] =
    "INSERT INTO history(run_id, seq, step, at, event, from_status, to_status, attempt, error,"
    " delay, detail, worker, error_kind) VALUES(?1, coalesce(?13, coalesce((SELECT max(seq)"
    " FROM history WHERE run_id = ?1), 0) + 1), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    " ON CONFLICT(run_id, seq) DO NOTHING",
  /* Q_HISTORY_GROUP is HISTORY_GROUP numbered rows in one statement (history_group_sql). */
  [Q_NAME_WORKER] = "INSERT INTO worker_names(name) VALUES(?1) ON CONFLICT(name) DO NOTHING",
  [Q_WORKER_ID] = "SELECT id FROM worker_names WHERE name = ?1",
  [Q_PUT_BREAKER] =
    "INSERT INTO breakers(key, state, failures, successes, opened_at, open_until, updated)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)"
    " ON CONFLICT(key) DO UPDATE SET state = excluded.state, failures = excluded.failures,"
    " successes = excluded.successes, opened_at = excluded.opened_at,"
    " open_until = excluded.open_until, updated = excluded.updated",
  [Q_PUT_DLQ] =
    "INSERT INTO dlq(run_id, reason, step, error, detail, at) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"
    " ON CONFLICT(run_id) DO UPDATE SET reason = excluded.reason, step = excluded.step,"
    " error = excluded.error, detail = excluded.detail, at = excluded.at",
  [Q_FIND_RUN_KEY] = "SELECT id FROM runs WHERE run_key = ?1",
  [Q_LAST_SEQ] = "SELECT seq, at FROM history WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1",
  /* custom_key = 1 lets SQLite use the partial index on idem_key, and takes only a row that
   * executed (a reuse's is 2: its effect is another run's). Its effect stands unless its run
   * or a run above it (a child is undone with its parent) is going back, or may be:
   * `compensating`, or `needs_attention` (a person decides what comes next: a dlq retry of a
   * compensation failure goes on with the way back). Every other status keeps what succeeded:
   * running, succeeded, failed (nothing to undo), resolved (a person's), compensated (what it
   * undid is no longer `succeeded`). README, Guarantees. */
  [Q_FIND_KEY_RESULT] =
    "SELECT result, run_id FROM steps s WHERE idem_key = ?1 AND custom_key = 1"
    " AND status = 'succeeded' AND NOT EXISTS (WITH RECURSIVE up(id) AS (SELECT s.run_id"
    " UNION SELECT r.parent_run FROM runs r JOIN up ON r.id = up.id"
    " WHERE r.parent_run IS NOT NULL) SELECT 1 FROM runs r JOIN up ON r.id = up.id"
    " WHERE r.status IN ('compensating', 'needs_attention')) ORDER BY updated DESC LIMIT 1",
  [Q_GET_BREAKER] =
    "SELECT state, failures, successes, opened_at, open_until FROM breakers WHERE key = ?1",
  /* Takes unfinished runs nobody holds (no owner, or one whose lease ran out) for `owner`.
   * Never our own runs (they are in our memory, whatever our lease says); oldest first, or
   * newest first so that new work does not wait behind a backlog. Both walk the index of
   * unfinished runs by creation time: a claim costs what it takes, not what is waiting. */
  [Q_CLAIM_OLDEST] =
    "UPDATE runs SET owner = ?1, lease_until = NULL WHERE id IN (SELECT id FROM runs"
    " WHERE status IN ('running', 'compensating') AND (owner IS NULL OR (owner IS NOT ?1"
    " AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.owner = runs.owner"
    " AND w.lease_until >= ?2))) AND (?4 OR unavailable IS NULL) ORDER BY created LIMIT ?3)"
    " RETURNING id",
  [Q_CLAIM_NEWEST] =
    "UPDATE runs SET owner = ?1, lease_until = NULL WHERE id IN (SELECT id FROM runs"
    " WHERE status IN ('running', 'compensating') AND (owner IS NULL OR (owner IS NOT ?1"
    " AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.owner = runs.owner"
    " AND w.lease_until >= ?2))) AND (?4 OR unavailable IS NULL) ORDER BY created DESC"
    " LIMIT ?3) RETURNING id",
  /* Only runs nobody holds (runs_free): what a worker takes when no lease has run out. */
  [Q_CLAIM_FREE_OLDEST] =
    "UPDATE runs SET owner = ?1, lease_until = NULL WHERE id IN (SELECT id FROM runs"
    " WHERE owner IS NULL AND status IN ('running', 'compensating')"
    " AND (?3 OR unavailable IS NULL) ORDER BY created LIMIT ?2) RETURNING id",
  [Q_CLAIM_FREE_NEWEST] =
    "UPDATE runs SET owner = ?1, lease_until = NULL WHERE id IN (SELECT id FROM runs"
    " WHERE owner IS NULL AND status IN ('running', 'compensating')"
    " AND (?3 OR unavailable IS NULL) ORDER BY created DESC LIMIT ?2) RETURNING id",
  /* One row however many runs the worker holds. Never shorter: a renewal recorded before a
   * stall may run after the late path renewed. */
  [Q_RENEW] =
    "INSERT INTO workers(owner, lease_until) VALUES(?1, ?2) ON CONFLICT(owner)"
    " DO UPDATE SET lease_until = max(lease_until, excluded.lease_until)",
  [Q_RELEASE] = "UPDATE runs SET owner = NULL, lease_until = NULL WHERE id = ?1 AND owner = ?2",
  [Q_OWNER] =
    "SELECT r.owner, w.lease_until FROM runs r LEFT JOIN workers w ON w.owner = r.owner"
    " WHERE r.id = ?1",
  [Q_HOLDERS] = "SELECT owner FROM workers WHERE lease_until >= ?1",
  [Q_HELD] = "SELECT id FROM runs WHERE owner = ?1 AND status IN ('running', 'compensating')",
  [Q_RELEASE_OWNER] =
    "UPDATE runs SET owner = NULL, lease_until = NULL WHERE owner = ?1"
    " AND status IN ('running', 'compensating')",
  [Q_FORGET_WORKER] = "DELETE FROM workers WHERE owner = ?1",
  /* After a claim that took all it could: a worker whose lease ran out holds nothing now. */
  [Q_FORGET_GONE] = "DELETE FROM workers WHERE lease_until < ?2 AND owner IS NOT ?1",
  /* A run's own version, source and step_names are those of runs from before schema 7. */
  [Q_RUN] =
    "SELECT r.id, r.workflow, coalesce(r.version, v.version) AS version,"
    " coalesce(r.source, v.source) AS source, r.run_key AS key, r.status, r.input, r.error,"
    " r.attention, r.reason, r.owner,"
    " (SELECT w.lease_until FROM workers w WHERE w.owner = r.owner) AS lease_until,"
    " r.created, r.updated, coalesce(r.step_names, v.step_names) AS step_names,"
    " CASE WHEN r.status = 'running' THEN nullif(r.cancel_requested, 0) END AS cancel_requested,"
    " r.unavailable, r.parent_run,"
    " r.parent_step"
    " FROM runs r LEFT JOIN workflow_versions v ON v.id = r.workflow_version WHERE r.id = ?1",
  /* A reused result says where it is from: the run named by the step's `reused` history row
   * (reuse.c), all of them read in one pass over the run's history, made only when the run
   * has a reused step (one look per reused step read the history each time: a map of 8000
   * reused items took 4 s). */
  [Q_STEPS] =
    "SELECT idx, name, status, attempts, comp_attempts,"
    " coalesce(idem_key, run_id || '/' || name) AS idempotency_key,"
    " custom_key, result, error, error_kind, due, last_delay, updated, slept, awaits,"
    " CASE WHEN custom_key = 2 THEN 1 END AS reused,"
    " CASE WHEN custom_key = 2 THEN u.detail END AS reused_from FROM steps"
    " LEFT JOIN (SELECT step, detail, max(seq) AS last FROM history_named WHERE run_id = ?1"
    " AND event = 'reused' AND EXISTS (SELECT 1 FROM steps WHERE run_id = ?1 AND custom_key = 2)"
    " GROUP BY step) u ON u.step = steps.name"
    " WHERE run_id = ?1"
    " ORDER BY idx",
  /* The attempts begun and not ended: a step whose last transition is to running (its row is
   * not written when an attempt begins: schema 6). ?2 and ?3 are the codes of "step" and
   * "running" (labels); rows from before schema 7 spell them out. */
  [Q_IN_FLIGHT] =
    "SELECT step, to_status IN (?3, 'running'), attempt, at FROM history"
    " WHERE run_id = ?1 AND event IN (?2, 'step') ORDER BY seq",
  [Q_HISTORY] = "SELECT " HISTORY_ROW " WHERE run_id = ?1 ORDER BY seq",
  /* Pages of it walk the (run_id, seq) key from either end; a negative LIMIT is none. */
  [Q_HISTORY_AFTER] =
    "SELECT " HISTORY_ROW " WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
  [Q_HISTORY_TAIL] =
    "SELECT * FROM (SELECT " HISTORY_ROW " WHERE run_id = ?1 ORDER BY seq DESC LIMIT ?2)"
    " ORDER BY seq",
  /* An empty history is a run's only when the run is there. */
  [Q_RUN_EXISTS] = "SELECT 1 FROM runs WHERE id = ?1",
  /* A page: the rows after (?1, ?2), walked in dlq_page from there (the first page's is
   * before every row: query.c); a negative LIMIT is no limit in SQLite. The expression is
   * dlq_page's, as written there, or the planner would not know them for the same; the bound
   * on it alone is what it seeks by (a row value's is only a filter of a walk from the
   * start). */
  [Q_DLQ] = "SELECT run_id, reason, step, error, detail, at FROM dlq"
            " WHERE coalesce(at, -1) >= ?1 AND (coalesce(at, -1) > ?1 OR run_id > ?2)"
            " ORDER BY coalesce(at, -1), run_id LIMIT ?3",
  [Q_BREAKERS] =
    "SELECT key, state, failures, successes, opened_at, open_until, updated FROM breakers"
    " ORDER BY key",
  /* A negative LIMIT is no limit in SQLite. */
  [Q_RUNS] =
    "SELECT r.id, r.workflow, coalesce(r.version, v.version) AS version,"
    " coalesce(r.source, v.source) AS source, r.run_key AS key, r.status, r.input, r.error,"
    " r.attention, r.reason, r.owner,"
    " (SELECT w.lease_until FROM workers w WHERE w.owner = r.owner) AS lease_until,"
    " r.created, r.updated, r.unavailable FROM runs r"
    " LEFT JOIN workflow_versions v ON v.id = r.workflow_version"
    " WHERE (?1 IS NULL OR r.status = ?1) AND (?2 IS NULL OR r.workflow = ?2)"
    " AND (?4 IS NULL OR r.created >= ?4)"
    " AND (?5 = 0 OR r.attention = 1 OR r.status = 'needs_attention'"
    " OR r.unavailable IS NOT NULL) ORDER BY r.created DESC, r.rowid DESC LIMIT ?3",
  [Q_DLQ_REMOVE] = "DELETE FROM dlq WHERE run_id = ?1",
  [Q_TAKE] = "UPDATE runs SET owner = ?2, lease_until = NULL, cancel_requested = 0 WHERE id = ?1",
  [Q_RUN_STATUS] = "SELECT status FROM runs WHERE id = ?1",
  [Q_REQUEST_CANCEL] = "UPDATE runs SET cancel_requested = 1 WHERE id = ?1",
  [Q_CANCEL_REQUESTS] =   /* runs_cancel */
    "SELECT id FROM runs WHERE owner = ?1 AND cancel_requested = 1 AND status = 'running'",
  [Q_AUDIT] = "INSERT INTO audit(at, who, op, target, detail) VALUES(?1, ?2, ?3, ?4, ?5)",
  [Q_AUDIT_LIST] = "SELECT seq, at, who, op, target, detail FROM audit ORDER BY seq",
  /* A run's inbox (schema 10). The same key twice is one event (inbox_key). */
  [Q_SEND_EVENT] = SEND_EVENT_SQL,
  /* The same, recorded with a ticket that hears whether the key was free (inbox.c). */
  [Q_SEND_EVENT_KEY] = SEND_EVENT_SQL,
  [Q_NEXT_EVENT] =   /* inbox_waiting */
    "SELECT seq, payload, key FROM inbox WHERE run_id = ?1 AND name = ?2 AND consumed IS NULL"
    " ORDER BY seq LIMIT 1",
  /* Recorded with the step's success, so that both commit or neither (run_id first: the fence
   * drops it with the run's other writes). */
  [Q_CONSUME_EVENT] =
    "UPDATE inbox SET consumed = ?3, step = ?4 WHERE run_id = ?1 AND seq = ?2 AND consumed IS NULL",
  [Q_LAST_EVENT] = "SELECT coalesce(max(seq), 0) FROM inbox",
  [Q_INBOX] =
    "SELECT seq, name, payload, key, sent, consumed, step, who FROM inbox"
    " WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
  /* Completion tokens and child runs (schema 11). */
  [Q_PUT_TOKEN] =
    "INSERT INTO tokens(digest, run_id, step, attempt, made) VALUES(?1, ?2, ?3, ?4, ?5)",
  [Q_TOKEN_OF_ATTEMPT] =   /* tokens_attempt */
    "SELECT digest FROM tokens WHERE run_id = ?1 AND step = ?2 AND attempt = ?3 LIMIT 1",
  [Q_TOKEN] =
    "SELECT digest, run_id, step, attempt, made, used, outcome FROM tokens WHERE digest = ?1",
  /* Every token of the attempt is used by the first use of any (one answer an attempt). The
   * rows are chosen before any is changed (an IN list is made once): a NOT EXISTS of the
   * updated table would see the rows this statement changed already, and stop at the first. */
  [Q_USE_TOKEN] =
    "UPDATE tokens SET used = ?2, outcome = ?3 WHERE digest IN (SELECT t.digest FROM tokens t,"
    " tokens k WHERE k.digest = ?1 AND t.run_id = k.run_id AND t.step = k.step"
    " AND t.attempt = k.attempt AND NOT EXISTS (SELECT 1 FROM tokens u WHERE"
    " u.run_id = k.run_id AND u.step = k.step AND u.attempt = k.attempt AND u.used IS NOT NULL))",
  [Q_SET_PARENT] = "UPDATE runs SET parent_run = ?2, parent_step = ?3 WHERE id = ?1",
  [Q_CHILDREN] =   /* runs_parent */
    "SELECT id AS run_id, parent_step AS step, workflow, status FROM runs WHERE parent_run = ?1"
    " ORDER BY created, rowid",
  /* A child's end, to its parent's inbox: recorded in the write log with the child's id first,
   * so that the fence drops it with the child's other writes when the child is lost. */
  [Q_CHILD_END] =
    "INSERT OR IGNORE INTO inbox(run_id, name, payload, key, sent)"
    " SELECT parent_run, ?2, ?3, ?4, ?5 FROM runs WHERE id = ?1 AND parent_run IS NOT NULL"
    " AND (?4 IS NULL OR NOT EXISTS (SELECT 1 FROM inbox i WHERE i.run_id = runs.parent_run"
    " AND i.key = ?4))",
  /* A succeeded run is nobody's (Q_UPDATE_RUN): reopened, it is `owner`'s or any worker's. */
  [Q_REOPEN_RUN] =
    "UPDATE runs SET status = 'compensating', reason = ?2, owner = ?3, updated = ?4,"
    " error = 'compensated with its parent' WHERE id = ?1 AND status = 'succeeded'",
  /* A run's image for the engine (mend_store_run_image): the columns it rebuilds from, typed;
   * of history, what recovery reads (the details it needs: a map's list of items, and the run
   * whose result a step reused). */
  [Q_IMAGE_RUN] =
    "SELECT r.workflow, coalesce(r.version, v.version), r.status, r.reason, r.error, r.attention,"
    " r.cancel_requested, r.parent_run, r.unavailable, r.input,"
    " coalesce(r.step_names, v.step_names)"
    " FROM runs r LEFT JOIN workflow_versions v ON v.id = r.workflow_version WHERE r.id = ?1",
  [Q_IMAGE_STEPS] =
    "SELECT idx, name, status, attempts, comp_attempts, idem_key, custom_key, result, error, due,"
    " last_delay, slept, error_kind, error_severity, error_stopped FROM steps WHERE run_id = ?1"
    " ORDER BY idx",
  [Q_IMAGE_HISTORY] =
    "SELECT seq, at, step, event, to_status, attempt,"
    " CASE WHEN event IN ('map', 'reused') THEN detail END"
    " FROM history_named WHERE run_id = ?1 ORDER BY seq",
  /* The text of a version is the same wherever it was loaded from (the version is its hash). */
  [Q_VERSION_SCRIPT] =
    "SELECT script, source FROM workflow_versions WHERE workflow = ?1 AND version = ?2"
    " AND script IS NOT NULL ORDER BY id DESC LIMIT 1",
  [Q_KEEP_SCRIPT] = "UPDATE workflow_versions SET script = ?2 WHERE id = ?1 AND script IS NULL",
  [Q_KEEP_SCRIPT_NEWV] =
    "UPDATE workflow_versions SET script = ?5 WHERE workflow = ?1 AND version IS ?2"
    " AND source IS ?3 AND step_names IS ?4 AND script IS NULL",
  [Q_SET_UNAVAILABLE] = "UPDATE runs SET unavailable = ?2 WHERE id = ?1",
  /* Its own version, source and step names (runs from before schema 7) give way to the
   * version's. */
  [Q_MOVE_RUN] =
    "UPDATE runs SET workflow_version = ?2, version = NULL, source = NULL, step_names = NULL,"
    " unavailable = NULL WHERE id = ?1",
  [Q_DROP_STEPS_FROM] = "DELETE FROM steps WHERE run_id = ?1 AND idx >= ?2",
  /* A version is its text: the rows of one version loaded from several paths are one. */
  [Q_WORKFLOWS] =
    "SELECT v.workflow, v.version, min(v.first_seen) AS first_seen,"
    " json_group_array(DISTINCT v.source) AS sources, max(v.script IS NOT NULL) AS kept,"
    " (SELECT w.step_names FROM workflow_versions w WHERE w.workflow = v.workflow"
    " AND w.version IS v.version ORDER BY w.id DESC LIMIT 1) AS step_names,"
    " (SELECT count(*) FROM runs r WHERE r.status IN ('running', 'compensating')"
    " AND r.workflow_version IN (SELECT w.id FROM workflow_versions w"
    " WHERE w.workflow = v.workflow AND w.version IS v.version)) AS unfinished,"
    " (SELECT count(*) FROM runs r WHERE r.status IN ('running', 'compensating')"
    " AND r.unavailable IS NOT NULL AND r.workflow_version IN (SELECT w.id FROM"
    " workflow_versions w WHERE w.workflow = v.workflow AND w.version IS v.version))"
    " AS unavailable, max(v.id) AS newest"
    " FROM workflow_versions v WHERE ?1 IS NULL OR v.workflow = ?1"
    " GROUP BY v.workflow, v.version ORDER BY v.workflow, newest DESC",
};

/* migrations[v] takes a database from version v to v + 1; a new version appends one here and bumps
 * MEND_SCHEMA_VERSION. Each runs inside the transaction of mend__upgrade_schema (schema_check.c),
 * at any open of the file, while mends of the older version may still run on it: a migration only
 * adds what their prepared statements survive (a column, a table, an index, a meta row). A change
 * they would not survive (a constraint they name, a table made again) is a command run on purpose
 * once they are stopped (layout.c), and statements work with and without it. */
const char *const mend__migrations[MEND_SCHEMA_VERSION] = {
  "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
  "CREATE TABLE runs(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source TEXT,"
  " run_key TEXT UNIQUE, status TEXT NOT NULL, input TEXT, error TEXT,"
  " attention INTEGER NOT NULL DEFAULT 0, reason TEXT, owner TEXT, lease_until REAL,"
  " cancel_requested INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL);"
  "CREATE TABLE audit(seq INTEGER PRIMARY KEY, at REAL, who TEXT, op TEXT, target TEXT,"
  " detail TEXT);"
  "CREATE INDEX runs_status ON runs(status);"
  "CREATE TABLE steps(run_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT, status TEXT NOT NULL,"
  " attempts INTEGER NOT NULL DEFAULT 0, comp_attempts INTEGER NOT NULL DEFAULT 0, idem_key TEXT,"
  " custom_key INTEGER NOT NULL DEFAULT 0, result TEXT, error TEXT, due REAL, last_delay REAL,"
  " updated REAL, slept INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(run_id, idx));"
  "CREATE INDEX steps_custom_key ON steps(idem_key) WHERE custom_key = 1;"
  "CREATE TABLE history(seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, step TEXT, at REAL,"
  " event TEXT NOT NULL, from_status TEXT, to_status TEXT, attempt INTEGER, error TEXT,"
  " delay REAL, detail TEXT, worker TEXT);"
  "CREATE INDEX history_run ON history(run_id);"
  "CREATE TABLE breakers(key TEXT PRIMARY KEY, state TEXT NOT NULL, failures INTEGER,"
  " successes INTEGER, opened_at REAL, open_until REAL, updated REAL);"
  "CREATE TABLE dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail TEXT,"
  " at REAL);",
  /* 1 -> 2: fewer b-trees written per step (bench/README.md, "Schema 2"). History is
   * clustered by run (WITHOUT ROWID), so a row is one b-tree insert instead of a table row and
   * an index entry; a history row's seq becomes its number within its run. Only unfinished runs
   * are indexed by status: claims look for nothing else. (Steps clustered the same way cost
   * more: a transition rewrites the whole row in the key's b-tree.) */
  "CREATE TABLE history2(run_id TEXT NOT NULL, seq INTEGER NOT NULL, step TEXT, at REAL,"
  " event TEXT NOT NULL, from_status TEXT, to_status TEXT, attempt INTEGER, error TEXT,"
  " delay REAL, detail TEXT, worker TEXT, PRIMARY KEY(run_id, seq)) WITHOUT ROWID;"
  "INSERT INTO history2 SELECT run_id, row_number() OVER (PARTITION BY run_id ORDER BY seq),"
  " step, at, event, from_status, to_status, attempt, error, delay, detail, worker FROM history;"
  "DROP TABLE history;"
  "ALTER TABLE history2 RENAME TO history;"
  "DROP INDEX runs_status;"
  "CREATE INDEX runs_live ON runs(status) WHERE status IN ('running', 'compensating');",
  /* 2 -> 3: unfinished runs indexed by creation time, so that a claim of the oldest (or the
   * newest) walks the index instead of sorting every unfinished run: 0.1 s a poll with 100k
   * waiting, which kept a recovering worker from new work (bench/README.md, W6). */
  "DROP INDEX runs_live;"
  "CREATE INDEX runs_live ON runs(created) WHERE status IN ('running', 'compensating');"
  /* A worker asks every second whether a cancel was requested for one of its runs: this
   * index holds only the runs that have one, instead of a walk over every unfinished run. */
  "CREATE INDEX runs_cancel ON runs(owner) WHERE cancel_requested = 1;",
  /* 3 -> 4: a step's row is written at its first transition, not when its run starts (three
   * inserts of a 3-step run were 16% of the writer thread in W1); the run keeps its steps'
   * names, so that a listing still shows the ones not begun as pending. Runs started before
   * have every row, and no names. */
  "ALTER TABLE runs ADD COLUMN step_names TEXT;"
  /* A lease is the worker's, not each run's: a run is held while its owner's row here lasts.
   * Renewing every run's lease rewrote every row a worker held (2.7 s and 130 MB of WAL each
   * 10 s with 1M runs parked); now it is one row. runs.lease_until is no longer written. */
  "CREATE TABLE workers(owner TEXT PRIMARY KEY, lease_until REAL NOT NULL) WITHOUT ROWID;"
  "INSERT INTO workers SELECT owner, max(lease_until) FROM runs WHERE owner IS NOT NULL"
  " AND lease_until IS NOT NULL AND status IN ('running', 'compensating') GROUP BY owner;"
  "UPDATE runs SET lease_until = NULL WHERE lease_until IS NOT NULL;",
  /* 4 -> 5: fewer bytes a row (bench/README.md, "Session of 2026-12-03"). A history row names
   * its worker by a number here (17 bytes -> 1 or 2 in every row: 12% of a W1 database); the
   * rows before keep their names, and a read gives names either way. A step's default key is
   * no longer stored (steps.idem_key NULL: read as run_id/name). */
  "CREATE TABLE worker_names(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);",
  /* 5 -> 6: no table changes. A step's row is no longer written when an attempt begins; its
   * `-> running` history row is what says it is in flight (mend_store_run). A mend before this
   * would read such a step as not begun, and resume it one attempt short: it must refuse. */
  "UPDATE meta SET value = value WHERE 0;",
  /* 6 -> 7: fewer bytes a row again. A history row's event and statuses are the codes of
   * their names in labels (17 bytes -> 3 in most rows: 13% of a W1 database); a name that is
   * not there is written out. Rows before keep their names, so that opening a large database
   * does not rewrite its history; history_named reads either as names, for the sqlite3 shell
   * as for mend. Codes are never reused: a new name is a new row. */
  "CREATE TABLE labels(code INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);"
  "INSERT INTO labels(code, name) VALUES (0, 'step'), (1, 'run'), (2, 'pending'), (3, 'running'),"
  " (4, 'succeeded'), (5, 'failed'), (6, 'retry_wait'), (7, 'breaker_open'), (8, 'sleeping'),"
  " (9, 'compensating'), (10, 'compensated'), (11, 'compensation_failed'),"
  " (12, 'needs_attention'), (13, 'resolved'), (14, 'closed'), (15, 'open'), (16, 'half_open'),"
  " (17, 'alert'), (18, 'dead_letter'), (19, 'breaker'), (20, 'skip_compensate'),"
  " (21, 'compensate_failed'), (22, 'recovered'), (23, 'operator'), (24, 'log');"
  "CREATE VIEW history_named AS SELECT run_id, seq, step, at,"
  " coalesce((SELECT name FROM labels WHERE code = h.event), h.event) AS event,"
  " coalesce((SELECT name FROM labels WHERE code = h.from_status), h.from_status) AS from_status,"
  " coalesce((SELECT name FROM labels WHERE code = h.to_status), h.to_status) AS to_status,"
  " attempt, error, delay, detail,"
  " coalesce((SELECT name FROM worker_names w WHERE w.id = h.worker), h.worker) AS worker"
  " FROM history h;"
  /* Unfinished runs nobody holds, so that a serving worker's look for work costs what there is
   * to take, not what it holds (the runs_live walk: 27 ms a poll with 100k runs held). A run
   * started by its worker is never in it. */
  "CREATE INDEX runs_free ON runs(created) WHERE owner IS NULL"
  " AND status IN ('running', 'compensating');"
  /* A holder with no row in workers (a worker that closed broken) held nothing by then: its
   * runs are nobody's, where the quick look finds them. */
  "UPDATE runs SET owner = NULL WHERE status IN ('running', 'compensating')"
  " AND owner IS NOT NULL AND owner NOT IN (SELECT owner FROM workers);"
  /* A run names its workflow's version by a number: its version, source and step names are
   * written once a version, not in every run (about 50 bytes a run: database -5.6%, W1
   * +2.5%). */
  "CREATE TABLE workflow_versions(id INTEGER PRIMARY KEY, workflow TEXT NOT NULL, version TEXT,"
  " source TEXT, step_names TEXT);"
  "CREATE INDEX workflow_versions_of ON workflow_versions(workflow, version);"
  "ALTER TABLE runs ADD COLUMN workflow_version INTEGER;",
  /* A version's script, so that its runs can be carried on where the file is not (another
   * directory, a file changed since). */
  "ALTER TABLE workflow_versions ADD COLUMN script TEXT;",
  /* 8 -> 9: a run that no engine here can load the version of says why (NULL: none known),
   * and is claimed only when a worker looks for such runs on purpose; a version says when it
   * was first seen (for versions before, their first run's start). */
  "ALTER TABLE runs ADD COLUMN unavailable TEXT;"
  "ALTER TABLE workflow_versions ADD COLUMN first_seen REAL;"
  "UPDATE workflow_versions SET first_seen = (SELECT min(created) FROM runs r"
  " WHERE r.workflow_version = workflow_versions.id);",
  /* 9 -> 10: events sent to runs, kept until the run ends whether consumed or not (a key sent
   * again after its event was consumed is still the same event); AUTOINCREMENT keeps seq
   * growing in commit order, which a worker's look for new events relies on. A waiting step
   * names the event it waits for. */
  "CREATE TABLE inbox(seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL,"
  " name TEXT NOT NULL, payload TEXT, key TEXT, sent REAL, consumed REAL, step TEXT);"
  "CREATE UNIQUE INDEX inbox_key ON inbox(run_id, key) WHERE key IS NOT NULL;"
  "CREATE INDEX inbox_waiting ON inbox(run_id, name, seq) WHERE consumed IS NULL;"
  "ALTER TABLE steps ADD COLUMN awaits TEXT;"
  "INSERT INTO labels(code, name) VALUES (25, 'waiting'), (26, 'event');",
  /* 10 -> 11: completion tokens, one an attempt (a token of an earlier attempt is known, and
   * refused as such), used once; kept with the run. A child run names its parent and the
   * parent's step, so that either can be found from the other. */
  "CREATE TABLE tokens(token TEXT PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL,"
  " attempt INTEGER NOT NULL, made REAL, used REAL, outcome TEXT) WITHOUT ROWID;"
  "CREATE UNIQUE INDEX tokens_attempt ON tokens(run_id, step, attempt);"
  "ALTER TABLE runs ADD COLUMN parent_run TEXT;"
  "ALTER TABLE runs ADD COLUMN parent_step TEXT;"
  "CREATE INDEX runs_parent ON runs(parent_run) WHERE parent_run IS NOT NULL;"
  "INSERT INTO labels(code, name) VALUES (27, 'token'), (28, 'child');",
  /* 11 -> 12: a step skipped by its when(ctx), and the row that records a when(ctx) that said
   * yes (issue 21), as codes like every other status. */
  "INSERT INTO labels(code, name) VALUES (29, 'skipped'), (30, 'when');",
  /* 12 -> 13: a token is kept as its digest, never as itself (mend_token_digest is the
   * function the store's connection registers to upgrade, src/store/tokens.c); an attempt may
   * have two tokens (its first cannot be read back to hand out again), the first used ending
   * both. */
  "PRAGMA secure_delete = ON;"   /* the old text is zeroed in the pages, not left as free space */
  "UPDATE tokens SET token = mend_token_digest(token);"
  "ALTER TABLE tokens RENAME COLUMN token TO digest;"
  "DROP INDEX tokens_attempt;"
  "CREATE INDEX tokens_attempt ON tokens(run_id, step, attempt);"
  "UPDATE inbox SET key = mend_token_digest(key)"
  " WHERE key IS NOT NULL AND (name = 'mend.token' OR name LIKE 'mend.token:%');"
  "PRAGMA secure_delete = OFF;",
  /* 13 -> 14: a step keeps the kind of its last error in a column of its own, so that how it
   * failed (a group's branch that failed fatal before a restart) is never read back from the
   * text of the message. The rows before get theirs from their text, once, here: the engine
   * wrote every step error as "<kind>: <message>" then; any other text is of kind error. */
  "ALTER TABLE steps ADD COLUMN error_kind TEXT;"
  "UPDATE steps SET error_kind = CASE"
  " WHEN substr(error, 1, 10) = 'retryable:' THEN 'retryable'"
  " WHEN substr(error, 1, 6) = 'fatal:' THEN 'fatal'"
  " WHEN substr(error, 1, 12) = 'compensable:' THEN 'compensable'"
  " WHEN substr(error, 1, 8) = 'timeout:' THEN 'timeout' ELSE 'error' END"
  " WHERE error IS NOT NULL;",
  /* 14 -> 15: a step keeps its error's severity and whether the engine stopped its code, which
   * decide how a group whose branch failed ends after a restart. The rows before get them
   * once, here, from what their run says: a failed step of a run that ended for a severity or
   * a workflow_error failed so; any other compensable error had the default severity, 1. */
  "ALTER TABLE steps ADD COLUMN error_severity INTEGER NOT NULL DEFAULT 0;"
  "ALTER TABLE steps ADD COLUMN error_stopped INTEGER NOT NULL DEFAULT 0;"
  "UPDATE steps SET error_severity = CASE WHEN status = 'failed' THEN coalesce((SELECT CASE"
  " r.reason WHEN 'severity_2' THEN 2 WHEN 'severity_3' THEN 3 END FROM runs r"
  " WHERE r.id = steps.run_id), 1) ELSE 1 END WHERE error_kind = 'compensable';"
  "UPDATE steps SET error_stopped = 1 WHERE error_kind = 'error' AND status = 'failed'"
  " AND (SELECT r.reason FROM runs r WHERE r.id = steps.run_id) = 'workflow_error';"
  /* A step transition's history row names its error's kind too (NULL in the rows before: the
   * text of theirs names it, as the engine wrote it then). */
  "ALTER TABLE history ADD COLUMN error_kind TEXT;"
  "DROP VIEW IF EXISTS history_named;"
  "CREATE VIEW history_named AS SELECT run_id, seq, step, at,"
  " coalesce((SELECT name FROM labels WHERE code = h.event), h.event) AS event,"
  " coalesce((SELECT name FROM labels WHERE code = h.from_status), h.from_status) AS from_status,"
  " coalesce((SELECT name FROM labels WHERE code = h.to_status), h.to_status) AS to_status,"
  " attempt, error, delay, detail,"
  " coalesce((SELECT name FROM worker_names w WHERE w.id = h.worker), h.worker) AS worker,"
  " error_kind FROM history h;",
  /* 15 -> 16: only says which layout run_key's uniqueness has (`column`: every file before this
   * one). A migration runs at any open, while older mends may run on the file: from this one on it
   * adds only what their statements survive (12 -> 13 renamed a column). A new file is then made
   * `partial` in the same transaction (schema_check.c); an existing one only by
   * mend_store_upgrade_run_keys. */
  "INSERT OR REPLACE INTO meta(key, value) VALUES('runs_key_layout', 'column');",
  /* 16 -> 17: whether the database holds untrusted workflows (`on`: a sandboxed engine opened
   * it), so that every engine and command opening it later runs their code sandboxed unless
   * told not to (engine.c). `off` until then; only mend sets it on, and nothing of mend's
   * sets it off. A row older mends do not read: they ran such code unsandboxed before. */
  "INSERT OR IGNORE INTO meta(key, value) VALUES('sandbox', 'off');",
  /* 17 -> 18: a reused step's row is custom_key 2; mends before wrote 1, as for an execution,
   * and a mend reading it so would compensate the owner's effect (and offer it as a key's
   * result). A row of a custom key that took a result without an attempt is a reuse: an
   * executed step counts its attempt before it runs (a dead letter's retry gives a failed step
   * fresh attempts, then runs it), and a step of a custom key has no other way to succeed.
   * Its owner is not recorded (no `reused` history row): status says reused, from an unknown
   * run. The bump itself makes those mends refuse the file (schema_check.c). */
  "UPDATE steps SET custom_key = 2 WHERE custom_key = 1 AND attempts = 0"
  " AND status IN ('succeeded', 'compensating', 'compensated', 'compensation_failed');",
  /* 18 -> 19: the dead-letter queue in its page order (a missing `at` first, as -1; ties by
   * run id), so that a page walks from its cursor instead of sorting the whole queue: 100k
   * parked runs made each page of GET /api/v1/dlq a scan and a sort (bench/dlq_page.sh). Only
   * an index: older mends' statements survive it. */
  "CREATE INDEX IF NOT EXISTS dlq_page ON dlq(coalesce(at, -1), run_id);",
  /* 19 -> 20: an event says who sent it (X-Mend-Who and the peer of an HTTP request, the
   * user of `mend signal`), as a repair's history row does; NULL: not told (a child's end, a
   * token's answer, the events before). A column older mends' inserts leave NULL. */
  "ALTER TABLE inbox ADD COLUMN who TEXT;",
  /* 20 -> 21: a worker's first take of a run that no process held before is a `claimed` row,
   * told apart from a `recovered` one (recover.c), as a code like every other event. */
  "INSERT OR IGNORE INTO labels(code, name) VALUES (31, 'claimed');",
};

/* run_key's layout from `column` to `partial` (src/store/layout.c), in its caller's
 * transaction. A column's UNIQUE cannot be dropped, so the table is made again: rowids kept
 * (lists break ties of `created` by them), its columns and other indexes as they were. The
 * UNIQUE column's index held an entry for every run, those without a key (all but keyed
 * starts) too: 4-5% of the writer thread's work a W9 run (bench/README.md, "eighteenth
 * session, writer22"). */
const char *const mend__runs_key_rebuild =
  "CREATE TABLE runs_16(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source TEXT,"
  " run_key TEXT, status TEXT NOT NULL, input TEXT, error TEXT,"
  " attention INTEGER NOT NULL DEFAULT 0, reason TEXT, owner TEXT, lease_until REAL,"
  " cancel_requested INTEGER NOT NULL DEFAULT 0, created REAL, updated REAL, step_names TEXT,"
  " workflow_version INTEGER, unavailable TEXT, parent_run TEXT, parent_step TEXT);"
  "INSERT INTO runs_16(rowid, id, workflow, version, source, run_key, status, input, error,"
  " attention, reason, owner, lease_until, cancel_requested, created, updated, step_names,"
  " workflow_version, unavailable, parent_run, parent_step)"
  " SELECT rowid, id, workflow, version, source, run_key, status, input, error, attention,"
  " reason, owner, lease_until, cancel_requested, created, updated, step_names,"
  " workflow_version, unavailable, parent_run, parent_step FROM runs ORDER BY rowid;"
  "DROP TABLE runs;"
  "ALTER TABLE runs_16 RENAME TO runs;"
  "CREATE UNIQUE INDEX runs_key ON runs(run_key) WHERE run_key IS NOT NULL;"
  "CREATE INDEX runs_live ON runs(created) WHERE status IN ('running', 'compensating');"
  "CREATE INDEX runs_cancel ON runs(owner) WHERE cancel_requested = 1;"
  "CREATE INDEX runs_free ON runs(created) WHERE owner IS NULL"
  " AND status IN ('running', 'compensating');"
  "CREATE INDEX runs_parent ON runs(parent_run) WHERE parent_run IS NOT NULL;"
  "INSERT OR REPLACE INTO meta(key, value) VALUES('runs_key_layout', 'partial');";

/* The layout meta names (a file of this schema always has one). */
const char *const mend__runs_key_layout_sql =
  "SELECT value FROM meta WHERE key = 'runs_key_layout'";

/* Whether runs has the partial index (a file of schema 16 that records no layout). */
const char *const mend__runs_key_index_sql =
  "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'runs_key' AND tbl_name = 'runs'";

/* The indexes and triggers on runs that are not mend's (a person's): made again after the
 * rebuild. An autoindex has no SQL. */
const char *const mend__runs_own_schema_sql =
  "SELECT sql FROM sqlite_master WHERE tbl_name = 'runs' AND type IN ('index', 'trigger')"
  " AND sql IS NOT NULL AND name NOT IN ('runs_key', 'runs_live', 'runs_cancel', 'runs_free',"
  " 'runs_parent') ORDER BY type, name";

/* Every worker whose lease lasts at ?1, with the runs it holds and how long the lease lasts:
 * one still running may be a mend before schema 16, which the rebuild would stop. */
const char *const mend__runs_key_holders_sql =
  "SELECT w.owner, (SELECT count(*) FROM runs r WHERE r.owner = w.owner"
  " AND r.status IN ('running', 'compensating')), w.lease_until - ?1"
  " FROM workers w WHERE w.lease_until >= ?1 ORDER BY w.lease_until DESC";

