//! Debounce at ingest (docs/delivery-contract.md), `leading` and `leading_trailing`, on a manual
//! clock.

use crate::common;

use std::time::Duration;

use common::{first_delivery, HeraldApi, InProc, Receiver, World};
use serde_json::{json, Value};

/// 2026-12-02T12:00:00Z.
const T0: i64 = 1_796_212_800_000;
const SETTLE: Duration = Duration::from_secs(10);

fn catalog(mode: &str) -> String {
    format!(
        "[catalog.events.\"profile.updated\"]\ndescription = \"x\"\n\
         debounce = {{ window = \"60s\", key = \"location_id\", mode = \"{mode}\" }}\n"
    )
}

async fn world(mode: &str) -> (World<InProc>, Receiver) {
    let w = World::start_manual("", &catalog(mode), T0).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    (w, recv)
}

/// Ingests a `profile.updated` at the clock's current time; returns its delivery as stored.
async fn update(w: &World<InProc>, at: i64, payload: Value) -> Value {
    w.herald.clock.set(at);
    let answer = w.ingest("acc", "profile.updated", payload).await;
    w.delivery(&first_delivery(&answer)).await
}

async fn settled(w: &World<InProc>, d: &Value, state: &str) -> Value {
    w.wait_state(d["id"].as_str().unwrap(), state, SETTLE).await
}

fn sent_ns(recv: &Receiver) -> Vec<i64> {
    recv.requests()
        .iter()
        .map(|r| r.json()["n"].as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leading_delivers_the_first_event_and_records_the_rest_of_the_window_as_debounced() {
    let (w, recv) = world("leading").await;
    let first = update(&w, T0, json!({"location_id": 279381, "n": 1})).await;
    settled(&w, &first, "delivered").await;
    for (at, n) in [(T0 + 10_000, 2), (T0 + 59_999, 3)] {
        let d = update(&w, at, json!({"location_id": 279381, "n": n})).await;
        assert_eq!(d["state"], "skipped");
        assert_eq!(d["last_status"], "debounced");
        assert_eq!(d["attempts"][0]["status"], "debounced");
    }
    // The window has closed: the next event opens a new one and is delivered.
    let next = update(&w, T0 + 60_000, json!({"location_id": 279381, "n": 4})).await;
    settled(&w, &next, "delivered").await;
    assert_eq!(sent_ns(&recv), vec![1, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_and_string_keys_are_one_key_and_other_keys_are_independent() {
    let (w, recv) = world("leading").await;
    let a = update(&w, T0, json!({"location_id": 279381, "n": 1})).await;
    settled(&w, &a, "delivered").await;
    let b = update(&w, T0 + 1_000, json!({"location_id": "279381", "n": 2})).await;
    assert_eq!(
        b["last_status"], "debounced",
        "279381 and \"279381\" are one key"
    );
    let c = update(&w, T0 + 2_000, json!({"location_id": 5, "n": 3})).await;
    settled(&w, &c, "delivered").await;
    // The request's debounce_key wins over the payload field.
    w.herald.clock.set(T0 + 3_000);
    let (status, answer) = w
        .herald
        .ingest(json!({"account_id": "acc", "type": "profile.updated",
                       "payload": {"location_id": 5, "n": 4}, "debounce_key": "279381"}))
        .await;
    assert_eq!(status, 202);
    assert_eq!(answer["deliveries"][0]["state"], "skipped");
    // An event without the key field is not debounced.
    let e = update(&w, T0 + 4_000, json!({"n": 5})).await;
    settled(&w, &e, "delivered").await;
    let mut ns = sent_ns(&recv);
    ns.sort();
    assert_eq!(ns, vec![1, 3, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_without_a_debounce_rule_are_never_debounced() {
    let (w, recv) = world("leading").await;
    for n in 0..3 {
        w.herald.clock.set(T0 + n);
        let answer = w
            .ingest("acc", "profile.created", json!({"location_id": 1, "n": n}))
            .await;
        w.wait_state(&first_delivery(&answer), "delivered", SETTLE)
            .await;
    }
    assert_eq!(recv.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leading_trailing_also_delivers_the_last_debounced_event_when_the_window_closes() {
    let (w, recv) = world("leading_trailing").await;
    let first = update(&w, T0, json!({"location_id": 7, "n": 1})).await;
    settled(&w, &first, "delivered").await;
    let second = update(&w, T0 + 10_000, json!({"location_id": 7, "n": 2})).await;
    assert_eq!(
        second["state"], "pending",
        "the candidate waits for the window's end"
    );
    let third = update(&w, T0 + 20_000, json!({"location_id": 7, "n": 3})).await;
    let second = w.delivery(second["id"].as_str().unwrap()).await;
    assert_eq!(second["state"], "skipped");
    assert_eq!(second["last_status"], "debounced");
    assert_eq!(recv.count(), 1, "nothing more is sent inside the window");

    // The window closes at T0 + 60 s: the last event of it is delivered.
    w.herald.clock.set(T0 + 60_000);
    settled(&w, &third, "delivered").await;
    assert_eq!(sent_ns(&recv), vec![1, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_neither_reopens_nor_loses_a_window() {
    let (mut w, recv) = world("leading_trailing").await;
    let first = update(&w, T0, json!({"location_id": 7, "n": 1})).await;
    settled(&w, &first, "delivered").await;
    let candidate = update(&w, T0 + 10_000, json!({"location_id": 7, "n": 2})).await;
    w.herald.restart().await;
    // Still inside the window after the restart: debounced, and it replaces the candidate.
    let last = update(&w, T0 + 30_000, json!({"location_id": 7, "n": 3})).await;
    assert_eq!(last["state"], "pending");
    let candidate = w.delivery(candidate["id"].as_str().unwrap()).await;
    assert_eq!(candidate["last_status"], "debounced");
    w.herald.clock.set(T0 + 60_000);
    settled(&w, &last, "delivered").await;
    assert_eq!(sent_ns(&recv), vec![1, 3]);
}
