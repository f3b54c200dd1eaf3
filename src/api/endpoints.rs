//! Endpoints: create (the secret is shown in this answer only), list, get, patch, delete, pause
//! and resume. Views never carry a secret.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{self, discard_body, read_json_body};
use super::error::ApiError;
use super::{json, no_content, validate, AppState, Resp, Scope};
use crate::clock::rfc3339;
use crate::engine::health::Health;
use crate::filter::Filter;
use crate::ids::{self, ENDPOINT};
use crate::model::{
    Endpoint, EndpointState, Ordering, RateLimit, SignatureHeaders, SignatureKind, StoredSecret,
};
use crate::outbound::request::mentions_secret;
use crate::policy::url::check_endpoint_url;
use crate::signing as sign;
use crate::store::prelude::*;

const MAX_DESCRIPTION: usize = 1024;
const MAX_EVENT_TYPES: usize = 100;
const MAX_HEADERS: usize = 32;
const MAX_HEADER_VALUE: usize = 4096;
/// Custom headers' names and values together: every attempt records them, and an attempt's
/// row has a bounded size (see `store::codec::MAX_ROW`).
const MAX_HEADERS_TOTAL: usize = 4096;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Fields {
    url: Option<Value>,
    description: Option<Value>,
    event_types: Option<Value>,
    headers: Option<Value>,
    retry_policy: Option<Value>,
    secret: Option<Value>,
    signature: Option<Value>,
    /// Absent and `null` differ for these three: `null` removes the setting.
    #[serde(default, deserialize_with = "body::present")]
    ordering: Option<Value>,
    #[serde(default, deserialize_with = "body::present")]
    rate_limit: Option<Value>,
    #[serde(default, deserialize_with = "body::present")]
    filter: Option<Value>,
    signature_headers: Option<Value>,
    propagate_trace: Option<Value>,
}

/// The most attempts per second a rate limit may allow (past it, no limit is wanted).
const MAX_RATE: f64 = 100_000.0;

pub async fn create(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    account_id: &str,
) -> Result<Resp, ApiError> {
    validate::account_id_str("account_id", account_id)?;
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let f: Fields = body::parse(&bytes)?;
    let url = match &f.url {
        Some(v) => url(state, v)?,
        None => return Err(ApiError::field("url", "url is required")),
    };
    let signature = match &f.signature {
        None | Some(Value::Null) => SignatureKind::Hmac,
        Some(Value::String(s)) if s == "hmac" => SignatureKind::Hmac,
        Some(Value::String(s)) if s == "ed25519" => SignatureKind::Ed25519,
        Some(_) => {
            return Err(ApiError::field(
                "signature",
                "signature must be \"hmac\" or \"ed25519\"",
            ))
        }
    };
    let secret = new_or_imported_secret(signature, &f.secret)?;
    let now = state.clock.now_ms();
    let mut ep = new_endpoint(state, account_id, url, signature, &secret, now);
    apply_common(state, &mut ep, &f)?;
    secret_macros_stay(scope, None, &ep)?;

    let max = state.config.endpoints.max_per_account;
    let Some(ep) = state.store.create_endpoint(ep, max).await? else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "too_many_endpoints",
            format!("account {account_id} already has {max} endpoints (endpoints.max_per_account)"),
        ));
    };
    tracing::info!(endpoint_id = %ep.id, account_id = %ep.account_id, "endpoint created");
    Ok(json(
        StatusCode::CREATED,
        &with_key(json!({"endpoint": ep.view()}), signature, &secret),
    ))
}

/// A new active endpoint of the account with its first secret and the install's default retry
/// policy; every other field at its default, for the caller's fields to fill.
pub(super) fn new_endpoint(
    state: &AppState,
    account_id: &str,
    url: String,
    signature: SignatureKind,
    secret: &str,
    now: crate::clock::Millis,
) -> Endpoint {
    Endpoint {
        id: ids::new_id(ENDPOINT, now),
        account_id: account_id.to_string(),
        url,
        description: String::new(),
        event_types: Vec::new(),
        headers: BTreeMap::new(),
        retry_policy: state.config.delivery.default_retry_policy.clone(),
        signature,
        state: EndpointState::Active,
        verified: false,
        created_at: now,
        updated_at: now,
        secrets: vec![StoredSecret {
            value: secret.to_string(),
            expires_at: None,
        }],
        ordering: None,
        rate_limit: None,
        client_certificate: None,
        filter: None,
        uid: None,
        metadata: BTreeMap::new(),
        channels: Vec::new(),
        signature_headers: SignatureHeaders::Webhook,
        propagate_trace: false,
    }
}

pub async fn list(state: &Arc<AppState>, account_id: &str) -> Result<Resp, ApiError> {
    validate::account_id_lookup("account_id", account_id)?;
    let mut items: Vec<Value> = Vec::new();
    for e in state.store.account_endpoints(account_id).iter().rev() {
        items.push(with_health(state, e).await?);
    }
    Ok(json(
        StatusCode::OK,
        &json!({"items": items, "next_cursor": null}),
    ))
}

/// The endpoint with its health: the circuit breaker, the last hour's success rate, the last
/// success and what is pending.
pub async fn get(state: &Arc<AppState>, scope: &Scope, id: &str) -> Result<Resp, ApiError> {
    let ep = find(state, scope, id)?;
    Ok(json(StatusCode::OK, &with_health(state, &ep).await?))
}

async fn with_health(state: &AppState, ep: &Endpoint) -> Result<Value, ApiError> {
    let mut v = ep.view();
    if let (Value::Object(v), Value::Object(h)) =
        (&mut v, health_view(&state.engine.health(&ep.id).await?))
    {
        v.extend(h);
    }
    Ok(v)
}

pub async fn patch(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    find(state, scope, id)?;
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let f: Fields = body::parse(&bytes)?;
    if f.secret.is_some() {
        return Err(ApiError::field(
            "secret",
            "secret cannot be patched; rotate it instead",
        ));
    }
    if f.signature.is_some() {
        return Err(ApiError::field(
            "signature",
            "signature is fixed when the endpoint is created",
        ));
    }
    let new_url = f.url.as_ref().map(|v| url(state, v)).transpose()?;
    let now = state.clock.now_ms();
    let changed = state
        .store
        .change_endpoint(id, |ep| {
            let stored = ep.clone();
            if let Some(url) = &new_url {
                if *url != ep.url {
                    ep.url = url.clone();
                    // A new URL is a new receiver: it has to prove itself again.
                    ep.verified = false;
                }
            }
            apply_common(state, ep, &f)?;
            // Checked against the endpoint as stored when the change applies, so no concurrent
            // change can slip a macro past it.
            secret_macros_stay(scope, Some(&stored), ep)?;
            ep.updated_at = now;
            Ok::<_, ApiError>(true)
        })
        .await?;
    let (ep, _) = changed.ok_or_else(|| ApiError::not_found("endpoint"))?;
    Ok(json(StatusCode::OK, &ep.view()))
}

pub async fn delete(state: &Arc<AppState>, scope: &Scope, id: &str) -> Result<Resp, ApiError> {
    find(state, scope, id)?;
    if !state.store.delete_endpoint(id).await? {
        return Err(ApiError::not_found("endpoint"));
    }
    // Its pending deliveries end now (recorded `no_endpoint`), not at their next retry time.
    let ended = state
        .store
        .expedite_endpoint(id, state.clock.now_ms())
        .await?;
    tracing::info!(endpoint_id = %id, pending_ended = ended, "endpoint deleted");
    Ok(no_content())
}

/// `pause` and `resume` (which also re-enables a disabled endpoint).
pub async fn set_state(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
    action: &str,
) -> Result<Resp, ApiError> {
    discard_body(req).await;
    find(state, scope, id)?;
    let now = state.clock.now_ms();
    let changed = state
        .store
        .change_endpoint(id, |ep| {
            ep.state = if action == "pause" {
                EndpointState::Paused
            } else {
                EndpointState::Active
            };
            ep.updated_at = now;
            Ok::<_, ApiError>(true)
        })
        .await?;
    let (ep, _) = changed.ok_or_else(|| ApiError::not_found("endpoint"))?;
    tracing::info!(endpoint_id = %id, state = ep.state.as_str(), "endpoint state changed");
    Ok(json(StatusCode::OK, &ep.view()))
}

/// An endpoint's health as the endpoint object and its stats show it: the breaker, the last
/// hour's success rate and attempts, the last success and what is pending.
pub fn health_view(h: &Health) -> Value {
    json!({
        "breaker": {
            "state": h.breaker.phase,
            "consecutive_failures": h.breaker.consecutive_failures,
            "next_probe_at": h.breaker.next_probe_at.map(rfc3339),
        },
        "success_rate_1h": h.last_hour.map(|(good, all)| f64::from(good) / f64::from(all)),
        "attempts_1h": h.last_hour.map_or(0, |(_, all)| all),
        "last_success_at": h.last_success_at.map(rfc3339),
        "pending": h.pending,
    })
}

/// The endpoint, if the scope reaches it (another account's is `404` to a portal session).
pub fn find(state: &AppState, scope: &Scope, id: &str) -> Result<Arc<Endpoint>, ApiError> {
    let ep = state
        .store
        .endpoint(id)
        .ok_or_else(|| ApiError::not_found("endpoint"))?;
    scope.check(&ep.account_id, "endpoint")?;
    Ok(ep)
}

/// A portal session may not send an account secret where it chooses (docs/api.md, "Custom
/// headers"): `403 secret_macro` when its change adds or changes a header value that mentions
/// `{{ secret.…}}`, or gives a new URL to an endpoint whose stored headers mention one. Values
/// sent unchanged pass, since the portal's Save sends every field. The admin token may do both.
fn secret_macros_stay(
    scope: &Scope,
    stored: Option<&Endpoint>,
    changed: &Endpoint,
) -> Result<(), ApiError> {
    if scope.account().is_none() {
        return Ok(());
    }
    let refuse = |field: String, message: &str| {
        Err(ApiError {
            field: Some(field),
            ..ApiError::new(StatusCode::FORBIDDEN, "secret_macro", message)
        })
    };
    for (name, value) in &changed.headers {
        let unchanged = stored.and_then(|ep| ep.headers.get(name)) == Some(value);
        if mentions_secret(value) && !unchanged {
            return refuse(
                format!("headers.{name}"),
                "a header that uses an account secret ({{ secret.… }}) can be added or changed \
                 only by the platform's operator",
            );
        }
    }
    if let Some(stored) = stored {
        if stored.url != changed.url && stored.headers.values().any(|v| mentions_secret(v)) {
            return refuse(
                "url".to_string(),
                "this endpoint sends an account secret in its headers, so only the platform's \
                 operator can change its URL",
            );
        }
    }
    Ok(())
}

pub(super) fn url(state: &AppState, v: &Value) -> Result<String, ApiError> {
    let Value::String(raw) = v else {
        return Err(ApiError::field("url", "url must be a string").because("invalid_url"));
    };
    if raw.len() > 2048 {
        return Err(
            ApiError::field("url", "url must be at most 2048 characters").because("too_long"),
        );
    }
    check_endpoint_url(raw, state.config.delivery.allow_http, &state.guard)
        .map(|u| u.to_string())
        .map_err(|p| ApiError::field("url", p.0).because(p.1))
}

/// An endpoint's `event_types`: at most [`MAX_EVENT_TYPES`] exact types, `prefix.*` patterns
/// or `*` (the filter test takes the same list).
pub(super) fn event_types(v: &Value) -> Result<Vec<String>, ApiError> {
    let Value::Array(items) = v else {
        return Err(ApiError::field(
            "event_types",
            "event_types must be a list of type patterns",
        ));
    };
    if items.len() > MAX_EVENT_TYPES {
        return Err(ApiError::field(
            "event_types",
            format!("event_types takes at most {MAX_EVENT_TYPES} patterns"),
        ));
    }
    let mut types = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let field = format!("event_types[{i}]");
        let Value::String(p) = item else {
            return Err(ApiError::field(&field, format!("{field} must be a string")));
        };
        validate::type_pattern(&field, p)?;
        types.push(p.clone());
    }
    Ok(types)
}

/// The fields create and patch share.
fn apply_common(state: &AppState, ep: &mut Endpoint, f: &Fields) -> Result<(), ApiError> {
    if let Some(v) = &f.description {
        ep.description = validate::bounded_string("description", v, MAX_DESCRIPTION)?;
    }
    if let Some(v) = &f.event_types {
        ep.event_types = event_types(v)?;
    }
    if let Some(v) = &f.headers {
        ep.headers = headers(v)?;
    }
    if let Some(v) = &f.ordering {
        ep.ordering = ordering(v)?;
    }
    if let Some(v) = &f.rate_limit {
        ep.rate_limit = rate_limit(v)?;
    }
    if let Some(v) = &f.filter {
        ep.filter = Filter::parse(v).map_err(|e| ApiError::field(&e.field, e.message))?;
    }
    if let Some(v) = &f.signature_headers {
        ep.signature_headers = match v.as_str() {
            Some("webhook") => SignatureHeaders::Webhook,
            Some("webhook+svix") => SignatureHeaders::WebhookAndSvix,
            _ => {
                return Err(ApiError::field(
                    "signature_headers",
                    "signature_headers must be \"webhook\" or \"webhook+svix\"",
                ))
            }
        };
    }
    if let Some(v) = &f.propagate_trace {
        ep.propagate_trace = v.as_bool().ok_or_else(|| {
            ApiError::field("propagate_trace", "propagate_trace must be true or false")
        })?;
    }
    if let Some(v) = &f.retry_policy {
        let Value::String(name) = v else {
            return Err(ApiError::field(
                "retry_policy",
                "retry_policy must be a string",
            ));
        };
        if !state.config.retry_policies.contains_key(name) {
            let known: Vec<&String> = state.config.retry_policies.keys().collect();
            return Err(ApiError::field(
                "retry_policy",
                format!("no retry policy named {name:?}; known: {known:?}"),
            ));
        }
        ep.retry_policy = name.clone();
    }
    Ok(())
}

/// `null`, or `{"key": "<top-level payload field>"}`, or `{"key": null}` (one sequence).
fn ordering(v: &Value) -> Result<Option<Ordering>, ApiError> {
    let bad = || {
        ApiError::field(
            "ordering",
            "ordering must be null, {\"key\": \"<top-level payload field>\"} or {\"key\": null}",
        )
    };
    match v {
        Value::Null => Ok(None),
        Value::Object(m) if m.len() == 1 => match m.get("key") {
            Some(Value::Null) => Ok(Some(Ordering { key: None })),
            Some(Value::String(k)) if !k.is_empty() && k.chars().count() <= 128 => {
                Ok(Some(Ordering {
                    key: Some(k.clone()),
                }))
            }
            Some(Value::String(_)) => Err(ApiError::field(
                "ordering.key",
                "ordering.key must be a field name of 1 to 128 characters, or null",
            )),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

/// `null`, or `{"per_second": N}` with 0 < N (fractions allowed).
fn rate_limit(v: &Value) -> Result<Option<RateLimit>, ApiError> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) if m.len() == 1 && m.contains_key("per_second") => {
            match m["per_second"].as_f64() {
                Some(n) if n > 0.0 && n <= MAX_RATE => Ok(Some(RateLimit { per_second: n })),
                _ => Err(ApiError::field(
                    "rate_limit.per_second",
                    format!(
                        "rate_limit.per_second must be a number above 0 and at most {MAX_RATE}"
                    ),
                )),
            }
        }
        _ => Err(ApiError::field(
            "rate_limit",
            "rate_limit must be null or {\"per_second\": N}",
        )),
    }
}

pub(super) fn headers(v: &Value) -> Result<BTreeMap<String, String>, ApiError> {
    let Value::Object(map) = v else {
        return Err(ApiError::field(
            "headers",
            "headers must be an object of header names to string values",
        ));
    };
    if map.len() > MAX_HEADERS {
        return Err(ApiError::field(
            "headers",
            format!("headers takes at most {MAX_HEADERS} entries"),
        ));
    }
    let mut out = BTreeMap::new();
    let mut total = 0;
    for (name, value) in map {
        let field = format!("headers.{name}");
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ApiError::field(
                &field,
                format!("{name:?} is not a valid header name"),
            ));
        }
        if validate::is_reserved_header(name) {
            return Err(ApiError::field(
                &field,
                format!("{name} is set by herald and cannot be a custom header"),
            ));
        }
        let Value::String(value) = value else {
            return Err(ApiError::field(&field, format!("{field} must be a string")));
        };
        if value.len() > MAX_HEADER_VALUE || HeaderValue::from_str(value).is_err() {
            return Err(ApiError::field(
                &field,
                format!("{field} must be printable text of at most {MAX_HEADER_VALUE} bytes"),
            ));
        }
        total += name.len() + value.len();
        if total > MAX_HEADERS_TOTAL {
            return Err(ApiError::field(
                "headers",
                format!(
                    "headers take at most {MAX_HEADERS_TOTAL} bytes, names and values together"
                ),
            ));
        }
        out.insert(name.to_ascii_lowercase(), value.clone());
    }
    Ok(out)
}

/// `POST /v1/endpoints/{id}/verify`: runs the handshake now; success sets `verified`.
pub async fn verify(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    discard_body(req).await;
    let ep = find(state, scope, id)?;
    let v = state.engine.verify(&ep).await;
    let ep = if v.verified {
        let now = state.clock.now_ms();
        let changed = state
            .store
            .change_endpoint(id, |current| {
                // The URL may have changed while the challenge was out: then this proof is not
                // for it.
                if current.url != ep.url || current.verified {
                    return Ok::<_, ApiError>(false);
                }
                current.verified = true;
                current.updated_at = now;
                Ok(true)
            })
            .await?;
        changed.ok_or_else(|| ApiError::not_found("endpoint"))?.0
    } else {
        ep
    };
    tracing::info!(endpoint_id = %id, verified = v.verified, "verification handshake");
    Ok(json(
        StatusCode::OK,
        &json!({
            "verified": v.verified && ep.verified,
            "reason": v.reason,
            "attempt": {
                "status": v.status,
                "http_status": v.http_status,
                "duration_ms": v.duration_ms,
                "response_body": v.response_body,
            },
            "endpoint": ep.view(),
        }),
    ))
}

/// `POST /v1/endpoints/{id}/secret/rotate` (optionally `{"secret": "whsec_..."}` to import one):
/// the new secret signs from now on; the previous one keeps signing beside it for
/// `signing.rotation_grace`, so receivers can switch without losing a request.
pub async fn rotate_secret(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    let f: Fields = body::parse_optional(req, state.config.server.max_body_bytes).await?;
    if f.url.is_some()
        || f.description.is_some()
        || f.event_types.is_some()
        || f.headers.is_some()
        || f.retry_policy.is_some()
        || f.signature.is_some()
        || f.ordering.is_some()
        || f.rate_limit.is_some()
        || f.filter.is_some()
        || f.signature_headers.is_some()
        || f.propagate_trace.is_some()
    {
        return Err(ApiError::field(
            "body",
            "rotate takes only an optional secret",
        ));
    }
    let signature = find(state, scope, id)?.signature;
    let secret = new_or_imported_secret(signature, &f.secret)?;
    let now = state.clock.now_ms();
    let grace = state.config.signing.rotation_grace.0.as_millis() as i64;
    let changed = state
        .store
        .change_endpoint(id, |ep| {
            ep.rotate_secret(secret.clone(), now, grace);
            Ok::<_, ApiError>(true)
        })
        .await?;
    changed.ok_or_else(|| ApiError::not_found("endpoint"))?;
    tracing::info!(endpoint_id = %id, "endpoint secret rotated");
    Ok(json(
        StatusCode::OK,
        &with_key(json!({}), signature, &secret),
    ))
}

/// A generated secret (`whsec_`, or a `whsk_` key for ed25519), or the imported one after
/// checking it fits the endpoint's signature kind.
fn new_or_imported_secret(kind: SignatureKind, v: &Option<Value>) -> Result<String, ApiError> {
    let asymmetric =
        |s: &str| s.starts_with(sign::SIGNING_KEY_PREFIX) || s.starts_with(sign::PUBLIC_KEY_PREFIX);
    match (kind, v) {
        (SignatureKind::Hmac, None | Some(Value::Null)) => Ok(sign::new_secret()),
        (SignatureKind::Ed25519, None | Some(Value::Null)) => Ok(sign::new_signing_key().0),
        (SignatureKind::Hmac, Some(Value::String(s)))
            if sign::secret_is_valid(s) && s.len() <= 256 && !asymmetric(s) =>
        {
            Ok(s.clone())
        }
        (SignatureKind::Ed25519, Some(Value::String(s))) if sign::public_key_of(s).is_some() => {
            Ok(s.clone())
        }
        (SignatureKind::Hmac, Some(_)) => Err(ApiError::field(
            "secret",
            "secret must be whsec_<base64> or a non-empty string of at most 256 characters",
        )),
        (SignatureKind::Ed25519, Some(_)) => Err(ApiError::field(
            "secret",
            "an ed25519 endpoint's secret must be whsk_<base64 of a 32-byte private key>",
        )),
    }
}

/// Adds what the receiver needs to the answer: the `secret` of an HMAC endpoint, or only the
/// `public_key` of an ed25519 one (herald keeps the private key).
fn with_key(mut v: Value, kind: SignatureKind, secret: &str) -> Value {
    match kind {
        SignatureKind::Hmac => v["secret"] = json!(secret),
        SignatureKind::Ed25519 => v["public_key"] = json!(sign::public_key_of(secret)),
    }
    v
}

/// The most a client certificate chain and its key may take (PEM text).
const MAX_CERTIFICATE: usize = 32 * 1024;
const MAX_PRIVATE_KEY: usize = 16 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CertificateFields {
    certificate: String,
    private_key: String,
}

/// `PUT /v1/endpoints/{id}/client-certificate`: sets the certificate herald presents to the
/// endpoint's TLS server (mutual TLS). Write-only: the answer is the endpoint, which shows the
/// subject and expiry; no answer, log line or error ever holds the key.
pub async fn put_client_certificate(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    find(state, scope, id)?;
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let f: CertificateFields = body::parse(&bytes)?;
    if f.certificate.len() > MAX_CERTIFICATE {
        return Err(ApiError::field(
            "certificate",
            format!("certificate is longer than {MAX_CERTIFICATE} bytes"),
        ));
    }
    if f.private_key.len() > MAX_PRIVATE_KEY {
        return Err(ApiError::field(
            "private_key",
            format!("private_key is longer than {MAX_PRIVATE_KEY} bytes"),
        ));
    }
    let now = state.clock.now_ms();
    let identity = crate::outbound::identity::parse(&f.certificate, &f.private_key, now)
        .map_err(|r| ApiError::field(r.field, r.message))?;
    let shown = identity.shown;
    let ep = state
        .store
        .set_client_certificate(id, Some((&f.certificate, &f.private_key, shown)), now)
        .await?
        .ok_or_else(|| ApiError::not_found("endpoint"))?;
    tracing::info!(endpoint_id = %id, "endpoint client certificate set");
    Ok(json(StatusCode::OK, &ep.view()))
}

/// `DELETE /v1/endpoints/{id}/client-certificate`: herald presents none to the endpoint any
/// more. Answers the endpoint (with `"client_certificate": null`), also when it had none.
pub async fn delete_client_certificate(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    discard_body(req).await;
    find(state, scope, id)?;
    let ep = state
        .store
        .set_client_certificate(id, None, state.clock.now_ms())
        .await?
        .ok_or_else(|| ApiError::not_found("endpoint"))?;
    tracing::info!(endpoint_id = %id, "endpoint client certificate removed");
    Ok(json(StatusCode::OK, &ep.view()))
}
