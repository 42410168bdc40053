-- Dead letters (SPEC §12.1): queue messages a consumer gave up on, kept for the operator, who
-- lists them (GET /admin/v1/dead-letters) and re-drives them (POST /admin/v1/dead-letters/redrive).
-- The dead-letter queues' consumer inserts with INSERT OR IGNORE on the message id, so a letter
-- delivered twice is kept once.
CREATE TABLE dead_letters (
  id               TEXT PRIMARY KEY,     -- the queue message id it arrived with
  queue            TEXT NOT NULL,        -- the queue it came from, and is re-driven to
  body             TEXT NOT NULL,        -- the message body as sent
  first_failed_at  INTEGER NOT NULL,     -- Unix ms
  dead_at          INTEGER NOT NULL,     -- when it was kept here
  last_error       TEXT,
  attempts         INTEGER NOT NULL,     -- failures the consumer counted (0: none could be counted)
  status           TEXT NOT NULL DEFAULT 'dead' CHECK (status IN ('dead', 'redriven')),
  redriven_at      INTEGER
) STRICT;
CREATE INDEX dead_letters_newest ON dead_letters (dead_at DESC, id DESC);
CREATE INDEX dead_letters_by_queue ON dead_letters (queue, dead_at DESC, id DESC);
CREATE INDEX dead_letters_waiting ON dead_letters (status, dead_at, id);

-- Failures the consumers count before a message becomes a dead letter: the retry delay doubles
-- with the count, and the dead letter takes its first failure and last error from here (the
-- dead-letter queue carries only the body). A row goes when its letter is kept, or after 7 days.
CREATE TABLE queue_failures (
  message_id       TEXT PRIMARY KEY,
  queue            TEXT NOT NULL,
  body_digest      TEXT NOT NULL,        -- hex SHA-256 of the body
  first_failed_at  INTEGER NOT NULL,
  last_failed_at   INTEGER NOT NULL,
  last_error       TEXT NOT NULL,
  failures         INTEGER NOT NULL
) STRICT;
CREATE INDEX queue_failures_by_body ON queue_failures (queue, body_digest);
CREATE INDEX queue_failures_by_age ON queue_failures (last_failed_at);
