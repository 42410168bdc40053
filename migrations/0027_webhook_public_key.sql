-- SPEC §25: a subscription signing with Standard Webhooks `v1a` (Ed25519) notes its public key
-- (`whpk_…`, not secret); NULL signs with `v1` (HMAC). Its private key is the sealed `secret`, as a
-- v1 secret is. What the API shows is always the key the sealed secret makes, never this column's
-- word alone (a D1 writer without WEBHOOK_SECRETS_KEY could change it): it is for operators' SQL.
ALTER TABLE webhooks ADD COLUMN public_key TEXT;
