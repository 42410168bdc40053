-- SPEC §24: the events table keeps EVENT_RETENTION_DAYS (default 30); the minute cron deletes the
-- oldest rows of every project in bounded batches, found by this index (about 30 bytes a row).
CREATE INDEX IF NOT EXISTS events_by_received_at ON events (received_at);
