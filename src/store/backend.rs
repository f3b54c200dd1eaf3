//! The store the API and the engine use: the embedded sled store of one box, or the PostgreSQL
//! store a cluster of nodes shares (docs/cluster.md). Both answer the same questions; this facade
//! asks the one herald was started with.
//!
//! Reads that are in memory on both (endpoints, plans) stay synchronous. Everything else is
//! async: on sled, reads that may look at many rows (the log, its filters, an event with many
//! deliveries) run on a blocking thread so they never hold up the async workers; small point
//! reads and writes run in place.

use std::sync::Arc;

use bytes::Bytes;

#[cfg(feature = "postgres")]
use super::postgres::PgStore;
use super::{Changed, DeliveryFilter, IngestOutcome, NewEvent, Stats, Store, StoreError};
use crate::clock::Millis;
use crate::model::{Attempt, ClientCertificate, Delivery, Endpoint, EventMeta, PortalSession};
use crate::policy::breaker::Breaker;
use crate::policy::quota::{Limits, Windows};

/// A node of a cluster as the others see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: String,
    pub name: String,
    pub started_at: Millis,
    pub seen_at: Millis,
    /// Deliveries it holds leases on now.
    pub leases: i64,
}

/// Which store herald runs on.
#[derive(Clone)]
pub enum Backend {
    Sled(Arc<Store>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<PgStore>),
}

/// Calls the same synchronous method on whichever store it is.
macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Backend::Sled($s) => $e,
            #[cfg(feature = "postgres")]
            Backend::Postgres($s) => $e,
        }
    };
}

/// The same async method on both stores.
macro_rules! both_async {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Backend::Sled($s) => $e.await,
            #[cfg(feature = "postgres")]
            Backend::Postgres($s) => $e.await,
        }
    };
}

/// A sled read on a blocking thread; the PostgreSQL read awaited.
macro_rules! read {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Backend::Sled(store) => {
                let $s = store.clone();
                tokio::task::spawn_blocking(move || $e)
                    .await
                    .map_err(|e| StoreError::Database(format!("a storage read failed: {e}")))?
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres($s) => $e.await,
        }
    };
}

impl Backend {
    /// The embedded store, when herald runs on it (its due index, folding and checkpoints have
    /// no counterpart in a cluster).
    pub fn sled(&self) -> Option<&Arc<Store>> {
        match self {
            Backend::Sled(s) => Some(s),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }

    /// Stores events durably; returns once they are committed.
    pub async fn ingest(&self, events: Vec<NewEvent>) -> Result<Vec<IngestOutcome>, StoreError> {
        both_async!(self, s => s.ingest(events))
    }

    /// The version of the endpoints and plans in memory, to pass to
    /// [`Backend::ingest_fanned_out`] with events fanned out over them (take it first). `None`
    /// on one machine, whose copy is always the store's.
    pub fn directory_mark(&self) -> Option<i64> {
        match self {
            Backend::Sled(_) => None,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => Some(s.directory_mark()),
        }
    }

    /// Stores events fanned out over the endpoints in memory at `mark`
    /// ([`Backend::directory_mark`]). In a cluster, [`StoreError::Stale`] (nothing stored) when
    /// another node changed the endpoints or plans meanwhile: bring them up to date
    /// ([`Backend::fresh_directory`]) and fan out again.
    pub async fn ingest_fanned_out(
        &self,
        events: Vec<NewEvent>,
        mark: Option<i64>,
    ) -> Result<Vec<IngestOutcome>, StoreError> {
        match self {
            Backend::Sled(s) => s.ingest(events).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.ingest_marked(events, mark).await,
        }
    }

    /// Makes the endpoints and plans in memory reflect every change committed before now (in a
    /// cluster, other nodes' changes arrive by notice a moment later; one small query).
    pub async fn fresh_directory(&self) -> Result<(), StoreError> {
        match self {
            Backend::Sled(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.fresh_directory().await,
        }
    }

    // Endpoints and plans: in memory on every node.

    pub fn endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        both!(self, s => s.endpoint(id))
    }

    pub fn account_endpoints(&self, account_id: &str) -> Vec<Arc<Endpoint>> {
        both!(self, s => s.account_endpoints(account_id))
    }

    pub fn account_ids(&self) -> Vec<String> {
        both!(self, s => s.account_ids())
    }

    pub fn account_plan(&self, account_id: &str) -> Option<String> {
        both!(self, s => s.account_plan(account_id))
    }

    pub async fn create_endpoint(
        &self,
        ep: Endpoint,
        max_per_account: usize,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        both_async!(self, s => s.create_endpoint(ep, max_per_account))
    }

    pub async fn change_endpoint<E: From<StoreError>>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Endpoint) -> Result<bool, E>,
    ) -> Result<Option<(Arc<Endpoint>, bool)>, E> {
        both_async!(self, s => s.change_endpoint(id, f))
    }

    pub async fn put_endpoint(&self, ep: Endpoint) -> Result<Arc<Endpoint>, StoreError> {
        both_async!(self, s => s.put_endpoint(ep))
    }

    pub async fn delete_endpoint(&self, id: &str) -> Result<bool, StoreError> {
        both_async!(self, s => s.delete_endpoint(id))
    }

    pub async fn set_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str, ClientCertificate)>,
        now: Millis,
    ) -> Result<Option<Arc<Endpoint>>, StoreError> {
        both_async!(self, s => s.set_client_certificate(id, pair, now))
    }

    pub async fn client_certificate_pem(
        &self,
        id: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        match self {
            Backend::Sled(s) => s.client_certificate_pem(id),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.client_certificate_pem(id).await,
        }
    }

    // Accounts: plans, secrets, quotas.

    pub async fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> Result<(), StoreError> {
        both_async!(self, s => s.set_account_plan(account_id, plan))
    }

    pub async fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        match self {
            Backend::Sled(s) => s.account_secret(account_id, name),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.account_secret(account_id, name).await,
        }
    }

    pub async fn set_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        both_async!(self, s => s.set_account_secret(account_id, name, value))
    }

    /// Counts one attempt in the account's windows unless that goes over `limits`.
    pub async fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> Result<bool, StoreError> {
        match self {
            Backend::Sled(s) => s.quota_take(account_id, w, limits),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.quota_take(account_id, w, limits).await,
        }
    }

    pub async fn quota_usage(
        &self,
        account_id: &str,
        w: Windows,
    ) -> Result<(u64, u64), StoreError> {
        match self {
            Backend::Sled(s) => s.quota_usage(account_id, w),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.quota_usage(account_id, w).await,
        }
    }

    /// An endpoint's circuit breaker (closed, never failed, when none is kept).
    pub async fn breaker(&self, endpoint_id: &str) -> Result<Breaker, StoreError> {
        match self {
            Backend::Sled(s) => s.breaker(endpoint_id),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.breaker(endpoint_id).await,
        }
    }

    /// Changes an endpoint's circuit breaker with `f`, one change at a time (on a cluster, under
    /// the row's lock: every node's changes apply to the same state). When it closes, the
    /// deliveries it held go at once (`now`).
    pub async fn change_breaker<T>(
        &self,
        endpoint_id: &str,
        now: Millis,
        f: impl FnOnce(&mut Breaker) -> T,
    ) -> Result<T, StoreError> {
        match self {
            Backend::Sled(s) => {
                let _ = now;
                s.change_breaker(endpoint_id, f)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.change_breaker(endpoint_id, now, f).await,
        }
    }

    /// Every circuit breaker that is not closed, by endpoint id.
    pub async fn open_breakers(&self) -> Result<Vec<(String, Breaker)>, StoreError> {
        match self {
            Backend::Sled(s) => s.open_breakers(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.open_breakers().await,
        }
    }

    // Portal sessions.

    pub async fn create_portal_session(
        &self,
        session: &PortalSession,
        hash: [u8; 32],
    ) -> Result<(), StoreError> {
        both_async!(self, s => s.create_portal_session(session, hash))
    }

    pub async fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> Result<Option<PortalSession>, StoreError> {
        match self {
            Backend::Sled(s) => s.portal_session(token, now),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.portal_session(token, now).await,
        }
    }

    pub async fn revoke_portal_session(&self, id: &str) -> Result<bool, StoreError> {
        both_async!(self, s => s.revoke_portal_session(id))
    }

    // The log.

    pub async fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        let id = id.to_string();
        read!(self, s => s.delivery(&id))
    }

    pub async fn event(&self, id: &str) -> Result<Option<(EventMeta, Bytes)>, StoreError> {
        let id = id.to_string();
        read!(self, s => s.event(&id))
    }

    pub async fn event_with_deliveries(
        &self,
        id: &str,
    ) -> Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError> {
        let id = id.to_string();
        read!(self, s => s.event_with_deliveries(&id))
    }

    pub async fn attempts(&self, delivery_id: &str) -> Result<Vec<Attempt>, StoreError> {
        let id = delivery_id.to_string();
        read!(self, s => s.attempts(&id))
    }

    /// A page of deliveries matching `filter`, newest first, and the cursor of the next page.
    pub async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<Delivery>, Option<String>), StoreError> {
        read!(self, s => s.list_deliveries(&filter, limit, cursor.as_deref()))
    }

    /// An ordered delivery's key and the delivery ahead of it in its lane, if any.
    pub async fn ordering_of(
        &self,
        d: &Delivery,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        match self {
            Backend::Sled(s) => s.ordering_of(d),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.ordering_of(d).await,
        }
    }

    /// Changes a delivery unless an attempt holds it ([`Changed::Busy`]).
    pub async fn change_delivery<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)> + Send + 'static,
    ) -> Result<Changed<T>, StoreError> {
        let id = id.to_string();
        read!(self, s => s.change_delivery(&id, f))
    }

    /// A deleted endpoint's waiting deliveries are due now (their attempts record
    /// `no_endpoint`). Returns how many.
    pub async fn expedite_endpoint(
        &self,
        endpoint_id: &str,
        now: Millis,
    ) -> Result<u64, StoreError> {
        match self {
            Backend::Sled(s) => s.expedite_endpoint(endpoint_id, now).map(|n| n as u64),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.expedite_endpoint(endpoint_id, now).await,
        }
    }

    /// How many of the endpoint's deliveries are pending.
    pub async fn endpoint_pending(&self, endpoint_id: &str) -> Result<u64, StoreError> {
        match self {
            Backend::Sled(s) => Ok(s.due().lane_len(super::lane_of(Some(endpoint_id))) as u64),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.endpoint_pending(endpoint_id).await,
        }
    }

    // Health and figures.

    /// Whether storage takes writes now.
    pub async fn healthy(&self) -> bool {
        match self {
            Backend::Sled(s) => s.healthy(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.healthy().await,
        }
    }

    /// Deliveries by state.
    pub async fn stats(&self) -> Result<Stats, StoreError> {
        match self {
            Backend::Sled(s) => Ok(s.stats().copy()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.stats().await,
        }
    }

    /// How many deliveries are due now, and when the oldest pending one fell due.
    pub async fn due_summary(&self, now: Millis) -> Result<(usize, Option<Millis>), StoreError> {
        match self {
            Backend::Sled(s) => {
                let _ = now; // the due index knows
                Ok((s.due().len(), s.due().oldest()))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.due_summary(now).await,
        }
    }

    /// In a cluster: this node's id and every node seen lately (`None` on one box).
    pub async fn nodes(&self) -> Result<Option<(String, Vec<Node>)>, StoreError> {
        match self {
            Backend::Sled(_) => Ok(None),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => Ok(Some((s.node().to_string(), s.nodes().await?))),
        }
    }

    /// Bytes the store takes on disk (the data directory; the cluster's database).
    pub async fn size_on_disk(&self) -> u64 {
        match self {
            Backend::Sled(s) => s.size_on_disk(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(s) => s.size_on_disk().await,
        }
    }
}
