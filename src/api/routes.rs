//! Every route of the API in one table, with who may call it (docs/api.md). The router matches a
//! request against it, [`authorize`] decides on the caller's role, and the OpenAPI document
//! is checked against the same table, so a route cannot exist without its access rule or its
//! documentation.

use hyper::Method;

use super::error::ApiError;
use crate::model::PortalSession;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health, metrics, the OpenAPI document, the pages and their assets).
    Public,
    /// Ingest and admin tokens.
    Ingest,
    /// Admin tokens only.
    Admin,
    /// Admin tokens, and portal sessions of the account the route's object belongs to; a
    /// read-only session only for `GET`.
    Account,
    /// Any valid credential (the caller's own session).
    Session,
}

/// The routes, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    Root,
    Healthz,
    Metrics,
    OpenApi,
    Portal,
    Console,
    Asset,
    Ingest,
    IngestBatch,
    Session,
    Status,
    Backup,
    Accounts,
    AccountPut,
    AccountGet,
    AccountDelete,
    AccountSecret,
    FilterTest,
    AlertTest,
    PortalSessionCreate,
    PortalSessionDelete,
    EventTypes,
    RetryPolicies,
    EndpointCreate,
    EndpointList,
    EndpointGet,
    EndpointPatch,
    EndpointDelete,
    EndpointVerify,
    EndpointRotate,
    EndpointCertificatePut,
    EndpointCertificateDelete,
    EndpointPause,
    EndpointResume,
    EndpointTest,
    EndpointRecover,
    EndpointStats,
    Deliveries,
    DeliveryGet,
    DeliveryRetry,
    EventGet,
    EventReplay,
    Incidents,
}

pub struct Route {
    pub method: Method,
    /// Segments; `{name}` captures one.
    pub path: &'static str,
    pub access: Access,
    pub id: Id,
}

impl Route {
    /// True if calling the route may change something: what a read-only session may not do.
    /// Every method but `GET` does, except testing a filter.
    pub fn changes(&self) -> bool {
        self.method != Method::GET && self.id != Id::FilterTest
    }
}

const fn route(method: Method, path: &'static str, access: Access, id: Id) -> Route {
    Route {
        method,
        path,
        access,
        id,
    }
}

/// The whole API.
pub static ROUTES: &[Route] = &[
    route(Method::GET, "/", Access::Public, Id::Root),
    route(Method::GET, "/healthz", Access::Public, Id::Healthz),
    route(Method::GET, "/metrics", Access::Public, Id::Metrics),
    route(Method::GET, "/openapi.json", Access::Public, Id::OpenApi),
    route(Method::GET, "/portal", Access::Public, Id::Portal),
    route(Method::GET, "/console", Access::Public, Id::Console),
    route(Method::GET, "/assets/{file}", Access::Public, Id::Asset),
    route(Method::POST, "/v1/events", Access::Ingest, Id::Ingest),
    route(
        Method::POST,
        "/v1/events/batch",
        Access::Ingest,
        Id::IngestBatch,
    ),
    route(Method::GET, "/v1/session", Access::Session, Id::Session),
    route(Method::GET, "/v1/status", Access::Admin, Id::Status),
    route(Method::GET, "/v1/backup", Access::Admin, Id::Backup),
    route(Method::GET, "/v1/accounts", Access::Admin, Id::Accounts),
    route(
        Method::PUT,
        "/v1/accounts/{account_id}",
        Access::Account,
        Id::AccountPut,
    ),
    route(
        Method::GET,
        "/v1/accounts/{account_id}",
        Access::Account,
        Id::AccountGet,
    ),
    route(
        Method::DELETE,
        "/v1/accounts/{account_id}",
        Access::Admin,
        Id::AccountDelete,
    ),
    route(
        Method::PUT,
        "/v1/accounts/{account_id}/secrets/{name}",
        Access::Admin,
        Id::AccountSecret,
    ),
    route(
        Method::POST,
        "/v1/accounts/{account_id}/filter-test",
        Access::Account,
        Id::FilterTest,
    ),
    route(
        Method::POST,
        "/v1/accounts/{account_id}/alerts/test",
        Access::Account,
        Id::AlertTest,
    ),
    route(
        Method::POST,
        "/v1/accounts/{account_id}/portal-sessions",
        Access::Admin,
        Id::PortalSessionCreate,
    ),
    route(
        Method::DELETE,
        "/v1/portal-sessions/{id}",
        Access::Admin,
        Id::PortalSessionDelete,
    ),
    route(
        Method::GET,
        "/v1/event-types",
        Access::Account,
        Id::EventTypes,
    ),
    route(
        Method::GET,
        "/v1/retry-policies",
        Access::Account,
        Id::RetryPolicies,
    ),
    route(
        Method::POST,
        "/v1/accounts/{account_id}/endpoints",
        Access::Account,
        Id::EndpointCreate,
    ),
    route(
        Method::GET,
        "/v1/accounts/{account_id}/endpoints",
        Access::Account,
        Id::EndpointList,
    ),
    route(
        Method::GET,
        "/v1/endpoints/{id}",
        Access::Account,
        Id::EndpointGet,
    ),
    route(
        Method::PATCH,
        "/v1/endpoints/{id}",
        Access::Account,
        Id::EndpointPatch,
    ),
    route(
        Method::DELETE,
        "/v1/endpoints/{id}",
        Access::Account,
        Id::EndpointDelete,
    ),
    route(
        Method::POST,
        "/v1/endpoints/{id}/verify",
        Access::Account,
        Id::EndpointVerify,
    ),
    route(
        Method::POST,
        "/v1/endpoints/{id}/secret/rotate",
        Access::Account,
        Id::EndpointRotate,
    ),
    route(
        Method::PUT,
        "/v1/endpoints/{id}/client-certificate",
        Access::Account,
        Id::EndpointCertificatePut,
    ),
    route(
        Method::DELETE,
        "/v1/endpoints/{id}/client-certificate",
        Access::Account,
        Id::EndpointCertificateDelete,
    ),
    route(
        Method::POST,
        "/v1/endpoints/{id}/pause",
        Access::Account,
        Id::EndpointPause,
    ),
    route(
        Method::POST,
        "/v1/endpoints/{id}/resume",
        Access::Account,
        Id::EndpointResume,
    ),
    route(
        Method::POST,
        "/v1/endpoints/{id}/test",
        Access::Account,
        Id::EndpointTest,
    ),
    route(
        Method::POST,
        "/v1/endpoints/{id}/recover",
        Access::Account,
        Id::EndpointRecover,
    ),
    route(
        Method::GET,
        "/v1/endpoints/{id}/stats",
        Access::Account,
        Id::EndpointStats,
    ),
    route(
        Method::GET,
        "/v1/deliveries",
        Access::Account,
        Id::Deliveries,
    ),
    route(
        Method::GET,
        "/v1/deliveries/{id}",
        Access::Account,
        Id::DeliveryGet,
    ),
    route(
        Method::POST,
        "/v1/deliveries/{id}/retry",
        Access::Account,
        Id::DeliveryRetry,
    ),
    route(
        Method::GET,
        "/v1/events/{id}",
        Access::Account,
        Id::EventGet,
    ),
    route(
        Method::POST,
        "/v1/events/{id}/replay",
        Access::Account,
        Id::EventReplay,
    ),
    route(Method::GET, "/v1/incidents", Access::Account, Id::Incidents),
];

/// The segments a route captured, in order.
pub type Params<'a> = Vec<(&'static str, &'a str)>;

/// Each route's path split into segments once (matching runs on every request).
static SEGMENTS: std::sync::LazyLock<Vec<Vec<&'static str>>> = std::sync::LazyLock::new(|| {
    ROUTES
        .iter()
        .map(|r| r.path.trim_matches('/').split('/').collect())
        .collect()
});

/// The route a request is for and what it captured; `Err(true)` if the path exists with
/// another method (405), `Err(false)` if it does not (404).
pub fn find<'p>(method: &Method, path: &'p str) -> Result<(&'static Route, Params<'p>), bool> {
    let trimmed = path.trim_matches('/');
    let mut path_exists = false;
    for (r, pat) in ROUTES.iter().zip(SEGMENTS.iter()) {
        let Some(params) = matches(pat, trimmed) else {
            continue;
        };
        if r.method == *method {
            return Ok((r, params));
        }
        path_exists = true;
    }
    Err(path_exists)
}

/// The methods a path takes, for a `405`'s `Allow` header (`HEAD` wherever `GET` is).
pub fn allowed(path: &str) -> Vec<&'static str> {
    let trimmed = path.trim_matches('/');
    let mut out = Vec::new();
    for (r, pat) in ROUTES.iter().zip(SEGMENTS.iter()) {
        if matches(pat, trimmed).is_some() {
            out.push(r.method.as_str());
            if r.method == Method::GET {
                out.push("HEAD");
            }
        }
    }
    out
}

fn matches<'p>(pattern: &[&'static str], path: &'p str) -> Option<Params<'p>> {
    let mut segs = path.split('/');
    let mut params = Vec::new();
    for p in pattern {
        let s = segs.next()?;
        match p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some(name) if !s.is_empty() => params.push((name, s)),
            Some(_) => return None,
            None if *p == s => {}
            None => return None,
        }
    }
    segs.next().is_none().then_some(params)
}

/// The caller, from its bearer token.
#[derive(Debug, Clone)]
pub enum Role {
    Admin,
    Ingest,
    Portal(PortalSession),
}

/// What a request may reach once authorized: everything, or one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Account { account_id: String, read_only: bool },
}

impl Scope {
    /// The account a portal session is for; `None` for everything.
    pub fn account(&self) -> Option<&str> {
        match self {
            Scope::All => None,
            Scope::Account { account_id, .. } => Some(account_id),
        }
    }

    /// `404 not_found(what)` unless the scope reaches `account_id`: another account's object
    /// does not exist for a portal session (its existence is not revealed).
    pub fn check(&self, account_id: &str, what: &str) -> Result<(), ApiError> {
        match self.account() {
            Some(a) if a != account_id => Err(ApiError::not_found(what)),
            _ => Ok(()),
        }
    }

    /// A list's account filter within the scope: a portal session's own account is forced, and
    /// naming another one is `404` (as [`Scope::check`]).
    pub fn narrow(&self, account_filter: &mut Option<String>) -> Result<(), ApiError> {
        if let Some(own) = self.account() {
            if let Some(asked) = account_filter.as_deref() {
                self.check(asked, "account")?;
            }
            *account_filter = Some(own.to_string());
        }
        Ok(())
    }
}

/// Decides whether `role` may call `route` (docs/api.md): `401` without a credential the route
/// takes, `403 read_only` for a read-only session's change, `404` for another account's path.
pub fn authorize(
    route: &Route,
    params: &Params<'_>,
    role: Option<&Role>,
) -> Result<Scope, ApiError> {
    let scope = match (route.access, role) {
        (Access::Public, _) => Scope::All,
        (Access::Ingest, Some(Role::Admin | Role::Ingest)) => Scope::All,
        (Access::Admin, Some(Role::Admin)) => Scope::All,
        (Access::Account | Access::Session, Some(Role::Admin)) => Scope::All,
        (Access::Session, Some(Role::Ingest)) => Scope::All,
        (Access::Account | Access::Session, Some(Role::Portal(s))) => {
            if route.access == Access::Account && s.read_only && route.changes() {
                return Err(ApiError::read_only());
            }
            Scope::Account {
                account_id: s.account_id.clone(),
                read_only: s.read_only,
            }
        }
        _ => return Err(ApiError::unauthorized()),
    };
    if let Some((_, account)) = params.iter().find(|(n, _)| *n == "account_id") {
        scope.check(account, "account")?;
    }
    Ok(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_found_by_its_own_path() {
        for r in ROUTES {
            let path = r
                .path
                .replace("{account_id}", "acme")
                .replace('{', "x")
                .replace('}', "");
            let (found, _) = find(&r.method, &path).unwrap_or_else(|_| panic!("{}", r.path));
            assert_eq!(found.id, r.id, "{} {}", r.method, r.path);
        }
    }

    #[test]
    fn captures_and_misses() {
        let (r, p) = find(&Method::POST, "/v1/endpoints/ep_1/secret/rotate").unwrap();
        assert_eq!((r.id, p), (Id::EndpointRotate, vec![("id", "ep_1")]));
        assert_eq!(find(&Method::GET, "/v1/nothing").err(), Some(false));
        assert_eq!(find(&Method::PUT, "/v1/events").err(), Some(true));
        assert_eq!(find(&Method::GET, "/v1/endpoints/").err(), Some(false));
        assert_eq!(allowed("/v1/events"), ["POST"]);
        assert_eq!(
            allowed("/v1/endpoints/ep_1"),
            ["GET", "HEAD", "PATCH", "DELETE"]
        );
    }
}
