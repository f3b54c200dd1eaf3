//! Endpoint health (docs/delivery-contract.md): the circuit breaker, auto-disable, and operator
//! events, on a manual clock.

use crate::common;

use std::time::Duration;

use common::{behaviour, first_delivery, sig, HeraldApi, InProc, Receiver, Reply, World};
use serde_json::{json, Value};

/// 2026-12-02T12:00:00Z.
const T0: i64 = 1_796_212_800_000;
const SETTLE: Duration = Duration::from_secs(10);
const OPERATOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Fails the first `n` requests with 500, then answers 200.
fn fails_first(n: usize) -> common::Behaviour {
    behaviour(move |_, i| {
        if i < n {
            Reply::status(500)
        } else {
            Reply::status(200)
        }
    })
}

async fn endpoint_view(w: &World<InProc>, ep: &str) -> Value {
    w.herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await
        .1
}

/// Ingests one event and waits until its delivery is no longer due now (attempted or held).
async fn fail_once(w: &World<InProc>) -> String {
    let d = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    w.wait_state(&d, "failed", SETTLE).await;
    d
}

/// The newest failed delivery of the log.
async fn fail_list(w: &World<InProc>) -> String {
    let (_, page) = w
        .herald
        .admin("GET", "/v1/deliveries?state=failed&limit=1", None)
        .await;
    page["items"][0]["id"]
        .as_str()
        .expect("a failed delivery")
        .to_string()
}

/// Ten failures in a row, then waits until the breaker is recorded open: the delivery's failed
/// state is written before the attempt's breaker bookkeeping.
async fn open_breaker(w: &World<InProc>) {
    for _ in 0..10 {
        fail_once(w).await;
    }
    common::wait_until(SETTLE, "the breaker is recorded open", || async {
        let (_, st) = w.herald.admin("GET", "/v1/status", None).await;
        st["open_breakers"]
            .as_array()
            .is_some_and(|b| !b.is_empty())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breaker_opens_after_ten_failures_holds_deliveries_and_a_probe_closes_it() {
    let w = World::start_manual("", "", T0).await;
    let recv = Receiver::https(&w.ca, fails_first(10));
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w).await;
    let v = endpoint_view(&w, &ep).await;
    assert_eq!(v["breaker"]["state"], "open", "{v}");
    assert_eq!(v["breaker"]["consecutive_failures"], 10);
    assert_eq!(v["breaker"]["next_probe_at"], "2026-12-02T12:00:30.000Z");
    assert_eq!(v["success_rate_1h"], 0.0);

    // While open, a delivery waits: not attempted, not counted.
    let held = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    common::wait_until(SETTLE, "the delivery is held until the probe", || async {
        w.delivery(&held).await["next_attempt_at"] == "2026-12-02T12:00:30.000Z"
    })
    .await;
    let d = w.delivery(&held).await;
    assert_eq!(
        (d["state"].as_str(), d["attempt_count"].as_u64()),
        (Some("pending"), Some(0))
    );
    assert_eq!(recv.count(), 10);
    let probe = json!({"reason": "breaker", "until": "2026-12-02T12:00:30.000Z"});
    assert_eq!(d["waiting"], probe, "it says why it waits: {d}");

    // At the probe time, one attempt decides; the receiver is healthy again.
    w.herald.clock.set(T0 + 30_000);
    w.wait_state(&held, "delivered", SETTLE).await;
    let v = endpoint_view(&w, &ep).await;
    assert_eq!(v["breaker"]["state"], "closed", "{v}");
    let (_, st) = w.herald.admin("GET", "/v1/status", None).await;
    assert_eq!(st["dead_letters"], 10, "{st}");
    let rates = st["endpoints_last_hour"].as_array().unwrap();
    assert_eq!(rates.len(), 1, "{st}");
    assert_eq!(rates[0]["endpoint_id"], ep.as_str());
    assert_eq!(rates[0]["attempts"], 11);
    assert!((rates[0]["success_rate"].as_f64().unwrap() - 1.0 / 11.0).abs() < 1e-9);
    let (_, _, metrics) = w
        .herald
        .call_raw("GET", "/metrics", None, &[], vec![])
        .await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("\nherald_breaker_openings_total 1\n"),
        "breaker openings are counted"
    );
}

/// `/v1/status` lists open breakers from the store (not only those this process has used), and
/// a deleted endpoint's breaker goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_breakers_are_listed_until_their_endpoint_is_deleted() {
    let w = World::start_manual("", "", T0).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w).await;
    let open = || async {
        let (status, st) = w.herald.admin("GET", "/v1/status", None).await;
        assert_eq!(status, 200, "{st}");
        st["open_breakers"].clone()
    };
    let listed = open().await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["endpoint_id"], ep.as_str(), "{listed}");
    assert_eq!(listed[0]["consecutive_failures"], 10, "{listed}");
    assert_eq!(listed[0]["next_probe_at"], "2026-12-02T12:00:30.000Z");
    let (status, _) = w
        .herald
        .admin("DELETE", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(status, 204);
    assert_eq!(open().await, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_probe_doubles_the_cooldown_and_the_breaker_survives_a_restart() {
    let mut w = World::start_manual("", "", T0).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w).await;
    let held = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    w.herald.clock.set(T0 + 30_000);
    w.wait_state(&held, "failed", SETTLE).await;
    // The probe's result reaches the breaker just after the delivery's (in a cluster, through
    // the database): wait for it rather than read once.
    common::wait_until(
        SETTLE,
        "the failed probe reopens the breaker for 60 s",
        || async {
            endpoint_view(&w, &ep).await["breaker"]["next_probe_at"] == "2026-12-02T12:01:30.000Z"
        },
    )
    .await;
    let v = endpoint_view(&w, &ep).await;
    assert_eq!(v["breaker"]["state"], "open");
    assert_eq!(
        v["breaker"]["next_probe_at"], "2026-12-02T12:01:30.000Z",
        "60 s after the failed probe"
    );

    w.herald.restart().await;
    let v = endpoint_view(&w, &ep).await;
    assert_eq!(
        v["breaker"]["state"], "open",
        "breaker state survives a restart"
    );
    assert_eq!(v["breaker"]["next_probe_at"], "2026-12-02T12:01:30.000Z");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_failing_every_attempt_for_disable_after_is_disabled_and_reported() {
    let operator = Receiver::ok_http();
    let tables = format!(
        "[endpoints]\nrequire_verification = false\ndisable_after = \"1h\"\n\
         [operator]\nwebhook_url = \"{}\"\nsecret = \"{OPERATOR_SECRET}\"\n",
        operator.url("/ops")
    );
    let w = World::start_manual("allow_http = true", &tables, T0).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    fail_once(&w).await;
    w.herald.clock.set(T0 + 3_600_000);
    fail_once(&w).await;
    common::wait_until(SETTLE, "endpoint is disabled", || async {
        endpoint_view(&w, &ep).await["state"] == "disabled"
    })
    .await;
    // delivery.failed twice, then endpoint.disabled; each signed with operator.secret.
    let got = operator.wait_for(3, SETTLE).await;
    let types: Vec<String> = got
        .iter()
        .map(|r| r.json()["type"].as_str().unwrap().to_string())
        .collect();
    assert!(
        types.contains(&"endpoint.disabled".to_string()),
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "delivery.failed").count(),
        2,
        "{types:?}"
    );
    for r in &got {
        assert!(sig::verify(
            OPERATOR_SECRET,
            r.header("webhook-id").unwrap(),
            r.header("webhook-timestamp").unwrap(),
            &r.body,
            r.header("webhook-signature").unwrap()
        ));
    }
    let disabled = got
        .iter()
        .find(|r| r.json()["type"] == "endpoint.disabled")
        .unwrap()
        .json();
    assert_eq!(disabled["data"]["endpoint_id"], ep.as_str());
    assert_eq!(disabled["data"]["account_id"], "acc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_hears_when_an_endpoint_starts_failing_and_when_it_recovers() {
    let operator = Receiver::ok_http();
    let tables = format!(
        "[operator]\nwebhook_url = \"{}\"\nsecret = \"{OPERATOR_SECRET}\"\n",
        operator.url("/ops")
    );
    let w = World::start_manual("allow_http = true", &tables, T0).await;
    let recv = Receiver::https(&w.ca, fails_first(10));
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w).await;
    let held = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    w.herald.clock.set(T0 + 30_000);
    w.wait_state(&held, "delivered", SETTLE).await;
    let kinds = || operator.event_types();
    common::wait_until(SETTLE, "endpoint.recovered arrives", || async {
        kinds().contains(&"endpoint.recovered".to_string())
    })
    .await;
    let k = kinds();
    assert_eq!(
        k.iter().filter(|t| *t == "endpoint.failing").count(),
        1,
        "{k:?}"
    );
    assert_eq!(
        k.iter().filter(|t| *t == "delivery.failed").count(),
        10,
        "{k:?}"
    );
    // Operator events are logged like any delivery, under the reserved account.
    let (_, list) = w
        .herald
        .admin("GET", "/v1/deliveries?event_type=endpoint.recovered", None)
        .await;
    assert_eq!(list["items"][0]["account_id"], "_operator");
}

async fn stats<H: HeraldApi>(w: &World<H>, ep: &str, query: &str) -> (u16, Value) {
    w.herald
        .admin("GET", &format!("/v1/endpoints/{ep}/stats{query}"), None)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_while_the_breaker_is_open_waits_for_the_probe_and_says_so() {
    let w = World::start_manual("", "", T0).await;
    let recv = Receiver::https(&w.ca, fails_first(10));
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    open_breaker(&w).await;
    let failed = fail_list(&w).await;
    let (status, r) = w
        .herald
        .admin("POST", &format!("/v1/deliveries/{failed}/retry"), None)
        .await;
    assert_eq!(status, 202, "{r}");
    let probe = json!({"reason": "breaker", "until": "2026-12-02T12:00:30.000Z"});
    assert_eq!(r["waiting"], probe, "{r}");
    assert_eq!(r["next_attempt_at"], probe["until"], "{r}");
    common::wait_until(SETTLE, "the log shows it held", || async {
        w.delivery(&failed).await["waiting"] == probe
    })
    .await;
    assert_eq!(recv.count(), 10, "nothing is sent before the probe");
    // The probe is the retry's attempt.
    w.herald.clock.set(T0 + 30_000);
    let d = w.wait_state(&failed, "delivered", SETTLE).await;
    assert_eq!(d["waiting"], Value::Null, "{d}");
    assert_eq!(recv.count(), 11);
}

/// Sums an endpoint's stats entries by status.
fn stat_sums(stats: &Value) -> std::collections::BTreeMap<String, u64> {
    let mut sums = std::collections::BTreeMap::new();
    for m in stats["minutes"].as_array().expect("minutes") {
        for (status, n) in m["attempts"].as_object().expect("attempts") {
            *sums.entry(status.clone()).or_default() += n.as_u64().expect("count");
        }
    }
    sums
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_counts_and_the_last_success_are_kept_in_the_store_through_a_restart() {
    let mut w = World::start("", "").await;
    let recv = Receiver::https(&w.ca, fails_first(2));
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    for _ in 0..5 {
        let d = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
        common::wait_until(SETTLE, "the delivery settles", || async {
            w.delivery(&d).await["state"] != "pending"
        })
        .await;
    }
    let want: std::collections::BTreeMap<String, u64> =
        [("delivered".to_string(), 3), ("http_error".to_string(), 2)].into();
    let (status, s) = stats(&w, &ep, "").await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(
        (&s["window"], &s["bucket_minutes"]),
        (&json!("1h"), &json!(1))
    );
    assert_eq!(stat_sums(&s), want, "{s}");
    assert_eq!(
        (&s["attempts_1h"], &s["success_rate_1h"]),
        (&json!(5), &json!(0.6))
    );

    let (_, before) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert!(before["last_success_at"].is_string(), "{before}");

    // A stopped and started herald reads them back from its store, the last success too.
    w.herald.sigterm().await;
    w.herald.restart().await;
    let (_, s) = stats(&w, &ep, "").await;
    assert_eq!(stat_sums(&s), want, "after a restart: {s}");
    let (_, v) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(
        (&v["attempts_1h"], &v["success_rate_1h"]),
        (&json!(5), &json!(0.6)),
        "{v}"
    );
    assert_eq!(
        v["last_success_at"], before["last_success_at"],
        "the last success survives a restart: {v}"
    );
    let (_, st) = w.herald.admin("GET", "/v1/status", None).await;
    assert_eq!(
        st["endpoints_last_hour"],
        json!([{"endpoint_id": ep, "attempts": 5, "success_rate": 0.6}]),
        "the status's last hour is read from the store too: {st}"
    );
    for window in ["last_hour", "last_day"] {
        assert_eq!(
            st["attempts"][window],
            json!({"delivered": 3, "http_error": 2}),
            "{window}: kept through a restart: {st}"
        );
    }
    let (status, day) = stats(&w, &ep, "?window=24h").await;
    assert_eq!(status, 200, "{day}");
    assert_eq!(
        (&day["window"], &day["bucket_minutes"]),
        (&json!("24h"), &json!(15))
    );
    assert_eq!(stat_sums(&day), want, "{day}");
    let (status, week) = stats(&w, &ep, "?window=7d").await;
    assert_eq!(status, 200, "{week}");
    assert_eq!(
        (&week["window"], &week["bucket_minutes"]),
        (&json!("7d"), &json!(120))
    );
    assert_eq!(
        stat_sums(&week),
        want,
        "the hours kept in the store: {week}"
    );
    let (status, e) = stats(&w, &ep, "?window=30d").await;
    assert_eq!(
        (status, e["error"]["field"].as_str()),
        (422, Some("window")),
        "{e}"
    );
}

/// The week's chart sums hours two days apart that the day's chart no longer shows, and every
/// window says the 50th and 95th percentile of its requests' latency from the stored buckets:
/// 8 fast answers and 2 that take 300 ms put p50 among the fast and p95 in the 250–500 ms
/// bucket, never above the max.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_weeks_chart_sums_its_hours_and_latency_has_percentiles() {
    let w = World::start_manual("", "", T0).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, i| {
            let r = Reply::status(200);
            if i >= 8 {
                r.with_delay(Duration::from_millis(300))
            } else {
                r
            }
        }),
    );
    let (ep, _) = w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    for i in 0..10 {
        if i == 5 {
            w.herald.clock.set(T0 + 2 * 86_400_000);
        }
        let d = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
        w.wait_state(&d, "delivered", SETTLE).await;
    }
    let delivered = |n: u64| -> std::collections::BTreeMap<String, u64> {
        [("delivered".to_string(), n)].into()
    };
    let (_, day) = stats(&w, &ep, "?window=24h").await;
    assert_eq!(stat_sums(&day), delivered(5), "{day}");
    let (status, week) = stats(&w, &ep, "?window=7d").await;
    assert_eq!(status, 200, "{week}");
    assert_eq!(stat_sums(&week), delivered(10), "{week}");
    assert_eq!(week["minutes"].as_array().unwrap().len(), 2, "{week}");
    let l = &week["latency_ms"];
    let (p50, p95, max) = (
        l["p50"].as_u64().expect("p50"),
        l["p95"].as_u64().expect("p95"),
        l["max"].as_u64().expect("max"),
    );
    assert!(p50 < 250, "{l}");
    assert!((250..=max).contains(&p95), "{l}");
    assert!(max >= 300, "{l}");
    // Each entry has its own: the first two days ago had only fast answers.
    let first = &week["minutes"][0]["latency_ms"];
    assert!(first["p95"].as_u64().expect("p95") < 250, "{first}");
}

/// `/v1/status` says how many deliveries are due now and free to go, and what holds the others:
/// an open breaker, the rate limit, an earlier delivery of the same ordering key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_what_is_due_now_and_what_holds_the_rest() {
    let w = World::start_manual("", "", T0).await;
    let failing = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    w.endpoint(
        "acc",
        &failing.url("/hook"),
        json!({"retry_policy": "none"}),
    )
    .await;
    open_breaker(&w).await;
    for _ in 0..3 {
        w.ingest("acc", "t.x", json!({})).await;
    }
    let hung = Receiver::https(&w.ca, behaviour(|_, _| Reply::hang()));
    w.endpoint(
        "ord",
        &hung.url("/ordered"),
        json!({"ordering": {"key": "k"}}),
    )
    .await;
    for _ in 0..3 {
        w.ingest("ord", "t.x", json!({"k": "one"})).await;
    }
    let ok = Receiver::ok_https(&w.ca);
    let (slow, _) = w
        .endpoint(
            "slow",
            &ok.url("/slow"),
            json!({"rate_limit": {"per_second": 0.001}}),
        )
        .await;
    let mut limited = Vec::new();
    for _ in 0..3 {
        limited.push(first_delivery(&w.ingest("slow", "t.x", json!({})).await));
    }
    let want = json!({"breaker": 3, "paused": 0, "rate_limit": 2, "ordering": 2});
    common::wait_until(SETTLE, "the holds are counted", || async {
        let (_, st) = w.herald.admin("GET", "/v1/status", None).await;
        st["held"] == want && st["due_now"] == 0
    })
    .await;
    let (_, st) = w.herald.admin("GET", "/v1/status", None).await;
    assert_eq!(
        st["due"], 2,
        "due, whatever holds it: the two behind their key's first: {st}"
    );
    // A delivery the rate limit holds says so, with the limit and when its token comes.
    let mut reasons = Vec::new();
    for id in &limited {
        reasons.push(w.delivery(id).await["waiting"].clone());
    }
    let held: Vec<&Value> = reasons
        .iter()
        .filter(|r| r["reason"] == "rate_limit")
        .collect();
    assert_eq!(held.len(), 2, "{reasons:?}");
    for r in held {
        assert_eq!(r["per_second"], 0.001, "{r}");
        assert_eq!(r["until"], "2026-12-02T12:16:40.000Z", "{r}");
    }
    assert_eq!(ok.count(), 1, "one token, one request to {slow}");
}
