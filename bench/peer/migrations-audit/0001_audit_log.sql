-- One row per request, written by the queue consumer in one batch per message batch.
CREATE TABLE audit_log (
  request_id        TEXT PRIMARY KEY,
  ts                INTEGER NOT NULL,
  project_id        TEXT,
  key_id            TEXT,
  method            TEXT NOT NULL,
  path              TEXT NOT NULL,
  status            INTEGER NOT NULL,
  response_time_ms  INTEGER NOT NULL,
  idempotency_key   TEXT,
  replayed          INTEGER NOT NULL
) STRICT;
CREATE INDEX audit_by_project_time ON audit_log (project_id, ts DESC, request_id DESC);
