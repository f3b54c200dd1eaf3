//! The shared vocabulary: accounts' endpoints, events, deliveries, attempts and their statuses.
//!
//! These are the stored records (serde JSON in sled) and the source of the API's JSON shapes
//! (docs/api.md). Secrets live on [`Endpoint`] but are skipped by every view: only `store` and the
//! signing step read them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::clock::{rfc3339, Millis};
use crate::filter::Filter;

/// A plan (`[plans.NAME]` in the config): whether webhooks are allowed and the account's
/// delivery quotas; an absent limit is unlimited.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Plan {
    pub webhooks: bool,
    pub per_minute: Option<u64>,
    pub per_day: Option<u64>,
}

impl Default for Plan {
    fn default() -> Self {
        Self {
            webhooks: true,
            per_minute: None,
            per_day: None,
        }
    }
}

/// What happened to one attempt (docs/delivery-contract.md). The strings are part of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    // Not sent.
    NotEntitled,
    NoEndpoint,
    Unverified,
    Paused,
    Disabled,
    RateLimited,
    Debounced,
    Blocked,
    // Sent.
    Delivered,
    HttpError,
    Timeout,
    ConnectionError,
    TlsError,
}

impl Status {
    /// Whether an attempt of this status sent a request (the rest are decisions not to).
    pub fn is_sent(self) -> bool {
        self as u8 >= Status::Delivered as u8
    }

    pub const ALL: [Status; 13] = [
        Status::NotEntitled,
        Status::NoEndpoint,
        Status::Unverified,
        Status::Paused,
        Status::Disabled,
        Status::RateLimited,
        Status::Debounced,
        Status::Blocked,
        Status::Delivered,
        Status::HttpError,
        Status::Timeout,
        Status::ConnectionError,
        Status::TlsError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::NotEntitled => "not_entitled",
            Status::NoEndpoint => "no_endpoint",
            Status::Unverified => "unverified",
            Status::Paused => "paused",
            Status::Disabled => "disabled",
            Status::RateLimited => "rate_limited",
            Status::Debounced => "debounced",
            Status::Blocked => "blocked",
            Status::Delivered => "delivered",
            Status::HttpError => "http_error",
            Status::Timeout => "timeout",
            Status::ConnectionError => "connection_error",
            Status::TlsError => "tls_error",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// Where a delivery stands (docs/delivery-contract.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    Pending,
    Delivered,
    Failed,
    Skipped,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 4] = [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Failed,
        DeliveryState::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryState> {
        DeliveryState::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointState {
    Active,
    Paused,
    Disabled,
}

impl EndpointState {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointState::Active => "active",
            EndpointState::Paused => "paused",
            EndpointState::Disabled => "disabled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignatureKind {
    Hmac,
    Ed25519,
}

/// Which header names carry an endpoint's signature (docs/svix.md): the Standard Webhooks
/// `webhook-*` names alone, or also the same values as `svix-*` (endpoints made through the
/// Svix-compatible API, whose receivers may read only those).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignatureHeaders {
    #[default]
    #[serde(rename = "webhook")]
    Webhook,
    #[serde(rename = "webhook+svix")]
    WebhookAndSvix,
}

impl SignatureHeaders {
    pub fn is_webhook(&self) -> bool {
        *self == SignatureHeaders::Webhook
    }
}

/// The account operator events belong to (docs/operations.md, "When deliveries fail"). Account ids
/// starting with `_` are reserved.
pub const OPERATOR_ACCOUNT: &str = "_operator";

/// Secrets that sign at once during rotations (the new one and those in their grace).
pub const MAX_SECRETS: usize = 5;

/// A signing secret and, once rotated out, when it stops signing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredSecret {
    pub value: String,
    pub expires_at: Option<Millis>,
}

/// An account's receiving URL with its secrets, filter, headers and policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Endpoint {
    pub id: String,
    pub account_id: String,
    pub url: String,
    pub description: String,
    pub event_types: Vec<String>,
    pub headers: BTreeMap<String, String>,
    pub retry_policy: String,
    pub signature: SignatureKind,
    pub state: EndpointState,
    pub verified: bool,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// Newest first. Never shown by any view. The stores keep them apart from the endpoint's
    /// other fields, so they never count toward its stored size (docs/api.md, `too_large`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<StoredSecret>,
    /// Ordered delivery per key (docs/delivery-contract.md); `None`: best effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering: Option<Ordering>,
    /// At most this many attempts per second to the endpoint (docs/delivery-contract.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// The client certificate herald presents (mutual TLS): what the endpoint object shows of
    /// it. The certificate and its key are kept apart, in the store's `client_certs` tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<ClientCertificate>,
    /// The payload filter (docs/api.md, "Payload filters"); `None` takes every event its
    /// `event_types` take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// The name the Svix-compatible API knows the endpoint by, unique within its account
    /// (docs/svix.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Free text by name, kept for the caller (docs/svix.md).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The channels it takes; empty: every event its types take (docs/api.md, "Channels").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<String>,
    #[serde(default, skip_serializing_if = "SignatureHeaders::is_webhook")]
    pub signature_headers: SignatureHeaders,
    /// Each request carries `traceparent` and `tracestate`, its attempt's span as the parent
    /// (docs/operations.md, "Traces"). Off by default: it shows the producer's trace ids to the
    /// receiver.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub propagate_trace: bool,
}

/// An endpoint's ordering: deliveries with the same key go one at a time, in commit order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ordering {
    /// The top-level payload field whose value is the key; `None`: the whole endpoint is one
    /// sequence.
    pub key: Option<String>,
}

/// An endpoint's rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateLimit {
    /// Attempts per second (fractions allowed); bursts up to `max(1, ceil(per_second))`.
    pub per_second: f64,
}

impl RateLimit {
    pub fn burst(&self) -> f64 {
        self.per_second.ceil().max(1.0)
    }
}

/// What the endpoint object shows of its client certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCertificate {
    pub subject: String,
    pub not_after: Millis,
    /// SHA-256 of the end-entity certificate (hex): names the stored pair, so a changed one is
    /// noticed. Not shown.
    #[serde(default)]
    pub sha256: String,
}

impl Endpoint {
    /// Makes `value` the current secret at `now`: the secrets signing until later than
    /// `now + grace_ms` (the current one among them) sign until then, those past it go (all of
    /// them at a grace of 0), and at most [`MAX_SECRETS`] sign at once (the oldest go first:
    /// each adds a signature to every request).
    pub fn rotate_secret(&mut self, value: String, now: Millis, grace_ms: Millis) {
        for s in &mut self.secrets {
            if s.expires_at.is_none_or(|t| t > now + grace_ms) {
                s.expires_at = Some(now + grace_ms);
            }
        }
        self.secrets
            .retain(|s| s.expires_at.is_none_or(|t| t > now));
        self.secrets.insert(
            0,
            StoredSecret {
                value,
                expires_at: None,
            },
        );
        self.secrets.truncate(MAX_SECRETS);
        self.updated_at = now;
    }

    /// The secrets that sign at `now`: the current one and any rotated-out one still in grace.
    pub fn signing_secrets(&self, now: Millis) -> impl Iterator<Item = &str> {
        self.secrets
            .iter()
            .filter(move |s| s.expires_at.is_none_or(|t| t > now))
            .map(|s| s.value.as_str())
    }

    /// The endpoint object (docs/api.md): no secret, header values as configured. An ed25519
    /// endpoint also shows its current public key (which is not a secret).
    pub fn view(&self) -> Value {
        let mut v = json!({
            "id": self.id,
            "account_id": self.account_id,
            "url": self.url,
            "description": self.description,
            "event_types": self.event_types,
            "headers": self.headers,
            "retry_policy": self.retry_policy,
            "signature": self.signature,
            "state": self.state,
            "verified": self.verified,
            "ordering": self.ordering,
            "rate_limit": self.rate_limit,
            "filter": self.filter,
            "uid": self.uid,
            "metadata": self.metadata,
            "channels": self.channels,
            "signature_headers": self.signature_headers,
            "propagate_trace": self.propagate_trace,
            "client_certificate": self.client_certificate.as_ref().map(|c| json!({
                "subject": c.subject,
                "not_after": rfc3339(c.not_after),
            })),
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
        });
        if self.signature == SignatureKind::Ed25519 {
            v["public_key"] = json!(self
                .secrets
                .first()
                .and_then(|s| crate::signing::public_key_of(&s.value)));
        }
        v
    }
}

/// `interaction.*` matches `interaction.review` (and deeper types); `*` matches all.
pub fn type_matches(pattern: &str, event_type: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => event_type.starts_with(prefix),
        None => pattern == event_type,
    }
}

/// An event as stored, without its payload (kept beside it, byte for byte).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventMeta {
    pub id: String,
    pub account_id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub received_at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_key: Option<String>,
    /// The ingest request's `ordering_key` (docs/delivery-contract.md), which overrides an ordered
    /// endpoint's payload field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<String>,
    /// The channels the event was sent on (docs/api.md, "Channels").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<String>,
    /// The tags it was given (docs/svix.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The `idempotency-key` of the request that created it through the Svix-compatible API
    /// (docs/svix.md): a repeat of that request within 24 hours is answered with this event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_key: Option<String>,
    /// The trace context of the request that created it (docs/operations.md, "Traces"): the
    /// ingest span every attempt's span is a child of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::TraceContext>,
    /// The deliveries made at ingest, in fan-out order.
    pub deliveries: Vec<String>,
}

/// One event to one endpoint (or, for `no_endpoint` records, to none).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    pub id: String,
    pub event_id: String,
    pub endpoint_id: Option<String>,
    pub account_id: String,
    pub event_type: String,
    pub state: DeliveryState,
    pub last_status: Option<Status>,
    /// The HTTP status of the last attempt, if it got one.
    #[serde(default)]
    pub last_http_status: Option<u16>,
    pub attempt_count: u32,
    pub next_attempt_at: Option<Millis>,
    pub created_at: Millis,
    /// A manual retry: one attempt, no automatic schedule after it.
    #[serde(default)]
    pub manual: bool,
    /// It waits in the store's pending tree (for a retry, a manual retry or a debounce window's
    /// end); a pending delivery that does not is *fresh*: due since ingest, never attempted.
    #[serde(default)]
    pub queued: bool,
}

impl Delivery {
    /// Due since ingest and never attempted: its first attempt is still to come.
    pub fn is_fresh(&self) -> bool {
        self.state == DeliveryState::Pending && !self.queued && self.attempt_count == 0
    }
}

impl Delivery {
    pub fn view(&self) -> Value {
        json!({
            "id": self.id,
            "event_id": self.event_id,
            "endpoint_id": self.endpoint_id,
            "account_id": self.account_id,
            "event_type": self.event_type,
            "state": self.state,
            "last_status": self.last_status,
            "last_http_status": self.last_http_status,
            "attempt_count": self.attempt_count,
            "next_attempt_at": self.next_attempt_at.map(rfc3339),
            "created_at": rfc3339(self.created_at),
        })
    }
}

/// One decision or one HTTP request for a delivery.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    pub id: String,
    pub number: u32,
    pub at: Millis,
    pub duration_ms: u64,
    pub status: Status,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub request_headers: Vec<(String, String)>,
    pub response_body: String,
    /// The response's headers as kept (at most 32 names and 4 KiB; a name's values joined by
    /// `, `); empty without a response, and for attempts recorded before herald kept them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub response_headers: Vec<(String, String)>,
    /// The URL the request went to; `None` for a decision without a request, and for attempts
    /// recorded before herald kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Made by a manual retry (docs/svix.md, `triggerType`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manual: bool,
}

impl Attempt {
    pub fn view(&self) -> Value {
        let headers: serde_json::Map<String, Value> = self
            .request_headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        json!({
            "id": self.id,
            "number": self.number,
            "at": rfc3339(self.at),
            "duration_ms": self.duration_ms,
            "status": self.status,
            "http_status": self.http_status,
            "error": self.error,
            "request_headers": headers,
            "response_body": self.response_body,
            "response_headers": self
                .response_headers
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect::<serde_json::Map<String, Value>>(),
            "url": self.url,
            "manual": self.manual,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_strings_are_the_contract() {
        let names: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "not_entitled",
                "no_endpoint",
                "unverified",
                "paused",
                "disabled",
                "rate_limited",
                "debounced",
                "blocked",
                "delivered",
                "http_error",
                "timeout",
                "connection_error",
                "tls_error"
            ]
        );
        for s in Status::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn type_patterns_match_exact_and_prefix() {
        assert!(type_matches("interaction.review", "interaction.review"));
        assert!(!type_matches("interaction.review", "interaction.reviews"));
        assert!(type_matches("interaction.*", "interaction.review"));
        assert!(!type_matches("interaction.*", "profile.updated"));
        assert!(type_matches("*", "anything"));
    }
}

/// An account as the Svix-compatible API shows it, an *application* (docs/svix.md): what it adds
/// to herald's account. An account herald's own API made has none until that API changes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Application {
    pub id: String,
    pub name: String,
    /// The `uid` it was created with (its id then), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Attempts per second its endpoints made through that API take when they set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<u32>,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A portal session (docs/api.md): one account's routes for a customer, until it expires or is
/// revoked. Its token is stored only as a hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortalSession {
    pub id: String,
    pub account_id: String,
    pub read_only: bool,
    pub created_at: Millis,
    pub expires_at: Millis,
}

impl PortalSession {
    pub fn view(&self) -> Value {
        json!({
            "id": self.id,
            "account_id": self.account_id,
            "read_only": self.read_only,
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.expires_at),
        })
    }
}
