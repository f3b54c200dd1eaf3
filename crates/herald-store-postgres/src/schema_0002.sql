-- herald's cluster schema, version 2: claims go endpoint by endpoint.
-- A node claims the due deliveries of each endpoint it works on, and finds the endpoints with
-- pending deliveries by walking this index (one probe per endpoint), so a claim never scans one
-- endpoint's backlog to reach another's. Partial: only pending deliveries are in it (it is as
-- small as the queue, and built quickly when an install upgrades).
CREATE INDEX deliveries_endpoint_due ON deliveries (endpoint_id, due_at) WHERE due_at IS NOT NULL;

-- No foreign keys between the log's tables: each checked every row herald wrote (a delivery's
-- event, an attempt's delivery, rows the same transaction had just written), and was most of
-- the cost of recording an attempt. herald writes an event with its deliveries, and a delivery's
-- attempts with its result, in one statement or transaction; retention removes an event's
-- attempts, deliveries and keys with it, in one statement.
ALTER TABLE attempts DROP CONSTRAINT attempts_delivery_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;
