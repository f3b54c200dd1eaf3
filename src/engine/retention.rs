//! The retention sweep of the embedded store: started by the scheduler every [`sweep_every`] of
//! clock time, it folds ended history ([`SledStore::fold_history`]) and prunes, in slices on a
//! blocking thread, yielding between slices, so ingest and delivery never wait on it.
//!
//! Folding goes on from where the last sweep stopped; the events it passed while one of their
//! deliveries was still pending are looked at again by a pass from the oldest event once every
//! `storage.fold_after` (at most every ten minutes). Then the account index rows written since
//! the last sweep and older than the horizon are packed ([`SledStore::pack_account_index`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Engine;
use crate::clock::Millis;
use crate::store::prelude::*;
use crate::store::sled::SledStore;
use crate::store::StoreError;

/// How often a sweep starts: a tenth of the retention or the fold horizon if shorter, between
/// 1 s and 1 min, so what is older than the retention is gone within a tenth of it more.
pub fn sweep_every(retention_ms: Millis, fold_after_ms: Millis) -> Millis {
    (retention_ms / 10).min(fold_after_ms).clamp(1_000, 60_000)
}

/// Where folding goes on from.
#[derive(Debug, Default)]
pub struct FoldCursor {
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

/// Runs one slice of store work on a blocking thread.
async fn slice<T: Send + 'static>(
    store: &Arc<SledStore>,
    f: impl FnOnce(&SledStore) -> Result<T, StoreError> + Send + 'static,
) -> Option<T> {
    let store = store.clone();
    match tokio::task::spawn_blocking(move || f(&store)).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "retention sweep failed");
            None
        }
        Err(e) => {
            tracing::error!(error = %e, "retention sweep failed");
            None
        }
    }
}

/// How soon a scheduler tries again to start a sweep that waited for the previous one.
pub(super) const SWEEP_RETRY_MS: Millis = 100;

impl Engine {
    /// Drops the client certificates of endpoints deleted or changed since (the map holds only
    /// what an endpoint has now).
    pub(super) fn forget_gone_endpoints(&self) {
        let store = &self.store;
        super::lock(&self.identities).retain(|id, i| {
            store.endpoint(id).is_some_and(|e| {
                e.client_certificate
                    .as_ref()
                    .is_some_and(|c| c.sha256 == i.sha256)
            })
        });
    }

    /// Folds the ended events older than `storage.fold_after`, a slice at a time.
    async fn fold(&self, store: &Arc<SledStore>, now: Millis) {
        let before = now - self.cfg.fold_after_ms;
        let every_full = self.cfg.fold_after_ms.min(600_000);
        let mut from = {
            let mut c = super::lock(&self.fold_cursor);
            if c.full_at.is_none_or(|at| now - at >= every_full) {
                c.full_at = Some(now);
                None
            } else {
                c.after
            }
        };
        let (mut events, mut folds) = (0, 0);
        while !self.stopping.load(Ordering::Acquire) {
            let start = from;
            let Some(f) = slice(store, move |s| s.fold_history(before, start, FOLD_SLICE)).await
            else {
                return;
            };
            events += f.events;
            folds += f.folds;
            if f.last.is_some() {
                from = f.last;
            }
            super::lock(&self.fold_cursor).after = from;
            if !f.more {
                break;
            }
            tokio::task::yield_now().await;
        }
        // The account index rows of what is now past the horizon, packed into full rows.
        let packed_before = store.index_rows_packed();
        while !self.stopping.load(Ordering::Acquire) {
            let more = slice(store, move |s| s.pack_account_index(before, INDEX_SLICE)).await;
            if more != Some(true) {
                break;
            }
            tokio::task::yield_now().await;
        }
        let index_rows = store.index_rows_packed() - packed_before;
        if events > 0 || index_rows > 0 {
            tracing::info!(events, folds, index_rows, "history folded");
        }
    }

    /// Starts a sweep as of `now`; `false` if the previous one is still going (the scheduler
    /// tries again shortly: a sweep as of an earlier time may not cover `now`).
    pub(super) fn start_sweep(self: Arc<Self>, store: Arc<SledStore>, now: Millis) -> bool {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.forget_gone_endpoints();
        tokio::spawn(async move {
            self.fold(&store, now).await;
            let cutoff = now - self.cfg.retention_ms;
            let mut from: Option<Vec<u8>> = None;
            let (mut events, mut deliveries, mut attempts) = (0, 0, 0);
            loop {
                if self.stopping.load(Ordering::Acquire) {
                    break;
                }
                let start = from.take();
                let Some(p) = slice(&store, move |s| {
                    s.prune_events(cutoff, start.as_deref(), SLICE)
                })
                .await
                else {
                    break;
                };
                events += p.events;
                deliveries += p.deliveries;
                attempts += p.attempts;
                match p.next {
                    Some(next) => from = Some(next),
                    None => break,
                }
                tokio::task::yield_now().await;
            }
            // Folds whose events are all older than the window go whole.
            while let Some((p, more)) =
                slice(&store, move |s| s.prune_folds(cutoff, FOLD_PRUNE_SLICE)).await
            {
                events += p.events;
                deliveries += p.deliveries;
                attempts += p.attempts;
                if !more || self.stopping.load(Ordering::Acquire) {
                    break;
                }
                tokio::task::yield_now().await;
            }
            // Expired idempotency keys and closed debounce windows, in slices too.
            let mut other = 0;
            while let Some(n) = slice(&store, move |s| s.prune_keys(now, KEY_SLICE)).await {
                other += n;
                if n < KEY_SLICE || self.stopping.load(Ordering::Acquire) {
                    break;
                }
                tokio::task::yield_now().await;
            }
            other += slice(&store, move |s| s.prune_orphans(cutoff))
                .await
                .unwrap_or(0);
            other += slice(&store, move |s| s.prune_portal_sessions(now))
                .await
                .unwrap_or(0);
            if events + other > 0 {
                tracing::info!(events, deliveries, attempts, other, "retention: pruned");
            }
            self.sweeping.store(false, Ordering::Release);
        });
        true
    }
}
