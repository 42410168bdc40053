-- The resource API of SPEC §6 and the release markers of SPEC §8. Every row belongs to a project.
CREATE TABLE contacts (
  id           TEXT PRIMARY KEY,
  project_id   TEXT NOT NULL REFERENCES projects(id),
  name         TEXT,
  phone        TEXT,
  email        TEXT,
  external_id  TEXT,
  created_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX contacts_by_project ON contacts (project_id, created_at DESC, id DESC);

CREATE TABLE messages (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  contact_id  TEXT NOT NULL REFERENCES contacts(id),
  text        TEXT NOT NULL,
  status      TEXT NOT NULL,
  created_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX messages_by_contact ON messages (contact_id, created_at);

CREATE TABLE scenarios (
  id          TEXT PRIMARY KEY,
  project_id  TEXT NOT NULL REFERENCES projects(id),
  name        TEXT NOT NULL,
  created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE scenario_runs (
  id           TEXT PRIMARY KEY,
  project_id   TEXT NOT NULL REFERENCES projects(id),
  scenario_id  TEXT NOT NULL REFERENCES scenarios(id),
  contact_id   TEXT NOT NULL REFERENCES contacts(id),
  variables    TEXT NOT NULL,           -- JSON object
  status       TEXT NOT NULL,
  created_at   INTEGER NOT NULL
) STRICT;

CREATE TABLE release_markers (
  id           TEXT PRIMARY KEY,
  project_id   TEXT NOT NULL REFERENCES projects(id),
  version      TEXT NOT NULL,
  ts           TEXT NOT NULL,           -- as the client sent it (JSON number or string)
  environment  TEXT,
  commit_sha   TEXT,
  created_at   INTEGER NOT NULL
) STRICT;
CREATE INDEX release_markers_by_project ON release_markers (project_id, created_at DESC);
