-- SPEC §13: session-replay chunks are stored in R2 at replay/{project_id}/{session_id}/{chunk};
-- D1 keeps only this index row (no data), so a browser key cannot fill the shared database.
CREATE TABLE replay_chunk_index (
  project_id   TEXT NOT NULL,
  session_id   TEXT NOT NULL,
  chunk        INTEGER NOT NULL,
  bytes        INTEGER NOT NULL,         -- size of the stored JSON
  received_at  INTEGER NOT NULL,         -- Unix ms
  PRIMARY KEY (project_id, session_id, chunk)
) STRICT, WITHOUT ROWID;

-- Chunks received before the upgrade keep their data in replay_chunks (no new row is written
-- there) and are indexed here, so a resent old chunk is still answered as a duplicate.
INSERT INTO replay_chunk_index (project_id, session_id, chunk, bytes, received_at)
  SELECT project_id, session_id, chunk, length(CAST(data AS BLOB)), received_at FROM replay_chunks;
