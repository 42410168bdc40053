-- Signed, chained digests of each project's archive (SPEC §22). An object is listed by exactly
-- one digest: `digest_period` is that digest's period start (Unix ms), NULL until one lists it.
ALTER TABLE audit_objects ADD COLUMN digest_period INTEGER;
CREATE INDEX audit_objects_undigested ON audit_objects (project_id, first_ts) WHERE digest_period IS NULL;

-- Every digest written: its R2 key, the SHA-256 of its bytes (the next digest links to it) and how
-- many objects it lists.
CREATE TABLE audit_digests (
  project_id    TEXT NOT NULL,
  period_start  INTEGER NOT NULL,
  key           TEXT NOT NULL,
  sha256        TEXT NOT NULL,
  objects       INTEGER NOT NULL,
  made_at       INTEGER NOT NULL,
  PRIMARY KEY (project_id, period_start)
) STRICT;
