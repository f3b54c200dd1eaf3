//! The event catalog (`GET /v1/event-types`) and test events (`POST /v1/endpoints/{id}/test`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body;
use super::error::ApiError;
use super::{json, validate, AppState, Resp, Scope};
use crate::clock::rfc3339;
use crate::config::CatalogEvent;
use crate::store::prelude::*;
use crate::store::{IngestOutcome, NewEvent};

/// The type of a test event when none is given.
pub const TEST_TYPE: &str = "webhook.test";

/// A catalog type's sample payload as JSON: the inline `sample`, else `sample_file`, else none.
fn sample(ev: &CatalogEvent) -> Option<Value> {
    ev.sample_json()
}

pub fn event_types(state: &Arc<AppState>) -> Result<Resp, ApiError> {
    let items: Vec<Value> = state
        .config
        .catalog
        .events
        .iter()
        .map(|(ty, ev)| {
            json!({
                "type": ty,
                "description": ev.description,
                "sample": sample(ev),
                "schema": ev.schema_json(),
                "deprecated": ev.deprecated,
                "replaced_by": ev.replaced_by,
                "debounce": ev.debounce.as_ref().map(|d| json!({
                    "window": humantime::format_duration(d.window.0).to_string(),
                    "key": d.key,
                    "mode": d.mode,
                })),
            })
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &json!({"items": items, "next_cursor": null}),
    ))
}

/// `GET /v1/retry-policies`: the policies an endpoint may name, with their delays.
pub fn retry_policies(state: &Arc<AppState>) -> Resp {
    let items: Vec<Value> = state
        .config
        .retry_policies
        .iter()
        .map(|(name, delays)| {
            let delays: Vec<String> = delays
                .iter()
                .map(|d| humantime::format_duration(d.0).to_string())
                .collect();
            json!({
                "name": name,
                "attempts": delays.len() + 1,
                "delays": delays,
                "default": *name == state.config.delivery.default_retry_policy,
            })
        })
        .collect();
    json(
        StatusCode::OK,
        &json!({"items": items, "next_cursor": null}),
    )
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TestBody {
    #[serde(rename = "type")]
    event_type: Option<String>,
    /// A payload of the caller's instead of the catalog's sample (checked against the type's
    /// schema, if the catalog has one, whatever `catalog.validate` says).
    payload: Option<Value>,
}

/// Sends a test event to one endpoint now (through the normal conditions and signing) and
/// answers with its first attempt. It is a real event in the log, with its own id.
pub async fn send_test(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    let trace = super::request_trace(&req);
    let b: TestBody = body::parse_optional(req, state.config.server.max_body_bytes).await?;
    let ep = super::endpoints::find(state, scope, id)?;
    let now = state.clock.now_ms();
    let (event_type, payload) = match b.payload {
        Some(payload) => own_test_event(state, b.event_type, payload)?,
        None => test_event(state, b.event_type, now)?,
    };
    let payload = Bytes::from(payload.to_string());
    let fan_out = || {
        // The endpoint as the copy in memory has it (again, after another node changed it).
        let ep = state
            .store
            .endpoint(&ep.id)
            .ok_or_else(|| ApiError::not_found("endpoint"))?;
        let mut event = NewEvent::fan_out(
            ep.account_id.clone(),
            event_type.clone(),
            payload.clone(),
            [&ep].into_iter(),
            now,
        );
        // The test event belongs to the trace of the request that asked for it.
        event.trace.clone_from(&trace);
        Ok::<_, ApiError>(vec![event])
    };
    let mut attempted = state.engine.subscribe_attempts();
    let outcome = state.store.ingest(fan_out).await?;
    let Some(IngestOutcome::Created {
        event_id,
        deliveries,
    }) = outcome.first()
    else {
        return Err(ApiError::unavailable());
    };
    let Some(delivery_id) = deliveries.first().map(|d| d.id.clone()) else {
        return Err(ApiError::unavailable());
    };
    let waited = first_attempt(state, &mut attempted, &delivery_id).await;
    let attempt = state
        .store
        .attempts(&delivery_id)
        .await?
        .first()
        .map(|a| a.view());
    let status = if waited {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok(json(
        status,
        &json!({"event_id": event_id, "delivery_id": delivery_id, "attempt": attempt}),
    ))
}

/// The test event's type and payload: the catalog's sample of `event_type`, or the generic
/// `webhook.test` one.
fn test_event(
    state: &AppState,
    event_type: Option<String>,
    now: i64,
) -> Result<(String, Value), ApiError> {
    let Some(ty) = event_type else {
        return Ok((TEST_TYPE.to_string(), generic(now)));
    };
    validate::event_type("type", &ty)?;
    let payload = match state.config.catalog.events.get(&ty).and_then(sample) {
        Some(s) => s,
        None if ty == TEST_TYPE => generic(now),
        None => {
            return Err(ApiError::field(
                "type",
                format!("type {ty:?} has no sample in the catalog"),
            ))
        }
    };
    Ok((ty, payload))
}

/// A test event with the caller's payload: a JSON object within ingest's depth, which the
/// catalog's schema of its type (the generic type without one) takes.
fn own_test_event(
    state: &AppState,
    event_type: Option<String>,
    payload: Value,
) -> Result<(String, Value), ApiError> {
    let ty = event_type.unwrap_or_else(|| TEST_TYPE.to_string());
    validate::event_type("type", &ty)?;
    if !payload.is_object() {
        return Err(ApiError::field("payload", "payload must be a JSON object"));
    }
    validate::scan_payload(payload.to_string().as_bytes(), validate::MAX_PAYLOAD_DEPTH)
        .map_err(|fault| fault.to_error("payload"))?;
    if let Err(v) = state.schemas.validate(&ty, &payload) {
        return Err(super::ingest::schema_violation(&ty, &v));
    }
    Ok((ty, payload))
}

/// Waits for the delivery's first attempt (the engine takes it at once), bounded by the
/// delivery limits; whether it came.
async fn first_attempt(
    state: &AppState,
    attempted: &mut tokio::sync::broadcast::Receiver<String>,
    delivery_id: &str,
) -> bool {
    let limit = state.config.delivery.connect_timeout.0
        + state.config.delivery.timeout.0
        + Duration::from_secs(2);
    tokio::time::timeout(limit, async {
        loop {
            match attempted.recv().await {
                Ok(id) if id == delivery_id => return true,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    // Missed some announcements: look at the delivery itself.
                    if state
                        .store
                        .attempts(delivery_id)
                        .await
                        .is_ok_and(|a| !a.is_empty())
                    {
                        return true;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return false,
            }
        }
    })
    .await
    .unwrap_or(false)
}

fn generic(now: i64) -> Value {
    json!({
        "type": TEST_TYPE,
        "message": "A test event from herald. If you can read this, your endpoint receives webhooks.",
        "sent_at": rfc3339(now),
    })
}
