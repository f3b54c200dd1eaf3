//! The only module that touches sled: typed trees, the group-commit committer, the due queue.
//!
//! Trees: `events` (meta + inline payload), `payloads` (chunks of large payloads), `deliveries`,
//! `attempts` (keyed delivery id + attempt id), `queue` (due time + delivery id, the durable due
//! queue), `endpoints`, `idempotency`. Ingest goes through the committer ([`commit`]) and is
//! fsynced before it is acknowledged; attempt records are written directly and reach disk with
//! sled's periodic flush (a crash may lose the last result, and the delivery is then attempted
//! again: at least once). Endpoints are also held in memory, since every attempt and every
//! ingest reads them.

mod accounts;
mod codec;
mod commit;
mod due;
mod retention;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::{Bytes, BytesMut};
use sled::transaction::{ConflictableTransactionError, TransactionError};
use sled::Transactional;
use tokio::sync::{mpsc, oneshot};

pub use commit::{DebounceRule, IngestOutcome, NewEvent, IDEMPOTENCY_WINDOW_MS};
pub use due::DueIndex;
pub use retention::Pruned;

use crate::clock::Millis;
use crate::metrics::Metrics;
use crate::model::{Attempt, Delivery, DeliveryState, Endpoint, EventMeta, Status};

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("storage error: {0}")]
    Sled(String),
    #[error("storage I/O error: {0}")]
    Io(String),
    #[error("stored record is unreadable: {0}")]
    Corrupt(String),
    #[error("storage is closed")]
    Closed,
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        StoreError::Sled(e.to_string())
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(e.to_string())
    }
}

fn tx_error(e: TransactionError<StoreError>) -> StoreError {
    match e {
        TransactionError::Abort(e) => e,
        TransactionError::Storage(e) => e.into(),
    }
}

pub(crate) struct Trees {
    events: sled::Tree,
    payloads: sled::Tree,
    deliveries: sled::Tree,
    attempts: sled::Tree,
    queue: sled::Tree,
    endpoints: sled::Tree,
    idempotency: sled::Tree,
    accounts: sled::Tree,
    quota: sled::Tree,
    account_secrets: sled::Tree,
    debounce: sled::Tree,
    breakers: sled::Tree,
}

/// Deliveries by state, kept in memory (sled's `len` scans the whole tree).
#[derive(Debug, Default)]
pub struct Stats {
    by_state: [AtomicI64; 4],
}

impl Stats {
    fn count(&self, from: Option<DeliveryState>, to: DeliveryState) {
        if let Some(from) = from {
            self.by_state[from as usize].fetch_sub(1, Ordering::Relaxed);
        }
        self.by_state[to as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn forget(&self, state: DeliveryState) {
        self.by_state[state as usize].fetch_sub(1, Ordering::Relaxed);
    }

    pub fn get(&self, state: DeliveryState) -> i64 {
        self.by_state[state as usize].load(Ordering::Relaxed)
    }
}

/// What the committer shares with the store.
pub(crate) struct Inner {
    db: sled::Db,
    trees: Trees,
    data_file: File,
    due: Arc<DueIndex>,
    stats: Stats,
    healthy: AtomicBool,
    metrics: Arc<Metrics>,
}

impl Inner {
    /// sled's flush (a `sync_file_range`), then a real fdatasync of its data file.
    fn sync(&self) -> Result<(), StoreError> {
        let started = std::time::Instant::now();
        self.db.flush()?;
        self.data_file.sync_data()?;
        self.metrics
            .fsync_duration
            .observe_duration(started.elapsed());
        Ok(())
    }

    fn set_healthy(&self, ok: bool) {
        self.healthy.store(ok, Ordering::Relaxed);
    }
}

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
}

impl DeliveryFilter {
    fn matches(&self, d: &Delivery) -> bool {
        self.account_id.as_ref().is_none_or(|a| *a == d.account_id)
            && self
                .endpoint_id
                .as_ref()
                .is_none_or(|e| d.endpoint_id.as_ref() == Some(e))
            && self.event_type.as_ref().is_none_or(|t| *t == d.event_type)
            && self.state.is_none_or(|s| s == d.state)
            && self.status.is_none_or(|s| d.last_status == Some(s))
            && self.until.is_none_or(|u| d.created_at < u)
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct AccountRecord {
    plan: Option<String>,
}

/// Records a list request reads at most before it answers with a cursor to go on from.
const LIST_SCAN_BUDGET: usize = 50_000;

pub struct Store {
    inner: Arc<Inner>,
    /// The committer task, taken by [`Store::take_committer`] to wait for the store to close.
    committer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Fault injection (tests and drills): makes every quota check fail as a storage error.
    quota_fault: AtomicBool,
    commit_tx: mpsc::Sender<commit::Job>,
    endpoints: RwLock<HashMap<String, Arc<Endpoint>>>,
    path: PathBuf,
}

impl Store {
    /// Opens (or creates) the store at `path` and starts its committer on the current runtime.
    pub fn open(
        path: &Path,
        cache_capacity: u64,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Store>, StoreError> {
        std::fs::create_dir_all(path)?;
        remove_partial_snapshots(path)?;
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_capacity)
            .flush_every_ms(Some(500))
            .open()?;
        let tree = |name: &str| db.open_tree(name);
        let trees = Trees {
            events: tree("events")?,
            payloads: tree("payloads")?,
            deliveries: tree("deliveries")?,
            attempts: tree("attempts")?,
            queue: tree("queue")?,
            endpoints: tree("endpoints")?,
            idempotency: tree("idempotency")?,
            accounts: tree("accounts")?,
            quota: tree("quota")?,
            account_secrets: tree("account_secrets")?,
            debounce: tree("debounce")?,
            breakers: tree("breakers")?,
        };
        let data_file = File::open(path.join("db"))?;

        let due = Arc::new(DueIndex::default());
        for item in trees.queue.iter() {
            let (k, _) = item?;
            if let Some(entry) = codec::parse_queue_key(&k) {
                due.insert_many([entry]);
            }
        }
        let stats = Stats::default();
        for item in trees.deliveries.iter() {
            let (_, v) = item?;
            let d: Delivery = codec::decode(&v)?;
            stats.count(None, d.state);
        }
        let mut endpoints = HashMap::new();
        for item in trees.endpoints.iter() {
            let (_, v) = item?;
            let ep: Endpoint = codec::decode(&v)?;
            endpoints.insert(ep.id.clone(), Arc::new(ep));
        }

        let inner = Arc::new(Inner {
            db,
            trees,
            data_file,
            due,
            stats,
            healthy: AtomicBool::new(true),
            metrics,
        });
        let (commit_tx, rx) = mpsc::channel(16 * 1024);
        let committer = tokio::spawn(commit::run(inner.clone(), rx));
        Ok(Arc::new(Store {
            inner,
            committer: std::sync::Mutex::new(Some(committer)),
            quota_fault: AtomicBool::new(false),
            commit_tx,
            endpoints: RwLock::new(endpoints),
            path: path.to_path_buf(),
        }))
    }

    /// The committer's task. It ends once the last `Store` handle is dropped, and with it the
    /// last handle to sled (which releases its lock on the data directory).
    pub fn take_committer(&self) -> Option<tokio::task::JoinHandle<()>> {
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

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// True while the last commit succeeded and sled answers reads.
    pub fn healthy(&self) -> bool {
        self.inner.healthy.load(Ordering::Relaxed)
            && self.inner.trees.queue.first().is_ok()
            && !self.commit_tx.is_closed()
    }

    pub fn size_on_disk(&self) -> u64 {
        self.inner.db.size_on_disk().unwrap_or(0)
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

    /// A blocking flush + fsync, for shutdown.
    pub fn sync_now(&self) -> Result<(), StoreError> {
        self.inner.sync()
    }

    // --- events -------------------------------------------------------------------------------

    /// The event and its payload bytes, exactly as ingested.
    pub fn event(&self, id: &str) -> Result<Option<(EventMeta, Bytes)>, StoreError> {
        let Some(v) = self.inner.trees.events.get(id.as_bytes())? else {
            return Ok(None);
        };
        let (meta, len, inline) = codec::decode_event(&v)?;
        let payload = match inline {
            Some(bytes) => Bytes::copy_from_slice(bytes),
            None => {
                let mut buf = BytesMut::with_capacity(len);
                for item in self.inner.trees.payloads.scan_prefix(id.as_bytes()) {
                    buf.extend_from_slice(&item?.1);
                }
                if buf.len() != len {
                    return Err(StoreError::Corrupt(format!(
                        "payload of {id} has {} of {len} bytes",
                        buf.len()
                    )));
                }
                buf.freeze()
            }
        };
        Ok(Some((meta, payload)))
    }

    // --- deliveries ---------------------------------------------------------------------------

    pub fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        match self.inner.trees.deliveries.get(id.as_bytes())? {
            Some(v) => Ok(Some(codec::decode(&v)?)),
            None => Ok(None),
        }
    }

    pub fn attempts(&self, delivery_id: &str) -> Result<Vec<Attempt>, StoreError> {
        self.inner
            .trees
            .attempts
            .scan_prefix(delivery_id.as_bytes())
            .map(|item| codec::decode(&item?.1))
            .collect()
    }

    /// Writes a delivery's new state (and the attempt that led to it) in one transaction, moving
    /// its queue entry to match. A pending delivery joins the due index.
    pub fn update_delivery(
        &self,
        delivery: &Delivery,
        attempt: Option<&Attempt>,
    ) -> Result<(), StoreError> {
        let t = &self.inner.trees;
        let value = codec::encode(delivery)?;
        let attempt = match attempt {
            Some(a) => Some((codec::attempt_key(&delivery.id, &a.id), codec::encode(a)?)),
            None => None,
        };
        let old: Option<Delivery> = (&t.deliveries, &t.attempts, &t.queue)
            .transaction(|(deliveries, attempts, queue)| {
                let old = deliveries.insert(delivery.id.as_bytes(), value.as_slice())?;
                let old: Option<Delivery> = match old {
                    Some(v) => {
                        Some(codec::decode(&v).map_err(ConflictableTransactionError::Abort)?)
                    }
                    None => None,
                };
                if let Some(Delivery {
                    state: DeliveryState::Pending,
                    next_attempt_at: Some(at),
                    ..
                }) = &old
                {
                    queue.remove(codec::queue_key(*at, &delivery.id))?;
                }
                if let (DeliveryState::Pending, Some(at)) =
                    (delivery.state, delivery.next_attempt_at)
                {
                    queue.insert(codec::queue_key(at, &delivery.id), &[])?;
                }
                if let Some((k, v)) = &attempt {
                    attempts.insert(k.as_slice(), v.as_slice())?;
                }
                Ok(old)
            })
            .map_err(tx_error)?;
        if let Some(Delivery {
            state: DeliveryState::Pending,
            next_attempt_at: Some(at),
            ..
        }) = &old
        {
            self.inner.due.remove(*at, &delivery.id);
        }
        self.inner
            .stats
            .count(old.as_ref().map(|d| d.state), delivery.state);
        if let (DeliveryState::Pending, Some(at)) = (delivery.state, delivery.next_attempt_at) {
            self.inner.due.insert(at, delivery.id.clone());
        }
        Ok(())
    }

    /// Makes every pending delivery to `endpoint_id` due at `now` (used when the endpoint is
    /// deleted, so they end at once instead of at their next retry time). Returns how many.
    pub fn expedite_endpoint(&self, endpoint_id: &str, now: Millis) -> Result<usize, StoreError> {
        let mut pending = Vec::new();
        for item in self.inner.trees.queue.iter() {
            let (k, _) = item?;
            let Some((_, id)) = codec::parse_queue_key(&k) else {
                continue;
            };
            if let Some(d) = self.delivery(&id)? {
                if d.state == DeliveryState::Pending
                    && d.endpoint_id.as_deref() == Some(endpoint_id)
                {
                    pending.push(d);
                }
            }
        }
        for d in &mut pending {
            d.next_attempt_at = Some(now);
            self.update_delivery(d, None)?;
        }
        Ok(pending.len())
    }

    /// Deliveries newest first, from after `cursor`, matching `filter`. The cursor is the last id
    /// returned; `None` means the end was reached.
    pub fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Delivery>, Option<String>), StoreError> {
        let tree = &self.inner.trees.deliveries;
        let iter = match cursor {
            Some(c) => tree.range(..c.as_bytes().to_vec()),
            None => tree.iter(),
        };
        let mut out = Vec::new();
        let mut last_seen = None;
        for (scanned, item) in iter.rev().enumerate() {
            if scanned >= LIST_SCAN_BUDGET {
                return Ok((out, last_seen));
            }
            let (k, v) = item?;
            let d: Delivery = codec::decode(&v)?;
            if filter.since.is_some_and(|s| d.created_at < s) {
                // Ids sort by creation time: everything further is older still.
                return Ok((out, None));
            }
            last_seen = Some(String::from_utf8_lossy(&k).into_owned());
            if filter.matches(&d) {
                out.push(d);
                if out.len() == limit {
                    return Ok((out, last_seen));
                }
            }
        }
        Ok((out, None))
    }

    // --- endpoints ----------------------------------------------------------------------------

    pub fn endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        self.read_endpoints().get(id).cloned()
    }

    /// The account's endpoints, oldest first.
    pub fn account_endpoints(&self, account_id: &str) -> Vec<Arc<Endpoint>> {
        let mut eps: Vec<_> = self
            .read_endpoints()
            .values()
            .filter(|e| e.account_id == account_id)
            .cloned()
            .collect();
        eps.sort_by(|a, b| a.id.cmp(&b.id));
        eps
    }

    /// Stores an endpoint durably, then makes it visible.
    pub async fn put_endpoint(&self, ep: Endpoint) -> Result<Arc<Endpoint>, StoreError> {
        self.inner
            .trees
            .endpoints
            .insert(ep.id.as_bytes(), codec::encode(&ep)?)?;
        self.sync().await?;
        let ep = Arc::new(ep);
        self.write_endpoints().insert(ep.id.clone(), ep.clone());
        Ok(ep)
    }

    pub async fn delete_endpoint(&self, id: &str) -> Result<bool, StoreError> {
        let existed = self.inner.trees.endpoints.remove(id.as_bytes())?.is_some();
        self.sync().await?;
        self.write_endpoints().remove(id);
        Ok(existed)
    }

    fn read_endpoints(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Endpoint>>> {
        self.endpoints.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_endpoints(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Endpoint>>> {
        self.endpoints.write().unwrap_or_else(|e| e.into_inner())
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
