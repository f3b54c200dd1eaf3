//! Idempotency keys in tables of their own ([`herald_store::keys`]): every key answers while a
//! day's tables grow, claims anew, releases and expiry change only what they name, a table a
//! crash cut short is dropped (its keys come back from the log), and the keys of format-5 and
//! format-6 stores (sled rows, one per key or packed) move to tables at open and keep answering
//! with their first events, once each even when a migration cut short runs again.

use std::sync::atomic::{AtomicUsize, Ordering};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::keys::{KeyRow, Keys};

const DAY: u32 = 20_000;
/// A table's block and the slots it holds (see the module's doc).
const BLOCK: u64 = 512;
const PER_BLOCK: u64 = 18;

fn row(day: u32, n: u64) -> KeyRow {
    keys::key_row(day, "acct", &format!("k-{n}"))
}

/// The day's tables: (generation, slots, slots used).
fn tables_of(keys: &Keys, day: u32) -> Vec<(u32, u64, u64)> {
    keys.table_sizes()
        .into_iter()
        .filter(|t| t.0 == day)
        .map(|(_, g, s, u)| (g, s, u))
        .collect()
}

#[test]
fn a_day_s_tables_grow_by_half_and_answer_every_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::open(dir.path()).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    // 3,000 keys yesterday and 100,000 today, in commit-like batches of 1 to 300.
    let mut all: Vec<(KeyRow, u128)> = (0..3_000u64)
        .map(|n| (row(DAY - 1, n), 1_000_000 + n as u128))
        .chain((0..100_000u64).map(|n| (row(DAY, n), n as u128 + 1)))
        .collect();
    let mut i = 0;
    while i < all.len() {
        let n = rng.gen_range(1..=300).min(all.len() - i);
        keys.add(&all[i..i + n], 0).unwrap();
        i += n;
    }
    for (k, event) in &all {
        assert_eq!(keys.get(k).unwrap(), Some(*event));
    }
    for n in 100_000..101_000 {
        assert_eq!(keys.get(&row(DAY, n)).unwrap(), None, "never added");
        assert_eq!(
            keys.get(&row(DAY + 1, n - 100_000)).unwrap(),
            None,
            "another day"
        );
    }
    assert_eq!(keys.len(), 103_000);
    // Yesterday's 3,000 fit the smallest table (2,048 blocks); today's grew by half its slots
    // each time a table reached three quarters.
    assert_eq!(tables_of(&keys, DAY - 1), [(0, 36_864, 3_000)]);
    let today = tables_of(&keys, DAY);
    let slots: Vec<u64> = today.iter().map(|t| t.1).collect();
    assert_eq!(slots, [36_864, 36_864, 36_864, 55_296], "{today:?}");
    assert!(today.iter().all(|t| t.2 * 4 <= t.1 * 3), "{today:?}");
    assert_eq!(today.iter().map(|t| t.2).sum::<u64>(), 100_000);
    let per_key = slots.iter().sum::<u64>() / PER_BLOCK * BLOCK / 100_000;
    assert!((38..=57).contains(&per_key), "{per_key} bytes a key");

    // A key claimed anew names its new event, in its slot.
    keys.add(&[(row(DAY, 5), 77)], 0).unwrap();
    assert_eq!(keys.get(&row(DAY, 5)).unwrap(), Some(77));
    all[3_005].1 = 77;
    assert_eq!(keys.len(), 103_000);
    assert_eq!(
        tables_of(&keys, DAY).iter().map(|t| t.2).sum::<u64>(),
        100_000
    );

    // Release: only keys that still name the event go (key 7 is released with another event).
    let mut released: Vec<_> = all.iter().step_by(2).copied().collect();
    released.push((row(DAY, 7), 12345));
    keys.release(&released).unwrap();
    for (i, (k, event)) in all.iter().enumerate() {
        let want = (i % 2 == 1).then_some(*event);
        assert_eq!(keys.get(k).unwrap(), want, "key {i}");
    }
    assert_eq!(keys.len(), 51_500);
    // A released key claimed again takes its old slot.
    keys.add(&[all[0]], 0).unwrap();
    assert_eq!(keys.get(&all[0].0).unwrap(), Some(all[0].1));
    assert_eq!(tables_of(&keys, DAY - 1), [(0, 36_864, 3_000)]);

    // Keys and counts come back after a sync and a reopen.
    keys.sync().unwrap();
    drop(keys);
    let keys = Keys::open(dir.path()).unwrap();
    assert_eq!(keys.len(), 51_501);
    // Every lookup answers as before: the tags in memory are read again from the tables.
    for (i, (k, event)) in all.iter().enumerate() {
        let want = (i == 0 || i % 2 == 1).then_some(*event);
        assert_eq!(keys.get(k).unwrap(), want, "key {i} after a reopen");
    }
    assert_eq!(tables_of(&keys, DAY), today);

    // A new day's first table is sized for one and a half times the day before's keys.
    keys.add(&[(row(DAY + 1, 1), 1)], 0).unwrap();
    assert_eq!(tables_of(&keys, DAY + 1), [(0, 150_012, 1)]);

    // Expiry removes yesterday's tables whole, and nothing of today's.
    assert_eq!(keys.expire_before(DAY, 1_000).unwrap(), 1);
    assert_eq!(keys.get(&all[1].0).unwrap(), None);
    assert_eq!(keys.get(&all[3_001].0).unwrap(), Some(all[3_001].1));
    assert_eq!(keys.len(), 50_001);
    assert_eq!(keys.expire_before(DAY + 1, 2).unwrap(), 2, "at most max");
    assert_eq!(keys.expire_before(DAY + 1, 10).unwrap(), 2);
    assert_eq!(keys.len(), 1);
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(files, 1, "one table left");
}

/// Keys that retention releases early make room for the day's later keys: ten rounds of
/// 20,000 keys, each released before the next, fit in a few tables, where keeping every slot
/// for the day would take 200,000 keys' worth.
#[test]
fn released_keys_make_room_for_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::open(dir.path()).unwrap();
    for round in 0..10u64 {
        let batch: Vec<_> = (round * 20_000..(round + 1) * 20_000)
            .map(|n| (row(DAY, n), n as u128 + 1))
            .collect();
        keys.add(&batch, 0).unwrap();
        for (k, e) in batch.iter().step_by(97) {
            assert_eq!(keys.get(k).unwrap(), Some(*e));
        }
        keys.release(&batch).unwrap();
        assert_eq!(keys.get(&batch[5].0).unwrap(), None);
    }
    let today = tables_of(&keys, DAY);
    let slots: u64 = today.iter().map(|t| t.1).sum();
    eprintln!("{today:?}");
    assert!(slots <= 3 * 36_864, "{today:?}");
    assert_eq!(keys.len(), 0);
}

/// Readers take no lock: a key added earlier is found by every lookup while the writer adds
/// more and the day gets new tables.
#[test]
fn a_lookup_never_misses_while_tables_are_added() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(Keys::open(dir.path()).unwrap());
    let added = Arc::new(AtomicUsize::new(0));
    let total = 60_000u64;
    let writer = {
        let (keys, added) = (keys.clone(), added.clone());
        std::thread::spawn(move || {
            for from in (0..total).step_by(50) {
                let batch: Vec<_> = (from..from + 50)
                    .map(|n| (row(DAY, n), n as u128 + 1))
                    .collect();
                keys.add(&batch, 0).unwrap();
                added.store((from + 50) as usize, Ordering::SeqCst);
            }
        })
    };
    let mut rng = StdRng::seed_from_u64(9);
    let mut looked = 0;
    loop {
        let done = added.load(Ordering::SeqCst) as u64;
        if done > 0 {
            let n = rng.gen_range(0..done);
            assert_eq!(
                keys.get(&row(DAY, n)).unwrap(),
                Some(n as u128 + 1),
                "key {n}"
            );
            looked += 1;
        }
        if done == total {
            break;
        }
    }
    writer.join().unwrap();
    assert!(looked > 1_000, "{looked}");
    assert_eq!(keys.len(), total as usize);
    assert!(tables_of(&keys, DAY).len() >= 3);
}

/// The checkpoint records the watermark after the tables' sync; a table whose creation a crash
/// cut short (here: its length, then its header) is removed at open, and the watermark read
/// back is the last one recorded, so the rebuild writes those keys again from the log.
#[test]
fn a_table_a_crash_cut_short_is_dropped_and_the_watermark_holds() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::open(dir.path()).unwrap();
    let first: Vec<_> = (0..20_000u64)
        .map(|n| (row(DAY, n), n as u128 + 1))
        .collect();
    keys.add(&first, 20_000).unwrap();
    keys.checkpoint().unwrap();
    assert_eq!(keys.recorded(), 20_000);
    // Past the first table's three quarters: a second one, not synced.
    let more: Vec<_> = (20_000..30_000u64)
        .map(|n| (row(DAY, n), n as u128 + 1))
        .collect();
    keys.add(&more, 30_000).unwrap();
    assert_eq!(tables_of(&keys, DAY).len(), 2);
    drop(keys);
    let second = dir.path().join(format!("{DAY}-1"));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&second)
        .unwrap();
    f.set_len(1_000).unwrap();
    drop(f);

    let keys = Keys::open(dir.path()).unwrap();
    assert!(!second.exists());
    assert_eq!(keys.recorded(), 20_000);
    assert_eq!(tables_of(&keys, DAY).len(), 1);
    assert_eq!(keys.get(&first[7].0).unwrap(), Some(first[7].1));
    // The table comes again with the keys after the watermark.
    keys.add(&more, 30_000).unwrap();
    keys.checkpoint().unwrap();
    drop(keys);
    std::fs::write(&second, b"not a table").unwrap();
    let keys = Keys::open(dir.path()).unwrap();
    assert!(!second.exists());
    assert_eq!(keys.recorded(), 30_000);
    assert_eq!(keys.get(&first[7].0).unwrap(), Some(first[7].1));
}

/// After a table's sync failed, a later sync may "succeed" without the pages having reached the
/// disk (Linux): the watermark never moves again in this process, so the next open rebuilds
/// every key after the last one recorded.
#[test]
fn a_failed_table_sync_stops_the_watermark_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::open(dir.path()).unwrap();
    keys.add(&[(row(DAY, 1), 1)], 1).unwrap();
    keys.checkpoint().unwrap();
    assert_eq!(keys.recorded(), 1);
    keys.add(&[(row(DAY, 2), 2)], 2).unwrap();
    keys.faults.sync.store(true, Ordering::SeqCst);
    assert!(keys.checkpoint().is_err(), "the injected failure");
    assert_eq!(keys.recorded(), 1);
    // The retry's sync succeeds, and still records nothing; later keys neither.
    keys.add(&[(row(DAY, 3), 3)], 3).unwrap();
    keys.checkpoint().unwrap();
    assert_eq!(
        keys.recorded(),
        1,
        "a watermark was recorded after a failed sync"
    );
    drop(keys);
    let keys = Keys::open(dir.path()).unwrap();
    assert_eq!(keys.recorded(), 1, "the file holds the last good watermark");
}

/// The format-5 and format-6 fixtures (tests/fixtures/format5 and format6, see their READMEs):
/// their 210 keys, sled rows one per key or packed into chunks, move to tables at open and the
/// old database goes; every key answers `duplicate` with its first event, folded or hot.
#[tokio::test]
async fn format_5_and_6_stores_move_their_keys_to_tables() {
    for (fixture, late) in [
        ("format5", "evt_01M8ZD1MKSDS4MPJVNQATSX400"),
        ("format6", "evt_01M904W3ZR4RNQSQMJ8AH9HW00"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        copy_fixture(fixture, dir.path());
        assert!(dir.path().join("keys/db").is_file());
        let written = ids::ulid_ms(ids::parse(ids::EVENT, late).unwrap());
        let clock = Arc::new(ManualClock::new(written + 60_000));
        let store = open(dir.path(), &clock);
        let format = store.inner.trees.meta.get(meta_keys::FORMAT).unwrap();
        assert_eq!(format.unwrap().as_ref(), [FORMAT]);
        assert!(!dir.path().join("keys").exists(), "{fixture}");
        assert_eq!(store.inner.keys.len(), 210, "{fixture}");

        let (page, next) = store
            .list_deliveries(&DeliveryFilter::default(), 500, None)
            .unwrap();
        assert_eq!((page.len(), next), (211, None));
        let mut keyed = Vec::new();
        for d in &page {
            let (meta, _, _) = store.event_with_deliveries(&d.event_id).unwrap().unwrap();
            if let Some(k) = meta.idempotency_key {
                keyed.push((meta.account_id, k, meta.id));
            }
        }
        assert_eq!(keyed.len(), 210);
        let again: Vec<_> = keyed
            .iter()
            .map(|(account, k, _)| {
                let mut e = event(account, &[NO_LANE], clock.now_ms());
                e.idempotency_key = Some(k.clone());
                e
            })
            .collect();
        let outcomes = store.ingest(again).await.unwrap();
        for ((_, k, first), outcome) in keyed.iter().zip(&outcomes) {
            match outcome {
                IngestOutcome::Duplicate { event_id } => assert_eq!(event_id, first, "{k}"),
                other => panic!("{fixture}: {k} was not found: {other:?}"),
            }
        }
        close(store);

        // Opened again: nothing to move, every key still there.
        let store = open(dir.path(), &clock);
        assert_eq!(store.inner.keys.len(), 210);
        close(store);
    }
}

/// A migration from format 6 cut short after the keys reached their tables (the format not yet
/// recorded) runs again whole at the next open: every key once, none twice.
#[tokio::test]
async fn a_format_6_migration_cut_short_runs_again_and_adds_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("format6", dir.path());
    {
        let keys = Keys::open(&dir.path().join("idempotency")).unwrap();
        crate::migrate::from_format_6(&dir.path().join("keys"), &keys).unwrap();
        assert_eq!(keys.len(), 210);
    }
    let late = "evt_01M904W3ZR4RNQSQMJ8AH9HW00";
    let written = ids::ulid_ms(ids::parse(ids::EVENT, late).unwrap());
    let clock = Arc::new(ManualClock::new(written + 60_000));
    let store = open(dir.path(), &clock);
    assert!(!dir.path().join("keys").exists());
    assert_eq!(store.inner.keys.len(), 210);
    let used: u64 = store.inner.keys.table_sizes().iter().map(|t| t.3).sum();
    assert_eq!(used, 210);
    let mut again = event("acct-2", &[NO_LANE], clock.now_ms());
    again.idempotency_key = Some("idem-2-late-9".into());
    match &store.ingest(vec![again]).await.unwrap()[0] {
        IngestOutcome::Duplicate { event_id } => assert_eq!(event_id, late),
        other => panic!("idem-2-late-9 was not found: {other:?}"),
    }
    close(store);
}
