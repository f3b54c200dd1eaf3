-- herald's cluster schema, version 10: an endpoint's secrets leave its record for a column of
-- their own, so they never count toward the endpoint's stored size (docs/api.md, `too_large`):
-- `record` holds every other field, `secrets` the signing secrets, newest first, as
-- `[{"value", "expires_at"}]`. Existing endpoints move theirs in this migration.
ALTER TABLE endpoints ADD COLUMN secrets jsonb NOT NULL DEFAULT '[]';
UPDATE endpoints
    SET secrets = coalesce(record -> 'secrets', '[]'::jsonb), record = record - 'secrets'
    WHERE record ? 'secrets';
