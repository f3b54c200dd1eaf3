//! Idempotency keys packed into chunks ([`crate::store::keys`]): every key answers while its
//! chunk splits, claims anew, releases and expiry change only what they name, and a format-5
//! store's keys (a row per key) are packed at open and keep answering with their first events.

use std::sync::atomic::AtomicUsize;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::store::keys::{self, KeyRow, Keys};

const DAY: u32 = 20_000;

fn row(day: u32, n: u64) -> KeyRow {
    key::idempotency(day, "acct", &format!("k-{n}"))
}

/// The chunks' sizes: each holds 1 to 64 keys.
fn chunk_sizes(keys: &Keys) -> Vec<usize> {
    let sizes: Vec<usize> = keys.chunks().map(|(_, n)| n).collect();
    assert!(sizes.iter().all(|n| (1..=64).contains(n)), "{sizes:?}");
    sizes
}

#[test]
fn keys_pack_into_chunks_that_split_and_answer_every_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Keys::open(dir.path(), 1 << 20).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    // 10,000 keys today and 3,000 yesterday, in commit-like batches of 1 to 300.
    let mut all: Vec<(KeyRow, u128)> = (0..10_000u64)
        .map(|n| (row(DAY, n), n as u128 + 1))
        .chain((0..3_000u64).map(|n| (row(DAY - 1, n), 1_000_000 + n as u128)))
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
    for n in 10_000..11_000 {
        assert_eq!(keys.get(&row(DAY, n)).unwrap(), None, "never added");
        assert_eq!(
            keys.get(&row(DAY + 1, n - 10_000)).unwrap(),
            None,
            "another day"
        );
    }
    assert_eq!(keys.len(), 13_000);
    let chunks = chunk_sizes(&keys).len();
    // Halves of 64 and fuller: ~45 keys a chunk, not a row per key.
    assert!(
        (13_000 / 64..=13_000 / 32 + 2).contains(&chunks),
        "{chunks}"
    );

    // A key claimed anew names its new event.
    keys.add(&[(row(DAY, 5), 77)], 0).unwrap();
    assert_eq!(keys.get(&row(DAY, 5)).unwrap(), Some(77));
    all[5].1 = 77;
    assert_eq!(keys.len(), 13_000);

    // Release: only keys that still name the event go (key 6 is released with another event).
    let mut released: Vec<_> = all.iter().step_by(2).copied().collect();
    released.push((row(DAY, 7), 12345));
    keys.release(&released).unwrap();
    for (i, (k, event)) in all.iter().enumerate() {
        let want = (i % 2 == 1).then_some(*event);
        assert_eq!(keys.get(k).unwrap(), want, "key {i}");
    }
    assert_eq!(keys.len(), 6_500);
    chunk_sizes(&keys);

    // Keys come back after a sync and a reopen.
    keys.sync().unwrap();
    drop(keys);
    let keys = Keys::open(dir.path(), 1 << 20).unwrap();
    assert_eq!(keys.len(), 6_500);
    assert_eq!(keys.get(&all[1].0).unwrap(), Some(all[1].1));

    // Expiry removes yesterday's chunks whole, and nothing of today's.
    let yesterday = keys
        .chunks()
        .filter(|(k, _)| k[..4] == (DAY - 1).to_be_bytes())
        .count();
    assert_eq!(keys.expire_before(DAY, 1_000).unwrap(), yesterday);
    assert_eq!(keys.len(), 5_000);
    assert_eq!(keys.get(&all[10_001].0).unwrap(), None);
    assert_eq!(keys.get(&all[9_999].0).unwrap(), Some(all[9_999].1));

    // Releasing every key of a day leaves no chunk of it.
    let today: Vec<_> = all[..10_000].to_vec();
    keys.release(&today).unwrap();
    assert_eq!(keys.len(), 0);
    assert_eq!(keys.chunks().count(), 0);
    keys.add(&[(row(DAY, 3), 3)], 0).unwrap();
    assert_eq!(keys.get(&row(DAY, 3)).unwrap(), Some(3));
}

/// Readers take no lock: a key added earlier is found by every lookup while the writer adds
/// more and its chunk splits.
#[test]
fn a_lookup_never_misses_while_chunks_split() {
    let dir = tempfile::tempdir().unwrap();
    let keys = Arc::new(Keys::open(dir.path(), 1 << 20).unwrap());
    let added = Arc::new(AtomicUsize::new(0));
    let total = 20_000u64;
    let writer = {
        let (keys, added) = (keys.clone(), added.clone());
        std::thread::spawn(move || {
            for from in (0..total).step_by(50) {
                let batch: Vec<_> = (from..from + 50)
                    .map(|n| (row(DAY, n), n as u128))
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
            assert_eq!(keys.get(&row(DAY, n)).unwrap(), Some(n as u128), "key {n}");
            looked += 1;
        }
        if done == total {
            break;
        }
    }
    writer.join().unwrap();
    assert!(looked > 1_000, "{looked}");
    assert_eq!(keys.len(), total as usize);
}

/// The format-5 fixture (tests/fixtures/format5, see its README): its 210 keys, a row each, are
/// packed into chunks at open; every one answers `duplicate` with its first event, folded or
/// hot; a format-5 row written after a packing (a migration cut short by a crash) is packed by
/// the next one and found meanwhile by no lookup.
#[tokio::test]
async fn a_format_5_store_packs_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    copy_fixture("format5", dir.path());
    let late = "evt_01M8ZD1MKSDS4MPJVNQATSX400";
    let written = ids::ulid_ms(ids::parse(ids::EVENT, late).unwrap());
    let clock = Arc::new(ManualClock::new(written + 60_000));
    let store = open(dir.path(), &clock);
    let format = store.inner.trees.meta.get(meta_keys::FORMAT).unwrap();
    assert_eq!(format.unwrap().as_ref(), [FORMAT]);
    assert_eq!(store.inner.keys.len(), 210);
    assert_eq!(
        store.inner.keys.pack_format_5(100).unwrap(),
        0,
        "all packed"
    );
    assert!(store.inner.keys.chunks().count() <= 7);

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
            IngestOutcome::Created { .. } => panic!("{k} was not found"),
        }
    }

    // A format-5 row among chunks is no claim until it is packed.
    let mut old = [0u8; 20];
    old[..4].copy_from_slice(&key::idempotency_day(clock.now_ms()).to_be_bytes());
    old[4..].copy_from_slice(&key::digest(&[b"acct-9", b"late"]));
    let first = ids::parse(ids::EVENT, late).unwrap();
    store.inner.keys.put_format_5_row(&old, first).unwrap();
    let packed = keys::packed_row(&old).unwrap();
    assert_eq!(store.inner.keys.get(&packed).unwrap(), None);
    assert_eq!(store.inner.keys.pack_format_5(100).unwrap(), 1);
    assert_eq!(store.inner.keys.get(&packed).unwrap(), Some(first));
    assert_eq!(store.inner.keys.len(), 211);
    close(store);

    // Opened again: format 6, nothing to pack.
    let store = open(dir.path(), &clock);
    assert_eq!(store.inner.keys.len(), 211);
    assert_eq!(store.inner.keys.pack_format_5(100).unwrap(), 0);
    close(store);
}
