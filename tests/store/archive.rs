//! What the stores hold, read back through herald's own backup archive: a purged account
//! leaves nothing in it, and a backup restores into either store exactly, from either. These
//! cases need herald (its archive format, its restore); the contract's own conformance suite
//! is `herald-store`'s kit, which each store's crate runs. Here it runs through [`Backend`], on
//! the embedded store in a temporary directory and on a fresh database of a real PostgreSQL
//! this test process starts.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald::clock::Clock;
use herald::config::Config;
use herald::model::{Attempt, ClientCertificate, DeliveryState, Status};
use herald::policy::alerts::{AlertKind, Claimed};
use herald::policy::breaker::{Breaker, Phase};
use herald::policy::quota::{windows, Limits};
use herald::store::prelude::*;
use herald::store::{lane_of, token_hash, Backend, IngestOutcome, NewEvent};
use herald_store::conformance::accounts::{answer, application, claim_for, claim_of};
use herald_store::conformance::log::minute;
use herald_store::conformance::{
    created, deliver, endpoint, event, event_to, failed_first, ids, session, take_all, Harness,
    IngestEvents, Subject, EP_A, EP_B, START,
};
use herald_store_postgres::{migrate, Database, PgStore};
use herald_store_sled::SledStore;

/// The embedded store in a temporary directory, as herald runs it.
struct SledBackend {
    dir: tempfile::TempDir,
}

impl Harness for SledBackend {
    type Store = Backend;
    const NAME: &'static str = "sled";

    async fn new() -> SledBackend {
        SledBackend {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    async fn open(&self, clock: Arc<dyn Clock>) -> Arc<Backend> {
        let store = SledStore::open(
            &self.dir.path().join("data"),
            8 << 20,
            clock,
            Arc::default(),
        )
        .expect("open the embedded store");
        Arc::new(Backend::of_sled(store))
    }

    async fn close(&self, store: Arc<Backend>) {
        let Some(s) = store.sled().cloned() else {
            unreachable!("the embedded store")
        };
        drop(store);
        let committer = s.take_committer();
        s.close().expect("close");
        drop(s);
        if let Some(c) = committer {
            c.join().expect("the committer ends");
        }
    }

    fn listen(&self, _store: &Arc<Backend>) -> Box<dyn Send> {
        Box::new(())
    }
}

/// A fresh database on the PostgreSQL this process shares, as herald runs a node on it.
struct PgBackend {
    url: String,
}

impl Harness for PgBackend {
    type Store = Backend;
    const NAME: &'static str = "postgres";

    async fn new() -> PgBackend {
        PgBackend {
            url: common::postgres::shared_database(),
        }
    }

    async fn open(&self, clock: Arc<dyn Clock>) -> Arc<Backend> {
        let config = Config::from_toml(&format!(
            "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {:?}\npool_size = 4\n",
            self.url
        ))
        .expect("config");
        let db = Database::new(&herald::store::postgres_settings(&config).expect("settings"))
            .expect("database");
        migrate(
            &mut db.dedicated().await.expect("connect"),
            Duration::from_secs(30),
        )
        .await
        .expect("migrate");
        let store = PgStore::with_database(db, clock, Duration::from_secs(30))
            .await
            .expect("node");
        Arc::new(Backend::of_postgres(Arc::new(store)))
    }

    async fn close(&self, store: Arc<Backend>) {
        drop(store);
    }

    fn listen(&self, _store: &Arc<Backend>) -> Box<dyn Send> {
        Box::new(())
    }
}

/// A backup of the store, as of the start.
async fn archive_of<H: Harness<Store = Backend>>(s: &Subject<H>) -> Vec<u8> {
    let mut archive = Vec::new();
    herald::backup::write(&s.store, START, |chunk| {
        archive.extend_from_slice(&chunk);
        std::future::ready(true)
    })
    .await
    .unwrap_or_else(|e| panic!("{}: backup: {e}", s.name));
    archive
}

/// Restores `archive` into the store.
async fn restore(
    s: &Subject<impl Harness<Store = Backend>>,
    archive: &[u8],
) -> Result<herald::backup::format::Totals, herald::backup::BackupError> {
    herald::backup::restore(
        &s.store,
        std::io::Cursor::new(archive.to_vec()),
        START,
        |_| {},
    )
    .await
}

/// What a store holds, through the contract, as JSON: every event with its payload, deliveries
/// and attempts (newest first), and the directory as a backup reads it.
async fn contents<H: Harness<Store = Backend>>(
    s: &Subject<H>,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let archive = archive_of(s).await;
    let mut reader = herald::backup::format::Reader::new(&archive[..]).expect("an archive");
    let (mut events, mut directory) = (Vec::new(), Vec::new());
    while let Some(part) = reader.next_part().expect("a whole archive") {
        match part {
            herald::backup::format::Part::Events(evs) => events.extend(evs.into_iter().map(|h| {
                serde_json::json!({
                    "meta": h.meta,
                    "payload": h.payload.to_vec(),
                    "deliveries": h.deliveries,
                })
            })),
            herald::backup::format::Part::Directory(rows) => {
                directory.extend(rows.iter().map(|r| serde_json::to_value(r).unwrap()))
            }
            _ => {}
        }
    }
    (events, directory)
}

/// A store with a bit of everything: endpoints (one with a client certificate and an open
/// breaker), a plan, an account secret, events with a large and a non-UTF-8 payload and an
/// idempotency key, a delivered delivery, one waiting for a retry and fresh ones.
async fn fill<H: Harness<Store = Backend>>(s: &Subject<H>) {
    let store = &*s.store;
    store
        .create_endpoint(endpoint(EP_A, "acct"), 10)
        .await
        .unwrap();
    store
        .create_endpoint(endpoint(EP_B, "acct"), 10)
        .await
        .unwrap();
    let described = ClientCertificate {
        subject: "CN=client".into(),
        not_after: START + 86_400_000,
        sha256: "ab".repeat(32),
    };
    let chain = format!("-----BEGIN CERTIFICATE-----\n{}\n", "A".repeat(20_000));
    store
        .set_client_certificate(EP_A, Some((&chain, "KEY", described)), START)
        .await
        .unwrap();
    let limits = Limits {
        per_minute: Some(10),
        per_day: Some(100),
    };
    for _ in 0..3 {
        assert!(store
            .quota_take("acct", windows(START), limits)
            .await
            .unwrap());
    }
    store
        .set_account_plan("acct", Some("pro".into()))
        .await
        .unwrap();
    store
        .set_account_secret("acct", "api_key", "s3cret")
        .await
        .unwrap();
    store
        .set_alert_emails(
            "acct",
            vec!["ops@acct.test".into(), "oncall@acct.test".into()],
        )
        .await
        .unwrap();
    store
        .change_breaker(EP_B, START, |b| {
            b.phase = Phase::Open;
            b.consecutive_failures = 5;
            b.next_probe_at = Some(START + 60_000);
        })
        .await
        .unwrap();
    let mut large = event("acct", None, START);
    large.payload = Bytes::from(format!("{{\"big\":\"{}\"}}", "x".repeat(50_000)));
    let mut binary = event("acct", None, START);
    binary.payload = Bytes::from_static(&[0xff, 0xfe, 0x00, 0x01]);
    let mut labelled = event("acct", Some("idem-1"), START);
    labelled.channels = vec!["ch-a".into(), "ch-b".into()];
    labelled.tags = vec!["t1".into()];
    labelled.request_key = Some("req-fill".into());
    let out = store
        .ingest_events(vec![labelled, large, binary])
        .await
        .unwrap();
    store.put_application(&application("acct")).await.unwrap();
    store
        .keep_api_answer("acct", "key-1", answer(START, 202))
        .await
        .unwrap();
    let (_, first) = created(&out[0]);
    deliver(s, s.take(&first[0].id).await).await;
    // A failed attempt, retried in a minute.
    let taken = s.take(&first[1].id).await;
    let was = taken.due.delivery.clone();
    let (attempt, now) = failed_first(&was, s.clock.now_ms());
    store
        .record_attempt(&was, &now, &attempt, taken.fence)
        .await
        .unwrap();
    s.release(taken).await;
    // The rest stay taken by this node until the store closes: give them back.
    let waiting: Vec<_> = s.untaken();
    for t in waiting {
        store.release(t.hold, Some(START)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_account_leaves_nothing_and_the_others_untouched() {
    purged_leaves_nothing(Subject::<SledBackend>::new().await).await;
    purged_leaves_nothing(Subject::<PgBackend>::new().await).await;
}

async fn purged_leaves_nothing<H: Harness<Store = Backend>>(s: Subject<H>) {
    let store = &*s.store;
    store
        .create_endpoint(endpoint(EP_A, "acct"), 10)
        .await
        .unwrap();
    store
        .create_endpoint(endpoint(EP_B, "other"), 10)
        .await
        .unwrap();
    store
        .set_account_plan("acct", Some("pro".into()))
        .await
        .unwrap();
    store
        .set_account_secret("acct", "api_key", "s3cret")
        .await
        .unwrap();
    store
        .set_alert_emails("acct", vec!["ops@acct.test".into()])
        .await
        .unwrap();
    store
        .set_alert_emails("other", vec!["ops@other.test".into()])
        .await
        .unwrap();
    assert!(claim_of(store, EP_A, AlertKind::Failing, START, 1).await);
    store
        .create_portal_session(
            &session("ps_1", false, START + 60_000),
            token_hash("tok_acct"),
        )
        .await
        .unwrap();
    store
        .change_breaker(EP_A, START, |b| b.consecutive_failures = 3)
        .await
        .unwrap();
    let w = windows(START);
    let limits = Limits {
        per_minute: Some(100),
        per_day: Some(1000),
    };
    assert!(store.quota_take("acct", w, limits).await.unwrap());
    let out = store
        .ingest_events(vec![
            event_to("acct", EP_A, Some("k")),
            event_to("acct", EP_A, None),
            event_to("acct", EP_A, None),
            event_to("other", EP_B, Some("k")),
            event_to("other", EP_B, None),
        ])
        .await
        .unwrap();
    let acct: Vec<_> = out[..3].iter().map(|o| created(o).1[0].clone()).collect();
    let other: Vec<_> = out[3..].iter().map(|o| created(o).1[0].clone()).collect();
    deliver(&s, s.take(&acct[0].id).await).await;
    deliver(&s, s.take(&other[0].id).await).await;
    // One of the account's deliveries is being attempted while the purge comes.
    let in_flight = s.take(&acct[1].id).await;
    // The rest the harness took waits in the queue again.
    let waiting: Vec<_> = s.untaken();
    for t in waiting {
        store.release(t.hold, Some(START)).await.unwrap();
    }
    let others_before: Vec<_> = contents(&s)
        .await
        .0
        .into_iter()
        .filter(|e| e["meta"]["account_id"] == "other")
        .collect();
    let stats_before = store.stats().await.unwrap();
    let charted = vec![
        (EP_A.to_string(), minute(START, 1, 0, 5)),
        (EP_B.to_string(), minute(START, 1, 0, 5)),
    ];
    store.add_minutes(charted).await.unwrap();

    let purged = store.purge_account("acct").await.unwrap();
    assert_eq!(
        (purged.events, purged.deliveries, purged.endpoints),
        (3, 3, 1),
        "{}",
        s.name
    );
    // The attempt under way finishes; what it records is discarded.
    let was = in_flight.due.delivery.clone();
    let mut done = was.clone();
    done.state = DeliveryState::Delivered;
    done.attempt_count = 1;
    let attempt = Attempt {
        id: herald::ids::new_id(herald::ids::ATTEMPT, START),
        number: 1,
        at: START,
        duration_ms: 1,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: Vec::new(),
        response_body: String::new(),
        response_headers: Vec::new(),
        url: None,
        manual: false,
    };
    let _ = store
        .record_attempt(&was, &done, &attempt, in_flight.fence)
        .await;
    s.release(in_flight).await;

    let (events, directory) = contents(&s).await;
    assert_eq!(
        events, others_before,
        "{}: only the other account's events",
        s.name
    );
    let text = serde_json::to_string(&directory).unwrap();
    assert!(
        !text.contains("acct\""),
        "{}: nothing of the account: {text}",
        s.name
    );
    assert!(
        text.contains(EP_B),
        "{}: the other's endpoint stays",
        s.name
    );
    assert!(store.endpoint(EP_A).is_none(), "{}", s.name);
    assert!(
        store.endpoint_minutes(EP_A, 0).await.unwrap().is_empty(),
        "{}",
        s.name
    );
    assert_eq!(
        store.endpoint_minutes(EP_B, 0).await.unwrap().len(),
        1,
        "{}",
        s.name
    );
    assert_eq!(store.account_plan("acct"), None, "{}", s.name);
    assert!(
        store.alert_emails("acct").await.unwrap().is_empty(),
        "{}",
        s.name
    );
    assert_eq!(
        store.all_alert_emails().await.unwrap(),
        vec![("other".to_string(), vec!["ops@other.test".to_string()])],
        "{}: the other's addresses stay",
        s.name
    );
    // A claim racing the purge writes no mark for its endpoint.
    assert_eq!(
        claim_for(store, EP_A, AlertKind::Failing, START + 1, 1).await,
        Claimed::Gone,
        "{}",
        s.name
    );
    assert_eq!(
        store.account_secret("acct", "api_key").await.unwrap(),
        None,
        "{}",
        s.name
    );
    assert_eq!(
        store.portal_session("tok_acct", START).await.unwrap(),
        None,
        "{}",
        s.name
    );
    assert_eq!(
        store.quota_usage("acct", w).await.unwrap(),
        (0, 0),
        "{}",
        s.name
    );
    assert_eq!(
        store.breaker(EP_A).await.unwrap(),
        Breaker::default(),
        "{}",
        s.name
    );
    assert!(
        !store.account_ids().contains(&"acct".to_string()),
        "{}",
        s.name
    );
    // The counts lose the account's deliveries (one delivered, two pending).
    let stats = store.stats().await.unwrap();
    assert_eq!(
        stats.get(DeliveryState::Delivered),
        stats_before.get(DeliveryState::Delivered) - 1,
        "{}",
        s.name
    );
    assert_eq!(
        stats.get(DeliveryState::Pending),
        stats_before.get(DeliveryState::Pending) - 2,
        "{}",
        s.name
    );
    // None of its deliveries is taken any more.
    let due: Vec<String> = take_all(&s)
        .await
        .into_iter()
        .map(|t| t.due.delivery.id)
        .collect();
    assert_eq!(due, vec![other[1].id.clone()], "{}", s.name);
    // The account starts empty: its idempotency key is free again.
    let again = store
        .ingest_events(vec![event_to("acct", EP_A, Some("k"))])
        .await
        .unwrap();
    assert!(
        matches!(again[0], IngestOutcome::Created { .. }),
        "{}: {again:?}",
        s.name
    );
    // Its endpoint's alert mark and its count of mails this hour went with it: created
    // again, with a cap of one mail an hour, a failing mail is claimed at once.
    store
        .create_endpoint(endpoint(EP_A, "acct"), 10)
        .await
        .unwrap();
    assert!(
        claim_of(store, EP_A, AlertKind::Failing, START + 2, 1).await,
        "{}",
        s.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_either_store_exactly() {
    backup_restores_exactly(Subject::<SledBackend>::new().await).await;
    backup_restores_exactly(Subject::<PgBackend>::new().await).await;
}

/// Backs up `source`, filled, and restores it into a new store of each kind.
async fn backup_restores_exactly<H: Harness<Store = Backend>>(source: Subject<H>) {
    fill(&source).await;
    let archive = archive_of(&source).await;
    let before = contents(&source).await;
    assert_eq!(before.0.len(), 3, "{}: three events", source.name);
    restores_exactly(
        source.name,
        &archive,
        &before,
        Subject::<SledBackend>::new().await,
    )
    .await;
    restores_exactly(
        source.name,
        &archive,
        &before,
        Subject::<PgBackend>::new().await,
    )
    .await;
}

/// Restores `archive` (of a `from` store that held `before`) into `target`.
async fn restores_exactly<H: Harness<Store = Backend>>(
    from: &str,
    archive: &[u8],
    before: &(Vec<serde_json::Value>, Vec<serde_json::Value>),
    target: Subject<H>,
) {
    let what = format!("{from} into {}", target.name);
    restore(&target, archive)
        .await
        .unwrap_or_else(|e| panic!("{what}: restore: {e}"));
    // What is durable is there after the store closes and opens again.
    let target = target.reopen().await;
    let after = contents(&target).await;
    assert_eq!(
        after.0, before.0,
        "{what}: the events, deliveries and attempts"
    );
    assert_eq!(after.1, before.1, "{what}: the directory");
    assert_eq!(
        target
            .store
            .quota_usage("acct", windows(START))
            .await
            .unwrap(),
        (3, 3),
        "{what}: the usage"
    );
    // The idempotency key still answers the first event.
    let again = target
        .store
        .ingest_events(vec![event("acct", Some("idem-1"), START)])
        .await
        .unwrap();
    assert!(
        matches!(&again[0], IngestOutcome::Duplicate { event_id } if Some(event_id) == before.0.last().and_then(|e| e["meta"]["id"].as_str()).map(str::to_string).as_ref()),
        "{what}: the key answers duplicate with the first event: {again:?}"
    );
    // A second restore into it is refused and changes nothing.
    let refused = restore(&target, archive).await;
    assert_eq!(
        contents(&target).await.0,
        before.0,
        "{what}: nothing restored twice"
    );
    // The fresh deliveries are due at once (the retry at its time).
    let mut due: Vec<String> = take_all(&target)
        .await
        .into_iter()
        .map(|t| t.due.delivery.id)
        .collect();
    let mut fresh: Vec<String> = before
        .0
        .iter()
        .flat_map(|e| e["deliveries"].as_array().unwrap().clone())
        .filter(|d| d[0]["state"] == "pending" && d[0]["queued"] == false)
        .map(|d| d[0]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(fresh.len(), 4, "{what}: four fresh deliveries");
    due.sort();
    fresh.sort();
    assert_eq!(due, fresh, "{what}: the fresh deliveries are due");
    assert!(
        matches!(refused, Err(herald::backup::BackupError::Refused(_))),
        "{what}: a store that holds data is refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_ordered_endpoint_hands_out_its_backlog_in_commit_order() {
    restored_backlog_in_order(Subject::<SledBackend>::new().await).await;
    restored_backlog_in_order(Subject::<PgBackend>::new().await).await;
}

/// Backs up an ordered backlog of `source` and restores it into a new store of each kind.
async fn restored_backlog_in_order<H: Harness<Store = Backend>>(source: Subject<H>) {
    let mut ep = endpoint(EP_A, "acct");
    ep.ordering = Some(herald::model::Ordering {
        key: Some("k".into()),
    });
    source.store.create_endpoint(ep, 100).await.unwrap();
    // Lane x: three events; lane y: one. Spread over several pages of the archive.
    let mut x = Vec::new();
    for (i, k) in ["x", "y", "x", "x"].iter().enumerate() {
        let ev = NewEvent {
            targets: vec![lane_of(Some(EP_A))],
            payload: Bytes::from(format!(r#"{{"k": "{k}"}}"#)),
            ..event("acct", None, START + i as i64)
        };
        let out = source.store.ingest_events(vec![ev]).await.unwrap();
        if *k == "x" {
            x.push(created(&out[0]).1[0].id.clone());
        }
    }
    let archive = archive_of(&source).await;
    hands_out_in_order(
        source.name,
        &archive,
        &x,
        Subject::<SledBackend>::new().await,
    )
    .await;
    hands_out_in_order(source.name, &archive, &x, Subject::<PgBackend>::new().await).await;
}

/// Restores `archive` into `target`: ordered lane x's deliveries (`x`) come one at a time.
async fn hands_out_in_order<H: Harness<Store = Backend>>(
    from: &str,
    archive: &[u8],
    x: &[String],
    target: Subject<H>,
) {
    let what = format!("{from} into {}", target.name);
    restore(&target, archive)
        .await
        .unwrap_or_else(|e| panic!("{what}: restore: {e}"));
    let target = target.reopen().await;
    // Every event's time has come.
    target.clock.set(START + 1_000);
    // Each lane's head, then the next of x once its head is delivered.
    for (step, head) in x.iter().enumerate() {
        let taken = take_all(&target).await;
        let due: Vec<&str> = ids(&taken).into_iter().collect();
        assert!(
            due.contains(&head.as_str())
                && x.iter().filter(|d| due.contains(&d.as_str())).count() == 1,
            "{what}: step {step}: x's {head} and no other of x is due: {due:?}"
        );
        for t in taken {
            deliver(&target, t).await;
        }
    }
}
