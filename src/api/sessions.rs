//! Portal sessions (docs/api.md): an admin mints a link for one account's customer; the portal
//! page uses its token for that account's routes until it expires or is revoked. Tokens are
//! returned once and stored only as a hash.

use std::sync::Arc;

use base64::Engine as _;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use rand::RngCore;
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{self, discard_body};
use super::error::ApiError;
use super::routes::Role;
use super::{json, no_content, validate, AppState, Resp};
use crate::ids;
use crate::model::PortalSession;
use crate::store::prelude::*;
use crate::store::token_hash;

/// Every portal session token starts with this (so herald knows to look it up).
pub const PORTAL_TOKEN_PREFIX: &str = "hps_";
pub const SESSION: &str = "ps_";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    ttl: Option<Value>,
    read_only: Option<Value>,
}

/// `POST /v1/accounts/{account_id}/portal-sessions` `{"ttl"?, "read_only"?}`.
pub async fn create(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    account_id: &str,
) -> Result<Resp, ApiError> {
    validate::account_id_str("account_id", account_id)?;
    let b: CreateBody = body::parse_optional(req, state.config.server.max_body_bytes).await?;
    let max = state.config.portal.max_session_ttl.0;
    let ttl = match &b.ttl {
        None | Some(Value::Null) => state.config.portal.session_ttl.0,
        Some(Value::String(s)) => {
            let d = humantime::parse_duration(s.trim()).map_err(|_| {
                ApiError::field("ttl", "ttl must be a duration such as \"1h\" or \"7d\"")
            })?;
            if d < std::time::Duration::from_secs(1) || d > max {
                return Err(ApiError::field(
                    "ttl",
                    format!(
                        "ttl must be between \"1s\" and portal.max_session_ttl ({})",
                        humantime::format_duration(max)
                    ),
                ));
            }
            d
        }
        Some(_) => {
            return Err(ApiError::field(
                "ttl",
                "ttl must be a string such as \"1h\"",
            ))
        }
    };
    let read_only = match &b.read_only {
        None | Some(Value::Null) => false,
        Some(Value::Bool(v)) => *v,
        Some(_) => {
            return Err(ApiError::field(
                "read_only",
                "read_only must be true or false",
            ))
        }
    };
    let (session, token) = mint(state, account_id, read_only, ttl).await?;
    let mut v = session.view();
    v["url"] = json!(portal_link(state, &token));
    v["token"] = json!(token);
    Ok(json(StatusCode::CREATED, &v))
}

/// Mints a session of the account for `ttl` and stores it (its token only hashed): the
/// session and its token, which only this answer ever holds.
pub(super) async fn mint(
    state: &AppState,
    account_id: &str,
    read_only: bool,
    ttl: std::time::Duration,
) -> Result<(PortalSession, String), ApiError> {
    let now = state.clock.now_ms();
    let mut raw = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut raw);
    let token = format!(
        "{PORTAL_TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
    );
    let session = PortalSession {
        id: ids::new_id(SESSION, now),
        account_id: account_id.to_string(),
        read_only,
        created_at: now,
        expires_at: now.saturating_add(ttl.as_millis() as i64),
    };
    state
        .store
        .create_portal_session(&session, token_hash(&token))
        .await?;
    tracing::info!(session_id = %session.id, account_id, read_only, "portal session minted");
    Ok((session, token))
}

/// The portal's link for a session token.
pub(super) fn portal_link(state: &AppState, token: &str) -> String {
    format!("{}/portal#token={token}", state.public_url)
}

/// `DELETE /v1/portal-sessions/{id}`: revoked at once.
pub async fn delete(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    id: &str,
) -> Result<Resp, ApiError> {
    discard_body(req).await;
    if !state.store.revoke_portal_session(id).await? {
        return Err(ApiError::not_found("portal session"));
    }
    tracing::info!(session_id = %id, "portal session revoked");
    Ok(no_content())
}

/// `GET /v1/session`: what the caller's credential is (the pages start here), the portal's
/// brand and whether it has a logo (`/assets/logo`), and whether endpoints must be verified
/// before they receive anything (`endpoints.require_verification`).
pub fn whoami(state: &AppState, role: Option<&Role>) -> Resp {
    let mut v = match role {
        Some(Role::Admin) => json!({"role": "admin"}),
        Some(Role::Ingest) => json!({"role": "ingest"}),
        Some(Role::Portal(s)) => {
            let mut v = s.view();
            v["role"] = json!("portal");
            v
        }
        None => json!({"role": null}),
    };
    v["brand"] = json!(state.look.brand);
    v["logo"] = json!(state.look.logo.is_some());
    v["require_verification"] = json!(state.config.endpoints.require_verification);
    json(StatusCode::OK, &v)
}
