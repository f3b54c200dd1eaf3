//! The store's own tests: crash and concurrency edges driven deterministically, with a manual
//! clock and injected failures ([`Faults`]) between the steps that must agree.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::codec::MAX_ROW;
use super::key;
use super::*;
use herald_core::clock::{ManualClock, Millis};
use herald_core::model::{Attempt, Delivery, DeliveryState, Endpoint, Status};
use herald_store::prelude::*;

#[path = "endpoints_tests.rs"]
mod endpoints_tests;
#[path = "fold_tests.rs"]
mod fold_tests;
#[path = "keys_tests.rs"]
mod keys_tests;
#[path = "minutes_tests.rs"]
mod minutes_tests;

/// Failures a test can inject; each fires once per arming.
#[derive(Default)]
pub(crate) struct Faults {
    /// The committer's flush + fsync.
    pub sync: AtomicBool,
    /// The look at the data directory after a sync fails, as a transient `stat` error makes it
    /// (`EIO`, `ESTALE`): every look while this is set.
    pub look: AtomicBool,
    /// The committer's undo of a failed cycle (in sled).
    pub undo: AtomicBool,
    /// The undo's own file, written before the undo is tried in sled.
    pub undo_record: AtomicBool,
    /// An engine write of a delivery's change.
    pub delivery_write: AtomicBool,
    /// The folder's batch.
    pub fold_write: AtomicBool,
    /// Retention's batch removing one event.
    pub prune_write: AtomicBool,
    /// Kill -9 this process right after a batch that moves events between hot rows and folds
    /// is applied (in sled's memory, not yet flushed): see `fold_tests`.
    pub kill_after_fold: AtomicBool,
    /// With a kill armed: flush sled's buffers to the file first (the batch is whole in the
    /// file; the process dies before anything after it).
    pub flush_before_kill: AtomicBool,
    /// Holds the committer before its next flush + fsync (its cycle's rows written, visible to
    /// reads): it says so on the first channel and goes on once the second gives word.
    pub hold_sync: std::sync::Mutex<Option<Hold>>,
    /// Holds retention inside its lock, at an event it is about to remove (its deliveries
    /// claimed and read, ended): the same two channels.
    pub hold_prune: std::sync::Mutex<Option<Hold>>,
    /// Holds the committer once its cycle is decided (a superseded candidate claimed and
    /// read), before it writes the cycle's rows: the same two channels.
    pub hold_write: std::sync::Mutex<Option<Hold>>,
    /// Holds an export between its read of a delivery's attempts and the read of the delivery.
    pub hold_export: std::sync::Mutex<Option<Hold>>,
}

/// The two ends of a [`Faults::hold_sync`], [`Faults::hold_prune`] or [`Faults::hold_write`].
pub(crate) struct Hold {
    pub reached: std::sync::mpsc::Sender<()>,
    pub go: std::sync::mpsc::Receiver<()>,
}

impl Faults {
    /// Waits where [`Faults::hold_sync`] holds the committer, if it is armed (once).
    pub fn hold(&self) {
        Self::wait_at(&self.hold_sync);
    }

    /// Waits where [`Faults::hold_prune`] holds retention, if it is armed (once).
    pub fn hold_pruning(&self) {
        Self::wait_at(&self.hold_prune);
    }

    /// Waits where [`Faults::hold_write`] holds the committer, if it is armed (once).
    pub fn hold_writing(&self) {
        Self::wait_at(&self.hold_write);
    }

    /// Waits where [`Faults::hold_export`] holds an export, if it is armed (once).
    pub fn hold_exporting(&self) {
        Self::wait_at(&self.hold_export);
    }

    fn wait_at(point: &std::sync::Mutex<Option<Hold>>) {
        let hold = point.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = hold {
            let _ = h.reached.send(());
            let _ = h.go.recv();
        }
    }

    pub fn check(&self, which: &AtomicBool) -> Result<(), StoreError> {
        if which.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::other("injected failure").into());
        }
        Ok(())
    }

    /// Sends this process SIGKILL if `which` is armed, and waits for it: no destructor, no
    /// flush, no exit handler runs, as when an operator or the OOM killer kills herald. Calls
    /// `flush` first if `flush_before_kill` is set.
    pub fn kill_point(&self, which: &AtomicBool, flush: impl FnOnce()) {
        if !which.swap(false, Ordering::SeqCst) {
            return;
        }
        if self.flush_before_kill.load(Ordering::SeqCst) {
            flush();
        }
        // The shell's own `kill`, aimed at its parent: this process.
        let _ = std::process::Command::new("sh")
            .args(["-c", "kill -9 $PPID"])
            .status();
        loop {
            std::thread::park();
        }
    }
}

/// 2026-12-03T06:00:00Z.
const T0: Millis = 1_796_277_600_000;

/// A take's allowance that limits no lane.
fn any(_: Lane) -> usize {
    usize::MAX
}

/// Limits that take whatever is due.
fn everything() -> herald_store::FixedLimits {
    herald_store::FixedLimits {
        others: usize::MAX,
        ..Default::default()
    }
}

fn open(dir: &Path, clock: &Arc<ManualClock>) -> Arc<SledStore> {
    SledStore::open(dir, 8 << 20, clock.clone(), Arc::default()).expect("open store")
}

/// Closes the store the way herald does (checkpoint, sync, last handle, committer joined), so
/// the directory can be opened again.
fn close(store: Arc<SledStore>) {
    let committer = store.take_committer();
    store.close().expect("close");
    drop(store);
    if let Some(c) = committer {
        c.join().expect("committer");
    }
}

/// Closes a store whose sync failed: the close says so, and the directory can be opened again.
fn close_failed(store: Arc<SledStore>) {
    let committer = store.take_committer();
    assert!(
        matches!(store.close(), Err(StoreError::Unusable(_))),
        "a store whose sync failed stays failed until it is opened again"
    );
    drop(store);
    if let Some(c) = committer {
        c.join().expect("committer");
    }
}

fn event(account: &str, targets: &[Lane], at: Millis) -> NewEvent {
    NewEvent {
        account_id: account.into(),
        event_type: "t.x".into(),
        received_at: at,
        payload: Bytes::from_static(br#"{"a":1}"#),
        targets: targets.to_vec(),
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

fn created(outcome: &IngestOutcome) -> (&str, &[Delivery]) {
    match outcome {
        IngestOutcome::Created {
            event_id,
            deliveries,
        } => (event_id, deliveries),
        other => panic!("not created: {other:?}"),
    }
}

fn attempt(number: u32, status: Status, at: Millis) -> Attempt {
    Attempt {
        id: ids::new_id(ids::ATTEMPT, at),
        number,
        at,
        duration_ms: 3,
        status,
        http_status: Some(if status == Status::Delivered {
            200
        } else {
            503
        }),
        error: None,
        request_headers: vec![("webhook-id".into(), "evt_x".into())],
        response_body: "ok".into(),
        response_headers: Vec::new(),
        url: None,
        manual: false,
    }
}

/// Records a delivered first attempt of `d` at `at`.
fn deliver(store: &SledStore, d: &Delivery, at: Millis) {
    let done = Delivery {
        state: DeliveryState::Delivered,
        next_attempt_at: None,
        attempt_count: 1,
        ..d.clone()
    };
    store
        .update_delivery(d, &done, Some(&attempt(1, Status::Delivered, at)))
        .unwrap();
}

pub(crate) fn endpoint(id: &str, account: &str) -> Endpoint {
    herald_store::conformance::endpoint_at(id, account, T0)
}

const LANE: Lane = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;

type Ingested = tokio::task::JoinHandle<Result<Vec<IngestOutcome>, StoreError>>;
type Exported =
    tokio::task::JoinHandle<Result<(Vec<herald_store::EventHistory>, Option<String>), StoreError>>;

/// An event ingested at `at` whose commit cycle is held between its write and its fsync, and an
/// online backup's first page read meanwhile (its sync waits behind the cycle); the cycle goes
/// on once word is sent.
async fn export_beside_a_held_commit(
    store: &Arc<SledStore>,
    at: Millis,
) -> (Ingested, std::sync::mpsc::Sender<()>, Exported) {
    use herald_store::contract::Archive;
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    *store.inner.faults.hold_sync.lock().unwrap() = Some(Hold {
        reached: reached_tx,
        go: go_rx,
    });
    let ingested = tokio::spawn({
        let store = store.clone();
        async move { store.ingest(vec![event("a", &[LANE], at)]).await }
    });
    reached
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the committer reaches its fsync");
    // The cycle's rows are visible now: a plain read of the page sees its event.
    let (read, _) = store.export_events(None, 100).unwrap();
    assert!(
        read.iter()
            .any(|h| ids::ulid_ms(ids::parse(EVENT, &h.meta.id).unwrap()) == at),
        "the premise: the unsynced event is readable"
    );
    let exported = tokio::spawn({
        let store = store.clone();
        async move { Archive::export_events(&*store, None, 100).await }
    });
    // The export has read its page once its sync waits behind the held cycle.
    let free = store.commit_tx.max_capacity();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while store.commit_tx.capacity() == free {
        assert!(
            std::time::Instant::now() < deadline,
            "the export never synced"
        );
        tokio::task::yield_now().await;
    }
    assert!(
        !exported.is_finished(),
        "the export waits for the held cycle"
    );
    (ingested, go, exported)
}

/// An online backup hands on only what is durable: a page read while a commit cycle is between
/// its write and its fsync sees that cycle's event; when the fsync fails (the cycle is undone,
/// its request answered 503) the store stops, and the export fails with it rather than hand
/// on the page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_page_never_holds_an_event_whose_commit_failed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let kept = store.ingest(vec![event("a", &[LANE], T0)]).await.unwrap();
    store.inner.faults.sync.store(true, Ordering::SeqCst);
    let (failing, go, export) = export_beside_a_held_commit(&store, T0 + 1).await;
    go.send(()).unwrap();
    assert!(failing.await.unwrap().is_err(), "the held cycle failed");
    match export.await.unwrap() {
        Err(StoreError::Unusable(_)) => {}
        Err(e) => panic!("the export failed otherwise: {e}"),
        Ok((page, _)) => {
            let ids: Vec<&str> = page.iter().map(|h| h.meta.id.as_str()).collect();
            panic!(
                "the export handed on {ids:?}; only {} is durable",
                created(&kept[0]).0
            );
        }
    }
    close_failed(store);
}

/// The same export while the held cycle's fsync succeeds: it answers after the fsync, with
/// both events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_page_read_before_a_commit_s_fsync_answers_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    store.ingest(vec![event("a", &[LANE], T0)]).await.unwrap();
    let (held, go, export) = export_beside_a_held_commit(&store, T0 + 1).await;
    go.send(()).unwrap();
    let second = created(&held.await.unwrap().unwrap()[0]).0.to_string();
    let (page, _) = export.await.unwrap().unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(page[0].meta.id, second, "newest first");
    close(store);
}

/// A commit whose fsync succeeded but whose look at the data directory failed (a transient
/// `stat` error) is answered 503 and undone; the undo reaches the disk whatever the look says,
/// and its fresh seconds leave the buckets, so the watermark goes past them. Before, the undo
/// failed the same look and the buckets kept them until a restart.
#[tokio::test]
async fn a_commit_failed_by_a_transient_look_is_undone_and_its_seconds_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    store.inner.faults.look.store(true, Ordering::SeqCst);
    assert!(
        store.ingest(vec![event("a", &[LANE], T0)]).await.is_err(),
        "answered 503"
    );
    store.inner.faults.look.store(false, Ordering::SeqCst);
    {
        let fresh = store.inner.lock_fresh();
        assert_eq!(
            fresh.watermark(),
            fresh.last_event,
            "no fresh second is left of the undone cycle"
        );
    }
    assert_eq!(store.stats().get(DeliveryState::Pending), 0);
    let later = store.ingest(vec![event("a", &[LANE], T0 + 1_000)]).await;
    assert!(later.is_ok(), "the store goes on: {later:?}");
    close(store);
}

/// A cycle whose fsync fails is answered 503; when its undo cannot reach sled's file either
/// (the same full disk), its rows may be recovered by sled at the next start. The undo's own
/// file puts them back first: the refused request stored nothing, its key is free.
#[tokio::test]
async fn a_failed_commit_whose_undo_fails_in_sled_is_undone_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let kept = store.ingest(vec![event("a", &[LANE], T0)]).await.unwrap();
    let mut ev = event("a", &[LANE], T0);
    ev.idempotency_key = Some("k-1".into());
    store.inner.faults.sync.store(true, Ordering::SeqCst);
    store.inner.faults.undo.store(true, Ordering::SeqCst);
    assert!(
        store.ingest(vec![ev.clone()]).await.is_err(),
        "the cycle failed"
    );
    // sled writes the failed cycle's rows to its file (at close, as its own flush would).
    close_failed(store);
    assert_eq!(
        std::fs::read_dir(dir.path().join("undo")).unwrap().count(),
        1,
        "the undo waits in its own file"
    );

    let store = open(dir.path(), &clock);
    assert_eq!(
        std::fs::read_dir(dir.path().join("undo")).unwrap().count(),
        0,
        "an applied undo file is removed"
    );
    assert_eq!(store.due().len(), 1, "only the acknowledged event is due");
    let due = store.due().take(T0 + 1, 10, any);
    let found = store.due_delivery(due[0].delivery).unwrap().unwrap();
    assert_eq!(found.event.id, created(&kept[0]).0);
    let again = store.ingest(vec![ev]).await.unwrap();
    assert!(
        matches!(again[0], IngestOutcome::Created { .. }),
        "the refused request's key claims nothing: {again:?}"
    );
    close(store);
}

/// A key that cannot be written (a full disk: a table's slot can need a block) fails its
/// cycle before anything is acknowledged: the request is refused and stored nothing, and the
/// same key sent again is new, then a duplicate. Never an acknowledged event whose retry is
/// delivered a second time.
#[tokio::test]
async fn a_key_that_cannot_be_written_fails_its_commit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut ev = event("a", &[LANE], T0);
    ev.idempotency_key = Some("B".into());
    store.inner.keys.faults.write.store(true, Ordering::SeqCst);
    assert!(
        store.ingest(vec![ev.clone()]).await.is_err(),
        "a commit whose key was not written was acknowledged"
    );
    assert_eq!(store.due().len(), 0, "the refused event stored nothing");
    let first = store.ingest(vec![ev.clone()]).await.unwrap();
    let (first_id, _) = created(&first[0]);
    let again = store.ingest(vec![ev]).await.unwrap();
    assert!(
        matches!(&again[0], IngestOutcome::Duplicate { event_id } if event_id == first_id),
        "{again:?}"
    );
    close(store);
}

/// Keys are filed under their event id's day, and ids never go backwards: after the clock
/// steps back across midnight UTC, a key claimed just after midnight is still found (keys are
/// looked up on the timeline of the newest event id), and their expiry leaves them alone.
#[tokio::test]
async fn a_key_is_found_after_the_clock_steps_back_across_midnight() {
    const DAY: Millis = 86_400_000;
    let midnight = (T0 / DAY + 1) * DAY;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(midnight + 2_000));
    let store = open(dir.path(), &clock);
    let keyed = |at: Millis| {
        let mut ev = event("a", &[LANE], at);
        ev.idempotency_key = Some("K".into());
        ev
    };
    let first = store.ingest(vec![keyed(midnight + 2_000)]).await.unwrap();
    let (first_id, _) = created(&first[0]);
    clock.set(midnight - 2_000);
    let again = store.ingest(vec![keyed(midnight - 2_000)]).await.unwrap();
    assert!(
        matches!(&again[0], IngestOutcome::Duplicate { event_id } if event_id == first_id),
        "{again:?}"
    );
    // A clock that ran a day ahead and was corrected: the keys claimed meanwhile stay visible,
    // and their expiry (on the same timeline) keeps them.
    let ahead = midnight + DAY + 5_000;
    clock.set(ahead);
    let mut k2 = event("a", &[LANE], ahead);
    k2.idempotency_key = Some("K2".into());
    let first_k2 = store.ingest(vec![k2.clone()]).await.unwrap();
    let (first_k2_id, _) = created(&first_k2[0]);
    clock.set(midnight + 3_000);
    store.prune_keys(clock.now_ms(), 1_000).unwrap();
    k2.received_at = midnight + 3_000;
    let again = store.ingest(vec![k2]).await.unwrap();
    assert!(
        matches!(&again[0], IngestOutcome::Duplicate { event_id } if event_id == first_k2_id),
        "{again:?}"
    );
    close(store);
}

/// If the undo's own file cannot be written either, the failed cycle's fresh
/// deliveries stay under the watermark: after a restart they are found and delivered (the
/// request was answered 503; at least once, never lost with a key that answers `duplicate`).
#[tokio::test]
async fn a_failed_commit_whose_undo_cannot_be_recorded_stays_deliverable() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut ev = event("a", &[LANE], T0);
    ev.idempotency_key = Some("k-1".into());
    store.inner.faults.sync.store(true, Ordering::SeqCst);
    store.inner.faults.undo_record.store(true, Ordering::SeqCst);
    store.inner.faults.undo.store(true, Ordering::SeqCst);
    assert!(store.ingest(vec![ev]).await.is_err(), "the cycle failed");
    // The watermark is written meanwhile (every second, and at close).
    close_failed(store);

    let store = open(dir.path(), &clock);
    assert_eq!(
        store.due().len(),
        1,
        "the event that reached sled is due again"
    );
    let due = store.due().take(T0 + 1, 10, any);
    assert!(store.due_delivery(due[0].delivery).unwrap().is_some());
    close(store);
}

/// An attempt's record, its delivery's pending entry and that entry's removal
/// are one write: a failure leaves the delivery exactly as it was (never "delivered" and still
/// pending, which would send it again).
#[tokio::test]
async fn a_delivery_change_is_written_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let out = store.ingest(vec![event("a", &[LANE], T0)]).await.unwrap();
    let fresh = created(&out[0]).1[0].clone();
    let ulid = ids::parse(ids::DELIVERY, &fresh.id).unwrap();
    let _claim = store.claim(ulid).unwrap();

    // First attempt fails and schedules a retry: a pending entry and an attempt row.
    let mut retry = fresh.clone();
    retry.attempt_count = 1;
    retry.last_status = Some(Status::HttpError);
    retry.next_attempt_at = Some(T0 + 5_000);
    retry.queued = true;
    store
        .update_delivery(&fresh, &retry, Some(&attempt(1, Status::HttpError, T0)))
        .unwrap();

    // The second delivers: its row and the pending entry's removal; the write fails.
    let mut done = retry.clone();
    done.state = DeliveryState::Delivered;
    done.attempt_count = 2;
    done.last_status = Some(Status::Delivered);
    done.next_attempt_at = None;
    done.queued = false;
    store
        .inner
        .faults
        .delivery_write
        .store(true, Ordering::SeqCst);
    let second = attempt(2, Status::Delivered, T0 + 5_000);
    assert!(store.update_delivery(&retry, &done, Some(&second)).is_err());
    let now = store.delivery(&fresh.id).unwrap().unwrap();
    assert_eq!(now.state, DeliveryState::Pending);
    assert_eq!(now.attempt_count, 1, "no part of the failed write is there");
    assert_eq!(now.next_attempt_at, Some(T0 + 5_000));

    store.update_delivery(&retry, &done, Some(&second)).unwrap();
    let now = store.delivery(&fresh.id).unwrap().unwrap();
    assert_eq!(
        (now.state, now.attempt_count),
        (DeliveryState::Delivered, 2)
    );
    assert!(store.inner.pending_of(ulid).unwrap().is_none());
    drop(_claim);
    close(store);
}

fn debounced_event(at: Millis, window_ms: Millis) -> NewEvent {
    let mut ev = event("a", &[LANE], at);
    ev.event_type = "order.updated".into();
    ev.debounce = Some(DebounceRule {
        key: "a\0order.updated\0o-1".into(),
        window_ms,
        trailing: true,
    });
    ev
}

/// A window is judged at the commit's time, not the time the request was
/// received: an event received before the window's end but committed after it opens a new
/// window (it is delivered), and does not debounce a candidate the engine is sending.
#[tokio::test]
async fn debounce_windows_are_judged_at_commit_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let out = store
        .ingest(vec![debounced_event(T0, 1_000)])
        .await
        .unwrap();
    assert_eq!(created(&out[0]).1[0].state, DeliveryState::Pending);
    // In the window: the trailing candidate, due at its end.
    clock.set(T0 + 500);
    let out = store
        .ingest(vec![debounced_event(T0 + 500, 1_000)])
        .await
        .unwrap();
    let candidate = created(&out[0]).1[0].clone();
    assert_eq!(candidate.next_attempt_at, Some(T0 + 1_000));
    // Received before the end, committed after it.
    clock.set(T0 + 1_000);
    let out = store
        .ingest(vec![debounced_event(T0 + 999, 1_000)])
        .await
        .unwrap();
    let late = &created(&out[0]).1[0];
    assert_eq!(late.state, DeliveryState::Pending);
    assert_eq!(late.next_attempt_at, Some(T0 + 999), "delivered at once");
    let c = store.delivery(&candidate.id).unwrap().unwrap();
    assert_eq!(
        c.state,
        DeliveryState::Pending,
        "the candidate is still sent"
    );
    assert_eq!(c.attempt_count, 0);
    close(store);
}

/// A leading event at T0, then one at T0 + 100 ms that trails its 10 s window: the candidate
/// (its delivery and that delivery's ULID), due at the window's end.
async fn trailing_candidate(store: &SledStore, clock: &ManualClock) -> (Delivery, u128) {
    store
        .ingest(vec![debounced_event(T0, 10_000)])
        .await
        .unwrap();
    clock.set(T0 + 100);
    let out = store
        .ingest(vec![debounced_event(T0 + 100, 10_000)])
        .await
        .unwrap();
    let candidate = created(&out[0]).1[0].clone();
    let ulid = ids::parse(ids::DELIVERY, &candidate.id).unwrap();
    (candidate, ulid)
}

/// A cycle that supersedes a trailing candidate fails its fsync, and so does its undo's
/// (the undo is applied in sled; its file is kept for the next start). The store has failed
/// for good: the candidate cannot be delivered and recorded in this process, so no write can
/// come after the kept undo for it to put back. After a reopen the candidate is due once, and
/// a delivery of it then stays delivered across another reopen.
#[tokio::test]
async fn a_kept_undo_never_puts_back_what_was_delivered_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (candidate, ulid) = trailing_candidate(&store, &clock).await;

    // The superseding cycle's fsync fails, then the undo's.
    clock.set(T0 + 200);
    store.inner.faults.sync.store(true, Ordering::SeqCst);
    assert!(store
        .ingest(vec![debounced_event(T0 + 200, 10_000)])
        .await
        .is_err());
    assert!(!store.usable(), "a failed sync fails the store for good");
    // The engine's delivery of the candidate is refused, not written.
    let claim = store.claim(ulid).unwrap();
    let mut delivered = candidate.clone();
    delivered.state = DeliveryState::Delivered;
    delivered.attempt_count = 1;
    delivered.last_status = Some(Status::Delivered);
    delivered.next_attempt_at = None;
    delivered.queued = false;
    let first = attempt(1, Status::Delivered, T0 + 10_000);
    assert!(matches!(
        store.update_delivery(&candidate, &delivered, Some(&first)),
        Err(StoreError::Unusable(_))
    ));
    drop(claim);
    close_failed(store);

    let store = open(dir.path(), &clock);
    let c = store.delivery(&candidate.id).unwrap().unwrap();
    assert_eq!((c.state, c.attempt_count), (DeliveryState::Pending, 0));
    let due = all_due(&store, T0 + 20_000);
    assert_eq!(due.iter().filter(|d| **d == ulid).count(), 1, "{due:?}");
    let claim = store.claim(ulid).unwrap();
    let now = store.delivery(&candidate.id).unwrap().unwrap();
    store
        .update_delivery(&now, &delivered, Some(&first))
        .unwrap();
    drop(claim);
    close(store);
    let store = open(dir.path(), &clock);
    let c = store.delivery(&candidate.id).unwrap().unwrap();
    assert_eq!(
        c.state,
        DeliveryState::Delivered,
        "delivered stays delivered"
    );
    assert!(
        !all_due(&store, T0 + 20_000).contains(&ulid),
        "the candidate is due again after it was delivered"
    );
    close(store);
}

/// Every delivery due at `now`, taken from the index lane by lane (each taken one is done).
fn all_due(store: &SledStore, now: Millis) -> Vec<u128> {
    let mut out = Vec::new();
    loop {
        let got = store.due().take(now, 100, any);
        if got.is_empty() {
            return out;
        }
        for d in got {
            store.due().done(d.lane, d.delivery);
            out.push(d.delivery);
        }
    }
}

/// A trailing candidate whose attempt is running (it holds its claim)
/// is not debounced by a newer event: the log never says `debounced` for a request the
/// receiver got, and the counts stay right.
#[tokio::test]
async fn a_candidate_being_attempted_is_not_debounced() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (candidate, ulid) = trailing_candidate(&store, &clock).await;
    let pending_before = store.stats().get(DeliveryState::Pending);

    // The engine is attempting it (a manual retry sent it early).
    let claim = store.claim(ulid).unwrap();
    clock.set(T0 + 200);
    let out = store
        .ingest(vec![debounced_event(T0 + 200, 10_000)])
        .await
        .unwrap();
    let newer = created(&out[0]).1[0].clone();
    assert_eq!(
        newer.next_attempt_at,
        Some(T0 + 10_000),
        "the newer one trails"
    );
    let c = store.delivery(&candidate.id).unwrap().unwrap();
    assert_eq!(
        c.attempt_count, 0,
        "no debounced record for the running attempt"
    );
    assert!(store.attempts(&candidate.id).unwrap().is_empty());
    assert_eq!(
        store.stats().get(DeliveryState::Pending),
        pending_before + 1,
        "the candidate was not counted down"
    );
    drop(claim);

    // Without a running attempt, the next event does debounce the (newer) candidate.
    clock.set(T0 + 300);
    store
        .ingest(vec![debounced_event(T0 + 300, 10_000)])
        .await
        .unwrap();
    let n = store.delivery(&newer.id).unwrap().unwrap();
    assert_eq!(
        (n.state, n.last_status),
        (DeliveryState::Skipped, Some(Status::Debounced))
    );
    close(store);
}

/// Retention never prunes an event one of whose deliveries is claimed (a
/// manual retry or an attempt of it), and a manual retry finds the delivery busy while
/// retention holds it.
#[tokio::test]
async fn retention_and_retries_exclude_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let out = store.ingest(vec![event("a", &[LANE], T0)]).await.unwrap();
    let d = created(&out[0]).1[0].clone();
    let ulid = ids::parse(ids::DELIVERY, &d.id).unwrap();
    let claim = store.claim(ulid).unwrap();
    let mut failed = d.clone();
    failed.state = DeliveryState::Failed;
    failed.attempt_count = 1;
    failed.next_attempt_at = None;
    store
        .update_delivery(&d, &failed, Some(&attempt(1, Status::HttpError, T0)))
        .unwrap();

    // Claimed (a retry is being written): the sweep leaves it.
    let p = store.prune_events(T0 + 1, None, 10).unwrap();
    assert_eq!(p.events, 0);
    assert!(store.delivery(&d.id).unwrap().is_some());
    // And while anyone holds it, a change of it is refused as busy.
    assert_eq!(
        store
            .change_delivery(&d.id, |_| Some((failed.clone(), ())))
            .unwrap(),
        Changed::Busy
    );
    drop(claim);
    let p = store.prune_events(T0 + 1, None, 10).unwrap();
    assert_eq!((p.events, p.deliveries, p.attempts), (1, 1, 1));
    assert!(store.delivery(&d.id).unwrap().is_none());
    close(store);
}

/// A sweep in slices looks at every event, the one at each slice's boundary included.
#[tokio::test]
async fn retention_slices_skip_no_event() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    // Events without an endpoint: a `no_endpoint` record ends them, nothing pending.
    let mut ids_: Vec<String> = Vec::new();
    for i in 0..7 {
        let out = store
            .ingest(vec![event("a", &[NO_LANE], T0 + i)])
            .await
            .unwrap();
        let d = created(&out[0]).1[0].clone();
        let ulid = ids::parse(ids::DELIVERY, &d.id).unwrap();
        let _c = store.claim(ulid).unwrap();
        let mut ended = d.clone();
        ended.state = DeliveryState::Skipped;
        ended.next_attempt_at = None;
        store
            .update_delivery(&d, &ended, Some(&attempt(1, Status::NoEndpoint, T0 + i)))
            .unwrap();
        ids_.push(d.id);
    }
    let mut from: Option<Vec<u8>> = None;
    let mut pruned = 0;
    for _ in 0..20 {
        let p = store.prune_events(T0 + 100, from.as_deref(), 2).unwrap();
        pruned += p.events;
        match p.next {
            Some(n) => from = Some(n),
            None => break,
        }
    }
    assert_eq!(pruned, 7);
    for id in ids_ {
        assert!(store.delivery(&id).unwrap().is_none(), "{id} pruned");
    }
    close(store);
}

/// Idempotency keys expire a whole day at a time once past their 24 h, and
/// closed debounce windows in order of their end; nothing younger goes.
#[tokio::test]
async fn keys_and_windows_expire_in_time_order() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let day = IDEMPOTENCY_WINDOW_MS;
    let keyed = |at: Millis, k: &str| {
        let mut ev = event("a", &[NO_LANE], at);
        ev.idempotency_key = Some(k.into());
        ev
    };
    store.ingest(vec![keyed(T0, "old")]).await.unwrap();
    store
        .ingest(vec![debounced_event(T0, 1_000)])
        .await
        .unwrap();
    clock.set(T0 + day + 1);
    store
        .ingest(vec![keyed(T0 + day + 1, "new")])
        .await
        .unwrap();
    let count = |kind: u8| store.inner.trees.log.scan_prefix([kind]).count();
    assert_eq!(store.inner.keys.len(), 2);
    assert_eq!((count(key::WINDOW), count(key::WINDOW_END)), (1, 1));

    // Two days later: the first key's day is two days back; the window long closed; the
    // second key is a day minus a millisecond old.
    let now = T0 + 2 * day;
    assert_eq!(store.prune_keys(now, 100).unwrap(), 2);
    assert_eq!(store.inner.keys.len(), 1, "yesterday's key stays");
    assert_eq!((count(key::WINDOW), count(key::WINDOW_END)), (0, 0));
    // The kept key still answers `duplicate` within its window.
    clock.set(now);
    let out = store.ingest(vec![keyed(now, "new")]).await.unwrap();
    assert!(matches!(out[0], IngestOutcome::Duplicate { .. }));
    let out = store.ingest(vec![keyed(now, "old")]).await.unwrap();
    assert!(matches!(out[0], IngestOutcome::Created { .. }));
    close(store);
}

/// At the largest fan-out, the largest payload and the largest attempt
/// record, every row herald writes is at most `MAX_ROW`, and sled moved nothing to its
/// never-fsynced `blobs/` directory.
#[tokio::test]
async fn rows_stay_below_the_blob_threshold_at_the_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let targets: Vec<Lane> = (1..=ids::MAX_FAN_OUT as u128).collect();
    let mut ev = event(&"a".repeat(128), &targets, T0);
    ev.event_type = "t".repeat(128);
    ev.idempotency_key = Some("\u{1F600}".repeat(255));
    ev.debounce_key = Some("\u{1F600}".repeat(255));
    ev.payload = Bytes::from(vec![b' '; 256 * 1024]);
    let out = store.ingest(vec![ev]).await.unwrap();
    let (event_id, dels) = created(&out[0]);
    assert_eq!(dels.len(), ids::MAX_FAN_OUT);
    let d = dels[4000].clone();
    let big = Attempt {
        error: Some("e".repeat(10_000)),
        request_headers: (0..32)
            .map(|i| (format!("x-h{i}"), "v".repeat(4096)))
            .collect(),
        response_body: "r".repeat(4096),
        response_headers: Vec::new(),
        ..attempt(1, Status::HttpError, T0)
    };
    let _c = store
        .claim(ids::parse(ids::DELIVERY, &d.id).unwrap())
        .unwrap();
    let mut failed = d.clone();
    failed.state = DeliveryState::Failed;
    store.update_delivery(&d, &failed, Some(&big)).unwrap();
    store.sync().await.unwrap();

    let (_, payload) = store.event(event_id).unwrap().unwrap();
    assert_eq!(payload.len(), 256 * 1024);
    let view = store.delivery(&d.id).unwrap().unwrap();
    assert_eq!(view.endpoint_id, Some(ids::format(ids::ENDPOINT, 4001)));
    for tree in store.inner.db.tree_names() {
        let tree = store.inner.db.open_tree(tree).unwrap();
        for item in tree.iter() {
            let (k, v) = item.unwrap();
            assert!(
                k.len() + v.len() <= MAX_ROW,
                "a row of {} bytes",
                k.len() + v.len()
            );
        }
    }
    let blobs: Vec<_> = std::fs::read_dir(dir.path().join("blobs"))
        .map(|d| d.filter_map(Result::ok).collect())
        .unwrap_or_default();
    assert!(blobs.is_empty(), "sled wrote blobs: {blobs:?}");
    drop(_c);
    close(store);
}

/// Copies a fixture (`tests/fixtures/NAME`, written by an earlier herald) into `to`.
fn copy_fixture(name: &str, to: &Path) {
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(name),
        to,
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else if entry.file_name() != "README.md" {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A data directory written by the previous herald (storage format 2, kept in
/// `tests/fixtures/format2`, see its README) opens and is migrated in place: its log reads, its
/// pending deliveries are due, and its idempotency keys and debounce windows keep working.
#[tokio::test]
async fn a_format_2_store_is_migrated_in_place() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("format2", dir.path());
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // The fixture was written at 2026-12-03T05:55:5xZ; an hour later its keys and its one-hour
    // debounce window are still live.
    let written = ids::ulid_ms(ids::parse(ids::EVENT, "evt_01M8X7JXQ5BJ8C9N07FK6MSC00").unwrap());
    let clock = Arc::new(ManualClock::new(written + 30 * 60_000));
    let store = open(dir.path(), &clock);
    assert_eq!(
        store
            .inner
            .trees
            .meta
            .get(meta_keys::FORMAT)
            .unwrap()
            .unwrap()
            .as_ref(),
        [FORMAT]
    );
    assert_eq!(
        store
            .inner
            .trees
            .log
            .scan_prefix([key::OLD_IDEMPOTENCY])
            .count(),
        0
    );
    assert_eq!(
        store.inner.trees.log.scan_prefix([key::OLD_WINDOW]).count(),
        0
    );
    // Its key rows (idem-1, -2, -4 and -5), in the keys' database now (format 3 → 4).
    assert_eq!(
        store
            .inner
            .trees
            .log
            .scan_prefix([key::IDEMPOTENCY])
            .count(),
        0
    );
    assert_eq!(store.inner.keys.len(), 4);

    let state = |id: &str| {
        let d = store
            .delivery(id)
            .unwrap()
            .unwrap_or_else(|| panic!("{id}"));
        (d.state, d.last_status)
    };
    use DeliveryState::*;
    assert_eq!(
        state("dlv_01M8X7JXQ5BJ8C9N07FK6MSC01"),
        (Delivered, Some(Status::Delivered))
    );
    assert_eq!(
        state("dlv_01M8X7JXQNDRG9PRAZRGJ52M02"),
        (Failed, Some(Status::ConnectionError))
    );
    assert_eq!(
        state("dlv_01M8X7JXQX9KYE5Z7Z9V6AP001"),
        (Pending, Some(Status::ConnectionError))
    );
    assert_eq!(
        state("dlv_01M8X7JXR5BP23E9878134S001"),
        (Skipped, Some(Status::NoEndpoint))
    );
    assert_eq!(
        state("dlv_01M8X7JXSE6NBFBAFY0N9C8001"),
        (Skipped, Some(Status::Debounced))
    );
    assert_eq!(state("dlv_01M8X7JXT7ATZW60HHHC7Q6W01"), (Pending, None));
    assert_eq!(state("dlv_01M8X7KHF18HPWWYNNRQPJ5R01"), (Pending, None));
    let (_, payload) = store
        .event("evt_01M8X7JY3P40J9F3EM39ZBXM00")
        .unwrap()
        .unwrap();
    assert!(payload.len() > 20_000 && payload.starts_with(b"{\"data\": \"xxx"));
    // Every event is in its account's index.
    let by_account = |a: &str| {
        let filter = DeliveryFilter {
            account_id: Some(a.into()),
            ..DeliveryFilter::default()
        };
        store.list_deliveries(&filter, 100, None).unwrap().0.len()
    };
    assert_eq!(
        [
            by_account("acct-1"),
            by_account("acct-2"),
            by_account("acct-3"),
            by_account("acct-4")
        ],
        [7, 1, 1, 2]
    );
    // The retry, the trailing candidate and the never-attempted delivery are due.
    assert_eq!(store.due().len(), 3);
    let endpoints: usize = store
        .account_ids()
        .iter()
        .map(|a| store.account_endpoints(a).len())
        .sum();
    assert_eq!(endpoints, 4);

    // idem-1 of acct-1 still answers with the first event.
    let mut again = event("acct-1", &[NO_LANE], clock.now_ms());
    again.idempotency_key = Some("idem-1".into());
    let out = store.ingest(vec![again]).await.unwrap();
    match &out[0] {
        IngestOutcome::Duplicate { event_id } => {
            assert_eq!(event_id, "evt_01M8X7JXQ5BJ8C9N07FK6MSC00")
        }
        other => panic!("{other:?}"),
    }
    // The open window of order o-1 still trails: a newer event debounces its candidate.
    let ep1 = ids::parse(ids::ENDPOINT, "ep_01M8X7JWSH5T2KVY5H2WWVD4AX").unwrap();
    let mut ev = event("acct-1", &[ep1], clock.now_ms());
    ev.event_type = "order.updated".into();
    ev.debounce = Some(DebounceRule {
        key: "acct-1\0order.updated\0o-1".into(),
        window_ms: 3_600_000,
        trailing: true,
    });
    store.ingest(vec![ev]).await.unwrap();
    assert_eq!(
        state("dlv_01M8X7JXT7ATZW60HHHC7Q6W01"),
        (Skipped, Some(Status::Debounced))
    );
    close(store);

    // Files an older herald left with the umask's modes are private now.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.path()), 0o700);
    assert_eq!(mode(&dir.path().join("db")), 0o600);
}

/// The account index: one row per account and commit cycle, listed newest first across rows
/// and pages, bounded by since/until; retention takes pruned events out of its rows and keeps
/// those still pending.
#[tokio::test]
async fn the_account_index_lists_pages_and_follows_retention() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut acme = Vec::new();
    // Three cycles; each has events of both accounts (one cycle holds several of acme's).
    for cycle in 0..3i64 {
        let at = T0 + cycle * 1000;
        let mut evs = vec![
            event("acme", &[NO_LANE], at),
            event("other", &[NO_LANE], at),
        ];
        if cycle == 1 {
            evs.push(event("acme", &[LANE], at)); // stays pending (never attempted)
            evs.push(event("acme", &[NO_LANE], at));
        }
        for out in store.ingest(evs).await.unwrap() {
            let (_, dels) = created(&out);
            if dels[0].account_id == "acme" {
                acme.push(dels[0].clone());
            }
        }
    }
    let rows = store
        .inner
        .trees
        .log
        .scan_prefix(key::account_events("acme"))
        .count();
    assert_eq!(rows, 3, "one index row per cycle");
    let filter = |since: Option<Millis>, until: Option<Millis>| DeliveryFilter {
        account_id: Some("acme".into()),
        since,
        until,
        ..DeliveryFilter::default()
    };
    let ids = |list: Vec<Delivery>| list.into_iter().map(|d| d.id).collect::<Vec<_>>();
    let newest_first: Vec<String> = acme.iter().rev().map(|d| d.id.clone()).collect();
    let (all, next) = store
        .list_deliveries(&filter(None, None), 100, None)
        .unwrap();
    assert_eq!((ids(all), next), (newest_first.clone(), None));
    // Pages of two follow each other.
    let (page, cursor) = store.list_deliveries(&filter(None, None), 2, None).unwrap();
    assert_eq!(ids(page), newest_first[..2]);
    let (page, _) = store
        .list_deliveries(&filter(None, None), 2, cursor.as_deref())
        .unwrap();
    assert_eq!(ids(page), newest_first[2..4]);
    // Time bounds: only the middle cycle's.
    let (mid, _) = store
        .list_deliveries(&filter(Some(T0 + 1000), Some(T0 + 2000)), 100, None)
        .unwrap();
    assert_eq!(ids(mid), newest_first[1..4]);

    // End the ones without endpoint, then prune everything older than the last cycle.
    for d in acme.iter().filter(|d| d.endpoint_id.is_none()) {
        let ulid = ids::parse(ids::DELIVERY, &d.id).unwrap();
        let _c = store.claim(ulid).unwrap();
        let mut ended = d.clone();
        ended.state = DeliveryState::Skipped;
        ended.next_attempt_at = None;
        store
            .update_delivery(
                d,
                &ended,
                Some(&attempt(1, Status::NoEndpoint, d.created_at)),
            )
            .unwrap();
    }
    let p = store.prune_events(T0 + 2000, None, 100).unwrap();
    assert_eq!(
        p.events, 3,
        "acme's ended events of the two old cycles (pending ones stay)"
    );
    store.prune_orphans(T0 + 2000).unwrap();
    let (left, _) = store
        .list_deliveries(&filter(None, None), 100, None)
        .unwrap();
    assert_eq!(ids(left), vec![newest_first[0].clone(), acme[2].id.clone()]);
    let rows = store
        .inner
        .trees
        .log
        .scan_prefix(key::account_events("acme"))
        .count();
    assert_eq!(
        rows, 2,
        "the first cycle's row is gone, the second's keeps its pending event"
    );
    close(store);
}

/// Ordered endpoints (docs/delivery-contract.md): the committer puts each key's deliveries in one
/// sequence, and a reopened store rebuilds every sequence with its oldest pending delivery at the
/// head, even when a newer one of the key has a retry saved and the older one has no record (its
/// attempt's record was lost in a crash).
#[tokio::test]
async fn ordered_sequences_are_rebuilt_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let id = ids::new_id(ids::ENDPOINT, T0);
    let lane = lane_of(Some(&id));
    let mut ep = endpoint(&id, "a");
    ep.ordering = Some(herald_core::model::Ordering {
        key: Some("k".into()),
    });
    store.put_endpoint(ep).await.unwrap();
    let keyed = |k: &str, at: Millis| {
        let mut e = event("a", &[lane], at);
        e.payload = Bytes::from(format!(r#"{{"k": "{k}"}}"#));
        e
    };
    let mut ids_of = Vec::new();
    for (i, k) in ["x", "y", "x", "x"].iter().enumerate() {
        let out = store.ingest(vec![keyed(k, T0 + i as i64)]).await.unwrap();
        ids_of.push(created(&out[0]).1[0].clone());
    }
    let ulid = |d: &Delivery| ids::parse(ids::DELIVERY, &d.id).unwrap();
    // Only the heads of x and y are handed out; x's second waits behind its first.
    let due = store.due().take(T0 + 10, 10, any);
    let taken: Vec<u128> = due.iter().map(|d| d.delivery).collect();
    assert_eq!(taken, vec![ulid(&ids_of[0]), ulid(&ids_of[1])]);
    assert_eq!(
        store.due().ahead_of(lane, ulid(&ids_of[2])),
        Some(ulid(&ids_of[0]))
    );
    // The third (x) gets a retry saved out of turn, as if x's first had ended and its record
    // were then lost: the first stays fresh, the third has a pending row.
    let third = &ids_of[2];
    let mut retry = third.clone();
    retry.attempt_count = 1;
    retry.next_attempt_at = Some(T0 + 100);
    retry.queued = true;
    let _c = store.claim(ulid(third)).unwrap();
    store
        .update_delivery(third, &retry, Some(&attempt(1, Status::Timeout, T0 + 5)))
        .unwrap();
    drop(_c);
    close(store);

    let store = open(dir.path(), &clock);
    let due = store.due().take(T0 + 1_000, 10, any);
    let taken: Vec<u128> = due.iter().map(|d| d.delivery).collect();
    assert_eq!(
        taken,
        vec![ulid(&ids_of[0]), ulid(&ids_of[1])],
        "x's oldest heads its sequence again"
    );
    assert_eq!(
        store.due().ahead_of(lane, ulid(&ids_of[2])),
        Some(ulid(&ids_of[0]))
    );
    assert_eq!(
        store.due().ahead_of(lane, ulid(&ids_of[3])),
        Some(ulid(&ids_of[2]))
    );
    // x's first ends: its retried third goes next, at its saved time.
    let first = &ids_of[0];
    let mut done = first.clone();
    done.state = DeliveryState::Delivered;
    done.next_attempt_at = None;
    let _c = store.claim(ulid(first)).unwrap();
    store
        .update_delivery(
            first,
            &done,
            Some(&attempt(1, Status::Delivered, T0 + 1_000)),
        )
        .unwrap();
    drop(_c);
    let due = store.due().take(T0 + 1_000, 10, any);
    assert_eq!(due.len(), 1);
    assert_eq!(
        (due[0].delivery, due[0].at, due[0].fresh),
        (ulid(&ids_of[2]), T0 + 100, false)
    );
}

/// A client certificate that would make the endpoint's row too large is refused before
/// anything is written: the endpoint keeps showing the certificate it has, and the store keeps
/// that one's PEM (the engine presents what the endpoint shows).
#[tokio::test]
async fn a_client_certificate_too_large_for_the_endpoint_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut ep = endpoint("ep_1", "a");
    ep.description = "d".repeat(codec::MAX_ROW - 600);
    store.put_endpoint(ep).await.unwrap();
    let shown = |subject: &str| herald_core::model::ClientCertificate {
        subject: subject.into(),
        not_after: T0 + 1,
        sha256: "ab".repeat(32),
    };
    let set = store
        .set_client_certificate("ep_1", Some(("CERT A", "KEY A", shown("CN=a"))), T0)
        .await
        .unwrap()
        .expect("the endpoint");
    assert_eq!(set.client_certificate.as_ref().unwrap().subject, "CN=a");
    let long = format!("CN={}", "b".repeat(1000));
    let refused = store
        .set_client_certificate("ep_1", Some(("CERT B", "KEY B", shown(&long))), T0)
        .await;
    assert!(
        matches!(refused, Err(StoreError::TooLarge { .. })),
        "{refused:?}"
    );
    let ep = store.endpoint("ep_1").unwrap();
    assert_eq!(ep.client_certificate.as_ref().unwrap().subject, "CN=a");
    assert_eq!(
        store.client_certificate_pem("ep_1").unwrap(),
        Some(("CERT A".to_string(), "KEY A".to_string()))
    );
    // Removing it removes the PEM too.
    store
        .set_client_certificate("ep_1", None, T0)
        .await
        .unwrap();
    assert_eq!(store.client_certificate_pem("ep_1").unwrap(), None);
    assert!(store.endpoint("ep_1").unwrap().client_certificate.is_none());
}

/// A key whose event retention prunes goes with it (it claims nothing without the
/// event), so with a retention shorter than a day keys do not outlive their events; a key
/// another event holds now stays.
#[tokio::test]
async fn an_idempotency_key_goes_with_its_pruned_event() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let keyed = |at: Millis, k: &str| {
        let mut ev = event("a", &[NO_LANE], at);
        ev.idempotency_key = Some(k.into());
        ev
    };
    let mut ended = Vec::new();
    for (i, k) in ["one", "two", "three"].iter().enumerate() {
        let at = T0 + i as Millis;
        let out = store.ingest(vec![keyed(at, k)]).await.unwrap();
        let d = created(&out[0]).1[0].clone();
        let _c = store
            .claim(ids::parse(ids::DELIVERY, &d.id).unwrap())
            .unwrap();
        let mut done = d.clone();
        done.state = DeliveryState::Skipped;
        done.next_attempt_at = None;
        store
            .update_delivery(&d, &done, Some(&attempt(1, Status::NoEndpoint, at)))
            .unwrap();
        ended.push(ids::parse(ids::EVENT, &d.event_id).unwrap());
    }
    // "two"'s row names another event now: it is not this event's to remove.
    let day = key::idempotency_day(T0);
    let two = keys::key_row(day, "a", "two");
    store.inner.keys.add(&[(two, 42)], 0).unwrap();
    let count = || store.inner.keys.len();
    assert_eq!(count(), 3);
    // Only the first two events are older than the cutoff.
    let p = store.prune_events(T0 + 2, None, 100).unwrap();
    assert_eq!(p.events, 2);
    assert_eq!(
        count(),
        2,
        "one's key went with its event; two's and three's stay"
    );
    assert!(store
        .inner
        .keys
        .get(&keys::key_row(day, "a", "one"))
        .unwrap()
        .is_none());
    assert_eq!(store.inner.keys.get(&two).unwrap(), Some(42));
    // The pruned event's key claims nothing: the same key makes a new event.
    let again = store.ingest(vec![keyed(T0 + 3, "one")]).await.unwrap();
    assert!(matches!(again[0], IngestOutcome::Created { .. }));
    close(store);
}

/// A data directory another store holds open is refused with an error naming it (after
/// waiting a moment for a lock that is only being let go); once closed, it opens at once.
#[tokio::test]
async fn a_data_directory_in_use_is_refused_until_closed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let second = SledStore::open(dir.path(), 8 << 20, clock.clone(), Arc::default());
    match second {
        Err(e @ StoreError::InUse(_)) => {
            let said = e.to_string();
            assert!(said.contains(&dir.path().display().to_string()), "{said}");
            assert!(said.contains("in use"), "{said}");
        }
        Err(other) => panic!("expected InUse, got {other}"),
        Ok(_) => panic!("a second store opened a directory in use"),
    }
    close(store);
    close(open(dir.path(), &clock));
}

/// A data directory written by herald in storage format 3 (`tests/fixtures/format3`, see its
/// README) opens in format 4: its idempotency keys move to their own database and keep
/// answering with their first events; its log reads; a second open finds nothing to move or
/// rebuild.
#[tokio::test]
async fn a_format_3_store_moves_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("format3", dir.path());
    let first = "evt_01M8YECQJWCCC1DMPEKQ6DCC00";
    let written = ids::ulid_ms(ids::parse(ids::EVENT, first).unwrap());
    let clock = Arc::new(ManualClock::new(written + 60 * 60_000));
    let store = open(dir.path(), &clock);
    let format = store.inner.trees.meta.get(meta_keys::FORMAT).unwrap();
    assert_eq!(format.unwrap().as_ref(), [FORMAT]);
    assert_eq!(
        store
            .inner
            .trees
            .log
            .scan_prefix([key::IDEMPOTENCY])
            .count(),
        0
    );
    assert_eq!(store.inner.keys.len(), 2);
    let state = |id: &str| store.delivery(id).unwrap().map(|d| d.state);
    assert_eq!(
        state("dlv_01M8YECQJWCCC1DMPEKQ6DCC01"),
        Some(DeliveryState::Delivered)
    );
    assert_eq!(
        state("dlv_01M8YECQK87DKFKMDN865MBR01"),
        Some(DeliveryState::Skipped)
    );
    let again = |account: &str, k: &str| {
        let mut ev = event(account, &[NO_LANE], clock.now_ms());
        ev.idempotency_key = Some(k.into());
        ev
    };
    let out = store
        .ingest(vec![again("acct-1", "idem-1"), again("acct-2", "idem-2")])
        .await
        .unwrap();
    let ids: Vec<_> = out
        .iter()
        .map(|o| match o {
            IngestOutcome::Duplicate { event_id } => event_id.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids, [first, "evt_01M8YECQK87DKFKMDN865MBR00"]);
    // Another account's idem-1 is its own key.
    let out = store.ingest(vec![again("acct-2", "idem-1")]).await.unwrap();
    assert!(matches!(out[0], IngestOutcome::Created { .. }));
    close(store);

    // Opened again: the watermark covers every event, so nothing is read again.
    let store = open(dir.path(), &clock);
    assert_eq!(store.inner.keys.len(), 3);
    assert_eq!(
        store
            .inner
            .keys
            .rebuild(&store.inner.trees.log, clock.now_ms())
            .unwrap(),
        0
    );
    close(store);
}

/// The keys' database is an index of the log: lost whole (or the keys a crash took before
/// its sync), the next open writes the keys of the last two days again from the event rows.
#[tokio::test]
async fn lost_idempotency_keys_are_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let keyed = |at: Millis, k: &str| {
        let mut ev = event("a", &[NO_LANE], at);
        ev.idempotency_key = Some(k.into());
        ev
    };
    let day = IDEMPOTENCY_WINDOW_MS;
    let out = store.ingest(vec![keyed(T0, "old")]).await.unwrap();
    assert!(matches!(out[0], IngestOutcome::Created { .. }));
    clock.set(T0 + 2 * day);
    let out = store
        .ingest(vec![keyed(T0 + 2 * day, "a"), keyed(T0 + 2 * day, "b")])
        .await
        .unwrap();
    let firsts: Vec<_> = out.iter().map(|o| created(o).0.to_string()).collect();
    close(store);
    std::fs::remove_dir_all(dir.path().join("idempotency")).unwrap();

    let store = open(dir.path(), &clock);
    // "old" is past its window: not written again.
    assert_eq!(store.inner.keys.len(), 2);
    let out = store
        .ingest(vec![keyed(clock.now_ms(), "a"), keyed(clock.now_ms(), "b")])
        .await
        .unwrap();
    for (o, first) in out.iter().zip(&firsts) {
        match o {
            IngestOutcome::Duplicate { event_id } => assert_eq!(event_id, first),
            other => panic!("{other:?}"),
        }
    }
    close(store);
}

/// Deleting an endpoint whose breaker holds its lane ends the hold: its waiting deliveries end
/// now, not at the breaker's next probe (found by the load benchmark: 551,271 deliveries to a
/// deleted endpoint waited three minutes).
#[tokio::test]
async fn expediting_an_endpoint_releases_its_lane_hold() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let events = vec![event("a", &[LANE], T0), event("a", &[LANE], T0)];
    store.ingest(events).await.unwrap();
    let mut due = store.due().take(T0, 1, any);
    assert_eq!(due.len(), 1);
    store.due().put_back(due.remove(0), Some(T0 + 600_000));
    assert!(
        store.due().take(T0 + 1, 10, any).is_empty(),
        "the lane is held"
    );
    store
        .expedite_endpoint(&ids::format(ids::ENDPOINT, LANE), T0 + 1)
        .unwrap();
    assert_eq!(store.due().take(T0 + 1, 10, any).len(), 2);
    close(store);
}

/// A backlog bigger than a lane keeps in memory: the newer fresh deliveries spill
/// to sled only, at ingest and again when a restart rebuilds the index; the engine's refills
/// (a thread walking the log for every lane that waits) bring every one back, once, in order,
/// and one that was attempted while spilled is not handed out again. Two lanes spill.
#[tokio::test]
async fn a_spilled_backlog_comes_back_whole_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut all = Vec::new();
    for batch in 0..20 {
        let news = (0..500)
            .map(|j| {
                let i = batch * 500 + j;
                let targets: &[Lane] = if i % 2 == 0 {
                    &[LANE, LANE + 1]
                } else {
                    &[LANE]
                };
                event("a", targets, T0 + i)
            })
            .collect();
        for out in store.ingest(news).await.unwrap() {
            let (_, deliveries) = created(&out);
            all.extend(deliveries.iter().cloned());
        }
    }
    let total = all.len();
    assert_eq!(store.due().len(), total);
    // Both lanes spill (10,000 and 5,000 first attempts; 4,096 each in memory).
    assert_eq!(
        store.due().fresh_in_memory(),
        2 * 4096,
        "the backlog spilled"
    );

    // Attempted while spilled (as a manual retry would, or an attempt before a restart).
    let d = &all[total - 100];
    deliver(&store, d, T0 + 20_000);
    let delivered_while_out = d.id.clone();
    close(store);

    let store = open(dir.path(), &clock);
    assert_eq!(store.due().len(), total - 1);
    assert_eq!(
        store.due().fresh_in_memory(),
        2 * 4096,
        "spilled by the rebuild"
    );

    let mut got: Vec<u128> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while got.len() < total - 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {}",
            got.len(),
            total - 1
        );
        let due = store.due().take(T0 + 100_000, 300, any);
        store.refill_due();
        if due.is_empty() {
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(100), store.due().changed())
                    .await;
        }
        for e in due {
            store.due().done(e.lane, e.delivery);
            got.push(e.delivery);
        }
    }
    let mut want: Vec<u128> = all
        .iter()
        .filter(|d| d.id != delivered_while_out)
        .map(|d| ids::parse(ids::DELIVERY, &d.id).unwrap())
        .collect();
    // The second delivery of an event goes to LANE + 1.
    let of_lane = |list: &[u128], second: bool| -> Vec<u128> {
        list.iter()
            .copied()
            .filter(|d| (ids::event_of(*d).unwrap().1 == 1) == second)
            .collect()
    };
    for second in [false, true] {
        assert_eq!(of_lane(&got, second), of_lane(&want, second), "lane order");
    }
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "every pending delivery once");
    assert!(store.due().is_empty());
    close(store);
}

/// A purge that comes while the scheduler holds one of the purged account's deliveries (its
/// attempt runs; then its breaker puts it back) takes that delivery out of its second's fresh
/// bucket once, and only once: taken again, its event gone, it is dropped without touching the
/// buckets. Before, it left them a second time, the bucket emptied one delivery early, and the
/// watermark written at close went past another account's fresh delivery of that second, which
/// after the next start was pending for ever (LOST).
#[tokio::test]
async fn a_purge_racing_the_scheduler_strands_no_other_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    // The purged account's lane sorts first, so it is taken first.
    let (purged_lane, other_lane) = (LANE, LANE + 1);
    let out = store
        .ingest(vec![
            event("purged", &[purged_lane], T0),
            event("other", &[other_lane], T0),
        ])
        .await
        .unwrap();
    let other = created(&out[1]).1[0].clone();

    // The engine takes the purged account's delivery and attempts it.
    let mut taken = store.take_due_now(T0, 1, &everything());
    assert_eq!(taken.len(), 1);
    let hold = taken.remove(0);
    assert_eq!(hold.due.delivery.account_id, "purged");

    let purged = store.purge_account("purged").await.unwrap();
    assert_eq!((purged.events, purged.deliveries), (1, 1));
    // Its breaker opened meanwhile: the entry goes back, its lane held a second.
    store.release_taken(hold.hold, Some(T0 + 1_000));
    clock.set(T0 + 1_000);
    let again = store.take_due_now(T0 + 1_000, 10, &everything());
    assert!(
        again.iter().all(|t| t.due.delivery.account_id != "purged"),
        "nothing of the purged account is attempted"
    );
    // The other's is not attempted yet either (its lane stops, say): it stays fresh.
    for t in again {
        store.release_taken(t.hold, None);
    }
    // A later event of the other account, in a later second, fresh as well.
    clock.set(T0 + 5_000);
    let out = store
        .ingest(vec![event("other", &[other_lane], T0 + 5_000)])
        .await
        .unwrap();
    let later = created(&out[0]).1[0].clone();
    let pending = store.stats().get(DeliveryState::Pending);
    // Nothing holds an entry of the purged event any more: its tombstone goes.
    store.inner.sweep_tombstones();
    assert_eq!(store.inner.lock_tombstones().len(), 0, "the tombstone went");
    let due = due_after_reopen(store, dir.path(), &clock, T0 + 5_000, &other.id);
    assert_eq!(
        due,
        vec![other.id.clone(), later.id.clone()],
        "the other account's deliveries are due"
    );
    assert_eq!(
        pending, 2,
        "the other's, each counted once before the restart"
    );
}

/// An operator event about a purged account goes with it; its delivery, taken by the
/// scheduler just before the purge and claimed just after, finds its event gone and is dropped
/// without touching the counts or its fresh second: the event's tombstone stays while the
/// entry is out. Before, the purge's sweep removed the tombstone once no claim held the
/// delivery, the entry left its fresh second a second time, and the watermark written at close
/// went past another account's fresh delivery of that second (pending for ever after the
/// restart: LOST).
#[tokio::test]
async fn an_operator_delivery_taken_during_a_purge_strands_no_other_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    // The operator endpoint's lane sorts first, so it is taken first.
    let (operator_lane, other_lane) = (LANE, LANE + 1);
    let mut about = event(herald_core::model::OPERATOR_ACCOUNT, &[operator_lane], T0);
    about.payload = Bytes::from_static(br#"{"data":{"account_id":"purged"}}"#);
    let out = store
        .ingest(vec![about, event("other", &[other_lane], T0)])
        .await
        .unwrap();
    let other = created(&out[1]).1[0].clone();

    // The scheduler takes the operator delivery; its claim is not asked for yet.
    let taken = store.due().take(T0, 1, any);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].lane, operator_lane);
    store.purge_account("purged").await.unwrap();
    assert_eq!(
        store.inner.lock_tombstones().len(),
        1,
        "the tombstone stays while its delivery is out"
    );
    // Its claim, then its delivery: the event is gone, so the entry is dropped (as
    // `take_due_now` does).
    let e = taken[0];
    let claim = store.claim(e.delivery).expect("nobody holds it");
    assert!(store.due_delivery(e.delivery).unwrap().is_none());
    store.drop_orphan(e.lane, e.delivery).unwrap();
    store.due().ended(e.lane, e.delivery);
    drop(claim);
    store.due().done(e.lane, e.delivery);
    store.inner.sweep_tombstones();
    assert_eq!(store.inner.lock_tombstones().len(), 0, "then it goes");
    assert_eq!(
        store.stats().get(DeliveryState::Pending),
        1,
        "the other's only, counted once"
    );
    let due = due_after_reopen(store, dir.path(), &clock, T0, &other.id);
    assert_eq!(due, vec![other.id.clone()], "the other's delivery is due");
}

/// A trailing candidate that a newer event of its window supersedes while its account is
/// purged leaves the counts once and keeps no row: the cycle decided the supersede (it claimed
/// and read the candidate) before the purge, and writes after it. Before, the cycle wrote the
/// candidate's `debounced` attempt for an event the purge had removed and counted it from
/// pending to skipped, after the purge had counted it out: pending one short, skipped one
/// too many, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_superseded_while_its_account_is_purged_leaves_the_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (_, candidate) = trailing_candidate(&store, &clock).await;
    assert_eq!(store.stats().get(DeliveryState::Pending), 2);
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    *store.inner.faults.hold_write.lock().unwrap() = Some(Hold {
        reached: reached_tx,
        go: go_rx,
    });
    clock.set(T0 + 200);
    let newer = tokio::spawn({
        let store = store.clone();
        async move { store.ingest(vec![debounced_event(T0 + 200, 10_000)]).await }
    });
    reached
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the cycle decides the supersede");
    let purge = tokio::spawn({
        let store = store.clone();
        async move { store.purge_account("a").await }
    });
    // The purge removes the rows, then waits for the committer to sync.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while store
        .inner
        .trees
        .log
        .get(key::event(ids::event_of(candidate).unwrap().0))
        .unwrap()
        .is_some()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the purge never removed the candidate"
        );
        tokio::task::yield_now().await;
    }
    go.send(()).unwrap();
    let out = newer.await.unwrap().unwrap();
    let purged = purge.await.unwrap().unwrap();
    assert_eq!(purged.events, 2);
    assert_eq!(
        store
            .inner
            .trees
            .log
            .scan_prefix(key::attempts(candidate))
            .count(),
        0,
        "no attempt of the purged candidate is written"
    );
    // The newer event was committed after the purge read the account: it stays, trailing.
    assert_eq!(created(&out[0]).1[0].state, DeliveryState::Pending);
    assert_eq!(store.stats().get(DeliveryState::Pending), 1);
    assert_eq!(store.stats().get(DeliveryState::Skipped), 0);
    close(store);
}

/// A manual retry of a folded delivery that read it before its account's purge (it holds the
/// delivery's claim, and brings the event back among hot rows after the purge let go of the
/// fold lock) records nothing: the purge found the claim held, and its tombstone stays until
/// the retry is over. Before, the tombstone went at the end of the purge, and the retry wrote a
/// pending row for a removed event and counted it from failed to pending (failed one short
/// for good; the row came up later as an entry without its event).
#[tokio::test]
async fn a_retry_of_a_folded_delivery_racing_a_purge_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let out = store
        .ingest(vec![event("a", &[LANE], T0), event("a", &[LANE], T0)])
        .await
        .unwrap();
    for o in &out {
        end_failed(&store, &created(o).1[0]);
    }
    // Their index entries were taken for those attempts.
    assert_eq!(all_due(&store, T0).len(), 2);
    store.inner.keys.checkpoint().unwrap();
    let f = store.fold_history(T0 + 10_000, None, 10_000).unwrap();
    assert_eq!(f.events, 2, "both folded");
    let id = created(&out[0]).1[0].id.clone();
    let ulid = ids::parse(ids::DELIVERY, &id).unwrap();
    // The retry, as `change_delivery` goes: the claim, then the delivery, read from its fold.
    let claim = store.claim(ulid).expect("free");
    let was = store.delivery(&id).unwrap().expect("folded, readable");
    assert_eq!(was.state, DeliveryState::Failed);

    store.purge_account("a").await.unwrap();
    assert_eq!(store.stats().get(DeliveryState::Failed), 0);
    assert_eq!(
        store.inner.lock_tombstones().len(),
        1,
        "the retry's claim keeps the tombstone"
    );
    // The retry goes on: nothing to bring back; its change is discarded.
    assert!(!store.inner.unfold(ids::event_of(ulid).unwrap().0).unwrap());
    let mut now = was.clone();
    now.state = DeliveryState::Pending;
    now.next_attempt_at = Some(T0 + 20_000);
    now.manual = true;
    store.update_delivery(&was, &now, None).unwrap();
    drop(claim);
    store.inner.sweep_tombstones();
    assert_eq!(store.inner.lock_tombstones().len(), 0, "then it goes");
    assert!(store
        .inner
        .trees
        .log
        .get(key::pending(ulid))
        .unwrap()
        .is_none());
    assert_eq!(store.due().len(), 0);
    assert_eq!(store.stats().get(DeliveryState::Failed), 0);
    assert_eq!(store.stats().get(DeliveryState::Pending), 0);
    close(store);
}

/// An export reads a delivery and its attempts as of one moment: an attempt recorded between
/// its read of the attempts and of the delivery makes it read both again. Before, the archive
/// held a delivery counting one attempt with two attempts beside it, and a cluster restored
/// from it numbered its next attempt as one that existed (a duplicate key; the delivery was
/// never recorded again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_reads_a_delivery_and_its_attempts_as_of_one_moment() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let out = store.ingest(vec![event("a", &[LANE], T0)]).await.unwrap();
    let d = created(&out[0]).1[0].clone();
    // A first attempt failed; the delivery is retried later.
    let ulid = ids::parse(ids::DELIVERY, &d.id).unwrap();
    let mut once = d.clone();
    once.attempt_count = 1;
    once.next_attempt_at = Some(T0 + 60_000);
    once.queued = true;
    {
        let _claim = store.claim(ulid).unwrap();
        store
            .update_delivery(&d, &once, Some(&attempt(1, Status::HttpError, T0)))
            .unwrap();
    }
    let (reached_tx, reached) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    *store.inner.faults.hold_export.lock().unwrap() = Some(Hold {
        reached: reached_tx,
        go: go_rx,
    });
    let export = std::thread::spawn({
        let store = store.clone();
        move || store.export_events(None, 10).unwrap()
    });
    reached
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the export read the attempts");
    // The second attempt lands between the export's two reads, and ends the delivery.
    let mut twice = once.clone();
    twice.attempt_count = 2;
    twice.state = DeliveryState::Failed;
    twice.next_attempt_at = None;
    twice.queued = false;
    {
        let _claim = store.claim(ulid).unwrap();
        store
            .update_delivery(
                &once,
                &twice,
                Some(&attempt(2, Status::HttpError, T0 + 60_000)),
            )
            .unwrap();
    }
    go.send(()).unwrap();
    let (page, _) = export.join().unwrap();
    let (exported, attempts) = &page[0].deliveries[0];
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        (exported.attempt_count, exported.state),
        (2, DeliveryState::Failed),
        "the delivery as its attempts leave it"
    );
    close(store);
}

/// A no-endpoint delivery that was attempted (`no_endpoint`) and then queued again by a manual
/// retry, purged with its account, leaves its second's fresh bucket no second time: its entry
/// in the shared no-endpoint lane is dropped by the purge, which counts it out. Before, the
/// purge left it to the queue, which took it for fresh (its pending row was gone) and emptied
/// the bucket of another account's fresh delivery of that second (LOST after a restart).
#[tokio::test]
async fn a_retried_no_endpoint_delivery_purged_strands_no_other_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let out = store
        .ingest(vec![event("a", &[NO_LANE], T0), event("b", &[LANE], T0)])
        .await
        .unwrap();
    let (a, b) = (created(&out[0]).1[0].clone(), created(&out[1]).1[0].clone());
    // The engine takes both; a's is recorded `no_endpoint`, b's is not attempted yet.
    for t in store.take_due_now(T0, 10, &everything()) {
        if t.due.delivery.id == a.id {
            let mut skipped = a.clone();
            skipped.state = DeliveryState::Skipped;
            skipped.attempt_count = 1;
            skipped.next_attempt_at = None;
            store
                .update_delivery(&a, &skipped, Some(&attempt(1, Status::NoEndpoint, T0)))
                .unwrap();
        }
        store.release_taken(t.hold, None);
    }
    // A manual retry queues a's again, for a second later.
    let retried = store.delivery(&a.id).unwrap().unwrap();
    let mut again = retried.clone();
    again.state = DeliveryState::Pending;
    again.next_attempt_at = Some(T0 + 1_000);
    again.manual = true;
    again.queued = true;
    {
        let _claim = store
            .claim(ids::parse(ids::DELIVERY, &a.id).unwrap())
            .unwrap();
        store.update_delivery(&retried, &again, None).unwrap();
    }
    store.purge_account("a").await.unwrap();
    clock.set(T0 + 1_000);
    let due = store.take_due_now(T0 + 1_000, 10, &everything());
    assert!(due.iter().all(|t| t.due.delivery.account_id == "b"));
    for t in due {
        store.release_taken(t.hold, None);
    }
    store.inner.sweep_tombstones();
    assert_eq!(store.inner.lock_tombstones().len(), 0);
    // A later event of b, in a later second, fresh as well.
    clock.set(T0 + 5_000);
    let out = store
        .ingest(vec![event("b", &[LANE], T0 + 5_000)])
        .await
        .unwrap();
    let later = created(&out[0]).1[0].clone();
    assert_eq!(store.stats().get(DeliveryState::Pending), 2, "b's only");
    let due = due_after_reopen(store, dir.path(), &clock, T0 + 5_000, &b.id);
    assert_eq!(due, vec![b.id.clone(), later.id.clone()]);
}

/// Closes `store`, opens its directory again and answers the deliveries its index hands out
/// at `now` (taking them), saying LOST when `watched` is not among them: a delivery pending for
/// ever after the restart.
fn due_after_reopen(
    store: Arc<SledStore>,
    dir: &Path,
    clock: &Arc<ManualClock>,
    now: Millis,
    watched: &str,
) -> Vec<String> {
    close(store);
    let store = open(dir, clock);
    let due: Vec<String> = all_due(&store, now)
        .into_iter()
        .map(|d| ids::format(ids::DELIVERY, d))
        .collect();
    if !due.iter().any(|d| d == watched) {
        println!("LOST: {watched} is pending and never attempted");
    }
    close(store);
    due
}

/// Ends `d` failed after one attempt, as the engine would.
fn end_failed(store: &SledStore, d: &Delivery) {
    let _claim = store
        .claim(ids::parse(ids::DELIVERY, &d.id).unwrap())
        .unwrap();
    let mut failed = d.clone();
    failed.state = DeliveryState::Failed;
    failed.attempt_count = 1;
    failed.next_attempt_at = None;
    store
        .update_delivery(
            d,
            &failed,
            Some(&attempt(1, Status::HttpError, d.created_at)),
        )
        .unwrap();
}

/// Retention removes an event with all its rows or not at all: when its write fails, the event
/// reads whole (its payload, its delivery and attempt) and is still counted; the next sweep
/// removes it and counts it out once. Before, its rows went one by one, and a failure or a
/// crash between them left an event without its attempts (pending for ever) or chunks
/// (unreadable: every later backup failed).
#[tokio::test]
async fn retention_removes_an_event_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut ev = event("a", &[LANE], T0);
    ev.payload = Bytes::from(format!(r#"{{"pad":"{}"}}"#, "x".repeat(20_000)));
    let out = store.ingest(vec![ev]).await.unwrap();
    end_failed(&store, &created(&out[0]).1[0]);
    store.inner.faults.prune_write.store(true, Ordering::SeqCst);
    assert!(
        store.prune_events(T0 + 1, None, 10).is_err(),
        "the write failed"
    );
    let (page, _) = store.export_events(None, 10).unwrap();
    assert_eq!(page.len(), 1, "the event reads whole");
    assert_eq!(page[0].payload.len(), 20_010);
    assert_eq!(page[0].deliveries[0].1.len(), 1, "with its attempt");
    assert_eq!(
        store.stats().get(DeliveryState::Failed),
        1,
        "and is counted"
    );

    let p = store.prune_events(T0 + 1, None, 10).unwrap();
    assert_eq!((p.events, p.deliveries, p.attempts), (1, 1, 1));
    assert!(store.export_events(None, 10).unwrap().0.is_empty());
    assert_eq!(
        store.stats().get(DeliveryState::Failed),
        0,
        "counted out once"
    );
    close(store);
}

/// A delivery of the shared no-endpoint lane whose attempt runs when its account is purged
/// leaves the counts and its fresh second once: its attempt's record is discarded and its
/// release puts nothing back, so the purge takes it out. Before, nothing did: pending stayed
/// one too many and the watermark stayed below it until a restart.
#[tokio::test]
async fn a_no_endpoint_delivery_attempted_during_a_purge_leaves_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    store
        .ingest(vec![event("a", &[NO_LANE], T0)])
        .await
        .unwrap();
    let mut taken = store.take_due_now(T0, 1, &everything());
    assert_eq!(taken.len(), 1);
    let t = taken.remove(0);
    store.purge_account("a").await.unwrap();
    // The attempt ends: `no_endpoint`, recorded after the purge (discarded), then released.
    let was = t.due.delivery.clone();
    let mut skipped = was.clone();
    skipped.state = DeliveryState::Skipped;
    skipped.attempt_count = 1;
    skipped.next_attempt_at = None;
    store
        .update_delivery(&was, &skipped, Some(&attempt(1, Status::NoEndpoint, T0)))
        .unwrap();
    store.release_taken(t.hold, None);
    assert_eq!(store.stats().get(DeliveryState::Pending), 0);
    assert_eq!(store.stats().get(DeliveryState::Skipped), 0);
    let fresh = store.inner.lock_fresh();
    assert_eq!(
        fresh.watermark(),
        fresh.last_event,
        "no fresh second is held"
    );
    drop(fresh);
    close(store);
}

/// Retention and a purge both take ended deliveries out of the counts: a purge that comes
/// while retention is removing the account's events waits for it, so each delivery leaves the
/// counts once. Before, the purge ran meanwhile, both subtracted the delivery retention held,
/// and the counts stayed one short for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_and_retention_take_an_ended_delivery_out_of_the_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut ended = Vec::new();
    for (account, at) in [("acct", T0), ("acct", T0), ("other", T0 + 10)] {
        let out = store
            .ingest(vec![event(account, &[LANE], at)])
            .await
            .unwrap();
        ended.push(created(&out[0]).1[0].clone());
    }
    ended.iter().for_each(|d| end_failed(&store, d));
    assert_eq!(store.stats().get(DeliveryState::Failed), 3);

    // Retention removes the account's older events, held at the first of them.
    let (reached, at_prune) = std::sync::mpsc::channel();
    let (go, wait) = std::sync::mpsc::channel();
    *store.inner.faults.hold_prune.lock().unwrap() = Some(Hold { reached, go: wait });
    let pruning = {
        let store = store.clone();
        std::thread::spawn(move || store.prune_events(T0 + 1, None, 10))
    };
    at_prune.recv().unwrap();
    let (done, purge_done) = std::sync::mpsc::channel();
    let purging = {
        let store = store.clone();
        tokio::spawn(async move {
            let purged = store.purge_account("acct").await;
            let _ = done.send(());
            purged
        })
    };
    let ran_meanwhile = purge_done
        .recv_timeout(std::time::Duration::from_millis(300))
        .is_ok();
    go.send(()).unwrap();
    let pruned = pruning.join().unwrap().unwrap();
    let purged = purging.await.unwrap().unwrap();
    assert!(!ran_meanwhile, "the purge waits for retention");
    assert_eq!(
        (pruned.events, purged.events),
        (2, 0),
        "retention took the account's events, the purge found none left"
    );
    assert_eq!(
        store.stats().get(DeliveryState::Failed),
        1,
        "the other account's ended delivery is counted, the purged ones once removed"
    );
    close(store);
}

/// An event of account `account` whose type debounces on its payload's `loc` (no
/// `debounce_key` in the request), leading or trailing.
fn located_event(account: &str, loc: &str, trailing: bool, at: Millis) -> NewEvent {
    let mut ev = event(account, &[LANE], at);
    ev.event_type = "loc.changed".into();
    ev.payload = Bytes::from(format!(r#"{{"n":1,"loc":"{loc}"}}"#));
    ev.debounce = Some(DebounceRule {
        key: format!("{account}\0loc.changed\0{loc}"),
        window_ms: 3_600_000,
        trailing,
    });
    ev
}

/// A format-7 store's debounce windows name no account: the migration to format 8 finds it
/// (a trailing window's candidate, a leading window's opening event by its payload's fields)
/// and indexes them; a purge then forgets them, and the same event is no longer debounced.
#[tokio::test]
async fn a_format_7_stores_windows_are_indexed_by_account_and_purged() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    store
        .ingest(vec![
            located_event("acct", "L1", false, T0),
            located_event("acct", "L2", true, T0),
            located_event("other", "L1", false, T0),
        ])
        .await
        .unwrap();
    clock.set(T0 + 100);
    store
        .ingest(vec![located_event("acct", "L2", true, T0 + 100)])
        .await
        .unwrap();
    // As format 7 left it: windows without their account, no index, the format recorded.
    let log = &store.inner.trees.log;
    for item in log.scan_prefix([key::WINDOW]) {
        let (k, v) = item.unwrap();
        log.insert(k, &v[..27]).unwrap();
    }
    for k in log.scan_prefix([key::ACCOUNT_WINDOW]).keys() {
        log.remove(k.unwrap()).unwrap();
    }
    store.inner.trees.meta.insert(b"format", &[7]).unwrap();
    close(store);

    let store = open(dir.path(), &clock);
    let log = &store.inner.trees.log;
    let indexed = |account: &str| log.scan_prefix(key::account_windows(account)).count();
    assert_eq!((indexed("acct"), indexed("other")), (2, 1));
    store.purge_account("acct").await.unwrap();
    assert_eq!((indexed("acct"), indexed("other")), (0, 1));
    assert_eq!(
        log.scan_prefix([key::WINDOW]).count(),
        1,
        "the other's only"
    );
    clock.set(T0 + 200);
    let out = store
        .ingest(vec![
            located_event("acct", "L1", false, T0 + 200),
            located_event("other", "L1", false, T0 + 200),
        ])
        .await
        .unwrap();
    assert_eq!(
        created(&out[0]).1[0].state,
        DeliveryState::Pending,
        "the purged account's window is gone"
    );
    assert_eq!(
        created(&out[1]).1[0].state,
        DeliveryState::Skipped,
        "the other's window stays"
    );
    close(store);
}

/// A delivery with a recorded attempt is never taken for a fresh one when the store opens
/// again, whatever its attempt row ends with (here a response header's last byte): the restart
/// neither hands it out again nor counts it pending.
#[tokio::test]
async fn an_attempted_delivery_is_not_fresh_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let out = store.ingest(vec![event("a", &[LANE], T0)]).await.unwrap();
    let d = created(&out[0]).1[0].clone();
    assert_eq!(
        all_due(&store, T0),
        [ids::parse(ids::DELIVERY, &d.id).unwrap()]
    );
    let done = Delivery {
        state: DeliveryState::Delivered,
        next_attempt_at: None,
        attempt_count: 1,
        ..d.clone()
    };
    let mut a = attempt(1, Status::Delivered, T0);
    a.response_headers = vec![("date".into(), "Sun, 06 Dec 2026 22:02:02 GMT".into())];
    store.update_delivery(&d, &done, Some(&a)).unwrap();
    close(store);
    let store = open(dir.path(), &clock);
    assert!(
        all_due(&store, T0 + 3_600_000).is_empty(),
        "handed out again"
    );
    assert_eq!(
        store.stats().get(DeliveryState::Pending),
        0,
        "counted pending"
    );
    close(store);
}
