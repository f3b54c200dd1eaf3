//! Rows and names the cluster store's statements share: the columns of the deliveries and
//! attempts one transaction writes, ids as stored, and the channel of due work.

use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::{Delivery, DeliveryState, Status};
use herald_core::trace::TraceContext;
use herald_store::{NewEvent, StoreError};

/// The channel idle nodes `LISTEN` on; its payload is empty (a wake-up, not a message).
pub const DUE_CHANNEL: &str = "herald_due";

pub(super) fn ulid_from(bytes: &[u8]) -> Result<u128, StoreError> {
    let b: [u8; 16] = bytes
        .try_into()
        .map_err(|_| StoreError::Corrupt(format!("an id of {} bytes", bytes.len())))?;
    Ok(u128::from_be_bytes(b))
}

/// The id of a `debounced` attempt made at `now`.
pub(super) fn attempt_id(now: Millis) -> String {
    ids::new_id(ids::ATTEMPT, now)
}

/// The transaction's deliveries as columns (one array per column, unnested by one statement).
#[derive(Default)]
pub(super) struct DeliveryRows {
    pub(super) id: Vec<Vec<u8>>,
    pub(super) event: Vec<Vec<u8>>,
    pub(super) endpoint: Vec<Option<String>>,
    pub(super) lane: Vec<Option<Vec<u8>>>,
    pub(super) account: Vec<String>,
    pub(super) event_type: Vec<String>,
    pub(super) state: Vec<&'static str>,
    pub(super) last_status: Vec<Option<&'static str>>,
    pub(super) attempt_count: Vec<i32>,
    /// When a node may take it: its due time while pending, none once ended.
    pub(super) due: Vec<Option<i64>>,
    /// The end of its lease, if it is stored leased to this node ([`Committer::lend`]).
    pub(super) lease_end: Vec<Option<i64>>,
    pub(super) queued: Vec<bool>,
    pub(super) created: Vec<i64>,
    /// The claim and node of the leased rows.
    pub(super) claim: Option<i64>,
    pub(super) node: Option<String>,
}

impl DeliveryRows {
    /// A pending delivery, due at once.
    pub(super) fn push(
        &mut self,
        ulid: u128,
        event: u128,
        endpoint: Option<String>,
        lane: Option<Vec<u8>>,
        ev: &NewEvent,
        at: i64,
    ) {
        self.id.push(ulid.to_be_bytes().to_vec());
        self.event.push(event.to_be_bytes().to_vec());
        self.endpoint.push(endpoint);
        self.lane.push(lane);
        self.account.push(ev.account_id.clone());
        self.event_type.push(ev.event_type.clone());
        self.state.push(DeliveryState::Pending.as_str());
        self.last_status.push(None);
        self.attempt_count.push(0);
        self.due.push(Some(at));
        self.lease_end.push(None);
        self.queued.push(false);
        self.created.push(at);
    }

    /// Whether a row waits for any node (pending and not leased to this one).
    pub(super) fn any_for_others(&self) -> bool {
        self.due
            .iter()
            .zip(&self.lease_end)
            .any(|(due, lease)| due.is_some() && lease.is_none())
    }

    /// Row `i` ends `skipped` by a `debounced` attempt numbered `number`.
    pub(super) fn debounce(&mut self, i: usize, number: i32) {
        self.state[i] = DeliveryState::Skipped.as_str();
        self.last_status[i] = Some(Status::Debounced.as_str());
        self.attempt_count[i] = number;
        self.due[i] = None;
        self.queued[i] = false;
    }

    /// Row `i` waits for its window's end (a trailing candidate).
    pub(super) fn trail(&mut self, i: usize, due: i64) {
        self.due[i] = Some(due);
        self.queued[i] = true;
    }

    /// Row `i` as the API shows it.
    pub(super) fn delivery(&self, i: usize, event_id: &str) -> Delivery {
        let ulid = u128::from_be_bytes(self.id[i][..].try_into().unwrap_or_default());
        Delivery {
            id: ids::format(ids::DELIVERY, ulid),
            event_id: event_id.to_string(),
            endpoint_id: self.endpoint[i].clone(),
            account_id: self.account[i].clone(),
            event_type: self.event_type[i].clone(),
            state: DeliveryState::parse(self.state[i]).unwrap_or(DeliveryState::Pending),
            last_status: self.last_status[i].and_then(Status::parse),
            last_http_status: None,
            attempt_count: self.attempt_count[i] as u32,
            next_attempt_at: self.due[i],
            created_at: self.created[i],
            manual: false,
            queued: self.queued[i],
        }
    }
}

/// Attempt records the transaction makes itself (`debounced` ones).
#[derive(Default)]
pub(super) struct NewAttempts {
    pub(super) delivery: Vec<Vec<u8>>,
    pub(super) number: Vec<i32>,
    pub(super) id: Vec<String>,
    pub(super) at: Vec<i64>,
}

impl NewAttempts {
    /// A `debounced` attempt numbered `number` of the delivery whose key is `delivery`.
    pub(super) fn debounced(&mut self, delivery: Vec<u8>, number: u32, now: Millis) {
        self.delivery.push(delivery);
        self.number.push(number as i32);
        self.id.push(attempt_id(now));
        self.at.push(now);
    }
}

/// An event's `labels` column: its channels and tags, `NULL` when it has neither.
pub(super) fn labels(channels: &[String], tags: &[String]) -> Option<serde_json::Value> {
    (!channels.is_empty() || !tags.is_empty())
        .then(|| serde_json::json!({"channels": channels, "tags": tags}))
}

/// An event's `traceparent` and `tracestate` columns, `NULL` without a trace context.
pub(super) fn trace_columns(t: Option<&TraceContext>) -> (Option<String>, Option<&str>) {
    match t {
        Some(t) => (Some(t.traceparent()), t.tracestate.as_deref()),
        None => (None, None),
    }
}

/// The trace context of an event's `traceparent` and `tracestate` columns, checked as a
/// request's headers are (a value that does not read is no context).
pub(super) fn trace_of(
    traceparent: Option<String>,
    tracestate: Option<String>,
) -> Option<TraceContext> {
    TraceContext::from_headers(traceparent.as_deref(), tracestate.as_deref())
}

/// The channels and tags of a `labels` column.
pub(super) fn labels_of(v: Option<serde_json::Value>) -> (Vec<String>, Vec<String>) {
    let list = |v: &serde_json::Value, name: &str| -> Vec<String> {
        v.get(name)
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default()
    };
    v.map(|v| (list(&v, "channels"), list(&v, "tags")))
        .unwrap_or_default()
}
