-- herald's cluster schema, version 8: at most alerts.max_per_account_per_hour alert mails per
-- account (docs/operations.md, "Failure alerts"). Each account's count of mails in the current
-- UTC clock hour (its start in milliseconds since the epoch), changed only in the transaction
-- that claims the endpoint's alert mark, by updates conditional on the values read. And an
-- alert mark belongs to its endpoint: a claim racing the endpoint's deletion or its account's
-- purge cannot write a mark for an endpoint that is gone.
CREATE TABLE alert_hours (
    account_id text    PRIMARY KEY,
    hour       bigint  NOT NULL,
    mails      integer NOT NULL
);

DELETE FROM alert_marks m WHERE NOT EXISTS (SELECT 1 FROM endpoints e WHERE e.id = m.endpoint_id);
ALTER TABLE alert_marks ADD CONSTRAINT alert_marks_endpoint
    FOREIGN KEY (endpoint_id) REFERENCES endpoints (id) ON DELETE CASCADE;
