//! Cluster mode end to end (docs/cluster.md): three real herald processes on one real PostgreSQL,
//! events posted round robin across them, one node killed with SIGKILL while it holds leases.

use crate::common;

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

/// The delivery as `node` shows it once it is no longer pending.
async fn settled(node: &Herald, id: &str) -> serde_json::Value {
    let path = format!("/v1/deliveries/{id}");
    let what = format!("delivery {id} settles");
    wait_until(Duration::from_secs(20), &what, || async {
        node.admin("GET", &path, None).await.1["state"] != "pending"
    })
    .await;
    node.admin("GET", &path, None).await.1
}

/// Creates an endpoint of account `acc` on the first node and waits until every node knows it
/// (from the database's notice); returns its id.
async fn shared_endpoint(nodes: &[Herald], body: serde_json::Value) -> String {
    let (status, ep) = nodes[0]
        .admin("POST", "/v1/accounts/acc/endpoints", Some(body))
        .await;
    assert_eq!(status, 201, "{ep}");
    let id = ep["endpoint"]["id"]
        .as_str()
        .expect("the endpoint's id")
        .to_string();
    let path = format!("/v1/endpoints/{id}");
    for n in &nodes[1..] {
        wait_until(
            Duration::from_secs(10),
            "every node knows the endpoint",
            || async { n.admin("GET", &path, None).await.0 == 200 },
        )
        .await;
    }
    id
}

/// A database, a test CA and the nodes' config.
struct Setup {
    pg: Postgres,
    ca: TestCa,
    toml: String,
    _ca_dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let pg = Postgres::start();
        let url = pg.database("herald");
        let ca = TestCa::new();
        let _ca_dir = tempfile::tempdir().unwrap();
        let toml = node_toml(&url, &ca.write_ca_file(_ca_dir.path()));
        Setup {
            pg,
            ca,
            toml,
            _ca_dir,
        }
    }
}

/// Every event posted round robin to three nodes is delivered (at least once), and when one
/// node is killed with SIGKILL while it holds leases, another node attempts those deliveries
/// within the lease + 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_deliver_everything_and_a_killed_node_loses_nothing() {
    let Setup {
        pg,
        ca,
        toml,
        _ca_dir,
    } = Setup::new();
    // Slow answers keep deliveries leased long enough to kill a node holding some.
    let recv = Receiver::https(
        &ca,
        behaviour(|_, _| Reply::status(200).with_delay(Duration::from_millis(400))),
    );
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Herald::start(&toml).await);
    }

    shared_endpoint(&nodes, json!({"url": recv.url("/hook")})).await;

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
    let Setup {
        pg,
        ca,
        toml,
        _ca_dir,
    } = Setup::new();
    let recv = Receiver::ok_https(&ca);
    let node = Herald::start(&toml).await;
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
    node.wait_for_log("cannot claim due deliveries", Duration::from_secs(10))
        .await;

    pg.restart();
    wait_until(Duration::from_secs(30), "ingest works again", || async {
        node.call("GET", "/healthz", None, None).await.0 == 200
    })
    .await;
    // The engine claimed every half second meanwhile: one warning (the outage was shorter
    // than a minute), and one line when claims worked again, counting every failure.
    let back = node
        .wait_for_log("claims work again", Duration::from_secs(10))
        .await;
    let failed: u64 = back
        .split("failed=")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no failure count in {back:?}"));
    assert!(failed >= 1, "{back}");
    let warnings = node
        .logs()
        .iter()
        .filter(|l| l.contains("cannot claim due deliveries"))
        .count();
    assert_eq!(warnings, 1, "{failed} failed claims:\n{}", node.log_text());
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

/// Three nodes on one database: a per-minute quota of 3 holds exactly across them; the same
/// idempotency key on two nodes makes one event; a debounce window spans the nodes; an ordered
/// key's events posted round robin arrive in the order they were acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_keys_debounce_and_order_hold_across_three_nodes() {
    let Setup {
        pg: _pg,
        ca,
        toml,
        _ca_dir,
    } = Setup::new();
    let recv = Receiver::ok_https(&ca);
    let toml = format!(
        "{toml}[plans.small]\nper_minute = 3\n\
         [catalog.events.\"profile.updated\"]\ndescription = \"x\"\n\
         debounce = {{ window = \"60s\", key = \"location_id\", mode = \"leading\" }}\n"
    );
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Herald::start(&toml).await);
    }
    let endpoint = |account: &'static str, body: serde_json::Value| {
        let node = &nodes[0];
        let url = recv.url(&format!("/{account}"));
        async move {
            let mut body = body;
            body["url"] = json!(url);
            let (status, ep) = node
                .admin(
                    "POST",
                    &format!("/v1/accounts/{account}/endpoints"),
                    Some(body),
                )
                .await;
            assert_eq!(status, 201, "{ep}");
            ep["endpoint"]["id"].as_str().unwrap().to_string()
        }
    };
    let quota_ep = endpoint("quota", json!({})).await;
    endpoint("keys", json!({})).await;
    endpoint("debounce", json!({})).await;
    let ordered_ep = endpoint("ordered", json!({"ordering": {"key": "customer"}})).await;
    let (status, a) = nodes[0]
        .admin("PUT", "/v1/accounts/quota", Some(json!({"plan": "small"})))
        .await;
    assert_eq!(status, 200, "{a}");
    // Every node knows the endpoints and the plan (the database's notices).
    for n in &nodes {
        for ep in [&quota_ep, &ordered_ep] {
            let path = format!("/v1/endpoints/{ep}");
            wait_until(
                Duration::from_secs(10),
                "every node knows the endpoints",
                || async { n.admin("GET", &path, None).await.0 == 200 },
            )
            .await;
        }
        wait_until(
            Duration::from_secs(10),
            "every node knows the plan",
            || async { n.admin("GET", "/v1/accounts/quota", None).await.1["plan"] == "small" },
        )
        .await;
    }
    let post = |node: usize, body: serde_json::Value| nodes[node].ingest(body);

    // Quota: nine events round robin within one minute; exactly three are sent. (Started
    // early in a minute, so the attempts cannot straddle two windows.)
    wait_until(Duration::from_secs(60), "a minute has just begun", || {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 60_000;
        async move { ms < 30_000 }
    })
    .await;
    let mut quota_deliveries = Vec::new();
    for i in 0..9 {
        let (status, answer) = post(
            i % 3,
            json!({"account_id": "quota", "type": "t.x", "payload": {"n": i}}),
        )
        .await;
        assert_eq!(status, 202, "{answer}");
        quota_deliveries.push(common::first_delivery(&answer));
    }
    let mut outcomes = Vec::new();
    for d in &quota_deliveries {
        let v = settled(&nodes[0], d).await;
        outcomes.push((
            v["state"].as_str().unwrap().to_string(),
            v["last_status"].clone(),
        ));
    }
    let sent = outcomes.iter().filter(|(s, _)| s == "delivered").count();
    let limited = outcomes
        .iter()
        .filter(|(_, status)| *status == "rate_limited")
        .count();
    assert_eq!((sent, limited), (3, 6), "{outcomes:?}");

    // The same idempotency key on two nodes at once: one event.
    let body =
        json!({"account_id": "keys", "type": "t.x", "payload": {}, "idempotency_key": "k-1"});
    let (a, b) = tokio::join!(post(0, body.clone()), post(1, body.clone()));
    assert_eq!((a.0, b.0), (202, 202), "{a:?} {b:?}");
    assert_eq!(
        a.1["event_id"], b.1["event_id"],
        "two events for one key: {a:?} {b:?}"
    );
    assert_eq!(
        [&a.1, &b.1]
            .iter()
            .filter(|v| v["duplicate"] == true)
            .count(),
        1,
        "{a:?} {b:?}"
    );

    // Debounce (leading, 60 s): the first event of a location is sent, the next two, posted to
    // the other nodes within the window, are debounced.
    let mut debounced = Vec::new();
    for node in 0..3 {
        let (status, answer) = post(
            node,
            json!({"account_id": "debounce", "type": "profile.updated",
                   "payload": {"location_id": 7, "n": node}}),
        )
        .await;
        assert_eq!(status, 202, "{answer}");
        debounced.push(common::first_delivery(&answer));
    }
    for (i, d) in debounced.iter().enumerate() {
        let v = settled(&nodes[0], d).await;
        let want = if i == 0 {
            ("delivered", "delivered")
        } else {
            ("skipped", "debounced")
        };
        assert_eq!(
            (
                v["state"].as_str().unwrap(),
                v["last_status"].as_str().unwrap()
            ),
            want,
            "event {i} of the window: {v}"
        );
    }

    // An ordered key: thirty events posted round robin arrive in the order acknowledged.
    for n in 0..30 {
        let (status, answer) = post(
            n % 3,
            json!({"account_id": "ordered", "type": "t.x", "payload": {"customer": "c1", "n": n}}),
        )
        .await;
        assert_eq!(status, 202, "{answer}");
    }
    let arrivals = |recv: &Receiver| -> Vec<i64> {
        recv.requests()
            .iter()
            .filter(|r| r.path == "/ordered")
            .map(|r| r.json()["n"].as_i64().unwrap())
            .collect()
    };
    wait_until(
        Duration::from_secs(30),
        "the ordered events arrived",
        || {
            let n = arrivals(&recv).len();
            async move { n >= 30 }
        },
    )
    .await;
    assert_eq!(arrivals(&recv), (0..30).collect::<Vec<i64>>());
}

/// docs/delivery-contract.md, docs/cluster.md: a breaker is the cluster's, not a node's. Ten
/// failures in all, spread over three nodes, open it on every node and tell the operator once; the
/// endpoint's deliveries then wait on every node; one probe goes out in the whole cluster, and its
/// success closes the breaker and sends what waited at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_one_breaker_and_send_one_probe() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let Setup {
        pg: _pg,
        ca,
        toml,
        _ca_dir,
    } = Setup::new();
    // The probe takes this long to answer: no other request may arrive meanwhile.
    const PROBE_REPLY: Duration = Duration::from_millis(1_500);
    let healthy = Arc::new(AtomicBool::new(false));
    let recv = Receiver::https(&ca, {
        let healthy = healthy.clone();
        behaviour(move |_, _| {
            if healthy.load(Ordering::SeqCst) {
                Reply::status(200).with_delay(PROBE_REPLY)
            } else {
                Reply::status(500)
            }
        })
    });
    let operator = Receiver::ok_http();
    let toml = format!(
        "{}[operator]\nwebhook_url = {}\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
        toml.replacen("[delivery]\n", "[delivery]\nallow_http = true\n", 1),
        toml_string(&operator.url("/ops"))
    );
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Herald::start(&toml).await);
    }
    let ep = shared_endpoint(
        &nodes,
        json!({"url": recv.url("/hook"), "retry_policy": "none"}),
    )
    .await;
    let ep_path = format!("/v1/endpoints/{ep}");

    // Ten events round robin: ten failures in all (three or four per node) open the breaker.
    for i in 0..10 {
        let (status, answer) = nodes[i % 3]
            .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": i}}))
            .await;
        assert_eq!(status, 202, "{answer}");
        let v = settled(&nodes[0], &common::first_delivery(&answer)).await;
        assert_eq!(v["state"], "failed", "{v}");
    }
    let opened = Instant::now();
    for (i, n) in nodes.iter().enumerate() {
        let what = format!("node {i} shows the breaker open");
        wait_until(Duration::from_secs(10), &what, || async {
            n.admin("GET", &ep_path, None).await.1["breaker"]["state"] == "open"
        })
        .await;
        let v = n.admin("GET", &ep_path, None).await.1;
        assert_eq!(v["breaker"]["consecutive_failures"], 10, "node {i}: {v}");
    }
    let (_, status) = nodes[2].admin("GET", "/v1/status", None).await;
    assert_eq!(
        status["open_breakers"][0]["endpoint_id"],
        ep.as_str(),
        "{status}"
    );

    // What comes now waits, on every node, for the probe.
    let mut held = Vec::new();
    for i in 0..6 {
        let (status, answer) = nodes[i % 3]
            .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": 10 + i}}))
            .await;
        assert_eq!(status, 202, "{answer}");
        held.push(common::first_delivery(&answer));
    }
    healthy.store(true, Ordering::SeqCst);
    wait_until(Duration::from_secs(60), "the probe arrives", || async {
        recv.requests().len() > 10
    })
    .await;
    let probe = recv.requests()[10].at;
    assert!(
        probe.duration_since(opened) >= Duration::from_secs(25),
        "the probe came {:?} after the breaker opened: the held deliveries were attempted",
        probe.duration_since(opened)
    );
    for d in &held {
        let v = settled(&nodes[0], d).await;
        assert_eq!(v["state"], "delivered", "{v}");
    }
    let arrivals: Vec<Duration> = recv.requests()[10..]
        .iter()
        .map(|r| r.at.duration_since(probe))
        .collect();
    assert_eq!(arrivals.len(), 6, "{arrivals:?}");
    // Nothing else went out while the probe was out; what waited went once it succeeded, not
    // when the nodes' holds (the probe's longest time, 11 s) ran out.
    assert!(
        arrivals[1..].iter().all(|a| *a >= PROBE_REPLY),
        "another request while the probe was out: {arrivals:?}"
    );
    assert!(
        arrivals
            .iter()
            .all(|a| *a < PROBE_REPLY + Duration::from_secs(7)),
        "held deliveries went late: {arrivals:?}"
    );

    // The operator heard of the opening and the recovery once each.
    let kinds = || operator.event_types();
    wait_until(
        Duration::from_secs(20),
        "endpoint.recovered arrives",
        || {
            let k = kinds();
            async move { k.iter().any(|t| t == "endpoint.recovered") }
        },
    )
    .await;
    let k = kinds();
    let count = |t: &str| k.iter().filter(|k| *k == t).count();
    assert_eq!(
        (count("endpoint.failing"), count("endpoint.recovered")),
        (1, 1),
        "{k:?}"
    );
    for (i, n) in nodes.iter().enumerate() {
        let what = format!("node {i} shows the breaker closed");
        wait_until(Duration::from_secs(10), &what, || async {
            n.admin("GET", &ep_path, None).await.1["breaker"]["state"] == "closed"
        })
        .await;
    }
}

/// docs/delivery-contract.md, docs/cluster.md: an endpoint's `rate_limit` is the cluster's. Events
/// posted round robin to three nodes reach a 4-a-second endpoint at no more than that (bursts of 4)
/// in all, and waiting is no attempt: each is delivered with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_rate_limit_holds_across_three_nodes() {
    let Setup {
        pg: _pg,
        ca,
        toml,
        _ca_dir,
    } = Setup::new();
    let recv = Receiver::ok_https(&ca);
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Herald::start(&toml).await);
    }
    shared_endpoint(
        &nodes,
        json!({"url": recv.url("/hook"), "rate_limit": {"per_second": 4}}),
    )
    .await;
    let mut deliveries = Vec::new();
    for i in 0..40 {
        let (status, answer) = nodes[i % 3]
            .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": i}}))
            .await;
        assert_eq!(status, 202, "{answer}");
        deliveries.push(common::first_delivery(&answer));
    }
    recv.wait_for(40, Duration::from_secs(60)).await;
    // Rate 4, burst 4.
    recv.assert_at_most_per_second(8);
    for d in [&deliveries[0], &deliveries[39]] {
        let v = settled(&nodes[1], d).await;
        assert_eq!(v["state"], "delivered", "{v}");
        assert_eq!(v["attempts"].as_array().map(Vec::len), Some(1), "{v}");
    }
}

/// A commit whose answer is lost (PostgreSQL committed, the connection died before its reply
/// came: a restart, a failover, a cut) is answered by what happened: the node finds out on a
/// new connection. Committed: `202`, and the event is delivered once. A statement cut before
/// the server got it: `503`, no event row, nothing delivered, not even after the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_answered_by_what_happened() {
    use common::pgproxy::{Cut, PgProxy};
    let pg = Postgres::start();
    pg.database("herald");
    let proxy = PgProxy::start(pg.port(), "INSERT INTO events").await;
    let url = format!("postgres://herald@localhost:{}/herald", proxy.port());
    let ca = TestCa::new();
    let ca_dir = tempfile::tempdir().unwrap();
    let node = Herald::start(&node_toml(&url, &ca.write_ca_file(ca_dir.path()))).await;
    let recv = Receiver::ok_https(&ca);
    shared_endpoint(
        std::slice::from_ref(&node),
        json!({"url": recv.url("/hook")}),
    )
    .await;
    let events = || pg.sql("SELECT count(*) FROM events", "herald");

    // Cut right after the server completed the statement (it commits on its own).
    proxy.arm(Cut::AfterComplete);
    let (status, answer) = node
        .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": 1}}))
        .await;
    assert_eq!(proxy.fired(), 1, "the proxy cut the ingest's connection");
    assert_eq!(
        status,
        202,
        "a committed event was answered {status}: {answer}\n{}",
        node.log_text()
    );
    let first = answer["event_id"].as_str().unwrap().to_string();
    assert_eq!(events(), "1");
    wait_until(Duration::from_secs(20), "the event arrives", || async {
        recv.webhook_ids().contains(&first)
    })
    .await;

    // Cut before the statement reached the server.
    proxy.arm(Cut::BeforeExecute);
    let (status, answer) = node
        .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": 2}}))
        .await;
    assert_eq!(proxy.fired(), 2);
    assert_eq!(status, 503, "{answer}");
    assert_eq!(events(), "1", "a 503 stored an event");

    // Past the lease and then some: one delivery, of the first event, and nothing else.
    tokio::time::sleep(Duration::from_secs(LEASE_S + 5)).await;
    assert_eq!(recv.count(), 1, "{:?}", recv.webhook_ids());
    let (status, answer) = node
        .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": 3}}))
        .await;
    assert_eq!(status, 202, "the node works on after both cuts: {answer}");
}

/// Behind a load balancer "create the endpoint, then post" reaches two nodes: a node must act
/// on every change of endpoints committed before a request began, though another node's notice
/// arrives a moment after its commit. 120 rounds over three nodes: an endpoint created through
/// one node, then at once an event through the next (its fan-out has the new endpoint) and a
/// read through the third (it finds it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_created_through_one_node_is_there_for_the_next_request_on_any() {
    let Setup {
        pg: _pg,
        ca,
        toml,
        _ca_dir,
    } = Setup::new();
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(Herald::start(&toml).await);
    }
    let recv = Receiver::ok_https(&ca);
    for round in 0..120 {
        let [a, b, c] = [0, 1, 2].map(|i| &nodes[(round + i) % 3]);
        let account = format!("acct{round}");
        let (status, created) = a
            .admin(
                "POST",
                &format!("/v1/accounts/{account}/endpoints"),
                Some(json!({"url": recv.url("/hook")})),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        let id = created["endpoint"]["id"].as_str().unwrap();
        let (status, answer) = b
            .ingest(json!({"account_id": account, "type": "t.x", "payload": {"round": round}}))
            .await;
        assert_eq!(status, 202, "{answer}");
        assert_eq!(
            answer["deliveries"][0]["endpoint_id"], id,
            "round {round}: the event fanned out without the new endpoint: {answer}"
        );
        let (status, got) = c.admin("GET", &format!("/v1/endpoints/{id}"), None).await;
        assert_eq!(
            status, 200,
            "round {round}: another node did not find it: {got}"
        );
    }
}

/// An endpoint's chart counts are the cluster's: two nodes deliver, and each shows the other's
/// attempts too (each adds its counts to the database within seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_shows_the_chart_counts_of_the_whole_cluster() {
    let Setup {
        pg: _pg,
        ca,
        toml,
        _ca_dir,
    } = Setup::new();
    let recv = Receiver::ok_https(&ca);
    let nodes = vec![Herald::start(&toml).await, Herald::start(&toml).await];
    let id = shared_endpoint(&nodes, json!({"url": recv.url("/hook")})).await;
    for i in 0..10 {
        let (status, answer) = nodes[i % 2]
            .ingest(json!({"account_id": "acc", "type": "t.x", "payload": {"n": i}}))
            .await;
        assert_eq!(status, 202, "{answer}");
    }
    recv.wait_for(10, Duration::from_secs(30)).await;
    let path = format!("/v1/endpoints/{id}/stats");
    for node in &nodes {
        wait_until(
            Duration::from_secs(20),
            "the node's chart counts every node's attempts",
            || async {
                let (_, s) = node.admin("GET", &path, None).await;
                let delivered: u64 = s["minutes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m["attempts"]["delivered"].as_u64())
                    .sum();
                delivered == 10 && s["attempts_1h"] == 10
            },
        )
        .await;
    }
}
