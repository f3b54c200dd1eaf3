//! `POST /v1/events` and `POST /v1/events/batch`: validate, fan out, hand to the committer, and
//! answer `202` only once the committer says the events are fsynced.

use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::body::{self, read_json_body};
use super::error::ApiError;
use super::{json, validate, AppState, Resp};
use crate::clock::Millis;
use crate::config::Config;
use crate::model::{Delivery, Endpoint};
use crate::policy::debounce;
use crate::policy::routing::{Event, Route};
use crate::policy::schema;
use crate::store::prelude::*;
use crate::store::{DebounceRule, IngestOutcome, NewEvent};
use crate::trace::TraceContext;

/// Events one batch may carry (docs/api.md).
pub const MAX_BATCH: usize = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Item<'a> {
    account_id: Option<Value>,
    #[serde(rename = "type")]
    event_type: Option<Value>,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    idempotency_key: Option<Value>,
    debounce_key: Option<Value>,
    ordering_key: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch<'a> {
    #[serde(borrow)]
    events: Vec<&'a RawValue>,
}

pub async fn single(state: &Arc<AppState>, req: Request<Incoming>) -> Result<Resp, ApiError> {
    refuse_when_stopping(state)?;
    let trace = super::request_trace(&req);
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let item: Item = body::parse(&bytes)?;
    let checked = check(&state.config, &state.schemas, item)?;
    let outcome = store(state, vec![checked], state.clock.now_ms(), trace).await?;
    Ok(json(
        StatusCode::ACCEPTED,
        &answer(state, outcome.first()).await?,
    ))
}

pub async fn batch(state: &Arc<AppState>, req: Request<Incoming>) -> Result<Resp, ApiError> {
    refuse_when_stopping(state)?;
    let trace = super::request_trace(&req);
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let batch: Batch = body::parse(&bytes)?;
    if batch.events.len() > MAX_BATCH {
        return Err(ApiError::field(
            "events",
            format!(
                "events holds {} items; a batch takes at most {MAX_BATCH}",
                batch.events.len()
            ),
        ));
    }
    let now = state.clock.now_ms();
    // Each item stands alone: a bad one gets its error, the good ones share one commit.
    let mut results = vec![Value::Null; batch.events.len()];
    let mut good = Vec::new();
    let mut placed = Vec::new();
    for (i, raw) in batch.events.iter().enumerate() {
        let prepared = body::parse::<Item>(raw.get().as_bytes())
            .and_then(|item| check(&state.config, &state.schemas, item))
            .map_err(|e| at_index(e, i));
        match prepared {
            Ok(ev) => {
                placed.push(i);
                good.push(ev);
            }
            Err(e) => results[i] = json!({"status": e.status.as_u16(), "error": e.body()["error"]}),
        }
    }
    // The items share their request's trace context.
    let outcomes = store(state, good, now, trace).await?;
    for (i, outcome) in placed.into_iter().zip(outcomes.iter().map(Some)) {
        let mut v = answer(state, outcome).await?;
        v["status"] = json!(202);
        results[i] = v;
    }
    Ok(json(StatusCode::ACCEPTED, &json!({ "results": results })))
}

pub(super) fn refuse_when_stopping(state: &AppState) -> Result<(), ApiError> {
    if state.shutting_down.is_fired() {
        Err(ApiError::unavailable())
    } else {
        Ok(())
    }
}

/// Names the batch item in a field path: `events[3].type`, or `/events/3/payload/...` for a
/// JSON pointer (a schema violation).
fn at_index(mut e: ApiError, i: usize) -> ApiError {
    e.field = Some(match e.field.take() {
        Some(f) if f.starts_with('/') => format!("/events/{i}{f}"),
        Some(f) if f != "body" => format!("events[{i}].{f}"),
        _ => format!("events[{i}]"),
    });
    e
}

/// An ingest item whose fields passed every check.
#[derive(Clone)]
pub struct Checked {
    pub account_id: String,
    pub event_type: String,
    pub payload: Bytes,
    pub idempotency_key: Option<String>,
    pub debounce_key: Option<String>,
    pub ordering_key: Option<String>,
    /// The channels and tags of a message posted through the Svix-compatible API, and its
    /// request's `idempotency-key` (the store keeps that key's answer with the event).
    pub channels: Vec<String>,
    pub tags: Vec<String>,
    pub request_key: Option<String>,
}

/// Parses and checks one ingest item's bytes: what `POST /v1/events` does before anything is
/// stored (also the fuzzing entry point for the ingest parser).
pub fn parse_event(
    config: &Config,
    schemas: &schema::Catalog,
    bytes: &[u8],
) -> Result<Checked, ApiError> {
    check(config, schemas, body::parse(bytes)?)
}

/// Checks an event given field by field (the Svix-compatible API's message): the same checks as
/// `POST /v1/events` makes, without a JSON item to parse.
pub fn check_fields(
    config: &Config,
    schemas: &schema::Catalog,
    account_id: &str,
    event_type: Option<Value>,
    payload: Option<&RawValue>,
    idempotency_key: Option<Value>,
) -> Result<Checked, ApiError> {
    let item = Item {
        account_id: Some(Value::String(account_id.to_string())),
        event_type,
        payload,
        idempotency_key,
        debounce_key: None,
        ordering_key: None,
    };
    check(config, schemas, item)
}

fn check(config: &Config, schemas: &schema::Catalog, item: Item<'_>) -> Result<Checked, ApiError> {
    let account_id = match &item.account_id {
        Some(v) => validate::account_id("account_id", v)?,
        None => return Err(ApiError::field("account_id", "account_id is required")),
    };
    let event_type = match &item.event_type {
        Some(Value::String(s)) => {
            validate::event_type("type", s)?;
            s.clone()
        }
        Some(_) => return Err(ApiError::field("type", "type must be a string")),
        None => return Err(ApiError::field("type", "type is required")),
    };
    if config.catalog.strict && !config.catalog.events.contains_key(&event_type) {
        return Err(ApiError::field(
            "type",
            format!("type {event_type:?} is not in the catalog (catalog.strict = true)"),
        ));
    }
    let payload = match item.payload {
        Some(raw) if validate::is_object(raw) => raw,
        Some(_) => return Err(ApiError::field("payload", "payload must be a JSON object")),
        None => return Err(ApiError::field("payload", "payload is required")),
    };
    validate::scan_payload(payload.get().as_bytes(), validate::MAX_PAYLOAD_DEPTH)
        .map_err(|fault| fault.to_error("payload"))?;
    if config.catalog.validate && schemas.has(&event_type) {
        // Only validated payloads pay for a parse into values.
        let value: Value = serde_json::from_str(payload.get())
            .map_err(|e| ApiError::field("payload", format!("payload: {e}")))?;
        if let Err(v) = schemas.validate(&event_type, &value) {
            return Err(schema_violation(&event_type, &v));
        }
    }
    let payload = Bytes::copy_from_slice(payload.get().as_bytes());
    let idempotency_key = match &item.idempotency_key {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 255 => Some(s.clone()),
        Some(_) => {
            return Err(ApiError::field(
                "idempotency_key",
                "idempotency_key must be a string of 1 to 255 characters",
            ))
        }
    };
    Ok(Checked {
        account_id,
        event_type,
        payload,
        idempotency_key,
        debounce_key: key_field("debounce_key", item.debounce_key.as_ref())?,
        ordering_key: key_field("ordering_key", item.ordering_key.as_ref())?,
        channels: Vec::new(),
        tags: Vec::new(),
        request_key: None,
    })
}

/// A key given at ingest (`debounce_key`, `ordering_key`): a string of at most 255 characters
/// or an integer (its decimal text, so `7` and `"7"` are one key); `null` is none.
fn key_field(name: &str, v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= 255 => Ok(Some(s.clone())),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(n.to_string())),
        Some(_) => Err(ApiError::field(
            name,
            format!("{name} must be a string (at most 255 characters) or an integer"),
        )),
    }
}

/// Fans the checked items out over their accounts' endpoints and stores them. In a cluster a
/// fan-out made with a copy of the endpoints that missed another node's change is refused
/// with nothing stored: the store brings the copy up to date and fans the items out again.
pub(super) async fn store(
    state: &AppState,
    items: Vec<Checked>,
    now: Millis,
    trace: Option<TraceContext>,
) -> Result<Vec<IngestOutcome>, ApiError> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let fan_out_all = || {
        items
            .iter()
            .map(|c| {
                let mut event = fan_out(state, c.clone(), now)?;
                event.trace.clone_from(&trace);
                Ok(event)
            })
            .collect::<Result<Vec<_>, ApiError>>()
    };
    state.store.ingest(fan_out_all).await
}

/// One checked item fanned out to its account's matching endpoints.
fn fan_out(state: &AppState, checked: Checked, now: Millis) -> Result<NewEvent, ApiError> {
    let Checked {
        account_id,
        event_type,
        payload,
        idempotency_key,
        debounce_key,
        ordering_key,
        channels,
        tags,
        request_key,
    } = checked;

    let debounce = state
        .config
        .catalog
        .events
        .get(&event_type)
        .and_then(|c| c.debounce.as_ref())
        .and_then(|rule| {
            let key = debounce::key_of(debounce_key.as_deref(), &payload, &rule.key)?;
            Some(DebounceRule {
                key: format!("{account_id}\0{event_type}\0{key}"),
                window_ms: rule.window.0.as_millis() as Millis,
                trailing: rule.mode == "leading_trailing",
            })
        });
    let endpoints = state.store.account_endpoints(&account_id);
    // `check` scanned the payload: it is I-JSON, so it parses. Should it not, the event is
    // refused rather than fanned out on a guess.
    let targets = takers(&endpoints, &event_type, &channels, &payload).map_err(|e| {
        tracing::error!(error = %e, "an ingested payload that passed the scan does not parse");
        ApiError::field("payload", format!("payload: {e}"))
    })?;
    let mut event = NewEvent::fan_out(account_id, event_type, payload, targets.into_iter(), now);
    event.idempotency_key = idempotency_key;
    event.debounce_key = debounce_key;
    event.ordering_key = ordering_key;
    event.debounce = debounce;
    event.channels = channels;
    event.tags = tags;
    event.request_key = request_key;
    Ok(event)
}

/// A payload the catalog's schema of `event_type` refuses: `422 schema_violation`, its field
/// the JSON pointer into the payload.
pub(super) fn schema_violation(event_type: &str, v: &schema::Violation) -> ApiError {
    ApiError {
        field: Some(format!("/payload{}", v.pointer)),
        ..ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "schema_violation",
            format!(
                "the payload does not satisfy the schema of {event_type:?} at {:?}: {}",
                if v.pointer.is_empty() {
                    "/"
                } else {
                    &v.pointer
                },
                v.message
            ),
        )
    }
}

/// The endpoints that take an event: its type, its channels (an endpoint that lists channels
/// takes only events sent on one of them: docs/svix.md), then its payload filter (docs/api.md,
/// "Payload filters"). The payload is parsed once per event, and only when a filter needs it. A payload
/// that does not parse (one stored before ingest refused what is not I-JSON) decides nothing:
/// the error comes back, never a stand-in value that some filters would take.
pub fn takers<'a>(
    endpoints: &'a [Arc<Endpoint>],
    event_type: &str,
    channels: &[String],
    payload: &[u8],
) -> Result<Vec<&'a Arc<Endpoint>>, serde_json::Error> {
    let event = Event::new(event_type, channels, payload);
    let mut out = Vec::new();
    for ep in endpoints {
        if Route::of(ep).decide(&event)?.is_none() {
            out.push(ep);
        }
    }
    Ok(out)
}

/// The answer to one ingested event: what the commit stored, or the first event's answer.
pub(super) async fn answer(
    state: &AppState,
    outcome: Option<&IngestOutcome>,
) -> Result<Value, ApiError> {
    match outcome {
        Some(IngestOutcome::Created {
            event_id,
            deliveries,
        }) => Ok(json!({
            "event_id": event_id,
            "duplicate": false,
            "deliveries": deliveries.iter().map(delivery_ref).collect::<Vec<_>>(),
        })),
        Some(IngestOutcome::Duplicate { event_id }) => {
            let (meta, _, deliveries) = state
                .store
                .event_with_deliveries(event_id)
                .await?
                .ok_or_else(ApiError::unavailable)?;
            let deliveries: Vec<Value> = deliveries.iter().map(delivery_ref).collect();
            Ok(json!({"event_id": meta.id, "duplicate": true, "deliveries": deliveries}))
        }
        // Never here: only a message's creation (docs/svix.md) carries a request key.
        Some(IngestOutcome::Repeated { .. }) | None => Err(ApiError::unavailable()),
    }
}

pub fn delivery_ref(d: &Delivery) -> Value {
    json!({"delivery_id": d.id, "endpoint_id": d.endpoint_id, "state": d.state})
}
