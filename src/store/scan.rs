//! Start-up: the due index and the counts by state, rebuilt from sled.
//!
//! Pending entries come from their rows (each names its lane). Fresh deliveries are found by
//! walking the event rows from the fresh watermark together with the attempt and pending rows:
//! all three are keyed by ULIDs in creation order (a delivery's ULID follows its event's), so one
//! merged pass in key order tells for each delivery whether it has attempts or a pending entry,
//! with no lookups. After a clean stop the counts by state were saved; after a crash the same
//! pass over the whole store counts them again, on a background thread.

use std::iter::Peekable;
use std::sync::Arc;

use super::codec::{self, key, EventRecord};
use super::{meta_keys, Inner, StoreError};
use crate::ids;
use crate::model::DeliveryState;

/// One delivery met by [`walk`]: its ULID, its event, its target, the state its last attempt
/// left it in (if it has one) and whether it has a pending entry.
pub(super) struct Seen<'a> {
    pub delivery: u128,
    pub event: &'a EventRecord,
    pub target: u128,
    pub last_state: Option<DeliveryState>,
    pub pending: bool,
}

impl Seen<'_> {
    pub fn state(&self) -> DeliveryState {
        match (self.pending, self.last_state) {
            (true, _) => DeliveryState::Pending,
            (false, Some(s)) => s,
            (false, None) => DeliveryState::Pending,
        }
    }

    pub fn is_fresh(&self) -> bool {
        !self.pending && self.last_state.is_none()
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

/// Calls `f` for every delivery of every event from `from` on (up to `until`), in key order.
/// Returns the ULID of the last event seen.
pub(super) fn walk(
    inner: &Inner,
    from: u128,
    until: Option<u128>,
    mut f: impl FnMut(&Seen<'_>),
) -> Result<Option<u128>, StoreError> {
    let t = &inner.trees;
    let kind = |kind: u8| t.log.range(key::of(kind, from)..key::end(kind));
    let mut attempts = kind(key::ATTEMPT).peekable();
    let mut pending = kind(key::PENDING).peekable();
    let mut last_event = None;
    for item in kind(key::EVENT) {
        let (k, v) = item?;
        let event = key::ulid(&k).ok_or_else(|| StoreError::Corrupt("event key".into()))?;
        if until.is_some_and(|u| event > u) {
            break;
        }
        last_event = Some(event);
        let (rec, _) = codec::decode_event(event, &v)?;
        for (index, target) in rec.targets.iter().enumerate() {
            let delivery = ids::delivery_of(event, index);
            // The state an attempt left is its value's last byte.
            let last_state = rows_of(&mut attempts, delivery)?
                .and_then(|v| v.last().copied())
                .and_then(|b| DeliveryState::ALL.get(b as usize).copied());
            let pending = rows_of(&mut pending, delivery)?.is_some();
            f(&Seen {
                delivery,
                event: &rec,
                target: *target,
                last_state,
                pending,
            });
        }
    }
    Ok(last_event)
}

/// Rebuilds the due index, the fresh buckets and the counts; after an unclean stop (`clean`
/// false) the counts of ended deliveries are recounted in the background.
pub(super) fn rebuild(inner: &Arc<Inner>, clean: bool) -> Result<(), StoreError> {
    let t = &inner.trees;
    let mut pending = 0i64;
    let mut entries = Vec::new();
    for item in t
        .log
        .range(key::of(key::PENDING, 0)..key::end(key::PENDING))
    {
        let (k, v) = item?;
        let Some(delivery) = key::ulid(&k) else {
            continue;
        };
        let (p, lane) = codec::decode_pending(&v)?;
        entries.push((lane, p.due, delivery, false));
        pending += 1;
    }
    inner.due.insert_many(entries);

    let from = match t.meta.get(meta_keys::FRESH_FROM)? {
        Some(v) => u128::from_be_bytes(v.as_ref().try_into().unwrap_or_default()),
        None => 0,
    };
    let mut fresh = Vec::new();
    let mut f = inner.lock_fresh();
    walk(inner, from, None, |s| {
        if s.is_fresh() {
            fresh.push((s.target, s.event.meta.received_at, s.delivery, true));
            f.add(s.delivery);
        }
    })?;
    let newest = t
        .log
        .range(key::event(0)..key::end(key::EVENT))
        .next_back()
        .transpose()?
        .and_then(|(k, _)| key::ulid(&k))
        .unwrap_or(0);
    // New ids must sort after every stored one, even if the clock went back since.
    ids::observe(newest);
    f.last_event = newest;
    drop(f);
    pending += fresh.len() as i64;
    inner.due.insert_many(fresh);
    inner.stats.set(DeliveryState::Pending, pending);

    if clean {
        if let Some(v) = t.meta.get(meta_keys::COUNTS)? {
            for (i, chunk) in v.chunks_exact(8).enumerate().take(4) {
                let state = DeliveryState::ALL[i];
                if state != DeliveryState::Pending {
                    let n = i64::from_be_bytes(chunk.try_into().unwrap_or_default());
                    inner.stats.set(state, n);
                }
            }
        }
        return Ok(());
    }
    // Counted on the side, then put in place: the engine counts its changes meanwhile, and a
    // delivery that changes while the count passes it may be off by one until the next stop.
    let inner = inner.clone();
    std::thread::Builder::new()
        .name("herald-recount".into())
        .spawn(move || {
            let mut counts = [0i64; 4];
            let result = walk(&inner, 0, Some(newest), |s| {
                counts[s.state() as usize] += 1;
            });
            match result {
                Ok(_) => {
                    for state in [
                        DeliveryState::Delivered,
                        DeliveryState::Failed,
                        DeliveryState::Skipped,
                    ] {
                        let live = inner.stats.get(state);
                        inner.stats.set(state, live + counts[state as usize]);
                    }
                    tracing::info!(
                        delivered = counts[DeliveryState::Delivered as usize],
                        failed = counts[DeliveryState::Failed as usize],
                        skipped = counts[DeliveryState::Skipped as usize],
                        "counted the stored deliveries after an unclean stop"
                    );
                }
                Err(e) => tracing::error!(error = %e, "cannot count the stored deliveries"),
            }
        })?;
    Ok(())
}
