//! Installs upgrade, they do not start over: data directories written by earlier heralds
//! (storage formats 2 and 3, kept in `tests/fixtures/format2` and `format3`) open in this one,
//! are migrated in place, and keep their log, their endpoints and their pending deliveries.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{Herald, Receiver};
use serde_json::json;

/// The fixture's config, as far as its data needs it (plain http and loopback endpoints, its
/// plan and retry policy).
const FIXTURE_TABLES: &str = "[delivery]\nallow_http = true\n\
    allow_private_networks = [\"127.0.0.0/8\"]\n\
    [retry_policies]\nslow = [\"1h\"]\n\
    [plans.growth]\nper_minute = 100\n";

fn copy_fixture(name: &str, to: &Path) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() && entry.file_name() != "README.md" {
            let dest = to.join(entry.file_name());
            std::fs::copy(entry.path(), &dest).unwrap();
            // As herald 0.1 left them under umask 022.
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_2_data_directory_is_migrated_and_keeps_working() {
    let recv = Receiver::ok_http();
    let mut h = Herald::start(FIXTURE_TABLES).await;
    h.kill9();
    let data = h.storage_path();
    std::fs::remove_dir_all(&data).unwrap();
    copy_fixture("format2", &data);
    h.restart().await;
    h.wait_for_log(
        "storage migrated from format 2 to format 3",
        Duration::from_secs(5),
    )
    .await;
    h.wait_for_log(
        "storage migrated from format 3 to format 4",
        Duration::from_secs(5),
    )
    .await;

    // The whole log reads.
    let (status, list) = h.admin("GET", "/v1/deliveries?limit=100", None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 11, "{list}");
    let (status, big) = h
        .admin("GET", "/v1/events/evt_01M8X7JY3P40J9F3EM39ZBXM00", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(big["payload"]["data"].as_str().unwrap().len(), 20_000);
    let (_, failed) = h
        .admin("GET", "/v1/deliveries/dlv_01M8X7JXQNDRG9PRAZRGJ52M02", None)
        .await;
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["attempts"][0]["status"], "connection_error");
    // Secrets stay hidden.
    let (_, ep) = h
        .admin("GET", "/v1/endpoints/ep_01M8X7JWSH5T2KVY5H2WWVD4AX", None)
        .await;
    assert_eq!(ep["headers"]["x-api-key"], "{{ secret.api_key }}");
    assert!(!ep.to_string().contains("whsec_"), "{ep}");

    // The delivery that was never attempted is sent once its endpoint points at a receiver.
    let (status, _) = h
        .admin(
            "PATCH",
            "/v1/endpoints/ep_01M8X7KH78E2465P907V5FEZPZ",
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 200);
    let got = recv.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(
        got[0].header("webhook-id"),
        Some("evt_01M8X7KHF18HPWWYNNRQPJ5R00")
    );
    common::wait_until(
        Duration::from_secs(10),
        "the delivery is recorded",
        || async {
            h.admin("GET", "/v1/deliveries/dlv_01M8X7KHF18HPWWYNNRQPJ5R01", None)
                .await
                .1["state"]
                == "delivered"
        },
    )
    .await;

    // The files are private now, and the next start finds format 4 (no migration again).
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("db")), 0o600);
    let status = h.sigterm().await;
    assert!(status.success());
    h.restart().await;
    let migrations = h
        .logs()
        .iter()
        .filter(|l| l.contains("storage migrated"))
        .count();
    assert_eq!(
        migrations, 2,
        "two steps at the first start, none at the second"
    );
    let (_, list) = h.admin("GET", "/v1/deliveries?limit=100", None).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_3_data_directory_is_migrated_and_keeps_working() {
    let recv = Receiver::ok_http();
    let mut h = Herald::start(FIXTURE_TABLES).await;
    h.kill9();
    let data = h.storage_path();
    std::fs::remove_dir_all(&data).unwrap();
    copy_fixture("format3", &data);
    h.restart().await;
    let line = h
        .wait_for_log(
            "storage migrated from format 3 to format 4",
            Duration::from_secs(5),
        )
        .await;
    assert!(line.contains("idempotency_keys=2"), "{line}");
    assert!(data.join("keys").is_dir());

    let (status, list) = h.admin("GET", "/v1/deliveries?limit=100", None).await;
    assert_eq!(status, 200, "{list}");
    let states: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states, ["delivered", "skipped", "delivered"], "{list}");

    // It goes on: a retry of the delivered one reaches a receiver.
    let (status, _) = h
        .admin(
            "PATCH",
            "/v1/endpoints/ep_01M8YECQJJ1W7HG20CY93V6SK6",
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, retried) = h
        .admin(
            "POST",
            "/v1/deliveries/dlv_01M8YECQJWCCC1DMPEKQ6DCC01/retry",
            None,
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {retried}");
    let got = recv.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(
        got[0].header("webhook-id"),
        Some("evt_01M8YECQJWCCC1DMPEKQ6DCC00")
    );

    let status = h.sigterm().await;
    assert!(status.success());
    h.restart().await;
    let migrations = h
        .logs()
        .iter()
        .filter(|l| l.contains("storage migrated"))
        .count();
    assert_eq!(
        migrations, 1,
        "one step at the first start, none at the second"
    );
}
