-- When the minute sweep last re-queued a delivery: while a delivery's own message is still being
-- retried (D1 refuses it), the sweep re-queues it at most once per 10 minutes, not every minute.
ALTER TABLE webhook_deliveries ADD COLUMN swept_at INTEGER;
