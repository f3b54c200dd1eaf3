//! The values both stores take and give: what the store contract ([`super::contract`]) is
//! written in. Neither store's own types appear here.

use std::sync::Arc;

use bytes::Bytes;

use super::StoreError;
use herald_core::clock::Millis;
use herald_core::ids::{self, ENDPOINT};
use herald_core::model::{Delivery, DeliveryState, Endpoint, EventMeta, Status};

/// How often a cluster's ingest fans out again when the endpoints changed meanwhile
/// ([`super::contract::Ingest::ingest`]); then it gives up with nothing stored (`503`).
pub const FAN_OUT_TRIES: usize = 3;

/// How long an idempotency key keeps answering with the first event (docs/api.md).
pub const IDEMPOTENCY_WINDOW_MS: Millis = 24 * 3600 * 1000;

/// A page of the archive ([`super::contract::Archive::export_events`]) ends after this many
/// events, or once its events' payloads and attempts ([`EventHistory::bytes`]) reach
/// [`ARCHIVE_PAGE_BYTES`] (an event larger is a page alone), so that a backup or a restore holds
/// a bounded number of bytes whatever the payloads' sizes and however many attempts were kept.
pub const ARCHIVE_PAGE_EVENTS: usize = 1000;
/// See [`ARCHIVE_PAGE_EVENTS`].
pub const ARCHIVE_PAGE_BYTES: usize = 8 << 20;

/// An event ready to store: checked, fanned out, payload bytes as received. The committer gives
/// it its id and its deliveries theirs (on one box in commit order; a cluster's nodes mint ids
/// before their commits, which need not follow that order: [`super::contract::Ingest::ingest`]).
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub account_id: String,
    pub event_type: String,
    pub received_at: Millis,
    pub payload: Bytes,
    /// The endpoint (lane) of each delivery, in fan-out order; one [`NO_LANE`] for an
    /// event that has no endpoint, which the engine records as `no_endpoint` (once per event,
    /// after the conditions that come before it).
    pub targets: Vec<Lane>,
    pub idempotency_key: Option<String>,
    pub debounce_key: Option<String>,
    /// The ingest request's `ordering_key`.
    pub ordering_key: Option<String>,
    /// Set when the event's type is debounced and the event has a debounce key.
    pub debounce: Option<DebounceRule>,
    /// The channels it was sent on and its tags (docs/svix.md).
    pub channels: Vec<String>,
    pub tags: Vec<String>,
    /// The `idempotency-key` of the request that created it through the Svix-compatible API:
    /// the store keeps that key's answer (the event) in the event's own commit, so a
    /// repeat of the key is answered with the event whenever the event was acknowledged.
    pub request_key: Option<String>,
    /// The context of the request's span (docs/operations.md, "Traces"), kept with the event.
    pub trace: Option<herald_core::trace::TraceContext>,
}

impl NewEvent {
    /// A new event with one delivery per target endpoint, due `now`.
    pub fn fan_out<'a>(
        account_id: String,
        event_type: String,
        payload: Bytes,
        targets: impl Iterator<Item = &'a Arc<Endpoint>>,
        now: Millis,
    ) -> NewEvent {
        let mut lanes: Vec<Lane> = targets.map(|ep| lane_of(Some(&ep.id))).collect();
        if lanes.is_empty() {
            lanes.push(NO_LANE);
        }
        lanes.truncate(ids::MAX_FAN_OUT);
        NewEvent {
            account_id,
            event_type,
            received_at: now,
            payload,
            targets: lanes,
            idempotency_key: None,
            debounce_key: None,
            ordering_key: None,
            debounce: None,
            channels: Vec::new(),
            tags: Vec::new(),
            request_key: None,
            trace: None,
        }
    }
}

/// The debounce rule that applies to one event.
#[derive(Debug, Clone)]
pub struct DebounceRule {
    /// The key's window state lives under (account, type, key).
    pub key: String,
    pub window_ms: Millis,
    pub trailing: bool,
}

/// What the commit did with one event.
#[derive(Debug, Clone)]
pub enum IngestOutcome {
    /// Stored with this id; the deliveries as stored (a debounced event's are `skipped`, a
    /// trailing candidate's are due when its window closes).
    Created {
        event_id: String,
        deliveries: Vec<Delivery>,
    },
    /// The idempotency key was seen within the window: nothing was queued; this is the first
    /// event's id.
    Duplicate { event_id: String },
    /// The event's request key (docs/svix.md) was answered within the window: the same request
    /// again, and nothing was stored. `event_id` is the message that request created, or
    /// `None` when its kept answer was not a message ([`super::contract::Applications::api_answer`]
    /// gives it).
    Repeated { event_id: Option<String> },
}

/// A due delivery as the engine attempts it: the delivery, its event and the payload.
pub struct DueDelivery {
    pub delivery: Delivery,
    pub event: EventMeta,
    pub payload: Bytes,
}

/// A search of the log by payload text ([`DeliveryFilter::text`]) looks at no more than this
/// many events per page.
pub const SEARCH_EVENTS: usize = 10_000;

/// Which deliveries a list asks for.
#[derive(Debug, Default, Clone)]
pub struct DeliveryFilter {
    pub account_id: Option<String>,
    pub endpoint_id: Option<String>,
    pub event_type: Option<String>,
    pub state: Option<DeliveryState>,
    pub status: Option<Status>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
    /// Only deliveries of events whose payload holds these bytes, exactly (case matters). A
    /// page then looks at no more than [`SEARCH_EVENTS`] events, newest first from the cursor.
    pub text: Option<String>,
}

/// What a change of a delivery did ([`super::DeliveryLog::change_delivery`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Changed<T> {
    /// Changed and written; what the change returned.
    Yes(T),
    /// The change chose to leave the delivery as it is.
    No,
    NotFound,
    /// Someone holds the delivery's claim (an attempt is running): nothing was changed.
    Busy,
}

/// The endpoint an entry goes to (its ULID); [`NO_LANE`] for deliveries without an endpoint.
pub type Lane = u128;
pub const NO_LANE: Lane = 0;

/// The due index lane of an endpoint id (its ULID); [`NO_LANE`] for none.
pub fn lane_of(endpoint_id: Option<&str>) -> Lane {
    endpoint_id
        .and_then(|e| ids::parse(ENDPOINT, e))
        .unwrap_or(NO_LANE)
}

/// Where a copy into a store stands ([`super::contract::Archive::begin_copy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyStart {
    /// Nothing copied yet: the copy is recorded as begun.
    Fresh,
    /// An interrupted copy: every event before `cursor` (all of them with `None`: it starts
    /// over) was imported, `copied` deliveries in all.
    Resumed { cursor: Option<String>, copied: u64 },
    /// The copy ended: nothing to do.
    Finished,
}

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

/// What entitles an attempt to record its result ([`super::contract::DeliveryLog::record_attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// On one box: the delivery's claim, which the engine holds for the whole attempt.
    Claimed,
    /// In a cluster: the claim number of this node's lease on the delivery.
    Lease(i64),
}

/// A due delivery taken from the queue by this node ([`super::contract::Queue::take_due`]):
/// what to attempt, what fences its result, and the store's hold on it, given back with
/// [`super::contract::Queue::release`].
pub struct Taken<H> {
    pub due: DueDelivery,
    pub fence: Fence,
    pub hold: H,
}

impl<H> Taken<H> {
    /// The same delivery with its hold wrapped (the store herald runs on wraps each store's).
    pub fn map_hold<G>(self, f: impl FnOnce(H) -> G) -> Taken<G> {
        Taken {
            due: self.due,
            fence: self.fence,
            hold: f(self.hold),
        }
    }
}

/// How many deliveries of each endpoint a take may hand this node
/// ([`super::contract::Queue::take_due`]): the scheduler's per-endpoint limit less what it
/// holds of the endpoint. The scheduler answers from what it holds as the take asks (a take
/// on one box asks about the few lanes it looks at, and never pays for all the endpoints a
/// node holds); a store only obeys.
pub trait TakeLimits: Sync {
    /// How many more deliveries to `lane`'s endpoint ([`lane_of`]) a take may hand out.
    fn allowed(&self, lane: Lane) -> usize;
    /// The endpoints with a limit of their own, each with what a take may hand out of it, for
    /// a store that must name them (a cluster's query). Every other endpoint has
    /// [`Self::others`].
    fn named(&self) -> Vec<(String, usize)>;
    /// What a take may hand out of an endpoint that is not [`Self::named`].
    fn others(&self) -> usize;
}

/// Limits written out: `others` of each endpoint, and of those named, what is named.
#[derive(Debug, Default, Clone)]
pub struct FixedLimits {
    pub named: Vec<(String, usize)>,
    pub others: usize,
}

impl TakeLimits for FixedLimits {
    fn allowed(&self, lane: Lane) -> usize {
        self.named
            .iter()
            .find(|(endpoint, _)| lane_of(Some(endpoint)) == lane)
            .map_or(self.others, |(_, n)| *n)
    }

    fn named(&self) -> Vec<(String, usize)> {
        self.named.clone()
    }

    fn others(&self) -> usize {
        self.others
    }
}

/// How the scheduler takes from a store's queue ([`super::contract::Queue::taking`]): the
/// only things a store kind tunes, batch size and polling. The loop, the per-endpoint limit
/// and what is held are the scheduler's, the same for every store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taking {
    /// Deliveries taken per turn at most.
    pub batch: usize,
    /// Of one endpoint, the scheduler holds at most this many times
    /// `max_in_flight_per_endpoint` (sending, or waiting for one of the endpoint's sending
    /// slots): 1 where taking is a look at memory; more where it costs a query, to keep the
    /// slots busy between takes.
    pub hold_per_slot: usize,
    /// The longest an idle scheduler sleeps without taking again; `None` where
    /// [`super::contract::Queue::queue_changed`] tells of every change (one process).
    pub idle_poll: Option<std::time::Duration>,
    /// Whether taking costs a query: the scheduler then takes again only once several of its
    /// attempts have finished, and gathers notices of new work for a moment, instead of
    /// taking at each. Where it does not, [`super::contract::Queue::queue_changed`] also tells
    /// of every hold given back, and the scheduler takes again at each change.
    pub gather: bool,
}

/// What a retention sweep keeps ([`super::contract::Retention::sweep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// `storage.retention`: events older than this go (none with a pending delivery).
    pub retention_ms: Millis,
    /// `storage.fold_after`: ended history older than this is folded (one box only).
    pub fold_after_ms: Millis,
}

/// What a retention sweep did, as each store counts it (the cluster's counts events only; its
/// statement removes their deliveries, attempts and keys with them).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Events removed, with their deliveries and attempts.
    pub events: u64,
    pub deliveries: u64,
    pub attempts: u64,
    /// Idempotency keys, debounce windows, portal sessions and other rows removed.
    pub other: u64,
    /// Events folded, the folds written, and account index rows packed (one box only).
    pub folded: u64,
    pub folds: u64,
    pub index_rows: u64,
}

/// What waits for one endpoint, as the queue sees it at a time ([`crate::contract::Vitals::
/// waiting_by_endpoint`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EndpointWaiting {
    /// `None` for deliveries whose endpoint the store no longer knows.
    pub endpoint_id: Option<String>,
    /// Pending deliveries not being attempted now (not taken, not leased), whenever due.
    pub waiting: u64,
    /// Of those, the ones due now that the queue would hand out: not behind an earlier
    /// delivery of their ordering key.
    pub due: u64,
    /// Of those, the ones due now that wait behind an earlier delivery of their ordering key.
    pub behind: u64,
}

/// Deliveries by state, as counted when asked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    by_state: [i64; 4],
}

impl Stats {
    pub fn get(&self, state: DeliveryState) -> i64 {
        self.by_state[state as usize]
    }

    pub fn set(&mut self, state: DeliveryState, n: i64) {
        self.by_state[state as usize] = n;
    }
}

/// The most an endpoint may take stored: its id and its fields but its secrets, within one row of
/// the embedded store (docs/api.md, error `too_large`). Both stores hold endpoints to it, so an
/// endpoint one of them takes, the other takes too (a store can be copied into a cluster's).
/// Secrets never count toward it: both stores keep them apart ([`endpoint_fields`]), so a
/// rotation is never refused for the endpoint's size.
pub const MAX_ENDPOINT_SIZE: usize = 7 * 1024;

/// The endpoint as its stored record holds it: every field but its secrets (empty, so the JSON
/// has no `secrets`), which the stores keep in a row or column of their own.
pub fn endpoint_fields(ep: &Endpoint) -> Endpoint {
    Endpoint {
        secrets: Vec::new(),
        ..ep.clone()
    }
}

/// [`StoreError::TooLarge`] unless `ep`'s record ([`endpoint_fields`]) fits
/// [`MAX_ENDPOINT_SIZE`] stored.
pub fn check_endpoint_size(ep: &Endpoint) -> Result<(), StoreError> {
    let json =
        serde_json::to_vec(&endpoint_fields(ep)).map_err(|e| StoreError::Encode(e.to_string()))?;
    check_endpoint_json(&ep.id, &json)
}

/// [`check_endpoint_size`] for an endpoint's record already serialized (`json`, its id `id`).
pub fn check_endpoint_json(id: &str, json: &[u8]) -> Result<(), StoreError> {
    let size = id.len() + json.len();
    if size > MAX_ENDPOINT_SIZE {
        return Err(StoreError::TooLarge {
            what: "the endpoint",
            size,
            max: MAX_ENDPOINT_SIZE,
        });
    }
    Ok(())
}

/// The hash a portal session is stored under: stores keep no token.
pub fn token_hash(token: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes()).into()
}

/// An event with everything that hangs off it, as a backup carries it ([`crate::backup`]): its
/// fields, its payload bytes exactly as ingested, and its deliveries in fan-out order, each with
/// its attempts oldest first.
#[derive(Debug, Clone)]
pub struct EventHistory {
    pub meta: EventMeta,
    pub payload: Bytes,
    pub deliveries: Vec<(Delivery, Vec<herald_core::model::Attempt>)>,
    /// Each delivery's place in its ordering lane in the store it was read from (a cluster's
    /// `lane_seq`: there event ids do not grow in commit order); empty, or `None` for a
    /// delivery, where the lane's order is its ids' (one box) or it is in no lane.
    pub lane_seqs: Vec<Option<i64>>,
}

impl EventHistory {
    /// What the event takes in a page ([`ARCHIVE_PAGE_BYTES`]): its payload and what its
    /// attempts keep (response bodies, errors, URLs, request headers), which for a small event
    /// fanned out to many endpoints and retried is most of it.
    pub fn bytes(&self) -> usize {
        let attempts: usize = self
            .deliveries
            .iter()
            .flat_map(|(_, attempts)| attempts)
            .map(|a| {
                a.response_body.len()
                    + a.error.as_ref().map_or(0, String::len)
                    + a.url.as_ref().map_or(0, String::len)
                    + a.request_headers
                        .iter()
                        .chain(&a.response_headers)
                        .map(|(k, v)| k.len() + v.len())
                        .sum::<usize>()
            })
            .sum();
        self.payload.len() + attempts
    }
}

/// What a backup carries besides the log, one row at a time ([`crate::backup`]). Secrets are in
/// it (the endpoints', the client certificates' keys, the account secrets).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DirectoryRecord {
    /// An endpoint with every field, and its client certificate chain and key (PEM) if it has one.
    Endpoint {
        endpoint: Box<Endpoint>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        client_certificate: Option<(String, String)>,
    },
    /// An account's plan.
    Plan { account_id: String, plan: String },
    /// An account's failure alert addresses (docs/operations.md, "Failure alerts").
    AlertEmails {
        account_id: String,
        emails: Vec<String>,
    },
    /// One of an account's secrets.
    AccountSecret {
        account_id: String,
        name: String,
        value: String,
    },
    /// An account's usage: the attempts counted in the minute and the day (window numbers:
    /// milliseconds since the epoch divided by the window's length) the backup read them in.
    Usage {
        account_id: String,
        minute: i64,
        minute_used: u64,
        day: i64,
        day_used: u64,
    },
    /// An endpoint's last successful attempt, when one is kept.
    LastSuccess { endpoint_id: String, at: Millis },
    /// An endpoint's breaker, when it is not closed and clean.
    Breaker {
        endpoint_id: String,
        breaker: herald_core::policy::breaker::Breaker,
    },
    /// An account's application record (docs/svix.md; archive format 4 on).
    Application {
        application: herald_core::model::Application,
    },
    /// The answer kept for a request key of an account (docs/svix.md; archive format 4 on).
    ApiAnswer {
        account_id: String,
        key: String,
        answer: ApiAnswer,
    },
}

/// The answer to a request made with an `idempotency-key` header (docs/svix.md), replayed to a
/// repeat of the key: its status and JSON body, and when it was first given. A message's
/// creation keeps only its event (`event_id`, an empty body): the store writes it in the
/// event's own commit, and a replay shows the message as it is stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApiAnswer {
    pub status: u16,
    pub body: String,
    pub at: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

/// What an account's purge removed ([`super::contract::Accounts::purge_account`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    pub events: u64,
    pub deliveries: u64,
    pub endpoints: u64,
}

/// The endpoint id under which [`super::contract::Minutes`] keeps the attempts that sent no
/// request (decisions such as `no_endpoint`, `paused` or `rate_limited`, with an endpoint or
/// without), by status: counted in the log's figures (`/v1/status`), never in an endpoint's
/// chart or success rate, which count its requests.
pub const NOT_SENT: &str = "";

/// The upper bounds (milliseconds) of the latency buckets a [`Minute`] counts sent attempts in;
/// a last bucket takes the slower ones. Fixed: stored rows hold counts by bucket index.
pub const LATENCY_BOUNDS_MS: [u64; 11] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000,
];

/// One endpoint's attempts in one minute (or one hour: [`super::contract::Minutes::endpoint_hours`]),
/// for the pages' charts: counts by status, and the latency of the attempts that were sent
/// (sum and max of all attempts' durations, and the sent ones by [`LATENCY_BOUNDS_MS`] bucket).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Minute {
    /// The minute's (the hour's) start, in Unix milliseconds.
    pub at: Millis,
    pub counts: [u32; Status::ALL.len()],
    pub latency_sum_ms: u64,
    pub latency_max_ms: u64,
    /// Sent attempts by latency: index `i` counts those up to `LATENCY_BOUNDS_MS[i]` (above the
    /// one before), the last those above every bound.
    pub latency_buckets: [u32; LATENCY_BOUNDS_MS.len() + 1],
}

impl Minute {
    pub const MS: Millis = 60_000;
    pub const HOUR_MS: Millis = 3_600_000;

    /// Counts one attempt of `status` that took `duration_ms`.
    pub fn record(&mut self, status: Status, duration_ms: u64) {
        self.counts[status as usize] = self.counts[status as usize].saturating_add(1);
        self.latency_sum_ms = self.latency_sum_ms.saturating_add(duration_ms);
        self.latency_max_ms = self.latency_max_ms.max(duration_ms);
        if status.is_sent() {
            let i = LATENCY_BOUNDS_MS.partition_point(|b| *b < duration_ms);
            self.latency_buckets[i] = self.latency_buckets[i].saturating_add(1);
        }
    }

    /// The latency (ms) under which a fraction `q` (0 to 1) of the sent attempts came back,
    /// estimated from the buckets (linear within the bucket it falls in; the last bucket reaches
    /// up to the max), never above the max; `None` without a sent attempt counted.
    pub fn latency_quantile(&self, q: f64) -> Option<u64> {
        let n: u64 = self.latency_buckets.iter().map(|c| u64::from(*c)).sum();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut below = 0u64;
        for (i, c) in self.latency_buckets.iter().enumerate() {
            let c = u64::from(*c);
            if c == 0 || below + c < rank {
                below += c;
                continue;
            }
            let low = if i == 0 { 0 } else { LATENCY_BOUNDS_MS[i - 1] };
            let high = LATENCY_BOUNDS_MS
                .get(i)
                .copied()
                .unwrap_or(self.latency_max_ms)
                .max(low);
            let at = low as f64 + (high - low) as f64 * (rank - below) as f64 / c as f64;
            return Some((at.round() as u64).min(self.latency_max_ms));
        }
        Some(self.latency_max_ms)
    }

    pub fn attempts(&self) -> u32 {
        self.counts.iter().sum()
    }

    pub fn delivered(&self) -> u32 {
        self.counts[Status::Delivered as usize]
    }

    /// Adds another count of the same minute: counts and latency sums add, the max is the larger.
    pub fn add(&mut self, other: &Minute) {
        for (c, o) in self.counts.iter_mut().zip(other.counts) {
            *c = c.saturating_add(o);
        }
        self.latency_sum_ms = self.latency_sum_ms.saturating_add(other.latency_sum_ms);
        self.latency_max_ms = self.latency_max_ms.max(other.latency_max_ms);
        for (b, o) in self.latency_buckets.iter_mut().zip(other.latency_buckets) {
            *b = b.saturating_add(o);
        }
    }

    /// The buckets as stored: counts by index (trailing empty ones left out).
    pub fn stored_buckets(&self) -> Vec<u32> {
        let used = self
            .latency_buckets
            .iter()
            .rposition(|c| *c > 0)
            .map_or(0, |i| i + 1);
        self.latency_buckets[..used].to_vec()
    }

    /// Buckets read back from [`Self::stored_buckets`] (an index past the last is added to it).
    pub fn set_buckets(&mut self, stored: impl IntoIterator<Item = u64>) {
        let last = self.latency_buckets.len() - 1;
        for (i, c) in stored.into_iter().enumerate() {
            let b = &mut self.latency_buckets[i.min(last)];
            *b = b.saturating_add(u32::try_from(c).unwrap_or(u32::MAX));
        }
    }

    /// The counts that are not zero, by status name: how the stores keep them (a name does not
    /// move when a status is added).
    pub fn named_counts(&self) -> std::collections::BTreeMap<&'static str, u32> {
        Status::ALL
            .iter()
            .zip(self.counts)
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| (s.as_str(), n))
            .collect()
    }

    /// Counts by status name back into a minute; a name this herald does not know is skipped.
    pub fn set_named(&mut self, name: &str, n: u64) {
        if let Some(s) = Status::parse(name) {
            self.counts[s as usize] = u32::try_from(n).unwrap_or(u32::MAX);
        }
    }
}

#[cfg(test)]
mod minute_tests {
    use super::*;

    fn of(durations: &[u64]) -> Minute {
        let mut m = Minute::default();
        for d in durations {
            m.record(Status::Delivered, *d);
        }
        m
    }

    #[test]
    fn quantiles_fall_in_the_right_bucket_and_never_pass_the_max() {
        // 90 fast (up to 10 ms), 10 slow (1 to 2.5 s): p50 in the first bucket, p95 in the slow.
        let mut d = vec![8; 90];
        d.extend([1_800; 10]);
        let m = of(&d);
        let p50 = m.latency_quantile(0.5).unwrap();
        let p95 = m.latency_quantile(0.95).unwrap();
        assert!(p50 <= 10, "{p50}");
        assert!((1_000..=1_800).contains(&p95), "{p95}");
        assert_eq!(
            m.latency_quantile(1.0),
            Some(1_800),
            "the max, not the bound"
        );
        // Above every bound: the last bucket reaches up to the max.
        let slow = of(&[40_000, 50_000]);
        assert_eq!(slow.latency_quantile(1.0), Some(50_000));
        assert!(slow.latency_quantile(0.5).unwrap() > 30_000);
        assert_eq!(Minute::default().latency_quantile(0.5), None);
    }

    #[test]
    fn only_sent_attempts_count_in_the_buckets_and_buckets_add_and_round_trip() {
        let mut m = of(&[10, 11]);
        m.record(Status::RateLimited, 0);
        assert_eq!(m.latency_buckets[0], 1, "10 ms is in the first bucket");
        assert_eq!(m.latency_buckets[1], 1);
        assert_eq!(
            m.latency_buckets.iter().sum::<u32>(),
            2,
            "a decision is not timed"
        );
        let mut sum = m;
        sum.add(&m);
        assert_eq!(sum.latency_buckets[1], 2);
        let mut back = Minute::default();
        back.set_buckets(sum.stored_buckets().into_iter().map(u64::from));
        assert_eq!(back.latency_buckets, sum.latency_buckets);
        assert_eq!(
            sum.stored_buckets().len(),
            2,
            "trailing empty buckets are left out"
        );
    }
}
