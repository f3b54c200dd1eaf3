-- herald's cluster schema, version 1 (SPEC §16). Applied by src/store/postgres/migrate.rs in one
-- transaction under an advisory lock. Conventions:
--   * ids minted by herald (events, deliveries) are ULIDs stored as 16 big-endian bytes, so
--     `ORDER BY id` is the order of time and a 16-byte key is what every index holds;
--   * times are milliseconds since the Unix epoch (bigint), as herald's clock gives them;
--   * strings the API defines (states, statuses) are stored as their SPEC strings.

-- Events: one row each, payload included (TOAST compresses the large ones).
CREATE TABLE events (
    id              bytea   PRIMARY KEY,
    account_id      text    NOT NULL,
    type            text    NOT NULL,
    received_at     bigint  NOT NULL,
    idempotency_key text,
    debounce_key    text,
    ordering_key    text,
    payload         bytea   NOT NULL
);
CREATE INDEX events_account ON events (account_id, id);

-- Deliveries: one per event and endpoint (or a single no_endpoint / not_entitled record).
-- `due_at` is when a node may next take the delivery: its due time while it waits, the end of
-- its lease while a node holds it (so a lease that lapses makes it due again by itself), NULL
-- once it ended. A node's claim stamps `leased_by` (the node) and `claim` (a token of that
-- claim); every write the attempt makes is fenced by the token. `lane` is the ordering lane
-- (endpoint and ordering key) of an ordered endpoint's delivery and `lane_seq` its place in
-- the lane: taken at insert while the ingest transaction holds the lane's advisory lock, so
-- within a lane it is the order of commits. Times come from the nodes'
-- clocks, which must agree (NTP) to well within the lease.
CREATE TABLE deliveries (
    id               bytea    PRIMARY KEY,
    event_id         bytea    NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint_id      text,
    account_id       text     NOT NULL,
    event_type       text     NOT NULL,
    state            text     NOT NULL,
    last_status      text,
    last_http_status integer,
    attempt_count    integer  NOT NULL DEFAULT 0,
    due_at           bigint,
    next_attempt_at  bigint,
    lane             bytea,
    lane_seq         bigint,
    manual           boolean  NOT NULL DEFAULT false,
    queued           boolean  NOT NULL DEFAULT false,
    leased_by        text,
    claim            bigint,
    created_at       bigint   NOT NULL
);
CREATE INDEX deliveries_due ON deliveries (due_at) WHERE due_at IS NOT NULL;
CREATE SEQUENCE herald_lane_seq;
CREATE INDEX deliveries_lane ON deliveries (lane, lane_seq) WHERE lane IS NOT NULL AND due_at IS NOT NULL;
CREATE INDEX deliveries_leased ON deliveries (leased_by) WHERE leased_by IS NOT NULL;
CREATE INDEX deliveries_event ON deliveries (event_id);
CREATE INDEX deliveries_account ON deliveries (account_id, id);
CREATE INDEX deliveries_endpoint ON deliveries (endpoint_id, id);

CREATE TABLE attempts (
    delivery_id     bytea    NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    number          integer  NOT NULL,
    id              text     NOT NULL,
    at              bigint   NOT NULL,
    duration_ms     bigint   NOT NULL,
    status          text     NOT NULL,
    http_status     integer,
    error           text,
    request_headers jsonb    NOT NULL,
    response_body   text     NOT NULL,
    PRIMARY KEY (delivery_id, number)
);

-- Idempotency keys (SPEC §2): the first event of a key within the window.
CREATE TABLE idempotency_keys (
    account_id text   NOT NULL,
    key        text   NOT NULL,
    event_id   bytea  NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);

-- Debounce windows (SPEC §5), by the window's key (type, account and the payload's key value).
CREATE TABLE debounce_windows (
    key             bytea   PRIMARY KEY,
    ends_at         bigint  NOT NULL,
    candidate_event bytea,
    candidate_count integer
);
CREATE INDEX debounce_windows_end ON debounce_windows (ends_at);

-- Endpoints as herald's own JSON record (secrets included: the database must be kept as
-- private as a sled data directory), with their client certificates beside them.
CREATE TABLE endpoints (
    id         text    PRIMARY KEY,
    account_id text    NOT NULL,
    record     jsonb   NOT NULL,
    updated_at bigint  NOT NULL
);
CREATE INDEX endpoints_account ON endpoints (account_id);

CREATE TABLE client_certificates (
    endpoint_id text PRIMARY KEY REFERENCES endpoints (id) ON DELETE CASCADE,
    certificate text NOT NULL,
    private_key text NOT NULL
);

CREATE TABLE breakers (
    endpoint_id text  PRIMARY KEY,
    record      jsonb NOT NULL
);

CREATE TABLE accounts (
    account_id text PRIMARY KEY,
    plan       text
);

CREATE TABLE account_secrets (
    account_id text NOT NULL,
    name       text NOT NULL,
    value      text NOT NULL,
    PRIMARY KEY (account_id, name)
);

-- Quota counters: a row per account, window kind ('minute' or 'day') and window number, so
-- a conditional upsert counts exactly across nodes.
CREATE TABLE quota_counters (
    account_id text    NOT NULL,
    kind       text    NOT NULL,
    window_no  bigint  NOT NULL,
    used       bigint  NOT NULL,
    PRIMARY KEY (account_id, kind, window_no)
);

CREATE TABLE portal_sessions (
    id         text    PRIMARY KEY,
    token_hash bytea   NOT NULL UNIQUE,
    account_id text    NOT NULL,
    read_only  boolean NOT NULL,
    created_at bigint  NOT NULL,
    expires_at bigint  NOT NULL
);
CREATE INDEX portal_sessions_expiry ON portal_sessions (expires_at);

-- The nodes that run on this database: what `/v1/status` shows of the cluster.
CREATE TABLE nodes (
    id         text   PRIMARY KEY,
    name       text   NOT NULL,
    started_at bigint NOT NULL,
    seen_at    bigint NOT NULL
);

-- `herald copy` (a sled store moved into this database): where it came from, how far it got.
CREATE TABLE herald_copy (
    source     text    PRIMARY KEY,
    cursor     text,
    copied     bigint  NOT NULL DEFAULT 0,
    finished   boolean NOT NULL DEFAULT false,
    started_at bigint  NOT NULL
);
