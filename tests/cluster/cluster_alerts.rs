//! Failure alerts in a cluster (docs/operations.md, "Failure alerts"): two nodes on one real
//! PostgreSQL, each in this process on a manual clock (moved together), mailing one real SMTP
//! server. The breaker opens on one node, then again on the other within `min_interval`: one
//! failing mail for both, and the recovery that answers it once.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::smtp::{Mode, SmtpSink};
use common::{behaviour, first_delivery, wait_until, HeraldApi, InProc, Receiver, Reply, TestCa};
use serde_json::{json, Value};

/// 2026-12-02T12:00:00Z.
const T0: i64 = 1_796_212_800_000;
const HOUR: i64 = 3_600_000;
const SETTLE: Duration = Duration::from_secs(20);

struct Cluster {
    nodes: Vec<InProc>,
}

impl Cluster {
    fn set_clock(&self, at: i64) {
        for n in &self.nodes {
            n.clock.set(at);
        }
    }

    /// The delivery once it is no longer pending, as node 0 shows it.
    async fn settled(&self, id: &str) -> Value {
        let path = format!("/v1/deliveries/{id}");
        wait_until(SETTLE, &format!("delivery {id} settles"), || async {
            self.nodes[0].admin("GET", &path, None).await.1["state"] != "pending"
        })
        .await;
        self.nodes[0].admin("GET", &path, None).await.1
    }

    /// One event ingested through `node` (which attempts it: a cluster node takes the fresh
    /// deliveries it has room for), settled as `state`.
    async fn one(&self, node: usize, state: &str) {
        let (status, answer) = self.nodes[node]
            .ingest(json!({"account_id": "acme", "type": "t.x", "payload": {}}))
            .await;
        assert_eq!(status, 202, "{answer}");
        let v = self.settled(&first_delivery(&answer)).await;
        assert_eq!(v["state"], state, "{v}");
    }

    /// Ten failures in a row, the tenth (the one that opens the breaker) on `node`; returns
    /// once the breaker is open (a delivery settles before its attempt moves the breaker).
    async fn open_on(&self, node: usize) {
        for i in 0..9 {
            self.one(i % 2, "failed").await;
        }
        self.one(node, "failed").await;
        wait_until(SETTLE, "the breaker is open", || async {
            let (_, st) = self.nodes[node].admin("GET", "/v1/status", None).await;
            st["open_breakers"]
                .as_array()
                .is_some_and(|b| !b.is_empty())
        })
        .await;
    }

    async fn alerts(&self, result: &str) -> u64 {
        let mut sum = 0;
        for n in &self.nodes {
            let (_, _, body) = n.call_raw("GET", "/metrics", None, &[], vec![]).await;
            let text = String::from_utf8(body).expect("metrics are text");
            let prefix = format!("herald_alerts_total{{result=\"{result}\"}} ");
            sum += text
                .lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.parse::<u64>().ok())
                .expect("the alerts counter");
        }
        sum
    }
}

/// Two nodes on one new database, delivering to receivers of `ca`'s and mailing alerts to a
/// STARTTLS sink of its own, with `alerts` added to the `[alerts]` table, at manual time `t0`;
/// and the directory of the CA file their config names.
async fn two_nodes_mailing(
    ca: &TestCa,
    alerts: &str,
    t0: i64,
) -> (Cluster, SmtpSink, tempfile::TempDir) {
    let smtp = SmtpSink::start(ca, Mode::StartTls);
    let ca_dir = tempfile::tempdir().expect("temp dir");
    let ca_file = ca.write_ca_file(ca_dir.path());
    let url = common::postgres::shared_database();
    let storage = format!(
        "backend = \"postgres\"\n[storage.postgres]\nurl = {}\n",
        common::toml_string(&url)
    );
    let toml = format!(
        "{}[alerts]\nsmtp_url = {}\nfrom = \"herald@alerts.test\"\n{alerts}",
        common::delivery_toml(&ca_file),
        common::toml_string(&smtp.url())
    );
    let mut nodes = Vec::new();
    for _ in 0..2 {
        nodes.push(InProc::start_with_storage(&storage, &toml, t0).await);
    }
    (Cluster { nodes }, smtp, ca_dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_interval_holds_across_the_nodes_of_a_cluster() {
    let ca = TestCa::new();
    let (c, smtp, _ca_dir) = two_nodes_mailing(&ca, "min_interval = \"1h\"\n", T0).await;
    let failing = Arc::new(AtomicBool::new(true));
    let recv = Receiver::https(&ca, {
        let failing = failing.clone();
        behaviour(move |_, _| {
            if failing.load(Ordering::SeqCst) {
                Reply::status(500)
            } else {
                Reply::status(200)
            }
        })
    });
    let (status, v) = c.nodes[0]
        .admin(
            "PUT",
            "/v1/accounts/acme",
            Some(json!({"alert_emails": ["ops@acme.test"]})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, ep) = c.nodes[0]
        .admin(
            "POST",
            "/v1/accounts/acme/endpoints",
            Some(json!({"url": recv.url("/hook"), "retry_policy": "none"})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let (status, _) = c.nodes[1].admin("GET", "/v1/accounts/acme", None).await;
    assert_eq!(status, 200, "node 1 reads the account");

    // The breaker opens on node 0: one mail. The probe succeeds: the recovery is mailed.
    c.open_on(0).await;
    smtp.wait_for(1, SETTLE).await;
    failing.store(false, Ordering::SeqCst);
    c.set_clock(T0 + 30_000);
    c.one(1, "delivered").await;
    smtp.wait_for(2, SETTLE).await;

    // Ten minutes later it opens again, on node 1 this time: within the hour, so no mail
    // (node 1 reads node 0's mark), and its recovery is not mailed either.
    failing.store(true, Ordering::SeqCst);
    c.set_clock(T0 + 600_000);
    c.open_on(1).await;
    failing.store(false, Ordering::SeqCst);
    c.set_clock(T0 + 630_000);
    c.one(0, "delivered").await;
    wait_until(SETTLE, "the failing mail is withheld", || async {
        c.alerts("suppressed").await >= 1
    })
    .await;
    // Exactly one withheld (waited for as "at least one", so that two say so here) and none
    // failed.
    let counted = [c.alerts("suppressed").await, c.alerts("failed").await];
    assert_eq!(counted, [1, 0], "suppressed, failed");
    assert_eq!(smtp.mails().len(), 2, "{:?}", smtp.mails());

    // An hour after the first mail, an opening on node 1 is mailed.
    failing.store(true, Ordering::SeqCst);
    c.set_clock(T0 + HOUR);
    c.open_on(1).await;
    let mails = smtp.wait_for(3, SETTLE).await;
    let subjects: Vec<String> = mails
        .iter()
        .map(|m| m.header("Subject").unwrap_or_default())
        .collect();
    assert!(
        subjects[0].contains("is failing")
            && subjects[1].contains("has recovered")
            && subjects[2].contains("is failing"),
        "{subjects:?}"
    );
    assert_eq!(c.alerts("sent").await, 3);
}

/// The loop in a cluster: endpoints at a receiver that answers 410, test events
/// through both nodes (each 410 disables the endpoint: a "disabled" mail), resume, again;
/// delete, and again. `alerts.max_per_account_per_hour` holds for the account across the
/// nodes: the hour's count is claimed in the database with the endpoint's mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_per_account_per_hour_holds_across_the_nodes_of_a_cluster() {
    let ca = TestCa::new();
    let (c, smtp, _ca_dir) =
        two_nodes_mailing(&ca, "max_per_account_per_hour = 3\n", T0 + 60_000).await;
    let gone = Receiver::https(&ca, behaviour(|_, _| Reply::status(410)));
    let five: Vec<String> = (0..5).map(|i| format!("victim{i}@third.test")).collect();
    let (status, v) = c.nodes[0]
        .admin(
            "PUT",
            "/v1/accounts/acme",
            Some(json!({ "alert_emails": five })),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let mut decided = 0;
    for round in 0..3 {
        let (status, ep) = c.nodes[round % 2]
            .admin(
                "POST",
                "/v1/accounts/acme/endpoints",
                Some(
                    json!({"url": gone.url(&format!("/attacker/{round}")), "retry_policy": "none"}),
                ),
            )
            .await;
        assert_eq!(status, 201, "{ep}");
        let ep = ep["endpoint"]["id"]
            .as_str()
            .expect("endpoint id")
            .to_string();
        // Each round on one node, the next on the other: node 1 counts what node 0 sent.
        let node = &c.nodes[round % 2];
        for _ in 0..2 {
            let (status, t) = node
                .admin("POST", &format!("/v1/endpoints/{ep}/test"), Some(json!({})))
                .await;
            assert_eq!(status, 200, "{t}");
            decided += 1;
            wait_until(SETTLE, "the disabled alert is decided", || async {
                c.alerts("sent").await + c.alerts("suppressed").await == decided
            })
            .await;
            let (status, v) = node
                .admin("POST", &format!("/v1/endpoints/{ep}/resume"), None)
                .await;
            assert_eq!(status, 200, "{v}");
        }
        let (status, _) = c.nodes[round % 2]
            .admin("DELETE", &format!("/v1/endpoints/{ep}"), None)
            .await;
        assert_eq!(status, 204);
    }
    assert_eq!(c.alerts("sent").await, 3);
    assert_eq!(c.alerts("suppressed").await, 3);
    let mails = smtp.wait_for(3, SETTLE).await;
    assert_eq!(mails.len(), 3, "{mails:?}");
    assert!(mails.iter().all(|m| m.rcpt_tos.len() == 5), "{mails:?}");
}
