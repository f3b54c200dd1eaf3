//! `GET /metrics`: Prometheus text that the official Prometheus client library parses, with
//! values that move with what herald did.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{behaviour, first_delivery, Receiver, Reply, World};
use serde_json::{json, Value};

/// Parses with `prometheus_client` (Python); panics on a parse error.
fn parse(text: &str) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/parse_metrics.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (install: pip install -r tests/tools/requirements.txt)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the text (pip install -r tests/tools/requirements.txt):\n{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn value(samples: &[Value], name: &str, labels: Value) -> f64 {
    samples
        .iter()
        .find(|s| s["name"] == name && (labels.is_null() || s["labels"] == labels))
        .unwrap_or_else(|| panic!("no sample {name} {labels}"))["value"]
        .as_f64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_with_the_prometheus_parser_and_move() {
    let w = World::start("", "").await;
    let fetch = || async {
        let (status, headers, body) = w
            .herald
            .call_raw("GET", "/metrics", None, &[], vec![])
            .await;
        assert_eq!(status, 200);
        let ct = headers.iter().find(|(k, _)| k == "content-type").unwrap();
        assert!(ct.1.starts_with("text/plain; version=0.0.4"), "{ct:?}");
        parse(&String::from_utf8(body).unwrap())
    };
    let before = fetch().await;
    assert_eq!(
        value(&before, "herald_events_ingested_total", Value::Null),
        0.0
    );

    let ok = Receiver::ok_https(&w.ca);
    let bad = Receiver::https(&w.ca, behaviour(|_, _| Reply::status(500)));
    w.endpoint("a", &ok.url("/ok"), json!({})).await;
    w.endpoint("b", &bad.url("/bad"), json!({"retry_policy": "none"}))
        .await;
    let settle = Duration::from_secs(10);
    let d1 = first_delivery(&w.ingest("a", "t.x", json!({})).await);
    let d2 = first_delivery(&w.ingest("b", "t.x", json!({})).await);
    w.wait_state(&d1, "delivered", settle).await;
    w.wait_state(&d2, "failed", settle).await;

    let after = fetch().await;
    assert_eq!(
        value(&after, "herald_events_ingested_total", Value::Null),
        2.0
    );
    let status = |s: &str| json!({ "status": s });
    assert_eq!(
        value(&after, "herald_attempts_total", status("delivered")),
        1.0
    );
    assert_eq!(
        value(&after, "herald_attempts_total", status("http_error")),
        1.0
    );
    assert_eq!(
        value(&after, "herald_attempts_total", status("timeout")),
        0.0
    );
    assert_eq!(
        value(&after, "herald_attempt_duration_seconds_count", Value::Null),
        2.0
    );
    assert_eq!(
        value(
            &after,
            "herald_ingest_to_first_attempt_seconds_count",
            Value::Null
        ),
        2.0
    );
    assert_eq!(
        value(&after, "herald_deliveries", json!({"state": "delivered"})),
        1.0
    );
    assert_eq!(
        value(&after, "herald_deliveries", json!({"state": "failed"})),
        1.0
    );
    assert!(value(&after, "herald_commit_batch_size_count", Value::Null) >= 1.0);
    assert!(value(&after, "herald_fsync_duration_seconds_count", Value::Null) >= 1.0);
    assert_eq!(
        value(&after, "herald_quota_check_failures_total", Value::Null),
        0.0
    );
    // Families are typed as Prometheus expects.
    let typed = |family: &str| {
        after
            .iter()
            .find(|s| s["family"] == family)
            .map(|s| s["type"].as_str().unwrap().to_string())
    };
    assert_eq!(typed("herald_attempts").as_deref(), Some("counter"));
    assert_eq!(
        typed("herald_attempt_duration_seconds").as_deref(),
        Some("histogram")
    );
    assert_eq!(typed("herald_deliveries").as_deref(), Some("gauge"));
}
