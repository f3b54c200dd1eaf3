//! How endpoints are doing, for the portal and the console: an endpoint's last hour minute by
//! minute (`GET /v1/endpoints/{id}/stats`) and failures grouped as incidents
//! (`GET /v1/incidents`).

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::StatusCode;
use serde_json::{json, Value};

use super::error::ApiError;
use super::{json, validate, AppState, Resp, Scope};
use crate::clock::{rfc3339, Millis};
use crate::model::{Delivery, Status};
use crate::store::prelude::*;
use crate::store::DeliveryFilter;
use crate::store::Minute;

/// `GET /v1/endpoints/{id}/stats?window=1h|24h`: the endpoint's health (breaker, success rate,
/// last success, pending) and its last hour by minute, or its last day by quarter hour: one
/// entry per bucket with attempts, counts by status, mean and max latency. The counts are the
/// store's, so every node and a restarted one show the same (docs/api.md, "Endpoints").
pub async fn endpoint_stats(
    state: &Arc<AppState>,
    scope: &Scope,
    id: &str,
    query: Option<&str>,
) -> Result<Resp, ApiError> {
    let mut window = "1h".to_string();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "window" if v == "1h" || v == "24h" || v == "7d" => window = v.into_owned(),
            "window" => return Err(ApiError::field("window", "window must be 1h, 24h or 7d")),
            other => {
                return Err(ApiError::field(
                    other,
                    format!("unknown query parameter {other:?}"),
                ))
            }
        }
    }
    let ep = super::endpoints::find(state, scope, id)?;
    let (bucket, buckets): (Millis, Millis) = match window.as_str() {
        "7d" => (2 * Minute::HOUR_MS, 84),
        "24h" => (15 * Minute::MS, 96),
        _ => (Minute::MS, 60),
    };
    let now = state.clock.now_ms();
    let from = now.div_euclid(bucket) * bucket - (buckets - 1) * bucket;
    let rows = match window.as_str() {
        "7d" => state.engine.endpoint_hours(&ep.id, from).await?,
        _ => state.engine.endpoint_minutes(&ep.id, from).await?,
    };
    let mut sums: Vec<Minute> = Vec::new();
    let mut whole = Minute::default();
    for m in rows {
        whole.add(&m);
        let at = m.at.div_euclid(bucket) * bucket;
        match sums.last_mut() {
            Some(last) if last.at == at => last.add(&m),
            _ => sums.push(Minute { at, ..m }),
        }
    }
    let minutes: Vec<Value> = sums
        .iter()
        .map(|m| {
            json!({
                "at": rfc3339(m.at),
                "attempts": m.named_counts(),
                "latency_ms": latency(m),
            })
        })
        .collect();
    let mut v = super::endpoints::health_view(&state.engine.health(&ep.id).await?);
    v["endpoint_id"] = json!(ep.id);
    v["window"] = json!(window);
    v["bucket_minutes"] = json!(bucket / Minute::MS);
    v["latency_ms"] = latency(&whole);
    v["minutes"] = json!(minutes);
    Ok(json(StatusCode::OK, &v))
}

/// A bucket's (a window's) latency: the mean of its attempts' durations and the max, and the
/// 50th and 95th percentiles of its sent attempts' from the stored buckets (docs/api.md).
fn latency(m: &Minute) -> Value {
    let n = u64::from(m.attempts().max(1));
    json!({
        "mean": m.latency_sum_ms / n,
        "max": m.latency_max_ms,
        "p50": m.latency_quantile(0.5),
        "p95": m.latency_quantile(0.95),
    })
}

/// Deliveries one incidents request looks at most (newest first).
const INCIDENT_SCAN: usize = 5_000;
/// Example deliveries shown per incident.
const EXAMPLES: usize = 5;

/// Statuses that are failures of a sent attempt (or a refused address), as incidents show them.
fn is_failure(s: Status) -> bool {
    matches!(
        s,
        Status::HttpError
            | Status::Timeout
            | Status::ConnectionError
            | Status::TlsError
            | Status::Blocked
    )
}

/// `GET /v1/incidents?account_id=&since=`: deliveries whose last attempt failed, grouped by
/// endpoint and by status and HTTP code, largest first: how many, since when, until when, how
/// many are still pending (retrying) and a few example deliveries; and the endpoints whose
/// circuit breaker holds their deliveries now (`held`), with how many wait. `since` defaults to
/// 24 h ago; at most the newest 5,000 deliveries are looked at (`"complete": false` then, and
/// `scanned` says how many were).
pub async fn incidents(
    state: &Arc<AppState>,
    scope: &Scope,
    query: Option<&str>,
) -> Result<Resp, ApiError> {
    let mut filter = DeliveryFilter::default();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let v = v.into_owned();
        if v.is_empty() {
            continue;
        }
        match k.as_ref() {
            "account_id" => {
                validate::account_id_lookup("account_id", &v)?;
                filter.account_id = Some(v);
            }
            "since" => filter.since = Some(super::deliveries::time_param("since", &v)?),
            other => {
                return Err(ApiError::field(
                    other,
                    format!("unknown query parameter {other:?}"),
                ))
            }
        }
    }
    scope.narrow(&mut filter.account_id)?;
    let now = state.clock.now_ms();
    let since = *filter.since.get_or_insert(now - 24 * 3600 * 1000);
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let complete = loop {
        let room = INCIDENT_SCAN - seen.len();
        let (items, next) = state
            .store
            .list_deliveries(filter.clone(), room.min(500), cursor)
            .await?;
        seen.extend(items);
        match next {
            Some(c) if seen.len() < INCIDENT_SCAN => cursor = Some(c),
            Some(_) => break false,
            None => break true,
        }
    };
    let items = group(&seen);
    // Endpoints whose breaker holds their deliveries now, whatever the scan saw: with them, "no
    // failures" would not be true.
    let mut held = Vec::new();
    for (id, b) in state.engine.open_breakers().await? {
        let Some(ep) = state.store.endpoint(&id) else {
            continue;
        };
        if filter
            .account_id
            .as_ref()
            .is_some_and(|a| *a != ep.account_id)
        {
            continue;
        }
        held.push(json!({
            "endpoint_id": id,
            "account_id": ep.account_id,
            "url": ep.url,
            "breaker": {
                "state": b.phase,
                "consecutive_failures": b.consecutive_failures,
                "next_probe_at": b.next_probe_at.map(rfc3339),
            },
            "pending": state.store.endpoint_pending(&id).await?,
        }));
    }
    Ok(json(
        StatusCode::OK,
        &json!({"items": items, "held": held, "since": rfc3339(since), "complete": complete,
                "scanned": seen.len(), "next_cursor": null}),
    ))
}

/// One incident: failures of one endpoint with one status and code.
struct Incident<'a> {
    count: usize,
    pending: usize,
    first: Millis,
    last: Millis,
    examples: Vec<&'a str>,
}

/// Groups failed deliveries (newest first) into incidents, largest first.
fn group(deliveries: &[Delivery]) -> Vec<Value> {
    let mut groups: BTreeMap<(Option<&str>, &str, Option<u16>), Incident<'_>> = BTreeMap::new();
    for d in deliveries {
        let Some(status) = d.last_status.filter(|s| is_failure(*s)) else {
            continue;
        };
        let key = (
            d.endpoint_id.as_deref(),
            status.as_str(),
            d.last_http_status,
        );
        let g = groups.entry(key).or_insert(Incident {
            count: 0,
            pending: 0,
            first: d.created_at,
            last: d.created_at,
            examples: Vec::new(),
        });
        g.count += 1;
        g.pending += usize::from(d.state == crate::model::DeliveryState::Pending);
        g.first = g.first.min(d.created_at);
        g.last = g.last.max(d.created_at);
        if g.examples.len() < EXAMPLES {
            g.examples.push(&d.id);
        }
    }
    let mut out: Vec<_> = groups.into_iter().collect();
    out.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(b.1.last.cmp(&a.1.last)));
    out.into_iter()
        .map(|((endpoint, status, code), g)| {
            json!({
                "endpoint_id": endpoint,
                "status": status,
                "http_status": code,
                "deliveries": g.count,
                "pending": g.pending,
                "first_at": rfc3339(g.first),
                "last_at": rfc3339(g.last),
                "examples": g.examples,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeliveryState;

    fn d(id: &str, ep: &str, status: Status, code: Option<u16>, at: Millis) -> Delivery {
        Delivery {
            id: id.into(),
            event_id: "evt".into(),
            endpoint_id: Some(ep.into()),
            account_id: "a".into(),
            event_type: "t".into(),
            state: DeliveryState::Failed,
            last_status: Some(status),
            last_http_status: code,
            attempt_count: 1,
            next_attempt_at: None,
            created_at: at,
            manual: false,
            queued: false,
        }
    }

    #[test]
    fn failures_group_by_endpoint_status_and_code() {
        let all = [
            d("d1", "ep_a", Status::HttpError, Some(500), 3),
            d("d2", "ep_a", Status::HttpError, Some(500), 2),
            d("d3", "ep_a", Status::HttpError, Some(404), 1),
            d("d4", "ep_b", Status::Timeout, None, 4),
            d("d5", "ep_b", Status::Delivered, Some(200), 5),
        ];
        let g = group(&all);
        assert_eq!(g.len(), 3, "{g:?}");
        assert_eq!(g[0]["endpoint_id"], "ep_a");
        assert_eq!(
            (g[0]["http_status"].clone(), g[0]["deliveries"].clone()),
            (json!(500), json!(2))
        );
        assert_eq!(g[0]["examples"], json!(["d1", "d2"]));
        assert_eq!(g[0]["first_at"], rfc3339(2));
        assert!(g.iter().all(|i| i["status"] != "delivered"));
    }
}
