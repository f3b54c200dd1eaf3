//! Ingest (docs/api.md): what `POST /v1/events` and `POST /v1/events/batch` accept, what they
//! refuse (and that a refusal stores nothing), tokens, idempotency, the catalog, account-id
//! normalization and fan-out to the account's endpoints.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};

use common::herald::{ADMIN_TOKEN, INGEST_TOKEN};
use common::{first_delivery, Herald, HeraldApi, Receiver, World};

/// Long enough for a local delivery on a loaded 2-core machine.
const SETTLE: Duration = Duration::from_secs(15);

/// Asserts an error answer: status, `error.code`, a non-empty `error.message` and, if given,
/// `error.field`.
fn assert_error(got: &(u16, Value), status: u16, code: &str, field: Option<&str>, what: &str) {
    let (s, body) = got;
    assert_eq!(*s, status, "{what}: status; answer {body}");
    assert_eq!(body["error"]["code"], code, "{what}: code; answer {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{what}: error.message must be a sentence; answer {body}"
    );
    if let Some(field) = field {
        assert_eq!(
            body["error"]["field"], field,
            "{what}: field; answer {body}"
        );
    }
}

/// POSTs raw bytes to `path` with the ingest token and `content_type`; parses the answer.
async fn post_raw(
    herald: &Herald,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Vec<(String, String)>, Value) {
    let (status, headers, answer) = herald
        .call_raw(
            "POST",
            path,
            Some(INGEST_TOKEN),
            &[("content-type", content_type)],
            body,
        )
        .await;
    let json = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    (status, headers, json)
}

/// Errors never store anything: no delivery is listed and every queue count is 0.
async fn assert_nothing_stored(herald: &Herald) {
    let (status, list) = herald.admin("GET", "/v1/deliveries", None).await;
    assert_eq!(status, 200, "list deliveries: {list}");
    assert_eq!(
        list["items"],
        json!([]),
        "a refused request stored a delivery"
    );
    let (status, st) = herald.admin("GET", "/v1/status", None).await;
    assert_eq!(status, 200, "status: {st}");
    for state in ["pending", "delivered", "failed", "skipped"] {
        assert_eq!(
            st["queue"][state], 0,
            "queue.{state} after refused requests: {st}"
        );
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Each body is sent as JSON to `POST /v1/events`; each must be `422 invalid_field` naming
/// `field`, and nothing may be stored.
async fn assert_invalid_field(cases: &[(Value, &str)]) {
    let herald = Herald::start("").await;
    for (body, field) in cases {
        let got = herald.ingest(body.clone()).await;
        assert_error(&got, 422, "invalid_field", Some(field), &body.to_string());
    }
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_400_naming_line_and_column_and_stores_nothing() {
    let herald = Herald::start("").await;
    let body = b"{\"account_id\": \"acme\",\n \"type\": ,\n \"payload\": {}}".to_vec();
    let (status, _, answer) = post_raw(&herald, "/v1/events", "application/json", body).await;
    assert_error(
        &(status, answer.clone()),
        400,
        "malformed_json",
        None,
        "malformed",
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("line 2 column"),
        "message must name line and column: {message:?}"
    );
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_token_is_401_with_www_authenticate_and_stores_nothing() {
    let herald = Herald::start("").await;
    let body =
        serde_json::to_vec(&json!({"account_id": "acme", "type": "t.x", "payload": {}})).unwrap();
    for path in ["/v1/events", "/v1/events/batch"] {
        let (status, headers, answer) = herald
            .call_raw(
                "POST",
                path,
                None,
                &[("content-type", "application/json")],
                body.clone(),
            )
            .await;
        let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        assert_error(&(status, answer), 401, "unauthorized", None, path);
        assert!(
            header(&headers, "www-authenticate").is_some(),
            "{path}: a 401 carries www-authenticate; headers {headers:?}"
        );
    }
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_is_401_with_www_authenticate_and_stores_nothing() {
    let herald = Herald::start("").await;
    let body =
        serde_json::to_vec(&json!({"account_id": "acme", "type": "t.x", "payload": {}})).unwrap();
    for token in ["not-a-token", "test-ingest-token-but-longer", ""] {
        let (status, headers, answer) = herald
            .call_raw(
                "POST",
                "/v1/events",
                Some(token),
                &[("content-type", "application/json")],
                body.clone(),
            )
            .await;
        let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        assert_error(&(status, answer), 401, "unauthorized", None, token);
        assert!(
            header(&headers, "www-authenticate").is_some(),
            "token {token:?}: a 401 carries www-authenticate; headers {headers:?}"
        );
    }
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_max_body_bytes_is_413_and_stores_nothing() {
    let herald = Herald::start("").await;
    // A valid event whose body is over the default server.max_body_bytes (262144).
    let blob = "x".repeat(262_144);
    let body = serde_json::to_vec(
        &json!({"account_id": "acme", "type": "t.x", "payload": {"blob": blob}}),
    )
    .unwrap();
    assert!(body.len() > 262_144);
    let (status, _, answer) = post_raw(&herald, "/v1/events", "application/json", body).await;
    assert_error(&(status, answer), 413, "body_too_large", None, "big body");
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_content_type_is_415_and_stores_nothing() {
    let herald = Herald::start("").await;
    let body =
        serde_json::to_vec(&json!({"account_id": "acme", "type": "t.x", "payload": {}})).unwrap();
    for content_type in ["text/plain", "application/x-www-form-urlencoded", ""] {
        let (status, _, answer) = post_raw(&herald, "/v1/events", content_type, body.clone()).await;
        assert_error(
            &(status, answer),
            415,
            "unsupported_media_type",
            None,
            content_type,
        );
    }
    // No content-type header at all.
    let (status, _, answer) = herald
        .call_raw("POST", "/v1/events", Some(INGEST_TOKEN), &[], body)
        .await;
    let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
    assert_error(
        &(status, answer),
        415,
        "unsupported_media_type",
        None,
        "no content-type",
    );
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_account_id_is_422_naming_account_id_and_stores_nothing() {
    let p = json!({});
    assert_invalid_field(&[
        (json!({"type": "t.x", "payload": p}), "account_id"),
        (
            json!({"account_id": 1.5, "type": "t.x", "payload": p}),
            "account_id",
        ),
        (
            json!({"account_id": [], "type": "t.x", "payload": p}),
            "account_id",
        ),
        (
            json!({"account_id": "a b", "type": "t.x", "payload": p}),
            "account_id",
        ),
        (
            json!({"account_id": "", "type": "t.x", "payload": p}),
            "account_id",
        ),
        (
            json!({"account_id": null, "type": "t.x", "payload": p}),
            "account_id",
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_type_is_422_naming_type_and_stores_nothing() {
    let p = json!({});
    assert_invalid_field(&[
        (json!({"account_id": "acme", "payload": p}), "type"),
        (
            json!({"account_id": "acme", "type": 7, "payload": p}),
            "type",
        ),
        (
            json!({"account_id": "acme", "type": ["t.x"], "payload": p}),
            "type",
        ),
        (
            json!({"account_id": "acme", "type": "", "payload": p}),
            "type",
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_payload_is_422_naming_payload_and_stores_nothing() {
    assert_invalid_field(&[
        (json!({"account_id": "acme", "type": "t.x"}), "payload"),
        (
            json!({"account_id": "acme", "type": "t.x", "payload": [1, 2]}),
            "payload",
        ),
        (
            json!({"account_id": "acme", "type": "t.x", "payload": "text"}),
            "payload",
        ),
        (
            json!({"account_id": "acme", "type": "t.x", "payload": 3}),
            "payload",
        ),
        (
            json!({"account_id": "acme", "type": "t.x", "payload": null}),
            "payload",
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_object_event_is_422_and_stores_nothing() {
    let herald = Herald::start("").await;
    // An event is a JSON object with named fields; valid JSON of another shape is refused,
    // including an array that lists the fields by position.
    for body in [
        json!(["acme", "t.x", {"n": 1}, null, null]),
        json!([]),
        json!("acme"),
        json!(null),
    ] {
        let got = herald.ingest(body.clone()).await;
        assert_error(&got, 422, "invalid_field", None, &body.to_string());
    }
    let (status, answer) = herald
        .ingest_batch(json!([["acme", "t.x", {"n": 1}, null, null]]))
        .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["results"][0]["status"], 422, "{answer}");
    assert_eq!(
        answer["results"][0]["error"]["code"], "invalid_field",
        "{answer}"
    );
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_top_level_field_is_422_naming_it_and_stores_nothing() {
    assert_invalid_field(&[(
        json!({"account_id": "acme", "type": "t.x", "payload": {}, "data": {}}),
        "data",
    )])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_string_idempotency_key_is_422_naming_it_and_stores_nothing() {
    let p = json!({});
    assert_invalid_field(&[
        (
            json!({"account_id": "acme", "type": "t.x", "payload": p, "idempotency_key": 5}),
            "idempotency_key",
        ),
        (
            json!({"account_id": "acme", "type": "t.x", "payload": p, "idempotency_key": {}}),
            "idempotency_key",
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_token_cannot_use_admin_routes() {
    let herald = Herald::start("").await;
    let endpoint = json!({"url": "https://example.com/hook"});
    for (method, path, body) in [
        ("GET", "/v1/deliveries", None),
        ("POST", "/v1/accounts/acme/endpoints", Some(endpoint)),
        ("GET", "/v1/status", None),
        ("GET", "/v1/accounts/acme/endpoints", None),
    ] {
        let got = herald.call(method, path, Some(INGEST_TOKEN), body).await;
        assert_error(
            &got,
            401,
            "unauthorized",
            None,
            &format!("{method} {path} with the ingest token"),
        );
    }
    // Nothing was created by the refused POST.
    let (status, list) = herald
        .admin("GET", "/v1/accounts/acme/endpoints", None)
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_token_can_post_events() {
    let herald = Herald::start("").await;
    let (status, answer) = herald
        .call(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            Some(json!({"account_id": "acme", "type": "t.x", "payload": {"n": 1}})),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    assert!(
        answer["event_id"]
            .as_str()
            .is_some_and(|id| id.starts_with("evt_")),
        "{answer}"
    );
    assert_eq!(answer["duplicate"], false, "{answer}");
    // The admin token may post events too.
    let (status, answer) = herald
        .call(
            "POST",
            "/v1/events",
            Some(ADMIN_TOKEN),
            Some(json!({"account_id": "acme", "type": "t.x", "payload": {"n": 2}})),
        )
        .await;
    assert_eq!(status, 202, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_idempotency_key_same_account_is_a_duplicate_and_queues_nothing() {
    let herald = Herald::start("").await;
    let event = |n: u32| {
        json!({"account_id": "acme", "type": "order.paid", "payload": {"n": n},
               "idempotency_key": "order-1"})
    };
    let (status, first) = herald.ingest(event(1)).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["duplicate"], false, "{first}");
    assert_eq!(first["deliveries"].as_array().map(Vec::len), Some(1));

    let (status, second) = herald.ingest(event(2)).await;
    assert_eq!(status, 202, "{second}");
    assert_eq!(second["duplicate"], true, "{second}");
    assert_eq!(second["event_id"], first["event_id"], "{second}");
    assert_eq!(
        second["deliveries"][0]["delivery_id"], first["deliveries"][0]["delivery_id"],
        "the duplicate answers the first event's deliveries: {second}"
    );
    assert_eq!(second["deliveries"].as_array().map(Vec::len), Some(1));

    let (_, list) = herald.admin("GET", "/v1/deliveries", None).await;
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "a duplicate queues nothing: {list}");
    assert_eq!(items[0]["event_id"], first["event_id"]);
    // The stored event keeps the first payload.
    let (status, ev) = herald
        .admin(
            "GET",
            &format!("/v1/events/{}", first["event_id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, 200, "{ev}");
    assert_eq!(ev["payload"], json!({"n": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_idempotency_key_on_another_account_is_a_new_event() {
    let herald = Herald::start("").await;
    let event = |account: &str| {
        json!({"account_id": account, "type": "order.paid", "payload": {},
               "idempotency_key": "order-1"})
    };
    let (status, first) = herald.ingest(event("acme")).await;
    assert_eq!(status, 202, "{first}");
    let (status, other) = herald.ingest(event("globex")).await;
    assert_eq!(status, 202, "{other}");
    assert_eq!(other["duplicate"], false, "{other}");
    assert_ne!(other["event_id"], first["event_id"], "{other}");
    assert_ne!(
        other["deliveries"][0]["delivery_id"],
        first["deliveries"][0]["delivery_id"]
    );

    let (_, list) = herald.admin("GET", "/v1/deliveries", None).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_answers_in_order_and_a_bad_item_fails_only_itself() {
    let herald = Herald::start("").await;
    let batch = json!({"events": [
        {"account_id": "acme", "type": "t.first", "payload": {"n": 0}},
        {"account_id": "acme", "type": 42, "payload": {"n": 1}},
        {"account_id": "acme", "type": "t.third", "payload": {"n": 2}},
        {"account_id": "acme", "type": "t.fourth", "payload": "not an object"},
    ]});
    let (status, answer) = herald
        .call("POST", "/v1/events/batch", Some(INGEST_TOKEN), Some(batch))
        .await;
    assert_eq!(status, 202, "{answer}");
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "{answer}");

    for i in [0, 2] {
        let r = &results[i];
        assert_eq!(r["status"], 202, "results[{i}]: {r}");
        assert!(
            r["event_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("evt_")),
            "results[{i}]: {r}"
        );
        assert_eq!(r["duplicate"], false, "results[{i}]: {r}");
        let deliveries = r["deliveries"].as_array().expect("deliveries");
        assert_eq!(deliveries.len(), 1, "results[{i}]: {r}");
        assert_eq!(deliveries[0]["state"], "pending", "results[{i}]: {r}");
        assert!(
            deliveries[0]["delivery_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("dlv_")),
            "results[{i}]: {r}"
        );
    }
    assert_eq!(results[1]["status"], 422, "{}", results[1]);
    assert_eq!(results[1]["error"]["code"], "invalid_field");
    assert_eq!(results[1]["error"]["field"], "events[1].type");
    assert_eq!(results[3]["status"], 422, "{}", results[3]);
    assert_eq!(results[3]["error"]["code"], "invalid_field");
    assert_eq!(results[3]["error"]["field"], "events[3].payload");

    // Exactly the good items were stored, each with its own type.
    for (i, ty) in [(0, "t.first"), (2, "t.third")] {
        let id = results[i]["event_id"].as_str().unwrap();
        let (status, ev) = herald.admin("GET", &format!("/v1/events/{id}"), None).await;
        assert_eq!(status, 200, "{ev}");
        assert_eq!(ev["type"], ty, "{ev}");
        assert_eq!(ev["payload"], json!({"n": i}), "{ev}");
    }
    let (_, list) = herald.admin("GET", "/v1/deliveries", None).await;
    let stored: BTreeSet<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|d| d["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(stored, BTreeSet::from(["t.first", "t.third"]), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_over_1000_events_is_422_naming_events_and_stores_nothing() {
    let herald = Herald::start("").await;
    let events: Vec<Value> = (0..1001)
        .map(|n| json!({"account_id": "acme", "type": "t.x", "payload": {"n": n}}))
        .collect();
    let got = herald.ingest_batch(json!(events)).await;
    assert_error(&got, 422, "invalid_field", Some("events"), "1001 events");
    assert_nothing_stored(&herald).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_catalog_rejects_an_undeclared_type_with_422() {
    let herald = Herald::start(
        "[catalog]\nstrict = true\n[catalog.events.\"known.type\"]\ndescription = \"x\"\n",
    )
    .await;
    let got = herald
        .ingest(json!({"account_id": "acme", "type": "unknown.type", "payload": {}}))
        .await;
    assert_error(&got, 422, "invalid_field", Some("type"), "undeclared type");
    assert_nothing_stored(&herald).await;

    let (status, answer) = herald
        .ingest(json!({"account_id": "acme", "type": "known.type", "payload": {}}))
        .await;
    assert_eq!(status, 202, "a declared type is accepted: {answer}");
}

/// docs/api.md: with `catalog.validate = true` a payload that violates its type's schema is
/// `422 schema_violation`, the rule in the message and the JSON pointer of the offending value
/// in `field`; nothing is stored. In a batch only that item fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_violating_its_schema_is_422_schema_violation_and_stores_nothing() {
    let herald = Herald::start(
        "[catalog]\nvalidate = true\n\
         [catalog.events.\"order.paid\"]\n\
         schema = { type = \"object\", required = [\"order_id\"], properties = { \
            order_id = { type = \"string\" }, \
            items = { type = \"array\", items = { type = \"object\", properties = { price = { type = \"number\", minimum = 0 } } } } } }\n",
    )
    .await;
    for (payload, field, rule) in [
        (json!({"order_id": 7}), "/payload/order_id", "type"),
        (json!({"items": []}), "/payload", "required"),
        (
            json!({"order_id": "o", "items": [{"price": 1}, {"price": -2}]}),
            "/payload/items/1/price",
            "minimum",
        ),
    ] {
        let got = herald
            .ingest(json!({"account_id": "acme", "type": "order.paid", "payload": payload}))
            .await;
        assert_error(
            &got,
            422,
            "schema_violation",
            Some(field),
            &payload.to_string(),
        );
        let message = got.1["error"]["message"].as_str().unwrap();
        assert!(message.contains(rule), "{message}");
    }
    assert_nothing_stored(&herald).await;

    let (status, answer) = herald
        .ingest_batch(json!([
            {"account_id": "acme", "type": "order.paid", "payload": {"order_id": "o-1"}},
            {"account_id": "acme", "type": "order.paid", "payload": {"order_id": false}},
            {"account_id": "acme", "type": "other.type", "payload": {"anything": true}},
        ]))
        .await;
    assert_eq!(status, 202, "{answer}");
    let r = &answer["results"];
    assert_eq!(r[0]["status"], 202, "{answer}");
    assert_eq!(r[1]["status"], 422, "{answer}");
    assert_eq!(r[1]["error"]["code"], "schema_violation", "{answer}");
    assert_eq!(
        r[1]["error"]["field"], "/events/1/payload/order_id",
        "{answer}"
    );
    assert_eq!(
        r[2]["status"], 202,
        "a type without a schema takes anything: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_account_id_is_normalized_to_its_decimal_string() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (endpoint_id, _) = world.endpoint("11073", &recv.url("/hook"), json!({})).await;

    let (status, answer) = world
        .herald
        .ingest(json!({"account_id": 11073, "type": "interaction.review", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    // Fan-out found the endpoint of account "11073".
    assert_eq!(
        answer["deliveries"][0]["endpoint_id"], endpoint_id,
        "{answer}"
    );

    let event_id = answer["event_id"].as_str().unwrap();
    let (status, ev) = world
        .herald
        .admin("GET", &format!("/v1/events/{event_id}"), None)
        .await;
    assert_eq!(status, 200, "{ev}");
    assert_eq!(ev["account_id"], "11073", "{ev}");
    let delivery = world.delivery(&first_delivery(&answer)).await;
    assert_eq!(delivery["account_id"], "11073", "{delivery}");

    let (_, list) = world
        .herald
        .admin("GET", "/v1/deliveries?account_id=11073", None)
        .await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_without_endpoints_gets_one_skipped_no_endpoint_delivery() {
    let world = World::start("", "").await;
    let answer = world
        .ingest("lonely", "interaction.review", json!({}))
        .await;
    let deliveries = answer["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 1, "{answer}");
    assert_eq!(deliveries[0]["endpoint_id"], Value::Null, "{answer}");
    assert_eq!(deliveries[0]["state"], "pending", "{answer}");

    let d = world
        .wait_state(&first_delivery(&answer), "skipped", SETTLE)
        .await;
    assert_eq!(d["last_status"], "no_endpoint", "{d}");
    assert_eq!(d["endpoint_id"], Value::Null, "{d}");
    assert_eq!(d["event_id"], answer["event_id"], "{d}");
    let attempts = d["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "one record per event: {d}");
    assert_eq!(attempts[0]["status"], "no_endpoint", "{d}");
    assert_eq!(attempts[0]["http_status"], Value::Null, "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_fans_out_to_every_matching_endpoint_of_its_account() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    let (ep_interactions, _) = world
        .endpoint(
            "acme",
            &recv.url("/interactions"),
            json!({"event_types": ["interaction.*"]}),
        )
        .await;
    let (ep_everything, _) = world.endpoint("acme", &recv.url("/all"), json!({})).await;
    let (_ep_profile, _) = world
        .endpoint(
            "acme",
            &recv.url("/profile"),
            json!({"event_types": ["profile.updated"]}),
        )
        .await;
    let (_ep_other_account, _) = world
        .endpoint("globex", &recv.url("/other"), json!({}))
        .await;

    let answer = world
        .ingest("acme", "interaction.review", json!({"stars": 5}))
        .await;
    let deliveries = answer["deliveries"].as_array().expect("deliveries");
    let endpoints: BTreeSet<&str> = deliveries
        .iter()
        .map(|d| d["endpoint_id"].as_str().expect("endpoint_id"))
        .collect();
    assert_eq!(
        endpoints,
        BTreeSet::from([ep_interactions.as_str(), ep_everything.as_str()]),
        "{answer}"
    );
    assert_eq!(deliveries.len(), 2, "{answer}");
    for d in deliveries {
        assert_eq!(d["state"], "pending", "{answer}");
        let id = d["delivery_id"].as_str().unwrap();
        let settled = world.wait_state(id, "delivered", SETTLE).await;
        assert_eq!(settled["last_status"], "delivered", "{settled}");
    }
    let paths: BTreeSet<String> = recv
        .wait_for(2, SETTLE)
        .await
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert_eq!(
        paths,
        BTreeSet::from(["/all".to_string(), "/interactions".to_string()])
    );
    // Every delivery has settled, so nothing else can still be on its way.
    assert_eq!(recv.count(), 2);
    let (_, list) = world
        .herald
        .admin("GET", "/v1/deliveries?account_id=globex", None)
        .await;
    assert_eq!(
        list["items"],
        json!([]),
        "another account's endpoint got nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_matching_no_endpoint_filter_gets_one_no_endpoint_delivery() {
    let world = World::start("", "").await;
    let recv = Receiver::ok_https(&world.ca);
    world
        .endpoint(
            "acme",
            &recv.url("/interactions"),
            json!({"event_types": ["interaction.*"]}),
        )
        .await;
    let answer = world.ingest("acme", "profile.updated", json!({})).await;
    let deliveries = answer["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 1, "{answer}");
    assert_eq!(deliveries[0]["endpoint_id"], Value::Null, "{answer}");
    let d = world
        .wait_state(&first_delivery(&answer), "skipped", SETTLE)
        .await;
    assert_eq!(d["last_status"], "no_endpoint", "{d}");
    assert_eq!(recv.count(), 0, "the filtered-out endpoint got nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_idempotency_key_twice_in_one_batch_is_a_duplicate() {
    let herald = Herald::start("").await;
    let item = |n: u32| {
        json!({"account_id": "acme", "type": "order.paid", "payload": {"n": n},
               "idempotency_key": "order-1"})
    };
    let (status, answer) = herald.ingest_batch(json!([item(1), item(2)])).await;
    assert_eq!(status, 202, "{answer}");
    let results = &answer["results"];
    assert_eq!(results[0]["status"], 202, "{answer}");
    assert_eq!(results[0]["duplicate"], false, "{answer}");
    assert_eq!(results[1]["status"], 202, "{answer}");
    assert_eq!(results[1]["duplicate"], true, "{answer}");
    assert_eq!(results[1]["event_id"], results[0]["event_id"], "{answer}");
    let (_, list) = herald.admin("GET", "/v1/deliveries", None).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_with_the_same_idempotency_key_store_one_event() {
    let herald = Herald::start("").await;
    let event = || {
        json!({"account_id": "acme", "type": "order.paid", "payload": {},
               "idempotency_key": "order-1"})
    };
    let answers = tokio::join!(
        herald.ingest(event()),
        herald.ingest(event()),
        herald.ingest(event()),
        herald.ingest(event()),
        herald.ingest(event()),
        herald.ingest(event()),
    );
    let answers = [
        answers.0, answers.1, answers.2, answers.3, answers.4, answers.5,
    ];
    let event_ids: BTreeSet<String> = answers
        .iter()
        .map(|(status, a)| {
            assert_eq!(*status, 202, "{a}");
            a["event_id"].as_str().expect("event_id").to_string()
        })
        .collect();
    assert_eq!(event_ids.len(), 1, "one event for one key: {answers:?}");
    let firsts = answers
        .iter()
        .filter(|(_, a)| a["duplicate"] == false)
        .count();
    assert_eq!(
        firsts, 1,
        "exactly one answer is not a duplicate: {answers:?}"
    );
    let (_, list) = herald.admin("GET", "/v1/deliveries", None).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
}

/// A test event may carry the caller's payload: sent as written, after the type's schema
/// passed it (whatever `catalog.validate` says); one the schema refuses is `422
/// schema_violation` and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_event_with_its_own_payload_is_checked_against_the_schema_then_sent() {
    let tables = "[catalog.events.\"order.paid\"]\nsample = { order_id = \"o-1\" }\n\
                  schema = { type = \"object\", required = [\"order_id\"], properties = { \
                  order_id = { type = \"string\" } } }\n";
    let w = World::start("", tables).await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w.endpoint("acme", &recv.url("/t"), json!({})).await;
    let test = |body: Value| {
        let h = &w.herald;
        let path = format!("/v1/endpoints/{ep}/test");
        async move { h.admin("POST", &path, Some(body)).await }
    };
    let (status, e) = test(json!({"type": "order.paid", "payload": {"order_id": 7}})).await;
    assert_eq!(status, 422, "{e}");
    assert_eq!(e["error"]["code"], "schema_violation", "{e}");
    assert_eq!(e["error"]["field"], "/payload/order_id", "{e}");
    let (status, e) = test(json!({"type": "order.paid", "payload": [1]})).await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (422, &json!("payload")),
        "{e}"
    );
    assert_eq!(recv.count(), 0, "nothing refused is sent");

    let (status, r) = test(json!({"type": "order.paid", "payload": {"order_id": "edited"}})).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["attempt"]["status"], "delivered", "{r}");
    let got = recv.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(got[0].json(), json!({"order_id": "edited"}));
    // Without a payload, the catalog's sample as before.
    let (status, _) = test(json!({"type": "order.paid"})).await;
    assert_eq!(status, 200);
    let got = recv.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(got[1].json(), json!({"order_id": "o-1"}));
}
