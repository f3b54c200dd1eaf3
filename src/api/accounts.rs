//! Accounts: sync a plan (`PUT`), and show the plan, its limits and this minute's and today's
//! usage (`GET`). Accounts are created on first use; one never seen has no plan.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{self, read_json_body};
use super::error::ApiError;
use super::{json, validate, AppState, Resp};
use crate::outbound::request;
use crate::policy::quota;
use crate::store::prelude::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanBody {
    /// Absent and `null` differ: absent is an error, `null` removes the plan.
    #[serde(default, deserialize_with = "present")]
    plan: Option<Value>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

pub async fn put(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    account_id: &str,
) -> Result<Resp, ApiError> {
    validate::account_id_str("account_id", account_id)?;
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let b: PlanBody = body::parse(&bytes)?;
    let plan = match b.plan {
        None => {
            return Err(ApiError::field(
                "plan",
                "plan is required (null removes the plan)",
            ))
        }
        Some(Value::Null) => None,
        Some(Value::String(name)) if state.config.plans.contains_key(&name) => Some(name),
        Some(Value::String(name)) => {
            let known: Vec<&String> = state.config.plans.keys().collect();
            return Err(ApiError::field(
                "plan",
                format!("no plan named {name:?} in the config; known: {known:?}"),
            ));
        }
        Some(_) => return Err(ApiError::field("plan", "plan must be a plan name or null")),
    };
    state.store.set_account_plan(account_id, plan).await?;
    view(state, account_id).await
}

pub async fn get(state: &Arc<AppState>, account_id: &str) -> Result<Resp, ApiError> {
    validate::account_id_lookup("account_id", account_id)?;
    Ok(json(StatusCode::OK, &account(state, account_id).await?))
}

/// `DELETE /v1/accounts/{account_id}`: the account and everything of it, gone for good
/// (docs/operations.md, "Purging an account").
pub async fn purge(state: &Arc<AppState>, account_id: &str) -> Result<Resp, ApiError> {
    validate::account_id_str("account_id", account_id)?;
    let purged = state.engine.purge_account(account_id).await?;
    Ok(json(
        StatusCode::OK,
        &json!({"account_id": account_id, "purged": purged}),
    ))
}

/// `GET /v1/accounts`: every account herald knows (with a plan synced or an endpoint), with its
/// plan, limits, usage and endpoint count, sorted by id. Accounts are few (one per customer of
/// the platform): no paging.
pub async fn list(state: &Arc<AppState>) -> Result<Resp, ApiError> {
    let mut items = Vec::new();
    for id in state.store.account_ids() {
        let mut v = account(state, &id).await?;
        v["endpoints"] = json!(state.store.account_endpoints(&id).len());
        items.push(v);
    }
    Ok(json(
        StatusCode::OK,
        &json!({"items": items, "next_cursor": null}),
    ))
}

async fn view(state: &AppState, account_id: &str) -> Result<Resp, ApiError> {
    Ok(json(StatusCode::OK, &account(state, account_id).await?))
}

/// The account object (docs/api.md).
async fn account(state: &AppState, account_id: &str) -> Result<Value, ApiError> {
    let plan = state.store.account_plan(account_id);
    let limits = plan.as_ref().and_then(|p| state.config.plans.get(p));
    let (minute, day) = state
        .store
        .quota_usage(account_id, quota::windows(state.clock.now_ms()))
        .await?;
    Ok(json!({
        "account_id": account_id,
        "plan": plan,
        "limits": {
            "webhooks": limits.is_none_or(|l| l.webhooks),
            "per_minute": limits.and_then(|l| l.per_minute),
            "per_day": limits.and_then(|l| l.per_day),
        },
        "usage": {"minute": minute, "day": day},
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretBody {
    value: Option<Value>,
}

/// `PUT /v1/accounts/{id}/secrets/{NAME}`: sets an account secret for header macros. Write-only:
/// no route reads it back.
pub async fn put_secret(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    account_id: &str,
    name: &str,
) -> Result<Resp, ApiError> {
    validate::account_id_str("account_id", account_id)?;
    if !request::is_secret_name(name) {
        return Err(ApiError::field(
            "name",
            "secret names are 1 to 64 letters, digits or _",
        ));
    }
    if name.starts_with('_') {
        return Err(ApiError::field(
            "name",
            "secret names starting with _ are reserved",
        ));
    }
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let b: SecretBody = body::parse(&bytes)?;
    let value = match b.value {
        Some(Value::String(v))
            if !v.is_empty()
                && v.len() <= 4096
                && hyper::header::HeaderValue::from_str(&v).is_ok() =>
        {
            v
        }
        _ => {
            return Err(ApiError::field(
                "value",
                "value must be printable text of 1 to 4096 bytes (it is sent in a header)",
            ))
        }
    };
    state
        .store
        .set_account_secret(account_id, name, &value)
        .await?;
    tracing::info!(account_id, name, "account secret set");
    Ok(super::no_content())
}
