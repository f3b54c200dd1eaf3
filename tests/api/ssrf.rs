//! The SSRF guard (docs/delivery-contract.md): refused literal addresses at endpoint creation, and
//! names that resolve to refused addresses at send time.

use crate::common;

use std::time::Duration;

use common::herald::ADMIN_TOKEN;
use common::{first_delivery, Herald, Receiver, TestCa};
use serde_json::json;

/// Every refused range and notation (docs/delivery-contract.md, "Transport rules"), as an
/// endpoint URL.
const REFUSED: &[&str] = &[
    "https://0.0.0.0/",
    "https://10.1.2.3/",
    "https://100.64.0.1/",
    "https://127.0.0.1/",
    "https://127.255.255.254:8443/x",
    "https://169.254.169.254/latest/meta-data/",
    "https://172.16.0.1/",
    "https://172.31.255.255/",
    "https://192.0.0.8/",
    "https://192.0.2.1/",
    "https://192.88.99.1/",
    "https://192.168.1.1/",
    "https://198.18.0.1/",
    "https://198.19.255.255/",
    "https://198.51.100.7/",
    "https://203.0.113.9/",
    "https://224.0.0.1/",
    "https://239.255.255.250/",
    "https://240.0.0.1/",
    "https://255.255.255.255/",
    // Odd notations a browser normalizes to 127.0.0.1.
    "https://2130706433/",
    "https://0177.0.0.1/",
    "https://0x7f.1/",
    "https://0x7f000001/",
    "https://127.1/",
    // IPv6.
    "https://[::]/",
    "https://[::1]/",
    "https://[fe80::1]/",
    "https://[fc00::1]/",
    "https://[fd00:ec2::254]/",
    "https://[ff02::1]/",
    "https://[2001:db8::1]/",
    "https://[100::1]/",
    // IPv6 forms embedding a refused IPv4 address.
    "https://[::ffff:127.0.0.1]/",
    "https://[::ffff:169.254.169.254]/",
    "https://[::10.0.0.1]/",
    "https://[2002:7f00:1::]/",
    "https://[2002:c0a8:101::1]/",
    "https://[64:ff9b::7f00:1]/",
    "https://[64:ff9b::a9fe:a9fe]/",
    "https://[::ffff:7f00:1]/",
    "https://[::ffff:0:127.0.0.1]/",
    "https://[::169.254.169.254]/",
    "https://[2002:a9fe:a9fe::]/",
    "https://[64:ff9b:1::7f00:1]/",
    "https://[64:ff9b:1::a9fe:a9fe]/",
    // Ranges refused in their own right.
    "https://[fec0::1]/",
    "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    "https://[64:ff9b:1::808:808]/",
    // User-info.
    "https://user:pass@example.com/",
    "https://user@example.com/",
];

/// Creating an endpoint at `url` is refused with `422` naming the field.
async fn assert_refused(h: &Herald, url: &str) {
    let (status, answer) = h
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({ "url": url })),
        )
        .await;
    assert_eq!(status, 422, "{url} was accepted: {answer}");
    assert_eq!(answer["error"]["code"], "invalid_field", "{url}");
    assert_eq!(answer["error"]["field"], "url", "{url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_form_is_rejected_at_creation() {
    let h = Herald::start("").await;
    for url in REFUSED {
        assert_refused(&h, url).await;
    }
    let (_, list) = h.admin("GET", "/v1/accounts/acc/endpoints", None).await;
    assert_eq!(list["items"], json!([]), "a refused endpoint was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_address_in_a_patch_is_rejected_and_changes_nothing() {
    let h = Herald::start("").await;
    let (status, created) = h
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({"url": "https://example.com/hook"})),
        )
        .await;
    assert_eq!(status, 201);
    let id = created["endpoint"]["id"].as_str().unwrap();
    let (status, answer) = h
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{id}"),
            Some(json!({"url": "https://[::ffff:10.0.0.1]/"})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "url");
    let (_, ep) = h.admin("GET", &format!("/v1/endpoints/{id}"), None).await;
    assert_eq!(ep["url"], "https://example.com/hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn name_resolving_to_loopback_is_blocked_at_send_time_and_nothing_arrives() {
    // Herald trusts the CA, but no private network is allowed.
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca_file(dir.path());
    let h = Herald::start(&format!(
        "[delivery]\nextra_ca_file = {}\n",
        common::toml_string(&ca_file.display().to_string())
    ))
    .await;
    let recv = Receiver::ok_https(&ca);
    let url = recv.url("/hook"); // https://localhost:PORT/hook
    assert!(url.contains("localhost"));
    let (status, created) = h
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({ "url": url, "retry_policy": "short" })),
        )
        .await;
    assert_eq!(status, 201, "names are checked at send time: {created}");

    let (status, answer) = h
        .call(
            "POST",
            "/v1/events",
            Some(ADMIN_TOKEN),
            Some(json!({"account_id": "acc", "type": "t.x", "payload": {}})),
        )
        .await;
    assert_eq!(status, 202);
    let id = first_delivery(&answer);
    let path = format!("/v1/deliveries/{id}");
    common::wait_until(
        Duration::from_secs(10),
        "delivery fails as blocked",
        || async { h.admin("GET", &path, None).await.1["state"] == "failed" },
    )
    .await;
    let (_, last) = h.admin("GET", &path, None).await;
    assert_eq!(last["attempt_count"], 1, "blocked is not retried: {last}");
    assert_eq!(last["attempts"][0]["status"], "blocked");
    assert!(last["attempts"][0]["error"]
        .as_str()
        .unwrap()
        .contains("refused range"));
    assert_eq!(recv.count(), 0, "a blocked request reached the receiver");
    assert_eq!(
        recv.connections(),
        0,
        "herald connected to a blocked address"
    );
}

/// An allow-list entry for an IPv6 range never lets a refused IPv4 address through, whatever
/// IPv6 form embeds it (`::/0` once let `[::ffff:7f00:1]` reach 127.0.0.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_allow_list_never_lets_an_embedded_refused_ipv4_through() {
    let h = Herald::start("[delivery]\nallow_private_networks = [\"::/0\"]\n").await;
    let recv = Receiver::ok_http();
    let port = recv.port();
    for url in [
        format!("https://[::ffff:7f00:1]:{port}/"),
        format!("https://[::ffff:0:7f00:1]:{port}/"),
        format!("https://[::7f00:1]:{port}/"),
        "https://[::ffff:169.254.169.254]/".to_string(),
        "https://[::169.254.169.254]/".to_string(),
        "https://[2002:a9fe:a9fe::]/".to_string(),
        "https://[64:ff9b::a00:1]/".to_string(),
        format!("https://[64:ff9b:1::7f00:1]:{port}/"),
        "https://[64:ff9b:1::a9fe:a9fe]/".to_string(),
    ] {
        assert_refused(&h, &url).await;
    }
    // Local-use NAT64 is refused under the range of the IPv4 address it carries.
    let (_, answer) = h
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({ "url": "https://[64:ff9b:1::a9fe:a9fe]/" })),
        )
        .await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("169.254.169.254/32 (cloud metadata)"),
        "{answer}"
    );
    // The allow-list still does what it says for IPv6 itself.
    let (status, answer) = h
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({ "url": "https://[fd12::1]/" })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(recv.connections(), 0);
}
