//! Installs upgrade, they do not start over: data directories written by earlier heralds
//! (storage formats 2 to 7, 10 and 11, kept in `tests/fixtures/format2` to `format7`, `format10`
//! and `format11`) open
//! in this one, are migrated in place, and keep their log, their endpoints and their pending
//! deliveries.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{behaviour, Herald, Receiver, Reply};
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
    copy_dir(&from, to);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else if entry.file_name() != "README.md" {
            std::fs::copy(entry.path(), &dest).unwrap();
            // As herald 0.1 left them under umask 022.
            std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    }
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// herald started on a copy of fixture `name` (with `tables` in its config), and its data
/// directory.
async fn on_fixture(tables: &str, name: &str) -> (Herald, std::path::PathBuf) {
    let mut h = Herald::start(&format!("{tables}{}", common::ON_SLED)).await;
    h.kill9();
    let data = h.storage_path();
    std::fs::remove_dir_all(&data).unwrap();
    copy_fixture(name, &data);
    h.restart().await;
    (h, data)
}

/// The state of every delivery, newest first.
async fn states(h: &Herald) -> Vec<String> {
    let (status, list) = h.admin("GET", "/v1/deliveries?limit=100", None).await;
    assert_eq!(status, 200, "{list}");
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["state"].as_str().unwrap().to_string())
        .collect()
}

/// Points the fixture's endpoint at `recv` and retries the first delivery of `event`: the
/// receiver gets it with the event's id as `webhook-id`.
async fn retry_reaches(h: &Herald, recv: &Receiver, endpoint: &str, event: &str) {
    let (status, _) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{endpoint}"),
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 200);
    let delivery = format!("dlv_{}1", &event[4..event.len() - 1]);
    // The engine may be attempting it at the old URL right now (`409 delivery_in_flight`):
    // asked again until that attempt is over.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let (status, retried) = loop {
        let (status, retried) = h
            .admin("POST", &format!("/v1/deliveries/{delivery}/retry"), None)
            .await;
        if status != 409 || std::time::Instant::now() > deadline {
            break (status, retried);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status == 200 || status == 202, "{status} {retried}");
    let got = recv.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(got[0].header("webhook-id"), Some(event));
}

/// The steps after format 7 whose logs say `storage migrated from format N to format N+1`,
/// by N: every store older than format 7 takes them too (docs/operations.md, "Upgrade").
const LATER_STEPS: &[u8] = &[7, 8, 9, 10, 11, 12, 13, 14];

/// Waits for each migration step from `format` to format 7, and the later ones, in the log.
async fn migrated_through_7(h: &Herald, format: u8) {
    for from in (format..7).chain(LATER_STEPS.iter().copied()) {
        h.wait_for_log(
            &format!("storage migrated from format {from} to format {}", from + 1),
            Duration::from_secs(5),
        )
        .await;
    }
}

/// Stops herald with SIGTERM, starts it again on the same data, and counts the migration
/// steps logged by both starts.
async fn restarted_migrations(h: &mut Herald) -> usize {
    let status = h.sigterm().await;
    assert!(status.success());
    h.restart().await;
    h.logs()
        .iter()
        .filter(|l| l.contains("storage migrated"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_2_data_directory_is_migrated_and_keeps_working() {
    let recv = Receiver::ok_http();
    let (mut h, data) = on_fixture(FIXTURE_TABLES, "format2").await;
    migrated_through_7(&h, 2).await;

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

    // The files are private now, and the next start finds format 8 (no migration again).
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&data.join("db")), 0o600);
    let migrations = restarted_migrations(&mut h).await;
    assert_eq!(
        migrations,
        5 + LATER_STEPS.len(),
        "five steps to format 7 and the later ones at the first start, none at the second"
    );
    let (_, list) = h.admin("GET", "/v1/deliveries?limit=100", None).await;
    assert_eq!(list["items"].as_array().unwrap().len(), 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_3_data_directory_is_migrated_and_keeps_working() {
    let recv = Receiver::ok_http();
    let (mut h, data) = on_fixture(FIXTURE_TABLES, "format3").await;
    let line = h
        .wait_for_log(
            "storage migrated from format 3 to format 4",
            Duration::from_secs(5),
        )
        .await;
    assert!(line.contains("idempotency_keys=2"), "{line}");
    migrated_through_7(&h, 4).await;
    assert!(data.join("idempotency").is_dir());
    assert!(!data.join("keys").exists());

    assert_eq!(states(&h).await, ["delivered", "skipped", "delivered"]);

    // It goes on: a retry of the delivered one reaches a receiver.
    retry_reaches(
        &h,
        &recv,
        "ep_01M8YECQJJ1W7HG20CY93V6SK6",
        "evt_01M8YECQJWCCC1DMPEKQ6DCC00",
    )
    .await;

    let migrations = restarted_migrations(&mut h).await;
    assert_eq!(
        migrations,
        4 + LATER_STEPS.len(),
        "four steps to format 7 and the later ones at the first start, none at the second"
    );
}

/// Format 4 (tests/fixtures/format4, see its README) opens in format 5, its history folds, and
/// the folded log reads and retries as it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_4_data_directory_opens_folds_and_keeps_working() {
    let recv = Receiver::ok_http();
    let tables = format!("{FIXTURE_TABLES}[storage]\nfold_after = \"1s\"\n");
    let (h, _) = on_fixture(&tables, "format4").await;
    migrated_through_7(&h, 4).await;
    let line = h
        .wait_for_log("history folded", Duration::from_secs(10))
        .await;
    assert!(line.contains("events=3"), "{line}");

    assert_eq!(states(&h).await, ["delivered", "skipped", "delivered"]);
    let (status, list) = h
        .admin("GET", "/v1/deliveries?account_id=acct-1&limit=100", None)
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
    let (status, delivery) = h
        .admin("GET", "/v1/deliveries/dlv_01M8Z6FDWX24RQ0184K0X9X001", None)
        .await;
    assert_eq!(status, 200, "{delivery}");
    assert_eq!(
        delivery["attempts"][0]["status"],
        json!("delivered"),
        "{delivery}"
    );
    let (status, event) = h
        .admin("GET", "/v1/events/evt_01M8Z6FDWX24RQ0184K0X9X000", None)
        .await;
    assert_eq!(status, 200, "{event}");
    assert_eq!(event["payload"], json!({"n": 1}), "{event}");

    // A retry of a folded delivery reaches a receiver with the same webhook-id.
    retry_reaches(
        &h,
        &recv,
        "ep_01M8Z6FDR00YQC2ZXKE1G9STEP",
        "evt_01M8Z6FDWX24RQ0184K0X9X000",
    )
    .await;
}

/// Format 5 (tests/fixtures/format5, see its README) opens in format 8: its 210 idempotency
/// keys, a sled row each, move to tables of their own; its folded and hot log reads as it did,
/// and a second start migrates nothing. Format 6 (tests/fixtures/format6), the same keys packed
/// many to a sled row, too. (That every key still answers `duplicate` is
/// `format_5_and_6_stores_move_their_keys_to_tables` in the store's tests, on a clock at the
/// fixtures' time: the keys' 24 hours have passed for a test run later.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_5_and_6_data_directories_move_their_keys_and_keep_working() {
    for (fixture, format, first) in [
        ("format5", 5, "evt_01M8ZD18X9EV1TH0JA66BFWR00"),
        ("format6", 6, "evt_01M904VQQG0R52WGC4GCM1JM00"),
    ] {
        let (mut h, data) = on_fixture(FIXTURE_TABLES, fixture).await;
        migrated_through_7(&h, format).await;
        let line = h
            .wait_for_log(
                "storage migrated from format 6 to format 7",
                Duration::from_secs(5),
            )
            .await;
        assert!(line.contains("idempotency_keys=210"), "{fixture}: {line}");
        assert!(!data.join("keys").exists(), "{fixture}");

        let (status, list) = h.admin("GET", "/v1/deliveries?limit=500", None).await;
        assert_eq!(status, 200, "{list}");
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 211, "{fixture}: {list}");
        let delivered = items.iter().filter(|d| d["state"] == "delivered").count();
        assert_eq!(delivered, 151, "{fixture}: {list}");
        let (status, event) = h.admin("GET", &format!("/v1/events/{first}"), None).await;
        assert_eq!(status, 200, "{event}");
        assert_eq!(event["payload"], json!({"n": 0}), "{event}");
        assert_eq!(event["idempotency_key"], json!("idem-1-0"), "{event}");

        let migrations = restarted_migrations(&mut h).await;
        assert_eq!(
            migrations,
            usize::from(7 - format) + LATER_STEPS.len(),
            "{fixture}: its steps at the first start, none at the second"
        );
    }
}

/// Format 7 (tests/fixtures/format7, see its README: the last format before debounce windows
/// and operator events were indexed by account, secrets had rows of their own and chart minutes
/// were keyed by hour) opens in this herald: each later step runs once; the endpoint keeps its
/// filter, headers and description, the account its plan and alert addresses; the secrets
/// still sign and rotate; a purge then forgets the windows keyed by a payload field and the
/// operator events about the account that the format-7 store wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_7_data_directory_keeps_filters_alerts_and_secrets_and_purges_whole() {
    let tables = format!(
        "{FIXTURE_TABLES}[plans.basic]\nper_minute = 1000\n\
         [catalog.events.\"order.created\"]\ndescription = \"An order was created\"\n\
         [catalog.events.\"location.updated\"]\ndescription = \"A location changed\"\n\
         debounce = {{ window = \"1d\", key = \"loc\" }}\n"
    );
    let (mut h, _data) = on_fixture(&tables, "format7").await;
    migrated_through_7(&h, 7).await;

    let ok = "ep_01M94BE3WGABD7Z19S6V0N1KE6";
    let (status, ep) = h.admin("GET", &format!("/v1/endpoints/{ok}"), None).await;
    assert_eq!(status, 200, "{ep}");
    assert_eq!(ep["filter"], json!({"payload": {"n": {"$gte": 0}}}), "{ep}");
    assert_eq!(ep["description"], json!("the good one"), "{ep}");
    assert_eq!(
        ep["headers"],
        json!({"x-token": "{{ secret.api_key }}"}),
        "{ep}"
    );
    assert!(!ep.to_string().contains("whsec_"), "no secret shown: {ep}");
    let (status, account) = h.admin("GET", "/v1/accounts/acct_ok", None).await;
    assert_eq!(status, 200, "{account}");
    assert_eq!(account["plan"], json!("basic"), "{account}");
    assert_eq!(
        account["alert_emails"],
        json!(["ops@example.com", "dev@example.com"]),
        "{account}"
    );

    // The migrated secrets still sign (the rotated pair), and the endpoint rotates again.
    let recv = Receiver::ok_http();
    let (status, _) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ok}"),
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 200);
    common::rotated_secret_signs(&h, ok, &recv).await;

    // A purge of acct_wait forgets its window keyed by the payload's `loc`: the same event
    // to a new endpoint is delivered, not debounced.
    let (status, purged) = h.admin("DELETE", "/v1/accounts/acct_wait", None).await;
    assert_eq!(status, 200, "{purged}");
    let (status, created) = h
        .admin(
            "POST",
            "/v1/accounts/acct_wait/endpoints",
            Some(json!({"url": recv.url("/wait")})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    for (payload, key) in [
        (json!({"loc": "L1", "n": 2}), None),
        (json!({"loc": "L2", "n": 3}), Some("explicit-key")),
    ] {
        let mut event = json!({"account_id": "acct_wait", "type": "location.updated",
            "payload": payload});
        if let Some(k) = key {
            event["debounce_key"] = json!(k);
        }
        let (status, answer) = h.ingest(event).await;
        assert_eq!(status, 202, "{answer}");
        assert_eq!(
            answer["deliveries"][0]["state"],
            json!("pending"),
            "{answer}"
        );
    }

    // A purge of acct_fail takes the operator events about it, folded or hot.
    let (_, list) = h.admin("GET", "/v1/deliveries?limit=500", None).await;
    let operator = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["account_id"] == "_operator")
        .count();
    assert_eq!(
        operator, 11,
        "the fixture's operator events about acct_fail: {list}"
    );
    let (status, purged) = h.admin("DELETE", "/v1/accounts/acct_fail", None).await;
    assert_eq!(status, 200, "{purged}");
    let (status, list) = h.admin("GET", "/v1/deliveries?limit=500", None).await;
    assert_eq!(status, 200, "{list}");
    let operator: Vec<_> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["account_id"] == "_operator")
        .collect();
    assert_eq!(operator, Vec::<&serde_json::Value>::new(), "{list}");

    let migrations = restarted_migrations(&mut h).await;
    assert_eq!(
        migrations,
        LATER_STEPS.len(),
        "the later steps once each, none at the second start"
    );
}

/// Format 10 (tests/fixtures/format10, see its README: the last format before what the
/// Svix-compatible API keeps) opens in this herald and its accounts are applications of that
/// API: named by their ids, created when their first endpoint was, listed without `_operator`;
/// their old attempts read with no URL; a message sent through the door now reaches the
/// endpoint and its attempt names the URL; an application's delete is the account's purge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_10_data_directory_serves_its_accounts_as_applications() {
    let tables = format!(
        "{FIXTURE_TABLES}[plans.basic]\nper_minute = 1000\n[svix]\nenabled = true\n\
         [catalog.events.\"order.created\"]\ndescription = \"An order was created\"\n\
         [catalog.events.\"location.updated\"]\ndescription = \"A location changed\"\n\
         debounce = {{ window = \"1d\", key = \"loc\" }}\n"
    );
    let (mut h, _data) = on_fixture(&tables, "format10").await;
    h.wait_for_log(
        "storage migrated from format 10 to format 11",
        Duration::from_secs(5),
    )
    .await;
    let ok = "ep_01M94M1TVWE9WQJ73D0NAN0HMV";
    let (_, ep) = h.admin("GET", &format!("/v1/endpoints/{ok}"), None).await;
    assert_eq!(ep["signature_headers"], json!("webhook"), "{ep}");

    let (status, app) = h.admin("GET", "/api/v1/app/acct_ok", None).await;
    assert_eq!(status, 200, "{app}");
    assert_eq!(app["id"], json!("acct_ok"), "{app}");
    assert_eq!(app["name"], json!("acct_ok"), "{app}");
    assert_eq!(app["metadata"], json!({}), "{app}");
    assert_eq!(
        app["createdAt"], ep["created_at"],
        "its first endpoint's time: {app}"
    );
    let (status, list) = h.admin("GET", "/api/v1/app?limit=250", None).await;
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["acct_fail", "acct_ok", "acct_wait"], "{list}");
    assert_eq!(list["done"], json!(true), "{list}");

    // The fixture's five messages (folded), their eventIds the idempotency keys; the old
    // attempts have no URL.
    let (status, msgs) = h.admin("GET", "/api/v1/app/acct_ok/msg", None).await;
    assert_eq!(status, 200, "{msgs}");
    let keys: Vec<&str> = msgs["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["eventId"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "acct_ok-4",
            "acct_ok-3",
            "acct_ok-2",
            "acct_ok-1",
            "acct_ok-0"
        ]
    );
    let (status, attempts) = h
        .admin(
            "GET",
            &format!("/api/v1/app/acct_ok/attempt/endpoint/{ok}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{attempts}");
    let attempts = attempts["data"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), 5, "{attempts:?}");
    for a in &attempts {
        assert_eq!(
            (a["url"].as_str(), a["status"].as_u64()),
            (Some(""), Some(0)),
            "{a}"
        );
        assert_eq!(a["responseStatusCode"], json!(200), "{a}");
    }

    // A message through the door now: delivered, its attempt names the URL it went to.
    let recv = Receiver::ok_http();
    let url = recv.url("/hook");
    let (status, _) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ok}"),
            Some(json!({"url": url})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, msg) = h
        .admin(
            "POST",
            "/api/v1/app/acct_ok/msg",
            Some(json!({"eventType": "order.created", "payload": {"n": 9}, "channels": ["eu"]})),
        )
        .await;
    assert_eq!(status, 202, "{msg}");
    let got = recv.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(got[0].header("webhook-id"), msg["id"].as_str());
    let path = format!(
        "/api/v1/app/acct_ok/attempt/msg/{}",
        msg["id"].as_str().unwrap()
    );
    common::wait_until(
        Duration::from_secs(20),
        "the new message's attempt is listed",
        || async { h.admin("GET", &path, None).await.1["data"][0].is_object() },
    )
    .await;
    let attempt = h.admin("GET", &path, None).await.1["data"][0].clone();
    assert_eq!(attempt["url"], json!(url), "{attempt}");

    // An application's delete is the account's purge.
    let (status, _) = h.admin("DELETE", "/api/v1/app/acct_wait", None).await;
    assert_eq!(status, 204);
    let (status, gone) = h.admin("GET", "/api/v1/app/acct_wait", None).await;
    assert_eq!(status, 404, "{gone}");

    assert_eq!(
        restarted_migrations(&mut h).await,
        5,
        "the steps to formats 11 to 15, none at the second start"
    );
}

/// Format 11 (tests/fixtures/format11, see its README: the last format before endpoints' last
/// successes were kept) opens in this herald in one logged step: its endpoints read no last
/// success yet, and one is kept from the next delivery on, through a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_11_data_directory_keeps_last_successes_from_now_on() {
    let tables = format!("{FIXTURE_TABLES}[plans.basic]\nper_minute = 1000\n");
    let (mut h, _data) = on_fixture(&tables, "format11").await;
    h.wait_for_log(
        "storage migrated from format 11 to format 12",
        Duration::from_secs(5),
    )
    .await;
    let ok = "ep_01M96CKNY803RZX81VZ5FCE0RC";
    let path = format!("/v1/endpoints/{ok}");
    let (status, ep) = h.admin("GET", &path, None).await;
    assert_eq!(status, 200, "{ep}");
    assert_eq!(
        ep["last_success_at"],
        json!(null),
        "format 11 kept none: {ep}"
    );

    let recv = Receiver::ok_http();
    let (status, _) = h
        .admin("PATCH", &path, Some(json!({"url": recv.url("/hook")})))
        .await;
    assert_eq!(status, 200);
    let (status, answer) = h
        .ingest(json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 9}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    recv.wait_for(1, Duration::from_secs(20)).await;
    common::wait_until(Duration::from_secs(20), "the success is shown", || async {
        h.admin("GET", &path, None).await.1["last_success_at"].is_string()
    })
    .await;
    let shown = h.admin("GET", &path, None).await.1["last_success_at"].clone();
    assert_eq!(
        restarted_migrations(&mut h).await,
        4,
        "the steps to formats 12 to 15 once, at the first start"
    );
    let (_, ep) = h.admin("GET", &path, None).await;
    assert_eq!(ep["last_success_at"], shown, "kept through a restart: {ep}");
}

/// Format 12 (tests/fixtures/format12, see its README: the last format before attempts kept
/// their response's headers) opens in this herald in one logged step: its attempts read with
/// no response headers, and the next attempt keeps them, through a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_12_data_directory_keeps_response_headers_from_now_on() {
    let tables = format!("{FIXTURE_TABLES}[plans.basic]\nper_minute = 1000\n");
    let (mut h, _data) = on_fixture(&tables, "format12").await;
    h.wait_for_log(
        "storage migrated from format 12 to format 13",
        Duration::from_secs(5),
    )
    .await;
    // The next step sums the minutes kept into hours: the fixture's four endpoints had
    // attempts in one minute.
    let line = h
        .wait_for_log(
            "storage migrated from format 13 to format 14",
            Duration::from_secs(5),
        )
        .await;
    assert!(line.contains("hours=4"), "{line}");
    let (status, list) = h
        .admin("GET", "/v1/deliveries?account_id=acct_ok&limit=1", None)
        .await;
    assert_eq!(status, 200, "{list}");
    let old = list["items"][0]["id"]
        .as_str()
        .expect("a delivery")
        .to_string();
    let (status, d) = h.admin("GET", &format!("/v1/deliveries/{old}"), None).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        d["attempts"][0]["response_headers"],
        json!({}),
        "format 12 kept none: {d}"
    );
    assert_eq!(d["attempts"][0]["http_status"], json!(200), "{d}");

    let ok = "ep_01M96N2JMXFAMXVNH5JZC1X4G0";
    let recv = Receiver::http(behaviour(|_, _| {
        Reply::status(200).with_header("x-receiver-id", "rcv-12")
    }));
    let (status, _) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ok}"),
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, answer) = h
        .ingest(json!({"account_id": "acct_ok", "type": "order.created", "payload": {"n": 9}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    let new = common::first_delivery(&answer);
    recv.wait_for(1, Duration::from_secs(20)).await;
    let path = format!("/v1/deliveries/{new}");
    common::wait_until(
        Duration::from_secs(20),
        "the attempt is recorded",
        || async { h.admin("GET", &path, None).await.1["state"] == "delivered" },
    )
    .await;
    assert_eq!(
        restarted_migrations(&mut h).await,
        3,
        "the steps to formats 13, 14 and 15 once, at the first start"
    );
    let (_, d) = h.admin("GET", &path, None).await;
    assert_eq!(
        d["attempts"][0]["response_headers"]["x-receiver-id"], "rcv-12",
        "kept through a restart: {d}"
    );
}

/// Format 14 (tests/fixtures/format14, see its README: the last format before events kept a
/// trace context) opens in this herald in one logged step: its events have no context (their
/// attempts start traces of their own), a new event keeps its request's, through a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_14_data_directory_keeps_trace_contexts_from_now_on() {
    let tables = format!("{FIXTURE_TABLES}[plans.basic]\nper_minute = 1000\n");
    let (mut h, _data) = on_fixture(&tables, "format14").await;
    h.wait_for_log(
        "storage migrated from format 14 to format 15",
        Duration::from_secs(5),
    )
    .await;
    // The fixture's events kept no context: a retry to a receiver that asks for the trace
    // carries none.
    let ok = "ep_01M96XX97Z741YJX58X36JW1XB";
    let recv = Receiver::http(behaviour(|_, _| Reply::status(200)));
    let (status, ep) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ok}"),
            Some(json!({"url": recv.url("/old"), "propagate_trace": true})),
        )
        .await;
    assert_eq!(status, 200, "{ep}");
    let (status, list) = h
        .admin("GET", "/v1/deliveries?account_id=acct_ok&limit=1", None)
        .await;
    assert_eq!(status, 200, "{list}");
    let old = list["items"][0]["id"]
        .as_str()
        .expect("a delivery")
        .to_string();
    let (status, retried) = h
        .admin("POST", &format!("/v1/deliveries/{old}/retry"), None)
        .await;
    assert!(status < 300, "{retried}");
    recv.wait_for(1, Duration::from_secs(20)).await;

    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (status, _, answer) = h
        .call_raw(
            "POST",
            "/v1/events",
            Some(common::herald::INGEST_TOKEN),
            &[("content-type", "application/json"), ("traceparent", trace)],
            br#"{"account_id":"acct_ok","type":"order.created","payload":{"n":99}}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 202);
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    let event = answer["event_id"].as_str().unwrap().to_string();
    // The old event's request carries no context; the new event's carries its request's.
    let of_event = |n: usize| {
        let recv = &recv;
        let event = event.clone();
        move || {
            let seen = recv
                .requests()
                .iter()
                .filter(|r| r.header("webhook-id") == Some(event.as_str()))
                .count();
            async move { seen >= n }
        }
    };
    common::wait_until(
        Duration::from_secs(20),
        "the new event arrives",
        of_event(1),
    )
    .await;
    for r in recv.requests() {
        let expected = (r.header("webhook-id") == Some(event.as_str())).then_some(trace);
        assert_eq!(
            r.header("traceparent"),
            expected,
            "{:?}",
            r.header("webhook-id")
        );
    }
    assert_eq!(
        restarted_migrations(&mut h).await,
        1,
        "the step to format 15 once, at the first start"
    );
    let (status, replayed) = h
        .admin(
            "POST",
            &format!("/v1/events/{event}/replay"),
            Some(json!({"dry_run": true})),
        )
        .await;
    assert_eq!(status, 200, "{replayed}");
    // The kept context outlived the restart: a manual retry of the new event carries it.
    let new = common::first_delivery(&answer);
    let path = format!("/v1/deliveries/{new}");
    common::wait_until(
        Duration::from_secs(20),
        "the delivery is settled",
        || async { h.admin("GET", &path, None).await.1["state"] == "delivered" },
    )
    .await;
    let (status, _) = h.admin("POST", &format!("{path}/retry"), None).await;
    assert!(status < 300);
    common::wait_until(Duration::from_secs(20), "the retry arrives", of_event(2)).await;
    for r in recv.requests() {
        if r.header("webhook-id") == Some(event.as_str()) {
            assert_eq!(r.header("traceparent"), Some(trace));
        }
    }
}

/// An endpoint stored with a `traceparent` custom header before herald reserved the name still
/// loads and delivers: herald warns of it at start and never sends it; its other headers go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_stored_with_a_trace_header_delivers_without_it() {
    use herald_store::contract::Directory;
    let recv = Receiver::ok_http();
    let mut h = Herald::start(&format!("{FIXTURE_TABLES}{}", common::ON_SLED)).await;
    let (status, ep) = h
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": recv.url("/hook"), "headers": {"x-team": "billing"}})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let id = ep["endpoint"]["id"].as_str().unwrap().to_string();
    assert!(h.sigterm().await.success());
    // As an older herald stored it: the header written into the store itself.
    {
        let clock: std::sync::Arc<dyn herald::clock::Clock> =
            std::sync::Arc::new(herald::clock::SystemClock);
        let store = herald_store_sled::SledStore::open(
            &h.storage_path(),
            8 << 20,
            clock,
            std::sync::Arc::default(),
        )
        .expect("open the store");
        let changed = store
            .change_endpoint(&id, |e| {
                e.headers.insert(
                    "traceparent".into(),
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                );
                Ok::<bool, herald_store::StoreError>(true)
            })
            .await
            .expect("change the endpoint");
        assert!(changed.is_some_and(|(_, c)| c));
        let committer = store.take_committer();
        store.close().expect("close");
        drop(store);
        if let Some(c) = committer {
            c.join().expect("the committer ends");
        }
    }
    h.restart().await;
    let line = h
        .wait_for_log("has a name herald now sets itself", Duration::from_secs(5))
        .await;
    assert!(line.contains(&id) && line.contains("traceparent"), "{line}");
    let (status, answer) = h
        .ingest(json!({"account_id": "acme", "type": "t.x", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    recv.wait_for(1, Duration::from_secs(20)).await;
    let got = &recv.requests()[0];
    assert_eq!(got.header("x-team"), Some("billing"));
    assert_eq!(got.header("traceparent"), None, "never sent");
    // A change of the endpoint that still names it is refused, naming it.
    let (status, e) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"headers": {"x-team": "billing", "traceparent": "x"}})),
        )
        .await;
    assert_eq!(
        (status, e["error"]["field"].as_str()),
        (422, Some("headers.traceparent")),
        "{e}"
    );
}
