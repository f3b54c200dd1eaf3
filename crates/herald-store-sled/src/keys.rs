//! Idempotency keys, in tables of their own beside sled (`idempotency/` in the data
//! directory): fixed-size slots in plain files, a day's keys in one table or a few.
//!
//! # Layout
//!
//! A key is (claim day, the first [`DIGEST`] bytes of a digest of account and key) — a
//! [`KeyRow`] — and what it names is the first event's ULID. A day's keys live in *tables*,
//! files named `DAY-GEN` (the day's number, then the table's generation within the day, both
//! in decimal): a [`BLOCK`]-byte header (magic, version, slot count, slots used at the last
//! sync), then blocks of [`BLOCK`] bytes, each [`PER_BLOCK`] slots of [`SLOT`] bytes: the
//! digest, then the ULID (big-endian). An all-zero slot is empty; a digest with ULID zero is a
//! key released. A key's slot is found by open addressing: from the digest modulo the slot
//! count, the first slot holding the digest or empty (linear probing). A
//! released key's slot is taken by the next new key whose probe passes it (in any of the day's
//! tables), so keys that retention releases early free their room for the day's later keys.
//! A table takes keys until three quarters of its slots are used; then the day gets a
//! new generation half as large as its tables together (so a day's tables hold 37 to 56 bytes
//! a key), and a day's first table is sized for one and a half times the day before's keys (a
//! steady day is one table). A lookup probes the day's tables newest first; a claim updates the
//! key's slot wherever it is, so a digest is in one table at most. Days expire whole: a file
//! removed. A slot never straddles two blocks, so a write that a power cut tears (disks write
//! 512-byte sectors whole) leaves each slot old or new, never an old digest naming a new event.
//!
//! Why not sled: its costs are per row and per write (a leaf splits at 16 rows, a changed row is
//! written again whole, and a segment of its file is reused only once half of it is dead), so a key
//! cost 161–180 bytes on disk with a row each and 97–113 packed ~45 to a row (storage format 6,
//! measured with the load benchmark's keys phase), against 28 bytes of data. Here a key is written
//! once, in place, and its memory is the kernel's page cache, which gives way under pressure, not
//! herald's heap. They live apart from the log because their lifetime is not the log's.
//!
//! # Tags
//!
//! Each table keeps a byte per slot in memory, its *tag*: empty, a released key, or a byte of
//! the digest the slot holds (1 to 2 bytes a key, read from the table when it opens). A probe
//! walks the tags and reads from the file only the slots whose tag is the digest's (one in
//! about 250 of the other keys' slots) or a released key's: a key not there, which is what a
//! new event's key is, costs no read, however many tables the day has. A slot is written
//! before its tag, so a probe that sees a tag finds its slot.
//!
//! A table's blocks are allocated when it is made (`fallocate`), so writing a slot never needs
//! a block a full disk no longer has.
//!
//! One writer at a time changes slots (`writes`): the committer adding keys, retention
//! releasing them, expiry. Lookups take no lock. Ingest's run on the committer, the only thread
//! that fills slots, so none runs while a slot fills. The Svix-compatible API's lookups (a
//! message by its `eventId`, a request key's answer: docs/svix.md) run beside it: a slot being
//! filled is another key's (the key looked up is either written already or not yet, and on one
//! node a request key is answered one request at a time), and whatever a lookup finds names
//! an event that must exist, so a torn slot answers nothing. A release (retention's thread) only
//! zeroes the ULID of a key whose event retention is removing: a lookup that reads it half
//! zeroed names an event that does not exist, which the committer takes as no claim.
//!
//! # Durability without a second fsync per commit
//!
//! The event row holds its idempotency key (and its request key: [`request_row`]), so the log
//! is the record and the tables an index of it. The committer writes a cycle's keys here before the cycle's fsync (a key that cannot
//! be written fails the cycle: `503`, nothing stored), without syncing them, and marks them
//! durable once the cycle is; once a second the checkpoint syncs the tables
//! it changed (headers with their counts, and the directory if a table was created) and then
//! records the *watermark* (a file, `watermark`, replaced by rename): the last event whose key
//! is here durably. At open, the keys of the events after the watermark are read from their
//! event rows and written again, so keys that a crash took come back before the first ingest;
//! a table whose header did not reach the disk can only hold such keys and is removed. An
//! insert or a sync that fails stops the watermark where it was for the rest of the process
//! (the next open rebuilds from there).
//!
//! # A digest of 12 bytes
//!
//! Two different keys of a day with the same 96-bit digest would answer one as the other's
//! duplicate. Among a hundred million keys a day (over 1,000 keyed events a second) the chance
//! that any two share a digest is about 10⁻¹³ a day. (A digest of twelve zero bytes, as likely,
//! reads as an empty slot: its key would not be found.)

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::codec;
use super::files::FILE_MODE;
use super::key;
use super::StoreError;
use herald_core::clock::Millis;
use herald_core::ids;

/// Bytes of a key's digest kept (see the module's doc).
pub const DIGEST: usize = 12;
/// A key: the day it was claimed ([`key::idempotency_day`], big-endian), then its digest.
pub type KeyRow = [u8; 4 + DIGEST];

/// The row of an idempotency key claimed on `day`: the day, then the digest of (account, key),
/// cut to [`DIGEST`] bytes. It names the first event's ULID, which also tells when it was
/// claimed.
pub fn key_row(day: u32, account_id: &str, key: &str) -> KeyRow {
    let mut k = [0u8; 4 + DIGEST];
    k.copy_from_slice(&key::idempotency_format_3(day, account_id, key)[..4 + DIGEST]);
    k
}

/// The row of a request key (docs/svix.md: the `idempotency-key` of the request that created
/// an event through the Svix-compatible API) claimed on `day`: as [`key_row`], its digest in a
/// domain of its own (a byte that is never in a key's UTF-8 between account and key), so no
/// idempotency key names the same row.
pub fn request_row(day: u32, account_id: &str, key: &str) -> KeyRow {
    let digest = key::digest(&[account_id.as_bytes(), &[0xff], key.as_bytes()]);
    let mut k = [0u8; 4 + DIGEST];
    k[..4].copy_from_slice(&day.to_be_bytes());
    k[4..].copy_from_slice(&digest[..DIGEST]);
    k
}

/// The key rows an event claims: its idempotency key's and its request key's, each on the day
/// of its id.
pub fn event_rows(
    meta: &herald_core::model::EventMeta,
    event: u128,
) -> impl Iterator<Item = (KeyRow, u128)> + '_ {
    let day = key::idempotency_day(ids::ulid_ms(event));
    let idem = meta
        .idempotency_key
        .as_deref()
        .map(move |k| (key_row(day, &meta.account_id, k), event));
    let request = meta
        .request_key
        .as_deref()
        .map(move |k| (request_row(day, &meta.account_id, k), event));
    idem.into_iter().chain(request)
}

/// A slot: the digest, then the event's ULID (big-endian).
const SLOT: usize = DIGEST + 16;
/// A table's unit of reads and of layout (a disk sector): the header, then blocks of slots.
const BLOCK: u64 = 512;
/// Slots in a block (504 of its bytes; the rest is zero).
const PER_BLOCK: u64 = BLOCK / SLOT as u64;
const MAGIC: &[u8; 8] = b"herald-k";
const VERSION: u32 = 1;
/// A table's blocks at least (36,864 slots, 1 MiB, allocated when the table is made).
const MIN_BLOCKS: u64 = 1 << 11;
const WATERMARK: &str = "watermark";
/// The next watermark is written to `watermark.new.N` and renamed (a name of its own for each
/// write: a store closed in a test may still be finishing a checkpoint when the next opens).
const WATERMARK_NEW: &str = "watermark.new";
static WATERMARK_WRITES: AtomicU64 = AtomicU64::new(0);

pub(super) struct Keys {
    dir: PathBuf,
    /// The directory itself, to sync the names of tables created.
    dir_file: File,
    /// Each day's tables, oldest generation first.
    days: RwLock<BTreeMap<u32, Vec<Arc<Table>>>>,
    /// A table was created or the watermark replaced since the last sync of the directory.
    names_changed: AtomicBool,
    marks: Mutex<Marks>,
    /// Held by whoever changes slots or tables.
    writes: Mutex<()>,
    /// Held through a checkpoint, so watermarks are recorded in order.
    checkpoints: Mutex<()>,
    /// Failures injected by the store's own tests.
    #[cfg(test)]
    pub(super) faults: KeyFaults,
}

/// Failures the store's tests inject, each armed for one call.
#[cfg(test)]
#[derive(Default)]
pub(super) struct KeyFaults {
    /// Writing a key's slot (as on a full disk: a slot can need a new block).
    pub write: AtomicBool,
    /// A table's sync.
    pub sync: AtomicBool,
}

#[cfg(test)]
impl KeyFaults {
    fn check(which: &AtomicBool, what: &str) -> Result<(), StoreError> {
        if which.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::other(format!("injected {what} failure")).into());
        }
        Ok(())
    }
}

struct Marks {
    /// The last event whose key (if it has one) is here; `None` once an insert failed.
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

struct Table {
    file: File,
    path: PathBuf,
    generation: u32,
    slots: u64,
    /// A tag per slot, in memory: [`EMPTY`], [`RELEASED`] or the [`tag`] of the digest it holds.
    /// A probe reads a slot from the file only where the tag is the digest's or `RELEASED`.
    tags: Box<[AtomicU8]>,
    /// Slots used (keys and released keys).
    used: AtomicU64,
    /// Written since its last sync.
    dirty: AtomicBool,
}

/// The tag of an empty slot.
const EMPTY: u8 = 0;
/// The tag of a released key's slot (its digest is still in the file).
const RELEASED: u8 = 1;

/// A slot's tag for a digest: its last byte (the home slot is its first eight), kept clear of
/// [`EMPTY`] and [`RELEASED`].
fn tag(digest: &[u8]) -> u8 {
    digest[DIGEST - 1].max(RELEASED + 1)
}

/// A slot's tag for what the file holds (the digest, then the ULID), as [`Table::probe`]
/// reads it.
fn tag_of_slot(slot: &[u8]) -> u8 {
    if slot[DIGEST..].iter().all(|b| *b == 0) {
        if slot[..DIGEST].iter().all(|b| *b == 0) {
            EMPTY
        } else {
            RELEASED
        }
    } else {
        tag(&slot[..DIGEST])
    }
}

fn empty_tags(slots: u64) -> Box<[AtomicU8]> {
    (0..slots).map(|_| AtomicU8::new(EMPTY)).collect()
}

/// Where a probe ended.
enum Probe {
    /// The digest's slot and the ULID it holds (zero: released).
    Found(u64, u128),
    /// The empty slot where the digest would go.
    Vacant(u64),
}

impl Table {
    fn create(dir: &Path, day: u32, generation: u32, slots: u64) -> Result<Table, StoreError> {
        let path = dir.join(format!("{day}-{generation}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&path)?;
        allocate(&file, BLOCK + slots / PER_BLOCK * BLOCK)?;
        let table = Table {
            file,
            path,
            generation,
            slots,
            tags: empty_tags(slots),
            used: AtomicU64::new(0),
            dirty: AtomicBool::new(true),
        };
        table.write_header()?;
        Ok(table)
    }

    /// The table at `path`, or `None` if its header or length is not a whole table's (one a
    /// crash cut short: it holds only keys after the watermark, see the module's doc).
    fn open(path: PathBuf, generation: u32) -> Result<Option<Table>, StoreError> {
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let mut h = [0u8; BLOCK as usize];
        if file.read_exact_at(&mut h, 0).is_err() || &h[..8] != MAGIC {
            return Ok(None);
        }
        if u32::from_be_bytes(h[8..12].try_into().unwrap_or_default()) != VERSION {
            return Err(StoreError::Corrupt(format!(
                "idempotency table {} has a layout this herald does not know",
                path.display()
            )));
        }
        let slots = u64::from_be_bytes(h[12..20].try_into().unwrap_or_default());
        let used = u64::from_be_bytes(h[20..28].try_into().unwrap_or_default());
        if slots == 0
            || slots % PER_BLOCK != 0
            || file.metadata()?.len() != BLOCK + slots / PER_BLOCK * BLOCK
        {
            return Ok(None);
        }
        let tags = empty_tags(slots);
        // The tags from the slots, a few blocks a read.
        let mut chunk = vec![0u8; (BLOCK * 256) as usize];
        let blocks = slots / PER_BLOCK;
        let mut b = 0;
        while b < blocks {
            let n = (blocks - b).min(256);
            let buf = &mut chunk[..(n * BLOCK) as usize];
            file.read_exact_at(buf, BLOCK + b * BLOCK)?;
            for (i, block) in buf.chunks_exact(BLOCK as usize).enumerate() {
                let first = (b + i as u64) * PER_BLOCK;
                for (j, slot) in block[..(PER_BLOCK as usize) * SLOT]
                    .chunks_exact(SLOT)
                    .enumerate()
                {
                    tags[(first + j as u64) as usize].store(tag_of_slot(slot), Ordering::Relaxed);
                }
            }
            b += n;
        }
        Ok(Some(Table {
            file,
            path,
            generation,
            slots,
            tags,
            used: AtomicU64::new(used),
            dirty: AtomicBool::new(false),
        }))
    }

    fn write_header(&self) -> Result<(), StoreError> {
        let mut h = [0u8; BLOCK as usize];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_be_bytes());
        h[12..20].copy_from_slice(&self.slots.to_be_bytes());
        h[20..28].copy_from_slice(&self.used.load(Ordering::Relaxed).to_be_bytes());
        self.file.write_all_at(&h, 0)?;
        Ok(())
    }

    /// Whether one more key would take it past three quarters of its slots.
    fn full(&self) -> bool {
        (self.used.load(Ordering::Relaxed) + 1) * 4 > self.slots * 3
    }

    /// Probes for `digest`: where it is or would go, and the first released key's slot the
    /// probe passed (a new key may take it). It walks the tags from the digest's home slot and
    /// reads from the file only the slots whose tag may be the digest's, or a released key's.
    fn probe(&self, digest: &[u8]) -> Result<(Probe, Option<u64>), StoreError> {
        let home = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default()) % self.slots;
        let want = tag(digest);
        let (mut at, mut released) = (home, None);
        for _ in 0..self.slots {
            let t = self.tags[at as usize].load(Ordering::Acquire);
            if t == EMPTY {
                return Ok((Probe::Vacant(at), released));
            }
            if t == want || t == RELEASED {
                let mut slot = [0u8; SLOT];
                self.file.read_exact_at(&mut slot, Table::offset(at))?;
                let event = u128::from_be_bytes(slot[DIGEST..].try_into().unwrap_or_default());
                if slot[..DIGEST] == *digest {
                    return Ok((Probe::Found(at, event), released));
                }
                if event == 0 {
                    if slot[..DIGEST].iter().all(|b| *b == 0) {
                        return Ok((Probe::Vacant(at), released));
                    }
                    released.get_or_insert(at);
                }
            }
            at = (at + 1) % self.slots;
        }
        // Never at three quarters full; a table that says otherwise is not ours.
        Err(StoreError::Corrupt(format!(
            "idempotency table {} has no empty slot",
            self.path.display()
        )))
    }

    /// Where slot `slot` is in the file.
    fn offset(slot: u64) -> u64 {
        BLOCK + slot / PER_BLOCK * BLOCK + slot % PER_BLOCK * SLOT as u64
    }

    /// Writes a slot, then its tag (a probe that sees the tag finds the slot written).
    fn write_slot(&self, slot: u64, digest: &[u8], event: u128) -> Result<(), StoreError> {
        let mut s = [0u8; SLOT];
        s[..DIGEST].copy_from_slice(digest);
        s[DIGEST..].copy_from_slice(&event.to_be_bytes());
        self.file.write_all_at(&s, Table::offset(slot))?;
        self.dirty.store(true, Ordering::Release);
        self.tags[slot as usize].store(tag_of_slot(&s), Ordering::Release);
        Ok(())
    }

    /// Writes the ULID of the slot that holds `digest`, then its tag.
    fn write_event(&self, slot: u64, digest: &[u8], event: u128) -> Result<(), StoreError> {
        let at = Table::offset(slot) + DIGEST as u64;
        self.file.write_all_at(&event.to_be_bytes(), at)?;
        self.dirty.store(true, Ordering::Release);
        let t = if event == 0 { RELEASED } else { tag(digest) };
        self.tags[slot as usize].store(t, Ordering::Release);
        Ok(())
    }

    /// Writes its count and syncs it, if it changed since the last sync.
    fn sync(&self) -> Result<(), StoreError> {
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        let synced = self
            .write_header()
            .and_then(|()| Ok(self.file.sync_data()?));
        if synced.is_err() {
            self.dirty.store(true, Ordering::Release);
        }
        synced
    }
}

impl Keys {
    /// Opens (or creates) the tables in `dir`.
    pub fn open(dir: &Path) -> Result<Keys, StoreError> {
        super::files::create_private_dir(dir)?;
        let mut days: BTreeMap<u32, Vec<Arc<Table>>> = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(WATERMARK_NEW) {
                std::fs::remove_file(entry.path())?;
                continue;
            }
            let Some((day, generation)) = name
                .split_once('-')
                .and_then(|(d, g)| Some((d.parse::<u32>().ok()?, g.parse::<u32>().ok()?)))
            else {
                continue;
            };
            match Table::open(entry.path(), generation)? {
                Some(t) => days.entry(day).or_default().push(Arc::new(t)),
                None => {
                    tracing::warn!(file = %entry.path().display(), "removing an idempotency table a crash cut short (its keys are written again from the log)");
                    std::fs::remove_file(entry.path())?;
                }
            }
        }
        for tables in days.values_mut() {
            tables.sort_by_key(|t| t.generation);
        }
        let recorded = match std::fs::read(dir.join(WATERMARK)) {
            Ok(v) => u128::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("idempotency keys' watermark".into()))?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e.into()),
        };
        Ok(Keys {
            dir: dir.to_path_buf(),
            dir_file: File::open(dir)?,
            days: RwLock::new(days),
            names_changed: AtomicBool::new(false),
            marks: Mutex::new(Marks {
                through: Some(recorded),
                recorded,
            }),
            writes: Mutex::new(()),
            checkpoints: Mutex::new(()),
            #[cfg(test)]
            faults: KeyFaults::default(),
        })
    }

    fn lock_marks(&self) -> MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_writes(&self) -> MutexGuard<'_, ()> {
        self.writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The day's tables, oldest first (a copy of the list: probes read without the lock).
    fn tables(&self, day: u32) -> Vec<Arc<Table>> {
        let days = self.days.read().unwrap_or_else(|e| e.into_inner());
        days.get(&day).cloned().unwrap_or_default()
    }

    /// The event that claimed the key on the key's day, if any.
    pub fn get(&self, row: &KeyRow) -> Result<Option<u128>, StoreError> {
        let (day, digest) = split(row);
        for t in self.tables(day).iter().rev() {
            if let (Probe::Found(_, event), _) = t.probe(digest)? {
                return Ok((event != 0).then_some(event));
            }
        }
        Ok(None)
    }

    /// Adds durable events' keys; `through` is the last of those events ([`Keys::write`], then
    /// [`Keys::mark`]).
    pub fn add(&self, rows: &[(KeyRow, u128)], through: u128) -> Result<(), StoreError> {
        self.write(rows)?;
        self.mark(through);
        Ok(())
    }

    /// Writes keys (not synced, see the module's doc). The committer writes a cycle's keys
    /// before the cycle's fsync, so a key that cannot be written fails the cycle (`503`, nothing
    /// stored) instead of leaving an acknowledged event without its key; keys of a cycle that
    /// fails name events that do not exist, which claim nothing. If it fails, the watermark
    /// stays where it is from then on.
    pub fn write(&self, rows: &[(KeyRow, u128)]) -> Result<(), StoreError> {
        let mut marks = self.lock_marks();
        let changed = {
            let _writes = self.lock_writes();
            rows.iter()
                .try_for_each(|(k, e)| self.change(k, Change::Claim(*e)))
        };
        if changed.is_err() {
            marks.through = None;
        }
        changed
    }

    /// Every event up to `through` is durable and its key written ([`Keys::write`]): the next
    /// checkpoint may record it as the watermark.
    pub fn mark(&self, through: u128) {
        if let Some(w) = self.lock_marks().through.as_mut() {
            *w = (*w).max(through);
        }
    }

    /// Releases the keys that still name their events (a later event may have claimed a key
    /// anew): retention's, for the events it pruned.
    pub fn release(&self, rows: &[(KeyRow, u128)]) -> Result<(), StoreError> {
        let _writes = self.lock_writes();
        rows.iter()
            .try_for_each(|(k, e)| self.change(k, Change::Release(*e)))
    }

    /// Applies one change, under `writes`.
    fn change(&self, row: &KeyRow, change: Change) -> Result<(), StoreError> {
        let (day, digest) = split(row);
        let tables = self.tables(day);
        let (mut vacant, mut reuse) = (None, None);
        for (i, t) in tables.iter().enumerate().rev() {
            let (probe, released) = t.probe(digest)?;
            match probe {
                Probe::Found(slot, event) => {
                    return match change {
                        Change::Claim(e) => t.write_event(slot, digest, e),
                        Change::Release(e) if e == event && e != 0 => {
                            t.write_event(slot, digest, 0)
                        }
                        Change::Release(_) => Ok(()),
                    };
                }
                Probe::Vacant(slot) if i + 1 == tables.len() => vacant = Some(slot),
                Probe::Vacant(_) => {}
            }
            if let (None, Some(slot)) = (&reuse, released) {
                reuse = Some((t.clone(), slot));
            }
        }
        let Change::Claim(event) = change else {
            return Ok(());
        };
        #[cfg(test)]
        KeyFaults::check(&self.faults.write, "key write")?;
        // A released key's slot first: it is counted as used already.
        if let Some((t, slot)) = reuse {
            return t.write_slot(slot, digest, event);
        }
        let (table, slot) = match (tables.last(), vacant) {
            (Some(t), Some(slot)) if !t.full() => (t.clone(), slot),
            _ => {
                let t = self.new_table(day, &tables)?;
                let (Probe::Vacant(slot), _) = t.probe(digest)? else {
                    return Err(StoreError::Corrupt("a new idempotency table".into()));
                };
                (t, slot)
            }
        };
        table.write_slot(slot, digest, event)?;
        table.used.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The day's next table: half as large as its tables together, or for its first one and a
    /// half times the day before's keys; [`MIN_BLOCKS`] at least.
    fn new_table(&self, day: u32, tables: &[Arc<Table>]) -> Result<Arc<Table>, StoreError> {
        let slots = if tables.is_empty() {
            let before = self.tables(day.wrapping_sub(1));
            before
                .iter()
                .map(|t| t.used.load(Ordering::Relaxed))
                .sum::<u64>()
                * 3
                / 2
        } else {
            tables.iter().map(|t| t.slots).sum::<u64>() / 2
        };
        let blocks = slots.div_ceil(PER_BLOCK).max(MIN_BLOCKS);
        let generation = tables.last().map_or(0, |t| t.generation + 1);
        let t = Arc::new(Table::create(
            &self.dir,
            day,
            generation,
            blocks * PER_BLOCK,
        )?);
        self.names_changed.store(true, Ordering::Release);
        let mut days = self.days.write().unwrap_or_else(|e| e.into_inner());
        days.entry(day).or_default().push(t.clone());
        Ok(t)
    }

    /// Syncs the keys and then records the watermark they reached.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let _one = self.checkpoints.lock().unwrap_or_else(|e| e.into_inner());
        let w = match *self.lock_marks() {
            Marks {
                through: Some(w),
                recorded,
            } if w != recorded => w,
            _ => return Ok(()),
        };
        self.sync()?;
        let recorded = self.record(w);
        match &recorded {
            Ok(()) => self.lock_marks().recorded = w,
            // A watermark file or directory whose sync failed is as doubtful as a table.
            Err(_) => self.lock_marks().through = None,
        }
        recorded
    }

    /// Replaces the watermark file with `w`, durably.
    fn record(&self, w: u128) -> Result<(), StoreError> {
        let n = WATERMARK_WRITES.fetch_add(1, Ordering::Relaxed);
        let new = self.dir.join(format!("{WATERMARK_NEW}.{n}"));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&new)?;
        f.write_all(&w.to_be_bytes())?;
        f.sync_data()?;
        std::fs::rename(&new, self.dir.join(WATERMARK))?;
        self.dir_file.sync_all()?;
        Ok(())
    }

    /// Every table (a copy of the list, to work on them without the lock).
    fn all_tables(&self) -> Vec<Arc<Table>> {
        let days = self.days.read().unwrap_or_else(|e| e.into_inner());
        days.values().flatten().cloned().collect()
    }

    /// Syncs every table written since its last sync, and the directory if a table was made.
    ///
    /// After a failed fsync Linux may report the next one as a success without the pages having
    /// reached the disk, so a failure stops the watermark for the rest of the process: the
    /// next open rebuilds the keys from the last one recorded.
    pub fn sync(&self) -> Result<(), StoreError> {
        let synced = self.sync_files();
        if synced.is_err() {
            self.lock_marks().through = None;
        }
        synced
    }

    fn sync_files(&self) -> Result<(), StoreError> {
        for t in &self.all_tables() {
            #[cfg(test)]
            if t.dirty.load(Ordering::Acquire) {
                KeyFaults::check(&self.faults.sync, "table sync")?;
            }
            t.sync()?;
        }
        if self.names_changed.swap(false, Ordering::AcqRel) {
            if let Err(e) = self.dir_file.sync_all() {
                self.names_changed.store(true, Ordering::Release);
                return Err(e.into());
            }
        }
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
            if key::idempotency_day(ids::ulid_ms(event)) >= oldest {
                rows.extend(event_rows(&meta, event));
            }
        }
        let n = rows.len();
        self.add(&rows, last)?;
        self.checkpoint()?;
        Ok(n)
    }

    /// Removes up to `max` tables of keys claimed before `day` (in time order). Returns how
    /// many.
    pub fn expire_before(&self, day: u32, max: usize) -> Result<usize, StoreError> {
        let _writes = self.lock_writes();
        let mut days = self.days.write().unwrap_or_else(|e| e.into_inner());
        let mut removed = 0;
        while removed < max {
            let Some(mut entry) = days.first_entry().filter(|e| *e.key() < day) else {
                break;
            };
            let tables = entry.get_mut();
            while removed < max {
                let Some(t) = tables.first() else {
                    break;
                };
                std::fs::remove_file(&t.path)?;
                tables.remove(0);
                removed += 1;
            }
            if tables.is_empty() {
                entry.remove();
            }
        }
        Ok(removed)
    }

    /// The watermark last recorded: every key of the events up to it is synced, so the
    /// rebuild at open never needs their rows (folding leaves the events after it alone).
    pub fn recorded(&self) -> u128 {
        self.lock_marks().recorded
    }

    /// Bytes the tables take on disk (allocated: a table is written sparsely).
    pub fn size_on_disk(&self) -> u64 {
        let days = self.days.read().unwrap_or_else(|e| e.into_inner());
        days.values()
            .flatten()
            .filter_map(|t| t.file.metadata().ok())
            .map(|m| m.blocks() * 512)
            .sum()
    }

    /// How many keys (released ones not counted; tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let mut n = 0;
        for t in self.all_tables() {
            let mut buf = vec![0u8; (t.slots / PER_BLOCK * BLOCK) as usize];
            t.file.read_exact_at(&mut buf, BLOCK).unwrap();
            n += buf
                .chunks_exact(BLOCK as usize)
                .flat_map(|b| b[..(PER_BLOCK as usize) * SLOT].chunks_exact(SLOT))
                .filter(|s| s[DIGEST..].iter().any(|b| *b != 0))
                .count();
        }
        n
    }

    /// Every table: (day, generation, slots, slots used) (tests).
    #[cfg(test)]
    pub fn table_sizes(&self) -> Vec<(u32, u32, u64, u64)> {
        let days = self.days.read().unwrap_or_else(|e| e.into_inner());
        days.iter()
            .flat_map(|(day, tables)| {
                tables
                    .iter()
                    .map(|t| (*day, t.generation, t.slots, t.used.load(Ordering::Relaxed)))
            })
            .collect()
    }
}

/// Gives a new table its blocks now (`fallocate`), so that writing a slot never needs a block
/// the disk may no longer have; a sparse file where the filesystem cannot preallocate.
fn allocate(file: &File, len: u64) -> Result<(), StoreError> {
    use rustix::io::Errno;
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(()),
        Err(Errno::OPNOTSUPP | Errno::NOSYS) => Ok(file.set_len(len)?),
        Err(e) => Err(std::io::Error::from(e).into()),
    }
}

/// A key's day and digest.
fn split(row: &KeyRow) -> (u32, &[u8]) {
    let (day, digest) = row.split_at(4);
    (
        u32::from_be_bytes(day.try_into().unwrap_or_default()),
        digest,
    )
}
