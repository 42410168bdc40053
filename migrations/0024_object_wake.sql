-- SPEC §23: objects an earlier version wrote set their alarms decades ahead, so one nobody calls
-- any more never purges. The minute cron calls, once, each object the directory names that was
-- made before this migration ran (a key's guard and claim objects, each project's and identity's
-- authority); this row is where it stands. Objects made since follow this version's rules.
CREATE TABLE IF NOT EXISTS object_wake (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  state TEXT NOT NULL
);
INSERT OR IGNORE INTO object_wake (id, state)
  VALUES (1, json_object('list', 'keys', 'after', NULL, 'before', CAST(strftime('%s', 'now') AS INTEGER) * 1000));
