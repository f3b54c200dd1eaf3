//! The retention sweep: started by the scheduler every [`sweep_every`] of clock time, it
//! prunes in slices on a blocking thread, yielding between slices, so ingest and delivery never
//! wait on it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Engine;
use crate::clock::Millis;
use crate::store::{Store, StoreError};

/// How often a sweep starts: a tenth of the retention, between 1 s and 1 min, so what is older
/// than the retention is gone within a tenth of it more.
pub fn sweep_every(retention_ms: Millis) -> Millis {
    (retention_ms / 10).clamp(1_000, 60_000)
}
/// Events looked at per slice.
const SLICE: usize = 500;
/// Idempotency keys and debounce windows removed per slice.
const KEY_SLICE: usize = 5_000;

/// Runs one slice of store work on a blocking thread.
async fn slice<T: Send + 'static>(
    store: &Arc<Store>,
    f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
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

impl Engine {
    /// Drops the rate buckets and client certificates of endpoints deleted or changed since
    /// (each map holds only what an endpoint has now).
    fn forget_gone_endpoints(&self) {
        let store = &self.store;
        super::lock(&self.buckets)
            .retain(|id, _| store.endpoint(id).is_some_and(|e| e.rate_limit.is_some()));
        super::lock(&self.identities).retain(|id, i| {
            store.endpoint(id).is_some_and(|e| {
                e.client_certificate
                    .as_ref()
                    .is_some_and(|c| c.sha256 == i.sha256)
            })
        });
    }

    pub(super) fn start_sweep(self: Arc<Self>, now: Millis) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return; // the previous sweep is still going
        }
        self.forget_gone_endpoints();
        tokio::spawn(async move {
            let cutoff = now - self.cfg.retention_ms;
            let mut from: Option<Vec<u8>> = None;
            let (mut events, mut deliveries, mut attempts) = (0, 0, 0);
            loop {
                if self.stopping.load(Ordering::Acquire) {
                    break;
                }
                let start = from.take();
                let Some(p) = slice(&self.store, move |s| {
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
            // Expired idempotency keys and closed debounce windows, in slices too.
            let mut other = 0;
            while let Some(n) = slice(&self.store, move |s| s.prune_keys(now, KEY_SLICE)).await {
                other += n;
                if n < KEY_SLICE || self.stopping.load(Ordering::Acquire) {
                    break;
                }
                tokio::task::yield_now().await;
            }
            other += slice(&self.store, move |s| s.prune_orphans(cutoff))
                .await
                .unwrap_or(0);
            other += slice(&self.store, move |s| s.prune_portal_sessions(now))
                .await
                .unwrap_or(0);
            if events + other > 0 {
                tracing::info!(events, deliveries, attempts, other, "retention: pruned");
            }
            self.sweeping.store(false, Ordering::Release);
        });
    }
}
