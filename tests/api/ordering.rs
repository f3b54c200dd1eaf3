//! Ordered delivery per key (docs/delivery-contract.md), with the real process: one delivery in
//! flight per key, in commit order, a failing head holding back only its own key, a failed head
//! moving its key on, and the order kept across kill -9.

use crate::common;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{behaviour, first_delivery, Receiver, Recorded, Reply, World};
use serde_json::{json, Value};

const CLIENTS: usize = 16;
const KEYS: usize = 20;
const PER_KEY: usize = 50;
const SETTLE: Duration = Duration::from_secs(60);
const FAST: &str = "[retry_policies]\nfast = [\"300ms\", \"300ms\", \"300ms\"]\nonce = [\"2s\"]\n";

fn key(i: usize) -> String {
    format!("k{:02}", i % KEYS)
}

/// Posts `events` (payloads) from [`CLIENTS`] concurrent clients until they are all posted or
/// herald goes away; returns the (customer key, event id) of each acknowledged one.
async fn post_all(base: String, events: Vec<Value>) -> Vec<(String, String)> {
    let queue = Arc::new(Mutex::new(VecDeque::from(events)));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (queue, acked, base) = (queue.clone(), acked.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let client = common::herald::new_client();
            loop {
                let Some(payload) = queue.lock().unwrap().pop_front() else {
                    return;
                };
                let k = payload["customer"].as_str().unwrap().to_string();
                let body = json!({"account_id": "acct_fifo", "type": "order.updated",
                                  "payload": payload});
                match common::herald::post_event(&client, &base, &body).await {
                    Ok(Some(id)) => acked.lock().unwrap().push((k, id)),
                    Ok(None) => {}
                    Err(_) => return, // herald was killed: not acknowledged
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let out = acked.lock().unwrap().clone();
    out
}

fn payloads(range: std::ops::Range<usize>) -> Vec<Value> {
    range.map(|i| json!({"customer": key(i), "n": i})).collect()
}

/// Each key's arrivals: (when, event id), in arrival order.
fn arrivals_by_key(requests: &[Recorded]) -> HashMap<String, Vec<(Instant, String)>> {
    let mut out: HashMap<String, Vec<(Instant, String)>> = HashMap::new();
    for r in requests {
        let k = r.json()["customer"].as_str().unwrap_or("").to_string();
        let id = r.header("webhook-id").expect("webhook-id").to_string();
        out.entry(k).or_default().push((r.at, id));
    }
    out
}

/// One key's arrivals against its commit order (event ids are ULIDs: their text sorts in commit
/// order): first arrivals in commit order, every acknowledged event of the key (`acked`: (key,
/// event id) of all) arrived, and within one run of herald (`restarts`: when each later run
/// began) no event arrives after a later one of its key (an event arriving again, such as a
/// head sent again after a kill, comes before anything after it).
fn check_order(
    k: &str,
    arrivals: &[(Instant, String)],
    acked: &[(String, String)],
    restarts: &[Instant],
) {
    let mut firsts: Vec<&String> = Vec::new();
    for (_, id) in arrivals {
        if !firsts.contains(&id) {
            firsts.push(id);
        }
    }
    let mut sorted = firsts.clone();
    sorted.sort();
    assert_eq!(
        firsts, sorted,
        "key {k}: first arrivals are not in commit order"
    );
    for (_, id) in acked.iter().filter(|(kk, _)| kk == k) {
        assert!(
            firsts.contains(&id),
            "key {k}: acknowledged {id} never arrived"
        );
    }
    let epoch = |at: &Instant| restarts.iter().filter(|r| *r < at).count();
    for pair in arrivals.windows(2) {
        let ((a_at, a), (b_at, b)) = (&pair[0], &pair[1]);
        if epoch(a_at) == epoch(b_at) {
            let runs: Vec<(usize, &str)> = arrivals
                .iter()
                .map(|(at, id)| (epoch(at), &id[id.len() - 8..]))
                .collect();
            assert!(
                a <= b,
                "key {k}: {b} arrived after {a} in one run of herald; (run, id): {runs:?}"
            );
        }
    }
}

/// 20 keys × 50 events from 16 concurrent clients to an endpoint ordered by `customer`: the
/// receiver fails the first request of key k00 twice (its head, retried), every key's arrivals
/// are its commit order, and the other keys keep arriving while k00's head waits for its retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_arrives_in_commit_order_and_a_failing_head_holds_back_only_its_key() {
    let w = World::start("", FAST).await;
    let k00_seen = Arc::new(Mutex::new(0usize));
    let seen = k00_seen.clone();
    let recv = Receiver::https(
        &w.ca,
        behaviour(move |r, _| {
            if r.json()["customer"] == "k00" {
                let mut n = seen.lock().unwrap();
                *n += 1;
                if *n <= 2 {
                    return Reply::status(503);
                }
            }
            Reply::status(200)
        }),
    );
    let (ep, _) = w
        .endpoint(
            "acct_fifo",
            &recv.url("/fifo"),
            json!({"ordering": {"key": "customer"}, "retry_policy": "fast"}),
        )
        .await;
    let (_, view) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(view["ordering"], json!({"key": "customer"}));

    let acked = post_all(w.herald.base_url(), payloads(0..KEYS * PER_KEY)).await;
    assert_eq!(acked.len(), KEYS * PER_KEY);
    let got = recv.wait_for(KEYS * PER_KEY + 2, SETTLE).await;
    let by_key = arrivals_by_key(&got);
    assert_eq!(by_key.len(), KEYS);
    for (k, arrivals) in &by_key {
        check_order(k, arrivals, &acked, &[]);
        let extra = if k == "k00" { 2 } else { 0 };
        assert_eq!(arrivals.len(), PER_KEY + extra, "key {k}: {arrivals:?}");
    }
    // k00's head arrived three times in a row (two failures, then accepted) ...
    let k00 = &by_key["k00"];
    assert!(k00[0].1 == k00[1].1 && k00[1].1 == k00[2].1, "{k00:?}");
    assert_ne!(k00[2].1, k00[3].1);
    // ... and while it waited for its retries, the other keys kept arriving.
    let (failed_at, accepted_at) = (k00[0].0, k00[2].0);
    let others = got
        .iter()
        .filter(|r| r.at > failed_at && r.at < accepted_at && r.json()["customer"] != "k00")
        .count();
    assert!(others > 0, "no other key arrived while k00's head waited");
}

/// The delivery answer shows `ordering_key` and `waiting_for`; the ingest `ordering_key`
/// overrides the payload field; a head that ends `failed` moves its key on; a manual retry of
/// it is sent at once, out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_delivery_names_the_one_ahead_and_a_failed_head_moves_its_key_on() {
    let w = World::start("", FAST).await;
    // The first two requests of event n=1 fail: the head's attempt and its one retry (policy
    // `once`, 2 s later).
    let failures = Arc::new(Mutex::new(0usize));
    let recv = Receiver::https(
        &w.ca,
        behaviour(move |r, _| {
            let mut failed = failures.lock().unwrap();
            if r.json()["n"] == 1 && *failed < 2 {
                *failed += 1;
                return Reply::status(500);
            }
            Reply::status(200)
        }),
    );
    w.endpoint(
        "acct_fifo",
        &recv.url("/fifo"),
        json!({"ordering": {"key": "customer"}, "retry_policy": "once"}),
    )
    .await;
    let ingest = |payload: Value, ordering_key: Option<&str>| {
        let mut body =
            json!({"account_id": "acct_fifo", "type": "order.updated", "payload": payload});
        if let Some(k) = ordering_key {
            body["ordering_key"] = json!(k);
        }
        let herald = &w.herald;
        async move {
            let (status, answer) = herald.ingest(body).await;
            assert_eq!(status, 202, "{answer}");
            first_delivery(&answer)
        }
    };
    let head = ingest(json!({"customer": "c1", "n": 1}), None).await;
    recv.wait_for(1, SETTLE).await;
    let behind = ingest(json!({"customer": "c1", "n": 2}), None).await;
    let overridden = ingest(json!({"customer": "c1", "n": 3}), Some("c2")).await;

    let d = w.delivery(&behind).await;
    assert_eq!(d["ordering_key"], "c1", "{d}");
    assert_eq!(d["waiting_for"], head.as_str(), "{d}");
    assert_eq!(d["state"], "pending");
    let d = w.delivery(&head).await;
    assert_eq!(
        (d["ordering_key"].clone(), d["waiting_for"].clone()),
        (json!("c1"), Value::Null)
    );
    // Another key (the override) is not held back by c1's failing head.
    let d = w.wait_state(&overridden, "delivered", SETTLE).await;
    assert_eq!(d["ordering_key"], "c2", "{d}");

    // The head fails for good; its key moves on.
    let d = w.wait_state(&head, "failed", SETTLE).await;
    assert_eq!(d["attempts"].as_array().map(Vec::len), Some(2), "{d}");
    w.wait_state(&behind, "delivered", SETTLE).await;
    // A manual retry of the failed head goes at once.
    let (status, answer) = w
        .herald
        .admin("POST", &format!("/v1/deliveries/{head}/retry"), None)
        .await;
    assert_eq!(status, 202, "{answer}");
    w.wait_state(&head, "delivered", SETTLE).await;
    let order: Vec<i64> = recv
        .requests()
        .iter()
        .map(|r| r.json()["n"].as_i64().unwrap())
        .collect();
    assert_eq!(order, vec![1, 3, 1, 2, 1], "arrivals by n");

    // An unordered endpoint's deliveries have neither field set.
    let plain = Receiver::ok_https(&w.ca);
    w.endpoint("acct_plain", &plain.url("/"), json!({})).await;
    let answer = w
        .ingest("acct_plain", "order.updated", json!({"customer": "c1"}))
        .await;
    let d = w.delivery(&first_delivery(&answer)).await;
    assert_eq!(
        (d["ordering_key"].clone(), d["waiting_for"].clone()),
        (Value::Null, Value::Null)
    );
}

/// kill -9 in the middle of 20 keys × 50 events from 16 clients, then more events after the
/// restart: per key, first arrivals keep commit order (a delivery in flight at the kill may
/// arrive again), and every acknowledged event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_holds_across_kill9_and_nothing_acknowledged_is_lost() {
    let mut w = World::start("", FAST).await;
    // A little latency keeps every key's sequence busy when the kill comes.
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, _| Reply::status(200).with_delay(Duration::from_millis(3))),
    );
    w.endpoint(
        "acct_fifo",
        &recv.url("/fifo"),
        json!({"ordering": {"key": "customer"}, "retry_policy": "fast"}),
    )
    .await;

    let first = KEYS * PER_KEY;
    let producer = tokio::spawn(post_all(w.herald.base_url(), payloads(0..first)));
    common::wait_until(
        Duration::from_secs(30),
        "400 deliveries arrived",
        || async { recv.count() >= 400 },
    )
    .await;
    w.herald.kill9();
    let mut acked = producer.await.unwrap();
    // At least the delivered ones were committed; a few 202s may have died with herald.
    assert!(acked.len() >= 300, "{} acked", acked.len());
    // The old process's last requests may reach the receiver after the kill: what arrives
    // before the restart is the first run's.
    let restarted = Instant::now();
    w.herald.restart().await;
    acked.extend(post_all(w.herald.base_url(), payloads(first..first + 200)).await);

    let want_total = acked.len();
    common::wait_until(SETTLE, "every acknowledged event arrived", || async {
        let seen = recv.webhook_ids();
        acked.iter().all(|(_, id)| seen.contains(id))
    })
    .await;
    let by_key = arrivals_by_key(&recv.requests());
    for (k, arrivals) in &by_key {
        check_order(k, arrivals, &acked, &[restarted]);
    }
    eprintln!(
        "{want_total} acknowledged, {} requests arrived",
        recv.count()
    );
}
