-- The audit digests (SPEC §22): the start of the next period to digest for each project (NULL:
-- the period of the project's creation).
ALTER TABLE projects ADD COLUMN digest_next INTEGER;
