//! Idempotency keys, in a sled database of their own (`keys/` in the data directory).
//!
//! A key row is (claim day, digest of account and key) → the first event's ULID: 36 bytes, a
//! row per key. They live apart from the log because their lifetime is not the log's: sled
//! reuses a segment of its file only once at most half of it is live, and key rows that stay
//! for their day among event rows that retention frees (or event rows kept for 30 days among
//! key rows that expire in two) keep whole segments from being reused. On their own, a day's
//! keys go together and free their segments together.
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

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use super::codec;
use super::key;
use super::StoreError;
use crate::clock::Millis;
use crate::ids;

/// A key row's key: the day it was claimed ([`key::idempotency_day`]), then the digest of
/// (account, key).
pub type KeyRow = [u8; 20];

const WATERMARK: &[u8] = b"watermark";

pub(super) struct Keys {
    db: sled::Db,
    /// The watermark (and nothing else).
    meta: sled::Tree,
    data_file: File,
    marks: Mutex<Marks>,
}

struct Marks {
    /// The last event whose key (if it has one) is in `db`; `None` once an insert failed.
    through: Option<u128>,
    /// The watermark last recorded.
    recorded: u128,
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
        })
    }

    fn lock_marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The event that claimed the key on the row's day, if any.
    pub fn get(&self, row: &KeyRow) -> Result<Option<u128>, StoreError> {
        let Some(v) = self.db.get(row)? else {
            return Ok(None);
        };
        Ok(Some(u128::from_be_bytes(v.as_ref().try_into().map_err(
            |_| StoreError::Corrupt("idempotency record".into()),
        )?)))
    }

    /// Adds durable events' keys; `through` is the last of those events. Not synced (see the
    /// module's doc). If it fails, the watermark stays where it is from then on.
    pub fn add(&self, rows: &[(KeyRow, u128)], through: u128) -> Result<(), StoreError> {
        let mut marks = self.lock_marks();
        let added = if rows.is_empty() {
            Ok(())
        } else {
            let mut batch = sled::Batch::default();
            for (k, event) in rows {
                batch.insert(&k[..], &event.to_be_bytes()[..]);
            }
            self.db.apply_batch(batch)
        };
        match added {
            Ok(()) => {
                if let Some(w) = marks.through.as_mut() {
                    *w = (*w).max(through);
                }
                Ok(())
            }
            Err(e) => {
                marks.through = None;
                Err(e.into())
            }
        }
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

    /// Removes the key row if it still names `event` (a later event may have claimed the key
    /// anew).
    pub fn release(&self, row: &KeyRow, event: u128) -> Result<(), StoreError> {
        let own = event.to_be_bytes();
        let _ = self
            .db
            .compare_and_swap(&row[..], Some(&own[..]), None as Option<&[u8]>)?;
        Ok(())
    }

    /// Removes up to `max` keys claimed before `day` (in time order). Returns how many.
    pub fn expire_before(&self, day: u32, max: usize) -> Result<usize, StoreError> {
        let mut removed = 0;
        for k in self.db.range(day_start(0)..day_start(day)).keys().take(max) {
            self.db.remove(k?)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// The watermark last recorded: every key of the events up to it is synced, so the
    /// rebuild at open never needs their rows (folding leaves the events after it alone).
    pub fn recorded(&self) -> u128 {
        self.lock_marks().recorded
    }

    /// Every key row (tests and the migration's count).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.db.len()
    }

    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

/// The first row of `day` (days sort in time order).
fn day_start(day: u32) -> [u8; 4] {
    day.to_be_bytes()
}
