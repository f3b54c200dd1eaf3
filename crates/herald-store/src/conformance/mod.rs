//! The contract's conformance suite, as a kit any store runs: each case takes a
//! [`Subject`] (a store of the kind under test, opened by a [`Harness`], on a manual clock
//! of its own) and asserts what [`crate::contract`] promises, through the contract alone. A
//! store's crate runs every case with [`conformance_tests!`](crate::conformance_tests) and
//! its harness, as river's driver tests do: the embedded store on a temporary directory, the
//! cluster's on a fresh database of a real PostgreSQL. A behaviour one store has and the
//! other lacks fails in that store's tests, naming the store.
//!
//! What only one store has (the inside of sled's due index and its folds, the cluster's lease
//! renewals and notices) is tested beside that store; what needs herald itself (a backup read
//! back, a restore from one store into the other) is tested with herald. The helpers here are
//! public for those tests.
//!
//! The cases, by concern: [`ingest`], [`directory`], [`accounts`], [`log`], [`queue`],
//! [`archive`]. A new case is a public `async fn name<H: Harness>(s: Subject<H>)` in one of
//! them, listed in [`conformance_tests!`](crate::conformance_tests) (this crate's
//! `tests/kit.rs` fails on a case left out).

pub mod accounts;
pub mod archive;
pub mod directory;
pub mod ingest;
pub mod log;
pub mod queue;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use herald_core::clock::{Clock, ManualClock};
use herald_core::model::{
    Application, Attempt, ClientCertificate, Delivery, DeliveryState, Endpoint, EndpointState,
    PortalSession, RateLimit, SignatureKind, Status,
};
use herald_core::policy::alerts::{AlertClaim, AlertKind, Claimed};
use herald_core::policy::breaker::{Breaker, Change, Phase};
use herald_core::policy::quota::{windows, Limits};

use crate::contract::{Intake, Queue, Store};
use crate::prelude::*;
use crate::{
    lane_of, token_hash, ApiAnswer, Changed, CopyStart, DebounceRule, DeliveryFilter, Fence,
    FixedLimits, IngestOutcome, Minute, NewEvent, Retained, StoreError, Taken,
    IDEMPOTENCY_WINDOW_MS, MAX_ENDPOINT_SIZE,
};

/// Where the cases' clocks start.
pub const START: i64 = 1_800_000_000_000;
/// The two endpoints [`event`] goes to.
pub const EP_A: &str = "ep_01HZZZZZZZZZZZZZZZZZZZZZZA";
pub const EP_B: &str = "ep_01HZZZZZZZZZZZZZZZZZZZZZZB";

/// A place for stores of one kind, and how to open, close and listen to them there.
pub trait Harness: Sized + Send + Sync + 'static {
    type Store: Store + Send + Sync + 'static;
    /// The kind's name in failure messages (`sled`, `postgres`): what
    /// [`crate::contract::Vitals::kind`] answers.
    const NAME: &'static str;

    /// A new place: an empty directory, an empty database.
    fn new() -> impl Future<Output = Self> + Send;

    /// Opens the store at this place on `clock` (an empty one, the first time).
    fn open(&self, clock: Arc<dyn Clock>) -> impl Future<Output = Arc<Self::Store>> + Send;

    /// Closes the store as herald does when it stops: opening it again finds what it made
    /// durable.
    fn close(&self, store: Arc<Self::Store>) -> impl Future<Output = ()> + Send;

    /// Starts what herald starts beside the store to hear of changes made elsewhere (a
    /// cluster's notice listener), until the returned guard is dropped.
    fn listen(&self, store: &Arc<Self::Store>) -> Box<dyn Send>;
}

/// What holds a delivery taken from the harness's store.
pub type HoldOf<H> = <<H as Harness>::Store as Queue>::Hold;

/// One store under test, on a clock of its own.
pub struct Subject<H: Harness> {
    pub name: &'static str,
    pub store: Arc<H::Store>,
    pub clock: Arc<ManualClock>,
    place: H,
    /// Deliveries a take handed to this node and no case has asked for yet.
    taken: Mutex<HashMap<String, Taken<HoldOf<H>>>>,
}

impl<H: Harness> Subject<H> {
    /// A new store of the harness's kind, at a new place, its clock at [`START`].
    pub async fn new() -> Subject<H> {
        let place = H::new().await;
        let clock = Arc::new(ManualClock::new(START));
        Subject {
            name: H::NAME,
            store: place.open(clock.clone()).await,
            clock,
            place,
            taken: Mutex::default(),
        }
    }

    /// Another new store of the same kind.
    pub async fn another(&self) -> Subject<H> {
        Subject::new().await
    }

    /// Closes the store as herald does when it stops and opens it again: what the contract
    /// calls durable is there.
    pub async fn reopen(self) -> Subject<H> {
        let Subject {
            name,
            store,
            clock,
            place,
            taken,
        } = self;
        drop(taken);
        place.close(store).await;
        Subject {
            name,
            store: place.open(clock.clone()).await,
            clock,
            place,
            taken: Mutex::default(),
        }
    }

    /// Hears of changes made elsewhere until the guard is dropped ([`Harness::listen`]).
    pub fn listen(&self) -> Box<dyn Send> {
        self.place.listen(&self.store)
    }

    /// Takes the due delivery `id` from the queue as the scheduler would: a take hands out
    /// every delivery due; those not asked for yet wait here.
    pub async fn take(&self, id: &str) -> Taken<HoldOf<H>> {
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

    /// The deliveries a take handed out that no case asked for yet (they are the caller's
    /// to give back).
    pub fn untaken(&self) -> Vec<Taken<HoldOf<H>>> {
        self.taken.lock().unwrap().drain().map(|(_, t)| t).collect()
    }

    /// Gives a taken delivery back after its attempt was recorded.
    pub async fn release(&self, taken: Taken<HoldOf<H>>) {
        self.store
            .release(taken.hold, None)
            .await
            .unwrap_or_else(|e| panic!("{}: release: {e}", self.name));
    }
}

/// Stores events made beforehand. The contract takes a fan-out, which the store calls (again
/// only in a cluster whose endpoints changed meanwhile): this one hands the same events each
/// time.
pub trait IngestEvents {
    fn ingest_events(
        &self,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<Vec<IngestOutcome>, StoreError>>;
}

impl<S: crate::contract::Ingest> IngestEvents for S {
    async fn ingest_events(&self, events: Vec<NewEvent>) -> Result<Vec<IngestOutcome>, StoreError> {
        self.ingest(|| Ok(events.clone())).await
    }
}

/// An active, verified endpoint of `account` to `https://example.com/hook`, made at [`START`].
pub fn endpoint(id: &str, account: &str) -> Endpoint {
    endpoint_at(id, account, START)
}

/// An active, verified endpoint of `account` to `https://example.com/hook`, made at `at`.
pub fn endpoint_at(id: &str, account: &str, at: i64) -> Endpoint {
    Endpoint {
        id: id.into(),
        account_id: account.into(),
        url: "https://example.com/hook".into(),
        description: String::new(),
        event_types: Vec::new(),
        headers: Default::default(),
        retry_policy: "standard".into(),
        signature: SignatureKind::Hmac,
        state: EndpointState::Active,
        verified: true,
        created_at: at,
        updated_at: at,
        secrets: Vec::new(),
        ordering: None,
        rate_limit: None,
        client_certificate: None,
        filter: None,
        uid: None,
        metadata: Default::default(),
        channels: Vec::new(),
        signature_headers: Default::default(),
        propagate_trace: false,
    }
}

/// Limits that take whatever is due.
pub fn everything() -> FixedLimits {
    FixedLimits {
        others: 1_000,
        ..FixedLimits::default()
    }
}

/// An event of `account` for both endpoints, received at `at`.
pub fn event(account: &str, key: Option<&str>, at: i64) -> NewEvent {
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
        trace: None,
    }
}

/// The event and deliveries an ingest created.
pub fn created(out: &IngestOutcome) -> (String, Vec<Delivery>) {
    match out {
        IngestOutcome::Created {
            event_id,
            deliveries,
        } => (event_id.clone(), deliveries.clone()),
        other => panic!("not created: {other:?}"),
    }
}

/// Stores one event for both endpoints; its id and deliveries.
pub async fn ingest_one<H: Harness>(s: &Subject<H>) -> (String, Vec<Delivery>) {
    let out = s
        .store
        .ingest_events(vec![event("acct", None, START)])
        .await
        .unwrap_or_else(|e| panic!("{}: ingest: {e}", s.name));
    created(&out[0])
}

/// A delivery as JSON (to compare every field).
pub fn json(d: &Delivery) -> serde_json::Value {
    serde_json::to_value(d).expect("a delivery as JSON")
}

/// What a manual retry does to a delivery: pending again, due at `at`.
pub fn retried(d: &Delivery, at: i64) -> Delivery {
    let mut d = d.clone();
    d.state = DeliveryState::Pending;
    d.next_attempt_at = Some(at);
    d.manual = true;
    d.queued = true;
    d
}

/// A portal session of account `acct`, made at the start, that expires at `expires_at`.
pub fn session(id: &str, read_only: bool, expires_at: i64) -> PortalSession {
    PortalSession {
        id: id.into(),
        account_id: "acct".into(),
        read_only,
        created_at: START,
        expires_at,
    }
}

/// A first attempt at `at` that failed with a 500, and the delivery after it: retried in a
/// minute.
pub fn failed_first(was: &Delivery, at: i64) -> (Attempt, Delivery) {
    let attempt = Attempt {
        id: herald_core::ids::new_id(herald_core::ids::ATTEMPT, at),
        number: 1,
        at,
        duration_ms: 12,
        status: Status::HttpError,
        http_status: Some(500),
        error: None,
        request_headers: vec![("webhook-id".into(), was.event_id.clone())],
        response_body: "oops".into(),
        response_headers: vec![
            ("content-type".into(), "text/plain".into()),
            ("x-request-id".into(), "req-\u{e9}-1".into()),
        ],
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

/// Records a delivered attempt of a taken delivery and gives it back.
pub async fn deliver<H: Harness>(s: &Subject<H>, taken: Taken<HoldOf<H>>) {
    let was = &taken.due.delivery;
    let at = s.clock.now_ms();
    let attempt = Attempt {
        id: herald_core::ids::new_id(herald_core::ids::ATTEMPT, at),
        number: was.attempt_count + 1,
        at,
        duration_ms: 2,
        status: Status::Delivered,
        http_status: Some(200),
        error: None,
        request_headers: Vec::new(),
        response_body: String::new(),
        response_headers: Vec::new(),
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
pub async fn take_all<H: Harness>(s: &Subject<H>) -> Vec<Taken<HoldOf<H>>> {
    take_within(s, 1_000, &everything()).await
}

/// Asserts that nothing will fall due.
pub async fn assert_nothing_due<H: Harness>(s: &Subject<H>) {
    let next = s.store.next_due(&everything()).await.unwrap();
    assert_eq!(next, None, "{}: nothing due", s.name);
}

/// The ids of taken deliveries.
pub fn ids<T>(taken: &[Taken<T>]) -> Vec<&str> {
    taken.iter().map(|t| t.due.delivery.id.as_str()).collect()
}

/// Takes what is due at `now` within `room` and `limits`, sorted by delivery id.
pub async fn take_within<H: Harness>(
    s: &Subject<H>,
    room: usize,
    limits: &FixedLimits,
) -> Vec<Taken<HoldOf<H>>> {
    let mut taken = s
        .store
        .take_due(s.clock.now_ms(), room, limits)
        .await
        .unwrap_or_else(|e| panic!("{}: take: {e}", s.name));
    taken.sort_by(|a, b| a.due.delivery.id.cmp(&b.due.delivery.id));
    taken
}

/// A trace context as a request's span gives it (with vendors' state).
pub fn trace_context() -> herald_core::trace::TraceContext {
    herald_core::trace::TraceContext::from_headers(
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        Some("shop=7,other=x"),
    )
    .expect("a valid context")
}

/// An event of `account` for one endpoint.
pub fn event_to(account: &str, endpoint: &str, key: Option<&str>) -> NewEvent {
    let mut e = event(account, key, START);
    e.targets = vec![lane_of(Some(endpoint))];
    e.payload = Bytes::from(format!("{{\"marker\":\"{account}-payload\"}}"));
    e
}

/// Runs every case of the kit against the store `$harness` opens, one test each (with
/// tokio's multi-threaded runtime, which the calling crate has):
/// `herald_store::conformance_tests!(Sled);` in the store's `tests/conformance.rs`.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:ty) => {
        $crate::conformance_tests!(@cases $harness;
            ingest::an_ingest_is_read_back_exactly_with_a_pending_delivery_per_target,
            ingest::an_idempotency_key_answers_the_first_event_within_its_window_only,
            ingest::a_debounced_key_skips_the_events_its_window_holds,
            ingest::ingest_calls_the_fan_out_and_returns_its_error_unchanged,
            directory::endpoints_are_created_changed_and_deleted_one_change_at_a_time,
            directory::a_stored_filter_over_todays_limits_loads_and_matches,
            directory::a_client_certificate_is_kept_apart_and_removed_with_its_endpoint,
            directory::a_deleted_endpoints_waiting_deliveries_are_made_due_at_once,
            accounts::plans_secrets_and_quotas_are_kept_per_account,
            accounts::alert_addresses_stay_apart_from_the_plan_and_an_alert_is_claimed_once,
            accounts::alert_mails_are_capped_per_account_per_hour_and_a_claim_can_be_given_back,
            accounts::a_mail_without_an_endpoint_counts_toward_the_accounts_hour,
            accounts::a_breaker_changes_one_change_at_a_time_and_open_ones_are_listed,
            accounts::a_portal_session_opens_until_it_expires_or_is_revoked,
            accounts::a_rate_limit_bucket_gives_its_burst_then_one_token_per_interval,
            accounts::applications_and_kept_answers_are_per_account_and_go_with_a_purge,
            log::a_delivery_changes_through_its_change_or_says_why_not,
            log::the_log_lists_newest_first_through_filters_and_cursors,
            log::a_search_finds_payload_text_looking_at_a_bounded_number_of_events,
            log::an_attempt_is_recorded_with_what_follows_it_in_one_write,
            log::minutes_add_up_across_writers_survive_a_reopen_and_are_trimmed,
            log::the_newest_last_success_is_kept_until_its_endpoint_goes,
            log::a_large_flush_of_minutes_adds_up_and_trims_by_time,
            log::a_sweep_removes_what_is_past_the_retention_and_keeps_what_is_pending,
            log::the_store_reports_its_health_size_and_nodes,
            queue::the_queue_says_it_changed_when_an_ingest_made_work,
            queue::a_due_delivery_is_taken_once_and_a_held_one_comes_back_at_its_time,
            queue::a_take_hands_out_no_more_of_an_endpoint_than_its_limits_allow,
            queue::an_ordered_lane_hands_out_one_delivery_at_a_time_in_commit_order,
            queue::what_waits_is_counted_per_endpoint_due_behind_and_not_taken,
            queue::a_leaving_node_gives_back_what_it_took,
            queue::ingest_hands_fresh_deliveries_to_the_intake_or_queues_them_never_both,
            archive::the_archive_operations_page_import_and_finish,
            archive::a_copy_is_begun_marked_resumed_and_finished_on_a_clusters_store_only,
            archive::a_purged_account_leaves_no_debounce_window,
        );
    };
    (@cases $harness:ty; $($module:ident :: $case:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = $crate::conformance::Subject::<$harness>::new().await;
                $crate::conformance::$module::$case(subject).await;
            }
        )*
    };
}
