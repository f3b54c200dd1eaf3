//! `POST /v1/accounts/{account_id}/filter-test`: whether a payload filter takes an event, and
//! why not (docs/api.md, "Payload filters"). Given an endpoint's event types (and channels), it
//! decides as fan-out does, through the same [`Route`]. It changes nothing, so read-only portal
//! sessions may call it too.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{self, read_json_body};
use super::error::ApiError;
use super::{json, validate, AppState, Resp};
use crate::filter::Filter;
use crate::ids::{self, EVENT};
use crate::policy::routing::{Event, Route};
use crate::store::prelude::*;

/// The most channels a test names, as an endpoint may list.
const MAX_CHANNELS: usize = 10;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TestBody {
    /// Absent and `null` differ: absent is an error, `null` is "no filter".
    #[serde(default, deserialize_with = "body::present")]
    filter: Option<Value>,
    event_id: Option<Value>,
    #[serde(rename = "type")]
    event_type: Option<Value>,
    payload: Option<Value>,
    /// The endpoint's event types (absent: the filter alone decides).
    event_types: Option<Value>,
    /// The endpoint's channels (absent: none, which takes every channel).
    channels: Option<Value>,
}

/// The event a test decides on.
struct Subject {
    event_type: String,
    channels: Vec<String>,
    payload: Value,
}

pub async fn test(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    account_id: &str,
) -> Result<Resp, ApiError> {
    validate::account_id_str("account_id", account_id)?;
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let b: TestBody = body::parse(&bytes)?;
    let Some(filter) = &b.filter else {
        return Err(ApiError::field(
            "filter",
            "filter is required (null tests no filter)",
        ));
    };
    let filter = Filter::parse(filter).map_err(|e| ApiError::field(&e.field, e.message))?;
    let event_types = match &b.event_types {
        Some(v) => super::endpoints::event_types(v)?,
        None => Vec::new(),
    };
    let channels = match &b.channels {
        Some(v) => channels(v)?,
        None => Vec::new(),
    };
    let subject = subject(state, account_id, &b).await?;
    let route = Route {
        event_types: &event_types,
        channels: &channels,
        filter: filter.as_ref(),
    };
    let event = Event::parsed(&subject.event_type, &subject.channels, subject.payload);
    // Parsed already: explaining cannot fail on the payload.
    let reason = route
        .explain(&event)
        .map_err(|e| ApiError::field("payload", format!("payload: {e}")))?;
    Ok(json(
        StatusCode::OK,
        &json!({"matches": reason.is_none(), "reason": reason}),
    ))
}

/// The event to test against: a stored one of the account, or the type and payload given.
async fn subject(state: &AppState, account_id: &str, b: &TestBody) -> Result<Subject, ApiError> {
    match (&b.event_id, &b.event_type, &b.payload) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(ApiError::field(
            "event_id",
            "give event_id, or type and payload, not both",
        )),
        (Some(Value::String(id)), None, None) => {
            if !ids::is_valid(EVENT, id) {
                return Err(ApiError::not_found("event"));
            }
            let Some((meta, payload)) = state.store.event(id).await? else {
                return Err(ApiError::not_found("event"));
            };
            if meta.account_id != account_id {
                return Err(ApiError::not_found("event"));
            }
            // Stored before ingest refused what is not I-JSON: nothing to decide on.
            let payload = serde_json::from_slice(&payload).map_err(|e| {
                ApiError::field(
                    "event_id",
                    format!(
                        "the payload of event {id} does not parse ({e}): it was stored before \
                         herald refused payloads that are not I-JSON, and no filter decides on it"
                    ),
                )
            })?;
            Ok(Subject {
                event_type: meta.event_type,
                channels: meta.channels,
                payload,
            })
        }
        (Some(_), None, None) => Err(ApiError::field("event_id", "event_id must be a string")),
        (None, Some(Value::String(t)), Some(p @ Value::Object(_))) => {
            validate::event_type("type", t)?;
            Ok(Subject {
                event_type: t.clone(),
                channels: Vec::new(),
                payload: p.clone(),
            })
        }
        (None, Some(_), Some(Value::Object(_))) => {
            Err(ApiError::field("type", "type must be a string"))
        }
        (None, Some(_), Some(_)) => {
            Err(ApiError::field("payload", "payload must be a JSON object"))
        }
        (None, None, Some(_)) => Err(ApiError::field("type", "type is required with payload")),
        (None, Some(_), None) => Err(ApiError::field("payload", "payload is required with type")),
        (None, None, None) => Err(ApiError::field(
            "event_id",
            "give event_id, or type and payload",
        )),
    }
}

/// The endpoint's channels a test names: a list of at most [`MAX_CHANNELS`] strings.
fn channels(v: &Value) -> Result<Vec<String>, ApiError> {
    let Value::Array(items) = v else {
        return Err(ApiError::field(
            "channels",
            "channels must be a list of channel names",
        ));
    };
    if items.len() > MAX_CHANNELS {
        return Err(ApiError::field(
            "channels",
            format!("channels takes at most {MAX_CHANNELS} names"),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(c) if !c.is_empty() => Ok(c.clone()),
            _ => {
                let field = format!("channels[{i}]");
                Err(ApiError::field(
                    &field,
                    format!("{field} must be a channel name (a non-empty string)"),
                ))
            }
        })
        .collect()
}
