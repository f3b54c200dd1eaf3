-- herald's cluster schema, version 5: endpoints' attempts per minute over the last day, for the
-- pages' charts, added to by every node (each counts in memory and adds every few seconds).
-- `counts` is a JSON object of counts by status name; rows older than a day are trimmed.
CREATE TABLE endpoint_minutes (
    endpoint_id    text   NOT NULL,
    minute         bigint NOT NULL,
    counts         jsonb  NOT NULL,
    latency_sum_ms bigint NOT NULL,
    latency_max_ms bigint NOT NULL,
    PRIMARY KEY (endpoint_id, minute)
);
CREATE INDEX endpoint_minutes_minute ON endpoint_minutes (minute);
