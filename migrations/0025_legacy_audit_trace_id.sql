-- Rows an older version kept here (before AUDIT_DB) are moved with the audit log's columns, which
-- since SPEC §25 include `trace_id`; these rows have none.
ALTER TABLE audit_log ADD COLUMN trace_id TEXT;
