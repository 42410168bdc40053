-- `gatehouse listen` (SPEC §21): a `cli` subscription has no receiver URL (its `url` column holds
-- `cli:listen`); a listener pulls its deliveries. `listener_until` is until when the last pull
-- counts it as connected (Unix ms): meanwhile only the listener takes the subscription's
-- deliveries, and afterwards they are attempted on the normal schedule (and fail: no listener).
ALTER TABLE webhooks ADD COLUMN listener_until INTEGER;
-- A listener finds its subscription's due deliveries, oldest first.
CREATE INDEX deliveries_pending_by_webhook ON webhook_deliveries (webhook_id, created_at)
  WHERE status = 'pending';
