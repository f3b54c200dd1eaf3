//! Endpoint health: the circuit breaker gate and its bookkeeping, auto-disable, per-endpoint
//! success rates, and the operator events that report them (docs/delivery-contract.md).
//!
//! Operator events are ordinary events of the reserved account [`OPERATOR_ACCOUNT`], delivered
//! to `operator.webhook_url` by this same engine, signed with `operator.secret` and logged like
//! any delivery. Nothing that happens to the operator's own endpoint raises an operator event
//! (it would report on itself in a loop).

use serde_json::{json, Value};

use super::{lock, Engine};
use crate::clock::{rfc3339, Millis};
use crate::model::{Delivery, Endpoint, EndpointState, Status, OPERATOR_ACCOUNT};
use crate::policy::alerts::AlertKind;
use crate::policy::breaker::{Breaker, Change, Gate, Phase};
use crate::store::prelude::*;
use crate::store::{Minute, NewEvent, Purged, StoreError};

/// An endpoint's health, as the engine and the store know it.
#[derive(Debug, Clone)]
pub struct Health {
    pub breaker: Breaker,
    /// The last hour's (successes, sent attempts), if it had any.
    pub last_hour: Option<(u32, u32)>,
    pub last_success_at: Option<Millis>,
    /// Its deliveries waiting for an attempt.
    pub pending: u64,
}

/// How long an attempt that could not take its breaker's probe (the store failed) waits.
const RETRY_PROBE_MS: Millis = 1_000;

impl Engine {
    /// The endpoint's breaker as the store keeps it; an unreadable one counts as closed (the
    /// attempt goes, as a failing quota check lets it) and is logged.
    async fn breaker(&self, endpoint_id: &str) -> Breaker {
        self.store.breaker(endpoint_id).await.unwrap_or_else(|e| {
            tracing::warn!(endpoint_id, error = %e, "cannot read breaker state");
            Breaker::default()
        })
    }

    /// Asks the endpoint's breaker whether an attempt due now may go out. [`Gate::Probe`] has
    /// taken the probe (on a cluster, for the whole cluster): the attempt's result must be
    /// recorded as the probe's ([`after_sent`](Self::after_sent)), or the probe given back
    /// ([`release_probe`](Self::release_probe)).
    pub(super) async fn breaker_gate(&self, endpoint_id: &str, now: Millis) -> Gate {
        let probe_time = self.cfg.probe_time_ms;
        // Most endpoints are healthy and most held ones wait: decided on the kept copy.
        match self.breaker(endpoint_id).await.gate(now, probe_time) {
            Gate::Probe => {}
            gate => return gate,
        }
        match self
            .store
            .change_breaker(endpoint_id, now, |b| b.gate(now, probe_time))
            .await
        {
            Ok(gate) => gate,
            Err(e) => {
                // Nobody can take the probe now; try again in a moment.
                tracing::warn!(endpoint_id, error = %e, "cannot take the breaker's probe");
                Gate::WaitUntil(now + RETRY_PROBE_MS)
            }
        }
    }

    /// Until when an open breaker holds the endpoint's deliveries (its next probe), if it does.
    pub async fn held_until(&self, endpoint_id: &str) -> Option<Millis> {
        let b = self.breaker(endpoint_id).await;
        match b.phase {
            Phase::Closed => None,
            _ => b.next_probe_at,
        }
    }

    /// A probe that was not sent after all (another condition stopped it).
    pub(super) async fn release_probe(&self, endpoint_id: &str, now: Millis) {
        if let Err(e) = self
            .store
            .change_breaker(endpoint_id, now, Breaker::release_probe)
            .await
        {
            tracing::warn!(endpoint_id, error = %e, "cannot give the breaker's probe back; another is taken when it expires");
        }
    }

    /// Records a sent attempt's result (`last`: its status and HTTP code; `probe`: the gate
    /// gave it the probe) in the breaker and the success rate, and acts on what changed:
    /// openings are counted and reported, a recovery is reported, and an endpoint that has
    /// failed every attempt for `endpoints.disable_after` is disabled. On a cluster the change
    /// applies to the shared breaker, so one node (the one whose result made it) reports it.
    /// Reports go to the operator's webhook and to the failure alerts (docs/operations.md).
    pub(super) async fn after_sent(
        &self,
        ep: &Endpoint,
        last: (Status, Option<u16>),
        probe: bool,
        duration_ms: u64,
        now: Millis,
    ) {
        let status = last.0;
        // An endpoint deleted (or purged with its account) while the attempt was out: its
        // result changes nothing any more.
        if self.store.endpoint(&ep.id).is_none() {
            return;
        }
        let ok = status == Status::Delivered;
        lock(&self.unflushed).record(&ep.id, now, status, duration_ms);
        // A success to an endpoint that has not failed since its last success changes nothing:
        // no write (on a cluster, no query).
        if ok && !probe && self.breaker(&ep.id).await == Breaker::default() {
            return;
        }
        let disable_after = self.cfg.disable_after_ms;
        let (change, before, after) = match self
            .store
            .change_breaker(&ep.id, now, |b| {
                let before = *b;
                (b.record(ok, probe, now, disable_after), before, *b)
            })
            .await
        {
            Ok(changed) => changed,
            Err(e) => {
                tracing::warn!(endpoint_id = %ep.id, error = %e, "cannot store breaker state");
                return;
            }
        };
        // A recovery's mail says since when the endpoint failed: the breaker forgot it by then.
        let since = after.failing_since.or(before.failing_since);
        let alert = |kind| self.alert(ep, kind, now, since, Some(last));
        match change {
            Some(Change::Opened) => {
                self.metrics
                    .breaker_openings
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(endpoint_id = %ep.id, "endpoint failing: circuit breaker open; its deliveries wait for a probe");
                alert(AlertKind::Failing);
                self.operator_event(ep, "endpoint.failing", json!({}), now)
                    .await;
            }
            Some(Change::Recovered) => {
                tracing::info!(endpoint_id = %ep.id, "endpoint recovered: circuit breaker closed");
                alert(AlertKind::Recovered);
                self.operator_event(ep, "endpoint.recovered", json!({}), now)
                    .await;
            }
            Some(Change::Disable) => {
                self.disable(
                    ep,
                    now,
                    "failed every attempt for endpoints.disable_after",
                    last,
                )
                .await;
            }
            // A failed probe of an open breaker: the alerts decide whether the people hear
            // of it again (docs/operations.md, "Failure alerts").
            None if probe && !ok && after.phase == Phase::Open => alert(AlertKind::StillFailing),
            // The first success after failures the breaker never opened for (a resumed
            // endpoint disabled by a 410): a recovery, if a disabled mail is unanswered.
            None if ok && before.consecutive_failures > 0 => self.alert(
                ep,
                AlertKind::Recovered,
                now,
                before.failing_since,
                Some(last),
            ),
            None => {}
        }
    }

    /// Reports what happened to the endpoint to the failure alerts (never waits).
    fn alert(
        &self,
        ep: &Endpoint,
        kind: AlertKind,
        now: Millis,
        failing_since: Option<Millis>,
        last: Option<(Status, Option<u16>)>,
    ) {
        let Some(endpoint) = self.store.endpoint(&ep.id) else {
            return;
        };
        self.alerts.notify(crate::alerts::Trigger {
            kind,
            endpoint,
            at: now,
            failing_since,
            last_status: last.map(|l| l.0),
            http_status: last.and_then(|l| l.1),
        });
    }

    /// Disables an endpoint (after `410 Gone` or the disable window) and reports it (`last`:
    /// the status and HTTP code of the attempt that decided it).
    pub(super) async fn disable(
        &self,
        ep: &Endpoint,
        now: Millis,
        why: &str,
        last: (Status, Option<u16>),
    ) {
        let changed = self
            .store
            .change_endpoint(&ep.id, |current| {
                if current.state == EndpointState::Disabled {
                    return Ok::<_, crate::store::StoreError>(false);
                }
                current.state = EndpointState::Disabled;
                current.updated_at = now;
                Ok(true)
            })
            .await;
        match changed {
            Ok(Some((_, true))) => {}
            Ok(_) => return, // gone, or disabled already
            Err(e) => {
                tracing::error!(error = %e, "cannot disable endpoint");
                return;
            }
        }
        tracing::warn!(endpoint_id = %ep.id, reason = why, "endpoint disabled");
        let since = self.breaker(&ep.id).await.failing_since;
        self.alert(ep, AlertKind::Disabled, now, since, Some(last));
        self.operator_event(ep, "endpoint.disabled", json!({ "reason": why }), now)
            .await;
    }

    /// A delivery became `failed` (the dead-letter list).
    pub(super) async fn report_failed(&self, d: &Delivery, now: Millis) {
        if d.account_id == OPERATOR_ACCOUNT {
            return;
        }
        if self.store.account_endpoints(OPERATOR_ACCOUNT).is_empty() {
            return;
        }
        // An attempt sent before its account's purge and answered after it records nothing:
        // nor does the operator hear of it (the purge took the account's operator events).
        if let Ok(None) = self.store.delivery(&d.id).await {
            return;
        }
        let data = json!({
            "delivery_id": d.id,
            "event_id": d.event_id,
            "endpoint_id": d.endpoint_id,
            "account_id": d.account_id,
            "event_type": d.event_type,
            "last_status": d.last_status,
            "attempt_count": d.attempt_count,
        });
        self.emit("delivery.failed", data, now).await;
    }

    /// Purges the account (docs/operations.md): the store forgets everything of it, this
    /// node's per-endpoint figures forget its endpoints, and the operator hears
    /// `account.purged` with the counts (and nothing of the account's data).
    pub async fn purge_account(&self, account_id: &str) -> Result<Purged, StoreError> {
        let endpoints: Vec<String> = self
            .store
            .account_endpoints(account_id)
            .iter()
            .map(|e| e.id.clone())
            .collect();
        // Counts not yet added to the store would bring its endpoints' minutes back: they go
        // before and after (an attempt may end meanwhile; the flush skips deleted endpoints).
        lock(&self.unflushed).forget(&endpoints);
        let purged = self.store.purge_account(account_id).await?;
        lock(&self.unflushed).forget(&endpoints);
        tracing::info!(
            events = purged.events,
            deliveries = purged.deliveries,
            endpoints = purged.endpoints,
            "account purged"
        );
        let data = json!({
            "events": purged.events,
            "deliveries": purged.deliveries,
            "endpoints": purged.endpoints,
        });
        self.emit("account.purged", data, self.clock.now_ms()).await;
        Ok(purged)
    }

    async fn operator_event(&self, ep: &Endpoint, ty: &str, mut data: Value, now: Millis) {
        if ep.account_id == OPERATOR_ACCOUNT {
            return;
        }
        data["endpoint_id"] = json!(ep.id);
        data["account_id"] = json!(ep.account_id);
        data["url"] = json!(ep.url);
        self.emit(ty, data, now).await;
    }

    /// An operator event to the operator's endpoints (none: nothing is stored).
    async fn emit(&self, ty: &str, data: Value, now: Millis) {
        if self.store.account_endpoints(OPERATOR_ACCOUNT).is_empty() {
            return;
        }
        let payload: bytes::Bytes = json!({"type": ty, "at": rfc3339(now), "data": data})
            .to_string()
            .into();
        let fan_out = || {
            let targets = self.store.account_endpoints(OPERATOR_ACCOUNT);
            Ok::<_, StoreError>(vec![NewEvent::fan_out(
                OPERATOR_ACCOUNT.to_string(),
                ty.to_string(),
                payload.clone(),
                targets.iter(),
                now,
            )])
        };
        if let Err(e) = self.store.ingest(fan_out).await {
            tracing::error!(error = %e, event_type = ty, "cannot store an operator event");
        }
    }

    /// Every endpoint's minutes (and [`crate::store::NOT_SENT`]'s) from `from` on, every
    /// node's: the store's, with this node's not added yet. In no order.
    pub async fn log_minutes(
        &self,
        from: Millis,
    ) -> Result<Vec<(String, Minute)>, crate::store::StoreError> {
        let mut rows = self.store.minutes_since(from).await?;
        rows.extend(lock(&self.unflushed).since(from));
        Ok(rows)
    }

    /// Every endpoint's hours (and [`crate::store::NOT_SENT`]'s) from `from` on, every node's:
    /// the store's, with this node's minutes not added yet. In no order.
    pub async fn log_hours(
        &self,
        from: Millis,
    ) -> Result<Vec<(String, Minute)>, crate::store::StoreError> {
        let mut rows = self.store.hours_since(from).await?;
        rows.extend(lock(&self.unflushed).since(from));
        Ok(rows)
    }

    /// Each endpoint that exists with attempts in `rows` ([`Self::log_minutes`]): (id,
    /// successes, attempts), sorted by id.
    pub fn success_rates(&self, rows: &[(String, Minute)]) -> Vec<(String, u32, u32)> {
        let mut sums: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
        for (id, m) in rows {
            let s = sums.entry(id).or_default();
            s.0 += m.delivered();
            s.1 += m.attempts();
        }
        sums.into_iter()
            .filter(|(id, (_, all))| *all > 0 && self.store.endpoint(id).is_some())
            .map(|(id, (good, all))| (id.to_string(), good, all))
            .collect()
    }

    /// Endpoints whose circuit breaker is not closed: (id, breaker), sorted by id. An endpoint
    /// deleted while an attempt to it was under way may leave a breaker behind: not listed.
    pub async fn open_breakers(&self) -> Result<Vec<(String, Breaker)>, crate::store::StoreError> {
        let mut out = self.store.open_breakers().await?;
        out.retain(|(id, _)| self.store.endpoint(id).is_some());
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The endpoint's health: its breaker, the last hour's attempts, its last success and how
    /// many of its deliveries are pending.
    pub async fn health(&self, endpoint_id: &str) -> Result<Health, crate::store::StoreError> {
        let pending = self.store.endpoint_pending(endpoint_id).await?;
        // This node's memory knows its newest success until the store has kept it; the store
        // every node's, and what a restart forgot. Memory is read first: a flush between the
        // two reads leaves the success in the store by the time it is read.
        let unkept = lock(&self.unflushed).last_success(endpoint_id);
        let kept = self.store.last_success(endpoint_id).await?;
        let breaker = self.store.breaker(endpoint_id).await?;
        let now = self.clock.now_ms();
        let hour = now.div_euclid(Minute::MS) * Minute::MS - 59 * Minute::MS;
        let (good, all) = self
            .endpoint_minutes(endpoint_id, hour)
            .await?
            .iter()
            .fold((0, 0), |(g, a), m| (g + m.delivered(), a + m.attempts()));
        Ok(Health {
            breaker,
            last_hour: (all > 0).then_some((good, all)),
            last_success_at: unkept.max(kept),
            pending,
        })
    }
}
