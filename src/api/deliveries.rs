//! The delivery log: list with filters and a cursor, one delivery with every attempt, one event
//! with its payload and deliveries, and the manual retry.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::body::discard_body;
use super::error::ApiError;
use super::{json, validate, AppState, Resp, Scope};
use crate::clock::{parse_rfc3339, rfc3339};
use crate::engine::RetryError;
use crate::ids::{self, DELIVERY, EVENT};
use crate::model::{Delivery, DeliveryState, EndpointState, Status};
use crate::store::prelude::*;
use crate::store::DeliveryFilter;

const DEFAULT_LIMIT: usize = 50;
const MAX_LIMIT: usize = 500;
/// The longest search (`q`), in bytes.
const MAX_QUERY: usize = 200;

pub async fn list(
    state: &Arc<AppState>,
    scope: &Scope,
    query: Option<&str>,
) -> Result<Resp, ApiError> {
    let mut filter = DeliveryFilter::default();
    let mut limit = DEFAULT_LIMIT;
    let mut cursor = None;
    let mut search = None;
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let v = v.into_owned();
        if v.is_empty() {
            continue;
        }
        match k.as_ref() {
            "q" => {
                let q = v.trim();
                if q.len() > MAX_QUERY {
                    return Err(ApiError::field(
                        "q",
                        format!("q is {} bytes; a search is at most {MAX_QUERY}", q.len()),
                    ));
                }
                search = Some(q.to_string()).filter(|q| !q.is_empty());
            }
            "account_id" => {
                validate::account_id_lookup("account_id", &v)?;
                filter.account_id = Some(v)
            }
            "endpoint_id" => filter.endpoint_id = Some(v),
            "event_type" => filter.event_type = Some(v),
            "state" => {
                filter.state = Some(DeliveryState::parse(&v).ok_or_else(|| {
                    ApiError::field(
                        "state",
                        "state must be one of pending, delivered, failed, skipped",
                    )
                })?)
            }
            "status" => {
                filter.status = Some(Status::parse(&v).ok_or_else(|| {
                    ApiError::field("status", format!("{v:?} is not an attempt status"))
                })?)
            }
            "since" => filter.since = Some(time_param("since", &v)?),
            "until" => filter.until = Some(time_param("until", &v)?),
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::field("limit", format!("limit must be 1 to {MAX_LIMIT}"))
                    })?
            }
            "cursor" => {
                if !ids::is_valid(DELIVERY, &v) {
                    return Err(ApiError::field("cursor", "cursor is not one this API gave"));
                }
                cursor = Some(v)
            }
            other => {
                return Err(ApiError::field(
                    other,
                    format!("unknown query parameter {other:?}"),
                ))
            }
        }
    }
    // A portal session sees its own account's log only.
    scope.narrow(&mut filter.account_id)?;
    let (items, next, limited) = match search {
        Some(q) if ids::is_valid(EVENT, &q) || ids::is_valid(DELIVERY, &q) => {
            let (items, next) = by_id(state, &filter, &q, limit, cursor.as_deref()).await?;
            (items, next, false)
        }
        Some(q) => {
            filter.text = Some(q);
            let (items, next) = state.store.list_deliveries(filter, limit, cursor).await?;
            // A short page with a cursor stopped at the events a search looks at.
            let limited = items.len() < limit && next.is_some();
            (items, next, limited)
        }
        None => {
            let (items, next) = state.store.list_deliveries(filter, limit, cursor).await?;
            (items, next, false)
        }
    };
    let items = views(state, &items).await;
    Ok(json(
        StatusCode::OK,
        &json!({"items": items, "next_cursor": next, "search_limited": limited}),
    ))
}

/// A search for an event's or a delivery's id (`q`): its deliveries that pass the other
/// filters, newest first, a page of `limit` below `cursor`.
async fn by_id(
    state: &AppState,
    filter: &DeliveryFilter,
    id: &str,
    limit: usize,
    cursor: Option<&str>,
) -> Result<(Vec<Delivery>, Option<String>), ApiError> {
    let mut found = if ids::is_valid(EVENT, id) {
        state
            .store
            .event_with_deliveries(id)
            .await?
            .map(|(_, _, deliveries)| deliveries)
            .unwrap_or_default()
    } else {
        state.store.delivery(id).await?.into_iter().collect()
    };
    let below = cursor.and_then(|c| ids::parse(DELIVERY, c));
    found.retain(|d| {
        let at = ids::parse(DELIVERY, &d.id).unwrap_or(0);
        below.is_none_or(|c| at < c) && passes(filter, d, ids::ulid_ms(at))
    });
    found.sort_by(|a, b| b.id.cmp(&a.id));
    let next = (found.len() > limit).then(|| found[limit - 1].id.clone());
    found.truncate(limit);
    Ok((found, next))
}

/// Whether the delivery, of an event received at `at`, passes the filter's fields.
fn passes(f: &DeliveryFilter, d: &Delivery, at: i64) -> bool {
    f.account_id.as_ref().is_none_or(|a| *a == d.account_id)
        && f.endpoint_id
            .as_ref()
            .is_none_or(|e| d.endpoint_id.as_ref() == Some(e))
        && f.event_type.as_ref().is_none_or(|t| *t == d.event_type)
        && f.state.is_none_or(|s| s == d.state)
        && f.status.is_none_or(|s| d.last_status == Some(s))
        && f.since.is_none_or(|s| at >= s)
        && f.until.is_none_or(|u| at < u)
}

/// The delivery view; a pending delivery that waits for its endpoint's circuit breaker shows
/// the probe time as its next attempt.
/// The delivery object (docs/api.md), with `waiting`: why a pending delivery waits, and until
/// when. A delivery held by its endpoint's circuit breaker shows the next probe as its next
/// attempt.
async fn view(state: &AppState, d: &Delivery) -> Value {
    if d.state != DeliveryState::Pending {
        let mut v = d.view();
        v["waiting"] = Value::Null;
        return v;
    }
    let now = state.clock.now_ms();
    let endpoint = d
        .endpoint_id
        .as_deref()
        .and_then(|id| state.store.endpoint(id));
    let held = match &d.endpoint_id {
        Some(ep) => state.engine.held_until(ep).await,
        None => None,
    };
    let due = d.next_attempt_at.unwrap_or(d.created_at);
    // The breaker first: while it holds the endpoint, a delivery the scheduler is looking at
    // is not being sent, only put back until the probe.
    let (reason, until) = if let Some(h) = held.filter(|h| *h > now && *h >= due) {
        ("breaker", Some(h))
    } else if state.engine.is_in_flight(&d.id) {
        ("in_flight", None)
    } else if let Some(s) = endpoint
        .as_ref()
        .map(|e| e.state)
        .filter(|s| *s != EndpointState::Active)
    {
        (
            if s == EndpointState::Paused {
                "paused"
            } else {
                "disabled"
            },
            Some(due.max(now)),
        )
    } else if let Some(t) = d
        .endpoint_id
        .as_deref()
        .and_then(|ep| state.engine.rate_held_until(ep, now))
        .filter(|&t| due <= t)
    {
        ("rate_limit", Some(t))
    } else if due > now && d.attempt_count > 0 {
        ("retry", Some(due))
    } else if due > now {
        ("scheduled", Some(due))
    } else {
        ("due", None)
    };
    let mut d = d.clone();
    if let Some(h) = held.filter(|h| *h > due) {
        d.next_attempt_at = Some(h);
    }
    let mut v = d.view();
    v["waiting"] = json!({"reason": reason, "until": until.map(rfc3339)});
    if reason == "rate_limit" {
        if let Some(limit) = endpoint.as_ref().and_then(|e| e.rate_limit) {
            v["waiting"]["per_second"] = json!(limit.per_second);
        }
    }
    v
}

async fn views(state: &AppState, deliveries: &[Delivery]) -> Vec<Value> {
    let mut out = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        out.push(view(state, d).await);
    }
    out
}

pub(super) fn time_param(field: &str, v: &str) -> Result<i64, ApiError> {
    parse_rfc3339(v).ok_or_else(|| {
        ApiError::field(
            field,
            format!("{field} must be an RFC 3339 time such as 2026-01-31T12:00:00Z"),
        )
    })
}

pub async fn get(state: &Arc<AppState>, scope: &Scope, id: &str) -> Result<Resp, ApiError> {
    let not_found = || ApiError::not_found("delivery");
    if !ids::is_valid(DELIVERY, id) {
        return Err(not_found());
    }
    let d = state.store.delivery(id).await?.ok_or_else(not_found)?;
    scope.check(&d.account_id, "delivery")?;
    let ordering = state.store.ordering_of(&d).await?;
    let attempts = state.store.attempts(id).await?;
    let attempts: Vec<Value> = attempts.iter().map(|a| a.view()).collect();
    let mut v = view(state, &d).await;
    let (key, waiting_for) = ordering.unzip();
    v["ordering_key"] = json!(key);
    v["waiting_for"] = json!(waiting_for.flatten());
    v["attempts"] = Value::Array(attempts);
    Ok(json(StatusCode::OK, &v))
}

pub async fn retry(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    discard_body(req).await;
    if !ids::is_valid(DELIVERY, id) {
        return Err(ApiError::not_found("delivery"));
    }
    if scope.account().is_some() {
        let d = state
            .store
            .delivery(id)
            .await?
            .ok_or_else(|| ApiError::not_found("delivery"))?;
        scope.check(&d.account_id, "delivery")?;
    }
    match state.engine.retry_now(id).await {
        Ok(d) => Ok(json(StatusCode::ACCEPTED, &view(state, &d).await)),
        Err(RetryError::NotFound) => Err(ApiError::not_found("delivery")),
        Err(RetryError::InFlight) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "delivery_in_flight",
            "an attempt of this delivery is running now; retry once it has finished",
        )),
        Err(RetryError::Store(e)) => Err(e.into()),
    }
}

/// The event view: its payload is shown byte for byte as ingested.
#[derive(Serialize)]
struct EventView<'a> {
    id: &'a str,
    account_id: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    received_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<&'a str>,
    payload: Box<RawValue>,
    deliveries: Vec<Value>,
}

pub async fn get_event(state: &Arc<AppState>, scope: &Scope, id: &str) -> Result<Resp, ApiError> {
    let not_found = || ApiError::not_found("event");
    if !ids::is_valid(EVENT, id) {
        return Err(not_found());
    }
    let (meta, payload, deliveries) = state
        .store
        .event_with_deliveries(id)
        .await?
        .ok_or_else(not_found)?;
    scope.check(&meta.account_id, "event")?;
    let payload = String::from_utf8(payload.to_vec())
        .ok()
        .and_then(|s| RawValue::from_string(s).ok())
        .ok_or_else(|| {
            ApiError::from(crate::store::StoreError::Corrupt(format!(
                "payload of {id}"
            )))
        })?;
    let deliveries = views(state, &deliveries).await;
    let view = EventView {
        id: &meta.id,
        account_id: &meta.account_id,
        event_type: &meta.event_type,
        received_at: rfc3339(meta.received_at),
        idempotency_key: meta.idempotency_key.as_deref(),
        payload,
        deliveries,
    };
    Ok(json(StatusCode::OK, &view))
}
