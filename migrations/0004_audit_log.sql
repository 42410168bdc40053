-- The audit log (SPEC §9): one row per API request, never a body. The queue consumer inserts
-- with INSERT OR IGNORE on request_id, so a retried batch adds nothing.
CREATE TABLE audit_log (
  request_id            TEXT PRIMARY KEY,
  ts                    INTEGER NOT NULL,        -- Unix ms
  project_id            TEXT,                    -- NULL: no project could be named (unknown key)
  key_id                TEXT,
  key_prefix            TEXT,
  method                TEXT NOT NULL,
  path                  TEXT NOT NULL,           -- with the query, secret values REDACTED
  route                 TEXT,                    -- template, e.g. /public/v1/contacts/{id}
  status                INTEGER NOT NULL,
  response_bytes        INTEGER NOT NULL,
  response_time_ms      INTEGER NOT NULL,
  ip                    TEXT,
  user_agent            TEXT,
  idempotency_key       TEXT,
  replayed              INTEGER NOT NULL,
  original_request_id   TEXT,
  rate_limit_remaining  INTEGER,
  error_code            TEXT
) STRICT;

-- Newest-first pages of a project, keyset on (ts, request_id); every filter narrows this scan.
CREATE INDEX audit_by_project_time ON audit_log (project_id, ts DESC, request_id DESC);
-- Per-key pages and statistics.
CREATE INDEX audit_by_key_time ON audit_log (project_id, key_id, ts);
CREATE INDEX audit_by_idempotency_key ON audit_log (project_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Retention finds old rows by time alone.
CREATE INDEX audit_by_time ON audit_log (ts);
