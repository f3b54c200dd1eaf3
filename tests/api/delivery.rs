//! Delivery over HTTPS: payload bytes, headers and signature; retries by policy; what is and is
//! not retried; timeouts; 410; per-endpoint isolation; kept-alive connections.

use crate::common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use herald::clock::Clock;

use common::herald::INGEST_TOKEN;
use common::{behaviour, first_delivery, sig, HeraldApi, Receiver, Reply, World};
use serde_json::json;

const FAST: &str = "[retry_policies]\nfast = [\"300ms\", \"600ms\"]\n";
const SETTLE: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_reaches_https_receiver_with_exact_payload_headers_and_signature() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, secret) = w.endpoint("acc-1", &recv.url("/hook"), json!({})).await;

    // Odd spacing, a trailing zero and non-ASCII: none of it may change on the way.
    let payload = r#"{ "z": 1,  "a" : [1.50, "é", {"n":null}] }"#;
    let body =
        format!(r#"{{"account_id":"acc-1","type":"interaction.review","payload":{payload}}}"#);
    let (status, _, answer) = w
        .herald
        .call_raw(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            &[("content-type", "application/json")],
            body.into_bytes(),
        )
        .await;
    assert_eq!(status, 202);
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    let event_id = answer["event_id"].as_str().unwrap().to_string();
    let delivery_id = first_delivery(&answer);

    let got = recv.wait_for(1, SETTLE).await;
    let r = &got[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/hook");
    assert_eq!(r.body.as_ref(), payload.as_bytes(), "payload bytes changed");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.header("user-agent").unwrap().starts_with("herald/"));
    assert_eq!(r.header("webhook-id"), Some(event_id.as_str()));
    assert_eq!(r.header("herald-event-type"), Some("interaction.review"));
    assert_eq!(r.header("herald-attempt"), Some("1"));
    assert_eq!(r.header("herald-delivery-id"), Some(delivery_id.as_str()));
    assert_eq!(r.header("herald-endpoint-id"), Some(ep.as_str()));
    let ts = r.header("webhook-timestamp").unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now - ts.parse::<i64>().unwrap()).abs() < 30,
        "timestamp {ts}"
    );
    let signature = r.header("webhook-signature").unwrap();
    assert!(signature.starts_with("v1,"));
    assert!(
        sig::verify(&secret, &event_id, ts, &r.body, signature),
        "signature does not verify"
    );

    let d = w.wait_state(&delivery_id, "delivered", SETTLE).await;
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(d["attempts"][0]["status"], "delivered");
    assert_eq!(d["attempts"][0]["http_status"], 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_receiver_gets_every_attempt_of_the_policy_at_its_gaps_then_fails() {
    let w = World::start("", FAST).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "fast"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({"k": 1})).await);

    let d = w.wait_state(&id, "failed", SETTLE).await;
    let got = recv.requests();
    assert_eq!(got.len(), 3, "exactly three attempts");
    let webhook_id = got[0].header("webhook-id").unwrap();
    for (i, r) in got.iter().enumerate() {
        assert_eq!(
            r.header("webhook-id"),
            Some(webhook_id),
            "same webhook-id on retries"
        );
        assert_eq!(
            r.header("herald-attempt"),
            Some((i + 1).to_string().as_str())
        );
        assert_eq!(r.header("herald-endpoint-id"), Some(ep.as_str()));
    }
    // Never earlier than the policy's 300 ms and 600 ms less their 10 % jitter. (How much later
    // depends on this machine's scheduler; the schedule itself is checked exactly on a manual
    // clock: `each_retry_is_due_its_policys_delay_after_the_attempt_before_it`.)
    for (i, want) in [(1, 300u128), (2, 600)] {
        let gap = got[i].at.duration_since(got[i - 1].at).as_millis();
        assert!(
            gap >= want * 9 / 10,
            "gap {i} was {gap} ms, policy says {want} ms ± 10 %"
        );
    }
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a["status"], "http_error");
        assert_eq!(a["http_status"], 500);
        assert_eq!(a["number"], i + 1);
    }
    assert_eq!(d["last_status"], "http_error");
    assert!(d["next_attempt_at"].is_null());
}

/// The retry schedule on a manual clock: each retry is due its policy's delay, within the
/// ±10 % jitter, after the attempt before it (docs/delivery-contract.md, "Retry schedules"), and
/// is attempted once the clock reaches that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_retry_is_due_its_policys_delay_after_the_attempt_before_it() {
    const T0: i64 = 1_796_212_800_000;
    let w = World::start_manual("", FAST, T0).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "fast"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({"k": 1})).await);
    for (done, want) in [(1, 300), (2, 600)] {
        common::wait_until(SETTLE, "the attempt is recorded", || async {
            w.delivery(&id).await["attempt_count"] == done
        })
        .await;
        let d = w.delivery(&id).await;
        assert_eq!(d["state"], "pending", "{d}");
        let due = herald::clock::parse_rfc3339(d["next_attempt_at"].as_str().unwrap()).unwrap();
        let now = w.herald.clock.now_ms();
        let wait = due - now;
        assert!(
            (want * 9 / 10..=want * 11 / 10).contains(&wait),
            "retry {done} is due {wait} ms after its attempt; the policy says {want} ms ± 10 %"
        );
        assert_eq!(
            recv.count(),
            done as usize,
            "not attempted before it is due"
        );
        w.herald.clock.set(due);
    }
    let d = w.wait_state(&id, "failed", SETTLE).await;
    assert_eq!(d["attempt_count"], 3);
    assert_eq!(recv.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_is_not_followed_and_not_retried() {
    let w = World::start("", FAST).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, _| Reply::status(302).with_header("location", "/elsewhere")),
    );
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "fast"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "failed", SETTLE).await;
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(d["attempts"][0]["status"], "http_error");
    assert_eq!(d["attempts"][0]["http_status"], 302);
    let got = recv.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_is_not_retried() {
    let w = World::start("", FAST).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(404)));
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "fast"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "failed", SETTLE).await;
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(d["attempts"][0]["http_status"], 404);
    assert_eq!(recv.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests_with_retry_after_waits_at_least_that_long() {
    let w = World::start("", FAST).await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, i| match i {
            0 => Reply::status(429).with_header("retry-after", "2"),
            _ => Reply::status(200),
        }),
    );
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "fast"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "delivered", SETTLE).await;
    let got = recv.requests();
    assert_eq!(got.len(), 2);
    let gap = got[1].at.duration_since(got[0].at);
    assert!(
        gap >= Duration::from_millis(1900),
        "Retry-After: 2 was not honoured (policy says 300 ms), waited {gap:?}"
    );
    assert_eq!(d["attempts"][0]["status"], "http_error");
    assert_eq!(d["attempts"][0]["http_status"], 429);
    assert_eq!(d["attempts"][1]["status"], "delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_receiver_gives_timeout() {
    let w = World::start("timeout = \"400ms\"", "").await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, _| Reply::status(200).with_delay(Duration::from_secs(5))),
    );
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "failed", SETTLE).await;
    let a = &d["attempts"][0];
    assert_eq!(a["status"], "timeout");
    assert!(a["http_status"].is_null());
    let ms = a["duration_ms"].as_u64().unwrap();
    assert!(
        (400..2000).contains(&ms),
        "timed out after {ms} ms, limit 400 ms"
    );
    assert!(a["error"].as_str().unwrap().contains("400ms"), "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_disables_the_endpoint() {
    let w = World::start("", FAST).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(410)));
    let (ep, _) = w
        .endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "fast"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "failed", SETTLE).await;
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(d["attempts"][0]["http_status"], 410);
    common::wait_until(SETTLE, "endpoint is disabled", || async {
        w.herald
            .admin("GET", &format!("/v1/endpoints/{ep}"), None)
            .await
            .1["state"]
            == "disabled"
    })
    .await;

    // Later events are not sent to a disabled endpoint.
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "skipped", SETTLE).await;
    assert_eq!(d["last_status"], "disabled");
    assert_eq!(recv.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_that_never_answers_does_not_delay_another_endpoint() {
    let w = World::start("timeout = \"20s\"", "").await;
    let dead = Receiver::https(&w.ca, behaviour(|_, _| Reply::hang()));
    let healthy = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &dead.url("/dead"), json!({"retry_policy": "none"}))
        .await;
    w.endpoint("acc", &healthy.url("/ok"), json!({"retry_policy": "none"}))
        .await;
    // More events than the dead endpoint's in-flight limit (8): its lane fills and queues.
    for i in 0..30 {
        w.ingest("acc", "t.x", json!({ "i": i })).await;
    }
    // The healthy endpoint gets all 30 while the dead one still holds its first 8.
    healthy.wait_for(30, Duration::from_secs(10)).await;
    assert!(
        dead.count() <= 8,
        "dead endpoint got {} concurrent requests, limit is 8",
        dead.count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_an_endpoint_are_kept_alive_and_reused() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    for i in 0..5 {
        let id = first_delivery(&w.ingest("acc", "t.x", json!({ "i": i })).await);
        w.wait_state(&id, "delivered", SETTLE).await;
    }
    assert_eq!(recv.count(), 5);
    assert_eq!(
        recv.connections(),
        1,
        "each attempt opened a new connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_certificate_gives_tls_error() {
    // A receiver whose CA herald was not told about.
    let w = World::start("", "").await;
    let other_ca = common::TestCa::new();
    let recv = Receiver::ok_https(&other_ca);
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "failed", SETTLE).await;
    assert_eq!(d["attempts"][0]["status"], "tls_error");
    assert_eq!(recv.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_gives_connection_error() {
    let w = World::start("", "").await;
    // Bind and drop: nothing listens on this port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    w.endpoint(
        "acc",
        &format!("https://127.0.0.1:{port}/hook"),
        json!({"retry_policy": "none"}),
    )
    .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "failed", SETTLE).await;
    assert_eq!(d["attempts"][0]["status"], "connection_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_payload_arrives_byte_for_byte() {
    let w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    // ~200 KB: far over one stored chunk, under server.max_body_bytes.
    let items: Vec<String> = (0..8000).map(|i| format!("\"item-{i:05}-ÿ\"")).collect();
    let payload = format!("{{\"items\": [{}] ,\"end\":true}}", items.join(", "));
    let body = format!(r#"{{"account_id":"acc","type":"t.big","payload":{payload}}}"#);
    assert!(body.len() > 100_000 && body.len() < 262_144);
    let (status, _, _) = w
        .herald
        .call_raw(
            "POST",
            "/v1/events",
            Some(INGEST_TOKEN),
            &[("content-type", "application/json")],
            body.into_bytes(),
        )
        .await;
    assert_eq!(status, 202);
    let got = recv.wait_for(1, SETTLE).await;
    assert_eq!(got[0].body.len(), payload.len());
    assert!(
        got[0].body.as_ref() == payload.as_bytes(),
        "payload bytes changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_response_body_limit_bytes_of_the_answer_are_kept() {
    let w = World::start("response_body_limit = 100", "").await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, _| Reply::status(200).with_body(vec![b'a'; 64 * 1024])),
    );
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "delivered", SETTLE).await;
    assert_eq!(d["attempts"][0]["response_body"], "a".repeat(100));
}

/// A backlog larger than herald keeps in memory for one endpoint (4,096 first attempts; the
/// rest wait in the store, docs/operations.md "Memory") arrives whole: 10,000 events held back
/// by a receiver that does not answer, herald killed with them pending, restarted with the
/// receiver answering. Each of the 10,000 arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_past_what_herald_keeps_in_memory_arrives_whole_after_a_restart() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let mut w = World::start("", "").await;
    let open = Arc::new(AtomicBool::new(false));
    let gate = open.clone();
    let recv = Receiver::https(
        &w.ca,
        behaviour(move |_, _| {
            if gate.load(Ordering::SeqCst) {
                Reply::status(200)
            } else {
                Reply::hang()
            }
        }),
    );
    w.endpoint("acc-1", &recv.url("/hook"), json!({})).await;
    let mut ids = std::collections::HashSet::new();
    for batch in 0..100 {
        let events: Vec<_> = (0..100)
            .map(|i| json!({"account_id": "acc-1", "type": "t.x", "payload": {"n": batch * 100 + i}}))
            .collect();
        let (status, answer) = w.herald.ingest_batch(json!(events)).await;
        assert_eq!(status, 202, "{answer}");
        for r in answer["results"].as_array().unwrap() {
            assert_eq!(r["status"], 202, "{r}");
            ids.insert(r["event_id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(ids.len(), 10_000);

    w.herald.kill9();
    open.store(true, Ordering::SeqCst);
    w.herald.restart().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let missing = ids.difference(&recv.webhook_ids()).count();
        if missing == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{missing} of 10,000 events never arrived"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The most requests that were at the receiver at once, from their arrival times, given that
/// each was answered `held` after it arrived: a request that arrived less than `held` before
/// another was still unanswered (so still in flight at herald) when that one arrived.
fn most_at_once(arrivals: &[std::time::Instant], held: Duration) -> usize {
    let mut at: Vec<_> = arrivals.to_vec();
    at.sort();
    (0..at.len())
        .map(|i| at[..=i].iter().filter(|a| at[i] - **a < held).count())
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_never_has_more_than_max_in_flight_per_endpoint_requests_at_once() {
    // At most `delivery.max_in_flight_per_endpoint` requests to one endpoint at once.
    const HELD: Duration = Duration::from_millis(300);
    let w = World::start("max_in_flight_per_endpoint = 2\n", "").await;
    let slow = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(200).with_delay(HELD)));
    w.endpoint("acc-limit", &slow.url("/slow"), json!({})).await;
    let mut ids = Vec::new();
    for n in 0..10 {
        let answer = w
            .ingest("acc-limit", "order.created", json!({ "n": n }))
            .await;
        ids.push(first_delivery(&answer));
    }
    for id in &ids {
        w.wait_state(id, "delivered", SETTLE).await;
    }
    let arrivals: Vec<_> = slow.requests().iter().map(|r| r.at).collect();
    assert_eq!(arrivals.len(), 10, "each delivery once");
    // Never three at once; and two at once did happen (the limit, not a lack of work, set it).
    assert_eq!(most_at_once(&arrivals, HELD), 2);
}

/// Each attempt keeps its response's headers: in the order received, a repeated name's values
/// joined by `, `, at most 32 names and 4 KiB of names and values (whole headers only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_keeps_the_responses_headers_up_to_32_and_4_kib() {
    let w = World::start("", FAST).await;
    let few = Receiver::https(
        &w.ca,
        behaviour(|_, _| {
            Reply::status(503)
                .with_header("x-request-id", "req-1")
                .with_header("set-cookie", "a=1")
                .with_header("set-cookie", "b=2")
        }),
    );
    w.endpoint("acc", &few.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    let d = w.wait_state(&id, "failed", SETTLE).await;
    let kept = &d["attempts"][0]["response_headers"];
    assert_eq!(kept["x-request-id"], "req-1", "{d}");
    assert_eq!(kept["set-cookie"], "a=1, b=2", "{d}");
    assert!(kept["content-length"].is_string(), "{d}");

    // 40 headers of 200 bytes: the first that fit 4 KiB, in order, never more than 32.
    let many = Receiver::https(
        &w.ca,
        behaviour(|_, _| {
            (0..40).fold(Reply::status(200), |r, i| {
                r.with_header(format!("x-h{i:02}"), "v".repeat(200))
            })
        }),
    );
    w.endpoint("many", &many.url("/hook"), json!({})).await;
    let id = first_delivery(&w.ingest("many", "t.x", json!({})).await);
    let d = w.wait_state(&id, "delivered", SETTLE).await;
    let kept = d["attempts"][0]["response_headers"]
        .as_object()
        .unwrap_or_else(|| panic!("{d}"));
    let bytes: usize = kept
        .iter()
        .map(|(k, v)| k.len() + v.as_str().unwrap().len())
        .sum();
    assert!(
        kept.len() <= 32 && bytes <= 4096,
        "{} names, {bytes} bytes",
        kept.len()
    );
    let ours: Vec<&String> = kept.keys().filter(|k| k.starts_with("x-h")).collect();
    assert!(ours.len() >= 15, "{ours:?}");
    let expected: Vec<String> = (0..ours.len()).map(|i| format!("x-h{i:02}")).collect();
    let mut sorted: Vec<String> = ours.iter().map(|k| k.to_string()).collect();
    sorted.sort();
    assert_eq!(sorted, expected, "the first ones, whole");
}
