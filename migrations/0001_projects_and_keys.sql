-- Projects and their API keys (SPEC §2). Keys are stored only as HMAC-SHA256(pepper, key).
CREATE TABLE projects (
  id          TEXT PRIMARY KEY,
  name        TEXT NOT NULL,
  created_at  INTEGER NOT NULL            -- Unix ms
) STRICT;

CREATE TABLE api_keys (
  id                     TEXT PRIMARY KEY,
  project_id             TEXT NOT NULL REFERENCES projects(id),
  type                   TEXT NOT NULL CHECK (type IN ('owner', 'server', 'browser', 'cicd')),
  name                   TEXT,
  plan                   TEXT NOT NULL,
  rate_limit_per_minute  INTEGER CHECK (rate_limit_per_minute > 0),
  key_hash               TEXT NOT NULL UNIQUE,
  prefix                 TEXT NOT NULL,
  created_at             INTEGER NOT NULL,   -- Unix ms
  revoked_at             INTEGER             -- Unix ms; NULL while active
) STRICT;

-- Listing a project's keys newest first, with a keyset cursor on (created_at, id).
CREATE INDEX api_keys_by_project ON api_keys (project_id, created_at DESC, id DESC);
