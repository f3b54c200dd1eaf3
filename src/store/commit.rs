//! The committer: one task owns ingest durability (group commit).
//!
//! Ingest handlers hand it their prepared events and await its answer. Each cycle it takes every
//! job waiting in the channel, applies them in one multi-tree transaction (idempotency keys are
//! checked there, so two requests with one key cannot both win), calls sled's `flush` and then
//! `fdatasync` on the data file (sled's flush alone is not an fsync, see notes/sled.md), and only
//! then answers every waiter of the cycle. The work runs on a blocking thread; while it runs, the
//! next cycle's jobs pile up in the channel, so one fsync acknowledges everything that arrived
//! during the previous one.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use sled::transaction::ConflictableTransactionError;
use sled::Transactional;
use tokio::sync::{mpsc, oneshot};

use super::codec::{self, CHUNK, INLINE_PAYLOAD};
use super::{tx_error, Inner, StoreError};
use crate::clock::Millis;
use crate::model::{Delivery, DeliveryState, EventMeta};

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
}

/// What the commit did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    Created,
    /// The idempotency key was seen within the window: nothing was queued; this is the first
    /// event's id.
    Duplicate {
        event_id: String,
    },
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
    let result = apply(inner, &batches).and_then(|outcomes| match inner.sync() {
        Ok(()) => Ok(outcomes),
        Err(e) => {
            // Nothing of this cycle was acknowledged: take it back out, so a failed request
            // stores nothing and a retry of it is not answered as a duplicate.
            if let Err(undo) = rollback(inner, &batches, &outcomes) {
                tracing::error!(error = %undo, "cannot roll back a failed commit");
            }
            Err(e)
        }
    });
    inner.set_healthy(result.is_ok());
    let mut outcomes = match result {
        Ok(o) => o.into_iter(),
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
    for job in jobs {
        match job {
            Job::Ingest { events, reply } => {
                let outcome = outcomes.next().unwrap_or_default();
                let mut due = Vec::new();
                for (event, o) in events.iter().zip(&outcome) {
                    if *o == IngestOutcome::Created {
                        for d in &event.deliveries {
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

type IngestTrees<'a> = (
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
    &'a sled::Tree,
);

/// The trees an ingest writes, in the order the transactions below name them.
fn ingest_trees(t: &super::Trees) -> IngestTrees<'_> {
    (
        &t.events,
        &t.payloads,
        &t.deliveries,
        &t.queue,
        &t.idempotency,
    )
}

/// One transaction for the whole cycle; returns one outcome list per batch.
fn apply(inner: &Inner, batches: &[&[NewEvent]]) -> Result<Vec<Vec<IngestOutcome>>, StoreError> {
    let trees = ingest_trees(&inner.trees);
    let result = trees.transaction(|(events, payloads, deliveries, queue, idem)| {
        // Keys claimed earlier in this same cycle.
        let mut claimed: HashMap<Vec<u8>, String> = HashMap::new();
        let mut all = Vec::with_capacity(batches.len());
        for batch in batches {
            let mut outcomes = Vec::with_capacity(batch.len());
            for ev in batch.iter() {
                let m = &ev.meta;
                if let Some(key) = &m.idempotency_key {
                    let k = codec::account_key(&m.account_id, key);
                    if let Some(first) = claimed.get(&k) {
                        outcomes.push(IngestOutcome::Duplicate {
                            event_id: first.clone(),
                        });
                        continue;
                    }
                    if let Some(v) = idem.get(&k)? {
                        let rec: IdempotencyRecord =
                            codec::decode(&v).map_err(ConflictableTransactionError::Abort)?;
                        if m.received_at - rec.at < IDEMPOTENCY_WINDOW_MS {
                            outcomes.push(IngestOutcome::Duplicate {
                                event_id: rec.event_id,
                            });
                            continue;
                        }
                    }
                    let rec = IdempotencyRecord {
                        event_id: m.id.clone(),
                        at: m.received_at,
                    };
                    idem.insert(
                        k.clone(),
                        codec::encode(&rec).map_err(ConflictableTransactionError::Abort)?,
                    )?;
                    claimed.insert(k, m.id.clone());
                }
                let value = codec::encode_event(m, &ev.payload)
                    .map_err(ConflictableTransactionError::Abort)?;
                events.insert(m.id.as_bytes(), value)?;
                if ev.payload.len() > INLINE_PAYLOAD {
                    for (i, chunk) in ev.payload.chunks(CHUNK).enumerate() {
                        payloads.insert(codec::chunk_key(&m.id, i as u32), chunk)?;
                    }
                }
                for d in &ev.deliveries {
                    let v = codec::encode(d).map_err(ConflictableTransactionError::Abort)?;
                    deliveries.insert(d.id.as_bytes(), v)?;
                    if let (DeliveryState::Pending, Some(at)) = (d.state, d.next_attempt_at) {
                        queue.insert(codec::queue_key(at, &d.id), &[])?;
                    }
                }
                outcomes.push(IngestOutcome::Created);
            }
            all.push(outcomes);
        }
        Ok(all)
    });
    result.map_err(tx_error)
}

/// Removes what [`apply`] wrote for the events it created.
fn rollback(
    inner: &Inner,
    batches: &[&[NewEvent]],
    outcomes: &[Vec<IngestOutcome>],
) -> Result<(), StoreError> {
    let trees = ingest_trees(&inner.trees);
    let created = || {
        batches
            .iter()
            .zip(outcomes)
            .flat_map(|(b, o)| b.iter().zip(o))
            .filter(|(_, o)| **o == IngestOutcome::Created)
            .map(|(ev, _)| ev)
    };
    let result = trees.transaction(|(events, payloads, deliveries, queue, idem)| {
        for ev in created() {
            let m = &ev.meta;
            events.remove(m.id.as_bytes())?;
            if ev.payload.len() > INLINE_PAYLOAD {
                for i in 0..ev.payload.len().div_ceil(CHUNK) {
                    payloads.remove(codec::chunk_key(&m.id, i as u32))?;
                }
            }
            for d in &ev.deliveries {
                deliveries.remove(d.id.as_bytes())?;
                if let Some(at) = d.next_attempt_at {
                    queue.remove(codec::queue_key(at, &d.id))?;
                }
            }
            if let Some(key) = &m.idempotency_key {
                idem.remove(codec::account_key(&m.account_id, key))?;
            }
        }
        Ok::<_, ConflictableTransactionError<StoreError>>(())
    });
    result.map_err(tx_error)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct IdempotencyRecord {
    event_id: String,
    at: Millis,
}
