//! Who may do what (docs/api.md), as a table over every route of the router × every kind of
//! caller: admin, ingest, portal session, read-only portal session, expired portal session, and
//! none. Another account's object answers `404` to a portal session.

use crate::common;

use std::time::Duration;

use common::herald::{ADMIN_TOKEN, INGEST_TOKEN};
use common::{first_delivery, HeraldApi, InProc, Receiver, World};
use herald::api::routes::{Access, Id, Route, ROUTES};
use hyper::Method;
use serde_json::{json, Value};

const T0: i64 = 1_796_277_600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Admin,
    Ingest,
    Portal,
    PortalReadOnly,
    PortalExpired,
    Nobody,
}

/// What a caller gets from a route: refused with this status, or let through (the handler then
/// answers whatever the request deserves, never 401 or 403).
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    Through,
    Refused(u16),
}

fn expected(route: &Route, caller: Caller) -> Expect {
    use Caller::*;
    use Expect::*;
    // Testing a payload filter changes nothing: read-only sessions may (docs/api.md).
    let write = route.method != Method::GET && route.id != Id::FilterTest;
    match (route.access, caller) {
        (Access::Public, _) => Through,
        (Access::Ingest, Admin | Ingest) => Through,
        (Access::Admin, Admin) => Through,
        (Access::Session, Admin | Ingest | Portal | PortalReadOnly) => Through,
        (Access::Account, Admin | Portal) => Through,
        (Access::Account, PortalReadOnly) if write => Refused(403),
        (Access::Account, PortalReadOnly) => Through,
        _ => Refused(401),
    }
}

/// The objects the table's paths name.
struct Fixture {
    endpoint: String,
    delivery: String,
    event: String,
    other_endpoint: String,
    other_delivery: String,
    other_event: String,
    tokens: Vec<(Caller, Option<String>)>,
}

async fn create_endpoint(h: &InProc, account: &str, url: &str) -> String {
    let (status, created) = h
        .admin(
            "POST",
            &format!("/v1/accounts/{account}/endpoints"),
            Some(json!({"url": url})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    created["endpoint"]["id"].as_str().unwrap().to_string()
}

async fn create_event(h: &InProc, account: &str) -> (String, String) {
    let (status, answer) = h
        .ingest(json!({"account_id": account, "type": "t.x", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    (
        answer["event_id"].as_str().unwrap().to_string(),
        first_delivery(&answer),
    )
}

async fn session(h: &InProc, account: &str, body: Value) -> String {
    let (status, s) = h
        .admin(
            "POST",
            &format!("/v1/accounts/{account}/portal-sessions"),
            Some(body),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let token = s["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("hps_"), "{s}");
    assert!(
        s["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/portal#token={token}")),
        "{s}"
    );
    token
}

impl Fixture {
    async fn new(w: &World<InProc>, recv: &Receiver) -> Fixture {
        let h = &w.herald;
        let url = recv.url("/hook");
        let endpoint = create_endpoint(h, "acme", &url).await;
        let other_endpoint = create_endpoint(h, "other", &url).await;
        let (event, delivery) = create_event(h, "acme").await;
        let (other_event, other_delivery) = create_event(h, "other").await;
        let portal = session(h, "acme", json!({})).await;
        let read_only = session(h, "acme", json!({"read_only": true})).await;
        let expired = session(h, "acme", json!({"ttl": "1s"})).await;
        h.clock.advance(Duration::from_secs(2));
        Fixture {
            endpoint,
            delivery,
            event,
            other_endpoint,
            other_delivery,
            other_event,
            tokens: vec![
                (Caller::Admin, Some(ADMIN_TOKEN.into())),
                (Caller::Ingest, Some(INGEST_TOKEN.into())),
                (Caller::Portal, Some(portal)),
                (Caller::PortalReadOnly, Some(read_only)),
                (Caller::PortalExpired, Some(expired)),
                (Caller::Nobody, None),
            ],
        }
    }

    /// The route's path with acme's objects (or the other account's).
    fn path(&self, route: &Route, other: bool) -> String {
        let (account, endpoint, delivery, event) = if other {
            (
                "other",
                &self.other_endpoint,
                &self.other_delivery,
                &self.other_event,
            )
        } else {
            ("acme", &self.endpoint, &self.delivery, &self.event)
        };
        let id = match route.id {
            Id::DeliveryGet | Id::DeliveryRetry => delivery.as_str(),
            Id::EventGet | Id::EventReplay => event.as_str(),
            Id::PortalSessionDelete => "ps_01M8XBM7AG7X1GYY42EG4PZ48P",
            Id::Asset => "app.js",
            _ => endpoint.as_str(),
        };
        route
            .path
            .replace("{account_id}", account)
            .replace("{id}", id)
            .replace("{file}", id)
            .replace("{name}", "API_KEY")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_each_kind_of_caller_as_the_spec_says() {
    let w = World::start_manual(
        "",
        "[endpoints]\nmax_per_account = 100\nrequire_verification = false\n",
        T0,
    )
    .await;
    let recv = Receiver::ok_https(&w.ca);
    let f = Fixture::new(&w, &recv).await;
    let h = &w.herald;
    let mut checked = 0;
    for route in ROUTES {
        // Deletes last for each caller, so later rows still find the endpoint and the account.
        if matches!(route.id, Id::EndpointDelete | Id::AccountDelete) {
            continue;
        }
        for (caller, token) in &f.tokens {
            let path = f.path(route, false);
            let (status, body) = h
                .call(route.method.as_str(), &path, token.as_deref(), None)
                .await;
            let got = match status {
                401 | 403 => Expect::Refused(status),
                _ => Expect::Through,
            };
            assert_eq!(
                got,
                expected(route, *caller),
                "{} {path} as {caller:?}: {status} {body}",
                route.method
            );
            assert!(
                status < 500,
                "{} {path} as {caller:?}: {status} {body}",
                route.method
            );
            if status == 401 {
                assert_eq!(body["error"]["code"], "unauthorized", "{body}");
            }
            if status == 403 {
                assert_eq!(body["error"]["code"], "read_only", "{body}");
            }
            checked += 1;
        }
    }
    // Deleting an endpoint: each caller on an endpoint of its own.
    let delete = ROUTES.iter().find(|r| r.id == Id::EndpointDelete).unwrap();
    for (caller, token) in &f.tokens {
        let id = create_endpoint(h, "acme", &recv.url("/hook")).await;
        let (status, body) = h
            .call(
                "DELETE",
                &format!("/v1/endpoints/{id}"),
                token.as_deref(),
                None,
            )
            .await;
        let want = match expected(delete, *caller) {
            Expect::Through => 204,
            Expect::Refused(s) => s,
        };
        assert_eq!(status, want, "DELETE as {caller:?}: {body}");
        checked += 1;
    }
    // Purging an account: each caller on an account of its own.
    let purge = ROUTES.iter().find(|r| r.id == Id::AccountDelete).unwrap();
    for (i, (caller, token)) in f.tokens.iter().enumerate() {
        let account = format!("gone-{i}");
        create_endpoint(h, &account, &recv.url("/hook")).await;
        let (status, body) = h
            .call(
                "DELETE",
                &format!("/v1/accounts/{account}"),
                token.as_deref(),
                None,
            )
            .await;
        let want = match expected(purge, *caller) {
            Expect::Through => 200,
            Expect::Refused(s) => s,
        };
        assert_eq!(status, want, "purge as {caller:?}: {body}");
        checked += 1;
    }
    assert_eq!(checked, ROUTES.len() * f.tokens.len());
}

/// Another account's object (or path) is not found for a portal session: its existence is not
/// revealed. The same requests with the session's own objects succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_accounts_objects_answer_404_to_a_portal_session() {
    let w = World::start_manual(
        "",
        "[endpoints]\nmax_per_account = 100\nrequire_verification = false\n",
        T0,
    )
    .await;
    let recv = Receiver::ok_https(&w.ca);
    let f = Fixture::new(&w, &recv).await;
    let h = &w.herald;
    let portal = f.tokens[2].1.clone().unwrap();
    let mut checked = 0;
    for route in ROUTES
        .iter()
        .filter(|r| r.access == Access::Account && r.path.contains('{'))
    {
        let path = f.path(route, true);
        let (status, body) = h
            .call(route.method.as_str(), &path, Some(&portal), None)
            .await;
        assert_eq!(status, 404, "{} {path}: {body}", route.method);
        checked += 1;
    }
    assert!(checked >= 15, "{checked} routes");
    // Lists and incidents keep to the session's account.
    let (status, list) = h
        .call(
            "GET",
            "/v1/deliveries?account_id=other",
            Some(&portal),
            None,
        )
        .await;
    assert_eq!(status, 404, "{list}");
    let (status, list) = h.call("GET", "/v1/deliveries", Some(&portal), None).await;
    assert_eq!(status, 200);
    let accounts: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["account_id"].as_str().unwrap())
        .collect();
    assert!(
        !accounts.is_empty() && accounts.iter().all(|a| *a == "acme"),
        "{list}"
    );
    let (status, me) = h.call("GET", "/v1/session", Some(&portal), None).await;
    assert_eq!(status, 200);
    assert_eq!(
        (me["role"].as_str(), me["account_id"].as_str()),
        (Some("portal"), Some("acme"))
    );
}

/// A revoked session answers 401 at once; the token is never shown again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_portal_session_is_refused_at_once() {
    let w = World::start_manual("", "", T0).await;
    let h = &w.herald;
    let (status, s) = h
        .admin(
            "POST",
            "/v1/accounts/acme/portal-sessions",
            Some(json!({"ttl": "2h"})),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    assert_eq!(
        s["expires_at"],
        herald::clock::rfc3339(T0 + 2 * 3600 * 1000)
    );
    let token = s["token"].as_str().unwrap();
    let (status, _) = h.call("GET", "/v1/session", Some(token), None).await;
    assert_eq!(status, 200);
    let id = s["id"].as_str().unwrap();
    let (status, _) = h
        .admin("DELETE", &format!("/v1/portal-sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = h.call("GET", "/v1/deliveries", Some(token), None).await;
    assert_eq!(status, 401);
    // Past portal.max_session_ttl, or not a duration: refused, nothing minted.
    for ttl in [json!("8d"), json!("soon"), json!(5)] {
        let (status, e) = h
            .admin(
                "POST",
                "/v1/accounts/acme/portal-sessions",
                Some(json!({"ttl": ttl})),
            )
            .await;
        assert_eq!(
            (status, e["error"]["field"].as_str()),
            (422, Some("ttl")),
            "{e}"
        );
    }
}

/// docs/api.md: an account id is never `.` or `..` (a browser resolves them as path segments, so
/// their portal could never load). Everything that takes an account id to create or write
/// refuses them with `422` naming `account_id`, and stores nothing; the admin's reads still
/// reach an account an older herald accepted (docs/operations.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_account_ids_are_refused_wherever_an_account_is_written() {
    let w = World::start_manual("", "", T0).await;
    let h = &w.herald;
    for id in [".", ".."] {
        let refused = |(status, answer): (u16, Value), what: &str| {
            assert_eq!(status, 422, "{what} for {id:?}: {answer}");
            assert_eq!(answer["error"]["field"], "account_id", "{what}: {answer}");
        };
        refused(
            h.ingest(json!({"account_id": id, "type": "t.x", "payload": {}}))
                .await,
            "ingest",
        );
        let (status, answer) = h
            .ingest_batch(json!([{"account_id": id, "type": "t.x", "payload": {}}]))
            .await;
        assert_eq!(status, 202, "{answer}");
        assert_eq!(
            answer["results"][0]["error"]["field"], "events[0].account_id",
            "{answer}"
        );
        let path = |rest: &str| format!("/v1/accounts/{id}{rest}");
        refused(
            h.admin("PUT", &path(""), Some(json!({"plan": null}))).await,
            "PUT account",
        );
        refused(
            h.admin("PUT", &path("/secrets/KEY"), Some(json!({"value": "v"})))
                .await,
            "PUT secret",
        );
        refused(
            h.admin(
                "POST",
                &path("/endpoints"),
                Some(json!({"url": "https://example.com/"})),
            )
            .await,
            "create endpoint",
        );
        refused(
            h.admin("POST", &path("/portal-sessions"), Some(json!({})))
                .await,
            "portal session",
        );
        // Reads still reach such an account.
        let (status, account) = h.admin("GET", &path(""), None).await;
        assert_eq!(status, 200, "{account}");
        let (status, list) = h.admin("GET", &path("/endpoints"), None).await;
        assert_eq!(status, 200, "{list}");
        let (status, list) = h
            .admin("GET", &format!("/v1/deliveries?account_id={id}"), None)
            .await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(list["items"], json!([]), "nothing was stored: {list}");
    }
    let (_, accounts) = h.admin("GET", "/v1/accounts", None).await;
    assert!(
        !accounts.to_string().contains("\"..\""),
        "no dot account was made: {accounts}"
    );
    // Dots inside an id are fine.
    let (status, answer) = h
        .ingest(json!({"account_id": "...", "type": "t.x", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{answer}");
}
