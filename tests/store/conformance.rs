//! The store contract's conformance suite (the `herald-store` crate's contract.rs): every case runs, through
//! [`Backend`], against the embedded store on a temporary directory and against a real
//! PostgreSQL this test process starts (one server, a fresh database per case). A behaviour
//! one store has and the other lacks fails here, naming the store.
//!
//! The cases use only the contract and a manual clock; what only one store has (the inside of
//! sled's due index and its folds, the cluster's lease renewals and notices) is tested beside
//! that store.

use crate::common;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use herald::clock::{Clock, ManualClock};
use herald::config::Config;
use herald::model::{
    Application, Attempt, ClientCertificate, Delivery, DeliveryState, Endpoint, EndpointState,
    PortalSession, RateLimit, Status,
};
use herald::policy::alerts::{AlertClaim, AlertKind, Claimed};
use herald::policy::breaker::{Breaker, Change, Phase};
use herald::policy::quota::{windows, Limits};
use herald::store::contract::Intake;
use herald::store::postgres::{migrate, Database, PgStore};
use herald::store::prelude::*;
use herald::store::sled::SledStore;
use herald::store::{
    lane_of, token_hash, ApiAnswer, Backend, Changed, CopyStart, DebounceRule, DeliveryFilter,
    Fence, FixedLimits, Hold, IngestOutcome, Minute, NewEvent, Retained, StoreError, Taken,
    IDEMPOTENCY_WINDOW_MS, MAX_ENDPOINT_SIZE,
};

/// Stores events made beforehand. The contract takes a fan-out, which the store calls (again
/// only in a cluster whose endpoints changed meanwhile): this one hands the same events each
/// time.
trait IngestEvents {
    fn ingest_events(
        &self,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<Vec<IngestOutcome>, StoreError>>;
}

impl<S: herald::store::contract::Ingest> IngestEvents for S {
    async fn ingest_events(&self, events: Vec<NewEvent>) -> Result<Vec<IngestOutcome>, StoreError> {
        self.ingest(|| Ok(events.clone())).await
    }
}

const START: i64 = 1_800_000_000_000;
const EP_A: &str = "ep_01HZZZZZZZZZZZZZZZZZZZZZZA";
const EP_B: &str = "ep_01HZZZZZZZZZZZZZZZZZZZZZZB";

/// One store under test, on a clock of its own.
struct Subject {
    name: &'static str,
    store: Backend,
    clock: Arc<ManualClock>,
    /// Where the store is: its data directory, or its database's URL.
    place: Place,
    /// Deliveries a take handed to this node and no case has asked for yet.
    taken: std::sync::Mutex<std::collections::HashMap<String, Taken<Hold>>>,
}

enum Place {
    Directory(std::path::PathBuf),
    Database(String),
}

/// The embedded store, and the directory it is in (kept until the case ends).
async fn sled_subject() -> (Subject, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = Arc::new(ManualClock::new(START));
    let place = Place::Directory(dir.path().join("data"));
    let subject = Subject {
        name: "sled",
        store: open(&place, &clock).await,
        clock,
        place,
        taken: Default::default(),
    };
    (subject, dir)
}

async fn postgres_subject() -> Subject {
    let url = common::postgres::shared_database();
    let clock = Arc::new(ManualClock::new(START));
    let place = Place::Database(url);
    Subject {
        name: "postgres",
        store: open(&place, &clock).await,
        clock,
        place,
        taken: Default::default(),
    }
}

/// Opens the store at `place` (a cluster's database is migrated first).
async fn open(place: &Place, clock: &Arc<ManualClock>) -> Backend {
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    match place {
        Place::Directory(path) => {
            let store = SledStore::open(path, 8 << 20, dyn_clock, Arc::default())
                .expect("open the embedded store");
            Backend::Sled(store)
        }
        Place::Database(url) => {
            let config = Config::from_toml(&format!(
                "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = {url:?}\npool_size = 4\n"
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
            let store = PgStore::with_database(db, dyn_clock, Duration::from_secs(30))
                .await
                .expect("node");
            Backend::Postgres(Arc::new(store))
        }
    }
}

impl Subject {
    /// Closes the store as herald does when it stops and opens it again: what the contract
    /// calls durable is there.
    async fn reopen(self) -> Subject {
        let Subject {
            name,
            store,
            clock,
            place,
            ..
        } = self;
        if let Backend::Sled(s) = store {
            let committer = s.take_committer();
            s.close().expect("close");
            drop(s);
            if let Some(c) = committer {
                c.join().expect("the committer ends");
            }
        }
        Subject {
            name,
            store: open(&place, &clock).await,
            clock,
            place,
            taken: Default::default(),
        }
    }
}

impl Subject {
    /// Takes the due delivery `id` from the queue as the scheduler would: a take hands out
    /// every delivery due; those not asked for yet wait here.
    async fn take(&self, id: &str) -> Taken<Hold> {
        let known = self.taken.lock().unwrap().contains_key(id);
        if !known {
            let taken = take_all(self).await;
            let mut waiting = self.taken.lock().unwrap();
            for t in taken {
                waiting.insert(t.due.delivery.id.clone(), t);
            }
        }
        let taken = self.taken.lock().unwrap().remove(id);
        taken.unwrap_or_else(|| panic!("{}: {id} is due and taken by this node", self.name))
    }

    /// Gives a taken delivery back after its attempt was recorded.
    async fn release(&self, taken: Taken<Hold>) {
        self.store
            .release(taken.hold, None)
            .await
            .unwrap_or_else(|e| panic!("{}: release: {e}", self.name));
    }
}

/// Limits that take whatever is due.
fn everything() -> FixedLimits {
    FixedLimits {
        others: 1_000,
        ..FixedLimits::default()
    }
}

/// Runs `case` against each store in turn.
async fn on_both<F, Fut>(case: F)
where
    F: Fn(Subject) -> Fut,
    Fut: Future<Output = ()>,
{
    let (sled, dir) = sled_subject().await;
    case(sled).await;
    drop(dir);
    case(postgres_subject().await).await;
}

fn event(account: &str, key: Option<&str>, at: i64) -> NewEvent {
    NewEvent {
        account_id: account.into(),
        event_type: "order.created".into(),
        received_at: at,
        payload: Bytes::from_static(b"{\"n\":1}"),
        targets: vec![lane_of(Some(EP_A)), lane_of(Some(EP_B))],
        idempotency_key: key.map(str::to_string),
        debounce_key: None,
        ordering_key: None,
        debounce: None,
        channels: Vec::new(),
        tags: Vec::new(),
        request_key: None,
    }
}

fn created(out: &IngestOutcome) -> (String, Vec<Delivery>) {
    match out {
        IngestOutcome::Created {
            event_id,
            deliveries,
        } => (event_id.clone(), deliveries.clone()),
        other => panic!("not created: {other:?}"),
    }
}

/// Stores one event for both endpoints; its id and deliveries.
async fn ingest_one(s: &Subject) -> (String, Vec<Delivery>) {
    let out = s
        .store
        .ingest_events(vec![event("acct", None, START)])
        .await
        .unwrap_or_else(|e| panic!("{}: ingest: {e}", s.name));
    created(&out[0])
}

fn json(d: &Delivery) -> serde_json::Value {
    serde_json::to_value(d).expect("a delivery as JSON")
}

/// What a manual retry does to a delivery: pending again, due at `at`.
fn retried(d: &Delivery, at: i64) -> Delivery {
    let mut d = d.clone();
    d.state = DeliveryState::Pending;
    d.next_attempt_at = Some(at);
    d.manual = true;
    d.queued = true;
    d
}

/// A portal session of account `acct`, made at the start, that expires at `expires_at`.
fn session(id: &str, read_only: bool, expires_at: i64) -> PortalSession {
    PortalSession {
        id: id.into(),
        account_id: "acct".into(),
        read_only,
        created_at: START,
        expires_at,
    }
}

fn endpoint(id: &str, account: &str) -> Endpoint {
    common::store::endpoint(id, account, START)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_is_read_back_exactly_with_a_pending_delivery_per_target() {
    on_both(|s| async move {
        let out = s
            .store
            .ingest_events(vec![event("acct", None, START), event("acct", None, START)])
            .await
            .unwrap();
        assert_eq!(out.len(), 2, "{}", s.name);
        let (first, deliveries) = created(&out[0]);
        let (second, _) = created(&out[1]);
        assert!(first < second, "{}: ids grow in commit order", s.name);
        assert_eq!(deliveries.len(), 2, "{}", s.name);
        assert_eq!(
            deliveries[0].endpoint_id.as_deref(),
            Some(EP_A),
            "{}",
            s.name
        );
        assert_eq!(
            deliveries[1].endpoint_id.as_deref(),
            Some(EP_B),
            "{}",
            s.name
        );
        for d in &deliveries {
            assert_eq!(d.state, DeliveryState::Pending, "{}", s.name);
            assert_eq!(d.event_id, first, "{}", s.name);
            assert_eq!(d.attempt_count, 0, "{}", s.name);
            let read = s.store.delivery(&d.id).await.unwrap().expect("stored");
            assert_eq!(json(&read), json(d), "{}: read back as answered", s.name);
            assert!(
                s.store.attempts(&d.id).await.unwrap().is_empty(),
                "{}",
                s.name
            );
        }
        let (meta, payload) = s.store.event(&first).await.unwrap().expect("stored");
        assert_eq!(
            (meta.account_id.as_str(), meta.event_type.as_str()),
            ("acct", "order.created"),
            "{}",
            s.name
        );
        assert_eq!(
            &payload[..],
            b"{\"n\":1}",
            "{}: the payload's bytes",
            s.name
        );
        let (_, _, all) = s
            .store
            .event_with_deliveries(&first)
            .await
            .unwrap()
            .expect("stored");
        assert_eq!(
            all.iter().map(json).collect::<Vec<_>>(),
            deliveries.iter().map(json).collect::<Vec<_>>(),
            "{}",
            s.name
        );

        let stats = s.store.stats().await.unwrap();
        assert_eq!(stats.get(DeliveryState::Pending), 4, "{}", s.name);
        let (due, oldest) = s.store.due_summary(s.clock.now_ms()).await.unwrap();
        assert_eq!((due, oldest), (4, Some(START)), "{}", s.name);
        assert_eq!(
            s.store.endpoint_pending(EP_A).await.unwrap(),
            2,
            "{}",
            s.name
        );

        // Unknown and malformed ids answer nothing, never an error.
        for id in ["evt_01HZZZZZZZZZZZZZZZZZZZZZZZ", "nonsense"] {
            assert!(s.store.event(id).await.unwrap().is_none(), "{}", s.name);
        }
        assert!(
            s.store.delivery("dlv_x").await.unwrap().is_none(),
            "{}",
            s.name
        );

        // Durable when acknowledged: the store opened again has the events, their payloads
        // and their pending deliveries.
        let s = s.reopen().await;
        let (_, payload) = s.store.event(&first).await.unwrap().expect("kept");
        assert_eq!(&payload[..], b"{\"n\":1}", "{}", s.name);
        for d in &deliveries {
            let read = s.store.delivery(&d.id).await.unwrap().expect("kept");
            assert_eq!(json(&read), json(d), "{}", s.name);
        }
        assert_eq!(
            s.store.stats().await.unwrap().get(DeliveryState::Pending),
            4,
            "{}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_answers_the_first_event_within_its_window_only() {
    on_both(|s| async move {
        let out = s
            .store
            .ingest_events(vec![event("acct", Some("k1"), START)])
            .await
            .unwrap();
        let (first, _) = created(&out[0]);
        // Within one batch, and in a later one: the first event's id, nothing stored.
        let again = s
            .store
            .ingest_events(vec![
                event("acct", Some("k1"), START),
                event("acct", Some("k2"), START),
                event("acct", Some("k2"), START),
            ])
            .await
            .unwrap();
        assert!(
            matches!(&again[0], IngestOutcome::Duplicate { event_id } if *event_id == first),
            "{}: {again:?}",
            s.name
        );
        let (k2, _) = created(&again[1]);
        assert!(
            matches!(&again[2], IngestOutcome::Duplicate { event_id } if *event_id == k2),
            "{}: a key taken earlier in the same batch: {again:?}",
            s.name
        );
        // Keys are per account.
        let other = s
            .store
            .ingest_events(vec![event("other", Some("k1"), START)])
            .await
            .unwrap();
        assert_ne!(created(&other[0]).0, first, "{}", s.name);
        assert_eq!(
            s.store.stats().await.unwrap().get(DeliveryState::Pending),
            6,
            "{}: duplicates queue nothing",
            s.name
        );

        // The key answers until its window ends, to the millisecond; then it makes a new event.
        s.clock.set(START + IDEMPOTENCY_WINDOW_MS - 1);
        let again = s
            .store
            .ingest_events(vec![event("acct", Some("k1"), s.clock.now_ms())])
            .await
            .unwrap();
        assert!(
            matches!(&again[0], IngestOutcome::Duplicate { event_id } if *event_id == first),
            "{}: a millisecond before the window ends: {again:?}",
            s.name
        );
        s.clock.set(START + IDEMPOTENCY_WINDOW_MS);
        let later = s
            .store
            .ingest_events(vec![event("acct", Some("k1"), s.clock.now_ms())])
            .await
            .unwrap();
        assert_ne!(
            created(&later[0]).0,
            first,
            "{}: once the window ended",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debounced_key_skips_the_events_its_window_holds() {
    on_both(|s| async move {
        let debounced = |at| NewEvent {
            debounce_key: Some("cart-1".into()),
            debounce: Some(DebounceRule {
                key: "cart-1".into(),
                window_ms: 60_000,
                trailing: false,
            }),
            ..event("acct", None, at)
        };
        let out = s.store.ingest_events(vec![debounced(START)]).await.unwrap();
        let (_, first) = created(&out[0]);
        assert!(
            first.iter().all(|d| d.state == DeliveryState::Pending),
            "{}: the first event of a window goes",
            s.name
        );
        s.clock.advance(Duration::from_secs(1));
        let out = s
            .store
            .ingest_events(vec![debounced(START + 1_000)])
            .await
            .unwrap();
        let (_, held) = created(&out[0]);
        assert!(
            held.iter().all(|d| d.state == DeliveryState::Skipped),
            "{}: within the window: {held:?}",
            s.name
        );
        s.clock.advance(Duration::from_secs(60));
        let out = s
            .store
            .ingest_events(vec![debounced(START + 61_000)])
            .await
            .unwrap();
        let (_, after) = created(&out[0]);
        assert!(
            after.iter().all(|d| d.state == DeliveryState::Pending),
            "{}: after the window: {after:?}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_created_changed_and_deleted_one_change_at_a_time() {
    on_both(|s| async move {
        let store = &s.store;
        let made = store
            .create_endpoint(endpoint(EP_A, "acct"), 2)
            .await
            .unwrap()
            .expect("within the limit");
        assert_eq!(made.url, "https://example.com/hook", "{}", s.name);
        assert_eq!(
            store
                .endpoint(EP_A)
                .map(|e| serde_json::to_value(&*e).unwrap()),
            Some(serde_json::to_value(&*made).unwrap()),
            "{}",
            s.name
        );
        store
            .create_endpoint(endpoint(EP_B, "acct"), 2)
            .await
            .unwrap()
            .expect("within the limit");
        let third = "ep_01HZZZZZZZZZZZZZZZZZZZZZZC";
        assert!(
            store
                .create_endpoint(endpoint(third, "acct"), 2)
                .await
                .unwrap()
                .is_none(),
            "{}: past the account's limit",
            s.name
        );
        assert!(store.endpoint(third).is_none(), "{}", s.name);
        let ids: Vec<_> = store
            .account_endpoints("acct")
            .iter()
            .map(|e| e.id.clone())
            .collect();
        assert_eq!(ids, [EP_A, EP_B], "{}", s.name);
        assert!(
            store.account_ids().contains(&"acct".to_string()),
            "{}",
            s.name
        );

        // A change applies against the stored endpoint; `false` writes nothing; an error of the
        // change's own is answered and changes nothing.
        let (changed, wrote) = store
            .change_endpoint(EP_A, |ep| {
                ep.description = "orders".into();
                Ok::<_, StoreError>(true)
            })
            .await
            .unwrap()
            .expect("exists");
        assert!(wrote, "{}", s.name);
        assert_eq!(changed.description, "orders", "{}", s.name);
        let (_, wrote) = store
            .change_endpoint(EP_A, |_| Ok::<_, StoreError>(false))
            .await
            .unwrap()
            .expect("exists");
        assert!(!wrote, "{}", s.name);
        let refused = store
            .change_endpoint(EP_A, |ep| {
                ep.description = "lost".into();
                Err(StoreError::Closed)
            })
            .await;
        assert!(matches!(refused, Err(StoreError::Closed)), "{}", s.name);
        assert_eq!(
            store.endpoint(EP_A).unwrap().description,
            "orders",
            "{}",
            s.name
        );
        assert!(
            store
                .change_endpoint("ep_01HZZZZZZZZZZZZZZZZZZZZZZD", |_| Ok::<_, StoreError>(
                    true
                ))
                .await
                .unwrap()
                .is_none(),
            "{}",
            s.name
        );

        // Ten changes at once: each sees the one before.
        let mut changes = tokio::task::JoinSet::new();
        for _ in 0..10 {
            let store = store.clone();
            changes.spawn(async move {
                store
                    .change_endpoint(EP_B, |ep| {
                        ep.description.push('x');
                        Ok::<_, StoreError>(true)
                    })
                    .await
                    .unwrap()
            });
        }
        while changes.join_next().await.is_some() {}
        assert_eq!(
            store.endpoint(EP_B).unwrap().description,
            "x".repeat(10),
            "{}",
            s.name
        );

        // The size bound holds on both, with the same answer.
        let mut big = endpoint(EP_A, "acct");
        big.description = "d".repeat(MAX_ENDPOINT_SIZE);
        assert!(
            matches!(
                store.put_endpoint(big).await,
                Err(StoreError::TooLarge {
                    max: MAX_ENDPOINT_SIZE,
                    ..
                })
            ),
            "{}",
            s.name
        );
        let mut paused = (*store.endpoint(EP_A).unwrap()).clone();
        paused.state = EndpointState::Paused;
        store.put_endpoint(paused).await.unwrap();
        assert_eq!(
            store.endpoint(EP_A).unwrap().state,
            EndpointState::Paused,
            "{}",
            s.name
        );

        assert!(store.delete_endpoint(EP_A).await.unwrap(), "{}", s.name);
        assert!(!store.delete_endpoint(EP_A).await.unwrap(), "{}", s.name);
        assert!(store.endpoint(EP_A).is_none(), "{}", s.name);
        store.fresh_directory().await.unwrap();
        assert_eq!(store.account_endpoints("acct").len(), 1, "{}", s.name);

        // Every change was durable: the store opened again has each of them.
        let s = s.reopen().await;
        let back = s.store.endpoint(EP_B).expect("kept");
        assert_eq!(back.description, "x".repeat(10), "{}", s.name);
        assert!(s.store.endpoint(EP_A).is_none(), "{}", s.name);
        assert_eq!(s.store.account_endpoints("acct").len(), 1, "{}", s.name);
    })
    .await;
}

/// A filter stored under looser limits than this herald's (a later release may tighten them)
/// still loads when the store opens, and matches as it did: the limits apply when a filter is
/// set, not when a stored one is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_filter_over_todays_limits_loads_and_matches() {
    use herald::filter::{Filter, Subject as FilterSubject, MAX_DEPTH, MAX_OPERATORS};
    on_both(|s| async move {
        let mut deep = serde_json::json!({"$gte": 10});
        for _ in 0..MAX_DEPTH {
            deep = serde_json::json!({ "k": deep });
        }
        let mut many: serde_json::Map<String, serde_json::Value> = (0..=MAX_OPERATORS)
            .map(|i| (format!("f{i}"), serde_json::json!({"$exists": false})))
            .collect();
        many.insert("deep".into(), deep);
        let stored = serde_json::json!({ "payload": many });
        assert!(Filter::parse(&stored).is_err(), "over today's limits");
        let mut ep = endpoint(EP_A, "acct");
        ep.filter = Some(Filter::load(&stored).expect("its grammar holds"));
        s.store.create_endpoint(ep, 10).await.unwrap();

        let s = s.reopen().await;
        let back = s.store.endpoint(EP_A).expect("kept");
        let filter = back.filter.as_ref().expect("the filter is kept");
        assert_eq!(filter.source(), &stored, "{}", s.name);
        let passes =
            serde_json::json!({"deep": {"k": {"k": {"k": {"k": {"k": {"k": {"k": {"k": 10}}}}}}}}});
        assert!(
            filter.matches(&FilterSubject::new("order.created", passes)),
            "{}",
            s.name
        );
        assert!(
            !filter.matches(&FilterSubject::new(
                "order.created",
                serde_json::json!({"f0": 1})
            )),
            "{}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_kept_apart_and_removed_with_its_endpoint() {
    on_both(|s| async move {
        let store = &s.store;
        store
            .create_endpoint(endpoint(EP_A, "acct"), 10)
            .await
            .unwrap();
        let described = ClientCertificate {
            subject: "CN=client".into(),
            not_after: START + 86_400_000,
            sha256: "ab".repeat(32),
        };
        // Larger than one row of the embedded store: kept in pieces there.
        let chain = format!("-----BEGIN CERTIFICATE-----\n{}\n", "A".repeat(20_000));
        let key = "-----BEGIN PRIVATE KEY-----\nKEY\n";
        let ep = store
            .set_client_certificate(EP_A, Some((&chain, key, described.clone())), START)
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(
            ep.client_certificate.as_ref(),
            Some(&described),
            "{}",
            s.name
        );
        assert_eq!(
            store.client_certificate_pem(EP_A).await.unwrap(),
            Some((chain.clone(), key.to_string())),
            "{}",
            s.name
        );
        store
            .set_client_certificate(EP_A, None, START + 1)
            .await
            .unwrap();
        assert_eq!(
            store.client_certificate_pem(EP_A).await.unwrap(),
            None,
            "{}",
            s.name
        );
        assert!(
            store.endpoint(EP_A).unwrap().client_certificate.is_none(),
            "{}",
            s.name
        );
        store
            .set_client_certificate(EP_A, Some((&chain, key, described)), START + 2)
            .await
            .unwrap();
        store.delete_endpoint(EP_A).await.unwrap();
        assert_eq!(
            store.client_certificate_pem(EP_A).await.unwrap(),
            None,
            "{}",
            s.name
        );
        assert!(
            store
                .set_client_certificate("ep_01HZZZZZZZZZZZZZZZZZZZZZZD", None, START)
                .await
                .unwrap()
                .is_none(),
            "{}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_secrets_and_quotas_are_kept_per_account() {
    on_both(|s| async move {
        let store = &s.store;
        assert_eq!(store.account_plan("acct"), None, "{}", s.name);
        store
            .set_account_plan("acct", Some("pro".into()))
            .await
            .unwrap();
        assert_eq!(
            store.account_plan("acct").as_deref(),
            Some("pro"),
            "{}",
            s.name
        );
        assert!(
            store.account_ids().contains(&"acct".to_string()),
            "{}",
            s.name
        );
        store.set_account_plan("acct", None).await.unwrap();
        assert_eq!(store.account_plan("acct"), None, "{}", s.name);

        store
            .set_account_secret("acct", "API_KEY", "s3cret")
            .await
            .unwrap();
        store
            .set_account_secret("acct", "API_KEY", "s3cret-2")
            .await
            .unwrap();
        assert_eq!(
            store
                .account_secret("acct", "API_KEY")
                .await
                .unwrap()
                .as_deref(),
            Some("s3cret-2"),
            "{}",
            s.name
        );
        assert_eq!(
            store.account_secret("other", "API_KEY").await.unwrap(),
            None,
            "{}",
            s.name
        );

        // Exactly `per_minute` takes succeed, even when asked all at once.
        let w = windows(s.clock.now_ms());
        let limits = Limits {
            per_minute: Some(5),
            per_day: Some(100),
        };
        let mut takes = tokio::task::JoinSet::new();
        for _ in 0..12 {
            let store = store.clone();
            takes.spawn(async move { store.quota_take("acct", w, limits).await.unwrap() });
        }
        let mut granted = 0;
        while let Some(t) = takes.join_next().await {
            granted += usize::from(t.unwrap());
        }
        assert_eq!(granted, 5, "{}", s.name);
        assert_eq!(
            store.quota_usage("acct", w).await.unwrap(),
            (5, 5),
            "{}",
            s.name
        );
        assert_eq!(
            store.quota_usage("other", w).await.unwrap(),
            (0, 0),
            "{}",
            s.name
        );
        // The next minute has room again; the day counts on.
        let next = windows(s.clock.now_ms() + 60_000);
        assert!(
            store.quota_take("acct", next, limits).await.unwrap(),
            "{}",
            s.name
        );
        assert_eq!(
            store.quota_usage("acct", next).await.unwrap(),
            (1, 6),
            "{}",
            s.name
        );
        // A restore sets the usage a backup read; takes count on from it.
        store.set_quota_usage("third", next, (4, 40)).await.unwrap();
        assert_eq!(
            store.quota_usage("third", next).await.unwrap(),
            (4, 40),
            "{}",
            s.name
        );
        assert!(
            store.quota_take("third", next, limits).await.unwrap(),
            "{}",
            s.name
        );
        assert!(
            !store.quota_take("third", next, limits).await.unwrap(),
            "{}: the minute is full at 5",
            s.name
        );
        // A window that has passed counts nothing.
        let later = windows(s.clock.now_ms() + 2 * 86_400_000);
        assert_eq!(
            store.quota_usage("third", later).await.unwrap(),
            (0, 0),
            "{}",
            s.name
        );
    })
    .await;
}

/// `queue_changed` resolves once an ingest made a delivery due (on one box, by the due index's
/// permit; in a cluster, by the notice its listener hears, which herald starts with the node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_says_it_changed_when_an_ingest_made_work() {
    on_both(|s| async move {
        let store = &s.store;
        let (_stop, shutdown) = herald::shutdown::channel();
        if let Backend::Postgres(pg) = store {
            tokio::spawn(herald::store::postgres::wake::listen(pg.clone(), shutdown));
        }
        // Until the listener listens, a notice goes unheard: ingest again, up to a deadline.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (woken, stored) = tokio::join!(
                tokio::time::timeout(Duration::from_millis(500), store.queue_changed()),
                store.ingest_events(vec![event("acct", None, START)]),
            );
            stored.unwrap();
            if woken.is_ok() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{}: no wake within 10 s",
                s.name
            );
        }
    })
    .await;
}

/// The archive's operations by name: `export_events` pages down from the newest with a
/// cursor, `is_empty` tells an empty store, `import_events` and `finish_import` write the pages
/// into another store of the same kind, which then exports the same events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_operations_page_import_and_finish() {
    on_both(|s| async move {
        let store = &s.store;
        assert!(store.is_empty().await.unwrap(), "{}: a new store", s.name);
        for i in 0..3 {
            store
                .ingest_events(vec![event("acct", None, START + i)])
                .await
                .unwrap();
        }
        assert!(!store.is_empty().await.unwrap(), "{}", s.name);
        let (first, next) = store.export_events(None, 2).await.unwrap();
        assert_eq!(first.len(), 2, "{}", s.name);
        let next = next.unwrap_or_else(|| panic!("{}: a cursor after a full page", s.name));
        let (second, end) = store.export_events(Some(next), 2).await.unwrap();
        assert_eq!((second.len(), end), (1, None), "{}", s.name);
        let ids = |page: &[herald::store::EventHistory]| -> Vec<String> {
            page.iter().map(|h| h.meta.id.clone()).collect()
        };
        let mut all = first.clone();
        all.extend(second.iter().cloned());
        let mut sorted = ids(&all);
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(ids(&all), sorted, "{}: newest first", s.name);

        let (target, _dir) = subject(s.name == "sled").await;
        assert!(target.store.is_empty().await.unwrap(), "{}", s.name);
        target.store.import_events(first, START).await.unwrap();
        target.store.import_events(second, START).await.unwrap();
        target.store.finish_import().await.unwrap();
        let (copied, none) = target.store.export_events(None, 10).await.unwrap();
        assert_eq!(none, None, "{}", s.name);
        assert_eq!(ids(&copied), ids(&all), "{}", s.name);
        for (a, b) in copied.iter().zip(&all) {
            assert_eq!(a.payload, b.payload, "{}", s.name);
            assert_eq!(a.deliveries.len(), b.deliveries.len(), "{}", s.name);
        }
    })
    .await;
}

/// A copy's target records how far the copy got, resumes from there, refuses another source
/// and a store it did not fill; the embedded store is no copy's target at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_begun_marked_resumed_and_finished_on_a_clusters_store_only() {
    on_both(|s| async move {
        let store = &s.store;
        let begun = store.begin_copy("/srv/one", START).await;
        if s.name == "sled" {
            assert!(matches!(begun, Err(StoreError::Format(_))), "{begun:?}");
            let marked = store.keep_copy_mark("/srv/one", None, 0, false).await;
            assert!(matches!(marked, Err(StoreError::Format(_))), "{marked:?}");
            return;
        }
        assert_eq!(begun.unwrap(), CopyStart::Fresh);
        let again = store.begin_copy("/srv/one", START).await.unwrap();
        assert_eq!(
            again,
            CopyStart::Resumed {
                cursor: None,
                copied: 0
            },
            "begun, nothing marked: it starts over"
        );
        store
            .keep_copy_mark("/srv/one", Some("evt_01HZZZZZZZZZZZZZZZZZZZZZZZ"), 7, false)
            .await
            .unwrap();
        assert_eq!(
            store.begin_copy("/srv/one", START).await.unwrap(),
            CopyStart::Resumed {
                cursor: Some("evt_01HZZZZZZZZZZZZZZZZZZZZZZZ".into()),
                copied: 7
            }
        );
        let other = store.begin_copy("/srv/two", START).await;
        assert!(matches!(other, Err(StoreError::Format(_))), "{other:?}");
        store
            .keep_copy_mark("/srv/one", None, 9, true)
            .await
            .unwrap();
        assert_eq!(
            store.begin_copy("/srv/one", START).await.unwrap(),
            CopyStart::Finished
        );

        // A store that holds what no copy wrote is refused, and nothing is recorded.
        let (used, _dir) = subject(false).await;
        used.store
            .set_account_plan("acct", Some("pro".into()))
            .await
            .unwrap();
        let refused = used.store.begin_copy("/srv/one", START).await;
        assert!(matches!(refused, Err(StoreError::Format(_))), "{refused:?}");
        let still = used.store.begin_copy("/srv/one", START).await;
        assert!(matches!(still, Err(StoreError::Format(_))), "{still:?}");
    })
    .await;
}

/// Alert addresses sit beside the plan and each is changed alone; an endpoint's alert mark is
/// claimed by exactly one of many callers at once (as two nodes deciding one mail would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_addresses_stay_apart_from_the_plan_and_an_alert_is_claimed_once() {
    on_both(|s| async move {
        let store = &s.store;
        let hour = 3_600_000;
        assert!(
            store.alert_emails("acct").await.unwrap().is_empty(),
            "{}",
            s.name
        );
        store
            .set_account_plan("acct", Some("pro".into()))
            .await
            .unwrap();
        store
            .set_alert_emails("acct", vec!["a@acct.test".into(), "b@acct.test".into()])
            .await
            .unwrap();
        store.set_account_plan("acct", None).await.unwrap();
        assert_eq!(
            store.alert_emails("acct").await.unwrap(),
            ["a@acct.test", "b@acct.test"],
            "{}: removing the plan keeps the addresses",
            s.name
        );
        store
            .set_account_plan("acct", Some("pro".into()))
            .await
            .unwrap();
        store.set_alert_emails("acct", vec![]).await.unwrap();
        assert_eq!(
            store.account_plan("acct").as_deref(),
            Some("pro"),
            "{}: clearing the addresses keeps the plan",
            s.name
        );
        assert!(
            store.all_alert_emails().await.unwrap().is_empty(),
            "{}",
            s.name
        );
        store
            .set_alert_emails("b", vec!["x@b.test".into()])
            .await
            .unwrap();
        store
            .set_alert_emails("a", vec!["y@a.test".into()])
            .await
            .unwrap();
        assert_eq!(
            store.all_alert_emails().await.unwrap(),
            vec![
                ("a".to_string(), vec!["y@a.test".to_string()]),
                ("b".to_string(), vec!["x@b.test".to_string()]),
            ],
            "{}",
            s.name
        );

        // Twelve claims of one failing mail at once: one wins.
        store
            .create_endpoint(endpoint(EP_A, "acct"), 10)
            .await
            .unwrap();
        let mut claims = tokio::task::JoinSet::new();
        for _ in 0..12 {
            let store = store.clone();
            claims.spawn(
                async move { claim_of(&store, EP_A, AlertKind::Failing, START, 1_000).await },
            );
        }
        let mut won = 0;
        while let Some(c) = claims.join_next().await {
            won += usize::from(c.unwrap());
        }
        assert_eq!(won, 1, "{}", s.name);
        let claim = |kind, at| {
            let store = store.clone();
            async move { claim_of(&store, EP_A, kind, at, 1_000).await }
        };
        assert!(claim(AlertKind::Recovered, START + 1).await, "{}", s.name);
        assert!(!claim(AlertKind::Recovered, START + 2).await, "{}", s.name);
        assert!(
            !claim(AlertKind::Failing, START + hour - 1).await,
            "{}",
            s.name
        );
        assert!(claim(AlertKind::Failing, START + hour).await, "{}", s.name);
        // Another endpoint's mark is its own; a deleted endpoint's mark goes with it.
        store
            .create_endpoint(endpoint(EP_B, "acct"), 10)
            .await
            .unwrap();
        assert!(claim_b(store, START).await, "{}", s.name);
        assert!(!claim_b(store, START + 1).await, "{}", s.name);
        assert!(store.delete_endpoint(EP_B).await.unwrap());
        // A claim for an endpoint that is gone (one racing its deletion or a purge) writes no
        // mark: created again, the endpoint starts with none.
        assert_eq!(
            claim_for(store, EP_B, AlertKind::Failing, START + 2, 1_000).await,
            Claimed::Gone,
            "{}",
            s.name
        );
        store
            .create_endpoint(endpoint(EP_B, "acct"), 10)
            .await
            .unwrap();
        assert!(claim_b(store, START + 3).await, "{}", s.name);
    })
    .await;
}

async fn claim_b(store: &Backend, at: i64) -> bool {
    claim_of(store, EP_B, AlertKind::Failing, at, 1_000).await
}

/// A claim of `kind` for endpoint `ep` of account "acct" at `at`, with an hour's interval and
/// at most `max` mails an hour.
async fn claim_for(store: &Backend, ep: &str, kind: AlertKind, at: i64, max: u32) -> Claimed {
    store
        .claim_alert(AlertClaim {
            endpoint_id: ep,
            account_id: "acct",
            kind,
            now: at,
            min_interval_ms: 3_600_000,
            max_per_hour: max,
        })
        .await
        .unwrap()
}

async fn claim_of(store: &Backend, ep: &str, kind: AlertKind, at: i64, max: u32) -> bool {
    matches!(
        claim_for(store, ep, kind, at, max).await,
        Claimed::Send { .. }
    )
}

/// An account's mails are capped per UTC clock hour across its endpoints and across callers
/// at once (as nodes of a cluster); a mark given back lets the next mail through but the hour
/// keeps counting it; a give-back never brings back a deleted endpoint's mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_mails_are_capped_per_account_per_hour_and_a_claim_can_be_given_back() {
    on_both(|s| async move {
        let store = &s.store;
        let hour = 3_600_000;
        // START is not on an hour: the window is the clock hour, not an hour from the first.
        let first_hour = START - START.rem_euclid(hour);
        let eps: Vec<String> = (0..8)
            .map(|i| format!("ep_01HZZZZZZZZZZZZZZZZZZZZZC{i}"))
            .collect();
        for ep in &eps {
            store
                .create_endpoint(endpoint(ep, "acct"), 20)
                .await
                .unwrap();
        }
        // Eight disabled mails at once, for eight endpoints, at most 3 an hour: 3 go.
        let mut claims = tokio::task::JoinSet::new();
        for ep in eps.clone() {
            let store = store.clone();
            claims
                .spawn(async move { claim_for(&store, &ep, AlertKind::Disabled, START, 3).await });
        }
        let mut verdicts = Vec::new();
        while let Some(c) = claims.join_next().await {
            verdicts.push(c.unwrap());
        }
        let sent = verdicts
            .iter()
            .filter(|v| matches!(v, Claimed::Send { .. }))
            .count();
        let over = verdicts.iter().filter(|v| **v == Claimed::OverCap).count();
        assert_eq!((sent, over), (3, 5), "{}: {verdicts:?}", s.name);
        // Another account has its own hour.
        store
            .create_endpoint(endpoint(EP_A, "other"), 20)
            .await
            .unwrap();
        let other = store
            .claim_alert(AlertClaim {
                endpoint_id: EP_A,
                account_id: "other",
                kind: AlertKind::Failing,
                now: START,
                min_interval_ms: hour,
                max_per_hour: 3,
            })
            .await
            .unwrap();
        assert!(
            matches!(other, Claimed::Send { .. }),
            "{}: {other:?}",
            s.name
        );
        // The next clock hour has room again.
        assert!(
            claim_of(store, &eps[0], AlertKind::Disabled, first_hour + hour, 3).await,
            "{}",
            s.name
        );

        // A failing mail given back: the next failing mail within min_interval goes, and the
        // hour still counts both.
        let Claimed::Send { before, after } =
            claim_for(store, &eps[1], AlertKind::Failing, first_hour + hour + 1, 3).await
        else {
            panic!("{}: the failing mail is claimed", s.name);
        };
        assert_eq!(before.failing_at, None, "{}", s.name);
        assert_eq!(after.failing_at, Some(first_hour + hour + 1), "{}", s.name);
        assert!(
            !claim_of(store, &eps[1], AlertKind::Failing, first_hour + hour + 2, 3).await,
            "{}: within min_interval",
            s.name
        );
        assert!(
            store.give_back_alert(&eps[1], after, before).await.unwrap(),
            "{}",
            s.name
        );
        assert!(
            !store.give_back_alert(&eps[1], after, before).await.unwrap(),
            "{}: given back once",
            s.name
        );
        assert!(
            claim_of(store, &eps[1], AlertKind::Failing, first_hour + hour + 3, 3).await,
            "{}: given back, the next failing mail goes",
            s.name
        );
        assert_eq!(
            claim_for(
                store,
                &eps[2],
                AlertKind::Disabled,
                first_hour + hour + 4,
                3
            )
            .await,
            Claimed::OverCap,
            "{}: the given-back mail still counts",
            s.name
        );
        // A give-back after the endpoint is deleted brings no mark back.
        let Claimed::Send { before, after } = claim_for(
            store,
            &eps[3],
            AlertKind::Disabled,
            first_hour + 2 * hour,
            3,
        )
        .await
        else {
            panic!("{}: the disabled mail is claimed", s.name);
        };
        assert!(store.delete_endpoint(&eps[3]).await.unwrap());
        assert!(!store.give_back_alert(&eps[3], after, before).await.unwrap());
        assert_eq!(
            claim_for(
                store,
                &eps[3],
                AlertKind::Disabled,
                first_hour + 2 * hour,
                3
            )
            .await,
            Claimed::Gone,
            "{}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_changes_one_change_at_a_time_and_open_ones_are_listed() {
    on_both(|s| async move {
        let store = &s.store;
        let day = 86_400_000;
        assert_eq!(
            store.breaker(EP_A).await.unwrap(),
            Breaker::default(),
            "{}",
            s.name
        );
        assert!(
            store.open_breakers().await.unwrap().is_empty(),
            "{}",
            s.name
        );
        let mut changes = Vec::new();
        for i in 0..10 {
            let at = START + i;
            changes.push(
                store
                    .change_breaker(EP_A, at, move |br| br.record(false, false, at, day))
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(changes[..9], [None; 9], "{}", s.name);
        assert_eq!(changes[9], Some(Change::Opened), "{}", s.name);
        let open = store.breaker(EP_A).await.unwrap();
        assert_eq!(open.phase, Phase::Open, "{}", s.name);
        assert_eq!(open.consecutive_failures, 10, "{}", s.name);
        assert_eq!(
            store.open_breakers().await.unwrap(),
            vec![(EP_A.to_string(), open)],
            "{}",
            s.name
        );
        let at = START + 60_000;
        let recovered = store
            .change_breaker(EP_A, at, move |br| br.record(true, true, at, day))
            .await
            .unwrap();
        assert_eq!(recovered, Some(Change::Recovered), "{}", s.name);
        assert_eq!(
            store.breaker(EP_A).await.unwrap(),
            Breaker::default(),
            "{}",
            s.name
        );
        assert!(
            store.open_breakers().await.unwrap().is_empty(),
            "{}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_portal_session_opens_until_it_expires_or_is_revoked() {
    on_both(|s| async move {
        let store = &s.store;
        let session = session("ps_1", true, START + 3_600_000);
        store
            .create_portal_session(&session, token_hash("hps_token"))
            .await
            .unwrap();
        let found = store
            .portal_session("hps_token", START + 1)
            .await
            .unwrap()
            .expect("open");
        assert_eq!(
            (
                found.id.as_str(),
                found.account_id.as_str(),
                found.read_only
            ),
            ("ps_1", "acct", true),
            "{}",
            s.name
        );
        assert!(
            store
                .portal_session("hps_token", START + 3_600_000)
                .await
                .unwrap()
                .is_none(),
            "{}: expired",
            s.name
        );
        assert!(
            store
                .portal_session("hps_other", START)
                .await
                .unwrap()
                .is_none(),
            "{}",
            s.name
        );
        assert!(
            store.revoke_portal_session("ps_1").await.unwrap(),
            "{}",
            s.name
        );
        assert!(
            !store.revoke_portal_session("ps_1").await.unwrap(),
            "{}",
            s.name
        );
        assert!(
            store
                .portal_session("hps_token", START + 1)
                .await
                .unwrap()
                .is_none(),
            "{}: revoked",
            s.name
        );
    })
    .await;
}

/// The contract's change of a delivery is a manual retry's: pending again, due at a time, or
/// left as it is. Other changes of state come with an attempt (the engine's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_changes_through_its_change_or_says_why_not() {
    on_both(|s| async move {
        let store = &s.store;
        let (_, deliveries) = ingest_one(&s).await;
        let id = deliveries[0].id.clone();

        let left = store
            .change_delivery(&id, |_| None::<(Delivery, ())>)
            .await
            .unwrap();
        assert_eq!(left, Changed::No, "{}", s.name);
        let at = START + 3_600_000;
        let moved = store
            .change_delivery(&id, move |d| Some((retried(d, at), 7)))
            .await
            .unwrap();
        assert_eq!(moved, Changed::Yes(7), "{}", s.name);
        let read = store.delivery(&id).await.unwrap().expect("stored");
        assert_eq!(
            (read.state, read.next_attempt_at, read.manual, read.queued),
            (DeliveryState::Pending, Some(at), true, true),
            "{}",
            s.name
        );
        assert_eq!(
            store.stats().await.unwrap().get(DeliveryState::Pending),
            2,
            "{}: still two pending",
            s.name
        );
        let missing = store
            .change_delivery("dlv_01HZZZZZZZZZZZZZZZZZZZZZZZ", |_| None::<(Delivery, ())>)
            .await
            .unwrap();
        assert_eq!(missing, Changed::NotFound, "{}", s.name);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_lists_newest_first_through_filters_and_cursors() {
    on_both(|s| async move {
        let store = &s.store;
        let mut ids = Vec::new();
        for i in 0..30 {
            s.clock.advance(Duration::from_secs(1));
            let mut e = event(if i % 3 == 0 { "a" } else { "b" }, None, s.clock.now_ms());
            e.event_type = if i % 2 == 0 { "even" } else { "odd" }.into();
            let out = store.ingest_events(vec![e]).await.unwrap();
            ids.extend(created(&out[0]).1.into_iter().map(|d| d.id));
        }
        ids.reverse();

        // Every page, every delivery once, newest first.
        let mut listed = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = store
                .list_deliveries(DeliveryFilter::default(), 7, cursor)
                .await
                .unwrap();
            assert!(page.len() <= 7, "{}", s.name);
            listed.extend(page.into_iter().map(|d| d.id));
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        assert_eq!(listed, ids, "{}", s.name);

        let count = |filter: DeliveryFilter| async move {
            let (page, next) = store
                .list_deliveries(filter.clone(), 100, None)
                .await
                .unwrap();
            assert!(next.is_none());
            page
        };
        let of_a = count(DeliveryFilter {
            account_id: Some("a".into()),
            ..Default::default()
        })
        .await;
        assert_eq!(of_a.len(), 20, "{}", s.name);
        assert!(of_a.iter().all(|d| d.account_id == "a"), "{}", s.name);
        let to_b = count(DeliveryFilter {
            endpoint_id: Some(EP_B.into()),
            event_type: Some("odd".into()),
            ..Default::default()
        })
        .await;
        assert_eq!(to_b.len(), 15, "{}", s.name);
        assert!(
            to_b.iter()
                .all(|d| d.endpoint_id.as_deref() == Some(EP_B) && d.event_type == "odd"),
            "{}",
            s.name
        );
        let since = count(DeliveryFilter {
            since: Some(START + 21_000),
            ..Default::default()
        })
        .await;
        assert_eq!(
            since.len(),
            20,
            "{}: ten events from the 21st second on",
            s.name
        );
        let failed = count(DeliveryFilter {
            state: Some(DeliveryState::Failed),
            ..Default::default()
        })
        .await;
        assert!(failed.is_empty(), "{}", s.name);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_endpoints_waiting_deliveries_are_made_due_at_once() {
    on_both(|s| async move {
        let store = &s.store;
        store
            .create_endpoint(endpoint(EP_A, "acct"), 10)
            .await
            .unwrap();
        let out = store
            .ingest_events(vec![event("acct", None, START), event("acct", None, START)])
            .await
            .unwrap();
        let first = created(&out[0]).1[0].id.clone();
        assert_eq!(store.endpoint_pending(EP_A).await.unwrap(), 2, "{}", s.name);
        // One waits for a later attempt (a manual change puts it an hour out).
        store
            .change_delivery(&first, |d| Some((retried(d, START + 3_600_000), ())))
            .await
            .unwrap();
        store.delete_endpoint(EP_A).await.unwrap();
        let moved = store.expedite_endpoint(EP_A, START + 5).await.unwrap();
        assert!(moved >= 1, "{}: the later one is due now ({moved})", s.name);
        let d = store.delivery(&first).await.unwrap().expect("stored");
        assert!(
            d.next_attempt_at.is_some_and(|at| at <= START + 5),
            "{}: {d:?}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_reports_its_health_size_and_nodes() {
    on_both(|s| async move {
        let store = &s.store;
        store
            .ingest_events(vec![event("acct", None, START)])
            .await
            .unwrap();
        assert!(store.healthy().await, "{}", s.name);
        assert!(store.size_on_disk().await > 0, "{}", s.name);
        let nodes = store.nodes().await.unwrap();
        match s.name {
            "sled" => assert!(nodes.is_none()),
            _ => {
                let (me, all) = nodes.expect("a cluster has nodes");
                assert!(all.iter().any(|n| n.id == me), "{me} in {all:?}");
            }
        }
    })
    .await;
}

/// Events come in through one operation: the store calls the fan-out (once, when the endpoints
/// do not change meanwhile) and stores what it made; the fan-out's own error comes back as it
/// is, with nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_calls_the_fan_out_and_returns_its_error_unchanged() {
    #[derive(Debug, PartialEq)]
    enum Refused {
        No,
        Store,
    }
    impl From<StoreError> for Refused {
        fn from(_: StoreError) -> Self {
            Refused::Store
        }
    }
    on_both(|s| async move {
        let store = &s.store;
        let mut calls = 0;
        let out = store
            .ingest(|| {
                calls += 1;
                Ok::<_, Refused>(vec![event("acct", None, START)])
            })
            .await
            .unwrap();
        created(&out[0]);
        assert_eq!(calls, 1, "{}", s.name);
        let pending = store.stats().await.unwrap().get(DeliveryState::Pending);
        let refused = store
            .ingest(|| Err::<Vec<NewEvent>, _>(Refused::No))
            .await
            .unwrap_err();
        assert_eq!(refused, Refused::No, "{}", s.name);
        assert_eq!(
            store.stats().await.unwrap().get(DeliveryState::Pending),
            pending,
            "{}: nothing stored",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_is_recorded_with_what_follows_it_in_one_write() {
    on_both(|s| async move {
        let store = &s.store;
        let (_, deliveries) = ingest_one(&s).await;
        let was = deliveries[0].clone();
        assert!(!store.is_held(&was.id), "{}", s.name);
        let taken = s.take(&was.id).await;
        assert!(store.is_held(&was.id), "{}: held while attempted", s.name);
        assert_eq!(
            store
                .change_delivery(&was.id, |_| None::<(Delivery, ())>)
                .await
                .unwrap(),
            Changed::Busy,
            "{}: a change waits for the attempt",
            s.name
        );

        // A failed first attempt, retried in a minute.
        let at = s.clock.now_ms();
        let (attempt, now) = failed_first(&was, at);
        store
            .record_attempt(&was, &now, &attempt, taken.fence)
            .await
            .unwrap();
        s.release(taken).await;
        assert!(!store.is_held(&was.id), "{}", s.name);
        let read = store.delivery(&was.id).await.unwrap().expect("stored");
        assert_eq!(
            (
                read.state,
                read.attempt_count,
                read.last_status,
                read.last_http_status
            ),
            (
                DeliveryState::Pending,
                1,
                Some(Status::HttpError),
                Some(500)
            ),
            "{}",
            s.name
        );
        assert_eq!(read.next_attempt_at, Some(at + 60_000), "{}", s.name);
        let attempts = store.attempts(&was.id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{}", s.name);
        assert_eq!(
            (
                attempts[0].number,
                attempts[0].status,
                attempts[0].http_status
            ),
            (1, Status::HttpError, Some(500)),
            "{}",
            s.name
        );
        assert_eq!(attempts[0].response_body, "oops", "{}", s.name);

        // The retry delivers it.
        s.clock.advance(Duration::from_secs(61));
        let taken = s.take(&was.id).await;
        let at = s.clock.now_ms();
        let second = Attempt {
            id: herald::ids::new_id(herald::ids::ATTEMPT, at),
            number: 2,
            at,
            status: Status::Delivered,
            http_status: Some(204),
            response_body: String::new(),
            ..attempt
        };
        let mut done = read.clone();
        done.state = DeliveryState::Delivered;
        done.attempt_count = 2;
        done.last_status = Some(Status::Delivered);
        done.last_http_status = Some(204);
        done.next_attempt_at = None;
        done.queued = false;
        store
            .record_attempt(&read, &done, &second, taken.fence)
            .await
            .unwrap();
        s.release(taken).await;
        let read = store.delivery(&was.id).await.unwrap().expect("stored");
        assert_eq!(
            (read.state, read.attempt_count, read.next_attempt_at),
            (DeliveryState::Delivered, 2, None),
            "{}",
            s.name
        );
        assert_eq!(
            store.attempts(&was.id).await.unwrap().len(),
            2,
            "{}",
            s.name
        );
        let stats = store.stats().await.unwrap();
        assert_eq!(
            (
                stats.get(DeliveryState::Pending),
                stats.get(DeliveryState::Delivered)
            ),
            (1, 1),
            "{}",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_bucket_gives_its_burst_then_one_token_per_interval() {
    on_both(|s| async move {
        let store = &s.store;
        let limit = RateLimit { per_second: 2.0 };
        let now = s.clock.now_ms();
        for i in 0..2 {
            assert_eq!(
                store.take_token(EP_A, limit, now).await.unwrap(),
                Ok(()),
                "{}: token {i} of the burst",
                s.name
            );
        }
        let next = store
            .take_token(EP_A, limit, now)
            .await
            .unwrap()
            .expect_err("the burst is spent");
        assert_eq!(next, now + 500, "{}: one token each half second", s.name);
        assert_eq!(
            store.take_token(EP_A, limit, next).await.unwrap(),
            Ok(()),
            "{}",
            s.name
        );
        assert!(
            store.take_token(EP_A, limit, next).await.unwrap().is_err(),
            "{}",
            s.name
        );
        // Each endpoint has its own bucket.
        assert_eq!(
            store.take_token(EP_B, limit, now).await.unwrap(),
            Ok(()),
            "{}",
            s.name
        );
    })
    .await;
}

fn minute(at: i64, delivered: u32, timeouts: u32, latency: u64) -> Minute {
    let mut m = Minute {
        at,
        latency_sum_ms: latency * u64::from(delivered + timeouts),
        latency_max_ms: latency,
        ..Minute::default()
    };
    m.counts[Status::Delivered as usize] = delivered;
    m.counts[Status::Timeout as usize] = timeouts;
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minutes_add_up_across_writers_survive_a_reopen_and_are_trimmed() {
    on_both(|s| async move {
        let t0 = START.div_euclid(Minute::MS) * Minute::MS;
        let add = |v: Vec<(String, Minute)>| {
            let store = s.store.clone();
            async move { store.add_minutes(v).await.expect("add minutes") }
        };
        for id in [EP_A, EP_B] {
            s.store.put_endpoint(endpoint(id, "acct")).await.unwrap();
        }
        // An endpoint that does not exist (deleted since its attempts were counted) gets none.
        let none = "ep_01HZZZZZZZZZZZZZZZZZZZZZZC";
        add(vec![(none.into(), minute(t0, 1, 0, 1))]).await;
        // Two nodes' flushes of the same minute add up; the max is the larger.
        add(vec![
            (EP_A.into(), minute(t0, 2, 1, 100)),
            (EP_A.into(), minute(t0 + Minute::MS, 1, 0, 10)),
            (EP_B.into(), minute(t0, 5, 0, 1)),
        ])
        .await;
        add(vec![(EP_A.into(), minute(t0, 1, 2, 300))]).await;
        let s = s.reopen().await;
        let got = s.store.endpoint_minutes(EP_A, t0).await.unwrap();
        let mut want = minute(t0, 3, 3, 0);
        want.latency_sum_ms = 300 + 900;
        want.latency_max_ms = 300;
        assert_eq!(
            got,
            vec![want, minute(t0 + Minute::MS, 1, 0, 10)],
            "{}",
            s.name
        );
        // From a later minute on, only that minute; another endpoint's are its own.
        let later = s.store.endpoint_minutes(EP_A, t0 + 1).await.unwrap();
        assert_eq!(later.len(), 1, "{}: {later:?}", s.name);
        assert_eq!(
            s.store.endpoint_minutes(EP_B, 0).await.unwrap(),
            vec![minute(t0, 5, 0, 1)]
        );
        assert!(s.store.endpoint_minutes(none, 0).await.unwrap().is_empty());
        // Trimming drops what starts before the cut, for every endpoint.
        let gone = s.store.trim_minutes(t0 + Minute::MS).await.unwrap();
        assert_eq!(gone, 2, "{}", s.name);
        assert_eq!(s.store.endpoint_minutes(EP_A, 0).await.unwrap().len(), 1);
        assert!(s.store.endpoint_minutes(EP_B, 0).await.unwrap().is_empty());
    })
    .await;
}

/// A flush of many endpoints' minutes over more than a day of hours adds up in one go, the same
/// (endpoint, minute) twice in one flush included; each endpoint reads its own across the hours,
/// and a trim keeps exactly what starts at or after the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_flush_of_minutes_adds_up_and_trims_by_time() {
    on_both(|s| async move {
        let t0 = START.div_euclid(Minute::MS) * Minute::MS;
        let ids: Vec<String> = (0..40)
            .map(|i| format!("ep_01HZZZZZZZZZZZZZZZZZZZZZ{i:02}"))
            .collect();
        for id in &ids {
            s.store.put_endpoint(endpoint(id, "acct")).await.unwrap();
        }
        let mut flush = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            // Every 37th minute over 26 hours, and the first minute twice.
            for k in 0..43i64 {
                flush.push((id.clone(), minute(t0 + k * 37 * Minute::MS, 1, 0, i as u64)));
            }
            flush.push((id.clone(), minute(t0, 2, 1, 1_000)));
        }
        s.store.add_minutes(flush).await.expect("add minutes");
        for (i, id) in ids.iter().enumerate() {
            let got = s.store.endpoint_minutes(id, 0).await.unwrap();
            assert_eq!(got.len(), 43, "{}: {id}", s.name);
            assert_eq!(got[0].at, t0);
            assert_eq!(
                got[0].delivered(),
                3,
                "{}: both of the flush's rows",
                s.name
            );
            assert_eq!(got[0].latency_max_ms, 1_000);
            assert_eq!(got[42].at, t0 + 42 * 37 * Minute::MS);
            assert_eq!(got[42].latency_max_ms, i as u64);
            assert!(got.windows(2).all(|w| w[0].at < w[1].at), "{}", s.name);
        }
        let cut = t0 + 20 * 37 * Minute::MS + 1;
        let gone = s.store.trim_minutes(cut).await.unwrap();
        assert_eq!(gone, 40 * 21, "{}", s.name);
        let left = s.store.endpoint_minutes(&ids[7], 0).await.unwrap();
        assert_eq!(left.len(), 22, "{}", s.name);
        assert!(left.iter().all(|m| m.at >= cut), "{}", s.name);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_removes_what_is_past_the_retention_and_keeps_what_is_pending() {
    on_both(|s| async move {
        let store = &s.store;
        let retained = Retained {
            retention_ms: 3_600_000,
            fold_after_ms: 60_000,
        };
        // An old event whose deliveries ended, and an old one still pending.
        let out = store
            .ingest_events(vec![
                event("acct", Some("old-key"), START),
                event("acct", None, START),
            ])
            .await
            .unwrap();
        let (ended, ended_deliveries) = created(&out[0]);
        let (pending, _) = created(&out[1]);
        for d in &ended_deliveries {
            let taken = s.take(&d.id).await;
            let at = s.clock.now_ms();
            let attempt = Attempt {
                id: herald::ids::new_id(herald::ids::ATTEMPT, at),
                number: 1,
                at,
                duration_ms: 3,
                status: Status::Delivered,
                http_status: Some(200),
                error: None,
                request_headers: Vec::new(),
                response_body: String::new(),
                url: None,
                manual: false,
            };
            let mut done = d.clone();
            done.state = DeliveryState::Delivered;
            done.attempt_count = 1;
            done.last_status = Some(Status::Delivered);
            done.last_http_status = Some(200);
            done.next_attempt_at = None;
            store
                .record_attempt(d, &done, &attempt, taken.fence)
                .await
                .unwrap();
            s.release(taken).await;
        }
        let session = session("ps_old", false, START + 60_000);
        store
            .create_portal_session(&session, token_hash("hps_old"))
            .await
            .unwrap();

        // Within the retention, a sweep keeps everything.
        s.clock.set(START + 60_000);
        let stop = AtomicBool::new(false);
        let swept = store.sweep(s.clock.now_ms(), retained, &stop).await;
        assert_eq!(swept.events, 0, "{}: {swept:?}", s.name);
        assert!(store.event(&ended).await.unwrap().is_some(), "{}", s.name);

        // Past it, the ended event goes with its deliveries; the pending one stays.
        let later = START + 2 * IDEMPOTENCY_WINDOW_MS;
        s.clock.set(later);
        let swept = store.sweep(later, retained, &stop).await;
        assert_eq!(swept.events, 1, "{}: {swept:?}", s.name);
        assert!(store.event(&ended).await.unwrap().is_none(), "{}", s.name);
        for d in &ended_deliveries {
            assert!(store.delivery(&d.id).await.unwrap().is_none(), "{}", s.name);
        }
        assert!(store.event(&pending).await.unwrap().is_some(), "{}", s.name);
        assert!(
            store
                .portal_session("hps_old", later)
                .await
                .unwrap()
                .is_none(),
            "{}",
            s.name
        );
    })
    .await;
}

/// Records a delivered first attempt of a taken delivery and gives it back.
/// A first attempt at `at` that failed with a 500, and the delivery after it: retried in a
/// minute.
fn failed_first(was: &Delivery, at: i64) -> (Attempt, Delivery) {
    let attempt = Attempt {
        id: herald::ids::new_id(herald::ids::ATTEMPT, at),
        number: 1,
        at,
        duration_ms: 12,
        status: Status::HttpError,
        http_status: Some(500),
        error: None,
        request_headers: vec![("webhook-id".into(), was.event_id.clone())],
        response_body: "oops".into(),
        url: Some("https://receiver.test/hook".into()),
        manual: false,
    };
    let mut now = was.clone();
    now.attempt_count = 1;
    now.last_status = Some(Status::HttpError);
    now.last_http_status = Some(500);
    now.next_attempt_at = Some(at + 60_000);
    now.queued = true;
    (attempt, now)
}

async fn deliver(s: &Subject, taken: Taken<Hold>) {
    let was = &taken.due.delivery;
    let at = s.clock.now_ms();
    let attempt = Attempt {
        id: herald::ids::new_id(herald::ids::ATTEMPT, at),
        number: was.attempt_count + 1,
        at,
        duration_ms: 2,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: Vec::new(),
        response_body: String::new(),
        url: None,
        manual: false,
    };
    let mut done = was.clone();
    done.state = DeliveryState::Delivered;
    done.attempt_count = attempt.number;
    done.last_status = Some(Status::Delivered);
    done.last_http_status = Some(200);
    done.next_attempt_at = None;
    done.queued = false;
    s.store
        .record_attempt(was, &done, &attempt, taken.fence)
        .await
        .unwrap_or_else(|e| panic!("{}: record: {e}", s.name));
    s.release(taken).await;
}

/// Takes whatever is due now, sorted by delivery id.
async fn take_all(s: &Subject) -> Vec<Taken<Hold>> {
    take_within(s, 1_000, &everything()).await
}

/// Asserts that nothing will fall due.
async fn assert_nothing_due(s: &Subject) {
    let next = s.store.next_due(&everything()).await.unwrap();
    assert_eq!(next, None, "{}: nothing due", s.name);
}

fn ids(taken: &[Taken<Hold>]) -> Vec<&str> {
    taken.iter().map(|t| t.due.delivery.id.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_delivery_is_taken_once_and_a_held_one_comes_back_at_its_time() {
    on_both(|s| async move {
        let store = &s.store;
        let (event_id, deliveries) = ingest_one(&s).await;
        let mut taken = take_all(&s).await;
        let want: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids(&taken), want, "{}: both due deliveries", s.name);
        for t in &taken {
            assert!(store.is_held(&t.due.delivery.id), "{}", s.name);
            assert_eq!(t.due.event.id, event_id, "{}", s.name);
            assert_eq!(&t.due.payload[..], b"{\"n\":1}", "{}", s.name);
            let fenced = match t.fence {
                Fence::Claimed => s.name == "sled",
                Fence::Lease(_) => s.name == "postgres",
            };
            assert!(fenced, "{}: {:?}", s.name, t.fence);
        }
        assert!(
            take_all(&s).await.is_empty(),
            "{}: a taken delivery is not taken again",
            s.name
        );

        // One is held (an open breaker) for five seconds, the other is delivered.
        let b = taken.pop().unwrap();
        let a = taken.pop().unwrap();
        let held_id = a.due.delivery.id.clone();
        store.release(a.hold, Some(START + 5_000)).await.unwrap();
        deliver(&s, b).await;
        assert!(!store.is_held(&held_id), "{}", s.name);
        assert_eq!(
            store.next_due(&everything()).await.unwrap(),
            Some(START + 5_000),
            "{}: due again when the hold ends",
            s.name
        );
        s.clock.set(START + 4_999);
        assert!(take_all(&s).await.is_empty(), "{}: held", s.name);
        s.clock.set(START + 5_000);
        let again = take_all(&s).await;
        assert_eq!(ids(&again), vec![held_id.as_str()], "{}", s.name);
        assert_eq!(again[0].due.delivery.attempt_count, 0, "{}", s.name);
        for t in again {
            deliver(&s, t).await;
        }
        assert_nothing_due(&s).await;
        assert!(take_all(&s).await.is_empty(), "{}", s.name);
    })
    .await;
}

/// Takes what is due at `now` within `room` and `limits`, sorted by delivery id.
async fn take_within(s: &Subject, room: usize, limits: &FixedLimits) -> Vec<Taken<Hold>> {
    let mut taken = s
        .store
        .take_due(s.clock.now_ms(), room, limits)
        .await
        .unwrap_or_else(|e| panic!("{}: take: {e}", s.name));
    taken.sort_by(|a, b| a.due.delivery.id.cmp(&b.due.delivery.id));
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_hands_out_no_more_of_an_endpoint_than_its_limits_allow() {
    on_both(|s| async move {
        let store = &s.store;
        let mut to_a = Vec::new();
        for i in 0..3 {
            s.clock.set(START + i);
            let mut e = event_to("acct", EP_A, None);
            e.received_at = START + i;
            let out = store.ingest_events(vec![e]).await.unwrap();
            to_a.push(created(&out[0]).1[0].id.clone());
        }
        let out = store
            .ingest_events(vec![event_to("acct", EP_B, None)])
            .await
            .unwrap();
        let to_b = created(&out[0]).1[0].id.clone();
        s.clock.set(START + 10);
        let limits = |a: usize, others: usize| FixedLimits {
            named: vec![(EP_A.to_string(), a)],
            others,
        };

        let first = take_within(&s, 100, &limits(2, 1)).await;
        assert_eq!(
            ids(&first),
            vec![to_a[0].as_str(), to_a[1].as_str(), to_b.as_str()],
            "{}: A's two earliest and B's one",
            s.name
        );
        assert!(
            take_within(&s, 100, &limits(0, 5)).await.is_empty(),
            "{}: none more of A, and B has none left",
            s.name
        );
        assert_eq!(
            store.next_due(&limits(1, 5)).await.unwrap(),
            Some(START + 2),
            "{}: A's third is what a take that allows A would hand out",
            s.name
        );
        let third = take_within(&s, 1, &limits(5, 5)).await;
        assert_eq!(ids(&third), vec![to_a[2].as_str()], "{}", s.name);
        for t in first.into_iter().chain(third) {
            deliver(&s, t).await;
        }
        assert_nothing_due(&s).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_lane_hands_out_one_delivery_at_a_time_in_commit_order() {
    on_both(|s| async move {
        let store = &s.store;
        let mut ep = endpoint(EP_A, "acct");
        ep.ordering = Some(herald::model::Ordering {
            key: Some("k".into()),
        });
        store.create_endpoint(ep, 100).await.unwrap();
        let keyed = |k: &str, at: i64| NewEvent {
            targets: vec![lane_of(Some(EP_A))],
            payload: Bytes::from(format!(r#"{{"k": "{k}"}}"#)),
            ..event("acct", None, at)
        };
        let mut made = Vec::new();
        for (i, k) in ["x", "y", "x"].iter().enumerate() {
            let out = store.ingest_events(vec![keyed(k, START + i as i64)]).await;
            made.push(created(&out.unwrap()[0]).1[0].clone());
        }
        let order: Vec<String> = made.iter().map(|d| d.id.clone()).collect();
        let ordering = |d: Delivery| async move { store.ordering_of(&d).await.unwrap() };
        assert_eq!(
            ordering(made[0].clone()).await,
            Some(("x".to_string(), None)),
            "{}: x's first heads its lane",
            s.name
        );
        assert_eq!(
            ordering(made[2].clone()).await,
            Some(("x".to_string(), Some(order[0].clone()))),
            "{}: x's second waits for its first",
            s.name
        );
        s.clock.set(START + 10);
        let heads = take_all(&s).await;
        assert_eq!(
            ids(&heads),
            vec![order[0].as_str(), order[1].as_str()],
            "{}: the heads of x and y; x's second waits behind its first",
            s.name
        );
        let mut heads = heads.into_iter();
        let x1 = heads.next().unwrap();
        assert!(take_all(&s).await.is_empty(), "{}", s.name);
        deliver(&s, x1).await;
        let next = take_all(&s).await;
        assert_eq!(
            ids(&next),
            vec![order[2].as_str()],
            "{}: x's second once its first has ended",
            s.name
        );
        assert_eq!(
            ordering(made[2].clone()).await,
            Some(("x".to_string(), None)),
            "{}: nothing ahead of x's second now",
            s.name
        );
        for t in next.into_iter().chain(heads) {
            deliver(&s, t).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_node_gives_back_what_it_took() {
    on_both(|s| async move {
        let store = &s.store;
        let (_, deliveries) = ingest_one(&s).await;
        let taken = take_all(&s).await;
        assert_eq!(taken.len(), deliveries.len(), "{}", s.name);
        let left = store.leave().await.unwrap();
        if !store.is_embedded() {
            // Due at once for the other nodes: the store holds nothing for this one now.
            assert_eq!(left, 2, "{}: both leases given back", s.name);
            for d in &deliveries {
                assert!(!store.is_held(&d.id), "{}", s.name);
            }
            assert_eq!(
                store.next_due(&everything()).await.unwrap(),
                Some(START),
                "{}: due as they were",
                s.name
            );
        } else {
            // One box: there are no other nodes, and the claims end with the process.
            assert_eq!(left, 0, "{}", s.name);
            for d in &deliveries {
                assert!(store.is_held(&d.id), "{}", s.name);
            }
        }
    })
    .await;
}

/// An intake that takes whatever it is offered and keeps what it is handed.
#[derive(Default)]
struct Catching {
    handed: std::sync::Mutex<Vec<Taken<Hold>>>,
}

impl Intake<Hold> for Catching {
    fn reserve(&self, _endpoint: &str) -> bool {
        true
    }

    fn cancel(&self, _endpoint: &str) {}

    fn take(&self, taken: Vec<Taken<Hold>>) {
        self.handed.lock().unwrap().extend(taken);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_hands_fresh_deliveries_to_the_intake_or_queues_them_never_both() {
    on_both(|s| async move {
        let store = &s.store;
        let intake = Arc::new(Catching::default());
        store.set_intake(Some(intake.clone()));
        let (_, deliveries) = ingest_one(&s).await;
        let handed: Vec<Taken<Hold>> = std::mem::take(&mut *intake.handed.lock().unwrap());
        let queued = take_all(&s).await;
        let mut seen: Vec<&str> = ids(&handed);
        seen.extend(ids(&queued));
        seen.sort();
        let want: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(seen, want, "{}: each delivery exactly once", s.name);
        if !store.is_embedded() {
            assert_eq!(handed.len(), 2, "{}: taken at ingest", s.name);
        } else {
            assert!(handed.is_empty(), "{}: one box queues them", s.name);
        }
        for t in handed.into_iter().chain(queued) {
            assert!(store.is_held(&t.due.delivery.id), "{}", s.name);
            deliver(&s, t).await;
        }

        // Without an intake, everything is queued.
        store.set_intake(None);
        let (_, deliveries) = ingest_one(&s).await;
        assert!(intake.handed.lock().unwrap().is_empty(), "{}", s.name);
        let queued = take_all(&s).await;
        let want: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids(&queued), want, "{}", s.name);
        for t in queued {
            deliver(&s, t).await;
        }
    })
    .await;
}

/// A backup of the store, as of the start.
async fn archive_of(s: &Subject) -> Vec<u8> {
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
    s: &Subject,
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

/// The embedded store (with its directory) or the cluster's.
async fn subject(sled: bool) -> (Subject, Option<tempfile::TempDir>) {
    match sled {
        true => {
            let (s, d) = sled_subject().await;
            (s, Some(d))
        }
        false => (postgres_subject().await, None),
    }
}

/// What a store holds, through the contract, as JSON: every event with its payload, deliveries
/// and attempts (newest first), and the directory as a backup reads it.
async fn contents(s: &Subject) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
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
async fn fill(s: &Subject) {
    let store = &s.store;
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
    let waiting: Vec<_> = s.taken.lock().unwrap().drain().map(|(_, t)| t).collect();
    for t in waiting {
        store.release(t.hold, Some(START)).await.unwrap();
    }
}

fn application(id: &str) -> Application {
    Application {
        id: id.into(),
        name: format!("{id}'s name"),
        uid: Some(id.into()),
        metadata: [("plan".to_string(), "gold".to_string())].into(),
        rate_limit: Some(5),
        created_at: START,
        updated_at: START + 1,
    }
}

fn answer(at: i64, status: u16) -> ApiAnswer {
    ApiAnswer {
        status,
        body: format!("{{\"at\":{at}}}"),
        at,
        event_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applications_and_kept_answers_are_per_account_and_go_with_a_purge() {
    on_both(|s| async move {
        let store = &s.store;
        let n = s.name;
        store.put_application(&application("acct")).await.unwrap();
        store.put_application(&application("other")).await.unwrap();
        let mut changed = application("acct");
        changed.name = "renamed".into();
        store.put_application(&changed).await.unwrap();
        assert_eq!(
            store.application("acct").await.unwrap(),
            Some(changed),
            "{n}"
        );
        assert_eq!(store.application("nobody").await.unwrap(), None, "{n}");
        let ids: Vec<String> = store
            .applications()
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.id)
            .collect();
        assert_eq!(ids, ["acct", "other"], "{n}");

        // The first answer of a key within the window stays; another account's key is its own.
        let first = answer(START, 201);
        assert_eq!(
            store
                .keep_api_answer("acct", "k", first.clone())
                .await
                .unwrap(),
            first,
            "{n}"
        );
        let again = store
            .keep_api_answer("acct", "k", answer(START + 5, 409))
            .await
            .unwrap();
        assert_eq!(again, first, "{n}: a second answer replaced the first");
        let other = answer(START + 1, 202);
        assert_eq!(
            store
                .keep_api_answer("other", "k", other.clone())
                .await
                .unwrap(),
            other,
            "{n}"
        );
        assert_eq!(
            store.api_answer("acct", "k", START + 10).await.unwrap(),
            Some(first.clone()),
            "{n}"
        );
        assert_eq!(
            store.api_answer("acct", "missing", START).await.unwrap(),
            None,
            "{n}"
        );
        let expired = START + IDEMPOTENCY_WINDOW_MS;
        assert_eq!(
            store.api_answer("acct", "k", expired).await.unwrap(),
            None,
            "{n}"
        );
        let later = answer(expired, 200);
        assert_eq!(
            store
                .keep_api_answer("acct", "k", later.clone())
                .await
                .unwrap(),
            later,
            "{n}"
        );
        assert_eq!(store.api_answers().await.unwrap().len(), 2, "{n}");

        // A message's eventId is its idempotency key; its account's first event is kept.
        assert_eq!(store.first_event_at("acct").await.unwrap(), None, "{n}");
        let out = store
            .ingest_events(vec![event("acct", Some("evt-key"), START + 7)])
            .await
            .unwrap();
        let (id, _) = created(&out[0]);
        let now = START + 8;
        assert_eq!(
            store.keyed_event("acct", "evt-key", now).await.unwrap(),
            Some(id),
            "{n}"
        );
        assert_eq!(
            store.keyed_event("other", "evt-key", now).await.unwrap(),
            None,
            "{n}"
        );
        assert_eq!(
            store
                .keyed_event("acct", "evt-key", START + 7 + IDEMPOTENCY_WINDOW_MS)
                .await
                .unwrap(),
            None,
            "{n}"
        );
        assert_eq!(
            store.first_event_at("acct").await.unwrap(),
            Some(START + 7),
            "{n}"
        );

        // A message's request key keeps its answer (the event) in the event's own commit.
        let mut keyed = event("acct", None, START + 9);
        keyed.request_key = Some("req-1".into());
        let out = store.ingest_events(vec![keyed]).await.unwrap();
        let (kept_id, _) = created(&out[0]);
        let kept = store.api_answer("acct", "req-1", START + 10).await.unwrap();
        let kept = kept.unwrap_or_else(|| panic!("{n}: the message's answer was not kept"));
        assert_eq!(
            (kept.status, kept.event_id),
            (202, Some(kept_id.clone())),
            "{n}"
        );
        // The commit claims the request key: the same request again (in a later batch, or twice
        // in one) is answered by the first message and stores nothing; a key whose kept answer
        // is not a message is answered by that answer. The key is decided before the eventId.
        let keyed = |key: &str, idem: Option<&str>, at| {
            let mut e = event("acct", idem, at);
            e.request_key = Some(key.into());
            e
        };
        let out = store
            .ingest_events(vec![
                keyed("req-1", Some("evt-new"), START + 11),
                keyed("req-2", None, START + 11),
                keyed("req-2", None, START + 11),
                keyed("k", None, START + 11),
            ])
            .await
            .unwrap();
        let (req_2, _) = created(&out[1]);
        assert!(
            matches!(&out[0], IngestOutcome::Repeated { event_id: Some(e) } if *e == kept_id),
            "{n}: {out:?}"
        );
        assert!(
            matches!(&out[2], IngestOutcome::Repeated { event_id: Some(e) } if *e == req_2),
            "{n}: {out:?}"
        );
        assert!(
            matches!(&out[3], IngestOutcome::Repeated { event_id: None }),
            "{n}: {out:?}"
        );
        // A message refused as a duplicate by its eventId leaves its request key unclaimed.
        let out = store
            .ingest_events(vec![keyed("req-3", Some("evt-key"), START + 12)])
            .await
            .unwrap();
        assert!(
            matches!(&out[0], IngestOutcome::Duplicate { .. }),
            "{n}: {out:?}"
        );
        assert_eq!(
            store.api_answer("acct", "req-3", START + 12).await.unwrap(),
            None,
            "{n}"
        );
        let out = store
            .ingest_events(vec![keyed("req-3", None, START + 12)])
            .await
            .unwrap();
        created(&out[0]);

        // A purge takes the account's record and answers; the other account keeps its own.
        store.purge_account("acct").await.unwrap();
        assert_eq!(store.application("acct").await.unwrap(), None, "{n}");
        assert_eq!(
            store.api_answer("acct", "k", expired + 1).await.unwrap(),
            None,
            "{n}"
        );
        let gone = store.api_answer("acct", "req-1", START + 10).await.unwrap();
        assert_eq!(gone, None, "{n}: the message's kept answer stayed");
        assert_eq!(store.first_event_at("acct").await.unwrap(), None, "{n}");
        assert_eq!(
            store.application("other").await.unwrap(),
            Some(application("other")),
            "{n}"
        );
        assert_eq!(
            store.api_answer("other", "k", START + 2).await.unwrap(),
            Some(other),
            "{n}"
        );

        // The sweep lets answers go once past the window.
        let stop = AtomicBool::new(false);
        let retained = Retained {
            retention_ms: 10 * IDEMPOTENCY_WINDOW_MS,
            fold_after_ms: 10 * IDEMPOTENCY_WINDOW_MS,
        };
        let sweep_at = START + 2 * IDEMPOTENCY_WINDOW_MS;
        s.clock.set(sweep_at);
        store.sweep(sweep_at, retained, &stop).await;
        assert!(
            store.api_answers().await.unwrap().is_empty(),
            "{n}: an old answer stayed"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_either_store_exactly() {
    for from_sled in [true, false] {
        let (source, _dir) = subject(from_sled).await;
        fill(&source).await;
        let archive = archive_of(&source).await;
        let before = contents(&source).await;
        assert_eq!(before.0.len(), 3, "{}: three events", source.name);
        for to_sled in [true, false] {
            let (target, _target_dir) = subject(to_sled).await;
            let what = format!("{} into {}", source.name, target.name);
            restore(&target, &archive)
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
            let refused = restore(&target, &archive).await;
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
    }
}

/// An event of `account` for one endpoint.
fn event_to(account: &str, endpoint: &str, key: Option<&str>) -> NewEvent {
    let mut e = event(account, key, START);
    e.targets = vec![lane_of(Some(endpoint))];
    e.payload = Bytes::from(format!("{{\"marker\":\"{account}-payload\"}}"));
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_account_leaves_nothing_and_the_others_untouched() {
    on_both(|s| async move {
        let store = &s.store;
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
        let waiting: Vec<_> = s.taken.lock().unwrap().drain().map(|(_, t)| t).collect();
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
    })
    .await;
}

/// A purged account leaves no debounce window either, whatever its key: one keyed by a
/// payload field (no `debounce_key` in the request) goes too, so the same event after the
/// purge is not `debounced`; the other account's window of the same key stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purged_account_leaves_no_debounce_window() {
    on_both(|s| async move {
        let store = &s.store;
        let located = |account: &str| {
            let mut e = event_to(account, if account == "acct" { EP_A } else { EP_B }, None);
            e.event_type = "loc.changed".into();
            e.payload = Bytes::from_static(b"{\"loc\":\"L1\"}");
            e.debounce = Some(DebounceRule {
                key: format!("{account}\0loc.changed\0L1"),
                window_ms: 3_600_000,
                trailing: false,
            });
            e
        };
        for (id, account) in [(EP_A, "acct"), (EP_B, "other")] {
            store
                .create_endpoint(endpoint(id, account), 10)
                .await
                .unwrap();
        }
        store
            .ingest_events(vec![located("acct"), located("other")])
            .await
            .unwrap();
        store.purge_account("acct").await.unwrap();
        store
            .create_endpoint(endpoint(EP_A, "acct"), 10)
            .await
            .unwrap();
        let out = store
            .ingest_events(vec![located("acct"), located("other")])
            .await
            .unwrap();
        assert_eq!(
            created(&out[0]).1[0].state,
            DeliveryState::Pending,
            "{}: the purged account's window is gone",
            s.name
        );
        assert_eq!(
            created(&out[1]).1[0].state,
            DeliveryState::Skipped,
            "{}: the other's stays",
            s.name
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_ordered_endpoint_hands_out_its_backlog_in_commit_order() {
    for from_sled in [true, false] {
        let (source, _dir) = subject(from_sled).await;
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
        for to_sled in [true, false] {
            let (target, _target_dir) = subject(to_sled).await;
            let what = format!("{} into {}", source.name, target.name);
            restore(&target, &archive)
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
    }
}
