//! A commit cycle's work ([`super::commit`]): its writes, gathered in memory so that reads in
//! the cycle see them, and what to finish once they are durable or to undo if they are not.

use std::collections::HashMap;

use sled::IVec;

use super::codec;
use super::key;
use super::keys::KeyRow;
use super::undo;
use super::{Claim, Entry, Inner, Lane, StoreError};
use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::DeliveryState;

/// What one cycle did, to write it as one batch and finish it after the fsync (or undo it if
/// that failed).
#[derive(Default)]
pub(super) struct Cycle {
    /// The commit time: debounce windows and idempotency windows are judged at it.
    pub(super) now: Millis,
    /// The cycle's writes to the `log` tree (`None`: a removal), applied as one batch; reads in
    /// the cycle see them first.
    pub(super) writes: HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// What the keys the cycle overwrote held before, for the undo (new keys are not read).
    pub(super) before: Vec<(Vec<u8>, Option<IVec>)>,
    /// Key rows (idempotency and request keys) claimed earlier in this cycle, and their event.
    pub(super) claimed: HashMap<KeyRow, u128>,
    /// The keys the cycle's events claim, added to their database once the cycle is durable.
    pub(super) keys: Vec<(KeyRow, u128)>,
    /// Due index entries to add once durable.
    pub(super) due: Vec<Entry>,
    /// The state of each delivery created, for the counts.
    pub(super) states: Vec<DeliveryState>,
    /// Trailing candidates debounced by a newer event.
    pub(super) superseded: Vec<Superseded>,
    /// The superseded candidates, claimed until the cycle is durable or undone.
    pub(super) claims: Vec<Claim>,
    /// Fresh deliveries counted in the watermark buckets (taken back if the cycle fails).
    pub(super) fresh: Vec<u128>,
    /// The events of the cycle by account, in order, for the account index (one row per
    /// account and cycle).
    pub(super) account_events: HashMap<String, Vec<u128>>,
    pub(super) created: u64,
}

/// A trailing candidate's delivery that a newer event of its window debounced.
pub(super) struct Superseded {
    pub account: String,
    pub lane: Lane,
    /// When it was due.
    pub due: Millis,
    pub delivery: u128,
}

impl Cycle {
    /// The key's value as the cycle sees it: its own write, else the tree's.
    pub(super) fn get(&self, inner: &Inner, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.writes.get(key) {
            Some(w) => Ok(w.clone()),
            None => Ok(inner.trees.log.get(key)?.map(|v| v.to_vec())),
        }
    }

    /// Writes a key that may hold a value (kept for the undo).
    pub(super) fn put(
        &mut self,
        inner: &Inner,
        key: &[u8],
        value: Option<Vec<u8>>,
    ) -> Result<(), StoreError> {
        if !self.writes.contains_key(key) {
            self.before.push((key.to_vec(), inner.trees.log.get(key)?));
        }
        self.writes.insert(key.to_vec(), value);
        Ok(())
    }

    /// Writes a key no row has yet (an event's, its chunks', a new attempt number's).
    pub(super) fn put_new(&mut self, key: &[u8], value: Vec<u8>) {
        if self.writes.insert(key.to_vec(), Some(value)).is_none() {
            self.before.push((key.to_vec(), None));
        }
    }

    /// The cycle's writes as one batch (sled recovers a batch all or nothing).
    pub(super) fn write(&mut self, inner: &Inner) -> Result<(), StoreError> {
        for (account, events) in std::mem::take(&mut self.account_events) {
            for chunk in events.chunks(codec::INDEX_PER_ROW) {
                self.put_new(
                    &key::account_event(&account, chunk[0]),
                    codec::encode_ulids(chunk),
                );
            }
        }
        // Read under the tombstones' lock, which a purge takes before it removes anything: a
        // candidate whose account was purged since it was superseded keeps nothing of this
        // cycle (the purge removed its rows and counted it out, once).
        let tombstones = (!self.superseded.is_empty()).then(|| inner.lock_tombstones());
        if let Some(t) = tombstones.as_ref().filter(|t| !t.is_empty()) {
            self.forget_purged_candidates(t);
        }
        let mut batch = sled::Batch::default();
        for (k, v) in self.writes.drain() {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        inner.trees.log.apply_batch(batch)?;
        drop(tombstones);
        Ok(())
    }

    /// Takes out of the cycle the superseded candidates of purged events: their `debounced`
    /// attempts, their pending rows' removals (and those rows' undo) and their counting.
    fn forget_purged_candidates(&mut self, tombstones: &super::purge::Tombstones) {
        let purged: Vec<u128> = self
            .superseded
            .iter()
            .filter(|s| {
                ids::event_of(s.delivery).is_some_and(|(e, _)| tombstones.covers(&s.account, e))
            })
            .map(|s| s.delivery)
            .collect();
        if purged.is_empty() {
            return;
        }
        self.superseded.retain(|s| !purged.contains(&s.delivery));
        let theirs = |k: &[u8]| {
            purged
                .iter()
                .any(|d| k == key::pending(*d) || k.starts_with(&key::attempts(*d)))
        };
        self.writes.retain(|k, _| !theirs(k));
        self.before.retain(|(k, _)| !theirs(k));
    }

    /// Puts back what the cycle replaced, durably; only then do its fresh deliveries leave the
    /// watermark's buckets (if the undo fails they stay, so the watermark never passes events
    /// that may have reached the file).
    pub(super) fn undo(&mut self, inner: &Inner) -> Result<(), StoreError> {
        // The undo goes to its own file first: if the failure that broke the cycle's flush
        // breaks the undo's too, the next start applies it ([`undo`]).
        let record = self.undo_record(inner);
        #[cfg(test)]
        inner.faults.check(&inner.faults.undo)?;
        let mut batch = sled::Batch::default();
        for (k, old) in self.before.drain(..) {
            match old {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        inner.trees.log.apply_batch(batch)?;
        inner.sync_only()?;
        if let Some(path) = record {
            undo::discard(&path);
        }
        let mut fresh = inner.lock_fresh();
        for d in self.fresh.drain(..) {
            fresh.remove(d);
        }
        Ok(())
    }

    /// Writes the undo of the cycle's writes to its own file; `None` if that failed too (then
    /// a batch that reached sled's file before the failure is recovered at the next start, and
    /// the watermark, kept, makes sure its events are delivered: at least once).
    pub(super) fn undo_record(&self, inner: &Inner) -> Option<std::path::PathBuf> {
        let written = || -> Result<_, StoreError> {
            #[cfg(test)]
            inner.faults.check(&inner.faults.undo_record)?;
            let records = self
                .before
                .iter()
                .map(|(k, old)| {
                    let now = inner.trees.log.get(k)?;
                    Ok(undo::Record::new(k, now.as_deref(), old.as_ref()))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            Ok(undo::write(&inner.path, &records)?)
        };
        match written() {
            Ok(path) => Some(path),
            Err(e) => {
                tracing::error!(error = %e, "cannot write the undo record of a failed commit");
                None
            }
        }
    }
}
