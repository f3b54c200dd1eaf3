//! Shared integration-test harness for herald.
//!
//! Each test file pulls this in with `mod common;`. Every test binary compiles
//! the whole module but uses only part of it, hence the `dead_code` allowance.
//!
//! Pieces:
//! - [`tls::TestCa`]: a throw-away CA and `localhost` server certificates.
//! - [`receiver::Receiver`]: a real HTTP(S)/1.1 webhook receiver that records requests.
//! - [`herald::Herald`]: runs the real herald binary on a temp config + data dir.
//! - [`sig`]: an independent Standard Webhooks signature verifier.
//! - [`postgres::Postgres`]: a real PostgreSQL server of the test's own (cluster mode).
//! - [`smtp::SmtpSink`]: a real SMTP server (aiosmtpd) that keeps every mail it accepts.
//!
//! Rule for everything in here: no sleeps as synchronization. Waits are either
//! notifications or polling with a deadline that panics with a clear message.
#![allow(dead_code)]

pub mod api;
pub mod herald;
pub mod inproc;
pub mod otlp;
pub mod pgproxy;
pub mod postgres;
pub mod receiver;
pub mod sig;
pub mod smtp;
pub mod store;
pub mod tls;
pub mod world;

use std::future::Future;
use std::path::Path;
use std::time::Duration;

// Re-exports for convenience; a test binary that uses none of them would
// otherwise warn.
#[allow(unused_imports)]
pub use api::HeraldApi;
#[allow(unused_imports)]
pub use herald::Herald;
#[allow(unused_imports)]
pub use inproc::InProc;
#[allow(unused_imports)]
pub use receiver::{behaviour, Behaviour, Receiver, Recorded, Reply};
#[allow(unused_imports)]
pub use tls::TestCa;
#[allow(unused_imports)]
pub use world::{first_delivery, World};

/// Polls `f` every 20 ms until it returns true; panics naming `what` once
/// `deadline` has passed. The 20 ms sleep is a polling interval, not a
/// synchronization point: correctness only depends on `f`.
pub async fn wait_until<F, Fut>(deadline: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if f().await {
            return;
        }
        if tokio::time::Instant::now() >= end {
            panic!("timed out after {deadline:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The usual `[delivery]` table for tests that deliver to a local [`Receiver`]:
/// trust `ca_file` and allow loopback targets (herald blocks private networks
/// by default). Ends with a newline, so a test may append more `[delivery]`
/// keys right after it (they land in the same table).
pub fn delivery_toml(ca_file: &Path) -> String {
    format!(
        "[delivery]\nextra_ca_file = {}\nallow_private_networks = [\"127.0.0.0/8\", \"::1/128\"]\n",
        toml_string(&ca_file.display().to_string())
    )
}

/// Quotes `s` as a TOML basic string. A JSON string literal is a valid TOML
/// basic string (same escapes), and serde_json is already a dependency.
pub fn toml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serializes")
}

/// Takes the table `[name]` out of a TOML snippet: returns its keys (each line ending in a
/// newline) and the rest, so a harness that writes that table itself can add the keys to it
/// (TOML allows a table once).
pub fn split_table(toml: &str, name: &str) -> (String, String) {
    let header = format!("[{name}]");
    let mut keys = String::new();
    let mut rest = String::new();
    let mut inside = false;
    for line in toml.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == header;
            if inside {
                continue;
            }
        }
        let out = if inside { &mut keys } else { &mut rest };
        out.push_str(line);
        out.push('\n');
    }
    (keys, rest)
}

/// Tests deliver to endpoints that never went through the verification handshake, so the
/// harness turns `endpoints.require_verification` off unless the test writes its own
/// `[endpoints]` table (TOML allows a table once).
pub fn endpoints_default(extra_toml: &str) -> &'static str {
    if extra_toml.contains("[endpoints]") {
        ""
    } else {
        "[endpoints]\nrequire_verification = false\n"
    }
}

/// A `[storage]` table that pins a test to the embedded store: for tests that read, damage or
/// fill its files (`HERALD_TEST_BACKEND` leaves them on sled).
pub const ON_SLED: &str = "[storage]\nbackend = \"sled\"\n";

/// The environment variable that runs the harness's heralds on PostgreSQL (cluster mode).
pub const BACKEND_VAR: &str = "HERALD_TEST_BACKEND";

/// Whether this test run puts herald on PostgreSQL: `HERALD_TEST_BACKEND=postgres`. Any other
/// value than `sled` or `postgres` fails the test (a typo must not fall back silently).
pub fn on_postgres() -> bool {
    match std::env::var(BACKEND_VAR).as_deref() {
        Err(_) | Ok("") | Ok("sled") => false,
        Ok("postgres") => true,
        Ok(other) => panic!("{BACKEND_VAR}={other:?}: write `sled` or `postgres`"),
    }
}

/// The `[storage]` table of a harness config: the data directory at `path` and the test's own
/// `keys`; on PostgreSQL ([`on_postgres`]) also `backend = "postgres"` and a database of its own
/// on the PostgreSQL this test process shares. A test whose keys name the backend itself (those
/// that read or damage the embedded store's files write `backend = "sled"`) runs on that one.
pub fn storage_table(path: &Path, keys: &str) -> String {
    let mut table = format!(
        "[storage]\npath = {}\n{keys}",
        toml_string(&path.display().to_string())
    );
    if !keys.is_empty() && !keys.ends_with('\n') {
        table.push('\n');
    }
    if on_postgres() && !keys.contains("backend") {
        let url = postgres::shared_database();
        table.push_str(&format!(
            "backend = \"postgres\"\n[storage.postgres]\nurl = {}\n",
            toml_string(&url)
        ));
    }
    table
}

/// Rotates `endpoint`'s secret and sends it a test event to `recv` (where its URL points): the
/// request is signed with the new secret beside at least one earlier one (a rotation keeps the
/// previous secret for its grace).
pub async fn rotated_secret_signs(h: &Herald, endpoint: &str, recv: &Receiver) {
    let (status, rotated) = h
        .admin(
            "POST",
            &format!("/v1/endpoints/{endpoint}/secret/rotate"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{rotated}");
    let secret = rotated["secret"].as_str().unwrap().to_string();
    let (status, tested) = h
        .admin(
            "POST",
            &format!("/v1/endpoints/{endpoint}/test"),
            Some(serde_json::json!({})),
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {tested}");
    let got = recv.wait_for(1, std::time::Duration::from_secs(20)).await;
    let r = &got[0];
    let signature = r.header("webhook-signature").unwrap();
    assert!(
        signature.split_whitespace().count() >= 2,
        "the new secret signs beside the earlier one: {signature}"
    );
    assert!(
        sig::verify(
            &secret,
            r.header("webhook-id").unwrap(),
            r.header("webhook-timestamp").unwrap(),
            &r.body,
            signature
        ),
        "{signature}"
    );
}
