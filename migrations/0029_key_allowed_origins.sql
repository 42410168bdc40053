-- SPEC §24: a browser key may list the origins whose pages may use it (a JSON list of origins
-- such as ["https://shop.example"]); NULL lets every origin. Read with the key by its guard.
-- It lives as long as its key row.
ALTER TABLE api_keys ADD COLUMN allowed_origins TEXT;
