//! Folded history ([`herald_store::fold`]): what was read before folding reads the same after
//! it, after a restart, after a retry takes an event back and after a late event joins; a
//! failed fold changes nothing; retention removes folds whole.

use super::*;
use crate::fold::Place;

/// Everything the API can read of the store, as text: every event with its payload and
/// deliveries, every delivery's attempts, and list pages with and without filters.
fn everything(store: &SledStore, events: &[String]) -> String {
    events_text(store, events) + &lists_text(store)
}

/// Each event with its payload, its deliveries (from the event and by id) and their attempts.
fn events_text(store: &SledStore, events: &[String]) -> String {
    let mut out = String::new();
    for id in events {
        let (meta, payload, deliveries) = store.event_with_deliveries(id).unwrap().unwrap();
        out += &format!(
            "{}\n{}\n",
            serde_json::to_string(&meta).unwrap(),
            payload.len()
        );
        out += &format!("{}\n", payload.iter().map(|b| *b as u64).sum::<u64>());
        for d in &deliveries {
            out += &serde_json::to_string(d).unwrap();
            let again = store.delivery(&d.id).unwrap().unwrap();
            out += &serde_json::to_string(&again).unwrap();
            out += &serde_json::to_string(&store.attempts(&d.id).unwrap()).unwrap();
            out += "\n";
        }
    }
    out
}

/// Pages of the delivery list, with and without filters.
fn lists_text(store: &SledStore) -> String {
    let mut out = String::new();
    let filters = [
        DeliveryFilter::default(),
        DeliveryFilter {
            account_id: Some("b".into()),
            ..Default::default()
        },
        DeliveryFilter {
            state: Some(DeliveryState::Failed),
            ..Default::default()
        },
        DeliveryFilter {
            account_id: Some("a".into()),
            state: Some(DeliveryState::Pending),
            ..Default::default()
        },
    ];
    for f in &filters {
        let mut cursor = None;
        loop {
            let (page, next) = store.list_deliveries(f, 7, cursor.as_deref()).unwrap();
            for d in &page {
                out += &format!("{} ", d.id);
            }
            out += "|";
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        out += "\n";
    }
    out
}

fn rows_of(store: &SledStore, kind: u8) -> usize {
    store
        .inner
        .trees
        .log
        .range(key::of(kind, 0)..key::end(kind))
        .count()
}

/// Folds never overlap, and each holds at least one event.
fn assert_disjoint(store: &SledStore) {
    let mut last = None;
    for item in store
        .inner
        .trees
        .log
        .range(key::fold(0)..key::end(key::FOLD))
    {
        let (k, _) = item.unwrap();
        let first = key::ulid(&k).unwrap();
        let fold = store.inner.fold_at(first).unwrap().unwrap();
        assert_eq!(fold.first, first);
        assert!(fold.events().next().is_some(), "an empty fold");
        assert!(last.is_none_or(|l| l < first), "folds overlap");
        last = Some(fold.last);
    }
}

/// No event is both folded and hot (its event row still there).
fn assert_hot_or_folded(store: &SledStore) {
    let log = &store.inner.trees.log;
    for item in log.range(key::fold(0)..key::end(key::FOLD)) {
        let (k, _) = item.unwrap();
        let fold = store
            .inner
            .fold_at(key::ulid(&k).unwrap())
            .unwrap()
            .unwrap();
        for (event, _) in fold.events() {
            assert!(
                !log.contains_key(key::event(event)).unwrap(),
                "event {event:x} is both folded and hot"
            );
        }
    }
}

/// Bytes no compressor shrinks (xorshift64).
fn noise(n: usize) -> Vec<u8> {
    noise_from(0x9e37_79b9_7f4a_7c15, n)
}

/// [`noise`] from a seed of its own (not 0).
fn noise_from(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// 240 events over two accounts, some with two deliveries, one with a payload in chunks and
/// one too large to fold; delivered, failed after two attempts, or left pending.
async fn history(store: &SledStore) -> (Vec<String>, Vec<Delivery>) {
    let mut events = Vec::new();
    let mut pending = Vec::new();
    for i in 0..240i64 {
        let account = if i % 3 == 0 { "b" } else { "a" };
        let targets: &[Lane] = if i % 5 == 0 {
            &[LANE, LANE + 1]
        } else {
            &[LANE]
        };
        let mut ev = event(account, targets, T0 + i);
        ev.payload = match i {
            // Chunked, and compressible: folds.
            16 => Bytes::from(format!("{{\"big\":\"{}\"}}", "abc".repeat(7_000))),
            // Chunked and random: too large for a fold of its own; stays hot.
            18 => Bytes::from(noise(40_000)),
            _ => Bytes::from(format!("{{\"n\":{i},\"who\":\"user-{}\"}}", i % 17)),
        };
        if i % 11 == 0 {
            ev.idempotency_key = Some(format!("idem-{i}"));
        }
        let out = store.ingest(vec![ev]).await.unwrap();
        let (id, deliveries) = created(&out[0]);
        events.push(id.to_string());
        for (j, d) in deliveries.iter().enumerate() {
            let at = T0 + 1_000 + i;
            match (i + j as i64) % 7 {
                0 => {
                    let retry = Delivery {
                        state: DeliveryState::Pending,
                        next_attempt_at: Some(at + 10),
                        queued: true,
                        attempt_count: 1,
                        ..d.clone()
                    };
                    store
                        .update_delivery(d, &retry, Some(&attempt(1, Status::HttpError, at)))
                        .unwrap();
                    let failed = Delivery {
                        state: DeliveryState::Failed,
                        next_attempt_at: None,
                        queued: false,
                        attempt_count: 2,
                        ..retry.clone()
                    };
                    store
                        .update_delivery(
                            &retry,
                            &failed,
                            Some(&attempt(2, Status::HttpError, at + 10)),
                        )
                        .unwrap();
                }
                3 => pending.push(d.clone()),
                _ => deliver(store, d, at),
            }
        }
    }
    (events, pending)
}

#[tokio::test]
async fn folded_history_reads_as_it_did_hot() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (events, pending) = history(&store).await;
    let before = everything(&store, &events);
    let counts = store.stats().snapshot();
    let hot_rows = rows_of(&store, key::EVENT) + rows_of(&store, key::ATTEMPT);

    // Folding stops at the idempotency keys' watermark: past every event once recorded.
    store.inner.keys.checkpoint().unwrap();
    let f = store.fold_history(T0 + 10_000, None, 10_000).unwrap();
    let with_pending: std::collections::HashSet<_> =
        pending.iter().map(|d| d.event_id.clone()).collect();
    // Every event without a pending delivery, but the one too large.
    assert_eq!(f.events, 240 - with_pending.len() - 1, "{f:?}");
    assert!(!f.more);
    assert!(f.folds >= 1 && f.folds * 20 < f.events, "{f:?}");
    assert_disjoint(&store);
    let left = rows_of(&store, key::EVENT) + rows_of(&store, key::ATTEMPT);
    assert!(left * 3 < hot_rows, "{left} of {hot_rows} rows left hot");
    assert_eq!(everything(&store, &events), before);
    assert_eq!(store.stats().snapshot(), counts);

    // A restart finds the pending ones and the counts as they were.
    close(store);
    let store = open(dir.path(), &clock);
    assert_eq!(everything(&store, &events), before);
    assert_eq!(store.due().len(), pending.len());
    assert_eq!(store.stats().snapshot(), counts);
    // An idempotency key of a folded event still claims it.
    let mut again = event("a", &[LANE], T0 + 5_000);
    again.idempotency_key = Some("idem-11".into());
    match &store.ingest(vec![again]).await.unwrap()[0] {
        IngestOutcome::Duplicate { event_id } => assert_eq!(event_id, &events[11]),
        other => panic!("{other:?}"),
    }

    // A late event (its delivery ends now) joins the fold that spans it.
    let late = &pending[0];
    deliver(&store, late, T0 + 6_000);
    let after_late = everything(&store, &events);
    assert_ne!(after_late, before);
    store.inner.keys.checkpoint().unwrap();
    store.fold_history(T0 + 10_000, None, 10_000).unwrap();
    assert_disjoint(&store);
    assert_eq!(everything(&store, &events), after_late);

    // A retry takes a folded delivery back to the hot rows; its neighbours stay folded.
    let failed = store
        .list_deliveries(
            &DeliveryFilter {
                state: Some(DeliveryState::Failed),
                ..Default::default()
            },
            1,
            None,
        )
        .unwrap()
        .0
        .remove(0);
    let others: Vec<_> = events
        .iter()
        .filter(|e| **e != failed.event_id)
        .cloned()
        .collect();
    let others_before = events_text(&store, &others);
    let event = ids::parse(ids::EVENT, &failed.event_id).unwrap();
    assert!(matches!(
        store.inner.locate(event).unwrap(),
        Some((_, Place::Folded(_)))
    ));
    let changed = store
        .change_delivery(&failed.id, |d| {
            let mut d = d.clone();
            d.state = DeliveryState::Pending;
            d.next_attempt_at = Some(T0 + 7_000);
            d.manual = true;
            d.queued = true;
            Some((d, ()))
        })
        .unwrap();
    assert_eq!(changed, Changed::Yes(()));
    assert!(matches!(
        store.inner.locate(event).unwrap(),
        Some((_, Place::Hot))
    ));
    let now = store.delivery(&failed.id).unwrap().unwrap();
    assert_eq!(now.state, DeliveryState::Pending);
    assert_eq!(store.attempts(&failed.id).unwrap().len(), 2);
    assert_disjoint(&store);
    let others: Vec<_> = events
        .iter()
        .filter(|e| **e != failed.event_id)
        .cloned()
        .collect();
    assert_eq!(events_text(&store, &others), others_before);
    close(store);
}

#[tokio::test]
async fn a_failed_fold_changes_nothing_and_retention_removes_folds_whole() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (events, pending) = history(&store).await;
    let before = everything(&store, &events);
    store.inner.keys.checkpoint().unwrap();
    store.inner.faults.fold_write.store(true, Ordering::SeqCst);
    assert!(store.fold_history(T0 + 10_000, None, 10_000).is_err());
    assert_eq!(rows_of(&store, key::FOLD), 0);
    assert_eq!(everything(&store, &events), before);
    // The claims went with the failed slice: it folds the next time.
    let f = store.fold_history(T0 + 10_000, None, 10_000).unwrap();
    assert!(f.events > 150, "{f:?}");
    assert_eq!(everything(&store, &events), before);

    let keys_before = store.inner.keys.len();
    let (p, more) = store.prune_folds(T0 + 1_000_000, 10_000).unwrap();
    assert!(!more);
    assert_eq!(p.events, f.events);
    assert_eq!(rows_of(&store, key::FOLD), 0);
    assert!(
        store.inner.keys.len() < keys_before,
        "the folded events' keys went with them"
    );
    for (i, id) in events.iter().enumerate() {
        let kept = store.event_with_deliveries(id).unwrap().is_some();
        let waiting = pending.iter().any(|d| &d.event_id == id);
        assert_eq!(kept, waiting || i == 18, "event {i}");
    }
    // Only pending deliveries (and the unfoldable event's) are counted now.
    let counts = store.stats().snapshot();
    assert_eq!(counts[0], pending.len() as i64);
    close(store);
}

/// The format-4 fixture (tests/fixtures/format4, see its README) opens in format 5, reads as
/// it did, and its history folds.
#[tokio::test]
async fn a_format_4_store_opens_and_folds() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("format4", dir.path());
    // A minute after the fixture was written.
    let written = ids::ulid_ms(ids::parse(ids::EVENT, "evt_01M8Z6FDXR782QCATMV6BS7M00").unwrap());
    let clock = Arc::new(ManualClock::new(written + 60_000));
    let store = open(dir.path(), &clock);
    let format = store.inner.trees.meta.get(meta_keys::FORMAT).unwrap();
    assert_eq!(format.unwrap().as_ref(), [FORMAT]);
    let events = [
        "evt_01M8Z6FDWX24RQ0184K0X9X000",
        "evt_01M8Z6FDXD0CS4DKRD6RXK0C00",
        "evt_01M8Z6FDXR782QCATMV6BS7M00",
    ]
    .map(String::from);
    let before = everything(&store, &events);
    let states: Vec<_> = events
        .iter()
        .map(|e| store.event_with_deliveries(e).unwrap().unwrap().2[0].state)
        .collect();
    use DeliveryState::*;
    assert_eq!(states, [Delivered, Skipped, Delivered]);
    store.inner.keys.checkpoint().unwrap();
    let f = store.fold_history(clock.now_ms(), None, 100).unwrap();
    assert_eq!((f.events, f.folds), (3, 1), "{f:?}");
    assert_eq!(everything(&store, &events), before);
    let mut again = event("acct-1", &[NO_LANE], clock.now_ms());
    again.idempotency_key = Some("idem-1".into());
    assert!(matches!(
        store.ingest(vec![again]).await.unwrap()[0],
        IngestOutcome::Duplicate { .. }
    ));
    close(store);
}

/// Every delivery id of the log, newest first, through the list's pages.
fn listed(store: &SledStore) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = store
            .list_deliveries(&DeliveryFilter::default(), 100, cursor.as_deref())
            .unwrap();
        ids.extend(page.into_iter().map(|d| d.id));
        match next {
            Some(n) => cursor = Some(n),
            None => return ids,
        }
    }
}

/// Reads that overlap the folder moving events between hot rows and folds (folding, and
/// unfolding again) see every event once, with all its deliveries and attempts: a list page,
/// an event with its deliveries, a delivery's attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_see_every_event_while_it_folds_and_unfolds() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (events, _) = history(&store).await;
    store.inner.keys.checkpoint().unwrap();
    let all = listed(&store);
    let texts: Vec<String> = events
        .iter()
        .map(|e| events_text(&store, std::slice::from_ref(e)))
        .collect();
    // The backup's pages (a few events each), every event once, newest first.
    let exported = |store: &SledStore| {
        let mut out = Vec::new();
        let mut before = None;
        loop {
            let (page, next) = store.export_events(before.as_deref(), 7).unwrap();
            out.extend(page.into_iter().map(|h| h.meta.id));
            match next {
                Some(n) => before = Some(n),
                None => return out,
            }
        }
    };
    let all_exported = exported(&store);
    assert_eq!(all_exported.len(), events.len());
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reader = {
        let (store, done, reads) = (store.clone(), done.clone(), reads.clone());
        let events = events.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let got = listed(&store);
                assert!(
                    got == all,
                    "a list read overlapping a fold: {} deliveries of {}",
                    got.len(),
                    all.len()
                );
                let got = exported(&store);
                assert!(
                    got == all_exported,
                    "a backup's pages overlapping a fold: {} events of {}",
                    got.len(),
                    all_exported.len()
                );
                let i = reads.load(Ordering::SeqCst) % events.len();
                let text = events_text(&store, &[events[i].clone()]);
                assert_eq!(text, texts[i], "event {i} read overlapping a fold");
                reads.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let ulids: Vec<u128> = events
        .iter()
        .map(|e| ids::parse(ids::EVENT, e).unwrap())
        .collect();
    // At least ten rounds, and on until the reader has read ten times (a slow machine may give
    // it little time): every read overlaps a fold or an unfold.
    let mut rounds = 0;
    while rounds < 10 || reads.load(Ordering::SeqCst) < 10 {
        let f = store.fold_history(T0 + 10_000, None, 10_000).unwrap();
        assert!(f.events > 100, "{f:?}");
        for e in &ulids {
            store.inner.unfold(*e).unwrap();
        }
        rounds += 1;
        assert!(!reader.is_finished(), "the reader failed");
    }
    done.store(true, Ordering::SeqCst);
    reader.join().unwrap();
    close(store);
}

/// Set in the child process of [`a_kill_9_inside_a_fold_batch_loses_nothing`]: the data
/// directory to fold, and how many hot events the fold looks at.
const KILL_DIR: &str = "HERALD_TEST_FOLD_KILL_DIR";
const KILL_MAX: &str = "HERALD_TEST_FOLD_KILL_MAX";
/// Set (to anything) when the child flushes the batch to the file before it is killed.
const KILL_FLUSHED: &str = "HERALD_TEST_FOLD_KILL_FLUSHED";
/// Events besides [`history`]'s: delivered, each with 1,000 bytes no compressor shrinks, so
/// that one fold batch is larger than sled's write buffer.
const BULK: usize = 2_000;

/// A digest of a file's bytes.
fn file_digest(path: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(path).unwrap().hash(&mut h);
    h.finish()
}

/// The child: opens the store, arms the kill and folds; the kill lands right after the first
/// batch is applied (in sled's memory, part of it in the file). Prints a digest of the data
/// file, flushed, before the fold, for the parent.
fn fold_and_die(dir: &Path, max: usize, flushed: bool) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir, &clock);
    store.inner.keys.checkpoint().unwrap();
    store.inner.db.flush().unwrap();
    println!("db before the fold: {:x}", file_digest(&dir.join("db")));
    let faults = &store.inner.faults;
    faults.flush_before_kill.store(flushed, Ordering::SeqCst);
    faults.kill_after_fold.store(true, Ordering::SeqCst);
    let f = store.fold_history(T0 + 10_000_000, None, max).unwrap();
    panic!("the fold ended without the kill: {f:?}");
}

/// kill -9 inside a fold batch loses nothing. A child process (this test binary, run on this
/// test alone) folds a store of 2,240 events, 2,000 of them delivered with incompressible
/// payloads, and is killed right after the fold's first batch is applied. Unflushed rounds:
/// that batch (the events' hot rows removed, fold rows written, 1-2 MB) is larger than sled's
/// in-memory write buffer (a 512 KiB segment), so some of it is in the file (the test checks
/// that the file changed) and the rest, in the buffer not yet written, dies with the process;
/// sled must drop the torn batch. Flushed rounds: the batch is whole in the file and the process
/// dies before anything after it, so the fold must be complete in that one batch (a fold
/// written in two steps fails here with events both folded and hot). Each time,
/// the store reads exactly as it did, every event hot or folded and never both, with the same
/// counts; four rounds with slices of different sizes, then a fold that finishes the job and
/// a restart.
#[tokio::test]
async fn a_kill_9_inside_a_fold_batch_loses_nothing() {
    if let Some(dir) = std::env::var_os(KILL_DIR) {
        let max = std::env::var(KILL_MAX).unwrap().parse().unwrap();
        let flushed = std::env::var_os(KILL_FLUSHED).is_some();
        return fold_and_die(Path::new(&dir), max, flushed);
    }
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (mut events, pending) = history(&store).await;
    for batch in 0..BULK / 100 {
        let news = (0..100)
            .map(|j| {
                let i = batch * 100 + j;
                let mut ev = event("c", &[LANE], T0 + 500 + i as Millis);
                ev.payload = Bytes::from(noise_from(i as u64 + 1, 1_000));
                ev
            })
            .collect();
        for out in store.ingest(news).await.unwrap() {
            let (id, deliveries) = created(&out);
            events.push(id.to_string());
            deliver(&store, &deliveries[0], deliveries[0].created_at + 5);
        }
    }
    close(store);
    let store = open(dir.path(), &clock);
    let before = everything(&store, &events);
    let counts = store.stats().snapshot();
    close(store);

    let name = format!(
        "{}::a_kill_9_inside_a_fold_batch_loses_nothing",
        module_path!().split_once("::").unwrap().1
    );
    // Each round starts from this copy: a round whose kill left its fold whole (sled's own
    // threads may write the batch out before the kill lands) leaves the next nothing to fold.
    let pristine = tempfile::tempdir().unwrap();
    super::copy_dir(dir.path(), pristine.path());
    for (max, flushed) in [(3_000, false), (1_200, true), (2_500, false), (2_500, true)] {
        std::fs::remove_dir_all(dir.path()).unwrap();
        super::copy_dir(pristine.path(), dir.path());
        let db = dir.path().join("db");
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(KILL_DIR, dir.path())
            .env(KILL_MAX, max.to_string());
        if flushed {
            child.env(KILL_FLUSHED, "1");
        }
        let out = child.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(9),
            "the child was to be killed inside its fold: {:?}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let before_fold = stdout
            .lines()
            .find_map(|l| l.split_once("db before the fold: ").map(|(_, n)| n))
            .unwrap_or_else(|| panic!("the child's report: {stdout}"));
        assert_ne!(
            format!("{:x}", file_digest(&db)),
            before_fold,
            "some of the batch reached the file before the kill (max {max})"
        );

        let store = open(dir.path(), &clock);
        assert_disjoint(&store);
        assert_hot_or_folded(&store);
        if flushed {
            assert!(rows_of(&store, key::FOLD) > 0, "the flushed batch is kept");
        }
        assert_eq!(
            everything(&store, &events),
            before,
            "after the kill (max {max})"
        );
        assert_eq!(store.stats().snapshot(), counts);
        assert_eq!(store.due().len(), pending.len());
        close(store);
    }

    // Folding again finishes the job, and a restart reads the same.
    let store = open(dir.path(), &clock);
    store.inner.keys.checkpoint().unwrap();
    let f = store.fold_history(T0 + 10_000_000, None, 10_000).unwrap();
    assert!(!f.more, "{f:?}");
    assert_disjoint(&store);
    assert_hot_or_folded(&store);
    assert!(
        rows_of(&store, key::EVENT) < pending.len() + 5,
        "{} events left hot",
        rows_of(&store, key::EVENT)
    );
    assert_eq!(everything(&store, &events), before);
    close(store);
    let store = open(dir.path(), &clock);
    assert_eq!(everything(&store, &events), before);
    assert_eq!(store.stats().snapshot(), counts);
    assert_eq!(store.due().len(), pending.len());
    close(store);
}

/// Account index rows per account, by account digest.
fn index_rows(store: &SledStore) -> std::collections::BTreeMap<Vec<u8>, usize> {
    let mut out = std::collections::BTreeMap::new();
    for k in store
        .inner
        .trees
        .log
        .range(key::of(key::ACCOUNT_EVENT, 0)..key::end(key::ACCOUNT_EVENT))
        .keys()
    {
        *out.entry(k.unwrap()[..17].to_vec()).or_insert(0) += 1;
    }
    out
}

/// The account index gets a row per account and commit cycle, so under light traffic a row per
/// event; packing merges the settled ones into full rows (256 events), a slice at a time, and
/// the log reads the same by account before and after, after more traffic and a restart.
#[tokio::test]
async fn the_account_index_packs_into_full_rows() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let mut events = Vec::new();
    let accounts = ["a", "b", "c"];
    for i in 0..551i64 {
        let account = match i {
            0 => "c",
            i if i % 11 < 3 && i < 450 => "b",
            _ => "a",
        };
        let out = store
            .ingest(vec![event(account, &[LANE], T0 + i)])
            .await
            .unwrap();
        events.push(created(&out[0]).0.to_string());
    }
    let by_account = |a: &str| {
        store
            .list_deliveries(
                &DeliveryFilter {
                    account_id: Some(a.into()),
                    ..Default::default()
                },
                1_000,
                None,
            )
            .unwrap()
            .0
            .len()
    };
    let counts: Vec<usize> = accounts.iter().map(|a| by_account(a)).collect();
    assert_eq!(counts.iter().sum::<usize>(), 551);
    assert_eq!(
        index_rows(&store).values().sum::<usize>(),
        551,
        "a row per cycle"
    );
    let before = everything(&store, &events);

    // Slices of 100 rows: account "a" (400 rows) is packed over several of them.
    let mut slices = 0;
    while store.pack_account_index(T0 + 1_000_000, 100).unwrap() {
        slices += 1;
    }
    assert!(slices >= 5, "{slices} slices");
    let rows: Vec<usize> = index_rows(&store).into_values().collect();
    let mut want: Vec<usize> = counts.iter().map(|n| n.div_ceil(256)).collect();
    let mut got = rows.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "full rows: {counts:?}");
    assert_eq!(store.index_rows_packed(), 551 - rows.iter().sum::<usize>());
    assert_eq!(everything(&store, &events), before);

    // More traffic: its rows join the last row with room once they are settled too.
    for i in 0..40i64 {
        let out = store
            .ingest(vec![event("b", &[LANE], T0 + 1_000 + i)])
            .await
            .unwrap();
        events.push(created(&out[0]).0.to_string());
    }
    let after = everything(&store, &events);
    // Not settled yet: the pass stops at the horizon.
    while store.pack_account_index(T0 + 1_000, 100).unwrap() {}
    let packed_rows = rows.iter().sum::<usize>();
    assert_eq!(index_rows(&store).values().sum::<usize>(), packed_rows + 40);
    while store.pack_account_index(T0 + 1_000_000, 100).unwrap() {}
    let b_rows = (counts[1] + 40).div_ceil(256);
    assert_eq!(
        index_rows(&store).values().sum::<usize>(),
        want.iter().sum::<usize>() - counts[1].div_ceil(256) + b_rows
    );
    assert_eq!(everything(&store, &events), after);

    // After a restart the pass goes on from where the last one ended, and finds nothing to
    // pack; so does one that reads every row (a store older than packing has no watermark).
    let packed_to = store.inner.trees.meta.get(meta_keys::INDEX_PACKED).unwrap();
    assert!(packed_to.is_some(), "the pass's end is kept");
    close(store);
    let store = open(dir.path(), &clock);
    assert!(
        !store.pack_account_index(T0 + 1_000_000, 5).unwrap(),
        "one slice of 5"
    );
    store
        .inner
        .trees
        .meta
        .remove(meta_keys::INDEX_PACKED)
        .unwrap();
    close(store);
    let store = open(dir.path(), &clock);
    while store.pack_account_index(T0 + 1_000_000, 100).unwrap() {}
    assert_eq!(store.index_rows_packed(), 0);
    assert_eq!(everything(&store, &events), after);
    close(store);
}

#[tokio::test]
async fn a_purged_accounts_events_leave_their_folds_and_the_other_account_reads_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(dir.path(), &clock);
    let (events, _) = history(&store).await;
    store.inner.keys.checkpoint().unwrap();
    store.fold_history(T0 + 10_000, None, 10_000).unwrap();
    // Account "b" has every third event.
    let (b, a): (Vec<_>, Vec<_>) = events
        .iter()
        .cloned()
        .enumerate()
        .partition(|(i, _)| i % 3 == 0);
    let a: Vec<String> = a.into_iter().map(|(_, e)| e).collect();
    let b: Vec<String> = b.into_iter().map(|(_, e)| e).collect();
    let a_before = events_text(&store, &a);
    let mut counts = store.stats().snapshot();
    let mut b_deliveries = 0;
    for id in &b {
        for d in store.event_with_deliveries(id).unwrap().unwrap().2 {
            counts[d.state as usize] -= 1;
            b_deliveries += 1;
        }
    }

    let purged = store.purge_account("b").await.unwrap();
    assert_eq!((purged.events, purged.deliveries), (80, b_deliveries));
    for id in &b {
        assert!(store.event(id).unwrap().is_none(), "{id} is gone");
    }
    assert_eq!(events_text(&store, &a), a_before);
    assert_eq!(store.stats().snapshot(), counts);
    assert_hot_or_folded(&store);
    // Its idempotency keys claim nothing any more.
    let mut again = event("b", &[LANE], T0 + 5_000);
    again.idempotency_key = Some("idem-33".into());
    assert!(matches!(
        store.ingest(vec![again]).await.unwrap()[0],
        IngestOutcome::Created { .. }
    ));
    // A restart counts the same and reads the other account as before.
    counts[DeliveryState::Pending as usize] += 1;
    close(store);
    let store = open(dir.path(), &clock);
    assert_eq!(events_text(&store, &a), a_before);
    assert_eq!(store.stats().snapshot(), counts);
}
