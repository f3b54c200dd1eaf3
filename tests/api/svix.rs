//! The Svix-compatible API (docs/svix.md) driven by the official Svix client libraries, unchanged:
//! Python `svix` 2.x, its last 1.x release, JavaScript `svix` 2.x and Rust `svix` 2.x, each pinned
//! in `tests/svix/` and installed (the Rust driver built) by `.ci/run`. Each walks the routes against a real herald (on sled, and on
//! PostgreSQL under `tests/tools/on-postgres.sh`) with a receiver of its own that verifies every
//! request with Svix's verifier on the `svix-*` headers and with the Standard Webhooks library on
//! the `webhook-*` headers. What each checks: tests/svix/README.md.
//!
//! Beside them, what the libraries cannot show: `check-config`'s refusals, and that the door is
//! shut (`/api/v1/` is herald's own 404) unless `[svix] enabled`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::herald::{Herald, ADMIN_TOKEN, INGEST_TOKEN};

/// What a herald the libraries drive needs: the door open, no verification handshake (Svix
/// receivers do not answer it), plain http to the drivers' loopback receivers, two catalog types.
const CONFIG: &str = "[svix]\nenabled = true\n\
    [delivery]\nallow_http = true\nallow_private_networks = [\"127.0.0.0/8\", \"::1/128\"]\n\
    [catalog.events.\"order.created\"]\ndescription = \"An order was created\"\n\
    [catalog.events.\"order.refunded\"]\ndescription = \"An order was refunded\"\n";

fn here(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// One driver at a time: each is a process of its own (an interpreter or a binary) with its own
/// receiver, and the suite's other tests run beside them on the same two cores.
static ONE_DRIVER: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Runs a driver against `h` and asserts its last line; its whole output is shown on failure.
async fn drive(
    h: &Herald,
    program: &str,
    args: &[&str],
    dir: &str,
    env: &[(&str, String)],
    last: &str,
    install: &str,
) {
    let _turn = ONE_DRIVER
        .acquire()
        .await
        .expect("the drivers' gate stays open");
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .current_dir(here(dir))
        .env("HERALD_URL", h.base_url())
        .env("HERALD_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("HERALD_INGEST_TOKEN", INGEST_TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs ({install}): {e}"));
    let waited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let out = tokio::time::timeout(Duration::from_secs(300), waited)
        .await
        .unwrap_or_else(|_| panic!("{program} {args:?} did not finish within 300 s"))
        .expect("the driver's thread")
        .expect("the driver's output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.lines().any(|l| l.trim() == last),
        "{program} {args:?} failed ({install}):\n{text}\n--- herald's log ---\n{}",
        h.log_text()
    );
}

/// [`drive`] against a herald of its own.
async fn on_fresh_herald(
    program: &str,
    args: &[&str],
    dir: &str,
    env: &[(&str, String)],
    last: &str,
    install: &str,
) {
    let h = Herald::start(CONFIG).await;
    drive(&h, program, args, dir, env, last, install).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_library_walks_every_route() {
    on_fresh_herald(
        "python3",
        &["drive.py"],
        "tests/svix",
        &[],
        "svix-python: all checks passed",
        "pip install -r tests/svix/requirements.txt",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_1x_library_walks_endpoints_and_messages_with_its_names() {
    on_fresh_herald(
        "python3",
        &["drive1.py"],
        "tests/svix",
        &[("PYTHONPATH", here("tests/svix/.py1").display().to_string())],
        "svix-python1: all checks passed",
        "pip install --target tests/svix/.py1 -r tests/svix/requirements1.txt",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_library_walks_every_route() {
    let bin = here("tests/svix/rust/target/debug/herald-svix-drive");
    on_fresh_herald(
        &bin.display().to_string(),
        &[],
        "tests/svix/rust",
        &[],
        "svix-rust: all checks passed",
        "cargo build --manifest-path tests/svix/rust/Cargo.toml",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_library_walks_every_route() {
    on_fresh_herald(
        "node",
        &["drive.mjs"],
        "tests/svix/js",
        &[],
        "svix-js: all checks passed",
        "cd tests/svix/js && npm ci",
    )
    .await;
}

/// docs/svix/migrate.py, the documented way off Svix, run between two heralds (the first standing
/// in for Svix: the same library calls): applications and endpoints arrive with their uids,
/// fields, headers and secrets; run again, nothing is doubled and a rotated secret follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migration_script_copies_applications_and_endpoints_with_their_secrets() {
    let source = Herald::start(CONFIG).await;
    let target = Herald::start(CONFIG).await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string();
    let (status, app) = call(
        &source,
        "POST",
        "/app".into(),
        Some(serde_json::json!({"name": "Acme", "uid": "acme", "metadata": {"tier": "gold"}})),
    )
    .await;
    assert_eq!(status, 201, "{app}");
    let (status, ep) = call(
        &source,
        "POST",
        "/app/acme/endpoint".into(),
        Some(serde_json::json!({
            "url": "https://hooks.example.com/one", "uid": "ep-one", "secret": secret,
            "eventTypes": ["order.created"], "channels": ["eu"], "metadata": {"team": "a"},
            "throttleRate": 7, "headers": {"x-team": "blue"}, "description": "first",
        })),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    let (status, ep2) = call(
        &source,
        "POST",
        "/app/acme/endpoint".into(),
        Some(serde_json::json!({"url": "https://hooks.example.com/two", "uid": "ep-two", "disabled": true})),
    )
    .await;
    assert_eq!(status, 201, "{ep2}");
    let env = [
        ("SOURCE_URL", source.base_url()),
        ("SOURCE_TOKEN", ADMIN_TOKEN.to_string()),
        ("TARGET_URL", target.base_url()),
        ("TARGET_TOKEN", ADMIN_TOKEN.to_string()),
    ];
    let script = here("docs/svix/migrate.py").display().to_string();
    let args = [script.as_str()];
    let migrate = || {
        drive(
            &target,
            "python3",
            &args,
            "tests/svix",
            &env,
            "copied 1 applications and 2 endpoints",
            "pip install -r tests/svix/requirements.txt",
        )
    };
    migrate().await;
    migrate().await;

    let (_, app) = call(&target, "GET", "/app/acme".into(), None).await;
    assert_eq!(
        (app["name"].as_str(), app["uid"].as_str()),
        (Some("Acme"), Some("acme")),
        "{app}"
    );
    assert_eq!(
        app["metadata"],
        serde_json::json!({"tier": "gold"}),
        "{app}"
    );
    let (_, list) = call(&target, "GET", "/app/acme/endpoint".into(), None).await;
    assert_eq!(
        list["data"].as_array().map(Vec::len),
        Some(2),
        "nothing doubled: {list}"
    );
    let (_, one) = call(&target, "GET", "/app/acme/endpoint/ep-one".into(), None).await;
    for (k, want) in [
        ("url", serde_json::json!("https://hooks.example.com/one")),
        ("description", serde_json::json!("first")),
        ("eventTypes", serde_json::json!(["order.created"])),
        ("channels", serde_json::json!(["eu"])),
        ("metadata", serde_json::json!({"team": "a"})),
        ("throttleRate", serde_json::json!(7)),
        ("disabled", serde_json::json!(false)),
    ] {
        assert_eq!(one[k], want, "{k}: {one}");
    }
    let (_, two) = call(&target, "GET", "/app/acme/endpoint/ep-two".into(), None).await;
    assert_eq!(two["disabled"], true, "{two}");
    let (_, key) = call(
        &target,
        "GET",
        "/app/acme/endpoint/ep-one/secret".into(),
        None,
    )
    .await;
    assert_eq!(key["key"], secret.as_str(), "the secret travelled");
    let (_, headers) = call(
        &target,
        "GET",
        "/app/acme/endpoint/ep-one/headers".into(),
        None,
    )
    .await;
    assert_eq!(
        headers["headers"],
        serde_json::json!({"x-team": "blue"}),
        "{headers}"
    );

    // A secret rotated at the source follows on the next run, and alone signs.
    let (status, rotated) = call(
        &source,
        "POST",
        "/app/acme/endpoint/ep-one/secret/rotate".into(),
        Some(serde_json::json!({})),
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    migrate().await;
    let (_, key) = call(
        &target,
        "GET",
        "/app/acme/endpoint/ep-one/secret".into(),
        None,
    )
    .await;
    assert_eq!(key["key"], rotated["key"], "the rotated secret travelled");
}

/// A message's request key is kept with the message in its commit: after a `kill -9` right
/// after the answer, the libraries' retry with the same key gets the same message back, and
/// there is one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_crash_gets_the_same_message() {
    let mut h = Herald::start(CONFIG).await;
    let (status, app) = call(
        &h,
        "POST",
        "/app".into(),
        Some(serde_json::json!({"name": "Crash", "uid": "crash"})),
    )
    .await;
    assert_eq!(status, 201, "{app}");
    let (status, _, first) = keyed_message(&h).await;
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&first));
    let first: serde_json::Value = serde_json::from_slice(&first).unwrap();
    h.kill9();
    h.restart().await;
    let (status, _, again) = keyed_message(&h).await;
    let again: serde_json::Value = serde_json::from_slice(&again).unwrap();
    assert_eq!((status, &again["id"]), (202, &first["id"]), "{again}");
    assert_eq!(again["payload"], serde_json::json!({"n": 1}), "{again}");
    // The key's first answer wins over a body the API refuses...
    let (status, _, refused) = post_message(&h, "auto_0b4ad5b3-crash", b"{}").await;
    let refused: serde_json::Value = serde_json::from_slice(&refused).unwrap();
    assert_eq!((status, &refused["id"]), (202, &first["id"]), "{refused}");
    // ...and a refusal is the first answer of its key: the same key with a good body gets it.
    let (status, _, bad) = post_message(&h, "auto_0b4ad5b3-bad", b"{}").await;
    assert_eq!(status, 422, "{}", String::from_utf8_lossy(&bad));
    let good = br#"{"eventType": "order.created", "payload": {"n": 2}}"#;
    let (status, _, again) = post_message(&h, "auto_0b4ad5b3-bad", good).await;
    assert_eq!(
        (status, &again),
        (422, &bad),
        "{}",
        String::from_utf8_lossy(&again)
    );
    let (_, list) = call(&h, "GET", "/app/crash/msg".into(), None).await;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1), "{list}");
}

/// A message posted as the libraries post it, with one request key.
async fn keyed_message(h: &Herald) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let body = br#"{"eventType": "order.created", "payload": {"n": 1}}"#;
    post_message(h, "auto_0b4ad5b3-crash", body).await
}

async fn post_message(h: &Herald, key: &str, body: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    h.call_raw(
        "POST",
        "/api/v1/app/crash/msg",
        Some(ADMIN_TOKEN),
        &[
            ("content-type", "application/json"),
            ("idempotency-key", key),
        ],
        body.to_vec(),
    )
    .await
}

/// An admin call of the Svix-compatible API.
async fn call(
    h: &Herald,
    method: &str,
    path: String,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    h.admin(method, &format!("/api/v1{path}"), body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_is_shut_unless_enabled() {
    let h = Herald::start("").await;
    let (status, body) = h.admin("GET", "/api/v1/app", None).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        body["error"]["code"], "not_found",
        "herald's own 404: {body}"
    );
}

/// `check-config` with `[svix] enabled` refuses what would break the libraries: a token holding
/// a `.` (they read what follows as a region) and endpoint verification left on (its default).
#[test]
fn check_config_names_what_the_door_needs() {
    let dir = tempfile::tempdir().unwrap();
    let check = |toml: &str| {
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, toml).unwrap();
        let out = std::process::Command::new(common::herald::herald_bin())
            .arg("check-config")
            .arg(&path)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let storage = format!(
        "[storage]\npath = {}\n",
        common::toml_string(&dir.path().join("data").display().to_string())
    );
    let (passed, text) = check(&format!(
        "[server]\nadmin_tokens = [\"admin.token-with-a-dot-0001\"]\n{storage}[svix]\nenabled = true\n"
    ));
    assert!(!passed, "{text}");
    assert!(
        text.contains("server.admin_token") && text.contains("'.'"),
        "{text}"
    );
    assert!(
        text.contains("svix.enabled") && text.contains("endpoints.require_verification = false"),
        "{text}"
    );
    let (passed, text) = check(&format!(
        "[server]\nadmin_tokens = [\"admin-token-without-dots-0001\"]\n{storage}[svix]\nenabled = true\n\
         [endpoints]\nrequire_verification = false\n"
    ));
    assert!(passed, "{text}");
    // The same dotted token is fine while the door is shut.
    let (passed, text) = check(&format!(
        "[server]\nadmin_tokens = [\"admin.token-with-a-dot-0001\"]\n{storage}"
    ));
    assert!(passed, "{text}");
}
