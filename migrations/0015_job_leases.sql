-- SPEC §19: a cron job takes a lease before it runs, so two runs of one job never overlap (an
-- invocation that runs long, or a second scheduled event, finds the lease held and skips).
CREATE TABLE job_leases (
  job TEXT PRIMARY KEY,
  holder TEXT NOT NULL,
  until_ms INTEGER NOT NULL   -- Unix ms; the lease is free once this has passed
);
