//! The store contract: what the engine and the API may ask of storage, by concern, and what
//! each answer guarantees. The embedded store (`herald-store-sled`) and the cluster's
//! (`herald-store-postgres`) both implement every trait; each runs the same cases, this crate's
//! conformance kit, in its tests.
//!
//! Words used below:
//! - *durable*: written and synced (an fsync on one box, a synchronous commit in a cluster)
//!   before the call returns; a crash or a kill -9 right after keeps it.
//! - *flushed*: written, and on disk within the embedded store's flush interval (half a second);
//!   a crash may lose the last moments of it, never leave half of one write. In a cluster every
//!   write is durable.
//! - *node*: one herald process. On one box there is one; in a cluster, what another node
//!   changed reaches this node's copy of the endpoints and plans by notice within a moment, and
//!   at once through [`Directory::fresh_directory`].
//!
//! Errors are [`StoreError`]s; an operation that answers one has changed nothing unless its
//! documentation says otherwise.
//!
//! Operations return futures that are `Send` (handlers and the engine run them on tokio's
//! workers); reads that may look at many rows never block a worker. The traits are not object
//! safe on purpose: herald's `Backend` dispatches with a `match` over the two stores, which
//! costs nothing measurable and keeps generic operations (a change given as a closure) typed.

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::Bytes;

use super::directory::DirectoryCopy;
use super::{
    ApiAnswer, Changed, CopyStart, DeliveryFilter, EndpointWaiting, EventHistory, Fence,
    IngestOutcome, Minute, NewEvent, Node, Purged, Retained, Stats, StoreError, Swept, TakeLimits,
    Taken, Taking,
};
use herald_core::clock::Millis;
use herald_core::model::{
    Application, Attempt, ClientCertificate, Delivery, Endpoint, EventMeta, PortalSession,
    RateLimit,
};
use herald_core::policy::alerts::{AlertClaim, AlertMark, Claimed};
use herald_core::policy::breaker::Breaker;
use herald_core::policy::quota::{Limits, Windows};

/// Every operation of the contract together: what a store is, to the conformance kit and to
/// herald's choice of store. Each store says it is one (`impl Store for … {}`) beside its
/// `lib.rs`; the compiler names any trait it lacks.
pub trait Store:
    Ingest
    + Directory
    + Accounts
    + Quotas
    + Breakers
    + RateLimits
    + Alerts
    + Sessions
    + Purge
    + DeliveryLog
    + DeliveryChanges
    + Queue
    + Retention
    + Vitals
    + Archive
    + Minutes
    + Applications
{
}

/// Taking events in.
pub trait Ingest {
    /// Stores the events `fan_out` makes, each with its deliveries, and answers one outcome per
    /// event, in order. `fan_out` makes them from the endpoints and plans in memory (it reads
    /// them through [`Directory`]); in a cluster, when another node changed the endpoints or
    /// plans after it read them, nothing is stored: the copy in memory is brought up to date and
    /// `fan_out` is called again, up to [`super::FAN_OUT_TRIES`] times, then
    /// [`StoreError::Stale`]. On one box it is called once. Its own error is returned as it is,
    /// with nothing stored.
    ///
    /// - Durable when it returns `Ok`: every created event and its deliveries survive a crash,
    ///   and the engine will attempt each delivery (at least once).
    /// - All or nothing: on `Err` none of the events was stored, no idempotency key was taken
    ///   and no debounce window moved, so a retry of the request is not a duplicate.
    /// - An idempotency key seen within [`super::IDEMPOTENCY_WINDOW_MS`] (on any node) answers
    ///   [`IngestOutcome::Duplicate`] with the first event's id and stores nothing; two
    ///   requests racing on one key make one event.
    /// - A request key (a message's creation through the Svix-compatible API) answered within
    ///   the window — by a message or by a kept answer — answers [`IngestOutcome::Repeated`]
    ///   and stores nothing; it is decided before the idempotency key, and an event stored
    ///   keeps its request key's answer in the same commit (two requests racing on one request
    ///   key make one message).
    /// - Deliveries of one ordering key are attempted in the order their events committed. On
    ///   one box event ids grow in commit order, and that order is theirs; in a cluster each
    ///   node mints its events' ids before their commit, so ids need not follow the order of
    ///   commits (across nodes, or between a node's concurrent commits), and a key's order is
    ///   its lane's places, taken under the lane's lock (docs/cluster.md, "Ordered keys").
    /// - A debounced event's window is decided at commit: a later event of the same key within
    ///   it is stored with `skipped` deliveries (or replaces the trailing candidate).
    fn ingest<F, E>(
        &self,
        fan_out: F,
    ) -> impl Future<Output = Result<Vec<IngestOutcome>, E>> + Send
    where
        F: FnMut() -> Result<Vec<NewEvent>, E> + Send,
        E: From<StoreError> + Send;
}

/// Endpoints and plans: kept in memory on every node, changed durably, one change at a time.
pub trait Directory {
    /// Makes the endpoints and plans in memory reflect every change committed before now, on
    /// any node (one small query in a cluster; nothing to do on one box).
    fn fresh_directory(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// This node's copy of the endpoints and plans, which the reads below answer from.
    fn directory(&self) -> &DirectoryCopy;

    /// The endpoint as this node knows it (no I/O).
    fn endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        self.directory().endpoint(id)
    }

    /// The account's endpoints, oldest first (no I/O).
    fn account_endpoints(&self, account_id: &str) -> Vec<Arc<Endpoint>> {
        self.directory().account_endpoints(account_id)
    }

    /// Every account with a synced plan or an endpoint, sorted (no I/O).
    fn account_ids(&self) -> Vec<String> {
        self.directory().account_ids()
    }

    /// The account's synced plan; `None` when none was ever synced (no I/O).
    fn account_plan(&self, account_id: &str) -> Option<String> {
        self.directory().plan(account_id)
    }

    /// Creates the endpoint, durably, unless its account has `max_per_account` already
    /// (`Ok(None)`, nothing written; counted across nodes under one lock in a cluster).
    /// [`StoreError::TooLarge`] past [`super::MAX_ENDPOINT_SIZE`].
    fn create_endpoint(
        &self,
        ep: Endpoint,
        max_per_account: usize,
    ) -> impl Future<Output = Result<Option<Arc<Endpoint>>, StoreError>> + Send;

    /// Changes the endpoint with `f` against its stored state, durably. Changes of one endpoint
    /// apply one at a time, on every node, so none is lost to another made at once. `f`
    /// answers whether it changed anything (`false` writes nothing) or refuses with its own
    /// error. `Ok(None)` when there is no such endpoint.
    fn change_endpoint<E: From<StoreError> + Send>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Endpoint) -> Result<bool, E> + Send,
    ) -> impl Future<Output = Result<Option<(Arc<Endpoint>, bool)>, E>> + Send;

    /// Writes the endpoint as given (the engine's own changes: verification, a breaker's
    /// state), durably.
    fn put_endpoint(
        &self,
        ep: Endpoint,
    ) -> impl Future<Output = Result<Arc<Endpoint>, StoreError>> + Send;

    /// Deletes the endpoint and its client certificate, durably; `false` when there was none.
    /// Its waiting deliveries stay and are recorded `no_endpoint` when attempted
    /// ([`DeliveryLog::expedite_endpoint`]).
    fn delete_endpoint(&self, id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Sets (or with `None`, removes) the endpoint's client certificate chain and key (PEM)
    /// and its public description, durably. `Ok(None)` when there is no such endpoint.
    fn set_client_certificate(
        &self,
        id: &str,
        pair: Option<(&str, &str, ClientCertificate)>,
        now: Millis,
    ) -> impl Future<Output = Result<Option<Arc<Endpoint>>, StoreError>> + Send;

    /// The endpoint's client certificate chain and key (PEM), for the connection only.
    fn client_certificate_pem(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(String, String)>, StoreError>> + Send;
}

/// What is kept per account besides the directory: its plan and its secrets.
pub trait Accounts {
    /// Sets or (with `None`) removes the account's synced plan, durably; every node's copy
    /// follows.
    fn set_account_plan(
        &self,
        account_id: &str,
        plan: Option<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The account secret's value (write-only to the API: for header macros only).
    fn account_secret(
        &self,
        account_id: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Sets the account secret, durably.
    fn set_account_secret(
        &self,
        account_id: &str,
        name: &str,
        value: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The accounts' quota counters (docs/delivery-contract.md, "Quotas").
pub trait Quotas {
    /// Counts one attempt in the account's windows `w` unless that would pass `limits`
    /// (`false`, nothing counted). Exact under concurrency, on every node; flushed.
    fn quota_take(
        &self,
        account_id: &str,
        w: Windows,
        limits: Limits,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Sets the attempts counted in the account's windows `w` to `used` (this minute, this
    /// day), flushed: a restore's usage as the backup read it. A window that has passed counts
    /// nothing, as ever.
    fn set_quota_usage(
        &self,
        account_id: &str,
        w: Windows,
        used: (u64, u64),
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The attempts counted in the account's windows `w`: (this minute, this day).
    fn quota_usage(
        &self,
        account_id: &str,
        w: Windows,
    ) -> impl Future<Output = Result<(u64, u64), StoreError>> + Send;
}

/// The endpoints' circuit breakers.
pub trait Breakers {
    /// The endpoint's circuit breaker (closed, never failed, when none is kept).
    fn breaker(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<Breaker, StoreError>> + Send;

    /// Changes the endpoint's circuit breaker with `f`, one change at a time on every node,
    /// flushed. When it closes, the deliveries it held are due at once (`now`).
    fn change_breaker<T: Send>(
        &self,
        endpoint_id: &str,
        now: Millis,
        f: impl FnOnce(&mut Breaker) -> T + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send;

    /// Every circuit breaker that is not closed, by endpoint id.
    fn open_breakers(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Breaker)>, StoreError>> + Send;
}

/// The endpoints' rate limits.
pub trait RateLimits {
    /// Takes a token of the endpoint's rate-limit bucket at `now` (`Ok(Ok(()))`), or says when
    /// the next one comes (`Ok(Err(at))`). One bucket per endpoint for the whole store (every
    /// node takes from it). Kept in memory on one box and flushed lazily in a cluster: a bucket
    /// lost in a crash starts full again.
    fn take_token(
        &self,
        endpoint_id: &str,
        limit: RateLimit,
        now: Millis,
    ) -> impl Future<Output = Result<Result<(), Millis>, StoreError>> + Send;
}

/// Failure alerts (docs/operations.md, "Failure alerts"): addresses, marks and hourly counts.
pub trait Alerts {
    /// The account's alert addresses, as set; empty
    /// when none are.
    fn alert_emails(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;

    /// Sets the account's alert addresses (empty clears them), durably. Its plan stays as it
    /// is, as [`Accounts::set_account_plan`] leaves the addresses.
    fn set_alert_emails(
        &self,
        account_id: &str,
        emails: Vec<String>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every account with alert addresses: (account, addresses), sorted by account.
    fn all_alert_emails(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, Vec<String>)>, StoreError>> + Send;

    /// Claims an alert mail: applies [`herald_core::policy::alerts::decide`] to the endpoint's
    /// alert mark and its account's count of mails this UTC clock hour as stored, and keeps
    /// both results in one atomic write conditional on what was read, so of any number of
    /// callers on any nodes exactly those the decision lets through get
    /// [`Claimed::Send`], each on the mark and count the one before left, and no account gets
    /// more than `max_per_hour` mails an hour. Flushed. A deleted endpoint's mark goes with
    /// it, and a claim for an endpoint that no longer exists writes nothing
    /// ([`Claimed::Gone`]), however it races the deletion or a purge.
    fn claim_alert(
        &self,
        claim: AlertClaim<'_>,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send;

    /// Counts one mail that no endpoint's mark governs (a test mail the account asked for)
    /// toward the account's mails this UTC clock hour, as [`Alerts::claim_alert`] counts its
    /// own: `true` if fewer than `max_per_hour` were counted and this one is; `false` (nothing
    /// changed) if the hour's cap is reached. Atomic over any number of callers on any nodes,
    /// like a claim. Flushed as a claim is.
    fn count_alert_mail(
        &self,
        account_id: &str,
        now: Millis,
        max_per_hour: u32,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Gives back a claim whose mail was given up: the endpoint's mark goes back from
    /// `after` to `before`, only if it is still `after` (no claim came since) and the
    /// endpoint still has one; the account's hourly count keeps the mail. `true` if it went
    /// back.
    fn give_back_alert(
        &self,
        endpoint_id: &str,
        after: AlertMark,
        before: AlertMark,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// Portal sessions, kept under their tokens' hashes.
pub trait Sessions {
    /// Stores a portal session under its token's hash ([`super::token_hash`]), durably. The
    /// token itself is never stored.
    fn create_portal_session(
        &self,
        session: &PortalSession,
        hash: [u8; 32],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The session the token opens, unless it expired by `now` or was revoked.
    fn portal_session(
        &self,
        token: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<PortalSession>, StoreError>> + Send;

    /// Revokes the session, durably: its token opens nothing from the moment this returns, on
    /// every node. `false` when there was none.
    fn revoke_portal_session(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// Forgetting an account.
pub trait Purge {
    /// Removes everything of the account, durably: its events with their payloads,
    /// deliveries, attempts, idempotency keys and debounce windows; its endpoints with their
    /// secrets, client certificates, breakers, alert marks and rate buckets; its plan, alert
    /// addresses, quota counters, account secrets and portal sessions. None of its deliveries is taken after this
    /// returns; what an attempt under way records afterwards is discarded. On every node. The
    /// account may be used again and starts empty.
    fn purge_account(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Purged, StoreError>> + Send;
}

/// The delivery log: events, deliveries and attempts, as stored.
pub trait DeliveryLog {
    /// The delivery with its state as stored now.
    fn delivery(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Delivery>, StoreError>> + Send;

    /// The event and its payload bytes, exactly as ingested.
    fn event(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes)>, StoreError>> + Send;

    /// The event, its payload and every delivery of it, read together (no delivery changes
    /// state between the reads).
    fn event_with_deliveries(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError>> + Send;

    /// The delivery's attempts, first first.
    fn attempts(
        &self,
        delivery_id: &str,
    ) -> impl Future<Output = Result<Vec<Attempt>, StoreError>> + Send;

    /// A page of at most `limit` deliveries matching `filter`, newest first, and the cursor of
    /// the next page. A page may be short (a bounded look at the log) while more follow: only a
    /// `None` cursor ends the list. Deliveries ingested after the first page never appear on a
    /// later one. With [`DeliveryFilter::text`] a page looks at no more than
    /// [`super::SEARCH_EVENTS`] events: one that stopped there, short of `limit`, has the cursor
    /// of the next event to look at.
    fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> impl Future<Output = Result<(Vec<Delivery>, Option<String>), StoreError>> + Send;

    /// How many of the endpoint's deliveries are pending. On one box this is the due index's
    /// count, which counts a delivery twice from a manual retry before its first attempt until
    /// that attempt (the index drops the older entry when it comes due).
    fn endpoint_pending(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// The delivery log's changes: attempts recorded, manual retries and recoveries.
pub trait DeliveryChanges {
    /// An ordered delivery's ordering key and the delivery ahead of it in its lane, if any.
    fn ordering_of(
        &self,
        d: &Delivery,
    ) -> impl Future<Output = Result<Option<(String, Option<String>)>, StoreError>> + Send;

    /// Changes the delivery with `f` unless an attempt holds it ([`Changed::Busy`], nothing
    /// changed); flushed. `f` sees the delivery as stored and answers the new one, or `None` to
    /// leave it. The change is a manual retry's or a recovery's: the delivery pending again,
    /// due at a time. Other changes of state come with an attempt (the engine's): the embedded
    /// store derives a delivery's state from its pending entry and its last attempt.
    fn change_delivery<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)> + Send + 'static,
    ) -> impl Future<Output = Result<Changed<T>, StoreError>> + Send;

    /// Records an attempt of a delivery and what follows it (`now`: its next due time, or its
    /// end) in one write: a crash leaves the delivery as it was or as it is now, never between.
    /// Flushed on one box (a crash may lose the last moments: the delivery is then attempted
    /// again, at least once); durable in a cluster. `fence` is what entitles the attempt to
    /// write: a cluster refuses a lease that passed to another node
    /// ([`StoreError::LeaseLost`], nothing written). Nothing is recorded once the store failed
    /// for good.
    fn record_attempt(
        &self,
        was: &Delivery,
        now: &Delivery,
        attempt: &Attempt,
        fence: Fence,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether an attempt, or a change, holds the delivery on this node now.
    fn is_held(&self, delivery_id: &str) -> bool;

    /// Makes a deleted endpoint's waiting deliveries due now (their attempts record
    /// `no_endpoint`). Returns how many.
    fn expedite_endpoint(
        &self,
        endpoint_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// Due deliveries, taken by this node's scheduler for their attempts.
///
/// A delivery is taken by one node at a time and comes back (due again) only by
/// [`Queue::release`], or, in a cluster, when the node that took it stops renewing its lease.
/// The deliveries of an ordered lane (an endpoint's ordering key) are taken one at a time, in
/// commit order: the next once the one ahead has ended. Taking and releasing acknowledge
/// nothing; a crash gives back whatever was taken (attempted again: at least once).
pub trait Queue {
    /// The store's hold on a taken delivery: the delivery's claim on one box, a lease in a
    /// cluster.
    type Hold: Send + 'static;

    /// How the scheduler takes from this queue: its batch and polling. On one box taking is a
    /// look at memory and every change is told; in a cluster taking costs a query and other
    /// nodes' changes come by notice.
    fn taking(&self) -> Taking;

    /// Takes up to `room` deliveries due at `now`, earliest first, each held for this node until
    /// released, never more of an endpoint than `limits` allows. A due delivery that cannot be
    /// attempted now (held by a change, or the store failed for good) stays in the queue, due
    /// again a moment later; one found ended meanwhile is dropped.
    fn take_due(
        &self,
        now: Millis,
        room: usize,
        limits: &dyn TakeLimits,
    ) -> impl Future<Output = Result<Vec<Taken<Self::Hold>>, StoreError>> + Send;

    /// Gives back a taken delivery. With `None` its attempt ended it, or recorded when it is due
    /// next ([`DeliveryLog::record_attempt`]); with `Some(until)` it was not attempted (an open breaker,
    /// the rate limit) and is due again at `until` (on one box its whole lane waits until then).
    /// Fenced like the record: a lease that passed to another node changes nothing.
    fn release(
        &self,
        hold: Self::Hold,
        until: Option<Millis>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// When the next delivery a take within `limits` could hand out falls due (in a cluster,
    /// also when a lease lapses), if any does. A store may answer earlier than that (a
    /// cluster's answer ignores `limits`); never later.
    fn next_due(
        &self,
        limits: &dyn TakeLimits,
    ) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send;

    /// Resolves when the queue may have changed: new or released deliveries (in a cluster, on
    /// any node, by notice).
    fn queue_changed(&self) -> impl Future<Output = ()> + Send + '_;

    /// Lets this node's ingest hand fresh deliveries straight to `intake` (in a cluster; on one
    /// box ingest adds them to the index [`Queue::take_due`] reads, at once). `None` stops it.
    fn set_intake(&self, intake: Option<Arc<dyn Intake<Self::Hold>>>);

    /// Gives back everything this node holds (it stops): due at once for the other nodes.
    /// Returns how many. Nothing to do on one box, whose claims end with the process.
    fn leave(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// A node's scheduler, as its ingest sees it in a cluster: a fresh delivery the node has room
/// for is stored already taken by it and handed over once committed, with no query to take it
/// (one statement and one row version less per delivery, and no wait for a notice). What the
/// node has no room for is stored due, for any node to take.
pub trait Intake<H>: Send + Sync {
    /// Takes room for one delivery of `endpoint`; `false` if the node has none.
    fn reserve(&self, endpoint: &str) -> bool;
    /// Gives back room taken for a delivery that was not stored (its commit failed).
    fn cancel(&self, endpoint: &str);
    /// Deliveries stored taken by this node, committed: the scheduler attempts them.
    fn take(&self, taken: Vec<Taken<H>>);
}

/// Letting go of what is past the retention.
pub trait Retention {
    /// Sweeps as of `now`: removes events older than `retained.retention_ms` with their
    /// deliveries and attempts (never an event with a pending delivery), expired idempotency
    /// keys and ended debounce windows, and expired portal sessions; on one box it first folds
    /// the ended history older than `retained.fold_after_ms`.
    ///
    /// Works in bounded slices, each its own write, off the async workers, yielding between
    /// them: ingest and delivery never wait on a sweep. Stops at the next slice once `stop` is
    /// set. Several nodes may sweep at once (each skips what another holds). A crash mid-sweep
    /// leaves every slice done or not done; the next sweep goes on. A slice that fails is
    /// logged and ends its part of the sweep.
    fn sweep(
        &self,
        now: Millis,
        retained: Retained,
        stop: &AtomicBool,
    ) -> impl Future<Output = Swept> + Send;
}

/// The store's own health and figures.
pub trait Vitals {
    /// Which store this is, as a backup names its source: `sled` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Whether the store takes writes now (ingest and `/healthz` answer `503` while not).
    fn healthy(&self) -> impl Future<Output = bool> + Send;

    /// Deliveries by state.
    fn stats(&self) -> impl Future<Output = Result<Stats, StoreError>> + Send;

    /// How many deliveries are due at `now` (not taken, whether or not behind an earlier
    /// delivery of their ordering key), and when the oldest pending one fell due.
    fn due_summary(
        &self,
        now: Millis,
    ) -> impl Future<Output = Result<(usize, Option<Millis>), StoreError>> + Send;

    /// What waits for each endpoint that has anything waiting at `now`, in no order: how many
    /// pending deliveries are not being attempted, how many of them are due and would be handed
    /// out now (one given back until a time is not due before it), how many are due but behind
    /// an earlier delivery of their ordering key. Read without a snapshot (counts that move
    /// while it reads are off by what moved); whether a circuit breaker, a pause or a rate
    /// limit holds an endpoint is the engine's to say.
    fn waiting_by_endpoint(
        &self,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<EndpointWaiting>, StoreError>> + Send;

    /// In a cluster: this node's id and every node seen lately (`None` on one box).
    fn nodes(&self)
        -> impl Future<Output = Result<Option<(String, Vec<Node>)>, StoreError>> + Send;

    /// Bytes the store takes on disk (the data directory; the cluster's database).
    fn size_on_disk(&self) -> impl Future<Output = u64> + Send;
}

/// What backup and restore need beyond the other traits (docs/operations.md, "Backup,
/// restore, upgrade"): the log read a page at a time while herald serves, and written whole into an
/// empty store. The rest of a backup (endpoints, plans, breakers) goes through [`Directory`]
/// and [`Accounts`].
pub trait Archive {
    /// Every account secret: (account, name, value).
    fn account_secrets(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, String, String)>, StoreError>> + Send;

    /// Up to `limit` events with ids below `before` (from the newest when `None`), newest
    /// first, and the id to pass as `before` next (`None` once the oldest was read). The page
    /// ends early once its payloads reach [`super::ARCHIVE_PAGE_BYTES`] (one event larger is
    /// a page alone).
    ///
    /// - Each event is read whole, in one consistent read: with every delivery and attempt as
    ///   stored at that moment. An event is never read without all of its deliveries.
    /// - Paging down from the newest reads every event stored before the first page exactly
    ///   once (unless the retention removed it meanwhile): an event's id never changes and a
    ///   stored event stays stored, so each page (one consistent read) holds every such event
    ///   of its range of ids. Ids need not grow in commit order (in a cluster each node mints
    ///   them before its commit): an event stored while the pages are read may land below the
    ///   cursor and be read too, whole, once, or above it and be left out.
    /// - Runs off the async workers; the store keeps serving.
    fn export_events(
        &self,
        before: Option<String>,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<EventHistory>, Option<String>), StoreError>> + Send;

    /// Whether the store holds nothing: no event, endpoint, plan or account secret.
    fn is_empty(&self) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Writes events read by [`Archive::export_events`] (of any store) into a store that was
    /// empty when the restore began, each with its deliveries in their states and their
    /// attempts, as one write. Idempotency keys younger than
    /// [`super::IDEMPOTENCY_WINDOW_MS`] at `now` answer `duplicate` again. Pending deliveries
    /// are due when they were due (fresh ones at once). Flushed; durable once the store is
    /// closed (one box) or at once (a cluster). Event and delivery ids are kept: a delivery's
    /// id must be its event's `index`-th ([`herald_core::ids::delivery_of`]).
    fn import_events(
        &self,
        events: Vec<EventHistory>,
        now: Millis,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Ends an import, once every event was written: the pending deliveries of ordered
    /// endpoints are put in their lanes in the order of their events' ids (pages arrive newest
    /// first), after every delivery already in a lane; a cluster keeps the places a cluster's
    /// archive carries ([`super::EventHistory::lane_seqs`]).
    fn finish_import(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Where a copy of the store named `source` into this one stands (`herald copy`: the
    /// archive's export and import page by page, resumable). A store that holds a copy of
    /// `source` answers how far it got; one that holds nothing records the copy as begun
    /// ([`CopyStart::Fresh`]); one that holds anything it did not copy, or a copy of another
    /// store, refuses ([`StoreError::Format`], nothing written). A copy's pages are imported
    /// with [`Archive::import_events`], which skips every row already there, so a page
    /// imported again after an interruption doubles nothing. Only a cluster's store is a
    /// copy's target: the embedded store refuses (it is restored from a backup).
    fn begin_copy(
        &self,
        source: &str,
        now: Millis,
    ) -> impl Future<Output = Result<CopyStart, StoreError>> + Send;

    /// Records, durably, that the copy of `source` imported every event before `cursor`
    /// (`copied` deliveries in all), or with `finished` that it ended
    /// ([`Archive::finish_import`] done).
    fn keep_copy_mark(
        &self,
        source: &str,
        cursor: Option<&str>,
        copied: u64,
        finished: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Each endpoint's attempts per minute over the last day (the pages' charts), kept in the store
/// so that a restart and every node of a cluster see the same figures. Nodes count in memory
/// and add what they counted every few seconds (docs/api.md, "Endpoints").
pub trait Minutes {
    /// Adds each (endpoint id, minute) to what is kept for that minute and for the hour it is
    /// in ([`Minutes::endpoint_hours`]): counts, latency sums and latency buckets add up, the
    /// max is the larger. Only for endpoints that exist, and [`super::NOT_SENT`] (the
    /// decisions that sent no request): one deleted since the counts were taken (its account
    /// purged) gets no row, even when its delete races the add. Flushed; on `Err` nothing was
    /// added (neither minutes nor hours).
    fn add_minutes(
        &self,
        minutes: Vec<(String, Minute)>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The endpoint's minutes that had attempts, from the minute starting at `from` on,
    /// oldest first.
    fn endpoint_minutes(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> impl Future<Output = Result<Vec<Minute>, StoreError>> + Send;

    /// Every endpoint's minutes that had attempts, from the minute starting at `from` on, in no
    /// order: what all nodes added (`/v1/status`'s last hour per endpoint).
    fn minutes_since(
        &self,
        from: Millis,
    ) -> impl Future<Output = Result<Vec<(String, Minute)>, StoreError>> + Send;

    /// Drops every endpoint's minutes that start before `before`; answers how many went.
    fn trim_minutes(&self, before: Millis) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// The endpoint's hours that had attempts (the sums of their minutes, `at` each hour's
    /// start), from the hour starting at `from` on, oldest first.
    fn endpoint_hours(
        &self,
        endpoint_id: &str,
        from: Millis,
    ) -> impl Future<Output = Result<Vec<Minute>, StoreError>> + Send;

    /// Every endpoint's hours that had attempts (and [`super::NOT_SENT`]'s), from the
    /// hour starting at `from` on, in no order: what all nodes added (`/v1/status`'s last day).
    fn hours_since(
        &self,
        from: Millis,
    ) -> impl Future<Output = Result<Vec<(String, Minute)>, StoreError>> + Send;

    /// Drops every endpoint's hours that start before `before`; answers how many went.
    fn trim_hours(&self, before: Millis) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Keeps each (endpoint id, time) as that endpoint's last successful attempt, unless a
    /// later one is kept already (nodes of a cluster flush theirs in any order: the newest of
    /// all stays). Only for endpoints that exist, as [`Minutes::add_minutes`]; the endpoint's
    /// delete (its account's purge) removes it. Flushed; on `Err` nothing was kept.
    fn keep_last_successes(
        &self,
        successes: Vec<(String, Millis)>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The endpoint's last successful attempt as kept (`None`: none was).
    fn last_success(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send;
}

/// What the Svix-compatible API keeps beside herald's own records (docs/svix.md): accounts'
/// application records and the answers to requests made with an `idempotency-key` header.
/// Both go with an account's purge, into backups and through `herald copy`.
pub trait Applications {
    /// The account's application record, if one was written.
    fn application(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Option<Application>, StoreError>> + Send;

    /// Writes the account's application record, durably.
    fn put_application(
        &self,
        app: &Application,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every application record, sorted by account.
    fn applications(&self) -> impl Future<Output = Result<Vec<Application>, StoreError>> + Send;

    /// When the account's oldest event still kept was received; `None` when it has none.
    fn first_event_at(
        &self,
        account_id: &str,
    ) -> impl Future<Output = Result<Option<Millis>, StoreError>> + Send;

    /// The event an idempotency key of the account names within
    /// [`super::IDEMPOTENCY_WINDOW_MS`] of `now`, if any.
    fn keyed_event(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// The answer kept for the account's request key, unless it is older than
    /// [`super::IDEMPOTENCY_WINDOW_MS`] at `now`.
    fn api_answer(
        &self,
        account_id: &str,
        key: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<ApiAnswer>, StoreError>> + Send;

    /// Keeps the answer to the account's request key, durably, unless one within the window
    /// is kept already; answers the one that stays.
    fn keep_api_answer(
        &self,
        account_id: &str,
        key: &str,
        answer: ApiAnswer,
    ) -> impl Future<Output = Result<ApiAnswer, StoreError>> + Send;

    /// Every answer kept, as (account, key, answer): for backups. A message's creation is not
    /// among them: its request key travels with its event ([`herald_core::model::EventMeta`]).
    fn api_answers(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, String, ApiAnswer)>, StoreError>> + Send;
}
