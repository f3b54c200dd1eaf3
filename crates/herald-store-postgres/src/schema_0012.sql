-- herald's cluster schema, version 12: each endpoint's last successful attempt, kept with the
-- nodes' minutes flush (every few seconds), the newest of all nodes'. A row goes with its
-- endpoint's delete (its account's purge).
CREATE TABLE endpoint_successes (
    endpoint_id text   PRIMARY KEY,
    at          bigint NOT NULL
);
