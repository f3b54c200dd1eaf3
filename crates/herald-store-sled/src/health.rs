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
//! A `stat` of the directory that fails otherwise than by its absence (`EACCES`, `EIO`, an NFS
//! `ESTALE`) may pass: that commit answers `503` (nothing acknowledged: the directory could not
//! be checked), and the store fails for good only after [`TRANSIENT_TRIES`] such failures in a
//! row, each at least [`TRANSIENT_APART`] after the one before, none answering between them.
//!
//! Checking the directory costs one `stat` per commit cycle (next to an fsync of 3–4 ms).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::SledStore;
use super::StoreError;
use herald_core::clock::Millis;
use herald_core::ids;
use herald_store::contract::Vitals;
use herald_store::Stats;
use herald_store::{EndpointWaiting, Node, NO_LANE};
use std::future::ready;
use std::future::Future;

/// Failed `stat`s in a row, otherwise than by absence, that fail the store for good.
const TRANSIENT_TRIES: u32 = 3;
/// How far apart those failures must be to count: three span at least 200 ms.
const TRANSIENT_APART: Duration = Duration::from_millis(100);

/// How the directory is looked at: its device and inode (a test injects failures).
type Stat = Box<dyn Fn(&Path) -> io::Result<(u64, u64)> + Send + Sync>;

fn stat(path: &Path) -> io::Result<(u64, u64)> {
    std::fs::metadata(path).map(|m| (m.dev(), m.ino()))
}

/// What one look at the directory found.
enum Look {
    /// The directory that was opened.
    Same,
    /// Gone or replaced: why.
    Moved(String),
    /// The `stat` failed otherwise: maybe for a moment.
    Failed(io::Error),
}

/// The failed looks counted in a row: how many, and when the last counted one was.
#[derive(Default)]
struct Failing {
    count: u32,
    last: Option<Instant>,
}

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
    stat: Stat,
    /// The failed looks in a row (otherwise than by absence).
    failing: Mutex<Failing>,
}

impl Health {
    /// Remembers which directory `path` names now.
    pub(super) fn new(path: &Path) -> Result<Health, StoreError> {
        Health::with_stat(path, Box::new(stat))
    }

    fn with_stat(path: &Path, stat: Stat) -> Result<Health, StoreError> {
        Ok(Health {
            last_commit_ok: AtomicBool::new(true),
            failed: OnceLock::new(),
            path: path.to_path_buf(),
            place: stat(path)?,
            stat,
            failing: Mutex::default(),
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
            match self.look() {
                Look::Moved(moved) => moved,
                Look::Same | Look::Failed(_) => why.to_string(),
            }
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
    /// names the directory that was opened (checked now; a change fails the store for good; a
    /// `stat` that fails otherwise answers `Err` for now, and for good once it failed
    /// [`TRANSIENT_TRIES`] times in a row, [`TRANSIENT_APART`] apart).
    pub(super) fn usable(&self) -> Result<(), StoreError> {
        self.usable_at(Instant::now())
    }

    fn usable_at(&self, now: Instant) -> Result<(), StoreError> {
        self.not_failed()?;
        let e = match self.look() {
            Look::Same => {
                *self.lock_failing() = Failing::default();
                return Ok(());
            }
            Look::Moved(why) => {
                self.fail_for_good(&why);
                return self.not_failed();
            }
            Look::Failed(e) => e,
        };
        let count = {
            let mut failing = self.lock_failing();
            if failing.last.is_none_or(|t| now >= t + TRANSIENT_APART) {
                failing.count += 1;
                failing.last = Some(now);
            }
            failing.count
        };
        if count >= TRANSIENT_TRIES {
            self.fail_for_good(&format!(
                "cannot look at the data directory {} ({e}; {count} tries {} ms apart)",
                self.path.display(),
                TRANSIENT_APART.as_millis()
            ));
            return self.not_failed();
        }
        tracing::warn!(
            error = %e,
            tries = count,
            "cannot look at the data directory; answering 503 until it answers"
        );
        Err(StoreError::Io(std::sync::Arc::new(io::Error::new(
            e.kind(),
            format!(
                "cannot look at the data directory {}: {e}",
                self.path.display()
            ),
        ))))
    }

    fn lock_failing(&self) -> std::sync::MutexGuard<'_, Failing> {
        self.failing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `path` still names the directory that was opened. Gone means absent
    /// (`ENOENT`, or `ENOTDIR` for a part of the path): any other failure may pass.
    fn look(&self) -> Look {
        match (self.stat)(&self.path) {
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) =>
            {
                Look::Moved(format!(
                    "the data directory {} is gone ({e})",
                    self.path.display()
                ))
            }
            Err(e) => Look::Failed(e),
            Ok(place) if place != self.place => Look::Moved(format!(
                "{} names another directory than the one herald opened",
                self.path.display()
            )),
            Ok(_) => Look::Same,
        }
    }

    /// True while the last commit succeeded and the store is [`usable`](Health::usable).
    pub(super) fn healthy(&self) -> bool {
        self.last_commit_ok.load(Ordering::Relaxed) && self.usable().is_ok()
    }
}

impl Vitals for SledStore {
    fn kind(&self) -> &'static str {
        "sled"
    }

    fn healthy(&self) -> impl Future<Output = bool> + Send {
        ready(SledStore::healthy(self))
    }

    fn stats(&self) -> impl Future<Output = Result<Stats, StoreError>> + Send {
        ready(Ok(SledStore::stats(self).copy()))
    }

    fn due_summary(
        &self,
        now: Millis,
    ) -> impl Future<Output = Result<(usize, Option<Millis>), StoreError>> + Send {
        let due = self.due().waiting(now);
        let n = due.iter().map(|w| w.due + w.behind).sum::<u64>() as usize;
        ready(Ok((n, self.due().oldest())))
    }

    fn waiting_by_endpoint(
        &self,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<EndpointWaiting>, StoreError>> + Send {
        // A lane is its endpoint's ULID.
        let waiting = self
            .due()
            .waiting(now)
            .into_iter()
            .map(|w| EndpointWaiting {
                endpoint_id: (w.lane != NO_LANE).then(|| ids::format(ids::ENDPOINT, w.lane)),
                waiting: w.waiting,
                due: w.due,
                behind: w.behind,
            });
        ready(Ok(waiting.collect()))
    }

    fn nodes(
        &self,
    ) -> impl Future<Output = Result<Option<(String, Vec<Node>)>, StoreError>> + Send {
        ready(Ok(None))
    }

    fn size_on_disk(&self) -> impl Future<Output = u64> + Send {
        ready(SledStore::size_on_disk(self))
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

#[cfg(test)]
mod transient {
    use super::*;
    use std::sync::Arc;

    /// A health whose `stat` answers what `answers` holds now (the directory opened: (1, 2)).
    fn scripted(answers: &Arc<Mutex<io::Result<(u64, u64)>>>) -> Health {
        let now = answers.clone();
        Health::with_stat(
            Path::new("/var/lib/herald"),
            Box::new(move |_| match &*now.lock().unwrap() {
                Ok(place) => Ok(*place),
                Err(e) => Err(match e.raw_os_error() {
                    Some(errno) => io::Error::from_raw_os_error(errno),
                    None => io::Error::from(e.kind()),
                }),
            }),
        )
        .unwrap()
    }

    fn eio() -> io::Result<(u64, u64)> {
        Err(io::Error::from_raw_os_error(
            rustix::io::Errno::IO.raw_os_error(),
        ))
    }

    /// `EIO`, `EACCES` or `ESTALE` from `stat` answers `503` for that commit; the store goes on
    /// once the directory answers again.
    #[test]
    fn a_failed_stat_that_passes_answers_503_then_the_store_goes_on() {
        let answers = Arc::new(Mutex::new(Ok((1, 2))));
        let health = scripted(&answers);
        let t0 = Instant::now();
        assert!(health.usable_at(t0).is_ok());
        for errno in [
            rustix::io::Errno::IO,
            rustix::io::Errno::ACCESS,
            rustix::io::Errno::STALE,
        ] {
            *answers.lock().unwrap() = Err(io::Error::from_raw_os_error(errno.raw_os_error()));
            let e = health.usable_at(t0).unwrap_err();
            assert!(matches!(e, StoreError::Io(_)), "{e}");
            assert!(
                e.to_string().contains("cannot look at the data directory"),
                "{e}"
            );
            *answers.lock().unwrap() = Ok((1, 2));
            assert!(health.usable_at(t0 + TRANSIENT_APART).is_ok());
        }
        // Two failures 100 ms apart, an answer, two more: never three in a row.
        for at in [0, 100, 300, 400] {
            *answers.lock().unwrap() = eio();
            assert!(health.usable_at(t0 + Duration::from_millis(at)).is_err());
            if at == 100 {
                *answers.lock().unwrap() = Ok((1, 2));
                assert!(health.usable_at(t0 + Duration::from_millis(200)).is_ok());
            }
        }
        assert!(health.not_failed().is_ok());
    }

    /// Three failed stats 100 ms apart fail the store for good; failures closer together count
    /// once.
    #[test]
    fn three_failed_stats_100_ms_apart_fail_the_store_for_good() {
        let answers = Arc::new(Mutex::new(Ok((1, 2))));
        let health = scripted(&answers);
        let t0 = Instant::now();
        *answers.lock().unwrap() = eio();
        for at in [0, 10, 50, 99, 100, 150] {
            let e = health
                .usable_at(t0 + Duration::from_millis(at))
                .unwrap_err();
            assert!(matches!(e, StoreError::Io(_)), "at {at} ms: {e}");
        }
        assert!(health.not_failed().is_ok(), "two counted failures");
        let e = health
            .usable_at(t0 + Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(e, StoreError::Unusable(_)), "{e}");
        assert!(
            e.to_string()
                .contains("cannot look at the data directory /var/lib/herald")
                && e.to_string().contains("3 tries 100 ms apart"),
            "{e}"
        );
        // For good: the directory answering again changes nothing.
        *answers.lock().unwrap() = Ok((1, 2));
        assert!(matches!(
            health.usable_at(t0 + Duration::from_secs(1)),
            Err(StoreError::Unusable(_))
        ));
        assert!(!health.healthy());
    }

    /// A vanished or replaced directory still fails the store at the first look.
    #[test]
    fn a_vanished_or_replaced_directory_fails_at_once() {
        let t0 = Instant::now();
        for (answer, says) in [
            (Err(io::Error::from(io::ErrorKind::NotFound)), "is gone"),
            (
                Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::NOTDIR.raw_os_error(),
                )),
                "is gone",
            ),
            (Ok((1, 3)), "names another directory"),
        ] {
            let answers = Arc::new(Mutex::new(Ok((1, 2))));
            let health = scripted(&answers);
            *answers.lock().unwrap() = answer;
            let e = health.usable_at(t0).unwrap_err();
            assert!(matches!(e, StoreError::Unusable(_)), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
