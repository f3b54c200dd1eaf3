//! Nothing acknowledged is lost: kill -9 under concurrent producers, and pending retries across a
//! graceful restart.

use crate::common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{behaviour, first_delivery, Receiver, Reply, World};
use serde_json::json;

const PRODUCERS: usize = 16;
const ROUNDS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_event_is_delivered_after_kill9_under_16_producers() {
    let mut w = World::start("", "").await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    let mut all_acked: Vec<String> = Vec::new();

    for round in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let tasks = common::herald::spawn_producers(
            &w.herald.base_url(),
            ("acc", "load.test"),
            PRODUCERS,
            &stop,
            &acked,
        );
        // Kill at a moment that differs per round, while producers and deliveries are busy.
        let target = 150 + round * 120;
        common::wait_until(
            Duration::from_secs(30),
            "enough events were acknowledged",
            || async { acked.lock().unwrap().len() >= target },
        )
        .await;
        let pid = w.herald.pid().unwrap().to_string();
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap();
        assert!(killed.success());
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        w.herald.kill9(); // reap
        all_acked.extend(acked.lock().unwrap().drain(..));
        w.herald.restart().await;
    }

    let want: HashSet<String> = all_acked.iter().cloned().collect();
    assert_eq!(
        want.len(),
        all_acked.len(),
        "an event id was acknowledged twice"
    );
    common::wait_until(
        Duration::from_secs(60),
        "every acknowledged event arrived",
        || async { want.is_subset(&recv.webhook_ids()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_retry_survives_sigterm_and_restart() {
    let mut w = World::start("", "[retry_policies]\nslow = [\"3s\"]\n").await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, i| {
            if i == 0 {
                Reply::status(503)
            } else {
                Reply::status(200)
            }
        }),
    );
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "slow"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({"v": 1})).await);
    recv.wait_for(1, Duration::from_secs(10)).await;
    w.wait_state(&id, "pending", Duration::from_secs(10)).await;

    let status = w.herald.sigterm().await;
    assert_eq!(status.code(), Some(0), "SIGTERM must exit 0");
    // One box flushes its store; a cluster node has committed everything and leaves.
    assert!(w.herald.log_contains(if common::on_postgres() {
        "left the cluster; stopped"
    } else {
        "storage flushed"
    }));
    w.herald.restart().await;

    let got = recv.wait_for(2, Duration::from_secs(20)).await;
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
    assert_eq!(got[1].header("herald-attempt"), Some("2"));
    let gap = got[1].at.duration_since(got[0].at);
    assert!(
        gap >= Duration::from_millis(2700),
        "retried too early: {gap:?}"
    );
    let d = w
        .wait_state(&id, "delivered", Duration::from_secs(10))
        .await;
    assert_eq!(d["attempt_count"], 2);
    assert_eq!(d["attempts"][0]["status"], "http_error");
    assert_eq!(d["attempts"][1]["status"], "delivered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_an_in_flight_attempt_finish_and_record() {
    let mut w = World::start("timeout = \"10s\"", "").await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, _| Reply::status(200).with_delay(Duration::from_millis(1500))),
    );
    w.endpoint("acc", &recv.url("/hook"), json!({"retry_policy": "none"}))
        .await;
    let id = first_delivery(&w.ingest("acc", "t.x", json!({})).await);
    // The request has arrived; the receiver answers 1.5 s later, after SIGTERM.
    recv.wait_for(1, Duration::from_secs(10)).await;
    let status = w.herald.sigterm().await;
    assert_eq!(status.code(), Some(0));
    w.herald.restart().await;
    let d = w.delivery(&id).await;
    assert_eq!(
        d["state"], "delivered",
        "the in-flight attempt was not finished: {d}"
    );
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(recv.count(), 1);
}
