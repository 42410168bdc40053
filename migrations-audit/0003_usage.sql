-- Usage for billing (SPEC §22). Each audit row says which identity its key belonged to and
-- whether it bills (decided by the key's plan when the request was answered).
ALTER TABLE audit_log ADD COLUMN identity_id TEXT;
ALTER TABLE audit_log ADD COLUMN billable INTEGER NOT NULL DEFAULT 0;

-- Billable requests per project, period (USAGE_PERIOD_SECONDS), key, identity and route, kept as
-- rows arrive: the transaction that inserts a row adds it here (a redelivered copy the roll-up
-- finds is taken back out). `exported` is what the usage export has sent of `requests`: a row
-- where they differ is a change not exported yet.
CREATE TABLE usage_counts (
  project_id    TEXT NOT NULL,
  period_start  INTEGER NOT NULL,          -- Unix ms
  key_id        TEXT NOT NULL,
  identity_id   TEXT NOT NULL,             -- '' when the key belonged to no identity
  route         TEXT NOT NULL,             -- 'METHOD template' (the path when no route matched)
  requests      INTEGER NOT NULL,
  exported      INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (project_id, period_start, key_id, identity_id, route)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_unexported ON usage_counts (period_start, project_id) WHERE requests <> exported;
-- Counts older than AUDIT_RETENTION_DAYS are pruned by period.
CREATE INDEX usage_counts_by_period ON usage_counts (period_start);

-- Each run of the export: a period's first (seq 0) and its adjustments. A run is taken in one
-- transaction with its records (the differences since the last run, per subject) and is sent
-- (object in R2, webhook event) before the period's next run may be taken.
CREATE TABLE usage_runs (
  project_id    TEXT NOT NULL,
  period_start  INTEGER NOT NULL,
  seq           INTEGER NOT NULL,
  period_ms     INTEGER NOT NULL,
  run_id        TEXT NOT NULL UNIQUE,
  made_at       INTEGER NOT NULL,
  sent_at       INTEGER,
  PRIMARY KEY (project_id, period_start, seq)
) STRICT;
CREATE INDEX usage_runs_unsent ON usage_runs (made_at) WHERE sent_at IS NULL;
CREATE INDEX usage_runs_by_period ON usage_runs (period_start);

CREATE TABLE usage_records (
  project_id    TEXT NOT NULL,
  period_start  INTEGER NOT NULL,
  seq           INTEGER NOT NULL,
  key_id        TEXT NOT NULL,
  identity_id   TEXT NOT NULL,
  value         INTEGER NOT NULL,          -- what the run adds (either sign in an adjustment)
  total         INTEGER NOT NULL,          -- the subject's count after the run
  previous_seq  INTEGER,                   -- the run whose record of the subject this one replaces
  PRIMARY KEY (project_id, period_start, seq, key_id, identity_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_records_by_period ON usage_records (period_start);

-- Reconciling a period finds its archived objects by time.
CREATE INDEX audit_objects_by_time ON audit_objects (last_ts);
