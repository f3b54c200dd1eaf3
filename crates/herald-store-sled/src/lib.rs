//! The embedded store of one box, on sled (the only module that touches it): typed trees, the
//! group-commit committer, the due index.
//!
//! # Layout
//!
//! An ingest writes one row per event; an attempt usually one row. Everything else about a
//! delivery is derived:
//!
//! The `log` tree holds the ingest and delivery log, one kind of row per key prefix
//! ([`codec::key`]):
//!
//! - event: event ULID → the event's fields, its *targets* (the endpoint of each delivery) and its
//!   payload (inline, or in chunk rows). A delivery's id is derived from its event's
//!   ([`herald_core::ids`]), so the event row is also the delivery's fixed record.
//! - attempt: (delivery ULID, attempt number) → the attempt and the delivery's state after it
//!   (the request headers that follow from the key and the time are not stored, see
//!   [`codec::encode_attempt`]).
//! - pending: delivery ULID → due time and lane, for a delivery waiting for an attempt other than
//!   its first (a retry, a manual retry, a debounce window's end).
//! - A delivery with neither attempts nor a pending entry is *fresh*: pending since ingest, due
//!   at once. Its state is its pending entry if it has one, else its last attempt's, else fresh.
//! - debounce windows, written by the committer at ingest.
//! - folds: the rows above of many consecutive ended events, packed into one compressed row
//!   once they are older than `storage.fold_after` ([`fold`]).
//!
//! Idempotency keys live beside sled, in tables of their own in `idempotency/` ([`keys`]).
//!
//! `meta` holds the layout version, the counts by state and the fresh watermark (below).
//! - `endpoints`, `accounts`, `quota`, `account_secrets`, `breakers`: see [`accounts`].
//! - `alert_marks`: each endpoint's failure alert mark and each account's count of alert
//!   mails this hour, see [`alerts`].
//! - `portal_sessions`: see [`sessions`].
//! - `client_certs`: endpoints' client certificates and keys (mutual TLS), see [`endpoints`].
//! - `minutes`: endpoints' attempts per minute over the last day (the charts), see [`minutes`].
//! - `hours`: endpoints' attempts per hour over the last week (the week's chart), likewise.
//!
//! # Consistency
//!
//! A commit cycle's rows go in one sled batch on the `log` tree, which sled recovers all or
//! nothing: a cycle whose fsync failed (its requests answered `503`) leaves nothing behind, even
//! if part of it reached the file (see [`commit`]). The engine's writes after an attempt are
//! plain inserts, in an order that is safe to cut anywhere: the pending entry is written before
//! the attempt that schedules it and removed after the attempt that ends it (a crash in between
//! attempts the delivery once more: at least once). They reach disk with sled's periodic flush.
//!
//! # Start-up
//!
//! Pending entries come back from the `pending` tree. Fresh deliveries are found by scanning the
//! events from the *fresh watermark*: a ULID below which no event has a fresh delivery, kept in
//! memory by bucketing fresh deliveries by second and written to `meta` every second, with the
//! counts of ended deliveries (after a crash they miss at most the last second's changes; a
//! clean stop saves them exactly). Pending deliveries are counted at start.

mod accounts;
mod alerts;
mod applications;
mod archive;
pub mod codec;
mod commit;
mod counts;
mod cycle;
mod debounce;
mod deliveries;
mod due;
mod endpoints;
mod fold;
mod health;
pub mod key;
mod keys;
mod migrate;
mod minutes;
mod purge;
mod queue;
mod retention;
mod scan;
mod sessions;
mod sweep;
/// Every operation of the contract, each in the file of its concern (`herald-store`'s lib.rs
/// has the table).
impl herald_store::contract::Store for SledStore {}

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

#[cfg(test)]
pub(crate) mod tests;
mod undo;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use tokio::sync::{mpsc, oneshot};

pub use counts::Counts;
use counts::Fresh;
pub use due::{Due, DueIndex, Entry, LaneWaiting, Refill};
pub use fold::Folded;
use fold::Place;
pub use queue::SledClaim;
pub use retention::Pruned;

use codec::EventRecord;
use herald_core::clock::{Clock, Millis};
use herald_core::ids::{self, EVENT};
use herald_core::model::{Endpoint, EventMeta};
use herald_core::policy::ordering;
use herald_store::contract::Ingest;
pub(crate) use herald_store::directory::DirectoryCopy;
use herald_store::files;
use herald_store::StoreMetrics;
pub(crate) use herald_store::{
    lane_of, Changed, DebounceRule, DeliveryFilter, DueDelivery, IngestOutcome, Lane, NewEvent,
    StoreError, IDEMPOTENCY_WINDOW_MS, NO_LANE,
};

/// The layout version this herald writes (`meta` key `format`). Formats 2 (herald 0.1's first
/// releases), 3 (idempotency keys in the `log` tree), 4 (no folded history) and 5 (a row per
/// idempotency key), 6 (idempotency keys in a sled database of their own), 7 (debounce windows
/// and operator events without an index by account), 8 (endpoints' secrets in their records)
/// 9 (chart minutes keyed by endpoint first), 10 (no applications, event labels or attempt
/// URLs), 11 (no last successes), 12 (no response headers), 13 (no hours, no latency
/// buckets) and 14 (no trace contexts) are migrated at open ([`migrate`]).
const FORMAT: u8 = 15;

/// The idempotency keys' tables ([`keys`]), in the data directory.
const KEYS_DIR: &str = "idempotency";
/// Formats 4 to 6's sled database of idempotency keys, removed once migrated.
const OLD_KEYS_DIR: &str = "keys";

pub(crate) struct Trees {
    /// Events, payload chunks, attempts, pending entries, debounce windows ([`codec::key`]):
    /// one tree, so a commit cycle is one atomic batch.
    log: sled::Tree,
    meta: sled::Tree,
    /// Endpoints' records by id, and their secrets in rows keyed by the id, a NUL and the
    /// row's number ([`endpoints`]).
    endpoints: sled::Tree,
    accounts: sled::Tree,
    quota: sled::Tree,
    account_secrets: sled::Tree,
    breakers: sled::Tree,
    /// Endpoints' failure alert marks, by endpoint id ([`alerts`]).
    alert_marks: sled::Tree,
    portal_sessions: sled::Tree,
    /// Endpoints' client certificate chains and keys (PEM), write-only, in rows of at most
    /// [`codec::CHUNK`] bytes keyed by endpoint id, a NUL and the row's number.
    client_certs: sled::Tree,
    /// Endpoints' attempts per minute for the charts ([`minutes`]): the hour, the endpoint
    /// id, a NUL and the minute's start, to JSON counts.
    minutes: sled::Tree,
    /// Endpoints' attempts per hour for the week's chart ([`minutes`]): the day, the endpoint
    /// id, a NUL, the hour.
    hours: sled::Tree,
    /// Accounts' application records, and answers kept for request keys ([`applications`]).
    applications: sled::Tree,
    api_answers: sled::Tree,
    /// Endpoints' last successful attempts, by endpoint id, to the time as 8 big-endian bytes
    /// ([`minutes`]).
    successes: sled::Tree,
}

/// What the committer shares with the store.
pub(crate) struct Inner {
    db: sled::Db,
    trees: Trees,
    data_file: File,
    /// The data directory.
    path: std::path::PathBuf,
    /// Idempotency keys, in their own database ([`keys`]).
    keys: keys::Keys,
    due: Arc<DueIndex>,
    stats: Counts,
    fresh: Mutex<Fresh>,
    health: health::Health,
    metrics: Arc<StoreMetrics>,
    clock: Arc<dyn Clock>,
    /// Deliveries someone is reading, changing and writing now ([`Claim`]).
    claims: Mutex<HashSet<u128>>,
    /// The ordering of each ordered endpoint, by lane (kept in step with the endpoints).
    orderings: RwLock<HashMap<Lane, herald_core::model::Ordering>>,
    /// Folds recently read ([`fold`]).
    fold_cache: Mutex<fold::FoldCache>,
    /// Serializes the writers of folds (the folder, an unfold, retention).
    fold_writes: Mutex<()>,
    /// Bumped before and after every batch that moves events between hot rows and folds (odd
    /// while one is applied), so a read can tell that one overlapped it ([`Inner::consistent`]).
    fold_seq: AtomicU64,
    /// Packing of the account index ([`fold`]).
    index_pass: Mutex<fold::IndexPass>,
    /// A thread reads spilled due entries back ([`SledStore::refill_due`]).
    refilling: AtomicBool,
    /// Endpoints' circuit breakers, as stored, once read ([`accounts`]).
    breakers: Mutex<HashMap<String, herald_core::policy::breaker::Breaker>>,
    /// Accounts purged while the scheduler may still hold entries of their events
    /// ([`purge::Tombstones`]): what an attempt of one would record is discarded. A delivery's
    /// write reads it under the read lock, and a purge adds its tombstone under the write lock
    /// before it removes anything, so no write of a purged event's delivery lands after the
    /// purge.
    tombstones: RwLock<purge::Tombstones>,
    /// Failures injected by the store's own tests.
    #[cfg(test)]
    faults: tests::Faults,
}

/// The one exclusion over a delivery: whoever holds its claim is the only one reading,
/// changing and writing it (the engine for the whole of an attempt, a manual retry, retention
/// pruning it, the committer superseding a trailing candidate). Released when dropped.
pub struct Claim {
    inner: Arc<Inner>,
    delivery: u128,
}

impl Claim {
    pub fn delivery(&self) -> u128 {
        self.delivery
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.inner.lock_claims().remove(&self.delivery);
    }
}

/// A row this large or larger is let go of after a bulk read or write
/// ([`Inner::let_go_of_rows`]).
const LARGE_ROW: usize = 1024;

impl Inner {
    /// sled's flush (a `sync_file_range`), then a real fdatasync of its data file. A failure
    /// fails the store for good ([`health`]), and so does a data directory that is no longer
    /// where it was opened: nothing synced into unlinked files is durable.
    fn sync(&self) -> Result<(), StoreError> {
        self.sync_only()?;
        #[cfg(test)]
        if self.faults.look.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(
                std::io::Error::other("injected: cannot look at the data directory").into(),
            );
        }
        self.health.usable()
    }

    /// The flush and fdatasync of [`Inner::sync`] without its look at the data directory: for
    /// an undo, which must reach the disk even when that look failed the commit it undoes (a
    /// transient `stat` error would fail the undo too, and keep its fresh seconds for good).
    fn sync_only(&self) -> Result<(), StoreError> {
        self.health.not_failed()?;
        let started = std::time::Instant::now();
        let synced = self.sync_files();
        if let Err(e) = &synced {
            self.health.fail_for_good(&format!("a sync failed: {e}"));
        }
        synced?;
        self.metrics
            .fsync_duration
            .observe_duration(started.elapsed());
        Ok(())
    }

    fn sync_files(&self) -> Result<(), StoreError> {
        #[cfg(test)]
        self.faults.hold();
        #[cfg(test)]
        self.faults.check(&self.faults.sync)?;
        self.db.flush()?;
        self.data_file.sync_data()?;
        Ok(())
    }

    fn set_healthy(&self, ok: bool) {
        self.health.set_last_commit(ok);
    }

    /// The time idempotency keys are looked up and expired at: `now`, or the newest event id's
    /// time if the clock is behind it. A key is filed under its event id's day and ids never go
    /// backwards, so after the clock steps back (an NTP step, a VM resume) the wall clock's day
    /// would look in the wrong tables, and a clock that ran a day ahead and was corrected would
    /// expire the real day's keys.
    fn key_time(&self, now: Millis) -> Millis {
        now.max(ids::ulid_ms(self.lock_fresh().last_event))
    }

    fn lock_fresh(&self) -> std::sync::MutexGuard<'_, Fresh> {
        self.fresh.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_claims(&self) -> std::sync::MutexGuard<'_, HashSet<u128>> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The delivery's claim, unless someone holds it.
    fn claim(self: &Arc<Self>, delivery: u128) -> Option<Claim> {
        self.lock_claims().insert(delivery).then(|| Claim {
            inner: self.clone(),
            delivery,
        })
    }

    fn event_record(
        &self,
        event: u128,
    ) -> Result<Option<(EventRecord, Option<Bytes>, Place)>, StoreError> {
        let Some((v, place)) = self.locate(event)? else {
            return Ok(None);
        };
        let (rec, inline) = self.decode_event(event, &v, &place)?;
        let inline = inline.map(Bytes::copy_from_slice);
        Ok(Some((rec, inline, place)))
    }

    /// The event record, its payload bytes (read from its chunks if not inline) and where its
    /// rows are.
    pub(crate) fn event_with_payload(
        &self,
        ulid: u128,
    ) -> Result<Option<(EventRecord, Bytes, Place)>, StoreError> {
        let Some((rec, inline, place)) = self.event_record(ulid)? else {
            return Ok(None);
        };
        let payload = match inline {
            Some(bytes) => bytes,
            None if rec.payload_inline => Bytes::new(),
            None => {
                let mut buf = BytesMut::with_capacity(rec.payload_len);
                self.each_row(&place, &key::of(key::CHUNK, ulid), |_, v| {
                    buf.extend_from_slice(v);
                    Ok(())
                })?;
                if buf.len() != rec.payload_len {
                    return Err(StoreError::Corrupt(format!(
                        "payload of {} has {} of {} bytes",
                        rec.meta.id,
                        buf.len(),
                        rec.payload_len
                    )));
                }
                buf.freeze()
            }
        };
        Ok(Some((rec, payload, place)))
    }

    /// Lets sled's cache evict the pages holding an event's large rows (its payload chunks,
    /// its attempts that kept a large response), just read or written in bulk (a backup's
    /// pages, a restore's), by reading each of them again.
    ///
    /// sled 0.34 counts accesses in 256 shards of its page table and looks for pages to evict
    /// only once a shard has queued 64 of them. A bulk read or write touches each leaf page
    /// (up to 17 rows) once or a few times, so the pages it loads stay in memory, whatever
    /// `storage.cache_capacity`, until every shard has seen 64 accesses: a backup of 225 MB of
    /// payloads grew herald by 196 MiB. A leaf of rows written in order holds 8 to 17 of them
    /// (sled splits one past 16; deletions can leave as few as 4 before it merges), so reading
    /// each row 8 times makes 64 accesses on its shard for most leaves, and the shard's queue,
    /// shared by every page whose id falls in it, fills with the next ones; the shard then
    /// evicts down to its share of the cache. Each read is of a page in memory (a few
    /// microseconds a row). Rows under [`LARGE_ROW`] are left alone: their pages are small. A
    /// row folded since, or never written, is not found, at the same cost.
    pub(crate) fn let_go_of_rows(
        &self,
        h: &herald_store::EventHistory,
        event: u128,
    ) -> Result<(), StoreError> {
        const READS: usize = 8;
        let chunks = match h.payload.len() > codec::INLINE_PAYLOAD {
            true => h.payload.len().div_ceil(codec::CHUNK),
            false => 0,
        };
        let chunks = (0..chunks).map(|i| key::chunk(event, i as u32));
        let attempts = h
            .deliveries
            .iter()
            .enumerate()
            .flat_map(|(index, (_, attempts))| {
                attempts
                    .iter()
                    .filter(|a| {
                        a.response_body.len() + a.error.as_ref().map_or(0, String::len) >= LARGE_ROW
                    })
                    .map(move |a| key::attempt(ids::delivery_of(event, index), a.number))
            });
        for key in chunks.chain(attempts) {
            for _ in 0..READS {
                self.trees.log.get(key)?;
            }
        }
        Ok(())
    }

    /// Frees what a bulk write replaced. sled pins one epoch guard for a whole batch, and the
    /// epoch collector it uses (crossbeam's) frees deferred objects only on pins, at most 8
    /// bags of 64 every 128 pins: a restore that writes batch after batch and reads nothing
    /// queued every node version its inserts replaced (300,000 small events: 650 MB). Each
    /// flush here moves this thread's bag to the global queue and frees up to 512 objects, so
    /// a flush per 64 rows written keeps ahead of what they replaced. (Herald's own reads pin
    /// often enough while it serves.)
    pub(crate) fn release_garbage(rows: usize) {
        for _ in 0..=rows / 64 {
            crossbeam_epoch::pin().flush();
        }
    }

    /// The sequence a delivery to `lane` of this event joins, if `lane` is an ordered
    /// endpoint's (docs/delivery-contract.md).
    fn sequence(&self, lane: Lane, ordering_key: Option<&str>, payload: &[u8]) -> Option<u64> {
        let orderings = self.orderings.read().unwrap_or_else(|e| e.into_inner());
        let ordering = orderings.get(&lane)?;
        Some(ordering::sequence(&ordering::key_of(
            ordering,
            ordering_key,
            payload,
        )))
    }

    /// Like [`Self::sequence`], reading the event (only when `lane` is ordered).
    fn sequence_of_stored(&self, lane: Lane, event: u128) -> Result<Option<u64>, StoreError> {
        if !self.is_ordered(lane) {
            return Ok(None);
        }
        Ok(self
            .consistent(|| self.event_with_payload(event))?
            .and_then(|(rec, payload, _)| {
                self.sequence(lane, rec.meta.ordering_key.as_deref(), &payload)
            }))
    }

    fn is_ordered(&self, lane: Lane) -> bool {
        self.orderings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&lane)
    }

    /// An event row decoded, with its targets read from their rows if it keeps them there.
    fn decode_event<'v>(
        &self,
        event: u128,
        v: &'v [u8],
        place: &Place,
    ) -> Result<(EventRecord, Option<&'v [u8]>), StoreError> {
        let (mut rec, inline) = codec::decode_event(event, v)?;
        if rec.targets_in_rows {
            rec.targets.reserve(rec.target_count);
            self.each_row(place, &key::of(key::TARGETS, event), |_, v| {
                codec::decode_targets(v, &mut rec.targets)
            })?;
            if rec.targets.len() != rec.target_count {
                return Err(StoreError::Corrupt(format!(
                    "event {} has {} of its {} targets",
                    rec.meta.id,
                    rec.targets.len(),
                    rec.target_count
                )));
            }
        }
        Ok((rec, inline))
    }
}

/// How often the fresh watermark and the counts are written to `meta`.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

mod meta_keys {
    pub const FORMAT: &[u8] = b"format";
    pub const COUNTS: &[u8] = b"counts";
    pub const FRESH_FROM: &[u8] = b"fresh_from";
    /// Account index rows starting before this ULID are packed (`fold.rs`).
    pub const INDEX_PACKED: &[u8] = b"index_packed";
}

pub struct SledStore {
    /// A handle of its own, for reads that move to a blocking thread ([`blocking`]).
    this: std::sync::Weak<SledStore>,
    inner: Arc<Inner>,
    /// The committer thread, taken by [`SledStore::take_committer`] to wait for the store to close.
    committer: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Fault injection (tests and drills): makes every quota check fail as a storage error.
    quota_fault: AtomicBool,
    commit_tx: mpsc::Sender<commit::Job>,
    /// Endpoints and synced plans in memory ([`directory`]).
    directory: DirectoryCopy,
    /// Serializes endpoint changes (API and engine alike): each reads the current endpoint,
    /// changes it and writes both sled and the map under it; the fsync that makes a change
    /// durable happens after it is released, so changes never queue behind one another's fsync.
    endpoint_writes: Mutex<()>,
    /// Each rate-limited endpoint's token bucket (in memory: one box sends alone; a restart
    /// starts them full).
    buckets: Mutex<HashMap<String, herald_core::policy::tokens::Bucket>>,
    /// Where the retention sweep's folding goes on from ([`sweep`]).
    fold_cursor: Mutex<sweep::FoldCursor>,
    path: PathBuf,
}

/// Runs `read` on a blocking thread with a handle of the store.
pub(crate) async fn blocking<T: Send + 'static>(
    store: &SledStore,
    read: impl FnOnce(&SledStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = store.this.upgrade().ok_or(StoreError::Closed)?;
    tokio::task::spawn_blocking(move || read(&store))
        .await
        .map_err(|e| StoreError::Engine(Arc::new(e)))?
}

impl SledStore {
    /// Opens (or creates) the store at `path`, finds what is pending, and starts its committer.
    pub fn open(
        path: &Path,
        cache_capacity: u64,
        clock: Arc<dyn Clock>,
        metrics: Arc<StoreMetrics>,
    ) -> Result<Arc<SledStore>, StoreError> {
        let (db, trees, data_file, keys) = open_files(path, cache_capacity, clock.now_ms())?;
        let endpoints = load_endpoints(&trees.endpoints)?;
        let plans = accounts::load_plans(&trees.accounts)?;
        let orderings = endpoints
            .values()
            .filter_map(|ep| Some((lane_of(Some(&ep.id)), ep.ordering.clone()?)))
            .collect();

        let inner = Arc::new(Inner {
            db,
            trees,
            data_file,
            path: path.to_path_buf(),
            keys,
            due: Arc::new(DueIndex::default()),
            stats: Counts::default(),
            fresh: Mutex::new(Fresh::default()),
            health: health::Health::new(path)?,
            metrics,
            clock,
            claims: Mutex::new(HashSet::new()),
            orderings: RwLock::new(orderings),
            fold_cache: Mutex::default(),
            fold_writes: Mutex::new(()),
            fold_seq: AtomicU64::new(0),
            index_pass: Mutex::default(),
            refilling: AtomicBool::new(false),
            breakers: Mutex::default(),
            tombstones: RwLock::default(),
            #[cfg(test)]
            faults: Default::default(),
        });
        scan::rebuild(&inner)?;

        let (commit_tx, rx) = mpsc::channel(16 * 1024);
        let committer = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("herald-commit".into())
                .spawn(move || commit::run(&inner, rx))?
        };
        let store = Arc::new_cyclic(|this| SledStore {
            this: this.clone(),
            inner,
            committer: Mutex::new(Some(committer)),
            quota_fault: AtomicBool::new(false),
            commit_tx,
            directory: DirectoryCopy::new(endpoints, plans),
            endpoint_writes: Mutex::new(()),
            buckets: Mutex::default(),
            fold_cursor: Mutex::default(),
            path: path.to_path_buf(),
        });
        tokio::spawn(checkpoints(Arc::downgrade(&store)));
        Ok(store)
    }

    /// The committer's thread. It ends once the last `SledStore` handle is dropped, and with it the
    /// last handle to sled (which releases its lock on the data directory).
    pub fn take_committer(&self) -> Option<std::thread::JoinHandle<()>> {
        self.committer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn due(&self) -> &DueIndex {
        &self.inner.due
    }

    /// Reads back the spilled fresh entries of the lanes whose entries in memory ran low
    /// ([`DueIndex::refills`]), on a thread: one at a time, each walk serving every lane that
    /// waits; the index wakes its waiters when they are in. The engine calls this after each
    /// take that handed out entries (a take is what asks for refills).
    pub fn refill_due(&self) {
        if !self.inner.due.has_refills() || self.inner.refilling.swap(true, Ordering::AcqRel) {
            return; // nothing to do, or the running refiller takes it when it is done
        }
        let inner = self.inner.clone();
        let started = std::thread::Builder::new()
            .name("herald-refill".into())
            .spawn(move || loop {
                let jobs = inner.due.refills();
                if !jobs.is_empty() {
                    if let Err(e) = scan::refill(&inner, &jobs) {
                        tracing::error!(error = %e, "cannot read spilled deliveries back; trying again in a second");
                        std::thread::sleep(std::time::Duration::from_secs(1));
                        for job in jobs {
                            inner.due.refill_failed(job);
                        }
                    }
                    continue;
                }
                inner.refilling.store(false, Ordering::Release);
                // A job queued after the look above, by a take that found this thread running.
                if !inner.due.has_refills() || inner.refilling.swap(true, Ordering::AcqRel) {
                    return;
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start a thread to read spilled deliveries back");
            self.inner.refilling.store(false, Ordering::Release);
        }
    }

    pub fn stats(&self) -> &Counts {
        &self.inner.stats
    }

    /// True while the last commit succeeded, nothing failed for good ([`health`]), and sled
    /// answers reads.
    pub fn healthy(&self) -> bool {
        self.inner.health.healthy()
            && self.inner.trees.meta.get(meta_keys::FORMAT).is_ok()
            && !self.commit_tx.is_closed()
    }

    pub fn size_on_disk(&self) -> u64 {
        self.inner.db.size_on_disk().unwrap_or(0) + self.inner.keys.size_on_disk()
    }

    /// Stores events durably (group commit); returns once they are fsynced.
    pub async fn ingest(&self, events: Vec<NewEvent>) -> Result<Vec<IngestOutcome>, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.commit_tx
            .send(commit::Job::Ingest { events, reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Makes every write so far durable.
    pub async fn sync(&self) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.commit_tx
            .send(commit::Job::Sync { reply })
            .await
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Saves the counts and the fresh watermark and syncs. For shutdown, once nothing else
    /// writes.
    pub fn close(&self) -> Result<(), StoreError> {
        self.checkpoint()?;
        if let Err(e) = self.inner.health.usable() {
            // Hand sled's buffers to the file (no promise of durability) and record no
            // watermark of the keys: nothing written since the failure is known to be on disk.
            let _ = self.inner.db.flush();
            return Err(e);
        }
        self.inner.keys.checkpoint()?;
        self.inner.sync()
    }

    /// Writes the fresh watermark and the counts (they reach disk with sled's periodic flush;
    /// an older watermark on disk only makes the next start scan a little more).
    fn checkpoint(&self) -> Result<(), StoreError> {
        let w = self.inner.lock_fresh().watermark();
        let meta = &self.inner.trees.meta;
        meta.insert(meta_keys::FRESH_FROM, &w.to_be_bytes())?;
        let counts: Vec<u8> = self
            .inner
            .stats
            .snapshot()
            .iter()
            .flat_map(|n| n.to_be_bytes())
            .collect();
        meta.insert(meta_keys::COUNTS, counts)?;
        self.inner.sweep_tombstones();
        Ok(())
    }

    // --- events -------------------------------------------------------------------------------

    /// The event and its payload bytes, exactly as ingested.
    pub fn event(&self, id: &str) -> Result<Option<(EventMeta, Bytes)>, StoreError> {
        let Some(ulid) = ids::parse(EVENT, id) else {
            return Ok(None);
        };
        let read = self
            .inner
            .consistent(|| self.inner.event_with_payload(ulid))?;
        Ok(read.map(|(rec, payload, _)| (rec.meta, payload)))
    }
}

/// Opens the data directory's files at `now`: sled's database and the idempotency keys'
/// tables, brought to the current format, with what failed commits wrote undone and the keys a
/// crash took written again. Nothing reads the log before this returns.
fn open_files(
    path: &Path,
    cache_capacity: u64,
    now: Millis,
) -> Result<(sled::Db, Trees, File, keys::Keys), StoreError> {
    files::create_private_dir(path)?;
    remove_partial_snapshots(path)?;
    let db = open_sled(
        sled::Config::new()
            .path(path)
            .cache_capacity(cache_capacity)
            .flush_every_ms(Some(500)),
        path,
    )?;
    let format = check_format(&db)?;
    let trees = Trees::open(&db)?;
    let data_file = File::open(path.join("db"))?;
    let keys = keys::Keys::open(&path.join(KEYS_DIR))?;
    let old_keys = path.join(OLD_KEYS_DIR);
    migrate_to_current(format, &db, &trees, &data_file, &keys, &old_keys, now)?;
    // What commits that failed (answered 503) wrote goes before anything reads the log.
    apply_undo_files(path, &db, &trees, &data_file)?;
    // Formats 4 to 6's keys database, moved by the migration (left behind if a crash
    // came between the format's record and this).
    if old_keys.exists() {
        std::fs::remove_dir_all(&old_keys)?;
    }
    // Keys a crash took from their database come back from the log before any ingest.
    let rebuilt = keys.rebuild(&trees.log, now)?;
    if rebuilt > 0 {
        tracing::info!(
            idempotency_keys = rebuilt,
            "idempotency keys of the last events written again"
        );
    }
    // Files sled made before this herald set its umask (an older herald's) are private too.
    files::make_private(path)?;
    Ok((db, trees, data_file, keys))
}

/// Writes the fresh watermark and the counts every [`CHECKPOINT_EVERY`] until the store is
/// gone.
async fn checkpoints(store: std::sync::Weak<SledStore>) {
    let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(store) = store.upgrade() else {
            return;
        };
        if let Err(e) = store.checkpoint() {
            tracing::warn!(error = %e, "cannot write the store's checkpoint");
        }
        // Syncs a database: off the runtime's workers. Keys that cannot be synced may be gone
        // after a crash, and a retry within their window would be delivered again: the store
        // fails for good, like any failed sync.
        let synced = tokio::task::spawn_blocking(move || {
            let checkpoint = store.inner.health.usable();
            let checkpoint = checkpoint.and_then(|()| store.inner.keys.checkpoint());
            if let Err(e) = &checkpoint {
                store
                    .inner
                    .health
                    .fail_for_good(&format!("cannot sync the idempotency keys: {e}"));
            }
            checkpoint
        })
        .await;
        if let Ok(Err(e)) = synced {
            tracing::warn!(error = %e, "cannot sync the idempotency keys");
        }
    }
}

/// How long an open waits for sled's lock on a data directory ([`open_sled`]).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens a sled database, waiting up to [`LOCK_WAIT`] for the lock on its `db` file. sled
/// lets the lock go when its file is closed, which its own I/O threads may do a moment after
/// the last handle dropped: a store closed and opened again in one process (tests, `herald
/// copy`) can find it still held. A lock held longer is another process's: the error says so.
pub(crate) fn open_sled(config: sled::Config, path: &Path) -> Result<sled::Db, StoreError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match config.open() {
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if std::time::Instant::now() >= deadline {
                    return Err(StoreError::InUse(path.to_path_buf()));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened => return Ok(opened?),
        }
    }
}

/// Brings a store of an older format (`Some(2..FORMAT)`) to [`FORMAT`] step by step, and records the
/// format a new or migrated store is in, durably.
fn migrate_to_current(
    format: Option<u8>,
    db: &sled::Db,
    trees: &Trees,
    data_file: &File,
    keys: &keys::Keys,
    old_keys: &Path,
    now: herald_core::clock::Millis,
) -> Result<(), StoreError> {
    if format == Some(2) {
        migrate::from_format_2(db, trees, data_file, now)?;
    }
    if matches!(format, Some(2 | 3)) {
        migrate::from_format_3(trees, keys)?;
    }
    if matches!(format, Some(2..=4)) {
        migrate::from_format_4();
    }
    if matches!(format, Some(2..=5)) {
        migrate::from_format_5();
    }
    if matches!(format, Some(2..=6)) {
        migrate::from_format_6(old_keys, keys)?;
    }
    if matches!(format, Some(2..=7)) {
        migrate::from_format_7(trees)?;
    }
    if matches!(format, Some(2..=8)) {
        migrate::from_format_8(trees)?;
    }
    if matches!(format, Some(2..=9)) {
        migrate::from_format_9(trees)?;
    }
    if matches!(format, Some(2..=10)) {
        migrate::from_format_10();
    }
    if matches!(format, Some(2..=11)) {
        migrate::from_format_11();
    }
    if matches!(format, Some(2..=12)) {
        migrate::from_format_12();
    }
    if matches!(format, Some(2..=13)) {
        migrate::from_format_13(trees)?;
    }
    if matches!(format, Some(2..=14)) {
        migrate::from_format_14();
    }
    if format != Some(FORMAT) {
        trees.meta.insert(meta_keys::FORMAT, &[FORMAT])?;
        db.flush()?;
        data_file.sync_data()?;
    }
    Ok(())
}

/// Applies the undo files that commits which failed left ([`undo`]), durably, and removes them.
fn apply_undo_files(
    path: &Path,
    db: &sled::Db,
    trees: &Trees,
    data_file: &File,
) -> Result<(), StoreError> {
    let undone = undo::pending(path)?;
    if undone.is_empty() {
        return Ok(());
    }
    let mut put_back = 0;
    for file in &undone {
        put_back += undo::apply(file, &trees.log)?;
    }
    db.flush()?;
    data_file.sync_data()?;
    for file in &undone {
        std::fs::remove_file(file)?;
    }
    File::open(path.join(undo::UNDO_DIR))?.sync_all()?;
    tracing::warn!(
        failed_commits = undone.len(),
        keys = put_back,
        "the writes of commits that failed (their requests were answered 503) are undone"
    );
    Ok(())
}

/// Every endpoint, by id, as the `endpoints` tree holds them ([`endpoints`]).
fn load_endpoints(tree: &sled::Tree) -> Result<HashMap<String, Arc<Endpoint>>, StoreError> {
    endpoints::load(tree)
}

impl Trees {
    fn open(db: &sled::Db) -> Result<Trees, StoreError> {
        let tree = |name: &str| db.open_tree(name);
        Ok(Trees {
            log: tree("log")?,
            meta: tree("meta")?,
            endpoints: tree("endpoints")?,
            accounts: tree("accounts")?,
            quota: tree("quota")?,
            account_secrets: tree("account_secrets")?,
            breakers: tree("breakers")?,
            alert_marks: tree("alert_marks")?,
            portal_sessions: tree("portal_sessions")?,
            client_certs: tree("client_certs")?,
            minutes: tree("minutes")?,
            hours: tree("hours")?,
            applications: tree("applications")?,
            api_answers: tree("api_answers")?,
            successes: tree("successes")?,
        })
    }
}

/// The data directory's storage format: `None` for a new one, `Some(2..FORMAT)` for one the
/// migration upgrades, `Some(FORMAT)` for a current one. Any other is refused (it would read as
/// garbage).
fn check_format(db: &sled::Db) -> Result<Option<u8>, StoreError> {
    let meta = db.open_tree("meta")?;
    match meta.get(meta_keys::FORMAT)? {
        Some(v) if v.as_ref() == [FORMAT] => Ok(Some(FORMAT)),
        Some(v) if matches!(v.as_ref(), [f] if (2..FORMAT).contains(f)) => Ok(Some(v[0])),
        Some(v) => Err(StoreError::Format(format!(
            "the data directory is in storage format {:?}; this herald reads formats 2 to \
             {FORMAT} (a newer herald wrote it: run that one)",
            v.as_ref()
        ))),
        None if db.tree_names().iter().any(|n| n.as_ref() == b"deliveries") => {
            Err(StoreError::Format(format!(
                "the data directory was written by an early herald (storage format 1), which \
                 no release since reads; this herald reads formats 2 to {FORMAT}: start it on \
                 a new data directory"
            )))
        }
        None => Ok(None),
    }
}

/// A crash while sled writes a snapshot can leave `snap.*.generating`, and sled's `open` then
/// fails with `Corruption` (sled issues #1527, #1533). The finished snapshot and the log are
/// intact, so the partial file is removed before opening.
fn remove_partial_snapshots(path: &Path) -> Result<(), StoreError> {
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            tracing::warn!(file = %entry.path().display(), "removing a partial sled snapshot left by a crash");
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}
