//! The rows an import writes into the cluster's database (a restore's or a copy's pages,
//! docs/operations.md and docs/cluster.md): a page of events with their deliveries and attempts
//! in one transaction, a statement per table, arrays unnested. Every insert is `ON CONFLICT DO
//! NOTHING`, so a page written twice (a copy resumed after an interruption) doubles nothing.

use herald_core::clock::Millis;
use herald_core::ids::{self, DELIVERY, EVENT};
use herald_core::model::{Attempt, Delivery, DeliveryState, EventMeta, Ordering};
use herald_core::policy::ordering;
use herald_store::lane_of;
use herald_store::{StoreError, IDEMPOTENCY_WINDOW_MS};

fn key16(prefix: &str, id: &str) -> Result<Vec<u8>, StoreError> {
    ids::parse(prefix, id)
        .map(|u| u.to_be_bytes().to_vec())
        .ok_or_else(|| StoreError::Corrupt(format!("id {id}")))
}

/// A delivery with its id, its event's id, and its ordering lane (a pending delivery of an
/// ordered endpoint; its place in the lane is given at the end, [`order_lanes`]).
type DeliveryRow = (Vec<u8>, Vec<u8>, Delivery, Option<Vec<u8>>);

/// One page's rows, as columns (a copy's and a restore's).
#[derive(Default)]
pub(super) struct Rows {
    events: Vec<(Vec<u8>, EventMeta, Vec<u8>)>,
    deliveries: Vec<DeliveryRow>,
    attempts: Vec<(Vec<u8>, Attempt)>,
    keys: Vec<(String, String, Vec<u8>, Millis)>,
    /// Request keys of events created through the Svix-compatible API, still in their window:
    /// their answers (docs/svix.md).
    requests: Vec<(String, String, Vec<u8>, Millis)>,
    /// Each delivery's place in its lane, where the archive kept it (a cluster's backup).
    lane_seqs: Vec<Option<i64>>,
}

impl Rows {
    /// Adds an event's rows; `ordering` names the ordering of an endpoint (by id), if it has
    /// one.
    pub(super) fn add(
        &mut self,
        meta: EventMeta,
        payload: Vec<u8>,
        deliveries: Vec<Delivery>,
        attempts: Vec<Vec<Attempt>>,
        now: Millis,
        ordering: &dyn Fn(&str) -> Option<Ordering>,
    ) -> Result<(), StoreError> {
        let event = key16(EVENT, &meta.id)?;
        if let Some(k) = &meta.idempotency_key {
            if meta.received_at > now - IDEMPOTENCY_WINDOW_MS {
                self.keys.push((
                    meta.account_id.clone(),
                    k.clone(),
                    event.clone(),
                    meta.received_at,
                ));
            }
        }
        if let Some(k) = &meta.request_key {
            if meta.received_at > now - IDEMPOTENCY_WINDOW_MS {
                self.requests.push((
                    meta.account_id.clone(),
                    k.clone(),
                    event.clone(),
                    meta.received_at,
                ));
            }
        }
        for (d, atts) in deliveries.into_iter().zip(attempts) {
            let id = key16(DELIVERY, &d.id)?;
            for a in atts {
                self.attempts.push((id.clone(), a));
            }
            let lane = match (&d.endpoint_id, d.state) {
                (Some(ep), DeliveryState::Pending) => ordering(ep).map(|o| {
                    let key = ordering::key_of(&o, meta.ordering_key.as_deref(), &payload);
                    super::ingest::lane(lane_of(Some(ep)), &key)
                }),
                _ => None,
            };
            self.deliveries.push((id, event.clone(), d, lane));
        }
        self.events.push((event, meta, payload));
        self.lane_seqs.resize(self.deliveries.len(), None);
        Ok(())
    }

    /// Keeps the places in their lanes that the last event's deliveries had in the store they
    /// were read from (a cluster's backup restored into a cluster), so that events of one key
    /// keep their order even where their ids do not (they were ingested on two nodes).
    pub(super) fn keep_lane_places(&mut self, lane_seqs: &[Option<i64>]) {
        let first = self.deliveries.len() - lane_seqs.len().min(self.deliveries.len());
        for (i, seq) in lane_seqs.iter().enumerate() {
            if let (Some(slot), Some((_, _, _, Some(_)))) = (
                self.lane_seqs.get_mut(first + i),
                self.deliveries.get(first + i),
            ) {
                *slot = *seq;
            }
        }
    }

    /// The page's rows, one statement per table (arrays unnested).
    pub(super) async fn write(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
    ) -> Result<(), StoreError> {
        self.write_events(tx).await?;
        self.write_deliveries(tx).await?;
        if !self.attempts.is_empty() {
            self.write_attempts(tx).await?;
        }
        if !self.keys.is_empty() {
            self.write_keys(tx).await?;
        }
        if !self.requests.is_empty() {
            let rs = &self.requests;
            tx.execute(
                "INSERT INTO api_answers (account_id, key, status, body, created_at, event_id)
                 SELECT a, k, 202, ''::bytea, at, e
                 FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[]) AS t(a, k, e, at)
                 ON CONFLICT DO NOTHING",
                &[
                    &rs.iter().map(|k| &k.0).collect::<Vec<_>>(),
                    &rs.iter().map(|k| &k.1).collect::<Vec<_>>(),
                    &rs.iter().map(|k| &k.2).collect::<Vec<_>>(),
                    &rs.iter().map(|k| k.3).collect::<Vec<_>>(),
                ],
            )
            .await?;
        }
        Ok(())
    }

    async fn write_events(&self, tx: &tokio_postgres::Transaction<'_>) -> Result<(), StoreError> {
        let ev = &self.events;
        let (traceparent, tracestate): (Vec<_>, Vec<_>) = ev
            .iter()
            .map(|e| super::rows::trace_columns(e.1.trace.as_ref()))
            .unzip();
        tx.execute(
            "INSERT INTO events (id, account_id, type, received_at, idempotency_key,
                                 debounce_key, ordering_key, payload, labels, traceparent,
                                 tracestate)
             SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::bigint[], $5::text[],
                                  $6::text[], $7::text[], $8::bytea[], $9::jsonb[], $10::text[],
                                  $11::text[])
             ON CONFLICT DO NOTHING",
            &[
                &ev.iter().map(|e| &e.0).collect::<Vec<_>>(),
                &ev.iter().map(|e| &e.1.account_id).collect::<Vec<_>>(),
                &ev.iter().map(|e| &e.1.event_type).collect::<Vec<_>>(),
                &ev.iter().map(|e| e.1.received_at).collect::<Vec<_>>(),
                &ev.iter().map(|e| &e.1.idempotency_key).collect::<Vec<_>>(),
                &ev.iter().map(|e| &e.1.debounce_key).collect::<Vec<_>>(),
                &ev.iter().map(|e| &e.1.ordering_key).collect::<Vec<_>>(),
                &ev.iter().map(|e| &e.2).collect::<Vec<_>>(),
                &ev.iter()
                    .map(|e| super::rows::labels(&e.1.channels, &e.1.tags))
                    .collect::<Vec<_>>(),
                &traceparent,
                &tracestate,
            ],
        )
        .await?;
        Ok(())
    }

    async fn write_deliveries(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
    ) -> Result<(), StoreError> {
        let ds = &self.deliveries;
        let due: Vec<Option<i64>> = ds
            .iter()
            .map(|(_, _, d, _)| match d.state {
                DeliveryState::Pending => Some(d.next_attempt_at.unwrap_or(d.created_at)),
                _ => None,
            })
            .collect();
        tx.execute(
            "INSERT INTO deliveries (id, event_id, endpoint_id, account_id, event_type, state,
                 last_status, last_http_status, attempt_count, due_at, next_attempt_at, manual,
                 queued, created_at, lane, lane_seq)
             SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::text[], $4::text[], $5::text[],
                                  $6::text[], $7::text[], $8::integer[], $9::integer[],
                                  $10::bigint[], $11::bigint[], $12::boolean[], $13::boolean[],
                                  $14::bigint[], $15::bytea[], $16::bigint[])
             ON CONFLICT DO NOTHING",
            &[
                &ds.iter().map(|d| &d.0).collect::<Vec<_>>(),
                &ds.iter().map(|d| &d.1).collect::<Vec<_>>(),
                &ds.iter().map(|d| &d.2.endpoint_id).collect::<Vec<_>>(),
                &ds.iter().map(|d| &d.2.account_id).collect::<Vec<_>>(),
                &ds.iter().map(|d| &d.2.event_type).collect::<Vec<_>>(),
                &ds.iter().map(|d| d.2.state.as_str()).collect::<Vec<_>>(),
                &ds.iter()
                    .map(|d| d.2.last_status.map(|s| s.as_str()))
                    .collect::<Vec<_>>(),
                &ds.iter()
                    .map(|d| d.2.last_http_status.map(i32::from))
                    .collect::<Vec<_>>(),
                &ds.iter()
                    .map(|d| d.2.attempt_count as i32)
                    .collect::<Vec<_>>(),
                &due,
                &ds.iter().map(|d| d.2.next_attempt_at).collect::<Vec<_>>(),
                &ds.iter().map(|d| d.2.manual).collect::<Vec<_>>(),
                &ds.iter().map(|d| d.2.queued).collect::<Vec<_>>(),
                &ds.iter().map(|d| d.2.created_at).collect::<Vec<_>>(),
                &ds.iter().map(|d| &d.3).collect::<Vec<_>>(),
                &self.lane_seqs,
            ],
        )
        .await?;
        Ok(())
    }

    async fn write_attempts(&self, tx: &tokio_postgres::Transaction<'_>) -> Result<(), StoreError> {
        let at = &self.attempts;
        let headers = at
            .iter()
            .map(|(_, a)| serde_json::to_value(&a.request_headers))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Encode(e.to_string()))?;
        let answered = at
            .iter()
            .map(|(_, a)| serde_json::to_value(&a.response_headers))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| StoreError::Encode(e.to_string()))?;
        tx.execute(
            "INSERT INTO attempts (delivery_id, number, id, at, duration_ms, status,
                                   http_status, error, request_headers, response_body, url,
                                   manual, response_headers)
             SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[], $4::bigint[],
                                  $5::bigint[], $6::text[], $7::integer[], $8::text[],
                                  $9::jsonb[], $10::text[], $11::text[], $12::boolean[],
                                  $13::jsonb[])
             ON CONFLICT DO NOTHING",
            &[
                &at.iter().map(|a| &a.0).collect::<Vec<_>>(),
                &at.iter().map(|a| a.1.number as i32).collect::<Vec<_>>(),
                &at.iter().map(|a| &a.1.id).collect::<Vec<_>>(),
                &at.iter().map(|a| a.1.at).collect::<Vec<_>>(),
                &at.iter()
                    .map(|a| a.1.duration_ms.min(i64::MAX as u64) as i64)
                    .collect::<Vec<_>>(),
                &at.iter().map(|a| a.1.status.as_str()).collect::<Vec<_>>(),
                &at.iter()
                    .map(|a| a.1.http_status.map(i32::from))
                    .collect::<Vec<_>>(),
                &at.iter().map(|a| &a.1.error).collect::<Vec<_>>(),
                &headers,
                &at.iter().map(|a| &a.1.response_body).collect::<Vec<_>>(),
                &at.iter().map(|a| &a.1.url).collect::<Vec<_>>(),
                &at.iter().map(|a| a.1.manual).collect::<Vec<_>>(),
                &answered,
            ],
        )
        .await?;
        Ok(())
    }

    async fn write_keys(&self, tx: &tokio_postgres::Transaction<'_>) -> Result<(), StoreError> {
        let ks = &self.keys;
        tx.execute(
            "INSERT INTO idempotency_keys (account_id, key, event_id, created_at)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[])
             ON CONFLICT DO NOTHING",
            &[
                &ks.iter().map(|k| &k.0).collect::<Vec<_>>(),
                &ks.iter().map(|k| &k.1).collect::<Vec<_>>(),
                &ks.iter().map(|k| &k.2).collect::<Vec<_>>(),
                &ks.iter().map(|k| k.3).collect::<Vec<_>>(),
            ],
        )
        .await?;
        Ok(())
    }
}

/// Gives the pending deliveries written with a lane and no place in it (a place a cluster's
/// archive carried is written with the row) their places, in id order (on one box, the order
/// their events were committed in), after every place ingest gave; then moves
/// the lane sequence past them. Run once the copy or the restore has written every page (pages
/// go newest first).
pub(super) async fn order_lanes(tx: &tokio_postgres::Transaction<'_>) -> Result<(), StoreError> {
    tx.batch_execute(
        "WITH placed AS (
                 SELECT id, row_number() OVER (ORDER BY id) AS n FROM deliveries
                 WHERE lane IS NOT NULL AND lane_seq IS NULL),
             base AS (SELECT coalesce(max(lane_seq), 0) AS b FROM deliveries)
             UPDATE deliveries d SET lane_seq = base.b + placed.n
             FROM placed, base WHERE d.id = placed.id;
             SELECT setval('herald_lane_seq',
                           greatest((SELECT coalesce(max(lane_seq), 0) FROM deliveries), 1));",
    )
    .await?;
    Ok(())
}
