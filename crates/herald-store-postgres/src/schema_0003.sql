-- herald's cluster schema, version 3: endpoints' rate limits (SPEC §15) hold across nodes.
-- A token bucket per rate-limited endpoint, taken with one conditional upsert: `tokens` as of
-- `at` (milliseconds), and whether the last take got one.
CREATE TABLE rate_buckets (
    endpoint_id text             PRIMARY KEY,
    tokens      double precision NOT NULL,
    at          bigint           NOT NULL,
    taken       boolean          NOT NULL
);
