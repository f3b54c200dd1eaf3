//! Traces (docs/operations.md, "Traces"): the ingest span continues the request's
//! `traceparent`, every attempt's span is its child (after retries and restarts too), the
//! webhook carries the context where the endpoint asks, and a collector that is down or never
//! answers costs deliveries nothing. Spans are read by a real OTLP/HTTP receiver with the
//! official protobuf definitions, in Rust and in Python.

use crate::common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::herald::{Launch, INGEST_TOKEN};
use common::otlp::{Collector, SeenSpan};
use common::{behaviour, first_delivery, Receiver, Reply, World};
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(20);
const FAST: &str = "[retry_policies]\nfast = [\"200ms\", \"200ms\"]\nslow = [\"2s\"]\n";
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PRODUCER_SPAN: &str = "00f067aa0ba902b7";

/// `POST path` with the ingest token and these extra headers; the status and the answer.
async fn post(
    w: &World,
    path: &str,
    token: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, Value) {
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    let (status, _, answer) = w
        .herald
        .call_raw(
            "POST",
            path,
            Some(token),
            &all,
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    (
        status,
        serde_json::from_slice(&answer).unwrap_or(Value::Null),
    )
}

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

fn attempts_of<'a>(spans: &'a [SeenSpan], delivery: &str) -> Vec<&'a SeenSpan> {
    spans
        .iter()
        .filter(|s| s.attr("herald.delivery_id") == delivery)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_span_continues_the_request_and_each_attempt_is_its_child_on_the_wire_too() {
    let collector = Collector::start();
    let w = World::start("", &format!("{FAST}{}", collector.toml())).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, n| Reply::status(if n == 0 { 500 } else { 200 })),
    );
    let url = format!("{}?token=not-for-traces", recv.url("/hook"));
    let (ep, _) = w
        .endpoint(
            "acct-t",
            &url,
            json!({"retry_policy": "fast", "propagate_trace": true}),
        )
        .await;
    let (status, answer) = post(
        &w,
        "/v1/events",
        INGEST_TOKEN,
        &[
            ("traceparent", &traceparent(TRACE, PRODUCER_SPAN)),
            ("tracestate", "shop=7,other=x"),
        ],
        json!({"account_id": "acct-t", "type": "order.created", "payload": {"n": 1}}),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let event = answer["event_id"].as_str().unwrap().to_string();
    let delivery = first_delivery(&answer);
    w.wait_state(&delivery, "delivered", SETTLE).await;

    let spans = collector
        .wait(SETTLE, "the ingest span and both attempts' spans", |s| {
            s.iter().any(|s| s.kind == "SPAN_KIND_SERVER") && attempts_of(s, &delivery).len() == 2
        })
        .await;
    let ingest = spans.iter().find(|s| s.kind == "SPAN_KIND_SERVER").unwrap();
    assert_eq!(
        ingest.trace_id, TRACE,
        "the ingest span continues the request's trace"
    );
    assert_eq!(ingest.parent_span_id, PRODUCER_SPAN);
    assert_eq!(ingest.name, "POST /v1/events");
    assert_eq!(ingest.attr("http.route"), "/v1/events");
    assert_eq!(ingest.attr("http.request.method"), "POST");
    assert_eq!(ingest.attr("http.response.status_code"), 202);
    assert_eq!(ingest.resource["service.name"], "herald");
    assert_eq!(ingest.scope, "herald");

    let attempts = attempts_of(&spans, &delivery);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.kind, "SPAN_KIND_CLIENT");
        assert_eq!(a.name, "POST");
        assert_eq!(
            a.trace_id, TRACE,
            "an attempt stays in the producer's trace"
        );
        assert_eq!(
            a.parent_span_id, ingest.span_id,
            "an attempt is the ingest span's child"
        );
        assert_eq!(a.attr("herald.account_id"), "acct-t");
        assert_eq!(a.attr("herald.event_id"), event.as_str());
        assert_eq!(a.attr("herald.endpoint_id"), ep.as_str());
        assert_eq!(a.attr("herald.attempt"), (i + 1) as i64);
        assert_eq!(a.attr("http.request.method"), "POST");
        assert_eq!(
            a.attr("url.full"),
            recv.url("/hook").as_str(),
            "no query in url.full"
        );
        assert_eq!(a.attr("server.address"), "localhost");
        assert_eq!(a.attr("server.port"), recv.port() as i64);
    }
    let (first, second) = (attempts[0], attempts[1]);
    assert_eq!(first.attr("herald.status"), "http_error");
    assert_eq!(first.attr("http.response.status_code"), 500);
    assert_eq!(first.attr("error.type"), "http_error");
    assert_eq!(first.status, 2, "a failed attempt's span is an error");
    assert_eq!(second.attr("herald.status"), "delivered");
    assert_eq!(second.attr("http.response.status_code"), 200);
    assert_eq!(second.attr("error.type"), &Value::Null);
    assert_ne!(second.status, 2);
    // The first attempt opened the connection: its phases are the span's events.
    assert_eq!(first.events, ["dns", "connect", "tls"]);

    // The receiver got each attempt's own span as the parent, in the producer's trace.
    let got = recv.requests();
    assert_eq!(got.len(), 2);
    for (r, a) in got.iter().zip(&attempts) {
        assert_eq!(
            r.header("traceparent"),
            Some(traceparent(TRACE, &a.span_id).as_str())
        );
        assert_eq!(r.header("tracestate"), Some("shop=7,other=x"));
    }
    collector.check_with_python();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_propagate_trace_the_webhook_carries_no_context_and_the_names_stay_reserved() {
    let collector = Collector::start();
    let w = World::start("", &collector.toml()).await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w.endpoint("acct-q", &recv.url("/q"), json!({})).await;
    let (status, answer) = post(
        &w,
        "/v1/events",
        INGEST_TOKEN,
        &[("traceparent", &traceparent(TRACE, PRODUCER_SPAN))],
        json!({"account_id": "acct-q", "type": "t.x", "payload": {}}),
    )
    .await;
    assert_eq!(status, 202);
    let delivery = first_delivery(&answer);
    w.wait_state(&delivery, "delivered", SETTLE).await;
    let r = &recv.requests()[0];
    assert_eq!(r.header("traceparent"), None);
    assert_eq!(r.header("tracestate"), None);
    let spans = collector
        .wait(SETTLE, "the attempt's span", |s| {
            attempts_of(s, &delivery).len() == 1
        })
        .await;
    assert_eq!(attempts_of(&spans, &delivery)[0].trace_id, TRACE);

    for name in ["traceparent", "TraceState"] {
        let (status, body) = w
            .herald
            .admin(
                "PATCH",
                &format!("/v1/endpoints/{ep}"),
                Some(json!({"headers": {name: "00-x"}})),
            )
            .await;
        assert_eq!(status, 422, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&name.to_ascii_lowercase())
                || body["error"]["field"]
                    .as_str()
                    .unwrap_or("")
                    .to_ascii_lowercase()
                    .contains(&name.to_ascii_lowercase()),
            "{body}"
        );
    }
    let (status, body) = w
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"propagate_trace": "yes"})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["field"], "propagate_trace");
    let (status, body) = w
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"propagate_trace": true})),
        )
        .await;
    assert_eq!(
        (status, &body["propagate_trace"]),
        (200, &json!(true)),
        "{body}"
    );
}

/// Batch items share their request's context; a replay and a test event belong to the trace
/// of the request that asked for them; a manual retry stays in the event's; an invalid
/// `traceparent` starts a new trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_replays_tests_and_retries_keep_to_the_trace_they_belong_to() {
    let collector = Collector::start();
    let w = World::start("", &collector.toml()).await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w.endpoint("acct-b", &recv.url("/b"), json!({})).await;
    let ctx = |trace: &str| traceparent(trace, PRODUCER_SPAN);
    let (t_batch, t_replay, t_test, t_retry) = (
        "11111111111111111111111111111111",
        "22222222222222222222222222222222",
        "33333333333333333333333333333333",
        "44444444444444444444444444444444",
    );
    let item = json!({"account_id": "acct-b", "type": "t.x", "payload": {}});
    let (status, answer) = post(
        &w,
        "/v1/events/batch",
        INGEST_TOKEN,
        &[("traceparent", &ctx(t_batch))],
        json!({"events": [item, item]}),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let batch: Vec<String> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(first_delivery)
        .collect();
    for d in &batch {
        w.wait_state(d, "delivered", SETTLE).await;
    }
    let event = answer["results"][0]["event_id"]
        .as_str()
        .unwrap()
        .to_string();
    let admin = common::herald::ADMIN_TOKEN;
    let (status, replayed) = post(
        &w,
        &format!("/v1/events/{event}/replay"),
        admin,
        &[("traceparent", &ctx(t_replay))],
        json!({}),
    )
    .await;
    assert_eq!(status, 202, "{replayed}");
    let replay = first_delivery(&replayed);
    let (status, tested) = post(
        &w,
        &format!("/v1/endpoints/{ep}/test"),
        admin,
        &[("traceparent", &ctx(t_test))],
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{tested}");
    let test = tested["delivery_id"].as_str().unwrap().to_string();
    let (status, retried) = post(
        &w,
        &format!("/v1/deliveries/{}/retry", batch[0]),
        admin,
        &[("traceparent", &ctx(t_retry))],
        json!({}),
    )
    .await;
    assert!(status < 300, "{retried}");
    let (status, fresh) = post(
        &w,
        "/v1/events",
        INGEST_TOKEN,
        &[(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        )],
        json!({"account_id": "acct-b", "type": "t.x", "payload": {}}),
    )
    .await;
    assert_eq!(status, 202);
    let fresh = first_delivery(&fresh);
    // An account without endpoints: the decision sent nothing, an internal span says so.
    let (status, lonely) = post(
        &w,
        "/v1/events",
        INGEST_TOKEN,
        &[("traceparent", &ctx(t_retry))],
        json!({"account_id": "acct-lonely", "type": "t.x", "payload": {}}),
    )
    .await;
    assert_eq!(status, 202, "{lonely}");
    let lonely = first_delivery(&lonely);

    let spans = collector
        .wait(SETTLE, "every attempt's span", |s| {
            attempts_of(s, &batch[0]).len() == 2
                && [&batch[1], &replay, &test, &fresh, &lonely]
                    .iter()
                    .all(|d| attempts_of(s, d).len() == 1)
        })
        .await;
    let server = |trace: &str, name: &str| {
        let found: Vec<&SeenSpan> = spans
            .iter()
            .filter(|s| s.kind == "SPAN_KIND_SERVER" && s.trace_id == trace)
            .collect();
        assert_eq!(found.len(), 1, "one request span in {trace}: {spans:#?}");
        assert_eq!(found[0].name, name);
        assert_eq!(found[0].parent_span_id, PRODUCER_SPAN);
        found[0].span_id.clone()
    };
    let batch_span = server(t_batch, "POST /v1/events/batch");
    for d in &batch {
        let a = attempts_of(&spans, d);
        assert!(a
            .iter()
            .all(|a| a.trace_id == t_batch && a.parent_span_id == batch_span));
    }
    assert_eq!(
        attempts_of(&spans, &batch[0])[1].attr("herald.attempt"),
        2,
        "the manual retry"
    );
    let replay_span = server(t_replay, "POST /v1/events/{id}/replay");
    let r = attempts_of(&spans, &replay)[0];
    assert_eq!(
        (r.trace_id.as_str(), r.parent_span_id.as_str()),
        (t_replay, replay_span.as_str())
    );
    let test_span = server(t_test, "POST /v1/endpoints/{id}/test");
    let t = attempts_of(&spans, &test)[0];
    assert_eq!(
        (t.trace_id.as_str(), t.parent_span_id.as_str()),
        (t_test, test_span.as_str())
    );
    let not_sent = attempts_of(&spans, &lonely)[0];
    assert_eq!(not_sent.name, "herald.not_sent");
    assert_eq!(not_sent.kind, "SPAN_KIND_INTERNAL");
    assert_eq!(not_sent.attr("herald.status"), "no_endpoint");
    assert_eq!(not_sent.attr("herald.account_id"), "acct-lonely");
    assert_eq!(not_sent.attr("herald.endpoint_id"), &Value::Null);
    let lonely_span = server(t_retry, "POST /v1/events");
    assert_eq!(
        (not_sent.trace_id.as_str(), not_sent.parent_span_id.as_str()),
        (t_retry, lonely_span.as_str())
    );
    assert!(
        spans
            .iter()
            .filter(|s| s.trace_id == t_retry)
            .all(|s| s.attr("herald.account_id") != "acct-b"),
        "a manual retry starts no trace of its own"
    );
    let f = attempts_of(&spans, &fresh)[0];
    let root = spans
        .iter()
        .find(|s| s.kind == "SPAN_KIND_SERVER" && s.span_id == f.parent_span_id)
        .expect("the fresh event's ingest span");
    assert_eq!(
        root.parent_span_id, "",
        "an invalid traceparent starts a new trace"
    );
    assert_eq!(root.trace_id, f.trace_id);
}

/// A retry after a restart is still the ingest span's child; an event ingested while traces
/// were off carries the request's own context to an endpoint that propagates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_restart_stays_in_the_trace_and_traces_off_still_pass_the_context_on() {
    let collector = Collector::start();
    let mut w = World::start("", &format!("{FAST}{}", collector.toml())).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, n| Reply::status(if n == 0 { 503 } else { 200 })),
    );
    w.endpoint(
        "acct-r",
        &recv.url("/r"),
        json!({"retry_policy": "slow", "propagate_trace": true}),
    )
    .await;
    let (status, answer) = post(
        &w,
        "/v1/events",
        INGEST_TOKEN,
        &[("traceparent", &traceparent(TRACE, PRODUCER_SPAN))],
        json!({"account_id": "acct-r", "type": "t.x", "payload": {}}),
    )
    .await;
    assert_eq!(status, 202);
    let delivery = first_delivery(&answer);
    recv.wait_for(1, SETTLE).await;
    let spans = collector
        .wait(SETTLE, "the first attempt's span", |s| {
            attempts_of(s, &delivery).len() == 1
        })
        .await;
    let ingest = spans
        .iter()
        .find(|s| s.kind == "SPAN_KIND_SERVER")
        .unwrap()
        .clone();
    // Stopped once the first attempt is recorded (its retry due in 2 s), started again.
    let path = format!("/v1/deliveries/{delivery}");
    common::wait_until(SETTLE, "the first attempt is recorded", || async {
        w.herald.admin("GET", &path, None).await.1["attempt_count"] == 1
    })
    .await;
    assert!(w.herald.sigterm().await.success());
    w.herald.restart().await;
    w.wait_state(&delivery, "delivered", SETTLE).await;
    let second = |s: &SeenSpan| {
        s.attr("herald.delivery_id") == delivery.as_str() && s.attr("herald.attempt") == 2
    };
    let spans = collector
        .wait(SETTLE, "the retry's span", |s| s.iter().any(second))
        .await;
    let retry = spans.iter().find(|s| second(s)).unwrap();
    assert_eq!(retry.trace_id, TRACE);
    assert_eq!(
        retry.parent_span_id, ingest.span_id,
        "the kept context outlived the process"
    );
    assert_eq!(
        recv.requests()[1].header("traceparent"),
        Some(traceparent(TRACE, &retry.span_id).as_str())
    );

    // Traces off: the event keeps the request's context, and the webhook names the
    // producer's span as its parent.
    let off = World::start("", "").await;
    let recv = Receiver::ok_https(&off.ca);
    off.endpoint("acct-o", &recv.url("/o"), json!({"propagate_trace": true}))
        .await;
    let (status, _, _) = off
        .herald
        .call_raw(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            &[
                ("content-type", "application/json"),
                ("traceparent", &traceparent(TRACE, PRODUCER_SPAN)),
                ("tracestate", "shop=7"),
            ],
            br#"{"account_id":"acct-o","type":"t.x","payload":{}}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 202);
    let got = recv.wait_for(1, SETTLE).await;
    assert_eq!(
        got[0].header("traceparent"),
        Some(traceparent(TRACE, PRODUCER_SPAN).as_str())
    );
    assert_eq!(got[0].header("tracestate"), Some("shop=7"));
}

/// The standard variables turn traces on and name the service; with the collector refusing
/// connections, or never answering, ingest and delivery go as fast as with traces off (at least
/// 90 % of the rate, the median of seven rounds, the three under the same load at once) and the
/// spans lost are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_silent_collector_costs_deliveries_nothing_and_its_spans_are_counted() {
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let silent = Receiver::http(behaviour(|_, _| Reply::hang()));
    let env_launch = |collector: String| Launch {
        wrap: Some(Arc::new(move |args: &[String]| {
            let mut c = Command::new(&args[0]);
            c.args(&args[1..])
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)
                .env("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
                .env("OTEL_SERVICE_NAME", "shop-webhooks");
            c
        })),
        ..Launch::default()
    };
    let mut heralds = Vec::new();
    for launch in [
        Launch::default(),
        env_launch(format!("http://{refused}")),
        env_launch(silent.url("")),
    ] {
        heralds.push(World::start_launched("allow_http = true", "", launch).await);
    }
    let recv = Receiver::ok_http();
    for w in &heralds {
        w.endpoint("acct-d", &recv.url("/d"), json!({})).await;
    }
    // Seven rounds; in each, the three heralds take the same load at the same time, so that
    // whatever else the machine runs meanwhile (other tests, other tenants) weighs on all three
    // alike. A round's rates with the collector down are compared with its rate with traces
    // off, and the median of the seven ratios is what counts.
    let mut ratios = [const { Vec::new() }; 2];
    for _round in 0..7 {
        let (off, refused, silent) = tokio::join!(
            rate(&heralds[0], 2000),
            rate(&heralds[1], 2000),
            rate(&heralds[2], 2000)
        );
        ratios[0].push(refused / off);
        ratios[1].push(silent / off);
    }
    for (mut ratios, what) in ratios.into_iter().zip(["refused", "silent"]) {
        ratios.sort_by(f64::total_cmp);
        assert!(
            ratios[3] >= 0.9,
            "with the collector {what}, the median round delivered {:.0} % of the rate with \
             traces off (rounds: {ratios:.2?})",
            100.0 * ratios[3]
        );
    }
    for w in &heralds[1..] {
        assert!(w.herald.log_contains("traces on"));
        common::wait_until(SETTLE, "spans are counted as dropped", || async {
            metric(w, "herald_trace_spans_dropped_total").await >= 1.0
        })
        .await;
        assert_eq!(metric(w, "herald_trace_spans_exported_total").await, 0.0);
    }
    assert_eq!(
        metric(&heralds[0], "herald_trace_spans_dropped_total").await,
        0.0
    );
    assert!(!heralds[0].herald.log_contains("traces on"));
}

/// Events per second from the first ingest to the last delivery, `n` posted 16 at a time.
async fn rate(w: &World, n: usize) -> f64 {
    let started = std::time::Instant::now();
    let delivered_before = metric(w, "herald_attempts_total{status=\"delivered\"}").await;
    let mut producers = tokio::task::JoinSet::new();
    for p in 0..16 {
        let (client, base) = (common::herald::new_client(), w.herald.base_url());
        producers.spawn(async move {
            for i in (p..n).step_by(16) {
                let body = json!({"account_id": "acct-d", "type": "t.x", "payload": {"i": i}});
                let acked = common::herald::post_event(&client, &base, &body).await;
                assert!(matches!(acked, Ok(Some(_))), "event {i} not acknowledged");
            }
        });
    }
    while let Some(done) = producers.join_next().await {
        done.unwrap();
    }
    common::wait_until(SETTLE, "every event delivered", || async {
        metric(w, "herald_attempts_total{status=\"delivered\"}").await
            >= delivered_before + n as f64
    })
    .await;
    n as f64 / started.elapsed().as_secs_f64()
}

async fn metric(w: &World, name: &str) -> f64 {
    let (_, _, body) = w
        .herald
        .call_raw("GET", "/metrics", None, &[], Vec::new())
        .await;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}
