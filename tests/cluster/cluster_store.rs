//! Cluster mode's shared state on a real PostgreSQL (docs/cluster.md), through the store's own
//! interface, with several nodes (each a [`PgStore`] with its own pool and id) on one
//! database: ingest and idempotency across nodes, leased claims that never overlap, leases
//! that lapse and pass to another node, fenced writes, release at shutdown, exact quotas, and
//! the notification that wakes idle nodes. Lease expiry runs on a manual clock shared by the
//! nodes (the nodes' clocks must agree in production too: docs/cluster.md).

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::postgres::Postgres;
use herald::clock::{Clock, ManualClock};
use herald::config::Config;
use herald::model::{Attempt, DeliveryState, Endpoint, EndpointState, PortalSession, Status};
use herald::policy::breaker::{Breaker, Change, Gate, Phase};
use herald::policy::quota::{windows, Limits};
use herald::store::prelude::*;
use herald::store::{lane_of, Backend, IngestOutcome, NewEvent, StoreError};
use herald_store_postgres::{migrate, Database, PgStore};

const START: i64 = 1_800_000_000_000;
const LEASE: Duration = Duration::from_secs(30);
const ENDPOINTS: [&str; 2] = [
    "ep_01HZZZZZZZZZZZZZZZZZZZZZZA",
    "ep_01HZZZZZZZZZZZZZZZZZZZZZZB",
];

struct Cluster {
    pg: Postgres,
    url: String,
    clock: Arc<ManualClock>,
}

impl Cluster {
    async fn new() -> Cluster {
        let pg = Postgres::start();
        let url = pg.database("herald");
        let cluster = Cluster {
            pg,
            url,
            clock: Arc::new(ManualClock::new(START)),
        };
        let db = cluster.database();
        migrate(
            &mut db.dedicated().await.expect("connect"),
            Duration::from_secs(30),
        )
        .await
        .expect("migrate");
        cluster
    }

    fn database(&self) -> Database {
        database_at(&self.url)
    }

    /// A node on a new database `name` of the same server, its schema made.
    async fn node_on_new_database(&self, name: &str) -> Arc<PgStore> {
        let db = database_at(&self.pg.database(name));
        migrate(
            &mut db.dedicated().await.expect("connect"),
            Duration::from_secs(30),
        )
        .await
        .expect("migrate");
        let clock: Arc<dyn Clock> = self.clock.clone();
        Arc::new(
            PgStore::with_database(db, clock, LEASE)
                .await
                .expect("node"),
        )
    }

    async fn node(&self) -> Arc<PgStore> {
        let clock: Arc<dyn Clock> = self.clock.clone();
        Arc::new(
            PgStore::with_database(self.database(), clock, LEASE)
                .await
                .expect("node"),
        )
    }

    fn count(&self, sql: &str) -> i64 {
        self.pg.sql(sql, "herald").parse().expect("a count")
    }
}

/// A pool on the database at `url`.
fn database_at(url: &str) -> Database {
    let config = Config::from_toml(&format!(
        "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {url:?}\npool_size = 8\n"
    ))
    .expect("config");
    Database::new(&herald::store::postgres_settings(&config).expect("settings")).expect("database")
}

fn event(account: &str, key: Option<&str>) -> NewEvent {
    let endpoints: Vec<_> = ENDPOINTS.iter().map(|e| lane_of(Some(e))).collect();
    NewEvent {
        account_id: account.into(),
        event_type: "order.created".into(),
        received_at: START,
        payload: Bytes::from_static(b"{\"n\":1}"),
        targets: endpoints,
        idempotency_key: key.map(str::to_string),
        debounce_key: None,
        ordering_key: None,
        debounce: None,
        channels: Vec::new(),
        tags: Vec::new(),
        request_key: None,
        trace: None,
    }
}

fn created(outcomes: &[IngestOutcome]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|o| match o {
            IngestOutcome::Created { event_id, .. } => Some(event_id.clone()),
            IngestOutcome::Duplicate { .. } | IngestOutcome::Repeated { .. } => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ingest_commits_the_event_and_a_pending_delivery_per_endpoint() {
    let c = Cluster::new().await;
    let node = c.node().await;
    let out = node
        .ingest(vec![event("acct_1", None), event("acct_2", None)])
        .await
        .unwrap();
    assert_eq!(created(&out).len(), 2);
    let IngestOutcome::Created { deliveries, .. } = &out[0] else {
        panic!("created");
    };
    assert_eq!(deliveries.len(), 2);
    assert_eq!(deliveries[0].endpoint_id.as_deref(), Some(ENDPOINTS[0]));
    assert_eq!(deliveries[0].state, DeliveryState::Pending);
    // Committed: another connection sees every row.
    assert_eq!(c.count("SELECT count(*) FROM events"), 2);
    assert_eq!(
        c.count("SELECT count(*) FROM deliveries WHERE state = 'pending' AND due_at IS NOT NULL"),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_idempotency_key_on_several_nodes_makes_one_event() {
    let c = Cluster::new().await;
    let nodes = [c.node().await, c.node().await, c.node().await];
    let mut tasks = Vec::new();
    for round in 0..8 {
        for node in &nodes {
            let node = node.clone();
            tasks.push(tokio::spawn(async move {
                let key = format!("key-{round}");
                // Twice in one request too: the request's second is its first's duplicate.
                node.ingest(vec![
                    event("acct_1", Some(&key)),
                    event("acct_1", Some(&key)),
                ])
                .await
                .unwrap()
            }));
        }
    }
    let mut by_key: std::collections::HashMap<usize, HashSet<String>> = Default::default();
    let mut made = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        for o in t.await.unwrap() {
            let id = match o {
                IngestOutcome::Created { event_id, .. } => {
                    made += 1;
                    event_id
                }
                IngestOutcome::Duplicate { event_id } => event_id,
                other => panic!("no request key was sent: {other:?}"),
            };
            by_key.entry(i / 3).or_default().insert(id);
        }
    }
    assert_eq!(made, 8, "one event per key");
    for (round, ids) in by_key {
        assert_eq!(
            ids.len(),
            1,
            "key-{round} answered with several events: {ids:?}"
        );
    }
    assert_eq!(c.count("SELECT count(*) FROM events"), 8);
    // Another account's same key is its own.
    let out = nodes[0]
        .ingest(vec![event("acct_2", Some("key-0"))])
        .await
        .unwrap();
    assert_eq!(created(&out).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_claiming_at_once_never_hold_the_same_delivery() {
    let c = Cluster::new().await;
    let nodes = [c.node().await, c.node().await, c.node().await];
    let batch: Vec<NewEvent> = (0..150).map(|_| event("a", None)).collect();
    nodes[0].ingest(batch).await.unwrap();
    let mut tasks = Vec::new();
    for node in &nodes {
        for _ in 0..4 {
            let node = node.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let leased = node.claim_due(7).await.unwrap();
                    if leased.is_empty() {
                        return got;
                    }
                    got.extend(leased.into_iter().map(|l| l.due.delivery.id));
                }
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 300, "every delivery claimed");
    assert_eq!(distinct.len(), 300, "no delivery claimed twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lapsed_lease_passes_to_another_node_and_fences_the_first() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    a.ingest(vec![event("a", None)]).await.unwrap();
    let held = a.claim_due(10).await.unwrap();
    assert_eq!(held.len(), 2);
    assert!(b.claim_due(10).await.unwrap().is_empty(), "leased: not due");

    // A renews in time: still not due for B.
    c.clock.advance(LEASE - Duration::from_secs(1));
    let leases: Vec<(&str, i64)> = held
        .iter()
        .map(|l| (l.due.delivery.id.as_str(), l.hold.claim()))
        .collect();
    assert!(a.renew(&leases).await.unwrap().is_empty());
    c.clock.advance(Duration::from_secs(2));
    assert!(
        b.claim_due(10).await.unwrap().is_empty(),
        "renewed: not due"
    );

    // A stalls past its lease: B takes the deliveries.
    c.clock.advance(LEASE);
    let taken = b.claim_due(10).await.unwrap();
    assert_eq!(taken.len(), 2);
    assert_eq!(
        a.renew(&leases).await.unwrap().len(),
        2,
        "A learns it lost both leases"
    );

    // A's late result is refused and records nothing; B's counts.
    let mut done = held[0].due.delivery.clone();
    done.state = DeliveryState::Delivered;
    done.last_status = Some(Status::Delivered);
    done.attempt_count = 1;
    done.next_attempt_at = None;
    let attempt = Attempt {
        id: herald::ids::new_id(herald::ids::ATTEMPT, c.clock.now_ms()),
        number: 1,
        at: c.clock.now_ms(),
        duration_ms: 12,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: vec![("webhook-id".into(), "msg".into())],
        response_body: "ok".into(),
        response_headers: Vec::new(),
        url: None,
        manual: false,
    };
    let late = a.finish(held[0].hold.claim(), &done, Some(&attempt)).await;
    assert!(matches!(late, Err(StoreError::LeaseLost)), "{late:?}");
    assert_eq!(c.count("SELECT count(*) FROM attempts"), 0);
    let b_claim = taken
        .iter()
        .find(|l| l.due.delivery.id == done.id)
        .unwrap()
        .hold
        .claim();
    b.finish(b_claim, &done, Some(&attempt)).await.unwrap();
    assert_eq!(c.count("SELECT count(*) FROM attempts"), 1);
    assert_eq!(
        c.count(
            "SELECT count(*) FROM deliveries WHERE state = 'delivered' AND due_at IS NULL \
             AND leased_by IS NULL"
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_is_due_at_its_time_and_a_stopping_node_releases_its_leases() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    a.ingest(vec![event("a", None)]).await.unwrap();
    let held = a.claim_due(10).await.unwrap();

    // The first delivery fails and is due again in a minute.
    let mut retry = held[0].due.delivery.clone();
    retry.last_status = Some(Status::HttpError);
    retry.attempt_count = 1;
    retry.queued = true;
    retry.next_attempt_at = Some(c.clock.now_ms() + 60_000);
    a.finish(held[0].hold.claim(), &retry, None).await.unwrap();
    // What falls due first is A's lease on the other delivery, should A die.
    assert_eq!(a.next_due().await.unwrap(), Some(START + 30_000));

    // A stops: the other delivery it held is due at once for B; the retry keeps its time.
    assert_eq!(a.release_all().await.unwrap(), 1);
    let taken = b.claim_due(10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].due.delivery.id, held[1].due.delivery.id);
    assert!(b.claim_due(10).await.unwrap().is_empty());
    let mut done = taken[0].due.delivery.clone();
    done.state = DeliveryState::Delivered;
    done.next_attempt_at = None;
    b.finish(taken[0].hold.claim(), &done, None).await.unwrap();
    c.clock.advance(Duration::from_secs(60));
    let taken = b.claim_due(10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].due.delivery.id, retry.id);
    assert_eq!(taken[0].due.delivery.attempt_count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_per_minute_quota_holds_exactly_across_nodes() {
    let c = Cluster::new().await;
    let nodes = [c.node().await, c.node().await, c.node().await];
    let limits = Limits {
        per_minute: Some(3),
        per_day: Some(5),
    };
    let w = windows(START);
    let mut tasks = Vec::new();
    for i in 0..24 {
        let node = nodes[i % 3].clone();
        tasks.push(tokio::spawn(async move {
            node.quota_take("acct_q", w, limits).await.unwrap()
        }));
    }
    let mut taken = 0;
    for t in tasks {
        taken += usize::from(t.await.unwrap());
    }
    assert_eq!(taken, 3, "exactly the minute's 3");
    assert_eq!(nodes[0].quota_usage("acct_q", w).await.unwrap(), (3, 3));

    // The next minute: the day's 5 cap it at 2, and a refusal counts in neither window.
    let next = windows(START + 60_000);
    let mut taken = 0;
    for node in nodes.iter().cycle().take(9) {
        taken += usize::from(node.quota_take("acct_q", next, limits).await.unwrap());
    }
    assert_eq!(taken, 2);
    assert_eq!(nodes[1].quota_usage("acct_q", next).await.unwrap(), (2, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_node_is_woken_by_another_nodes_ingest() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    let (trigger, shutdown) = herald::shutdown::channel();
    let wake = b.wake();
    let listener = tokio::spawn(herald_store_postgres::wake::listen(b.clone(), shutdown));
    // The listener wakes once when it starts listening (news may have been missed before).
    tokio::time::timeout(Duration::from_secs(10), wake.notified())
        .await
        .expect("the listener starts");
    let woken = tokio::spawn(async move { wake.notified().await });
    a.ingest(vec![event("a", None)]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), woken)
        .await
        .expect("B is woken by A's ingest")
        .unwrap();
    assert_eq!(b.claim_due(10).await.unwrap().len(), 2);
    trigger.fire();
    listener.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ingest_fails_while_the_database_is_down_and_recovers_by_itself() {
    let c = Cluster::new().await;
    let node = c.node().await;
    node.ingest(vec![event("a", None)]).await.unwrap();
    c.pg.stop();
    let refused = node.ingest(vec![event("a", Some("during"))]).await;
    assert!(
        matches!(&refused, Err(StoreError::Database(why)) if why.to_string().contains("herald")),
        "{refused:?}"
    );
    c.pg.restart();
    // The pool replaces its broken connections: the next requests succeed, and the refused
    // one stored nothing (its key is free).
    let mut ok = None;
    for _ in 0..50 {
        match node.ingest(vec![event("a", Some("during"))]).await {
            Ok(out) => {
                ok = Some(out);
                break;
            }
            Err(StoreError::Database(_)) => continue,
            Err(e) => panic!("{e}"),
        }
    }
    let out = ok.expect("ingest works again after the restart");
    assert_eq!(created(&out).len(), 1, "{out:?}");
    assert_eq!(c.count("SELECT count(*) FROM events"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn herald_commits_synchronously_even_where_the_database_says_otherwise() {
    let c = Cluster::new().await;
    c.pg.sql(
        "ALTER DATABASE herald SET synchronous_commit = off",
        "postgres",
    );
    let node = c.node().await;
    let client = node.database().client().await.unwrap();
    let setting: String = client
        .query_one("SHOW synchronous_commit", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(setting, "on", "a `202` must wait for the WAL flush");
}

fn endpoint(id: &str, account: &str) -> Endpoint {
    common::store::endpoint(id, account, START)
}

/// A node listening to the others' notices (as a serving node does).
async fn listening(c: &Cluster) -> (Arc<PgStore>, herald::shutdown::Trigger) {
    let node = c.node().await;
    let (trigger, shutdown) = herald::shutdown::channel();
    tokio::spawn(herald_store_postgres::wake::listen(node.clone(), shutdown));
    (node, trigger)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn endpoint_changes_on_one_node_reach_the_others() {
    let c = Cluster::new().await;
    let (a, _ta) = listening(&c).await;
    let (b, _tb) = listening(&c).await;
    a.create_endpoint(endpoint(ENDPOINTS[0], "acct"), 10)
        .await
        .unwrap()
        .expect("created");
    common::wait_until(
        Duration::from_secs(10),
        "B knows the new endpoint",
        || async { b.endpoint(ENDPOINTS[0]).is_some() },
    )
    .await;
    let (changed, did) = b
        .change_endpoint::<StoreError>(ENDPOINTS[0], |ep| {
            ep.state = EndpointState::Paused;
            Ok(true)
        })
        .await
        .unwrap()
        .unwrap();
    assert!(did);
    assert_eq!(changed.state, EndpointState::Paused);
    common::wait_until(Duration::from_secs(10), "A sees it paused", || async {
        a.endpoint(ENDPOINTS[0])
            .is_some_and(|e| e.state == EndpointState::Paused)
    })
    .await;
    assert!(a.delete_endpoint(ENDPOINTS[0]).await.unwrap());
    common::wait_until(Duration::from_secs(10), "B forgets it", || async {
        b.endpoint(ENDPOINTS[0]).is_none()
    })
    .await;
    assert!(!b.delete_endpoint(ENDPOINTS[0]).await.unwrap());

    // Plans travel the same way.
    a.set_account_plan("acct", Some("pro".into()))
        .await
        .unwrap();
    common::wait_until(Duration::from_secs(10), "B knows the plan", || async {
        b.account_plan("acct").as_deref() == Some("pro")
    })
    .await;
    assert_eq!(b.account_ids(), vec!["acct".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn endpoint_changes_made_at_once_on_two_nodes_both_hold() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    a.create_endpoint(endpoint(ENDPOINTS[0], "acct"), 10)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let node = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            node.change_endpoint::<StoreError>(ENDPOINTS[0], |ep| {
                ep.event_types.push(format!("type.{i}"));
                Ok(true)
            })
            .await
            .unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let ep = c.node().await.endpoint(ENDPOINTS[0]).unwrap();
    assert_eq!(
        ep.event_types.len(),
        20,
        "no change lost: {:?}",
        ep.event_types
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_endpoint_limit_per_account_holds_across_nodes() {
    let c = Cluster::new().await;
    let nodes = [c.node().await, c.node().await, c.node().await];
    let mut tasks = Vec::new();
    for i in 0..9 {
        let node = nodes[i % 3].clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("ep_01HZZZZZZZZZZZZZZZZZZZZZ{i:02}");
            node.create_endpoint(endpoint(&id, "acct"), 4)
                .await
                .unwrap()
                .is_some()
        }));
    }
    let mut made = 0;
    for t in tasks {
        made += usize::from(t.await.unwrap());
    }
    assert_eq!(made, 4);
    assert_eq!(c.count("SELECT count(*) FROM endpoints"), 4);
}

/// An endpoint's rate limit is one token bucket for all nodes, with the arithmetic of one
/// node's (`policy::tokens`): a burst of 5, then one every 200 ms, whichever node takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_take_an_endpoints_rate_limit_tokens_from_one_bucket() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    let limit = herald::model::RateLimit { per_second: 5.0 };
    let ep = ENDPOINTS[0];
    for i in 0..5 {
        let node = if i % 2 == 0 { &a } else { &b };
        assert_eq!(
            node.take_token(ep, limit, START).await.unwrap(),
            Ok(()),
            "take {i}"
        );
    }
    assert_eq!(
        b.take_token(ep, limit, START).await.unwrap(),
        Err(START + 200)
    );
    assert_eq!(
        a.take_token(ep, limit, START + 199).await.unwrap(),
        Err(START + 200)
    );
    assert_eq!(a.take_token(ep, limit, START + 200).await.unwrap(), Ok(()));
    assert_eq!(
        b.take_token(ep, limit, START + 200).await.unwrap(),
        Err(START + 400)
    );
    // A clock behind the bucket's takes nothing back; a second later it holds one burst again.
    assert_eq!(
        b.take_token(ep, limit, START + 100).await.unwrap(),
        Err(START + 400)
    );
    let mut n = 0;
    while a
        .take_token(ep, limit, START + 5_000)
        .await
        .unwrap()
        .is_ok()
    {
        n += 1;
    }
    assert_eq!(n, 5);
    // Another endpoint has its own bucket.
    assert_eq!(
        b.take_token(ENDPOINTS[1], limit, START).await.unwrap(),
        Ok(())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn portal_sessions_breakers_and_secrets_are_shared() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    let session = PortalSession {
        id: "ps_1".into(),
        account_id: "acct".into(),
        read_only: false,
        created_at: START,
        expires_at: START + 3_600_000,
    };
    let token = "hps_token";
    a.create_portal_session(&session, herald::store::token_hash(token))
        .await
        .unwrap();
    let found = b.portal_session(token, START + 1).await.unwrap().unwrap();
    assert_eq!(found.account_id, "acct");
    assert!(
        b.portal_session(token, START + 3_600_000)
            .await
            .unwrap()
            .is_none(),
        "expired"
    );
    assert!(b
        .portal_session("hps_other", START)
        .await
        .unwrap()
        .is_none());
    assert!(b.revoke_portal_session("ps_1").await.unwrap());
    assert!(
        a.portal_session(token, START + 1).await.unwrap().is_none(),
        "revoked"
    );

    // Breakers: failures recorded on two nodes count together; the node whose failure opens
    // it (B, the tenth) is the one told; the other (A) hears of it (its copy is forgotten);
    // neither takes a probe while the other's is out.
    let (a, _ta) = listening(&c).await;
    let (b, _tb) = listening(&c).await;
    let ep = ENDPOINTS[0];
    let day = 86_400_000;
    assert_eq!(b.breaker(ep).await.unwrap(), Breaker::default());
    let mut changes = Vec::new();
    for i in 0..10 {
        let node = if i % 2 == 0 { &a } else { &b };
        let at = START + i;
        changes.push(
            node.change_breaker(ep, at, |br| br.record(false, false, at, day))
                .await
                .unwrap(),
        );
    }
    assert_eq!(changes[..9], [None; 9]);
    assert_eq!(
        changes[9],
        Some(Change::Opened),
        "the tenth failure in all opens it"
    );
    let probe_at = START + 9 + 30_000;
    common::wait_until(
        Duration::from_secs(10),
        "A hears that it opened",
        || async { a.breaker(ep).await.unwrap().phase == Phase::Open },
    )
    .await;
    let open = a.breaker(ep).await.unwrap();
    assert_eq!(
        (open.consecutive_failures, open.next_probe_at),
        (10, Some(probe_at))
    );
    assert_eq!(b.breaker(ep).await.unwrap(), open);
    assert_eq!(
        a.open_breakers().await.unwrap(),
        vec![(ep.to_string(), open)]
    );
    let probe_time = 11_000;
    let gate = |node: Arc<PgStore>| async move {
        node.change_breaker(ep, probe_at, |br| br.gate(probe_at, probe_time))
            .await
            .unwrap()
    };
    let (ga, gb) = tokio::join!(gate(a.clone()), gate(b.clone()));
    let mut gates = [ga, gb];
    gates.sort_by_key(|g| format!("{g:?}"));
    assert_eq!(
        gates,
        [Gate::Probe, Gate::WaitUntil(probe_at + probe_time)],
        "one probe for both nodes"
    );
    // The probe succeeds: closed for both, the row gone.
    let recovered = a
        .change_breaker(ep, probe_at + 5, |br| {
            br.record(true, true, probe_at + 5, day)
        })
        .await
        .unwrap();
    assert_eq!(recovered, Some(Change::Recovered));
    common::wait_until(
        Duration::from_secs(10),
        "B hears that it closed",
        || async { b.breaker(ep).await.unwrap() == Breaker::default() },
    )
    .await;
    assert_eq!(c.count("SELECT count(*) FROM breakers"), 0);

    a.set_account_secret("acct", "api_key", "s3cret")
        .await
        .unwrap();
    assert_eq!(
        b.account_secret("acct", "api_key")
            .await
            .unwrap()
            .as_deref(),
        Some("s3cret")
    );
    assert_eq!(b.account_secret("acct", "other").await.unwrap(), None);
}

/// Claims every due delivery on `node` and ends each as `state` with one attempt.
async fn end_all(node: &PgStore, clock: &ManualClock, state: DeliveryState) -> usize {
    let leased = node.claim_due(1000).await.unwrap();
    for l in &leased {
        let mut d = l.due.delivery.clone();
        d.state = state;
        d.last_status = Some(if state == DeliveryState::Delivered {
            Status::Delivered
        } else {
            Status::HttpError
        });
        d.last_http_status = Some(if state == DeliveryState::Delivered {
            200
        } else {
            500
        });
        d.attempt_count = 1;
        d.next_attempt_at = None;
        let attempt = Attempt {
            id: herald::ids::new_id(herald::ids::ATTEMPT, clock.now_ms()),
            number: 1,
            at: clock.now_ms(),
            duration_ms: 5,
            status: d.last_status.unwrap(),
            http_status: d.last_http_status,
            error: None,
            request_headers: vec![("webhook-id".into(), d.id.clone())],
            response_body: "{}".into(),
            response_headers: Vec::new(),
            url: None,
            manual: false,
        };
        node.finish(l.hold.claim(), &d, Some(&attempt))
            .await
            .unwrap();
    }
    leased.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_log_reads_back_what_was_stored_newest_first_with_filters_and_cursors() {
    let c = Cluster::new().await;
    let node = c.node().await;
    let mut ev = event("acct_a", None);
    ev.payload = Bytes::from_static(b"{ \"kept\" :  \"byte for byte\" }");
    let first = created(&node.ingest(vec![ev]).await.unwrap())[0].clone();
    assert_eq!(end_all(&node, &c.clock, DeliveryState::Delivered).await, 2);
    c.clock.advance(Duration::from_secs(1));
    node.ingest(vec![event("acct_a", None), event("acct_b", None)])
        .await
        .unwrap();

    let (meta, payload, deliveries) = node.event_with_deliveries(&first).await.unwrap().unwrap();
    assert_eq!(&payload[..], b"{ \"kept\" :  \"byte for byte\" }");
    assert_eq!(meta.account_id, "acct_a");
    assert_eq!(deliveries.len(), 2);
    assert_eq!(
        meta.deliveries,
        vec![deliveries[0].id.clone(), deliveries[1].id.clone()]
    );
    assert_eq!(
        deliveries[1].endpoint_id.as_deref(),
        Some(ENDPOINTS[1]),
        "fan-out order"
    );
    assert!(deliveries
        .iter()
        .all(|d| d.state == DeliveryState::Delivered));
    let one = node.delivery(&deliveries[0].id).await.unwrap().unwrap();
    assert_eq!(one.last_http_status, Some(200));
    let attempts = node.attempts(&deliveries[0].id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].status, Status::Delivered);
    assert_eq!(attempts[0].request_headers[0].1, deliveries[0].id);
    assert!(node.event("evt_nope").await.unwrap().is_none());
    assert!(node
        .delivery("dlv_01HZZZZZZZZZZZZZZZZZZZZZZZ")
        .await
        .unwrap()
        .is_none());

    // Newest first, two a page.
    let all = herald::store::DeliveryFilter::default();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let (page, next) = node
            .list_deliveries(all.clone(), 2, cursor.clone())
            .await
            .unwrap();
        seen.extend(page.into_iter().map(|d| (d.id, d.account_id)));
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(seen.len(), 6);
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.0.cmp(&a.0));
    assert_eq!(seen, sorted, "newest first");

    let only = |f: herald::store::DeliveryFilter| {
        let node = node.clone();
        async move { node.list_deliveries(f, 100, None).await.unwrap().0.len() }
    };
    let f = herald::store::DeliveryFilter::default;
    assert_eq!(
        only(herald::store::DeliveryFilter {
            account_id: Some("acct_b".into()),
            ..f()
        })
        .await,
        2
    );
    assert_eq!(
        only(herald::store::DeliveryFilter {
            endpoint_id: Some(ENDPOINTS[0].into()),
            ..f()
        })
        .await,
        3
    );
    assert_eq!(
        only(herald::store::DeliveryFilter {
            state: Some(DeliveryState::Pending),
            ..f()
        })
        .await,
        4
    );
    assert_eq!(
        only(herald::store::DeliveryFilter {
            status: Some(Status::Delivered),
            ..f()
        })
        .await,
        2
    );
    assert_eq!(
        only(herald::store::DeliveryFilter {
            since: Some(START + 1000),
            ..f()
        })
        .await,
        4
    );
    assert_eq!(
        only(herald::store::DeliveryFilter {
            until: Some(START + 1000),
            ..f()
        })
        .await,
        2
    );

    let stats = node.stats().await.unwrap();
    assert_eq!(stats.get(DeliveryState::Pending), 4);
    assert_eq!(stats.get(DeliveryState::Delivered), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_prunes_ended_events_in_bounded_batches_and_keeps_pending_ones() {
    let c = Cluster::new().await;
    let node = c.node().await;
    node.ingest((0..5).map(|i| event("a", Some(&format!("k{i}")))).collect())
        .await
        .unwrap();
    assert_eq!(end_all(&node, &c.clock, DeliveryState::Failed).await, 10);
    node.ingest(vec![event("a", None)]).await.unwrap(); // stays pending
    c.clock.advance(Duration::from_secs(3600));
    let cutoff = c.clock.now_ms();
    assert_eq!(node.prune_events(cutoff, 3).await.unwrap(), 3);
    assert_eq!(node.prune_events(cutoff, 3).await.unwrap(), 2);
    assert_eq!(
        node.prune_events(cutoff, 3).await.unwrap(),
        0,
        "the pending event stays"
    );
    assert_eq!(c.count("SELECT count(*) FROM events"), 1);
    assert_eq!(c.count("SELECT count(*) FROM deliveries"), 2);
    assert_eq!(
        c.count("SELECT count(*) FROM attempts"),
        0,
        "attempts go with their events"
    );
    // The pruned events' keys went with them: a key claims nothing once its event is gone.
    assert_eq!(c.count("SELECT count(*) FROM idempotency_keys"), 0);
    let again = node.ingest(vec![event("a", Some("k0"))]).await.unwrap();
    assert_eq!(created(&again).len(), 1, "{again:?}");

    assert_eq!(
        node.prune_keys(c.clock.now_ms(), 100).await.unwrap(),
        0,
        "keys live 24 h"
    );
    c.clock.advance(Duration::from_secs(24 * 3600));
    assert_eq!(node.prune_keys(c.clock.now_ms(), 100).await.unwrap(), 1);
}

fn debounced(key: &str, trailing: bool) -> NewEvent {
    let mut ev = event("acct_d", None);
    ev.debounce_key = Some(key.into());
    ev.debounce = Some(herald::store::DebounceRule {
        key: format!("acct_d\u{0}order.created\u{0}{key}"),
        window_ms: 60_000,
        trailing,
    });
    ev
}

fn deliveries_of(out: &[IngestOutcome]) -> Vec<herald::model::Delivery> {
    match &out[0] {
        IngestOutcome::Created { deliveries, .. } => deliveries.clone(),
        other => panic!("not created: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_debounce_window_holds_across_nodes() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    let first = deliveries_of(&a.ingest(vec![debounced("loc1", false)]).await.unwrap());
    assert!(first.iter().all(|d| d.state == DeliveryState::Pending));
    c.clock.advance(Duration::from_secs(1));
    let second = deliveries_of(&b.ingest(vec![debounced("loc1", false)]).await.unwrap());
    assert!(second
        .iter()
        .all(|d| d.state == DeliveryState::Skipped && d.last_status == Some(Status::Debounced)));
    let stored = b.attempts(&second[0].id).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].status, Status::Debounced);
    // Another key has its own window; after the window a new one opens.
    let other = deliveries_of(&b.ingest(vec![debounced("loc2", false)]).await.unwrap());
    assert_eq!(other[0].state, DeliveryState::Pending);
    c.clock.advance(Duration::from_secs(60));
    let later = deliveries_of(&b.ingest(vec![debounced("loc1", false)]).await.unwrap());
    assert_eq!(later[0].state, DeliveryState::Pending);

    // Many at once on three nodes, for a new key: exactly one event is delivered.
    let nodes = [a.clone(), b.clone(), c.node().await];
    let mut tasks = Vec::new();
    for i in 0..12 {
        let node = nodes[i % 3].clone();
        tasks.push(tokio::spawn(async move {
            deliveries_of(&node.ingest(vec![debounced("loc3", false)]).await.unwrap())
        }));
    }
    let mut pending = 0;
    for t in tasks {
        pending += usize::from(t.await.unwrap()[0].state == DeliveryState::Pending);
    }
    assert_eq!(pending, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trailing_candidate_is_replaced_by_the_next_event_across_nodes() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    let end = START + 60_000;
    let first = deliveries_of(&a.ingest(vec![debounced("k", true)]).await.unwrap());
    assert_eq!(
        first[0].next_attempt_at,
        Some(START),
        "the leading event goes at once"
    );
    c.clock.advance(Duration::from_secs(1));
    let second = deliveries_of(&b.ingest(vec![debounced("k", true)]).await.unwrap());
    assert_eq!(second[0].state, DeliveryState::Pending);
    assert_eq!(
        second[0].next_attempt_at,
        Some(end),
        "the candidate waits for the end"
    );
    c.clock.advance(Duration::from_secs(1));
    // Two more in one request: the last is the candidate, the others end debounced.
    let out = a
        .ingest(vec![debounced("k", true), debounced("k", true)])
        .await
        .unwrap();
    let (third, fourth) = (deliveries_of(&out[..1]), deliveries_of(&out[1..]));
    assert_eq!(fourth[0].next_attempt_at, Some(end));
    for d in second.iter().chain(&third) {
        let now = a.delivery(&d.id).await.unwrap().unwrap();
        assert_eq!(now.state, DeliveryState::Skipped, "{now:?}");
        assert_eq!(now.last_status, Some(Status::Debounced));
        assert_eq!(a.attempts(&d.id).await.unwrap().len(), 1);
    }
    // At the window's end only the leading event's and the last candidate's deliveries are due.
    c.clock.set(end);
    let due: HashSet<String> = b
        .claim_due(100)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.due.delivery.event_id)
        .collect();
    let expected: HashSet<String> = [first[0].event_id.clone(), fourth[0].event_id.clone()].into();
    assert_eq!(due, expected);
}

/// Account `acct_o`'s endpoint `ENDPOINTS[0]`, ordered by the payload's `order`.
fn ordered_endpoint() -> Endpoint {
    let mut ordered = endpoint(ENDPOINTS[0], "acct_o");
    ordered.ordering = Some(herald::model::Ordering {
        key: Some("order".into()),
    });
    ordered
}

/// An event of `acct_o` for [`ordered_endpoint`] alone, of key `order`.
fn ordered_event(order: &str) -> NewEvent {
    let mut ev = event("acct_o", None);
    ev.targets = vec![lane_of(Some(ENDPOINTS[0]))];
    ev.payload = Bytes::from(format!("{{\"order\":\"{order}\"}}"));
    ev
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ordered_key_has_one_delivery_in_flight_in_the_whole_cluster() {
    let c = Cluster::new().await;
    let setup = c.node().await;
    setup.create_endpoint(ordered_endpoint(), 10).await.unwrap();
    let nodes = [c.node().await, c.node().await, c.node().await];
    // 30 events of key "a" and 30 of "b", posted on all three nodes in turn.
    let mut expected: std::collections::HashMap<String, Vec<String>> = Default::default();
    for i in 0..60 {
        let key = if i % 2 == 0 { "a" } else { "b" };
        let out = nodes[i % 3].ingest(vec![ordered_event(key)]).await.unwrap();
        expected
            .entry(key.to_string())
            .or_default()
            .push(deliveries_of(&out)[0].id.clone());
    }
    // The ingest field overrides the payload's key.
    let mut ev = ordered_event("a");
    ev.ordering_key = Some("c".into());
    let c_id = deliveries_of(&nodes[0].ingest(vec![ev]).await.unwrap())[0]
        .id
        .clone();
    expected.insert("c".into(), vec![c_id]);

    // Three nodes, four workers each, claiming and finishing as fast as they can.
    let in_flight = Arc::new(std::sync::Mutex::new(HashSet::<String>::new()));
    let done = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let key_of = |payload: &[u8]| -> String {
        serde_json::from_slice::<serde_json::Value>(payload).unwrap()["order"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut tasks = Vec::new();
    for node in &nodes {
        for _ in 0..4 {
            let (node, in_flight, done) = (node.clone(), in_flight.clone(), done.clone());
            tasks.push(tokio::spawn(async move {
                let mut idle = 0;
                while idle < 20 {
                    let leased = node.claim_due(3).await.unwrap();
                    if leased.is_empty() {
                        idle += 1;
                        tokio::task::yield_now().await;
                        continue;
                    }
                    idle = 0;
                    for l in leased {
                        let key = match l.due.event.ordering_key.clone() {
                            Some(k) => k,
                            None => key_of(&l.due.payload),
                        };
                        assert!(
                            in_flight.lock().unwrap().insert(key.clone()),
                            "two deliveries of key {key} in flight at once"
                        );
                        let mut d = l.due.delivery.clone();
                        d.state = DeliveryState::Delivered;
                        d.next_attempt_at = None;
                        done.lock().unwrap().push(d.id.clone());
                        in_flight.lock().unwrap().remove(&key);
                        node.finish(l.hold.claim(), &d, None).await.unwrap();
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let done = done.lock().unwrap().clone();
    assert_eq!(done.len(), 61, "every delivery attempted once");
    for (key, ids) in expected {
        let order: Vec<&String> = done.iter().filter(|d| ids.contains(d)).collect();
        assert_eq!(
            order,
            ids.iter().collect::<Vec<_>>(),
            "key {key} in commit order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_taking_the_same_keys_in_opposite_orders_never_deadlock() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    for round in 0..30 {
        let (k1, k2) = (format!("x{round}"), format!("y{round}"));
        let mut forward = vec![event("acct", Some(&k1)), event("acct", Some(&k2))];
        forward.extend([debounced(&k1, false), debounced(&k2, false)]);
        let mut backward = vec![event("acct", Some(&k2)), event("acct", Some(&k1))];
        backward.extend([debounced(&k2, false), debounced(&k1, false)]);
        let (x, y) = tokio::join!(a.ingest(forward), b.ingest(backward));
        let (x, y) = (x.expect("no deadlock"), y.expect("no deadlock"));
        assert_eq!(
            created(&x[..2]).len() + created(&y[..2]).len(),
            2,
            "one event per key"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn manual_retries_recoveries_and_waiting_deliveries_on_the_shared_queue() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    let mut ordered = endpoint(ENDPOINTS[0], "acct_o");
    ordered.ordering = Some(herald::model::Ordering { key: None });
    a.create_endpoint(ordered, 10).await.unwrap();
    let b = {
        drop(b);
        c.node().await // knows the endpoint from the start
    };
    let one = |n: u32| {
        let mut ev = event("acct_o", None);
        ev.targets = vec![lane_of(Some(ENDPOINTS[0]))];
        ev.payload = Bytes::from(format!("{{\"n\":{n}}}"));
        ev
    };
    let ids: Vec<String> = {
        let mut ids = Vec::new();
        for n in 0..3 {
            ids.push(
                deliveries_of(&b.ingest(vec![one(n)]).await.unwrap())[0]
                    .id
                    .clone(),
            );
        }
        ids
    };
    let third = b.delivery(&ids[2]).await.unwrap().unwrap();
    let (key, waiting_for) = b.ordering_of(&third).await.unwrap().unwrap();
    assert_eq!(key, "", "the whole endpoint is one sequence");
    assert_eq!(waiting_for.as_deref(), Some(ids[1].as_str()));

    // The head is attempted: while leased, a change is refused as busy.
    let head = a.claim_due(10).await.unwrap();
    assert_eq!(head.len(), 1, "one in flight");
    assert_eq!(head[0].due.delivery.id, ids[0]);
    let busy = b
        .change_delivery(&ids[0], |d| Some((d.clone(), ())))
        .await
        .unwrap();
    assert_eq!(busy, herald::store::Changed::Busy);
    // It fails for good: the next goes.
    let mut failed = head[0].due.delivery.clone();
    failed.state = DeliveryState::Failed;
    failed.next_attempt_at = None;
    a.finish(head[0].hold.claim(), &failed, None).await.unwrap();
    let second = a.claim_due(10).await.unwrap();
    assert_eq!(second[0].due.delivery.id, ids[1]);
    // It waits for a retry an hour on; the third waits behind it.
    let mut retry = second[0].due.delivery.clone();
    retry.queued = true;
    retry.attempt_count = 1;
    retry.next_attempt_at = Some(c.clock.now_ms() + 3_600_000);
    a.finish(second[0].hold.claim(), &retry, None)
        .await
        .unwrap();
    assert!(a.claim_due(10).await.unwrap().is_empty());

    // A manual retry of the failed head is sent at once, out of order.
    let now = c.clock.now_ms();
    let changed = b
        .change_delivery(&ids[0], move |d| {
            let mut d = d.clone();
            d.state = DeliveryState::Pending;
            d.next_attempt_at = Some(now);
            d.manual = true;
            d.queued = true;
            Some((d, ()))
        })
        .await
        .unwrap();
    assert_eq!(changed, herald::store::Changed::Yes(()));
    let manual = a.claim_due(10).await.unwrap();
    assert_eq!(manual.len(), 1);
    assert_eq!(manual[0].due.delivery.id, ids[0]);
    assert!(manual[0].due.delivery.manual);

    // The endpoint is deleted: what waits for a later time is due now.
    assert_eq!(b.expedite_endpoint(ENDPOINTS[0], now).await.unwrap(), 1);
    let expedited = a.claim_due(10).await.unwrap();
    assert_eq!(expedited.len(), 1);
    assert_eq!(expedited[0].due.delivery.id, ids[1]);
    assert_eq!(
        b.change_delivery("dlv_nope", |d| Some((d.clone(), ())))
            .await
            .unwrap(),
        herald::store::Changed::NotFound
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_are_listed_while_they_beat_and_a_leaving_node_gives_up_its_leases() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    a.ingest(vec![event("acct", None)]).await.unwrap();
    let first = a.claim_due(1).await.unwrap();
    assert_eq!(first.len(), 1);
    let mine = first[0].due.delivery.id.clone();
    let nodes = listed(&b).await;
    assert_eq!(nodes.len(), 2);
    let of_a = nodes.iter().find(|n| n.id == a.node()).unwrap();
    assert_eq!(of_a.leases, 1);
    assert!(!of_a.name.is_empty());

    // A stops beating (it died): after a while it is no longer listed; B keeps beating.
    c.clock.advance(Duration::from_secs(20));
    b.heartbeat().await.unwrap();
    assert_eq!(
        listed(&b).await.len(),
        2,
        "20 s without a beat: still listed"
    );
    c.clock.advance(Duration::from_secs(20));
    b.heartbeat().await.unwrap();
    let ids: Vec<String> = listed(&b).await.into_iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![b.node().to_string()]);
    // It comes back (a long pause, not a death). Its lease lapsed meanwhile: its claim takes the
    // other delivery, never its own again (it renews that one instead of attempting it twice);
    // its next beat lists it again.
    let again = a.claim_due(10).await.unwrap();
    assert_eq!(again.len(), 1, "the other delivery");
    assert_ne!(again[0].due.delivery.id, mine);
    assert_eq!(a.renew_held().await.unwrap(), 2);
    a.heartbeat().await.unwrap();
    assert_eq!(listed(&b).await.len(), 2);

    // B leaves: its lease (of a new event's delivery) is given up and it is not listed.
    a.ingest(vec![event("acct", None)]).await.unwrap();
    assert_eq!(b.claim_due(1).await.unwrap().len(), 1);
    assert_eq!(b.leave().await.unwrap(), 1);
    let ids: Vec<String> = listed(&a).await.into_iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![a.node().to_string()]);
    assert_eq!(
        a.claim_due(10).await.unwrap().len(),
        2,
        "B's released delivery, and the new event's other"
    );

    assert!(a.healthy().await);
    c.pg.stop();
    assert!(
        !a.healthy().await,
        "healthz fails while the database is down"
    );
    c.pg.restart();
    common::wait_until(
        Duration::from_secs(15),
        "the node is healthy again",
        || async { a.healthy().await },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_renews_the_leases_of_attempts_still_running() {
    let c = Cluster::new().await;
    let clock: Arc<dyn Clock> = c.clock.clone();
    // A short lease, so its renewals (every third of it) come quickly in real time.
    let a = Arc::new(
        PgStore::with_database(c.database(), clock, Duration::from_millis(600))
            .await
            .unwrap(),
    );
    let b = c.node().await;
    a.ingest(vec![event("acct", None)]).await.unwrap();
    let held = a.claim_due(10).await.unwrap();
    assert_eq!(held.len(), 2);
    // The first attempt finishes; the second keeps running.
    let mut done = held[0].due.delivery.clone();
    done.state = DeliveryState::Delivered;
    done.next_attempt_at = None;
    a.finish(held[0].hold.claim(), &done, None).await.unwrap();

    let (trigger, shutdown) = herald::shutdown::channel();
    let keeper = tokio::spawn(herald_store_postgres::keep_leases(a.clone(), shutdown));
    for step in 1..=5 {
        c.clock.advance(Duration::from_millis(400));
        let until = c.clock.now_ms() + 600;
        common::wait_until(Duration::from_secs(10), "the lease is renewed", || async {
            c.count(&format!(
                "SELECT count(*) FROM deliveries WHERE due_at = {until} AND leased_by IS NOT NULL"
            )) == 1
        })
        .await;
        assert!(
            b.claim_due(10).await.unwrap().is_empty(),
            "step {step}: still A's"
        );
    }
    trigger.fire();
    keeper.await.unwrap();
    // Renewals stopped: the lease lapses and B takes the delivery.
    c.clock.advance(Duration::from_millis(700));
    let taken = b.claim_due(10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].due.delivery.id, held[1].due.delivery.id);
    assert_eq!(a.renew_held().await.unwrap(), 0, "A learns it lost it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_listening_node_hears_again_after_the_database_restarts() {
    let c = Cluster::new().await;
    let (a, _ta) = listening(&c).await;
    let (b, _tb) = listening(&c).await;
    a.create_endpoint(endpoint(ENDPOINTS[0], "acct"), 10)
        .await
        .unwrap();
    common::wait_until(Duration::from_secs(10), "B knows the endpoint", || async {
        b.endpoint(ENDPOINTS[0]).is_some()
    })
    .await;
    c.pg.stop();
    c.pg.restart();
    // Changes made after the restart reach B again: its listener reconnected (and reloaded).
    common::wait_until(Duration::from_secs(30), "A can write again", || async {
        a.change_endpoint::<StoreError>(ENDPOINTS[0], |ep| {
            ep.description = "after the restart".into();
            Ok(true)
        })
        .await
        .is_ok()
    })
    .await;
    common::wait_until(Duration::from_secs(30), "B sees the change", || async {
        b.endpoint(ENDPOINTS[0])
            .is_some_and(|e| e.description == "after the restart")
    })
    .await;
}

/// A finished attempt at `now` of a leased delivery: delivered, one attempt.
fn delivered(d: &herald::model::Delivery, now: i64) -> (herald::model::Delivery, Attempt) {
    let mut done = d.clone();
    done.state = DeliveryState::Delivered;
    done.last_status = Some(Status::Delivered);
    done.attempt_count = 1;
    done.next_attempt_at = None;
    let attempt = Attempt {
        id: herald::ids::new_id(herald::ids::ATTEMPT, now),
        number: 1,
        at: now,
        duration_ms: 5,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: vec![],
        response_body: String::new(),
        response_headers: Vec::new(),
        url: None,
        manual: false,
    };
    (done, attempt)
}

/// A trailing candidate leased by a node that then died (its lease lapsed) is superseded by
/// the next event like any other, and the dead node's late result is refused: it is not sent
/// as well as its replacement. A change of a delivery whose lease lapsed (a manual retry) is
/// not refused as busy either, and fences the dead node out the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lapsed_lease_holds_nothing_against_supersede_or_change() {
    let c = Cluster::new().await;
    let (a, b) = (c.node().await, c.node().await);
    deliveries_of(&a.ingest(vec![debounced("k", true)]).await.unwrap());
    c.clock.advance(Duration::from_secs(1));
    let candidate = deliveries_of(&a.ingest(vec![debounced("k", true)]).await.unwrap());
    // Sent early (a manual retry made it due) by A, which then dies mid-attempt.
    c.pg.sql(
        &format!(
            "UPDATE deliveries SET due_at = {} WHERE event_id IN (SELECT event_id FROM
             deliveries WHERE due_at > {})",
            START,
            START + 1_000
        ),
        "herald",
    );
    let held: Vec<_> = a
        .claim_due(10)
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.due.delivery.event_id == candidate[0].event_id)
        .collect();
    assert_eq!(held.len(), 2, "A holds the candidate's deliveries");
    c.clock.advance(LEASE + Duration::from_secs(1));
    let replacement = deliveries_of(&b.ingest(vec![debounced("k", true)]).await.unwrap());
    for d in &candidate {
        let now = b.delivery(&d.id).await.unwrap().unwrap();
        assert_eq!(
            (now.state, now.last_status),
            (DeliveryState::Skipped, Some(Status::Debounced)),
            "a candidate whose lease lapsed was kept: {now:?}"
        );
    }
    let (done, attempt) = delivered(&held[0].due.delivery, c.clock.now_ms());
    let late = a.finish(held[0].hold.claim(), &done, Some(&attempt)).await;
    assert!(matches!(late, Err(StoreError::LeaseLost)), "{late:?}");

    // A manual retry of a delivery whose lease lapsed.
    c.clock.set(START + 60_000);
    let due = a.claim_due(10).await.unwrap();
    let mine = due
        .iter()
        .find(|l| l.due.delivery.event_id == replacement[0].event_id)
        .expect("the replacement is due at the window's end");
    c.clock.advance(LEASE + Duration::from_secs(1));
    let now = c.clock.now_ms();
    let changed = b
        .change_delivery(&mine.due.delivery.id, move |d| {
            let mut d = d.clone();
            d.next_attempt_at = Some(now);
            d.manual = true;
            Some((d, ()))
        })
        .await
        .unwrap();
    assert_eq!(changed, herald::store::Changed::Yes(()));
    let (done, attempt) = delivered(&mine.due.delivery, now);
    let late = a.finish(mine.hold.claim(), &done, Some(&attempt)).await;
    assert!(matches!(late, Err(StoreError::LeaseLost)), "{late:?}");
}

/// A node keeps a lease (and renews it) until the attempt's result is written: a slow result
/// write (here: the row locked by another transaction) must not let the lease lapse for
/// another node to send the delivery again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_is_kept_until_its_result_is_written() {
    let c = Cluster::new().await;
    let a = c.node().await;
    a.ingest(vec![event("a", None)]).await.unwrap();
    let lease = a.claim_due(10).await.unwrap().remove(0);
    let id = lease.due.delivery.id.clone();
    let mut locker = c.database().dedicated().await.unwrap();
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE",
        &[&herald::ids::parse(herald::ids::DELIVERY, &id)
            .unwrap()
            .to_be_bytes()
            .to_vec()],
    )
    .await
    .unwrap();
    let (done, attempt) = delivered(&lease.due.delivery, c.clock.now_ms());
    let finishing = {
        let a = a.clone();
        tokio::spawn(async move { a.finish(lease.hold.claim(), &done, Some(&attempt)).await })
    };
    common::wait_until(
        Duration::from_secs(10),
        "the result's write waits for the row",
        || async {
            c.count(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'",
            ) > 0
        },
    )
    .await;
    assert!(
        a.holds(&id),
        "the lease was given up before its result was written"
    );
    tx.commit().await.unwrap();
    finishing.await.unwrap().unwrap();
    assert!(!a.holds(&id));
    assert_eq!(c.count("SELECT count(*) FROM attempts"), 1);
}

/// A purge that PostgreSQL aborts as a deadlock (another transaction holds one of the account's
/// events and then waits for one the purge locked) is tried again and finishes: its endpoints
/// are gone already, so it must. The other transaction, the one the deadlock let through,
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_purge_aborted_as_a_deadlock_is_tried_again_and_finishes() {
    let c = Cluster::new().await;
    let node = c.node().await;
    let out = node
        .ingest((0..3).map(|_| event("acct", None)).collect())
        .await
        .unwrap();
    assert_eq!(created(&out).len(), 3);
    let mut other = c.database().dedicated().await.expect("connect");
    let ids: Vec<Vec<u8>> = other
        .query(
            "SELECT id FROM events WHERE account_id = 'acct' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // The newest event, locked first: the purge, locking in id order, waits for it.
    let tx = other.transaction().await.unwrap();
    tx.execute("SELECT id FROM events WHERE id = $1 FOR UPDATE", &[&ids[2]])
        .await
        .unwrap();
    let purging = {
        let node = node.clone();
        tokio::spawn(async move { node.purge_account("acct").await })
    };
    let waiting = || {
        c.count(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%FOR UPDATE%' AND query NOT LIKE '%pg_stat_activity%'",
        )
    };
    common::wait_until(Duration::from_secs(20), "the purge waits", || async {
        waiting() == 1
    })
    .await;
    // Now this waits for the oldest, which the purge holds: PostgreSQL finds the cycle in the
    // purge's wait (the older one) and aborts the purge, which lets this through.
    tx.execute("SELECT id FROM events WHERE id = $1 FOR UPDATE", &[&ids[0]])
        .await
        .expect("let through once the purge was aborted");
    tx.rollback().await.unwrap();
    let purged = purging
        .await
        .unwrap()
        .expect("the purge was tried again and finished");
    assert_eq!((purged.events, purged.deliveries), (3, 6));
    assert_eq!(
        c.count("SELECT count(*) FROM events WHERE account_id = 'acct'"),
        0
    );
    assert!(
        c.pg.log().contains("deadlock detected"),
        "PostgreSQL aborted a transaction as a deadlock"
    );
}

/// An ordered backlog restored into a cluster's database keeps its commit order (`lane_seq`),
/// not the order of its event ids: ids are minted by each node before it commits, so events of
/// one key ingested on two nodes can hold ids in the other order. Backed up and restored into
/// an empty database, the key's deliveries are attempted in the order they were committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restored_ordered_backlog_keeps_its_commit_order() {
    let c = Cluster::new().await;
    let source = c.node().await;
    source
        .create_endpoint(ordered_endpoint(), 10)
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..4 {
        let ev = ordered_event("a");
        ids.push(
            deliveries_of(&source.ingest(vec![ev]).await.unwrap())[0]
                .id
                .clone(),
        );
    }
    // Committed the other way round from their ids, as two nodes can.
    c.pg.sql("UPDATE deliveries SET lane_seq = 1000 - lane_seq", "herald");
    let committed: Vec<String> = ids.iter().rev().cloned().collect();

    // Backed up (pages of 8 MiB or 1,000 events) and restored into an empty database.
    let mut archive = Vec::new();
    herald::backup::write(&Backend::of_postgres(source.clone()), START, |part| {
        archive.extend_from_slice(&part);
        std::future::ready(true)
    })
    .await
    .unwrap();
    let target = c.node_on_new_database("restored").await;
    herald::backup::restore(
        &Backend::of_postgres(target.clone()),
        std::io::Cursor::new(archive),
        START,
        |_| {},
    )
    .await
    .unwrap();
    let mut attempted = Vec::new();
    while attempted.len() < ids.len() {
        let leased = target.claim_due(10).await.unwrap();
        assert_eq!(leased.len(), 1, "one delivery of the key at a time");
        let l = leased.into_iter().next().unwrap();
        let mut d = l.due.delivery.clone();
        d.state = DeliveryState::Delivered;
        d.next_attempt_at = None;
        attempted.push(d.id.clone());
        target.finish(l.hold.claim(), &d, None).await.unwrap();
    }
    assert_eq!(attempted, committed, "in commit order, not id order");
}

/// A flush of chart minutes that races the delete of their endpoint (its account purged) adds
/// no row for it: the flush waits for the delete and finds the endpoint gone. Before, it wrote
/// the rows back after the purge had removed the endpoint's minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flush_of_minutes_racing_the_delete_of_their_endpoint_adds_none() {
    let c = Cluster::new().await;
    let node = c.node().await;
    node.create_endpoint(endpoint(ENDPOINTS[0], "acct"), 10)
        .await
        .unwrap();
    node.create_endpoint(endpoint(ENDPOINTS[1], "other"), 10)
        .await
        .unwrap();
    // The delete is under way, not yet committed, when the flush comes.
    let mut other = c.database().dedicated().await.expect("connect");
    let tx = other.transaction().await.unwrap();
    tx.execute("DELETE FROM endpoints WHERE id = $1", &[&ENDPOINTS[0]])
        .await
        .unwrap();
    let minute = |at: i64| {
        let mut m = herald::store::Minute {
            at,
            latency_sum_ms: 5,
            latency_max_ms: 5,
            ..Default::default()
        };
        m.counts[Status::Delivered as usize] = 1;
        m
    };
    let at = START.div_euclid(60_000) * 60_000;
    let flushing = {
        let node = node.clone();
        tokio::spawn(async move {
            node.add_minutes(vec![
                (ENDPOINTS[0].to_string(), minute(at)),
                (ENDPOINTS[1].to_string(), minute(at)),
            ])
            .await
        })
    };
    common::wait_until(Duration::from_secs(20), "the flush waits", || async {
        c.count(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%endpoint_minutes%' AND query NOT LIKE '%pg_stat_activity%'",
        ) == 1
    })
    .await;
    tx.commit().await.unwrap();
    flushing.await.unwrap().unwrap();
    assert_eq!(
        c.count(&format!(
            "SELECT count(*) FROM endpoint_minutes WHERE endpoint_id = '{}'",
            ENDPOINTS[0]
        )),
        0,
        "no minute of the deleted endpoint"
    );
    assert_eq!(
        c.count(&format!(
            "SELECT count(*) FROM endpoint_minutes WHERE endpoint_id = '{}'",
            ENDPOINTS[1]
        )),
        1,
        "the other endpoint's minute is added"
    );
}

/// The nodes `store` lists (its own node's id aside).
async fn listed(store: &herald_store_postgres::PgStore) -> Vec<herald::store::Node> {
    store
        .nodes()
        .await
        .unwrap()
        .expect("a cluster lists its nodes")
        .1
}
