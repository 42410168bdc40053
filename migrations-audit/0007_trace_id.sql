-- SPEC §25: each request's W3C trace id (the client's `traceparent`'s, or one the gateway started),
-- also a filter of GET /public/v1/logs (trace_id=). No index: like idempotency_key, the filter is
-- checked on the project's rows in time order; 32 bytes a row.
ALTER TABLE audit_log ADD COLUMN trace_id TEXT;
