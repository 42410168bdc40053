-- Response times in the daily aggregates (issue 34: the dashboard's p50/p95/p99 over time, per
-- route and per project, without a scan of the rows): requests per bucket, l0 < 10 ms, l1 < 25,
-- l2 < 50, l3 < 100, l4 < 250, l5 < 500, l6 < 1 s, l7 < 2.5 s, l8 < 5 s, l9 the rest. Rows counted
-- before this are in no bucket.
ALTER TABLE audit_daily ADD COLUMN l0 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l1 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l2 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l3 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l4 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l5 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l6 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l7 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l8 INTEGER NOT NULL DEFAULT 0;
ALTER TABLE audit_daily ADD COLUMN l9 INTEGER NOT NULL DEFAULT 0;
