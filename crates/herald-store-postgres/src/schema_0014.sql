-- herald's cluster schema, version 14: the charts keep sent attempts by latency bucket (a JSON
-- array of counts by bucket index, the buckets' bounds fixed in herald), and endpoints' hours
-- for the week's chart (`endpoint_hours`: each the sum of its minutes, added to by every node's
-- flush with its minutes, trimmed to the last week). Minutes recorded before keep no buckets
-- (a constant default: no table rewrite); the hours of the minutes kept (the last day) are
-- summed here, so the week's chart starts with the day the database has.
ALTER TABLE endpoint_minutes ADD COLUMN latency_buckets jsonb NOT NULL DEFAULT '[]';

CREATE TABLE endpoint_hours (
    endpoint_id     text   NOT NULL,
    hour            bigint NOT NULL,
    counts          jsonb  NOT NULL,
    latency_sum_ms  bigint NOT NULL,
    latency_max_ms  bigint NOT NULL,
    latency_buckets jsonb  NOT NULL DEFAULT '[]',
    PRIMARY KEY (endpoint_id, hour)
);
CREATE INDEX endpoint_hours_hour ON endpoint_hours (hour);

INSERT INTO endpoint_hours (endpoint_id, hour, counts, latency_sum_ms, latency_max_ms)
SELECT t.endpoint_id, t.hour, c.counts, t.sum_ms, t.max_ms
FROM (SELECT endpoint_id, minute - minute % 3600000 AS hour,
             sum(latency_sum_ms)::bigint AS sum_ms, max(latency_max_ms) AS max_ms
      FROM endpoint_minutes GROUP BY 1, 2) AS t
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_object_agg(k, n), '{}'::jsonb) AS counts FROM (
        SELECT e.k, sum(e.v::bigint) AS n
        FROM endpoint_minutes m, jsonb_each_text(m.counts) AS e(k, v)
        WHERE m.endpoint_id = t.endpoint_id AND m.minute - m.minute % 3600000 = t.hour
        GROUP BY e.k) AS s) AS c;
