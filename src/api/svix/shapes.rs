//! herald's records in the Svix API's answer shapes (docs/svix.md, "Field map"). Every field the
//! libraries require is present with its type; the 1.x names are emitted beside the 2.x ones.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::clock::rfc3339;
use crate::model::{Application, Attempt, Delivery, Endpoint, EndpointState, EventMeta, Status};

/// An endpoint's rate limit as Svix's integer `throttleRate`: `max(1, round(per_second))`.
pub fn throttle_rate(ep: &Endpoint) -> Option<u32> {
    ep.rate_limit.map(|r| (r.per_second.round() as u32).max(1))
}

pub fn application(app: &Application) -> Value {
    json!({
        "id": app.id,
        "uid": app.uid,
        "name": app.name,
        "metadata": app.metadata,
        "throttleRate": app.rate_limit,
        "rateLimit": app.rate_limit,
        "createdAt": rfc3339(app.created_at),
        "updatedAt": rfc3339(app.updated_at),
    })
}

pub fn endpoint(ep: &Endpoint) -> Value {
    let rate = throttle_rate(ep);
    let types: Option<&Vec<String>> = (!ep.event_types.is_empty()).then_some(&ep.event_types);
    let channels: Option<&Vec<String>> = (!ep.channels.is_empty()).then_some(&ep.channels);
    json!({
        "id": ep.id,
        "uid": ep.uid,
        "url": ep.url,
        "description": ep.description,
        "metadata": ep.metadata,
        "eventTypes": types,
        "filterTypes": types,
        "channels": channels,
        "disabled": ep.state != EndpointState::Active,
        "throttleRate": rate,
        "rateLimit": rate,
        "version": 1,
        "createdAt": rfc3339(ep.created_at),
        "updatedAt": rfc3339(ep.updated_at),
    })
}

/// A message, its payload byte for byte as ingested (`{}` when `with_content` is false, or
/// when the stored bytes are not a JSON object, which ingest never stores).
pub fn message(meta: &EventMeta, payload: &[u8], with_content: bool) -> Box<RawValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct MessageOut<'a> {
        id: &'a str,
        event_id: Option<&'a str>,
        event_type: &'a str,
        payload: &'a RawValue,
        channels: Option<&'a Vec<String>>,
        tags: Option<&'a Vec<String>>,
        timestamp: String,
    }
    let empty: Box<RawValue> = RawValue::from_string("{}".into()).expect("{} is JSON");
    let stored = with_content
        .then(|| std::str::from_utf8(payload).ok())
        .flatten()
        .filter(|p| p.trim_start().starts_with('{'))
        .and_then(|p| serde_json::from_str::<&RawValue>(p).ok());
    let out = MessageOut {
        id: &meta.id,
        event_id: meta.idempotency_key.as_deref(),
        event_type: &meta.event_type,
        payload: stored.unwrap_or(&empty),
        channels: (!meta.channels.is_empty()).then_some(&meta.channels),
        tags: (!meta.tags.is_empty()).then_some(&meta.tags),
        timestamp: rfc3339(meta.received_at),
    };
    serde_json::value::to_raw_value(&out).unwrap_or(empty)
}

/// [`message`] as a value, its payload left out (an attempt's `msg`).
pub fn message_value(meta: &EventMeta) -> Value {
    serde_json::from_str(message(meta, b"{}", false).get()).unwrap_or_else(|_| json!({}))
}

/// Svix's status code of an attempt: 0 success, 2 fail, 4 canceled (a decision not to send:
/// 0 unless the caller asked `expanded_statuses`, as Svix answers), and its text.
pub fn attempt_status(status: Status, expanded: bool) -> (u8, &'static str) {
    match status {
        Status::Delivered => (0, "success"),
        Status::HttpError | Status::Timeout | Status::ConnectionError | Status::TlsError => {
            (2, "fail")
        }
        _ if expanded => (4, "canceled"),
        _ => (0, "success"),
    }
}

pub fn attempt(a: &Attempt, d: &Delivery, expanded: bool, msg: Option<Value>) -> Value {
    let (status, text) = attempt_status(a.status, expanded);
    let mut v = json!({
        "id": a.id,
        "msgId": d.event_id,
        "endpointId": d.endpoint_id.clone().unwrap_or_default(),
        "url": a.url.clone().unwrap_or_default(),
        "response": a.response_body,
        "responseStatusCode": a.http_status.unwrap_or(0),
        "responseDurationMs": a.duration_ms,
        "status": status,
        "statusText": text,
        "heraldStatus": a.status.as_str(),
        "triggerType": u8::from(a.manual),
        "timestamp": rfc3339(a.at),
    });
    if let Some(m) = msg {
        v["msg"] = m;
    }
    v
}
