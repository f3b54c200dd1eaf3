//! A node's handle on the cluster's database: [`PgStore`] opens it (migrating the schema and
//! registering the node), and carries what every query needs: the pool, this node's id, the
//! clock and the lease. Ingest, the delivery queue and quotas are in their own files.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use super::ingest::{Committer, Job};
use super::{migrate, Database, DbError};
use crate::clock::{Clock, Millis};
use crate::config::Config;
use crate::store::directory::Directory;
use crate::store::StoreError;

impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        StoreError::Database(e.to_string())
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        DbError::from(e).into()
    }
}

/// Cluster mode's store: one per node.
pub struct PgStore {
    pub(super) db: Database,
    /// This node's id: stamps its leases (`deliveries.leased_by`) and its `nodes` row.
    pub(super) node: String,
    /// The machine's name, as the node list shows it.
    pub(super) name: String,
    pub(super) clock: Arc<dyn Clock>,
    /// `storage.postgres.lease` in milliseconds.
    pub(super) lease_ms: Millis,
    /// The committer tasks' queue ([`super::ingest`]).
    pub(super) ingest: mpsc::Sender<Job>,
    /// Woken when this or another node may have made work due ([`super::wake`]).
    pub(super) wake: Arc<Notify>,
    /// Every endpoint and synced plan, kept in step with the other nodes
    /// ([`super::endpoints`], [`super::accounts`]).
    pub(super) directory: Directory,
    /// The leases this node holds: delivery id → claim ([`super::queue`]), renewed by
    /// [`super::queue::keep_leases`] until their attempts finish.
    pub(super) held: std::sync::Mutex<HashMap<String, i64>>,
}

impl PgStore {
    /// Connects, brings the schema to this herald's version (under the advisory lock) and
    /// registers this node.
    pub async fn open(config: &Config, clock: Arc<dyn Clock>) -> Result<PgStore, StoreError> {
        let db = Database::new(config)?;
        let mut client = db.dedicated().await?;
        let migrated = migrate(&mut client).await?;
        if migrated.from != migrated.to {
            tracing::info!(
                from = migrated.from,
                to = migrated.to,
                "migrated the cluster schema"
            );
        }
        drop(client);
        let lease = config.storage.postgres.lease.0;
        Self::with_database(db, clock, lease).await
    }

    /// A node on an already migrated database (tests choose the lease freely).
    pub async fn with_database(
        db: Database,
        clock: Arc<dyn Clock>,
        lease: Duration,
    ) -> Result<PgStore, StoreError> {
        let node = crate::ids::random_hex(8);
        let name = host_name();
        let store = PgStore {
            ingest: Committer::start(db.clone(), clock.clone()),
            db,
            node,
            name,
            clock,
            lease_ms: lease.as_millis() as Millis,
            wake: Arc::new(Notify::new()),
            directory: Directory::default(),
            held: std::sync::Mutex::default(),
        };
        // Registered by its first beat.
        store.heartbeat().await?;
        store.reload().await?;
        Ok(store)
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Notified when work may have become due on any node (new events; released leases).
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Reloads what every node keeps in memory (at start, and when the listener reconnects:
    /// change notices may have been missed meanwhile).
    pub(super) async fn reload(&self) -> Result<(), StoreError> {
        self.load_endpoints().await?;
        self.load_plans().await
    }
}

/// The machine's name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else "herald").
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "herald".into())
}
