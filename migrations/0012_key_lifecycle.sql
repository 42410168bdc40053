-- Lifecycles without downtime (SPEC §17), keys: an expiry, and rolls with a grace period.
-- `expires_at` is when the key is refused from (set by the owner, or the end of a roll's grace);
-- a rolled key points to its replacement (`rolled_to`, `rolled_at`), the replacement to it
-- (`rolled_from`). The key's guard decides on them per request from the record it holds.
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;   -- Unix ms; NULL: never
ALTER TABLE api_keys ADD COLUMN rolled_from TEXT;
ALTER TABLE api_keys ADD COLUMN rolled_at INTEGER;    -- Unix ms
ALTER TABLE api_keys ADD COLUMN rolled_to TEXT;
