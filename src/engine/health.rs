//! Endpoint health: the circuit breaker gate and its bookkeeping, auto-disable, per-endpoint
//! success rates, and the operator events that report them (SPEC §7).
//!
//! Operator events are ordinary events of the reserved account [`OPERATOR_ACCOUNT`], delivered
//! to `operator.webhook_url` by this same engine, signed with `operator.secret` and logged like
//! any delivery. Nothing that happens to the operator's own endpoint raises an operator event
//! (it would report on itself in a loop).

use serde_json::{json, Value};

use super::{lock, Engine};
use crate::clock::{rfc3339, Millis};
use crate::model::{Delivery, Endpoint, EndpointState, Status};
use crate::policy::breaker::{Breaker, Change, Gate};
use crate::store::{lane_of, NewEvent};

/// The account operator events belong to. Account ids starting with `_` are reserved.
pub const OPERATOR_ACCOUNT: &str = "_operator";

/// A breaker and whether its probe is out.
#[derive(Default)]
pub(super) struct Slot {
    breaker: Breaker,
    probe_running: bool,
}

impl Engine {
    /// The endpoint's breaker slot. One box reads a breaker it has not seen from its store
    /// here; a cluster node reads it first ([`load_breaker`](Self::load_breaker)).
    fn with_slot<T>(&self, endpoint_id: &str, f: impl FnOnce(&mut Slot) -> T) -> T {
        let mut slots = lock(&self.breakers);
        let slot = slots
            .entry(endpoint_id.to_string())
            .or_insert_with(|| Slot {
                breaker: self
                    .store
                    .sled()
                    .and_then(|s| s.breaker(endpoint_id).ok().flatten())
                    .unwrap_or_default(),
                probe_running: false,
            });
        f(slot)
    }

    /// Reads the endpoint's stored breaker into its slot unless the slot exists already.
    pub(super) async fn load_breaker(&self, endpoint_id: &str) {
        if self.store.sled().is_some() || lock(&self.breakers).contains_key(endpoint_id) {
            return;
        }
        let stored = match self.store.breaker(endpoint_id).await {
            Ok(b) => b.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(endpoint_id, error = %e, "cannot read breaker state");
                return;
            }
        };
        lock(&self.breakers)
            .entry(endpoint_id.to_string())
            .or_insert(Slot {
                breaker: stored,
                probe_running: false,
            });
    }

    /// Asks the endpoint's breaker whether an attempt due now may go out.
    pub(super) fn breaker_gate(&self, endpoint_id: &str, now: Millis) -> Gate {
        self.with_slot(endpoint_id, |s| {
            let gate = s.breaker.gate(now, s.probe_running, self.cfg.probe_time_ms);
            if gate == Gate::Probe {
                s.probe_running = true;
            }
            gate
        })
    }

    /// Until when an open breaker holds the endpoint's deliveries (its next probe), if it does.
    pub fn held_until(&self, endpoint_id: &str) -> Option<Millis> {
        self.with_slot(endpoint_id, |s| match s.breaker.phase {
            crate::policy::breaker::Phase::Closed => None,
            _ => s.breaker.next_probe_at,
        })
    }

    /// A probe that was not sent after all (another condition stopped it).
    pub(super) fn release_probe(&self, endpoint_id: &str) {
        self.with_slot(endpoint_id, |s| s.probe_running = false);
    }

    /// Records a sent attempt's result in the breaker and the success rate, and acts on what
    /// changed: openings are counted and reported, a recovery is reported, and an endpoint that
    /// has failed every attempt for `endpoints.disable_after` is disabled.
    pub(super) async fn after_sent(
        &self,
        ep: &Endpoint,
        status: Status,
        duration_ms: u64,
        now: Millis,
    ) {
        let ok = status == Status::Delivered;
        lock(&self.rates).record(&ep.id, now, status, duration_ms);
        let (change, was_probe, changed) = self.with_slot(&ep.id, |s| {
            let was_probe = std::mem::take(&mut s.probe_running);
            let before = s.breaker.clone();
            let change = s.breaker.record(ok, now, self.cfg.disable_after_ms);
            // Most attempts leave a closed breaker closed: nothing to write then.
            let changed = (s.breaker != before).then(|| s.breaker.clone());
            (change, was_probe, changed)
        });
        if let Some(b) = changed {
            if let Err(e) = self.store.put_breaker(&ep.id, &b).await {
                tracing::warn!(endpoint_id = %ep.id, error = %e, "cannot store breaker state");
            }
        }
        if let (true, Some(store)) = (was_probe, self.store.sled()) {
            // The probe decided: its lane's deliveries go, or wait for the next probe (the gate
            // holds them again).
            store.due().release(lane_of(Some(&ep.id)));
        }
        match change {
            Some(Change::Opened) => {
                self.metrics
                    .breaker_openings
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(endpoint_id = %ep.id, "endpoint failing: circuit breaker open; its deliveries wait for a probe");
                self.operator_event(ep, "endpoint.failing", json!({}), now)
                    .await;
            }
            Some(Change::Recovered) => {
                tracing::info!(endpoint_id = %ep.id, "endpoint recovered: circuit breaker closed");
                self.operator_event(ep, "endpoint.recovered", json!({}), now)
                    .await;
            }
            Some(Change::Disable) => {
                self.disable(ep, now, "failed every attempt for endpoints.disable_after")
                    .await;
            }
            None => {}
        }
    }

    /// Disables an endpoint (after `410 Gone` or the disable window) and reports it.
    pub(super) async fn disable(&self, ep: &Endpoint, now: Millis, why: &str) {
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
        self.operator_event(ep, "endpoint.disabled", json!({ "reason": why }), now)
            .await;
    }

    /// A delivery became `failed` (the dead-letter list).
    pub(super) async fn report_failed(&self, d: &Delivery, now: Millis) {
        if d.account_id == OPERATOR_ACCOUNT {
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
        let targets = self.store.account_endpoints(OPERATOR_ACCOUNT);
        self.emit(&targets, "delivery.failed", data, now).await;
    }

    async fn operator_event(&self, ep: &Endpoint, ty: &str, mut data: Value, now: Millis) {
        if ep.account_id == OPERATOR_ACCOUNT {
            return;
        }
        data["endpoint_id"] = json!(ep.id);
        data["account_id"] = json!(ep.account_id);
        data["url"] = json!(ep.url);
        let targets = self.store.account_endpoints(OPERATOR_ACCOUNT);
        self.emit(&targets, ty, data, now).await;
    }

    async fn emit(&self, targets: &[std::sync::Arc<Endpoint>], ty: &str, data: Value, now: Millis) {
        if targets.is_empty() {
            return;
        }
        let payload = json!({"type": ty, "at": rfc3339(now), "data": data}).to_string();
        let event = NewEvent::fan_out(
            OPERATOR_ACCOUNT.to_string(),
            ty.to_string(),
            payload.into(),
            targets.iter(),
            now,
        );
        if let Err(e) = self.store.ingest(vec![event]).await {
            tracing::error!(error = %e, event_type = ty, "cannot store an operator event");
        }
    }

    /// Every endpoint with sent attempts in the last hour: (id, successes, attempts).
    pub fn success_rates(&self) -> Vec<(String, u32, u32)> {
        let now = self.clock.now_ms();
        let rates = lock(&self.rates);
        let mut out: Vec<_> = rates
            .endpoints()
            .filter_map(|id| rates.rate(id, now).map(|(g, a)| (id.clone(), g, a)))
            .collect();
        out.sort();
        out
    }

    /// The endpoint's last hour, minute by minute.
    pub fn minutes(&self, endpoint_id: &str) -> Vec<super::rates::Minute> {
        lock(&self.rates).minutes(endpoint_id, self.clock.now_ms())
    }

    /// Endpoints whose circuit breaker is not closed: (id, breaker).
    pub fn open_breakers(&self) -> Vec<(String, Breaker)> {
        let slots = lock(&self.breakers);
        let mut out: Vec<_> = slots
            .iter()
            .filter(|(_, s)| s.breaker.phase != crate::policy::breaker::Phase::Closed)
            .map(|(id, s)| (id.clone(), s.breaker.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The breaker as the endpoint view shows it, and the last hour's success rate.
    /// With how many of its deliveries are pending (read from the store, as is the stored
    /// breaker of an endpoint this node has not tracked yet).
    pub async fn health_view(&self, endpoint_id: &str) -> Result<Value, crate::store::StoreError> {
        let pending = self.store.endpoint_pending(endpoint_id).await?;
        self.load_breaker(endpoint_id).await;
        let now = self.clock.now_ms();
        let b = self.with_slot(endpoint_id, |s| s.breaker.clone());
        let rate = lock(&self.rates).rate(endpoint_id, now);
        Ok(json!({
            "breaker": {
                "state": b.phase,
                "consecutive_failures": b.consecutive_failures,
                "next_probe_at": b.next_probe_at.map(rfc3339),
            },
            "success_rate_1h": rate.map(|(good, all)| f64::from(good) / f64::from(all)),
            "attempts_1h": rate.map_or(0, |(_, all)| all),
            "last_success_at": lock(&self.rates).last_success(endpoint_id).map(rfc3339),
            "pending": pending,
        }))
    }
}
