//! The shared delivery queue (docs/cluster.md): work is leased, never owned.
//!
//! A node claims due deliveries with `FOR UPDATE SKIP LOCKED` (claimers never wait on each
//! other's rows) and stamps each with its id and a claim token; the claim moves the delivery's
//! `due_at` to the lease's end, so a lease that lapses (its node died or stalled) makes the
//! delivery due again for any node, with no sweep. A node renews the leases it is still working
//! on, and every write of an attempt's result is fenced by the token: a node whose lease passed
//! to another learns so ([`StoreError::LeaseLost`]) and records nothing (the other node
//! attempts it: at least once). `SIGTERM` releases the node's leases at once ([`release_all`]).
//!
//! Ordered endpoints (docs/delivery-contract.md): a delivery with a lane (its endpoint and ordering
//! key) is claimed only when no earlier delivery of its lane is unfinished (pending, whether due,
//! waiting for a retry or leased), so a key has one delivery in flight in the whole cluster and the
//! next waits until the one ahead has ended. Two nodes claiming at once cannot both pass a head:
//! the head is pending until the transaction that ends it commits. "Ahead" is by `lane_seq`, which
//! ingest takes under the lane's lock: the order of commits, whichever nodes made them (event ids,
//! minted by each node's clock, are not).
//!
//! Claims, renewals, holds and results commit asynchronously ([`Database::queue_client`]): none
//! acknowledges anything, and a result the database's crash loses is attempted again.
//!
//! [`release_all`]: PgStore::release_all
//! [`Database::queue_client`]: super::Database::queue_client

use bytes::Bytes;
use tokio_postgres::Row;

use super::reads::{delivery_from, DELIVERY_COLUMNS};
use super::rows::DUE_CHANNEL;
use super::PgStore;
use herald_core::clock::Millis;
use herald_core::ids::{self, DELIVERY};
use herald_core::model::{Attempt, Delivery, EventMeta};
use herald_store::contract::Intake;
use herald_store::contract::Queue;
use herald_store::{DueDelivery, Fence, StoreError, Taken};
use herald_store::{TakeLimits, Taking};
use std::future::Future;
use std::sync::Arc;

/// What holds a delivery this node took: its lease's claim, which fences its writes.
pub struct PgLease {
    pub(super) claim: i64,
    pub(super) delivery_id: String,
}

impl PgLease {
    /// The lease's claim number.
    pub fn claim(&self) -> i64 {
        self.claim
    }
}

/// A delivery leased to this node under `claim`, as the scheduler takes it.
pub(super) fn leased(claim: i64, due: DueDelivery) -> Taken<PgLease> {
    let delivery_id = due.delivery.id.clone();
    Taken {
        due,
        fence: Fence::Lease(claim),
        hold: PgLease { claim, delivery_id },
    }
}

/// The leases of this node, shared by its queue and its ingest.
#[derive(Default)]
pub(super) struct Leases {
    /// Delivery id → claim of every lease whose attempt has not finished, renewed by
    /// [`keep_leases`] until it does.
    held: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    /// Deliveries whose result is being written: still held (and renewed) until it is, since a
    /// slow write must not let the lease lapse and another node attempt them again; a renewal
    /// that finds one given up meanwhile is the write's doing, not a lost lease.
    finishing: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Where ingest hands fresh deliveries to this node's engine, while it runs.
    intake: std::sync::RwLock<Option<std::sync::Arc<dyn Intake<PgLease>>>>,
}

impl Leases {
    pub(super) fn lock_held(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, i64>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_finishing(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.finishing.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_intake(&self, intake: Option<std::sync::Arc<dyn Intake<PgLease>>>) {
        *self.intake.write().unwrap_or_else(|e| e.into_inner()) = intake;
    }

    pub(super) fn intake(&self) -> Option<std::sync::Arc<dyn Intake<PgLease>>> {
        self.intake
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Endpoints a claim looks for due work of, beyond those the node works on already.
const DISCOVER: i32 = 256;

/// The claim, endpoint by endpoint (a slow endpoint's backlog is never scanned to find another
/// endpoint's work): of each endpoint `$6[i]` the node works on, up to `$7[i]` deliveries; of
/// each of [`DISCOVER`] other endpoints with pending deliveries (walked over the
/// `(endpoint_id, due_at)` index from `$9`), up to `$8`; of deliveries without an endpoint, up to
/// `$8`; at most `$2` in all. Each endpoint's are its oldest due, skipping rows other claims
/// hold, those whose lane has an earlier delivery unfinished, and those this node is attempting
/// (`$11`: a lease of its own that lapsed, as when the node stalled, is renewed, not claimed
/// again for a second attempt). The claimed come back with
/// [`DELIVERY_COLUMNS`], then their event's columns.
static CLAIM: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "WITH RECURSIVE others(endpoint_id, due_at, n) AS (
             (SELECT endpoint_id, due_at, 1 FROM deliveries
              WHERE due_at IS NOT NULL AND endpoint_id > $9
              ORDER BY endpoint_id, due_at LIMIT 1)
             UNION ALL
             SELECT step.endpoint_id, step.due_at, others.n + 1
             FROM others CROSS JOIN LATERAL (
                 SELECT endpoint_id, due_at FROM deliveries
                 WHERE due_at IS NOT NULL AND endpoint_id > others.endpoint_id
                 ORDER BY endpoint_id, due_at LIMIT 1
             ) step
             WHERE others.n < $10
         ), wanted AS (
             SELECT h.endpoint_id, h.allowed::bigint AS allowed
             FROM unnest($6::text[], $7::int[]) AS h(endpoint_id, allowed)
             WHERE h.allowed > 0
             UNION ALL
             SELECT endpoint_id, $8::bigint FROM others
             WHERE due_at <= $1 AND endpoint_id <> ALL($6::text[])
         ), due AS (
             SELECT c.id FROM wanted w CROSS JOIN LATERAL (
                 SELECT id FROM deliveries d
                 WHERE d.endpoint_id = w.endpoint_id AND d.due_at <= $1
                   AND d.id <> ALL($11::bytea[])
                   AND (d.lane IS NULL OR NOT EXISTS (
                       SELECT 1 FROM deliveries ahead
                       WHERE ahead.lane = d.lane AND ahead.lane_seq < d.lane_seq
                         AND ahead.due_at IS NOT NULL))
                 ORDER BY d.due_at LIMIT w.allowed FOR UPDATE SKIP LOCKED
             ) c LIMIT $2
         ), lone AS (
             SELECT id FROM deliveries
             WHERE endpoint_id IS NULL AND due_at <= $1 AND id <> ALL($11::bytea[])
             ORDER BY due_at LIMIT $8 FOR UPDATE SKIP LOCKED
         ), leased AS (
             UPDATE deliveries d SET due_at = $1 + $3, leased_by = $4, claim = $5
             FROM (SELECT id FROM due UNION ALL SELECT id FROM lone) taken
             WHERE d.id = taken.id
             RETURNING d.*
         )
         SELECT {DELIVERY_COLUMNS}, e.received_at, e.idempotency_key, e.debounce_key,
                e.ordering_key, e.payload, e.traceparent, e.tracestate
         FROM leased d JOIN events e ON e.id = d.event_id
         ORDER BY d.id"
    )
});

impl PgStore {
    /// Claims up to `max` deliveries due now for this node's lease, at most `others` of any
    /// one endpoint.
    pub async fn claim_due(&self, max: i64) -> Result<Vec<Taken<PgLease>>, StoreError> {
        self.claim_due_within(self.clock.now_ms(), max, &[], &[], max)
            .await
    }

    /// Claims like [`claim_due`](Self::claim_due), at most `allowed[i]` deliveries of endpoint
    /// `endpoints[i]` (what this node may still hold of the endpoints it works on) and at most
    /// `others` of any other endpoint: one endpoint's backlog never fills a claim meant for all
    /// of them, and never costs a claim that cannot take from it.
    pub async fn claim_due_within(
        &self,
        now: Millis,
        max: i64,
        endpoints: &[String],
        allowed: &[i32],
        others: i64,
    ) -> Result<Vec<Taken<PgLease>>, StoreError> {
        let claim: i64 = rand::random();
        let from = self
            .directory
            .endpoint_beyond(DISCOVER as usize)
            .unwrap_or_default();
        let mine: Vec<Vec<u8>> = self
            .lock_held()
            .keys()
            .filter_map(|id| delivery_key(id).ok())
            .collect();
        let client = self.db.queue_client().await?;
        let statement = client.prepare_cached(&CLAIM).await?;
        let rows = client
            .query(
                &statement,
                &[
                    &now,
                    &max,
                    &self.lease_ms,
                    &self.node,
                    &claim,
                    &endpoints,
                    &allowed,
                    &others,
                    &from,
                    &DISCOVER,
                    &mine,
                ],
            )
            .await?;
        let leased: Vec<Taken<PgLease>> = rows
            .iter()
            .map(|r| Ok(leased(claim, due_from(r)?)))
            .collect::<Result<_, StoreError>>()?;
        let mut held = self.lock_held();
        for l in &leased {
            held.insert(l.hold.delivery_id.clone(), claim);
        }
        Ok(leased)
    }

    /// Renews every lease this node holds (those whose attempts have not finished); returns
    /// how many it still holds. A lease found lost is dropped from the set (its attempt's
    /// result will be refused).
    pub async fn renew_held(&self) -> Result<usize, StoreError> {
        let held: Vec<(String, i64)> = self
            .lock_held()
            .iter()
            .map(|(id, c)| (id.clone(), *c))
            .collect();
        let pairs: Vec<(&str, i64)> = held.iter().map(|(id, c)| (id.as_str(), *c)).collect();
        let lost = self.renew(&pairs).await?;
        let finishing = self.leases.lock_finishing();
        let mut set = self.lock_held();
        for id in &lost {
            if !finishing.contains(id) {
                tracing::warn!(delivery_id = %id, "lost the lease of a delivery being attempted; another node attempts it");
                set.remove(id);
            }
        }
        Ok(held.len() - lost.len())
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, i64>> {
        self.leases.lock_held()
    }

    /// Sets (or, with `None`, removes) where this node's ingest hands fresh deliveries to its
    /// engine ([`Intake`]).
    pub fn set_intake(&self, intake: Option<std::sync::Arc<dyn Intake<PgLease>>>) {
        self.leases.set_intake(intake);
    }

    /// Extends the leases this node still works on; returns the deliveries whose lease it no
    /// longer holds (lapsed and claimed by another node), whose attempts' results will not count.
    pub async fn renew(&self, leases: &[(&str, i64)]) -> Result<Vec<String>, StoreError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Vec<u8>> = leases
            .iter()
            .map(|(id, _)| delivery_key(id))
            .collect::<Result<_, _>>()?;
        let claims: Vec<i64> = leases.iter().map(|(_, c)| *c).collect();
        let until = self.clock.now_ms() + self.lease_ms;
        let client = self.db.queue_client().await?;
        let renew = client
            .prepare_cached(
                "UPDATE deliveries d SET due_at = $1
                 FROM unnest($2::bytea[], $3::bigint[]) AS l(id, claim)
                 WHERE d.id = l.id AND d.claim = l.claim
                 RETURNING d.id",
            )
            .await?;
        let rows = client.query(&renew, &[&until, &ids, &claims]).await?;
        let held: std::collections::HashSet<Vec<u8>> = rows.iter().map(|r| r.get(0)).collect();
        Ok(leases
            .iter()
            .zip(&ids)
            .filter(|(_, k)| !held.contains(*k))
            .map(|((id, _), _)| id.to_string())
            .collect())
    }

    /// Records an attempt's result (`now`, and the attempt if one was made) and gives the lease
    /// up, fenced by the claim: [`StoreError::LeaseLost`] if the lease passed to another node,
    /// and then nothing is written. Results finished together share one statement
    /// ([`super::results`]): the deliveries' update, and the attempts' insert for those whose
    /// claim held.
    pub async fn finish(
        &self,
        claim: i64,
        now: &Delivery,
        attempt: Option<&Attempt>,
    ) -> Result<(), StoreError> {
        // Held, and renewed, until the result is written (see `Leases::finishing`).
        self.leases.lock_finishing().insert(now.id.clone());
        let written = self.write_result(claim, now, attempt).await;
        self.leases.lock_finishing().remove(&now.id);
        self.lock_held().remove(&now.id);
        written
    }

    async fn write_result(
        &self,
        claim: i64,
        now: &Delivery,
        attempt: Option<&Attempt>,
    ) -> Result<(), StoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.results
            .send(super::results::Finish {
                id: delivery_key(&now.id)?,
                claim,
                now: now.clone(),
                attempt: attempt.cloned(),
                reply,
            })
            .await
            .map_err(|_| StoreError::Closed)?;
        match answer.await.map_err(|_| StoreError::Closed)?? {
            true => Ok(()),
            false => Err(StoreError::LeaseLost),
        }
    }

    /// Gives a lease up without an attempt: the delivery waits until `until` (an open breaker,
    /// the endpoint's rate limit), then any node may claim it. Fenced like [`finish`](Self::finish).
    pub async fn hold(
        &self,
        claim: i64,
        delivery_id: &str,
        until: Millis,
    ) -> Result<(), StoreError> {
        self.lock_held().remove(delivery_id);
        let id = delivery_key(delivery_id)?;
        let client = self.db.queue_client().await?;
        let hold = client
            .prepare_cached(
                "UPDATE deliveries SET due_at = $3, leased_by = NULL, claim = NULL
                 WHERE id = $1 AND claim = $2",
            )
            .await?;
        let n = client.execute(&hold, &[&id, &claim, &until]).await?;
        if n == 0 {
            return Err(StoreError::LeaseLost);
        }
        Ok(())
    }

    /// Whether this node holds the delivery's lease now (its attempt is running here).
    pub fn holds(&self, delivery_id: &str) -> bool {
        self.lock_held().contains_key(delivery_id)
    }

    /// Gives up every lease this node holds (`SIGTERM`): its deliveries are due at once for the
    /// other nodes, which are woken. Returns how many there were.
    pub async fn release_all(&self) -> Result<u64, StoreError> {
        self.lock_held().clear();
        let now = self.clock.now_ms();
        let client = self.db.client().await?;
        let n = client
            .execute(
                "UPDATE deliveries SET due_at = LEAST(next_attempt_at, $2), leased_by = NULL,
                     claim = NULL
                 WHERE leased_by = $1",
                &[&self.node, &now],
            )
            .await?;
        if n > 0 {
            client
                .execute("SELECT pg_notify($1, '')", &[&DUE_CHANNEL])
                .await?;
        }
        Ok(n)
    }

    /// When the next delivery falls due (or a lease lapses), if any does: an idle node sleeps
    /// until then unless woken first.
    pub async fn next_due(&self) -> Result<Option<Millis>, StoreError> {
        let client = self.db.client().await?;
        let next = client
            .prepare_cached(
                "SELECT due_at FROM deliveries WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1",
            )
            .await?;
        Ok(client.query_opt(&next, &[]).await?.map(|r| r.get(0)))
    }
}

/// Taking is a query that locks rows; other nodes' changes come by notice, which can be
/// missed while the connection that listens is down.
const TAKING: Taking = Taking {
    batch: 256,
    hold_per_slot: 4,
    idle_poll: Some(std::time::Duration::from_secs(2)),
    gather: true,
};

impl Queue for PgStore {
    type Hold = PgLease;

    fn taking(&self) -> Taking {
        TAKING
    }

    fn take_due(
        &self,
        now: Millis,
        room: usize,
        limits: &dyn TakeLimits,
    ) -> impl Future<Output = Result<Vec<Taken<PgLease>>, StoreError>> + Send {
        let (endpoints, allowed): (Vec<String>, Vec<i32>) = limits
            .named()
            .into_iter()
            .map(|(endpoint, n)| (endpoint, n.min(i32::MAX as usize) as i32))
            .unzip();
        let others = limits.others().min(i64::MAX as usize) as i64;
        async move {
            PgStore::claim_due_within(self, now, room as i64, &endpoints, &allowed, others).await
        }
    }

    async fn release(&self, hold: PgLease, until: Option<Millis>) -> Result<(), StoreError> {
        match until {
            // The attempt's record gave the lease up.
            None => Ok(()),
            Some(at) => PgStore::hold(self, hold.claim, &hold.delivery_id, at).await,
        }
    }

    /// The earliest due time of all: what this node may not take of it, another may.
    fn next_due(
        &self,
        _limits: &dyn TakeLimits,
    ) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send {
        PgStore::next_due(self)
    }

    fn queue_changed(&self) -> impl Future<Output = ()> + Send + '_ {
        let wake = self.wake();
        async move { wake.notified().await }
    }

    fn set_intake(&self, intake: Option<Arc<dyn Intake<PgLease>>>) {
        PgStore::set_intake(self, intake)
    }

    /// A stopping node: gives up its leases (waking the others) and its row. Returns how many
    /// leases it gave up.
    async fn leave(&self) -> Result<u64, StoreError> {
        let released = self.release_all().await?;
        self.db
            .client()
            .await?
            .execute("DELETE FROM nodes WHERE id = $1", &[&self.node])
            .await?;
        Ok(released)
    }
}

fn delivery_key(id: &str) -> Result<Vec<u8>, StoreError> {
    ids::parse(DELIVERY, id)
        .map(|u| u.to_be_bytes().to_vec())
        .ok_or_else(|| StoreError::Corrupt(format!("delivery id {id}")))
}

fn due_from(r: &Row) -> Result<DueDelivery, StoreError> {
    let delivery = delivery_from(r)?;
    let event = EventMeta {
        id: delivery.event_id.clone(),
        account_id: delivery.account_id.clone(),
        event_type: delivery.event_type.clone(),
        received_at: r.get(13),
        idempotency_key: r.get(14),
        debounce_key: r.get(15),
        ordering_key: r.get(16),
        channels: Vec::new(),
        tags: Vec::new(),
        request_key: None,
        trace: super::rows::trace_of(r.get(18), r.get(19)),
        deliveries: Vec::new(),
    };
    let payload: Vec<u8> = r.get(17);
    Ok(DueDelivery {
        delivery,
        event,
        payload: Bytes::from(payload),
    })
}

/// Renews this node's leases every third of the lease until shutdown, so an attempt that runs
/// long (a slow receiver, retries of a connection) keeps its delivery.
pub async fn keep_leases(
    store: std::sync::Arc<PgStore>,
    mut shutdown: herald_core::shutdown::Shutdown,
) {
    let every = std::time::Duration::from_millis((store.lease_ms / 3).max(1) as u64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(e) = store.renew_held().await {
                    tracing::warn!(error = %e, "cannot renew leases; they lapse unless the next renewal succeeds");
                }
            }
            () = shutdown.wait() => return,
        }
    }
}
