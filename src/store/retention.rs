//! Retention: pruning what is older than `storage.retention`, in bounded slices so it never
//! holds up ingest or delivery for long.
//!
//! Events are keyed by time-ordered ids, so a sweep walks them oldest first and stops at the
//! first one inside the retention window. An event goes together with its payload, deliveries
//! and attempts, and only when none of its deliveries is still pending: pending work is never
//! pruned. Idempotency keys older than their 24 h window, closed debounce windows and quota
//! counters of past windows go too.

use sled::IVec;

use super::codec;
use super::{Store, StoreError};
use crate::clock::Millis;
use crate::engine::debounce::Window;
use crate::engine::quota;
use crate::model::{Delivery, DeliveryState};
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
        let iter = match from {
            Some(k) => t
                .events
                .range::<&[u8], _>((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded)),
            None => t.events.iter(),
        };
        for (seen, item) in iter.enumerate() {
            let (key, value) = item?;
            if seen >= max {
                out.next = Some(key.to_vec());
                return Ok(out);
            }
            let (meta, plen, _) = codec::decode_event(&value)?;
            if meta.received_at >= cutoff {
                return Ok(out); // everything after is newer
            }
            let deliveries: Vec<Delivery> = meta
                .deliveries
                .iter()
                .filter_map(|id| self.delivery(id).transpose())
                .collect::<Result<_, _>>()?;
            if deliveries.iter().any(|d| d.state == DeliveryState::Pending) {
                continue; // pending work is never pruned
            }
            for d in &deliveries {
                for a in t.attempts.scan_prefix(d.id.as_bytes()).keys() {
                    t.attempts.remove(a?)?;
                    out.attempts += 1;
                }
                t.deliveries.remove(d.id.as_bytes())?;
                self.inner.stats.forget(d.state);
                out.deliveries += 1;
            }
            if plen > codec::INLINE_PAYLOAD {
                for k in t.payloads.scan_prefix(&key).keys() {
                    t.payloads.remove(k?)?;
                }
            }
            t.events.remove(&key)?;
            out.events += 1;
        }
        Ok(out)
    }

    /// Drops idempotency keys past their window, closed debounce windows with no pending
    /// candidate, and quota counters of windows before the current ones. Returns how many.
    pub fn prune_small(&self, now: Millis) -> Result<usize, StoreError> {
        let t = &self.inner.trees;
        let mut removed = 0;
        let stale =
            |tree: &sled::Tree, f: &dyn Fn(&IVec, &IVec) -> bool| -> Result<usize, StoreError> {
                let mut n = 0;
                for item in tree.iter() {
                    let (k, v) = item?;
                    if f(&k, &v) {
                        tree.remove(k)?;
                        n += 1;
                    }
                }
                Ok(n)
            };
        removed += stale(&t.idempotency, &|_, v| {
            serde_json::from_slice::<serde_json::Value>(v)
                .ok()
                .and_then(|r| r["at"].as_i64())
                .is_some_and(|at| now - at >= IDEMPOTENCY_WINDOW_MS)
        })?;
        // A closed window decides nothing any more (a trailing candidate's delivery has its own
        // due time in the queue).
        removed += stale(&t.debounce, &|_, v| {
            codec::decode::<Window>(v).is_ok_and(|w| w.end <= now)
        })?;
        let w = quota::windows(now);
        removed += stale(&t.quota, &|k, _| {
            let n = k.len();
            if n < 10 {
                return false;
            }
            let window = i64::from_be_bytes(k[n - 8..].try_into().unwrap_or_default());
            match k[n - 9] {
                b'm' => window < w.minute,
                b'd' => window < w.day,
                _ => false,
            }
        })?;
        Ok(removed)
    }
}
