-- API keys are found by the SHA-256 of the secret; rate_limit is requests per minute.
CREATE TABLE api_keys (
  key_hash    TEXT PRIMARY KEY,
  id          TEXT NOT NULL UNIQUE,
  project_id  TEXT NOT NULL,
  type        TEXT NOT NULL,
  rate_limit  INTEGER NOT NULL,
  created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE contacts (
  id           TEXT PRIMARY KEY,
  project_id   TEXT NOT NULL,
  name         TEXT,
  phone        TEXT,
  email        TEXT,
  external_id  TEXT,
  created_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX contacts_by_project ON contacts (project_id, created_at DESC, id DESC);
