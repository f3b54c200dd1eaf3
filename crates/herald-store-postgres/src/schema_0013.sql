-- herald's cluster schema, version 13: each attempt keeps its response's headers (at most 32
-- names and 4 KiB; a JSON array of [name, value] pairs, as request_headers). Attempts recorded
-- before keep none (a constant default: no table rewrite).
ALTER TABLE attempts ADD COLUMN response_headers jsonb NOT NULL DEFAULT '[]';
