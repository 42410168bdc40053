-- Ingested events, identity links and session-replay chunks (SPEC §7).
-- Each is unique on what makes it the same: the queue consumer inserts with INSERT OR IGNORE,
-- so a redelivered message never adds a row.
CREATE TABLE events (
  project_id    TEXT NOT NULL,
  key_type      TEXT NOT NULL CHECK (key_type IN ('server', 'browser')),
  event_id      TEXT NOT NULL,
  event         TEXT NOT NULL,
  anonymous_id  TEXT,
  user_id       TEXT,
  timestamp     TEXT,                   -- as the client sent it (JSON)
  properties    TEXT NOT NULL,          -- JSON object
  received_at   INTEGER NOT NULL,
  generated_id  INTEGER NOT NULL,       -- 1: the server made the id
  PRIMARY KEY (project_id, key_type, event_id)
) STRICT;
CREATE INDEX events_by_time ON events (project_id, received_at);

CREATE TABLE identity_links (
  project_id    TEXT NOT NULL,
  anonymous_id  TEXT NOT NULL,
  user_id       TEXT NOT NULL,
  linked_at     INTEGER NOT NULL,
  PRIMARY KEY (project_id, anonymous_id, user_id)
) STRICT;

CREATE TABLE replay_chunks (
  project_id   TEXT NOT NULL,
  session_id   TEXT NOT NULL,
  chunk        INTEGER NOT NULL,
  data         TEXT NOT NULL,           -- JSON
  received_at  INTEGER NOT NULL,
  PRIMARY KEY (project_id, session_id, chunk)
) STRICT;
