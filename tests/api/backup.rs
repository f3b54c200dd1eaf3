//! Online backup and restore with the real processes (docs/operations.md, "Backup and
//! restore"): `herald backup` while producers post and a receiver fails half the attempts, the
//! archive restored into a new directory and into a new database, and the restored heralds
//! serving it.

use crate::common;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::herald::{herald_bin, Launch};
use common::{behaviour, Herald, HeraldApi, Receiver, Reply, World};
use serde_json::json;

const PRODUCERS: usize = 8;

/// Runs `herald ARGS` to its end; its exit status and its stdout and stderr.
async fn run(args: Vec<String>) -> (bool, String) {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(herald_bin())
            .args(&args)
            .output()
            .expect("run herald")
    })
    .await
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn arg(p: &Path) -> String {
    p.display().to_string()
}

/// A config for `herald backup` in `dir`: `h`'s, with the address it listens on (the herald
/// under test picked its port).
pub fn backup_config(h: &Herald, dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(h.config_path())
        .unwrap()
        .replace("127.0.0.1:0", &h.addr().to_string());
    let path = dir.join("backup.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `herald backup --config CONFIG --out ARCHIVE`.
async fn backup_to(config: &Path, archive: &Path) -> (bool, String) {
    run(vec![
        "backup".into(),
        "--config".into(),
        arg(config),
        "--out".into(),
        arg(archive),
    ])
    .await
}

/// The stores a restore goes into, in `dir` and a new database: each as `--to` names it, how
/// a herald starts on it, and its `[storage]` table.
fn restore_targets(dir: &Path) -> [(String, Launch, String); 2] {
    let restored_dir = dir.join("restored");
    let url = common::postgres::shared_database();
    [
        (
            format!("sled:{}", restored_dir.display()),
            Launch {
                storage: Some(restored_dir),
                ..Launch::default()
            },
            "[storage]\nbackend = \"sled\"\n".to_string(),
        ),
        (
            format!("postgres:{url}"),
            Launch::default(),
            format!("[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {url:?}\n"),
        ),
    ]
}

/// `herald restore --to TO ARCHIVE`.
async fn restore_to(to: &str, archive: &Path) -> (bool, String) {
    run(vec![
        "restore".into(),
        "--to".into(),
        to.into(),
        arg(archive),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_load_restores_into_a_new_directory_and_a_new_database() {
    let w = World::start("", "[retry_policies]\nquick = [\"1s\", \"1s\"]\n").await;
    // Half the attempts fail while the backup is taken; every one succeeds afterwards.
    let failing = Arc::new(AtomicBool::new(true));
    let recv = Receiver::https(&w.ca, {
        let failing = failing.clone();
        behaviour(
            move |_, i| match failing.load(Ordering::Relaxed) && i % 2 == 0 {
                true => Reply::status(500),
                false => Reply::status(200),
            },
        )
    });
    let (_, secret) = w
        .endpoint(
            "acc",
            &recv.url("/hook"),
            json!({"retry_policy": "quick", "filter": filter()}),
        )
        .await;
    let (status, first) = w
        .herald
        .ingest(
            json!({"account_id": "acc", "type": "order.created", "payload": {"first": true},
                       "idempotency_key": "the-first"}),
        )
        .await;
    assert_eq!(status, 202, "{first}");

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let producers = common::herald::spawn_producers(
        &w.herald.base_url(),
        ("acc", "load.test"),
        PRODUCERS,
        &stop,
        &acked,
    );
    common::wait_until(
        Duration::from_secs(30),
        "events were acknowledged before the backup",
        || async { acked.lock().unwrap().len() >= 300 },
    )
    .await;
    let mut before: Vec<String> = acked.lock().unwrap().clone();
    before.push(first["event_id"].as_str().unwrap().to_string());

    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("herald.backup");
    let backup_config = backup_config(&w.herald, dir.path());
    let (ok, out) = run(vec![
        "backup".into(),
        "--config".into(),
        arg(&backup_config),
        "--out".into(),
        arg(&archive),
    ])
    .await;
    assert!(ok, "herald backup: {out}");
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await.unwrap();
    }
    assert!(
        acked.lock().unwrap().len() > before.len(),
        "producers were acknowledged while the backup ran"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the archive is private");
    let (ok, checked) = run(vec!["restore".into(), "--check".into(), arg(&archive)]).await;
    assert!(ok, "herald restore --check: {checked}");

    // The source stops; its receiver takes everything from now on.
    let mut source = w.herald;
    source.sigterm().await;
    failing.store(false, Ordering::Relaxed);

    let ca_file = w.ca.write_ca_file(dir.path());
    let tables = format!(
        "{}\n[retry_policies]\nquick = [\"1s\", \"1s\"]\n",
        common::delivery_toml(&ca_file)
    );
    for (to, launch, storage) in restore_targets(dir.path()) {
        let (ok, out) = restore_to(&to, &archive).await;
        assert!(ok, "herald restore --to {to}: {out}");
        let (ok, again) = restore_to(&to, &archive).await;
        assert!(
            !ok && again.contains("not empty"),
            "{to}: a second restore into it is refused: {again}"
        );

        let restored = Herald::start_with(&format!("{tables}{storage}"), launch).await;
        check_restored(&restored, &to, &before, &first).await;
        // Every pending delivery is delivered, signed with the endpoint's secret.
        common::wait_until(
            Duration::from_secs(60),
            "the restored herald delivered everything pending",
            || async {
                let (_, status) = restored.admin("GET", "/v1/status", None).await;
                status["queue"]["pending"].as_u64() == Some(0)
            },
        )
        .await;
        for r in recv.requests() {
            let signed = common::sig::verify(
                &secret,
                r.header("webhook-id").unwrap_or_default(),
                r.header("webhook-timestamp").unwrap_or_default(),
                &r.body,
                r.header("webhook-signature").unwrap_or_default(),
            );
            assert!(
                signed,
                "{to}: every request verifies with the endpoint's secret"
            );
        }
        let delivered = recv.webhook_ids();
        let missing: Vec<_> = before
            .iter()
            .filter(|id| !delivered.contains(*id))
            .collect();
        assert!(missing.is_empty(), "{to}: never delivered: {missing:?}");
    }
}

/// Every event acknowledged before the backup is in the restored store once, with its delivery;
/// the idempotency key still answers the first event.
/// The endpoint's payload filter (it takes every event of the test): a restore keeps it.
fn filter() -> serde_json::Value {
    json!({"type": {"$neq": "never.sent"}})
}

async fn check_restored(h: &Herald, to: &str, before: &[String], first: &serde_json::Value) {
    let (status, eps) = h.admin("GET", "/v1/accounts/acc/endpoints", None).await;
    assert_eq!(status, 200, "{to}: {eps}");
    assert_eq!(eps["items"][0]["filter"], filter(), "{to}: {eps}");
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/deliveries?limit=100&cursor={c}"),
            None => "/v1/deliveries?limit=100".into(),
        };
        let (status, page) = h.admin("GET", &path, None).await;
        assert_eq!(status, 200, "{to}: {page}");
        for d in page["items"].as_array().unwrap() {
            assert!(
                seen.insert(d["event_id"].as_str().unwrap().to_string()),
                "{to}: event {} has one delivery, listed once",
                d["event_id"]
            );
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let missing: Vec<_> = before.iter().filter(|id| !seen.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{to}: missing after the restore: {missing:?}"
    );
    let (status, dup) = h
        .ingest(
            json!({"account_id": "acc", "type": "order.created", "payload": {"first": true},
                       "idempotency_key": "the-first"}),
        )
        .await;
    assert_eq!(status, 202, "{to}: {dup}");
    assert_eq!(dup["duplicate"], true, "{to}: {dup}");
    assert_eq!(dup["event_id"], first["event_id"], "{to}: {dup}");
}

/// An archive written by herald 0.1.0 (format 1): every later herald must still check and
/// restore it, into either store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_of_format_1_still_restores() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-1.herald-backup");
    let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&fixture)]).await;
    assert!(ok, "herald restore --check: {out}");
    assert!(out.contains("3 events, 3 deliveries"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    for (to, launch, storage) in restore_targets(dir.path()) {
        let (ok, out) = restore_to(&to, &fixture).await;
        assert!(ok, "herald restore --to {to}: {out}");
        let h = Herald::start_with(&storage, launch).await;
        let (status, ep) = h
            .admin("GET", "/v1/endpoints/ep_01M92X6ZGA4NXYPMT5GB6XW8S5", None)
            .await;
        assert_eq!(status, 200, "{to}: {ep}");
        assert_eq!(ep["description"], "fixture", "{to}: {ep}");
        for (id, n) in [
            ("evt_01M92X6ZGR05A47SE3HVC4JW00", 1),
            ("evt_01M92X6ZGY1X5P0HQTA32YWG00", 2),
            ("evt_01M92X6ZH472TMA26H5ARV1G00", 3),
        ] {
            let (status, ev) = h.admin("GET", &format!("/v1/events/{id}"), None).await;
            assert_eq!(status, 200, "{to}: {id}: {ev}");
            assert_eq!(
                ev["payload"]["marker"],
                format!("fixture-{n}"),
                "{to}: {ev}"
            );
        }
    }
}

/// An archive of format 4 (tests/fixtures/backup/format-4.herald-backup, taken of the format-11
/// data directory: the last without endpoints' last successes) restores into either store, its
/// endpoints with no last success; a backup taken after a delivery carries the last success it
/// kept, and a restore of that one keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_of_format_4_restores_and_a_later_one_carries_last_successes() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-4.herald-backup");
    let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&fixture)]).await;
    assert!(ok, "herald restore --check: {out}");
    assert!(
        out.contains("format 4") && out.contains("30 events, 30 deliveries"),
        "{out}"
    );
    let tables = "[delivery]\nallow_http = true\nallow_private_networks = [\"127.0.0.0/8\"]\n\
                  [retry_policies]\nslow = [\"1h\"]\n[plans.basic]\nper_minute = 1000\n";
    let ok_ep = "ep_01M96CKNY803RZX81VZ5FCE0RC";
    let path = format!("/v1/endpoints/{ok_ep}");
    let recv = Receiver::ok_http();
    let dir = tempfile::tempdir().unwrap();
    for (to, launch, storage) in restore_targets(dir.path()) {
        let (ok, out) = restore_to(&to, &fixture).await;
        assert!(ok, "herald restore --to {to}: {out}");
        let mut h = Herald::start_with(&format!("{tables}{storage}"), launch).await;
        let (status, ep) = h.admin("GET", &path, None).await;
        assert_eq!(status, 200, "{to}: {ep}");
        assert_eq!(ep["last_success_at"], json!(null), "{to}: {ep}");
        let (status, _) = h
            .admin("PATCH", &path, Some(json!({"url": recv.url("/hook")})))
            .await;
        assert_eq!(status, 200, "{to}");
        let (status, answer) = h
            .ingest(json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 9}}))
            .await;
        assert_eq!(status, 202, "{to}: {answer}");
        common::wait_until(Duration::from_secs(20), "the success is kept", || async {
            h.admin("GET", &path, None).await.1["last_success_at"].is_string()
        })
        .await;
        let shown = h.admin("GET", &path, None).await.1["last_success_at"].clone();
        // A stop flushes it into the store (the minutes' flush); started again, herald reads it
        // from there alone.
        assert!(h.sigterm().await.success(), "{to}");
        h.restart().await;
        let (_, ep) = h.admin("GET", &path, None).await;
        assert_eq!(ep["last_success_at"], shown, "{to}: kept in the store");
        let archive = dir
            .path()
            .join(format!("after-{}.backup", to.split(':').next().unwrap()));
        let config = backup_config(&h, dir.path());
        let (ok, out) = backup_to(&config, &archive).await;
        assert!(ok, "{to}: herald backup: {out}");
        let bytes = std::fs::read(&archive).unwrap();
        assert_eq!(
            find(&bytes, b"herald-backup 7\n"),
            Some(0),
            "{to}: format 6"
        );
        let again = dir
            .path()
            .join(format!("again-{}", to.split(':').next().unwrap()));
        let (ok, out) = restore_to(&format!("sled:{}", again.display()), &archive).await;
        assert!(ok, "{to}: restore of the later backup: {out}");
        let h2 = Herald::start_with(
            &format!("{tables}[storage]\nbackend = \"sled\"\n"),
            Launch {
                storage: Some(again),
                ..Launch::default()
            },
        )
        .await;
        let (_, ep) = h2.admin("GET", &path, None).await;
        assert_eq!(
            ep["last_success_at"], shown,
            "{to}: restored with its last success"
        );
    }
}

/// An archive of format 5 (tests/fixtures/backup/format-5.herald-backup, taken of the format-12
/// data directory: the last without attempts' response headers) restores into either store, its
/// attempts with no response headers; a backup taken after a delivery carries the headers its
/// attempt kept, and a restore of that one keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_of_format_5_restores_and_a_later_one_carries_response_headers() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-5.herald-backup");
    let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&fixture)]).await;
    assert!(ok, "herald restore --check: {out}");
    assert!(out.contains("format 5"), "{out}");
    let tables = "[delivery]\nallow_http = true\nallow_private_networks = [\"127.0.0.0/8\"]\n\
                  [retry_policies]\nslow = [\"1h\"]\n[plans.basic]\nper_minute = 1000\n";
    let ok_ep = "ep_01M96N2JMXFAMXVNH5JZC1X4G0";
    let recv = Receiver::http(behaviour(|_, _| {
        Reply::status(200).with_header("x-receiver-id", "rcv-5")
    }));
    let dir = tempfile::tempdir().unwrap();
    for (to, launch, storage) in restore_targets(dir.path()) {
        let (ok, out) = restore_to(&to, &fixture).await;
        assert!(ok, "herald restore --to {to}: {out}");
        let h = Herald::start_with(&format!("{tables}{storage}"), launch).await;
        let (_, list) = h
            .admin("GET", "/v1/deliveries?account_id=acct_ok&limit=1", None)
            .await;
        let old = list["items"][0]["id"]
            .as_str()
            .expect("a delivery")
            .to_string();
        let (_, d) = h.admin("GET", &format!("/v1/deliveries/{old}"), None).await;
        assert_eq!(d["attempts"][0]["http_status"], json!(200), "{to}: {d}");
        assert_eq!(d["attempts"][0]["response_headers"], json!({}), "{to}: {d}");
        let (status, _) = h
            .admin(
                "PATCH",
                &format!("/v1/endpoints/{ok_ep}"),
                Some(json!({"url": recv.url("/hook")})),
            )
            .await;
        assert_eq!(status, 200, "{to}");
        let (status, answer) = h
            .ingest(json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 9}}))
            .await;
        assert_eq!(status, 202, "{to}: {answer}");
        let new = common::first_delivery(&answer);
        let path = format!("/v1/deliveries/{new}");
        common::wait_until(
            Duration::from_secs(20),
            "the attempt is recorded",
            || async { h.admin("GET", &path, None).await.1["state"] == "delivered" },
        )
        .await;
        let archive = dir
            .path()
            .join(format!("headers-{}.backup", to.split(':').next().unwrap()));
        let config = backup_config(&h, dir.path());
        let (ok, out) = backup_to(&config, &archive).await;
        assert!(ok, "{to}: herald backup: {out}");
        let again = dir
            .path()
            .join(format!("headers-again-{}", to.split(':').next().unwrap()));
        let (ok, out) = restore_to(&format!("sled:{}", again.display()), &archive).await;
        assert!(ok, "{to}: restore of the later backup: {out}");
        let h2 = Herald::start_with(
            &format!("{tables}[storage]\nbackend = \"sled\"\n"),
            Launch {
                storage: Some(again),
                ..Launch::default()
            },
        )
        .await;
        let (_, d) = h2.admin("GET", &path, None).await;
        assert_eq!(
            d["attempts"][0]["response_headers"]["x-receiver-id"], "rcv-5",
            "{to}: restored with its response headers: {d}"
        );
    }
}

/// An archive of format 6 (tests/fixtures/backup/format-6.herald-backup, taken of the format-14
/// data directory: the last without events' trace contexts) restores into either store, its
/// events with no context; a backup taken after an event came with a `traceparent` carries the
/// context, and a restore of that one keeps it: a retry after it still passes the context on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_of_format_6_restores_and_a_later_one_carries_trace_contexts() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-6.herald-backup");
    let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&fixture)]).await;
    assert!(ok, "herald restore --check: {out}");
    assert!(out.contains("format 6"), "{out}");
    let tables = "[delivery]\nallow_http = true\nallow_private_networks = [\"127.0.0.0/8\"]\n\
                  [retry_policies]\nslow = [\"1h\"]\n[plans.basic]\nper_minute = 1000\n";
    let ok_ep = "ep_01M96XX97Z741YJX58X36JW1XB";
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let recv = Receiver::ok_http();
    let dir = tempfile::tempdir().unwrap();
    for (to, launch, storage) in restore_targets(dir.path()) {
        let (ok, out) = restore_to(&to, &fixture).await;
        assert!(ok, "herald restore --to {to}: {out}");
        let h = Herald::start_with(&format!("{tables}{storage}"), launch).await;
        let (status, _) = h
            .admin(
                "PATCH",
                &format!("/v1/endpoints/{ok_ep}"),
                Some(json!({"url": recv.url("/hook"), "propagate_trace": true})),
            )
            .await;
        assert_eq!(status, 200, "{to}");
        let (_, list) = h
            .admin("GET", "/v1/deliveries?account_id=acct_ok&limit=1", None)
            .await;
        let old = list["items"][0]["id"]
            .as_str()
            .expect("a delivery")
            .to_string();
        let seen = recv.count();
        let (status, _) = h
            .admin("POST", &format!("/v1/deliveries/{old}/retry"), None)
            .await;
        assert!(status < 300, "{to}");
        let got = recv.wait_for(seen + 1, Duration::from_secs(20)).await;
        assert_eq!(
            got[seen].header("traceparent"),
            None,
            "{to}: format 6 kept none"
        );
        let (status, _, answer) = h
            .call_raw(
                "POST",
                "/v1/events",
                Some(common::herald::INGEST_TOKEN),
                &[("content-type", "application/json"), ("traceparent", trace)],
                br#"{"account_id":"acct_ok","type":"order.created","payload":{"n":9}}"#.to_vec(),
            )
            .await;
        assert_eq!(status, 202, "{to}");
        let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        let new = common::first_delivery(&answer);
        let path = format!("/v1/deliveries/{new}");
        common::wait_until(
            Duration::from_secs(20),
            "the attempt is recorded",
            || async { h.admin("GET", &path, None).await.1["state"] == "delivered" },
        )
        .await;
        let archive = dir
            .path()
            .join(format!("trace-{}.backup", to.split(':').next().unwrap()));
        let config = backup_config(&h, dir.path());
        let (ok, out) = backup_to(&config, &archive).await;
        assert!(ok, "{to}: herald backup: {out}");
        let again = dir
            .path()
            .join(format!("trace-again-{}", to.split(':').next().unwrap()));
        let (ok, out) = restore_to(&format!("sled:{}", again.display()), &archive).await;
        assert!(ok, "{to}: restore of the later backup: {out}");
        drop(h);
        let h2 = Herald::start_with(
            &format!("{tables}[storage]\nbackend = \"sled\"\n"),
            Launch {
                storage: Some(again),
                ..Launch::default()
            },
        )
        .await;
        let seen = recv.count();
        let (status, _) = h2.admin("POST", &format!("{path}/retry"), None).await;
        assert!(status < 300, "{to}");
        let got = recv.wait_for(seen + 1, Duration::from_secs(20)).await;
        assert_eq!(
            got[seen].header("traceparent"),
            Some(trace),
            "{to}: restored with its trace context"
        );
    }
}

/// An archive with one byte flipped, or cut short, is refused by `restore --check` and by
/// `restore`, naming the part; the restore writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_archive_is_refused_naming_its_part_and_changes_nothing() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-1.herald-backup");
    let whole = std::fs::read(&fixture).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A byte in the middle of the events part's body, and the archive cut inside that body.
    let events_at = find(&whole, b"{\"part\":\"events\"").expect("an events part");
    let body_at = events_at + whole[events_at..].iter().position(|b| *b == b'\n').unwrap() + 1;
    let mut flipped = whole.clone();
    flipped[body_at + 10] ^= 0x40;
    for (name, bytes) in [
        ("flipped", flipped),
        ("cut", whole[..body_at + 10].to_vec()),
    ] {
        let archive = dir.path().join(name);
        std::fs::write(&archive, bytes).unwrap();
        let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&archive)]).await;
        assert!(!ok, "{name}: --check refuses it: {out}");
        assert!(out.contains("part 2 (events) is damaged"), "{name}: {out}");
        let target = dir.path().join(format!("{name}-restored"));
        let (ok, out) = restore_to(&format!("sled:{}", target.display()), &archive).await;
        assert!(!ok, "{name}: restore refuses it: {out}");
        assert!(out.contains("part 2 (events) is damaged"), "{name}: {out}");
        assert!(!target.exists(), "{name}: nothing was written");
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `kill -9` of `herald backup` while it downloads, then of herald while a backup streams: no
/// archive is left under the final name either time, and the store is whole after the restart
/// (a backup taken then holds every event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_killed_on_either_side_leaves_no_archive_and_the_store_whole() {
    let mut w = World::start("", "[server]\nmax_body_bytes = 4194304\n").await;
    // Enough incompressible payload that a backup takes a while to stream.
    const EVENTS: usize = 40_000;
    for _ in 0..EVENTS / 1000 {
        let events: Vec<_> = (0..1000)
            .map(|_| {
                let pad: String = (0..16)
                    .map(|_| format!("{:032x}", rand::random::<u128>()))
                    .collect();
                json!({"account_id": "acc", "type": "order.created", "payload": {"pad": pad}})
            })
            .collect();
        let (status, answer) = w.herald.ingest_batch(json!(events)).await;
        assert_eq!(status, 202, "{answer}");
    }
    let dir = tempfile::tempdir().unwrap();
    let config = |h: &Herald| backup_config(h, dir.path());
    let start_backup = |config: &Path, out: &Path| {
        Command::new(herald_bin())
            .args(["backup", "--config"])
            .arg(config)
            .arg("--out")
            .arg(out)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let partial = |out: &Path| {
        out.with_file_name(format!(
            ".{}.partial",
            out.file_name().unwrap().to_string_lossy()
        ))
    };

    // kill -9 of `herald backup` while it downloads.
    let out = dir.path().join("a.backup");
    let mut client = start_backup(&config(&w.herald), &out);
    common::wait_until(Duration::from_secs(30), "the download began", || async {
        partial(&out).exists()
    })
    .await;
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(
        !out.exists(),
        "a killed backup leaves no archive under the final name"
    );

    // kill -9 of herald while it streams a backup.
    let out = dir.path().join("b.backup");
    let mut client = start_backup(&config(&w.herald), &out);
    common::wait_until(Duration::from_secs(30), "the download began", || async {
        partial(&out).exists()
    })
    .await;
    w.herald.kill9();
    let status = tokio::task::spawn_blocking(move || client.wait().unwrap())
        .await
        .unwrap();
    assert!(!status.success(), "the backup of a killed herald fails");
    assert!(!out.exists(), "no archive under the final name");
    assert!(!partial(&out).exists(), "the partial archive is removed");

    // The store is whole: a backup taken after the restart holds every event.
    w.herald.restart().await;
    let out = dir.path().join("c.backup");
    let mut client = start_backup(&config(&w.herald), &out);
    let status = tokio::task::spawn_blocking(move || client.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "a backup after the restart");
    let (ok, checked) = run(vec!["restore".into(), "--check".into(), arg(&out)]).await;
    assert!(ok, "{checked}");
    assert!(
        checked.contains(&format!(" {EVENTS} events,")),
        "every event is there: {checked}"
    );
}

/// `herald backup` creates its temporary file anew, mode 0600: a stale partial archive of
/// mode 0644 is replaced (the archive is 0600), and a link planted at the temporary name is
/// removed, not followed (its target is untouched; the archive is a regular file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_never_writes_through_what_is_at_its_temporary_name() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let h = Herald::start("").await;
    let (status, answer) = h
        .ingest(json!({"account_id": "acc", "type": "order.created", "payload": {"a": 1}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    let dir = tempfile::tempdir().unwrap();
    let config = backup_config(&h, dir.path());
    let backup = |out: std::path::PathBuf| {
        let config = config.clone();
        async move {
            run(vec![
                "backup".into(),
                "--config".into(),
                arg(&config),
                "--out".into(),
                arg(&out),
            ])
            .await
        }
    };

    // A stale partial archive, mode 0644.
    let c = dir.path().join("c.bak");
    let c_partial = dir.path().join(".c.bak.partial");
    std::fs::write(&c_partial, b"stale").unwrap();
    std::fs::set_permissions(&c_partial, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, out) = backup(c.clone()).await;
    assert!(ok, "herald backup: {out}");
    let meta = std::fs::symlink_metadata(&c).unwrap();
    assert!(meta.file_type().is_file(), "{meta:?}");
    assert_eq!(meta.mode() & 0o777, 0o600, "the archive is private");
    assert!(
        !c_partial.exists(),
        "the partial archive took the final name"
    );

    // A link planted at the temporary name, to a file of someone else's.
    let d = dir.path().join("d.bak");
    let d_partial = dir.path().join(".d.bak.partial");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"untouched").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&victim, &d_partial).unwrap();
    let (ok, out) = backup(d.clone()).await;
    assert!(ok, "herald backup: {out}");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"untouched",
        "not followed"
    );
    assert_eq!(
        std::fs::metadata(&victim).unwrap().mode() & 0o777,
        0o644,
        "the link's target keeps its mode"
    );
    let meta = std::fs::symlink_metadata(&d).unwrap();
    assert!(meta.file_type().is_file(), "a regular file: {meta:?}");
    assert_eq!(meta.mode() & 0o777, 0o600, "the archive is private");
    let (ok, checked) = run(vec!["restore".into(), "--check".into(), arg(&d)]).await;
    assert!(ok, "{checked}");
    assert!(checked.contains(" 1 events,"), "{checked}");
}

/// Runs `herald ARGS` to its end, reading its peak resident memory (`VmHWM`) every few
/// `herald restore --to sled:TARGET ARCHIVE`, measured as [`run_measured`] measures.
async fn restore_measured(target: &Path, archive: &Path) -> (bool, String, u64) {
    run_measured(vec![
        "restore".into(),
        "--to".into(),
        format!("sled:{}", target.display()),
        arg(archive),
    ])
    .await
}

/// milliseconds while it runs: its exit status, its output and the peak in KiB.
async fn run_measured(args: Vec<String>) -> (bool, String, u64) {
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(herald_bin())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run herald");
        let status_file = format!("/proc/{}/status", child.id());
        let mut peak = 0u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Ok(text) = std::fs::read_to_string(&status_file) {
                peak = peak.max(proc_status_kib(&text, "VmHWM:").unwrap_or(0));
            }
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "herald {args:?} ran 120 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        };
        let out = child.wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (status.success(), text, peak)
    })
    .await
    .unwrap()
}

/// A part of an archive: its header line (naming `raw_bytes` when given) and `body`.
fn crafted_part(
    kind: &str,
    index: u64,
    records: u64,
    raw_bytes: Option<u64>,
    body: &[u8],
) -> Vec<u8> {
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut header = json!({"part": kind, "index": index, "records": records,
        "deliveries": 0, "bytes": body.len(), "sha256": sha});
    if let Some(raw) = raw_bytes {
        header["raw_bytes"] = json!(raw);
    }
    let mut out = serde_json::to_vec(&header).unwrap();
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// `n` MiB of `byte`, compressed a MiB at a time.
fn zstd_of(byte: u8, mib: usize) -> Vec<u8> {
    use std::io::Write;
    let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    let chunk = vec![byte; 1 << 20];
    for _ in 0..mib {
        z.write_all(&chunk).unwrap();
    }
    z.finish().unwrap()
}

/// A small archive whose events part decompresses to far more than it may: in format 3 past
/// the `raw_bytes` its header names, and in format 2 (no `raw_bytes`) a record of 512 MiB or
/// 512 MiB of empty lines. `restore --check` and `restore` name the part damaged, write
/// nothing, and their peak memory stays within 64 MiB of what checking a small archive takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compression_bomb_is_named_damaged_in_bounded_memory() {
    let base = small_check_peak().await;
    // The info part names the format the first line does.
    let info_of = |format: u32| {
        let info = serde_json::to_vec(&json!({"format": format, "herald": "test",
            "started_at": 1, "source": "sled"}))
        .unwrap();
        [&info[..], b"\n"].concat()
    };
    let dir = tempfile::tempdir().unwrap();
    // A record may be as long as the limit (64 MiB), and is held whole until its line ends:
    // a record of 512 MiB takes at most that room before it is refused; the bombs, nothing.
    const MIB: u64 = 1024;
    let cases = [
        (
            "past-raw-bytes",
            3,
            zstd_of(b'x', 512),
            Some(1000),
            64 * MIB,
        ),
        (
            "huge-record",
            2,
            zstd_of(b'x', 512),
            None,
            64 * MIB + 16 * MIB,
        ),
        ("empty-lines", 2, zstd_of(b'\n', 512), None, 64 * MIB),
    ];
    for (name, version, events, raw, bound) in cases {
        let mut bytes = format!("herald-backup {version}\n").into_bytes();
        let info_line = info_of(version);
        let info_body = zstd::encode_all(&info_line[..], 1).unwrap();
        let info_raw = raw.map(|_| info_line.len() as u64);
        bytes.extend(crafted_part("info", 0, 1, info_raw, &info_body));
        bytes.extend(crafted_part("events", 1, 1, raw, &events));
        let archive = dir.path().join(name);
        std::fs::write(&archive, &bytes).unwrap();
        assert!(bytes.len() < 1 << 20, "{name}: a small archive");

        let (ok, out, peak) =
            run_measured(vec!["restore".into(), "--check".into(), arg(&archive)]).await;
        assert!(!ok, "{name}: --check refuses it: {out}");
        assert!(out.contains("part 1 (events) is damaged"), "{name}: {out}");
        println!("{name}: restore --check peaked at {peak} KiB ({base} KiB for a small archive)");
        assert!(
            peak < base + bound,
            "{name}: restore --check peaked at {peak} KiB, {base} KiB for a small archive"
        );
        let target = dir.path().join(format!("{name}-restored"));
        let (ok, out, peak) = restore_measured(&target, &archive).await;
        assert!(!ok, "{name}: restore refuses it: {out}");
        assert!(out.contains("part 1 (events) is damaged"), "{name}: {out}");
        assert!(!target.exists(), "{name}: nothing was written");
        assert!(
            peak < base + bound,
            "{name}: restore peaked at {peak} KiB, {base} KiB for a small archive"
        );
    }
}

/// A `/proc/PID/status` figure in KiB (`VmHWM:`, `VmRSS:`).
fn proc_status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// An archive's parts as (kind, records), each record a JSON value.
type Parts = Vec<(String, Vec<serde_json::Value>)>;

/// The format-1 fixture's parts.
fn fixture_parts() -> Parts {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-1.herald-backup");
    let bytes = std::fs::read(fixture).unwrap();
    let mut at = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    let mut parts = Vec::new();
    while at < bytes.len() {
        let end = at + bytes[at..].iter().position(|b| *b == b'\n').unwrap();
        let header: serde_json::Value = serde_json::from_slice(&bytes[at..end]).unwrap();
        let len = header["bytes"].as_u64().unwrap() as usize;
        let body = zstd::decode_all(&bytes[end + 1..end + 1 + len]).unwrap();
        let records = body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        parts.push((header["part"].as_str().unwrap().to_string(), records));
        at = end + 1 + len;
    }
    parts
}

/// An archive of format 1 of `parts`, with its headers and its end's counts made to match.
fn archive_of(parts: &Parts) -> Vec<u8> {
    let mut out = b"herald-backup 1\n".to_vec();
    let (mut directory, mut events, mut deliveries, mut attempts) = (0, 0, 0, 0);
    for (index, (kind, records)) in parts.iter().enumerate() {
        let records = match kind.as_str() {
            "end" => vec![
                json!({"parts": index, "directory": directory, "events": events,
                "deliveries": deliveries, "attempts": attempts}),
            ],
            _ => records.clone(),
        };
        let mut part_deliveries = 0;
        for r in &records {
            match kind.as_str() {
                "directory" => directory += 1,
                "events" => {
                    events += 1;
                    for d in r["deliveries"].as_array().unwrap() {
                        part_deliveries += 1;
                        attempts += d["attempts"].as_array().unwrap().len();
                    }
                }
                _ => {}
            }
        }
        deliveries += part_deliveries;
        let mut lines = Vec::new();
        for r in &records {
            lines.extend(serde_json::to_vec(r).unwrap());
            lines.push(b'\n');
        }
        let body = zstd::encode_all(&lines[..], 1).unwrap();
        let mut part = crafted_part(kind, index as u64, records.len() as u64, None, &body);
        if part_deliveries > 0 {
            // `crafted_part` says 0 deliveries: name them.
            let nl = part.iter().position(|b| *b == b'\n').unwrap();
            let mut header: serde_json::Value = serde_json::from_slice(&part[..nl]).unwrap();
            header["deliveries"] = json!(part_deliveries);
            let mut fixed = serde_json::to_vec(&header).unwrap();
            fixed.extend_from_slice(&part[nl..]);
            part = fixed;
        }
        out.extend(part);
    }
    out
}

/// Archives whose frame is whole but whose records the API would refuse, or whose events are
/// not in strictly descending id order, are named damaged by `restore --check` and `restore`,
/// which writes nothing; an account id `..` that an older version accepted still restores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_with_ids_the_api_refuses_or_events_out_of_order_is_damaged() {
    let parts = fixture_parts();
    let events_at = parts.iter().position(|(k, _)| k == "events").unwrap();
    let dir_at = parts.iter().position(|(k, _)| k == "directory").unwrap();
    let whole = archive_of(&parts);
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    std::fs::write(&good, &whole).unwrap();
    let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&good)]).await;
    assert!(ok, "the fixture rewritten checks: {out}");

    let with = |f: &dyn Fn(&mut Parts)| {
        let mut p = parts.clone();
        f(&mut p);
        archive_of(&p)
    };
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        (
            "a bad event id",
            with(&|p| p[events_at].1[0]["event"]["id"] = json!("evt_../../../../etc/passwd")),
            format!("part {events_at} (events) is damaged"),
        ),
        (
            "an account id the API refuses",
            with(&|p| {
                for r in p[dir_at].1.iter_mut() {
                    if let Some(ep) = r.get_mut("endpoint") {
                        ep["account_id"] = json!("../../x");
                    }
                }
            }),
            format!("part {dir_at} (directory) is damaged"),
        ),
        (
            "a repeated event",
            with(&|p| {
                let first = p[events_at].1[0].clone();
                p[events_at].1[1] = first;
            }),
            format!("part {events_at} (events) is damaged"),
        ),
        (
            "events out of order",
            with(&|p| p[events_at].1.swap(0, 1)),
            format!("part {events_at} (events) is damaged"),
        ),
    ];
    for (name, bytes, damaged) in cases {
        let archive = dir.path().join(name.replace(' ', "-"));
        std::fs::write(&archive, bytes).unwrap();
        let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&archive)]).await;
        assert!(!ok, "{name}: --check refuses it: {out}");
        assert!(out.contains(&damaged), "{name}: {out}");
        let target = dir
            .path()
            .join(format!("{}-restored", name.replace(' ', "-")));
        let (ok, out) = restore_to(&format!("sled:{}", target.display()), &archive).await;
        assert!(!ok, "{name}: restore refuses it: {out}");
        assert!(!target.exists(), "{name}: nothing was written");
    }

    // `..`, written before the API refused it, is read by the API still: it restores.
    let dotted = dir.path().join("dotted");
    std::fs::write(
        &dotted,
        with(&|p| {
            for r in p[dir_at].1.iter_mut() {
                if let Some(ep) = r.get_mut("endpoint") {
                    ep["account_id"] = json!("..");
                }
            }
        }),
    )
    .unwrap();
    let (ok, out) = run(vec!["restore".into(), "--check".into(), arg(&dotted)]).await;
    assert!(ok, "an account `..` restores: {out}");
}

/// A restore that fails after it wrote part of the archive (here the file changed after the
/// check: a FIFO gives the check the good archive and the restore a damaged one) leaves the
/// store as it found it, a missing or empty directory or an empty database, and the good
/// archive then restores into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_that_fails_halfway_leaves_the_target_as_it_found_it() {
    let parts = fixture_parts();
    let whole = archive_of(&parts);
    let events_at = {
        let needle = b"\"part\":\"events\"";
        let at = whole
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap();
        whole[..at].iter().rposition(|b| *b == b'\n').unwrap() + 1
    };
    let body_at = events_at + whole[events_at..].iter().position(|b| *b == b'\n').unwrap() + 1;
    let mut damaged = whole.clone();
    damaged[body_at + 10] ^= 0x40;
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut targets: Vec<(String, Launch, String, Option<std::path::PathBuf>)> = vec![
        (
            format!("sled:{}", dir.path().join("missing").display()),
            Launch {
                storage: Some(dir.path().join("missing")),
                ..Launch::default()
            },
            "[storage]\nbackend = \"sled\"\n".to_string(),
            Some(dir.path().join("missing")),
        ),
        (
            format!("sled:{}", empty.display()),
            Launch {
                storage: Some(empty.clone()),
                ..Launch::default()
            },
            "[storage]\nbackend = \"sled\"\n".to_string(),
            Some(empty.clone()),
        ),
    ];
    let [_, (to, launch, storage)] = restore_targets(dir.path());
    targets.push((to, launch, storage, None));
    for (i, (to, launch, storage, path)) in targets.into_iter().enumerate() {
        let fifo = dir.path().join(format!("archive-{i}"));
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let feeder = {
            let (fifo, whole, damaged) = (fifo.clone(), whole.clone(), damaged.clone());
            std::thread::spawn(move || {
                // The check reads the good archive, the restore the damaged one.
                std::fs::write(&fifo, &whole).unwrap();
                std::fs::write(&fifo, &damaged).unwrap();
            })
        };
        let (ok, out) = restore_to(&to, &fifo).await;
        feeder.join().unwrap();
        assert!(!ok, "{to}: the restore fails: {out}");
        assert!(out.contains("is damaged"), "{to}: {out}");
        match &path {
            Some(p) if p == &empty => assert_eq!(
                std::fs::read_dir(p).unwrap().count(),
                0,
                "{to}: the directory is empty again"
            ),
            Some(p) => assert!(!p.exists(), "{to}: the directory is still missing"),
            None => {}
        }
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".restoring-"))
            .collect();
        assert!(leftovers.is_empty(), "{to}: {leftovers:?}");
        // The good archive now restores into the same place.
        let good = dir.path().join(format!("good-{i}"));
        std::fs::write(&good, &whole).unwrap();
        let (ok, out) = restore_to(&to, &good).await;
        assert!(
            ok,
            "{to}: the good archive restores after the failed one: {out}"
        );
        let h = Herald::start_with(&storage, launch).await;
        let (status, ev) = h
            .admin("GET", "/v1/events/evt_01M92X6ZGR05A47SE3HVC4JW00", None)
            .await;
        assert_eq!(status, 200, "{to}: {ev}");
    }
}

/// 600 events of 250 KB (a page of 1,000 would be 250 MB) in a herald, and its
/// [`measured_backup`].
async fn large_backup() -> (Herald, u64, u64, std::path::PathBuf, tempfile::TempDir) {
    const EVENTS: usize = 600;
    let h = Herald::start("[server]\nmax_body_bytes = 1048576\n").await;
    for _ in 0..EVENTS {
        let pad: String = (0..250_000 / 32)
            .map(|_| format!("{:032x}", rand::random::<u128>()))
            .collect();
        let (status, answer) = h
            .ingest(json!({"account_id": "acc", "type": "order.created", "payload": {"pad": pad}}))
            .await;
        assert_eq!(status, 202, "{answer}");
    }
    let (before, peak, archive, dir) = measured_backup(&h).await;
    (h, before, peak, archive, dir)
}

/// `herald backup` of `h`: herald's RSS in KiB before it, the peak during it (`/proc`'s VmHWM,
/// reset first), the archive and its directory.
async fn measured_backup(h: &Herald) -> (u64, u64, std::path::PathBuf, tempfile::TempDir) {
    let pid = h.pid().expect("herald runs");
    let status_file = format!("/proc/{pid}/status");
    // The peak is reset, so that it measures the backup alone.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let text = std::fs::read_to_string(&status_file).unwrap();
    let before = proc_status_kib(&text, "VmRSS:").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("large.backup");
    let config = backup_config(h, dir.path());
    let (ok, out) = backup_to(&config, &archive).await;
    assert!(ok, "herald backup: {out}");
    let text = std::fs::read_to_string(&status_file).unwrap();
    let peak = proc_status_kib(&text, "VmHWM:").unwrap();
    println!("herald: {before} KiB before the backup, {peak} KiB at its peak");
    (before, peak, archive, dir)
}

/// The peak RSS in KiB of `restore --check` of the small format-1 fixture: what checking an
/// archive takes whatever its size.
async fn small_check_peak() -> u64 {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-1.herald-backup");
    let (ok, out, base) =
        run_measured(vec!["restore".into(), "--check".into(), arg(&fixture)]).await;
    assert!(ok, "{out}");
    base
}

/// Reading an archive is bounded by bytes, not events: `restore --check` of 600 events of
/// 250 KB stays within 64 MiB of what checking a small archive takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_check_of_large_events_stays_within_64_mib() {
    let (_h, _, _, archive, _dir) = large_backup().await;
    let base = small_check_peak().await;
    let (ok, out, peak) =
        run_measured(vec!["restore".into(), "--check".into(), arg(&archive)]).await;
    assert!(ok, "{out}");
    assert!(out.contains(" 600 events,"), "{out}");
    println!("restore --check: {peak} KiB at its peak, {base} KiB for a small archive");
    assert!(
        peak < base + 64 * 1024,
        "restore --check: {peak} KiB, base {base} KiB"
    );
}

/// Memory is bounded by bytes, not events: with 600 events of 250 KB, herald's RSS rises by at
/// most 64 MiB during `GET /v1/backup`, and `restore` of the archive into a sled directory
/// stays within 64 MiB of what checking a small archive takes (its start, before it opens the
/// store). Before, sled kept every page the backup read and the restore wrote: +65 MiB and
/// 150 MiB here, and growing with the store (+196 MiB for a backup of 225 MB of payloads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_and_a_restore_of_large_events_stay_within_64_mib() {
    let (_h, before, peak, archive, dir) = large_backup().await;
    within_64_mib(before, peak, &archive, dir.path()).await;
}

/// Asserts that a backup's peak RSS is within 64 MiB of herald's before it, and that a restore
/// of its archive into a sled directory peaks within 64 MiB of what checking a small archive
/// takes; answers the restore's output.
async fn within_64_mib(before: u64, peak: u64, archive: &Path, dir: &Path) -> String {
    assert!(
        peak < before + 64 * 1024,
        "herald's RSS rose from {before} KiB to {peak} KiB during the backup"
    );
    let base = small_check_peak().await;
    let (ok, out, peak) = restore_measured(&dir.join("restored"), archive).await;
    assert!(ok, "{out}");
    println!("restore: {peak} KiB at its peak, {base} KiB for checking a small archive");
    assert!(
        peak < base + 64 * 1024,
        "restore: {peak} KiB, base {base} KiB"
    );
    out
}

/// A page is bounded by what its events carry, not their payloads alone: 1,000 events of a few
/// bytes, each fanned out to 24 endpoints that answered with a 4 KiB body (about 98 MB of
/// attempts, which one page of 1,000 events held whole), are backed up with herald's RSS rising
/// by at most 64 MiB, and restored into a sled directory within 64 MiB of what checking a
/// small archive takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_count_toward_a_page_as_payloads_do() {
    const EVENTS: usize = 1000;
    const ENDPOINTS: usize = 24;
    let w = World::start(
        "",
        "[endpoints]\nrequire_verification = false\nmax_per_account = 24\n",
    )
    .await;
    let body: String = (0..4096 / 32)
        .map(|_| format!("{:032x}", rand::random::<u128>()))
        .collect();
    let recv = Receiver::https(
        &w.ca,
        behaviour(move |_, _| Reply::status(200).with_body(body.clone())),
    );
    for i in 0..ENDPOINTS {
        w.endpoint("acc", &recv.url(&format!("/e{i}")), json!({}))
            .await;
    }
    let h = &w.herald;
    for n in 0..EVENTS {
        let (status, answer) = h
            .ingest(json!({"account_id": "acc", "type": "order.created", "payload": {"n": n}}))
            .await;
        assert_eq!(status, 202, "{answer}");
    }
    common::wait_until(
        Duration::from_secs(120),
        "every delivery is made",
        || async {
            let (_, pending) = h
                .admin("GET", "/v1/deliveries?state=pending&limit=1", None)
                .await;
            recv.count() >= EVENTS * ENDPOINTS
                && pending["items"].as_array().is_some_and(Vec::is_empty)
        },
    )
    .await;
    let (before, peak, archive, dir) = measured_backup(h).await;
    let out = within_64_mib(before, peak, &archive, dir.path()).await;
    assert!(
        out.contains(&format!("{} attempts", EVENTS * ENDPOINTS)),
        "{out}"
    );
}

/// Many small events are bounded as large ones are: 300,000 events of about 100 bytes (with
/// their `no_endpoint` attempts: 900,000 rows), most of them folded, are backed up with herald's
/// RSS rising by at most 64 MiB, and restored into a sled directory within 64 MiB of what
/// checking a small archive takes. Before, the restore kept every row version its writes
/// replaced (sled's epoch collector frees them only on reads, which a restore hardly makes):
/// 650 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_small_events_are_backed_up_and_restored_within_64_mib() {
    const BATCHES: usize = 300;
    let h =
        Herald::start("[server]\nmax_body_bytes = 4194304\n[storage]\nfold_after = \"1s\"\n").await;
    for b in 0..BATCHES {
        let events: Vec<_> = (0..1000)
            .map(|i| {
                json!({"account_id": format!("acc{}", i % 50), "type": "order.created",
                       "payload": {"n": b * 1000 + i, "s": "x".repeat(40)}})
            })
            .collect();
        let (status, answer) = h.ingest_batch(json!(events)).await;
        assert_eq!(status, 202, "batch {b}: {}", answer["error"]);
    }
    let (before, peak, archive, dir) = measured_backup(&h).await;
    let out = within_64_mib(before, peak, &archive, dir.path()).await;
    assert!(out.contains("restored 300000 events"), "{out}");
}

/// A restore into a cluster's database that a node serves is refused, naming the node, and
/// writes nothing: the node could accept a retried key as new meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_into_a_database_a_node_serves_is_refused_and_writes_nothing() {
    let url = common::postgres::shared_database();
    let node = Herald::start(&format!(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {url:?}\n"
    ))
    .await;
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/backup/format-1.herald-backup");
    let (ok, out) = restore_to(&format!("postgres:{url}"), &fixture).await;
    assert!(!ok, "a restore under a serving node is refused: {out}");
    assert!(
        out.contains("herald is running on this database"),
        "it says why: {out}"
    );
    let (status, list) = node.admin("GET", "/v1/deliveries?limit=10", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"], json!([]), "nothing was written: {list}");
}
