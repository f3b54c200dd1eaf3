//! The operator's tools (docs/api.md): retry vs replay, recover, test events, the catalog.

use crate::common;

use std::time::Duration;

use common::{behaviour, first_delivery, Receiver, Reply, World};
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(10);
const CATALOG: &str = "[catalog.events.\"interaction.review\"]\n\
                       description = \"A customer left a review\"\n\
                       sample = { review_id = \"r_1\", rating = 5 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_gets_a_new_webhook_id_while_retry_keeps_it() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    let answer = w.ingest("acc", "t.x", json!({"v": 1})).await;
    let event_id = answer["event_id"].as_str().unwrap().to_string();
    let d = first_delivery(&answer);
    w.wait_state(&d, "delivered", SETTLE).await;

    let (status, _) = w
        .herald
        .admin("POST", &format!("/v1/deliveries/{d}/retry"), None)
        .await;
    assert_eq!(status, 202);
    let got = recv.wait_for(2, SETTLE).await;
    assert_eq!(
        got[1].header("webhook-id"),
        Some(event_id.as_str()),
        "retry keeps the id"
    );

    let (status, replayed) = w
        .herald
        .admin("POST", &format!("/v1/events/{event_id}/replay"), None)
        .await;
    assert_eq!(status, 202, "{replayed}");
    let new_id = replayed["event_id"].as_str().unwrap();
    assert_ne!(new_id, event_id);
    assert_eq!(replayed["replay_of"], event_id.as_str());
    let got = recv.wait_for(3, SETTLE).await;
    assert_eq!(
        got[2].header("webhook-id"),
        Some(new_id),
        "replay is a new event"
    );
    assert_eq!(got[2].body, got[0].body, "same payload bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_to_one_endpoint_and_dry_run_counts() {
    let w = World::start("", "").await;
    let a = Receiver::ok_https(&w.ca);
    let b = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &a.url("/a"), json!({})).await;
    let (ep_b, _) = w.endpoint("acc", &b.url("/b"), json!({})).await;
    let answer = w.ingest("acc", "t.x", json!({})).await;
    let event_id = answer["event_id"].as_str().unwrap();
    a.wait_for(1, SETTLE).await;
    b.wait_for(1, SETTLE).await;

    let path = format!("/v1/events/{event_id}/replay");
    let (status, dry) = w
        .herald
        .admin("POST", &path, Some(json!({"dry_run": true})))
        .await;
    assert_eq!(
        (status, dry["deliveries"].as_u64()),
        (200, Some(2)),
        "{dry}"
    );
    let (status, one) = w
        .herald
        .admin("POST", &path, Some(json!({"endpoint_id": ep_b})))
        .await;
    assert_eq!(status, 202, "{one}");
    assert_eq!(one["deliveries"].as_array().unwrap().len(), 1);
    b.wait_for(2, SETTLE).await;
    assert_eq!(a.count(), 1, "the other endpoint got nothing");
    let (status, e) = w
        .herald
        .admin("POST", &path, Some(json!({"endpoint_id": "ep_nope"})))
        .await;
    assert_eq!(
        (status, e["error"]["field"].as_str()),
        (422, Some("endpoint_id"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recover_retries_failed_and_skipped_deliveries_since_a_time_and_counts_them() {
    let w = World::start("", "").await;
    // Fails until told otherwise (the first 3 requests), then answers 200.
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, i| {
            if i < 3 {
                Reply::status(404)
            } else {
                Reply::status(200)
            }
        }),
    );
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let d = first_delivery(&w.ingest("acc", "t.x", json!({ "i": i })).await);
        w.wait_state(&d, "failed", SETTLE).await;
        ids.push(d);
    }
    let path = format!("/v1/endpoints/{ep}/recover");
    let (status, dry) = w
        .herald
        .admin(
            "POST",
            &path,
            Some(json!({"since": "2000-01-01T00:00:00Z", "dry_run": true})),
        )
        .await;
    assert_eq!(
        (status, dry["deliveries"].as_u64()),
        (200, Some(3)),
        "{dry}"
    );
    let (status, none) = w
        .herald
        .admin(
            "POST",
            &path,
            Some(json!({"since": "2999-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!((status, none["recovered"].as_u64()), (202, Some(0)));
    let (status, done) = w
        .herald
        .admin(
            "POST",
            &path,
            Some(json!({"since": "2000-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(
        (status, done["recovered"].as_u64()),
        (202, Some(3)),
        "{done}"
    );
    for d in &ids {
        let d = w.wait_state(d, "delivered", SETTLE).await;
        assert_eq!(d["attempt_count"], 2);
    }
    let (status, e) = w.herald.admin("POST", &path, Some(json!({}))).await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("since")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_event_carries_the_catalog_sample_and_answers_with_the_attempt() {
    let w = World::start("", CATALOG).await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    let path = format!("/v1/endpoints/{ep}/test");
    let (status, t) = w
        .herald
        .admin("POST", &path, Some(json!({"type": "interaction.review"})))
        .await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["attempt"]["status"], "delivered");
    assert_eq!(t["attempt"]["http_status"], 200);
    let got = recv.wait_for(1, SETTLE).await;
    assert_eq!(got[0].json(), json!({"review_id": "r_1", "rating": 5}));
    assert_eq!(
        got[0].header("herald-event-type"),
        Some("interaction.review")
    );

    // No type: the generic webhook.test payload.
    let (status, t) = w.herald.admin("POST", &path, None).await;
    assert_eq!(status, 200, "{t}");
    let got = recv.wait_for(2, SETTLE).await;
    assert_eq!(got[1].json()["type"], "webhook.test");
    assert_eq!(t["attempt"]["status"], "delivered");

    let (status, e) = w
        .herald
        .admin("POST", &path, Some(json!({"type": "no.sample"})))
        .await;
    assert_eq!((status, e["error"]["field"].as_str()), (422, Some("type")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_types_list_the_catalog_with_descriptions_and_samples() {
    let w = World::start("", CATALOG).await;
    let (status, list) = w.herald.admin("GET", "/v1/event-types", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        list["items"],
        json!([{"type": "interaction.review", "description": "A customer left a review",
                "sample": {"review_id": "r_1", "rating": 5}, "debounce": Value::Null,
                "schema": Value::Null, "deprecated": false, "replaced_by": Value::Null}])
    );
}

/// docs/api.md, "Versioning": a deprecated type names its replacement in the catalog's answer
/// (to an admin and to a portal session alike) and is flagged in the OpenAPI `webhooks` map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprecated_type_shows_its_replacement_and_is_flagged_in_openapi() {
    let w = World::start(
        "",
        "[catalog.events.\"invoice.paid\"]\ndescription = \"Paid (old shape)\"\n\
         deprecated = true\nreplaced_by = \"invoice.paid.v2\"\n\
         [catalog.events.\"invoice.paid.v2\"]\ndescription = \"Paid\"\n\
         [catalog.events.\"invoice.voided\"]\ndeprecated = true\n",
    )
    .await;
    let (_, session) = w
        .herald
        .admin("POST", "/v1/accounts/acme/portal-sessions", None)
        .await;
    let portal = session["token"].as_str().expect("portal token");
    for token in [common::herald::ADMIN_TOKEN, portal] {
        let (status, list) = w
            .herald
            .call("GET", "/v1/event-types", Some(token), None)
            .await;
        assert_eq!(status, 200, "{list}");
        let of = |ty: &str| {
            list["items"]
                .as_array()
                .and_then(|items| items.iter().find(|t| t["type"] == ty))
                .cloned()
                .unwrap_or_else(|| panic!("{ty} missing from {list}"))
        };
        let old = of("invoice.paid");
        assert_eq!(
            (&old["deprecated"], &old["replaced_by"]),
            (&json!(true), &json!("invoice.paid.v2"))
        );
        let new = of("invoice.paid.v2");
        assert_eq!(
            (&new["deprecated"], &new["replaced_by"]),
            (&json!(false), &Value::Null)
        );
        let voided = of("invoice.voided");
        assert_eq!(
            (&voided["deprecated"], &voided["replaced_by"]),
            (&json!(true), &Value::Null)
        );
    }

    let (status, doc) = w.herald.call("GET", "/openapi.json", None, None).await;
    assert_eq!(status, 200);
    let hooks = &doc["webhooks"];
    assert_eq!(hooks["invoice.paid"]["post"]["deprecated"], true, "{hooks}");
    assert_eq!(
        hooks["invoice.paid"]["post"]["description"],
        "Deprecated: subscribe to `invoice.paid.v2` instead."
    );
    assert_eq!(hooks["invoice.voided"]["post"]["deprecated"], true);
    assert_eq!(hooks["invoice.paid.v2"]["post"]["deprecated"], false);
    assert!(hooks["invoice.paid.v2"]["post"]["description"].is_null());
}
