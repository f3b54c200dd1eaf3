-- herald's cluster schema, version 15: an event keeps the trace context of the request that
-- created it (docs/operations.md, "Traces"): the ingest span's `traceparent` (version 00, 55
-- characters) and the request's `tracestate` (at most 256 bytes, cut at whole entries).
-- Events stored before have neither (NULL: no table rewrite).
ALTER TABLE events ADD COLUMN traceparent text, ADD COLUMN tracestate text;
