//! Applications (herald's accounts), event types (the catalog) and app-portal access.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::{json, Map, Value};

use super::{list_of, object_body, ok, shapes, Answer, Caller, Query, SvixError};
use crate::api::{validate, AppState};
use crate::clock::{rfc3339, Millis};
use crate::ids;
use crate::model::Application;
use crate::model::OPERATOR_ACCOUNT;
use crate::store::prelude::*;

/// The longest `uid` (herald's id limit).
pub(super) const MAX_UID: usize = 128;
/// The most `metadata` may take, names and values together.
const MAX_METADATA: usize = 4096;
const MAX_NAME: usize = 256;

/// The application an id or `uid` names: its record, or, for an account herald's own API
/// made, one drawn from it (named by its id, created when its first endpoint or event was).
/// `404` when the account has nothing.
pub(super) async fn find(state: &AppState, app: &str) -> Result<Application, SvixError> {
    if app == OPERATOR_ACCOUNT || validate::account_id_lookup("app_id", app).is_err() {
        return Err(SvixError::not_found("application"));
    }
    if let Some(a) = state.store.application(app).await? {
        return Ok(a);
    }
    drawn(state, app)
        .await?
        .ok_or_else(|| SvixError::not_found("application"))
}

/// The account an id or `uid` names, if it exists: [`find`] without drawing the record (the
/// cheap checks first: a message's creation asks this every time).
pub(super) async fn existing(state: &AppState, app: &str) -> Result<String, SvixError> {
    if app == OPERATOR_ACCOUNT || validate::account_id_lookup("app_id", app).is_err() {
        return Err(SvixError::not_found("application"));
    }
    let exists = !state.store.account_endpoints(app).is_empty()
        || state.store.account_plan(app).is_some()
        || state.store.application(app).await?.is_some()
        || state.store.first_event_at(app).await?.is_some();
    if exists {
        Ok(app.to_string())
    } else {
        Err(SvixError::not_found("application"))
    }
}

/// The application of an account without a record, if the account has anything.
async fn drawn(state: &AppState, account: &str) -> Result<Option<Application>, SvixError> {
    let first_endpoint = state
        .store
        .account_endpoints(account)
        .iter()
        .map(|e| e.created_at)
        .min();
    let first_event = state.store.first_event_at(account).await?;
    let created = match (first_endpoint, first_event) {
        (Some(a), Some(b)) => a.min(b),
        (Some(t), None) | (None, Some(t)) => t,
        (None, None) if state.store.account_plan(account).is_some() => 0,
        (None, None) => return Ok(None),
    };
    Ok(Some(Application {
        id: account.to_string(),
        name: account.to_string(),
        uid: None,
        metadata: BTreeMap::new(),
        rate_limit: None,
        created_at: created,
        updated_at: created,
    }))
}

/// `metadata`: an object of strings, at most [`MAX_METADATA`] bytes.
pub(super) fn metadata(v: &Value) -> Result<BTreeMap<String, String>, SvixError> {
    let bad = || {
        SvixError::field(
            "metadata",
            "type_error",
            format!("metadata must be an object of strings of at most {MAX_METADATA} bytes"),
        )
    };
    let Value::Object(m) = v else {
        return if v.is_null() {
            Ok(BTreeMap::new())
        } else {
            Err(bad())
        };
    };
    let mut out = BTreeMap::new();
    let mut size = 0;
    for (k, v) in m {
        let Value::String(s) = v else {
            return Err(bad());
        };
        size += k.len() + s.len();
        out.insert(k.clone(), s.clone());
    }
    if size > MAX_METADATA {
        return Err(bad());
    }
    Ok(out)
}

/// An application's `uid` (also its id): herald's account id rules, at most [`MAX_UID`].
pub(super) fn uid(field: &str, v: &Value) -> Result<String, SvixError> {
    let Value::String(s) = v else {
        return Err(SvixError::field(
            field,
            "type_error",
            format!("{field} must be a string"),
        ));
    };
    if s.len() > MAX_UID {
        return Err(SvixError::field(
            field,
            "value_error",
            format!("{field} must be at most {MAX_UID} characters"),
        ));
    }
    validate::account_id_str(field, s)?;
    if s.starts_with("app_") && ids::parse(ids::APPLICATION, s).is_some() {
        return Err(SvixError::field(
            field,
            "value_error",
            format!("{field} must not look like an application id (app_…)"),
        ));
    }
    Ok(s.clone())
}

fn rate(v: &Value, field: &str) -> Result<Option<u32>, SvixError> {
    match v {
        Value::Null => Ok(None),
        Value::Number(n) => match n.as_u64() {
            Some(r) if (1..=100_000).contains(&r) => Ok(Some(r as u32)),
            _ => Err(SvixError::field(
                field,
                "value_error",
                format!("{field} must be an integer from 1 to 100000"),
            )),
        },
        _ => Err(SvixError::field(
            field,
            "type_error",
            format!("{field} must be an integer"),
        )),
    }
}

/// Applies `ApplicationIn`/`ApplicationPatch` fields to `app`; `full` requires `name`.
fn apply(app: &mut Application, m: &Map<String, Value>, full: bool) -> Result<(), SvixError> {
    match m.get("name") {
        Some(Value::String(n)) if !n.is_empty() && n.chars().count() <= MAX_NAME => {
            app.name = n.clone()
        }
        Some(_) => {
            return Err(SvixError::field(
                "name",
                "value_error",
                format!("name must be a string of 1 to {MAX_NAME} characters"),
            ))
        }
        None if full => {
            return Err(SvixError::field(
                "name",
                "value_error.missing",
                "name is required",
            ))
        }
        None => {}
    }
    if let Some(v) = m.get("metadata") {
        app.metadata = metadata(v)?;
    }
    for name in ["throttleRate", "rateLimit"] {
        if let Some(v) = m.get(name) {
            app.rate_limit = rate(v, name)?;
        }
    }
    Ok(())
}

pub async fn list(state: &Arc<AppState>, caller: &Caller, q: &Query) -> Answer {
    caller.admin()?;
    let limit = q.limit()?;
    let descending = q.descending(false)?;
    let mut all: BTreeMap<String, Application> = BTreeMap::new();
    for app in state.store.applications().await? {
        all.insert(app.id.clone(), app);
    }
    for account in state.store.account_ids() {
        if account != OPERATOR_ACCOUNT && !all.contains_key(&account) {
            if let Some(app) = drawn(state, &account).await? {
                all.insert(account, app);
            }
        }
    }
    // `exclude_apps_with_no_endpoints`, `exclude_apps_with_disabled_endpoints` (herald has no
    // Svix Play endpoints, so excluding those excludes nothing).
    let no_endpoints = q.flag("exclude_apps_with_no_endpoints", false)?;
    let only_disabled = q.flag("exclude_apps_with_disabled_endpoints", false)?;
    q.flag("exclude_apps_with_svix_play_endpoints", false)?;
    if no_endpoints || only_disabled {
        all.retain(|id, _| {
            let eps = state.store.account_endpoints(id);
            let active = eps
                .iter()
                .any(|e| e.state == crate::model::EndpointState::Active);
            !(no_endpoints && eps.is_empty() || only_disabled && !eps.is_empty() && !active)
        });
    }
    let after = q.get("iterator");
    let mut ids: Vec<&String> = all.keys().collect();
    if descending {
        ids.reverse();
    }
    let (page, next) = super::page_after(&ids, |id| id.as_str(), after, descending, limit);
    let data = page
        .iter()
        .map(|id| shapes::application(&all[*id]))
        .collect();
    ok(
        StatusCode::OK,
        &list_of(data, next, after.map(str::to_string)),
    )
}

pub async fn create(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    q: &Query,
) -> Answer {
    caller.admin()?;
    let m = object_body(state, req, false).await?;
    let get_if_exists = q.flag("get_if_exists", false)?;
    let (app, created) = create_from(state, &m, get_if_exists).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    ok(status, &shapes::application(&app))
}

/// Creates the application `m` describes (`ApplicationIn`); with `get_if_exists`, an existing
/// one of its `uid` is answered instead (`false`). Without, an existing `uid` is a `409`.
pub(super) async fn create_from(
    state: &AppState,
    m: &Map<String, Value>,
    get_if_exists: bool,
) -> Result<(Application, bool), SvixError> {
    let now = state.clock.now_ms();
    let uid = m
        .get("uid")
        .filter(|v| !v.is_null())
        .map(|v| uid("uid", v))
        .transpose()?;
    if let Some(uid) = &uid {
        if let Some(existing) = exists(state, uid).await? {
            if get_if_exists {
                return Ok((existing, false));
            }
            return Err(SvixError::conflict(format!(
                "an application with uid {uid:?} exists already"
            )));
        }
    }
    let id = uid
        .clone()
        .unwrap_or_else(|| ids::new_id(ids::APPLICATION, now));
    let mut app = Application {
        id,
        name: String::new(),
        uid,
        metadata: BTreeMap::new(),
        rate_limit: None,
        created_at: now,
        updated_at: now,
    };
    apply(&mut app, m, true)?;
    state.store.put_application(&app).await?;
    tracing::info!(account_id = %app.id, "application created");
    Ok((app, true))
}

async fn exists(state: &AppState, id: &str) -> Result<Option<Application>, SvixError> {
    match find(state, id).await {
        Ok(a) => Ok(Some(a)),
        Err(e) if e.status == StatusCode::NOT_FOUND => Ok(None),
        Err(e) => Err(e),
    }
}

pub async fn get(state: &Arc<AppState>, caller: &Caller, app: &str) -> Answer {
    caller.reaches(app, true)?;
    ok(
        StatusCode::OK,
        &shapes::application(&find(state, app).await?),
    )
}

/// `PUT`: replaces the application's fields, or creates it with the path as its `uid`.
pub async fn put(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
) -> Answer {
    caller.admin()?;
    let m = object_body(state, req, false).await?;
    let now = state.clock.now_ms();
    match exists(state, app).await? {
        Some(mut a) => {
            let mut fresh = Application {
                metadata: BTreeMap::new(),
                rate_limit: None,
                ..a.clone()
            };
            apply(&mut fresh, &m, true)?;
            fresh.updated_at = now;
            a = fresh;
            state.store.put_application(&a).await?;
            ok(StatusCode::OK, &shapes::application(&a))
        }
        None => {
            let uid = uid("uid", &Value::String(app.to_string()))?;
            let mut a = Application {
                id: uid.clone(),
                name: String::new(),
                uid: Some(uid),
                metadata: BTreeMap::new(),
                rate_limit: None,
                created_at: now,
                updated_at: now,
            };
            apply(&mut a, &m, true)?;
            state.store.put_application(&a).await?;
            ok(StatusCode::CREATED, &shapes::application(&a))
        }
    }
}

pub async fn patch(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
) -> Answer {
    caller.admin()?;
    let m = object_body(state, req, true).await?;
    let mut a = find(state, app).await?;
    apply(&mut a, &m, false)?;
    a.updated_at = state.clock.now_ms();
    state.store.put_application(&a).await?;
    ok(StatusCode::OK, &shapes::application(&a))
}

/// `DELETE`: the account's purge (docs/operations.md, "Purging an account").
pub async fn delete(state: &Arc<AppState>, caller: &Caller, app: &str) -> Answer {
    caller.admin()?;
    let a = find(state, app).await?;
    let purged = state.store.purge_account(&a.id).await?;
    tracing::info!(account_id = %a.id, events = purged.events, "application deleted (account purged)");
    super::empty(StatusCode::NO_CONTENT)
}

/// The catalog's types as Svix event types; their times are those of the config's load.
fn event_type_out(state: &AppState, name: &str, ev: &crate::config::CatalogEvent) -> Value {
    let at = rfc3339(started_at(state));
    let schemas = ev.schema_json().map(|s| json!({ "1": s }));
    json!({
        "name": name,
        "description": ev.description,
        "deprecated": ev.deprecated,
        "archived": false,
        "schemas": schemas,
        "createdAt": at,
        "updatedAt": at,
    })
}

fn started_at(state: &AppState) -> Millis {
    state.clock.now_ms() - state.started.elapsed().as_millis() as Millis
}

pub fn event_types(state: &Arc<AppState>, caller: &Caller, q: &Query) -> Answer {
    if matches!(caller.role, crate::api::Role::Ingest) {
        return Err(SvixError::forbidden(
            "an ingest token may only create messages",
        ));
    }
    let limit = q.limit()?;
    let descending = q.descending(false)?;
    // The libraries ask `with_content=false` by default: the list then leaves out the schemas.
    let with_content = q.flag("with_content", true)?;
    q.flag("include_archived", false)?; // none is archived: the catalog is the config's
    let mut names: Vec<&String> = state.config.catalog.events.keys().collect();
    if descending {
        names.reverse();
    }
    let after = q.get("iterator");
    let (page, next) = super::page_after(&names, |n| n.as_str(), after, descending, limit);
    let data = page
        .iter()
        .map(|n| {
            let mut v = event_type_out(state, n, &state.config.catalog.events[*n]);
            if !with_content {
                v["schemas"] = Value::Null;
            }
            v
        })
        .collect();
    ok(
        StatusCode::OK,
        &list_of(data, next, after.map(str::to_string)),
    )
}

pub fn event_type(state: &Arc<AppState>, caller: &Caller, name: &str) -> Answer {
    if matches!(caller.role, crate::api::Role::Ingest) {
        return Err(SvixError::forbidden(
            "an ingest token may only create messages",
        ));
    }
    let ev = state
        .config
        .catalog
        .events
        .get(name)
        .ok_or_else(|| SvixError::not_found("event type"))?;
    ok(StatusCode::OK, &event_type_out(state, name, ev))
}

/// Event types come from the config's catalog: one of it is `409`, any other `422`.
pub async fn create_event_type(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
) -> Answer {
    caller.admin()?;
    let m = object_body(state, req, false).await?;
    match m.get("name") {
        Some(Value::String(n)) if state.config.catalog.events.contains_key(n) => {
            Err(SvixError::conflict(format!(
                "event type {n:?} exists (it is in the config's catalog)"
            )))
        }
        Some(Value::String(_)) => Err(SvixError::field(
            "name",
            "catalog_in_config",
            "event types are declared in herald's config ([catalog.events.\"TYPE\"]) and \
             cannot be created through the API",
        )),
        _ => Err(SvixError::field(
            "name",
            "value_error.missing",
            "name is required",
        )),
    }
}

/// `POST /api/v1/auth/app-portal-access/{app}`: a portal link of the application.
pub async fn portal_access(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    app: &str,
) -> Answer {
    caller.admin()?;
    let m = object_body(state, req, true).await?;
    let account = match exists(state, app).await? {
        Some(a) => a.id,
        None => match m.get("application") {
            Some(Value::Object(a)) => {
                let mut a = a.clone();
                a.entry("uid")
                    .or_insert_with(|| Value::String(app.to_string()));
                create_from(state, &a, true).await?.0.id
            }
            _ => return Err(SvixError::not_found("application")),
        },
    };
    let read_only = match m.get("readOnly") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(SvixError::field(
                "readOnly",
                "type_error",
                "readOnly must be a boolean",
            ))
        }
    };
    let max = state.config.portal.max_session_ttl.0;
    let ttl = match m.get("expiry") {
        None | Some(Value::Null) => state.config.portal.session_ttl.0,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(s) if (3600..=604_800).contains(&s) && std::time::Duration::from_secs(s) <= max => {
                std::time::Duration::from_secs(s)
            }
            _ => {
                return Err(SvixError::field(
                    "expiry",
                    "value_error",
                    format!(
                        "expiry must be 3600 to 604800 seconds, and at most portal.max_session_ttl ({} s)",
                        max.as_secs()
                    ),
                ))
            }
        },
        Some(_) => return Err(SvixError::field("expiry", "type_error", "expiry must be an integer")),
    };
    let (_, token) = crate::api::sessions::mint(state, &account, read_only, ttl).await?;
    ok(
        StatusCode::OK,
        &json!({"url": crate::api::sessions::portal_link(state, &token), "token": token}),
    )
}
