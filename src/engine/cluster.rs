//! The scheduler of a cluster node (docs/cluster.md): due work comes from the shared queue as
//! leases.
//!
//! Each turn the node claims as many due deliveries as it has room for (`max_in_flight` less
//! what it holds), at most [`HOLD_PER_SLOT`] times `max_in_flight_per_endpoint` of any one
//! endpoint, and attempts each on its own task, at most `max_in_flight_per_endpoint` of an
//! endpoint at once (the others wait on the node, their leases renewed); the result is written
//! fenced by the lease's claim. Deliveries this node's own ingest stores leased to it
//! ([`NodeIntake`]) take the same room and start as their transaction commits, without a claim.
//! A delivery its breaker or rate limit holds goes back to the queue due at the hold's end. An
//! idle node sleeps until the next due time, a notice from another node (new events, released
//! leases), enough finished attempts to claim a batch, or at most [`IDLE_POLL`]. The node renews
//! its leases while it works ([`keep_leases`]) and, when it stops, gives back those whose
//! attempts did not finish.
//!
//! [`keep_leases`]: crate::store::postgres::keep_leases

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{lock, retention, Engine};
use crate::clock::Millis;
use crate::shutdown::Shutdown;
use crate::store::contract::Intake;
use crate::store::prelude::*;
use crate::store::{Hold, TakeLimits, Taken};

/// Deliveries claimed per turn at most.
const CLAIM_BATCH: usize = 256;
/// The longest an idle node sleeps without looking at the queue (a missed notice costs no more).
const IDLE_POLL: Duration = Duration::from_secs(2);
/// How long a node waits before claiming again when due work is left that it could not claim.
const UNCLAIMABLE_POLL: Duration = Duration::from_millis(50);
/// How long a node waits before claiming again after the database failed a claim.
const CLAIM_BACKOFF: Duration = Duration::from_millis(500);
/// While claims fail, a warning at most this often.
const CLAIM_FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);
/// Of an endpoint, a node holds at most this many times `max_in_flight_per_endpoint` leases
/// (sending or waiting for a slot): enough to keep its slots busy between claims, never a whole
/// backlog that other nodes could be sending.
const HOLD_PER_SLOT: usize = 4;

/// Claims failed in a row, and when that was last logged.
#[derive(Default)]
struct ClaimFailures {
    failed: u64,
    logged: Option<std::time::Instant>,
}

/// What this node holds of each endpoint: leases (sending or waiting) and its sending slots.
type Holding = HashMap<String, (usize, Arc<Semaphore>)>;

/// Counts one more lease of `endpoint` held; returns the endpoint's sending slots.
fn count_in(holding: &mut Holding, endpoint: &str, slots: usize) -> Arc<Semaphore> {
    let (n, slots) = holding
        .entry(endpoint.to_string())
        .or_insert_with(|| (0, Arc::new(Semaphore::new(slots))));
    *n += 1;
    slots.clone()
}

/// Counts one lease of `endpoint` fewer.
fn count_out(holding: &mut Holding, endpoint: &str) {
    if let Some((n, _)) = holding.get_mut(endpoint) {
        *n -= 1;
        if *n == 0 {
            holding.remove(endpoint);
        }
    }
}

/// This node's room for deliveries its own ingest leases to it ([`Intake`]): the same room
/// claims take (a permit of `max_in_flight`, a place among the endpoint's
/// [`HOLD_PER_SLOT`] × `max_in_flight_per_endpoint`), taken while the ingest's transaction
/// is built and handed over, with the deliveries, once it commits.
struct NodeIntake {
    running: Arc<std::sync::Mutex<Holding>>,
    global: Arc<Semaphore>,
    /// Permits taken for reserved deliveries, not handed over yet (all alike).
    reserved: std::sync::Mutex<Vec<OwnedSemaphorePermit>>,
    cap: usize,
    slots: usize,
    handover: tokio::sync::mpsc::UnboundedSender<Taken<Hold>>,
}

impl Intake<Hold> for NodeIntake {
    fn reserve(&self, endpoint: &str) -> bool {
        let mut running = lock(&self.running);
        if running.get(endpoint).is_some_and(|(n, _)| *n >= self.cap) {
            return false;
        }
        let Ok(permit) = self.global.clone().try_acquire_owned() else {
            return false;
        };
        count_in(&mut running, endpoint, self.slots);
        lock(&self.reserved).push(permit);
        true
    }

    fn cancel(&self, endpoint: &str) {
        count_out(&mut lock(&self.running), endpoint);
        drop(lock(&self.reserved).pop());
    }

    fn take(&self, taken: Vec<Taken<Hold>>) {
        for l in taken {
            // The engine stops taking only when it stops; the leases are then given back.
            let _ = self.handover.send(l);
        }
    }
}

impl Engine {
    pub(super) async fn run_cluster(self: Arc<Self>, mut shutdown: Shutdown, grace: Duration) {
        let running: Arc<std::sync::Mutex<Holding>> = Arc::default();
        let taking = self.take_ingested(&running);
        let mut next_sweep = self.clock.now_ms();
        let mut failing = ClaimFailures::default();
        loop {
            if shutdown.is_fired() {
                break;
            }
            let freed = self.idle.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let now = self.clock.now_ms();
            while lock(&self.attempts).try_join_next().is_some() {}
            if now >= next_sweep && self.clone().start_sweep(now) {
                next_sweep =
                    now + retention::sweep_every(self.cfg.retention_ms, self.cfg.fold_after_ms);
            }
            let room = self.global.available_permits().min(CLAIM_BATCH);
            let got = match self.claim_turn(now, room, &running, &mut failing).await {
                Some(got) => got,
                None => {
                    tokio::select! {
                        () = tokio::time::sleep(CLAIM_BACKOFF) => {}
                        _ = shutdown.wait() => break,
                    }
                    continue;
                }
            };
            if room > 0 && got == room {
                tokio::task::yield_now().await;
                continue;
            }
            let wait = self.idle_wait(now, next_sweep).await;
            let held = self.running.load(Ordering::Relaxed);
            if !self
                .idle_until(wait, self.ready_to_claim(held, freed), &mut shutdown)
                .await
            {
                break;
            }
        }
        self.leave_cluster(taking, grace).await;
    }

    /// Claims what this node has room for (`room` at most) and starts each claimed attempt.
    /// Returns how many it claimed; `None` when the database failed the claim.
    async fn claim_turn(
        self: &Arc<Self>,
        now: Millis,
        room: usize,
        running: &Arc<std::sync::Mutex<Holding>>,
        failing: &mut ClaimFailures,
    ) -> Option<usize> {
        if room == 0 {
            return Some(0);
        }
        let cap = self.cfg.max_in_flight_per_endpoint * HOLD_PER_SLOT;
        let (endpoints, allowed): (Vec<String>, Vec<i32>) = lock(running)
            .iter()
            .map(|(id, (n, _))| (id.clone(), cap.saturating_sub(*n) as i32))
            .unzip();
        // Rows the claim may lock: what the endpoints this node works on may still take, and
        // one endpoint's share of any other.
        let open: usize = allowed.iter().map(|a| *a as usize).sum();
        let room = room.min(open + cap);
        let limits = TakeLimits {
            endpoints,
            allowed,
            others: cap,
        };
        match self.store.take_due(now, room, &limits).await {
            Ok(leased) => {
                if failing.failed > 0 {
                    tracing::info!(failed = failing.failed, "claims work again");
                    *failing = ClaimFailures::default();
                }
                let got = leased.len();
                for l in leased {
                    // It asked for no more than were free, but this node's ingest may have
                    // taken some since ([`NodeIntake`]): then the lease waits for one (renewed
                    // meanwhile).
                    let Ok(permit) = self.global.clone().acquire_owned().await else {
                        break;
                    };
                    self.start_leased(running, l, permit);
                }
                Some(got)
            }
            Err(e) => {
                // Every half second while the database is away: the first failure is logged,
                // then one line a minute with how many failed since.
                failing.failed += 1;
                let now = std::time::Instant::now();
                if failing
                    .logged
                    .is_none_or(|at| now - at >= CLAIM_FAILURE_LOG_EVERY)
                {
                    tracing::warn!(error = %e, failed = failing.failed, "cannot claim due deliveries; trying again every half second");
                    failing.logged = Some(now);
                }
                None
            }
        }
    }

    /// How long an idle node sleeps at most: until the next due time or sweep, within
    /// [`IDLE_POLL`]; with every permit out, until a finished attempt makes room (`None`).
    async fn idle_wait(&self, now: Millis, next_sweep: Millis) -> Option<Duration> {
        if self.global.available_permits() == 0 {
            return None;
        }
        let next = self.store.next_due().await.unwrap_or(None);
        let until = next
            .unwrap_or(Millis::MAX)
            .min(next_sweep.max(now + retention::SWEEP_RETRY_MS));
        let w = Duration::from_millis((until - now).max(0) as u64).min(IDLE_POLL);
        // Due work the claim left (this node holds its endpoint's share, another node holds
        // it, or its lane waits for the delivery ahead): claiming again at once would find the
        // same; a finished attempt or a notice wakes the node sooner.
        if w.is_zero() {
            Some(UNCLAIMABLE_POLL)
        } else {
            Some(w)
        }
    }

    /// Resolves when the node should claim again, `held` being the attempts it held when it
    /// went idle and `freed` the notice of the next one to finish.
    ///
    /// A finished attempt frees room, but claiming for each one would lock and scan the queue
    /// for a single row: the node claims again once `refill` attempts have finished, or at once
    /// when it holds no more than that (an ordered lane's next delivery is claimable as soon as
    /// the one ahead ends). Notices of new work come with every other node's ingest; a node
    /// that is not ready does not claim at each (that took a few rows per claim, as often as
    /// they came) but once, within [`UNCLAIMABLE_POLL`] of the first, for all of them.
    async fn ready_to_claim<'a>(
        &'a self,
        held: usize,
        mut freed: std::pin::Pin<&mut tokio::sync::futures::Notified<'a>>,
    ) {
        let refill = self.cfg.max_in_flight_per_endpoint.clamp(1, CLAIM_BATCH);
        let ready = || {
            let now_held = self.running.load(Ordering::Relaxed);
            now_held <= refill || held.saturating_sub(now_held) >= refill
        };
        let noticed = tokio::time::sleep(Duration::MAX);
        tokio::pin!(noticed);
        let mut waiting_notice = false;
        loop {
            tokio::select! {
                () = self.store.queue_changed() => {
                    if ready() {
                        return;
                    }
                    if !waiting_notice {
                        waiting_notice = true;
                        noticed
                            .as_mut()
                            .reset(tokio::time::Instant::now() + UNCLAIMABLE_POLL);
                    }
                }
                () = noticed.as_mut(), if waiting_notice => return,
                _ = freed.as_mut() => {
                    freed.set(self.idle.notified());
                    freed.as_mut().enable();
                    if ready() {
                        return;
                    }
                }
            }
        }
    }

    /// Makes this node's ingest hand it the fresh deliveries it has room for ([`NodeIntake`]),
    /// and attempts them as they are committed, on the task returned.
    fn take_ingested(
        self: &Arc<Self>,
        running: &Arc<std::sync::Mutex<Holding>>,
    ) -> tokio::task::JoinHandle<()> {
        let (handover, mut handed) = tokio::sync::mpsc::unbounded_channel();
        let intake = Arc::new(NodeIntake {
            running: running.clone(),
            global: self.global.clone(),
            reserved: std::sync::Mutex::default(),
            cap: self.cfg.max_in_flight_per_endpoint * HOLD_PER_SLOT,
            slots: self.cfg.max_in_flight_per_endpoint,
            handover,
        });
        self.store.set_intake(Some(intake.clone()));
        let (engine, running) = (self.clone(), running.clone());
        tokio::spawn(async move {
            while let Some(l) = handed.recv().await {
                // Each delivery handed over had its permit and place reserved.
                let reserved = lock(&intake.reserved).pop();
                let permit = match reserved {
                    Some(permit) => permit,
                    None => match engine.global.clone().acquire_owned().await {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                };
                let endpoint = l.due.delivery.endpoint_id.clone().unwrap_or_default();
                let slots = {
                    let mut running = lock(&running);
                    match running.get(&endpoint) {
                        Some((_, slots)) => slots.clone(),
                        None => count_in(&mut running, &endpoint, intake.slots),
                    }
                };
                engine.spawn_leased(&running, endpoint, slots, l, permit);
            }
        })
    }

    /// Leaves the cluster: ingest stores what follows due for the other nodes, running attempts
    /// get the grace period, and the leases of what did not finish (or was handed over and not
    /// started) are given back.
    async fn leave_cluster(&self, taking: tokio::task::JoinHandle<()>, grace: Duration) {
        self.store.set_intake(None);
        taking.abort();
        self.drain(grace).await;
        match self.store.leave().await {
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
        running: &Arc<std::sync::Mutex<Holding>>,
        leased: Taken<Hold>,
        permit: OwnedSemaphorePermit,
    ) {
        let endpoint = leased.due.delivery.endpoint_id.clone().unwrap_or_default();
        let slots = count_in(
            &mut lock(running),
            &endpoint,
            self.cfg.max_in_flight_per_endpoint,
        );
        self.spawn_leased(running, endpoint, slots, leased, permit);
    }

    /// Runs one leased delivery's attempt on its own task, counted in `running` already.
    fn spawn_leased(
        self: &Arc<Self>,
        running: &Arc<std::sync::Mutex<Holding>>,
        endpoint: String,
        slots: Arc<Semaphore>,
        leased: Taken<Hold>,
        permit: OwnedSemaphorePermit,
    ) {
        self.running.fetch_add(1, Ordering::Relaxed);
        let (engine, running) = (self.clone(), running.clone());
        lock(&self.attempts).spawn(async move {
            let Taken { due, fence, hold } = leased;
            // At most `max_in_flight_per_endpoint` of the endpoint's attempts at once; the
            // others wait here, their leases renewed meanwhile.
            // (An endpoint's slots are never closed: acquiring cannot fail.)
            if let Ok(slot) = slots.acquire_owned().await {
                let handled = engine.attempt_due(due, fence, Some(slot)).await;
                engine.release(hold, handled).await;
            }
            count_out(&mut lock(&running), &endpoint);
            engine.running.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
            engine.idle.notify_waiters();
        });
    }
}
