//! Folded history: ended events packed many to a row.
//!
//! sled keeps bookkeeping in memory for every page of its tree, and a leaf page holds at most
//! 17 rows, so its memory grows with the number of rows. Once every delivery of an
//! event has ended and the event is older than `storage.fold_after`, the folder moves the
//! event's rows (the event, its payload chunks, its target rows, its attempts) into a *fold*:
//! one row of the `log` tree, keyed by its first event's ULID ([`key::fold`]), that holds the
//! rows of consecutive events, zstd-compressed, within [`codec::MAX_ROW`] like every row (so it
//! stays in sled's fsynced log). A delivered event with one attempt is two rows hot and a few
//! percent of one folded.
//!
//! - Folds never overlap: an event is in the fold whose first ULID is the greatest at or below
//!   its own, or in none. An event that ends after the events around it were folded (a delivery
//!   that retried for a while) joins the fold that spans it, which splits if it outgrows its
//!   row; a fold with room takes the events that follow it.
//! - An event is hot or folded, never both: folding writes the fold and removes the hot rows in
//!   one batch, and unfolding (a manual retry of a folded delivery) does the reverse, so a crash
//!   leaves one or the other.
//! - Reads look for the hot row first, then the fold (a few decoded folds are cached). A read
//!   of several rows (an event with its deliveries, a page of the log) runs again if a batch
//!   that moves events between hot rows and folds was applied meanwhile
//!   ([`Inner::consistent`]): it never sees an event in neither place, or in both.
//! - Only events before the idempotency keys' recorded watermark are folded: the keys' rebuild
//!   at open reads the hot rows after it ([`super::keys`]).
//! - Retention removes a fold once its last event is older than the retention window.
//! - The folder claims ([`super::Claim`]) the deliveries of each event it folds, so an attempt,
//!   a retry or retention never changes one meanwhile.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::codec::{self, Reader, Writer, MAX_ROW};
use super::key;
use super::keys;
use super::{meta_keys, Claim, Inner, SledStore, StoreError};
use herald_core::clock::Millis;
use herald_core::ids;
use herald_core::model::DeliveryState;

/// Rows of an event, or of a fold's events, as (key, value) ([`encode`] sorts them).
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// The uncompressed bytes a fold starts from; fewer if its compressed form would not fit.
const RAW_TARGET: usize = 96 * 1024;
/// The most uncompressed bytes a fold may claim to hold (a corrupt length is refused, not
/// allocated).
const RAW_MAX: usize = 4 * 1024 * 1024;
/// A fold's row (key included) is at most this: [`MAX_ROW`].
const ROW_MAX: usize = MAX_ROW;
/// A fold this small still takes the events that follow it.
const ROOM: usize = ROW_MAX * 3 / 4;
/// zstd's level: its default, which packs JSON well at hundreds of MB/s.
const LEVEL: i32 = 3;
/// Decoded folds kept for reads (a page of the log reads neighbours from one fold).
const CACHED: usize = 8;
/// The uncompressed bytes of a frame: a fold is compressed in frames of about this size, so a
/// read by id decompresses one frame, not the fold.
const FRAME_RAW: usize = 8 * 1024;

/// Where packing the account index stands ([`SledStore::pack_account_index`]).
#[derive(Default)]
pub(super) struct IndexPass {
    /// Rows starting before this are packed (in `meta` too, read by the first pass after
    /// a start; without it, as in a store older than packing, the first pass reads every row).
    done: u128,
    loaded: bool,
    /// A pass under way: its lower and upper bounds and the key to go on from.
    current: Option<(u128, u128, Vec<u8>)>,
    /// Rows removed since the store opened.
    packed: usize,
}

/// A fold, decoded (all of it, or the frame a read needs): its rows, sorted by key.
pub(crate) struct Fold {
    pub first: u128,
    pub last: u128,
    /// The events whose rows, if the fold has them, this decoding holds.
    covers: (u128, u128),
    body: Vec<u8>,
    /// Each row's key and value as (start, end) offsets in `body`.
    rows: Vec<[u32; 4]>,
}

impl Fold {
    fn key(&self, r: &[u32; 4]) -> &[u8] {
        &self.body[r[0] as usize..r[1] as usize]
    }

    fn row(&self, i: usize) -> (&[u8], &[u8]) {
        let r = &self.rows[i];
        (self.key(r), &self.body[r[2] as usize..r[3] as usize])
    }

    /// The first row whose key is at or after `k`.
    fn lower_bound(&self, k: &[u8]) -> usize {
        self.rows.partition_point(|r| self.key(r) < k)
    }

    pub fn get(&self, k: &[u8]) -> Option<&[u8]> {
        let i = self.lower_bound(k);
        match (i < self.rows.len()).then(|| self.row(i)) {
            Some((rk, v)) if rk == k => Some(v),
            _ => None,
        }
    }

    /// The rows whose key starts with `prefix`, in key order.
    pub fn prefix<'a>(
        &'a self,
        prefix: &'a [u8],
    ) -> impl DoubleEndedIterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let from = self.lower_bound(prefix);
        let to = from + self.rows[from..].partition_point(|r| self.key(r).starts_with(prefix));
        (from..to).map(|i| self.row(i))
    }

    /// The fold's events' ULIDs and rows, in order.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = (u128, &[u8])> {
        self.prefix(&[key::EVENT])
            .filter_map(|(k, v)| Some((key::ulid(k)?, v)))
    }

    /// The rows of each of its events, by event (what [`pack`] takes).
    fn split(&self) -> Vec<(u128, Rows)> {
        let mut out: Vec<(u128, Rows)> = self.events().map(|(e, _)| (e, Vec::new())).collect();
        for i in 0..self.rows.len() {
            let (k, v) = self.row(i);
            let Some(ulid) = key::ulid(k) else { continue };
            // Attempts are keyed by a delivery, the rest by the event.
            let event = match k[0] {
                key::ATTEMPT => ids::event_of(ulid).map_or(ulid, |(e, _)| e),
                _ => ulid,
            };
            if let Ok(i) = out.binary_search_by_key(&event, |(e, _)| *e) {
                out[i].1.push((k.to_vec(), v.to_vec()));
            }
        }
        out
    }
}

/// Encodes events' rows (events in order) as a fold's value: a header with the last event and
/// each frame's first event and sizes, then the frames, each compressed on its own.
fn encode(events: &[(u128, Rows)]) -> Result<Vec<u8>, StoreError> {
    let mut frames: Vec<(u128, u32, Vec<u8>)> = Vec::new();
    let mut start = 0;
    while start < events.len() {
        let mut end = start + 1;
        let mut raw = raw_size(&events[start].1);
        while end < events.len() && raw + raw_size(&events[end].1) <= FRAME_RAW {
            raw += raw_size(&events[end].1);
            end += 1;
        }
        let mut rows: Vec<&(Vec<u8>, Vec<u8>)> =
            events[start..end].iter().flat_map(|(_, r)| r).collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut w = Writer::with_capacity(raw + 16);
        for (k, v) in rows {
            w.vbytes(k);
            w.vbytes(v);
        }
        let body = w.finish();
        let packed = zstd_compress(&body)?;
        frames.push((events[start].0, body.len() as u32, packed));
        start = end;
    }
    let packed: usize = frames.iter().map(|f| f.2.len() + 24).sum();
    let mut w = Writer::with_capacity(packed + 20);
    w.u128(events.last().map_or(0, |(e, _)| *e));
    w.u16(frames.len() as u16);
    for (first, raw, bytes) in &frames {
        w.u128(*first);
        w.u32(*raw);
        w.u32(bytes.len() as u32);
    }
    for (_, _, bytes) in &frames {
        w.tail(bytes);
    }
    Ok(w.finish())
}

thread_local! {
    // zstd's contexts, one per thread: making one costs more than a frame's work.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn zstd_compress(body: &[u8]) -> Result<Vec<u8>, StoreError> {
    let fail = |e: std::io::Error| StoreError::Encode(format!("fold: {e}"));
    COMPRESSOR.with_borrow_mut(|c| {
        let c = match c {
            Some(c) => c,
            None => c.insert(zstd::bulk::Compressor::new(LEVEL).map_err(fail)?),
        };
        c.compress(body).map_err(fail)
    })
}

fn zstd_decompress(bytes: &[u8], raw: usize) -> Result<Vec<u8>, StoreError> {
    let fail = |e: std::io::Error| StoreError::Corrupt(format!("fold: {e}"));
    DECOMPRESSOR.with_borrow_mut(|d| {
        let d = match d {
            Some(d) => d,
            None => d.insert(zstd::bulk::Decompressor::new().map_err(fail)?),
        };
        let out = d.decompress(bytes, raw).map_err(fail)?;
        if out.len() != raw {
            return Err(StoreError::Corrupt(
                "fold: a frame has the wrong length".into(),
            ));
        }
        Ok(out)
    })
}

/// A folded event's payload, read from the log tree alone (for the format migrations, which
/// run before the store opens): `None` if no fold holds the event.
pub(super) fn folded_payload(log: &sled::Tree, event: u128) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(item) = log.range(key::fold(0)..=key::fold(event)).next_back() else {
        return Ok(None);
    };
    let (k, v) = item?;
    let fold = decode(fold_first(&k)?, &v, Some(event))?;
    let Some(row) = fold.get(&key::event(event)) else {
        return Ok(None);
    };
    let (rec, inline) = codec::decode_event(event, row)?;
    if let Some(p) = inline {
        return Ok(Some(p.to_vec()));
    }
    let mut p = Vec::with_capacity(rec.payload_len);
    for (_, chunk) in fold.prefix(&key::of(key::CHUNK, event)) {
        p.extend_from_slice(chunk);
    }
    Ok(Some(p))
}

/// Decodes a fold: all of it, or (`want`) only the frame that would hold that event.
fn decode(first: u128, v: &[u8], want: Option<u128>) -> Result<Fold, StoreError> {
    let mut r = Reader::new(v, "fold")?;
    let last = r.u128()?;
    let n = r.u16()? as usize;
    let mut frames = Vec::with_capacity(n);
    for _ in 0..n {
        frames.push((r.u128()?, r.u32()? as usize, r.u32()? as usize));
    }
    let mut data = r.tail();
    // Each frame's bytes, and the events it may hold: from its first to the next one's.
    let mut chosen = Vec::new();
    let mut covers = (first, last);
    for (i, &(frame_first, raw, len)) in frames.iter().enumerate() {
        let (bytes, rest) = data
            .split_at_checked(len)
            .ok_or_else(|| StoreError::Corrupt("fold: a frame runs past its end".into()))?;
        data = rest;
        let until = frames.get(i + 1).map_or(last, |f| f.0.saturating_sub(1));
        let take = match want {
            None => true,
            // The first frame also answers for anything before it (it holds none of them).
            Some(e) => (i == 0 || frame_first <= e) && (e <= until || i + 1 == n),
        };
        if take {
            if want.is_some() {
                covers = (if i == 0 { first } else { frame_first }, until);
            }
            chosen.push((raw, bytes));
        }
    }
    let raw_total: usize = chosen.iter().map(|c| c.0).sum();
    if raw_total > RAW_MAX {
        return Err(StoreError::Corrupt(format!(
            "fold says it holds {raw_total} bytes"
        )));
    }
    let mut body = Vec::with_capacity(raw_total);
    let mut starts = Vec::with_capacity(chosen.len());
    for (raw, bytes) in chosen {
        starts.push(body.len());
        let frame = zstd_decompress(bytes, raw)?;
        body.extend_from_slice(&frame);
    }
    let mut rows = Vec::new();
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(body.len());
        let frame = &body[start..end];
        let mut r = Reader::new(frame, "fold rows")?;
        let at = |part: &[u8]| (part.as_ptr() as usize - body.as_ptr() as usize) as u32;
        while !r.is_empty() {
            let (k, v) = (r.vbytes()?, r.vbytes()?);
            let (ks, vs) = (at(k), at(v));
            rows.push([ks, ks + k.len() as u32, vs, vs + v.len() as u32]);
        }
    }
    // Frames are each sorted; together they are sorted by key once more.
    rows.sort_unstable_by(|a, b| {
        body[a[0] as usize..a[1] as usize].cmp(&body[b[0] as usize..b[1] as usize])
    });
    Ok(Fold {
        first,
        last,
        covers,
        body,
        rows,
    })
}

/// The uncompressed size of rows, about.
fn raw_size(rows: &Rows) -> usize {
    rows.iter().map(|(k, v)| k.len() + v.len() + 4).sum()
}

/// Packs events (in order) into as few folds as fit a row each: (first event, value).
fn pack(events: &[(u128, Rows)]) -> Result<Vec<(u128, Vec<u8>)>, StoreError> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < events.len() {
        // As many events as make RAW_TARGET bytes; fewer while they do not fit a row.
        let mut n = 1;
        let mut raw = raw_size(&events[start].1);
        while start + n < events.len() {
            let next = raw_size(&events[start + n].1);
            if raw + next > RAW_TARGET {
                break;
            }
            raw += next;
            n += 1;
        }
        loop {
            let v = encode(&events[start..start + n])?;
            let size = v.len() + 17;
            if size <= ROW_MAX {
                out.push((events[start].0, v));
                start += n;
                break;
            }
            if n == 1 {
                return Err(StoreError::TooLarge {
                    what: "a folded event",
                    size,
                    max: ROW_MAX,
                });
            }
            // As many as the ratio says fit, and a tenth fewer.
            n = (n * ROW_MAX * 9 / 10 / size).clamp(1, n - 1);
        }
    }
    Ok(out)
}

/// Whether an event's rows fit a fold of their own (only a large payload's may not).
fn fits(event: u128, rows: &Rows) -> Result<bool, StoreError> {
    if raw_size(rows) + 64 <= ROW_MAX {
        return Ok(true);
    }
    let v = encode(&[(event, rows.clone())])?;
    Ok(v.len() + 17 <= ROW_MAX)
}

/// The first event of a fold's key.
fn fold_first(k: &[u8]) -> Result<u128, StoreError> {
    key::ulid(k).ok_or_else(|| StoreError::Corrupt("fold key".into()))
}

/// A fold's span and row, read without decoding it.
#[derive(Clone)]
struct Bounds {
    first: u128,
    last: u128,
    row: sled::IVec,
}

/// Where an event's rows are.
#[derive(Clone)]
pub(crate) enum Place {
    Hot,
    Folded(Arc<Fold>),
}

/// Decoded folds, most recently read last, and a generation every fold write bumps (a read
/// that overlapped a write does not cache what it read).
#[derive(Default)]
pub(super) struct FoldCache {
    generation: u64,
    folds: VecDeque<Arc<Fold>>,
}

/// Runs of a read overlapped by fold writes before [`Inner::consistent`] holds them off.
const READ_TRIES: usize = 16;

/// What a folding slice did, and where the next starts.
#[derive(Debug, Default)]
pub struct Folded {
    /// Events folded.
    pub events: usize,
    /// Folds written.
    pub folds: usize,
    /// The last event looked at: the next slice starts after it.
    pub last: Option<u128>,
    /// Whether the slice stopped at its size, not at the end of what may be folded.
    pub more: bool,
}

impl Inner {
    fn lock_fold_cache(&self) -> std::sync::MutexGuard<'_, FoldCache> {
        self.fold_cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_index_pass(&self) -> std::sync::MutexGuard<'_, IndexPass> {
        self.index_pass.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_fold_writes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.fold_writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies a batch that moves events between hot rows and folds, marked in `fold_seq`
    /// for the reads it overlaps. The caller holds `fold_writes`.
    fn move_events(&self, batch: sled::Batch) -> Result<(), StoreError> {
        let applied = self.apply_marked(batch);
        self.folds_changed();
        applied
    }

    /// Applies a batch that moves rows readers may be iterating over (events between hot rows
    /// and folds, account index entries between rows), marked in `fold_seq`.
    fn apply_marked(&self, batch: sled::Batch) -> Result<(), StoreError> {
        self.fold_seq.fetch_add(1, Ordering::SeqCst);
        let applied = self.trees.log.apply_batch(batch);
        #[cfg(test)]
        self.faults.kill_point(&self.faults.kill_after_fold, || {
            let _ = self.db.flush();
        });
        self.fold_seq.fetch_add(1, Ordering::SeqCst);
        Ok(applied?)
    }

    /// Packs one account's index rows that start at or after `lo` and before `upper` (and the
    /// row before them, which may have room) into as few rows as [`codec::INDEX_PER_ROW`]
    /// allows, in one batch, reading about `budget` rows. Returns the rows read and removed,
    /// and where to go on if the budget ran out first (the row before it, where this call's
    /// last run went, has room for the next if any).
    fn pack_account(
        &self,
        account: &[u8],
        lo: u128,
        upper: u128,
        budget: usize,
    ) -> Result<(usize, usize, Option<u128>), StoreError> {
        let log = &self.trees.log;
        let at = |ulid: u128| {
            let mut k = account.to_vec();
            k.extend_from_slice(&ulid.to_be_bytes());
            k
        };
        let prev = match lo {
            0 => None,
            _ => log.range(at(0)..at(lo)).next_back().transpose()?,
        };
        let mut rows = prev
            .into_iter()
            .map(Ok)
            .chain(log.range(at(lo)..at(upper)))
            .peekable();
        let mut batch = sled::Batch::default();
        let (mut read, mut removed, mut resume) = (0, 0, None);
        // The run being packed: its first row's key, how many rows, its events.
        let mut run: Option<(sled::IVec, usize, Vec<u128>)> = None;
        let mut flush = |run: Option<(sled::IVec, usize, Vec<u128>)>, batch: &mut sled::Batch| {
            if let Some((first, n, events)) = run.filter(|r| r.1 > 1) {
                batch.insert(first, codec::encode_ulids(&events));
                removed += n - 1;
            }
        };
        while let Some(item) = rows.next() {
            let (k, v) = item?;
            read += 1;
            if read >= budget && rows.peek().is_some() {
                resume = key::ulid(&k[16..]).map(|u| u + 1);
            }
            let mut events = Vec::new();
            codec::decode_targets(&v, &mut events)?;
            match &mut run {
                Some((_, n, all)) if all.len() + events.len() <= codec::INDEX_PER_ROW => {
                    all.extend_from_slice(&events);
                    *n += 1;
                    batch.remove(k);
                }
                _ => {
                    flush(run.take(), &mut batch);
                    run = Some((k, 1, events));
                }
            }
            if resume.is_some() {
                break;
            }
        }
        flush(run, &mut batch);
        if removed > 0 {
            self.apply_marked(batch)?;
        }
        Ok((read, removed, resume))
    }

    /// Runs `read` (which only reads) until no batch that moves events between hot rows and
    /// folds was applied while it ran, and returns what it found then: a read of several rows
    /// that overlapped one (an event's row read hot, its attempts after they were folded)
    /// could miss an event or see it twice. After [`READ_TRIES`] overlapped runs it reads with
    /// the fold writers held off; a holder of `fold_writes` never gets there, since no other
    /// fold write can overlap its reads.
    pub(super) fn consistent<T>(
        &self,
        mut read: impl FnMut() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        for _ in 0..READ_TRIES {
            let before = self.fold_seq.load(Ordering::SeqCst);
            if before % 2 == 0 {
                let out = read();
                if self.fold_seq.load(Ordering::SeqCst) == before {
                    return out;
                }
            }
            std::thread::yield_now();
        }
        let _writes = self.lock_fold_writes();
        read()
    }

    /// After a fold write: what the cache holds may be gone.
    fn folds_changed(&self) {
        let mut c = self.lock_fold_cache();
        c.generation += 1;
        c.folds.clear();
    }

    /// The row of the fold whose first event is the last at or before `event`.
    fn fold_row_at(&self, event: u128) -> Result<Option<(u128, sled::IVec)>, StoreError> {
        let Some((k, v)) = self
            .trees
            .log
            .range(key::fold(0)..=key::fold(event))
            .next_back()
            .transpose()?
        else {
            return Ok(None);
        };
        Ok(Some((fold_first(&k)?, v)))
    }

    /// The fold whose first event is the last at or before `event` (it holds `event` if any
    /// fold does), decoded as far as a read of `event` needs: the frame that would hold it.
    pub(super) fn fold_at(&self, event: u128) -> Result<Option<Arc<Fold>>, StoreError> {
        let generation = {
            let c = self.lock_fold_cache();
            if let Some(f) = c
                .folds
                .iter()
                .find(|f| f.covers.0 <= event && event <= f.covers.1)
            {
                return Ok(Some(f.clone()));
            }
            c.generation
        };
        let Some((first, v)) = self.fold_row_at(event)? else {
            return Ok(None);
        };
        let fold = Arc::new(decode(first, &v, Some(event))?);
        let mut c = self.lock_fold_cache();
        if c.generation == generation {
            if c.folds.len() == CACHED {
                c.folds.pop_front();
            }
            c.folds.push_back(fold.clone());
        }
        Ok(Some(fold))
    }

    /// The first and last event and the row of the fold whose first event is the last at or
    /// before `event`, from its key and header alone (no decompression).
    fn fold_bounds_at(&self, event: u128) -> Result<Option<Bounds>, StoreError> {
        let Some((first, row)) = self.fold_row_at(event)? else {
            return Ok(None);
        };
        let last = Reader::new(&row, "fold")?.u128()?;
        Ok(Some(Bounds { first, last, row }))
    }

    /// The event's row and where the rest of its rows are.
    pub(super) fn locate(&self, event: u128) -> Result<Option<(sled::IVec, Place)>, StoreError> {
        // Two reads: an unfold between them would hide the event from both.
        self.consistent(|| {
            if let Some(v) = self.trees.log.get(key::event(event))? {
                return Ok(Some((v, Place::Hot)));
            }
            let Some(fold) = self.fold_at(event)? else {
                return Ok(None);
            };
            let row = fold.get(&key::event(event)).map(sled::IVec::from);
            Ok(row.map(|v| (v, Place::Folded(fold))))
        })
    }

    /// Whether the event is stored, hot or folded.
    pub(super) fn event_exists(&self, event: u128) -> Result<bool, StoreError> {
        Ok(self.locate(event)?.is_some())
    }

    /// Calls `f` with each row of `place` under `prefix`, in key order.
    pub(super) fn each_row(
        &self,
        place: &Place,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match place {
            Place::Hot => {
                for item in self.trees.log.scan_prefix(prefix) {
                    let (k, v) = item?;
                    f(&k, &v)?;
                }
            }
            Place::Folded(fold) => {
                for (k, v) in fold.prefix(prefix) {
                    f(k, v)?;
                }
            }
        }
        Ok(())
    }

    /// The last row of `place` under `prefix`.
    pub(super) fn last_row(
        &self,
        place: &Place,
        prefix: &[u8],
    ) -> Result<Option<(sled::IVec, sled::IVec)>, StoreError> {
        Ok(match place {
            Place::Hot => self.trees.log.scan_prefix(prefix).next_back().transpose()?,
            Place::Folded(fold) => fold
                .prefix(prefix)
                .next_back()
                .map(|(k, v)| (k.into(), v.into())),
        })
    }

    /// The newest event in a fold (0 if none): new ids sort after it.
    pub(super) fn newest_folded(&self) -> Result<u128, StoreError> {
        Ok(self.fold_bounds_at(u128::MAX)?.map_or(0, |b| b.last))
    }

    /// Appends copies of the hot rows under `prefix` to `rows`.
    fn copy_hot_rows(&self, prefix: &[u8], rows: &mut Rows) -> Result<(), StoreError> {
        self.each_row(&Place::Hot, prefix, |k, v| {
            rows.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
    }

    /// An ended event's rows and its deliveries' claims; `None` if one of its deliveries is
    /// pending or claimed by someone else (it stays hot).
    fn foldable(
        self: &Arc<Self>,
        event: u128,
        row: &[u8],
    ) -> Result<Option<(Rows, Vec<Claim>)>, StoreError> {
        let (rec, _) = self.decode_event(event, row, &Place::Hot)?;
        let claims: Option<Vec<_>> = (0..rec.targets.len())
            .map(|i| self.claim(ids::delivery_of(event, i)))
            .collect();
        let Some(claims) = claims else {
            return Ok(None);
        };
        let mut rows: Rows = vec![(key::event(event).to_vec(), row.to_vec())];
        for kind in [key::CHUNK, key::TARGETS] {
            self.copy_hot_rows(&key::of(kind, event), &mut rows)?;
        }
        // A delivery has ended if it has no pending entry and its last attempt left it ended
        // (none at all: fresh, so pending), as [`Inner::assemble`] tells it.
        for i in 0..rec.targets.len() {
            let delivery = ids::delivery_of(event, i);
            if self.pending_of(delivery)?.is_some() {
                return Ok(None);
            }
            let before = rows.len();
            self.copy_hot_rows(&key::attempts(delivery), &mut rows)?;
            let ended = match rows[before..].last() {
                Some((k, v)) => codec::decode_attempt(k, v)?.state != DeliveryState::Pending,
                None => false,
            };
            if !ended {
                return Ok(None);
            }
        }
        Ok(Some((rows, claims)))
    }

    /// Writes a run of foldable events that share the fold before them (`prev`): into it if
    /// one of them falls inside it or it has room, else into folds of their own; and removes
    /// their hot rows. One batch. Returns the folds written.
    fn write_run(&self, prev: Option<Bounds>, run: Vec<(u128, Rows)>) -> Result<usize, StoreError> {
        if run.is_empty() {
            return Ok(0);
        }
        let mut batch = sled::Batch::default();
        for (_, rows) in &run {
            for (k, _) in rows {
                batch.remove(&k[..]);
            }
        }
        let merge = prev.filter(|p| run[0].0 <= p.last || p.row.len() + 17 < ROOM);
        let events = match merge {
            Some(p) => {
                batch.remove(&key::fold(p.first)[..]);
                let mut all = decode(p.first, &p.row, None)?.split();
                all.extend(run);
                all.sort_unstable_by_key(|(e, _)| *e);
                all
            }
            None => run,
        };
        let packed = pack(&events)?;
        for (first, v) in &packed {
            batch.insert(&key::fold(*first)[..], &v[..]);
        }
        #[cfg(test)]
        self.faults.check(&self.faults.fold_write)?;
        self.move_events(batch)?;
        Ok(packed.len())
    }

    /// Moves a folded event's rows back to hot rows (its delivery is about to change). The
    /// caller holds a claim of the delivery. False if the event is not folded.
    pub(super) fn unfold(&self, event: u128) -> Result<bool, StoreError> {
        let _writes = self.lock_fold_writes();
        if self.trees.log.contains_key(key::event(event))? {
            return Ok(false);
        }
        let Some((first, v)) = self.fold_row_at(event)? else {
            return Ok(false);
        };
        let fold = decode(first, &v, None)?;
        let mut events = fold.split();
        let Ok(i) = events.binary_search_by_key(&event, |(e, _)| *e) else {
            return Ok(false);
        };
        let (_, rows) = events.remove(i);
        let mut batch = sled::Batch::default();
        batch.remove(&key::fold(fold.first)[..]);
        for (first, v) in pack(&events)? {
            batch.insert(&key::fold(first)[..], v);
        }
        for (k, v) in rows {
            batch.insert(k, v);
        }
        self.move_events(batch)?;
        Ok(true)
    }
}

impl Inner {
    /// Removes the folded events among `events` from their folds (each fold that holds one is
    /// packed again without them, in one write per fold) and returns their rows. The caller
    /// holds [`Inner::lock_fold_writes`].
    pub(super) fn drop_folded(
        &self,
        events: &std::collections::BTreeSet<u128>,
    ) -> Result<Vec<(u128, Rows)>, StoreError> {
        let mut removed = Vec::new();
        let mut next = events.first().copied();
        while let Some(event) = next {
            let after = match self.fold_row_at(event)? {
                Some((first, v)) => {
                    let fold = decode(first, &v, None)?;
                    if fold.last >= event {
                        let (gone, kept): (Vec<_>, Vec<_>) = fold
                            .split()
                            .into_iter()
                            .partition(|(e, _)| events.contains(e));
                        let mut batch = sled::Batch::default();
                        batch.remove(&key::fold(fold.first)[..]);
                        for (first, v) in pack(&kept)? {
                            batch.insert(&key::fold(first)[..], v);
                        }
                        self.move_events(batch)?;
                        removed.extend(gone);
                    }
                    fold.last.max(event)
                }
                None => event,
            };
            next = events
                .range((Bound::Excluded(after), Bound::Unbounded))
                .next()
                .copied();
        }
        Ok(removed)
    }
}

impl SledStore {
    /// Folds the ended events received before `before` (and before the idempotency keys'
    /// watermark), looking at up to `max` hot events from after `from`.
    pub fn fold_history(
        &self,
        before: Millis,
        from: Option<u128>,
        max: usize,
    ) -> Result<Folded, StoreError> {
        let inner = &self.inner;
        let _writes = inner.lock_fold_writes();
        let upper = ids::ulid_floor(before).min(inner.keys.recorded().saturating_add(1));
        let lower = from.map_or(0, |f| f.saturating_add(1));
        let mut out = Folded::default();
        if lower >= upper {
            return Ok(out);
        }
        let mut run: Vec<(u128, Rows)> = Vec::new();
        let mut claims = Vec::new();
        let mut prev: Option<Bounds> = None;
        let mut seen = 0;
        // Read ahead of the writes: the range's rows are copied before any is removed.
        let hot: Vec<(u128, sled::IVec)> = inner
            .trees
            .log
            .range(key::event(lower)..key::event(upper))
            .take(max)
            .map(|item| {
                let (k, v) = item?;
                let e = key::ulid(&k).ok_or_else(|| StoreError::Corrupt("event key".into()))?;
                Ok((e, v))
            })
            .collect::<Result<_, StoreError>>()?;
        for (event, row) in hot {
            seen += 1;
            out.last = Some(event);
            let Some((rows, mut held)) = inner.foldable(event, &row)? else {
                continue;
            };
            if !fits(event, &rows)? {
                continue; // a payload too large to fold stays hot
            }
            let here = inner.fold_bounds_at(event)?;
            let first = |b: &Option<Bounds>| b.as_ref().map(|b| b.first);
            if first(&here) != first(&prev) && !run.is_empty() {
                out.events += run.len();
                out.folds += inner.write_run(prev.take(), std::mem::take(&mut run))?;
                claims.clear();
                prev = inner.fold_bounds_at(event)?;
            } else {
                prev = here;
            }
            run.push((event, rows));
            claims.append(&mut held);
        }
        out.events += run.len();
        out.folds += inner.write_run(prev, run)?;
        drop(claims);
        out.more = seen == max;
        Ok(out)
    }

    /// Packs the account index rows of events received before `before` into full rows (the
    /// committer writes a row per account and commit cycle, which under light traffic is a row
    /// per event): a pass goes account by account over the rows written since the last pass,
    /// about `max` rows per call; true while the pass is not done. Readers of the index run
    /// again if a packing batch overlapped them ([`Inner::consistent`]).
    pub fn pack_account_index(&self, before: Millis, max: usize) -> Result<bool, StoreError> {
        let inner = &self.inner;
        let _writes = inner.lock_fold_writes();
        let mut pass = inner.lock_index_pass();
        if !pass.loaded {
            if let Some(v) = inner.trees.meta.get(meta_keys::INDEX_PACKED)? {
                pass.done = u128::from_be_bytes(v.as_ref().try_into().unwrap_or_default());
            }
            pass.loaded = true;
        }
        let (lo, upper, mut from) = match pass.current.take() {
            Some(p) => p,
            // Never past the newest event: rows written later start after the pass.
            None => {
                let newest = inner.lock_fresh().last_event;
                let upper = ids::ulid_floor(before).min(newest.saturating_add(1));
                (pass.done, upper, vec![key::ACCOUNT_EVENT])
            }
        };
        if upper <= lo {
            return Ok(false); // the clock went back: nothing new is settled
        }
        let end = [key::ACCOUNT_EVENT + 1];
        let mut read = 0;
        while read < max {
            let next = inner
                .trees
                .log
                .range::<&[u8], _>((Bound::Included(&from[..]), Bound::Excluded(&end[..])))
                .keys()
                .next()
                .transpose()?;
            let Some(k) = next else {
                pass.done = upper;
                inner
                    .trees
                    .meta
                    .insert(meta_keys::INDEX_PACKED, &upper.to_be_bytes())?;
                return Ok(false);
            };
            let account = &k[..17];
            // Within an account a slice stopped in, or from the pass's start.
            let start = match from.len() == k.len() && from[..17] == *account {
                true => key::ulid(&from[16..]).unwrap_or(lo),
                false => lo,
            };
            let (r, removed, resume) = inner.pack_account(account, start, upper, max - read)?;
            read += r.max(1);
            pass.packed += removed;
            from = account.to_vec();
            match resume {
                Some(u) => from.extend_from_slice(&u.to_be_bytes()),
                None => from.extend_from_slice(&[0xff; 17]),
            }
        }
        pass.current = Some((lo, upper, from));
        Ok(true)
    }

    /// Account index rows removed by packing since the store opened.
    pub fn index_rows_packed(&self) -> usize {
        self.inner.lock_index_pass().packed
    }

    /// Removes the folds whose last event was received before `cutoff`, up to `max` of them
    /// (their deliveries have all ended). Returns what went and whether more may be left.
    pub fn prune_folds(
        &self,
        cutoff: Millis,
        max: usize,
    ) -> Result<(super::Pruned, bool), StoreError> {
        let inner = &self.inner;
        let mut out = super::Pruned::default();
        let floor = ids::ulid_floor(cutoff);
        let mut from = key::fold(0).to_vec();
        for _ in 0..max {
            let _writes = inner.lock_fold_writes();
            let Some((k, v)) = inner
                .trees
                .log
                .range::<&[u8], _>((
                    Bound::Included(&from[..]),
                    Bound::Excluded(&key::end(key::FOLD)[..]),
                ))
                .next()
                .transpose()?
            else {
                return Ok((out, false));
            };
            let first = fold_first(&k)?;
            let fold = Arc::new(decode(first, &v, None)?);
            if fold.last >= floor {
                return Ok((out, false)); // the folds after it are newer
            }
            from = key::fold(first.saturating_add(1)).to_vec();
            let place = Place::Folded(fold.clone());
            let mut gone = Vec::new();
            let mut claims = Vec::new();
            let mut busy = false;
            for (event, row) in fold.events() {
                let (rec, _) = inner.decode_event(event, row, &place)?;
                for i in 0..rec.targets.len() {
                    match inner.claim(ids::delivery_of(event, i)) {
                        Some(c) => claims.push(c),
                        None => busy = true,
                    }
                }
                gone.push((event, rec));
            }
            if busy {
                continue; // a retry is taking one of them back: next sweep
            }
            let mut released = Vec::new();
            for (event, rec) in &gone {
                let event = *event;
                for i in 0..rec.targets.len() {
                    let d = inner.assemble(&rec.meta, &rec.targets, i, &place)?;
                    out.attempts += d.attempt_count as usize;
                    inner.stats.forget(d.state);
                    out.deliveries += 1;
                }
                released.extend(keys::event_rows(&rec.meta, event));
                out.events += 1;
            }
            inner.keys.release(&released)?;
            inner.trees.log.remove(&k)?;
            inner.folds_changed();
        }
        Ok((out, true))
    }
}

/// Every event with a ULID in a range, hot or folded, newest first ([`Inner::newest_first`]).
pub(super) struct NewestFirst {
    hot: std::iter::Peekable<std::iter::Rev<sled::Iter>>,
    folds: std::iter::Rev<sled::Iter>,
    folds_done: bool,
    lower: u128,
    upper: u128,
    /// The current fold, and its events in the range not yet returned (oldest first).
    fold: Option<Arc<Fold>>,
    queued: Vec<(u128, sled::IVec)>,
}

impl Inner {
    /// Every event with a ULID in `lower..=upper`, hot or folded, newest first: the hot rows and
    /// the folds, merged.
    pub(super) fn newest_first(&self, lower: u128, upper: u128) -> NewestFirst {
        let log = &self.trees.log;
        NewestFirst {
            hot: log
                .range(key::event(lower)..=key::event(upper))
                .rev()
                .peekable(),
            folds: log.range(key::fold(0)..=key::fold(upper)).rev(),
            folds_done: false,
            lower,
            upper,
            fold: None,
            queued: Vec::new(),
        }
    }
}

impl NewestFirst {
    /// Reads folds until one has events in the range (or none is left).
    fn next_fold(&mut self) -> Result<(), StoreError> {
        while self.queued.is_empty() && !self.folds_done {
            let Some(item) = self.folds.next() else {
                self.folds_done = true;
                break;
            };
            let (k, v) = item?;
            let fold = Arc::new(decode(fold_first(&k)?, &v, None)?);
            if fold.last < self.lower {
                self.folds_done = true; // older folds end sooner still
                break;
            }
            self.queued = fold
                .events()
                .filter(|(e, _)| (self.lower..=self.upper).contains(e))
                .map(|(e, row)| (e, sled::IVec::from(row)))
                .collect();
            self.fold = Some(fold);
        }
        Ok(())
    }
}

impl Iterator for NewestFirst {
    type Item = Result<(u128, sled::IVec, Place), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = self.next_fold() {
            self.folds_done = true;
            self.queued.clear();
            return Some(Err(e));
        }
        let hot = match self.hot.peek() {
            Some(Ok((k, _))) => key::ulid(k),
            Some(Err(_)) => return self.hot.next().and_then(Result::err).map(|e| Err(e.into())),
            None => None,
        };
        let folded = self.queued.last().map(|(e, _)| *e);
        let take_hot = match (hot, folded) {
            (Some(h), Some(f)) => h > f,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        if take_hot {
            let (k, v) = match self.hot.next()? {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e.into())),
            };
            let event = key::ulid(&k)?;
            return Some(Ok((event, v, Place::Hot)));
        }
        let (e, v) = self.queued.pop()?;
        let fold = self.fold.clone()?;
        Some(Ok((e, v, Place::Folded(fold))))
    }
}
