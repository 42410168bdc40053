-- Webhooks (SPEC §10): subscriptions, one delivery per matching subscription and event, and every
-- attempt. Deliveries are inserted in the same D1 batch as the resource that emits the event.
CREATE TABLE webhooks (
  id               TEXT PRIMARY KEY,
  project_id       TEXT NOT NULL REFERENCES projects(id),
  url              TEXT NOT NULL,
  events           TEXT NOT NULL,            -- JSON array of event types, or ["*"]
  secret           TEXT NOT NULL,            -- whsec_…; needed to sign every attempt
  status           TEXT NOT NULL CHECK (status IN ('active', 'disabled', 'deleted')),
  disabled_reason  TEXT,
  created_at       INTEGER NOT NULL
) STRICT;
CREATE INDEX webhooks_by_project ON webhooks (project_id, status, created_at DESC);

CREATE TABLE webhook_deliveries (
  id                  TEXT PRIMARY KEY,      -- also the webhook-id header: stable across retries
  project_id          TEXT NOT NULL,
  webhook_id          TEXT NOT NULL REFERENCES webhooks(id),
  event_id            TEXT NOT NULL,
  event               TEXT NOT NULL,
  payload             TEXT NOT NULL,         -- the exact body every attempt sends
  request_id          TEXT NOT NULL,         -- the API request that caused the event
  status              TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
  attempts            INTEGER NOT NULL,
  scheduled_at        INTEGER NOT NULL,      -- when the next attempt is due (Unix ms)
  locked_until        INTEGER,               -- an attempt in progress holds the delivery until then
  last_response_code  INTEGER,
  last_error          TEXT,
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL
) STRICT;
CREATE INDEX deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at DESC, id DESC);
CREATE INDEX deliveries_due ON webhook_deliveries (scheduled_at) WHERE status = 'pending';

CREATE TABLE webhook_attempts (
  delivery_id       TEXT NOT NULL REFERENCES webhook_deliveries(id),
  attempt           INTEGER NOT NULL,
  started_at        INTEGER NOT NULL,
  duration_ms       INTEGER NOT NULL,
  response_code     INTEGER,
  response_excerpt  TEXT,                    -- the first 1 KiB of the receiver's answer
  error             TEXT,
  next_retry_at     INTEGER,
  PRIMARY KEY (delivery_id, attempt)
) STRICT;
