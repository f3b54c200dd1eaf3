//! Delivery controls (docs/delivery-contract.md): an endpoint's rate limit, the egress proxy and
//! mutual TLS, with the real process, real receivers and a real proxy (Debian's `tinyproxy`).

use crate::common;

use std::time::Duration;

use common::{first_delivery, Receiver, World};
use serde_json::{json, Value};

const SETTLE: Duration = Duration::from_secs(60);

/// An endpoint at 5/s offered 100 events receives all of them, never more than the rate plus the
/// burst in any second; the waiting ones stay `pending` without attempts; an unlimited endpoint
/// of the same account gets all 100 long before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_endpoint_receives_everything_at_its_rate_and_others_are_unaffected() {
    let w = World::start("", "").await;
    let slow = Receiver::ok_https(&w.ca);
    let fast = Receiver::ok_https(&w.ca);
    let (slow_ep, _) = w
        .endpoint(
            "acct_rl",
            &slow.url("/slow"),
            json!({"rate_limit": {"per_second": 5}}),
        )
        .await;
    w.endpoint("acct_rl", &fast.url("/fast"), json!({})).await;
    let (_, view) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{slow_ep}"), None)
        .await;
    assert_eq!(
        view["rate_limit"]["per_second"].as_f64(),
        Some(5.0),
        "{view}"
    );

    let mut slow_deliveries = Vec::new();
    for i in 0..100 {
        let answer = w.ingest("acct_rl", "order.created", json!({"n": i})).await;
        let d = answer["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .find(|d| d["endpoint_id"] == slow_ep.as_str())
            .expect("a delivery to the limited endpoint")["delivery_id"]
            .as_str()
            .expect("id")
            .to_string();
        slow_deliveries.push(d);
    }

    // The unlimited endpoint has everything while the limited one is still far from done.
    fast.wait_for(100, Duration::from_secs(15)).await;
    let slow_so_far = slow.count();
    assert!(
        slow_so_far < 60,
        "the limited endpoint already had {slow_so_far} of 100 when the other had all"
    );
    // A waiting delivery is pending, with no attempt recorded.
    let last = w.delivery(slow_deliveries.last().expect("one")).await;
    assert_eq!(last["state"], "pending", "{last}");
    assert_eq!(last["attempts"].as_array().map(Vec::len), Some(0), "{last}");

    let got = slow.wait_for(100, SETTLE).await;
    assert_eq!(got.len(), 100);
    // Rate 5, burst 5.
    slow.assert_at_most_per_second(10);
    // Every delivery ended delivered after exactly one attempt: waiting is not a failure.
    for id in [&slow_deliveries[0], &slow_deliveries[99]] {
        let d = w.wait_state(id, "delivered", SETTLE).await;
        assert_eq!(d["attempts"].as_array().map(Vec::len), Some(1), "{d}");
    }
}

/// Bad rate limits and orderings are refused (422 `invalid_field`) with the field named, and
/// change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rate_limits_and_orderings_are_refused_with_the_field() {
    let w = World::start("", "").await;
    let r = Receiver::ok_https(&w.ca);
    let (ep, _) = w
        .endpoint(
            "acct_bad",
            &r.url("/"),
            json!({"rate_limit": {"per_second": 0.5}}),
        )
        .await;
    let cases: [(Value, &str); 8] = [
        (
            json!({"rate_limit": {"per_second": 0}}),
            "rate_limit.per_second",
        ),
        (
            json!({"rate_limit": {"per_second": -1}}),
            "rate_limit.per_second",
        ),
        (
            json!({"rate_limit": {"per_second": "5"}}),
            "rate_limit.per_second",
        ),
        (json!({"rate_limit": 5}), "rate_limit"),
        (
            json!({"rate_limit": {"per_second": 5, "burst": 9}}),
            "rate_limit",
        ),
        (json!({"ordering": "customer_id"}), "ordering"),
        (json!({"ordering": {"key": ""}}), "ordering.key"),
        (json!({"ordering": {"key": 7}}), "ordering"),
    ];
    for (body, field) in cases {
        let (status, answer) = w
            .herald
            .admin("PATCH", &format!("/v1/endpoints/{ep}"), Some(body.clone()))
            .await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
    }
    let (_, view) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(
        view["rate_limit"]["per_second"].as_f64(),
        Some(0.5),
        "{view}"
    );
    assert_eq!(view["ordering"], Value::Null, "{view}");

    // null removes the limit; an ordering is set and shown.
    let (status, view) = w
        .herald
        .admin(
            "PATCH",
            &format!("/v1/endpoints/{ep}"),
            Some(json!({"rate_limit": null, "ordering": {"key": "customer_id"}})),
        )
        .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["rate_limit"], Value::Null, "{view}");
    assert_eq!(view["ordering"], json!({"key": "customer_id"}), "{view}");
}

/// A real HTTP CONNECT proxy: Debian's tinyproxy on a free port, logging every request.
struct Tinyproxy {
    child: std::process::Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Tinyproxy {
    async fn start() -> Tinyproxy {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let conf = dir.path().join("tinyproxy.conf");
        std::fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 30\nLogFile \"{}\"\nLogLevel Connect\n\
                 MaxClients 64\nAllow 127.0.0.1\nDisableViaHeader Yes\n",
                dir.path().join("tinyproxy.log").display()
            ),
        )
        .expect("write tinyproxy.conf");
        let child = std::process::Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&conf)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tinyproxy must be installed (Debian package tinyproxy; .ci/run installs it)");
        let proxy = Tinyproxy { child, dir, port };
        common::wait_until(Duration::from_secs(10), "tinyproxy listens", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        proxy
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tinyproxy.log")).unwrap_or_default()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// With `delivery.proxy`, deliveries go through the proxy: it is asked to CONNECT to the
/// address herald resolved and checked (an IP literal, never the name), while TLS (SNI and the
/// certificate check) and `Host` use the endpoint's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_go_through_the_proxy_to_the_checked_address() {
    let proxy = Tinyproxy::start().await;
    let w = World::start(&format!("proxy = \"{}\"", proxy.url()), "").await;
    let recv = Receiver::ok_https(&w.ca);
    let url = recv.url("/via-proxy");
    assert!(url.starts_with("https://localhost:"), "{url}");
    w.endpoint("acct_px", &url, json!({})).await;
    for i in 0..3 {
        let answer = w.ingest("acct_px", "order.created", json!({"n": i})).await;
        w.wait_state(&first_delivery(&answer), "delivered", SETTLE)
            .await;
    }
    let got = recv.wait_for(3, SETTLE).await;
    for r in &got {
        assert_eq!(
            r.header("host"),
            Some(format!("localhost:{}", recv.port()).as_str())
        );
    }
    let log = proxy.log();
    let connect = format!("): CONNECT 127.0.0.1:{} ", recv.port());
    assert!(
        log.contains(&connect),
        "the proxy log has no {connect:?}:\n{log}"
    );
    assert!(
        !log.contains("): CONNECT localhost"),
        "the proxy was given the name:\n{log}"
    );
}

/// The SSRF guard runs before the proxy is asked: a name that resolves to a refused address is
/// `blocked`, and the proxy sees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_address_is_blocked_and_the_proxy_sees_nothing() {
    let proxy = Tinyproxy::start().await;
    let ca = common::TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca_file(dir.path());
    // No private network is allowed here: localhost is refused.
    let h = common::Herald::start(&format!(
        "[delivery]\nextra_ca_file = {}\nproxy = \"{}\"\n",
        common::toml_string(&ca_file.display().to_string()),
        proxy.url()
    ))
    .await;
    let recv = Receiver::ok_https(&ca);
    let (status, created) = h
        .admin(
            "POST",
            "/v1/accounts/acct_px/endpoints",
            Some(json!({"url": recv.url("/hook"), "retry_policy": "none"})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, answer) = h
        .ingest(json!({"account_id": "acct_px", "type": "t.x", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{answer}");
    let id = first_delivery(&answer);
    let path = format!("/v1/deliveries/{id}");
    common::wait_until(SETTLE, "the delivery fails", || async {
        h.admin("GET", &path, None).await.1["state"] == "failed"
    })
    .await;
    let (_, d) = h.admin("GET", &path, None).await;
    assert_eq!(d["last_status"], "blocked", "{d}");
    assert_eq!(recv.count(), 0);
    // (Its readiness probe shows as a connection; a request would show as `Request (...)`.)
    let log = proxy.log();
    assert!(!log.contains("Request ("), "the proxy was asked:\n{log}");
}

/// Mutual TLS: a receiver that requires a client certificate refuses herald without one
/// (`tls_error`) and takes it with the endpoint's certificate, also after a restart. The
/// certificate is write-only: the key is in no answer and no log line; a key that does not
/// match, or a certificate that does not parse, is refused naming the field and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_presents_its_client_certificate_to_a_server_that_requires_one() {
    let mut w = World::start("", "").await;
    let recv = Receiver::https_with(
        w.ca.server_config_requiring_client_auth(),
        common::behaviour(|_, _| common::Reply::status(200)),
    );
    let (ep, _) = w
        .endpoint(
            "acct_mtls",
            &recv.url("/mtls"),
            json!({"retry_policy": "none"}),
        )
        .await;
    let cert_path = format!("/v1/endpoints/{ep}/client-certificate");

    // Without a certificate the server refuses the handshake.
    let answer = w.ingest("acct_mtls", "order.created", json!({})).await;
    let d = w
        .wait_state(&first_delivery(&answer), "failed", SETTLE)
        .await;
    assert_eq!(
        d["last_status"],
        "tls_error",
        "{d}; the receiver's failed handshakes: {:?}",
        recv.tls_failures()
    );
    assert_eq!(recv.count(), 0);

    let (certificate, private_key) = w.ca.client_identity_pem("herald-client.example");
    let key_line = private_key
        .lines()
        .find(|l| !l.starts_with("-----"))
        .expect("a base64 line")
        .to_string();
    let (status, view) = w
        .herald
        .admin(
            "PUT",
            &cert_path,
            Some(json!({"certificate": certificate, "private_key": private_key})),
        )
        .await;
    assert_eq!(status, 200, "{view}");
    let subject = view["client_certificate"]["subject"].as_str().unwrap_or("");
    assert!(subject.contains("CN=herald-client.example"), "{view}");
    assert!(
        view["client_certificate"]["not_after"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{view}"
    );
    let answer = w.ingest("acct_mtls", "order.created", json!({})).await;
    w.wait_state(&first_delivery(&answer), "delivered", SETTLE)
        .await;
    assert_eq!(recv.count(), 1);

    // Refused inputs name their field and change nothing.
    let (other_cert, other_key) = w.ca.client_identity_pem("other.example");
    let cases = [
        (
            json!({"certificate": certificate, "private_key": other_key}),
            "private_key",
        ),
        (
            json!({"certificate": "not a certificate", "private_key": private_key}),
            "certificate",
        ),
        (
            json!({"certificate": other_cert, "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}),
            "private_key",
        ),
        (json!({"certificate": certificate}), "private_key"),
    ];
    for (body, field) in cases {
        let (status, answer) = w.herald.admin("PUT", &cert_path, Some(body)).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["field"], field, "{answer}");
        assert!(!answer.to_string().contains(&key_line), "{answer}");
    }

    // Kept across a restart (a clean one: a kill may send the last delivery again), and never
    // shown.
    w.herald.sigterm().await;
    w.herald.restart().await;
    let answer = w.ingest("acct_mtls", "order.created", json!({})).await;
    w.wait_state(&first_delivery(&answer), "delivered", SETTLE)
        .await;
    assert_eq!(recv.count(), 2);
    let reads = [
        format!("/v1/endpoints/{ep}"),
        "/v1/accounts/acct_mtls/endpoints".to_string(),
        format!("/v1/deliveries/{}", first_delivery(&answer)),
    ];
    for path in &reads {
        let (status, body) = w.herald.admin("GET", path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        let text = body.to_string();
        assert!(
            !text.contains("PRIVATE KEY") && !text.contains(&key_line),
            "{path}: {text}"
        );
    }
    let (_, view) = w
        .herald
        .admin("GET", &format!("/v1/endpoints/{ep}"), None)
        .await;
    assert_eq!(view["client_certificate"]["subject"], subject, "{view}");
    let logs = w.herald.log_text();
    assert!(
        !logs.contains("PRIVATE KEY") && !logs.contains(&key_line),
        "the key is in herald's log"
    );

    // Removed: refused again.
    let (status, view) = w.herald.admin("DELETE", &cert_path, None).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["client_certificate"], Value::Null, "{view}");
    let answer = w.ingest("acct_mtls", "order.created", json!({})).await;
    let d = w
        .wait_state(&first_delivery(&answer), "failed", SETTLE)
        .await;
    assert_eq!(d["last_status"], "tls_error", "{d}");
    assert_eq!(recv.count(), 2);
}
