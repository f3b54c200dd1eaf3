//! The store contract ([`crate::store::contract`]) on the cluster's PostgreSQL store: every
//! operation is one of [`PgStore`]'s own, in the file of its concern.

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::Bytes;

use super::{PgLease, PgStore};
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
    Retained, Stats, StoreError, Swept, TakeLimits, Taken,
};

impl Ingest for PgStore {
    fn ingest<F, E>(&self, fan_out: F) -> impl Future<Output = Result<Vec<IngestOutcome>, E>> + Send
    where
        F: FnMut() -> Result<Vec<NewEvent>, E> + Send,
        E: From<StoreError> + Send,
    {
        PgStore::ingest_fanned_out(self, fan_out)
    }
}

impl Directory for PgStore {
    fn fresh_directory(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        PgStore::fresh_directory(self)
    }

    fn endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        PgStore::endpoint(self, id)
    }

    fn account_endpoints(&self, account_id: &str) -> Vec<Arc<Endpoint>> {
        PgStore::account_endpoints(self, account_id)
    }

    fn account_ids(&self) -> Vec<String> {
        PgStore::account_ids(self)
    }

    fn account_plan(&self, account_id: &str) -> Option<String> {
        PgStore::account_plan(self, account_id)
    }

    fn create_endpoint(
        &self,
        ep: Endpoint,
        max_per_account: usize,
    ) -> impl Future<Output = Result<Option<Arc<Endpoint>>, StoreError>> + Send {
        PgStore::create_endpoint(self, ep, max_per_account)
    }

    fn change_endpoint<E: From<StoreError> + Send>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Endpoint) -> Result<bool, E> + Send,
    ) -> impl Future<Output = Result<Option<(Arc<Endpoint>, bool)>, E>> + Send {
        PgStore::change_endpoint(self, id, f)
    }

    fn put_endpoint(
        &self,
        ep: Endpoint,
    ) -> impl Future<Output = Result<Arc<Endpoint>, StoreError>> + Send {
        PgStore::put_endpoint(self, ep)
    }

    fn delete_endpoint(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send {
        PgStore::delete_endpoint(self, id)
    }

    fn set_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str, ClientCertificate)>,
        now: Millis,
    ) -> impl Future<Output = Result<Option<Arc<Endpoint>>, StoreError>> + Send {
        PgStore::set_client_certificate(self, id, pair, now)
    }

    fn client_certificate_pem(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(String, String)>, StoreError>> + Send {
        PgStore::client_certificate_pem(self, id)
    }
}

impl Accounts for PgStore {
    fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        PgStore::set_account_plan(self, account_id, plan)
    }

    fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        PgStore::account_secret(self, account_id, name)
    }

    fn set_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        PgStore::set_account_secret(self, account_id, name, value)
    }

    fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        PgStore::quota_take(self, account_id, w, limits)
    }

    async fn set_quota_usage(
        &self,
        account_id: &str,
        w: Windows,
        used: (u64, u64),
    ) -> Result<(), StoreError> {
        PgStore::set_quota_usage(self, account_id, w, used).await
    }

    fn quota_usage(
        &self,
        account_id: &str,
        w: Windows,
    ) -> impl Future<Output = Result<(u64, u64), StoreError>> + Send {
        PgStore::quota_usage(self, account_id, w)
    }

    fn breaker(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<Breaker, StoreError>> + Send {
        PgStore::breaker(self, endpoint_id)
    }

    fn change_breaker<T: Send>(
        &self,
        endpoint_id: &str,
        now: Millis,
        f: impl FnOnce(&mut Breaker) -> T + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send {
        PgStore::change_breaker(self, endpoint_id, now, f)
    }

    fn take_token(
        &self,
        endpoint_id: &str,
        limit: RateLimit,
        now: Millis,
    ) -> impl Future<Output = Result<Result<(), Millis>, StoreError>> + Send {
        PgStore::take_token(self, endpoint_id, limit, now)
    }

    fn open_breakers(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Breaker)>, StoreError>> + Send {
        PgStore::open_breakers(self)
    }

    fn alert_emails(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send {
        PgStore::alert_emails(self, account_id)
    }

    fn set_alert_emails(
        &self,
        account_id: &str,
        emails: Vec<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        PgStore::set_alert_emails(self, account_id, emails)
    }

    fn all_alert_emails(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Vec<String>)>, StoreError>> + Send {
        PgStore::all_alert_emails(self)
    }

    fn claim_alert(
        &self,
        claim: AlertClaim<'_>,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send {
        PgStore::claim_alert(self, claim)
    }

    fn give_back_alert(
        &self,
        endpoint_id: &str,
        after: AlertMark,
        before: AlertMark,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        PgStore::give_back_alert(self, endpoint_id, after, before)
    }

    fn create_portal_session(
        &self,
        session: &PortalSession,
        hash: [u8; 32],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        PgStore::create_portal_session(self, session, hash)
    }

    fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<PortalSession>, StoreError>> + Send {
        PgStore::portal_session(self, token, now)
    }

    fn revoke_portal_session(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        PgStore::revoke_portal_session(self, id)
    }

    async fn purge_account(&self, account_id: &str) -> Result<Purged, StoreError> {
        PgStore::purge_account(self, account_id).await
    }
}

impl DeliveryLog for PgStore {
    fn delivery(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Delivery>, StoreError>> + Send {
        PgStore::delivery(self, id)
    }

    fn event(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes)>, StoreError>> + Send {
        PgStore::event(self, id)
    }

    fn event_with_deliveries(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError>> + Send
    {
        PgStore::event_with_deliveries(self, id)
    }

    fn attempts(
        &self,
        delivery_id: &str,
    ) -> impl Future<Output = Result<Vec<Attempt>, StoreError>> + Send {
        PgStore::attempts(self, delivery_id)
    }

    async fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<Delivery>, Option<String>), StoreError> {
        PgStore::list_deliveries(self, &filter, limit, cursor.as_deref()).await
    }

    fn ordering_of(
        &self,
        d: &Delivery,
    ) -> impl Future<Output = Result<Option<(String, Option<String>)>, StoreError>> + Send {
        PgStore::ordering_of(self, d)
    }

    fn change_delivery<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)> + Send + 'static,
    ) -> impl Future<Output = Result<Changed<T>, StoreError>> + Send {
        PgStore::change_delivery(self, id, f)
    }

    async fn record_attempt(
        &self,
        _was: &Delivery,
        now: &Delivery,
        attempt: &Attempt,
        fence: Fence,
    ) -> Result<(), StoreError> {
        match fence {
            Fence::Lease(claim) => PgStore::finish(self, claim, now, Some(attempt)).await,
            Fence::Claimed => Err(StoreError::LeaseLost),
        }
    }

    fn is_held(&self, delivery_id: &str) -> bool {
        PgStore::holds(self, delivery_id)
    }

    fn expedite_endpoint(
        &self,
        endpoint_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        PgStore::expedite_endpoint(self, endpoint_id, now)
    }

    fn endpoint_pending(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        PgStore::endpoint_pending(self, endpoint_id)
    }
}

impl Vitals for PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn healthy(&self) -> impl Future<Output = bool> + Send {
        PgStore::healthy(self)
    }

    fn stats(&self) -> impl Future<Output = Result<Stats, StoreError>> + Send {
        PgStore::stats(self)
    }

    fn due_summary(
        &self,
        now: Millis,
    ) -> impl Future<Output = Result<(usize, Option<Millis>), StoreError>> + Send {
        PgStore::due_summary(self, now)
    }

    async fn nodes(&self) -> Result<Option<(String, Vec<Node>)>, StoreError> {
        Ok(Some((self.node().to_string(), PgStore::nodes(self).await?)))
    }

    fn size_on_disk(&self) -> impl Future<Output = u64> + Send {
        PgStore::size_on_disk(self)
    }
}

impl Queue for PgStore {
    type Hold = PgLease;

    fn shared(&self) -> bool {
        true
    }

    fn take_due(
        &self,
        now: Millis,
        room: usize,
        limits: &TakeLimits,
    ) -> impl Future<Output = Result<Vec<Taken<PgLease>>, StoreError>> + Send {
        PgStore::claim_due_within(
            self,
            now,
            room as i64,
            &limits.endpoints,
            &limits.allowed,
            limits.others as i64,
        )
    }

    async fn release(&self, hold: PgLease, until: Option<Millis>) -> Result<(), StoreError> {
        match until {
            // The attempt's record gave the lease up.
            None => Ok(()),
            Some(at) => PgStore::hold(self, hold.claim, &hold.delivery_id, at).await,
        }
    }

    fn next_due(&self) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send {
        PgStore::next_due(self)
    }

    fn queue_changed(&self) -> impl Future<Output = ()> + Send + '_ {
        let wake = self.wake();
        async move { wake.notified().await }
    }

    fn set_intake(&self, intake: Option<Arc<dyn Intake<PgLease>>>) {
        PgStore::set_intake(self, intake)
    }

    fn leave(&self) -> impl Future<Output = Result<u64, StoreError>> + Send {
        PgStore::leave(self)
    }
}

impl Retention for PgStore {
    fn sweep(
        &self,
        now: Millis,
        retained: Retained,
        stop: &AtomicBool,
    ) -> impl Future<Output = Swept> + Send {
        PgStore::sweep(self, now, retained, stop)
    }
}

impl Archive for PgStore {
    async fn account_secrets(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        PgStore::account_secrets(self).await
    }

    async fn export_events(
        &self,
        before: Option<String>,
        limit: usize,
    ) -> Result<(Vec<EventHistory>, Option<String>), StoreError> {
        PgStore::export_events(self, before.as_deref(), limit).await
    }

    async fn is_empty(&self) -> Result<bool, StoreError> {
        PgStore::is_empty(self).await
    }

    async fn import_events(
        &self,
        events: Vec<EventHistory>,
        now: Millis,
    ) -> Result<(), StoreError> {
        PgStore::import_events(self, events, now).await
    }

    async fn finish_import(&self) -> Result<(), StoreError> {
        PgStore::finish_import(self).await
    }
}

impl Minutes for PgStore {
    fn add_minutes(
        &self,
        minutes: Vec<(String, Minute)>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        PgStore::add_minutes(self, minutes)
    }

    fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> impl Future<Output = Result<Vec<Minute>, StoreError>> + Send {
        PgStore::endpoint_minutes(self, endpoint_id, from)
    }

    fn trim_minutes(&self, before: Millis) -> impl Future<Output = Result<u64, StoreError>> + Send {
        PgStore::trim_minutes(self, before)
    }
}
