-- SPEC §22: audit rows say which identity the key belonged to and whether the request bills.
-- Rows an older version kept here (before AUDIT_DB) are moved with the same columns; they bill nothing.
ALTER TABLE audit_log ADD COLUMN identity_id TEXT;
ALTER TABLE audit_log ADD COLUMN billable INTEGER NOT NULL DEFAULT 0;
