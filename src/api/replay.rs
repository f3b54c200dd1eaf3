//! Replay and recover (docs/api.md). Retry (in `deliveries`) attempts the same delivery again with
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
use super::{json, AppState, Resp, Scope};
use crate::clock::{parse_rfc3339, Millis};
use crate::engine::RetryError;
use crate::ids::{self, EVENT};
use crate::model::DeliveryState;
use crate::store::prelude::*;
use crate::store::{Backend, DeliveryFilter, IngestOutcome, NewEvent, StoreError};

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
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    let trace = super::request_trace(&req);
    let b: ReplayBody = body::parse_optional(req, state.config.server.max_body_bytes).await?;
    if !ids::is_valid(EVENT, id) {
        return Err(ApiError::not_found("event"));
    }
    let (meta, payload) = state
        .store
        .event(id)
        .await?
        .ok_or_else(|| ApiError::not_found("event"))?;
    scope.check(&meta.account_id, "event")?;
    // A replay is a new event: what ingest refuses today it refuses too, whatever an older
    // version stored (docs/api.md, "Replay").
    super::validate::scan_payload(&payload, super::validate::MAX_PAYLOAD_DEPTH).map_err(|f| {
        let e = f.to_error("payload");
        ApiError::field("payload", format!("the stored event's {}", e.message))
    })?;
    if b.dry_run {
        let targets = replay_targets(state, &meta, &payload, b.endpoint_id.as_deref())?;
        return Ok(json(
            StatusCode::OK,
            &json!({"dry_run": true, "deliveries": targets.len().max(1)}),
        ));
    }
    // A replay is the operator's decision: no idempotency key, no debounce. It keeps its
    // ordering key: on an ordered endpoint it joins the end of the original's sequence.
    let now = state.clock.now_ms();
    let fan_out = || {
        let targets = replay_targets(state, &meta, &payload, b.endpoint_id.as_deref())?;
        let mut event = NewEvent::fan_out(
            meta.account_id.clone(),
            meta.event_type.clone(),
            payload.clone(),
            targets.iter(),
            now,
        );
        event.ordering_key.clone_from(&meta.ordering_key);
        event.channels.clone_from(&meta.channels);
        event.tags.clone_from(&meta.tags);
        // The replay belongs to the trace of the request that asked for it.
        event.trace.clone_from(&trace);
        Ok::<_, ApiError>(vec![event])
    };
    let outcome = state.store.ingest(fan_out).await?;
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

/// The endpoints a replay goes to: the one asked for, else those of the event's account that
/// take it now.
fn replay_targets(
    state: &AppState,
    meta: &crate::model::EventMeta,
    payload: &[u8],
    endpoint_id: Option<&str>,
) -> Result<Vec<Arc<crate::model::Endpoint>>, ApiError> {
    let endpoints = state.store.account_endpoints(&meta.account_id);
    match endpoint_id {
        Some(ep) => {
            let found: Vec<_> = endpoints.into_iter().filter(|e| e.id == ep).collect();
            if found.is_empty() {
                return Err(ApiError::field(
                    "endpoint_id",
                    format!(
                        "endpoint {ep} is not an endpoint of account {}",
                        meta.account_id
                    ),
                ));
            }
            Ok(found)
        }
        None => super::ingest::takers(&endpoints, &meta.event_type, &meta.channels, payload)
            .map(|t| t.into_iter().cloned().collect())
            .map_err(|e| {
                ApiError::field(
                    "payload",
                    format!(
                        "the stored event's payload does not parse ({e}); it cannot be replayed"
                    ),
                )
            }),
    }
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
    scope: &Scope,
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
    super::endpoints::find(state, scope, id)?;
    let (found, more) = recoverable(&state.store, id, since, MAX_RECOVER).await?;
    if b.dry_run {
        return Ok(json(
            StatusCode::OK,
            &json!({"dry_run": true, "deliveries": found.len(), "more": more}),
        ));
    }
    let mut recovered = 0;
    for d in &found {
        match state.engine.retry_now(d).await {
            Ok(_) => recovered += 1,
            Err(RetryError::InFlight | RetryError::NotFound) => {}
            Err(RetryError::Store(e)) => return Err(e.into()),
        }
    }
    tracing::info!(endpoint_id = %id, recovered, more, "endpoint recovered");
    Ok(json(
        StatusCode::ACCEPTED,
        &json!({ "recovered": recovered, "more": more }),
    ))
}

/// Deliveries one recover call retries at most; `"more": true` in the answer says another call
/// will find the rest (those retried are no longer `failed` or `skipped`).
pub const MAX_RECOVER: usize = 10_000;

/// The endpoint's `failed` and `skipped` deliveries created since `since`, newest first, at most
/// `max`; and whether there are more.
async fn recoverable(
    store: &Backend,
    endpoint: &str,
    since: Millis,
    max: usize,
) -> Result<(Vec<String>, bool), StoreError> {
    let mut found = Vec::new();
    for st in [DeliveryState::Failed, DeliveryState::Skipped] {
        let filter = DeliveryFilter {
            endpoint_id: Some(endpoint.to_string()),
            state: Some(st),
            since: Some(since),
            ..DeliveryFilter::default()
        };
        let mut cursor: Option<String> = None;
        loop {
            let room = max + 1 - found.len();
            let (items, next) = store
                .list_deliveries(filter.clone(), room.min(500), cursor.take())
                .await?;
            found.extend(items.into_iter().map(|d| d.id));
            if found.len() > max {
                found.truncate(max);
                return Ok((found, true));
            }
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    Ok((found, false))
}

#[cfg(test)]
// The recovery's bound is tested on the embedded store itself (its failed deliveries written
// directly).
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;
    use crate::model::{Attempt, Status};
    use herald_store_sled::SledStore;

    /// Recover is bounded: past `max` deliveries it stops and says there are more.
    #[tokio::test]
    async fn recover_is_bounded_and_says_there_is_more() {
        let dir = tempfile::tempdir().unwrap();
        let t0 = 1_796_277_600_000;
        let clock = Arc::new(ManualClock::new(t0));
        let store = SledStore::open(dir.path(), 8 << 20, clock, Arc::default()).unwrap();
        let endpoint = ids::new_id(ids::ENDPOINT, t0);
        let lane = ids::parse(ids::ENDPOINT, &endpoint).unwrap();
        for i in 0..5 {
            let ev = NewEvent {
                account_id: "a".into(),
                event_type: "t.x".into(),
                received_at: t0 + i,
                payload: bytes::Bytes::from_static(b"{}"),
                targets: vec![lane],
                idempotency_key: None,
                debounce_key: None,
                ordering_key: None,
                debounce: None,
                channels: Vec::new(),
                tags: Vec::new(),
                request_key: None,
                trace: None,
            };
            let out = store.ingest(vec![ev]).await.unwrap();
            let IngestOutcome::Created { deliveries, .. } = &out[0] else {
                panic!("created");
            };
            let d = deliveries[0].clone();
            let mut failed = d.clone();
            failed.state = DeliveryState::Failed;
            failed.next_attempt_at = None;
            let a = Attempt {
                id: ids::new_id(ids::ATTEMPT, t0),
                number: 1,
                at: t0,
                duration_ms: 0,
                status: Status::Blocked,
                http_status: None,
                error: None,
                request_headers: Vec::new(),
                response_body: String::new(),
                response_headers: Vec::new(),
                url: None,
                manual: false,
            };
            store.update_delivery(&d, &failed, Some(&a)).unwrap();
        }
        let store = Backend::of_sled(store);
        let (found, more) = recoverable(&store, &endpoint, t0, 3).await.unwrap();
        assert_eq!((found.len(), more), (3, true));
        let (found, more) = recoverable(&store, &endpoint, t0, 5).await.unwrap();
        assert_eq!((found.len(), more), (5, false));
        let (found, more) = recoverable(&store, &endpoint, t0 + 3, 5).await.unwrap();
        assert_eq!((found.len(), more), (2, false));
    }
}
