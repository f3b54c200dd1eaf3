//! The scheduler (docs/delivery-contract.md, docs/cluster.md): one loop over the store's queue,
//! on one box and on each node of a cluster alike.
//!
//! Each turn the scheduler takes as many due deliveries as it has room for (`max_in_flight`
//! less what it holds), at most `hold_per_slot` times `max_in_flight_per_endpoint` of any one
//! endpoint, and attempts each on its own task, at most `max_in_flight_per_endpoint` of an
//! endpoint at once (the others wait for a sending slot, still held: a cluster's leases are
//! renewed meanwhile); the result is written fenced by the hold. The per-endpoint limit is the
//! scheduler's: the store only obeys the limits a take names. Deliveries this node's own
//! ingest stored taken by it ([`NodeIntake`], a cluster's) take the same room and start as
//! their transaction commits, without a take. A delivery its breaker or rate limit holds goes
//! back to the queue due at the hold's end. An idle scheduler sleeps until the next due time, a
//! change of the queue (a notice from another node, in a cluster), enough finished attempts to
//! take a batch, or at most the store's idle poll. When it stops, the holds of attempts that
//! did not finish are given back.
//!
//! What a store kind tunes is in its [`Taking`]: the batch, `hold_per_slot`, the idle poll,
//! and whether takes are gathered (a cluster's take is a query; one box's is a look at memory,
//! so it takes again at every change).

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
use crate::store::{lane_of, Hold, Lane, TakeLimits, Taken, Taking};

/// How long the scheduler waits before taking again when due work is left that it could not
/// take, or to gather notices of new work (a cluster's).
const UNCLAIMABLE_POLL: Duration = Duration::from_millis(50);
/// How long the scheduler waits before taking again after the store failed a take.
const CLAIM_BACKOFF: Duration = Duration::from_millis(500);
/// While takes fail, a warning at most this often.
const CLAIM_FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Takes failed in a row, and when that was last logged.
#[derive(Default)]
struct ClaimFailures {
    failed: u64,
    logged: Option<std::time::Instant>,
}

/// What this node holds of each endpoint (by lane): deliveries taken, sending or waiting for a
/// slot; and how many of all endpoints together.
#[derive(Default)]
struct Holding {
    lanes: HashMap<Lane, Held>,
    total: usize,
}

/// What this node holds of one endpoint.
struct Held {
    taken: usize,
    /// The endpoint's sending slots: `max_in_flight_per_endpoint`.
    slots: Arc<Semaphore>,
    endpoint: String,
}

impl Holding {
    /// Counts one more delivery of `endpoint` (whose lane is `lane`) held; returns the
    /// endpoint's sending slots.
    fn count_in(&mut self, lane: Lane, endpoint: Option<&str>, slots: usize) -> Arc<Semaphore> {
        let held = self.lanes.entry(lane).or_insert_with(|| Held {
            taken: 0,
            slots: Arc::new(Semaphore::new(slots)),
            endpoint: endpoint.unwrap_or_default().to_string(),
        });
        held.taken += 1;
        self.total += 1;
        held.slots.clone()
    }

    /// Counts one delivery of the lane's endpoint fewer.
    fn count_out(&mut self, lane: Lane) {
        if let Some(held) = self.lanes.get_mut(&lane) {
            held.taken -= 1;
            self.total -= 1;
            if held.taken == 0 {
                self.lanes.remove(&lane);
            }
        }
    }

    fn get(&self, lane: Lane) -> Option<&Held> {
        self.lanes.get(&lane)
    }
}

/// What a take may hand this node: `cap` of each endpoint, less what it holds of it. Asked
/// as the take goes, under the holding's lock each time (never held across an await).
struct HoldLimits<'a> {
    holding: &'a std::sync::Mutex<Holding>,
    cap: usize,
}

impl HoldLimits<'_> {
    /// What the endpoints this node holds may still take, together.
    fn open(&self) -> usize {
        let holding = lock(self.holding);
        (holding.lanes.len() * self.cap).saturating_sub(holding.total)
    }
}

impl TakeLimits for HoldLimits<'_> {
    fn allowed(&self, lane: Lane) -> usize {
        lock(self.holding)
            .lanes
            .get(&lane)
            .map_or(self.cap, |held| self.cap.saturating_sub(held.taken))
    }

    fn named(&self) -> Vec<(String, usize)> {
        lock(self.holding)
            .lanes
            .values()
            .map(|held| (held.endpoint.clone(), self.cap.saturating_sub(held.taken)))
            .collect()
    }

    fn others(&self) -> usize {
        self.cap
    }
}

/// This node's room for deliveries its own ingest leases to it ([`Intake`], in a cluster):
/// the same room takes use (a permit of `max_in_flight`, a place among the endpoint's
/// `hold_per_slot` × `max_in_flight_per_endpoint`), taken while the ingest's transaction is
/// built and handed over, with the deliveries, once it commits.
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
        let lane = lane_of(Some(endpoint));
        if running.get(lane).is_some_and(|held| held.taken >= self.cap) {
            return false;
        }
        let Ok(permit) = self.global.clone().try_acquire_owned() else {
            return false;
        };
        running.count_in(lane, Some(endpoint), self.slots);
        lock(&self.reserved).push(permit);
        true
    }

    fn cancel(&self, endpoint: &str) {
        lock(&self.running).count_out(lane_of(Some(endpoint)));
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
    /// Of one endpoint, the most this node holds at once (sending or waiting for a slot).
    fn hold_cap(&self, taking: &Taking) -> usize {
        self.cfg.max_in_flight_per_endpoint * taking.hold_per_slot.max(1)
    }

    pub(super) async fn schedule(self: Arc<Self>, mut shutdown: Shutdown, grace: Duration) {
        let taking = self.store.taking();
        let running: Arc<std::sync::Mutex<Holding>> = Arc::default();
        let ingested = self.take_ingested(&running, &taking);
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
            let room = self.global.available_permits().min(taking.batch);
            let got = match self
                .claim_turn(now, room, &running, &taking, &mut failing)
                .await
            {
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
            let wait = self.idle_wait(now, next_sweep, &running, &taking).await;
            let held = self.running.load(Ordering::Relaxed);
            if !self
                .idle_until(
                    wait,
                    self.ready_to_take(held, freed, &taking),
                    &mut shutdown,
                )
                .await
            {
                break;
            }
        }
        self.leave(ingested, grace).await;
    }

    /// What a take may hand this node of each endpoint: the endpoint's cap less what it holds
    /// of it.
    fn limits<'a>(
        &self,
        running: &'a std::sync::Mutex<Holding>,
        taking: &Taking,
    ) -> HoldLimits<'a> {
        HoldLimits {
            holding: running,
            cap: self.hold_cap(taking),
        }
    }

    /// Takes what this node has room for (`room` at most) and starts each taken attempt.
    /// Returns how many it took; `None` when the store failed the take.
    async fn claim_turn(
        self: &Arc<Self>,
        now: Millis,
        room: usize,
        running: &Arc<std::sync::Mutex<Holding>>,
        taking: &Taking,
        failing: &mut ClaimFailures,
    ) -> Option<usize> {
        if room == 0 {
            return Some(0);
        }
        let limits = self.limits(running, taking);
        // Rows the take may lock: what the endpoints this node works on may still take, and
        // one endpoint's share of any other.
        let room = room.min(limits.open() + limits.cap);
        match self.store.take_due(now, room, &limits).await {
            Ok(leased) => {
                if failing.failed > 0 {
                    tracing::info!(failed = failing.failed, "claims work again");
                    *failing = ClaimFailures::default();
                }
                let got = leased.len();
                for l in leased {
                    // It asked for no more than were free, but this node's ingest may have
                    // taken some since ([`NodeIntake`]): then the delivery waits for one (its
                    // lease renewed meanwhile).
                    let Ok(permit) = self.global.clone().acquire_owned().await else {
                        break;
                    };
                    self.start_taken(running, l, permit);
                }
                Some(got)
            }
            Err(e) => {
                // Every half second while the store fails (a cluster's database is away): the
                // first failure is logged, then one line a minute with how many failed since.
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

    /// How long an idle node sleeps at most: until the next due time it may take or the next
    /// sweep, within the store's idle poll; with every permit out, until a finished attempt
    /// makes room (`None`, or the idle poll).
    async fn idle_wait(
        &self,
        now: Millis,
        next_sweep: Millis,
        running: &std::sync::Mutex<Holding>,
        taking: &Taking,
    ) -> Option<Duration> {
        if self.global.available_permits() == 0 {
            return taking.idle_poll;
        }
        let limits = self.limits(running, taking);
        let next = self.store.next_due(&limits).await.unwrap_or(None);
        let until = next
            .unwrap_or(Millis::MAX)
            .min(next_sweep.max(now + retention::SWEEP_RETRY_MS));
        let mut w = Duration::from_millis((until - now).max(0) as u64);
        if let Some(poll) = taking.idle_poll {
            w = w.min(poll);
        }
        // Due work the take left (this node holds its endpoint's share, another node holds
        // it, or its lane waits for the delivery ahead): taking again at once would find the
        // same; a finished attempt or a notice wakes the node sooner.
        if w.is_zero() {
            Some(UNCLAIMABLE_POLL)
        } else {
            Some(w)
        }
    }

    /// Resolves when the node should take again, `held` being the attempts it held when it
    /// went idle and `freed` the notice of the next one to finish.
    ///
    /// Where a take is a look at memory, at every change of the queue (a finished attempt's
    /// hold given back is one). Where it is a query (`gather`), taking for each finished
    /// attempt would lock and scan the queue for a single row: the node takes again once
    /// `refill` attempts have finished, or at once when it holds no more than that (an ordered
    /// lane's next delivery can be taken as soon as the one ahead ends). Notices of new work come with every other
    /// node's ingest; a node that is not ready does not take at each (that took a few rows per
    /// take, as often as they came) but once, within [`UNCLAIMABLE_POLL`] of the first, for
    /// all of them.
    async fn ready_to_take<'a>(
        &'a self,
        held: usize,
        mut freed: std::pin::Pin<&mut tokio::sync::futures::Notified<'a>>,
        taking: &Taking,
    ) {
        if !taking.gather {
            return self.store.queue_changed().await;
        }
        let refill = self.cfg.max_in_flight_per_endpoint.clamp(1, taking.batch);
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
        taking: &Taking,
    ) -> tokio::task::JoinHandle<()> {
        let (handover, mut handed) = tokio::sync::mpsc::unbounded_channel();
        let intake = Arc::new(NodeIntake {
            running: running.clone(),
            global: self.global.clone(),
            reserved: std::sync::Mutex::default(),
            cap: self.hold_cap(taking),
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
                let endpoint = l.due.delivery.endpoint_id.as_deref();
                let lane = lane_of(endpoint);
                let slots = {
                    let mut running = lock(&running);
                    match running.get(lane) {
                        Some(held) => held.slots.clone(),
                        None => running.count_in(lane, endpoint, intake.slots),
                    }
                };
                engine.spawn_taken(&running, lane, slots, l, permit);
            }
        })
    }

    /// Stops taking: ingest stores what follows due (for the other nodes, in a cluster),
    /// running attempts get the grace period, and the holds of what did not finish (or was
    /// handed over and not started) are given back.
    async fn leave(&self, ingested: tokio::task::JoinHandle<()>, grace: Duration) {
        self.store.set_intake(None);
        ingested.abort();
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

    /// Runs one taken delivery's attempt on its own task.
    fn start_taken(
        self: &Arc<Self>,
        running: &Arc<std::sync::Mutex<Holding>>,
        leased: Taken<Hold>,
        permit: OwnedSemaphorePermit,
    ) {
        let endpoint = leased.due.delivery.endpoint_id.as_deref();
        let lane = lane_of(endpoint);
        let slots = lock(running).count_in(lane, endpoint, self.cfg.max_in_flight_per_endpoint);
        self.spawn_taken(running, lane, slots, leased, permit);
    }

    /// Runs one taken delivery's attempt on its own task, counted in `running` already.
    fn spawn_taken(
        self: &Arc<Self>,
        running: &Arc<std::sync::Mutex<Holding>>,
        lane: Lane,
        slots: Arc<Semaphore>,
        leased: Taken<Hold>,
        permit: OwnedSemaphorePermit,
    ) {
        self.running.fetch_add(1, Ordering::Relaxed);
        let (engine, running) = (self.clone(), running.clone());
        lock(&self.attempts).spawn(async move {
            let Taken { due, fence, hold } = leased;
            // At most `max_in_flight_per_endpoint` of the endpoint's attempts at once; the
            // others wait here, still held (a cluster's leases renewed meanwhile).
            // (An endpoint's slots are never closed: acquiring cannot fail.)
            if let Ok(slot) = slots.acquire_owned().await {
                let handled = engine.attempt_due(due, fence, slot).await;
                // Its room is free before the hold is given back: giving it back tells the
                // queue, which wakes the scheduler, and then the room is there to take into.
                lock(&running).count_out(lane);
                drop(permit);
                engine.release(hold, handled).await;
            } else {
                lock(&running).count_out(lane);
                drop(permit);
            }
            engine.running.fetch_sub(1, Ordering::Relaxed);
            engine.idle.notify_waiters();
        });
    }
}
