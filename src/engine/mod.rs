//! Stored -> sent: the delivery loop.
//!
//! The scheduler takes what the due index says is due and hands each delivery to its endpoint's
//! lane. A lane runs at most `max_in_flight_per_endpoint` attempts at once and all lanes together
//! at most `max_in_flight`; a lane that is full only queues its own deliveries, so a slow or dead
//! endpoint never delays another one. Each attempt ([`attempt`]) checks the conditions, sends,
//! decides what comes next (retry, fail, done) and records it through the store.

mod attempt;
mod retention;
pub use attempt::RetryError;
pub mod breaker;
pub mod conditions;
pub mod debounce;
pub mod health;
pub mod quota;
pub mod recent;
pub mod retry;
pub mod verify;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::header::HeaderName;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::clock::{Clock, Millis};
use crate::config::{Config, Plan};
use crate::metrics::Metrics;
use crate::outbound::client::Client;
use crate::shutdown::Shutdown;
use crate::store::Store;

/// Due entries taken from the index per scheduler turn.
const POP_BATCH: usize = 1024;

/// What the engine needs from the config.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub policies: BTreeMap<String, Vec<Duration>>,
    pub default_policy: String,
    pub max_in_flight: usize,
    pub max_in_flight_per_endpoint: usize,
    /// The `sha256-hex` scheme's header, when that scheme is on.
    pub hex_header: Option<HeaderName>,
    pub plans: BTreeMap<String, Plan>,
    pub require_verification: bool,
    pub disable_after_ms: Millis,
    pub retention_ms: Millis,
    /// How long a breaker's probe can take (connect + response timeouts and a margin).
    pub probe_time_ms: Millis,
}

impl EngineConfig {
    pub fn from_config(c: &Config) -> EngineConfig {
        EngineConfig {
            policies: c
                .retry_policies
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|d| d.0).collect()))
                .collect(),
            default_policy: c.delivery.default_retry_policy.clone(),
            max_in_flight: c.delivery.max_in_flight,
            max_in_flight_per_endpoint: c.delivery.max_in_flight_per_endpoint,
            hex_header: c
                .signing
                .schemes
                .iter()
                .any(|s| s == "sha256-hex")
                .then(|| HeaderName::from_bytes(c.signing.hex_header.as_bytes()).ok())
                .flatten(),
            plans: c.plans.clone(),
            require_verification: c.endpoints.require_verification,
            disable_after_ms: c.endpoints.disable_after.0.as_millis() as Millis,
            retention_ms: c.storage.retention.0.as_millis() as Millis,
            probe_time_ms: (c.delivery.connect_timeout.0 + c.delivery.timeout.0).as_millis()
                as Millis
                + 1_000,
        }
    }

    fn policy(&self, name: &str) -> &[Duration] {
        self.policies
            .get(name)
            .or_else(|| self.policies.get(&self.default_policy))
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }
}

/// One endpoint's queue of due deliveries and how many of its attempts run.
#[derive(Default)]
struct Lane {
    queue: VecDeque<(Millis, String)>,
    running: usize,
}

pub struct Engine {
    store: Arc<Store>,
    client: Client,
    clock: Arc<dyn Clock>,
    cfg: EngineConfig,
    global: Arc<Semaphore>,
    lanes: Mutex<HashMap<String, Lane>>,
    /// Lanes that had work but found no global permit; pumped when one frees.
    starved: Mutex<VecDeque<String>>,
    /// Deliveries with an attempt running now.
    in_flight: Mutex<HashSet<String>>,
    running: AtomicUsize,
    idle: Notify,
    sweeping: std::sync::atomic::AtomicBool,
    pub metrics: Arc<Metrics>,
    pub recent: recent::Recent,
    breakers: Mutex<HashMap<String, health::Slot>>,
    rates: Mutex<health::Rates>,
    /// The id of every delivery whose attempt was just recorded (for callers that wait on one).
    attempted: tokio::sync::broadcast::Sender<String>,
}

impl Engine {
    pub fn new(
        store: Arc<Store>,
        client: Client,
        clock: Arc<dyn Clock>,
        cfg: EngineConfig,
        metrics: Arc<Metrics>,
    ) -> Arc<Engine> {
        Arc::new(Engine {
            global: Arc::new(Semaphore::new(cfg.max_in_flight)),
            store,
            client,
            clock,
            cfg,
            lanes: Mutex::new(HashMap::new()),
            starved: Mutex::new(VecDeque::new()),
            in_flight: Mutex::new(HashSet::new()),
            running: AtomicUsize::new(0),
            idle: Notify::new(),
            sweeping: std::sync::atomic::AtomicBool::new(false),
            metrics,
            recent: recent::Recent::default(),
            attempted: tokio::sync::broadcast::channel(1024).0,
            breakers: Mutex::new(HashMap::new()),
            rates: Mutex::new(health::Rates::default()),
        })
    }

    /// Announces the id of each delivery whose attempt is recorded from now on.
    pub fn subscribe_attempts(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.attempted.subscribe()
    }

    /// Attempts running now.
    pub fn in_flight(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    pub fn is_in_flight(&self, delivery_id: &str) -> bool {
        lock(&self.in_flight).contains(delivery_id)
    }

    /// The scheduler: runs until shutdown, then waits up to `grace` for running attempts.
    pub async fn run(self: Arc<Self>, mut shutdown: Shutdown, grace: Duration) {
        let mut next_sweep = self.clock.now_ms();
        loop {
            // Checked every turn: with a large backlog the loop below keeps dispatching without
            // reaching the `select!`, and a stop must not wait for the backlog.
            if shutdown.is_fired() {
                break;
            }
            let now = self.clock.now_ms();
            if now >= next_sweep {
                self.clone().start_sweep(now);
                next_sweep = now + retention::SWEEP_EVERY_MS;
            }
            let due = self.store.due().pop_due(now, POP_BATCH);
            let got = due.len();
            for (at, id) in due {
                self.dispatch(at, id);
            }
            if got == POP_BATCH {
                tokio::task::yield_now().await;
                continue;
            }
            let until = self
                .store
                .due()
                .next_due()
                .unwrap_or(i64::MAX)
                .min(next_sweep);
            let wait = Duration::from_millis((until - now).max(0) as u64);
            let clock_jump = async {
                match self.clock.changed() {
                    Some(n) => n.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.store.due().changed() => {}
                _ = clock_jump => {}
                _ = shutdown.wait() => break,
            }
        }
        self.drain(grace).await;
    }

    async fn drain(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let idle = self.idle.notified();
            let n = self.in_flight();
            if n == 0 {
                return;
            }
            tracing::info!(in_flight = n, "waiting for in-flight attempts");
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                tracing::warn!(
                    in_flight = self.in_flight(),
                    "grace period over; unfinished attempts stay pending and run after restart"
                );
                return;
            }
        }
    }

    /// Puts a due delivery in its endpoint's lane.
    fn dispatch(self: &Arc<Self>, at: Millis, id: String) {
        let lane = match self.store.delivery(&id) {
            Ok(Some(d)) => d.endpoint_id.unwrap_or_default(),
            Ok(None) => return,
            Err(e) => {
                tracing::error!(delivery_id = %id, error = %e, "cannot read a due delivery");
                return;
            }
        };
        lock(&self.lanes)
            .entry(lane.clone())
            .or_default()
            .queue
            .push_back((at, id));
        self.pump(&lane);
    }

    /// Starts as many of the lane's queued attempts as its limit and the global one allow.
    fn pump(self: &Arc<Self>, key: &str) {
        loop {
            let mut lanes = lock(&self.lanes);
            let Some(lane) = lanes.get_mut(key) else {
                return;
            };
            if lane.queue.is_empty() || lane.running >= self.cfg.max_in_flight_per_endpoint {
                if lane.queue.is_empty() && lane.running == 0 {
                    lanes.remove(key);
                }
                return;
            }
            let Ok(permit) = self.global.clone().try_acquire_owned() else {
                drop(lanes);
                lock(&self.starved).push_back(key.to_string());
                return;
            };
            let Some((at, id)) = lane.queue.pop_front() else {
                return;
            };
            lane.running += 1;
            drop(lanes);
            self.start(key.to_string(), at, id, permit);
        }
    }

    fn start(self: &Arc<Self>, lane: String, at: Millis, id: String, permit: OwnedSemaphorePermit) {
        if !lock(&self.in_flight).insert(id.clone()) {
            // Already being attempted (a stale due entry): the running attempt decides.
            self.finish(&lane, permit);
            return;
        }
        self.running.fetch_add(1, Ordering::Relaxed);
        let engine = self.clone();
        tokio::spawn(async move {
            engine.attempt(at, &id).await;
            lock(&engine.in_flight).remove(&id);
            engine.running.fetch_sub(1, Ordering::Relaxed);
            engine.finish(&lane, permit);
            engine.idle.notify_waiters();
        });
    }

    fn finish(self: &Arc<Self>, lane: &str, permit: OwnedSemaphorePermit) {
        if let Some(l) = lock(&self.lanes).get_mut(lane) {
            l.running -= 1;
        }
        drop(permit);
        self.pump(lane);
        let starved: Vec<String> = lock(&self.starved).drain(..).collect();
        for key in starved {
            self.pump(&key);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
