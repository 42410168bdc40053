-- Origin events sent with an Idempotency-Key (SPEC §15, §19): the event id derives from the key,
-- and the fingerprint of the request that first named it is kept, so the same key with another
-- body is 409 IDEMPOTENCY_KEY_REUSED instead of the first event's id. Events without a key have
-- no row.
CREATE TABLE IF NOT EXISTS origin_events (
  project_id TEXT NOT NULL,
  event_id   TEXT NOT NULL,
  request    TEXT NOT NULL,   -- hex SHA-256 of method, path and the body's normalized form
  created_at INTEGER NOT NULL, -- Unix ms
  PRIMARY KEY (project_id, event_id)
) WITHOUT ROWID;
