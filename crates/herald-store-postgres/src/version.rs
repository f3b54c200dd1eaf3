//! The directory's version (docs/cluster.md, "Endpoints and plans"): a node must act on every
//! change of endpoints and plans committed before a request began, though other nodes' change
//! notices arrive a moment after their commit.
//!
//! Every change bumps `directory_version` in its own transaction. A node remembers the version
//! its copy reflects at least: the one it read before its last full load, or, after a change
//! of its own, that change's version when it directly follows. Ingest writes only while the
//! database's version is the one the request's fan-out was made with (one more lookup in the
//! same statement): otherwise nothing is written, the node reloads and fans out again. Reads
//! that consult the copy ask for the version first and reload a copy that is behind.

use std::sync::atomic::Ordering;

use super::PgStore;
use herald_store::StoreError;

/// Bumps the directory's version; returns the new one. In the transaction of the change.
pub(super) async fn bump(tx: &tokio_postgres::Transaction<'_>) -> Result<i64, StoreError> {
    Ok(tx
        .query_one(
            "UPDATE directory_version SET version = version + 1 RETURNING version",
            &[],
        )
        .await?
        .get(0))
}

impl PgStore {
    /// The version this node's copy reflects at least (take it before reading the copy).
    pub fn directory_mark(&self) -> i64 {
        self.directory_version.load(Ordering::Acquire)
    }

    /// A change of this node's own, committed as `version` and applied to its copy: the copy
    /// reflects it if nothing came between.
    pub(super) fn saw_own_change(&self, version: i64) {
        let _ = self.directory_version.compare_exchange(
            version - 1,
            version,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Reloads the copy unless a reload that reached `at_least` ran meanwhile (requests that
    /// find the copy behind together reload it once).
    pub(super) async fn reload_directory(&self, at_least: i64) -> Result<(), StoreError> {
        let _one = self.reloading.lock().await;
        if self.directory_mark() >= at_least {
            return Ok(());
        }
        self.reload().await
    }

    pub(super) async fn directory_version_now(&self) -> Result<i64, StoreError> {
        Ok(self
            .db
            .client()
            .await?
            .query_one("SELECT version FROM directory_version", &[])
            .await?
            .get(0))
    }

    /// After a full load of the copy that began at `version`.
    pub(super) fn loaded_directory(&self, version: i64) {
        self.directory_version.fetch_max(version, Ordering::AcqRel);
    }
}
