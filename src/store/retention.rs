//! Retention: pruning what is older than `storage.retention`, in bounded slices so it never
//! holds up ingest or delivery for long.
//!
//! Events are keyed by time-ordered ULIDs, so a sweep walks them oldest first and stops at the
//! first one inside the retention window. An event goes together with its payload and its
//! deliveries' attempts, and only when none of its deliveries is still pending: pending work is
//! never pruned. The event row goes last, so a sweep cut short by a crash finishes next time.
//! Rows a crash left without their event (payload chunks, attempts, pending entries written
//! before an event row that never was) go once they are older than the window too (a pending
//! entry without its event is dropped by the engine when it comes due), and so do
//! idempotency keys older than their 24 h window and closed debounce windows.

use std::ops::Bound;

use super::codec::{self, key};
use super::{Store, StoreError};
use crate::clock::Millis;
use crate::engine::debounce::Window;
use crate::ids;
use crate::model::DeliveryState;
use crate::store::IDEMPOTENCY_WINDOW_MS;

/// What one slice removed, and where the next slice starts (`None`: the sweep is done).
#[derive(Debug, Default)]
pub struct Pruned {
    pub events: usize,
    pub deliveries: usize,
    pub attempts: usize,
    pub next: Option<Vec<u8>>,
}

impl Store {
    /// Prunes up to `max` events received before `cutoff`, starting after `from` (the previous
    /// slice's `next`).
    pub fn prune_events(
        &self,
        cutoff: Millis,
        from: Option<&[u8]>,
        max: usize,
    ) -> Result<Pruned, StoreError> {
        let t = &self.inner.trees;
        let mut out = Pruned::default();
        let end = key::end(key::EVENT);
        let iter = match from {
            Some(k) => t
                .log
                .range::<&[u8], _>((Bound::Excluded(k), Bound::Excluded(&end[..]))),
            None => t.log.range(key::event(0)..end),
        };
        for (seen, item) in iter.enumerate() {
            let (k, value) = item?;
            if seen >= max {
                out.next = Some(k.to_vec());
                return Ok(out);
            }
            let event = key::ulid(&k).ok_or_else(|| StoreError::Corrupt("event key".into()))?;
            let (rec, _) = codec::decode_event(event, &value)?;
            if rec.meta.received_at >= cutoff {
                return Ok(out); // everything after is newer
            }
            let deliveries: Vec<_> = (0..rec.targets.len())
                .map(|i| self.inner.assemble(&rec.meta, &rec.targets, i))
                .collect::<Result<_, _>>()?;
            if deliveries.iter().any(|d| d.state == DeliveryState::Pending) {
                continue; // pending work is never pruned
            }
            for (i, d) in deliveries.iter().enumerate() {
                let ulid = ids::delivery_of(event, i);
                for a in t.log.scan_prefix(key::attempts(ulid)).keys() {
                    t.log.remove(a?)?;
                    out.attempts += 1;
                }
                self.inner.stats.forget(d.state);
                out.deliveries += 1;
            }
            if rec.payload_len > codec::INLINE_PAYLOAD {
                for c in t.log.scan_prefix(key::of(key::CHUNK, event)).keys() {
                    t.log.remove(c?)?;
                }
            }
            t.log.remove(&k)?;
            out.events += 1;
        }
        Ok(out)
    }

    /// Drops idempotency keys past their window, closed debounce windows, and rows older than
    /// `cutoff` whose event is gone (left by a crash mid-commit). Returns how many.
    pub fn prune_small(&self, now: Millis, cutoff: Millis) -> Result<usize, StoreError> {
        let log = &self.inner.trees.log;
        let mut removed = 0;
        // Compare-and-swap: the committer may have just claimed the key or reopened the window.
        let stale = |kind: u8, f: &dyn Fn(&[u8]) -> bool| -> Result<usize, StoreError> {
            let mut n = 0;
            for item in log.scan_prefix([kind]) {
                let (k, v) = item?;
                if f(&v) && log.compare_and_swap(&k, Some(&v), None::<&[u8]>)?.is_ok() {
                    n += 1;
                }
            }
            Ok(n)
        };
        removed += stale(key::IDEMPOTENCY, &|v| {
            serde_json::from_slice::<serde_json::Value>(v)
                .ok()
                .and_then(|r| r["at"].as_i64())
                .is_some_and(|at| now - at >= IDEMPOTENCY_WINDOW_MS)
        })?;
        // A closed window decides nothing any more (a trailing candidate has its own pending
        // entry).
        removed += stale(key::WINDOW, &|v| {
            serde_json::from_slice::<Window>(v).is_ok_and(|w| w.end <= now)
        })?;
        // Orphans: keyed by their event's (or delivery's) ULID, so everything below the
        // cutoff's ULID is older than the window.
        let floor = ids::ulid_floor(cutoff);
        for kind in [key::CHUNK, key::ATTEMPT] {
            let mut known: Option<(u128, bool)> = None;
            for k in log.range(key::of(kind, 0)..key::of(kind, floor)).keys() {
                let k = k?;
                let Some(ulid) = key::ulid(&k) else {
                    continue;
                };
                // Chunks are keyed by the event, attempts by a delivery.
                let event = ids::event_of(ulid).map_or(ulid, |(e, _)| e);
                let exists = match known {
                    Some((e, exists)) if e == event => exists,
                    _ => {
                        let exists = log.contains_key(key::event(event))?;
                        known = Some((event, exists));
                        exists
                    }
                };
                if !exists {
                    log.remove(&k)?;
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }
}
