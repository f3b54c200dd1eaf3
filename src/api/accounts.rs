//! Accounts: change the fields a `PUT` names (the plan, the failure alert addresses), and show
//! the plan, its limits, this minute's and today's usage and the alert addresses (`GET`).
//! Accounts are created on first use; one never seen has no plan and no addresses.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::body::{self, read_json_body};
use super::error::ApiError;
use super::{json, validate, AppState, Resp, Scope};
use crate::outbound::request;
use crate::policy::quota;
use crate::store::prelude::*;

/// At most this many alert addresses per account (docs/api.md).
pub const MAX_ALERT_EMAILS: usize = 5;

/// A `PUT`'s body: each field absent (left as it is) or given.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AccountBody {
    /// Absent and `null` differ: absent leaves the plan, `null` removes it.
    #[serde(default, deserialize_with = "body::present")]
    plan: Option<Value>,
    #[serde(default, deserialize_with = "body::present")]
    alert_emails: Option<Value>,
}

/// `PUT /v1/accounts/{account_id}`: changes only the fields the body names, all checked before
/// any is written. A portal session may set its own account's `alert_emails`; naming `plan`
/// is the admin's (`403 admin_only`).
pub async fn put(
    state: &Arc<AppState>,
    scope: &Scope,
    req: Request<Incoming>,
    account_id: &str,
) -> Result<Resp, ApiError> {
    validate::account_id_str("account_id", account_id)?;
    let bytes = read_json_body(req, state.config.server.max_body_bytes).await?;
    let b: AccountBody = body::parse(&bytes)?;
    if b.plan.is_some() && scope.account().is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_only",
            "only the admin token sets an account's plan; a portal session may set alert_emails",
        ));
    }
    if b.plan.is_none() && b.alert_emails.is_none() {
        return Err(ApiError::field(
            "plan",
            "the body names neither plan nor alert_emails; name one or both (plan: a plan \
             name or null; alert_emails: a list of addresses, [] clears them)",
        ));
    }
    let plan = b.plan.map(|p| plan_of(state, p)).transpose()?;
    let emails = b.alert_emails.map(alert_emails_of).transpose()?;
    if let Some(plan) = plan {
        state.store.set_account_plan(account_id, plan).await?;
    }
    if let Some(emails) = emails {
        let n = emails.len();
        state.store.set_alert_emails(account_id, emails).await?;
        tracing::info!(account_id, addresses = n, "account alert addresses set");
    }
    view(state, account_id).await
}

/// A plan given in a body: a configured plan's name, or `None` (from `null`) to remove it.
fn plan_of(state: &AppState, plan: Value) -> Result<Option<String>, ApiError> {
    match plan {
        Value::Null => Ok(None),
        Value::String(name) if state.config.plans.contains_key(&name) => Ok(Some(name)),
        Value::String(name) => {
            let known: Vec<&String> = state.config.plans.keys().collect();
            Err(ApiError::field(
                "plan",
                format!("no plan named {name:?} in the config; known: {known:?}"),
            ))
        }
        _ => Err(ApiError::field("plan", "plan must be a plan name or null")),
    }
}

/// Alert addresses given in a body: a list of at most [`MAX_ALERT_EMAILS`] mail addresses
/// (each by [`crate::alerts::mail::address`]), none repeated
/// (compared ignoring case); `[]` clears them.
pub fn alert_emails_of(v: Value) -> Result<Vec<String>, ApiError> {
    let Value::Array(items) = v else {
        return Err(ApiError::field(
            "alert_emails",
            "alert_emails must be a list of mail addresses ([] clears them)",
        ));
    };
    if items.len() > MAX_ALERT_EMAILS {
        return Err(ApiError::field(
            "alert_emails",
            format!(
                "alert_emails has {} addresses; at most {MAX_ALERT_EMAILS} are allowed",
                items.len()
            ),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let field = format!("alert_emails[{i}]");
        let Value::String(addr) = item else {
            return Err(ApiError::field(&field, format!("{field} must be a string")));
        };
        if let Err((reason, why)) = crate::alerts::mail::address(&addr) {
            return Err(ApiError::field(
                &field,
                format!(
                    "{field} is not an address herald mails: {why}; write an ASCII address \
                     such as \"ops@example.com\" (docs/api.md, \"Accounts\")"
                ),
            )
            .because(reason));
        }
        if let Some(j) = out.iter().position(|a| a.eq_ignore_ascii_case(&addr)) {
            return Err(ApiError::field(
                &field,
                format!("{field} repeats alert_emails[{j}]; give each address once"),
            )
            .because("repeated"));
        }
        out.push(addr);
    }
    Ok(out)
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

/// `GET /v1/accounts`: every account herald knows (with a plan synced, an endpoint or alert
/// addresses), with its plan, limits, usage, alert addresses and endpoint count, sorted by id.
/// Accounts are few (one per customer of the platform): no paging.
pub async fn list(state: &Arc<AppState>) -> Result<Resp, ApiError> {
    let mut ids: std::collections::BTreeSet<String> =
        state.store.account_ids().into_iter().collect();
    ids.extend(
        state
            .store
            .all_alert_emails()
            .await?
            .into_iter()
            .map(|(a, _)| a),
    );
    let mut items = Vec::new();
    for id in ids {
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
    let alert_emails = state.store.alert_emails(account_id).await?;
    Ok(json!({
        "account_id": account_id,
        "plan": plan,
        "limits": {
            "webhooks": limits.is_none_or(|l| l.webhooks),
            "per_minute": limits.and_then(|l| l.per_minute),
            "per_day": limits.and_then(|l| l.per_day),
        },
        "usage": {"minute": minute, "day": day},
        "alert_emails": alert_emails,
    }))
}

/// `POST /v1/accounts/{account_id}/alerts/test`: mails the account's alert addresses a test
/// mail now and says to whom, or why not (docs/api.md).
pub async fn test_alert(state: &Arc<AppState>, account_id: &str) -> Result<Resp, ApiError> {
    use crate::alerts::TestRefused;
    validate::account_id_str("account_id", account_id)?;
    match state.engine.alerts().send_test(account_id).await {
        Ok(sent) => Ok(json(
            StatusCode::OK,
            &json!({
                "account_id": account_id,
                "sent_to": sent.to,
                "at": crate::clock::rfc3339(sent.at),
            }),
        )),
        Err(TestRefused::Off) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "alerts_off",
            "failure alert mails are off on this install: the operator sets [alerts] smtp_url \
             to turn them on",
        )),
        Err(TestRefused::NoAddresses) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_alert_emails",
            "the account has no alert address to mail; set alert_emails first",
        )),
        Err(TestRefused::OverCap(max)) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "alert_cap_reached",
            format!(
                "the account had {max} alert mails this hour (alerts.max_per_account_per_hour); \
                 try again in the next hour"
            ),
        )),
        Err(TestRefused::NotSent(why)) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "mail_not_sent",
            format!("the mail server did not take the test mail: {why}"),
        )),
        Err(TestRefused::Store(e)) => Err(e.into()),
    }
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
