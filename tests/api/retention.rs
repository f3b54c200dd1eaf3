//! Retention (`storage.retention`): old events, deliveries and attempts are pruned in the
//! background; pending deliveries never are. On a manual clock.

use crate::common;

use std::time::Duration;

use common::{behaviour, first_delivery, HeraldApi, InProc, Receiver, Reply, World};
use serde_json::json;

/// 2026-12-02T12:00:00Z.
const T0: i64 = 1_796_212_800_000;
const HOUR: i64 = 3_600_000;
const SETTLE: Duration = Duration::from_secs(10);

async fn status(w: &World<InProc>, path: &str) -> u16 {
    w.herald.admin("GET", path, None).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_removes_only_what_is_old_and_never_a_pending_delivery() {
    let w = World::start_manual_with_storage(
        "retention = \"1h\"",
        "",
        "[retry_policies]\nslow = [\"10h\"]\n",
        T0,
    )
    .await;
    let ok = Receiver::ok_https(&w.ca);
    let failing = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(503)));
    w.endpoint("old", &ok.url("/ok"), json!({})).await;
    w.endpoint(
        "slow",
        &failing.url("/fail"),
        json!({"retry_policy": "slow"}),
    )
    .await;

    // At T0: one delivered event, and one whose delivery stays pending (its retry is in 10 h).
    let old = w.ingest("old", "t.x", json!({"n": 1})).await;
    let old_event = old["event_id"].as_str().unwrap().to_string();
    let old_delivery = first_delivery(&old);
    w.wait_state(&old_delivery, "delivered", SETTLE).await;
    let pending = w.ingest("slow", "t.x", json!({"n": 2})).await;
    let pending_event = pending["event_id"].as_str().unwrap().to_string();
    let pending_delivery = first_delivery(&pending);
    failing.wait_for(1, SETTLE).await;
    w.wait_state(&pending_delivery, "pending", SETTLE).await;

    // 30 minutes later: a recent event.
    w.herald.clock.set(T0 + HOUR / 2);
    let recent = w.ingest("old", "t.x", json!({"n": 3})).await;
    let recent_event = recent["event_id"].as_str().unwrap().to_string();
    w.wait_state(&first_delivery(&recent), "delivered", SETTLE)
        .await;

    // Past the retention of the first events (and past the next sweep).
    w.herald.clock.set(T0 + HOUR + 2 * 60_000);
    let old_path = format!("/v1/events/{old_event}");
    common::wait_until(SETTLE, "the old event is pruned", || async {
        status(&w, &old_path).await == 404
    })
    .await;
    assert_eq!(
        status(&w, &format!("/v1/deliveries/{old_delivery}")).await,
        404
    );
    // Still here: the recent event, and the old one whose delivery is pending.
    assert_eq!(status(&w, &format!("/v1/events/{recent_event}")).await, 200);
    assert_eq!(
        status(&w, &format!("/v1/events/{pending_event}")).await,
        200
    );
    let d = w.delivery(&pending_delivery).await;
    assert_eq!(d["state"], "pending");
    assert_eq!(d["attempts"].as_array().unwrap().len(), 1);
    let (_, st) = w.herald.admin("GET", "/v1/status", None).await;
    assert_eq!(st["queue"]["delivered"], 1, "{st}");
    assert_eq!(st["queue"]["pending"], 1, "{st}");
}
