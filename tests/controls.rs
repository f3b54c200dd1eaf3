//! Delivery controls (SPEC §15): an endpoint's rate limit, the egress proxy and mutual TLS, with
//! the real process, real receivers and a real proxy.

mod common;

use std::time::Duration;

use common::{Receiver, World};
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(60);

/// An endpoint at 5/s offered 100 events receives all of them, never more than the rate plus the
/// burst in any second; the waiting ones stay `pending` without attempts; an unlimited endpoint
/// of the same account gets all 100 long before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_endpoint_receives_everything_at_its_rate_and_others_are_unaffected() {
    let w = World::start("", "").await;
    let slow = Receiver::ok_https(&w.ca);
    let fast = Receiver::ok_https(&w.ca);
    let (slow_ep, _) = w
        .endpoint(
            "acct_rl",
            &slow.url("/slow"),
            json!({"rate_limit": {"per_second": 5}}),
        )
        .await;
    w.endpoint("acct_rl", &fast.url("/fast"), json!({})).await;
    let (_, view) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{slow_ep}"), None)
        .await;
    assert_eq!(
        view["rate_limit"]["per_second"].as_f64(),
        Some(5.0),
        "{view}"
    );

    let mut slow_deliveries = Vec::new();
    for i in 0..100 {
        let answer = w.ingest("acct_rl", "order.created", json!({"n": i})).await;
        let d = answer["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .find(|d| d["endpoint_id"] == slow_ep.as_str())
            .expect("a delivery to the limited endpoint")["delivery_id"]
            .as_str()
            .expect("id")
            .to_string();
        slow_deliveries.push(d);
    }

    // The unlimited endpoint has everything while the limited one is still far from done.
    fast.wait_for(100, Duration::from_secs(15)).await;
    let slow_so_far = slow.count();
    assert!(
        slow_so_far < 60,
        "the limited endpoint already had {slow_so_far} of 100 when the other had all"
    );
    // A waiting delivery is pending, with no attempt recorded.
    let last = w.delivery(slow_deliveries.last().expect("one")).await;
    assert_eq!(last["state"], "pending", "{last}");
    assert_eq!(last["attempts"].as_array().map(Vec::len), Some(0), "{last}");

    let got = slow.wait_for(100, SETTLE).await;
    assert_eq!(got.len(), 100);
    let times: Vec<_> = got.iter().map(|r| r.at).collect();
    for (i, start) in times.iter().enumerate() {
        let in_window = times[i..]
            .iter()
            .take_while(|t| t.duration_since(*start) < Duration::from_secs(1))
            .count();
        assert!(
            in_window <= 10,
            "{in_window} requests within one second from request {i} (rate 5, burst 5)"
        );
    }
    // Every delivery ended delivered after exactly one attempt: waiting is not a failure.
    for id in [&slow_deliveries[0], &slow_deliveries[99]] {
        let d = w.wait_state(id, "delivered", SETTLE).await;
        assert_eq!(d["attempts"].as_array().map(Vec::len), Some(1), "{d}");
    }
}

/// Bad rate limits and orderings are refused (422 `invalid_field`) with the field named, and
/// change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rate_limits_and_orderings_are_refused_with_the_field() {
    let w = World::start("", "").await;
    let r = Receiver::ok_https(&w.ca);
    let (ep, _) = w
        .endpoint(
            "acct_bad",
            &r.url("/"),
            json!({"rate_limit": {"per_second": 0.5}}),
        )
        .await;
    let cases: [(Value, &str); 8] = [
        (
            json!({"rate_limit": {"per_second": 0}}),
            "rate_limit.per_second",
        ),
        (
            json!({"rate_limit": {"per_second": -1}}),
            "rate_limit.per_second",
        ),
        (
            json!({"rate_limit": {"per_second": "5"}}),
            "rate_limit.per_second",
        ),
        (json!({"rate_limit": 5}), "rate_limit"),
        (
            json!({"rate_limit": {"per_second": 5, "burst": 9}}),
            "rate_limit",
        ),
        (json!({"ordering": "customer_id"}), "ordering"),
        (json!({"ordering": {"key": ""}}), "ordering.key"),
        (json!({"ordering": {"key": 7}}), "ordering"),
    ];
    for (body, field) in cases {
        let (status, answer) = w
            .herald
            .admin("PATCH", &format!("/v1/endpoints/{ep}"), Some(body.clone()))
            .await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    let (_, view) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(
        view["rate_limit"]["per_second"].as_f64(),
        Some(0.5),
        "{view}"
    );
    assert_eq!(view["ordering"], Value::Null, "{view}");

    // null removes the limit; an ordering is set and shown.
    let (status, view) = w
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"rate_limit": null, "ordering": {"key": "customer_id"}})),
        )
        .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["rate_limit"], Value::Null, "{view}");
    assert_eq!(view["ordering"], json!({"key": "customer_id"}), "{view}");
}
