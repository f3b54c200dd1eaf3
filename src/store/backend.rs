//! The store herald runs on: the embedded store of one box or the store a cluster of nodes
//! shares (docs/cluster.md). Each operation is the contract's ([`super::contract`]), asked of
//! whichever store this is; its documentation is there.
//!
//! A `match` rather than a trait object: the contract's operations return futures of their own
//! types, and some take a change as a closure typed by its caller, which a trait object could
//! carry only boxed and type-erased. Speed did not decide it: a call through the `match` took
//! 4.8 ns and the same call through a boxed future 12.9 ns (one allocation more; a ready future
//! polled 20 million times, release build, this machine), against the microseconds of any store
//! operation.
//!
//! The one place herald names the stores' own types (clippy.toml forbids it elsewhere).
#![allow(clippy::disallowed_types)]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::Bytes;

use super::contract::{
    Accounts, Alerts, Applications, Archive, Breakers, DeliveryChanges, DeliveryLog, Directory,
    Ingest, Intake, Minutes, Purge, Queue, Quotas, RateLimits, Retention, Sessions, Vitals,
};
use super::directory::DirectoryCopy;
#[cfg(feature = "postgres")]
use super::postgres::{PgLease, PgStore};
use super::sled::{SledClaim, SledStore};
use super::{
    ApiAnswer, Changed, CopyStart, DeliveryFilter, EventHistory, Fence, IngestOutcome, Minute,
    NewEvent, Node, Purged, Retained, Stats, StoreError, Swept, TakeLimits, Taken, Taking,
};
use crate::clock::{Clock, Millis};
use crate::config::{Config, StoreKind};
use crate::model::{
    Application, Attempt, ClientCertificate, Delivery, Endpoint, EventMeta, PortalSession,
    RateLimit,
};
use crate::policy::alerts::{AlertClaim, AlertMark, Claimed};
use crate::policy::breaker::Breaker;
use crate::policy::quota::{Limits, Windows};
use crate::shutdown::Shutdown;

/// Which store herald runs on.
#[derive(Clone)]
pub enum Backend {
    Sled(Arc<SledStore>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PgStore>),
}

/// The same contract operation on whichever store it is (named by its trait: each store also
/// has inherent methods of the same names, which a method call would pick).
macro_rules! both {
    ($self:ident, $op:path, ($($arg:expr),*)) => {
        match $self {
            Backend::Sled(s) => $op(&**s, $($arg),*),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => $op(&**s, $($arg),*),
        }
    };
}

/// An async contract operation: the two stores' futures are of different types.
macro_rules! both_async {
    ($self:ident, $op:path, ($($arg:expr),*)) => {
        match $self {
            Backend::Sled(s) => $op(&**s, $($arg),*).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => $op(&**s, $($arg),*).await,
        }
    };
}

impl Backend {
    /// Opens the store the config names, ready to serve until `shutdown`: the embedded store;
    /// a cluster's node with its schema migrated (under the advisory lock), registered, and its
    /// notice listener, heartbeat and lease renewal running.
    pub async fn open(
        config: &Config,
        clock: Arc<dyn Clock>,
        metrics: Arc<super::StoreMetrics>,
        shutdown: &Shutdown,
    ) -> Result<Backend, StoreError> {
        match config.storage.backend {
            StoreKind::Sled => {
                let path = &config.storage.path;
                let store = SledStore::open(path, config.storage.cache_capacity, clock, metrics)?;
                Ok(Backend::Sled(store))
            }
            #[cfg(feature = "postgres")]
            StoreKind::Postgres => {
                use super::postgres::{keep_leases, nodes, wake};
                let settings = postgres_settings(config)?;
                let store = Arc::new(PgStore::open(&settings, clock, metrics).await?);
                tokio::spawn(wake::listen(store.clone(), shutdown.clone()));
                tokio::spawn(keep_leases(store.clone(), shutdown.clone()));
                tokio::spawn(nodes::beat(store.clone(), shutdown.clone()));
                Ok(Backend::Postgres(store))
            }
            #[cfg(not(feature = "postgres"))]
            StoreKind::Postgres => {
                let _ = (clock, metrics, shutdown);
                Err(StoreError::Format(
                    "this herald was built without the `postgres` feature".into(),
                ))
            }
        }
    }

    /// Whether the store failed for good: the embedded store keeps a write error until a
    /// fresh start (the disk may be usable again then); a cluster's database that goes away
    /// comes back to the same node, so it never has.
    pub fn failed_for_good(&self) -> bool {
        match self {
            Backend::Sled(s) => !s.healthy(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => false,
        }
    }

    /// Makes everything written durable, once the engine and the API stopped: the embedded
    /// store's final flush; a cluster's writes are durable already (its node left with the
    /// engine).
    pub async fn close(&self) -> Result<(), StoreError> {
        match self {
            Backend::Sled(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.close())
                    .await
                    .map_err(|e| StoreError::Engine(Arc::new(e)))?
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// Lets go of this handle, the last one, and waits until the store's own threads ended
    /// (the embedded store's committer): its data directory may be opened again after this.
    pub async fn end(self) {
        let committer = match &self {
            Backend::Sled(s) => s.take_committer(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
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
        matches!(self, Backend::Sled(_))
    }

    /// The embedded store, when herald runs on it: for tests that reach into its files.
    pub fn sled(&self) -> Option<&Arc<SledStore>> {
        match self {
            Backend::Sled(s) => Some(s),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }
}

/// Every operation of the contract, each forwarded to the store herald runs on.
impl super::contract::Store for Backend {}

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
pub enum Hold {
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
        Ok(match self {
            Backend::Sled(s) => Queue::take_due(&**s, now, room, limits)
                .await?
                .into_iter()
                .map(|t| t.map_hold(Hold::Sled))
                .collect(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => Queue::take_due(&**s, now, room, limits)
                .await?
                .into_iter()
                .map(|t| t.map_hold(Hold::Postgres))
                .collect(),
        })
    }

    async fn release(&self, hold: Hold, until: Option<Millis>) -> Result<(), StoreError> {
        match (self, hold) {
            (Backend::Sled(s), Hold::Sled(h)) => Queue::release(&**s, h, until).await,
            #[cfg(feature = "postgres")]
            (Backend::Postgres(s), Hold::Postgres(h)) => Queue::release(&**s, h, until).await,
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
        match self {
            Backend::Sled(s) => {
                drop(intake);
                Queue::set_intake(&**s, None)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => Queue::set_intake(
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
                .map(|t| t.map_hold(Hold::Postgres))
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

/// The cluster's store's settings from herald's config: its database's URL (or URL file)
/// parsed, TLS with the bundled roots and `storage.postgres.ca_file`, the pool, the lease and
/// the data directory.
#[cfg(feature = "postgres")]
pub fn postgres_settings(
    config: &Config,
) -> Result<super::postgres::Settings, super::postgres::DbError> {
    use super::postgres::DbError;
    let url = config
        .postgres_url()
        .map_err(|e| DbError::Config(e.to_string()))?;
    let database = crate::config::postgres::parse_url(&url)
        .map_err(|e| DbError::Config(format!("storage.postgres.url {e}")))?;
    let pg = &config.storage.postgres;
    let roots = crate::tls::roots(pg.ca_file.as_deref())
        .map_err(|e| DbError::Tls(format!("storage.postgres.ca_file: {e}")))?;
    let tls = crate::tls::client_builder(&Arc::new(roots))
        .map_err(|e| DbError::Tls(e.to_string()))?
        .with_no_client_auth();
    Ok(super::postgres::Settings {
        database,
        tls,
        pool_size: pg.pool_size,
        lease: pg.lease.0,
        data_dir: config.storage.path.clone(),
    })
}
