//! Replay and recover (SPEC §8). Retry (in `deliveries`) attempts the same delivery again with
//! the same `webhook-id`; replay ingests an event again as a new event (new id, new
//! `webhook-id`); recover retries every `failed` or `skipped` delivery of an endpoint since a
//! time. Replay and recover take `"dry_run": true` to answer how many deliveries they would
//! create or retry without doing it.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body;
use super::error::ApiError;
use super::{json, AppState, Resp};
use crate::clock::parse_rfc3339;
use crate::engine::RetryError;
use crate::ids::{self, EVENT};
use crate::model::DeliveryState;
use crate::store::{DeliveryFilter, IngestOutcome, NewEvent};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    endpoint_id: Option<String>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/events/{id}/replay` `{"endpoint_id"?, "dry_run"?}`.
pub async fn replay(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    let bytes = body::read_optional_json(req, state.config.server.max_body_bytes).await?;
    let b: ReplayBody = if bytes.is_empty() {
        ReplayBody::default()
    } else {
        body::parse(&bytes)?
    };
    if !ids::is_valid(EVENT, id) {
        return Err(ApiError::not_found("event"));
    }
    let (meta, payload) = state
        .store
        .event(id)?
        .ok_or_else(|| ApiError::not_found("event"))?;
    let endpoints = state.store.account_endpoints(&meta.account_id);
    let targets: Vec<_> = match &b.endpoint_id {
        Some(ep) => {
            let found: Vec<_> = endpoints.iter().filter(|e| e.id == *ep).collect();
            if found.is_empty() {
                return Err(ApiError::field(
                    "endpoint_id",
                    format!(
                        "endpoint {ep} is not an endpoint of account {}",
                        meta.account_id
                    ),
                ));
            }
            found
        }
        None => endpoints
            .iter()
            .filter(|e| e.accepts(&meta.event_type))
            .collect(),
    };
    if b.dry_run {
        return Ok(json(
            StatusCode::OK,
            &json!({"dry_run": true, "deliveries": targets.len().max(1)}),
        ));
    }
    // A replay is the operator's decision: no idempotency key, no debounce.
    let event = NewEvent::fan_out(
        meta.account_id,
        meta.event_type,
        payload,
        targets.into_iter(),
        state.clock.now_ms(),
    );
    let outcome = state.store.ingest(vec![event]).await?;
    let Some(IngestOutcome::Created {
        event_id,
        deliveries,
    }) = outcome.first()
    else {
        return Err(ApiError::unavailable());
    };
    tracing::info!(event_id = %event_id, replay_of = %id, "event replayed");
    let deliveries: Vec<Value> = deliveries.iter().map(super::ingest::delivery_ref).collect();
    Ok(json(
        StatusCode::ACCEPTED,
        &json!({"event_id": event_id, "replay_of": id, "deliveries": deliveries}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecoverBody {
    since: Option<Value>,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /v1/endpoints/{id}/recover` `{"since": RFC 3339, "dry_run"?}`: one new attempt now for
/// every `failed` or `skipped` delivery of the endpoint created since then.
pub async fn recover(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    let bytes = body::read_json_body(req, state.config.server.max_body_bytes).await?;
    let b: RecoverBody = body::parse(&bytes)?;
    let since = match &b.since {
        Some(Value::String(s)) => parse_rfc3339(s).ok_or_else(|| {
            ApiError::field(
                "since",
                "since must be an RFC 3339 time such as 2026-01-31T12:00:00Z",
            )
        })?,
        _ => {
            return Err(ApiError::field(
                "since",
                "since (an RFC 3339 time) is required",
            ))
        }
    };
    if state.store.endpoint(id).is_none() {
        return Err(ApiError::not_found("endpoint"));
    }
    let mut found = Vec::new();
    for st in [DeliveryState::Failed, DeliveryState::Skipped] {
        let filter = DeliveryFilter {
            endpoint_id: Some(id.to_string()),
            state: Some(st),
            since: Some(since),
            ..DeliveryFilter::default()
        };
        let mut cursor: Option<String> = None;
        loop {
            let (items, next) = state
                .store
                .list_deliveries(&filter, 500, cursor.as_deref())?;
            found.extend(items.into_iter().map(|d| d.id));
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    if b.dry_run {
        return Ok(json(
            StatusCode::OK,
            &json!({"dry_run": true, "deliveries": found.len()}),
        ));
    }
    let mut recovered = 0;
    for d in &found {
        match state.engine.retry_now(d) {
            Ok(_) => recovered += 1,
            Err(RetryError::InFlight | RetryError::NotFound) => {}
            Err(RetryError::Store(e)) => return Err(e.into()),
        }
    }
    tracing::info!(endpoint_id = %id, recovered, "endpoint recovered");
    Ok(json(
        StatusCode::ACCEPTED,
        &json!({ "recovered": recovered }),
    ))
}
