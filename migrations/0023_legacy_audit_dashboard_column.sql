-- Rows an older version kept here (before AUDIT_DB) are moved with the audit log's columns, which
-- since SPEC §21 include `dashboard` (a dashboard read); none of these rows was one.
ALTER TABLE audit_log ADD COLUMN dashboard INTEGER NOT NULL DEFAULT 0;
