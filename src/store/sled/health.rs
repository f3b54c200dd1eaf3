//! Whether the store may still acknowledge writes (docs/operations.md, "When storage fails").
//!
//! Two kinds of failure, told apart on purpose:
//! - a commit whose writes failed is answered `503` and the next commit may succeed again
//!   (the store is unhealthy only until then);
//! - a failed sync (sled's data file, the idempotency tables, a directory), or a data directory
//!   that `storage.path` no longer names (deleted or replaced under a running herald), is for
//!   good: after a failed fsync Linux may report the next one as a success without the pages
//!   having reached the disk, and a deleted directory's files are unlinked, so everything
//!   written to them is gone at the next start. From then on every commit and every sync is
//!   refused, `/healthz` answers `503`, and the server stops after its grace (`app.rs`).
//!
//! Checking the directory costs one `stat` per commit cycle (next to an fsync of 3–4 ms).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::StoreError;

/// The store's health, shared by the committer, the checkpoints and `/healthz`.
pub(super) struct Health {
    /// The last commit's writes succeeded.
    last_commit_ok: AtomicBool,
    /// Why the store is unusable for the rest of this process, once it is.
    failed: OnceLock<String>,
    /// The data directory as opened.
    path: PathBuf,
    /// Its device and inode when it was opened: what `path` must still name.
    place: (u64, u64),
}

impl Health {
    /// Remembers which directory `path` names now.
    pub(super) fn new(path: &Path) -> Result<Health, StoreError> {
        let m = std::fs::metadata(path)?;
        Ok(Health {
            last_commit_ok: AtomicBool::new(true),
            failed: OnceLock::new(),
            path: path.to_path_buf(),
            place: (m.dev(), m.ino()),
        })
    }

    pub(super) fn set_last_commit(&self, ok: bool) {
        self.last_commit_ok.store(ok, Ordering::Relaxed);
    }

    /// Marks the store unusable for the rest of this process (the first reason is kept). When
    /// the data directory is gone or replaced, that is the reason given: a sync failing on a
    /// deleted directory is its consequence, not its cause.
    pub(super) fn fail_for_good(&self, why: &dyn std::fmt::Display) {
        let mut first = false;
        self.failed.get_or_init(|| {
            first = true;
            self.moved().unwrap_or_else(|| why.to_string())
        });
        if first {
            tracing::error!(
                reason = %why,
                "storage can no longer be trusted: ingest and /healthz answer 503 from now on"
            );
        }
    }

    /// `Ok` unless the store failed for good (no look at the directory: for the hot paths,
    /// an attempt's record; every commit and `/healthz` look at it with [`Health::usable`]).
    pub(super) fn not_failed(&self) -> Result<(), StoreError> {
        match self.failed.get() {
            Some(why) => Err(StoreError::Unusable(why.clone())),
            None => Ok(()),
        }
    }

    /// `Ok` while the store may acknowledge writes: nothing failed for good, and `path` still
    /// names the directory that was opened (checked now; a change fails the store for good).
    pub(super) fn usable(&self) -> Result<(), StoreError> {
        self.not_failed()?;
        if let Some(why) = self.moved() {
            self.fail_for_good(&why);
            return self.not_failed();
        }
        Ok(())
    }

    /// Why `path` no longer names the directory that was opened, if it does not.
    fn moved(&self) -> Option<String> {
        match std::fs::metadata(&self.path) {
            Err(e) => Some(format!(
                "the data directory {} is gone ({e})",
                self.path.display()
            )),
            Ok(m) if (m.dev(), m.ino()) != self.place => Some(format!(
                "{} names another directory than the one herald opened",
                self.path.display()
            )),
            Ok(_) => None,
        }
    }

    /// True while the last commit succeeded and the store is [`usable`](Health::usable).
    pub(super) fn healthy(&self) -> bool {
        self.last_commit_ok.load(Ordering::Relaxed) && self.usable().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sync that fails because the directory was deleted names the deletion as the reason,
    /// whichever noticed first: the sync or the commit's look at the directory.
    #[test]
    fn a_failure_after_the_directory_is_gone_names_it() {
        let dir = std::env::temp_dir().join(format!("herald-health-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let health = Health::new(&dir).unwrap();
        assert!(health.usable().is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        health.fail_for_good(&"cannot sync the idempotency keys: No such file or directory");
        let why = health.not_failed().unwrap_err().to_string();
        assert!(why.contains("is gone"), "{why}");
    }
}
