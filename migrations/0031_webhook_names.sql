-- SPEC §26: what its owner calls an endpoint (at most 200 characters, as a key's name; NULL: unnamed). It lives as
-- long as its subscription row.
ALTER TABLE webhooks ADD COLUMN name TEXT;
