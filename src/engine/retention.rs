//! The retention sweep: started by the scheduler every [`sweep_every`] of clock time, it
//! prunes in slices on a blocking thread, yielding between slices, so ingest and delivery never
//! wait on it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Engine;
use crate::clock::Millis;

/// How often a sweep starts: a tenth of the retention, between 1 s and 1 min, so what is older
/// than the retention is gone within a tenth of it more.
pub fn sweep_every(retention_ms: Millis) -> Millis {
    (retention_ms / 10).clamp(1_000, 60_000)
}
/// Events looked at per slice.
const SLICE: usize = 500;

impl Engine {
    pub(super) fn start_sweep(self: Arc<Self>, now: Millis) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return; // the previous sweep is still going
        }
        tokio::spawn(async move {
            let cutoff = now - self.cfg.retention_ms;
            let mut from: Option<Vec<u8>> = None;
            let (mut events, mut deliveries, mut attempts) = (0, 0, 0);
            loop {
                let store = self.store.clone();
                let start = from.take();
                let slice = tokio::task::spawn_blocking(move || {
                    store.prune_events(cutoff, start.as_deref(), SLICE)
                })
                .await;
                match slice {
                    Ok(Ok(p)) => {
                        events += p.events;
                        deliveries += p.deliveries;
                        attempts += p.attempts;
                        match p.next {
                            Some(next) => from = Some(next),
                            None => break,
                        }
                    }
                    Ok(Err(e)) => {
                        tracing::error!(error = %e, "retention sweep failed");
                        break;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "retention sweep failed");
                        break;
                    }
                }
                tokio::task::yield_now().await;
            }
            let store = self.store.clone();
            let small = tokio::task::spawn_blocking(move || store.prune_small(now, cutoff)).await;
            let other = match small {
                Ok(Ok(n)) => n,
                _ => 0,
            };
            if events + other > 0 {
                tracing::info!(events, deliveries, attempts, other, "retention: pruned");
            }
            self.sweeping.store(false, Ordering::Release);
        });
    }
}
