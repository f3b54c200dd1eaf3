//! The HTTP API (hyper 1.x, HTTP/1.1): routing, tokens, JSON answers. One file per resource.
//!
//! Handlers validate, then talk to the store (and ask the engine for a manual retry); they never
//! send HTTP themselves. Every connection is closed with hyper's `graceful_shutdown` when herald
//! stops, and the whole drain is bounded by the shutdown grace period.
//!
//! # Adding a route
//!
//! 1. Add its [`Id`] and its row in [`routes::ROUTES`]: method, path (`{name}` for a parameter)
//!    and [`Access`], the one place that says who may call it.
//! 2. Write its handler in the file of its resource (`endpoints.rs`, `deliveries.rs`, ...):
//!    read the body with [`body`], check every field with [`validate`] (a bad one is `422` with
//!    the field's name and changes nothing), narrow by the caller's [`Scope`], then call the
//!    store through its contract. Let the dispatch below call it (the compiler names the
//!    missing arm).
//! 3. Describe it in [`openapi`] (the test `every_route_is_documented` fails until it is) and
//!    in docs/api.md, with its answers and error codes.
//! 4. Test it in `tests/api/` against the real server, on both stores.

mod accounts;
mod backup;
pub mod body;
mod catalog;
mod deliveries;
mod endpoints;
pub mod error;
mod filters;
mod health;
pub mod ingest;
mod look;
pub mod openapi;
mod pages;
mod replay;
pub mod routes;
pub mod server;
mod sessions;
mod status;
pub mod svix;
pub mod validate;

pub use look::Look;
use routes::{Access, Id};
pub use routes::{Role, Scope};
pub use server::{serve, Limits};
pub use sessions::PORTAL_TOKEN_PREFIX;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use hyper::{Method, Request, Response, StatusCode};
use subtle::ConstantTimeEq;

use crate::clock::Clock;
use crate::config::Config;
use crate::engine::Engine;
use crate::policy::ssrf::Guard;
use crate::shutdown::Shutdown;
use crate::store::prelude::*;
use crate::store::Backend;
use error::ApiError;

pub type Resp = Response<Body>;

/// An answer's body: whole (almost every answer), or streamed as it is made (a backup).
pub type Body = http_body_util::Either<http_body_util::Full<Bytes>, Streamed>;

/// A whole body.
pub fn full(bytes: Bytes) -> Body {
    Body::Left(http_body_util::Full::new(bytes))
}

/// A body sent as its producer makes it: each chunk as it arrives, and an error ends the answer
/// without its last chunk, so the client sees it cut short.
pub struct Streamed(pub tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl hyper::body::Body for Streamed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| c.map(hyper::body::Frame::data)))
    }
}

/// The tokens that open the API. Admin tokens open everything; ingest tokens only post events.
#[derive(Clone, Default)]
pub struct Tokens {
    pub admin: Vec<String>,
    pub ingest: Vec<String>,
}

impl Tokens {
    fn role(&self, presented: &[u8]) -> Option<Role> {
        // Every token is compared (in constant time), so timing says nothing about which matched.
        let is = |list: &[String]| {
            list.iter().fold(false, |hit, t| {
                hit | bool::from(t.as_bytes().ct_eq(presented))
            })
        };
        let admin = is(&self.admin);
        let ingest = is(&self.ingest);
        if admin {
            Some(Role::Admin)
        } else if ingest {
            Some(Role::Ingest)
        } else {
            None
        }
    }
}

/// Everything a handler may use.
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Backend,
    pub engine: Arc<Engine>,
    pub clock: Arc<dyn Clock>,
    pub tokens: Tokens,
    pub guard: Guard,
    pub started: Instant,
    pub shutting_down: Shutdown,
    pub limits: Limits,
    pub auth_failures: server::AuthFailures,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The catalog's payload schemas, compiled.
    pub schemas: crate::policy::schema::Catalog,
    /// Where people reach herald (portal links, the OpenAPI server): `server.public_url`, else
    /// `http://` + the address the listener is bound to.
    pub public_url: String,
    /// The portal's brand, theme and logo, read at start.
    pub look: Look,
}

async fn route(state: Arc<AppState>, req: Request<Incoming>, peer: SocketAddr) -> Resp {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let result = dispatch(&state, req, &method, &path).await;
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => {
            if e.status == StatusCode::UNAUTHORIZED {
                state.auth_failures.record(peer, &method, &path);
            }
            e.into_response()
        }
    };
    // Every answer, JSON, errors, /metrics and pages alike: a browser must never guess a type
    // (an error echoes the request path as text; sniffed as HTML it could run).
    resp.headers_mut()
        .insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}

fn bearer(req: &Request<Incoming>) -> Option<String> {
    let v = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

/// The caller's role: a configured token, or a live portal session's.
async fn role_of(state: &AppState, token: &str) -> Result<Option<Role>, ApiError> {
    if let Some(role) = state.tokens.role(token.as_bytes()) {
        return Ok(Some(role));
    }
    if !token.starts_with(PORTAL_TOKEN_PREFIX) {
        return Ok(None);
    }
    let session = state
        .store
        .portal_session(token, state.clock.now_ms())
        .await?;
    Ok(session.map(Role::Portal))
}

async fn dispatch(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    method: &Method,
    path: &str,
) -> Result<Resp, ApiError> {
    // HEAD is a GET whose answer has no body: the same route, role and headers (hyper sends
    // no body to a HEAD).
    if state.config.svix.enabled && svix::is_svix_path(path) {
        return Ok(svix::handle(state, req).await);
    }
    let routed = if method == Method::HEAD {
        &Method::GET
    } else {
        method
    };
    let (route, params) = match routes::find(routed, path) {
        Ok(found) => found,
        Err(exists) => {
            body::discard_body(req).await;
            return if exists {
                let allowed = routes::allowed(path);
                let mut resp = ApiError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    format!(
                        "{method} is not a method of {path}; it takes {}",
                        allowed.join(", ")
                    ),
                )
                .into_response();
                if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
                    resp.headers_mut().insert(hyper::header::ALLOW, v);
                }
                Ok(resp)
            } else {
                Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("no route for {method} {path}"),
                ))
            };
        }
    };
    let (role, scope) = match admit(state, &req, route, &params).await {
        Ok(admitted) => admitted,
        Err(e) => {
            body::discard_body(req).await;
            return Err(e);
        }
    };
    let Some(name) = creates_events(route.id) else {
        return handle(state, req, route.id, &params, role, scope).await;
    };
    let mut req = req;
    let span = start_request_span(state, name, route.path, &mut req);
    let answer = handle(state, req, route.id, &params, role, scope).await;
    end_request_span(span, &answer);
    answer
}

/// An error answer's status, which its request's span records.
pub(crate) trait Refusal {
    fn status(&self) -> StatusCode;
}

impl Refusal for ApiError {
    fn status(&self) -> StatusCode {
        self.status
    }
}

/// Ends the span [`start_request_span`] started with the answer's status.
pub(crate) fn end_request_span<E: Refusal>(
    span: crate::traces::RequestSpan,
    answer: &Result<Resp, E>,
) {
    span.answered(
        answer
            .as_ref()
            .map_or_else(E::status, |r| r.status())
            .as_u16(),
    );
}

/// Starts the span of a request that creates events (`name`: its method and route) and gives
/// the request the context its events keep ([`request_trace`]); the caller ends the span with
/// the answer's status.
pub(crate) fn start_request_span(
    state: &AppState,
    name: &'static str,
    route: &'static str,
    req: &mut Request<Incoming>,
) -> crate::traces::RequestSpan {
    let span = state.engine.traces().request(name, route, req.headers());
    if let Some(context) = span.context() {
        req.extensions_mut().insert(RequestTrace(context.clone()));
    }
    span
}

/// The trace context a request that creates events gives them (docs/operations.md, "Traces"),
/// set by the router when there is one.
#[derive(Clone)]
struct RequestTrace(crate::trace::TraceContext);

/// The context the events a request creates keep: the request's span's.
pub(crate) fn request_trace<B>(req: &Request<B>) -> Option<crate::trace::TraceContext> {
    req.extensions().get::<RequestTrace>().map(|t| t.0.clone())
}

/// The span name of a route that creates events (their trace starts with it), if it is one.
fn creates_events(id: Id) -> Option<&'static str> {
    Some(match id {
        Id::Ingest => "POST /v1/events",
        Id::IngestBatch => "POST /v1/events/batch",
        Id::EventReplay => "POST /v1/events/{id}/replay",
        Id::EndpointTest => "POST /v1/endpoints/{id}/test",
        _ => return None,
    })
}

/// Who calls and what they may reach: the caller's role from its token, the scope the route
/// allows it (`401`, `403`), the node's copy of endpoints and plans brought up to date in a
/// cluster, and another account's object answering `404` to a portal session.
async fn admit(
    state: &Arc<AppState>,
    req: &Request<Incoming>,
    route: &routes::Route,
    params: &routes::Params<'_>,
) -> Result<(Option<Role>, Scope), ApiError> {
    let role = match bearer(req) {
        Some(token) if route.access != Access::Public => role_of(state, &token).await?,
        _ => None,
    };
    let scope = routes::authorize(route, params, role.as_ref())?;
    // In a cluster another node's change of endpoints or plans reaches this node's copy by
    // notice a moment after its commit: a request that may read them brings the copy up to date
    // first (ingest checks its fan-out as it writes instead).
    if route.access != Access::Public && !matches!(route.id, Id::Ingest | Id::IngestBatch) {
        state.store.fresh_directory().await?;
    }
    // A portal session's object of another account does not exist for it (before anything of
    // the request is looked at).
    if let (Some(account), Some((_, id))) =
        (scope.account(), params.iter().find(|(n, _)| *n == "id"))
    {
        let owner = owner_of(state, route.id, id).await?;
        if owner.is_some_and(|o| o != account) {
            return Err(ApiError::not_found(object_name(route.id)));
        }
    }
    Ok((role, scope))
}

/// The route's handler, for an admitted request.
async fn handle(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    route: Id,
    params: &routes::Params<'_>,
    role: Option<Role>,
    scope: Scope,
) -> Result<Resp, ApiError> {
    let p = |name: &str| {
        params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_default()
    };
    let s = &scope;
    match route {
        Id::Root => Ok(pages::root()),
        Id::Healthz => Ok(status::healthz(state).await),
        Id::Metrics => Ok(status::metrics(state).await),
        Id::OpenApi => Ok(openapi::serve(state, &req)),
        Id::Portal => Ok(pages::page(state, &req, pages::Page::Portal)),
        Id::Console => Ok(pages::page(state, &req, pages::Page::Console)),
        Id::Asset => Ok(pages::asset(state, &req, p("file"))),
        Id::Ingest => ingest::single(state, req).await,
        Id::IngestBatch => ingest::batch(state, req).await,
        Id::Session => Ok(sessions::whoami(state, role.as_ref())),
        Id::Status => status::status(state).await,
        Id::Backup => Ok(backup::stream(state)),
        Id::Accounts => accounts::list(state).await,
        Id::AccountPut => accounts::put(state, s, req, p("account_id")).await,
        Id::AccountGet => accounts::get(state, p("account_id")).await,
        Id::AccountDelete => accounts::purge(state, p("account_id")).await,
        Id::AccountSecret => accounts::put_secret(state, req, p("account_id"), p("name")).await,
        Id::FilterTest => filters::test(state, req, p("account_id")).await,
        Id::AlertTest => accounts::test_alert(state, p("account_id")).await,
        Id::PortalSessionCreate => sessions::create(state, req, p("account_id")).await,
        Id::PortalSessionDelete => sessions::delete(state, req, p("id")).await,
        Id::EventTypes => catalog::event_types(state),
        Id::RetryPolicies => Ok(catalog::retry_policies(state)),
        Id::EndpointCreate => endpoints::create(state, s, req, p("account_id")).await,
        Id::EndpointList => endpoints::list(state, p("account_id")).await,
        Id::EndpointGet => endpoints::get(state, s, p("id")).await,
        Id::EndpointPatch => endpoints::patch(state, s, req, p("id")).await,
        Id::EndpointDelete => endpoints::delete(state, s, p("id")).await,
        Id::EndpointVerify => endpoints::verify(state, s, req, p("id")).await,
        Id::EndpointRotate => endpoints::rotate_secret(state, s, req, p("id")).await,
        Id::EndpointCertificatePut => {
            endpoints::put_client_certificate(state, s, req, p("id")).await
        }
        Id::EndpointCertificateDelete => {
            endpoints::delete_client_certificate(state, s, req, p("id")).await
        }
        Id::EndpointPause => endpoints::set_state(state, s, req, p("id"), "pause").await,
        Id::EndpointResume => endpoints::set_state(state, s, req, p("id"), "resume").await,
        Id::EndpointTest => catalog::send_test(state, s, req, p("id")).await,
        Id::EndpointRecover => replay::recover(state, s, req, p("id")).await,
        Id::EndpointStats => health::endpoint_stats(state, s, p("id"), req.uri().query()).await,
        Id::Deliveries => deliveries::list(state, s, req.uri().query()).await,
        Id::DeliveryGet => deliveries::get(state, s, p("id")).await,
        Id::DeliveryRetry => deliveries::retry(state, s, req, p("id")).await,
        Id::EventGet => deliveries::get_event(state, s, p("id")).await,
        Id::EventReplay => replay::replay(state, s, req, p("id")).await,
        Id::Incidents => health::incidents(state, s, req.uri().query()).await,
    }
}

/// The account an object named in a route's path belongs to, if it exists.
async fn owner_of(state: &Arc<AppState>, route: Id, id: &str) -> Result<Option<String>, ApiError> {
    let id = id.to_string();
    match route {
        Id::DeliveryGet | Id::DeliveryRetry => {
            Ok(state.store.delivery(&id).await?.map(|d| d.account_id))
        }
        Id::EventGet | Id::EventReplay => {
            Ok(state.store.event(&id).await?.map(|(m, _)| m.account_id))
        }
        Id::PortalSessionDelete => Ok(None),
        _ => Ok(state.store.endpoint(&id).map(|e| e.account_id.clone())),
    }
}

fn object_name(route: Id) -> &'static str {
    match route {
        Id::DeliveryGet | Id::DeliveryRetry => "delivery",
        Id::EventGet | Id::EventReplay => "event",
        _ => "endpoint",
    }
}

/// A JSON answer.
pub fn json(status: StatusCode, value: &impl serde::Serialize) -> Resp {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = Response::new(full(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub fn no_content() -> Resp {
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp
}
