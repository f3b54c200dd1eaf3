//! One attempt of one delivery: conditions, request, outcome, decision, record.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;

use std::sync::atomic::Ordering;

use super::{lock, Engine, Handled};
use crate::clock::Millis;
use crate::config::Plan;
use crate::ids::{self, ATTEMPT};
use crate::model::{Attempt, Delivery, DeliveryState, Endpoint, EventMeta, Status};
use crate::outbound::client::{ClientIdentity, Outcome};
use crate::outbound::identity;
use crate::outbound::request::{self, Message};
use crate::policy::breaker::Gate;
use crate::policy::quota::{self, Limits};
use crate::policy::{conditions, retry};
use crate::store::prelude::*;
use crate::store::NOT_SENT;
use crate::store::{Changed, DueDelivery, Fence};
use tokio::sync::OwnedSemaphorePermit;

/// How long a delivery waits when its endpoint's rate-limit token cannot be taken (the
/// cluster's database failed).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
const RETRY_TOKEN_MS: Millis = 1_000;

/// Why a manual retry was refused.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    #[error("delivery not found")]
    NotFound,
    #[error("an attempt of this delivery is running now")]
    InFlight,
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl Engine {
    /// A manual retry: one new attempt of the same event now (same `webhook-id`), without an
    /// automatic schedule after it.
    pub async fn retry_now(&self, delivery_id: &str) -> Result<Delivery, RetryError> {
        let now = self.clock.now_ms();
        let changed = self
            .store
            .change_delivery(delivery_id, move |d| {
                let mut d = d.clone();
                d.state = DeliveryState::Pending;
                d.next_attempt_at = Some(now);
                d.manual = true;
                d.queued = true;
                Some((d.clone(), d))
            })
            .await?;
        match changed {
            Changed::Yes(d) => Ok(d),
            Changed::Busy => Err(RetryError::InFlight),
            Changed::No | Changed::NotFound => Err(RetryError::NotFound),
        }
    }

    /// Attempts a due delivery: conditions, breaker, rate, quota, send, record. `fence` entitles
    /// the record; `slot`, one of the endpoint's sending slots, is given back once the request is
    /// over (not once the result is written: writing it is no request to the endpoint).
    pub(super) async fn attempt_due(
        self: &Arc<Self>,
        found: DueDelivery,
        fence: Fence,
        slot: OwnedSemaphorePermit,
    ) -> Handled {
        let DueDelivery {
            delivery,
            event,
            payload,
        } = found;
        let endpoint = delivery
            .endpoint_id
            .as_deref()
            .and_then(|ep| self.store.endpoint(ep));
        let started = self.clock.now_ms();
        let plan = self.plan_of(&delivery.account_id);
        let mut failing = conditions::first_failing(
            plan.map(|(_, p)| p),
            endpoint.as_deref(),
            self.cfg.require_verification,
        );
        // The breaker sits between the conditions and the quota: a delivery held by an open
        // breaker is not attempted and not counted; it waits (in memory, with its lane) for the
        // probe.
        let mut probe = false;
        if let (None, Some(ep)) = (failing, endpoint.as_deref()) {
            let gate = self.breaker_gate(&ep.id, started).await;
            if let Gate::WaitUntil(at) = gate {
                return Handled::Held(at);
            }
            probe = gate == Gate::Probe;
            // Over the endpoint's rate: the delivery waits for the next token (not an attempt).
            if let Err(next) = self.rate_token(ep, started).await {
                self.rate_hold(&ep.id, next);
                if probe {
                    self.release_probe(&ep.id, started).await;
                }
                return Handled::Held(next);
            }
            failing = self.over_quota(&delivery.account_id, plan, started).await;
            if failing.is_some() && probe {
                self.release_probe(&ep.id, started).await;
                probe = false;
            }
        }
        let (attempt, outcome) = match (failing, endpoint.as_deref()) {
            (None, Some(ep)) => {
                let span = self
                    .traces
                    .sending(&event, &delivery, ep, delivery.attempt_count + 1);
                let (attempt, outcome) = self
                    .send(&delivery, ep, &event, payload, started, span.propagated())
                    .await;
                span.sent(&attempt, outcome.phases.as_ref());
                (attempt, Some(outcome))
            }
            (status, _) => {
                let status = status.unwrap_or(Status::NoEndpoint);
                let attempt = self.not_sent(&delivery, started, status);
                self.traces.not_sent(&event, &delivery, &attempt);
                (attempt, None)
            }
        };
        // The request is over: the endpoint's slot is free while the result is written.
        drop(slot);
        self.record(delivery, endpoint, attempt, outcome, probe, fence)
            .await;
        Handled::Done
    }

    /// Takes a token of the endpoint's rate limit, if it has one; `Err(when)` the next comes.
    /// A bucket that cannot be read (a cluster's database) holds the delivery a second (the
    /// limit protects the receiver, so it does not fail open).
    async fn rate_token(&self, ep: &Endpoint, now: Millis) -> Result<(), Millis> {
        let Some(limit) = ep.rate_limit else {
            return Ok(());
        };
        self.store
            .take_token(&ep.id, limit, now)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(endpoint_id = %ep.id, error = %e, "cannot take a rate-limit token; the delivery waits");
                Err(now + RETRY_TOKEN_MS)
            })
    }

    /// The account's synced plan, if it has one that the config still defines. A plan name the
    /// config no longer has is treated as no plan (entitled, not counted) and logged.
    fn plan_of(&self, account_id: &str) -> Option<(&str, &Plan)> {
        let name = self.store.account_plan(account_id)?;
        match self.cfg.plans.get_key_value(&name) {
            Some((n, p)) => Some((n.as_str(), p)),
            None => {
                tracing::warn!(account_id, plan = %name, "account's plan is not in the config; treating it as no plan");
                None
            }
        }
    }

    /// Condition 5: counts the attempt in the account's windows; `rate_limited` when over. An
    /// account without a plan is not counted. A failing counter store allows the attempt (fail
    /// open) and is counted in `herald_quota_check_failures_total`.
    async fn over_quota(
        &self,
        account_id: &str,
        plan: Option<(&str, &Plan)>,
        now: Millis,
    ) -> Option<Status> {
        let (_, plan) = plan?;
        let limits = Limits {
            per_minute: plan.per_minute,
            per_day: plan.per_day,
        };
        match self
            .store
            .quota_take(account_id, quota::windows(now), limits)
            .await
        {
            Ok(true) => None,
            Ok(false) => Some(Status::RateLimited),
            Err(e) => {
                self.metrics
                    .quota_check_failures
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(account_id, error = %e, "quota check failed; allowing the attempt (fail open)");
                None
            }
        }
    }

    fn not_sent(&self, d: &Delivery, at: Millis, status: Status) -> Attempt {
        Attempt {
            id: ids::new_id(ATTEMPT, at),
            number: d.attempt_count + 1,
            at,
            duration_ms: 0,
            status,
            http_status: None,
            error: None,
            request_headers: Vec::new(),
            response_body: String::new(),
            response_headers: Vec::new(),
            url: None,
            manual: false,
        }
    }

    async fn send(
        &self,
        d: &Delivery,
        endpoint: &Endpoint,
        event: &EventMeta,
        payload: Bytes,
        at: Millis,
        trace: Option<&crate::trace::TraceContext>,
    ) -> (Attempt, Outcome) {
        let number = d.attempt_count + 1;
        let msg = Message {
            id: &event.id,
            event_type: &event.event_type,
            attempt: number,
            delivery_id: Some(&d.id),
            trace,
        };
        let (mut outcome, recorded) = self.send_message(endpoint, &msg, payload, at).await;
        let attempt = Attempt {
            id: ids::new_id(ATTEMPT, at),
            number,
            at,
            duration_ms: outcome.duration.as_millis() as u64,
            status: outcome.status,
            http_status: outcome.http_status,
            error: outcome.error.clone(),
            request_headers: recorded,
            response_body: String::from_utf8_lossy(&outcome.body).into_owned(),
            response_headers: std::mem::take(&mut outcome.headers),
            url: Some(endpoint.url.clone()),
            manual: d.manual,
        };
        (attempt, outcome)
    }

    /// Signs and sends one message to `endpoint`; returns the outcome and the headers as the
    /// log records them. Warnings (a macro naming an unset account secret) are logged and
    /// added to the outcome's error.
    pub(super) async fn send_message(
        &self,
        endpoint: &Endpoint,
        msg: &Message<'_>,
        payload: Bytes,
        at: Millis,
    ) -> (Outcome, Vec<(String, String)>) {
        // The account secrets the endpoint's header macros name, read before the request is
        // built (few endpoints name any).
        let mut secrets = std::collections::HashMap::new();
        for name in request::secret_names(endpoint) {
            match self.store.account_secret(&endpoint.account_id, &name).await {
                Ok(Some(v)) => {
                    secrets.insert(name, v);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(account_id = %endpoint.account_id, error = %e, "cannot read an account secret");
                }
            }
        }
        let built = request::build(
            endpoint,
            msg,
            payload,
            at,
            self.cfg.hex_header.as_ref(),
            |name| secrets.get(name).cloned(),
        );
        let built = built.map_err(|message| Unsent {
            status: Status::ConnectionError,
            message,
        });
        let built = match built {
            Ok(mut b) => match self.identity(endpoint, at).await {
                Ok(identity) => {
                    b.request.identity = identity;
                    Ok(b)
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        let built = match built {
            Ok(b) => b,
            Err(e) => {
                let outcome = Outcome {
                    status: e.status,
                    http_status: None,
                    retry_after: None,
                    error: Some(e.message),
                    body: Vec::new(),
                    headers: Vec::new(),
                    duration: Duration::ZERO,
                    phases: None,
                };
                return (outcome, Vec::new());
            }
        };
        for w in &built.warnings {
            tracing::warn!(endpoint_id = %endpoint.id, "{w}");
        }
        let mut outcome = self.client.send(built.request).await;
        if !built.warnings.is_empty() {
            let mut notes = built.warnings.join("; ");
            if let Some(e) = outcome.error.take() {
                notes = format!("{e}; {notes}");
            }
            outcome.error = Some(notes);
        }
        (outcome, built.recorded)
    }

    /// The client certificate to present to `endpoint` (mutual TLS), if it has one: built from
    /// the stored PEM once per certificate and kept. One that cannot be used, or has expired,
    /// fails the attempt as a `tls_error` naming why (never the key).
    async fn identity(
        &self,
        endpoint: &Endpoint,
        at: Millis,
    ) -> Result<Option<Arc<ClientIdentity>>, Unsent> {
        let Some(shown) = &endpoint.client_certificate else {
            return Ok(None);
        };
        let tls_error = |message: String| Unsent {
            status: Status::TlsError,
            message,
        };
        if shown.not_after <= at {
            return Err(tls_error(format!(
                "the endpoint's client certificate expired at {}",
                crate::clock::rfc3339(shown.not_after)
            )));
        }
        let cached = lock(&self.identities).get(&endpoint.id).cloned();
        if let Some(id) = cached.filter(|i| i.sha256 == shown.sha256) {
            return Ok(Some(id));
        }
        let pem = self
            .store
            .client_certificate_pem(&endpoint.id)
            .await
            .map_err(|e| {
                tls_error(format!(
                    "the endpoint's client certificate cannot be read: {e}"
                ))
            })?;
        let Some((certificate, private_key)) = pem else {
            return Err(tls_error(
                "the endpoint's client certificate is missing from the store".into(),
            ));
        };
        let identity = identity::parse(&certificate, &private_key, at)
            .map_err(|r| tls_error(format!("the endpoint's client certificate: {}", r.message)))?;
        if identity.shown.sha256 != shown.sha256 {
            return Err(tls_error(
                "the stored client certificate is not the one the endpoint shows; set it again"
                    .into(),
            ));
        }
        let built = Arc::new(self.client.client_identity(identity).map_err(tls_error)?);
        lock(&self.identities).insert(endpoint.id.clone(), built.clone());
        Ok(Some(built))
    }

    /// Decides what follows the attempt and stores both in one write. `probe`: the attempt was
    /// its endpoint's breaker probe.
    async fn record(
        &self,
        was: Delivery,
        endpoint: Option<Arc<Endpoint>>,
        attempt: Attempt,
        outcome: Option<Outcome>,
        probe: bool,
        fence: Fence,
    ) {
        let now = self.clock.now_ms();
        let mut d = was.clone();
        let status = attempt.status;
        let sent = outcome.is_some();
        d.attempt_count = attempt.number;
        d.last_status = Some(status);
        d.last_http_status = attempt.http_status;
        d.next_attempt_at = None;
        d.queued = false;
        d.state = match status {
            Status::Delivered => DeliveryState::Delivered,
            _ if !sent && status != Status::Blocked => DeliveryState::Skipped,
            _ => DeliveryState::Failed,
        };
        if let (Some(o), Some(ep), false) = (&outcome, &endpoint, d.manual) {
            if let Some(at) = self.retry_at(ep, o, &attempt, now) {
                d.state = DeliveryState::Pending;
                d.next_attempt_at = Some(at);
                d.queued = true;
            }
        }
        d.manual = false;
        self.count(&attempt, &d, sent, now);
        tracing::info!(
            delivery_id = %d.id,
            endpoint_id = d.endpoint_id.as_deref().unwrap_or("-"),
            attempt = attempt.number,
            status = status.as_str(),
            http_status = attempt.http_status,
            state = d.state.as_str(),
            "attempt"
        );
        let written = self.store.record_attempt(&was, &d, &attempt, fence).await;
        match written {
            Ok(()) => {}
            Err(crate::store::StoreError::LeaseLost) => {
                tracing::warn!(delivery_id = %d.id, "the lease passed to another node before the attempt was recorded; that node attempts it again");
            }
            Err(e) => tracing::error!(delivery_id = %d.id, error = %e, "cannot record attempt"),
        }
        // Nobody listening is the normal case.
        if self.attempted.receiver_count() > 0 {
            let _ = self.attempted.send(d.id.clone());
        }
        if let (true, Some(ep)) = (sent, &endpoint) {
            let last = (status, attempt.http_status);
            self.after_sent(ep, last, probe, attempt.duration_ms, now)
                .await;
            if attempt.http_status == Some(410) {
                self.disable(ep, now, "the endpoint answered 410 Gone", last)
                    .await;
            }
        }
        if d.state == DeliveryState::Failed {
            self.report_failed(&d, now).await;
        }
    }

    /// When a sent attempt that failed is tried again, by the endpoint's retry policy (and
    /// the receiver's `Retry-After` on a 429 or 503); `None` when it is not.
    fn retry_at(
        &self,
        ep: &Endpoint,
        o: &Outcome,
        attempt: &Attempt,
        now: Millis,
    ) -> Option<Millis> {
        if !retry::is_retryable(attempt.status, o.http_status) {
            return None;
        }
        let retry_after = match o.http_status {
            Some(429 | 503) => o
                .retry_after
                .as_deref()
                .and_then(|v| retry::parse_retry_after(v, now)),
            _ => None,
        };
        let jitter = rand::thread_rng().gen_range(-1.0..=1.0);
        let policy = self.cfg.policy(&ep.retry_policy);
        retry::next_delay(policy, attempt.number, jitter, retry_after)
            .map(|wait| now + wait.as_millis() as Millis)
    }

    /// Counts the attempt: its status, its duration if sent, and the wait from ingest to a first
    /// attempt; a decision that sent nothing in the log's minutes too (a request is counted in
    /// its endpoint's when its result is known, [`Self::after_sent`]).
    fn count(&self, attempt: &Attempt, d: &Delivery, sent: bool, now: Millis) {
        if !sent {
            lock(&self.unflushed).record(NOT_SENT, now, attempt.status, 0);
        }
        self.metrics.attempt(attempt.status);
        if sent {
            self.metrics
                .attempt_duration
                .observe(attempt.duration_ms as f64 / 1000.0);
        }
        if attempt.number == 1 {
            let waited = (attempt.at - d.created_at).max(0) as f64 / 1000.0;
            self.metrics.ingest_to_first_attempt.observe(waited);
        }
    }
}

/// Why a request was not sent: the status its attempt records, and a sentence.
struct Unsent {
    status: Status,
    message: String,
}
