-- SPEC §25: a subscription signing with Standard Webhooks `v1a` (Ed25519) keeps its public key
-- (`whpk_…`, not secret: shown on the subscription); NULL signs with `v1` (HMAC). Its private key
-- is the sealed `secret`, as a v1 secret is.
ALTER TABLE webhooks ADD COLUMN public_key TEXT;
