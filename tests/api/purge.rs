//! Purging an account (docs/operations.md, "Purging an account"), with the real process: after
//! `DELETE /v1/accounts/{id}` no answer shows anything of the account, none of its deliveries is
//! attempted, the other accounts answer byte for byte as before, the operator hears
//! `account.purged` with counts only, and a backup taken afterwards, restored into a new
//! directory, holds not one byte of the purged payloads.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::herald::herald_bin;
use common::{behaviour, first_delivery, HeraldApi, Receiver, Reply, World};
use serde_json::{json, Value};

const OPERATOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const MARKER: &str = "purge-marker-5d1c0b7e";

/// What the other account's reads answer, as text.
async fn answers(w: &World, ep: &str) -> Vec<String> {
    let mut out = Vec::new();
    for path in [
        "/v1/accounts/other".to_string(),
        "/v1/accounts/other/endpoints".to_string(),
        format!("/v1/endpoints/{ep}"),
        "/v1/deliveries?account_id=other".to_string(),
    ] {
        let (status, v) = w.herald.admin("GET", &path, None).await;
        out.push(format!("{path} {status} {v}"));
    }
    out
}

/// A herald whose operator events go to the receiver answered with it.
async fn with_operator() -> (World, Receiver) {
    let operator = Receiver::ok_http();
    let tables = format!(
        "[operator]\nwebhook_url = \"{}\"\nsecret = \"{OPERATOR_SECRET}\"\n",
        operator.url("/ops")
    );
    (World::start("allow_http = true", &tables).await, operator)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_account_is_gone_from_every_answer_and_every_later_backup() {
    let (w, operator) = with_operator().await;
    // The account's receiver holds every request open: attempts are under way at the purge.
    let recv = Receiver::https(
        &w.ca,
        behaviour(|r, _| match r.path.starts_with("/acct") {
            true => Reply::hang(),
            false => Reply::status(200),
        }),
    );
    let (other_ep, _) = w.endpoint("other", &recv.url("/other"), json!({})).await;
    for n in 0..3 {
        w.herald
            .ingest(json!({"account_id": "other", "type": "order.created", "payload": {"n": n}}))
            .await;
    }
    recv.wait_for(3, Duration::from_secs(20)).await;
    common::wait_until(
        Duration::from_secs(20),
        "the other account's deliveries settled",
        || async {
            let (_, v) = w
                .herald
                .admin("GET", "/v1/deliveries?account_id=other&state=pending", None)
                .await;
            v["items"].as_array().is_some_and(Vec::is_empty)
        },
    )
    .await;

    let (acct_ep, _) = w.endpoint("acct", &recv.url("/acct"), json!({})).await;
    let h = &w.herald;
    h.admin("PUT", "/v1/accounts/acct", Some(json!({"plan": null})))
        .await;
    let (status, _) = h
        .admin(
            "PUT",
            "/v1/accounts/acct/secrets/api_key",
            Some(json!({"value": "s3cret"})),
        )
        .await;
    assert!((200..300).contains(&status), "{status}");
    let (status, session) = h
        .admin("POST", "/v1/accounts/acct/portal-sessions", Some(json!({})))
        .await;
    assert_eq!(status, 201, "{session}");
    let mut acct_events = Vec::new();
    for n in 0..5 {
        let (status, v) = h
            .ingest(json!({"account_id": "acct", "type": "order.created",
                           "payload": {"n": n, "marker": MARKER}, "idempotency_key": format!("k{n}")}))
            .await;
        assert_eq!(status, 202, "{v}");
        acct_events.push(v["event_id"].as_str().unwrap().to_string());
    }
    common::wait_until(
        Duration::from_secs(20),
        "an attempt to the account is under way",
        || async { recv.requests().iter().any(|r| r.path.starts_with("/acct")) },
    )
    .await;
    let before = answers(&w, &other_ep).await;

    let (status, purged) = h.admin("DELETE", "/v1/accounts/acct", None).await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(
        purged,
        json!({"account_id": "acct", "purged": {"events": 5, "deliveries": 5, "endpoints": 1}})
    );
    let sent_to_acct = || {
        recv.requests()
            .iter()
            .filter(|r| r.path.starts_with("/acct"))
            .count()
    };
    let at_answer = sent_to_acct();
    // The other account answers byte for byte as before.
    assert_eq!(
        answers(&w, &other_ep).await,
        before,
        "the other account is untouched"
    );

    // The other account goes on: once its next event is delivered, nothing of the purged one
    // was attempted after the answer.
    h.ingest(json!({"account_id": "other", "type": "order.created", "payload": {"n": 9}}))
        .await;
    common::wait_until(
        Duration::from_secs(20),
        "the other account's next event arrived",
        || async {
            recv.requests()
                .iter()
                .filter(|r| r.path.starts_with("/other"))
                .count()
                == 4
        },
    )
    .await;
    assert_eq!(
        sent_to_acct(),
        at_answer,
        "no attempt after the purge's answer"
    );

    // No answer shows anything of it.
    let token = session["token"].as_str().unwrap();
    let (status, _) = h.call("GET", "/v1/session", Some(token), None).await;
    assert_eq!(status, 401, "its portal session is gone");
    for path in [
        "/v1/accounts".to_string(),
        "/v1/accounts/acct/endpoints".to_string(),
        "/v1/deliveries".to_string(),
        "/v1/deliveries?account_id=acct".to_string(),
        "/v1/status".to_string(),
        "/v1/incidents".to_string(),
        format!("/v1/endpoints/{acct_ep}"),
        format!("/v1/events/{}", acct_events[0]),
    ] {
        let (_, v) = h.admin("GET", &path, None).await;
        let text = v.to_string();
        for trace in [MARKER, acct_ep.as_str(), "\"acct\"", &acct_events[0]] {
            assert!(!text.contains(trace), "{path} shows {trace}: {text}");
        }
    }
    let (_, account) = h.admin("GET", "/v1/accounts/acct", None).await;
    assert_eq!(account["plan"], Value::Null, "it starts empty: {account}");
    assert_eq!(
        account["usage"],
        json!({"minute": 0, "day": 0}),
        "{account}"
    );
    let (status, again) = h
        .ingest(
            json!({"account_id": "acct", "type": "order.created", "payload": {},
                       "idempotency_key": "k0"}),
        )
        .await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["duplicate"], false, "its keys are gone: {again}");

    // The operator hears of it: counts, nothing of the account.
    let got = operator.wait_for(1, Duration::from_secs(20)).await;
    let event = got
        .iter()
        .map(|r| r.json())
        .find(|e| e["type"] == "account.purged")
        .expect("account.purged");
    assert_eq!(
        event["data"],
        json!({"events": 5, "deliveries": 5, "endpoints": 1}),
        "{event}"
    );

    // A backup taken now, restored into a new directory, holds none of it.
    let dir = tempfile::tempdir().unwrap();
    let backup_config = super::backup::backup_config(h, dir.path());
    let archive = dir.path().join("after.backup");
    let restored = dir.path().join("restored");
    let run = |args: &[&str]| {
        let out = Command::new(herald_bin()).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "herald {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (c, a, r) = (
        backup_config.display().to_string(),
        archive.display().to_string(),
        format!("sled:{}", restored.display()),
    );
    tokio::task::spawn_blocking(move || {
        run(&["backup", "--config", &c, "--out", &a]);
        run(&["restore", "--to", &r, &a]);
    })
    .await
    .unwrap();
    assert_eq!(
        files_holding(&restored, MARKER.as_bytes()),
        Vec::<String>::new()
    );
}

/// A purge forgets the account's debounce windows whatever their key: a window keyed by a
/// payload field (`key = "loc"`) goes too, so the same event after the purge is delivered,
/// not `debounced`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_forgets_debounce_windows_keyed_by_a_payload_field() {
    let catalog = "[catalog.events.\"loc.changed\"]\ndescription = \"x\"\n\
                   debounce = { window = \"1h\", key = \"loc\", mode = \"leading\" }\n";
    let w = World::start("", catalog).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acct", &recv.url("/before"), json!({})).await;
    let first = w.ingest("acct", "loc.changed", json!({"loc": "L1"})).await;
    w.wait_state(
        &common::first_delivery(&first),
        "delivered",
        Duration::from_secs(20),
    )
    .await;
    let again = w.ingest("acct", "loc.changed", json!({"loc": "L1"})).await;
    let d = w.delivery(&common::first_delivery(&again)).await;
    assert_eq!(d["state"], "skipped", "the window is open: {d}");

    let (status, purged) = w.herald.admin("DELETE", "/v1/accounts/acct", None).await;
    assert_eq!(status, 200, "{purged}");
    w.endpoint("acct", &recv.url("/after"), json!({})).await;
    let after = w.ingest("acct", "loc.changed", json!({"loc": "L1"})).await;
    let d = w
        .wait_state(
            &common::first_delivery(&after),
            "delivered",
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(d["last_status"], "delivered", "not debounced: {d}");
}

/// A purge takes every operator event about the account (`data.account_id`), with its
/// operator deliveries still pending: the admin reads none of them afterwards, and the
/// operator events about other accounts stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_takes_the_operator_events_about_the_account() {
    // The operator's receiver fails: its deliveries stay pending, waiting for a retry.
    let operator = Receiver::http(behaviour(|_, _| Reply::status(503)));
    let tables = format!(
        "[operator]\nwebhook_url = \"{}\"\nsecret = \"{OPERATOR_SECRET}\"\n",
        operator.url("/ops")
    );
    let w = World::start("allow_http = true", &tables).await;
    let recv = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    let h = &w.herald;
    for account in ["acct", "other"] {
        w.endpoint(
            account,
            &recv.url(&format!("/{account}")),
            json!({"retry_policy": "none"}),
        )
        .await;
        w.ingest(account, "order.created", json!({"marker": MARKER}))
            .await;
    }
    // Each account's failed delivery is a `delivery.failed` operator event.
    let operator_log = || async {
        let (status, v) = h.admin("GET", "/v1/deliveries?limit=100", None).await;
        assert_eq!(status, 200, "{v}");
        let mut about = Vec::new();
        let items = v["items"].as_array().unwrap();
        for d in items.iter().filter(|d| d["account_id"] == "_operator") {
            let (status, ev) = h
                .admin(
                    "GET",
                    &format!("/v1/events/{}", d["event_id"].as_str().unwrap()),
                    None,
                )
                .await;
            assert_eq!(status, 200, "{ev}");
            about.push((
                d["state"].as_str().unwrap().to_string(),
                ev["payload"]["data"]["account_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                d["event_id"].as_str().unwrap().to_string(),
            ));
        }
        about
    };
    common::wait_until(
        Duration::from_secs(20),
        "an operator event about each account",
        || async {
            let about = operator_log().await;
            ["acct", "other"]
                .iter()
                .all(|a| about.iter().any(|(_, of, _)| of == a))
        },
    )
    .await;
    let before = operator_log().await;
    assert!(
        before
            .iter()
            .any(|(state, of, _)| of == "acct" && state == "pending"),
        "one about the account waits for its retry: {before:?}"
    );

    let (status, purged) = h.admin("DELETE", "/v1/accounts/acct", None).await;
    assert_eq!(status, 200, "{purged}");
    let after = operator_log().await;
    assert!(
        after.iter().all(|(_, of, _)| of != "acct"),
        "none about the account: {after:?}"
    );
    assert!(
        after.iter().any(|(_, of, _)| of == "other"),
        "the other account's stay: {after:?}"
    );
    for (_, of, event) in &before {
        if of == "acct" {
            let (status, v) = h.admin("GET", &format!("/v1/events/{event}"), None).await;
            assert_eq!(status, 404, "{event}: {v}");
        }
    }
    let (_, all) = h.admin("GET", "/v1/deliveries", None).await;
    assert!(!all.to_string().contains("\"acct\""), "{all}");
}

/// The files under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if std::fs::read(&path)
            .unwrap()
            .windows(needle.len())
            .any(|w| w == needle)
        {
            found.push(path.display().to_string());
        }
    }
    found
}

/// A purge takes its endpoints' chart minutes: those in the store and those this node counted
/// but has not added yet, so a flush after the purge brings none back; the other account's
/// minutes stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_leaves_no_chart_minutes_of_its_endpoints() {
    use herald::store::prelude::*;
    const T0: i64 = 1_796_212_800_000;
    let w = World::start_manual("", "", T0).await;
    let recv = Receiver::ok_https(&w.ca);
    let (purged_ep, _) = w.endpoint("acct", &recv.url("/acct"), json!({})).await;
    let (kept_ep, _) = w.endpoint("other", &recv.url("/other"), json!({})).await;
    for account in ["acct", "other"] {
        let answer = w.ingest(account, "order.created", json!({})).await;
        let d = first_delivery(&answer);
        w.wait_state(&d, "delivered", Duration::from_secs(20)).await;
    }
    let running = w.herald.running();
    let (engine, store) = (&running.engine, &running.store);
    for ep in [&purged_ep, &kept_ep] {
        let minutes = engine.endpoint_minutes(ep, 0).await.unwrap();
        assert_eq!(minutes.len(), 1, "{ep} has its minute: {minutes:?}");
    }

    let (status, purged) = w.herald.admin("DELETE", "/v1/accounts/acct", None).await;
    assert_eq!(status, 200, "{purged}");
    engine.flush_minutes().await;
    assert_eq!(
        engine.endpoint_minutes(&purged_ep, 0).await.unwrap(),
        Vec::new(),
        "the purged endpoint's minutes are gone, flushed or not"
    );
    assert_eq!(
        store.endpoint_minutes(&purged_ep, 0).await.unwrap(),
        Vec::new(),
        "the flush after the purge added none"
    );
    assert_eq!(
        store.endpoint_minutes(&kept_ep, 0).await.unwrap().len(),
        1,
        "the other account's minute is stored"
    );
}

/// An attempt sent before its account's purge and answered after it, a final failure, tells
/// the operator nothing: no `delivery.failed` names the purged account (the purge took its
/// operator events, and a later one would outlive it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_answered_after_the_purge_reports_no_failure() {
    let (w, operator) = with_operator().await;
    let recv = Receiver::https(
        &w.ca,
        behaviour(|_, _| Reply::status(500).with_delay(Duration::from_millis(1500))),
    );
    w.endpoint("acct", &recv.url("/acct"), json!({"retry_policy": "none"}))
        .await;
    let h = &w.herald;
    let (status, answer) = h
        .ingest(json!({"account_id": "acct", "type": "order.created", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    common::wait_until(
        Duration::from_secs(20),
        "the attempt is under way",
        || async { recv.count() == 1 },
    )
    .await;
    let (status, purged) = h.admin("DELETE", "/v1/accounts/acct", None).await;
    assert_eq!(status, 200, "{purged}");
    // The attempt is over once it is counted and nothing runs (what it reports, it reported).
    common::wait_until(
        Duration::from_secs(20),
        "the attempt's answer came",
        || async {
            let (_, _, body) = h.call_raw("GET", "/metrics", None, &[], vec![]).await;
            let text = String::from_utf8_lossy(&body).to_string();
            text.contains("herald_attempts_total{status=\"http_error\"} 1")
                && text.contains("herald_in_flight_attempts 0")
        },
    )
    .await;
    let got = operator.wait_for(1, Duration::from_secs(20)).await;
    assert!(got.iter().any(|r| r.json()["type"] == "account.purged"));
    // What the failure would have made is in the log before the attempt is over.
    let (status, v) = h.admin("GET", "/v1/deliveries?limit=100", None).await;
    assert_eq!(status, 200, "{v}");
    let types: Vec<&str> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|d| d["event_type"].as_str())
        .collect();
    assert!(
        types.contains(&"account.purged") && !types.contains(&"delivery.failed"),
        "no delivery.failed about the purged account: {types:?}"
    );
}
