//! `/healthz` (no token) and `/v1/status` (admin).

use std::collections::HashSet;
use std::sync::Arc;

use hyper::StatusCode;
use serde_json::{json, Map, Value};

use bytes::Bytes;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::Response;

use super::{json, AppState, Resp};
use crate::clock::{rfc3339, Millis};
use crate::metrics::Gauges;
use crate::model::{DeliveryState, EndpointState};
use crate::policy::breaker::Breaker;
use crate::store::prelude::*;
use crate::store::Minute;

pub async fn healthz(state: &Arc<AppState>) -> Resp {
    if state.store.healthy().await {
        json(StatusCode::OK, &json!({"status": "ok"}))
    } else {
        json(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "unavailable", "reason": "storage is not usable"}),
        )
    }
}

pub async fn status(state: &Arc<AppState>) -> Result<Resp, super::ApiError> {
    let now = state.clock.now_ms();
    let stats = state.store.stats().await?;
    let (due, oldest_pending) = state.store.due_summary(now).await?;
    let storage_bytes = state.store.size_on_disk().await;
    let nodes = state.store.nodes().await?;
    let open_breakers = state.engine.open_breakers().await?;
    let (due_now, held) = due_now(state, now, &open_breakers).await?;
    let queue: Map<String, Value> = DeliveryState::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), json!(stats.get(*s).max(0))))
        .collect();
    // The log's attempts, every node's: the last hour by minute, the last 24 clock hours by
    // hour (requests under their endpoints, decisions that sent nothing under one row).
    let hour_from = now.div_euclid(Minute::MS) * Minute::MS - 59 * Minute::MS;
    let day_from = now.div_euclid(Minute::HOUR_MS) * Minute::HOUR_MS - 23 * Minute::HOUR_MS;
    let last_hour = state.engine.log_minutes(hour_from).await?;
    let last_day = state.engine.log_hours(day_from).await?;
    let counts = |rows: &[(String, Minute)]| -> Map<String, Value> {
        let mut sum = Minute::default();
        for (_, m) in rows {
            sum.add(m);
        }
        sum.named_counts()
            .into_iter()
            .map(|(s, n)| (s.to_string(), json!(n)))
            .collect()
    };
    let mut by_minute: std::collections::BTreeMap<i64, Minute> = Default::default();
    for (_, m) in &last_hour {
        by_minute.entry(m.at).or_default().add(m);
    }
    let mut v = json!({
        "version": crate::VERSION,
        "uptime_seconds": state.started.elapsed().as_secs(),
        "queue": queue,
        "due": due,
        "due_now": due_now,
        "held": held,
        "in_flight": state.engine.in_flight(),
        "quota_check_failures": state.metrics.quota_check_failures.load(std::sync::atomic::Ordering::Relaxed),
        "attempts": {"last_hour": counts(&last_hour), "last_day": counts(&last_day)},
        "storage_bytes": storage_bytes,
        "dead_letters": stats.get(DeliveryState::Failed).max(0),
        "endpoints_last_hour": state.engine.success_rates(&last_hour).into_iter().map(|(id, good, all)| json!({
            "endpoint_id": id,
            "attempts": all,
            "success_rate": f64::from(good) / f64::from(all),
        })).collect::<Vec<_>>(),
        "oldest_pending_at": oldest_pending.map(rfc3339),
        "open_breakers": open_breakers.into_iter().map(|(id, b)| json!({
            "endpoint_id": id,
            "state": b.phase,
            "consecutive_failures": b.consecutive_failures,
            "next_probe_at": b.next_probe_at.map(rfc3339),
        })).collect::<Vec<_>>(),
        "attempts_by_minute": by_minute.into_iter().map(|(at, m)| json!({
            "at": rfc3339(at),
            "attempts": m.named_counts(),
        })).collect::<Vec<_>>(),
    });
    if let Some((node, nodes)) = nodes {
        let nodes: Vec<Value> = nodes
            .iter()
            .map(|n| {
                json!({
                    "id": n.id,
                    "name": n.name,
                    "started_at": rfc3339(n.started_at),
                    "seen_at": rfc3339(n.seen_at),
                    "leases": n.leases,
                })
            })
            .collect();
        v["cluster"] = json!({"node": node, "nodes": nodes});
    }
    Ok(json(StatusCode::OK, &v))
}

/// What is due now and would go, and what waits because something holds its endpoint
/// (docs/api.md, "Health and status"): an open circuit breaker (every waiting delivery of the
/// endpoint, until its probe), a pause or a disabling (every waiting one), the rate limit (every
/// waiting one not behind another, while this node last found no token), an earlier delivery
/// of the same ordering key (the due ones behind it). The first that applies counts a delivery.
async fn due_now(
    state: &AppState,
    now: Millis,
    open_breakers: &[(String, Breaker)],
) -> Result<(u64, Value), super::ApiError> {
    let breaker_holds: HashSet<&str> = open_breakers
        .iter()
        .filter(|(_, b)| b.next_probe_at.is_some_and(|t| t > now))
        .map(|(id, _)| id.as_str())
        .collect();
    let (mut due_now, mut breaker, mut paused, mut rate_limit, mut ordering) = (0, 0, 0, 0, 0);
    for w in state.store.waiting_by_endpoint(now).await? {
        let id = w.endpoint_id.as_deref().unwrap_or_default();
        let endpoint = state.store.endpoint(id);
        if breaker_holds.contains(id) {
            breaker += w.waiting;
        } else if endpoint.is_some_and(|e| e.state != EndpointState::Active) {
            paused += w.waiting;
        } else {
            ordering += w.behind;
            if state.engine.rate_held_until(id, now).is_some() {
                // What the limit gave back waits for its token, no longer due.
                rate_limit += w.waiting - w.behind;
            } else {
                due_now += w.due;
            }
        }
    }
    let held = json!({"breaker": breaker, "paused": paused, "rate_limit": rate_limit,
                      "ordering": ordering});
    Ok((due_now, held))
}

/// `GET /metrics`: the Prometheus text format (no token, like `/healthz`: it holds counts, never
/// ids or secrets).
pub async fn metrics(state: &Arc<AppState>) -> Resp {
    let stats = state.store.stats().await.unwrap_or_default();
    let now = state.clock.now_ms();
    let (due, _) = state.store.due_summary(now).await.unwrap_or_default();
    let gauges = Gauges {
        deliveries_by_state: DeliveryState::ALL
            .iter()
            .map(|s| (s.as_str(), stats.get(*s).max(0)))
            .collect(),
        due,
        in_flight: state.engine.in_flight(),
        storage_bytes: state.store.size_on_disk().await,
    };
    let mut resp = Response::new(super::full(Bytes::from(state.metrics.render(&gauges))));
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}
