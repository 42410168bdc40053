-- A subscription gets one delivery per event: an idempotent request executed again (after a
-- failure whose write landed) names the same event, and its delivery insert is ignored.
CREATE UNIQUE INDEX IF NOT EXISTS webhook_deliveries_once_per_event ON webhook_deliveries (webhook_id, event_id);
