-- Identities (SPEC §20): who pays, above the key. An identity is a project's customer, user or
-- tenant (`external_id`, the integrator's own id for it, unique in the project); the keys that
-- belong to it (`api_keys.identity_id`) share its limits. `meta` is the owner's JSON object,
-- `limits` a LimitSpec as JSON ({"per_second":…,"per_minute":…,"per_hour":…,"per_day":…,
-- "monthly_quota":…}, each optional); NULL: none set.
CREATE TABLE identities (
  id           TEXT PRIMARY KEY,          -- idt_…
  project_id   TEXT NOT NULL REFERENCES projects(id),
  external_id  TEXT NOT NULL,
  meta         TEXT,                      -- a JSON object, at most 4 KiB
  limits       TEXT,                      -- LimitSpec JSON
  created_at   INTEGER NOT NULL,          -- Unix ms
  updated_at   INTEGER NOT NULL,          -- Unix ms
  UNIQUE (project_id, external_id)
) STRICT;

-- Listing a project's identities newest first, with a keyset cursor on (created_at, id).
CREATE INDEX identities_by_project ON identities (project_id, created_at DESC, id DESC);

-- A key's identity (NULL: none; deleting the identity sets it back to NULL) and its own windows
-- (LimitSpec JSON without monthly_quota, each at most its plan's; NULL: the plan's).
ALTER TABLE api_keys ADD COLUMN identity_id TEXT;
ALTER TABLE api_keys ADD COLUMN limits TEXT;
CREATE INDEX api_keys_by_identity ON api_keys (identity_id);
