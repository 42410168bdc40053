-- Pepper rotations that finish (SPEC §26). `pepper`: the id of the pepper `key_hash` is under
-- (8 hex characters of HMAC(pepper, "gatehouse/key-id"); NULL for a key made before this column,
-- counted as not under the current pepper until its next re-hash). `guard_hash`: the name of the
-- key's guard once a rotation re-hashed it (NULL: `key_hash` is its guard's name), so its windows,
-- claims and leases stay where they were. A guard loads its key by either column.
ALTER TABLE api_keys ADD COLUMN pepper TEXT;
ALTER TABLE api_keys ADD COLUMN guard_hash TEXT;
CREATE INDEX api_keys_by_guard_hash ON api_keys (guard_hash) WHERE guard_hash IS NOT NULL;
