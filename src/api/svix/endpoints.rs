//! Endpoints through the Svix-compatible API: created with `signature_headers` set to
//! `webhook+svix`, so receivers written for Svix keep verifying (docs/svix.md).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Map, Value};

use super::apps::{self, MAX_UID};
use super::{list_of, object_body, ok, shapes, Answer, Caller, Query, SvixError};
use crate::api::{validate, AppState};
use crate::ids::{self, ENDPOINT};
use crate::model::{Endpoint, EndpointState, RateLimit, SignatureHeaders, SignatureKind};
use crate::outbound::request::mentions_secret;
use crate::signing as sign;
use crate::store::prelude::*;

const MAX_DESCRIPTION: usize = 1024;
const MAX_EVENT_TYPES: usize = 100;
/// Channels of an endpoint or a message at most, each of at most [`MAX_CHANNEL`] characters.
pub(super) const MAX_CHANNELS: usize = 10;
pub(super) const MAX_CHANNEL: usize = 128;
/// The longest grace a rotation may give the old secret (7 days).
const MAX_GRACE_SECONDS: u64 = 604_800;

/// The endpoint an id or `uid` names within the account.
pub(super) fn find(state: &AppState, account: &str, ep: &str) -> Result<Arc<Endpoint>, SvixError> {
    state
        .store
        .account_endpoints(account)
        .into_iter()
        .find(|e| e.id == ep || e.uid.as_deref() == Some(ep))
        .ok_or_else(|| SvixError::not_found("endpoint"))
}

/// The caller's application (it must exist) and account id.
async fn account(
    state: &AppState,
    caller: &Caller,
    app: &str,
    reads: bool,
) -> Result<String, SvixError> {
    caller.reaches(app, reads)?;
    Ok(apps::find(state, app).await?.id)
}

/// A list of strings (`eventTypes`, `channels`), each checked by `check`.
pub(super) fn strings(
    field: &str,
    v: &Value,
    max: usize,
    check: impl Fn(&str, &str) -> Result<(), SvixError>,
) -> Result<Vec<String>, SvixError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) if items.len() <= max => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let f = format!("{field}.{i}");
                match item {
                    Value::String(s) => check(&f, s).map(|()| s.clone()),
                    _ => Err(SvixError::field(
                        &f,
                        "type_error",
                        format!("{field} holds strings"),
                    )),
                }
            })
            .collect(),
        _ => Err(SvixError::field(
            field,
            "type_error",
            format!("{field} must be a list of at most {max} strings"),
        )),
    }
}

pub(super) fn channel(field: &str, s: &str) -> Result<(), SvixError> {
    let ok = !s.is_empty()
        && s.chars().count() <= MAX_CHANNEL
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:+/#\\".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(SvixError::field(
            field,
            "value_error",
            format!("{field} must be 1 to {MAX_CHANNEL} letters, digits or - _ . : + / # \\"),
        ))
    }
}

/// A secret as Svix reads one: `whsec_` + base64, or bare base64, of 24 to 64 bytes; stored as
/// `whsec_` + base64.
fn secret_in(field: &str, v: &Value) -> Result<Option<String>, SvixError> {
    let s = match v {
        Value::Null => return Ok(None),
        Value::String(s) => s,
        _ => {
            return Err(SvixError::field(
                field,
                "type_error",
                format!("{field} must be a string"),
            ))
        }
    };
    let b64 = s.strip_prefix(sign::SECRET_PREFIX).unwrap_or(s);
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64));
    match bytes {
        Ok(k) if (24..=64).contains(&k.len()) => Ok(Some(format!(
            "{}{}",
            sign::SECRET_PREFIX,
            base64::engine::general_purpose::STANDARD.encode(k)
        ))),
        _ => Err(SvixError::field(
            field,
            "value_error",
            format!("{field} must be whsec_ followed by the base64 of 24 to 64 bytes"),
        )),
    }
}

/// Applies `EndpointIn`/`EndpointUpdate`/`EndpointPatch` fields (the 1.x names too) to `ep`.
fn apply(
    state: &AppState,
    ep: &mut Endpoint,
    m: &Map<String, Value>,
    app_rate: Option<u32>,
    creating: bool,
) -> Result<(), SvixError> {
    if let Some(v) = m.get("url") {
        let url = crate::api::endpoints::url(state, v)?;
        if url != ep.url {
            ep.url = url;
            ep.verified = !state.config.endpoints.require_verification;
        }
    } else if creating {
        return Err(SvixError::field(
            "url",
            "value_error.missing",
            "url is required",
        ));
    }
    if let Some(v) = m.get("description") {
        ep.description = match v {
            Value::Null => String::new(),
            _ => validate::bounded_string("description", v, MAX_DESCRIPTION)?,
        };
    }
    for name in ["eventTypes", "filterTypes"] {
        if let Some(v) = m.get(name) {
            ep.event_types = strings(name, v, MAX_EVENT_TYPES, |f, s| {
                validate::type_pattern(f, s).map_err(SvixError::from)
            })?;
        }
    }
    if let Some(v) = m.get("channels") {
        ep.channels = strings("channels", v, MAX_CHANNELS, channel)?;
    }
    if let Some(v) = m.get("metadata") {
        ep.metadata = apps::metadata(v)?;
    }
    if let Some(v) = m.get("uid") {
        ep.uid = uid(v)?;
    }
    if let Some(v) = m.get("disabled") {
        ep.state = match v {
            Value::Bool(true) => EndpointState::Paused,
            Value::Bool(false) | Value::Null => EndpointState::Active,
            _ => {
                return Err(SvixError::field(
                    "disabled",
                    "type_error",
                    "disabled must be a boolean",
                ))
            }
        };
    }
    rate_limit(ep, m, app_rate, creating)?;
    if let Some(v) = m.get("headers") {
        if !v.is_null() {
            ep.headers = crate::api::endpoints::headers(v)?;
        }
    }
    Ok(())
}

/// An endpoint's `uid`: letters, digits or `-_.`, never an endpoint id (null clears it).
fn uid(v: &Value) -> Result<Option<String>, SvixError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s)
            if !s.is_empty()
                && s.len() <= MAX_UID
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && ids::parse(ENDPOINT, s).is_none() =>
        {
            Ok(Some(s.clone()))
        }
        _ => Err(SvixError::field(
            "uid",
            "value_error",
            format!(
                "uid must be 1 to {MAX_UID} letters, digits or - _ . and not look like \
                     an endpoint id"
            ),
        )),
    }
}

/// `throttleRate` (or 1.x `rateLimit`): attempts a second, 1 to 100000 (null: none); an
/// endpoint created without one takes its application's.
fn rate_limit(
    ep: &mut Endpoint,
    m: &Map<String, Value>,
    app_rate: Option<u32>,
    creating: bool,
) -> Result<(), SvixError> {
    let mut rate_given = false;
    for name in ["throttleRate", "rateLimit"] {
        if let Some(v) = m.get(name) {
            rate_given = true;
            ep.rate_limit = match v {
                Value::Null => None,
                Value::Number(n) => match n.as_u64() {
                    Some(r) if (1..=100_000).contains(&r) => Some(RateLimit {
                        per_second: r as f64,
                    }),
                    _ => {
                        return Err(SvixError::field(
                            name,
                            "value_error",
                            format!("{name} must be an integer from 1 to 100000"),
                        ))
                    }
                },
                _ => {
                    return Err(SvixError::field(
                        name,
                        "type_error",
                        format!("{name} must be an integer"),
                    ))
                }
            };
        }
    }
    if creating && !rate_given {
        ep.rate_limit = app_rate.map(|r| RateLimit {
            per_second: f64::from(r),
        });
    }
    Ok(())
}

/// A `uid` is unique within the account.
fn uid_free(state: &AppState, account: &str, ep: &Endpoint) -> Result<(), SvixError> {
    let Some(uid) = &ep.uid else {
        return Ok(());
    };
    let taken = state
        .store
        .account_endpoints(account)
        .iter()
        .any(|e| e.id != ep.id && e.uid.as_deref() == Some(uid));
    if taken {
        return Err(SvixError::conflict(format!(
            "an endpoint with uid {uid:?} exists already in this application"
        )));
    }
    Ok(())
}

pub async fn list(state: &Arc<AppState>, caller: &Caller, app: &str, q: &Query) -> Answer {
    let account = account(state, caller, app, true).await?;
    let limit = q.limit()?;
    let descending = q.descending(true)?;
    let mut eps = state.store.account_endpoints(&account);
    if descending {
        eps.reverse();
    }
    let after = q.get("iterator");
    let (page, next) = super::page_after(&eps, |e| e.id.as_str(), after, descending, limit);
    let data = page.iter().map(|e| shapes::endpoint(e)).collect();
    ok(
        StatusCode::OK,
        &list_of(data, next, after.map(str::to_string)),
    )
}

pub async fn create(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
) -> Answer {
    let account = account(state, caller, app, false).await?;
    let m = object_body(state, req, false).await?;
    let (ep, _) = create_in(state, caller, &account, &m, None).await?;
    ok(StatusCode::CREATED, &shapes::endpoint(&ep))
}

/// Creates an endpoint of `account` from `m`; `uid` given by a `PUT`'s path.
async fn create_in(
    state: &AppState,
    caller: &Caller,
    account: &str,
    m: &Map<String, Value>,
    uid: Option<&str>,
) -> Result<(Arc<Endpoint>, String), SvixError> {
    if caller.session_account().is_some() && m.get("secret").is_some_and(|v| !v.is_null()) {
        return Err(SvixError::forbidden(
            "a portal session cannot set an endpoint's secret",
        ));
    }
    let app_rate = state
        .store
        .application(account)
        .await?
        .and_then(|a| a.rate_limit);
    let secret = match m.get("secret") {
        Some(v) => secret_in("secret", v)?,
        None => None,
    }
    .unwrap_or_else(sign::new_secret);
    let now = state.clock.now_ms();
    let mut ep = crate::api::endpoints::new_endpoint(
        state,
        account,
        String::new(),
        SignatureKind::Hmac,
        &secret,
        now,
    );
    ep.uid = uid.map(str::to_string);
    ep.signature_headers = SignatureHeaders::WebhookAndSvix;
    apply(state, &mut ep, m, app_rate, true)?;
    if caller.session_account().is_some() && ep.headers.values().any(|v| mentions_secret(v)) {
        return Err(SvixError::forbidden(
            "a header that uses an account secret can be set only by the platform's operator",
        ));
    }
    uid_free(state, account, &ep)?;
    let max = state.config.endpoints.max_per_account;
    let Some(ep) = state.store.create_endpoint(ep, max).await? else {
        return Err(SvixError::conflict(format!(
            "application {account} already has {max} endpoints (endpoints.max_per_account)"
        )));
    };
    tracing::info!(endpoint_id = %ep.id, account_id = %ep.account_id, "endpoint created (svix)");
    Ok((ep, secret))
}

pub async fn get(state: &Arc<AppState>, caller: &Caller, app: &str, ep: &str) -> Answer {
    let account = account(state, caller, app, true).await?;
    let found = find(state, &account, ep)?;
    ok(StatusCode::OK, &shapes::endpoint(&found))
}

/// Changes the endpoint with `f` against its stored state; `404` if it went meanwhile.
async fn change(
    state: &AppState,
    id: &str,
    f: impl FnMut(&mut Endpoint) -> Result<bool, SvixError> + Send,
) -> Result<Arc<Endpoint>, SvixError> {
    let changed = state.store.change_endpoint(id, f).await?;
    Ok(changed.ok_or_else(|| SvixError::not_found("endpoint"))?.0)
}

/// `PUT`: replaces the endpoint's fields (`EndpointUpdate`), or creates it with the path as
/// its `uid`.
pub async fn put(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
    ep: &str,
) -> Answer {
    let account = account(state, caller, app, false).await?;
    let m = object_body(state, req, false).await?;
    let Ok(found) = find(state, &account, ep) else {
        let (created, _) = create_in(state, caller, &account, &m, Some(ep)).await?;
        return ok(StatusCode::CREATED, &shapes::endpoint(&created));
    };
    let now = state.clock.now_ms();
    let session = caller.session_account().is_some();
    let updated = change(state, &found.id, |e| {
        let stored_headers = e.headers.clone();
        // Fields an update leaves out go back to their defaults, as Svix's PUT does.
        e.description.clear();
        e.event_types.clear();
        e.channels.clear();
        e.metadata.clear();
        e.state = EndpointState::Active;
        e.rate_limit = None;
        apply(state, e, &m, None, false)?;
        if m.get("url").is_none() {
            return Err(SvixError::field(
                "url",
                "value_error.missing",
                "url is required",
            ));
        }
        if session && e.headers != stored_headers {
            return Err(SvixError::forbidden(
                "a portal session cannot set headers here",
            ));
        }
        e.updated_at = now;
        Ok(true)
    })
    .await?;
    uid_free(state, &account, &updated)?;
    ok(StatusCode::OK, &shapes::endpoint(&updated))
}

pub async fn patch(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
    ep: &str,
) -> Answer {
    let account = account(state, caller, app, false).await?;
    let found = find(state, &account, ep)?;
    let m = object_body(state, req, true).await?;
    if let Some(Value::String(uid)) = m.get("uid") {
        let clash = state
            .store
            .account_endpoints(&account)
            .iter()
            .any(|e| e.id != found.id && e.uid.as_deref() == Some(uid));
        if clash {
            return Err(SvixError::conflict(format!(
                "an endpoint with uid {uid:?} exists already in this application"
            )));
        }
    }
    if m.contains_key("headers") {
        return Err(SvixError::field(
            "headers",
            "value_error",
            "headers are patched at …/endpoint/{id}/headers",
        ));
    }
    let now = state.clock.now_ms();
    let updated = change(state, &found.id, |e| {
        apply(state, e, &m, None, false)?;
        e.updated_at = now;
        Ok(true)
    })
    .await?;
    ok(StatusCode::OK, &shapes::endpoint(&updated))
}

pub async fn delete(state: &Arc<AppState>, caller: &Caller, app: &str, ep: &str) -> Answer {
    let account = account(state, caller, app, false).await?;
    let found = find(state, &account, ep)?;
    if !state.store.delete_endpoint(&found.id).await? {
        return Err(SvixError::not_found("endpoint"));
    }
    state
        .store
        .expedite_endpoint(&found.id, state.clock.now_ms())
        .await?;
    tracing::info!(endpoint_id = %found.id, "endpoint deleted (svix)");
    super::empty(StatusCode::NO_CONTENT)
}

/// `GET …/secret`: the current secret (admin tokens only: a portal session never sees one).
pub async fn secret(state: &Arc<AppState>, caller: &Caller, app: &str, ep: &str) -> Answer {
    caller.admin()?;
    let account = account(state, caller, app, true).await?;
    let found = find(state, &account, ep)?;
    let key = found
        .secrets
        .first()
        .map(|s| s.value.clone())
        .unwrap_or_default();
    ok(StatusCode::OK, &json!({ "key": key }))
}

/// `POST …/secret/rotate`: `key` (else a new one) signs from now; the old one beside it for
/// `gracePeriodSeconds` (default `signing.rotation_grace`; 0 ends it at once). Admin only.
pub async fn rotate(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
    ep: &str,
) -> Answer {
    caller.admin()?;
    let account = account(state, caller, app, false).await?;
    let found = find(state, &account, ep)?;
    let m = object_body(state, req, true).await?;
    let new = match m.get("key") {
        Some(v) => secret_in("key", v)?,
        None => None,
    }
    .unwrap_or_else(sign::new_secret);
    let grace_ms = match m.get("gracePeriodSeconds") {
        None | Some(Value::Null) => state.config.signing.rotation_grace.0.as_millis() as i64,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(s) if s <= MAX_GRACE_SECONDS => (s * 1000) as i64,
            _ => {
                return Err(SvixError::field(
                    "gracePeriodSeconds",
                    "value_error",
                    format!("gracePeriodSeconds must be an integer from 0 to {MAX_GRACE_SECONDS}"),
                ))
            }
        },
        Some(_) => {
            return Err(SvixError::field(
                "gracePeriodSeconds",
                "type_error",
                "gracePeriodSeconds must be an integer",
            ))
        }
    };
    let now = state.clock.now_ms();
    let value = new.clone();
    change(state, &found.id, move |e| {
        e.rotate_secret(value.clone(), now, grace_ms);
        Ok(true)
    })
    .await?;
    tracing::info!(endpoint_id = %found.id, "endpoint secret rotated (svix)");
    ok(StatusCode::OK, &json!({ "key": new }))
}

/// `GET`, `PUT` and `PATCH …/headers`.
pub async fn headers(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    method: &Method,
    app: &str,
    ep: &str,
) -> Answer {
    let reads = method == Method::GET;
    let account = account(state, caller, app, reads).await?;
    let found = find(state, &account, ep)?;
    if reads {
        crate::api::body::discard_body(req).await;
        return ok(StatusCode::OK, &headers_out(&found));
    }
    let m = object_body(state, req, false).await?;
    let given = match m.get("headers") {
        Some(v) => crate::api::endpoints::headers(v)?,
        None => {
            return Err(SvixError::field(
                "headers",
                "value_error.missing",
                "headers is required",
            ))
        }
    };
    let delete = match m.get("deleteHeaders") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) if method == Method::PATCH => strings("deleteHeaders", v, 64, |_, _| Ok(()))?,
        Some(_) => {
            return Err(SvixError::field(
                "deleteHeaders",
                "value_error",
                "deleteHeaders is taken by PATCH only",
            ))
        }
    };
    let session = caller.session_account().is_some();
    let patching = method == Method::PATCH;
    let now = state.clock.now_ms();
    change(state, &found.id, |e| {
        let mut next = if patching {
            e.headers.clone()
        } else {
            BTreeMap::new()
        };
        for name in &delete {
            next.remove(&name.to_ascii_lowercase());
        }
        next.extend(given.clone());
        if session {
            let adds_secret = next
                .iter()
                .any(|(k, v)| mentions_secret(v) && e.headers.get(k) != Some(v));
            if adds_secret {
                return Err(SvixError::forbidden(
                    "a header that uses an account secret can be set only by the platform's operator",
                ));
            }
        }
        let total: usize = next.iter().map(|(k, v)| k.len() + v.len()).sum();
        if next.len() > 32 || total > 4096 {
            return Err(SvixError::field(
                "headers",
                "value_error",
                "an endpoint takes at most 32 headers and 4096 bytes of names and values",
            ));
        }
        e.headers = next;
        e.updated_at = now;
        Ok(true)
    })
    .await?;
    super::empty(StatusCode::NO_CONTENT)
}

fn headers_out(ep: &Endpoint) -> Value {
    let sensitive: Vec<&String> = ep
        .headers
        .iter()
        .filter(|(_, v)| mentions_secret(v))
        .map(|(k, _)| k)
        .collect();
    json!({"headers": ep.headers, "sensitive": sensitive})
}
