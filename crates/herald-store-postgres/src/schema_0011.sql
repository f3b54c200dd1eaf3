-- herald's cluster schema, version 11: what the Svix-compatible API keeps (docs/svix.md).
--   * `events.labels`: an event's channels and tags, `{"channels": [...], "tags": [...]}`;
--     NULL for an event that has neither (every event before this version);
--   * `attempts.url`: the URL the request went to; NULL for a decision without a request and
--     for attempts recorded before this version; `attempts.manual`: a manual retry made it;
--   * `applications`: an account's name, metadata and creation time as that API shows them
--     (herald's own `Application` JSON record); an account without a row shows defaults;
--   * `api_answers`: the answer to a request made with an `idempotency-key` header, replayed
--     to a repeat of that key within 24 hours (by account and key); a message's creation keeps
--     only its event (`event_id`, an empty body), inserted by the event's own transaction.
ALTER TABLE events ADD COLUMN labels jsonb;
ALTER TABLE attempts ADD COLUMN url text, ADD COLUMN manual boolean NOT NULL DEFAULT false;

CREATE TABLE applications (
    account_id text  PRIMARY KEY,
    record     jsonb NOT NULL
);

CREATE TABLE api_answers (
    account_id text    NOT NULL,
    key        text    NOT NULL,
    status     integer NOT NULL,
    body       bytea   NOT NULL,
    created_at bigint  NOT NULL,
    event_id   bytea,
    PRIMARY KEY (account_id, key)
);
CREATE INDEX api_answers_created ON api_answers (created_at);
-- A backup reads a message's request key with its event.
CREATE INDEX api_answers_event ON api_answers (event_id) WHERE event_id IS NOT NULL;
