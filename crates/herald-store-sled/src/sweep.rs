//! The retention sweep of the embedded store ([`herald_store::contract::Retention`]): it folds
//! ended history ([`SledStore::fold_history`]), packs the account index, then prunes events,
//! folds, keys and sessions, each in slices on a blocking thread, yielding between slices, so
//! ingest and delivery never wait on it.
//!
//! Folding goes on from where the last sweep stopped; the events it passed while one of their
//! deliveries was still pending are looked at again by a pass from the oldest event once every
//! `storage.fold_after` (at most every ten minutes). Then the account index rows written since
//! the last sweep and older than the horizon are packed ([`SledStore::pack_account_index`]).

use std::sync::atomic::{AtomicBool, Ordering};

use super::{SledStore, StoreError};
use herald_core::clock::Millis;
use herald_store::contract::Retention;
use herald_store::{Retained, Swept};

/// Where folding goes on from.
#[derive(Debug, Default)]
pub(super) struct FoldCursor {
    /// The last event a sweep's folding looked at.
    after: Option<u128>,
    /// When folding last started from the oldest event.
    full_at: Option<Millis>,
}

/// Events a folding slice looks at.
const FOLD_SLICE: usize = 2_000;
/// Folds retention removes per slice.
const FOLD_PRUNE_SLICE: usize = 200;
/// Account index rows a packing slice reads (about): it holds the fold writers, and readers
/// that overlap its batch wait for it, so it stays as short as a folding slice.
const INDEX_SLICE: usize = 2_000;
/// Events looked at per slice.
const SLICE: usize = 500;
/// Idempotency keys and debounce windows removed per slice.
const KEY_SLICE: usize = 5_000;

impl SledStore {
    /// Runs one slice of the sweep on a blocking thread; `None` (logged) if it failed.
    async fn slice<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SledStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Option<T> {
        match super::blocking(self, f).await {
            Ok(v) => Some(v),
            // The store is closing: the sweep ends with it.
            Err(StoreError::Closed) => None,
            Err(e) => {
                tracing::error!(error = %e, "retention sweep failed");
                None
            }
        }
    }

    fn lock_fold_cursor(&self) -> std::sync::MutexGuard<'_, FoldCursor> {
        self.fold_cursor.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Folds the ended events older than `fold_after_ms`, a slice at a time, then packs the
    /// account index rows past that horizon.
    async fn fold(&self, now: Millis, fold_after_ms: Millis, stop: &AtomicBool, swept: &mut Swept) {
        let before = now - fold_after_ms;
        let every_full = fold_after_ms.min(600_000);
        let mut from = {
            let mut c = self.lock_fold_cursor();
            if c.full_at.is_none_or(|at| now - at >= every_full) {
                c.full_at = Some(now);
                None
            } else {
                c.after
            }
        };
        while !stop.load(Ordering::Acquire) {
            let start = from;
            let Some(f) = self
                .slice(move |s| s.fold_history(before, start, FOLD_SLICE))
                .await
            else {
                return;
            };
            swept.folded += f.events as u64;
            swept.folds += f.folds as u64;
            if f.last.is_some() {
                from = f.last;
            }
            self.lock_fold_cursor().after = from;
            if !f.more {
                break;
            }
            tokio::task::yield_now().await;
        }
        let packed_before = self.index_rows_packed();
        while !stop.load(Ordering::Acquire) {
            let more = self
                .slice(move |s| s.pack_account_index(before, INDEX_SLICE))
                .await;
            if more != Some(true) {
                break;
            }
            tokio::task::yield_now().await;
        }
        swept.index_rows += (self.index_rows_packed() - packed_before) as u64;
    }
}

impl Retention for SledStore {
    /// The sweep as of `now` ([`herald_store::contract::Retention::sweep`]).
    async fn sweep(&self, now: Millis, retained: Retained, stop: &AtomicBool) -> Swept {
        let mut swept = Swept::default();
        self.fold(now, retained.fold_after_ms, stop, &mut swept)
            .await;
        let cutoff = now - retained.retention_ms;
        let mut from: Option<Vec<u8>> = None;
        while !stop.load(Ordering::Acquire) {
            let start = from.take();
            let Some(p) = self
                .slice(move |s| s.prune_events(cutoff, start.as_deref(), SLICE))
                .await
            else {
                break;
            };
            swept.events += p.events as u64;
            swept.deliveries += p.deliveries as u64;
            swept.attempts += p.attempts as u64;
            match p.next {
                Some(next) => from = Some(next),
                None => break,
            }
            tokio::task::yield_now().await;
        }
        // Folds whose events are all older than the window go whole.
        while let Some((p, more)) = self
            .slice(move |s| s.prune_folds(cutoff, FOLD_PRUNE_SLICE))
            .await
        {
            swept.events += p.events as u64;
            swept.deliveries += p.deliveries as u64;
            swept.attempts += p.attempts as u64;
            if !more || stop.load(Ordering::Acquire) {
                break;
            }
            tokio::task::yield_now().await;
        }
        // Expired idempotency keys and closed debounce windows, in slices too.
        while let Some(n) = self.slice(move |s| s.prune_keys(now, KEY_SLICE)).await {
            swept.other += n as u64;
            if n < KEY_SLICE || stop.load(Ordering::Acquire) {
                break;
            }
            tokio::task::yield_now().await;
        }
        swept.other += self
            .slice(move |s| s.prune_orphans(cutoff))
            .await
            .unwrap_or(0) as u64;
        swept.other += self
            .slice(move |s| s.prune_portal_sessions(now))
            .await
            .unwrap_or(0) as u64;
        swept.other += self
            .slice(move |s| s.prune_api_answers(now))
            .await
            .unwrap_or(0) as u64;
        swept
    }
}
