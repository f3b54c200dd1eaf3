//! The scheduler of a cluster node (SPEC §16): due work comes from the shared queue as leases.
//!
//! Each turn the node claims as many due deliveries as it has room for (`max_in_flight` less
//! what it holds), at most [`HOLD_PER_SLOT`] times `max_in_flight_per_endpoint` of any one
//! endpoint, and attempts each on its own task, at most `max_in_flight_per_endpoint` of an
//! endpoint at once (the others wait on the node, their leases renewed); the result is written
//! fenced by the lease's claim. A
//! delivery its breaker or rate limit holds goes back to the queue due at the hold's end. An
//! idle node sleeps until the next due time, a notice from another node (new events, released
//! leases), a finished attempt, or at most [`IDLE_POLL`]. The node renews its leases while it
//! works ([`keep_leases`]) and, when it stops, gives back those whose attempts did not finish.
//!
//! [`keep_leases`]: crate::store::postgres::keep_leases

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{lock, retention, Engine, Handled};
use crate::clock::Millis;
use crate::shutdown::Shutdown;
use crate::store::postgres::{Leased, PgStore};
use crate::store::StoreError;

/// Deliveries claimed per turn at most.
const CLAIM_BATCH: usize = 256;
/// The longest an idle node sleeps without looking at the queue (a missed notice costs no more).
const IDLE_POLL: Duration = Duration::from_secs(2);
/// How long a node waits before claiming again when due work is left that it could not claim.
const UNCLAIMABLE_POLL: Duration = Duration::from_millis(50);
/// How long a node waits before claiming again after the database failed a claim.
const CLAIM_BACKOFF: Duration = Duration::from_millis(500);
/// Of an endpoint, a node holds at most this many times `max_in_flight_per_endpoint` leases
/// (sending or waiting for a slot): enough to keep its slots busy between claims, never a whole
/// backlog that other nodes could be sending.
const HOLD_PER_SLOT: usize = 4;
/// Rows a retention slice removes.
const PRUNE_SLICE: i64 = 1_000;

/// What this node holds of each endpoint: leases (sending or waiting) and its sending slots.
type Holding = HashMap<String, (usize, Arc<Semaphore>)>;

impl Engine {
    pub(super) async fn run_cluster(
        self: Arc<Self>,
        store: Arc<PgStore>,
        mut shutdown: Shutdown,
        grace: Duration,
    ) {
        let wake = store.wake();
        let running: Arc<std::sync::Mutex<Holding>> = Arc::default();
        let mut next_sweep = self.clock.now_ms();
        loop {
            if shutdown.is_fired() {
                break;
            }
            let freed = self.idle.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let now = self.clock.now_ms();
            while lock(&self.attempts).try_join_next().is_some() {}
            if now >= next_sweep {
                self.clone().start_cluster_sweep(store.clone(), now);
                next_sweep =
                    now + retention::sweep_every(self.cfg.retention_ms, self.cfg.fold_after_ms);
            }
            let room = self.global.available_permits().min(CLAIM_BATCH);
            let mut got = 0;
            if room > 0 {
                let cap = self.cfg.max_in_flight_per_endpoint * HOLD_PER_SLOT;
                let (endpoints, allowed): (Vec<String>, Vec<i32>) = lock(&running)
                    .iter()
                    .map(|(id, (n, _))| (id.clone(), cap.saturating_sub(*n) as i32))
                    .unzip();
                let claimed = store
                    .claim_due_within(room as i64, &endpoints, &allowed, cap as i64)
                    .await;
                match claimed {
                    Ok(leased) => {
                        got = leased.len();
                        for l in leased {
                            // Only this loop takes permits, and it asked for no more than
                            // were free.
                            let Ok(permit) = self.global.clone().try_acquire_owned() else {
                                break;
                            };
                            self.start_leased(&store, &running, l, permit);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot claim due deliveries; trying again shortly");
                        tokio::select! {
                            () = tokio::time::sleep(CLAIM_BACKOFF) => {}
                            _ = shutdown.wait() => break,
                        }
                        continue;
                    }
                }
            }
            if room > 0 && got == room {
                tokio::task::yield_now().await;
                continue;
            }
            // With every permit out, only a finished attempt can make room.
            let wait = if self.global.available_permits() == 0 {
                None
            } else {
                let next = store.next_due().await.unwrap_or(None);
                let until = next.unwrap_or(Millis::MAX).min(next_sweep);
                let mut w = Duration::from_millis((until - now).max(0) as u64).min(IDLE_POLL);
                // Due work the claim left (this node holds its endpoint's share, another node
                // holds it, or its lane waits for the delivery ahead): claiming again at once
                // would find the same; a finished attempt or a notice wakes the node sooner.
                if w.is_zero() {
                    w = UNCLAIMABLE_POLL;
                }
                Some(w)
            };
            let woken = async {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = freed => {}
                }
            };
            if !self.idle_until(wait, woken, &mut shutdown).await {
                break;
            }
        }
        self.drain(grace).await;
        match store.leave().await {
            Ok(released) if released > 0 => {
                tracing::info!(released, "gave back the leases of unfinished attempts")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot give back leases; they lapse at their end")
            }
        }
    }

    /// Runs one leased delivery's attempt on its own task.
    fn start_leased(
        self: &Arc<Self>,
        store: &Arc<PgStore>,
        running: &Arc<std::sync::Mutex<Holding>>,
        leased: Leased,
        permit: OwnedSemaphorePermit,
    ) {
        let endpoint = leased.due.delivery.endpoint_id.clone().unwrap_or_default();
        let slots = {
            let mut running = lock(running);
            let (n, slots) = running.entry(endpoint.clone()).or_insert_with(|| {
                (
                    0,
                    Arc::new(Semaphore::new(self.cfg.max_in_flight_per_endpoint)),
                )
            });
            *n += 1;
            slots.clone()
        };
        self.running.fetch_add(1, Ordering::Relaxed);
        let (engine, store, running) = (self.clone(), store.clone(), running.clone());
        lock(&self.attempts).spawn(async move {
            let Leased { claim, due } = leased;
            let id = due.delivery.id.clone();
            // At most `max_in_flight_per_endpoint` of the endpoint's attempts at once; the
            // others wait here, their leases renewed meanwhile.
            let slot = slots.acquire_owned().await;
            if let Handled::Held(until) = engine.attempt_due(due, Some(claim)).await {
                match store.hold(claim, &id, until).await {
                    Ok(()) | Err(StoreError::LeaseLost) => {}
                    Err(e) => {
                        tracing::warn!(delivery_id = %id, error = %e, "cannot put a held delivery back; it is due again when its lease ends")
                    }
                }
            }
            {
                drop(slot);
                let mut running = lock(&running);
                if let Some((n, _)) = running.get_mut(&endpoint) {
                    *n -= 1;
                    if *n == 0 {
                        running.remove(&endpoint);
                    }
                }
            }
            engine.running.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
            engine.idle.notify_waiters();
        });
    }

    /// Retention on the shared database: events older than the retention with their
    /// deliveries, attempts and keys; expired idempotency keys and debounce windows; ended
    /// portal sessions. Each in bounded slices that skip rows other nodes hold, so several
    /// nodes sweeping at once share the work.
    fn start_cluster_sweep(self: Arc<Self>, store: Arc<PgStore>, now: Millis) {
        if self.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        self.forget_gone_endpoints();
        tokio::spawn(async move {
            let cutoff = now - self.cfg.retention_ms;
            let events = self
                .prune_in_slices(|| store.prune_events(cutoff, PRUNE_SLICE))
                .await;
            let mut other = self
                .prune_in_slices(|| store.prune_keys(now, PRUNE_SLICE))
                .await;
            match store.prune_portal_sessions(now, PRUNE_SLICE).await {
                Ok(n) => other += n,
                Err(e) => tracing::error!(error = %e, "retention sweep failed"),
            }
            if events + other > 0 {
                tracing::info!(events, other, "retention: pruned");
            }
            self.sweeping.store(false, Ordering::Release);
        });
    }

    /// Runs `slice` until it removes fewer than a slice's worth, fails, or the engine stops;
    /// returns how many rows it removed.
    async fn prune_in_slices<F>(&self, mut slice: impl FnMut() -> F) -> u64
    where
        F: std::future::Future<Output = Result<u64, StoreError>>,
    {
        let mut removed = 0;
        while !self.stopping.load(Ordering::Acquire) {
            match slice().await {
                Ok(n) => {
                    removed += n;
                    if n < PRUNE_SLICE as u64 {
                        break;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "retention sweep failed");
                    break;
                }
            }
        }
        removed
    }
}
