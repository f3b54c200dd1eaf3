//! The HTTP API (hyper 1.x, HTTP/1.1): routing, tokens, JSON answers. One file per resource.
//!
//! Handlers validate, then talk to the store (and ask the engine for a manual retry); they never
//! send HTTP themselves. Every connection is closed with hyper's `graceful_shutdown` when herald
//! stops, and the whole drain is bounded by the shutdown grace period.

mod accounts;
pub mod body;
mod catalog;
mod deliveries;
mod endpoints;
pub mod error;
pub mod ingest;
mod replay;
pub mod server;
mod status;
pub mod validate;

pub use server::{serve, Limits};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use subtle::ConstantTimeEq;

use crate::clock::Clock;
use crate::config::Config;
use crate::engine::Engine;
use crate::policy::ssrf::Guard;
use crate::shutdown::Shutdown;
use crate::store::{Store, StoreError};
use error::ApiError;

pub type Resp = Response<Full<Bytes>>;

/// The tokens that open the API. Admin tokens open everything; ingest tokens only post events.
#[derive(Clone, Default)]
pub struct Tokens {
    pub admin: Vec<String>,
    pub ingest: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Admin,
    Ingest,
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
    pub store: Arc<Store>,
    pub engine: Arc<Engine>,
    pub clock: Arc<dyn Clock>,
    pub tokens: Tokens,
    pub guard: Guard,
    pub started: Instant,
    pub shutting_down: Shutdown,
    pub limits: Limits,
    pub auth_failures: server::AuthFailures,
    pub metrics: Arc<crate::metrics::Metrics>,
}

async fn route(state: Arc<AppState>, req: Request<Incoming>, peer: SocketAddr) -> Resp {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let role = bearer(&req).and_then(|t| state.tokens.role(t.as_bytes()));
    let result = dispatch(&state, req, &method, &segments, role).await;
    match result {
        Ok(r) => r,
        Err(e) => {
            if e.status == StatusCode::UNAUTHORIZED {
                state.auth_failures.record(peer, &method, &path);
            }
            e.into_response()
        }
    }
}

fn bearer(req: &Request<Incoming>) -> Option<String> {
    let v = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

async fn dispatch(
    state: &Arc<AppState>,
    req: Request<Incoming>,
    method: &Method,
    seg: &[&str],
    role: Option<Role>,
) -> Result<Resp, ApiError> {
    use Method as M;
    // Routes without a token.
    match (method, seg) {
        (&M::GET, ["healthz"]) => return Ok(status::healthz(state)),
        (&M::GET, ["metrics"]) => return Ok(status::metrics(state)),
        (&M::POST, ["v1", "events"]) | (&M::POST, ["v1", "events", "batch"]) => {
            if role.is_none() {
                body::discard_body(req).await;
                return Err(ApiError::unauthorized());
            }
            return if seg.len() == 2 {
                ingest::single(state, req).await
            } else {
                ingest::batch(state, req).await
            };
        }
        _ => {}
    }
    if role != Some(Role::Admin) {
        body::discard_body(req).await;
        return Err(ApiError::unauthorized());
    }
    match (method, seg) {
        (&M::GET, ["v1", "status"]) => Ok(status::status(state)),
        (&M::GET, ["v1", "events", id]) => deliveries::get_event(state, id).await,
        (&M::POST, ["v1", "events", id, "replay"]) => replay::replay(state, req, id).await,
        (&M::GET, ["v1", "event-types"]) => catalog::event_types(state),
        (&M::POST, ["v1", "endpoints", id, "recover"]) => replay::recover(state, req, id).await,
        (&M::POST, ["v1", "endpoints", id, "test"]) => catalog::send_test(state, req, id).await,
        (&M::PUT, ["v1", "accounts", account]) => accounts::put(state, req, account).await,
        (&M::GET, ["v1", "accounts", account]) => accounts::get(state, account),
        (&M::PUT, ["v1", "accounts", account, "secrets", name]) => {
            accounts::put_secret(state, req, account, name).await
        }
        (&M::POST, ["v1", "accounts", account, "endpoints"]) => {
            endpoints::create(state, req, account).await
        }
        (&M::GET, ["v1", "accounts", account, "endpoints"]) => endpoints::list(state, account),
        (&M::GET, ["v1", "endpoints", id]) => endpoints::get(state, id),
        (&M::PATCH, ["v1", "endpoints", id]) => endpoints::patch(state, req, id).await,
        (&M::DELETE, ["v1", "endpoints", id]) => endpoints::delete(state, id).await,
        (&M::POST, ["v1", "endpoints", id, "verify"]) => endpoints::verify(state, req, id).await,
        (&M::POST, ["v1", "endpoints", id, "secret", "rotate"]) => {
            endpoints::rotate_secret(state, req, id).await
        }
        (&M::POST, ["v1", "endpoints", id, action @ ("pause" | "resume")]) => {
            endpoints::set_state(state, req, id, action).await
        }
        (&M::GET, ["v1", "deliveries"]) => deliveries::list(state, req.uri().query()).await,
        (&M::GET, ["v1", "deliveries", id]) => deliveries::get(state, id).await,
        (&M::POST, ["v1", "deliveries", id, "retry"]) => deliveries::retry(state, req, id).await,
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route for {method} /{}", seg.join("/")),
        )),
    }
}

/// Runs store work that may read many rows (the log, its filters, an event with many
/// deliveries) on a blocking thread, so it never holds up the async workers.
pub async fn blocking<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, ApiError> {
    let store = state.store.clone();
    tokio::task::spawn_blocking(move || f(&store))
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "a storage read failed");
            ApiError::unavailable()
        })?
        .map_err(ApiError::from)
}

/// A JSON answer.
pub fn json(status: StatusCode, value: &impl serde::Serialize) -> Resp {
    let body = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

pub fn no_content() -> Resp {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp
}
