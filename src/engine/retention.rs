//! The retention sweep: started by the scheduler every [`sweep_every`] of clock time, on
//! whichever store herald runs on ([`crate::store::contract::Retention`]), one at a time.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Engine;
use crate::clock::Millis;
use crate::store::prelude::*;
use crate::store::Retained;

/// How often a sweep starts: a tenth of the retention or the fold horizon if shorter, between
/// 1 s and 1 min, so what is older than the retention is gone within a tenth of it more.
pub fn sweep_every(retention_ms: Millis, fold_after_ms: Millis) -> Millis {
    (retention_ms / 10).min(fold_after_ms).clamp(1_000, 60_000)
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

    /// Starts a sweep as of `now`; `false` if the previous one is still going (the scheduler
    /// tries again shortly: a sweep as of an earlier time may not cover `now`).
    pub(super) fn start_sweep(self: Arc<Self>, now: Millis) -> bool {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.forget_gone_endpoints();
        tokio::spawn(async move {
            let retained = Retained {
                retention_ms: self.cfg.retention_ms,
                fold_after_ms: self.cfg.fold_after_ms,
            };
            let s = self.store.sweep(now, retained, &self.stopping).await;
            if s.folded > 0 || s.index_rows > 0 {
                tracing::info!(
                    events = s.folded,
                    folds = s.folds,
                    index_rows = s.index_rows,
                    "history folded"
                );
            }
            if s.events + s.other > 0 {
                tracing::info!(
                    events = s.events,
                    deliveries = s.deliveries,
                    attempts = s.attempts,
                    other = s.other,
                    "retention: pruned"
                );
            }
            self.sweeping.store(false, Ordering::Release);
        });
        true
    }
}
