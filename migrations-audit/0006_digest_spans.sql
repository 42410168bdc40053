-- SPEC §23: a digest covers a span — one period, or a run of periods without objects (an idle
-- project costs nothing per period). Digests written before have one period each: each ends where
-- the next begins, the newest an hour (the default period) after it starts.
ALTER TABLE audit_digests ADD COLUMN period_end INTEGER;
UPDATE audit_digests SET period_end = coalesce(
  (SELECT min(d.period_start) FROM audit_digests d
    WHERE d.project_id = audit_digests.project_id AND d.period_start > audit_digests.period_start),
  period_start + 3600000);

-- SPEC §23: the projects that have archived objects no digest lists, and since when (the first
-- row time of the oldest): the digest job's work list, so idle projects cost it nothing. The
-- roll-up adds a project with each object it archives; the digest job sets `since` to the oldest
-- object its chain head still waits to list, or deletes the row when there is none.
CREATE TABLE digest_due (
  project_id TEXT PRIMARY KEY,
  since      INTEGER NOT NULL
) STRICT;
CREATE INDEX digest_due_by_since ON digest_due (since);
INSERT INTO digest_due (project_id, since)
  SELECT project_id, min(first_ts) FROM audit_objects
  WHERE digest_period IS NULL AND project_id IS NOT NULL GROUP BY project_id;
-- A project whose digests were all made before (nothing left to digest) is due once too, so its
-- chain starts in its head from its last digest now, not at the next object it archives.
INSERT OR IGNORE INTO digest_due (project_id, since)
  SELECT project_id, min(period_start) FROM audit_digests GROUP BY project_id;
