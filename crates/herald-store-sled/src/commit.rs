//! The committer: one thread owns ingest durability (group commit).
//!
//! Ingest handlers hand it their checked events and await its answer. Each cycle it takes every
//! job waiting in the channel, gives each event its id, decides its idempotency key and debounce
//! window (only the committer writes those, so two requests cannot both win a key or a window),
//! writes its rows, calls sled's `flush` and then `fdatasync` on the data file (sled's flush
//! alone is not an fsync, see notes/sled.md), and only then answers every waiter of the cycle.
//! While a cycle runs, the next cycle's jobs pile up in the channel, so one fsync acknowledges
//! everything that arrived during the previous one.
//!
//! The cycle's rows are gathered in memory (reads in the cycle see them: a key claimed or a
//! window opened by an earlier event of the cycle counts) and written as one sled batch, which
//! sled recovers all or nothing. If the write or the fsync fails, the cycle's writes are undone
//! (each overwritten key keeps the value it replaced) and its requests get an error: a request
//! answered `503` stores nothing, so a retry of it is not answered as a duplicate. The undo is
//! written to a file of its own before it is tried in sled ([`undo`]): if the failed cycle's
//! rows reached sled's file anyway and the undo did not, the next start applies that file
//! before it reads anything. Only if that file cannot be written either does a refused cycle
//! survive; for that last case the undo is made durable before the cycle's fresh deliveries
//! leave the fresh watermark's buckets, so the watermark has not passed them and the next start
//! finds and delivers those events (at least once, never a key without its event).
//!
//! Debounce windows are decided at the cycle's commit time (the clock read when the cycle
//! starts), the time the engine's schedule uses too. A trailing candidate that a newer event
//! debounces is claimed ([`Claim`]) for the rest of the cycle, so the engine cannot attempt it
//! between the decision and the fsync (or the undo); a candidate the engine is attempting
//! already is left to its attempt.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::codec::{self, CHUNK};
use super::cycle::Cycle;
use super::debounce::apply_debounce;
use super::deliveries::delivery_from;
use super::key;
use super::keys;
use super::{Entry, IngestOutcome, Inner, NewEvent, StoreError, IDEMPOTENCY_WINDOW_MS};
use herald_core::clock::Millis;
use herald_core::ids::{self, EVENT};
use herald_core::model::{Delivery, DeliveryState, EventMeta};

/// Events taken into one commit at most: bounds a cycle's latency and memory.
const MAX_EVENTS_PER_COMMIT: usize = 8192;

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
pub(super) fn run(inner: &Arc<Inner>, mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.blocking_recv() {
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
        commit(inner, jobs);
    }
}

/// One group commit: every job's events into one batch, applied and synced once, then each
/// job answered.
///
/// Longer than most functions on purpose: durability rests on the order of its steps (write,
/// sync, then acknowledge; undo on a failed sync), which one function keeps in view.
fn commit(inner: &Arc<Inner>, jobs: Vec<Job>) {
    let mut cycle = Cycle {
        now: inner.clock.now_ms(),
        ..Cycle::default()
    };
    let mut outcomes = Vec::with_capacity(jobs.len());
    // A store that failed for good writes nothing more (see `health`).
    let mut result = inner.health.not_failed();
    for job in &jobs {
        if result.is_err() {
            break;
        }
        if let Job::Ingest { events, .. } = job {
            match apply(inner, &mut cycle, events) {
                Ok(o) => outcomes.push(o),
                Err(e) => result = Err(e),
            }
        }
    }
    #[cfg(test)]
    inner.faults.hold_writing();
    // The keys go in before the fsync: a key that cannot be written fails the cycle, so no
    // event is acknowledged without its key (see `keys`).
    let result = result
        .and_then(|()| inner.keys.write(&cycle.keys))
        .and_then(|()| cycle.write(inner))
        .and_then(|()| inner.sync());
    inner.set_healthy(result.is_ok());
    if let Err(e) = result {
        // Nothing of this cycle was acknowledged: put back what it replaced, so a failed
        // request stores nothing and a retry of it is not answered as a duplicate.
        if let Err(undo) = cycle.undo(inner) {
            tracing::error!(error = %undo, "cannot roll back a failed commit");
        }
        // Its keys name events that do not exist (no claim); their slots are freed if they can be.
        if let Err(release) = inner.keys.release(&cycle.keys) {
            tracing::warn!(error = %release, "cannot release a failed commit's idempotency keys");
        }
        tracing::error!(error = %e, "commit failed; answering 503 to its requests");
        // The superseded candidates are released before the answer, not when the cycle is
        // dropped after it: whoever hears the 503 finds them free.
        cycle.claims.clear();
        inner.mark_queued();
        for job in jobs {
            match job {
                Job::Ingest { reply, .. } => drop(reply.send(Err(e.clone()))),
                Job::Sync { reply } => drop(reply.send(Err(e.clone()))),
            }
        }
        return;
    }
    for s in &cycle.superseded {
        inner.due.remove(s.lane, s.due, s.delivery);
        inner.due.ended(s.lane, s.delivery);
        inner
            .stats
            .count(Some(DeliveryState::Pending), DeliveryState::Skipped);
    }
    // Durable: the keys written up to the last event may be recorded as synced once they are.
    inner.keys.mark(inner.lock_fresh().last_event);
    inner.due.insert_many(cycle.due.drain(..));
    inner.mark_queued();
    for state in &cycle.states {
        inner.stats.count(None, *state);
    }
    // The superseded candidates' rows and index entries agree now: the engine may look again.
    cycle.claims.clear();
    // A cycle of only `Sync` jobs acknowledged no events: not a batch.
    if !outcomes.is_empty() {
        inner
            .metrics
            .commit_batch_size
            .observe(cycle.created as f64);
        inner
            .metrics
            .events_ingested
            .fetch_add(cycle.created, std::sync::atomic::Ordering::Relaxed);
    }
    let mut outcomes = outcomes.into_iter();
    for job in jobs {
        match job {
            Job::Ingest { reply, .. } => {
                drop(reply.send(Ok(outcomes.next().unwrap_or_default())));
            }
            Job::Sync { reply } => drop(reply.send(Ok(()))),
        }
    }
}

/// Stores one job's events.
fn apply(
    inner: &Arc<Inner>,
    cycle: &mut Cycle,
    events: &[NewEvent],
) -> Result<Vec<IngestOutcome>, StoreError> {
    let mut outcomes = Vec::with_capacity(events.len());
    for ev in events {
        if let Some(event_id) = repeated(inner, cycle, ev)? {
            outcomes.push(IngestOutcome::Repeated { event_id });
            continue;
        }
        if let Some(first) = claimed_before(inner, cycle, ev)? {
            outcomes.push(IngestOutcome::Duplicate { event_id: first });
            continue;
        }
        outcomes.push(store_event(inner, cycle, ev)?);
    }
    Ok(outcomes)
}

/// `Some` if the event's request key was answered within the window: by a kept answer
/// (`Some(None)`) or by a message that exists (`Some(Some(its id))`).
fn repeated(
    inner: &Inner,
    cycle: &Cycle,
    ev: &NewEvent,
) -> Result<Option<Option<String>>, StoreError> {
    let Some(key) = &ev.request_key else {
        return Ok(None);
    };
    let now = cycle.now.max(ev.received_at);
    if inner.kept_answer(&ev.account_id, key, now)?.is_some() {
        return Ok(Some(None));
    }
    let row = |day| keys::request_row(day, &ev.account_id, key);
    Ok(inner
        .key_claim(now, row, Some(&cycle.claimed))?
        .map(|first| Some(ids::format(EVENT, first))))
}

/// `Some(first event id)` if the event's idempotency key was claimed within the window (by an
/// event that exists).
fn claimed_before(
    inner: &Inner,
    cycle: &Cycle,
    ev: &NewEvent,
) -> Result<Option<String>, StoreError> {
    let Some(idem) = &ev.idempotency_key else {
        return Ok(None);
    };
    let row = |day| keys::key_row(day, &ev.account_id, idem);
    Ok(inner
        .key_claim(cycle.now.max(ev.received_at), row, Some(&cycle.claimed))?
        .map(|first| ids::format(EVENT, first)))
}

impl Inner {
    /// The event a key row names (`row` of its day) within the window at `now`, if that event
    /// exists: a key claimed on one day is looked for that day and the next, on the keys' own
    /// timeline ([`Inner::key_time`]). `pending` holds the rows a cycle claimed before its
    /// write.
    pub(super) fn key_claim(
        &self,
        now: Millis,
        row: impl Fn(u32) -> keys::KeyRow,
        pending: Option<&HashMap<keys::KeyRow, u128>>,
    ) -> Result<Option<u128>, StoreError> {
        let now = self.key_time(now);
        let today = key::idempotency_day(now);
        for day in [today, today.saturating_sub(1)] {
            let k = row(day);
            if let Some(&first) = pending.and_then(|p| p.get(&k)) {
                return Ok(Some(first));
            }
            let Some(first) = self.keys.get(&k)? else {
                continue;
            };
            // A key whose event retention is pruning (or a format-3 migration's key of a
            // commit that did not finish) is no claim.
            if now - ids::ulid_ms(first) < IDEMPOTENCY_WINDOW_MS && self.event_exists(first)? {
                return Ok(Some(first));
            }
        }
        Ok(None)
    }
}

/// One event of a commit cycle: its idempotency key and debounce window decided, its rows and
/// index entries written into the cycle's batch, its counts and its undo record kept.
///
/// Longer than most functions on purpose: each step reads what the one before decided, and
/// the order is what makes a failed commit's undo exact; it reads best as one sequence.
fn store_event(
    inner: &Arc<Inner>,
    cycle: &mut Cycle,
    ev: &NewEvent,
) -> Result<IngestOutcome, StoreError> {
    let now = ev.received_at;
    let ulid = {
        let mut fresh = inner.lock_fresh();
        let ulid = ids::event_after(fresh.last_event, now);
        fresh.last_event = ulid;
        ulid
    };
    let event_id = ids::format(EVENT, ulid);
    let meta = EventMeta {
        id: event_id.clone(),
        account_id: ev.account_id.clone(),
        event_type: ev.event_type.clone(),
        received_at: now,
        idempotency_key: ev.idempotency_key.clone(),
        debounce_key: ev.debounce_key.clone(),
        ordering_key: ev.ordering_key.clone(),
        channels: ev.channels.clone(),
        tags: ev.tags.clone(),
        request_key: ev.request_key.clone(),
        trace: ev.trace.clone(),
        deliveries: Vec::new(),
    };
    let mut deliveries: Vec<Delivery> = ev
        .targets
        .iter()
        .enumerate()
        .map(|(i, lane)| delivery_from(ids::delivery_of(ulid, i), &meta, *lane, None, None))
        .collect();
    let fresh = match &ev.debounce {
        Some(rule) => apply_debounce(inner, cycle, rule, ulid, &ev.targets, &mut deliveries)?,
        None => true,
    };
    if fresh {
        // Counted before the event row exists, so the watermark written meanwhile never passes
        // this event.
        let mut buckets = inner.lock_fresh();
        for i in 0..ev.targets.len() {
            let d = ids::delivery_of(ulid, i);
            buckets.add(d);
            cycle.fresh.push(d);
        }
    }
    // Its idempotency key and its request key, claimed for the rest of the cycle too.
    for (row, event) in keys::event_rows(&meta, ulid) {
        cycle.claimed.insert(row, event);
        cycle.keys.push((row, event));
    }
    let encoded = codec::encode_event(&meta, &ev.targets, &ev.payload)?;
    if !encoded.payload_inline {
        for (i, chunk) in ev.payload.chunks(CHUNK).enumerate() {
            cycle.put_new(&key::chunk(ulid, i as u32), chunk.to_vec());
        }
    }
    for (i, row) in encoded.target_rows.into_iter().enumerate() {
        cycle.put_new(&key::targets(ulid, i as u32), row);
    }
    cycle
        .account_events
        .entry(ev.account_id.clone())
        .or_default()
        .push(ulid);
    if let Some(about) = super::purge::operator_subject(&ev.account_id, &ev.payload) {
        cycle.put_new(&key::about(&about, ulid), Vec::new());
    }
    cycle.put_new(&key::event(ulid), encoded.row);

    for (i, (d, lane)) in deliveries.iter().zip(&ev.targets).enumerate() {
        cycle.states.push(d.state);
        if let (DeliveryState::Pending, Some(at)) = (d.state, d.next_attempt_at) {
            cycle.due.push(Entry {
                lane: *lane,
                at,
                delivery: ids::delivery_of(ulid, i),
                fresh,
                sequence: inner.sequence(*lane, ev.ordering_key.as_deref(), &ev.payload),
            });
        }
    }
    cycle.created += 1;
    Ok(IngestOutcome::Created {
        event_id,
        deliveries,
    })
}
