/*
 * store: everything mend keeps in SQLite (SPEC section 9). Owns the schema, its version check,
 * every SQL statement (prepared once at open, but for a prune's), the batch that group commit
 * ends, and the turning of rows into jansson values. No other module writes a query; this one
 * never decides what a transition means.
 */
#define _GNU_SOURCE   /* mremap */
#include "store.h"
#include "idset.h"
#include "walvfs.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#define BUSY_TIMEOUT_MS 5000
#define HISTORY_GROUP 8
#define HISTORY_VALUES 12   /* the values of a history record (mend_store_append_history) */
#define LABELS_MAX 64       /* more names than that are written out, as before schema 7 */

/* One table of statements so that open prepares them all and close finalizes them all. */
enum {
  Q_BEGIN, Q_COMMIT, Q_ROLLBACK, Q_BEGIN_READ,
  Q_INSERT_RUN, Q_UPDATE_RUN, Q_PUT_STEP, Q_UPDATE_STEP, Q_APPEND_HISTORY, Q_PUT_BREAKER, Q_PUT_DLQ,
  Q_HISTORY_GROUP, Q_NAME_WORKER, Q_WORKER_ID, Q_PUT_VERSION, Q_VERSION_ID,
  Q_FIND_RUN_KEY, Q_FIND_KEY_RESULT, Q_GET_BREAKER, Q_LAST_SEQ,
  Q_CLAIM_OLDEST, Q_CLAIM_NEWEST, Q_CLAIM_FREE_OLDEST, Q_CLAIM_FREE_NEWEST,
  Q_RENEW, Q_RELEASE, Q_OWNER, Q_HOLDERS, Q_RELEASE_OWNER, Q_HELD,
  Q_FORGET_WORKER, Q_FORGET_GONE,
  Q_DLQ_REMOVE, Q_REQUEST_CANCEL, Q_CANCEL_REQUESTS, Q_AUDIT, Q_AUDIT_LIST, Q_TAKE,
  Q_VERSION_SCRIPT, Q_KEEP_SCRIPT, Q_SET_UNAVAILABLE, Q_MOVE_RUN, Q_DROP_STEPS_FROM, Q_WORKFLOWS,
  Q_RUN, Q_STEPS, Q_IN_FLIGHT, Q_HISTORY, Q_DLQ, Q_BREAKERS, Q_RUNS,
  Q_SEND_EVENT, Q_NEXT_EVENT, Q_CONSUME_EVENT, Q_LAST_EVENT, Q_INBOX,
  Q__COUNT
};

static const char *const query_sql[Q__COUNT] = {
  [Q_BEGIN] = "BEGIN IMMEDIATE",
  [Q_COMMIT] = "COMMIT",
  [Q_ROLLBACK] = "ROLLBACK",
  [Q_BEGIN_READ] = "BEGIN",
  /* version, source and step_names are the workflow version's (workflow_version), and NULL
   * here since schema 7. */
  [Q_INSERT_RUN] =
    "INSERT INTO runs(id, workflow, run_key, status, input, error, attention, created, updated,"
    " owner, workflow_version) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
    " ON CONFLICT(run_key) DO NOTHING",
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
    " result, error, due, last_delay, updated, slept, awaits)"
    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
    " ON CONFLICT(run_id, idx) DO UPDATE SET name = excluded.name, status = excluded.status,"
    " attempts = excluded.attempts, comp_attempts = excluded.comp_attempts,"
    " idem_key = excluded.idem_key, custom_key = excluded.custom_key, result = excluded.result,"
    " error = excluded.error, due = excluded.due, last_delay = excluded.last_delay,"
    " updated = excluded.updated, slept = excluded.slept, awaits = excluded.awaits",
  /* The row exists (written when the run started): only what a transition changes. A NULL
   * key keeps the one the row has (the engine names a key only once it is the step's own). */
  [Q_UPDATE_STEP] =
    "UPDATE steps SET status = ?3, attempts = ?4, comp_attempts = ?5,"
    " idem_key = coalesce(?6, idem_key),"
    " custom_key = ?7, result = ?8, error = ?9, due = ?10, last_delay = ?11, updated = ?12,"
    " slept = ?13, awaits = ?14 WHERE run_id = ?1 AND idx = ?2",
  /* ?12 is the number the run's holder keeps count of (no look-up: 12% of the writer thread's
   * work in W1); NULL, or a number another process took meanwhile, makes it the next free one
   * (flush_log runs it again without). */
  [Q_APPEND_HISTORY] =
    "INSERT INTO history(run_id, seq, step, at, event, from_status, to_status, attempt, error,"
    " delay, detail, worker) VALUES(?1, coalesce(?12, coalesce((SELECT max(seq) FROM history"
    " WHERE run_id = ?1), 0) + 1), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
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
  /* custom_key = 1 lets SQLite use the partial index on idem_key. */
  [Q_FIND_KEY_RESULT] =
    "SELECT result FROM steps WHERE idem_key = ?1 AND custom_key = 1 AND status = 'succeeded'"
    " ORDER BY updated DESC LIMIT 1",
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
    " nullif(r.cancel_requested, 0) AS cancel_requested, r.unavailable"
    " FROM runs r LEFT JOIN workflow_versions v ON v.id = r.workflow_version WHERE r.id = ?1",
  [Q_STEPS] =
    "SELECT idx, name, status, attempts, comp_attempts,"
    " coalesce(idem_key, run_id || '/' || name) AS idempotency_key,"
    " custom_key, result, error, due, last_delay, updated, slept, awaits FROM steps"
    " WHERE run_id = ?1"
    " ORDER BY idx",
  /* The attempts begun and not ended: a step whose last transition is to running (its row is
   * not written when an attempt begins: schema 6). ?2 and ?3 are the codes of "step" and
   * "running" (labels); rows from before schema 7 spell them out. */
  [Q_IN_FLIGHT] =
    "SELECT step, to_status IN (?3, 'running'), attempt, at FROM history"
    " WHERE run_id = ?1 AND event IN (?2, 'step') ORDER BY seq",
  [Q_HISTORY] =
    "SELECT seq, run_id, step, at, event, from_status AS \"from\", to_status AS \"to\", attempt,"
    " error, delay, detail, worker FROM history_named WHERE run_id = ?1 ORDER BY seq",
  [Q_DLQ] = "SELECT run_id, reason, step, error, detail, at FROM dlq ORDER BY at, run_id",
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
    " LEFT JOIN workflow_versions v ON v.id = r.workflow_version WHERE (?1 IS NULL OR r.status = ?1) AND (?2 IS NULL OR r.workflow = ?2)"
    " AND (?4 IS NULL OR r.created >= ?4)"
    " AND (?5 = 0 OR r.attention = 1 OR r.status = 'needs_attention'"
    " OR r.unavailable IS NOT NULL) ORDER BY r.created DESC, r.rowid DESC LIMIT ?3",
  [Q_DLQ_REMOVE] = "DELETE FROM dlq WHERE run_id = ?1",
  [Q_TAKE] = "UPDATE runs SET owner = ?2, lease_until = NULL, cancel_requested = 0 WHERE id = ?1",
  [Q_REQUEST_CANCEL] = "UPDATE runs SET cancel_requested = 1 WHERE id = ?1",
  [Q_CANCEL_REQUESTS] =   /* runs_cancel */
    "SELECT id FROM runs WHERE owner = ?1 AND cancel_requested = 1 AND status = 'running'",
  [Q_AUDIT] = "INSERT INTO audit(at, who, op, target, detail) VALUES(?1, ?2, ?3, ?4, ?5)",
  [Q_AUDIT_LIST] = "SELECT seq, at, who, op, target, detail FROM audit ORDER BY seq",
  /* A run's inbox (schema 10). The same key twice is one event (inbox_key). */
  [Q_SEND_EVENT] =
    "INSERT OR IGNORE INTO inbox(run_id, name, payload, key, sent) VALUES(?1, ?2, ?3, ?4, ?5)",
  [Q_NEXT_EVENT] =   /* inbox_waiting */
    "SELECT seq, payload, key FROM inbox WHERE run_id = ?1 AND name = ?2 AND consumed IS NULL"
    " ORDER BY seq LIMIT 1",
  /* Recorded with the step's success, so that both commit or neither (run_id first: the fence
   * drops it with the run's other writes). */
  [Q_CONSUME_EVENT] =
    "UPDATE inbox SET consumed = ?3, step = ?4 WHERE run_id = ?1 AND seq = ?2 AND consumed IS NULL",
  [Q_LAST_EVENT] = "SELECT coalesce(max(seq), 0) FROM inbox",
  [Q_INBOX] =
    "SELECT seq, name, payload, key, sent, consumed, step FROM inbox WHERE run_id = ?1 ORDER BY seq",
  /* The text of a version is the same wherever it was loaded from (the version is its hash). */
  [Q_VERSION_SCRIPT] =
    "SELECT script, source FROM workflow_versions WHERE workflow = ?1 AND version = ?2"
    " AND script IS NOT NULL ORDER BY id DESC LIMIT 1",
  [Q_KEEP_SCRIPT] = "UPDATE workflow_versions SET script = ?2 WHERE id = ?1 AND script IS NULL",
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

/* migrations[v] takes a database from version v to v + 1; a new version appends one here and
 * bumps MEND_SCHEMA_VERSION. Each runs inside the transaction of upgrade_schema. */
static const char *const migrations[MEND_SCHEMA_VERSION] = {
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
};

/* ---- the write log ----------------------------------------------------------------------
 * The writes of a step (runs, steps, history, breakers, dead letters) are recorded here, values
 * copied, and run as statements at the next flush: at once on a store without a writer thread;
 * with one, on the writer thread when the batch is handed off, or on the caller's thread before
 * any other statement (a read must see them). Either way they run in the order written, but
 * for numbered history rows, which go in groups (flush_log): only a history row without a number
 * reads them, and it goes after them. */
/* V_WORKER: the store's worker. V_CODE: a label's code (schema 7), for a column declared TEXT:
 * bound as its digits, which the column keeps as they are, rather than as a number SQLite turns
 * into them (sqlite3VdbeMemStringify, 3.5% of the writer thread in W1; -1.5% net). */
enum { V_NULL, V_INT, V_REAL, V_TEXT, V_WORKER, V_CODE };
/* 16 bytes: a burst records some 200 of these a run, written on the loop's core and read on
 * the writer's (at 40 bytes, reading them was 7% of the writer thread). */
typedef struct wval {
  int type;
  unsigned len;      /* V_TEXT: its length (SQLite takes no more than INT_MAX) */
  union {
    sqlite3_int64 i;
    double d;
    size_t off;      /* V_TEXT: where in the log's text */
  };
} wval;
typedef struct wrec { int q, first, n, repair; } wrec;   /* repair: see mend_store_repairing */
typedef struct wlog {
  wrec *recs;
  int nrec, caprec;
  wval *vals;
  int nval, capval;
  char *text;
  size_t ntext, captext;
  int oom;           /* a record could not be kept: the batch must fail */
} wlog;

/* The writer thread: commits handed-off batches while the loop goes on with the next one. */
typedef struct writer {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  wlog *job;         /* a batch handed off, being written and committed */
  int part;          /* the job is a part of the open batch: written, not committed */
  wlog *next;        /* the rest of that batch, handed off while the part is written */
  unsigned long next_seq;
  int busy, stop;
  int in_done;       /* done() is running: the store must not go away under it */
  int failed;        /* a batch failed: the store's errmsg says why; every later call fails */
  unsigned long job_seq;
  void (*done)(void *ud);   /* called on the writer thread after each batch */
  void *ud;
} writer;

struct mend_store {
  sqlite3 *db;
  sqlite3 *checkpointer;   /* a second connection, for checkpoints off the loop thread */
  sqlite3 *reader;         /* a third, read-only: looks that need not see our own batch */
  sqlite3_stmt *q_claimable[2];   /* on reader: quick, thorough (mend_store_claimable) */
  sqlite3_stmt *q_events_after;   /* on reader: mend_store_events_after */
  char *path;
  int in_batch;
  /* A write of this batch failed: the whole batch must not commit, or the transitions
   * recorded before the failure would be kept without the one that failed. */
  int batch_failed;
  int version;   /* schema version found or made at open */
  char *worker;  /* written into every history row: who wrote it */
  char worker_digits[24];   /* worker_id as history.worker keeps it (text, as a V_CODE) */
  int worker_ndigits;
  sqlite3_int64 worker_id;  /* its number in worker_names, once the open batch or one before
                             * has it; 0: not yet */
  int worker_named;         /* the open batch gave it the number: gone if it rolls back */
  /* The workflow versions this store knows the number of (workflow_versions); those from
   * versions_committed on were numbered by the open batch, and go if it rolls back. */
  struct wf_version { char *workflow, *version, *source, *step_names; sqlite3_int64 id; } *versions;
  int nversions, capversions, versions_committed;
  /* The names history rows write as codes (schema 7), read from labels at open. */
  struct label { char name[32]; int code; } labels[LABELS_MAX];
  int nlabels;
  int code_step, code_running;   /* -1: not in labels */
  sqlite3_stmt *q[Q__COUNT];
  char err[1024];
  int not_found;            /* the last read of a run found none */
  wlog logs[3];   /* recording, and up to two with the writer thread (a part, the rest) */
  wlog *cur;              /* the log this thread records into */
  int parted;             /* records of the open batch passed to the writer thread in parts */
  /* How long one statement waits for another connection's lock (busy_wait); the engine's
   * loop asks for a short one and waits out a longer lock on a timer instead. */
  int busy_ms;
  /* The last batch could not begin: another connection holds the write lock. Written on
   * whichever thread begins batches, read by the loop (mend_store_locked). */
  atomic_int locked;
  writer *w;              /* NULL: writes run at once, commits on the caller's thread */
  unsigned long open_seq, durable_seq;   /* batch numbers: recording, last committed */
  void (*commit_hook)(const char *phase);
  int wal_frames;         /* the WAL's length after the last commit (sqlite3_wal_hook) */
  /* The fence (see "fencing" below). fence_news, lost_new and nlost_new are shared with the
   * loop and guarded by the writer's mutex; the rest belongs to whichever thread writes. */
  char *fence_owner;
  double fence_lease, fence_until;
  int fence_checking;       /* a transaction began late: each run's holder is looked up */
  int fence_registered;     /* the worker's row (its lease) is in the database */
  int repairing;            /* writes recorded now are a person's repair (not fenced) */
  int fence_always_late;    /* a test's: every transaction takes the late path */
  mend_idset fence_checked; /* runs looked up since then, and still ours */
  mend_idset lost;          /* runs another worker took: their writes are dropped */
  int fence_news;           /* a transaction began late since the engine last heard */
  char **lost_new;          /* lost, and not yet told to the engine */
  int nlost_new, caplost_new;
};

static void set_msg(char *buf, int len, const char *fmt, ...) {
  va_list ap;
  if (!buf || len <= 0) return;
  va_start(ap, fmt);
  vsnprintf(buf, (size_t)len, fmt, ap);
  va_end(ap);
}

/* "<path>: <what>: <sqlite errmsg>", read before any reset can change the message. */
static void sql_err(mend_store *s, const char *what) {
  int code = sqlite3_extended_errcode(s->db) & 0xff;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    set_msg(s->err, sizeof s->err, "%s: %s: database is locked by another process (waited %.1f s)",
            s->path, what, s->busy_ms / 1000.0);
  else
    set_msg(s->err, sizeof s->err, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static double now_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* sqlite3_wal_hook: the WAL's length after each commit. */
static int note_wal(void *ud, sqlite3 *db, const char *name, int frames) {
  (void)db;
  (void)name;
  ((mend_store *)ud)->wal_frames = frames;
  return SQLITE_OK;
}

/* Waits out another connection's write lock, up to busy_ms. SQLite's own handler backs
 * off to sleeps of 100 ms: against another worker's steady batches the lock is free only for
 * moments, and a waiter asleep that long misses them, then gives up after 5 s (two workers on
 * a backlog of 5,000 runs: one of them exited, or both took twice as long as one). */
static int busy_wait(void *ud, int count) {
  const mend_store *s = ud;
  enum { WAIT_US = 250 };
  if ((long)count * WAIT_US >= s->busy_ms * 1000L) return 0;
  struct timespec ts = {0, WAIT_US * 1000L};
  nanosleep(&ts, NULL);
  return 1;
}

/* The busy handler already waits; this covers the cases where SQLite returns SQLITE_BUSY without
 * calling it (WAL recovery by another connection, for one), still bounded by busy_ms. */
static int step_busy_retry(const mend_store *s, sqlite3_stmt *q) {
  double deadline = now_mono() + s->busy_ms / 1000.0;
  int rc;
  for (;;) {
    rc = sqlite3_step(q);
    if ((rc & 0xff) != SQLITE_BUSY || now_mono() >= deadline) break;
    sqlite3_reset(q);
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return rc;
}

static void finish(sqlite3_stmt *q) {
  sqlite3_reset(q);
  sqlite3_clear_bindings(q);
}

static int fence_at_begin(mend_store *s);

static int run_bound(mend_store *s, sqlite3_stmt *q, int rc, const char *what, int keep);

/* The number of this store's worker in worker_names, in the batch just begun (its history
 * rows are written with it). */
static int name_worker(mend_store *s) {
  sqlite3_stmt *q = s->q[Q_NAME_WORKER];
  if (run_bound(s, q, sqlite3_bind_text(q, 1, s->worker, -1, SQLITE_STATIC), "name worker", 1))
    return -1;
  q = s->q[Q_WORKER_ID];
  int rc = sqlite3_bind_text(q, 1, s->worker, -1, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    s->worker_id = sqlite3_column_int64(q, 0);
    s->worker_ndigits =
      snprintf(s->worker_digits, sizeof s->worker_digits, "%lld", (long long)s->worker_id);
    s->worker_named = 1;
  } else {
    sql_err(s, "name worker");
    s->batch_failed = 1;
  }
  sqlite3_reset(q);
  return rc == SQLITE_ROW ? 0 : -1;
}

/* MEND_STORE_BUSY when another connection holds the write lock: nothing has run, and the
 * caller keeps what it was about to write. */
static int batch_begin(mend_store *s) {
  if (s->batch_failed) return -1;   /* errmsg still names the first failure */
  if (s->in_batch) return 0;
  int rc = step_busy_retry(s, s->q[Q_BEGIN]);
  if (rc != SQLITE_DONE) {
    sql_err(s, "begin");
    sqlite3_reset(s->q[Q_BEGIN]);
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return -1;
    atomic_store(&s->locked, 1);
    return MEND_STORE_BUSY;
  }
  sqlite3_reset(s->q[Q_BEGIN]);
  atomic_store(&s->locked, 0);
  s->in_batch = 1;
  if (fence_at_begin(s) != 0) return -1;
  return s->worker && !s->worker_id ? name_worker(s) : 0;
}

static void free_version(struct wf_version *v) {
  free(v->workflow);
  free(v->version);
  free(v->source);
  free(v->step_names);
}

/* Drops the known workflow versions from `from` on. */
static void forget_versions(mend_store *s, int from) {
  while (s->nversions > from) free_version(&s->versions[--s->nversions]);
  if (s->versions_committed > s->nversions) s->versions_committed = s->nversions;
}

static void rollback(mend_store *s) {
  /* SQLite may already have rolled back on its own (SQLITE_FULL, SQLITE_IOERR, ...). */
  if (!sqlite3_get_autocommit(s->db)) {
    sqlite3_step(s->q[Q_ROLLBACK]);
    sqlite3_reset(s->q[Q_ROLLBACK]);
  }
  s->in_batch = 0;
  s->batch_failed = 0;
  if (s->worker_named) s->worker_id = 0;   /* its name went with the batch */
  s->worker_named = 0;
  /* Their rows went with the batch. Not from the writer thread: the loop may be reading them,
   * and a batch that fails there fails the store for good. */
  if (!s->w || !pthread_equal(pthread_self(), s->w->thread))
    forget_versions(s, s->versions_committed);
}

/* Runs a bound write statement; `rc` carries the first binding failure, if any. Its bindings
 * are cleared after, unless kept: a recorded write binds every parameter again. */
static int run_bound(mend_store *s, sqlite3_stmt *q, int rc, const char *what, int keep) {
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc != SQLITE_DONE) sql_err(s, what);   /* before the reset, which may change it */
  if (keep) sqlite3_reset(q);
  else finish(q);
  if (rc == SQLITE_DONE) return 0;
  s->batch_failed = 1;
  return -1;
}

static int run_write(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  return run_bound(s, q, rc, what, 0);
}

static int bind_text(sqlite3_stmt *q, int i, const char *v) {
  return v ? sqlite3_bind_text(q, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(q, i);
}

static int bind_opt_real(sqlite3_stmt *q, int i, double v) {
  return v < 0 ? sqlite3_bind_null(q, i) : sqlite3_bind_double(q, i, v);
}

/* Chains binds: the first failing result code wins and later binds are skipped. */
#define BIND(call) do { if (rc == SQLITE_OK) rc = (call); } while (0)

static int sync_point(mend_store *s);
static void note_durable(mend_store *s);
static void history_group_sql(char *buf, size_t len);

static int label_code(const mend_store *s, const char *name) {
  for (int i = 0; i < s->nlabels; i++)
    if (s->labels[i].name[0] == name[0] && strcmp(s->labels[i].name, name) == 0)
      return s->labels[i].code;
  return -1;
}

static int load_labels(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT code, name FROM labels ORDER BY code", -1, &q, NULL)
      != SQLITE_OK) {
    sql_err(s, "read labels");
    return -1;
  }
  int rc;
  s->nlabels = 0;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW && s->nlabels < LABELS_MAX) {
    const char *name = (const char *)sqlite3_column_text(q, 1);
    struct label *l = &s->labels[s->nlabels];
    if (!name || strlen(name) >= sizeof l->name) continue;
    strcpy(l->name, name);
    l->code = sqlite3_column_int(q, 0);
    s->nlabels++;
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) sql_err(s, "read labels");
  sqlite3_finalize(q);
  s->code_step = label_code(s, "step");
  s->code_running = label_code(s, "running");
  return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}
static void stop_writer(mend_store *s);
static void log_free(wlog *log);

/* ---- open / close ---------------------------------------------------------------------- */

static int exec_sql(mend_store *s, const char *sql, const char *what) {
  if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
    sql_err(s, what);
    return -1;
  }
  return 0;
}

/* Runs a one-row, one-column query through a temporary statement (open time only). */
static int query_int(mend_store *s, const char *sql, const char *what, int *out) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
    sql_err(s, what);
    return -1;
  }
  int rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return 0;
  }
  if (rc == SQLITE_DONE) {
    set_msg(s->err, sizeof s->err, "%s: %s: no row", s->path, what);
  } else if ((rc & 0xff) == SQLITE_NOTADB) {
    set_msg(s->err, sizeof s->err, "%s: file is not a database", s->path);
  } else {
    sql_err(s, what);
  }
  sqlite3_finalize(q);
  return -1;
}

static int set_journal_wal(mend_store *s) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &q, NULL) != SQLITE_OK) {
    sql_err(s, "set WAL mode");
    return -1;
  }
  int rc = step_busy_retry(s, q);
  if (rc != SQLITE_ROW) {
    if ((rc & 0xff) == SQLITE_NOTADB)
      set_msg(s->err, sizeof s->err, "%s: file is not a database", s->path);
    else
      sql_err(s, "set WAL mode");
    sqlite3_finalize(q);
    return -1;
  }
  const char *mode = (const char *)sqlite3_column_text(q, 0);
  /* An in-memory database cannot use WAL and needs no durability. */
  int ok = mode && (strcmp(mode, "wal") == 0 || strcmp(mode, "memory") == 0);
  if (!ok)
    set_msg(s->err, sizeof s->err, "%s: cannot use WAL mode (journal mode stays %s)", s->path,
            mode ? mode : "unknown");
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

static int check_version(mend_store *s, int version) {
  if (version > MEND_SCHEMA_VERSION) {
    set_msg(s->err, sizeof s->err, "%s: schema version %d is newer than this mend (%d)",
            s->path, version, MEND_SCHEMA_VERSION);
    return -1;
  }
  if (version < 0) {
    set_msg(s->err, sizeof s->err, "%s: not a mend database (user_version %d)", s->path,
            version);
    return -1;
  }
  return 0;
}

/* Creates or upgrades the schema inside one write transaction; the version is read again there
 * because another process may have created it since the first look. */
static int count_foreign(mend_store *s) {
  int foreign;
  if (query_int(s, "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                "read schema", &foreign) != 0)
    return -1;
  if (foreign > 0) {
    set_msg(s->err, sizeof s->err,
            "%s: not a mend database (it has tables of its own and no mend schema)", s->path);
    return -1;
  }
  return 0;
}

static int upgrade_schema(mend_store *s) {
  int version;
  if (exec_sql(s, "BEGIN IMMEDIATE", "create schema") != 0) return -1;
  if (query_int(s, "PRAGMA user_version", "read schema version", &version) != 0) goto fail;
  if (check_version(s, version) != 0) goto fail;
  if (version == 0 && count_foreign(s) != 0) goto fail;
  for (int v = version; v < MEND_SCHEMA_VERSION; v++)
    if (exec_sql(s, migrations[v], "create schema") != 0) goto fail;
  if (version < MEND_SCHEMA_VERSION) {
    char sql[160];
    snprintf(sql, sizeof sql,
             "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', '%d');"
             "PRAGMA user_version = %d;", MEND_SCHEMA_VERSION, MEND_SCHEMA_VERSION);
    if (exec_sql(s, sql, "write schema version") != 0) goto fail;
  }
  if (exec_sql(s, "COMMIT", "create schema") != 0) goto fail;
  return 0;
fail:
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
  return -1;
}

/* user_version says mend; meta must agree, or this is someone else's database. */
static int check_meta(mend_store *s, int version) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &q,
                         NULL) != SQLITE_OK) {
    set_msg(s->err, sizeof s->err, "%s: not a mend database (no meta table: %s)", s->path,
            sqlite3_errmsg(s->db));
    return -1;
  }
  int rc = sqlite3_step(q), ok = 0;
  if (rc == SQLITE_ROW) {
    const char *v = (const char *)sqlite3_column_text(q, 0);
    ok = v && atoi(v) == version;
    if (!ok)
      set_msg(s->err, sizeof s->err,
              "%s: schema version in meta (%s) disagrees with user_version (%d)", s->path,
              v ? v : "null", version);
  } else if (rc == SQLITE_DONE) {
    set_msg(s->err, sizeof s->err, "%s: not a mend database (no schema_version in meta)",
            s->path);
  } else {
    sql_err(s, "read meta");
  }
  sqlite3_finalize(q);
  return ok ? 0 : -1;
}

static int open_db(mend_store *s, mend_durability durability) {
  /* The connection belongs to the loop thread alone, so SQLite's per-connection mutexes are
   * pure cost (about 8% of a step). The checkpointer below is shared with a worker thread and
   * keeps its own. Its commits go to the WAL through walvfs, in a few writes instead of two a
   * page; the other connections only read the WAL, and use the default VFS. */
  int rc = sqlite3_open_v2(s->path, &s->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           mend_walvfs());
  if (rc != SQLITE_OK) {
    set_msg(s->err, sizeof s->err, "%s: cannot open: %s", s->path,
            s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
    return -1;
  }
  sqlite3_extended_result_codes(s->db, 1);
  if (sqlite3_busy_handler(s->db, busy_wait, s) != SQLITE_OK) {
    sql_err(s, "set busy timeout");
    return -1;
  }
  int version;
  /* First read of the file: a file that is not a database is refused here. */
  if (query_int(s, "PRAGMA user_version", "read schema version", &version) != 0) return -1;
  if (check_version(s, version) != 0) return -1;
  /* Someone else's database is refused before anything about it (its journal mode) changes. */
  if (version == 0 ? count_foreign(s) != 0 : check_meta(s, version) != 0) return -1;
  if (set_journal_wal(s) != 0) return -1;
  if (exec_sql(s, durability == MEND_DURABILITY_FULL ? "PRAGMA synchronous = FULL"
                                                     : "PRAGMA synchronous = NORMAL",
               "set synchronous") != 0)
    return -1;
  /* A large batch must not spill the page cache to disk in the middle of its transaction. */
  if (exec_sql(s, "PRAGMA cache_size = -8192", "set cache size") != 0) return -1;
  /* Checkpoints copy the WAL into the database file: done inside a commit they stall the
   * loop for tens of milliseconds. A file database gets a connection of its own for them,
   * which the engine drives from a worker thread (mend_store_checkpoint). */
  if (strcmp(s->path, ":memory:") != 0 && s->path[0] &&
      sqlite3_open_v2(s->path, &s->checkpointer, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
                      NULL) == SQLITE_OK) {
    sqlite3_busy_timeout(s->checkpointer, BUSY_TIMEOUT_MS);
    if (exec_sql(s, "PRAGMA wal_autocheckpoint = 0", "set wal_autocheckpoint") != 0 ||
        exec_sql(s, "PRAGMA journal_size_limit = 67108864", "set journal_size_limit") != 0)
      return -1;
    /* after the pragma, which would take the hook away: it keeps the WAL's length */
    sqlite3_wal_hook(s->db, note_wal, s);
  } else if (s->checkpointer) {
    sqlite3_close_v2(s->checkpointer);   /* a failed open still gives a handle to close */
    s->checkpointer = NULL;
  }
  /* Only a new or older database needs the write lock; an up-to-date one is opened without it,
   * so a second connection can open while the first holds a batch. */
  if (version < MEND_SCHEMA_VERSION) {
    if (upgrade_schema(s) != 0 || check_meta(s, MEND_SCHEMA_VERSION) != 0) return -1;
  }
  s->version = MEND_SCHEMA_VERSION;
  if (load_labels(s) != 0) return -1;
  char group_sql[HISTORY_GROUP * 80 + 256];
  history_group_sql(group_sql, sizeof group_sql);
  for (int i = 0; i < Q__COUNT; i++) {
    const char *sql = i == Q_HISTORY_GROUP ? group_sql : query_sql[i];
    if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->q[i], NULL)
        != SQLITE_OK) {
      sql_err(s, "prepare");
      return -1;
    }
  }
  return 0;
}

/* Numbered history rows go HISTORY_GROUP to a statement: an INSERT's own cost (cursors
 * opened and closed, the statement begun and ended) is a fifth of a small row's, and a run
 * writes eight of them (W1). A row's values are bound as its record holds them (run_id, step,
 * at, event, from, to, attempt, error, delay, detail, worker, seq). */
static void history_group_sql(char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "INSERT INTO history(run_id, seq, step, at, event,"
                              " from_status, to_status, attempt, error, delay, detail, worker)"
                              " VALUES");
  for (int r = 0; r < HISTORY_GROUP && n < len; r++) {
    int b = r * HISTORY_VALUES;
    n += (size_t)snprintf(buf + n, len - n, "%s(?%d,?%d", r ? "," : "", b + 1, b + 12);
    for (int j = 2; j <= 11 && n < len; j++) n += (size_t)snprintf(buf + n, len - n, ",?%d", b + j);
    if (n < len) n += (size_t)snprintf(buf + n, len - n, ")");
  }
  /* No ON CONFLICT: a number taken aborts the statement and backs out its rows (append_group). */
}

/* SQLite says "unable to open database file" when it cannot create the file, or WAL mode its
 * -shm file next to the database: name the likelier cause for a person (a folder that does not
 * exist, or a file or folder that is read-only). */
static void explain_open_failure(mend_store *s) {
  if (strcmp(s->path, ":memory:") == 0 || s->path[0] == 0) return;
  char dir[4096];
  set_msg(dir, sizeof dir, "%s", s->path);
  char *slash = strrchr(dir, '/');
  if (slash) *(slash == dir ? slash + 1 : slash) = 0;
  else set_msg(dir, sizeof dir, ".");
  size_t n = strlen(s->err);
  int room = (int)(sizeof s->err - n);
  if (access(s->path, F_OK) == 0 && access(s->path, W_OK) != 0) {
    set_msg(s->err + n, room, " (the file is read-only: %s)", strerror(errno));
  } else if (access(dir, W_OK) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      set_msg(s->err + n, room, " (its folder %s does not exist)", dir);
    else
      set_msg(s->err + n, room, " (its folder is read-only: %s)", strerror(errno));
  }
}

void mend_store_quiet_memstatus(void) {
  /* Returns SQLITE_MISUSE once SQLite has started in this process; nothing changes then. */
  sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

mend_store *mend_store_open(const char *path, mend_durability durability, char *err,
                            int errlen) {
  mend_store *s = calloc(1, sizeof *s);
  if (!s || !path || !(s->path = strdup(path))) {
    set_msg(err, errlen, "%s: out of memory", path ? path : "(null)");
    free(s);
    return NULL;
  }
  s->cur = &s->logs[0];
  s->open_seq = 1;
  s->busy_ms = BUSY_TIMEOUT_MS;
  if (open_db(s, durability) != 0) {
    explain_open_failure(s);
    set_msg(err, errlen, "%s", s->err);
    mend_store_close(s);
    return NULL;
  }
  return s;
}

void mend_store_close(mend_store *s) {
  if (!s) return;
  stop_writer(s);   /* a batch it holds is finished first */
  if (s->db && s->in_batch && s->q[Q_ROLLBACK]) rollback(s);
  /* Gone: the runs it still owns are for any worker to take now, not when its lease ends.
   * They are let go of, not only the lease: a look for work finds runs nobody holds in an
   * index of their own (runs_free), and the workers that hold runs by their leases. Either
   * both happen or neither, and then the lease runs out as it would after a crash. */
  if (s->fence_registered && s->q[Q_FORGET_WORKER] && sqlite3_get_autocommit(s->db)) {
    int rc = step_busy_retry(s, s->q[Q_BEGIN]);
    sqlite3_reset(s->q[Q_BEGIN]);
    for (int i = 0; rc == SQLITE_DONE && i < 2; i++) {
      sqlite3_stmt *q = s->q[i == 0 ? Q_RELEASE_OWNER : Q_FORGET_WORKER];
      rc = sqlite3_bind_text(q, 1, s->fence_owner, -1, SQLITE_STATIC);
      if (rc == SQLITE_OK) rc = sqlite3_step(q);
      finish(q);
    }
    if (rc == SQLITE_DONE) rc = step_busy_retry(s, s->q[Q_COMMIT]);
    sqlite3_reset(s->q[Q_COMMIT]);
    if (rc != SQLITE_DONE) rollback(s);
  }
  for (int i = 0; i < Q__COUNT; i++) sqlite3_finalize(s->q[i]);
  /* close_v2 also rolls back whatever a half-finished open left behind. */
  sqlite3_close_v2(s->db);
  sqlite3_finalize(s->q_claimable[0]);
  sqlite3_finalize(s->q_claimable[1]);
  sqlite3_finalize(s->q_events_after);
  sqlite3_close_v2(s->reader);
  sqlite3_close_v2(s->checkpointer);   /* the last connection to close checkpoints the WAL */
  free(s->path);
  free(s->worker);
  forget_versions(s, 0);
  free(s->versions);
  free(s->fence_owner);
  mend_idset_clear(&s->fence_checked);
  mend_idset_clear(&s->lost);
  for (int i = 0; i < s->nlost_new; i++) free(s->lost_new[i]);
  free(s->lost_new);
  for (int k = 0; k < 3; k++) log_free(&s->logs[k]);
  free(s);
}

int mend_store_not_found(const mend_store *s) { return s->not_found; }

const char *mend_store_errmsg(mend_store *s) { return s ? s->err : "no store"; }

int mend_store_has_checkpointer(const mend_store *s) { return s->checkpointer != NULL; }

int mend_store_checkpoint(mend_store *s, int *wal_frames) {
  if (wal_frames) *wal_frames = 0;
  if (!s->checkpointer) return 0;
  int log = 0, done = 0;
  /* A connection that has read nothing does not know the file is in WAL mode, and its
   * checkpoint would quietly do nothing: read first. */
  sqlite3_exec(s->checkpointer, "SELECT 1 FROM sqlite_master LIMIT 1", NULL, NULL, NULL);
  int rc = sqlite3_wal_checkpoint_v2(s->checkpointer, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
  if (wal_frames) *wal_frames = log > 0 ? log : 0;
  if (rc == SQLITE_BUSY) return 0;
  return rc == SQLITE_OK ? (done > 0 ? done : 0) : -1;
}

int mend_store_checkpoint_catch_up(mend_store *s) {
  if (!s->checkpointer) return 1;
  if (mend_store_writer_busy(s) || s->in_batch || s->cur->nrec) return 0;
  int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
  return rc == SQLITE_OK ? 1 : rc == SQLITE_BUSY ? 0 : -1;
}

int mend_store_batch_open(mend_store *s) {
  if (s->cur->nrec > 0) return 1;
  writer *w = s->w;
  if (!w) return s->in_batch;
  pthread_mutex_lock(&w->mu);
  int busy = w->busy, part = w->part;
  if (!busy) note_durable(s);
  pthread_mutex_unlock(&w->mu);
  /* a part of the open batch on the thread is the batch still open */
  return busy ? part : s->in_batch;
}

/* Ends the open transaction, if any (on whichever thread holds the connection now). */
static int commit_batch(mend_store *s) {
  if (!s->in_batch) return 0;
  if (s->batch_failed) {
    /* errmsg keeps the write that failed: that is the cause worth reporting. */
    rollback(s);
    return -1;
  }
  if (s->commit_hook) s->commit_hook("before_commit");
  int rc = step_busy_retry(s, s->q[Q_COMMIT]);
  if (rc != SQLITE_DONE) {
    sql_err(s, "commit");
    sqlite3_reset(s->q[Q_COMMIT]);
    rollback(s);
    return -1;
  }
  sqlite3_reset(s->q[Q_COMMIT]);
  s->in_batch = 0;
  s->worker_named = 0;
  s->versions_committed = s->nversions;
  if (s->commit_hook) s->commit_hook("after_commit");
  return 0;
}

int mend_store_commit(mend_store *s) {
  int rc = sync_point(s);
  if (rc == MEND_STORE_BUSY) return rc;   /* nothing began: the batch is kept whole */
  if (rc != 0) {
    if (!s->w || !s->w->failed) rollback(s);
    return -1;
  }
  s->parted = 0;
  if (commit_batch(s) != 0) return -1;
  s->durable_seq = s->open_seq++;
  return 0;
}

int mend_store_schema_version(mend_store *s) { return s->version; }

/* ---- the write log and the writer thread ------------------------------------------------ */

static const char *const record_what[Q__COUNT] = {
  [Q_INSERT_RUN] = "insert run", [Q_UPDATE_RUN] = "update run", [Q_PUT_STEP] = "put step",
  [Q_UPDATE_STEP] = "update step", [Q_APPEND_HISTORY] = "append history",
  [Q_HISTORY_GROUP] = "append history",
  [Q_PUT_BREAKER] = "put breaker", [Q_PUT_DLQ] = "put dlq", [Q_RENEW] = "renew the lease",
  [Q_CONSUME_EVENT] = "consume an event",
};

/* A log's arrays live in pages of their own (mmap), not in the heap: a burst grows them to
 * megabytes, and the heap would keep that memory once they are given back (300 B per parked
 * run in W4), while munmap returns it at once. */
static void *pages_resize(void *p, size_t old_bytes, size_t new_bytes) {
  void *q = p ? mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE)
              : mmap(NULL, new_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return q == MAP_FAILED ? NULL : q;
}

static void pages_free(void *p, size_t bytes) {
  if (p) munmap(p, bytes);
}

static int grow(void **p, int *cap, int need, size_t size) {
  if (need <= *cap) return 0;
  int n = *cap ? *cap * 2 : 1024;
  while (n < need) n *= 2;
  void *q = pages_resize(*p, (size_t)*cap * size, (size_t)n * size);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

static void log_free(wlog *log) {
  pages_free(log->recs, (size_t)log->caprec * sizeof *log->recs);
  pages_free(log->vals, (size_t)log->capval * sizeof *log->vals);
  pages_free(log->text, log->captext);
  memset(log, 0, sizeof *log);
}

/* Starts a record of statement q in the current log; its values follow in order. */
static void rec_begin(mend_store *s, int q) {
  wlog *log = s->cur;
  if (grow((void **)&log->recs, &log->caprec, log->nrec + 1, sizeof *log->recs)) { log->oom = 1; return; }
  log->recs[log->nrec++] = (wrec){q, log->nval, 0, s->repairing};
}

static wval *rec_value(mend_store *s) {
  wlog *log = s->cur;
  if (log->nval < log->capval && !log->oom) {   /* all but a few: rec_value was 5% of the loop */
    log->recs[log->nrec - 1].n++;
    return &log->vals[log->nval++];
  }
  if (log->oom || grow((void **)&log->vals, &log->capval, log->nval + 1, sizeof *log->vals)) {
    log->oom = 1;
    return NULL;
  }
  log->recs[log->nrec - 1].n++;
  return &log->vals[log->nval++];
}

static void rec_text(mend_store *s, const char *t) {
  wval *v = rec_value(s);
  if (!v) return;
  if (!t) { v->type = V_NULL; return; }
  wlog *log = s->cur;
  size_t n = strlen(t);
  if (n > INT_MAX) { log->oom = 1; v->type = V_NULL; return; }   /* no bigger text binds */
  if (log->ntext + n + 1 > log->captext) {
    size_t cap = log->captext ? log->captext * 2 : 65536;
    while (cap < log->ntext + n + 1) cap *= 2;
    char *text = pages_resize(log->text, log->captext, cap);
    if (!text) { log->oom = 1; v->type = V_NULL; return; }
    log->text = text;
    log->captext = cap;
  }
  memcpy(log->text + log->ntext, t, n + 1);
  *v = (wval){.type = V_TEXT, .len = (unsigned)n, .off = log->ntext};
  log->ntext += n + 1;
}

/* The store's worker, named when the row is written (bind_worker): no text kept. */
static void rec_worker(mend_store *s) {
  wval *v = rec_value(s);
  if (v) *v = s->worker ? (wval){.type = V_WORKER} : (wval){.type = V_NULL};
}

static void rec_int(mend_store *s, sqlite3_int64 i) {
  wval *v = rec_value(s);
  if (v) *v = (wval){.type = V_INT, .i = i};
}

/* A label's code: as its digits if they are at hand (code_digits), else as a number. */
static void rec_code(mend_store *s, int code) {
  wval *v = rec_value(s);
  if (v) *v = (wval){.type = code >= 0 && code < LABELS_MAX ? V_CODE : V_INT, .i = code};
}

static void rec_real(mend_store *s, double d) {
  wval *v = rec_value(s);
  if (v) *v = (wval){.type = V_REAL, .d = d};
}

static void rec_opt_real(mend_store *s, double d) {
  wval *v = rec_value(s);
  if (v) *v = d < 0 ? (wval){.type = V_NULL} : (wval){.type = V_REAL, .d = d};
}

static int fence_drops(mend_store *s, const wlog *log, const wrec *r);
static void renewed(mend_store *s, const wlog *log, const wrec *r);

/* The worker's number (batch_begin got it); its name if the number could not be had. */
static int bind_worker(const mend_store *s, sqlite3_stmt *q, int i) {
  if (s->worker_id)
    return sqlite3_bind_text(q, i, s->worker_digits, s->worker_ndigits, SQLITE_STATIC);
  return s->worker ? sqlite3_bind_text(q, i, s->worker, -1, SQLITE_STATIC) : sqlite3_bind_null(q, i);
}

static const char *const code_digits[] = {
  "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
  "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32",
  "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44", "45", "46", "47", "48",
  "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59", "60", "61", "62", "63",
};
/* a code below LABELS_MAX has its digits here, one or two of them (bind_values) */
_Static_assert(sizeof code_digits / sizeof *code_digits == LABELS_MAX && LABELS_MAX <= 100,
               "code_digits holds the codes below LABELS_MAX");

static int bind_values(const mend_store *s, sqlite3_stmt *q, const wlog *log, const wrec *r,
                       int at, int null_last) {
  int rc = SQLITE_OK;
  for (int j = 0; j < r->n; j++) {
    const wval *v = &log->vals[r->first + j];
    int type = null_last && j == r->n - 1 ? V_NULL : v->type;
    switch (type) {
    case V_INT: BIND(sqlite3_bind_int64(q, at + j + 1, v->i)); break;
    case V_REAL: BIND(sqlite3_bind_double(q, at + j + 1, v->d)); break;
    case V_TEXT: BIND(sqlite3_bind_text(q, at + j + 1, log->text + v->off, (int)v->len, SQLITE_STATIC)); break;
    case V_WORKER: BIND(bind_worker(s, q, at + j + 1)); break;
    case V_CODE: BIND(sqlite3_bind_text(q, at + j + 1, code_digits[v->i], v->i < 10 ? 1 : 2,
                                     SQLITE_STATIC)); break;
    default: BIND(sqlite3_bind_null(q, at + j + 1)); break;
    }
  }
  return rc;
}

/* Binds a record's values to q, and NULL to any parameter past them, so that no value of an
 * earlier record stays bound (flush_log resets without clearing: 3% of the writer thread).
 * With null_last, its last value as NULL. The first failing result code, if any. */
static int bind_record(const mend_store *s, sqlite3_stmt *q, const wlog *log, const wrec *r,
                       int null_last) {
  int rc = SQLITE_OK;
  for (int j = r->n; j < sqlite3_bind_parameter_count(q); j++) BIND(sqlite3_bind_null(q, j + 1));
  BIND(bind_values(s, q, log, r, 0, null_last));
  return rc;
}

/* One history row. Its number taken (another process wrote to the run's history): the next
 * free one. */
static int append_one(mend_store *s, const wlog *log, const wrec *r) {
  sqlite3_stmt *q = s->q[Q_APPEND_HISTORY];
  if (run_bound(s, q, bind_record(s, q, log, r, 0), record_what[r->q], 1) != 0) return -1;
  if (sqlite3_changes(s->db) > 0) return 0;
  return run_bound(s, q, bind_record(s, q, log, r, 1), record_what[r->q], 1);
}

/* Numbered history rows one by one, in order (a group not full, or one backed out). */
static int append_each(mend_store *s, const wlog *log, const int *ks, int n) {
  for (int g = 0; g < n; g++)
    if (append_one(s, log, &log->recs[ks[g]]) != 0) return -1;
  return 0;
}

/* HISTORY_GROUP numbered rows in one statement. Should one of their numbers be taken (another
 * process wrote to the run's history), SQLite backs out the statement's rows, and they all go
 * one by one (append_one), so that a run's rows stay in the order recorded. */
static int append_group(mend_store *s, const wlog *log, const int *ks) {
  sqlite3_stmt *q = s->q[Q_HISTORY_GROUP];
  int rc = SQLITE_OK;
  for (int g = 0; g < HISTORY_GROUP; g++)
    BIND(bind_values(s, q, log, &log->recs[ks[g]], g * HISTORY_VALUES, 0));
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  int taken = rc != SQLITE_DONE && sqlite3_extended_errcode(s->db) == SQLITE_CONSTRAINT_PRIMARYKEY;
  if (rc != SQLITE_DONE && !taken) sql_err(s, record_what[Q_HISTORY_GROUP]);
  sqlite3_reset(q);
  if (rc == SQLITE_DONE) return 0;
  if (!taken) {
    s->batch_failed = 1;
    return -1;
  }
  return append_each(s, log, ks, HISTORY_GROUP);
}

/* A record that can go in a group: a history row of the usual shape with its number. */
static int groupable(const wlog *log, const wrec *r) {
  return r->q == Q_APPEND_HISTORY && r->n == HISTORY_VALUES &&
         log->vals[r->first + 11].type == V_INT && log->vals[r->first + 2].type == V_REAL;
}

static void log_clear(wlog *log) {
  log->nrec = log->nval = 0;
  log->ntext = 0;
  log->oom = 0;
}

/* Runs the statements of `log` in the open transaction (begun if need be), then empties it;
 * or, if the transaction cannot begin for another connection's lock, runs none of them and
 * keeps them (MEND_STORE_BUSY). */
static int flush_log(mend_store *s, wlog *log) {
  int ok = 1;
  if (log->oom) {
    set_msg(s->err, sizeof s->err, "%s: recording a write: out of memory", s->path);
    s->batch_failed = 1;
    ok = 0;
  } else if (log->nrec) {
    int begun = batch_begin(s);
    if (begun == MEND_STORE_BUSY) return begun;   /* the log is kept for the next try */
    if (begun != 0) ok = 0;
  }
  /* Numbered history rows wait for a group; nothing else in a batch reads history, and their
   * numbers, not their order, place them. A row without a number (the next free one) goes
   * after those before it. */
  int group[HISTORY_GROUP], ng = 0;
  for (int k = 0; ok && k < log->nrec; k++) {
    const wrec *r = &log->recs[k];
    int drop = fence_drops(s, log, r);
    if (drop) {
      if (drop < 0) ok = 0;
      continue;
    }
    if (groupable(log, r)) {
      group[ng++] = k;
      if (ng == HISTORY_GROUP) {
        if (append_group(s, log, group) != 0) ok = 0;
        ng = 0;
      }
      continue;
    }
    sqlite3_stmt *q = s->q[r->q];
    if (r->q == Q_APPEND_HISTORY) {
      if (ok && append_each(s, log, group, ng) != 0) ok = 0;
      ng = 0;
      if (ok && append_one(s, log, r) != 0) ok = 0;
    } else if (run_bound(s, q, bind_record(s, q, log, r, 0), record_what[r->q], 1) != 0) {
      ok = 0;
    } else if (r->q == Q_RENEW) {
      renewed(s, log, r);
    } else if ((r->q == Q_UPDATE_RUN || r->q == Q_UPDATE_STEP || r->q == Q_CONSUME_EVENT) &&
               sqlite3_changes(s->db) == 0) {
      /* An update that changes nothing would lose a transition silently; an event found
       * consumed already would be consumed twice. */
      const wval *id = &log->vals[r->first];
      set_msg(s->err, sizeof s->err, "%s: %s: no %s %s", s->path, record_what[r->q],
              r->q == Q_UPDATE_RUN ? "run" : r->q == Q_UPDATE_STEP ? "step of run" : "unconsumed event of run",
              id->type == V_TEXT ? log->text + id->off : "(null)");
      s->batch_failed = 1;
      ok = 0;
    }
  }
  if (ok && append_each(s, log, group, ng) != 0) ok = 0;
  /* What a burst grew is given back once batches are small again (or the engine is idle:
   * mend_store_trim), so that memory once the runs wait is what they need; not while the
   * burst goes on, where each batch would fault its pages in again and each unmap stop the
   * other core for a TLB shootdown (W1 10k full: 38k -> 55k steps/s). */
  if (log->caprec > 4096 && log->nrec < log->caprec / 8) log_free(log);
  log_clear(log);
  return ok ? 0 : -1;
}

/* A log holds at most this many records: a burst larger than that (a host starting 100k runs
 * in one turn) is written in parts, in the same batch, rather than held all in memory. At most
 * about 14 MB of values (16 B each, ~13 a record) besides their text. */
#define LOG_MAX_RECORDS 65536

/* A part of the open batch goes to an idle writer thread every this many records: the
 * thread runs statements while the loop records more, rather than wait for the whole batch.
 * Without, in a W1 burst each thread idled a quarter of the time, one waiting for the other. */
#define PART_RECORDS 1024

static int pass_part(mend_store *s);
static int writer_idle(mend_store *s);

/* Ends a record: without a writer thread it runs now, as every write did before there was one;
 * with one, a record that could not be kept fails now, and a full log goes to the thread. */
static int rec_end(mend_store *s) {
  /* With a writer thread, batch_failed is the thread's: a failure is heard through
   * writer_wait (sync_point, pass_part). */
  /* While another connection holds the lock, writes are only recorded: the commit that
   * follows it runs them, rather than each write waiting for the lock. */
  if (!s->w) return s->batch_failed ? -1 : atomic_load(&s->locked) ? 0 : sync_point(s);
  if (s->cur->oom) return sync_point(s);
  if (s->cur->nrec >= LOG_MAX_RECORDS) return pass_part(s);
  if (s->cur->nrec % PART_RECORDS == 0 && writer_idle(s)) return pass_part(s);
  return 0;
}

/* Calls done() outside the lock, so that the loop hears of the thread (store.h). */
static void writer_tell(writer *w) {
  if (!w->done) return;
  w->in_done = 1;
  pthread_mutex_unlock(&w->mu);
  w->done(w->ud);
  pthread_mutex_lock(&w->mu);
  w->in_done = 0;
  pthread_cond_broadcast(&w->cv);
}

/* A batch that cannot begin for another connection's lock is tried again, after 50 ms, then
 * twice as long each time up to 1 s, for as long as the lock lasts: this thread may wait, the
 * loop goes on recording the next batch. Once the store is closing it tries for
 * BUSY_TIMEOUT_MS more, then gives the batch up (as a crash would: nothing in it was acted on). */
static int writer_flush(mend_store *s, wlog *job) {
  writer *w = s->w;
  double delay = 0.05, give_up = -1;
  int rc;
  while ((rc = flush_log(s, job)) == MEND_STORE_BUSY) {
    pthread_mutex_lock(&w->mu);
    writer_tell(w);   /* the loop warns while it lasts (mend_store_locked) */
    if (w->stop && give_up < 0) give_up = now_mono() + BUSY_TIMEOUT_MS / 1000.0;
    if (give_up >= 0 && now_mono() >= give_up) {
      pthread_mutex_unlock(&w->mu);
      log_clear(job);
      return -1;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long ns = until.tv_nsec + (long)(delay * 1e9);
    until.tv_sec += ns / 1000000000L;
    until.tv_nsec = ns % 1000000000L;
    if (!w->stop) pthread_cond_timedwait(&w->cv, &w->mu, &until);
    pthread_mutex_unlock(&w->mu);
    delay = delay * 2 > 1 ? 1 : delay * 2;
  }
  return rc;
}

static void *writer_main(void *arg) {
  mend_store *s = arg;
  writer *w = s->w;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->job && !w->stop) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->job) break;
    wlog *job = w->job;
    int part = w->part;
    pthread_mutex_unlock(&w->mu);
    int rc = writer_flush(s, job);
    if (!part) {
      int committed = commit_batch(s);   /* rolls back if the flush failed */
      if (rc == 0) rc = committed;       /* (a BEGIN that failed left nothing to roll back) */
    } else if (rc != 0) {
      rollback(s);   /* the batch is lost: its write lock is not kept for the rest */
    }
    pthread_mutex_lock(&w->mu);
    if (rc != 0) w->failed = 1;
    if (part && w->next && w->failed) {
      log_clear(w->next);   /* the rest of a failed batch is never written on its own */
      w->next = NULL;
    }
    if (part && w->next) {
      /* the rest of the batch came while its part was written: on with it */
      w->job = w->next;
      w->job_seq = w->next_seq;
      w->next = NULL;
      w->part = 0;
      continue;
    }
    w->job = NULL;
    w->part = 0;
    w->busy = 0;
    pthread_cond_broadcast(&w->cv);
    writer_tell(w);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* With the writer's lock held and the writer idle: its last batch, if it committed, is durable. */
static void note_durable(mend_store *s) {
  writer *w = s->w;
  if (!w->failed && w->job_seq > s->durable_seq) s->durable_seq = w->job_seq;
}

/* Waits for the writer thread to be done with the connection; -1 if a batch of it failed. */
static int writer_wait(mend_store *s) {
  writer *w = s->w;
  if (!w) return 0;
  pthread_mutex_lock(&w->mu);
  while (w->busy || w->in_done) pthread_cond_wait(&w->cv, &w->mu);
  int failed = w->failed;
  note_durable(s);
  pthread_mutex_unlock(&w->mu);
  return failed ? -1 : 0;
}

/* Before any statement but a recorded write: the connection is this thread's again and the
 * writes recorded so far have run (in the open transaction). */
static int sync_point(mend_store *s) {
  if (writer_wait(s) != 0) return -1;
  if (s->batch_failed) return -1;
  return flush_log(s, s->cur);
}

int mend_store_start_writer(mend_store *s, void (*done)(void *ud), void *ud) {
  if (s->w) return 0;
  writer *w = calloc(1, sizeof *w);
  if (!w) { set_msg(s->err, sizeof s->err, "%s: writer thread: out of memory", s->path); return -1; }
  w->done = done;
  w->ud = ud;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  s->w = w;
  int rc = pthread_create(&w->thread, NULL, writer_main, s);
  if (rc != 0) {
    s->w = NULL;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    set_msg(s->err, sizeof s->err, "%s: writer thread: %s", s->path, strerror(rc));
    return -1;
  }
  return 0;
}

static void stop_writer(mend_store *s) {
  writer *w = s->w;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w);
  s->w = NULL;
}

int mend_store_writer_busy(mend_store *s) {
  writer *w = s->w;
  if (!w) return 0;
  pthread_mutex_lock(&w->mu);
  int busy = w->busy;
  if (!busy) note_durable(s);
  pthread_mutex_unlock(&w->mu);
  return busy;
}

/* With the writer's lock held: a log neither recording nor with the thread. */
static wlog *free_log(mend_store *s) {
  writer *w = s->w;
  wlog *log = s->logs;
  while (log == s->cur || log == w->job || log == w->next) log++;
  return log;
}

/* With the writer thread idle: the log recorded so far becomes its job, the batch (numbered)
 * or a part of it, and recording goes on in a free log. */
static void give_job(mend_store *s, int part) {
  writer *w = s->w;
  pthread_mutex_lock(&w->mu);
  w->job = s->cur;
  w->part = part;
  if (!part) w->job_seq = s->open_seq++;
  w->busy = 1;
  s->cur = free_log(s);
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

int mend_store_hand_off(mend_store *s) {
  if (!s->w) return mend_store_commit(s);
  writer *w = s->w;
  if (!s->cur->oom) {
    /* A part of this batch on the thread: the rest follows it there, no waiting here. */
    pthread_mutex_lock(&w->mu);
    int queued = w->busy && w->part && !w->next && !w->failed;
    if (queued) {
      w->next = s->cur;
      w->next_seq = s->open_seq++;
      s->cur = free_log(s);
      s->parted = 0;
    }
    pthread_mutex_unlock(&w->mu);
    if (queued) return 0;
  }
  if (writer_wait(s) != 0) return -1;
  if (s->cur->oom) return flush_log(s, s->cur);
  if (!s->cur->nrec && !s->in_batch) {
    s->durable_seq = s->open_seq++;   /* nothing to write: all so far is durable */
    return 0;
  }
  s->parted = 0;
  give_job(s, 0);
  return 0;
}

/* A full log of the open batch goes to the writer thread, to be written in the transaction
 * and not committed: the caller goes on recording into another log. Written here instead,
 * these parts were a sixth of the loop thread's time in W1 (it waited for the thread, then
 * ran the statements itself). The batch's sequence number is not taken: nothing is durable
 * until it is handed off whole. */
static int pass_part(mend_store *s) {
  if (writer_wait(s) != 0 || s->batch_failed) return -1;
  s->parted += s->cur->nrec;
  give_job(s, 1);
  return 0;
}

static int writer_idle(mend_store *s) {
  writer *w = s->w;
  pthread_mutex_lock(&w->mu);
  int idle = !w->busy && !w->in_done;
  pthread_mutex_unlock(&w->mu);
  return idle;
}

int mend_store_writer_part(mend_store *s) {
  writer *w = s->w;
  if (!w) return 0;
  pthread_mutex_lock(&w->mu);
  int part = w->busy && w->part && !w->next;
  pthread_mutex_unlock(&w->mu);
  return part;
}

void mend_store_trim(mend_store *s) {
  if (s->cur->nrec || s->in_batch) return;
  int idle = 1;
  if (s->w) {
    pthread_mutex_lock(&s->w->mu);
    idle = !s->w->job;
    pthread_mutex_unlock(&s->w->mu);
  }
  for (int k = 0; idle && k < 3; k++) log_free(&s->logs[k]);
}

int mend_store_batch_writes(const mend_store *s) { return s->cur->nrec + s->parted; }
int mend_store_locked(mend_store *s) { return atomic_load(&s->locked); }
void mend_store_set_busy_wait(mend_store *s, int ms) { s->busy_ms = ms > 0 ? ms : BUSY_TIMEOUT_MS; }
int mend_store_wal_frames(const mend_store *s) { return s->wal_frames; }
unsigned long mend_store_open_seq(const mend_store *s) { return s->open_seq; }
unsigned long mend_store_durable_seq(const mend_store *s) { return s->durable_seq; }
void mend_store_set_commit_hook(mend_store *s, void (*hook)(const char *phase)) {
  s->commit_hook = hook;
}

/* ---- writes ---------------------------------------------------------------------------- */

static int first_row(mend_store *s, sqlite3_stmt *q, int rc, const char *what);

static int same_text(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

static char *copy_text(const char *t, int *oom) {
  if (!t) return NULL;
  size_t n = strlen(t) + 1;
  char *c = malloc(n);
  if (c) memcpy(c, t, n);
  else *oom = 1;
  return c;
}

/* The number of a run's workflow version in workflow_versions: known, or written (once a
 * version and process) in the open batch, which it joins before the run is recorded. */
static int workflow_version(mend_store *s, const mend_run_rec *r, sqlite3_int64 *id) {
  for (int i = 0; i < s->nversions; i++) {
    const struct wf_version *v = &s->versions[i];
    if (same_text(v->workflow, r->workflow) && same_text(v->version, r->version) &&
        same_text(v->source, r->source) && same_text(v->step_names, r->step_names)) {
      *id = v->id;
      return 0;
    }
  }
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  const char *values[4] = {r->workflow, r->version, r->source, r->step_names};
  sqlite3_stmt *q = s->q[Q_PUT_VERSION];
  int rc = SQLITE_OK;
  for (int k = 0; k < 4; k++) BIND(bind_text(q, k + 1, values[k]));
  BIND(sqlite3_bind_double(q, 5, r->created));
  if (run_write(s, q, rc, "number a workflow version") != 0) return -1;
  q = s->q[Q_VERSION_ID];
  for (int k = 0; k < 4; k++) BIND(bind_text(q, k + 1, values[k]));
  int found = first_row(s, q, rc, "number a workflow version");
  if (found <= 0) {
    if (found == 0) set_msg(s->err, sizeof s->err, "%s: workflow version of %s not found after"
                            " writing it", s->path, r->workflow);
    s->batch_failed = 1;
    return -1;
  }
  *id = sqlite3_column_int64(q, 0);
  finish(q);
  if (r->script) {
    q = s->q[Q_KEEP_SCRIPT];
    rc = SQLITE_OK;
    BIND(sqlite3_bind_int64(q, 1, *id));
    BIND(bind_text(q, 2, r->script));
    if (run_write(s, q, rc, "keep a workflow version's script") != 0) return -1;
  }
  int oom = 0;
  if (s->nversions == s->capversions) {
    int cap = s->capversions ? s->capversions * 2 : 8;
    struct wf_version *more = realloc(s->versions, (size_t)cap * sizeof *more);
    if (more) {
      s->versions = more;
      s->capversions = cap;
    } else {
      oom = 1;
    }
  }
  struct wf_version v = {copy_text(r->workflow, &oom), copy_text(r->version, &oom),
                         copy_text(r->source, &oom), copy_text(r->step_names, &oom), *id};
  if (!oom) {
    s->versions[s->nversions++] = v;
  } else {   /* not kept: the next run asks the database again */
    free_version(&v);
  }
  return 0;
}

int mend_store_insert_run(mend_store *s, const mend_run_rec *r) {
  sqlite3_int64 version_id;
  if (workflow_version(s, r, &version_id) != 0) return -1;
  /* With a run key the caller must hear at once whether the key was taken. */
  if (r->run_key && sync_point(s) != 0) return -1;
  rec_begin(s, Q_INSERT_RUN);
  rec_text(s, r->id);
  rec_text(s, r->workflow);
  rec_text(s, r->run_key);
  rec_text(s, r->status);
  rec_text(s, r->input);
  rec_text(s, r->error);
  rec_int(s, r->attention ? 1 : 0);
  rec_real(s, r->created);
  rec_real(s, r->updated);
  rec_text(s, r->owner);
  rec_int(s, version_id);
  if (!r->run_key) return rec_end(s);
  if (flush_log(s, s->cur) != 0) return -1;
  return sqlite3_changes(s->db) == 0 ? 1 : 0;   /* 1: the run key was taken */
}

int mend_store_update_run(mend_store *s, const char *id, const char *status, const char *error,
                          int attention, double updated, const char *reason) {
  rec_begin(s, Q_UPDATE_RUN);
  rec_text(s, id);
  rec_text(s, status);
  rec_text(s, error);
  rec_int(s, attention ? 1 : 0);
  rec_real(s, updated);
  rec_text(s, reason);
  return rec_end(s);
}

/* A step row: Q_PUT_STEP names the step, Q_UPDATE_STEP keeps the name it has. */
static int rec_step(mend_store *s, int q, const mend_step_rec *st) {
  rec_begin(s, q);
  rec_text(s, st->run_id);
  rec_int(s, st->idx);
  if (q == Q_PUT_STEP) rec_text(s, st->name);
  rec_text(s, st->status);
  rec_int(s, st->attempts);
  rec_int(s, st->comp_attempts);
  rec_text(s, st->idem_key);
  rec_int(s, st->custom_key ? 1 : 0);
  rec_text(s, st->result);
  rec_text(s, st->error);
  rec_opt_real(s, st->due);
  rec_opt_real(s, st->last_delay);
  rec_real(s, st->updated);
  rec_int(s, st->slept ? 1 : 0);
  rec_text(s, st->awaits);
  return rec_end(s);
}

int mend_store_put_step(mend_store *s, const mend_step_rec *st) { return rec_step(s, Q_PUT_STEP, st); }

int mend_store_update_step(mend_store *s, const mend_step_rec *st) {
  return rec_step(s, Q_UPDATE_STEP, st);
}

/* A name in labels goes as its code (schema 7); any other, as it is. */
static void rec_label(mend_store *s, const char *name) {
  int code = name ? label_code(s, name) : -1;
  if (code >= 0) rec_code(s, code);
  else rec_text(s, name);
}

int mend_store_append_history(mend_store *s, const mend_history_rec *h) {
  rec_begin(s, Q_APPEND_HISTORY);
  rec_text(s, h->run_id);
  rec_text(s, h->step);
  rec_real(s, h->at);
  rec_label(s, h->event);
  rec_label(s, h->from_status);
  rec_label(s, h->to_status);
  if (h->attempt) rec_int(s, h->attempt);
  else rec_text(s, NULL);
  rec_text(s, h->error);
  rec_opt_real(s, h->delay);
  rec_text(s, h->detail);
  rec_worker(s);
  if (h->seq > 0) rec_int(s, h->seq);
  else rec_text(s, NULL);
  return rec_end(s);
}


int mend_store_put_breaker(mend_store *s, const char *key, const mend_breaker *b, double updated) {
  rec_begin(s, Q_PUT_BREAKER);
  rec_text(s, key);
  rec_text(s, mend_breaker_state_name(b->state));
  rec_int(s, b->failures);
  rec_int(s, b->successes);
  rec_real(s, b->opened_at);
  rec_real(s, b->open_until);
  rec_real(s, updated);
  return rec_end(s);
}

int mend_store_put_dlq(mend_store *s, const mend_dlq_rec *d) {
  rec_begin(s, Q_PUT_DLQ);
  rec_text(s, d->run_id);
  rec_text(s, d->reason);
  rec_text(s, d->step);
  rec_text(s, d->error);
  rec_text(s, d->detail);
  rec_real(s, d->at);
  return rec_end(s);
}

/* ---- point reads ----------------------------------------------------------------------- */

/* Steps a bound read statement to its first row: 1 row, 0 none, -1 error (statement reset). */
static int first_row(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) return 1;
  if (rc == SQLITE_DONE) {
    finish(q);
    return 0;
  }
  sql_err(s, what);
  finish(q);
  return -1;
}

long mend_store_last_history(mend_store *s, const char *run_id, double *at) {
  if (sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_LAST_SEQ];
  int r = first_row(s, q, bind_text(q, 1, run_id), "read the history's length");
  if (r < 0) return -1;
  long seq = r ? (long)sqlite3_column_int64(q, 0) : 0;
  if (at) *at = r && sqlite3_column_type(q, 1) != SQLITE_NULL ? sqlite3_column_double(q, 1) : -1;
  if (r) finish(q);
  return seq;
}

long mend_store_last_history_seq(mend_store *s, const char *run_id) {
  return mend_store_last_history(s, run_id, NULL);
}

char *mend_store_version_script(mend_store *s, const char *workflow, const char *version,
                                char **source) {
  if (source) *source = NULL;
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_VERSION_SCRIPT];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, workflow));
  BIND(bind_text(q, 2, version));
  int r = first_row(s, q, rc, "read a workflow version's script");
  if (r <= 0) {
    if (r == 0) set_msg(s->err, sizeof s->err, "%s: no script of workflow %s version %s is kept",
                        s->path, workflow, version);
    return NULL;
  }
  int oom = 0;
  char *text = copy_text((const char *)sqlite3_column_text(q, 0), &oom);
  if (source && !oom) *source = copy_text((const char *)sqlite3_column_text(q, 1), &oom);
  finish(q);
  if (oom) {
    free(text);
    if (source) { free(*source); *source = NULL; }
    set_msg(s->err, sizeof s->err, "%s: out of memory reading a workflow version", s->path);
    return NULL;
  }
  return text;
}

int mend_store_find_run_key(mend_store *s, const char *run_key, char *id_out, int id_len) {
  if (sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_FIND_RUN_KEY];
  int r = first_row(s, q, bind_text(q, 1, run_key), "find run key");
  if (r != 1) return r;
  const char *id = (const char *)sqlite3_column_text(q, 0);
  int n = sqlite3_column_bytes(q, 0);
  if (!id || n >= id_len) {
    set_msg(s->err, sizeof s->err, "%s: find run key: run id does not fit in %d bytes", s->path,
            id_len);
    finish(q);
    return -1;
  }
  memcpy(id_out, id, (size_t)n + 1);
  finish(q);
  return 1;
}

int mend_store_find_key_result(mend_store *s, const char *idem_key, char **result_out) {
  if (sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_FIND_KEY_RESULT];
  int r = first_row(s, q, bind_text(q, 1, idem_key), "find key result");
  if (r != 1) return r;
  const char *res = (const char *)sqlite3_column_text(q, 0);
  /* A step that returned nothing has a NULL result, which is JSON null to the caller. */
  *result_out = strdup(res ? res : "null");
  finish(q);
  if (!*result_out) {
    set_msg(s->err, sizeof s->err, "%s: find key result: out of memory", s->path);
    return -1;
  }
  return 1;
}

int mend_store_get_breaker(mend_store *s, const char *key, mend_breaker *b) {
  if (sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_GET_BREAKER];
  int r = first_row(s, q, bind_text(q, 1, key), "get breaker");
  if (r != 1) return r;
  const char *state = (const char *)sqlite3_column_text(q, 0);
  mend_breaker_state st;
  if (!state || mend_breaker_state_parse(state, &st) != 0) {
    set_msg(s->err, sizeof s->err, "%s: get breaker %s: unknown state %s", s->path, key,
            state ? state : "null");
    finish(q);
    return -1;
  }
  b->state = st;
  b->failures = sqlite3_column_int(q, 1);
  b->successes = sqlite3_column_int(q, 2);
  b->probes = 0;
  b->opened_at = sqlite3_column_double(q, 3);
  b->open_until = sqlite3_column_double(q, 4);
  finish(q);
  return 1;
}

/* ---- fencing ----------------------------------------------------------------------------
 * A worker holds its runs only while their leases last. One that stalls past them (stopped,
 * swapped out, waiting on a lock) may find that another worker took some, and what it then
 * wrote to them would mix two workers' transitions in one run. So each transaction checks,
 * once it holds the write lock (no claim can commit while it does), that it began before our
 * leases ran out (fence_until; claims compare lease_until against the same wall clock). One
 * that began late renews what is still ours, then looks up the holder of each run it writes
 * to, once per run. A run another worker holds is lost: its writes are dropped, in this batch
 * and every later one, and the engine hears of it (mend_store_fence_news) and lets it go.
 * Looking up goes on until the engine has matched its runs against those the store says it
 * holds (mend_store_held, mend_store_fence_verified). */

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What the loop reads of the fence is guarded by the writer's mutex, if there is a writer. */
static void news_lock(mend_store *s) { if (s->w) pthread_mutex_lock(&s->w->mu); }
static void news_unlock(mend_store *s) { if (s->w) pthread_mutex_unlock(&s->w->mu); }

static int fence_oom(mend_store *s) {
  set_msg(s->err, sizeof s->err, "%s: keeping track of lost leases: out of memory", s->path);
  s->batch_failed = 1;
  return -1;
}

static int lease_at_least(mend_store *s, const char *owner, double until);

/* Also where the worker's row is first written: before any run it owns can commit. */
static int fence_at_begin(mend_store *s) {
  if (!s->fence_owner) return 0;
  int late = wall_now() >= s->fence_until || s->fence_always_late;
  if (!late) return s->fence_registered ? 0 : lease_at_least(s, s->fence_owner, s->fence_until);
  double until = wall_now() + s->fence_lease;
  if (lease_at_least(s, s->fence_owner, until) != 0) return -1;
  s->fence_until = until;
  s->fence_checking = 1;
  mend_idset_clear(&s->fence_checked);
  news_lock(s);
  s->fence_news = 1;
  news_unlock(s);
  return 0;
}

static int note_lost(mend_store *s, const char *id, size_t len) {
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  memcpy(copy, id, len);
  copy[len] = '\0';
  news_lock(s);
  int ok = 1;
  if (s->nlost_new == s->caplost_new) {
    int cap = s->caplost_new ? s->caplost_new * 2 : 16;
    char **more = realloc(s->lost_new, (size_t)cap * sizeof *more);
    if (more) {
      s->lost_new = more;
      s->caplost_new = cap;
    } else {
      ok = 0;
    }
  }
  if (ok) s->lost_new[s->nlost_new++] = copy;
  news_unlock(s);
  if (!ok) free(copy);
  return ok ? 0 : -1;
}

/* 1 if the record must not run (it writes to a run this worker no longer holds), -1 on error.
 * A run is ours only while its owner is us: a run another worker finished has no owner, and
 * our stale writes must not reopen it. */
static int fence_drops(mend_store *s, const wlog *log, const wrec *r) {
  if ((!s->fence_checking && !s->lost.count) || r->repair) return 0;
  const wval *v = &log->vals[r->first];
  if (r->q == Q_PUT_BREAKER || r->q == Q_RENEW || v->type != V_TEXT) return 0;   /* not a run's */
  const char *id = log->text + v->off;
  size_t len = v->len;
  if (r->q == Q_INSERT_RUN)   /* ours from the start */
    return s->fence_checking && mend_idset_add(&s->fence_checked, id, len) < 0 ? fence_oom(s) : 0;
  if (mend_idset_has(&s->lost, id, len)) return 1;
  if (!s->fence_checking || mend_idset_has(&s->fence_checked, id, len)) return 0;
  sqlite3_stmt *q = s->q[Q_OWNER];
  int row = first_row(s, q, sqlite3_bind_text(q, 1, id, (int)len, SQLITE_STATIC),
                      "look up who holds a run");
  if (row < 0) {
    s->batch_failed = 1;
    return -1;
  }
  const char *owner = row ? (const char *)sqlite3_column_text(q, 0) : NULL;
  int other = row && (!owner || strcmp(owner, s->fence_owner) != 0);
  if (row) finish(q);
  if (!other) return mend_idset_add(&s->fence_checked, id, len) < 0 ? fence_oom(s) : 0;
  if (mend_idset_add(&s->lost, id, len) < 0 || note_lost(s, id, len) != 0) return fence_oom(s);
  return 1;
}

/* A renewal has run: our leases last until its time (if it renewed ours). */
static int fence_is(const mend_store *s, const char *owner, size_t len) {
  return s->fence_owner && owner && strlen(s->fence_owner) == len &&
         memcmp(s->fence_owner, owner, len) == 0;
}

static void renewed(mend_store *s, const wlog *log, const wrec *r) {
  const wval *owner = &log->vals[r->first], *until = &log->vals[r->first + 1];
  if (owner->type != V_TEXT || until->type != V_REAL) return;
  if (fence_is(s, log->text + owner->off, owner->len) && until->d > s->fence_until)
    s->fence_until = until->d;
}

/* Our lease lasts at least until `until` (renewed now, in the open transaction). */
static int lease_at_least(mend_store *s, const char *owner, double until) {
  sqlite3_stmt *q = s->q[Q_RENEW];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, owner));
  BIND(sqlite3_bind_double(q, 2, until));
  if (run_write(s, q, rc, "renew the lease") != 0) return -1;
  if (fence_is(s, owner, strlen(owner))) {
    s->fence_registered = 1;
    if (until > s->fence_until) s->fence_until = until;
  }
  return 0;
}

/* A run is ours again (claimed, taken): its writes count, and a notice that it was lost, not
 * yet given to the engine, is taken back, or the engine would let the new copy go. */
static void ours_again(mend_store *s, const char *id) {
  mend_idset_remove(&s->lost, id, strlen(id));
  news_lock(s);
  for (int i = 0; i < s->nlost_new; i++) {
    if (strcmp(s->lost_new[i], id) != 0) continue;
    free(s->lost_new[i]);
    s->lost_new[i--] = s->lost_new[--s->nlost_new];
  }
  news_unlock(s);
}


int mend_store_set_fence(mend_store *s, const char *owner, double lease_seconds, double until) {
  char *copy = strdup(owner);
  if (!copy) return fence_oom(s);
  if (!s->fence_owner || strcmp(s->fence_owner, owner) != 0) s->fence_registered = 0;
  free(s->fence_owner);
  s->fence_owner = copy;
  s->fence_lease = lease_seconds;
  s->fence_until = until;
#ifdef MEND_FAILPOINTS
  /* The late path, taken by every transaction: the specs run under it to show that a worker
   * holding all its leases loses nothing to the lookups (MEND_FENCE_LATE=1 make test). */
  s->fence_always_late = getenv("MEND_FENCE_LATE") != NULL;
#endif
  return 0;
}

int mend_store_fence_news(mend_store *s, void (*lost)(void *ud, const char *id), void *ud) {
  news_lock(s);
  char **ids = s->lost_new;
  int n = s->nlost_new, late = s->fence_news;
  s->lost_new = NULL;
  s->nlost_new = s->caplost_new = 0;
  s->fence_news = 0;
  news_unlock(s);
  for (int i = 0; i < n; i++) {
    lost(ud, ids[i]);
    free(ids[i]);
  }
  free(ids);
  return late;
}

void mend_store_repairing(mend_store *s, int on) { s->repairing = on; }

int mend_store_add_lost(mend_store *s, const char *id) {
  return mend_idset_add(&s->lost, id, strlen(id)) < 0 ? fence_oom(s) : 0;
}

/* The id column of every row of a bound statement, as an array of strings; NULL on error. */
static json_t *strings_of(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  json_t *out = json_array();
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) json_array_append_new(out, json_string((const char *)sqlite3_column_text(q, 0)));
  }
  if (rc != SQLITE_DONE) {
    sql_err(s, what);
    json_decref(out);
    out = NULL;
  }
  finish(q);
  return out;
}

json_t *mend_store_held(mend_store *s) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_HELD];
  return strings_of(s, q, bind_text(q, 1, s->fence_owner), "read the runs this worker holds");
}

void mend_store_fence_verified(mend_store *s) {
  if (writer_wait(s) != 0) return;
  s->fence_checking = 0;
  mend_idset_clear(&s->fence_checked);
}

/* ---- queries --------------------------------------------------------------------------- */

static int is_json_column(const char *name) {
  return strcmp(name, "input") == 0 || strcmp(name, "result") == 0 ||
         strcmp(name, "step_names") == 0 || strcmp(name, "sources") == 0;
}

static int is_bool_column(const char *name) {
  return strcmp(name, "attention") == 0 || strcmp(name, "custom_key") == 0 ||
         strcmp(name, "kept") == 0 ||
         strcmp(name, "slept") == 0 || strcmp(name, "cancel_requested") == 0;
}

/* Text that is not valid UTF-8 (written by hand with SQL, say) still comes back, with '?' for
 * the bytes jansson refuses, rather than being dropped or crashing a listing. */
static json_t *text_value(const char *t, size_t n) {
  json_t *v = json_stringn(t, n);
  if (v) return v;
  char *copy = malloc(n + 1);
  if (!copy) return NULL;
  for (size_t i = 0; i < n; i++) copy[i] = (t[i] & 0x80) || t[i] == 0 ? '?' : t[i];
  v = json_stringn(copy, n);
  free(copy);
  return v;
}

/* The current row as an object keyed by column names; NULL columns are left out. */
static json_t *row_object(sqlite3_stmt *q) {
  json_t *o = json_object();
  if (!o) return NULL;
  int n = sqlite3_column_count(q);
  for (int i = 0; i < n; i++) {
    const char *name = sqlite3_column_name(q, i);
    json_t *v = NULL;
    switch (sqlite3_column_type(q, i)) {
    case SQLITE_NULL:
      continue;
    case SQLITE_INTEGER:
      v = is_bool_column(name) ? json_boolean(sqlite3_column_int64(q, i) != 0)
                               : json_integer(sqlite3_column_int64(q, i));
      break;
    case SQLITE_FLOAT: {
      /* JSON has no infinity: a row written with one (a wait of math.huge) still reads. */
      double d = sqlite3_column_double(q, i);
      v = json_real(isinf(d) ? (d > 0 ? DBL_MAX : -DBL_MAX) : d);
      break;
    }
    default: {
      const char *t = (const char *)sqlite3_column_text(q, i);
      size_t len = (size_t)sqlite3_column_bytes(q, i);
      if (!t) continue;
      if (is_json_column(name)) v = json_loadb(t, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
      if (!v) v = text_value(t, len);   /* not JSON after all: keep the text */
      break;
    }
    }
    if (!v || json_object_set_new(o, name, v) != 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* All rows of a bound statement as an array of objects; NULL on error (errmsg set). */
static json_t *rows_array(mend_store *s, sqlite3_stmt *q, int rc, const char *what) {
  json_t *a = json_array();
  if (!a) {
    finish(q);
    set_msg(s->err, sizeof s->err, "%s: %s: out of memory", s->path, what);
    return NULL;
  }
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) break;
    json_t *o = row_object(q);
    if (!o || json_array_append_new(a, o) != 0) {
      finish(q);
      json_decref(a);
      set_msg(s->err, sizeof s->err, "%s: %s: out of memory", s->path, what);
      return NULL;
    }
  }
  if (rc != SQLITE_DONE) {
    sql_err(s, what);
    finish(q);
    json_decref(a);
    return NULL;
  }
  finish(q);
  return a;
}

/* A step has no row until its first transition: the run's step_names give the ones not begun,
 * listed as their row would say (pending, no attempt, the default key). step_names itself is
 * not part of the run as read. */
static int list_pending(mend_store *s, json_t *run, json_t *steps) {
  json_t *names = json_object_get(run, "step_names");
  if (!names) return 0;   /* a run from before schema 4: every step has its row */
  const char *id = json_string_value(json_object_get(run, "id"));
  json_t *created = json_object_get(run, "created");
  size_t i;
  json_t *name;
  int rc = json_is_array(names) && id ? 0 : -1;
  json_array_foreach(names, i, name) {
    if (rc != 0) break;
    json_t *row = json_array_get(steps, i);
    if (row && json_integer_value(json_object_get(row, "idx")) == (json_int_t)i) continue;
    const char *n = json_string_value(name);
    if (!n) { rc = -1; break; }
    json_t *p = json_pack("{s:I, s:s, s:s, s:i, s:i, s:o, s:b, s:b}", "idx", (json_int_t)i,
                          "name", n, "status", "pending", "attempts", 0, "comp_attempts", 0,
                          "idempotency_key", json_sprintf("%s/%s", id, n), "custom_key", 0,
                          "slept", 0);
    if (!p || (created && json_object_set(p, "updated", created) != 0) ||
        json_array_insert_new(steps, i, p) != 0) {
      set_msg(s->err, sizeof s->err, "%s: read steps: out of memory", s->path);
      return -1;
    }
  }
  if (rc != 0) {
    set_msg(s->err, sizeof s->err, "%s: run %s: step_names is not a JSON array of names",
            s->path, id ? id : "?");
    return -1;
  }
  json_object_del(run, "step_names");
  return 0;
}

static int bind_code(sqlite3_stmt *q, int i, int code) {
  return code >= 0 ? sqlite3_bind_int(q, i, code) : sqlite3_bind_null(q, i);
}

/* A step's row says what its last attempt came to; an attempt begun since is only in history
 * (the `-> running` row written with it), so that a step costs one row write, not two. Those
 * steps read as running, with that attempt's number and time. */
static int show_in_flight(mend_store *s, const char *id, json_t *steps) {
  size_t n = json_array_size(steps);
  /* per step, its last transition in history: 1 + the attempt if it was to running, else 0 */
  struct last { long long attempt_1; double at; } *last = calloc(n ? n : 1, sizeof *last);
  if (!last) {
    set_msg(s->err, sizeof s->err, "%s: read steps: out of memory", s->path);
    return -1;
  }
  sqlite3_stmt *q = s->q[Q_IN_FLIGHT];
  int rc = bind_text(q, 1, id);
  if (rc == SQLITE_OK) rc = bind_code(q, 2, s->code_step);
  if (rc == SQLITE_OK) rc = bind_code(q, 3, s->code_running);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  for (; rc == SQLITE_ROW; rc = sqlite3_step(q)) {
    const char *name = (const char *)sqlite3_column_text(q, 0);
    for (size_t i = 0; name && i < n; i++) {
      const char *step = json_string_value(json_object_get(json_array_get(steps, i), "name"));
      if (!step || strcmp(step, name) != 0) continue;
      last[i].attempt_1 = sqlite3_column_int(q, 1) ? 1 + sqlite3_column_int64(q, 2) : 0;
      last[i].at = sqlite3_column_double(q, 3);
      break;
    }
  }
  if (rc != SQLITE_DONE) sql_err(s, "read attempts in flight");
  finish(q);
  for (size_t i = 0; rc == SQLITE_DONE && i < n; i++) {
    if (!last[i].attempt_1) continue;
    json_t *st = json_array_get(steps, i);
    /* no due time: the wait the row tells of is over (as the engine has it, and as the row
     * said when it was written at each attempt, before schema 6) */
    json_object_del(st, "due");
    if (json_object_set_new(st, "status", json_string("running")) != 0 ||
        json_object_set_new(st, "attempts", json_integer(last[i].attempt_1 - 1)) != 0 ||
        json_object_set_new(st, "updated", json_real(last[i].at)) != 0) {
      set_msg(s->err, sizeof s->err, "%s: read steps: out of memory", s->path);
      rc = SQLITE_NOMEM;
    }
  }
  free(last);
  return rc == SQLITE_DONE ? 0 : -1;
}

static json_t *read_run(mend_store *s, const char *id) {
  sqlite3_stmt *q = s->q[Q_RUN];
  int r = first_row(s, q, bind_text(q, 1, id), "read run");
  s->not_found = r == 0;
  if (r < 0) return NULL;
  if (r == 0) {
    set_msg(s->err, sizeof s->err, "no run %s", id ? id : "(null)");
    return NULL;
  }
  json_t *run = row_object(q);
  finish(q);
  if (!run) {
    set_msg(s->err, sizeof s->err, "%s: read run: out of memory", s->path);
    return NULL;
  }
  sqlite3_stmt *qs = s->q[Q_STEPS];
  json_t *steps = rows_array(s, qs, bind_text(qs, 1, id), "read steps");
  if (!steps || json_object_set_new(run, "steps", steps) != 0 || list_pending(s, run, steps) != 0) {
    json_decref(run);
    return NULL;
  }
  /* A finished run has no attempt in flight. */
  const char *status = json_string_value(json_object_get(run, "status"));
  if (status && (strcmp(status, "running") == 0 || strcmp(status, "compensating") == 0) &&
      show_in_flight(s, id, steps) != 0) {
    json_decref(run);
    return NULL;
  }
  return run;
}

static int step_read_txn(mend_store *s, int which) {
  sqlite3_stmt *q = s->q[which];
  int rc = sqlite3_step(q);
  if (rc != SQLITE_DONE) sql_err(s, "read run");
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? 0 : -1;
}

/* A run is read in three statements (its row, its steps, its history): without a batch open
 * they share one read transaction, so that a worker's commits in between cannot make a step
 * read as pending while a later one reads as running. */
json_t *mend_store_run(mend_store *s, const char *id) {
  s->not_found = 0;
  if (sync_point(s) != 0) return NULL;
  int own = sqlite3_get_autocommit(s->db);
  if (own && step_read_txn(s, Q_BEGIN_READ) != 0) return NULL;
  json_t *run = read_run(s, id);
  if (own && step_read_txn(s, Q_COMMIT) != 0) {
    json_decref(run);
    return NULL;
  }
  return run;
}

json_t *mend_store_history(mend_store *s, const char *id) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_HISTORY];
  return rows_array(s, q, bind_text(q, 1, id), "read history");
}

json_t *mend_store_dlq(mend_store *s) {
  if (sync_point(s) != 0) return NULL;
  return rows_array(s, s->q[Q_DLQ], SQLITE_OK, "read dlq");
}

json_t *mend_store_breakers(mend_store *s) {
  if (sync_point(s) != 0) return NULL;
  return rows_array(s, s->q[Q_BREAKERS], SQLITE_OK, "read breakers");
}

json_t *mend_store_runs(mend_store *s, const char *status, const char *workflow, int limit) {
  return mend_store_runs_where(s, status, workflow, -1, 0, limit);
}

json_t *mend_store_runs_where(mend_store *s, const char *status, const char *workflow,
                              double since, int attention_only, int limit) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_RUNS];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, status));
  BIND(bind_text(q, 2, workflow));
  BIND(sqlite3_bind_int(q, 3, limit > 0 ? limit : -1));
  BIND(bind_opt_real(q, 4, since));
  BIND(sqlite3_bind_int(q, 5, attention_only ? 1 : 0));
  return rows_array(s, q, rc, "read runs");
}

int mend_store_take(mend_store *s, const char *id, const char *owner, double lease_until) {
  if (sync_point(s) != 0 || batch_begin(s) != 0 || lease_at_least(s, owner, lease_until) != 0)
    return -1;
  sqlite3_stmt *q = s->q[Q_TAKE];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, id));
  BIND(bind_text(q, 2, owner));
  if (run_write(s, q, rc, "take run") != 0) return -1;
  ours_again(s, id);
  return 0;
}

int mend_store_set_unavailable(mend_store *s, const char *id, const char *why) {
  rec_begin(s, Q_SET_UNAVAILABLE);
  rec_text(s, id);
  rec_text(s, why);
  return rec_end(s);
}

int mend_store_version_number(mend_store *s, const mend_run_rec *r, long long *id) {
  sqlite3_int64 n;
  if (workflow_version(s, r, &n) != 0) return -1;
  *id = (long long)n;
  return 0;
}

int mend_store_move_run(mend_store *s, const char *id, long long version_id, int keep_steps) {
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_MOVE_RUN];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, id));
  BIND(sqlite3_bind_int64(q, 2, (sqlite3_int64)version_id));
  if (run_write(s, q, rc, "move a run to another version") != 0) return -1;
  q = s->q[Q_DROP_STEPS_FROM];
  rc = SQLITE_OK;
  BIND(bind_text(q, 1, id));
  BIND(sqlite3_bind_int(q, 2, keep_steps));
  return run_write(s, q, rc, "move a run to another version");
}

json_t *mend_store_workflows(mend_store *s, const char *workflow) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_WORKFLOWS];
  return rows_array(s, q, bind_text(q, 1, workflow), "read workflow versions");
}

int mend_store_dlq_remove(mend_store *s, const char *run_id) {
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_DLQ_REMOVE];
  return run_write(s, q, bind_text(q, 1, run_id), "remove from dlq");
}

int mend_store_request_cancel(mend_store *s, const char *run_id) {
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_REQUEST_CANCEL];
  return run_write(s, q, bind_text(q, 1, run_id), "request cancel");
}

json_t *mend_store_cancel_requests(mend_store *s, const char *owner) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_CANCEL_REQUESTS];
  json_t *rows = rows_array(s, q, bind_text(q, 1, owner), "read cancel requests");
  if (!rows) return NULL;
  json_t *ids = json_array();
  size_t i;
  json_t *row;
  json_array_foreach(rows, i, row) json_array_append(ids, json_object_get(row, "id"));
  json_decref(rows);
  return ids;
}

int mend_store_audit(mend_store *s, double at, const char *who, const char *op,
                     const char *target, const char *detail) {
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_AUDIT];
  int rc = SQLITE_OK;
  BIND(sqlite3_bind_double(q, 1, at));
  BIND(bind_text(q, 2, who));
  BIND(bind_text(q, 3, op));
  BIND(bind_text(q, 4, target));
  BIND(bind_text(q, 5, detail));
  return run_write(s, q, rc, "append audit");
}

/* ---- events ---------------------------------------------------------------------------- */

static int open_reader(mend_store *s);

int mend_store_send_event(mend_store *s, const char *run_id, const char *name,
                          const char *payload, const char *key, double sent) {
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_SEND_EVENT];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, run_id));
  BIND(bind_text(q, 2, name));
  BIND(bind_text(q, 3, payload));
  BIND(bind_text(q, 4, key));
  BIND(sqlite3_bind_double(q, 5, sent));
  if (run_write(s, q, rc, "send an event") != 0) return -1;
  return sqlite3_changes(s->db) == 0 ? 1 : 0;
}

int mend_store_next_event(mend_store *s, const char *run_id, const char *name,
                          long long *seq, char **payload, char **key) {
  *payload = *key = NULL;
  if (sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_NEXT_EVENT];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, run_id));
  BIND(bind_text(q, 2, name));
  int r = first_row(s, q, rc, "read a run's inbox");
  if (r <= 0) return r;
  int oom = 0;
  *seq = (long long)sqlite3_column_int64(q, 0);
  const char *p = (const char *)sqlite3_column_text(q, 1);
  *payload = copy_text(p ? p : "null", &oom);
  *key = copy_text((const char *)sqlite3_column_text(q, 2), &oom);
  finish(q);
  if (oom) {
    free(*payload);
    free(*key);
    *payload = *key = NULL;
    set_msg(s->err, sizeof s->err, "%s: read a run's inbox: out of memory", s->path);
    return -1;
  }
  return 1;
}

int mend_store_consume_event(mend_store *s, const char *run_id, long long seq,
                             const char *step, double at) {
  rec_begin(s, Q_CONSUME_EVENT);
  rec_text(s, run_id);
  rec_int(s, (sqlite3_int64)seq);
  rec_real(s, at);
  rec_text(s, step);
  return rec_end(s);
}

long long mend_store_last_event(mend_store *s) {
  if (sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_LAST_EVENT];
  int r = first_row(s, q, SQLITE_OK, "read the inbox");
  if (r <= 0) return r;
  long long seq = (long long)sqlite3_column_int64(q, 0);
  finish(q);
  return seq;
}

long long mend_store_events_after(mend_store *s, long long after, int limit,
                                  void (*fn)(void *ud, const char *run_id), void *ud) {
  static const char sql[] = "SELECT seq, run_id FROM inbox WHERE seq > ?1 ORDER BY seq LIMIT ?2";
  sqlite3_stmt *q;
  if (open_reader(s) == 0) {
    /* committed events only, and no wait for the writer thread: the look of every poll */
    if (!s->q_events_after && sqlite3_prepare_v3(s->reader, sql, -1, SQLITE_PREPARE_PERSISTENT,
                                                 &s->q_events_after, NULL) != SQLITE_OK) {
      set_msg(s->err, sizeof s->err, "%s: look for new events: %s", s->path,
              sqlite3_errmsg(s->reader));
      return -1;
    }
    q = s->q_events_after;
  } else {
    if (sync_point(s) != 0) return -1;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
      sql_err(s, "look for new events");
      return -1;
    }
  }
  int rc = SQLITE_OK;
  BIND(sqlite3_bind_int64(q, 1, (sqlite3_int64)after));
  BIND(sqlite3_bind_int(q, 2, limit));
  long long last = after;
  while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    last = (long long)sqlite3_column_int64(q, 0);
    fn(ud, (const char *)sqlite3_column_text(q, 1));
    rc = SQLITE_OK;
  }
  if (rc != SQLITE_DONE)
    set_msg(s->err, sizeof s->err, "%s: look for new events: %s", s->path,
            sqlite3_errmsg(q == s->q_events_after ? s->reader : s->db));
  if (q == s->q_events_after) sqlite3_reset(q);
  else sqlite3_finalize(q);
  return rc == SQLITE_DONE ? last : -1;
}

json_t *mend_store_inbox(mend_store *s, const char *run_id) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_INBOX];
  return rows_array(s, q, bind_text(q, 1, run_id), "read a run's inbox");
}

json_t *mend_store_audit_list(mend_store *s) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_AUDIT_LIST];
  return rows_array(s, q, SQLITE_OK, "read audit");
}

/* ---- pruning ---------------------------------------------------------------------------- */

/* The runs a prune takes: ended (succeeded, compensated, failed, resolved), last updated before
 * ?1, of status ?2 if given. Never running or compensating, and never needs_attention: a run in
 * the dead-letter queue waits for a person, who resolves it first. */
#define PRUNE_RUNS "SELECT id FROM runs WHERE status IN ('succeeded', 'compensated', 'failed', " \
                   "'resolved') AND updated < ?1 AND (?2 IS NULL OR status = ?2)"

/* Prunes are rare: their statements are prepared when used, not at open. Runs sql with the
 * prune's two parameters; with `counts`, adds each row's (name, count) to it, or, for a one
 * column row, sets counts[key]. */
static int prune_sql(mend_store *s, const char *sql, double before, const char *status,
                     json_t *counts, const char *key) {
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) {
    sql_err(s, "prune");
    return -1;
  }
  int rc = SQLITE_OK;
  if (sqlite3_bind_parameter_count(q) == 2) {
    rc = sqlite3_bind_double(q, 1, before);
    if (rc == SQLITE_OK) rc = bind_text(q, 2, status);
  }
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = step_busy_retry(s, q);
    if (rc != SQLITE_ROW) break;
    const char *name = sqlite3_column_count(q) == 2 ? (const char *)sqlite3_column_text(q, 0) : key;
    json_t *n = json_integer(sqlite3_column_int64(q, sqlite3_column_count(q) - 1));
    if (!name || !n || json_object_set_new(counts, name, n) != 0) rc = SQLITE_NOMEM;
  }
  if (rc != SQLITE_DONE) sql_err(s, "prune");
  sqlite3_finalize(q);
  return rc == SQLITE_DONE ? 0 : -1;
}

json_t *mend_store_prune(mend_store *s, double before, const char *status, int dry_run) {
  /* A transaction of its own: whatever this store recorded before is committed first. */
  if (mend_store_commit(s) != 0) return NULL;
  json_t *res = json_object(), *runs = json_object();
  if (!res || !runs || json_object_set(res, "runs", runs) != 0) {
    json_decref(res);
    json_decref(runs);
    set_msg(s->err, sizeof s->err, "%s: prune: out of memory", s->path);
    return NULL;
  }
  int failed =
      prune_sql(s, dry_run ? "BEGIN" : "BEGIN IMMEDIATE", 0, NULL, NULL, NULL) ||
      prune_sql(s, "SELECT status, count(*) FROM runs WHERE id IN (" PRUNE_RUNS ") GROUP BY status",
                before, status, runs, NULL) ||
      prune_sql(s, "SELECT count(*) FROM steps WHERE run_id IN (" PRUNE_RUNS ")", before, status,
                res, "steps") ||
      prune_sql(s, "SELECT count(*) FROM history WHERE run_id IN (" PRUNE_RUNS ")", before,
                status, res, "history") ||
      prune_sql(s, "SELECT count(*) FROM dlq WHERE run_id IN (" PRUNE_RUNS ")", before, status,
                res, "dlq");
  if (!failed && !dry_run)
    failed = prune_sql(s, "DELETE FROM dlq WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL, NULL) ||
             prune_sql(s, "DELETE FROM history WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL, NULL) ||
             prune_sql(s, "DELETE FROM steps WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL, NULL) ||
             prune_sql(s, "DELETE FROM inbox WHERE run_id IN (" PRUNE_RUNS ")", before, status, NULL, NULL) ||
             prune_sql(s, "DELETE FROM runs WHERE id IN (" PRUNE_RUNS ")", before, status, NULL, NULL);
  if (!failed) failed = prune_sql(s, "COMMIT", 0, NULL, NULL, NULL);
  json_decref(runs);
  if (failed) {
    if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    json_decref(res);
    return NULL;
  }
  return res;
}

/* ---- leases ----------------------------------------------------------------------------- */

void mend_store_set_worker(mend_store *s, const char *worker) {
  free(s->worker);
  s->worker = NULL;
  s->worker_id = 0;
  if (worker) {
    size_t n = strlen(worker) + 1;
    s->worker = malloc(n);
    if (s->worker) memcpy(s->worker, worker, n);
  }
}

/* Quick: a run nobody holds (runs_free), and a worker other than this one whose lease ran out
 * (its row goes once a claim took its runs), as MEND_CLAIMABLE_* bits. Thorough: any unfinished
 * run nobody holds by a live lease, which walks every run held (see mend_store_claimable). */
static const char *const claimable_sql[2] = {
  "SELECT EXISTS (SELECT 1 FROM runs WHERE owner IS NULL AND status IN ('running',"
  " 'compensating') AND unavailable IS NULL) + 2 * EXISTS (SELECT 1 FROM workers WHERE lease_until < ?2"
  " AND owner IS NOT ?1)",
  "SELECT 3 FROM runs WHERE status IN ('running', 'compensating') AND unavailable IS NULL"
  " AND (owner IS NULL"
  " OR (owner IS NOT ?1 AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.owner ="
  " runs.owner AND w.lease_until >= ?2))) ORDER BY created DESC LIMIT 1",
};

/* The read-only connection, opened at its first use: 0, or -1 (in memory, or it failed). */
static int open_reader(mend_store *s) {
  if (!s->checkpointer) return -1;   /* in memory: no other connection sees it */
  if (s->reader) return 0;
  if (sqlite3_open_v2(s->path, &s->reader, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL)
      != SQLITE_OK) {
    sqlite3_close_v2(s->reader);
    s->reader = NULL;
    return -1;
  }
  sqlite3_busy_timeout(s->reader, BUSY_TIMEOUT_MS);
  return 0;
}

int mend_store_claimable(mend_store *s, const char *owner, double now, int thorough) {
  const int anything = MEND_CLAIMABLE_FREE | MEND_CLAIMABLE_GONE;
  /* in memory, or no reader: only the claim itself can look (and say what is wrong) */
  if (open_reader(s) != 0) return anything;
  sqlite3_stmt **q = &s->q_claimable[thorough ? 1 : 0];
  if (!*q && sqlite3_prepare_v3(s->reader, claimable_sql[thorough ? 1 : 0], -1,
                                SQLITE_PREPARE_PERSISTENT, q, NULL) != SQLITE_OK)
    return anything;
  int rc = SQLITE_OK;
  BIND(bind_text(*q, 1, owner));
  BIND(sqlite3_bind_double(*q, 2, now));
  if (rc == SQLITE_OK) rc = sqlite3_step(*q);
  int found = rc == SQLITE_ROW ? sqlite3_column_int(*q, 0) : rc == SQLITE_DONE ? 0 : anything;
  sqlite3_reset(*q);
  return found;
}

json_t *mend_store_claim(mend_store *s, const char *owner, double now, double lease_until,
                         int limit, int how) {
  if (sync_point(s) != 0 || batch_begin(s) != 0 || lease_at_least(s, owner, lease_until) != 0)
    return NULL;
  int newest = how & MEND_CLAIM_NEWEST, free_only = how & MEND_CLAIM_FREE;
  int unavailable = (how & MEND_CLAIM_UNAVAILABLE) != 0;
  sqlite3_stmt *q = s->q[free_only ? (newest ? Q_CLAIM_FREE_NEWEST : Q_CLAIM_FREE_OLDEST)
                                   : (newest ? Q_CLAIM_NEWEST : Q_CLAIM_OLDEST)];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, owner));
  if (free_only) {
    BIND(sqlite3_bind_int(q, 2, limit));
    BIND(sqlite3_bind_int(q, 3, unavailable));
  } else {
    BIND(sqlite3_bind_double(q, 2, now));
    BIND(sqlite3_bind_int(q, 3, limit));
    BIND(sqlite3_bind_int(q, 4, unavailable));
  }
  json_t *ids = json_array();
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) continue;
    const char *id = (const char *)sqlite3_column_text(q, 0);
    json_array_append_new(ids, json_string(id));
    ours_again(s, id);
  }
  if (rc != SQLITE_DONE) {
    sql_err(s, "claim runs");
    finish(q);
    s->batch_failed = 1;
    json_decref(ids);
    return NULL;
  }
  finish(q);
  /* It took all there was, in this transaction: a worker whose lease ran out (never this one)
   * holds no run now, and its row would only keep mend_store_claimable looking. A worker that
   * was only stalled writes its row again with its next batch (fence_at_begin). */
  if (!free_only && (int)json_array_size(ids) < limit) {
    q = s->q[Q_FORGET_GONE];
    rc = bind_text(q, 1, owner);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(q, 2, now);
    if (run_write(s, q, rc, "forget workers gone") != 0) {
      json_decref(ids);
      return NULL;
    }
  }
  return ids;
}

/* Recorded like a transition, in the order of the writes around it. */
int mend_store_renew(mend_store *s, const char *owner, double lease_until) {
  rec_begin(s, Q_RENEW);
  rec_text(s, owner);
  rec_real(s, lease_until);
  return rec_end(s);
}

int mend_store_release(mend_store *s, const char *id, const char *owner) {
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_RELEASE];
  int rc = SQLITE_OK;
  BIND(bind_text(q, 1, id));
  BIND(bind_text(q, 2, owner));
  if (run_write(s, q, rc, "release lease") != 0) return -1;
  /* Given back, the run is another worker's to take: nothing more this store records for it is
   * written, unless it takes the run again (ours_again). */
  return mend_idset_add(&s->lost, id, strlen(id)) < 0 ? fence_oom(s) : 0;
}

int mend_store_owner(mend_store *s, const char *id, char *owner_out, int owner_len,
                     double *lease_until) {
  if (sync_point(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_OWNER];
  int r = first_row(s, q, bind_text(q, 1, id), "read lease");
  if (r != 1) return r;
  const char *o = (const char *)sqlite3_column_text(q, 0);
  set_msg(owner_out, owner_len, "%s", o ? o : "");
  *lease_until = sqlite3_column_type(q, 1) == SQLITE_NULL ? -1 : sqlite3_column_double(q, 1);
  finish(q);
  return 1;
}

json_t *mend_store_lease_holders(mend_store *s, double now) {
  if (sync_point(s) != 0) return NULL;
  sqlite3_stmt *q = s->q[Q_HOLDERS];
  return strings_of(s, q, sqlite3_bind_double(q, 1, now), "read lease holders");
}

int mend_store_release_owner(mend_store *s, const char *owner) {
  if (sync_point(s) != 0 || batch_begin(s) != 0) return -1;
  sqlite3_stmt *q = s->q[Q_RELEASE_OWNER];
  if (run_write(s, q, bind_text(q, 1, owner), "release the runs of a dead worker") != 0) return -1;
  q = s->q[Q_FORGET_WORKER];
  return run_write(s, q, bind_text(q, 1, owner), "forget a dead worker");
}
