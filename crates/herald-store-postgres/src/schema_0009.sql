-- herald's cluster schema, version 9: operator events by the account they are about
-- (docs/operations.md, "Purging an account"). An event of the reserved account `_operator`
-- (`delivery.failed`, `endpoint.failing`, ...) names the account it is about in its payload's
-- `data.account_id`; `about_account` holds it, so an account's purge finds and deletes them
-- with their deliveries. A trigger fills it on every insert (ingest, restore, `herald copy`),
-- and the rows already there get it here.
ALTER TABLE events ADD COLUMN about_account text;

-- The account an operator event's payload names; NULL for a payload that is not such JSON.
CREATE FUNCTION herald_about_account(payload bytea) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN convert_from(payload, 'UTF8')::jsonb -> 'data' ->> 'account_id';
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;

CREATE FUNCTION herald_events_about() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.about_account := herald_about_account(NEW.payload);
    RETURN NEW;
END
$$;

CREATE TRIGGER events_about BEFORE INSERT ON events
    FOR EACH ROW WHEN (NEW.account_id = '_operator')
    EXECUTE FUNCTION herald_events_about();

UPDATE events SET about_account = herald_about_account(payload) WHERE account_id = '_operator';

CREATE INDEX events_about ON events (about_account) WHERE about_account IS NOT NULL;
