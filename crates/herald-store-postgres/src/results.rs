//! Attempts' results, written together: each finished attempt hands its delivery's new state
//! and its attempt record to a writer task, which writes every result waiting in one statement
//! (an update of the deliveries and an insert of the attempts, from arrays), fenced per row by
//! the lease's claim. On a busy node one round trip records dozens of attempts; an idle node's
//! single result goes out at once (nothing waits for a batch to fill).

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::Database;
use herald_core::model::{Attempt, Delivery, DeliveryState, Status};
use herald_store::StoreError;

/// Writer tasks per node: one. While it writes, the next results gather for its next statement
/// (measured end to end on one node: two writers wrote 3.8 results per statement, one 6.4, and
/// delivered 10-30% more).
const WRITERS: usize = 1;
/// Results one statement writes at most.
const MAX_PER_WRITE: usize = 512;

/// One attempt's result.
pub(super) struct Finish {
    pub id: Vec<u8>,
    pub claim: i64,
    pub now: Delivery,
    pub attempt: Option<Attempt>,
    /// `Ok(true)` written; `Ok(false)` the claim no longer held the delivery.
    pub reply: oneshot::Sender<Result<bool, StoreError>>,
}

/// Starts the writer tasks; they end once the returned sender is dropped.
pub(super) fn start(db: Database) -> mpsc::Sender<Finish> {
    let (tx, rx) = mpsc::channel::<Finish>(8192);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    for _ in 0..WRITERS {
        let (db, rx) = (db.clone(), rx.clone());
        tokio::spawn(async move {
            loop {
                let batch = {
                    let mut rx = rx.lock().await;
                    let Some(first) = rx.recv().await else {
                        return;
                    };
                    let mut batch = vec![first];
                    while batch.len() < MAX_PER_WRITE {
                        match rx.try_recv() {
                            Ok(f) => batch.push(f),
                            Err(_) => break,
                        }
                    }
                    batch
                };
                write(&db, batch).await;
            }
        });
    }
    tx
}

async fn write(db: &Database, batch: Vec<Finish>) {
    match write_rows(db, &batch).await {
        Ok(done) => {
            for f in batch {
                let _ = f.reply.send(Ok(done.contains(&f.id)));
            }
        }
        Err(e) => {
            for f in batch {
                let _ = f.reply.send(Err(e.clone()));
            }
        }
    }
}

/// One statement for the whole batch; returns the deliveries whose claim still held.
async fn write_rows(db: &Database, batch: &[Finish]) -> Result<HashSet<Vec<u8>>, StoreError> {
    let columns = Columns::of(batch)?;
    let client = db.queue_client().await?;
    let write = client.prepare_cached(WRITE).await?;
    let rows = client.query(&write, &columns.params()).await?;
    Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
}

/// $1–$9 the deliveries' new state, fenced by their claims; $10–$19 the attempts, written only
/// for deliveries whose claim still held. Answers the ids written.
const WRITE: &str = "WITH r AS (
         SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::text[], $4::text[],
                              $5::int[], $6::int[], $7::bigint[], $8::bool[], $9::bool[])
             AS r(id, claim, state, last_status, last_http, attempts, due, manual, queued)
     ), done AS (
         UPDATE deliveries d SET state = r.state, last_status = r.last_status,
             last_http_status = r.last_http, attempt_count = r.attempts,
             next_attempt_at = r.due, due_at = r.due, manual = r.manual,
             queued = r.queued, leased_by = NULL, claim = NULL
         FROM r WHERE d.id = r.id AND d.claim = r.claim
         RETURNING d.id
     ), recorded AS (
         INSERT INTO attempts (delivery_id, number, id, at, duration_ms, status,
                               http_status, error, request_headers, response_body, url,
                               manual, response_headers)
         SELECT a.* FROM unnest($10::bytea[], $11::int[], $12::text[], $13::bigint[],
                                $14::bigint[], $15::text[], $16::int[], $17::text[],
                                $18::jsonb[], $19::text[], $20::text[], $21::bool[],
                                $22::jsonb[])
             AS a(delivery_id, number, id, at, duration_ms, status, http_status, error,
                  request_headers, response_body, url, manual, response_headers)
         JOIN done ON done.id = a.delivery_id
     )
     SELECT id FROM done";

/// A batch of results as the statement's columns (one array per column).
#[derive(Default)]
struct Columns<'a> {
    ids: Vec<Vec<u8>>,
    claims: Vec<i64>,
    states: Vec<&'static str>,
    last_status: Vec<Option<&'static str>>,
    last_http: Vec<Option<i32>>,
    counts: Vec<i32>,
    due: Vec<Option<i64>>,
    manual: Vec<bool>,
    queued: Vec<bool>,
    a_delivery: Vec<Vec<u8>>,
    a_number: Vec<i32>,
    a_id: Vec<&'a str>,
    a_at: Vec<i64>,
    a_duration: Vec<i64>,
    a_status: Vec<&'static str>,
    a_http: Vec<Option<i32>>,
    a_error: Vec<Option<&'a str>>,
    a_headers: Vec<serde_json::Value>,
    a_body: Vec<&'a str>,
    a_url: Vec<Option<&'a str>>,
    a_manual: Vec<bool>,
    a_response_headers: Vec<serde_json::Value>,
}

impl<'a> Columns<'a> {
    fn of(batch: &'a [Finish]) -> Result<Columns<'a>, StoreError> {
        let n = batch.len();
        let mut c = Columns {
            ids: Vec::with_capacity(n),
            claims: Vec::with_capacity(n),
            states: Vec::with_capacity(n),
            last_status: Vec::with_capacity(n),
            last_http: Vec::with_capacity(n),
            counts: Vec::with_capacity(n),
            due: Vec::with_capacity(n),
            manual: Vec::with_capacity(n),
            queued: Vec::with_capacity(n),
            a_delivery: Vec::with_capacity(n),
            ..Columns::default()
        };
        for f in batch {
            let d = &f.now;
            c.ids.push(f.id.clone());
            c.claims.push(f.claim);
            c.states.push(d.state.as_str());
            c.last_status.push(d.last_status.map(Status::as_str));
            c.last_http.push(d.last_http_status.map(i32::from));
            c.counts.push(d.attempt_count as i32);
            c.due.push(match d.state {
                DeliveryState::Pending => d.next_attempt_at,
                _ => None,
            });
            c.manual.push(d.manual);
            c.queued.push(d.queued);
            if let Some(a) = &f.attempt {
                c.a_delivery.push(f.id.clone());
                c.a_number.push(a.number as i32);
                c.a_id.push(a.id.as_str());
                c.a_at.push(a.at);
                c.a_duration.push(a.duration_ms.min(i64::MAX as u64) as i64);
                c.a_status.push(a.status.as_str());
                c.a_http.push(a.http_status.map(i32::from));
                c.a_error.push(a.error.as_deref());
                c.a_headers.push(
                    serde_json::to_value(&a.request_headers)
                        .map_err(|e| StoreError::Encode(e.to_string()))?,
                );
                c.a_body.push(a.response_body.as_str());
                c.a_url.push(a.url.as_deref());
                c.a_manual.push(a.manual);
                c.a_response_headers.push(
                    serde_json::to_value(&a.response_headers)
                        .map_err(|e| StoreError::Encode(e.to_string()))?,
                );
            }
        }
        Ok(c)
    }

    /// The statement's parameters, in [`WRITE`]'s order.
    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 22] {
        [
            &self.ids,
            &self.claims,
            &self.states,
            &self.last_status,
            &self.last_http,
            &self.counts,
            &self.due,
            &self.manual,
            &self.queued,
            &self.a_delivery,
            &self.a_number,
            &self.a_id,
            &self.a_at,
            &self.a_duration,
            &self.a_status,
            &self.a_http,
            &self.a_error,
            &self.a_headers,
            &self.a_body,
            &self.a_url,
            &self.a_manual,
            &self.a_response_headers,
        ]
    }
}
