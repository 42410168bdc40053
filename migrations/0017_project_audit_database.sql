-- SPEC §20: the audit log spreads over several D1 databases (AUDIT_DB, AUDIT_DB_1, …). Each
-- project's rows live in one of them, chosen from its id when it is created and recorded here, so
-- adding a database later moves no project. Every project made before this lives in AUDIT_DB (0).
ALTER TABLE projects ADD COLUMN audit_db INTEGER NOT NULL DEFAULT 0;
