//! Idempotency keys, in a sled database of their own (`keys/` in the data directory), packed
//! many to a row.
//!
//! # Layout
//!
//! A key is (claim day, the first [`DIGEST`] bytes of a digest of account and key) — a
//! [`KeyRow`] — and what it names is the first event's ULID. A day's keys are split by digest
//! into *chunks*: rows keyed by the day and the chunk's upper bound (its greatest digest, the
//! day's last chunk `FF…`), each holding its keys sorted by digest, [`ENTRY`] bytes apiece, at
//! most [`MAX_ENTRIES`] of them (a chunk that outgrows it splits in two in the same batch, the
//! lower half under the key of its own last digest). A lookup is one range read (the first row
//! at or after the key, within the day) and a binary search. Days sort in time order, so a
//! day's keys expire whole, a key range, with no decoding.
//!
//! Why packed: sled's costs are per row (a leaf splits at 16 rows, every write is a delta until
//! its leaf is rewritten, and it keeps bookkeeping in memory for every page), so a row per key
//! cost 161–180 bytes of disk for a 36-byte row. Packed ~45 to a row, 1,200,000 keys take
//! 27,000 rows and 97–113 bytes a key on disk (measured the same way, issue 11): what remains is
//! sled's, which writes every change of a chunk as a new version and reuses a segment of its
//! file only once half of it is dead (a chunk written once and never changed still costs
//! 2.6 times its bytes).
//!
//! They live apart from the log because their lifetime is not the log's: sled reuses a segment
//! of its file only once at most half of it is live, and key rows that stay for their day among
//! event rows that retention frees (or event rows kept for 30 days among key rows that expire in
//! two) keep whole segments from being reused. On their own, a day's keys go together and free
//! their segments together.
//!
//! One writer at a time changes chunks (`writes`): the committer adding keys, retention
//! releasing them, expiry. Readers need no lock: a chunk, and a split's two chunks, change in one
//! sled batch, which readers see whole or not at all.
//!
//! # Durability without a second fsync per commit
//!
//! The event row holds its idempotency key, so the log is the record and this database an
//! index of it. The committer adds a cycle's keys here after the cycle's fsync (before it
//! answers, so the next cycle sees them) without syncing; once a second the checkpoint syncs
//! this database and then records the *watermark*: the last event whose key is here durably.
//! At open, the keys of the events after the watermark are read from their event rows and
//! written again, so keys that a crash took from here come back before the first ingest. An
//! insert that fails stops the watermark where it was (the next open rebuilds from there).
//!
//! # A digest of 12 bytes
//!
//! Two different keys of a day with the same 96-bit digest would answer one as the other's
//! duplicate. Among a hundred million keys a day (over 1,000 keyed events a second) the chance
//! that any two share a digest is about 10⁻¹³ a day.

use std::fs::File;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use super::codec;
use super::key;
use super::StoreError;
use crate::clock::Millis;
use crate::ids;

/// Bytes of a key's digest kept (see the module's doc).
pub const DIGEST: usize = 12;
/// A key: the day it was claimed ([`key::idempotency_day`], big-endian), then its digest. A
/// chunk's row key has the same shape: the day, then the chunk's upper bound.
pub type KeyRow = [u8; 4 + DIGEST];
/// A key in a chunk: its digest, then the event's ULID (big-endian).
const ENTRY: usize = DIGEST + 16;
/// Keys in a chunk at most (1.8 KB): a new key rewrites its chunk, so this bounds what a key
/// costs to write, while the row's own cost is shared by the ~45 keys a chunk holds on average
/// (chunks split in halves, so they are half to wholly full).
const MAX_ENTRIES: usize = 64;
/// Keys released per sled batch (see [`Keys::release`]).
const RELEASE_GROUP: usize = 256;
/// A chunk's first byte: the layout's version.
const CHUNK_V1: u8 = 1;
/// Storage format 5's rows: a row per key, the day and a 16-byte digest → the ULID (read only
/// by the migration, [`Keys::pack_format_5`]).
const FORMAT_5_ROW: usize = 4 + 16;

const WATERMARK: &[u8] = b"watermark";

pub(super) struct Keys {
    db: sled::Db,
    /// The watermark (and nothing else).
    meta: sled::Tree,
    data_file: File,
    marks: Mutex<Marks>,
    /// Held by whoever changes chunks (a read, change and write of a chunk must not interleave
    /// with another's).
    writes: Mutex<()>,
}

struct Marks {
    /// The last event whose key (if it has one) is in `db`; `None` once an insert failed.
    through: Option<u128>,
    /// The watermark last recorded.
    recorded: u128,
}

/// A change to a key.
#[derive(Clone, Copy)]
enum Change {
    /// The key names this event (a key claimed anew replaces the old claim).
    Claim(u128),
    /// The key goes if it still names this event.
    Release(u128),
}

impl Keys {
    pub fn open(path: &Path, cache_capacity: u64) -> Result<Keys, StoreError> {
        super::files::create_private_dir(path)?;
        super::remove_partial_snapshots(path)?;
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_capacity)
            .flush_every_ms(Some(1000))
            .open()?;
        let meta = db.open_tree("meta")?;
        let data_file = File::open(path.join("db"))?;
        let recorded = match meta.get(WATERMARK)? {
            Some(v) => u128::from_be_bytes(
                v.as_ref()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("idempotency keys' watermark".into()))?,
            ),
            None => 0,
        };
        Ok(Keys {
            db,
            meta,
            data_file,
            marks: Mutex::new(Marks {
                through: Some(recorded),
                recorded,
            }),
            writes: Mutex::new(()),
        })
    }

    fn lock_marks(&self) -> MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_writes(&self) -> MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The event that claimed the key on the key's day, if any.
    pub fn get(&self, row: &KeyRow) -> Result<Option<u128>, StoreError> {
        let Some((_, chunk)) = self.chunk_of(row)? else {
            return Ok(None);
        };
        let entries = entries(&chunk)?;
        Ok(search(entries, &row[4..])
            .ok()
            .map(|i| event_at(entries, i)))
    }

    /// The chunk whose range holds `row`: the first chunk row at or after it within its day.
    fn chunk_of(&self, row: &KeyRow) -> Result<Option<(KeyRow, sled::IVec)>, StoreError> {
        let last = day_end(row);
        for item in self.db.range(&row[..]..=&last[..]) {
            let (k, v) = item?;
            // A format-5 row the migration has not packed yet is no chunk.
            if let Ok(upper) = KeyRow::try_from(k.as_ref()) {
                return Ok(Some((upper, v)));
            }
        }
        Ok(None)
    }

    /// Adds durable events' keys; `through` is the last of those events. Not synced (see the
    /// module's doc). If it fails, the watermark stays where it is from then on.
    pub fn add(&self, rows: &[(KeyRow, u128)], through: u128) -> Result<(), StoreError> {
        let mut marks = self.lock_marks();
        let mut changes: Vec<_> = rows.iter().map(|(k, e)| (*k, Change::Claim(*e))).collect();
        match self.change(&mut changes, None) {
            Ok(()) => {
                if let Some(w) = marks.through.as_mut() {
                    *w = (*w).max(through);
                }
                Ok(())
            }
            Err(e) => {
                marks.through = None;
                Err(e)
            }
        }
    }

    /// Removes the keys that still name their events (a later event may have claimed a key
    /// anew): retention's, for the events it pruned.
    pub fn release(&self, rows: &[(KeyRow, u128)]) -> Result<(), StoreError> {
        let mut changes: Vec<_> = rows
            .iter()
            .map(|(k, e)| (*k, Change::Release(*e)))
            .collect();
        changes.sort_by_key(|c| c.0);
        // A group at a time, so the committer adding keys never waits long for the lock.
        for group in changes.chunks_mut(RELEASE_GROUP) {
            self.change(group, None)?;
        }
        Ok(())
    }

    /// Applies `changes` to their chunks, in one sled batch with `also`'s own changes: each
    /// chunk touched is read once, changed, and written back (split if it outgrew
    /// [`MAX_ENTRIES`], removed if it emptied). Nothing is written when nothing changes (the
    /// committer calls this every cycle, most with no key).
    fn change(
        &self,
        changes: &mut [(KeyRow, Change)],
        also: Option<sled::Batch>,
    ) -> Result<(), StoreError> {
        // Stable: two changes to one key keep their order.
        changes.sort_by_key(|c| c.0);
        let _writes = self.lock_writes();
        let mut write = also.is_some();
        let mut batch = also.unwrap_or_default();
        let mut i = 0;
        while i < changes.len() {
            let (upper, mut entries) = match self.chunk_of(&changes[i].0)? {
                Some((upper, chunk)) => (upper, entries(&chunk)?.to_vec()),
                None => (day_end(&changes[i].0), Vec::new()),
            };
            let mut changed = false;
            // Sorted, so the keys up to the chunk's upper bound are all the chunk's.
            while let Some((row, change)) = changes.get(i).filter(|(row, _)| *row <= upper) {
                changed |= apply(&mut entries, &row[4..], *change);
                i += 1;
            }
            if changed {
                write_chunk(&mut batch, &upper, &entries);
                write = true;
            }
        }
        if write {
            self.db.apply_batch(batch)?;
        }
        Ok(())
    }

    /// Syncs the keys and then records the watermark they reached (it reaches disk with the
    /// next sync or sled's periodic flush; an older one only makes the next open read more).
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let w = match *self.lock_marks() {
            Marks {
                through: Some(w),
                recorded,
            } if w != recorded => w,
            _ => return Ok(()),
        };
        self.sync()?;
        self.meta.insert(WATERMARK, &w.to_be_bytes())?;
        self.lock_marks().recorded = w;
        Ok(())
    }

    pub fn sync(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        self.data_file.sync_data()?;
        Ok(())
    }

    /// Writes again the keys of the events after the watermark (see the module's doc), those
    /// still inside their window at `now`. Returns how many.
    pub fn rebuild(&self, log: &sled::Tree, now: Millis) -> Result<usize, StoreError> {
        let Some(from) = self.lock_marks().through else {
            return Ok(0);
        };
        let mut last = from;
        let mut rows = Vec::new();
        let oldest = key::idempotency_day(now).saturating_sub(1);
        for item in log.range(key::event(from.saturating_add(1))..key::end(key::EVENT)) {
            let (k, v) = item?;
            let event = key::ulid(&k).ok_or_else(|| StoreError::Corrupt("event key".into()))?;
            last = event;
            let meta = codec::decode_event(event, &v)?.0.meta;
            let Some(idem) = &meta.idempotency_key else {
                continue;
            };
            let day = key::idempotency_day(ids::ulid_ms(event));
            if day >= oldest {
                rows.push((key::idempotency(day, &meta.account_id, idem), event));
            }
        }
        let n = rows.len();
        self.add(&rows, last)?;
        self.checkpoint()?;
        Ok(n)
    }

    /// Removes up to `max` chunks of keys claimed before `day` (in time order). Returns how
    /// many.
    pub fn expire_before(&self, day: u32, max: usize) -> Result<usize, StoreError> {
        let _writes = self.lock_writes();
        let mut removed = 0;
        for k in self.db.range(day_start(0)..day_start(day)).keys().take(max) {
            self.db.remove(k?)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Packs storage format 5's rows (a row per key) into chunks, up to `max` keys a sled batch
    /// (their removal in the same batch, so a migration cut short goes on where it stopped).
    /// Returns how many keys.
    pub fn pack_format_5(&self, max: usize) -> Result<usize, StoreError> {
        let mut packed = 0;
        let mut after: Option<sled::IVec> = None;
        loop {
            let rows = match &after {
                Some(k) => self.db.range::<&[u8], _>((
                    std::ops::Bound::Excluded(k.as_ref()),
                    std::ops::Bound::Unbounded,
                )),
                None => self.db.iter(),
            };
            let mut changes = Vec::new();
            let mut gone = sled::Batch::default();
            for item in rows {
                let (k, v) = item?;
                // Chunks (today's rows) are passed over.
                let Some(row) = packed_row(&k) else {
                    continue;
                };
                let event = u128::from_be_bytes(
                    v.as_ref()
                        .try_into()
                        .map_err(|_| StoreError::Corrupt("format 5 idempotency record".into()))?,
                );
                changes.push((row, Change::Claim(event)));
                gone.remove(k.clone());
                after = Some(k);
                if changes.len() == max {
                    break;
                }
            }
            if changes.is_empty() {
                return Ok(packed);
            }
            packed += changes.len();
            self.change(&mut changes, Some(gone))?;
        }
    }

    /// The watermark last recorded: every key of the events up to it is synced, so the
    /// rebuild at open never needs their rows (folding leaves the events after it alone).
    pub fn recorded(&self) -> u128 {
        self.lock_marks().recorded
    }

    /// How many keys (tests and the migration's count).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.chunks().map(|(_, n)| n).sum()
    }

    /// Every chunk's row key and number of keys (tests).
    #[cfg(test)]
    pub fn chunks(&self) -> impl Iterator<Item = (KeyRow, usize)> + '_ {
        self.db.iter().filter_map(|item| {
            let (k, v) = item.ok()?;
            let upper = KeyRow::try_from(k.as_ref()).ok()?;
            Some((upper, entries(&v).ok()?.len() / ENTRY))
        })
    }

    /// Writes a row of storage format 5 (tests of the migration).
    #[cfg(test)]
    pub fn put_format_5_row(
        &self,
        row: &[u8; FORMAT_5_ROW],
        event: u128,
    ) -> Result<(), StoreError> {
        self.db.insert(&row[..], &event.to_be_bytes()[..])?;
        Ok(())
    }

    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

/// A format-5 row's key (the day, then a 16-byte digest) as a key of today's layout: the same
/// day and the digest's first [`DIGEST`] bytes, which sort as the whole digests did.
pub fn packed_row(format_5: &[u8]) -> Option<KeyRow> {
    if format_5.len() != FORMAT_5_ROW {
        return None;
    }
    format_5[..4 + DIGEST].try_into().ok()
}

/// A chunk's keys, [`ENTRY`] bytes each, sorted by digest.
fn entries(chunk: &[u8]) -> Result<&[u8], StoreError> {
    match chunk.split_first() {
        Some((&CHUNK_V1, e)) if e.len() % ENTRY == 0 => Ok(e),
        _ => Err(StoreError::Corrupt("idempotency keys' chunk".into())),
    }
}

/// Where `digest` is among `entries` (`Err`: where it would go).
fn search(entries: &[u8], digest: &[u8]) -> Result<usize, usize> {
    let (mut lo, mut hi) = (0, entries.len() / ENTRY);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match entries[mid * ENTRY..mid * ENTRY + DIGEST].cmp(digest) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

fn event_at(entries: &[u8], i: usize) -> u128 {
    let at = i * ENTRY + DIGEST;
    let mut b = [0u8; 16];
    b.copy_from_slice(&entries[at..at + 16]);
    u128::from_be_bytes(b)
}

/// Applies one change to a chunk's entries; whether it changed them.
fn apply(entries: &mut Vec<u8>, digest: &[u8], change: Change) -> bool {
    let found = search(entries, digest);
    match (found, change) {
        (Ok(i), Change::Claim(event)) => {
            let at = i * ENTRY + DIGEST;
            entries[at..at + 16].copy_from_slice(&event.to_be_bytes());
            true
        }
        (Err(i), Change::Claim(event)) => {
            let at = i * ENTRY;
            let mut entry = [0u8; ENTRY];
            entry[..DIGEST].copy_from_slice(digest);
            entry[DIGEST..].copy_from_slice(&event.to_be_bytes());
            entries.splice(at..at, entry);
            true
        }
        (Ok(i), Change::Release(event)) if event_at(entries, i) == event => {
            entries.drain(i * ENTRY..(i + 1) * ENTRY);
            true
        }
        _ => false,
    }
}

/// Writes a changed chunk into `batch`: removed if empty, in `ceil(n / MAX_ENTRIES)` equal
/// pieces if it outgrew [`MAX_ENTRIES`], each but the last keyed by its own last digest (the
/// last keeps the chunk's upper bound).
fn write_chunk(batch: &mut sled::Batch, upper: &KeyRow, entries: &[u8]) {
    let n = entries.len() / ENTRY;
    if n == 0 {
        batch.remove(&upper[..]);
        return;
    }
    let pieces = n.div_ceil(MAX_ENTRIES);
    for p in 0..pieces {
        let (from, to) = (p * n / pieces, (p + 1) * n / pieces);
        let mut key = *upper;
        if p + 1 < pieces {
            let last = (to - 1) * ENTRY;
            key[4..].copy_from_slice(&entries[last..last + DIGEST]);
        }
        let mut value = Vec::with_capacity(1 + (to - from) * ENTRY);
        value.push(CHUNK_V1);
        value.extend_from_slice(&entries[from * ENTRY..to * ENTRY]);
        batch.insert(&key[..], value);
    }
}

/// The day's last possible key: the upper bound of its last chunk.
fn day_end(row: &KeyRow) -> KeyRow {
    let mut k = [0xFF; 4 + DIGEST];
    k[..4].copy_from_slice(&row[..4]);
    k
}

/// The first row of `day` (days sort in time order).
fn day_start(day: u32) -> [u8; 4] {
    day.to_be_bytes()
}
