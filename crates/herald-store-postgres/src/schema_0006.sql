-- herald's cluster schema, version 6: failure alerts (docs/operations.md, "Failure alerts").
-- An account's alert addresses beside its plan, and each endpoint's alert mark: when its last
-- "failing" mail went out (milliseconds since the epoch) and whether a failure mail waits for
-- its recovery mail. Nodes change a mark only by an update conditional on the values they read,
-- so of two nodes deciding one mail at once only one sends it.
ALTER TABLE accounts ADD COLUMN alert_emails text[] NOT NULL DEFAULT '{}';

CREATE TABLE alert_marks (
    endpoint_id text    PRIMARY KEY,
    failing_at  bigint,
    told        boolean NOT NULL
);
