//! The delivery conditions and their order (docs/delivery-contract.md), plans and quotas, on a
//! manual clock.

use crate::common;

use std::time::Duration;

use common::{first_delivery, HeraldApi, InProc, Receiver, World};
use serde_json::{json, Value};

/// 2026-12-02T00:00:00Z.
const DAY0: i64 = 1_796_169_600_000;
const MINUTE: i64 = 60_000;
const SETTLE: Duration = Duration::from_secs(10);

const PLANS: &str = "[plans.free]\nwebhooks = false\n\
                     [plans.small]\nper_minute = 2\nper_day = 3\n\
                     [plans.open]\n";

async fn world(tables: &str, now: i64) -> World<InProc> {
    World::start_manual("", &format!("{PLANS}{tables}"), now).await
}

async fn sync_plan(w: &World<InProc>, account: &str, plan: Value) -> Value {
    let (status, a) = w
        .herald
        .admin(
            "PUT",
            &format!("/v1/accounts/{account}"),
            Some(json!({ "plan": plan })),
        )
        .await;
    assert_eq!(status, 200, "{a}");
    a
}

/// Ingests one event and waits until its (first) delivery has settled; returns it.
async fn deliver_one(w: &World<InProc>, account: &str) -> Value {
    let id = first_delivery(&w.ingest(account, "t.x", json!({})).await);
    let what = format!("delivery {id} settles");
    common::wait_until(SETTLE, &what, || async {
        w.delivery(&id).await["state"] != "pending"
    })
    .await;
    w.delivery(&id).await
}

async fn usage(w: &World<InProc>, account: &str) -> (u64, u64) {
    let (_, a) = w
        .herald
        .admin("GET", &format!("/v1/accounts/{account}"), None)
        .await;
    (
        a["usage"]["minute"].as_u64().unwrap(),
        a["usage"]["day"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_plan_sync_shows_plan_limits_and_usage() {
    let w = world("", DAY0).await;
    let (status, a) = w.herald.admin("GET", "/v1/accounts/11073", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        a,
        json!({"account_id": "11073", "plan": null,
               "limits": {"webhooks": true, "per_minute": null, "per_day": null},
               "usage": {"minute": 0, "day": 0}, "alert_emails": []})
    );
    let a = sync_plan(&w, "11073", json!("small")).await;
    assert_eq!(a["plan"], "small");
    assert_eq!(
        a["limits"],
        json!({"webhooks": true, "per_minute": 2, "per_day": 3})
    );
    for (body, field) in [
        (json!({"plan": "gold"}), "plan"),
        (json!({"plan": 5}), "plan"),
        (json!({}), "plan"),
        (json!({"plan": "small", "extra": 1}), "extra"),
    ] {
        let (status, e) = w
            .herald
            .admin("PUT", "/v1/accounts/11073", Some(body.clone()))
            .await;
        assert_eq!(status, 422, "{body}: {e}");
        assert_eq!(e["error"]["field"], field, "{body}");
    }
    let a = sync_plan(&w, "11073", json!(null)).await;
    assert_eq!(a["plan"], Value::Null);
    assert_eq!(a["limits"]["per_minute"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_entitled_account_is_skipped_and_nothing_is_sent() {
    let w = world("", DAY0).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    sync_plan(&w, "acc", json!("free")).await;
    let d = deliver_one(&w, "acc").await;
    assert_eq!(d["state"], "skipped");
    assert_eq!(d["last_status"], "not_entitled");
    assert_eq!(d["attempts"][0]["status"], "not_entitled");
    assert_eq!(recv.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_entitled_beats_no_endpoint() {
    let w = world("", DAY0).await;
    sync_plan(&w, "acc", json!("free")).await;
    let d = deliver_one(&w, "acc").await;
    assert_eq!(d["endpoint_id"], Value::Null);
    assert_eq!(d["last_status"], "not_entitled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_endpoint_is_recorded_once_per_event() {
    let w = world("", DAY0).await;
    let answer = w.ingest("acc", "t.x", json!({})).await;
    assert_eq!(answer["deliveries"].as_array().unwrap().len(), 1);
    let d = w
        .wait_state(&first_delivery(&answer), "skipped", SETTLE)
        .await;
    assert_eq!(d["last_status"], "no_endpoint");
    assert_eq!(d["attempts"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unverified_beats_paused() {
    let w = world("[endpoints]\nrequire_verification = true\n", DAY0).await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    let (status, _) = w
        .herald
        .admin("POST", &format!("/v1/endpoints/{ep}/pause"), None)
        .await;
    assert_eq!(status, 200);
    let d = deliver_one(&w, "acc").await;
    assert_eq!(d["state"], "skipped");
    assert_eq!(d["last_status"], "unverified");
    assert_eq!(recv.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_beats_rate_limited_and_is_not_counted() {
    let w = world("", DAY0 + 12 * 3_600_000).await;
    let recv = Receiver::ok_https(&w.ca);
    let (ep, _) = w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    sync_plan(&w, "acc", json!("small")).await;
    w.herald
        .admin("POST", &format!("/v1/endpoints/{ep}/pause"), None)
        .await;
    for _ in 0..3 {
        assert_eq!(deliver_one(&w, "acc").await["last_status"], "paused");
    }
    assert_eq!(
        usage(&w, "acc").await,
        (0, 0),
        "not-sent attempts are not counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_after_per_minute_quota_and_windows_reset_at_minute_and_utc_midnight() {
    // 12:00:10 UTC.
    let w = world("", DAY0 + 12 * 3_600_000 + 10_000).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    sync_plan(&w, "acc", json!("small")).await; // 2 per minute, 3 per day

    assert_eq!(deliver_one(&w, "acc").await["state"], "delivered");
    assert_eq!(deliver_one(&w, "acc").await["state"], "delivered");
    let d = deliver_one(&w, "acc").await;
    assert_eq!(
        (d["state"].as_str(), d["last_status"].as_str()),
        (Some("skipped"), Some("rate_limited"))
    );
    assert_eq!(d["attempt_count"], 1, "rate_limited is not retried");
    assert_eq!(usage(&w, "acc").await, (2, 2));

    // 12:00:59.999 is still the same minute.
    w.herald.clock.set(DAY0 + 12 * 3_600_000 + MINUTE - 1);
    assert_eq!(deliver_one(&w, "acc").await["last_status"], "rate_limited");
    // 12:01:00.000: a new minute, same day.
    w.herald.clock.set(DAY0 + 12 * 3_600_000 + MINUTE);
    assert_eq!(deliver_one(&w, "acc").await["state"], "delivered");
    assert_eq!(usage(&w, "acc").await, (1, 3));
    // The day is used up: later minutes and hours of the same UTC day stay limited.
    w.herald.clock.set(DAY0 + 13 * 3_600_000 + 5 * MINUTE);
    assert_eq!(deliver_one(&w, "acc").await["last_status"], "rate_limited");
    w.herald.clock.set(DAY0 + 24 * 3_600_000 - 1);
    assert_eq!(deliver_one(&w, "acc").await["last_status"], "rate_limited");
    // UTC midnight resets the day.
    w.herald.clock.set(DAY0 + 24 * 3_600_000);
    assert_eq!(deliver_one(&w, "acc").await["state"], "delivered");
    assert_eq!(usage(&w, "acc").await, (1, 1));
    assert_eq!(recv.count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_counters_survive_a_restart() {
    let mut w = world("", DAY0 + 600_000).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    sync_plan(&w, "acc", json!("small")).await;
    deliver_one(&w, "acc").await;
    deliver_one(&w, "acc").await;
    w.herald.restart().await;
    assert_eq!(usage(&w, "acc").await, (2, 2));
    assert_eq!(deliver_one(&w, "acc").await["last_status"], "rate_limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsynced_account_is_not_counted() {
    let w = world("", DAY0).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    for _ in 0..4 {
        assert_eq!(deliver_one(&w, "acc").await["state"], "delivered");
    }
    assert_eq!(usage(&w, "acc").await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_quota_check_allows_the_attempt_and_is_counted() {
    // The failure is injected into the embedded store's counters.
    let w = World::start_manual_with_storage("backend = \"sled\"\n", "", PLANS, DAY0).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    sync_plan(&w, "acc", json!("small")).await;
    w.herald
        .running()
        .store
        .sled()
        .expect("the quota fault is the embedded store's")
        .set_quota_fault(true);
    for _ in 0..3 {
        assert_eq!(deliver_one(&w, "acc").await["state"], "delivered");
    }
    let (_, status) = w.herald.admin("GET", "/v1/status", None).await;
    assert_eq!(status["quota_check_failures"], 3);
    assert_eq!(recv.count(), 3);
}
