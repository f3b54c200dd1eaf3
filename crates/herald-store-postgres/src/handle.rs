//! A node's handle on the cluster's database: [`PgStore`] opens it (migrating the schema and
//! registering the node), and carries what every query needs: the pool, this node's id, the
//! clock and the lease. Ingest, the delivery queue and quotas are in their own files.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use super::ingest::{Committer, Job};
use super::queue::Leases;
use super::{Database, DbError};
use herald_core::clock::{Clock, Millis};
use herald_store::directory::DirectoryCopy;
use herald_store::StoreError;

/// The file in a node's data directory (`storage.path`) that keeps its id across restarts.
pub const NODE_ID_FILE: &str = "node-id";

/// This node's id: read from (or, the first time, written to) [`NODE_ID_FILE`] in `dir`, so a
/// node that restarts after a crash knows which leases it left. The file stays locked while the
/// node runs: a second node started on the same directory is refused, since two nodes with one
/// id would take each other's leases.
fn node_identity(dir: &std::path::Path) -> Result<(String, std::fs::File), StoreError> {
    use std::io::{Read, Seek, Write};
    herald_store::files::create_private_dir(dir)?;
    let path = dir.join(NODE_ID_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |_| {
            StoreError::database(format!(
                "another herald node runs with the data directory {}; each node needs its own \
                 storage.path",
                dir.display()
            ))
        },
    )?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let id = text.trim();
    if id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok((id.to_string(), file));
    }
    let id = herald_core::ids::random_hex(8);
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(format!("{id}\n").as_bytes())?;
    file.sync_all()?;
    Ok((id, file))
}

impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        StoreError::Database(std::sync::Arc::new(e))
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
    /// The result writers' queue ([`super::results`]).
    pub(super) results: mpsc::Sender<super::results::Finish>,
    /// Woken when this or another node may have made work due ([`super::wake`]).
    pub(super) wake: Arc<Notify>,
    /// Every endpoint and synced plan, kept in step with the other nodes
    /// ([`super::endpoints`], [`super::accounts`]).
    pub(super) directory: DirectoryCopy,
    /// The directory's version the copy reflects at least ([`super::version`]).
    pub(super) directory_version: std::sync::atomic::AtomicI64,
    /// Held by a reload of the copy.
    pub(super) reloading: tokio::sync::Mutex<()>,
    /// Held by each of this node's endpoint writes, from its read to its copy in memory, and by
    /// each reading of another node's endpoint notice: the copy takes them in the order they
    /// committed, so of two changes of one endpoint made at once, the older never stays.
    pub(super) endpoint_writes: tokio::sync::Mutex<()>,
    /// The leases this node holds ([`super::queue`]), shared with its ingest.
    pub(super) leases: Arc<Leases>,
    /// This node's copies of endpoints' circuit breakers ([`super::breakers`]).
    pub(super) breakers: super::breakers::BreakerCopies,
    /// The locked file holding this node's id in its data directory ([`node_identity`]).
    _identity: Option<std::fs::File>,
}

/// Every operation of the contract, each in the file of its concern (`herald-store`'s lib.rs
/// has the table).
impl herald_store::contract::Store for PgStore {}

impl PgStore {
    /// Connects, brings the schema to this herald's version and registers this node (both in
    /// one transaction under the advisory lock, [`super::migrate_and_join`]).
    pub async fn open(
        settings: &super::Settings,
        clock: Arc<dyn Clock>,
        metrics: Arc<herald_store::StoreMetrics>,
    ) -> Result<PgStore, StoreError> {
        let db = Database::new(settings)?;
        let lease = settings.lease;
        let (node, file) = node_identity(&settings.data_dir)?;
        let name = host_name();
        let mut client = db.dedicated().await?;
        let joining = super::Joining {
            id: &node,
            name: &name,
            clock: &*clock,
        };
        let migrated = super::migrate_and_join(&mut client, lease, Some(joining)).await?;
        if migrated.from != migrated.to {
            tracing::info!(
                from = migrated.from,
                to = migrated.to,
                "migrated the cluster schema"
            );
        }
        drop(client);
        let mut store = Self::counted(db, clock, lease, metrics, Some(node)).await?;
        store._identity = Some(file);
        // Leases a previous run of this node left when it stopped abruptly (kill -9, a crash):
        // its attempts died with it, so they are given back now, not when the leases end.
        let released = store.release_all().await?;
        if released > 0 {
            tracing::info!(
                released,
                "gave back the leases this node held when it last stopped abruptly"
            );
        }
        Ok(store)
    }

    /// A node on an already migrated database (tests choose the lease freely).
    pub async fn with_database(
        db: Database,
        clock: Arc<dyn Clock>,
        lease: Duration,
    ) -> Result<PgStore, StoreError> {
        Self::counted(db, clock, lease, Arc::default(), None).await
    }

    /// A node whose ingest is counted in `metrics`.
    async fn counted(
        db: Database,
        clock: Arc<dyn Clock>,
        lease: Duration,
        metrics: Arc<herald_store::StoreMetrics>,
        node: Option<String>,
    ) -> Result<PgStore, StoreError> {
        let node = node.unwrap_or_else(|| herald_core::ids::random_hex(8));
        let name = host_name();
        let leases = Arc::new(Leases::default());
        let lease_ms = lease.as_millis() as Millis;
        let store = PgStore {
            ingest: Committer::start(db.clone(), clock.clone(), metrics, {
                let (node, leases) = (node.clone(), leases.clone());
                super::ingest::Lessor {
                    node,
                    lease_ms,
                    leases,
                }
            }),
            results: super::results::start(db.clone()),
            db,
            node,
            name,
            clock,
            lease_ms,
            wake: Arc::new(Notify::new()),
            directory: DirectoryCopy::default(),
            directory_version: std::sync::atomic::AtomicI64::new(0),
            reloading: tokio::sync::Mutex::new(()),
            endpoint_writes: tokio::sync::Mutex::new(()),
            leases,
            breakers: Default::default(),
            _identity: None,
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
        let version = self.directory_version_now().await?;
        self.breakers.forget(None);
        self.load_endpoints().await?;
        self.load_plans().await?;
        // Only now: a fan-out made with this version must see what was loaded.
        self.loaded_directory(version);
        Ok(())
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
