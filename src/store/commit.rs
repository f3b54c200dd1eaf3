//! The committer: one task owns ingest durability (group commit).
//!
//! Ingest handlers hand it their prepared events and await its answer. Each cycle it takes every
//! job waiting in the channel, applies them in one multi-tree transaction (idempotency keys and
//! debounce windows are decided there, so two requests cannot both win a key or a window), calls
//! sled's `flush` and then `fdatasync` on the data file (sled's flush alone is not an fsync, see
//! notes/sled.md), and only then answers every waiter of the cycle. The work runs on a blocking
//! thread; while it runs, the next cycle's jobs pile up in the channel, so one fsync acknowledges
//! everything that arrived during the previous one. If the fsync fails, the cycle's writes are
//! undone (every write keeps the value it replaced) and its requests get an error.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use sled::transaction::{
    ConflictableTransactionError, TransactionalTree, UnabortableTransactionError,
};
use sled::{IVec, Transactional};
use tokio::sync::{mpsc, oneshot};

use super::codec::{self, CHUNK, INLINE_PAYLOAD};
use super::{tx_error, Inner, StoreError};
use crate::clock::Millis;
use crate::engine::debounce::{self, Decision, Window};
use crate::ids::{self, ATTEMPT};
use crate::ids::{DELIVERY, EVENT};
use crate::model::{Attempt, Delivery, DeliveryState, Endpoint, EventMeta, Status};

/// How long an idempotency key keeps answering with the first event (SPEC §2).
pub const IDEMPOTENCY_WINDOW_MS: Millis = 24 * 3600 * 1000;
/// Events taken into one commit at most: bounds a cycle's latency and memory.
const MAX_EVENTS_PER_COMMIT: usize = 8192;

/// An event ready to store: ids made, fan-out decided, payload bytes as received.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub meta: EventMeta,
    pub payload: Bytes,
    pub deliveries: Vec<Delivery>,
    /// Set when the event's type is debounced and the event has a debounce key.
    pub debounce: Option<DebounceRule>,
}

impl NewEvent {
    /// A new event with one pending delivery per target endpoint, due `now`; with no target, one
    /// delivery without an endpoint, which the engine records as `no_endpoint` (once per event,
    /// after the conditions that come before it).
    pub fn fan_out<'a>(
        account_id: String,
        event_type: String,
        payload: Bytes,
        targets: impl Iterator<Item = &'a Arc<Endpoint>>,
        now: Millis,
    ) -> NewEvent {
        let event_id = ids::new_id(EVENT, now);
        let delivery = |endpoint_id: Option<String>| Delivery {
            id: ids::new_id(DELIVERY, now),
            event_id: event_id.clone(),
            endpoint_id,
            account_id: account_id.clone(),
            event_type: event_type.clone(),
            state: DeliveryState::Pending,
            last_status: None,
            attempt_count: 0,
            next_attempt_at: Some(now),
            created_at: now,
            manual: false,
        };
        let mut deliveries: Vec<Delivery> =
            targets.map(|ep| delivery(Some(ep.id.clone()))).collect();
        if deliveries.is_empty() {
            deliveries.push(delivery(None));
        }
        NewEvent {
            debounce: None,
            meta: EventMeta {
                id: event_id,
                account_id,
                event_type,
                received_at: now,
                idempotency_key: None,
                debounce_key: None,
                deliveries: deliveries.iter().map(|d| d.id.clone()).collect(),
            },
            payload,
            deliveries,
        }
    }
}

/// The debounce rule that applies to one event.
#[derive(Debug, Clone)]
pub struct DebounceRule {
    /// The key's window state lives under (account, type, key).
    pub key: String,
    pub window_ms: Millis,
    pub trailing: bool,
}

/// What the commit did with one event.
#[derive(Debug, Clone)]
pub enum IngestOutcome {
    /// Stored; the deliveries as stored (a debounced event's are `skipped`, a trailing
    /// candidate's are due when its window closes).
    Created { deliveries: Vec<Delivery> },
    /// The idempotency key was seen within the window: nothing was queued; this is the first
    /// event's id.
    Duplicate { event_id: String },
}

pub(super) enum Job {
    Ingest {
        events: Vec<NewEvent>,
        reply: oneshot::Sender<Result<Vec<IngestOutcome>, StoreError>>,
    },
    /// Make every write so far durable (admin changes such as endpoints).
    Sync {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

impl Job {
    fn event_count(&self) -> usize {
        match self {
            Job::Ingest { events, .. } => events.len(),
            Job::Sync { .. } => 0,
        }
    }
}

/// Runs until every sender is gone (the store was dropped), finishing the jobs it has.
pub(super) async fn run(inner: Arc<Inner>, mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.recv().await {
        let mut count = first.event_count();
        let mut jobs = vec![first];
        while count < MAX_EVENTS_PER_COMMIT {
            match rx.try_recv() {
                Ok(job) => {
                    count += job.event_count();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let inner = inner.clone();
        // The commit blocks on disk; run it off the async workers and wait for it, so only one
        // commit is in flight and the channel collects the next batch meanwhile.
        if let Err(e) = tokio::task::spawn_blocking(move || commit(&inner, jobs)).await {
            tracing::error!(error = %e, "commit task failed");
        }
    }
}

fn commit(inner: &Inner, jobs: Vec<Job>) {
    let batches: Vec<&[NewEvent]> = jobs
        .iter()
        .filter_map(|j| match j {
            Job::Ingest { events, .. } => Some(events.as_slice()),
            Job::Sync { .. } => None,
        })
        .collect();
    let result = apply(inner, &batches).and_then(|cycle| match inner.sync() {
        Ok(()) => Ok(cycle),
        Err(e) => {
            // Nothing of this cycle was acknowledged: put back what it replaced, so a failed
            // request stores nothing and a retry of it is not answered as a duplicate.
            if let Err(undo) = undo(inner, &cycle.undo) {
                tracing::error!(error = %undo, "cannot roll back a failed commit");
            }
            Err(e)
        }
    });
    inner.set_healthy(result.is_ok());
    let cycle = match result {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "commit failed; answering 503 to its requests");
            for job in jobs {
                match job {
                    Job::Ingest { reply, .. } => drop(reply.send(Err(e.clone()))),
                    Job::Sync { reply } => drop(reply.send(Err(e.clone()))),
                }
            }
            return;
        }
    };
    for (at, id) in &cycle.superseded {
        inner.due.remove(*at, id);
        inner
            .stats
            .count(Some(DeliveryState::Pending), DeliveryState::Skipped);
    }
    let created = cycle
        .outcomes
        .iter()
        .flatten()
        .filter(|o| matches!(o, IngestOutcome::Created { .. }))
        .count() as u64;
    // A cycle of only `Sync` jobs acknowledged no events: not a batch.
    if !cycle.outcomes.is_empty() {
        inner.metrics.commit_batch_size.observe(created as f64);
        inner
            .metrics
            .events_ingested
            .fetch_add(created, std::sync::atomic::Ordering::Relaxed);
    }
    let mut outcomes = cycle.outcomes.into_iter();
    for job in jobs {
        match job {
            Job::Ingest { reply, .. } => {
                let outcome = outcomes.next().unwrap_or_default();
                let mut due = Vec::new();
                for o in &outcome {
                    if let IngestOutcome::Created { deliveries } = o {
                        for d in deliveries {
                            inner.stats.count(None, d.state);
                            if let (DeliveryState::Pending, Some(at)) = (d.state, d.next_attempt_at)
                            {
                                due.push((at, d.id.clone()));
                            }
                        }
                    }
                }
                inner.due.insert_many(due);
                drop(reply.send(Ok(outcome)));
            }
            Job::Sync { reply } => drop(reply.send(Ok(()))),
        }
    }
}

/// What one cycle did.
struct Cycle {
    outcomes: Vec<Vec<IngestOutcome>>,
    /// Trailing candidates debounced by a newer event: (their due time, delivery id).
    superseded: Vec<(Millis, String)>,
    undo: Vec<UndoEntry>,
}

/// The trees an ingest touches, by position in [`ingest_trees`].
#[derive(Debug, Clone, Copy)]
enum T {
    Events = 0,
    Payloads,
    Deliveries,
    Queue,
    Idempotency,
    Attempts,
    Debounce,
}

/// A key as it was before this cycle wrote it.
struct UndoEntry(T, Vec<u8>, Option<IVec>);

type IngestTrees<'a> = (
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
);

/// The trees an ingest writes, in the order of [`T`].
fn ingest_trees(t: &super::Trees) -> IngestTrees<'_> {
    (
        &t.events,
        &t.payloads,
        &t.deliveries,
        &t.queue,
        &t.idempotency,
        &t.attempts,
        &t.debounce,
    )
}

type TxResult<T> = Result<T, ConflictableTransactionError<StoreError>>;

/// Writes inside the transaction, remembering what each write replaced.
struct Tx<'a> {
    trees: [&'a TransactionalTree; 7],
    undo: Vec<UndoEntry>,
}

impl Tx<'_> {
    fn get(&self, t: T, key: &[u8]) -> Result<Option<IVec>, UnabortableTransactionError> {
        self.trees[t as usize].get(key)
    }

    fn insert(&mut self, t: T, key: Vec<u8>, value: &[u8]) -> TxResult<()> {
        let old = self.trees[t as usize].insert(key.as_slice(), value)?;
        self.undo.push(UndoEntry(t, key, old));
        Ok(())
    }

    fn remove(&mut self, t: T, key: Vec<u8>) -> TxResult<()> {
        let old = self.trees[t as usize].remove(key.as_slice())?;
        self.undo.push(UndoEntry(t, key, old));
        Ok(())
    }

    fn put_json<V: serde::Serialize>(&mut self, t: T, key: Vec<u8>, v: &V) -> TxResult<()> {
        let bytes = codec::encode(v).map_err(ConflictableTransactionError::Abort)?;
        self.insert(t, key, &bytes)
    }
}

fn decode<V: serde::de::DeserializeOwned>(bytes: &[u8]) -> TxResult<V> {
    codec::decode(bytes).map_err(ConflictableTransactionError::Abort)
}

/// One transaction for the whole cycle.
fn apply(inner: &Inner, batches: &[&[NewEvent]]) -> Result<Cycle, StoreError> {
    ingest_trees(&inner.trees)
        .transaction(
            |(events, payloads, deliveries, queue, idem, attempts, windows)| {
                let mut tx = Tx {
                    trees: [events, payloads, deliveries, queue, idem, attempts, windows],
                    undo: Vec::new(),
                };
                // Keys claimed earlier in this same cycle.
                let mut claimed: HashMap<Vec<u8>, String> = HashMap::new();
                let mut superseded = Vec::new();
                let mut all = Vec::with_capacity(batches.len());
                for batch in batches {
                    let mut outcomes = Vec::with_capacity(batch.len());
                    for ev in batch.iter() {
                        if let Some(first) = claim_idempotency_key(&mut tx, &mut claimed, &ev.meta)?
                        {
                            outcomes.push(IngestOutcome::Duplicate { event_id: first });
                            continue;
                        }
                        let mut dels = ev.deliveries.clone();
                        if let Some(rule) = &ev.debounce {
                            superseded.extend(apply_debounce(&mut tx, rule, &ev.meta, &mut dels)?);
                        }
                        store_event(&mut tx, ev, &dels)?;
                        outcomes.push(IngestOutcome::Created { deliveries: dels });
                    }
                    all.push(outcomes);
                }
                Ok(Cycle {
                    outcomes: all,
                    superseded,
                    undo: tx.undo,
                })
            },
        )
        .map_err(tx_error)
}

/// `Some(first event id)` if the event's idempotency key was used within the window; otherwise
/// claims the key for this event.
fn claim_idempotency_key(
    tx: &mut Tx<'_>,
    claimed: &mut HashMap<Vec<u8>, String>,
    m: &EventMeta,
) -> TxResult<Option<String>> {
    let Some(key) = &m.idempotency_key else {
        return Ok(None);
    };
    let k = codec::account_key(&m.account_id, key);
    if let Some(first) = claimed.get(&k) {
        return Ok(Some(first.clone()));
    }
    if let Some(v) = tx.get(T::Idempotency, &k)? {
        let rec: IdempotencyRecord = decode(&v)?;
        if m.received_at - rec.at < IDEMPOTENCY_WINDOW_MS {
            return Ok(Some(rec.event_id));
        }
    }
    let rec = IdempotencyRecord {
        event_id: m.id.clone(),
        at: m.received_at,
    };
    tx.put_json(T::Idempotency, k.clone(), &rec)?;
    claimed.insert(k, m.id.clone());
    Ok(None)
}

/// Applies the debounce decision to the event's deliveries; returns trailing candidates it
/// debounced.
fn apply_debounce(
    tx: &mut Tx<'_>,
    rule: &DebounceRule,
    m: &EventMeta,
    dels: &mut [Delivery],
) -> TxResult<Vec<(Millis, String)>> {
    let key = rule.key.as_bytes().to_vec();
    let window: Option<Window> = match tx.get(T::Debounce, &key)? {
        Some(v) => Some(decode(&v)?),
        None => None,
    };
    let now = m.received_at;
    let mut superseded = Vec::new();
    match debounce::decide(window.as_ref(), now, rule.window_ms, rule.trailing) {
        Decision::Open(w) => tx.put_json(T::Debounce, key, &w)?,
        Decision::Debounce => {
            for d in dels.iter_mut() {
                debounced(tx, d, now)?;
            }
        }
        Decision::Trail { due, supersedes } => {
            for id in supersedes {
                let Some(v) = tx.get(T::Deliveries, id.as_bytes())? else {
                    continue;
                };
                let mut old: Delivery = decode(&v)?;
                if let (DeliveryState::Pending, Some(at)) = (old.state, old.next_attempt_at) {
                    tx.remove(T::Queue, codec::queue_key(at, &old.id))?;
                    debounced(tx, &mut old, now)?;
                    tx.put_json(T::Deliveries, old.id.as_bytes().to_vec(), &old)?;
                    superseded.push((at, old.id));
                }
            }
            for d in dels.iter_mut() {
                d.next_attempt_at = Some(due);
            }
            let w = Window {
                end: due,
                candidate: dels.iter().map(|d| d.id.clone()).collect(),
            };
            tx.put_json(T::Debounce, key, &w)?;
        }
    }
    Ok(superseded)
}

/// Ends a delivery as `skipped` with a `debounced` attempt record.
fn debounced(tx: &mut Tx<'_>, d: &mut Delivery, now: Millis) -> TxResult<()> {
    let attempt = Attempt {
        id: ids::new_id(ATTEMPT, now),
        number: d.attempt_count + 1,
        at: now,
        duration_ms: 0,
        status: Status::Debounced,
        http_status: None,
        error: None,
        request_headers: Vec::new(),
        response_body: String::new(),
    };
    d.state = DeliveryState::Skipped;
    d.last_status = Some(Status::Debounced);
    d.attempt_count = attempt.number;
    d.next_attempt_at = None;
    tx.put_json(
        T::Attempts,
        codec::attempt_key(&d.id, &attempt.id),
        &attempt,
    )
}

fn store_event(tx: &mut Tx<'_>, ev: &NewEvent, dels: &[Delivery]) -> TxResult<()> {
    let m = &ev.meta;
    let value = codec::encode_event(m, &ev.payload).map_err(ConflictableTransactionError::Abort)?;
    tx.insert(T::Events, m.id.as_bytes().to_vec(), &value)?;
    if ev.payload.len() > INLINE_PAYLOAD {
        for (i, chunk) in ev.payload.chunks(CHUNK).enumerate() {
            tx.insert(T::Payloads, codec::chunk_key(&m.id, i as u32), chunk)?;
        }
    }
    for d in dels {
        tx.put_json(T::Deliveries, d.id.as_bytes().to_vec(), d)?;
        if let (DeliveryState::Pending, Some(at)) = (d.state, d.next_attempt_at) {
            tx.insert(T::Queue, codec::queue_key(at, &d.id), &[])?;
        }
    }
    Ok(())
}

/// Puts back what a cycle replaced, newest write first.
fn undo(inner: &Inner, entries: &[UndoEntry]) -> Result<(), StoreError> {
    ingest_trees(&inner.trees)
        .transaction(
            |(events, payloads, deliveries, queue, idem, attempts, windows)| {
                let trees = [events, payloads, deliveries, queue, idem, attempts, windows];
                for UndoEntry(t, key, old) in entries.iter().rev() {
                    let tree = trees[*t as usize];
                    match old {
                        Some(v) => tree.insert(key.as_slice(), v.clone())?,
                        None => tree.remove(key.as_slice())?,
                    };
                }
                Ok::<_, ConflictableTransactionError<StoreError>>(())
            },
        )
        .map_err(tx_error)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct IdempotencyRecord {
    event_id: String,
    at: Millis,
}
