-- Webhook attempts under faults (SPEC §12.1). `webhook_deliveries.attempts` now counts attempts
-- *taken*: the atomic take increments it and that number belongs to one attempt only. An attempt
-- records itself while it still holds the delivery; one whose hold runs out unrecorded (its worker
-- stopped) gets an "interrupted" row from the next take, which needs the attempt's start.
-- A manual retry never clears a live hold: it sets `retry_requested`, and the attempt in flight
-- leaves the delivery due now when it records.
ALTER TABLE webhook_deliveries ADD COLUMN attempt_started_at INTEGER;
ALTER TABLE webhook_deliveries ADD COLUMN retry_requested INTEGER NOT NULL DEFAULT 0;
