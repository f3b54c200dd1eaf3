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
