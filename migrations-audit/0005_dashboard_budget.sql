-- The owner dashboard's reads are counted under their own budget (`Gatehouse-Budget: dashboard`);
-- their rows say so, and the log can leave them out (`dashboard=false`).
ALTER TABLE audit_log ADD COLUMN dashboard INTEGER NOT NULL DEFAULT 0;
