//! Cluster mode end to end (SPEC §16): three real herald processes on one real PostgreSQL,
//! events posted round robin across them, one node killed with SIGKILL while it holds leases.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::herald::Herald;
use common::postgres::Postgres;
use common::{behaviour, delivery_toml, toml_string, wait_until, Receiver, Reply, TestCa};
use serde_json::json;

/// The lease the nodes run with (the shortest the config allows), so a dead node's work moves
/// within seconds.
const LEASE_S: u64 = 5;

/// A node's config: the shared database, a short lease, deliveries to the test's receivers.
fn node_toml(url: &str, ca_file: &std::path::Path) -> String {
    format!(
        "{}[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {}\nlease = \"{LEASE_S}s\"\n",
        delivery_toml(ca_file),
        toml_string(url)
    )
}

/// Every event posted round robin to three nodes is delivered (at least once), and when one
/// node is killed with SIGKILL while it holds leases, another node attempts those deliveries
/// within the lease + 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_deliver_everything_and_a_killed_node_loses_nothing() {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let ca = TestCa::new();
    let ca_dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca_file(ca_dir.path());
    // Slow answers keep deliveries leased long enough to kill a node holding some.
    let recv = Receiver::https(
        &ca,
        behaviour(|_, _| Reply::status(200).with_delay(Duration::from_millis(400))),
    );
    let toml = node_toml(&url, &ca_file);
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Herald::start(&toml).await);
    }

    let (status, ep) = nodes[0]
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let ep_id = ep["endpoint"]["id"]
        .as_str()
        .expect("the endpoint's id")
        .to_string();
    // The other nodes learn of the endpoint from the database's notice.
    for n in &nodes[1..] {
        let path = format!("/v1/endpoints/{ep_id}");
        wait_until(
            Duration::from_secs(10),
            "every node knows the endpoint",
            || async { n.admin("GET", &path, None).await.0 == 200 },
        )
        .await;
    }

    // Round robin: every node acknowledges a third of the events.
    let mut acked = Vec::new();
    for i in 0..90 {
        let (status, answer) = nodes[i % 3]
            .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": i}}))
            .await;
        assert_eq!(status, 202, "node {} refused event {i}: {answer}", i % 3);
        acked.push(answer["event_id"].as_str().unwrap().to_string());
    }

    // Kill node 2 once it holds leases (its id is in its data directory).
    let victim_id = std::fs::read_to_string(nodes[2].storage_path().join("node-id"))
        .expect("the node's id file")
        .trim()
        .to_string();
    let leased = |id: &str| {
        pg.sql(
            &format!("SELECT count(*) FROM deliveries WHERE leased_by = '{id}'"),
            "herald",
        )
        .parse::<u64>()
        .unwrap()
    };
    wait_until(Duration::from_secs(20), "node 2 holds leases", || {
        let n = leased(&victim_id);
        async move { n > 0 }
    })
    .await;
    nodes[2].kill9();
    let killed_at = Instant::now();
    let orphaned: Vec<String> = pg
        .sql(
            &format!(
                "SELECT encode(event_id, 'hex') FROM deliveries WHERE leased_by = '{victim_id}'"
            ),
            "herald",
        )
        .lines()
        .map(str::to_string)
        .collect();
    assert!(!orphaned.is_empty(), "the killed node held no lease");

    // Everything acknowledged arrives, and every delivery ends delivered: those the dead node
    // held too, once its leases have lapsed.
    let expected: HashSet<String> = acked.iter().cloned().collect();
    let limit = Duration::from_secs(LEASE_S + 5);
    let count = |state: &str| {
        pg.sql(
            &format!("SELECT count(*) FROM deliveries WHERE state = '{state}'"),
            "herald",
        )
    };
    wait_until(
        limit + Duration::from_secs(20),
        "every delivery is delivered",
        || {
            let done = count("delivered") == "90";
            async move { done }
        },
    )
    .await;
    assert!(
        expected.is_subset(&recv.webhook_ids()),
        "an acknowledged event never arrived"
    );
    // The dead node's leased deliveries were attempted again by another node (the dead node's
    // attempts, if any reached the receiver, were never recorded) within lease + 5 s.
    let last_arrival: HashMap<String, Instant> =
        recv.requests().iter().fold(HashMap::new(), |mut m, r| {
            if let Some(id) = r.header("webhook-id") {
                let at = m.entry(id.to_string()).or_insert(r.at);
                *at = (*at).max(r.at);
            }
            m
        });
    for hex in &orphaned {
        let ulid = u128::from_str_radix(hex, 16).expect("an event id's bytes");
        let id = herald::ids::format(herald::ids::EVENT, ulid);
        let at = last_arrival[&id];
        assert!(
            at > killed_at && at - killed_at <= limit,
            "event {id}, leased by the killed node, arrived {:?} after the kill (limit {limit:?})",
            at.checked_duration_since(killed_at)
        );
    }
    assert_eq!(leased(&victim_id), 0, "the dead node still holds leases");
    assert_eq!(count("pending"), "0", "deliveries left pending");
}

/// A database restart mid-run: while PostgreSQL is down, ingest answers `503` and `/healthz`
/// fails; the node recovers by itself once it is back, and everything acknowledged before and
/// after is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_answers_503_meanwhile_and_the_node_recovers_by_itself() {
    let pg = Postgres::start();
    let url = pg.database("herald");
    let ca = TestCa::new();
    let ca_dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca_file(ca_dir.path());
    let recv = Receiver::ok_https(&ca);
    let node = Herald::start(&node_toml(&url, &ca_file)).await;
    let (status, ep) = node
        .admin(
            "POST",
            "/v1/accounts/acc/endpoints",
            Some(json!({"url": recv.url("/hook")})),
        )
        .await;
    assert_eq!(status, 201, "{ep}");
    let post =
        |i: usize| node.ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": i}}));
    let mut acked = HashSet::new();
    for i in 0..10 {
        let (status, answer) = post(i).await;
        assert_eq!(status, 202, "{answer}");
        acked.insert(answer["event_id"].as_str().unwrap().to_string());
    }

    pg.stop();
    let (status, answer) = post(100).await;
    assert_eq!(status, 503, "ingest while the database is down: {answer}");
    assert_eq!(answer["error"]["code"], "unavailable", "{answer}");
    let (health, _) = node.call("GET", "/healthz", None, None).await;
    assert_eq!(health, 503, "/healthz while the database is down");

    pg.restart();
    wait_until(Duration::from_secs(30), "ingest works again", || async {
        node.call("GET", "/healthz", None, None).await.0 == 200
    })
    .await;
    for i in 10..20 {
        let (status, answer) = post(i).await;
        assert_eq!(status, 202, "after the restart: {answer}");
        acked.insert(answer["event_id"].as_str().unwrap().to_string());
    }
    wait_until(
        Duration::from_secs(30),
        "every acknowledged event arrived",
        || {
            let all = acked.is_subset(&recv.webhook_ids());
            async move { all }
        },
    )
    .await;
}
