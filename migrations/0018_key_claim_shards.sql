-- SPEC §20: a key's idempotency claims spread over its guard and claim objects, by the
-- Idempotency-Key. How many is fixed when the key is made (CLAIM_SHARDS then), so the same key
-- always finds a claim in the same object. Every key made before this keeps its claims in its
-- guard (1).
ALTER TABLE api_keys ADD COLUMN claim_shards INTEGER NOT NULL DEFAULT 1;
