-- The audit log's own database (binding AUDIT_DB, SPEC §18), apart from keys and resources in DB,
-- so a full log can never stop the API.

-- The hot tier: rows of the last AUDIT_HOT_SECONDS (and any the roll-up has not reached yet).
-- The queue consumer inserts with INSERT OR IGNORE on request_id; `counted` is 0 until the same
-- transaction has added the row to audit_daily, so a redelivered batch counts nothing twice.
CREATE TABLE audit_log (
  request_id            TEXT PRIMARY KEY,        -- UUIDv7: its first 48 bits are ts
  ts                    INTEGER NOT NULL,        -- Unix ms
  project_id            TEXT,                    -- NULL: no project could be named
  key_id                TEXT,
  key_prefix            TEXT,
  method                TEXT NOT NULL,
  path                  TEXT NOT NULL,           -- with the query, secret values REDACTED, ≤ 2 KiB
  route                 TEXT,
  status                INTEGER NOT NULL,
  response_bytes        INTEGER NOT NULL,
  response_time_ms      INTEGER NOT NULL,
  ip                    TEXT,
  user_agent            TEXT,
  idempotency_key       TEXT,
  replayed              INTEGER NOT NULL,
  original_request_id   TEXT,
  rate_limit_remaining  INTEGER,
  error_code            TEXT,
  counted               INTEGER NOT NULL DEFAULT 0
) STRICT;

-- Newest-first pages of a project, keyset on (ts, request_id); every filter narrows this scan.
CREATE INDEX audit_by_project_time ON audit_log (project_id, ts DESC, request_id DESC);
-- The roll-up finds the oldest rows by time alone.
CREATE INDEX audit_by_time ON audit_log (ts);
-- Rows not yet in the aggregates (only those of the batch being inserted).
CREATE INDEX audit_uncounted ON audit_log (counted) WHERE counted = 0;

-- The cold tier's index: one summary per R2 object (audit/{project}/{day}/{first ts}-{first id}),
-- written in the transaction that deletes the object's rows from audit_log.
CREATE TABLE audit_objects (
  key          TEXT PRIMARY KEY,
  project_id   TEXT,
  first_ts     INTEGER NOT NULL,
  first_id     TEXT NOT NULL,
  last_ts      INTEGER NOT NULL,
  last_id      TEXT NOT NULL,
  rows         INTEGER NOT NULL,
  summary      TEXT NOT NULL            -- JSON: statuses per class, methods, key ids, idempotent
) STRICT;
CREATE INDEX audit_objects_by_project ON audit_objects (project_id, last_ts DESC, last_id DESC);

-- Statistics (SPEC §9 /keys/{id}/stats) from aggregates kept as rows arrive: O(days), not O(rows).
CREATE TABLE audit_daily (
  project_id     TEXT NOT NULL,
  key_id         TEXT NOT NULL,
  day            TEXT NOT NULL,         -- YYYY-MM-DD (UTC)
  method         TEXT NOT NULL,
  route          TEXT NOT NULL,         -- the route template, or the path when none matched
  total          INTEGER NOT NULL,
  client_errors  INTEGER NOT NULL,
  server_errors  INTEGER NOT NULL,
  PRIMARY KEY (project_id, key_id, day, method, route)
) STRICT, WITHOUT ROWID;
