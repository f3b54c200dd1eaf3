//! `herald copy --from sled:PATH --to postgres:URL` (docs/cluster.md): a stopped single-node
//! store moved into an empty cluster database, page by page, each page one transaction (a
//! statement per table, arrays unnested) that also records how far the copy got
//! (`herald_copy`). Run again after an interruption it goes on from there; rows copied twice
//! are skipped (every insert is `ON CONFLICT DO NOTHING`), so nothing is ever doubled. It refuses a database that holds anything it did not copy, and a
//! database another store was copied into.
//!
//! Copied: endpoints (secrets included) and their client certificates, plans, alert addresses,
//! account secrets, application records and the answers kept for request keys (docs/svix.md),
//! every event with its payload (its channels and tags too), deliveries (pending ones due when they were due) and attempts,
//! and the idempotency keys still inside their window. Not copied: quota counters (the current
//! minute and day start counting anew), breakers (an endpoint's failures are counted again),
//! alert marks (at most one failing mail more) and portal sessions (issue new links).

use std::collections::HashSet;
use std::time::Instant;

use super::Database;
use crate::clock::Millis;
use crate::ids::{self, DELIVERY, EVENT};
use crate::model::{Attempt, Delivery, DeliveryState, EventMeta, Ordering};
use crate::policy::ordering;
use crate::store::contract::Applications;
use crate::store::lane_of;
use crate::store::prelude::*;
use crate::store::sled::SledStore;
use crate::store::{DeliveryFilter, StoreError, IDEMPOTENCY_WINDOW_MS};

/// Deliveries read from the sled store per transaction.
const PAGE: usize = 500;

/// How far a copy is.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Deliveries copied (with their events and attempts).
    pub deliveries: u64,
    /// Deliveries in the store.
    pub total: u64,
    /// Deliveries a second since this run started.
    pub rate: f64,
}

/// What a copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copied {
    /// Copied (or finished after an interruption): this many deliveries in all.
    Done { deliveries: u64, resumed: bool },
    /// This store had been copied into this database already: nothing was written.
    AlreadyDone,
}

/// Copies the store at `source` (its canonical path names it) into `db`.
pub async fn copy(
    from: &SledStore,
    source: &str,
    db: &Database,
    now: Millis,
    mut report: impl FnMut(Progress),
) -> Result<Copied, StoreError> {
    let mut client = db.client().await?;
    let (mut cursor, mut copied, resumed) = match begin(&client, source, now).await? {
        Begun::Resumed(cursor, copied) => (cursor, copied, true),
        Begun::Fresh => (None, 0, false),
        Begun::Finished => return Ok(Copied::AlreadyDone),
    };

    copy_accounts(from, &mut client).await?;

    let total: u64 = DeliveryState::ALL
        .iter()
        .map(|s| from.stats().get(*s).max(0) as u64)
        .sum();
    let started = Instant::now();
    let at_start = copied;
    let filter = DeliveryFilter::default();
    loop {
        let (page, next) = from.list_deliveries(&filter, PAGE, cursor.as_deref())?;
        let rows = read_page(from, &page, now)?;
        copied += page.len() as u64;
        let tx = client.transaction().await?;
        rows.write(&tx).await?;
        tx.execute(
            "UPDATE herald_copy SET cursor = $2, copied = $3, finished = $4 WHERE source = $1",
            &[&source, &next, &(copied as i64), &next.is_none()],
        )
        .await?;
        if next.is_none() {
            order_lanes(&tx).await?;
        }
        tx.commit().await?;
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        report(Progress {
            deliveries: copied,
            total: total.max(copied),
            rate: (copied - at_start) as f64 / secs,
        });
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    Ok(Copied::Done {
        deliveries: copied,
        resumed,
    })
}

/// Where a copy starts.
enum Begun {
    /// Nothing copied yet: the copy is recorded as started.
    Fresh,
    /// An interrupted copy of this store: from this cursor, with this many deliveries copied.
    Resumed(Option<String>, u64),
    /// This store was copied into this database already.
    Finished,
}

/// Reads (or records) how far a copy of `source` into the database got; refuses a database
/// that holds another store's copy or anything not copied.
async fn begin(
    client: &deadpool_postgres::Object,
    source: &str,
    now: Millis,
) -> Result<Begun, StoreError> {
    let marks = client
        .query(
            "SELECT source, cursor, copied, finished FROM herald_copy",
            &[],
        )
        .await?;
    match marks.first() {
        Some(r) if r.get::<_, &str>(0) != source => Err(StoreError::Format(format!(
            "the database holds a copy of another store ({}); copy into an empty database",
            r.get::<_, &str>(0)
        ))),
        Some(r) if r.get::<_, bool>(3) => Ok(Begun::Finished),
        Some(r) => Ok(Begun::Resumed(
            r.get::<_, Option<String>>(1),
            r.get::<_, i64>(2) as u64,
        )),
        None => {
            let used: bool = client
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM events) OR EXISTS (SELECT 1 FROM endpoints)
                         OR EXISTS (SELECT 1 FROM accounts)",
                    &[],
                )
                .await?
                .get(0);
            if used {
                return Err(StoreError::Format(
                    "the database is not empty (it has events, endpoints or accounts); copy \
                     into an empty database"
                        .into(),
                ));
            }
            client
                .execute(
                    "INSERT INTO herald_copy (source, started_at) VALUES ($1, $2)",
                    &[&source, &now],
                )
                .await?;
            Ok(Begun::Fresh)
        }
    }
}

/// One page of the log from `from`: the events of `page`'s deliveries, each with all its
/// deliveries and their attempts.
fn read_page(from: &SledStore, page: &[Delivery], now: Millis) -> Result<Rows, StoreError> {
    let mut rows = Rows::default();
    let mut events_seen = HashSet::new();
    for d in page {
        if !events_seen.insert(d.event_id.clone()) {
            continue;
        }
        let Some((meta, payload, deliveries)) = from.event_with_deliveries(&d.event_id)? else {
            continue;
        };
        let mut attempts = Vec::new();
        for del in &deliveries {
            attempts.push(from.attempts(&del.id)?);
        }
        rows.add(meta, payload.to_vec(), deliveries, attempts, now, &|ep| {
            from.endpoint(ep).and_then(|e| e.ordering.clone())
        })?;
    }
    Ok(rows)
}

/// Endpoints, client certificates, plans, alert addresses, account secrets, application
/// records and kept answers, in one transaction.
async fn copy_accounts(
    from: &SledStore,
    client: &mut deadpool_postgres::Object,
) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    for account in from.account_ids() {
        if let Some(plan) = from.account_plan(&account) {
            tx.execute(
                "INSERT INTO accounts (account_id, plan) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&account, &plan],
            )
            .await?;
        }
        for ep in from.account_endpoints(&account) {
            // Its secrets in their own column, as every write of an endpoint puts them.
            let (record, secrets) = super::endpoints::columns(&ep)?;
            tx.execute(
                "INSERT INTO endpoints (id, account_id, record, secrets, updated_at)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[&ep.id, &ep.account_id, &record, &secrets, &ep.updated_at],
            )
            .await?;
            if let Some((certificate, key)) = from.client_certificate_pem(&ep.id)? {
                tx.execute(
                    "INSERT INTO client_certificates (endpoint_id, certificate, private_key)
                     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                    &[&ep.id, &certificate, &key],
                )
                .await?;
            }
        }
    }
    for (account, name, value) in from.account_secrets()? {
        tx.execute(
            "INSERT INTO account_secrets (account_id, name, value) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            &[&account, &name, &value],
        )
        .await?;
    }
    for (account, emails) in from.all_alert_emails()? {
        tx.execute(
            "INSERT INTO accounts (account_id, alert_emails) VALUES ($1, $2)
             ON CONFLICT (account_id) DO UPDATE SET alert_emails = excluded.alert_emails",
            &[&account, &emails],
        )
        .await?;
    }
    for app in Applications::applications(from).await? {
        let record = serde_json::to_value(&app).map_err(|e| StoreError::Encode(e.to_string()))?;
        tx.execute(
            "INSERT INTO applications (account_id, record) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            &[&app.id, &record],
        )
        .await?;
    }
    for (account, key, answer) in Applications::api_answers(from).await? {
        tx.execute(
            "INSERT INTO api_answers (account_id, key, status, body, created_at, event_id)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
            &[
                &account,
                &key,
                &i32::from(answer.status),
                &answer.body.as_bytes(),
                &answer.at,
                &answer
                    .event_id
                    .as_deref()
                    .and_then(|e| ids::parse(EVENT, e))
                    .map(|u| u.to_be_bytes().to_vec()),
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

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
        tx.execute(
            "INSERT INTO events (id, account_id, type, received_at, idempotency_key,
                                 debounce_key, ordering_key, payload, labels)
             SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::bigint[], $5::text[],
                                  $6::text[], $7::text[], $8::bytea[], $9::jsonb[])
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
        tx.execute(
            "INSERT INTO attempts (delivery_id, number, id, at, duration_ms, status,
                                   http_status, error, request_headers, response_body, url,
                                   manual)
             SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[], $4::bigint[],
                                  $5::bigint[], $6::text[], $7::integer[], $8::text[],
                                  $9::jsonb[], $10::text[], $11::text[], $12::boolean[])
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
