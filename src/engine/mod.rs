//! Stored -> sent: the delivery loop.
//!
//! The scheduler ([`scheduler`]) takes what the store's queue says is due and starts an attempt
//! for each, on one box and in a cluster alike. It bounds what it holds of each endpoint and
//! sends at most `max_in_flight_per_endpoint` of one at once; the engine's semaphore bounds all
//! attempts together at `max_in_flight`. An endpoint that is full, or held by its circuit
//! breaker, only keeps its own deliveries waiting, so a slow or dead endpoint never delays
//! another one. Each attempt ([`attempt`]) checks the conditions, sends, decides what comes next
//! (retry, fail, done) and records it through the store; the delivery then goes back to the
//! queue.

mod attempt;
mod retention;
mod scheduler;
pub use attempt::RetryError;
pub mod health;
pub mod minutes;
pub mod verify;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::header::HeaderName;
use tokio::sync::{Notify, Semaphore};

use crate::clock::{Clock, Millis};
use crate::config::{Config, Plan};

use crate::metrics::Metrics;
use crate::outbound::client::{Client, ClientIdentity};
use crate::shutdown::Shutdown;
use crate::store::prelude::*;
use crate::store::{Backend, Hold};

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
    pub fold_after_ms: Millis,
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
            fold_after_ms: c.storage.fold_after.0.as_millis() as Millis,
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

pub struct Engine {
    store: Backend,
    client: Client,
    clock: Arc<dyn Clock>,
    cfg: EngineConfig,
    global: Arc<Semaphore>,
    running: AtomicUsize,
    idle: Notify,
    sweeping: std::sync::atomic::AtomicBool,
    /// Set when the scheduler stops: a retention sweep stops at its next slice.
    stopping: std::sync::atomic::AtomicBool,
    /// The running attempts' tasks, aborted if they outlast the shutdown grace period.
    attempts: Mutex<tokio::task::JoinSet<()>>,
    pub metrics: Arc<Metrics>,
    /// Each endpoint whose rate limit last held a delivery on this node, and until when (the
    /// next token): what `/v1/status` and a waiting delivery say of it.
    rate_held: Mutex<HashMap<String, Millis>>,
    /// Attempts per minute not yet added to the store ([`minutes`]).
    unflushed: Mutex<minutes::Unflushed>,
    /// Each mutual-TLS endpoint's client certificate, ready to present (by endpoint id; the
    /// identity's SHA-256 tells a replaced certificate).
    identities: Mutex<HashMap<String, Arc<ClientIdentity>>>,
    /// The id of every delivery whose attempt was just recorded (for callers that wait on one).
    attempted: tokio::sync::broadcast::Sender<String>,
    /// Where breaker openings, closings and disablings are reported for failure alert mails.
    alerts: crate::alerts::Alerts,
    /// Attempts' spans (docs/operations.md, "Traces").
    traces: crate::traces::Traces,
}

/// What became of a delivery the scheduler handed to an attempt.
enum Handled {
    /// Attempted: its lane may hand out the next one.
    Done,
    /// Not attempted (an open circuit breaker, the rate limit): due again then.
    Held(Millis),
}

impl Engine {
    pub fn new(
        store: Backend,
        client: Client,
        clock: Arc<dyn Clock>,
        cfg: EngineConfig,
        metrics: Arc<Metrics>,
        alerts: crate::alerts::Alerts,
        traces: crate::traces::Traces,
    ) -> Arc<Engine> {
        Arc::new(Engine {
            global: Arc::new(Semaphore::new(cfg.max_in_flight)),
            store,
            client,
            clock,
            cfg,
            running: AtomicUsize::new(0),
            idle: Notify::new(),
            sweeping: std::sync::atomic::AtomicBool::new(false),
            stopping: std::sync::atomic::AtomicBool::new(false),
            attempts: Mutex::new(tokio::task::JoinSet::new()),
            metrics,
            attempted: tokio::sync::broadcast::channel(1024).0,
            rate_held: Mutex::new(HashMap::new()),
            unflushed: Mutex::new(minutes::Unflushed::default()),
            identities: Mutex::new(HashMap::new()),
            alerts,
            traces,
        })
    }

    /// Traces: where the API starts the spans of requests that create events.
    pub fn traces(&self) -> &crate::traces::Traces {
        &self.traces
    }

    /// Failure alert mails: where the API sends an account's test mail.
    pub fn alerts(&self) -> &crate::alerts::Alerts {
        &self.alerts
    }

    /// Announces the id of each delivery whose attempt is recorded from now on.
    pub fn subscribe_attempts(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.attempted.subscribe()
    }

    /// Attempts running now.
    pub fn in_flight(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Whether an attempt of the delivery is running now (or something else holds its claim).
    pub fn is_in_flight(&self, delivery_id: &str) -> bool {
        self.store.is_held(delivery_id)
    }

    /// Until when the endpoint's rate limit holds its deliveries on this node (the next token),
    /// if it held one and that time is after `now`.
    pub fn rate_held_until(&self, endpoint_id: &str, now: Millis) -> Option<Millis> {
        lock(&self.rate_held)
            .get(endpoint_id)
            .copied()
            .filter(|&t| t > now)
    }

    /// Notes that the endpoint's rate limit holds its deliveries until `until`.
    fn rate_hold(&self, endpoint_id: &str, until: Millis) {
        let mut held = lock(&self.rate_held);
        match held.get_mut(endpoint_id) {
            Some(t) => *t = until,
            None => {
                held.insert(endpoint_id.to_string(), until);
            }
        }
    }

    /// The scheduler: runs until shutdown, then waits up to `grace` for running attempts.
    pub async fn run(self: Arc<Self>, shutdown: Shutdown, grace: Duration) {
        tokio::spawn(self.clone().keep_minutes(shutdown.clone()));
        self.clone().schedule(shutdown, grace).await;
        self.flush_minutes().await;
        // Before the store closes: alert mails still being tried give their claims back.
        self.alerts.stopped().await;
    }

    /// A scheduler's sleep: until `wait` has passed (never, if `None`), `woken` resolves or the
    /// clock jumps. `false` once shutdown fires.
    async fn idle_until(
        &self,
        wait: Option<Duration>,
        woken: impl std::future::Future,
        shutdown: &mut Shutdown,
    ) -> bool {
        let timer = async {
            match wait {
                Some(w) => tokio::time::sleep(w).await,
                None => std::future::pending().await,
            }
        };
        let clock_jump = async {
            match self.clock.changed() {
                Some(n) => n.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = timer => true,
            _ = woken => true,
            _ = clock_jump => true,
            _ = shutdown.wait() => false,
        }
    }

    /// Waits up to `grace` for running attempts; those still running then are dropped (their
    /// deliveries stay pending and are attempted after the restart: at least once).
    async fn drain(&self, grace: Duration) {
        self.stopping.store(true, Ordering::Release);
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let idle = self.idle.notified();
            let n = self.in_flight();
            if n == 0 {
                break;
            }
            tracing::info!(in_flight = n, "waiting for in-flight attempts");
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                tracing::warn!(
                    in_flight = self.in_flight(),
                    "grace period over; unfinished attempts stay pending and run after restart"
                );
                break;
            }
        }
        let mut attempts = std::mem::take(&mut *lock(&self.attempts));
        attempts.shutdown().await;
    }

    /// Gives a delivery back to the queue once its attempt is over (or it was held).
    async fn release(&self, hold: Hold, handled: Handled) {
        let until = match handled {
            Handled::Done => None,
            Handled::Held(until) => Some(until),
        };
        match self.store.release(hold, until).await {
            Ok(()) | Err(crate::store::StoreError::LeaseLost) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot put a held delivery back; it is due again when its lease ends")
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
