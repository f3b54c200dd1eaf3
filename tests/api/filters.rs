//! Payload filters end to end (docs/api.md, "Payload filters"): set on an endpoint, refused with
//! the path named, applied at fan-out and replay (not by a test event or recover), and the
//! filter-test route.

use crate::common;

use std::time::Duration;

use common::{behaviour, first_delivery, HeraldApi, Receiver, Reply, World};
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(20);

const BIG: &str = r#"{"payload": {"amount": {"$gte": 100}, "currency": {"$in": ["EUR", "USD"]}}}"#;

fn big() -> Value {
    serde_json::from_str(BIG).expect("filter")
}

async fn patch(w: &World, ep: &str, body: Value) -> (u16, Value) {
    w.herald
        .admin("PATCH", &format!("/v1/endpoints/{ep}"), Some(body))
        .await
}

async fn get(w: &World, ep: &str) -> Value {
    let (status, e) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(status, 200, "{e}");
    e
}

/// The endpoint ids an ingest answer has deliveries for (`None` for a `no_endpoint` record).
fn targets(answer: &Value) -> Vec<Option<String>> {
    let mut t: Vec<_> = answer["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["endpoint_id"].as_str().map(str::to_string))
        .collect();
    t.sort();
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_is_set_on_create_and_patch_shown_on_get_and_cleared_with_null() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w
        .endpoint("acme", &recv.url("/a"), json!({ "filter": big() }))
        .await;
    assert_eq!(get(&w, &ep).await["filter"], big());

    // A PATCH that does not name the filter keeps it.
    let (status, e) = patch(&w, &ep, json!({"description": "billing"})).await;
    assert_eq!((status, &e["filter"]), (200, &big()), "{e}");

    let other = json!({"type": {"$startsWith": "invoice."}});
    let (status, e) = patch(&w, &ep, json!({ "filter": other })).await;
    assert_eq!((status, &e["filter"]), (200, &other), "{e}");

    let (status, e) = patch(&w, &ep, json!({ "filter": null })).await;
    assert_eq!((status, &e["filter"]), (200, &Value::Null), "{e}");
    assert_eq!(get(&w, &ep).await["filter"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_filter_is_422_naming_its_path_and_changes_nothing() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w
        .endpoint("acme", &recv.url("/a"), json!({ "filter": big() }))
        .await;
    let cases = [
        (
            json!({"payload": {"amount": {"$gte": "a", "$lt": true}}}),
            "filter.payload.amount.$lt",
        ),
        (json!({"amount": 5}), "filter.amount"),
        (
            json!({"payload": {"x": {"$like": "a%"}}}),
            "filter.payload.x.$like",
        ),
        (json!({"$or": []}), "filter.$or"),
        (json!([1]), "filter"),
        (json!({"payload": {"x": "y".repeat(5000)}}), "filter"),
    ];
    for (filter, field) in cases {
        let (status, e) = patch(&w, &ep, json!({ "filter": filter })).await;
        assert_eq!(status, 422, "{filter}: {e}");
        assert_eq!(e["error"]["code"], "invalid_field", "{e}");
        assert_eq!(e["error"]["field"], field, "{filter}: {e}");
        let message = e["error"]["message"].as_str().expect("message");
        assert!(message.contains(field), "{message}");
        let (status, e) = w
            .herald
            .admin(
                "POST",
                "/v1/accounts/acme/endpoints",
                Some(json!({"url": recv.url("/b"), "filter": filter})),
            )
            .await;
        assert_eq!((status, &e["error"]["field"]), (422, &json!(field)), "{e}");
    }
    assert_eq!(get(&w, &ep).await["filter"], big());
    let (_, list) = w
        .herald
        .admin("GET", "/v1/accounts/acme/endpoints", None)
        .await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_and_replay_deliver_only_where_the_filter_matches() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let (big_ep, _) = w
        .endpoint("acme", &recv.url("/big"), json!({ "filter": big() }))
        .await;
    let (eu_ep, _) = w
        .endpoint(
            "acme",
            &recv.url("/eu"),
            json!({"event_types": ["invoice.*"],
                   "filter": {"payload": {"customer": {"country": {"$in": ["FR", "DE"]}}}}}),
        )
        .await;
    let (all_ep, _) = w.endpoint("acme", &recv.url("/all"), json!({})).await;

    let big_eu = json!({"amount": 250, "currency": "EUR", "customer": {"country": "FR"}});
    let answer = w.ingest("acme", "invoice.paid", big_eu).await;
    let mut want = vec![
        Some(big_ep.clone()),
        Some(eu_ep.clone()),
        Some(all_ep.clone()),
    ];
    want.sort();
    assert_eq!(targets(&answer), want, "{answer}");

    // Small, and not an invoice: only the endpoint without a filter.
    let answer = w
        .ingest(
            "acme",
            "order.created",
            json!({"amount": 5, "customer": {"country": "FR"}}),
        )
        .await;
    assert_eq!(targets(&answer), vec![Some(all_ep.clone())], "{answer}");

    // Every delivery reaches its receiver, and no other request arrives.
    let got = recv.wait_for(4, SETTLE).await;
    let mut paths: Vec<String> = got.iter().map(|r| r.path.clone()).collect();
    paths.sort();
    assert_eq!(paths, ["/all", "/all", "/big", "/eu"]);

    // An event no endpoint's filter takes gets the usual no_endpoint record.
    let (status, _) = patch(&w, &all_ep, json!({"filter": {"type": "never"}})).await;
    assert_eq!(status, 200);
    let answer = w
        .ingest("acme", "order.created", json!({"amount": 5}))
        .await;
    assert_eq!(targets(&answer), vec![None], "{answer}");
    let d = w
        .wait_state(&first_delivery(&answer), "skipped", SETTLE)
        .await;
    assert_eq!(d["last_status"], "no_endpoint", "{d}");

    // Replay fans out again with the filters as they are now.
    let (status, _) = patch(&w, &all_ep, json!({"filter": {"payload": {"amount": 5}}})).await;
    assert_eq!(status, 200);
    let event = answer["event_id"].as_str().expect("event id");
    let (status, r) = w
        .herald
        .admin(
            "POST",
            &format!("/v1/events/{event}/replay"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 202, "{r}");
    assert_eq!(targets(&r), vec![Some(all_ep.clone())], "{r}");
    recv.wait_for(5, SETTLE).await;
    assert_eq!(recv.count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_event_and_recover_ignore_the_filter() {
    let w = World::start("", "").await;
    // The first request fails, every later one succeeds.
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, i| Reply::status(if i == 0 { 500 } else { 200 })),
    );
    let (ep, _) = w
        .endpoint("acme", &recv.url("/a"), json!({"retry_policy": "none"}))
        .await;
    let d = first_delivery(
        &w.ingest("acme", "order.created", json!({"amount": 5}))
            .await,
    );
    w.wait_state(&d, "failed", SETTLE).await;

    // A filter that takes nothing: recover still retries the failed delivery...
    let (status, _) = patch(&w, &ep, json!({"filter": {"type": "never"}})).await;
    assert_eq!(status, 200);
    let (status, r) = w
        .herald
        .admin(
            "POST",
            &format!("/v1/endpoints/{ep}/recover"),
            Some(json!({"since": "2000-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!((status, r["recovered"].as_u64()), (202, Some(1)), "{r}");
    w.wait_state(&d, "delivered", SETTLE).await;

    // ...and a test event is sent.
    let (status, t) = w
        .herald
        .admin("POST", &format!("/v1/endpoints/{ep}/test"), None)
        .await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["attempt"]["status"], "delivered", "{t}");
    assert_eq!(recv.wait_for(3, SETTLE).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_test_answers_whether_and_why_not() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acme", &recv.url("/a"), json!({})).await;
    let stored = w
        .ingest(
            "acme",
            "invoice.paid",
            json!({"amount": 50, "currency": "EUR"}),
        )
        .await;
    let event = stored["event_id"].as_str().expect("event id").to_string();
    let test = |body: Value| {
        let h = &w.herald;
        async move {
            h.admin("POST", "/v1/accounts/acme/filter-test", Some(body))
                .await
        }
    };

    let (status, t) = test(json!({"filter": big(), "event_id": event})).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(
        t,
        json!({"matches": false, "reason": "payload.amount: 50 is not >= 100"})
    );
    let (_, t) = test(json!({"filter": {"type": "invoice.paid"}, "event_id": event})).await;
    assert_eq!(t, json!({"matches": true, "reason": null}));
    let (_, t) = test(json!({"filter": big(), "type": "invoice.paid",
                            "payload": {"amount": 100.0, "currency": "USD"}}))
    .await;
    assert_eq!(t, json!({"matches": true, "reason": null}));
    let (_, t) = test(json!({"filter": null, "type": "x", "payload": {}})).await;
    assert_eq!(t, json!({"matches": true, "reason": null}));

    // Wrong requests name their field; another account's event does not exist here.
    let wrong = [
        (json!({"event_id": event}), 422, Some("filter")),
        (
            json!({"filter": {"amount": 1}, "event_id": event}),
            422,
            Some("filter.amount"),
        ),
        (json!({"filter": {}}), 422, Some("event_id")),
        (
            json!({"filter": {}, "event_id": event, "type": "x"}),
            422,
            Some("event_id"),
        ),
        (json!({"filter": {}, "type": "x"}), 422, Some("payload")),
        (
            json!({"filter": {}, "type": "x", "payload": [1]}),
            422,
            Some("payload"),
        ),
        (json!({"filter": {}, "event_id": "evt_nope"}), 404, None),
    ];
    for (body, code, field) in wrong {
        let (status, e) = test(body.clone()).await;
        assert_eq!(status, code, "{body}: {e}");
        assert_eq!(e["error"]["field"].as_str(), field, "{body}: {e}");
    }
    let (status, _) = w
        .herald
        .admin(
            "POST",
            "/v1/accounts/globex/filter-test",
            Some(json!({"filter": {}, "event_id": event})),
        )
        .await;
    assert_eq!(status, 404);

    // A read-only portal session may test (it changes nothing), for its own account only.
    let (status, s) = w
        .herald
        .admin(
            "POST",
            "/v1/accounts/acme/portal-sessions",
            Some(json!({"read_only": true})),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let token = s["token"].as_str().expect("token");
    let body = json!({"filter": big(), "event_id": event});
    let (status, t) = w
        .herald
        .call(
            "POST",
            "/v1/accounts/acme/filter-test",
            Some(token),
            Some(body.clone()),
        )
        .await;
    assert_eq!((status, &t["matches"]), (200, &json!(false)), "{t}");
    let (status, _) = w
        .herald
        .call(
            "POST",
            "/v1/accounts/globex/filter-test",
            Some(token),
            Some(body),
        )
        .await;
    assert_eq!(status, 404);
}

/// With the endpoint's event types, the filter test decides as fan-out does: an event of a type
/// the endpoint does not take never "matches", whatever its payload, and the reason names the
/// step (types, then the filter) that left it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_test_with_event_types_decides_as_fan_out_does_and_names_the_step() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let types = json!(["order.created", "order.refunded"]);
    let filter = json!({"payload": {"amount": {"$gte": 1000}}});
    let (ep, _) = w
        .endpoint(
            "acme",
            &recv.url("/orders"),
            json!({"event_types": types, "filter": filter}),
        )
        .await;
    let test = |body: Value| {
        let h = &w.herald;
        async move {
            h.admin("POST", "/v1/accounts/acme/filter-test", Some(body))
                .await
        }
    };
    let cases = [
        (
            "invoice.paid.v2",
            5000,
            "type invoice.paid.v2 is not one of this endpoint's",
        ),
        ("order.created", 50, "payload.amount: 50 is not >= 1000"),
        ("order.refunded", 5000, ""),
    ];
    for (kind, amount, reason) in cases {
        let answer = w.ingest("acme", kind, json!({ "amount": amount })).await;
        let delivered = targets(&answer) == vec![Some(ep.clone())];
        let event = answer["event_id"].as_str().expect("event id");
        let (status, t) =
            test(json!({"filter": filter, "event_types": types, "event_id": event})).await;
        assert_eq!(status, 200, "{t}");
        assert_eq!(
            t["matches"],
            json!(delivered),
            "{kind} {amount}: {t} vs {answer}"
        );
        assert_eq!(
            t["reason"].as_str().unwrap_or(""),
            reason,
            "{kind} {amount}"
        );
        // The same type and payload given inline decide the same.
        let (_, inline) = test(json!({"filter": filter, "event_types": types,
                                      "type": kind, "payload": {"amount": amount}}))
        .await;
        assert_eq!(inline, t, "{kind} {amount}");
    }
    // Without event types the filter alone decides, as before; no filter and no type taken is
    // still a mismatch, by type.
    let (_, t) =
        test(json!({"filter": filter, "type": "invoice.paid.v2", "payload": {"amount": 5000}}))
            .await;
    assert_eq!(t, json!({"matches": true, "reason": null}));
    let (_, t) = test(
        json!({"filter": null, "event_types": ["order.*"], "type": "invoice.paid",
                             "payload": {}}),
    )
    .await;
    assert_eq!(
        t,
        json!({"matches": false, "reason": "type invoice.paid is not one of this endpoint's"})
    );
    // An endpoint that lists channels takes only events sent on one of them.
    let (_, t) = test(
        json!({"filter": null, "channels": ["eu"], "type": "order.created",
                             "payload": {}}),
    )
    .await;
    assert_eq!(t["matches"], false, "{t}");
    assert!(
        t["reason"].as_str().is_some_and(|r| r.contains("channel")),
        "{t}"
    );
    // Wrong lists name their field and decide nothing.
    let wrong = [
        (
            json!({"filter": null, "event_types": "order.*", "type": "x", "payload": {}}),
            "event_types",
        ),
        (
            json!({"filter": null, "event_types": ["order.**"], "type": "x", "payload": {}}),
            "event_types[0]",
        ),
        (
            json!({"filter": null, "channels": [""], "type": "x", "payload": {}}),
            "channels[0]",
        ),
        (
            json!({"filter": null, "channels": {}, "type": "x", "payload": {}}),
            "channels",
        ),
    ];
    for (body, field) in wrong {
        let (status, e) = test(body.clone()).await;
        assert_eq!(status, 422, "{body}: {e}");
        assert_eq!(e["error"]["field"], field, "{body}: {e}");
    }
}

/// Payloads that are valid JSON but not I-JSON: a lone surrogate escape, a number past a float's
/// range, a 400-digit integer. serde_json cannot read them into values.
fn not_i_json() -> Vec<String> {
    vec![
        r#"{"env": "prod", "s": "\ud800"}"#.into(),
        r#"{"env": "prod", "n": 1e400}"#.into(),
        format!(r#"{{"env": "prod", "n": {}}}"#, "9".repeat(400)),
    ]
}

/// Endpoint A takes `env = prod`, B takes `env != prod`: an event that only A may take.
async fn a_and_b<S: HeraldApi>(w: &World<S>, recv: &Receiver) -> (String, String) {
    let (a, _) = w
        .endpoint(
            "acme",
            &recv.url("/a"),
            json!({"filter": {"payload": {"env": "prod"}}}),
        )
        .await;
    let (b, _) = w
        .endpoint(
            "acme",
            &recv.url("/b"),
            json!({"filter": {"payload": {"env": {"$neq": "prod"}}}}),
        )
        .await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_is_not_i_json_is_422_and_never_filtered_as_null() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let (a, _b) = a_and_b(&w, &recv).await;
    let post = |path: &'static str, body: String| {
        let h = &w.herald;
        async move {
            let (status, _, answer) = h
                .call_raw(
                    "POST",
                    path,
                    Some(common::herald::INGEST_TOKEN),
                    &[("content-type", "application/json")],
                    body.into_bytes(),
                )
                .await;
            (
                status,
                serde_json::from_slice::<Value>(&answer).unwrap_or(Value::Null),
            )
        }
    };
    for payload in not_i_json() {
        let one = format!(r#"{{"account_id": "acme", "type": "deploy", "payload": {payload}}}"#);
        let (status, e) = post("/v1/events", one.clone()).await;
        assert_eq!(status, 422, "{payload}: {e}");
        assert_eq!(e["error"]["code"], "invalid_field", "{e}");
        assert_eq!(e["error"]["field"], "payload", "{e}");
        let message = e["error"]["message"].as_str().expect("message");
        assert!(message.contains("I-JSON"), "{message}");

        // In a batch, that item alone.
        let good = r#"{"account_id": "acme", "type": "deploy", "payload": {"env": "prod"}}"#;
        let (status, r) = post(
            "/v1/events/batch",
            format!(r#"{{"events": [{good}, {one}]}}"#),
        )
        .await;
        assert_eq!(status, 202, "{r}");
        assert_eq!(r["results"][0]["status"], 202, "{r}");
        assert_eq!(targets(&r["results"][0]), vec![Some(a.clone())], "{r}");
        assert_eq!(r["results"][1]["status"], 422, "{r}");
        assert_eq!(
            r["results"][1]["error"]["field"], "events[1].payload",
            "{r}"
        );
    }
    // Only the three good events were stored, each for A; B was never given one.
    let (status, list) = w
        .herald
        .admin("GET", "/v1/deliveries?account_id=acme", None)
        .await;
    assert_eq!(status, 200, "{list}");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 3, "{list}");
    assert!(items.iter().all(|d| d["endpoint_id"] == json!(a)), "{list}");
}

/// An event an older version stored with a lone surrogate (written here through the store, as
/// ingest wrote it then): replay and filter-test refuse to decide on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_payload_that_does_not_parse_is_422_at_replay_and_filter_test() {
    use herald::store::prelude::*;
    let w = World::start_manual("", "", 1_796_212_800_000).await;
    let recv = Receiver::ok_https(&w.ca);
    let (a, b) = a_and_b(&w, &recv).await;
    let store = &w.herald.running().store;
    let endpoints = store.account_endpoints("acme");
    let taker: Vec<_> = endpoints.iter().filter(|e| e.id == a).collect();
    let event = herald::store::NewEvent::fan_out(
        "acme".into(),
        "deploy".into(),
        bytes::Bytes::from_static(br#"{"env": "prod", "s": "\ud800"}"#),
        taker.into_iter(),
        1_796_212_800_000,
    );
    let stored = store
        .ingest(|| Ok::<_, herald::store::StoreError>(vec![event.clone()]))
        .await
        .expect("stored");
    let Some(herald::store::IngestOutcome::Created { event_id, .. }) = stored.first() else {
        panic!("not created: {stored:?}");
    };

    for body in [json!({}), json!({"endpoint_id": b})] {
        let (status, e) = w
            .herald
            .admin("POST", &format!("/v1/events/{event_id}/replay"), Some(body))
            .await;
        assert_eq!(status, 422, "{e}");
        assert_eq!(e["error"]["code"], "invalid_field", "{e}");
        assert_eq!(e["error"]["field"], "payload", "{e}");
    }
    let (status, e) = w
        .herald
        .admin(
            "POST",
            "/v1/accounts/acme/filter-test",
            Some(json!({"filter": {"payload": {"env": {"$neq": "prod"}}}, "event_id": event_id})),
        )
        .await;
    assert_eq!(status, 422, "{e}");
    assert_eq!(e["error"]["code"], "invalid_field", "{e}");
    assert_eq!(e["error"]["field"], "event_id", "{e}");

    // Nothing was replayed: the one stored delivery, to A, is all there is.
    let (_, list) = w
        .herald
        .admin("GET", "/v1/deliveries?account_id=acme", None)
        .await;
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["endpoint_id"], json!(a), "{list}");
}
