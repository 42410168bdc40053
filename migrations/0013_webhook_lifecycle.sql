-- Lifecycles without downtime (SPEC §17), webhooks. A rotation keeps the replaced secret (sealed,
-- like `secret`) and signs with both until `previous_secret_until`. A recovery makes failed
-- deliveries pending again and starts their schedule over: `schedule_from` is the number of
-- attempts taken before it, so the step after an attempt is the one of `attempts - schedule_from`.
ALTER TABLE webhooks ADD COLUMN previous_secret TEXT;
ALTER TABLE webhooks ADD COLUMN previous_secret_until INTEGER;   -- Unix ms
ALTER TABLE webhook_deliveries ADD COLUMN schedule_from INTEGER NOT NULL DEFAULT 0;
-- A recovery finds a subscription's failed deliveries by creation time.
CREATE INDEX deliveries_failed_by_webhook ON webhook_deliveries (webhook_id, created_at) WHERE status = 'failed';
