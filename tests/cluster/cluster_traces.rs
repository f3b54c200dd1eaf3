//! Traces in cluster mode (docs/operations.md, "Traces"): the context an event keeps is in the
//! database, so an attempt on another node than the one that took the request is a child of the
//! request's span; a schema-14 database migrates and keeps contexts from then on.

use crate::common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::herald::{Launch, INGEST_TOKEN};
use common::otlp::Collector;
use common::{behaviour, toml_string, Herald, Receiver, Reply};
use serde_json::json;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const SETTLE: Duration = Duration::from_secs(20);

/// A node of the cluster on `url` exporting to `collector`, naming itself in its spans'
/// resource (`herald.node`, through `OTEL_RESOURCE_ATTRIBUTES`).
async fn node(url: &str, collector: &Collector, name: &'static str) -> Herald {
    let launch = Launch {
        wrap: Some(Arc::new(move |args: &[String]| {
            let mut c = Command::new(&args[0]);
            c.args(&args[1..])
                .env("OTEL_RESOURCE_ATTRIBUTES", format!("herald.node={name}"))
                .env("OTEL_SERVICE_NAME", format!("webhooks-{name}"));
            c
        })),
        ..Launch::default()
    };
    Herald::start_with(
        &format!(
            "[delivery]\nallow_http = true\nallow_private_networks = [\"127.0.0.0/8\"]\n\
             [endpoints]\nrequire_verification = false\n[retry_policies]\nsoon = [\"1s\"]\n\
             [storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {}\n{}",
            toml_string(url),
            collector.toml()
        ),
        launch,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_on_another_node_is_a_child_of_the_request_span() {
    let collector = Collector::start();
    let url = common::postgres::shared_database();
    let mut a = node(&url, &collector, "a").await;
    let b = node(&url, &collector, "b").await;
    let recv = Receiver::http(behaviour(|_, n| {
        Reply::status(if n == 0 { 503 } else { 200 })
    }));
    let (status, ep) = a
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(
                json!({"url": recv.url("/hook"), "retry_policy": "soon", "propagate_trace": true}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    // Node b takes the endpoint into its copy before a stops (and gives its leases back).
    let ep = ep["endpoint"]["id"].as_str().unwrap().to_string();
    common::wait_until(SETTLE, "node b knows the endpoint", || async {
        b.admin("GET", &format!("/v1/endpoints/{ep}"), None).await.0 == 200
    })
    .await;
    let (status, _, answer) = a
        .call_raw(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            &[
                ("content-type", "application/json"),
                ("traceparent", TRACEPARENT),
            ],
            br#"{"account_id":"acme","type":"t.x","payload":{}}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 202);
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    let delivery = common::first_delivery(&answer);
    recv.wait_for(1, SETTLE).await;
    // Node a stops once its first attempt is recorded: the retry is node b's.
    common::wait_until(SETTLE, "the first attempt is recorded", || async {
        a.admin("GET", &format!("/v1/deliveries/{delivery}"), None)
            .await
            .1["attempt_count"]
            == 1
    })
    .await;
    assert!(a.sigterm().await.success());
    common::wait_until(SETTLE, "node b delivers the retry", || async {
        b.admin("GET", &format!("/v1/deliveries/{delivery}"), None)
            .await
            .1["state"]
            == "delivered"
    })
    .await;
    let spans = collector
        .wait(SETTLE, "both attempts' spans", |s| {
            s.iter()
                .filter(|s| s.attr("herald.delivery_id") == delivery.as_str())
                .count()
                == 2
        })
        .await;
    let ingest = spans
        .iter()
        .find(|s| s.kind == "SPAN_KIND_SERVER")
        .expect("the request's span");
    assert_eq!(
        (
            ingest.trace_id.as_str(),
            ingest.resource["herald.node"].as_str()
        ),
        (TRACE, Some("a"))
    );
    let attempts: Vec<_> = spans
        .iter()
        .filter(|s| s.attr("herald.delivery_id") == delivery.as_str())
        .collect();
    for (a, (node, number)) in attempts.iter().zip([("a", 1), ("b", 2)]) {
        assert_eq!(a.resource["herald.node"], node, "{a:?}");
        assert_eq!(
            a.resource["service.name"],
            format!("webhooks-{node}").as_str()
        );
        assert_eq!(a.attr("herald.attempt"), number);
        assert_eq!(a.trace_id, TRACE);
        assert_eq!(a.parent_span_id, ingest.span_id, "node {node}'s attempt");
    }
    assert_eq!(
        recv.requests()[1].header("traceparent"),
        Some(format!("00-{TRACE}-{}-01", attempts[1].span_id).as_str())
    );
}

/// A database at schema version 14 (tests/fixtures/cluster8: the last version before events kept
/// a trace context) migrates: its events keep none, and a new event's context is in its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_14_database_keeps_trace_contexts_from_now_on() {
    let (pg, url) = crate::cluster::fixture_database_in("cluster8", 14);
    let recv = Receiver::ok_http();
    let node = crate::cluster::node_on_fixture(&pg, &url, "").await;
    assert_eq!(
        pg.sql(
            "SELECT count(*) FILTER (WHERE traceparent IS NULL) || '/' || count(*) FROM events",
            "herald"
        ),
        pg.sql("SELECT count(*) || '/' || count(*) FROM events", "herald"),
        "the fixture's events keep no context"
    );
    let ok = "ep_01M96XXMVQC7RVQG4F13V72F4W";
    let (status, _) = node
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ok}"),
            Some(json!({"url": recv.url("/ok"), "propagate_trace": true})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _, answer) = node
        .call_raw(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            &[
                ("content-type", "application/json"),
                ("traceparent", TRACEPARENT),
                ("tracestate", "shop=7"),
            ],
            br#"{"account_id":"acct_ok","type":"order.created","payload":{"n":9}}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 202);
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    let got = recv.wait_for(1, SETTLE).await;
    assert_eq!(got[0].header("traceparent"), Some(TRACEPARENT));
    assert_eq!(got[0].header("tracestate"), Some("shop=7"));
    let event = answer["event_id"].as_str().unwrap();
    let id = herald::ids::parse(herald::ids::EVENT, event).unwrap();
    assert_eq!(
        pg.sql(
            &format!(
                "SELECT traceparent || ' ' || tracestate FROM events
                 WHERE id = '\\x{:032x}'::bytea",
                id
            ),
            "herald"
        ),
        format!("{TRACEPARENT} shop=7"),
        "kept in the database"
    );
}
