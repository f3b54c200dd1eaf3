//! The store herald runs on: the embedded store of one box or the store a cluster of nodes
//! shares (docs/cluster.md). [`Backend`] opens whichever the settings name, serves every
//! operation of the contract (`herald-store`) from it, and closes it; its documentation is the
//! contract's.
//!
//! This is the one crate that depends on the stores' own crates. herald depends on it and on
//! the contract only, so the engine and the API cannot name `SledStore` or `PgStore`: a compile
//! error, not a convention. What herald does with a store beyond the contract (open one for a
//! restore or a copy, migrate a cluster's schema) it asks of [`Backend`] and of [`postgres`].
//! The stores underneath are reachable only with the `inspect` feature, which herald's tests
//! turn on as a dev-dependency (herald's own build never has it).
//!
//! A `match` rather than a trait object: the contract's operations return futures of their own
//! types, and some take a change as a closure typed by its caller, which a trait object could
//! carry only boxed and type-erased. Speed did not decide it: a call through the `match` took
//! 4.8 ns and the same call through a boxed future 12.9 ns (one allocation more; a ready future
//! polled 20 million times, release build, this machine), against the microseconds of any store
//! operation.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::Bytes;

use herald_core::clock::{Clock, Millis};
use herald_core::model::{
    Application, Attempt, ClientCertificate, Delivery, Endpoint, EventMeta, PortalSession,
    RateLimit,
};
use herald_core::policy::alerts::{AlertClaim, AlertMark, Claimed};
use herald_core::policy::breaker::Breaker;
use herald_core::policy::quota::{Limits, Windows};
use herald_core::shutdown::Shutdown;
use herald_store::contract::{
    Accounts, Alerts, Applications, Archive, Breakers, DeliveryChanges, DeliveryLog, Directory,
    Ingest, Intake, Minutes, Purge, Queue, Quotas, RateLimits, Retention, Sessions, Vitals,
};
use herald_store::directory::DirectoryCopy;
use herald_store::{
    ApiAnswer, Changed, CopyStart, DeliveryFilter, EndpointWaiting, EventHistory, Fence,
    IngestOutcome, Minute, NewEvent, Node, Purged, Retained, Stats, StoreError, StoreMetrics,
    Swept, TakeLimits, Taken, Taking,
};
#[cfg(feature = "postgres")]
use herald_store_postgres::{PgLease, PgStore};
use herald_store_sled::{SledClaim, SledStore};

/// What herald asks of a cluster's database beyond the contract: its settings, the schema's
/// migration, the hold a restore takes, and how logs name the database.
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use herald_store_postgres::{
        migrate, target_of, Database, DbError, Migrated, RestoreHold, Settings, SCHEMA_VERSION,
    };
}

/// Which store to open, and with what.
pub enum Settings {
    /// The embedded store in its data directory, with sled's page cache of that many bytes.
    Sled { path: PathBuf, cache_capacity: u64 },
    /// A node of the cluster on its PostgreSQL database.
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Settings>),
}

/// The store herald runs on.
#[derive(Clone)]
pub struct Backend(Engine);

#[derive(Clone)]
enum Engine {
    Sled(Arc<SledStore>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PgStore>),
}

/// The same contract operation on whichever store it is (named by its trait: each store also
/// has inherent methods of the same names, which a method call would pick).
macro_rules! both {
    ($self:ident, $op:path, ($($arg:expr),*)) => {
        match &$self.0 {
            Engine::Sled(s) => $op(&**s, $($arg),*),
            #[cfg(feature = "postgres")]
            Engine::Postgres(s) => $op(&**s, $($arg),*),
        }
    };
}

/// An async contract operation: the two stores' futures are of different types.
macro_rules! both_async {
    ($self:ident, $op:path, ($($arg:expr),*)) => {
        match &$self.0 {
            Engine::Sled(s) => $op(&**s, $($arg),*).await,
            #[cfg(feature = "postgres")]
            Engine::Postgres(s) => $op(&**s, $($arg),*).await,
        }
    };
}

impl Backend {
    /// Opens the store the settings name, ready to serve until `shutdown`: the embedded store;
    /// a cluster's node with its schema migrated (under the advisory lock), registered, and its
    /// notice listener, heartbeat and lease renewal running.
    pub async fn open(
        settings: &Settings,
        clock: Arc<dyn Clock>,
        metrics: Arc<StoreMetrics>,
        shutdown: &Shutdown,
    ) -> Result<Backend, StoreError> {
        #[cfg(not(feature = "postgres"))]
        let _ = shutdown;
        match settings {
            Settings::Sled {
                path,
                cache_capacity,
            } => {
                let store = SledStore::open(path, *cache_capacity, clock, metrics)?;
                Ok(Backend(Engine::Sled(store)))
            }
            #[cfg(feature = "postgres")]
            Settings::Postgres(settings) => {
                use herald_store_postgres::{keep_leases, nodes, wake};
                let store = Arc::new(PgStore::open(settings, clock, metrics).await?);
                tokio::spawn(wake::listen(store.clone(), shutdown.clone()));
                tokio::spawn(keep_leases(store.clone(), shutdown.clone()));
                tokio::spawn(nodes::beat(store.clone(), shutdown.clone()));
                Ok(Backend(Engine::Postgres(store)))
            }
        }
    }

    /// The embedded store at `path` (created if missing), for work that is no running herald:
    /// a restore into it, a copy out of it. Nothing runs beside it but its committer.
    pub fn open_embedded(
        path: &Path,
        cache_capacity: u64,
        clock: Arc<dyn Clock>,
    ) -> Result<Backend, StoreError> {
        let store = SledStore::open(path, cache_capacity, clock, Arc::default())?;
        Ok(Backend(Engine::Sled(store)))
    }

    /// A node on a cluster's database already migrated, for work that is no serving node (a
    /// restore into it, a copy into it): no listener, heartbeat or lease renewal; it should
    /// [`Queue::leave`] when done, so no node row stays behind.
    #[cfg(feature = "postgres")]
    pub async fn join(
        db: postgres::Database,
        clock: Arc<dyn Clock>,
        lease: std::time::Duration,
    ) -> Result<Backend, StoreError> {
        let store = PgStore::with_database(db, clock, lease).await?;
        Ok(Backend(Engine::Postgres(Arc::new(store))))
    }

    /// Whether the store failed for good: the embedded store keeps a write error until a
    /// fresh start (the disk may be usable again then); a cluster's database that goes away
    /// comes back to the same node, so it never has.
    pub fn failed_for_good(&self) -> bool {
        match &self.0 {
            Engine::Sled(s) => !s.healthy(),
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => false,
        }
    }

    /// Makes everything written durable, once the engine and the API stopped: the embedded
    /// store's final flush; a cluster's writes are durable already (its node left with the
    /// engine).
    pub async fn close(&self) -> Result<(), StoreError> {
        match &self.0 {
            Engine::Sled(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.close())
                    .await
                    .map_err(|e| StoreError::Engine(Arc::new(e)))?
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => Ok(()),
        }
    }

    /// Lets go of this handle, the last one, and waits until the store's own threads ended
    /// (the embedded store's committer): its data directory may be opened again after this.
    pub async fn end(self) {
        let committer = match &self.0 {
            Engine::Sled(s) => s.take_committer(),
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => None,
        };
        drop(self);
        if let Some(c) = committer {
            // The committer thread ends once the last store handle is gone.
            let _ = tokio::task::spawn_blocking(move || c.join()).await;
        }
    }

    /// Whether this is the embedded store, for what only happens on one box (its log says
    /// "storage flushed" on stop where a node says it left).
    pub fn is_embedded(&self) -> bool {
        matches!(self.0, Engine::Sled(_))
    }
}

/// The stores underneath, for tests that reach into them (the `inspect` feature).
#[cfg(feature = "inspect")]
impl Backend {
    /// The embedded store, when herald runs on it.
    pub fn sled(&self) -> Option<&Arc<SledStore>> {
        match &self.0 {
            Engine::Sled(s) => Some(s),
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => None,
        }
    }

    /// Serves the contract from this embedded store.
    pub fn of_sled(store: Arc<SledStore>) -> Backend {
        Backend(Engine::Sled(store))
    }

    /// Serves the contract from this cluster's store.
    #[cfg(feature = "postgres")]
    pub fn of_postgres(store: Arc<PgStore>) -> Backend {
        Backend(Engine::Postgres(store))
    }
}

/// Every operation of the contract, each forwarded to the store herald runs on.
impl herald_store::contract::Store for Backend {}

impl Ingest for Backend {
    async fn ingest<F, E>(&self, fan_out: F) -> Result<Vec<IngestOutcome>, E>
    where
        F: FnMut() -> Result<Vec<NewEvent>, E> + Send,
        E: From<StoreError> + Send,
    {
        both_async!(self, Ingest::ingest, (fan_out))
    }
}

impl Directory for Backend {
    async fn fresh_directory(&self) -> Result<(), StoreError> {
        both_async!(self, Directory::fresh_directory, ())
    }

    fn directory(&self) -> &DirectoryCopy {
        both!(self, Directory::directory, ())
    }

    async fn create_endpoint(
        &self,
        ep: Endpoint,
        max_per_account: usize,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        both_async!(self, Directory::create_endpoint, (ep, max_per_account))
    }

    async fn change_endpoint<E: From<StoreError> + Send>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Endpoint) -> Result<bool, E> + Send,
    ) -> Result<Option<(Arc<Endpoint>, bool)>, E> {
        both_async!(self, Directory::change_endpoint, (id, f))
    }

    async fn put_endpoint(&self, ep: Endpoint) -> Result<Arc<Endpoint>, StoreError> {
        both_async!(self, Directory::put_endpoint, (ep))
    }

    async fn delete_endpoint(&self, id: &str) -> Result<bool, StoreError> {
        both_async!(self, Directory::delete_endpoint, (id))
    }

    async fn set_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str, ClientCertificate)>,
        now: Millis,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        both_async!(self, Directory::set_client_certificate, (id, pair, now))
    }

    async fn client_certificate_pem(
        &self,
        id: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        both_async!(self, Directory::client_certificate_pem, (id))
    }
}

impl Accounts for Backend {
    async fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> Result<(), StoreError> {
        both_async!(self, Accounts::set_account_plan, (account_id, plan))
    }

    async fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        both_async!(self, Accounts::account_secret, (account_id, name))
    }

    async fn set_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        both_async!(
            self,
            Accounts::set_account_secret,
            (account_id, name, value)
        )
    }
}

impl Quotas for Backend {
    async fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> Result<bool, StoreError> {
        both_async!(self, Quotas::quota_take, (account_id, w, limits))
    }

    async fn set_quota_usage(
        &self,
        account_id: &str,
        w: Windows,
        used: (u64, u64),
    ) -> Result<(), StoreError> {
        both_async!(self, Quotas::set_quota_usage, (account_id, w, used))
    }

    async fn quota_usage(&self, account_id: &str, w: Windows) -> Result<(u64, u64), StoreError> {
        both_async!(self, Quotas::quota_usage, (account_id, w))
    }
}

impl Breakers for Backend {
    async fn breaker(&self, endpoint_id: &str) -> Result<Breaker, StoreError> {
        both_async!(self, Breakers::breaker, (endpoint_id))
    }

    async fn change_breaker<T: Send>(
        &self,
        endpoint_id: &str,
        now: Millis,
        f: impl FnOnce(&mut Breaker) -> T + Send,
    ) -> Result<T, StoreError> {
        both_async!(self, Breakers::change_breaker, (endpoint_id, now, f))
    }

    async fn open_breakers(&self) -> Result<Vec<(String, Breaker)>, StoreError> {
        both_async!(self, Breakers::open_breakers, ())
    }
}

impl RateLimits for Backend {
    async fn take_token(
        &self,
        endpoint_id: &str,
        limit: RateLimit,
        now: Millis,
    ) -> Result<Result<(), Millis>, StoreError> {
        both_async!(self, RateLimits::take_token, (endpoint_id, limit, now))
    }
}

impl Alerts for Backend {
    async fn alert_emails(&self, account_id: &str) -> Result<Vec<String>, StoreError> {
        both_async!(self, Alerts::alert_emails, (account_id))
    }

    async fn set_alert_emails(
        &self,
        account_id: &str,
        emails: Vec<String>,
    ) -> Result<(), StoreError> {
        both_async!(self, Alerts::set_alert_emails, (account_id, emails))
    }

    async fn all_alert_emails(&self) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        both_async!(self, Alerts::all_alert_emails, ())
    }

    async fn claim_alert(&self, claim: AlertClaim<'_>) -> Result<Claimed, StoreError> {
        both_async!(self, Alerts::claim_alert, (claim))
    }

    async fn count_alert_mail(
        &self,
        account_id: &str,
        now: Millis,
        max_per_hour: u32,
    ) -> Result<bool, StoreError> {
        both_async!(
            self,
            Alerts::count_alert_mail,
            (account_id, now, max_per_hour)
        )
    }

    async fn give_back_alert(
        &self,
        endpoint_id: &str,
        after: AlertMark,
        before: AlertMark,
    ) -> Result<bool, StoreError> {
        both_async!(self, Alerts::give_back_alert, (endpoint_id, after, before))
    }
}

impl Sessions for Backend {
    async fn create_portal_session(
        &self,
        session: &PortalSession,
        hash: [u8; 32],
    ) -> Result<(), StoreError> {
        both_async!(self, Sessions::create_portal_session, (session, hash))
    }

    async fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> Result<Option<PortalSession>, StoreError> {
        both_async!(self, Sessions::portal_session, (token, now))
    }

    async fn revoke_portal_session(&self, id: &str) -> Result<bool, StoreError> {
        both_async!(self, Sessions::revoke_portal_session, (id))
    }
}

impl Purge for Backend {
    async fn purge_account(&self, account_id: &str) -> Result<Purged, StoreError> {
        both_async!(self, Purge::purge_account, (account_id))
    }
}

impl DeliveryLog for Backend {
    async fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        both_async!(self, DeliveryLog::delivery, (id))
    }

    async fn event(&self, id: &str) -> Result<Option<(EventMeta, Bytes)>, StoreError> {
        both_async!(self, DeliveryLog::event, (id))
    }

    async fn event_with_deliveries(
        &self,
        id: &str,
    ) -> Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError> {
        both_async!(self, DeliveryLog::event_with_deliveries, (id))
    }

    async fn attempts(&self, delivery_id: &str) -> Result<Vec<Attempt>, StoreError> {
        both_async!(self, DeliveryLog::attempts, (delivery_id))
    }

    async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<Delivery>, Option<String>), StoreError> {
        both_async!(self, DeliveryLog::list_deliveries, (filter, limit, cursor))
    }

    async fn endpoint_pending(&self, endpoint_id: &str) -> Result<u64, StoreError> {
        both_async!(self, DeliveryLog::endpoint_pending, (endpoint_id))
    }
}

impl DeliveryChanges for Backend {
    async fn ordering_of(
        &self,
        d: &Delivery,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        both_async!(self, DeliveryChanges::ordering_of, (d))
    }

    async fn change_delivery<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)> + Send + 'static,
    ) -> Result<Changed<T>, StoreError> {
        both_async!(self, DeliveryChanges::change_delivery, (id, f))
    }

    async fn record_attempt(
        &self,
        was: &Delivery,
        now: &Delivery,
        attempt: &Attempt,
        fence: Fence,
    ) -> Result<(), StoreError> {
        both_async!(
            self,
            DeliveryChanges::record_attempt,
            (was, now, attempt, fence)
        )
    }

    fn is_held(&self, delivery_id: &str) -> bool {
        both!(self, DeliveryChanges::is_held, (delivery_id))
    }

    async fn expedite_endpoint(&self, endpoint_id: &str, now: Millis) -> Result<u64, StoreError> {
        both_async!(self, DeliveryChanges::expedite_endpoint, (endpoint_id, now))
    }
}

impl Vitals for Backend {
    fn kind(&self) -> &'static str {
        both!(self, Vitals::kind, ())
    }

    async fn healthy(&self) -> bool {
        both_async!(self, Vitals::healthy, ())
    }

    async fn stats(&self) -> Result<Stats, StoreError> {
        both_async!(self, Vitals::stats, ())
    }

    async fn due_summary(&self, now: Millis) -> Result<(usize, Option<Millis>), StoreError> {
        both_async!(self, Vitals::due_summary, (now))
    }

    async fn nodes(&self) -> Result<Option<(String, Vec<Node>)>, StoreError> {
        both_async!(self, Vitals::nodes, ())
    }

    async fn waiting_by_endpoint(&self, now: Millis) -> Result<Vec<EndpointWaiting>, StoreError> {
        both_async!(self, Vitals::waiting_by_endpoint, (now))
    }

    async fn size_on_disk(&self) -> u64 {
        both_async!(self, Vitals::size_on_disk, ())
    }
}

impl Retention for Backend {
    async fn sweep(&self, now: Millis, retained: Retained, stop: &AtomicBool) -> Swept {
        both_async!(self, Retention::sweep, (now, retained, stop))
    }
}

/// What holds a delivery taken from the queue of the store herald runs on.
pub struct Hold(Held);

enum Held {
    Sled(SledClaim),
    #[cfg(feature = "postgres")]
    Postgres(PgLease),
}

impl Queue for Backend {
    type Hold = Hold;

    fn taking(&self) -> Taking {
        both!(self, Queue::taking, ())
    }

    async fn take_due(
        &self,
        now: Millis,
        room: usize,
        limits: &dyn TakeLimits,
    ) -> Result<Vec<Taken<Hold>>, StoreError> {
        Ok(match &self.0 {
            Engine::Sled(s) => Queue::take_due(&**s, now, room, limits)
                .await?
                .into_iter()
                .map(|t| t.map_hold(|h| Hold(Held::Sled(h))))
                .collect(),
            #[cfg(feature = "postgres")]
            Engine::Postgres(s) => Queue::take_due(&**s, now, room, limits)
                .await?
                .into_iter()
                .map(|t| t.map_hold(|h| Hold(Held::Postgres(h))))
                .collect(),
        })
    }

    async fn release(&self, hold: Hold, until: Option<Millis>) -> Result<(), StoreError> {
        match (&self.0, hold.0) {
            (Engine::Sled(s), Held::Sled(h)) => Queue::release(&**s, h, until).await,
            #[cfg(feature = "postgres")]
            (Engine::Postgres(s), Held::Postgres(h)) => Queue::release(&**s, h, until).await,
            #[cfg(feature = "postgres")]
            _ => unreachable!("a hold is given back to the store it came from"),
        }
    }

    async fn next_due(&self, limits: &dyn TakeLimits) -> Result<Option<Millis>, StoreError> {
        both_async!(self, Queue::next_due, (limits))
    }

    async fn queue_changed(&self) {
        both_async!(self, Queue::queue_changed, ())
    }

    fn set_intake(&self, intake: Option<Arc<dyn Intake<Hold>>>) {
        match &self.0 {
            Engine::Sled(s) => {
                drop(intake);
                Queue::set_intake(&**s, None)
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(s) => Queue::set_intake(
                &**s,
                intake.map(|i| Arc::new(PgIntake(i)) as Arc<dyn Intake<PgLease>>),
            ),
        }
    }

    async fn leave(&self) -> Result<u64, StoreError> {
        both_async!(self, Queue::leave, ())
    }
}

impl Archive for Backend {
    async fn account_secrets(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        both_async!(self, Archive::account_secrets, ())
    }

    async fn export_events(
        &self,
        before: Option<String>,
        limit: usize,
    ) -> Result<(Vec<EventHistory>, Option<String>), StoreError> {
        both_async!(self, Archive::export_events, (before, limit))
    }

    async fn is_empty(&self) -> Result<bool, StoreError> {
        both_async!(self, Archive::is_empty, ())
    }

    async fn import_events(
        &self,
        events: Vec<EventHistory>,
        now: Millis,
    ) -> Result<(), StoreError> {
        both_async!(self, Archive::import_events, (events, now))
    }

    async fn finish_import(&self) -> Result<(), StoreError> {
        both_async!(self, Archive::finish_import, ())
    }

    async fn begin_copy(&self, source: &str, now: Millis) -> Result<CopyStart, StoreError> {
        both_async!(self, Archive::begin_copy, (source, now))
    }

    async fn keep_copy_mark(
        &self,
        source: &str,
        cursor: Option<&str>,
        copied: u64,
        finished: bool,
    ) -> Result<(), StoreError> {
        both_async!(
            self,
            Archive::keep_copy_mark,
            (source, cursor, copied, finished)
        )
    }
}

impl Minutes for Backend {
    async fn add_minutes(&self, minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        both_async!(self, Minutes::add_minutes, (minutes))
    }

    async fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        both_async!(self, Minutes::endpoint_minutes, (endpoint_id, from))
    }

    async fn trim_minutes(&self, before: Millis) -> Result<u64, StoreError> {
        both_async!(self, Minutes::trim_minutes, (before))
    }

    async fn endpoint_hours(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        both_async!(self, Minutes::endpoint_hours, (endpoint_id, from))
    }

    async fn hours_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        both_async!(self, Minutes::hours_since, (from))
    }

    async fn trim_hours(&self, before: Millis) -> Result<u64, StoreError> {
        both_async!(self, Minutes::trim_hours, (before))
    }

    async fn minutes_since(&self, from: Millis) -> Result<Vec<(String, Minute)>, StoreError> {
        both_async!(self, Minutes::minutes_since, (from))
    }

    async fn keep_last_successes(
        &self,
        successes: Vec<(String, Millis)>,
    ) -> Result<(), StoreError> {
        both_async!(self, Minutes::keep_last_successes, (successes))
    }

    async fn last_success(&self, endpoint_id: &str) -> Result<Option<Millis>, StoreError> {
        both_async!(self, Minutes::last_success, (endpoint_id))
    }
}

/// The scheduler's intake, as the cluster's store hands its leases over.
#[cfg(feature = "postgres")]
struct PgIntake(Arc<dyn Intake<Hold>>);

#[cfg(feature = "postgres")]
impl Intake<PgLease> for PgIntake {
    fn reserve(&self, endpoint: &str) -> bool {
        self.0.reserve(endpoint)
    }

    fn cancel(&self, endpoint: &str) {
        self.0.cancel(endpoint)
    }

    fn take(&self, taken: Vec<Taken<PgLease>>) {
        self.0.take(
            taken
                .into_iter()
                .map(|t| t.map_hold(|h| Hold(Held::Postgres(h))))
                .collect(),
        )
    }
}

impl Applications for Backend {
    async fn application(&self, account_id: &str) -> Result<Option<Application>, StoreError> {
        both_async!(self, Applications::application, (account_id))
    }

    async fn put_application(&self, app: &Application) -> Result<(), StoreError> {
        both_async!(self, Applications::put_application, (app))
    }

    async fn applications(&self) -> Result<Vec<Application>, StoreError> {
        both_async!(self, Applications::applications, ())
    }

    async fn first_event_at(&self, account_id: &str) -> Result<Option<Millis>, StoreError> {
        both_async!(self, Applications::first_event_at, (account_id))
    }

    async fn keyed_event(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> Result<Option<String>, StoreError> {
        both_async!(self, Applications::keyed_event, (account_id, key, now))
    }

    async fn api_answer(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> Result<Option<ApiAnswer>, StoreError> {
        both_async!(self, Applications::api_answer, (account_id, key, now))
    }

    async fn keep_api_answer(
        &self,
        account_id: &str,
        key: &str,
        answer: ApiAnswer,
    ) -> Result<ApiAnswer, StoreError> {
        both_async!(
            self,
            Applications::keep_api_answer,
            (account_id, key, answer)
        )
    }

    async fn api_answers(&self) -> Result<Vec<(String, String, ApiAnswer)>, StoreError> {
        both_async!(self, Applications::api_answers, ())
    }
}
