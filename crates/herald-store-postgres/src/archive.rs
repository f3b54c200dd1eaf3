//! Backup and restore on the cluster's database ([`herald_store::contract::Archive`]): a page
//! of events read in one repeatable-read transaction (each event whole, with its deliveries and
//! attempts as of one moment), and events written into an empty database as `herald copy`
//! writes them.

use std::collections::HashMap;

use bytes::Bytes;

use super::import::Rows;
use super::reads::{attempt_from, delivery_from, DELIVERY_COLUMNS};
use super::rows::ulid_from;
use super::PgStore;
use herald_core::clock::Millis;
use herald_core::ids::{self, EVENT};
use herald_core::model::{Attempt, EventMeta};
use herald_store::contract::Archive;
use herald_store::CopyStart;
use herald_store::{EventHistory, StoreError, ARCHIVE_PAGE_BYTES};

/// A cluster's database held for a restore (docs/operations.md, "Restore"): the advisory lock
/// that every node takes to migrate at start, held on a connection of its own until the
/// restore ends, so that no node starts meanwhile; and the tables that were empty when the
/// restore began, which a failed restore empties again.
pub struct RestoreHold {
    client: tokio_postgres::Client,
    empty_tables: Vec<String>,
}

impl RestoreHold {
    /// Takes the lock, brings the schema up to date, refuses while a node was seen within
    /// [`super::versions::live_span`] of `now` (the lease, and at least two beats: a node that
    /// beats every 5 s is live under a lease shorter than 10 s too), and notes the tables that
    /// are empty.
    pub async fn take(
        mut client: tokio_postgres::Client,
        now: Millis,
        lease_ms: i64,
    ) -> Result<RestoreHold, String> {
        let failed = |e: tokio_postgres::Error| super::describe(&e);
        client
            .execute("SELECT pg_advisory_lock($1)", &[&super::migrate::LOCK])
            .await
            .map_err(failed)?;
        let lease = std::time::Duration::from_millis(u64::try_from(lease_ms).unwrap_or(0));
        super::migrate(&mut client, lease)
            .await
            .map_err(|e| e.to_string())?;
        let span = super::versions::live_span(lease).as_millis() as i64;
        let live: Vec<String> = client
            .query(
                "SELECT name FROM nodes WHERE seen_at >= $1 ORDER BY name",
                &[&(now - span)],
            )
            .await
            .map_err(failed)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !live.is_empty() {
            return Err(format!(
                "herald is running on this database (nodes {}); stop every node, then restore",
                live.join(", ")
            ));
        }
        let tables: Vec<String> = client
            .query(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()
                   AND tablename NOT IN ('herald_schema', 'nodes') ORDER BY tablename",
                &[],
            )
            .await
            .map_err(failed)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut empty_tables = Vec::new();
        for t in tables {
            let quoted = format!("\"{}\"", t.replace('"', "\"\""));
            let used: bool = client
                .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {quoted})"), &[])
                .await
                .map_err(failed)?
                .get(0);
            if !used {
                empty_tables.push(quoted);
            }
        }
        Ok(RestoreHold {
            client,
            empty_tables,
        })
    }

    /// The restore failed: every table that was empty when it began is emptied again, in one
    /// statement.
    pub async fn undo(&self) -> Result<(), String> {
        if self.empty_tables.is_empty() {
            return Ok(());
        }
        self.client
            .batch_execute(&format!("TRUNCATE {}", self.empty_tables.join(", ")))
            .await
            .map_err(|e| super::describe(&e))
    }

    /// The restore ended: the lock goes with the connection.
    pub async fn release(self) {
        let _ = self
            .client
            .execute("SELECT pg_advisory_unlock($1)", &[&super::migrate::LOCK])
            .await;
    }
}

/// How many events the page below `upper` takes: up to `limit`, ending once their payloads and
/// attempts reach [`ARCHIVE_PAGE_BYTES`] (as `EventHistory::bytes` counts them); and whether
/// that cut it short.
async fn page_length(
    tx: &tokio_postgres::Transaction<'_>,
    upper: &[u8],
    limit: usize,
) -> Result<(usize, bool), StoreError> {
    let sizes = tx
        .query(
            "SELECT e.id, octet_length(e.payload)::bigint
                    + COALESCE((SELECT sum(octet_length(a.response_body)
                                           + COALESCE(octet_length(a.error), 0)
                                           + COALESCE(octet_length(a.url), 0)
                                           + octet_length(a.request_headers::text)
                                           + octet_length(a.response_headers::text))
                                  FROM deliveries d JOIN attempts a ON a.delivery_id = d.id
                                 WHERE d.event_id = e.id), 0)::bigint
             FROM events e WHERE e.id < $1
             ORDER BY e.id DESC LIMIT $2",
            &[&upper, &(limit as i64)],
        )
        .await?;
    let mut bytes = 0usize;
    let mut take = 0usize;
    for r in &sizes {
        take += 1;
        bytes += r.get::<_, Option<i64>>(1).unwrap_or(0).max(0) as usize;
        if bytes >= ARCHIVE_PAGE_BYTES {
            break;
        }
    }
    Ok((take, take < sizes.len()))
}

/// One exported event from its row, taking its deliveries (with their lane places) and their
/// attempts out of the page's maps.
fn history_of(
    e: &tokio_postgres::Row,
    deliveries: &mut HashMap<Vec<u8>, Vec<(herald_core::model::Delivery, Option<i64>)>>,
    attempts: &mut HashMap<Vec<u8>, Vec<Attempt>>,
) -> Result<EventHistory, StoreError> {
    let key: Vec<u8> = e.get(0);
    let ds = deliveries.remove(&key).unwrap_or_default();
    let (channels, tags) = super::rows::labels_of(e.get(8));
    let meta = EventMeta {
        id: ids::format(EVENT, ulid_from(&key)?),
        account_id: e.get(1),
        event_type: e.get(2),
        received_at: e.get(3),
        idempotency_key: e.get(4),
        debounce_key: e.get(5),
        ordering_key: e.get(6),
        channels,
        tags,
        // A message's request key travels with its event, as on one box.
        request_key: e.get(9),
        trace: super::rows::trace_of(e.get(10), e.get(11)),
        deliveries: ds.iter().map(|(d, _)| d.id.clone()).collect(),
    };
    let lane_seqs = ds.iter().map(|(_, seq)| *seq).collect();
    let deliveries = ds
        .into_iter()
        .map(|(d, _)| {
            let ulid = ids::parse(herald_core::ids::DELIVERY, &d.id).unwrap_or_default();
            let atts = attempts
                .remove(ulid.to_be_bytes().as_slice())
                .unwrap_or_default();
            (d, atts)
        })
        .collect();
    Ok(EventHistory {
        meta,
        payload: Bytes::from(e.get::<_, Vec<u8>>(7)),
        deliveries,
        lane_seqs,
    })
}

impl Archive for PgStore {
    /// Every account secret.
    async fn account_secrets(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .query(
                "SELECT account_id, name, value FROM account_secrets ORDER BY account_id, name",
                &[],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// [`herald_store::contract::Archive::export_events`].
    async fn export_events(
        &self,
        before: Option<String>,
        limit: usize,
    ) -> Result<(Vec<EventHistory>, Option<String>), StoreError> {
        let upper = match &before {
            Some(b) => ids::parse(EVENT, b)
                .ok_or_else(|| StoreError::Format(format!("{b} is not an event id")))?,
            None => u128::MAX,
        };
        let upper = upper.to_be_bytes().to_vec();
        let mut client = self.db.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        // Ids are 16 bytes: `u128::MAX`'s sort after every one; a cursor's event is excluded.
        let (take, cut_short) = page_length(&tx, &upper, limit).await?;
        let events = tx
            .query(
                "SELECT id, account_id, type, received_at, idempotency_key, debounce_key,
                        ordering_key, payload, labels,
                        (SELECT a.key FROM api_answers a
                          WHERE a.event_id = events.id AND a.account_id = events.account_id
                          LIMIT 1),
                        traceparent, tracestate
                 FROM events WHERE id < $1 ORDER BY id DESC LIMIT $2",
                &[&upper, &(take as i64)],
            )
            .await?;
        let keys: Vec<Vec<u8>> = events.iter().map(|r| r.get(0)).collect();
        let mut deliveries: HashMap<Vec<u8>, Vec<_>> = HashMap::new();
        for r in tx
            .query(
                &format!(
                    "SELECT {DELIVERY_COLUMNS}, d.lane_seq FROM deliveries d
                     WHERE d.event_id = ANY($1) ORDER BY d.id"
                ),
                &[&keys],
            )
            .await?
        {
            let lane_seq: Option<i64> = r.get(13);
            deliveries
                .entry(r.get::<_, Vec<u8>>(1))
                .or_default()
                .push((delivery_from(&r)?, lane_seq));
        }
        let mut attempts: HashMap<Vec<u8>, Vec<Attempt>> = HashMap::new();
        for r in tx
            .query(
                "SELECT a.id, a.number, a.at, a.duration_ms, a.status, a.http_status, a.error,
                        a.request_headers, a.response_body, a.url, a.manual, a.response_headers,
                        a.delivery_id
                 FROM attempts a JOIN deliveries d ON d.id = a.delivery_id
                 WHERE d.event_id = ANY($1) ORDER BY a.delivery_id, a.number",
                &[&keys],
            )
            .await?
        {
            attempts
                .entry(r.get::<_, Vec<u8>>(12))
                .or_default()
                .push(attempt_from(&r)?);
        }
        tx.commit().await?;
        let out = events
            .iter()
            .map(|e| history_of(e, &mut deliveries, &mut attempts))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let next = (out.len() == limit || cut_short)
            .then(|| out.last().map(|h| h.meta.id.clone()))
            .flatten();
        Ok((out, next))
    }

    /// Whether the database holds no event, endpoint, plan or account secret.
    async fn is_empty(&self) -> Result<bool, StoreError> {
        let used: bool = self
            .db
            .client()
            .await?
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM events) OR EXISTS (SELECT 1 FROM endpoints)
                     OR EXISTS (SELECT 1 FROM accounts) OR EXISTS (SELECT 1 FROM account_secrets)",
                &[],
            )
            .await?
            .get(0);
        Ok(!used)
    }

    /// [`herald_store::contract::Archive::import_events`]: one transaction, a statement per
    /// table.
    async fn import_events(
        &self,
        events: Vec<EventHistory>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let mut rows = Rows::default();
        for h in events {
            let (deliveries, attempts) = h.deliveries.into_iter().unzip();
            rows.add(
                h.meta,
                h.payload.to_vec(),
                deliveries,
                attempts,
                now,
                &|ep| self.directory.ordering(Some(ep)),
            )?;
            rows.keep_lane_places(&h.lane_seqs);
        }
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        rows.write(&tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`herald_store::contract::Archive::finish_import`]: the ordering lanes' places.
    async fn finish_import(&self) -> Result<(), StoreError> {
        let mut client = self.db.client().await?;
        let tx = client.transaction().await?;
        super::import::order_lanes(&tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The copy's mark is a row of `herald_copy`; a database with one of another source, or
    /// with events, endpoints or accounts and none, is refused.
    async fn begin_copy(&self, source: &str, now: Millis) -> Result<CopyStart, StoreError> {
        let client = self.db.client().await?;
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
            Some(r) if r.get::<_, bool>(3) => Ok(CopyStart::Finished),
            Some(r) => Ok(CopyStart::Resumed {
                cursor: r.get::<_, Option<String>>(1),
                copied: r.get::<_, i64>(2) as u64,
            }),
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
                Ok(CopyStart::Fresh)
            }
        }
    }

    async fn keep_copy_mark(
        &self,
        source: &str,
        cursor: Option<&str>,
        copied: u64,
        finished: bool,
    ) -> Result<(), StoreError> {
        self.db
            .client()
            .await?
            .execute(
                "UPDATE herald_copy SET cursor = $2, copied = $3, finished = $4 WHERE source = $1",
                &[&source, &cursor, &(copied as i64), &finished],
            )
            .await?;
        Ok(())
    }
}
