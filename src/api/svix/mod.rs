//! The Svix-compatible API under `/api/v1/` (docs/svix.md): a second door to the same
//! accounts (*applications*), endpoints, events (*messages*) and attempts, in the request and
//! answer shapes of the Svix API, so that Svix's client libraries drive herald unchanged.
//!
//! Its own router: its paths take an application's id in the path, its errors have Svix's
//! shapes (`{"code", "detail"}`, and `422 {"detail": [{"loc", "msg", "type"}]}`), and a `POST`
//! with an `idempotency-key` header answers a repeat of the key with the first answer
//! ([`keep_answer`]). Handlers check their fields, then call the same store operations as
//! herald's own API.

mod apps;
mod endpoints;
mod messages;
mod shapes;

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use super::error::ApiError;
use super::{full, AppState, Resp, Role};
use crate::store::prelude::*;
use crate::store::ApiAnswer;

/// The prefix every route of this API has.
pub const PREFIX: &str = "/api/v1";

/// The longest `idempotency-key` header kept (longer ones are refused).
const MAX_REQUEST_KEY: usize = 255;

/// Whether a path is this API's.
pub fn is_svix_path(path: &str) -> bool {
    path == PREFIX || path.starts_with("/api/v1/")
}

/// An error in Svix's shapes.
#[derive(Debug)]
pub struct SvixError {
    status: StatusCode,
    code: String,
    detail: String,
    /// For a `422`: where (`["body", "url"]`) and what (`type`).
    loc: Vec<String>,
}

impl crate::api::Refusal for SvixError {
    fn status(&self) -> StatusCode {
        self.status
    }
}

impl SvixError {
    fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Self {
        SvixError {
            status,
            code: code.to_string(),
            detail: detail.into(),
            loc: Vec::new(),
        }
    }

    fn not_found(what: &str) -> Self {
        SvixError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    fn conflict(detail: impl Into<String>) -> Self {
        SvixError::new(StatusCode::CONFLICT, "conflict", detail)
    }

    fn forbidden(detail: impl Into<String>) -> Self {
        SvixError::new(StatusCode::FORBIDDEN, "forbidden", detail)
    }

    /// A `422` naming the field (a path under the body: `"eventTypes"`, `"headers.x-a"`).
    fn field(field: &str, kind: &str, detail: impl Into<String>) -> Self {
        let mut loc = vec!["body".to_string()];
        loc.extend(
            field
                .split('.')
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
        SvixError {
            loc,
            ..SvixError::new(StatusCode::UNPROCESSABLE_ENTITY, kind, detail)
        }
    }

    /// A `422` about a query parameter.
    fn query(name: &str, detail: impl Into<String>) -> Self {
        SvixError {
            loc: vec!["query".to_string(), name.to_string()],
            ..SvixError::new(StatusCode::UNPROCESSABLE_ENTITY, "value_error", detail)
        }
    }

    fn body(&self) -> Value {
        if self.status == StatusCode::UNPROCESSABLE_ENTITY {
            let loc = if self.loc.is_empty() {
                vec!["body".to_string()]
            } else {
                self.loc.clone()
            };
            json!({"detail": [{"loc": loc, "msg": self.detail, "type": self.code}]})
        } else {
            json!({"code": self.code, "detail": self.detail})
        }
    }

    fn into_response(self) -> Resp {
        let mut resp = super::json(self.status, &self.body());
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

impl From<ApiError> for SvixError {
    fn from(e: ApiError) -> Self {
        if e.status == StatusCode::UNPROCESSABLE_ENTITY {
            let field = e.field.clone().unwrap_or_default();
            return SvixError::field(&field, e.code, e.message);
        }
        SvixError::new(e.status, e.code, e.message)
    }
}

impl From<crate::store::StoreError> for SvixError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::from(e).into()
    }
}

pub type Answer = Result<Resp, SvixError>;

/// A JSON answer.
fn ok(status: StatusCode, v: &impl serde::Serialize) -> Answer {
    Ok(super::json(status, v))
}

fn empty(status: StatusCode) -> Answer {
    let mut resp = Response::new(full(bytes::Bytes::new()));
    *resp.status_mut() = status;
    Ok(resp)
}

/// Who calls.
pub(super) struct Caller {
    role: Role,
}

impl Caller {
    fn is_admin(&self) -> bool {
        matches!(self.role, Role::Admin)
    }

    /// The account a portal session is for.
    fn session_account(&self) -> Option<&str> {
        match &self.role {
            Role::Portal(s) => Some(&s.account_id),
            _ => None,
        }
    }

    /// Admin tokens only.
    fn admin(&self) -> Result<(), SvixError> {
        if self.is_admin() {
            Ok(())
        } else {
            Err(SvixError::forbidden(
                "this route takes an admin token; this credential may not use it",
            ))
        }
    }

    /// Admin tokens, and portal sessions of `account` (read-only ones only when `reads`): a
    /// session of another account finds nothing (`404`), an ingest token is refused (`403`).
    fn reaches(&self, account: &str, reads: bool) -> Result<(), SvixError> {
        match &self.role {
            Role::Admin => Ok(()),
            Role::Portal(s) if s.account_id != account => Err(SvixError::not_found("application")),
            Role::Portal(s) if s.read_only && !reads => Err(SvixError::forbidden(
                "this portal session is read-only: it can look but not change anything",
            )),
            Role::Portal(_) => Ok(()),
            Role::Ingest => Err(SvixError::forbidden(
                "an ingest token may only create messages",
            )),
        }
    }
}

/// Answers a request under [`PREFIX`].
pub async fn handle(state: &Arc<AppState>, req: Request<Incoming>) -> Resp {
    let method = if req.method() == Method::HEAD {
        Method::GET
    } else {
        req.method().clone()
    };
    let path = req.uri().path().to_string();
    let rest = path[PREFIX.len()..].trim_matches('/').to_string();
    let segs: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split('/').collect()
    };
    match route(state, req, &method, &segs).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// Every route this API serves, with what it does (the OpenAPI document lists them when the door
/// is open); `{…}` captures a segment.
pub const ROUTES: &[(Method, &str, &str)] = &[
    (Method::GET, "/health", "Health (204)."),
    (Method::GET, "/app", "List applications (admin)."),
    (
        Method::POST,
        "/app",
        "Create an application (admin; ?get_if_exists=true).",
    ),
    (
        Method::GET,
        "/app/{app_id}",
        "Get an application by id or uid.",
    ),
    (
        Method::PUT,
        "/app/{app_id}",
        "Update an application, or create it with the path as uid (admin).",
    ),
    (
        Method::PATCH,
        "/app/{app_id}",
        "Patch an application (admin).",
    ),
    (
        Method::DELETE,
        "/app/{app_id}",
        "Delete an application: the account's purge (admin).",
    ),
    (Method::GET, "/app/{app_id}/endpoint", "List endpoints."),
    (
        Method::POST,
        "/app/{app_id}/endpoint",
        "Create an endpoint.",
    ),
    (
        Method::GET,
        "/app/{app_id}/endpoint/{endpoint_id}",
        "Get an endpoint by id or uid.",
    ),
    (
        Method::PUT,
        "/app/{app_id}/endpoint/{endpoint_id}",
        "Update an endpoint, or create it with the path as uid.",
    ),
    (
        Method::PATCH,
        "/app/{app_id}/endpoint/{endpoint_id}",
        "Patch an endpoint.",
    ),
    (
        Method::DELETE,
        "/app/{app_id}/endpoint/{endpoint_id}",
        "Delete an endpoint.",
    ),
    (
        Method::GET,
        "/app/{app_id}/endpoint/{endpoint_id}/secret",
        "The endpoint's signing secret (admin).",
    ),
    (
        Method::POST,
        "/app/{app_id}/endpoint/{endpoint_id}/secret/rotate",
        "Rotate the signing secret (admin): 200 {\"key\"}.",
    ),
    (
        Method::GET,
        "/app/{app_id}/endpoint/{endpoint_id}/headers",
        "The endpoint's custom headers.",
    ),
    (
        Method::PUT,
        "/app/{app_id}/endpoint/{endpoint_id}/headers",
        "Set the custom headers.",
    ),
    (
        Method::PATCH,
        "/app/{app_id}/endpoint/{endpoint_id}/headers",
        "Patch the custom headers (deleteHeaders).",
    ),
    (
        Method::GET,
        "/app/{app_id}/msg",
        "List messages, newest first.",
    ),
    (
        Method::POST,
        "/app/{app_id}/msg",
        "Create a message (admin or ingest token): 202.",
    ),
    (
        Method::GET,
        "/app/{app_id}/msg/{msg_id}",
        "Get a message by id or eventId.",
    ),
    (
        Method::GET,
        "/app/{app_id}/attempt/msg/{msg_id}",
        "A message's attempts.",
    ),
    (
        Method::GET,
        "/app/{app_id}/attempt/endpoint/{endpoint_id}",
        "An endpoint's attempts.",
    ),
    (
        Method::POST,
        "/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend",
        "Resend (herald's manual retry): 202 {}.",
    ),
    (Method::GET, "/event-type", "The catalog's event types."),
    (
        Method::POST,
        "/event-type",
        "Event types come from the config: 409 for a catalog type, else 422.",
    ),
    (
        Method::GET,
        "/event-type/{event_type_name}",
        "One catalog event type.",
    ),
    (
        Method::POST,
        "/auth/app-portal-access/{app_id}",
        "A portal link of the application (admin).",
    ),
];

/// Whether `segs` are the path `pattern` names.
fn shape_matches(pattern: &str, segs: &[&str]) -> bool {
    let parts: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
    parts.len() == segs.len()
        && parts
            .iter()
            .zip(segs)
            .all(|(p, s)| !s.is_empty() && (p.starts_with('{') || p == s))
}

/// The methods a path of this API takes; `None` for a path it does not serve.
fn methods(segs: &[&str]) -> Option<Vec<Method>> {
    let found: Vec<Method> = ROUTES
        .iter()
        .filter(|(_, pattern, _)| shape_matches(pattern, segs))
        .map(|(m, _, _)| m.clone())
        .collect();
    (!found.is_empty()).then_some(found)
}

async fn route(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    method: &Method,
    segs: &[&str],
) -> Answer {
    if let Err(e) = served(method, segs) {
        super::body::discard_body(req).await;
        return Err(e);
    }
    if segs == ["health"] {
        super::body::discard_body(req).await;
        return empty(StatusCode::NO_CONTENT);
    }
    let Some(role) = caller(state, &req).await? else {
        super::body::discard_body(req).await;
        return Err(SvixError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_failed",
            "missing or wrong token: send Authorization: Bearer <token>",
        ));
    };
    let caller = Caller { role };
    // In a cluster another node's change of endpoints reaches this node by notice a moment
    // after its commit: a request that reads them brings the copy up to date first. A message's
    // creation does not: as `POST /v1/events`, its commit checks the fan-out as it writes.
    let creates_message = method == Method::POST && matches!(segs, ["app", _, "msg"]);
    if !creates_message {
        state.store.fresh_directory().await?;
    }
    let key = request_key(&req)?;
    let app = segs.get(1).copied().unwrap_or_default();
    // A repeated request key answers what the first request was answered (app-portal access
    // mints a new token each time: never replayed).
    let scope_of_key = match segs {
        ["app"] | ["event-type"] => Some("_"),
        ["auth", ..] => None,
        _ => Some(app),
    };
    // Answers are kept by account (an application's id is its account's), so a purge takes
    // them; routes outside an application keep theirs under `_`, which is never an account.
    let keyed = match (method, key, scope_of_key) {
        (&Method::POST, Some(k), Some(scope)) => Some((scope.to_string(), k)),
        _ => None,
    };
    let mut q = Query::parse(req.uri().query())?;
    let _in_flight = match &keyed {
        Some((scope, k)) => {
            let Some(guard) = InFlight::take(scope, k) else {
                super::body::discard_body(req).await;
                return Err(SvixError::conflict(
                    "a request with this idempotency-key is in progress; try again once it \
                     has been answered",
                ));
            };
            // A message's creation finds its key's first answer in its commit, which claims
            // the key (one lookup less, and exact across a cluster's nodes).
            if !creates_message {
                let now = state.clock.now_ms();
                if let Some(a) = state.store.api_answer(scope, k, now).await? {
                    if let Some(resp) = replay(state, a, &q).await? {
                        super::body::discard_body(req).await;
                        return Ok(resp);
                    }
                }
            }
            q.request_key = Some(k.clone());
            Some(guard)
        }
        None => None,
    };
    let answer = dispatch(state, &caller, req, method, segs, &q).await;
    match keyed {
        Some((scope, k)) => kept(state, &scope, &k, creates_message, answer, &q).await,
        None => answer,
    }
}

/// Whether herald serves the route, and with this method: the error to answer if not.
fn served(method: &Method, segs: &[&str]) -> Result<(), SvixError> {
    let Some(allowed) = methods(segs) else {
        return Err(SvixError::new(
            StatusCode::NOT_FOUND,
            "not_supported",
            "herald does not serve this route of the Svix API (docs/svix.md lists what it serves)",
        ));
    };
    if !allowed.contains(method) {
        let names: Vec<&str> = allowed.iter().map(Method::as_str).collect();
        return Err(SvixError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("this route takes {}", names.join(", ")),
        ));
    }
    Ok(())
}

/// The answer to a request with a request key, kept under it (`scope`, `k`) when it changed
/// something or refused to; a message's creation refused before its commit answers the key's
/// first answer instead, if it has one.
async fn kept(
    state: &Arc<AppState>,
    scope: &str,
    k: &str,
    creates_message: bool,
    answer: Answer,
    q: &Query,
) -> Answer {
    // Only answers that changed something, or refused to, are kept: a 5xx may be retried.
    // A message's creation kept its answer in its own commit already (or found the first).
    let resp = match answer {
        Ok(r) if r.extensions().get::<AnswerKept>().is_some() => return Ok(r),
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    if creates_message && !resp.status().is_server_error() {
        let now = state.clock.now_ms();
        if let Some(a) = state.store.api_answer(scope, k, now).await? {
            if let Some(first) = replay(state, a, q).await? {
                return Ok(first);
            }
        }
    }
    keep_answer(state, scope, k, resp).await
}

/// Marks an answer whose request key's answer the store kept already (with the message).
#[derive(Clone, Copy)]
pub(super) struct AnswerKept;

/// A request key being answered on this node: a second request with it meanwhile is refused
/// (`409`), so that a client's retry never acts twice while the first is still running. (Across
/// the nodes of a cluster, the kept answer decides once the first is answered.)
struct InFlight(String);

static IN_FLIGHT: std::sync::Mutex<Option<std::collections::HashSet<String>>> =
    std::sync::Mutex::new(None);

impl InFlight {
    fn take(scope: &str, key: &str) -> Option<InFlight> {
        let name = format!("{scope}\0{key}");
        let mut set = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        set.get_or_insert_with(Default::default)
            .insert(name.clone())
            .then_some(InFlight(name))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut set = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = set.as_mut() {
            set.remove(&self.0);
        }
    }
}

/// The answer to keep for a request key, and it given back as kept.
async fn keep_answer(state: &AppState, scope: &str, key: &str, resp: Resp) -> Answer {
    if resp.status().is_server_error() {
        return Ok(resp);
    }
    let status = resp.status();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let answer = ApiAnswer {
        status: status.as_u16(),
        body: String::from_utf8_lossy(&body).into_owned(),
        at: state.clock.now_ms(),
        event_id: None,
    };
    let kept = state.store.keep_api_answer(scope, key, answer).await?;
    Ok(replayed(kept))
}

/// A kept answer given again: as it was, or, for a message's creation, the message as stored
/// (`None` if it is not: its commit failed after the answer was written, or a purge or the
/// retention took it; the request then runs as new).
pub(super) async fn replay(
    state: &AppState,
    a: ApiAnswer,
    q: &Query,
) -> Result<Option<Resp>, SvixError> {
    if let Some(event) = &a.event_id {
        let Some((meta, payload)) = state.store.event(event).await? else {
            return Ok(None);
        };
        let with_content = q.flag("with_content", true)?;
        return Ok(Some(super::json(
            StatusCode::from_u16(a.status).unwrap_or(StatusCode::ACCEPTED),
            &shapes::message(&meta, &payload, with_content),
        )));
    }
    Ok(Some(replayed(a)))
}

fn replayed(a: ApiAnswer) -> Resp {
    let mut resp = Response::new(full(bytes::Bytes::from(a.body)));
    *resp.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::OK);
    if a.status != 204 {
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    resp
}

/// The request's `idempotency-key` header, if any.
fn request_key(req: &Request<Incoming>) -> Result<Option<String>, SvixError> {
    let Some(v) = req.headers().get("idempotency-key") else {
        return Ok(None);
    };
    match v.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= MAX_REQUEST_KEY => Ok(Some(k.to_string())),
        _ => Err(SvixError {
            loc: vec!["header".into(), "idempotency-key".into()],
            ..SvixError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "value_error",
                format!("idempotency-key must be 1 to {MAX_REQUEST_KEY} visible characters"),
            )
        }),
    }
}

async fn caller(state: &AppState, req: &Request<Incoming>) -> Result<Option<Role>, SvixError> {
    let Some(token) = super::bearer(req) else {
        return Ok(None);
    };
    Ok(super::role_of(state, &token).await?)
}

async fn dispatch(
    state: &Arc<AppState>,
    caller: &Caller,
    req: Request<Incoming>,
    method: &Method,
    segs: &[&str],
    q: &Query,
) -> Answer {
    use Method as M;
    match (method, segs) {
        (&M::GET, ["app"]) => apps::list(state, caller, q).await,
        (&M::POST, ["app"]) => apps::create(state, caller, req, q).await,
        (&M::GET, ["app", app]) => apps::get(state, caller, app).await,
        (&M::PUT, ["app", app]) => apps::put(state, caller, req, app).await,
        (&M::PATCH, ["app", app]) => apps::patch(state, caller, req, app).await,
        (&M::DELETE, ["app", app]) => apps::delete(state, caller, app).await,
        (&M::GET, ["app", app, "endpoint"]) => endpoints::list(state, caller, app, q).await,
        (&M::POST, ["app", app, "endpoint"]) => endpoints::create(state, caller, req, app).await,
        (&M::GET, ["app", app, "endpoint", ep]) => endpoints::get(state, caller, app, ep).await,
        (&M::PUT, ["app", app, "endpoint", ep]) => {
            endpoints::put(state, caller, req, app, ep).await
        }
        (&M::PATCH, ["app", app, "endpoint", ep]) => {
            endpoints::patch(state, caller, req, app, ep).await
        }
        (&M::DELETE, ["app", app, "endpoint", ep]) => {
            endpoints::delete(state, caller, app, ep).await
        }
        (&M::GET, ["app", app, "endpoint", ep, "secret"]) => {
            endpoints::secret(state, caller, app, ep).await
        }
        (&M::POST, ["app", app, "endpoint", ep, "secret", "rotate"]) => {
            endpoints::rotate(state, caller, req, app, ep).await
        }
        (_, ["app", app, "endpoint", ep, "headers"]) => {
            endpoints::headers(state, caller, req, method, app, ep).await
        }
        (&M::POST, ["app", app, "msg"]) => {
            let mut req = req;
            let span = crate::api::start_request_span(
                state,
                "POST /api/v1/app/{app_id}/msg",
                "/api/v1/app/{app_id}/msg",
                &mut req,
            );
            let answer = messages::create(state, caller, req, app, q).await;
            crate::api::end_request_span(span, &answer);
            answer
        }
        (&M::GET, ["app", app, "msg"]) => messages::list(state, caller, app, q).await,
        (&M::GET, ["app", app, "msg", msg]) => messages::get(state, caller, app, msg, q).await,
        (&M::GET, ["app", app, "attempt", "msg", msg]) => {
            messages::attempts_by_msg(state, caller, app, msg, q).await
        }
        (&M::GET, ["app", app, "attempt", "endpoint", ep]) => {
            messages::attempts_by_endpoint(state, caller, app, ep, q).await
        }
        (&M::POST, ["app", app, "msg", msg, "endpoint", ep, "resend"]) => {
            messages::resend(state, caller, req, app, msg, ep).await
        }
        (&M::GET, ["event-type"]) => apps::event_types(state, caller, q),
        (&M::POST, ["event-type"]) => apps::create_event_type(state, caller, req).await,
        (&M::GET, ["event-type", name]) => apps::event_type(state, caller, name),
        (&M::POST, ["auth", "app-portal-access", app]) => {
            apps::portal_access(state, caller, req, app).await
        }
        _ => Err(SvixError::new(
            StatusCode::NOT_FOUND,
            "not_supported",
            "herald does not serve this route of the Svix API",
        )),
    }
}

/// A list's query: `limit`, `iterator`, `order` and the filters, each checked.
#[derive(Default)]
pub(super) struct Query {
    pairs: Vec<(String, String)>,
    /// The request's `idempotency-key`, when its answer is to be kept.
    request_key: Option<String>,
}

impl Query {
    fn parse(query: Option<&str>) -> Result<Query, SvixError> {
        let pairs = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Ok(Query {
            pairs,
            request_key: None,
        })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// Every value of a repeated parameter (`event_types=a&event_types=b`, or `a,b`).
    fn all(&self, name: &str) -> Vec<String> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == name || k == &format!("{name}[]"))
            .flat_map(|(_, v)| v.split(',').map(str::to_string).collect::<Vec<_>>())
            .filter(|v| !v.is_empty())
            .collect()
    }

    fn flag(&self, name: &str, default: bool) -> Result<bool, SvixError> {
        match self.get(name) {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(_) => Err(SvixError::query(
                name,
                format!("{name} must be true or false"),
            )),
        }
    }

    fn limit(&self) -> Result<usize, SvixError> {
        match self.get("limit") {
            None => Ok(50),
            Some(v) => match v.parse::<usize>() {
                Ok(n) if (1..=250).contains(&n) => Ok(n),
                _ => Err(SvixError::query(
                    "limit",
                    "limit must be an integer from 1 to 250",
                )),
            },
        }
    }

    /// `order=ascending|descending`; `default` when absent.
    fn descending(&self, default: bool) -> Result<bool, SvixError> {
        match self.get("order") {
            None => Ok(default),
            Some("ascending") => Ok(false),
            Some("descending") => Ok(true),
            Some(_) => Err(SvixError::query(
                "order",
                "order must be ascending or descending",
            )),
        }
    }

    fn time(&self, name: &str) -> Result<Option<crate::clock::Millis>, SvixError> {
        self.get(name)
            .map(|v| {
                crate::clock::parse_rfc3339(v).ok_or_else(|| {
                    SvixError::query(name, format!("{name} must be an RFC 3339 date-time"))
                })
            })
            .transpose()
    }
}

/// The page of `items` (sorted by id, ascending or, when `descending`, reversed) past the id
/// `after` (which need not be there any more), at most `limit`, and the iterator of the next
/// page.
fn page_after<'a, T>(
    items: &'a [T],
    id: impl Fn(&T) -> &str,
    after: Option<&str>,
    descending: bool,
    limit: usize,
) -> (&'a [T], Option<String>) {
    let start = after
        .map(|it| {
            items
                .iter()
                .position(|x| if descending { id(x) < it } else { id(x) > it })
                .unwrap_or(items.len())
        })
        .unwrap_or(0);
    let end = (start + limit).min(items.len());
    let page = &items[start..end];
    let next = (end < items.len())
        .then(|| page.last().map(|x| id(x).to_string()))
        .flatten();
    (page, next)
}

/// A list answer: `iterator` always present (`null` once done).
#[derive(serde::Serialize)]
struct ListOut<T> {
    data: Vec<T>,
    done: bool,
    iterator: Option<String>,
    #[serde(rename = "prevIterator")]
    prev_iterator: Option<String>,
}

fn list_of<T>(data: Vec<T>, next: Option<String>, prev: Option<String>) -> ListOut<T> {
    ListOut {
        data,
        done: next.is_none(),
        iterator: next,
        prev_iterator: prev,
    }
}

/// Reads a JSON object body (any other is a `422`).
async fn object_body(
    state: &AppState,
    req: Request<Incoming>,
    optional: bool,
) -> Result<serde_json::Map<String, Value>, SvixError> {
    let bytes = super::body::read_json_body(req, state.config.server.max_body_bytes)
        .await
        .map_err(SvixError::from)?;
    if bytes.iter().all(u8::is_ascii_whitespace) && optional {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(SvixError::field(
            "",
            "type_error",
            "the body must be a JSON object",
        )),
        Err(e) => Err(SvixError::field(
            "",
            "value_error.jsondecode",
            format!("the body is not JSON: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_route_takes_its_method_and_nothing_else_is_served() {
        for (method, pattern, _) in ROUTES {
            let path = pattern.replace('{', "x").replace('}', "");
            let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let allowed = methods(&segs).unwrap_or_else(|| panic!("{pattern} is not served"));
            assert!(allowed.contains(method), "{method} {pattern}");
        }
        for unlisted in [
            "stats/usage/app",
            "transformation-template",
            "app/a/endpoint/e/transformation",
            "app/a/integration",
            "operational-webhook/endpoint",
            "app/a/endpoint/e/stats",
            "app//endpoint",
        ] {
            let segs: Vec<&str> = unlisted.split('/').collect();
            assert!(methods(&segs).is_none(), "{unlisted}");
        }
        assert_eq!(
            methods(&["app", "a", "endpoint", "e", "headers"]).unwrap(),
            [Method::GET, Method::PUT, Method::PATCH]
        );
    }

    #[test]
    fn errors_have_svix_shapes() {
        let e = SvixError::field("headers.x-a", "value_error", "bad");
        assert_eq!(
            e.body(),
            json!({"detail": [{"loc": ["body", "headers", "x-a"], "msg": "bad", "type": "value_error"}]})
        );
        let e = SvixError::conflict("taken");
        assert_eq!(e.body(), json!({"code": "conflict", "detail": "taken"}));
        let e: SvixError = ApiError::field("type", "no").into();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.body()["detail"][0]["loc"], json!(["body", "type"]));
    }
}
