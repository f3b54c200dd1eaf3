//! Undo records: a failed commit's undo kept outside sled until it is applied.
//!
//! A cycle whose flush or fsync fails answers `503` to its requests, so its rows must not
//! outlive it: the committer puts back what the cycle replaced. But the failure that broke the
//! flush (a full disk, a file-size limit) usually breaks the undo's flush too, and part of the
//! failed flush may have reached the data file already: sled would then recover the cycle's
//! batch at the next start, and a refused request would turn out stored (a retry of it answered
//! `duplicate`).
//!
//! So before it tries the undo in sled, the committer writes it to a small file of its own in
//! `undo/` (written whole, fsynced, renamed into place). The next start applies every such file
//! before it reads anything else, newest first, and removes it once sled has the result on disk.
//! Each record names a key, the digest of the value the failed cycle wrote there (or that it
//! removed the key) and the value to put back: a key is put back only while it still holds what
//! the cycle wrote, so a record never undoes a later write that did reach the disk.
//!
//! A file is kept past its cycle only when the undo's own flush or fsync failed, and any failed
//! sync fails the store for good (see `health`): nothing more is written or attempted in that
//! process, so no later change (a delivery of a candidate the undo put back) can be undone by
//! the file at the next start.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use sled::IVec;

use super::{files, StoreError};

/// The directory of pending undo records, in the data directory.
pub const UNDO_DIR: &str = "undo";

const MAGIC: &[u8; 12] = b"herald-undo1";

/// One key to put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Vec<u8>,
    /// The SHA-256 of what the failed cycle left in the key (`None`: it removed the key).
    pub written: Option<[u8; 32]>,
    /// What the key held before the cycle (`None`: nothing).
    pub before: Option<Vec<u8>>,
}

impl Record {
    /// The record of `key`, which the failed cycle left holding `now` and held `before` it.
    pub fn new(key: &[u8], now: Option<&[u8]>, before: Option<&IVec>) -> Record {
        Record {
            key: key.to_vec(),
            written: now.map(|v| Sha256::digest(v).into()),
            before: before.map(|v| v.to_vec()),
        }
    }

    /// Whether the key still holds what the failed cycle left in it.
    fn still_written(&self, current: Option<&[u8]>) -> bool {
        match (current, &self.written) {
            (None, None) => true,
            (Some(v), Some(d)) => <[u8; 32]>::from(Sha256::digest(v)) == *d,
            _ => false,
        }
    }
}

/// Writes `records` as a new undo file in `data/undo/`, durably (file and directory synced);
/// returns its path.
pub fn write(data: &Path, records: &[Record]) -> std::io::Result<PathBuf> {
    let dir = data.join(UNDO_DIR);
    files::create_private_dir(&dir)?;
    let mut body = Vec::with_capacity(64 + records.len() * 64);
    body.extend_from_slice(MAGIC);
    body.extend_from_slice(&(records.len() as u32).to_be_bytes());
    for r in records {
        put_bytes(&mut body, &r.key);
        match &r.written {
            Some(d) => {
                body.push(1);
                body.extend_from_slice(d);
            }
            None => body.push(0),
        }
        match &r.before {
            Some(v) => {
                body.push(1);
                put_bytes(&mut body, v);
            }
            None => body.push(0),
        }
    }
    let digest = Sha256::digest(&body);
    body.extend_from_slice(&digest);
    // Names sort in the order they were written (nanoseconds, then a counter for ties).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut n = 0u32;
    let path = loop {
        let p = dir.join(format!("{nanos:024}-{n:04}"));
        if !p.exists() {
            break p;
        }
        n += 1;
    };
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&body)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    File::open(&dir)?.sync_all()?;
    Ok(path)
}

/// Removes an undo file whose undo reached sled's file (best effort: a file left behind finds
/// its keys changed or already put back, and puts back nothing else).
pub fn discard(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        tracing::warn!(error = %e, file = %path.display(), "cannot remove an applied undo record");
    }
}

/// The pending undo files of `data`, newest first (unfinished `.tmp` files are removed: their
/// cycle's requests were never answered).
pub fn pending(data: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let dir = data.join(UNDO_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|x| x == "tmp") {
            std::fs::remove_file(&path)?;
        } else {
            found.push(path);
        }
    }
    found.sort();
    found.reverse();
    Ok(found)
}

/// Puts back, in `log`, each key of the undo file at `path` that still holds what the failed
/// cycle wrote. Returns how many keys it put back.
pub fn apply(path: &Path, log: &sled::Tree) -> Result<usize, StoreError> {
    let records = read(path)?;
    let mut batch = sled::Batch::default();
    let mut put_back = 0;
    for r in records {
        let current = log.get(&r.key)?;
        if !r.still_written(current.as_deref()) {
            continue;
        }
        match r.before {
            Some(v) => batch.insert(r.key, v),
            None => batch.remove(r.key),
        }
        put_back += 1;
    }
    log.apply_batch(batch)?;
    Ok(put_back)
}

fn read(path: &Path) -> Result<Vec<Record>, StoreError> {
    let corrupt = |why: &str| {
        StoreError::Corrupt(format!(
            "undo record {}: {why}; it holds the undo of a commit that failed, so herald does \
             not start without it (restore it from a backup of the data directory)",
            path.display()
        ))
    };
    let data = std::fs::read(path)?;
    if data.len() < MAGIC.len() + 4 + 32 || &data[..MAGIC.len()] != MAGIC {
        return Err(corrupt("not an undo record"));
    }
    let (body, digest) = data.split_at(data.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return Err(corrupt("its checksum does not match"));
    }
    let mut r = Reader {
        data: &body[MAGIC.len()..],
    };
    let count = r.u32().ok_or_else(|| corrupt("truncated"))?;
    let mut records = Vec::with_capacity(count.min(1 << 20) as usize);
    for _ in 0..count {
        let record = (|| {
            let key = r.bytes()?.to_vec();
            let written = match r.u8()? {
                0 => None,
                _ => Some(r.take(32)?.try_into().ok()?),
            };
            let before = match r.u8()? {
                0 => None,
                _ => Some(r.bytes()?.to_vec()),
            };
            Some(Record {
                key,
                written,
                before,
            })
        })()
        .ok_or_else(|| corrupt("truncated"))?;
        records.push(record);
    }
    Ok(records)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.data.len() < n {
            return None;
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_puts_back_only_keys_that_still_hold_the_failed_write() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().temporary(true).open().unwrap();
        let log = db.open_tree("log").unwrap();
        log.insert(b"new", b"cycle".as_slice()).unwrap();
        log.insert(b"overwritten", b"cycle".as_slice()).unwrap();
        log.insert(b"later", b"a later write".as_slice()).unwrap();
        let old = IVec::from(b"old".as_slice());
        let records = vec![
            Record::new(b"new", Some(b"cycle"), None),
            Record::new(b"overwritten", Some(b"cycle"), Some(&old)),
            Record::new(b"later", Some(b"cycle"), Some(&old)),
            Record::new(b"removed", None, Some(&old)),
        ];
        let path = write(dir.path(), &records).unwrap();
        assert_eq!(pending(dir.path()).unwrap(), vec![path.clone()]);
        assert_eq!(read(&path).unwrap(), records);
        assert_eq!(apply(&path, &log).unwrap(), 3);
        assert_eq!(log.get(b"new").unwrap(), None);
        assert_eq!(log.get(b"overwritten").unwrap(), Some(old.clone()));
        assert_eq!(
            log.get(b"later").unwrap().as_deref(),
            Some(b"a later write".as_slice()),
            "a key changed since the failed cycle is left alone"
        );
        assert_eq!(log.get(b"removed").unwrap(), Some(old));
    }

    #[test]
    fn a_damaged_record_is_refused_and_unfinished_ones_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &[Record::new(b"k", Some(b"v"), None)]).unwrap();
        std::fs::write(path.with_extension("tmp"), b"half").unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 40] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(pending(dir.path()).unwrap(), vec![path.clone()]);
        let db = sled::Config::new().temporary(true).open().unwrap();
        let err = apply(&path, &db.open_tree("log").unwrap()).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
    }
}
