//! Retention: pruning what is older than `storage.retention`, in bounded slices so it never
//! holds up ingest or delivery for long.
//!
//! Events are keyed by time-ordered ULIDs, so a sweep walks them oldest first and stops at the
//! first one inside the retention window. An event goes together with its payload and its
//! deliveries' attempts, and only when none of its deliveries is still pending: pending work is
//! never pruned. Each event's rows go in one batch, which sled applies whole or not at all,
//! after a crash too: an event is there with all its rows or gone.
//! Rows a crash left without their event (payload chunks, target rows, attempts, pending
//! entries written before an event row that never was) go once they are older than the window
//! too (a pending entry without its event is dropped by the engine when it comes due).
//!
//! Idempotency keys and debounce windows expire in time order, with no decoding: keys are
//! stored under the day they were claimed, so every day older than yesterday goes whole, and
//! windows have an index by end time, so the closed ones are a key range. A key whose event is
//! pruned earlier (a retention shorter than a day) goes with the event: it claims nothing
//! without it.
//!
//! An event's deliveries are claimed ([`super::Claim`]) while it is pruned: a manual retry or
//! an attempt of one of them and its pruning exclude each other.

use std::ops::Bound;

use super::codec;
use super::key;
use super::keys::{self, KeyRow};
use super::{Place, SledStore, StoreError};
use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::DeliveryState;

/// What one slice removed, and where the next slice starts (`None`: the sweep is done).
#[derive(Debug, Default)]
pub struct Pruned {
    pub events: usize,
    pub deliveries: usize,
    pub attempts: usize,
    /// The last event key this slice looked at: the next slice starts after it.
    pub next: Option<Vec<u8>>,
}

impl SledStore {
    /// Prunes events received before `cutoff`, looking at up to `max` of them, starting after
    /// `from` (the previous slice's `next`).
    pub fn prune_events(
        &self,
        cutoff: Millis,
        from: Option<&[u8]>,
        max: usize,
    ) -> Result<Pruned, StoreError> {
        // An account's purge removes events too, and both take ended deliveries out of the
        // counts: under the same lock (the purge holds it throughout), an event goes once.
        let _folds = self.inner.lock_fold_writes();
        // The pruned events' keys go together at the end: one write per chunk of keys.
        let mut released = Vec::new();
        let out = self.prune_slice(cutoff, from, max, &mut released);
        self.inner.keys.release(&released)?;
        out
    }

    fn prune_slice(
        &self,
        cutoff: Millis,
        from: Option<&[u8]>,
        max: usize,
        released: &mut Vec<(KeyRow, u128)>,
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
            if seen == max {
                return Ok(out); // `next` is the last event looked at
            }
            let (k, value) = item?;
            let event = key::ulid(&k).ok_or_else(|| StoreError::Corrupt("event key".into()))?;
            let (rec, _) = self.inner.decode_event(event, &value, &Place::Hot)?;
            if rec.meta.received_at >= cutoff {
                out.next = None;
                return Ok(out); // everything after is newer
            }
            out.next = Some(k.to_vec());
            // Claimed, so no retry or attempt of them starts while they go.
            let claims: Option<Vec<_>> = (0..rec.targets.len())
                .map(|i| self.inner.claim(ids::delivery_of(event, i)))
                .collect();
            if claims.is_none() {
                continue; // one is being attempted or retried: pending work, kept
            }
            let deliveries: Vec<_> = (0..rec.targets.len())
                .map(|i| self.inner.assemble(&rec.meta, &rec.targets, i, &Place::Hot))
                .collect::<Result<_, _>>()?;
            if deliveries.iter().any(|d| d.state == DeliveryState::Pending) {
                continue; // pending work is never pruned
            }
            #[cfg(test)]
            self.inner.faults.hold_pruning();
            let (batch, attempts) = self.event_rows_removed(event, &k, deliveries.len())?;
            #[cfg(test)]
            self.inner.faults.check(&self.inner.faults.prune_write)?;
            t.log.apply_batch(batch)?;
            // Counted out once its rows are gone.
            for d in &deliveries {
                self.inner.stats.forget(d.state);
            }
            out.attempts += attempts;
            out.deliveries += deliveries.len();
            // Its idempotency key claims nothing once the event is gone: it goes too, so
            // keys live no longer than their events (a key row kept for its day among rows
            // that retention frees keeps sled from reusing their space).
            released.extend(keys::event_rows(&rec.meta, event));
            out.events += 1;
        }
        out.next = None;
        Ok(out)
    }

    /// A batch removing every row of the event at key `k` (its `deliveries` deliveries'
    /// attempts, its chunks and targets, its own row), and how many attempts it removes.
    fn event_rows_removed(
        &self,
        event: u128,
        k: &[u8],
        deliveries: usize,
    ) -> Result<(sled::Batch, usize), StoreError> {
        let t = &self.inner.trees;
        // Every row of the event in one batch: sled applies a batch whole or not at all,
        // after a crash too, so an event is never left without some of its rows (its
        // attempts gone, it would read as pending for ever; its chunks gone, unreadable).
        let mut batch = sled::Batch::default();
        let mut attempts = 0;
        for i in 0..deliveries {
            for a in t
                .log
                .scan_prefix(key::attempts(ids::delivery_of(event, i)))
                .keys()
            {
                batch.remove(a?);
                attempts += 1;
            }
        }
        for kind in [key::CHUNK, key::TARGETS] {
            for r in t.log.scan_prefix(key::of(kind, event)).keys() {
                batch.remove(r?);
            }
        }
        batch.remove(k);
        Ok((batch, attempts))
    }

    /// Removes up to `max` expired idempotency keys (every day before yesterday's) and closed
    /// debounce windows, in time order. Returns how many; fewer than `max` means none is left.
    pub fn prune_keys(&self, now: Millis, max: usize) -> Result<usize, StoreError> {
        let log = &self.inner.trees.log;
        let keep_from = key::idempotency_day(self.inner.key_time(now)).saturating_sub(1);
        let mut removed = self.inner.keys.expire_before(keep_from, max)?;
        let closed =
            log.range(key::window_end_before(0)..key::window_end_before(now.saturating_add(1)));
        for k in closed.keys().take(max - removed) {
            let k = k?;
            let end = u64::from_be_bytes(k[1..9].try_into().unwrap_or_default()) as Millis;
            let mut wk = [0u8; 17];
            wk[0] = key::WINDOW;
            wk[1..].copy_from_slice(&k[9..]);
            // Only the window this entry indexes: the committer may have opened a new one
            // under the same key (compare-and-swap against the value read). Its row in its
            // account's index goes in the same transaction: sled runs it apart from the
            // committer's batches, so a window written again meanwhile keeps its row.
            if let Some(v) = log.get(wk)? {
                if codec::decode_window(&v)?.end == end {
                    let index = codec::window_account(&v).map(|a| key::account_window(&a, &wk));
                    log.transaction(|tx| {
                        if tx.get(wk)?.as_deref() == Some(&v[..]) {
                            tx.remove(&wk[..])?;
                            if let Some(row) = index {
                                tx.remove(&row[..])?;
                            }
                        }
                        Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
                    })
                    .map_err(|e| match e {
                        sled::transaction::TransactionError::Storage(e) => StoreError::from(e),
                        sled::transaction::TransactionError::Abort(()) => {
                            StoreError::Corrupt("debounce window".into())
                        }
                    })?;
                }
            }
            log.remove(k)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Removes rows older than `cutoff` whose event is gone (left by a crash mid-commit).
    /// Returns how many.
    pub fn prune_orphans(&self, cutoff: Millis) -> Result<usize, StoreError> {
        let log = &self.inner.trees.log;
        let mut removed = 0;
        // Keyed by their event's (or delivery's) ULID, so everything below the cutoff's ULID is
        // older than the window.
        let floor = ids::ulid_floor(cutoff);
        // Account index rows that start before the cutoff: drop the events that are gone
        // (the committer only ever writes rows of new events, so retention alone edits old ones).
        let mut from = vec![key::ACCOUNT_EVENT];
        let end = [key::ACCOUNT_EVENT + 1];
        loop {
            let Some(item) = log
                .range::<&[u8], _>((Bound::Excluded(&from[..]), Bound::Excluded(&end[..])))
                .next()
            else {
                break;
            };
            let (k, v) = item?;
            from = k.to_vec();
            let Some(first) = key::ulid(&k[16..]) else {
                continue;
            };
            if first >= floor {
                // This account's later rows are newer still: on to the next account.
                let mut next = k[..17].to_vec();
                next.extend_from_slice(&[0xff; 16]);
                from = next;
                continue;
            }
            let mut events = Vec::new();
            codec::decode_targets(&v, &mut events)?;
            let mut kept = Vec::with_capacity(events.len());
            for e in &events {
                if self.inner.event_exists(*e)? {
                    kept.push(*e);
                }
            }
            if kept.len() == events.len() {
                continue;
            }
            removed += events.len() - kept.len();
            // The row's key is its first event's: rewritten under its new first event, in one
            // batch (a crash leaves the old row or the new one).
            let mut batch = sled::Batch::default();
            batch.remove(k.clone());
            if let Some(first) = kept.first() {
                let mut nk = k[..17].to_vec();
                nk.extend_from_slice(&first.to_be_bytes());
                batch.insert(nk, codec::encode_ulids(&kept));
            }
            log.apply_batch(batch)?;
        }
        for kind in [key::CHUNK, key::TARGETS, key::ATTEMPT] {
            let mut known: Option<(u128, bool)> = None;
            for k in log.range(key::of(kind, 0)..key::of(kind, floor)).keys() {
                let k = k?;
                let Some(ulid) = key::ulid(&k) else {
                    continue;
                };
                // Chunks and target rows are keyed by the event, attempts by a delivery.
                let event = ids::event_of(ulid).map_or(ulid, |(e, _)| e);
                let exists = match known {
                    Some((e, exists)) if e == event => exists,
                    _ => {
                        let exists = self.inner.event_exists(event)?;
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
