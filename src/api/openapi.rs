//! `GET /openapi.json` and `herald openapi` (docs/api.md): an OpenAPI 3.1 document of the whole
//! API — every route of [`super::routes::ROUTES`] with its parameters, bodies and answers
//! (errors included), the three bearer roles (docs/api.md, "Who may call what") — and a
//! top-level `webhooks` map with one entry per catalog type: the request herald sends (the
//! headers of docs/delivery-contract.md, "The request"; the type's schema as the body, its
//! sample as the example).
//!
//! A test walks the route table and fails on a route the document lacks, so the two cannot
//! drift apart.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::{json, Map, Value};

use super::routes::{Access, Id, Route, ROUTES};
use super::{AppState, Resp};
use crate::config::Config;
use crate::model::{DeliveryState, Status};

/// `GET /openapi.json`.
pub fn serve(state: &Arc<AppState>, _req: &Request<Incoming>) -> Resp {
    super::json(StatusCode::OK, &document(&state.config, &state.public_url))
}

/// The whole document for this config (its catalog fills `webhooks`), served at `public_url`.
pub fn document(config: &Config, public_url: &str) -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let Some(op) = operation(r) else {
            continue;
        };
        let path = paths.entry(r.path.to_string()).or_insert_with(|| json!({}));
        path[r.method.as_str().to_ascii_lowercase()] = op;
    }
    if config.svix.enabled {
        svix_paths(&mut paths);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "herald",
            "version": crate::VERSION,
            "description": "A self-hosted webhook delivery appliance: ingest events, manage \
                endpoints, read the delivery log, retry, replay and recover. Every error has \
                one shape (`Error`). Three bearer credentials: admin tokens reach every route, \
                ingest tokens post events, portal session tokens reach one account's routes.",
        },
        "servers": [{"url": public_url}],
        "paths": paths,
        "webhooks": webhooks(config),
        "components": {
            "securitySchemes": {
                "admin": {"type": "http", "scheme": "bearer", "description": "An admin token (server.admin_tokens): every route."},
                "ingest": {"type": "http", "scheme": "bearer", "description": "An ingest token (server.ingest_tokens): POST /v1/events and /v1/events/batch."},
                "portal": {"type": "http", "scheme": "bearer", "description": "A portal session token (hps_...): one account's routes; a read-only session only GETs."},
            },
            "schemas": schemas(),
            "responses": {
                "Error": {
                    "description": "An error; nothing was changed.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            },
        },
    })
}

/// The Svix-compatible API's routes (docs/svix.md), with their shapes named, not repeated: they
/// are the Svix API's own.
fn svix_paths(paths: &mut Map<String, Value>) {
    for (method, path, summary) in super::svix::ROUTES {
        let params: Vec<Value> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let entry = paths
            .entry(format!("{}{path}", super::svix::PREFIX))
            .or_insert_with(|| json!({}));
        entry[method.as_str().to_ascii_lowercase()] = json!({
            "summary": summary,
            "tags": ["svix"],
            "description": "The Svix-compatible API: requests and answers in the Svix API's \
                shapes (docs/svix.md); errors are {\"code\", \"detail\"}, and 422 is \
                {\"detail\": [{\"loc\", \"msg\", \"type\"}]}.",
            "parameters": params,
            "security": [{"admin": []}, {"ingest": []}, {"portal": []}],
            "responses": {"default": {"description": "As the Svix API answers (docs/svix.md)."}},
        });
    }
}

/// A reference to a schema of `components.schemas`.
pub(super) fn r(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn ok(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

fn body(schema: Value, required: bool) -> Value {
    json!({"required": required, "content": {"application/json": {"schema": schema}}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string", "minLength": 1}})
}

fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

fn time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn nullable(schema: Value) -> Value {
    json!({"oneOf": [schema, {"type": "null"}]})
}

/// A route's summary, parameters, request body and answers by status.
type Spec<'a> = (&'a str, Vec<Value>, Option<Value>, Vec<(String, Value)>);

/// The operation object of a route; `None` for routes the document leaves out (none today:
/// the test checks every route is in).
fn operation(route: &Route) -> Option<Value> {
    let (summary, params, req, mut responses) = server_spec(route.id)
        .or_else(|| page_spec(route.id))
        .or_else(|| ingest_spec(route.id))
        .or_else(|| account_spec(route.id))
        .or_else(|| portal_spec(route.id))
        .or_else(|| endpoint_spec(route.id))
        .or_else(|| endpoint_action_spec(route.id))
        .or_else(|| endpoint_test_spec(route.id))
        .or_else(|| log_spec(route.id))
        .or_else(|| event_spec(route.id))?;
    // What any route may answer besides its own.
    match route.access {
        Access::Public => {}
        _ => responses.push(e(401, "Missing or wrong credential.")),
    }
    if route.access == Access::Account
        && route.changes()
        && !responses.iter().any(|(c, _)| c == "403")
    {
        responses.push(e(403, "A read-only portal session (code `read_only`)."));
    }
    if req.is_some() {
        responses.push(e(
            408,
            "The request did not arrive within server.request_timeout.",
        ));
    }
    if !responses.iter().any(|(c, _)| c == "503") && route.access != Access::Public {
        responses.push(e(503, "Storage unavailable or shutting down."));
    }
    for (code, resp) in responses.iter_mut() {
        if let Some(links) = links(route.id, code) {
            resp["links"] = links;
        }
    }
    let mut op = json!({
        "operationId": format!("{:?}", route.id),
        "summary": summary,
        "security": security(route.access),
        "parameters": params,
        "responses": responses.into_iter().collect::<Map<String, Value>>(),
    });
    if let Some(req) = req {
        op["requestBody"] = req;
    }
    Some(op)
}

/// The links of a route's answer with status `code`: the ids it gives lead to the operations
/// that take them (clients and stateful testers follow them).
fn links(id: Id, code: &str) -> Option<Value> {
    const ENDPOINT_OPS: [Id; 11] = [
        Id::EndpointGet,
        Id::EndpointPatch,
        Id::EndpointDelete,
        Id::EndpointVerify,
        Id::EndpointRotate,
        Id::EndpointCertificateDelete,
        Id::EndpointPause,
        Id::EndpointResume,
        Id::EndpointTest,
        Id::EndpointRecover,
        Id::EndpointStats,
    ];
    let mut links = Map::new();
    let mut link = |targets: &[Id], param: &str, pointer: &str| {
        for t in targets {
            links.insert(
                format!("{t:?}"),
                json!({"operationId": format!("{t:?}"), "parameters": {param: format!("$response.body#{pointer}")}}),
            );
        }
    };
    match (id, code) {
        (Id::EndpointCreate, "201") => link(&ENDPOINT_OPS, "id", "/endpoint/id"),
        (Id::Ingest, "202") => {
            link(&[Id::EventGet, Id::EventReplay], "id", "/event_id");
            link(
                &[Id::DeliveryGet, Id::DeliveryRetry],
                "id",
                "/deliveries/0/delivery_id",
            );
        }
        (Id::PortalSessionCreate, "201") => link(&[Id::PortalSessionDelete], "id", "/id"),
        _ => return None,
    }
    Some(Value::Object(links))
}

/// Who may call a route, as the document's security requirements.
fn security(access: Access) -> Value {
    match access {
        Access::Public => json!([]),
        Access::Ingest => json!([{"admin": []}, {"ingest": []}]),
        Access::Admin => json!([{"admin": []}]),
        Access::Account => json!([{"admin": []}, {"portal": []}]),
        Access::Session => json!([{"admin": []}, {"ingest": []}, {"portal": []}]),
    }
}

/// The route's `{id}` parameter, naming what it is the id of.
fn id_param(what: &str) -> Value {
    path_param("id", &format!("The {what}'s id."))
}

/// The route's `{account_id}` parameter.
fn account() -> Value {
    path_param("account_id", "The account's id.")
}

/// An error answer with status `code`.
fn e(code: u16, what: &str) -> (String, Value) {
    (
        code.to_string(),
        json!({"description": what, "content": {"application/json": {"schema": r("Error")}}}),
    )
}

/// The server's own routes: the pages and their assets, health, metrics, this document, the
/// session and the status.
fn server_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::Root => (
            "Redirects to the console.",
            vec![],
            None,
            vec![("302".into(), json!({"description": "To /console."}))],
        ),
        Id::Healthz => (
            "200 while storage is usable.",
            vec![],
            None,
            vec![
                ("200".into(), ok("Storage is usable.", r("Health"))),
                ("503".into(), ok("Storage is not usable.", r("Health"))),
            ],
        ),
        Id::Metrics => (
            "Prometheus metrics (text format).",
            vec![],
            None,
            vec![(
                "200".into(),
                json!({"description": "Metrics.", "content": {"text/plain": {"schema": {"type": "string"}}}}),
            )],
        ),
        Id::OpenApi => (
            "This document.",
            vec![],
            None,
            vec![(
                "200".into(),
                ok("The OpenAPI 3.1 document.", json!({"type": "object"})),
            )],
        ),
        _ => return None,
    })
}

/// The pages, their assets, the session, the status and backups.
fn page_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::Portal | Id::Console => (
            if id == Id::Portal {
                "The customer's portal page (it reads its token from the URL fragment)."
            } else {
                "The operator's console page."
            },
            vec![],
            None,
            vec![
                (
                    "200".into(),
                    json!({"description": "The page.", "content": {"text/html": {"schema": {"type": "string"}}}}),
                ),
                ("304".into(), json!({"description": "Not modified (ETag)."})),
            ],
        ),
        Id::Asset => (
            "A script, stylesheet or icon of the pages; `theme.css` (the portal's colours from portal.accent) and `logo` (portal.logo_file's image) are the portal's own look.",
            vec![path_param("file", "The asset's file name, `theme.css` or `logo`.")],
            None,
            vec![
                (
                    "200".into(),
                    json!({"description": "The asset.", "content": {
                    "text/javascript": {"schema": {"type": "string"}},
                    "text/css": {"schema": {"type": "string"}},
                    "image/svg+xml": {"schema": {"type": "string"}},
                    "image/png": {"schema": {"type": "string", "format": "binary"}}}}),
                ),
                ("304".into(), json!({"description": "Not modified (ETag)."})),
                e(404, "No such asset (or no logo configured)."),
            ],
        ),
        Id::Session => (
            "What the caller's credential is.",
            vec![],
            None,
            vec![("200".into(), ok("The caller.", r("Session")))],
        ),
        Id::Status => (
            "Version, uptime, queue by state, attempts by status, storage.",
            vec![],
            None,
            vec![("200".into(), ok("Status.", r("Status")))],
        ),
        Id::Backup => (
            "Streams an online backup of the whole store (secrets included: keep it private).",
            vec![],
            None,
            vec![(
                "200".into(),
                json!({"description": "The backup archive (docs/operations.md), streamed; \
                    cut short if the backup fails.", "content": {
                    "application/vnd.herald.backup": {"schema": {"type": "string", "format": "binary"}}}}),
            )],
        ),
        _ => return None,
    })
}

/// Ingest, one event or a batch.
fn ingest_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::Ingest => (
            "Ingests one event; 202 once it and its deliveries are on disk.",
            vec![],
            Some(body(r("IngestRequest"), true)),
            vec![
                ("202".into(), ok("Stored durably (or a duplicate of an earlier key).", r("IngestAccepted"))),
                e(400, "Malformed JSON."),
                e(413, "Body over server.max_body_bytes."),
                e(415, "Not JSON."),
                e(422, "An invalid field (named in `field`), or a payload that violates its type's schema."),
                e(503, "Storage unavailable or shutting down; nothing stored."),
            ],
        ),
        Id::IngestBatch => (
            "Ingests up to 1,000 events with one flush; one bad item fails only itself.",
            vec![],
            Some(body(r("BatchRequest"), true)),
            vec![
                ("202".into(), ok("Results in order.", r("BatchResult"))),
                e(400, "Malformed JSON."),
                e(413, "Body over server.max_body_bytes."),
                e(415, "Not JSON."),
                e(422, "The body is not a batch."),
                e(503, "Storage unavailable or shutting down; nothing stored."),
            ],
        ),
        _ => return None,
    })
}

/// Accounts: plans, secrets, portal sessions; the catalog and the retry policies.
fn account_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::Accounts => (
            "Every account with a plan or an endpoint.",
            vec![],
            None,
            vec![("200".into(), ok("Accounts.", list_of("AccountSummary")))],
        ),
        Id::AccountPut => (
            "Changes the fields the body names: the plan (null removes it; admin only) and the \
             failure alert addresses ([] clears them).",
            vec![account()],
            Some(body(r("AccountRequest"), true)),
            vec![
                ("200".into(), ok("The account.", r("Account"))),
                e(400, "Malformed JSON."),
                e(
                    403,
                    "A portal session naming plan (code `admin_only`), or a read-only one \
                     (code `read_only`).",
                ),
                e(415, "Not JSON."),
                e(
                    422,
                    "No such plan, a bad address, more than 5, a body naming neither field, \
                     or an invalid account id.",
                ),
            ],
        ),
        Id::AccountGet => (
            "The account, its plan, limits, usage and failure alert addresses.",
            vec![account()],
            None,
            vec![
                ("200".into(), ok("The account.", r("Account"))),
                e(422, "An invalid account id."),
            ],
        ),
        Id::AccountDelete => (
            "Purges the account: every event, delivery, attempt, endpoint, secret, key and \
             session of it, and its plan and usage. Irreversible.",
            vec![account()],
            None,
            vec![
                ("200".into(), ok("What was removed.", r("Purged"))),
                e(422, "An invalid account id."),
            ],
        ),
        Id::AccountSecret => (
            "Sets an account secret for header macros (write-only).",
            vec![
                account(),
                path_param("name", "The secret's name (letters, digits, _)."),
            ],
            Some(body(r("SecretRequest"), true)),
            vec![
                ("204".into(), json!({"description": "Set."})),
                e(400, "Malformed JSON."),
                e(415, "Not JSON."),
                e(422, "An invalid name or value."),
            ],
        ),
        _ => return None,
    })
}

/// Filter tests, portal sessions, the catalog's event types and the retry policies.
fn portal_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::FilterTest => (
            "Tests a payload filter against a stored event of the account, or a type and payload.",
            vec![account()],
            Some(body(r("FilterTestRequest"), true)),
            vec![
                (
                    "200".into(),
                    ok("Whether it matches, and why not.", r("FilterTestResult")),
                ),
                e(400, "Malformed JSON."),
                e(404, "No such event in the account."),
                e(415, "Not JSON."),
                e(
                    422,
                    "An invalid filter (field names its path), type or payload.",
                ),
            ],
        ),
        Id::AlertTest => (
            "Mails the account's alert addresses a test mail now (one try), counted toward \
             alerts.max_per_account_per_hour.",
            vec![account()],
            None,
            vec![
                (
                    "200".into(),
                    ok("Sent: to whom, and when.", r("AlertTestSent")),
                ),
                e(403, "A read-only portal session (code `read_only`)."),
                e(
                    409,
                    "Alert mails are off (code `alerts_off`: no `[alerts] smtp_url`), or the \
                     account has no alert address (code `no_alert_emails`).",
                ),
                e(422, "An invalid account id."),
                e(
                    429,
                    "The account's alert mails this hour reached the cap (code \
                     `alert_cap_reached`).",
                ),
                e(
                    502,
                    "The mail server did not take it (code `mail_not_sent`).",
                ),
            ],
        ),
        Id::PortalSessionCreate => (
            "Mints a portal session (a link) for the account's customer.",
            vec![account()],
            Some(body(r("PortalSessionRequest"), false)),
            vec![
                (
                    "201".into(),
                    ok(
                        "The session; its token and url are shown only here.",
                        r("PortalSessionCreated"),
                    ),
                ),
                e(400, "Malformed JSON."),
                e(415, "Not JSON."),
                e(422, "An invalid ttl or read_only."),
            ],
        ),
        Id::PortalSessionDelete => (
            "Revokes a portal session at once.",
            vec![id_param("portal session")],
            None,
            vec![
                ("204".into(), json!({"description": "Revoked."})),
                e(404, "No such session."),
            ],
        ),
        Id::EventTypes => (
            "The event catalog: descriptions, schemas and samples.",
            vec![],
            None,
            vec![("200".into(), ok("The catalog.", list_of("EventType")))],
        ),
        Id::RetryPolicies => (
            "The retry policies an endpoint may name, with their delays.",
            vec![],
            None,
            vec![("200".into(), ok("The policies.", list_of("RetryPolicy")))],
        ),
        _ => return None,
    })
}

/// Endpoints and what can be done to one.
fn endpoint_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::EndpointCreate => (
            "Creates an endpoint; its secret is shown only in this answer.",
            vec![account()],
            Some(body(r("EndpointRequest"), true)),
            vec![
                ("201".into(), ok("Created.", r("EndpointCreated"))),
                e(400, "Malformed JSON."),
                e(409, "The account has endpoints.max_per_account endpoints."),
                e(415, "Not JSON."),
                e(422, "An invalid field (named in `field`)."),
            ],
        ),
        Id::EndpointList => (
            "The account's endpoints, newest first.",
            vec![account()],
            None,
            vec![
                ("200".into(), ok("Endpoints.", list_of("Endpoint"))),
                e(422, "An invalid account id."),
            ],
        ),
        Id::EndpointGet => (
            "An endpoint with its health.",
            vec![id_param("endpoint")],
            None,
            vec![
                ("200".into(), ok("The endpoint.", r("Endpoint"))),
                e(404, "No such endpoint."),
            ],
        ),
        Id::EndpointPatch => (
            "Changes an endpoint (a new URL clears `verified`).",
            vec![id_param("endpoint")],
            Some(body(r("EndpointRequest"), true)),
            vec![
                ("200".into(), ok("The endpoint.", r("Endpoint"))),
                e(400, "Malformed JSON."),
                e(404, "No such endpoint."),
                e(415, "Not JSON."),
                e(422, "An invalid field (named in `field`)."),
            ],
        ),
        Id::EndpointDelete => (
            "Deletes an endpoint; its pending deliveries end.",
            vec![id_param("endpoint")],
            None,
            vec![
                ("204".into(), json!({"description": "Deleted."})),
                e(404, "No such endpoint."),
            ],
        ),
        _ => return None,
    })
}

/// What is done to an endpoint: verification, secret rotation, pause and resume, tests, recovery, its figures.
fn endpoint_action_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::EndpointVerify => (
            "Runs the verification handshake now.",
            vec![id_param("endpoint")],
            None,
            vec![("200".into(), ok("The handshake's outcome.", r("VerifyResult"))), e(404, "No such endpoint.")],
        ),
        Id::EndpointRotate => (
            "Rotates the signing secret; the previous one signs beside it for signing.rotation_grace.",
            vec![id_param("endpoint")],
            Some(body(r("RotateRequest"), false)),
            vec![
                ("200".into(), ok("The new secret (or public key), shown only here.", r("RotateResult"))),
                e(400, "Malformed JSON."),
                e(404, "No such endpoint."),
                e(415, "Not JSON."),
                e(422, "An invalid secret."),
            ],
        ),
        Id::EndpointCertificatePut => (
            "Sets the client certificate herald presents to the endpoint's TLS server (mutual TLS). Write-only: the endpoint shows its subject and expiry.",
            vec![id_param("endpoint")],
            Some(body(r("ClientCertificateRequest"), true)),
            vec![
                ("200".into(), ok("The endpoint.", r("Endpoint"))),
                e(400, "Malformed JSON."),
                e(404, "No such endpoint."),
                e(413, "Body over server.max_body_bytes."),
                e(415, "Not JSON."),
                e(422, "A certificate or key that does not parse, has expired or does not match (named in `field`)."),
            ],
        ),
        Id::EndpointCertificateDelete => (
            "Removes the endpoint's client certificate.",
            vec![id_param("endpoint")],
            None,
            vec![("200".into(), ok("The endpoint.", r("Endpoint"))), e(404, "No such endpoint.")],
        ),
        Id::EndpointPause | Id::EndpointResume => (
            if id == Id::EndpointPause {
                "Pauses an endpoint: due deliveries end `skipped` / `paused`."
            } else {
                "Resumes (or re-enables) an endpoint."
            },
            vec![id_param("endpoint")],
            None,
            vec![("200".into(), ok("The endpoint.", r("Endpoint"))), e(404, "No such endpoint.")],
        ),
        _ => return None,
    })
}

/// An endpoint's test events, recovery and figures.
fn endpoint_test_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::EndpointTest => (
            "Sends a test event (a catalog sample, or a generic `webhook.test`) now.",
            vec![id_param("endpoint")],
            Some(body(r("TestRequest"), false)),
            vec![
                ("200".into(), ok("Sent; its first attempt.", r("TestResult"))),
                ("202".into(), ok("Stored; its attempt had not ended in time.", r("TestResult"))),
                e(400, "Malformed JSON."),
                e(404, "No such endpoint."),
                e(415, "Not JSON."),
                e(422, "An unknown type or one without a sample."),
            ],
        ),
        Id::EndpointRecover => (
            "Retries every failed or skipped delivery of the endpoint since a time (at most 10,000 a call).",
            vec![id_param("endpoint")],
            Some(body(r("RecoverRequest"), true)),
            vec![
                ("200".into(), ok("A dry run: how many.", r("RecoverResult"))),
                ("202".into(), ok("Retried.", r("RecoverResult"))),
                e(400, "Malformed JSON."),
                e(404, "No such endpoint."),
                e(415, "Not JSON."),
                e(422, "An invalid since."),
            ],
        ),
        Id::EndpointStats => (
            "The endpoint's last hour by minute (or last day by quarter hour, or last week by two \
             hours), with latency percentiles, and its health.",
            vec![
                id_param("endpoint"),
                query(
                    "window",
                    "1h (one entry per minute, the default), 24h (per 15 minutes) or 7d (per 2 \
                     hours).",
                    json!({"enum": ["1h", "24h", "7d"]}),
                ),
            ],
            None,
            vec![
                ("200".into(), ok("Stats.", r("EndpointStats"))),
                e(404, "No such endpoint."),
                e(422, "An unknown window or query parameter."),
            ],
        ),
        _ => return None,
    })
}

/// The delivery log: deliveries, events, retries, replays and incidents.
fn log_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::Deliveries => (
            "Deliveries newest first, with filters and a cursor.",
            vec![
                query(
                    "account_id",
                    "Only this account's.",
                    json!({"type": "string"}),
                ),
                query(
                    "endpoint_id",
                    "Only this endpoint's.",
                    json!({"type": "string"}),
                ),
                query("event_type", "Only this type.", json!({"type": "string"})),
                query(
                    "q",
                    "A search: an event id, a delivery id, or a text its event's payload holds \
                     (exactly; at most the newest 10,000 events per page are looked at).",
                    json!({"type": "string", "maxLength": 200}),
                ),
                query(
                    "state",
                    "Only this state.",
                    json!({"enum": DeliveryState::ALL.map(|s| s.as_str())}),
                ),
                query(
                    "status",
                    "Only this last attempt status.",
                    json!({"enum": Status::ALL.map(|s| s.as_str())}),
                ),
                query("since", "Created at or after.", time()),
                query("until", "Created before.", time()),
                query(
                    "limit",
                    "Items per page, 1 to 500 (default 50).",
                    json!({"type": "integer", "minimum": 1, "maximum": 500}),
                ),
                query(
                    "cursor",
                    "The previous page's next_cursor.",
                    json!({"type": "string"}),
                ),
            ],
            None,
            vec![
                ("200".into(), ok("A page.", r("DeliveryList"))),
                e(404, "Another account (portal sessions)."),
                e(422, "An invalid parameter (named in `field`)."),
            ],
        ),
        Id::DeliveryGet => (
            "A delivery with every attempt.",
            vec![id_param("delivery")],
            None,
            vec![
                ("200".into(), ok("The delivery.", r("DeliveryDetail"))),
                e(404, "No such delivery."),
            ],
        ),
        Id::DeliveryRetry => (
            "One new attempt now, same webhook-id.",
            vec![id_param("delivery")],
            None,
            vec![
                ("202".into(), ok("Due now.", r("Delivery"))),
                e(404, "No such delivery."),
                e(409, "An attempt of it is running now."),
            ],
        ),
        _ => return None,
    })
}

/// Events, their replays, and incidents.
fn event_spec(id: Id) -> Option<Spec<'static>> {
    Some(match id {
        Id::EventGet => (
            "An event, its payload and its deliveries.",
            vec![id_param("event")],
            None,
            vec![
                ("200".into(), ok("The event.", r("Event"))),
                e(404, "No such event."),
            ],
        ),
        Id::EventReplay => (
            "Ingests the event again as a new event (new id), for all or one endpoint.",
            vec![id_param("event")],
            Some(body(r("ReplayRequest"), false)),
            vec![
                ("200".into(), ok("A dry run: how many.", r("DryRun"))),
                ("202".into(), ok("Replayed.", r("ReplayResult"))),
                e(400, "Malformed JSON."),
                e(404, "No such event."),
                e(415, "Not JSON."),
                e(422, "An endpoint that is not the account's."),
            ],
        ),
        Id::Incidents => (
            "Failures grouped by endpoint and status / HTTP code.",
            vec![
                query(
                    "account_id",
                    "Only this account's.",
                    json!({"type": "string"}),
                ),
                query("since", "From (default 24 h ago).", time()),
            ],
            None,
            vec![
                (
                    "200".into(),
                    ok("Incidents, largest first.", r("Incidents")),
                ),
                e(404, "Another account (portal sessions)."),
                e(422, "An invalid parameter."),
            ],
        ),
        _ => return None,
    })
}

fn list_of(item: &str) -> Value {
    json!({"type": "object", "required": ["items", "next_cursor"], "properties": {
        "items": {"type": "array", "items": r(item)},
        "next_cursor": {"type": ["string", "null"]},
    }})
}

fn schemas() -> Value {
    let mut m = Map::new();
    request_schemas(&mut m);
    account_schemas(&mut m);
    endpoint_schemas(&mut m);
    endpoint_action_schemas(&mut m);
    log_schemas(&mut m);
    examples(&mut m);
    Value::Object(m)
}

/// Errors, health, ingest (one event and a batch), the session and the status.
fn request_schemas(m: &mut Map<String, Value>) {
    let states = DeliveryState::ALL.map(|s| s.as_str());
    m.insert(
        "RetryPolicy".into(),
        json!({"type": "object", "required": ["name", "delays", "attempts", "default"], "properties": {
            "name": {"type": "string"}, "delays": {"type": "array", "items": {"type": "string"}},
            "attempts": {"type": "integer"}, "default": {"type": "boolean"}}}),
    );
    m.insert("Error".into(), json!({"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"},
                "reason": {"type": "string", "description": "Which rule the field broke (an endpoint's URL, an alert address): docs/api.md, \"Errors\"."}}}}}));
    m.insert("Health".into(), json!({"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}, "reason": {"type": "string"}}}));
    m.insert(
        "IngestRequest".into(),
        json!({"type": "object", "required": ["account_id", "type", "payload"], "properties": {
            "account_id": {"type": ["string", "integer"]},
            "type": {"type": "string"},
            "payload": {"type": "object"},
            "idempotency_key": {"type": "string"},
            "debounce_key": {"type": ["string", "integer", "null"]},
            "ordering_key": {"type": ["string", "integer", "null"]}}}),
    );
    m.insert("IngestAccepted".into(), json!({"type": "object", "required": ["event_id", "duplicate", "deliveries"], "properties": {
            "event_id": {"type": "string"},
            "duplicate": {"type": "boolean"},
            "deliveries": {"type": "array", "items": {"type": "object", "properties": {
                "delivery_id": {"type": "string"}, "endpoint_id": {"type": ["string", "null"]}, "state": {"enum": states}}}}}}));
    m.insert(
        "BatchRequest".into(),
        json!({"type": "object", "required": ["events"], "properties": {
            "events": {"type": "array", "maxItems": 1000, "items": r("IngestRequest")}}}),
    );
    m.insert("BatchResult".into(), json!({"type": "object", "required": ["results"], "properties": {"results": {"type": "array", "items": {
            "oneOf": [r("IngestAccepted"), r("Error")]}}}}));
    m.insert("Session".into(), json!({"type": "object", "required": ["role"], "properties": {
            "role": {"enum": ["admin", "ingest", "portal", null]},
            "brand": {"type": "string", "description": "portal.brand: the name the portal shows."},
            "logo": {"type": "boolean", "description": "Whether GET /assets/logo has an image."},
            "id": {"type": "string"}, "account_id": {"type": "string"}, "read_only": {"type": "boolean"},
            "created_at": time(), "expires_at": time()}}));
    m.insert("Status".into(), json!({"type": "object", "required": ["version", "uptime_seconds", "queue", "in_flight"], "properties": {
            "version": {"type": "string"}, "uptime_seconds": {"type": "integer"},
            "queue": {"type": "object", "additionalProperties": {"type": "integer"}},
            "due": {"type": "integer"}, "in_flight": {"type": "integer"},
            "due_now": {"type": "integer", "description": "Due now and free to go: nothing holds its endpoint."},
            "held": {"type": "object", "description": "Waiting deliveries a hold keeps back, by what holds them.",
                "properties": {"breaker": {"type": "integer"}, "paused": {"type": "integer"},
                    "rate_limit": {"type": "integer"}, "ordering": {"type": "integer"}}},
            "dead_letters": {"type": "integer"}, "storage_bytes": {"type": "integer"},
            "oldest_pending_at": {"type": ["string", "null"]},
            "attempts": {"type": "object"}, "attempts_by_minute": {"type": "array"},
            "open_breakers": {"type": "array"}, "endpoints_last_hour": {"type": "array"}}}));
}

/// Accounts, their secrets, purges, portal sessions and event types.
fn account_schemas(m: &mut Map<String, Value>) {
    m.insert("AccountRequest".into(), json!({"type": "object", "minProperties": 1, "additionalProperties": false, "properties": {
            "plan": {"type": ["string", "null"]},
            "alert_emails": {"type": "array", "maxItems": 5, "items": {"type": "string", "format": "email"}}}}));
    m.insert("SecretRequest".into(), json!({"type": "object", "required": ["value"], "properties": {"value": {"type": "string"}}}));
    m.insert("Account".into(), json!({"type": "object", "required": ["account_id", "plan", "limits", "usage", "alert_emails"], "properties": {
            "account_id": {"type": "string"}, "plan": {"type": ["string", "null"]},
            "alert_emails": {"type": "array", "items": {"type": "string"}},
            "limits": {"type": "object", "properties": {"webhooks": {"type": "boolean"},
                "per_minute": {"type": ["integer", "null"]}, "per_day": {"type": ["integer", "null"]}}},
            "usage": {"type": "object", "properties": {"minute": {"type": "integer"}, "day": {"type": "integer"}}}}}));
    m.insert("Purged".into(), json!({"type": "object", "required": ["account_id", "purged"], "properties": {
            "account_id": {"type": "string"},
            "purged": {"type": "object", "required": ["events", "deliveries", "endpoints"], "properties": {
                "events": {"type": "integer"}, "deliveries": {"type": "integer"}, "endpoints": {"type": "integer"}}}}}));
    m.insert(
        "AlertTestSent".into(),
        json!({"type": "object", "required": ["account_id", "sent_to", "at"], "properties": {
            "account_id": {"type": "string"},
            "sent_to": {"type": "array", "items": {"type": "string"}}, "at": time()}}),
    );
    m.insert("AccountSummary".into(), json!({"allOf": [r("Account"), {"type": "object", "properties": {"endpoints": {"type": "integer"}}}]}));
    m.insert("PortalSessionRequest".into(), json!({"type": "object", "properties": {"ttl": {"type": "string"}, "read_only": {"type": "boolean"}}}));
    m.insert("PortalSessionCreated".into(), json!({"type": "object", "required": ["id", "token", "url", "account_id", "read_only", "expires_at"], "properties": {
            "id": {"type": "string"}, "token": {"type": "string"}, "url": {"type": "string"},
            "account_id": {"type": "string"}, "read_only": {"type": "boolean"},
            "created_at": time(), "expires_at": time()}}));
    m.insert(
        "EventType".into(),
        json!({"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string"}, "description": {"type": "string"},
            "sample": {"type": ["object", "null"]}, "schema": {"type": ["object", "null"]},
            "deprecated": {"type": "boolean"},
            "replaced_by": {"type": ["string", "null"], "description": "The type that replaces a deprecated one (docs/api.md, \"Versioning\")."},
            "debounce": {"type": ["object", "null"]}}}),
    );
}

/// Endpoints: their requests and answers, rate limits, ordering, filters, verification,
/// certificates, secrets, tests, recovery and replay.
fn endpoint_schemas(m: &mut Map<String, Value>) {
    m.insert(
        "EndpointRequest".into(),
        json!({"type": "object", "properties": {
            "url": {"type": "string"}, "description": {"type": "string"},
            "event_types": {"type": "array", "items": {"type": "string"}},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "retry_policy": {"type": "string"}, "secret": {"type": "string"},
            "signature": {"enum": ["hmac", "ed25519"]},
            "rate_limit": r("RateLimit"), "ordering": r("Ordering"), "filter": r("Filter"),
            "signature_headers": {"enum": ["webhook", "webhook+svix"]},
            "propagate_trace": {"type": "boolean"}}}),
    );
    m.insert(
        "RateLimit".into(),
        json!({"description": "At most per_second attempts a second (bursts up to ceil); null: none.",
            "oneOf": [{"type": "null"}, {"type": "object", "required": ["per_second"],
            "additionalProperties": false,
            "properties": {"per_second": {"type": "number", "exclusiveMinimum": 0, "maximum": 100000}}}]}),
    );
    filter_schemas(m);
    m.insert(
        "Ordering".into(),
        json!({"description": "Deliveries with the same key go one at a time in commit order; \
            key: a top-level payload field, or null for one sequence. null: best effort.",
            "oneOf": [{"type": "null"}, {"type": "object", "required": ["key"],
            "additionalProperties": false,
            "properties": {"key": {"type": ["string", "null"], "minLength": 1, "maxLength": 128}}}]}),
    );
    m.insert("Endpoint".into(), json!({"type": "object", "required": ["id", "account_id", "url", "state", "verified"], "properties": {
            "id": {"type": "string"}, "account_id": {"type": "string"}, "url": {"type": "string"},
            "description": {"type": "string"}, "event_types": {"type": "array", "items": {"type": "string"}},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "retry_policy": {"type": "string"}, "signature": {"enum": ["hmac", "ed25519"]},
            "state": {"enum": ["active", "paused", "disabled"]}, "verified": {"type": "boolean"},
            "public_key": {"type": ["string", "null"]},
            "rate_limit": r("RateLimit"), "ordering": r("Ordering"), "filter": r("Filter"),
            "uid": {"type": ["string", "null"]},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            "channels": {"type": "array", "items": {"type": "string"}},
            "signature_headers": {"enum": ["webhook", "webhook+svix"]},
            "propagate_trace": {"type": "boolean"},
            "client_certificate": {"type": ["object", "null"], "properties": {
                "subject": {"type": "string"}, "not_after": time()}},
            "created_at": time(), "updated_at": time(),
            "breaker": {"type": "object"}, "success_rate_1h": {"type": ["number", "null"]},
            "attempts_1h": {"type": "integer"}, "last_success_at": {"type": ["string", "null"]},
            "pending": {"type": "integer"}}}));
    m.insert("EndpointCreated".into(), json!({"type": "object", "required": ["endpoint"], "properties": {
            "endpoint": r("Endpoint"), "secret": {"type": "string"}, "public_key": {"type": ["string", "null"]}}}));
}

/// What is done to an endpoint: verification, certificates, secrets, tests, recovery, replay.
fn endpoint_action_schemas(m: &mut Map<String, Value>) {
    m.insert(
        "VerifyResult".into(),
        json!({"type": "object", "required": ["verified"], "properties": {
            "verified": {"type": "boolean"}, "reason": {"type": ["string", "null"]},
            "attempt": {"type": "object"}, "endpoint": r("Endpoint")}}),
    );
    m.insert(
        "ClientCertificateRequest".into(),
        json!({"type": "object", "required": ["certificate", "private_key"], "additionalProperties": false, "properties": {
            "certificate": {"type": "string", "maxLength": 32768, "description": "PEM chain, end-entity certificate first."},
            "private_key": {"type": "string", "maxLength": 16384, "description": "PEM private key (PKCS#8, PKCS#1 or SEC1); write-only."}}}),
    );
    m.insert(
        "RotateRequest".into(),
        json!({"type": "object", "properties": {"secret": {"type": "string"}}}),
    );
    m.insert("RotateResult".into(), json!({"type": "object", "properties": {"secret": {"type": "string"}, "public_key": {"type": ["string", "null"]}}}));
    m.insert(
        "TestRequest".into(),
        json!({"type": "object", "additionalProperties": false, "properties": {
            "type": {"type": "string"},
            "payload": {"type": "object", "description": "Sent instead of the catalog's sample; checked against the type's schema."}}}),
    );
    m.insert("TestResult".into(), json!({"type": "object", "required": ["event_id", "delivery_id"], "properties": {
            "event_id": {"type": "string"}, "delivery_id": {"type": "string"}, "attempt": nullable(r("Attempt"))}}));
    m.insert("RecoverRequest".into(), json!({"type": "object", "required": ["since"], "properties": {"since": time(), "dry_run": {"type": "boolean"}}}));
    m.insert(
        "RecoverResult".into(),
        json!({"type": "object", "properties": {
            "recovered": {"type": "integer"}, "deliveries": {"type": "integer"},
            "dry_run": {"type": "boolean"}, "more": {"type": "boolean"}}}),
    );
    m.insert("ReplayRequest".into(), json!({"type": "object", "properties": {"endpoint_id": {"type": "string"}, "dry_run": {"type": "boolean"}}}));
    m.insert("ReplayResult".into(), json!({"type": "object", "required": ["event_id", "replay_of", "deliveries"], "properties": {
            "event_id": {"type": "string"}, "replay_of": {"type": "string"}, "deliveries": {"type": "array"}}}));
    m.insert("DryRun".into(), json!({"type": "object", "required": ["dry_run", "deliveries"], "properties": {"dry_run": {"type": "boolean"}, "deliveries": {"type": "integer"}}}));
}

/// The delivery log: attempts, deliveries, events, an endpoint's figures and incidents.
fn log_schemas(m: &mut Map<String, Value>) {
    let states = DeliveryState::ALL.map(|s| s.as_str());
    let statuses = Status::ALL.map(|s| s.as_str());
    m.insert(
        "Attempt".into(),
        json!({"type": "object", "required": ["id", "number", "at", "status"], "properties": {
            "id": {"type": "string"}, "number": {"type": "integer"}, "at": time(),
            "duration_ms": {"type": "integer"}, "status": {"enum": statuses},
            "http_status": {"type": ["integer", "null"]}, "error": {"type": ["string", "null"]},
            "request_headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "response_body": {"type": "string"},
            "response_headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "url": {"type": ["string", "null"]},
            "manual": {"type": "boolean"}}}),
    );
    m.insert("Delivery".into(), json!({"type": "object", "required": ["id", "event_id", "endpoint_id", "account_id", "event_type", "state", "last_status", "attempt_count", "next_attempt_at", "created_at"], "properties": {
            "id": {"type": "string"}, "event_id": {"type": "string"}, "endpoint_id": {"type": ["string", "null"]},
            "account_id": {"type": "string"}, "event_type": {"type": "string"}, "state": {"enum": states},
            "last_status": {"enum": statuses.iter().map(|s| json!(s)).chain([Value::Null]).collect::<Vec<_>>()},
            "last_http_status": {"type": ["integer", "null"]},
            "attempt_count": {"type": "integer"}, "next_attempt_at": {"type": ["string", "null"]},
            "created_at": time(),
            "waiting": {"description": "Why a pending delivery waits (null once it ended).",
                "oneOf": [{"type": "null"}, {"type": "object", "required": ["reason", "until"], "properties": {
                    "reason": {"enum": ["in_flight", "breaker", "paused", "disabled", "rate_limit", "retry", "scheduled", "due"]},
                    "until": {"type": ["string", "null"]},
                    "per_second": {"type": "number", "description": "With rate_limit: the endpoint's limit."}}}]}}}));
    m.insert(
        "DeliveryDetail".into(),
        json!({"allOf": [r("Delivery"), {"type": "object", "required": ["attempts"], "properties": {
            "attempts": {"type": "array", "items": r("Attempt")}}}]}),
    );
    m.insert("DeliveryList".into(), json!({"type": "object", "required": ["items", "next_cursor", "search_limited"], "properties": {
        "items": {"type": "array", "items": r("Delivery")},
        "next_cursor": {"type": ["string", "null"]},
        "search_limited": {"type": "boolean"},
    }}));
    m.insert("Event".into(), json!({"type": "object", "required": ["id", "account_id", "type", "received_at", "payload", "deliveries"], "properties": {
            "id": {"type": "string"}, "account_id": {"type": "string"}, "type": {"type": "string"},
            "received_at": time(), "idempotency_key": {"type": "string"}, "payload": {"type": "object"},
            "deliveries": {"type": "array", "items": r("Delivery")}}}));
    m.insert("EndpointStats".into(), json!({"type": "object", "required": ["endpoint_id", "minutes"], "properties": {
            "endpoint_id": {"type": "string"}, "breaker": {"type": "object"},
            "success_rate_1h": {"type": ["number", "null"]}, "attempts_1h": {"type": "integer"},
            "last_success_at": {"type": ["string", "null"]}, "pending": {"type": "integer"},
            "window": {"enum": ["1h", "24h", "7d"]}, "bucket_minutes": {"enum": [1, 15, 120]},
            "latency_ms": r("Latency"),
            "minutes": {"type": "array", "items": {"type": "object", "properties": {
                "at": time(), "attempts": {"type": "object", "additionalProperties": {"type": "integer"}},
                "latency_ms": r("Latency")}}}}}));
    m.insert(
        "Latency".into(),
        json!({"type": "object", "required": ["mean", "max", "p50", "p95"], "properties": {
            "mean": {"type": "integer"}, "max": {"type": "integer"},
            "p50": {"type": ["integer", "null"]}, "p95": {"type": ["integer", "null"]}}}),
    );
    m.insert(
        "Incidents".into(),
        json!({"type": "object", "required": ["items", "held", "since", "complete", "scanned"], "properties": {
            "since": time(), "complete": {"type": "boolean"}, "next_cursor": {"type": "null"},
            "scanned": {"type": "integer", "description": "Deliveries looked at (at most 5,000, newest first)."},
            "held": {"type": "array", "description": "Endpoints whose circuit breaker holds their deliveries now.",
                "items": {"type": "object", "properties": {
                    "endpoint_id": {"type": "string"}, "account_id": {"type": "string"}, "url": {"type": "string"},
                    "breaker": {"type": "object"}, "pending": {"type": "integer"}}}},
            "items": {"type": "array", "items": {"type": "object", "properties": {
                "endpoint_id": {"type": ["string", "null"]}, "status": {"enum": statuses},
                "http_status": {"type": ["integer", "null"]}, "deliveries": {"type": "integer"},
                "pending": {"type": "integer"}, "first_at": time(), "last_at": time(),
                "examples": {"type": "array", "items": {"type": "string"}}}}}}}),
    );
}

/// Examples of the request bodies: what a well-formed request looks like (testers start from
/// them).
fn examples(m: &mut Map<String, Value>) {
    for (name, example) in [
        (
            "IngestRequest",
            json!({"account_id": "11073", "type": "order.paid", "payload": {"order_id": "o-1"},
                   "idempotency_key": "order-o-1-paid"}),
        ),
        (
            "EndpointRequest",
            json!({"url": "https://hooks.example.com/herald", "description": "orders",
                   "event_types": ["order.*"], "retry_policy": "standard"}),
        ),
        (
            "RecoverRequest",
            json!({"since": "2026-01-31T12:00:00Z", "dry_run": true}),
        ),
        (
            "AccountRequest",
            json!({"plan": null, "alert_emails": ["ops@example.com"]}),
        ),
        ("SecretRequest", json!({"value": "s3cr3t"})),
        (
            "PortalSessionRequest",
            json!({"ttl": "1h", "read_only": false}),
        ),
        ("ReplayRequest", json!({"dry_run": true})),
    ] {
        if let Some(schema) = m.get_mut(name) {
            schema["example"] = example;
        }
    }
}

/// The OpenAPI schemas of a filter and of the filter-test route.
fn filter_schemas(m: &mut serde_json::Map<String, Value>) {
    let scalars =
        json!({"type": "array", "items": {"type": ["string", "number", "boolean", "null"]}});
    let ordered = json!({"type": ["number", "string"]});
    let filters = json!({"type": "array", "minItems": 1, "items": r("FilterObject")});
    let at_path = json!({"type": "array", "minItems": 1, "items": r("FilterAtPath")});
    m.insert(
        "Filter".into(),
        json!({"description": "A payload filter matched against {\"type\", \"payload\"} \
            (docs/api.md, \"Payload filters\"); null: every event its event_types take. \
            At most 4096 bytes of JSON, 8 levels of nesting, 64 operators.",
            "oneOf": [{"type": "null"}, r("FilterObject")]}),
    );
    m.insert(
        "FilterObject".into(),
        json!({"type": "object", "additionalProperties": false, "properties": {
            "type": r("FilterAtPath"), "payload": r("FilterAtPath"),
            "$and": filters, "$or": filters, "$not": r("FilterObject")}}),
    );
    m.insert(
        "FilterAtPath".into(),
        json!({"description": "A value (equal; an array is compared whole) or an object whose \
            keys descend into the value at this path and whose $ operators test it.",
            "type": ["object", "string", "number", "boolean", "null", "array"],
            "minProperties": 1,
            "properties": {
                "$eq": {}, "$neq": {}, "$gt": ordered, "$gte": ordered, "$lt": ordered,
                "$lte": ordered, "$in": scalars, "$nin": scalars,
                "$exists": {"type": "boolean"}, "$startsWith": {"type": "string"},
                "$endsWith": {"type": "string"}, "$and": at_path, "$or": at_path,
                "$not": r("FilterAtPath")},
            "patternProperties": {"^([^$][\\s\\S]*)?$": r("FilterAtPath")},
            "additionalProperties": false}),
    );
    m.insert(
        "FilterTestRequest".into(),
        json!({"type": "object", "required": ["filter"], "additionalProperties": false,
            "description": "filter, and either event_id (an event of the account) or type and \
                payload; with event_types (and channels) it decides as fan-out does: types, then \
                channels, then the filter.",
            "properties": {"filter": r("Filter"), "event_id": {"type": "string"},
                "type": {"type": "string"}, "payload": {"type": "object"},
                "event_types": {"type": "array", "maxItems": 100, "items": {"type": "string"},
                    "description": "The endpoint's event types (exact types, prefix.* or *)."},
                "channels": {"type": "array", "maxItems": 10,
                    "items": {"type": "string", "minLength": 1},
                    "description": "The endpoint's channels."}}}),
    );
    m.insert(
        "FilterTestResult".into(),
        json!({"type": "object", "required": ["matches", "reason"], "properties": {
            "matches": {"type": "boolean"},
            "reason": {"type": ["string", "null"],
                "description": "The step that left the event out: its type, its channels, or \
                    the first test of the filter that failed (payload.amount: 50 is not >= 100)"}}}),
    );
}

/// One entry per catalog type: the signed POST herald sends for it.
fn webhooks(config: &Config) -> Value {
    let header = |name: &str, description: &str| json!({"name": name, "in": "header", "required": true, "description": description, "schema": {"type": "string"}});
    let mut out = Map::new();
    for (ty, ev) in &config.catalog.events {
        let schema = ev
            .schema_json()
            .unwrap_or_else(|| json!({"type": "object"}));
        let mut media = json!({"schema": schema});

        if let Some(sample) = ev.sample_json() {
            media["example"] = sample;
        }
        let mut entry = json!({"post": {
            "operationId": format!("webhook:{ty}"),
            "summary": if ev.description.is_empty() { ty.clone() } else { ev.description.clone() },
            "deprecated": ev.deprecated,
            "parameters": [
                header("webhook-id", "The event id: the same on every retry (dedupe on it)."),
                header("webhook-timestamp", "This attempt's Unix time in seconds."),
                header("webhook-signature", "v1,<base64 HMAC-SHA256> (or v1a, for ed25519 endpoints), one per valid secret, space-separated."),
                header("herald-event-type", "The event type."),
                header("herald-attempt", "The 1-based attempt number."),
                header("herald-delivery-id", "The delivery's id."),
                header("herald-endpoint-id", "The endpoint's id."),
                header("user-agent", "herald/<version>."),
            ],
            "requestBody": {"required": true, "content": {"application/json": media}},
            "responses": {"2XX": {"description": "Any 2xx acknowledges the delivery; anything else is retried by the endpoint's policy (3xx and most 4xx are not)."}},
        }});
        // A deprecated type says where subscribers go (docs/api.md, "Versioning").
        if ev.deprecated {
            entry["post"]["description"] = json!(match &ev.replaced_by {
                Some(next) => format!("Deprecated: subscribe to `{next}` instead."),
                None => "Deprecated: herald will stop sending this type.".to_string(),
            });
        }
        out.insert(ty.clone(), entry);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route of the router is in the document, with its method (the table and the
    /// document cannot drift apart).
    #[test]
    fn every_route_is_documented() {
        let doc = document(&Config::default(), "http://127.0.0.1:8080");
        for r in ROUTES {
            let op = &doc["paths"][r.path][r.method.as_str().to_ascii_lowercase()];
            assert!(
                op.is_object(),
                "{} {} is missing from the document",
                r.method,
                r.path
            );
            assert!(op["responses"].as_object().is_some_and(|m| !m.is_empty()));
        }
        let documented: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_object().unwrap().len())
            .sum();
        assert_eq!(
            documented,
            ROUTES.len(),
            "the document has routes the router does not"
        );
    }

    /// With `[svix] enabled`, the Svix-compatible API's routes are listed too, each once.
    #[test]
    fn the_svix_routes_are_documented_when_enabled() {
        let mut config = Config::default();
        config.svix.enabled = true;
        let doc = document(&config, "http://127.0.0.1:8080");
        for (method, path, _) in crate::api::svix::ROUTES {
            let op = &doc["paths"][format!("/api/v1{path}")][method.as_str().to_ascii_lowercase()];
            assert!(op.is_object(), "{method} /api/v1{path} is missing");
        }
        let documented: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|p| p.as_object().unwrap().len())
            .sum();
        assert_eq!(documented, ROUTES.len() + crate::api::svix::ROUTES.len());
    }
}
