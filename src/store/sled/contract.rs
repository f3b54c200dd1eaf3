//! The store contract ([`crate::store::contract`]) on the embedded store. Reads that may look
//! at many rows (the log, its filters, an event with many deliveries, a change of a delivery)
//! run on a blocking thread, with a handle of the store of their own. Small point reads and
//! writes run in place.

use std::future::{ready, Future};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::Bytes;

use super::queue::SledClaim;
use super::{SledStore, StoreError};
use crate::clock::Millis;
use crate::model::{
    Attempt, ClientCertificate, Delivery, Endpoint, EventMeta, PortalSession, RateLimit,
};
use crate::policy::alerts::{AlertClaim, AlertMark, Claimed};
use crate::policy::breaker::Breaker;
use crate::policy::quota::{Limits, Windows};
use crate::store::contract::{
    Accounts, Archive, DeliveryLog, Directory, Ingest, Intake, Minutes, Queue, Retention, Vitals,
};
use crate::store::{
    Changed, DeliveryFilter, EventHistory, Fence, IngestOutcome, Minute, NewEvent, Node, Purged,
    Retained, Stats, Swept, TakeLimits, Taken,
};

/// Runs `read` on a blocking thread with a handle of the store.
pub(super) async fn blocking<T: Send + 'static>(
    store: &SledStore,
    read: impl FnOnce(&SledStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = store.this.upgrade().ok_or(StoreError::Closed)?;
    tokio::task::spawn_blocking(move || read(&store))
        .await
        .map_err(|e| StoreError::Engine(Arc::new(e)))?
}

impl Ingest for SledStore {
    /// One box: its copy of the endpoints is the store's, a fan-out is never stale.
    async fn ingest<F, E>(&self, mut fan_out: F) -> Result<Vec<IngestOutcome>, E>
    where
        F: FnMut() -> Result<Vec<NewEvent>, E> + Send,
        E: From<StoreError> + Send,
    {
        let events = fan_out()?;
        Ok(SledStore::ingest(self, events).await?)
    }
}

impl Directory for SledStore {
    fn fresh_directory(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        ready(Ok(()))
    }

    fn endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        SledStore::endpoint(self, id)
    }

    fn account_endpoints(&self, account_id: &str) -> Vec<Arc<Endpoint>> {
        SledStore::account_endpoints(self, account_id)
    }

    fn account_ids(&self) -> Vec<String> {
        SledStore::account_ids(self)
    }

    fn account_plan(&self, account_id: &str) -> Option<String> {
        SledStore::account_plan(self, account_id)
    }

    fn create_endpoint(
        &self,
        ep: Endpoint,
        max_per_account: usize,
    ) -> impl Future<Output = Result<Option<Arc<Endpoint>>, StoreError>> + Send {
        SledStore::create_endpoint(self, ep, max_per_account)
    }

    fn change_endpoint<E: From<StoreError> + Send>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Endpoint) -> Result<bool, E> + Send,
    ) -> impl Future<Output = Result<Option<(Arc<Endpoint>, bool)>, E>> + Send {
        SledStore::change_endpoint(self, id, f)
    }

    fn put_endpoint(
        &self,
        ep: Endpoint,
    ) -> impl Future<Output = Result<Arc<Endpoint>, StoreError>> + Send {
        SledStore::put_endpoint(self, ep)
    }

    fn delete_endpoint(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send {
        SledStore::delete_endpoint(self, id)
    }

    fn set_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str, ClientCertificate)>,
        now: Millis,
    ) -> impl Future<Output = Result<Option<Arc<Endpoint>>, StoreError>> + Send {
        SledStore::set_client_certificate(self, id, pair, now)
    }

    fn client_certificate_pem(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(String, String)>, StoreError>> + Send {
        ready(SledStore::client_certificate_pem(self, id))
    }
}

impl Accounts for SledStore {
    fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        SledStore::set_account_plan(self, account_id, plan)
    }

    fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        ready(SledStore::account_secret(self, account_id, name))
    }

    fn set_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        SledStore::set_account_secret(self, account_id, name, value)
    }

    fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        ready(SledStore::quota_take(self, account_id, w, limits))
    }

    async fn set_quota_usage(
        &self,
        account_id: &str,
        w: Windows,
        used: (u64, u64),
    ) -> Result<(), StoreError> {
        SledStore::set_quota_usage(self, account_id, w, used)
    }

    fn quota_usage(
        &self,
        account_id: &str,
        w: Windows,
    ) -> impl Future<Output = Result<(u64, u64), StoreError>> + Send {
        ready(SledStore::quota_usage(self, account_id, w))
    }

    fn breaker(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<Breaker, StoreError>> + Send {
        ready(SledStore::breaker(self, endpoint_id))
    }

    fn change_breaker<T: Send>(
        &self,
        endpoint_id: &str,
        _now: Millis,
        f: impl FnOnce(&mut Breaker) -> T + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        // The due index lets the deliveries a closing breaker held go by itself.
        ready(SledStore::change_breaker(self, endpoint_id, f))
    }

    fn take_token(
        &self,
        endpoint_id: &str,
        limit: RateLimit,
        now: Millis,
    ) -> impl Future<Output = Result<Result<(), Millis>, StoreError>> + Send {
        ready(Ok(SledStore::take_token(self, endpoint_id, limit, now)))
    }

    fn open_breakers(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Breaker)>, StoreError>> + Send {
        ready(SledStore::open_breakers(self))
    }

    fn alert_emails(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        ready(SledStore::alert_emails(self, account_id))
    }

    fn set_alert_emails(
        &self,
        account_id: &str,
        emails: Vec<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        SledStore::set_alert_emails(self, account_id, emails)
    }

    fn all_alert_emails(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Vec<String>)>, StoreError>> + Send {
        ready(SledStore::all_alert_emails(self))
    }

    fn claim_alert(
        &self,
        claim: AlertClaim<'_>,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send {
        ready(SledStore::claim_alert(self, &claim))
    }

    fn give_back_alert(
        &self,
        endpoint_id: &str,
        after: AlertMark,
        before: AlertMark,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        ready(SledStore::give_back_alert(self, endpoint_id, after, before))
    }

    fn create_portal_session(
        &self,
        session: &PortalSession,
        hash: [u8; 32],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        SledStore::create_portal_session(self, session, hash)
    }

    fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<PortalSession>, StoreError>> + Send {
        ready(SledStore::portal_session(self, token, now))
    }

    fn revoke_portal_session(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        SledStore::revoke_portal_session(self, id)
    }

    async fn purge_account(&self, account_id: &str) -> Result<Purged, StoreError> {
        SledStore::purge_account(self, account_id).await
    }
}

impl DeliveryLog for SledStore {
    fn delivery(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Delivery>, StoreError>> + Send {
        let id = id.to_string();
        blocking(self, move |s| s.delivery(&id))
    }

    fn event(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes)>, StoreError>> + Send {
        let id = id.to_string();
        blocking(self, move |s| s.event(&id))
    }

    fn event_with_deliveries(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError>> + Send
    {
        let id = id.to_string();
        blocking(self, move |s| s.event_with_deliveries(&id))
    }

    fn attempts(
        &self,
        delivery_id: &str,
    ) -> impl Future<Output = Result<Vec<Attempt>, StoreError>> + Send {
        let id = delivery_id.to_string();
        blocking(self, move |s| s.attempts(&id))
    }

    fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> impl Future<Output = Result<(Vec<Delivery>, Option<String>), StoreError>> + Send {
        blocking(self, move |s| {
            s.list_deliveries(&filter, limit, cursor.as_deref())
        })
    }

    fn ordering_of(
        &self,
        d: &Delivery,
    ) -> impl Future<Output = Result<Option<(String, Option<String>)>, StoreError>> + Send {
        ready(SledStore::ordering_of(self, d))
    }

    fn change_delivery<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)> + Send + 'static,
    ) -> impl Future<Output = Result<Changed<T>, StoreError>> + Send {
        let id = id.to_string();
        blocking(self, move |s| s.change_delivery(&id, f))
    }

    fn record_attempt(
        &self,
        was: &Delivery,
        now: &Delivery,
        attempt: &Attempt,
        _fence: Fence,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        // The engine holds the delivery's claim for the whole attempt.
        ready(SledStore::update_delivery(self, was, now, Some(attempt)))
    }

    fn is_held(&self, delivery_id: &str) -> bool {
        SledStore::is_claimed(self, delivery_id)
    }

    fn expedite_endpoint(
        &self,
        endpoint_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        ready(SledStore::expedite_endpoint(self, endpoint_id, now).map(|n| n as u64))
    }

    fn endpoint_pending(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let lane = crate::store::lane_of(Some(endpoint_id));
        ready(Ok(self.due().lane_len(lane) as u64))
    }
}

impl Vitals for SledStore {
    fn kind(&self) -> &'static str {
        "sled"
    }

    fn healthy(&self) -> impl Future<Output = bool> + Send {
        ready(SledStore::healthy(self))
    }

    fn stats(&self) -> impl Future<Output = Result<Stats, StoreError>> + Send {
        ready(Ok(SledStore::stats(self).copy()))
    }

    fn due_summary(
        &self,
        _now: Millis,
    ) -> impl Future<Output = Result<(usize, Option<Millis>), StoreError>> + Send {
        // The due index knows without the time.
        ready(Ok((self.due().len(), self.due().oldest())))
    }

    fn nodes(
        &self,
    ) -> impl Future<Output = Result<Option<(String, Vec<Node>)>, StoreError>> + Send {
        ready(Ok(None))
    }

    fn size_on_disk(&self) -> impl Future<Output = u64> + Send {
        ready(SledStore::size_on_disk(self))
    }
}

impl Queue for SledStore {
    type Hold = SledClaim;

    fn shared(&self) -> bool {
        false
    }

    fn take_due(
        &self,
        now: Millis,
        room: usize,
        _limits: &TakeLimits,
    ) -> impl Future<Output = Result<Vec<Taken<SledClaim>>, StoreError>> + Send {
        ready(Ok(self.take_due_now(now, room)))
    }

    fn release(
        &self,
        hold: SledClaim,
        until: Option<Millis>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.release_taken(hold, until);
        ready(Ok(()))
    }

    fn next_due(&self) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send {
        ready(Ok(self.due().next_due()))
    }

    fn queue_changed(&self) -> impl Future<Output = ()> + Send + '_ {
        self.due().changed()
    }

    fn set_intake(&self, _intake: Option<Arc<dyn Intake<SledClaim>>>) {}

    fn leave(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        ready(Ok(0))
    }
}

impl Retention for SledStore {
    fn sweep(
        &self,
        now: Millis,
        retained: Retained,
        stop: &AtomicBool,
    ) -> impl Future<Output = Swept> + Send {
        SledStore::sweep(self, now, retained, stop)
    }
}

impl Archive for SledStore {
    fn account_secrets(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, String, String)>, StoreError>> + Send {
        ready(SledStore::account_secrets(self))
    }

    async fn export_events(
        &self,
        before: Option<String>,
        limit: usize,
    ) -> Result<(Vec<EventHistory>, Option<String>), StoreError> {
        let (page, next) =
            blocking(self, move |s| s.export_events(before.as_deref(), limit)).await?;
        // Only what is durable: the sync ends after every commit cycle in flight at the read
        // (fsynced, or failed and undone).
        SledStore::sync(self).await?;
        let page = blocking(self, move |s| s.still_stored(page)).await?;
        Ok((page, next))
    }

    async fn is_empty(&self) -> Result<bool, StoreError> {
        blocking(self, |s| s.is_empty()).await
    }

    async fn import_events(
        &self,
        events: Vec<EventHistory>,
        now: Millis,
    ) -> Result<(), StoreError> {
        blocking(self, move |s| s.import_events(events, now)).await
    }

    async fn finish_import(&self) -> Result<(), StoreError> {
        // Lanes come back from the pending deliveries when the store opens.
        Ok(())
    }
}

impl Minutes for SledStore {
    async fn add_minutes(&self, minutes: Vec<(String, Minute)>) -> Result<(), StoreError> {
        blocking(self, move |s| s.add_minutes(minutes)).await
    }

    async fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> Result<Vec<Minute>, StoreError> {
        let id = endpoint_id.to_string();
        blocking(self, move |s| s.endpoint_minutes(&id, from)).await
    }

    async fn trim_minutes(&self, before: Millis) -> Result<u64, StoreError> {
        blocking(self, move |s| s.trim_minutes(before)).await
    }
}
