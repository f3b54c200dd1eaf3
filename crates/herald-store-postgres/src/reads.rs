//! Reading the log on PostgreSQL (docs/api.md): events with their payload bytes as ingested,
//! deliveries, attempts, and delivery lists newest first with the same filters and cursors as
//! on sled (the cursor is the last delivery id of a page).

use bytes::Bytes;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::rows::ulid_from;
use super::PgStore;
use herald_core::ids::{self, DELIVERY, ENDPOINT, EVENT};
use herald_core::model::{Attempt, Delivery, DeliveryState, EventMeta, Status};
use herald_store::contract::DeliveryLog;
use herald_store::{DeliveryFilter, StoreError, SEARCH_EVENTS};

/// A delivery's columns, in the order [`delivery_from`] reads them.
pub(super) const DELIVERY_COLUMNS: &str = "d.id, d.event_id, d.endpoint_id, d.account_id,
    d.event_type, d.state, d.last_status, d.last_http_status, d.attempt_count,
    d.next_attempt_at, d.created_at, d.manual, d.queued";

/// A query built clause by clause: the `?` of each clause becomes its parameter's number.
struct Query {
    sql: String,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Query {
    fn new(sql: impl Into<String>) -> Query {
        Query {
            sql: sql.into(),
            params: Vec::new(),
        }
    }

    fn bind(&mut self, clause: &str, value: Box<dyn ToSql + Sync + Send>) {
        self.params.push(value);
        self.sql
            .push_str(&clause.replace('?', &format!("${}", self.params.len())));
    }

    /// The parameters as the client takes them.
    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// The log's list query for `filter` (a page of `limit` below `cursor`, newest first); `None` when nothing can match (a cursor or an endpoint id that is not one).
fn list_query(
    filter: &DeliveryFilter,
    limit: usize,
    cursor: Option<&str>,
    floor: Option<u128>,
) -> Option<Query> {
    let mut q = Query::new(format!(
        "SELECT {DELIVERY_COLUMNS} FROM deliveries d WHERE true"
    ));
    if let Some(c) = cursor {
        let u = ids::parse(DELIVERY, c)?;
        q.bind(" AND d.id < ?", Box::new(u.to_be_bytes().to_vec()));
    }
    if let Some(a) = &filter.account_id {
        q.bind(" AND d.account_id = ?", Box::new(a.clone()));
    }
    if let Some(e) = &filter.endpoint_id {
        // An endpoint id that is not one matches nothing.
        ids::parse(ENDPOINT, e)?;
        q.bind(" AND d.endpoint_id = ?", Box::new(e.clone()));
    }
    if let Some(t) = &filter.event_type {
        q.bind(" AND d.event_type = ?", Box::new(t.clone()));
    }
    if let Some(s) = filter.state {
        q.bind(" AND d.state = ?", Box::new(s.as_str().to_string()));
    }
    if let Some(s) = filter.status {
        q.bind(" AND d.last_status = ?", Box::new(s.as_str().to_string()));
    }
    // Ids carry their event's time: the time bounds are an id range (an index's).
    if let Some(since) = filter.since {
        q.bind(
            " AND d.id >= ?",
            Box::new(ids::ulid_floor(since).to_be_bytes().to_vec()),
        );
    }
    if let Some(until) = filter.until {
        q.bind(
            " AND d.id < ?",
            Box::new(ids::ulid_floor(until).to_be_bytes().to_vec()),
        );
    }
    // A search: the events its page may look at start at `floor`, and the payload holds the
    // text (its bytes, exactly).
    if let Some(floor) = floor {
        q.bind(
            " AND d.event_id >= ?",
            Box::new(floor.to_be_bytes().to_vec()),
        );
    }
    if let Some(text) = &filter.text {
        q.bind(
            " AND EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id
                            AND position(? IN e.payload) > 0)",
            Box::new(text.as_bytes().to_vec()),
        );
    }
    q.bind(" ORDER BY d.id DESC LIMIT ?", Box::new(limit as i64));
    Some(q)
}

/// The oldest event a search's page may look at: the [`SEARCH_EVENTS`]th newest of the
/// filter's account (every account's without one) at or below the cursor's event, within the
/// time bounds; `None` when there are fewer (the page may look at all of them).
async fn search_floor(
    client: &deadpool_postgres::Object,
    filter: &DeliveryFilter,
    cursor: Option<&str>,
) -> Result<Option<u128>, StoreError> {
    let mut q = Query::new("SELECT e.id FROM events e WHERE true");
    if let Some((event, _)) = cursor
        .and_then(|c| ids::parse(DELIVERY, c))
        .and_then(ids::event_of)
    {
        q.bind(" AND e.id <= ?", Box::new(event.to_be_bytes().to_vec()));
    }
    if let Some(a) = &filter.account_id {
        q.bind(" AND e.account_id = ?", Box::new(a.clone()));
    }
    if let Some(since) = filter.since {
        q.bind(
            " AND e.id >= ?",
            Box::new(ids::ulid_floor(since).to_be_bytes().to_vec()),
        );
    }
    if let Some(until) = filter.until {
        q.bind(
            " AND e.id < ?",
            Box::new(ids::ulid_floor(until).to_be_bytes().to_vec()),
        );
    }
    q.bind(
        " ORDER BY e.id DESC OFFSET ? LIMIT 1",
        Box::new(SEARCH_EVENTS as i64 - 1),
    );
    client
        .query_opt(&q.sql, &q.refs())
        .await?
        .map(|r| ulid_from(r.get(0)))
        .transpose()
}

pub(super) fn delivery_from(r: &Row) -> Result<Delivery, StoreError> {
    let state: &str = r.get(5);
    let last_status: Option<&str> = r.get(6);
    Ok(Delivery {
        id: ids::format(DELIVERY, ulid_from(r.get(0))?),
        event_id: ids::format(EVENT, ulid_from(r.get(1))?),
        endpoint_id: r.get(2),
        account_id: r.get(3),
        event_type: r.get(4),
        state: DeliveryState::parse(state)
            .ok_or_else(|| StoreError::Corrupt(format!("delivery state {state:?}")))?,
        last_status: last_status.and_then(Status::parse),
        last_http_status: r.get::<_, Option<i32>>(7).map(|s| s as u16),
        attempt_count: r.get::<_, i32>(8) as u32,
        next_attempt_at: r.get(9),
        created_at: r.get(10),
        manual: r.get(11),
        queued: r.get(12),
    })
}

/// An attempt from a row of `id, number, at, duration_ms, status, http_status, error,
/// request_headers, response_body, url, manual, response_headers`.
pub(super) fn attempt_from(r: &Row) -> Result<Attempt, StoreError> {
    let status: &str = r.get(4);
    let headers: serde_json::Value = r.get(7);
    Ok(Attempt {
        id: r.get(0),
        number: r.get::<_, i32>(1) as u32,
        at: r.get(2),
        duration_ms: r.get::<_, i64>(3).max(0) as u64,
        status: Status::parse(status)
            .ok_or_else(|| StoreError::Corrupt(format!("attempt status {status:?}")))?,
        http_status: r.get::<_, Option<i32>>(5).map(|s| s as u16),
        error: r.get(6),
        request_headers: serde_json::from_value(headers)
            .map_err(|e| StoreError::Corrupt(format!("attempt headers: {e}")))?,
        response_body: r.get(8),
        response_headers: serde_json::from_value(r.get(11))
            .map_err(|e| StoreError::Corrupt(format!("attempt response headers: {e}")))?,
        url: r.get(9),
        manual: r.get(10),
    })
}

impl DeliveryLog for PgStore {
    async fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        let Some(ulid) = ids::parse(DELIVERY, id) else {
            return Ok(None);
        };
        self.db
            .client()
            .await?
            .query_opt(
                &format!("SELECT {DELIVERY_COLUMNS} FROM deliveries d WHERE d.id = $1"),
                &[&ulid.to_be_bytes().to_vec()],
            )
            .await?
            .map(|r| delivery_from(&r))
            .transpose()
    }

    /// The event and its payload bytes.
    async fn event(&self, id: &str) -> Result<Option<(EventMeta, Bytes)>, StoreError> {
        Ok(self
            .event_with_deliveries(id)
            .await?
            .map(|(meta, payload, _)| (meta, payload)))
    }

    /// The event, its payload bytes and its deliveries as they are now, in fan-out order.
    async fn event_with_deliveries(
        &self,
        id: &str,
    ) -> Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError> {
        let Some(ulid) = ids::parse(EVENT, id) else {
            return Ok(None);
        };
        let key = ulid.to_be_bytes().to_vec();
        let client = self.db.client().await?;
        let Some(e) = client
            .query_opt(
                "SELECT account_id, type, received_at, idempotency_key, debounce_key,
                        ordering_key, payload, labels, traceparent, tracestate
                 FROM events WHERE id = $1",
                &[&key],
            )
            .await?
        else {
            return Ok(None);
        };
        let deliveries: Vec<Delivery> = client
            .query(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM deliveries d WHERE d.event_id = $1 ORDER BY d.id"
                ),
                &[&key],
            )
            .await?
            .iter()
            .map(delivery_from)
            .collect::<Result<_, _>>()?;
        let (channels, tags) = super::rows::labels_of(e.get(7));
        let meta = EventMeta {
            id: ids::format(EVENT, ulid),
            account_id: e.get(0),
            event_type: e.get(1),
            received_at: e.get(2),
            idempotency_key: e.get(3),
            debounce_key: e.get(4),
            ordering_key: e.get(5),
            channels,
            tags,
            request_key: None,
            trace: super::rows::trace_of(e.get(8), e.get(9)),
            deliveries: deliveries.iter().map(|d| d.id.clone()).collect(),
        };
        let payload: Vec<u8> = e.get(6);
        Ok(Some((meta, Bytes::from(payload), deliveries)))
    }

    /// Every attempt of a delivery, oldest first.
    async fn attempts(&self, delivery_id: &str) -> Result<Vec<Attempt>, StoreError> {
        let Some(ulid) = ids::parse(DELIVERY, delivery_id) else {
            return Ok(Vec::new());
        };
        self.db
            .client()
            .await?
            .query(
                "SELECT id, number, at, duration_ms, status, http_status, error, request_headers,
                        response_body, url, manual, response_headers
                 FROM attempts WHERE delivery_id = $1 ORDER BY number",
                &[&ulid.to_be_bytes().to_vec()],
            )
            .await?
            .iter()
            .map(attempt_from)
            .collect()
    }

    /// Deliveries newest first, after `cursor`, matching `filter`; the next page's cursor, or
    /// `None` at the end.
    async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<Delivery>, Option<String>), StoreError> {
        let client = self.db.client().await?;
        let floor = match filter.text {
            Some(_) => search_floor(&client, &filter, cursor.as_deref()).await?,
            None => None,
        };
        let Some(q) = list_query(&filter, limit, cursor.as_deref(), floor) else {
            return Ok((Vec::new(), None));
        };
        let items: Vec<Delivery> = client
            .query(&q.sql, &q.refs())
            .await?
            .iter()
            .map(delivery_from)
            .collect::<Result<_, _>>()?;
        let next = match (items.len() == limit, floor) {
            (true, _) => items.last().map(|d| d.id.clone()),
            // A search that looked at all the events it may: the next page starts below them.
            (false, Some(floor)) => Some(ids::format(DELIVERY, ids::delivery_of(floor, 0))),
            (false, None) => None,
        };
        Ok((items, next))
    }

    /// How many of the endpoint's deliveries are pending. (Pending is exactly `due_at IS NOT
    /// NULL`: these queries read the pending deliveries' partial indexes, not the whole log.)
    async fn endpoint_pending(&self, endpoint_id: &str) -> Result<u64, StoreError> {
        let row = self
            .db
            .client()
            .await?
            .query_one(
                "SELECT count(*) FROM deliveries WHERE endpoint_id = $1 AND due_at IS NOT NULL",
                &[&endpoint_id],
            )
            .await?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }
}
