-- SPEC §23: a project whose storage disagrees with its chain head (the newest digest in R2 is not
-- the one signed): its digests stop until it agrees again. One row per project while it lasts
-- (the digest job deletes it once the project has a digest again); `GET /admin/v1/audit/health`
-- lists them. The worker's log has every alert too, where no D1 writer reaches.
CREATE TABLE audit_alerts (
  project_id TEXT PRIMARY KEY,
  at         INTEGER NOT NULL,
  alert      TEXT NOT NULL
) STRICT;
