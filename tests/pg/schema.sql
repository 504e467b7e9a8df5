-- schema.sql: the PostgreSQL tables as agreed for issue 20 (the lead's notes, "PostgreSQL
-- schema"), for test_pg_view to read and copy into where src/store/pg/pg_schema.c (pg-core) is
-- not there to create them. It must never differ from what pg_schema.c creates: when both are
-- on one branch, the test opens its database with mend_store_open and this file goes.
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
INSERT INTO meta VALUES ('schema_version', '6'), ('application', 'mend');
CREATE TABLE workflow_versions(id BIGSERIAL PRIMARY KEY, workflow TEXT NOT NULL, version TEXT,
  source TEXT, step_names TEXT, script TEXT, first_seen DOUBLE PRECISION,
  UNIQUE (workflow, version));
CREATE TABLE runs(id TEXT PRIMARY KEY, workflow TEXT NOT NULL, version TEXT, source TEXT,
  run_key TEXT UNIQUE, status TEXT NOT NULL, input TEXT, error TEXT,
  attention BIGINT NOT NULL DEFAULT 0, reason TEXT, owner TEXT, created DOUBLE PRECISION,
  updated DOUBLE PRECISION, step_names TEXT, workflow_version BIGINT, unavailable TEXT,
  cancel_requested BIGINT NOT NULL DEFAULT 0, fence BIGINT NOT NULL DEFAULT 0);
CREATE TABLE workers(owner TEXT PRIMARY KEY, lease_until TIMESTAMPTZ);
CREATE TABLE steps(run_id TEXT NOT NULL, idx BIGINT NOT NULL, name TEXT, status TEXT NOT NULL,
  attempts BIGINT NOT NULL DEFAULT 0, comp_attempts BIGINT NOT NULL DEFAULT 0, idem_key TEXT,
  custom_key BIGINT NOT NULL DEFAULT 0, result TEXT, error TEXT, due DOUBLE PRECISION,
  last_delay DOUBLE PRECISION, updated DOUBLE PRECISION, slept BIGINT NOT NULL DEFAULT 0,
  awaits TEXT, error_kind TEXT, error_severity BIGINT NOT NULL DEFAULT 0,
  error_stopped BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (run_id, idx));
CREATE TABLE history(run_id TEXT NOT NULL, seq BIGINT NOT NULL, step TEXT,
  at DOUBLE PRECISION, event TEXT NOT NULL, from_status TEXT, to_status TEXT, attempt BIGINT,
  error TEXT, delay DOUBLE PRECISION, detail TEXT, worker TEXT, error_kind TEXT,
  PRIMARY KEY (run_id, seq));
CREATE TABLE breakers(key TEXT PRIMARY KEY, state TEXT NOT NULL, failures BIGINT,
  successes BIGINT, opened_at DOUBLE PRECISION, open_until DOUBLE PRECISION,
  updated DOUBLE PRECISION);
CREATE TABLE dlq(run_id TEXT PRIMARY KEY, reason TEXT, step TEXT, error TEXT, detail TEXT,
  at DOUBLE PRECISION);
CREATE TABLE audit(seq BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION, who TEXT, op TEXT,
  target TEXT, detail TEXT);
CREATE TABLE inbox(seq BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, name TEXT NOT NULL,
  payload TEXT, key TEXT, sent DOUBLE PRECISION, consumed DOUBLE PRECISION, step TEXT,
  UNIQUE (run_id, key));
CREATE TABLE tokens(digest TEXT PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL,
  attempt BIGINT NOT NULL, made DOUBLE PRECISION, used DOUBLE PRECISION, outcome TEXT);
CREATE INDEX tokens_attempt ON tokens(run_id, step, attempt);
ALTER TABLE runs ADD COLUMN parent_run TEXT, ADD COLUMN parent_step TEXT;
CREATE INDEX runs_parent ON runs(parent_run) WHERE parent_run IS NOT NULL;
