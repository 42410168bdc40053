-- SPEC §25: a delivery carries the W3C `traceparent` of the request that caused it (none for the
-- gateway's own events, and for deliveries written before): about 55 bytes a delivery, gone with it.
ALTER TABLE webhook_deliveries ADD COLUMN traceparent TEXT;
