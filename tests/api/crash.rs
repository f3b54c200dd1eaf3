//! Crash safety: many kill -9 rounds at random moments (under 16 producers, with retries in flight,
//! and while a restart replays pending deliveries) lose no acknowledged event and leave nothing
//! stuck `pending`; a partial sled snapshot left by a crash does not keep the store from opening.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{behaviour, Herald, Receiver, Reply, World};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const PRODUCERS: usize = 16;
const ROUNDS: usize = 20;
/// Folding every second: kills land while history is folded too.
const FAST: &str = "[retry_policies]\nfast = [\"50ms\", \"100ms\", \"200ms\"]\n\
                    [storage]\nfold_after = \"1s\"\n";
/// The account whose endpoint always answers 200 (default retry policy).
const OK_ACCOUNT: &str = "acc-ok";
/// The account whose endpoint answers 500 to 30 % of requests (policy `fast`).
const FLAKY_ACCOUNT: &str = "acc-flaky";

/// `pending=N` from the latest `herald listening` line (how many deliveries the start replays).
fn pending_at_last_start(herald: &Herald) -> Option<usize> {
    let logs = herald.logs();
    let line = logs.iter().rev().find(|l| l.contains("herald listening"))?;
    line.split_whitespace()
        .find_map(|t| t.strip_prefix("pending="))
        .and_then(|v| v.trim_matches(|c: char| !c.is_ascii_digit()).parse().ok())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn parse_time_ms(s: &str) -> i64 {
    humantime::parse_rfc3339(s)
        .unwrap_or_else(|e| panic!("next_attempt_at {s:?} is not RFC 3339: {e}"))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Every `pending` delivery (all pages of `GET /v1/deliveries?state=pending`).
async fn pending_deliveries(herald: &Herald) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/deliveries?state=pending&limit=500&cursor={c}"),
            None => "/v1/deliveries?state=pending&limit=500".to_string(),
        };
        let (status, page) = herald.admin("GET", &path, None).await;
        assert_eq!(status, 200, "list pending deliveries: {page}");
        out.extend(page["items"].as_array().expect("items").iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_kill9_rounds_lose_no_acknowledged_event_and_leave_nothing_stuck() {
    let seed: u64 = std::env::var("HERALD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ms() as u64);
    eprintln!("crash test seed: HERALD_CRASH_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    // Asserts on the embedded store's folding.
    let mut w = World::start("", &format!("{FAST}{}", common::ON_SLED)).await;
    let ok = Receiver::ok_https(&w.ca);
    // 500 to 3 requests in 10 (by arrival), never two in a row: retries are in flight at every
    // kill, and no endpoint ever fails often enough in a row to trip a circuit breaker.
    let flaky = Receiver::https(
        &w.ca,
        behaviour(|_, i| {
            if matches!(i % 10, 2 | 5 | 8) {
                Reply::status(500)
            } else {
                Reply::status(200)
            }
        }),
    );
    w.endpoint(OK_ACCOUNT, &ok.url("/ok"), json!({})).await;
    w.endpoint(
        FLAKY_ACCOUNT,
        &flaky.url("/flaky"),
        json!({"retry_policy": "fast"}),
    )
    .await;

    let mut acked: HashMap<&'static str, Vec<String>> = HashMap::new();
    let mut replay_kills = 0;
    for round in 0..ROUNDS {
        let flaky_round = round % 3 == 1 || rng.gen_bool(0.2);
        let account = if flaky_round {
            FLAKY_ACCOUNT
        } else {
            OK_ACCOUNT
        };
        // Kill after a number of acks that differs per round: sometimes at the very start of a
        // run, mostly somewhere in the middle of a busy one.
        let target = if rng.gen_bool(0.25) {
            rng.gen_range(1..=10)
        } else {
            rng.gen_range(20..=1200)
        };
        eprintln!("round {round}: {account}, kill after {target} acks");

        let stop = Arc::new(AtomicBool::new(false));
        let round_acked = Arc::new(Mutex::new(Vec::new()));
        let tasks = common::herald::spawn_producers(
            &w.herald.base_url(),
            (account, "crash.test"),
            PRODUCERS,
            &stop,
            &round_acked,
        );
        common::wait_until(
            Duration::from_secs(30),
            &format!("round {round}: {target} events were acknowledged"),
            || async { round_acked.lock().unwrap().len() >= target },
        )
        .await;
        w.herald.kill9();
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        acked
            .entry(account)
            .or_default()
            .extend(round_acked.lock().unwrap().drain(..));

        // Arrivals so far: the replay may be under way (or over) by the time `restart` returns.
        let (before_ok, before_flaky) = (ok.count(), flaky.count());
        // The store must open after every kill (restart panics unless `herald listening`).
        w.herald.restart().await;

        // Every fourth round (at a random phase), kill again right after the listening line,
        // while the start replays pending deliveries: at once, or after a few replayed attempts.
        if round % 4 == 3 || rng.gen_bool(0.1) {
            let pending = pending_at_last_start(&w.herald).unwrap_or(0);
            let after = rng.gen_range(0..=5).min(pending);
            common::wait_until(
                Duration::from_secs(10),
                &format!("round {round}: {after} replayed attempts arrived"),
                || async { ok.count() + flaky.count() >= before_ok + before_flaky + after },
            )
            .await;
            eprintln!("round {round}: killing during replay ({pending} pending, {after} sent)");
            w.herald.kill9();
            replay_kills += 1;
            w.herald.restart().await;
        }
    }
    assert!(replay_kills > 0, "no round killed herald during a replay");

    // Nothing acknowledged twice, and every acknowledged event arrived at its endpoint.
    for (account, recv) in [(OK_ACCOUNT, &ok), (FLAKY_ACCOUNT, &flaky)] {
        let ids = acked.get(account).cloned().unwrap_or_default();
        let want: HashSet<String> = ids.iter().cloned().collect();
        assert_eq!(want.len(), ids.len(), "an event id was acknowledged twice");
        eprintln!("{account}: {} acknowledged events", want.len());
        let mut missing = Vec::new();
        let deadline = Duration::from_secs(45);
        let waited = tokio::time::timeout(deadline, async {
            loop {
                let seen = recv.webhook_ids();
                missing = want.difference(&seen).cloned().collect::<Vec<_>>();
                if missing.is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        if waited.is_err() {
            let mut detail = Vec::new();
            for id in missing.iter().take(5) {
                let (status, event) = w
                    .herald
                    .admin("GET", &format!("/v1/events/{id}"), None)
                    .await;
                detail.push(format!("{id}: GET /v1/events -> {status} {event}"));
            }
            panic!(
                "{account}: {} acknowledged event(s) never arrived within {deadline:?} \
                 (seed {seed}); first ones:\n{}",
                missing.len(),
                detail.join("\n")
            );
        }
    }

    // History was folded meanwhile, and every acknowledged event reads back, folded or not.
    let folded = w
        .herald
        .logs()
        .iter()
        .filter(|l| l.contains("history folded"))
        .count();
    assert!(folded > 0, "nothing was folded");
    let all: Vec<&String> = acked.values().flatten().collect();
    for _ in 0..200.min(all.len()) {
        let id = all[rng.gen_range(0..all.len())];
        let (status, event) = w
            .herald
            .admin("GET", &format!("/v1/events/{id}"), None)
            .await;
        assert_eq!(status, 200, "{id}: {event}");
        assert_eq!(event["id"], json!(id), "{event}");
    }

    // Nothing stays pending past its due time once things settle.
    let mut overdue: Vec<Value> = Vec::new();
    let settled = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let now = now_ms();
            overdue = pending_deliveries(&w.herald)
                .await
                .into_iter()
                .filter(|d| match d["next_attempt_at"].as_str() {
                    Some(at) => parse_time_ms(at) < now - 2000,
                    None => true, // pending without a due time is stuck for good
                })
                .collect();
            if overdue.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        settled.is_ok(),
        "{} pending deliveries are more than 2 s past due (seed {seed}), e.g. {:?}",
        overdue.len(),
        overdue.iter().take(5).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_opens_after_a_kill_during_a_snapshot_write() {
    let mut w = World::start("", common::ON_SLED).await;
    let recv = Receiver::ok_https(&w.ca);
    w.endpoint("acc", &recv.url("/hook"), json!({})).await;
    let mut events = Vec::new();
    for i in 0..40 {
        let answer = w.ingest("acc", "snap.test", json!({ "i": i })).await;
        events.push((answer["event_id"].as_str().unwrap().to_string(), i));
    }
    w.herald.kill9();

    // What sled leaves when killed while writing a snapshot: a partial `snap.*.generating`.
    let partial = w
        .herald
        .storage_path()
        .join("snap.0000000000001234.generating");
    let garbage: Vec<u8> = (0..64 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&partial, garbage).unwrap();

    w.herald.restart().await;
    let line = w
        .herald
        .wait_for_log("snap.0000000000001234.generating", Duration::from_secs(5))
        .await;
    assert!(
        line.to_lowercase().contains("partial") && line.to_lowercase().contains("remov"),
        "the log line does not say the partial snapshot was removed: {line}"
    );
    assert!(!partial.exists(), "the partial snapshot is still there");

    for (id, i) in &events {
        let (status, event) = w
            .herald
            .admin("GET", &format!("/v1/events/{id}"), None)
            .await;
        assert_eq!(status, 200, "acknowledged event {id} lost: {event}");
        assert_eq!(event["payload"], json!({ "i": i }), "{event}");
    }
    // And it goes on working: a new event is stored and delivered.
    let answer = w.ingest("acc", "snap.test", json!({"after": true})).await;
    let id = answer["event_id"].as_str().unwrap().to_string();
    common::wait_until(
        Duration::from_secs(15),
        "the new event and every earlier one arrived",
        || async {
            let seen = recv.webhook_ids();
            seen.contains(&id) && events.iter().all(|(e, _)| seen.contains(e))
        },
    )
    .await;
}

/// Idempotency keys are written to their own database after the commit's fsync and synced
/// once a second: a kill -9 takes the last second's keys with it, and the next
/// start writes them again from the log. Every key acknowledged before the kill answers as a
/// duplicate of its first event afterwards, over several rounds killed at random moments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_idempotency_keys_survive_kill9() {
    let seed: u64 = rand::random();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut herald = Herald::start("").await;
    for round in 0..3 {
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let producers: Vec<_> = (0..8)
            .map(|p| {
                let (base, stop, acked) = (herald.base_url(), stop.clone(), acked.clone());
                tokio::spawn(async move {
                    let client = common::herald::new_client();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let key = format!("r{round}-p{p}-n{n}");
                        let body = json!({"account_id": "acc", "type": "keyed.event",
                                          "payload": {"n": n}, "idempotency_key": key});
                        match common::herald::post_event(&client, &base, &body).await {
                            Ok(Some(id)) => acked.lock().unwrap().push((key, id)),
                            Ok(None) => continue,
                            Err(_) => return,
                        }
                    }
                })
            })
            .collect();
        // Killed somewhere between 200 and 1,200 acknowledgements in.
        let kill_at = rng.gen_range(200..1_200);
        common::wait_until(
            Duration::from_secs(60),
            "producers are acknowledged",
            || async { acked.lock().unwrap().len() >= kill_at },
        )
        .await;
        herald.kill9();
        stop.store(true, Ordering::Relaxed);
        for p in producers {
            let _ = p.await;
        }
        herald.restart().await;

        let acked = acked.lock().unwrap().clone();
        for (key, id) in &acked {
            let (status, again) = herald
                .ingest(json!({"account_id": "acc", "type": "keyed.event",
                               "payload": {"again": true}, "idempotency_key": key}))
                .await;
            assert_eq!(status, 202, "{again}");
            assert_eq!(
                (&again["duplicate"], again["event_id"].as_str()),
                (&json!(true), Some(id.as_str())),
                "round {round}: key {key} (first event {id}) was forgotten by the kill"
            );
        }
    }
}
