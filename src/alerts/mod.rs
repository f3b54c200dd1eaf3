//! Failure alerts by mail (docs/operations.md, "Failure alerts"): the engine says what happened
//! to an endpoint ([`Alerts::notify`], never waiting); a background task decides whether the
//! account's people get a mail ([`crate::policy::alerts`], claimed through the store so one
//! node of a cluster sends it), writes it ([`mail`]) and hands it to the SMTP server
//! ([`smtp`]), trying 3 times over 10 minutes.
//!
//! Nothing here is on the delivery path: the engine's side is a `try_send` on a bounded
//! channel, and a full channel drops the alert with a log line and a count. Whatever the mail
//! server does (down, slow, refusing) costs a log line and a count, nothing else. Waits between
//! tries go by the [`Clock`], so a test moves time instead of waiting ten minutes.

pub mod mail;
pub mod smtp;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lettre::message::Mailbox;
use tokio::sync::{mpsc, watch, Semaphore};

use crate::clock::{Clock, Millis};
use crate::config::AlertsSetup;
use crate::metrics::{AlertResult, Metrics};
use crate::model::{Endpoint, Status};
use crate::policy::alerts::{AlertClaim, AlertKind, AlertMark, Claimed};
use crate::shutdown::Shutdown;
use crate::store::prelude::*;
use crate::store::Backend;

/// Alerts waiting for the background task at most; past it they are dropped (and counted).
/// Alerts come from breaker transitions, a few per failing endpoint per hour: a full queue
/// means the mail server is so slow that [`MAX_SENDING`] mails are in their retries.
pub const QUEUE: usize = 256;
/// Mails being sent (or waiting for their next try) at once.
pub const MAX_SENDING: usize = 16;
/// Each mail's tries: the first at once, then after these waits (3 tries over 10 minutes).
pub const RETRY_AFTER: [Duration; 2] = [Duration::from_secs(120), Duration::from_secs(480)];

/// What happened to an endpoint, as the engine saw it.
#[derive(Debug, Clone)]
pub struct Trigger {
    pub kind: AlertKind,
    pub endpoint: Arc<Endpoint>,
    /// When it happened.
    pub at: Millis,
    /// When the endpoint's current run of failures began.
    pub failing_since: Option<Millis>,
    /// The last sent attempt's status and HTTP code, if known.
    pub last_status: Option<Status>,
    pub http_status: Option<u16>,
}

/// The engine's side: where it reports what happened. Without `[alerts] smtp_url` it drops
/// everything at once.
#[derive(Clone)]
pub struct Alerts {
    tx: Option<mpsc::Sender<Trigger>>,
    /// What sends test mails ([`Alerts::send_test`]); `None` when alerts are off.
    sender: Option<Arc<Sender>>,
    metrics: Arc<Metrics>,
    /// The background task, awaited once herald stops ([`Alerts::stopped`]).
    task: Arc<std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

impl Alerts {
    /// Alerts switched off (no SMTP server configured).
    pub fn off(metrics: Arc<Metrics>) -> Alerts {
        Alerts {
            tx: None,
            sender: None,
            metrics,
            task: Arc::default(),
        }
    }

    /// Waits for the background task to end after the shutdown signal: the claims of mails
    /// still being tried are given back first, while the store is open.
    pub async fn stopped(&self) {
        let task = lock(&self.task).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Hands the alert to the background task without waiting; a full queue drops it.
    pub fn notify(&self, t: Trigger) {
        let Some(tx) = &self.tx else { return };
        if t.endpoint.account_id == crate::model::OPERATOR_ACCOUNT {
            return;
        }
        match tx.try_send(t) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(t)) => {
                self.metrics.alert(AlertResult::Dropped);
                tracing::warn!(
                    endpoint_id = %t.endpoint.id,
                    alert = t.kind.as_str(),
                    "alert mail dropped: the alert queue is full (the mail server is slow or down)"
                );
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// A test mail that went out: to whom, and when.
#[derive(Debug)]
pub struct TestSent {
    pub to: Vec<String>,
    pub at: Millis,
}

/// Why a test mail did not go out.
#[derive(Debug)]
pub enum TestRefused {
    /// No `[alerts] smtp_url`: nothing is mailed.
    Off,
    /// The account has no address herald mails.
    NoAddresses,
    /// The account had `alerts.max_per_account_per_hour` (this many) mails this hour.
    OverCap(u32),
    /// The mail server did not take it (why, as the SMTP client says).
    NotSent(String),
    Store(crate::store::StoreError),
}

impl Alerts {
    /// Sends the account's alert addresses a test mail now, once (no retries: the caller sees
    /// what the mail server answered), counted toward the account's mails this hour like any
    /// alert mail (docs/operations.md, "Failure alerts").
    pub async fn send_test(&self, account_id: &str) -> Result<TestSent, TestRefused> {
        let Some(s) = &self.sender else {
            return Err(TestRefused::Off);
        };
        let emails = s
            .store
            .alert_emails(account_id)
            .await
            .map_err(TestRefused::Store)?;
        let (to, _) = mail::recipients(&emails);
        if to.is_empty() {
            return Err(TestRefused::NoAddresses);
        }
        let at = s.clock.now_ms();
        if !s
            .store
            .count_alert_mail(account_id, at, s.max_per_hour)
            .await
            .map_err(TestRefused::Store)?
        {
            s.metrics.alert(AlertResult::Suppressed);
            return Err(TestRefused::OverCap(s.max_per_hour));
        }
        let facts = mail::TestFacts {
            account_id: account_id.to_string(),
            at,
            portal: s.portal.clone(),
            min_interval: humantime::format_duration(s.min_interval).to_string(),
            brand: s.brand.clone(),
        };
        let message = mail::test_message(&facts, &s.from, &to).map_err(|e| {
            s.metrics.alert(AlertResult::Failed);
            TestRefused::NotSent(format!("the mail cannot be written: {e}"))
        })?;
        if let Err(why) = s.mailer.send(message).await {
            s.metrics.alert(AlertResult::Failed);
            tracing::warn!(account_id, error = %why, "test alert mail not sent");
            return Err(TestRefused::NotSent(why));
        }
        s.metrics.alert(AlertResult::Sent);
        tracing::info!(account_id, recipients = to.len(), "test alert mail sent");
        Ok(TestSent {
            to: to.iter().map(ToString::to_string).collect(),
            at,
        })
    }
}

/// What the background task works with.
struct Sender {
    store: Backend,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    mailer: smtp::Mailer,
    from: Mailbox,
    min_interval: Duration,
    /// `alerts.max_per_account_per_hour`.
    max_per_hour: u32,
    portal: Option<String>,
    /// `portal.brand`, which the mails are from.
    brand: String,
}

/// Starts the background task that sends alert mails until `shutdown` (mails still in their
/// retries then are given up, with a log line, and give their claims back: the engine awaits
/// this through [`Alerts::stopped`] before the store closes). From `config`: the extra CA file
/// of `[delivery]`, `server.public_url` (the portal's address in the mails) and `portal.brand`.
pub fn start(
    setup: &AlertsSetup,
    config: &crate::config::Config,
    store: Backend,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) -> Result<Alerts, smtp::SetupError> {
    let mailer = smtp::Mailer::new(&setup.server, config.delivery.extra_ca_file.as_deref())?;
    let public_url = config.server.public_url.as_deref();
    let (tx, rx) = mpsc::channel(QUEUE);
    let sender = Arc::new(Sender {
        store,
        clock,
        metrics: metrics.clone(),
        mailer,
        from: setup.from.clone(),
        min_interval: setup.min_interval,
        max_per_hour: setup.max_per_hour,
        portal: public_url.map(|u| format!("{}/portal", u.trim_end_matches('/'))),
        brand: config.portal.brand.clone(),
    });
    tracing::info!(
        smtp_host = %setup.server.host,
        smtp_port = setup.server.port,
        "failure alerts by mail are on"
    );
    let task = tokio::spawn(run(sender.clone(), rx, shutdown));
    Ok(Alerts {
        tx: Some(tx),
        sender: Some(sender),
        metrics,
        task: Arc::new(std::sync::Mutex::new(Some(task))),
    })
}

/// The background task: each alert is decided here, one after another (so a recovery is
/// decided after the failure before it), and sent on a task of its own, after the endpoint's
/// mail before it has been sent or given up (so its people read them in order).
async fn run(sender: Arc<Sender>, mut rx: mpsc::Receiver<Trigger>, mut shutdown: Shutdown) {
    let sending = Arc::new(Semaphore::new(MAX_SENDING));
    let mut tasks = tokio::task::JoinSet::new();
    // The claims of mails not yet sent or given up, by mail: given back if herald stops first.
    let unsettled: Arc<std::sync::Mutex<HashMap<u64, Unsettled>>> = Arc::default();
    let mut next_mail = 0u64;
    // Per endpoint, whether its last mail is done (sent or given up).
    let mut last: HashMap<String, watch::Receiver<bool>> = HashMap::new();
    loop {
        let t = tokio::select! {
            t = rx.recv() => match t {
                Some(t) => t,
                None => break,
            },
            _ = shutdown.wait() => break,
        };
        while tasks.try_join_next().is_some() {}
        let Some(mail) = sender.decide(&t).await else {
            continue;
        };
        let permit = tokio::select! {
            p = sending.clone().acquire_owned() => p.ok(),
            _ = shutdown.wait() => None,
        };
        let Some(permit) = permit else {
            // Herald stops before this mail was tried: nobody got it.
            sender.give_back(&mail.facts, mail.claimed).await;
            break;
        };
        last.retain(|_, done| !*done.borrow());
        let (done, done_rx) = watch::channel(false);
        let before = last.insert(t.endpoint.id.clone(), done_rx);
        let (s, stop) = (sender.clone(), shutdown.clone());
        let id = next_mail;
        next_mail += 1;
        lock(&unsettled).insert(id, (mail.facts.clone(), mail.claimed));
        let settled = unsettled.clone();
        tasks.spawn(async move {
            if let Some(mut before) = before {
                // An error: that task is gone (herald stops); nothing to wait for.
                let _ = before.wait_for(|d| *d).await;
            }
            if s.send(mail, stop).await {
                lock(&settled).remove(&id);
            }
            let _ = done.send(true);
            drop(permit);
        });
    }
    if !tasks.is_empty() {
        tracing::info!(
            mails = tasks.len(),
            "herald stops: alert mails still being tried are given up"
        );
    }
    tasks.shutdown().await;
    // Nobody got them: the next failure after a restart is mailed, not withheld.
    let left: Vec<Unsettled> = lock(&unsettled).drain().map(|(_, u)| u).collect();
    for (facts, claimed) in left {
        sender.give_back(&facts, claimed).await;
    }
}

/// A mail's facts and the claim it holds.
type Unsettled = (mail::Facts, (AlertMark, AlertMark));

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A mail that is to go out.
struct Outgoing {
    facts: mail::Facts,
    message: lettre::Message,
    recipients: usize,
    /// The claim's mark before and after, given back if the mail is given up.
    claimed: (AlertMark, AlertMark),
}

impl Sender {
    /// Whether the alert becomes a mail: the account has addresses today's rule lets through
    /// (the others are skipped, each logged and counted `failed`), the endpoint still exists,
    /// and the store's claim lets it through ([`crate::policy::alerts::decide`]: the
    /// endpoint's mark, and the account's mails this hour under
    /// `alerts.max_per_account_per_hour`).
    async fn decide(&self, t: &Trigger) -> Option<Outgoing> {
        let ep = &t.endpoint;
        let emails = match self.store.alert_emails(&ep.account_id).await {
            Ok(e) if e.is_empty() => return None,
            Ok(e) => e,
            Err(e) => {
                self.metrics.alert(AlertResult::Failed);
                tracing::warn!(endpoint_id = %ep.id, error = %e, "alert mail not sent: cannot read the account's alert addresses");
                return None;
            }
        };
        let (to, skipped) = mail::recipients(&emails);
        for s in &skipped {
            self.metrics.alert(AlertResult::Failed);
            tracing::warn!(endpoint_id = %ep.id, account_id = %ep.account_id, address = %format!("alert_emails[{}]", s.index), why = %s.why, "alert mail not sent to an address herald no longer mails; set the account's addresses again");
        }
        if to.is_empty() {
            return None;
        }
        self.store.endpoint(&ep.id)?;
        let claim = AlertClaim {
            endpoint_id: &ep.id,
            account_id: &ep.account_id,
            kind: t.kind,
            now: t.at,
            min_interval_ms: self.min_interval.as_millis() as Millis,
            max_per_hour: self.max_per_hour,
        };
        let claimed = match self.store.claim_alert(claim).await {
            Ok(Claimed::Send { before, after }) => (before, after),
            // Only a failing mail is withheld (and counted): the others had nothing to say.
            Ok(Claimed::Withheld) if t.kind == AlertKind::Failing => {
                self.metrics.alert(AlertResult::Suppressed);
                tracing::info!(endpoint_id = %ep.id, "failing alert mail not sent: one went out within alerts.min_interval");
                return None;
            }
            Ok(Claimed::Withheld | Claimed::Gone) => return None,
            Ok(Claimed::OverCap) => {
                self.metrics.alert(AlertResult::Suppressed);
                tracing::warn!(endpoint_id = %ep.id, account_id = %ep.account_id, alert = t.kind.as_str(), max = self.max_per_hour, "alert mail not sent: the account had alerts.max_per_account_per_hour mails this hour");
                return None;
            }
            Err(e) => {
                self.metrics.alert(AlertResult::Failed);
                tracing::warn!(endpoint_id = %ep.id, error = %e, "alert mail not sent: cannot claim it in the store");
                return None;
            }
        };
        let pending = self.store.endpoint_pending(&ep.id).await.ok();
        let facts = mail::Facts {
            kind: t.kind,
            endpoint_id: ep.id.clone(),
            description: ep.description.clone(),
            url: ep.url.clone(),
            account_id: ep.account_id.clone(),
            failing_since: t.failing_since,
            last_status: t.last_status.map(Status::as_str),
            http_status: t.http_status,
            pending,
            at: t.at,
            portal: self.portal.clone(),
            min_interval: humantime::format_duration(self.min_interval).to_string(),
            brand: self.brand.clone(),
        };
        match mail::message(&facts, &self.from, &to) {
            Ok(message) => Some(Outgoing {
                facts,
                message,
                recipients: to.len(),
                claimed,
            }),
            Err(e) => {
                self.metrics.alert(AlertResult::Failed);
                tracing::error!(endpoint_id = %ep.id, alert = t.kind.as_str(), error = %e, "alert mail not sent: it cannot be written");
                self.give_back(&facts, claimed).await;
                None
            }
        }
    }

    /// Tries the mail up to 3 times over 10 minutes; logs and counts what became of it. A
    /// mail given up gives its claim back (it still counts toward the account's hour).
    /// `false` if herald stops first: the claim is left to the caller.
    async fn send(&self, mail: Outgoing, mut shutdown: Shutdown) -> bool {
        let f = &mail.facts;
        let tries = RETRY_AFTER.len() + 1;
        for n in 1..=tries {
            let why = match self.mailer.send(mail.message.clone()).await {
                Ok(()) => {
                    self.metrics.alert(AlertResult::Sent);
                    tracing::info!(endpoint_id = %f.endpoint_id, account_id = %f.account_id, alert = f.kind.as_str(), recipients = mail.recipients, "alert mail sent");
                    return true;
                }
                Err(why) => why,
            };
            let Some(wait) = RETRY_AFTER.get(n - 1) else {
                // The claim goes back before the mail is counted given up: whoever sees the
                // count sees the endpoint's mark as it was before the mail.
                self.give_back(f, mail.claimed).await;
                self.metrics.alert(AlertResult::Failed);
                tracing::error!(endpoint_id = %f.endpoint_id, alert = f.kind.as_str(), error = %why, "alert mail not sent after {tries} tries; given up");
                return true;
            };
            self.metrics.alert(AlertResult::Retried);
            tracing::warn!(endpoint_id = %f.endpoint_id, alert = f.kind.as_str(), error = %why, "alert mail not sent (try {n} of {tries}); trying again in {}", humantime::format_duration(*wait));
            let at = self.clock.now_ms() + wait.as_millis() as Millis;
            if !wait_until(&*self.clock, at, &mut shutdown).await {
                return false;
            }
        }
        true
    }

    /// Puts the endpoint's mark back as it was before the claim of a mail that did not go out,
    /// so the next alert is not held back by `alerts.min_interval` for a mail nobody got.
    async fn give_back(&self, f: &mail::Facts, (before, after): (AlertMark, AlertMark)) {
        if let Err(e) = self
            .store
            .give_back_alert(&f.endpoint_id, after, before)
            .await
        {
            tracing::warn!(endpoint_id = %f.endpoint_id, error = %e, "cannot give back the claim of an alert mail that did not go out");
        }
    }
}

/// Waits until the clock reads `at` (a timer, woken early when the clock jumps by hand);
/// `false` if herald stops first.
async fn wait_until(clock: &dyn Clock, at: Millis, shutdown: &mut Shutdown) -> bool {
    loop {
        // Enrolled before the clock is read, so a jump in between is not missed.
        let jumped = clock.changed().map(|n| n.notified());
        let now = clock.now_ms();
        if now >= at {
            return true;
        }
        let jump = async {
            match jumped {
                Some(n) => n.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis((at - now) as u64)) => {}
            _ = jump => {}
            _ = shutdown.wait() => return false,
        }
    }
}
