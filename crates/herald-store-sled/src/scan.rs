//! Start-up: the due index and the counts by state, rebuilt from sled.
//!
//! Pending entries come from their rows (each names its lane). Fresh deliveries are found by
//! walking the event rows from the fresh watermark together with the attempt and pending rows:
//! all three are keyed by ULIDs in creation order (a delivery's ULID follows its event's), so one
//! merged pass in key order tells for each delivery whether it has attempts or a pending entry,
//! with no lookups. The counts of ended deliveries come from their last checkpoint.

use std::collections::HashMap;
use std::iter::Peekable;
use std::ops::ControlFlow;

use super::codec::{self, EventRecord};
use super::key;
use super::{meta_keys, Entry, Inner, Lane, Place, Refill, StoreError};
use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::DeliveryState;

/// One delivery met by [`walk`]: its ULID, its event, its target, whether an attempt of it is
/// recorded and whether it has a pending entry.
pub(super) struct Seen<'a> {
    pub delivery: u128,
    pub event: &'a EventRecord,
    pub target: u128,
    pub attempted: bool,
    pub pending: bool,
}

impl Seen<'_> {
    pub fn is_fresh(&self) -> bool {
        !self.pending && !self.attempted
    }
}

type Rows = Peekable<sled::Iter>;

/// Skips `rows` up to `delivery`; returns the value of the last row of `delivery`, if any.
fn rows_of(rows: &mut Rows, delivery: u128) -> Result<Option<sled::IVec>, StoreError> {
    let mut last = None;
    loop {
        let key = match rows.peek() {
            None => return Ok(last),
            Some(Err(e)) => return Err(e.clone().into()),
            Some(Ok((k, _))) => key::ulid(k).unwrap_or(0),
        };
        if key > delivery {
            return Ok(last);
        }
        let (_, v) = rows.next().expect("peeked")?;
        if key == delivery {
            last = Some(v);
        }
    }
}

/// Calls `f` for every delivery of every event from `from` on, in key order, until it breaks.
pub(super) fn walk(
    inner: &Inner,
    from: u128,
    mut f: impl FnMut(&Seen<'_>) -> ControlFlow<()>,
) -> Result<(), StoreError> {
    let t = &inner.trees;
    let kind = |kind: u8| t.log.range(key::of(kind, from)..key::end(kind));
    let mut attempts = kind(key::ATTEMPT).peekable();
    let mut pending = kind(key::PENDING).peekable();
    for item in kind(key::EVENT) {
        let (k, v) = item?;
        let event = key::ulid(&k).ok_or_else(|| StoreError::Corrupt("event key".into()))?;
        let (rec, _) = inner.decode_event(event, &v, &Place::Hot)?;
        for (index, target) in rec.targets.iter().enumerate() {
            let delivery = ids::delivery_of(event, index);
            let attempted = rows_of(&mut attempts, delivery)?.is_some();
            let pending = rows_of(&mut pending, delivery)?.is_some();
            let seen = Seen {
                delivery,
                event: &rec,
                target: *target,
                attempted,
                pending,
            };
            if f(&seen).is_break() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Rebuilds the due index, the fresh buckets and the counts (pending ones counted here, ended
/// ones as last saved).
pub(super) fn rebuild(inner: &Inner) -> Result<(), StoreError> {
    // An ordered endpoint's entries, pending and fresh alike, go in last and by ULID, so each
    // sequence's head is its oldest: a crash may have lost an older delivery's record while a
    // newer one's retry was saved.
    let mut sequenced = Vec::new();
    let pending = load_pending(inner, &mut sequenced)?;
    let fresh = load_fresh(inner, &mut sequenced)?;
    sequenced.sort_unstable_by_key(|e| e.delivery);
    inner.due.insert_many(sequenced);
    inner.stats.set(DeliveryState::Pending, pending + fresh);
    load_counts(inner)
}

/// Puts the pending entries (retries, manual retries, windows' ends) in the due index, those of
/// ordered endpoints in `sequenced`; returns how many there are.
fn load_pending(inner: &Inner, sequenced: &mut Vec<Entry>) -> Result<i64, StoreError> {
    let mut pending = 0i64;
    let mut entries = Vec::new();
    for item in inner
        .trees
        .log
        .range(key::of(key::PENDING, 0)..key::end(key::PENDING))
    {
        let (k, v) = item?;
        let Some(delivery) = key::ulid(&k) else {
            continue;
        };
        let (p, lane) = codec::decode_pending(&v)?;
        let sequence = match ids::event_of(delivery) {
            Some((event, _)) => inner.sequence_of_stored(lane, event)?,
            None => None,
        };
        let e = Entry {
            lane,
            at: p.due,
            delivery,
            fresh: false,
            sequence,
        };
        match sequence {
            Some(_) => sequenced.push(e),
            None => entries.push(e),
        }
        pending += 1;
    }
    inner.due.insert_many(entries);
    Ok(pending)
}

/// Finds the fresh deliveries from the fresh watermark on: puts them in the due index (those of
/// ordered endpoints in `sequenced`) and the fresh buckets, and makes new ids sort after every
/// stored one. Returns how many there are.
fn load_fresh(inner: &Inner, sequenced: &mut Vec<Entry>) -> Result<i64, StoreError> {
    let t = &inner.trees;
    let from = match t.meta.get(meta_keys::FRESH_FROM)? {
        Some(v) => u128::from_be_bytes(v.as_ref().try_into().unwrap_or_default()),
        None => 0,
    };
    // Handed to the index a chunk at a time: a million fresh deliveries must not be held twice.
    const CHUNK: usize = 4096;
    let mut fresh = Vec::with_capacity(CHUNK);
    let mut found = 0i64;
    let mut f = inner.lock_fresh();
    let mut failed = None;
    walk(inner, from, |s| {
        if s.is_fresh() {
            let event = ids::event_of(s.delivery).map_or(0, |(e, _)| e);
            let sequence = inner
                .sequence_of_stored(s.target, event)
                .unwrap_or_else(|e| {
                    failed.get_or_insert(e);
                    None
                });
            let e = Entry {
                lane: s.target,
                at: s.event.meta.received_at,
                delivery: s.delivery,
                fresh: true,
                sequence,
            };
            match sequence {
                Some(_) => sequenced.push(e),
                None => fresh.push(e),
            }
            f.add(s.delivery);
            found += 1;
            if fresh.len() == CHUNK {
                inner.due.insert_many(fresh.drain(..));
            }
        }
        ControlFlow::Continue(())
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    let newest = t
        .log
        .range(key::event(0)..key::end(key::EVENT))
        .next_back()
        .transpose()?
        .and_then(|(k, _)| key::ulid(&k))
        .unwrap_or(0)
        .max(inner.newest_folded()?);
    // New ids must sort after every stored one, even if the clock went back since.
    ids::observe(newest);
    f.last_event = newest;
    drop(f);
    inner.due.insert_many(fresh);
    Ok(found)
}

/// The counts of ended deliveries as last saved.
fn load_counts(inner: &Inner) -> Result<(), StoreError> {
    if let Some(v) = inner.trees.meta.get(meta_keys::COUNTS)? {
        for (i, chunk) in v.chunks_exact(8).enumerate().take(4) {
            let state = DeliveryState::ALL[i];
            if state != DeliveryState::Pending {
                let n = i64::from_be_bytes(chunk.try_into().unwrap_or_default());
                inner.stats.set(state, n);
            }
        }
    }
    Ok(())
}

/// Reads spilled fresh deliveries back into the due index ([`super::due`]), for several lanes
/// in one walk of the log: from the earliest job's first delivery's event, until every job has
/// what it wants or the walk is past every job's bound. Only hot events are walked (a fresh
/// delivery's event is never folded).
pub(super) fn refill(inner: &Inner, jobs: &[Refill]) -> Result<(), StoreError> {
    let Some(from) = jobs.iter().map(|j| j.from).min() else {
        return Ok(());
    };
    let bound = jobs.iter().map(|j| j.bound).max().unwrap_or(from);
    let start = ids::event_of(from).map_or(from, |(event, _)| event);
    // Per job: what it found and where its next refill reads from (past its bound if this one
    // read everything up to it).
    let mut found: Vec<(Vec<(Millis, u128)>, u128)> = jobs
        .iter()
        .map(|j| {
            (
                Vec::with_capacity(j.want.min(4096)),
                j.bound.saturating_add(1),
            )
        })
        .collect();
    // A lane has one refill at a time.
    let by_lane: HashMap<Lane, usize> = jobs.iter().enumerate().map(|(i, j)| (j.lane, i)).collect();
    let mut open = jobs.len();
    walk(inner, start, |s| {
        if s.delivery > bound {
            return ControlFlow::Break(());
        }
        let Some(&i) = by_lane.get(&s.target) else {
            return ControlFlow::Continue(());
        };
        let (job, (got, next)) = (&jobs[i], &mut found[i]);
        let wanted = got.len() < job.want && (job.from..=job.bound).contains(&s.delivery);
        if wanted && s.is_fresh() {
            got.push((s.event.meta.received_at, s.delivery));
            if got.len() == job.want {
                *next = s.delivery + 1;
                open -= 1;
                if open == 0 {
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    })?;
    for (job, (got, next)) in jobs.iter().zip(&found) {
        inner.due.refilled(*job, got, *next);
    }
    Ok(())
}
