//! Cluster mode's database (docs/cluster.md): connecting to PostgreSQL (TLS through rustls with the
//! bundled web roots and `storage.postgres.ca_file`), the pool every node query goes through, and
//! the compiled-in schema ([`migrate`]).
//!
//! The client is `tokio-postgres` with a `deadpool-postgres` pool: it pipelines queries on one
//! connection, caches prepared statements per connection, takes our own rustls config (so the
//! database is verified with the roots and CA file we choose, not a second TLS stack's), and
//! hands out a plain connection for `LISTEN`, whose notifications arrive on the connection
//! itself. See docs/cluster.md for the choice and the layout of the tables.

mod accounts;
mod alerts;
mod applications;
mod archive;
mod breakers;
mod changes;
mod debounce;
mod endpoints;
mod handle;
mod import;
mod ingest;
mod lost;
mod migrate;
mod minutes;
pub mod nodes;
mod purge;
mod queue;
mod quota;
mod reads;
mod results;
mod retention;
mod rows;
mod sessions;
mod tokens;
mod version;
pub mod versions;
pub mod wake;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres_rustls::MakeRustlsConnect;

/// A PostgreSQL error in one line, as the contract's error says it.
use herald_store::describe_postgres as describe;

pub use archive::RestoreHold;
pub use handle::PgStore;
pub use migrate::{migrate, migrate_and_join, Joining, Migrated, SCHEMA_VERSION};
pub use queue::{keep_leases, PgLease};
pub use rows::DUE_CHANNEL;

/// The channel of change notices: `e:` + an endpoint's id, `p:` + an account's (its plan),
/// `b:` + an endpoint's id (its circuit breaker). Every node keeps endpoints and plans in memory
/// and reloads what a notice names; it forgets its copy of a breaker and reads it when needed.
pub const CHANGED_CHANNEL: &str = "herald_changed";

/// A change notice's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice<'a> {
    Endpoint(&'a str),
    Plan(&'a str),
    Breaker(&'a str),
}

impl<'a> Notice<'a> {
    pub fn parse(payload: &'a str) -> Option<Notice<'a>> {
        match payload.split_once(':')? {
            ("e", id) => Some(Notice::Endpoint(id)),
            ("p", account) => Some(Notice::Plan(account)),
            ("b", id) => Some(Notice::Breaker(id)),
            _ => None,
        }
    }
}

/// How long a connection may take to open, and a query to get a connection from the pool,
/// before the caller hears that the database is unreachable (ingest answers `503`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("cannot set up TLS for the database: {0}")]
    Tls(String),
    #[error("database: {0}")]
    Postgres(String),
    /// The schema cannot be used or brought up to date ([`migrate`]).
    #[error("{0}")]
    Schema(String),
    /// The database's URL cannot be used.
    #[error("{0}")]
    Config(String),
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        DbError::Postgres(describe(&e))
    }
}

impl From<deadpool_postgres::PoolError> for DbError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => DbError::Postgres(other.to_string()),
        }
    }
}

/// `host:port/database` of a connection config (every host, if it names several).
pub fn target_of(pg: &tokio_postgres::Config) -> String {
    use tokio_postgres::config::Host;
    let ports = pg.get_ports();
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            }
        })
        .collect();
    let user = pg.get_user().unwrap_or("(no user)");
    let db = pg.get_dbname().unwrap_or(user);
    format!("{}/{db}", hosts.join(","))
}

/// A node's connections to the cluster's database.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
    /// Connections whose commits do not wait for the WAL's flush ([`Database::queue_client`]).
    queue: Pool,
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    /// Where the database is, for messages: hosts, port and database, never the password.
    target: Arc<str>,
}

/// What a cluster's store is opened with (herald's config names them: `storage.postgres`).
#[derive(Clone)]
pub struct Settings {
    /// The database, as its URL names it.
    pub database: tokio_postgres::Config,
    /// TLS to the database (the roots it is verified with).
    pub tls: rustls::ClientConfig,
    /// Connections this node keeps to the database.
    pub pool_size: usize,
    /// How long a node's claim on a delivery lasts unless renewed.
    pub lease: Duration,
    /// Where the node keeps the file that names it across restarts.
    pub data_dir: std::path::PathBuf,
}

impl Database {
    /// Sets up the pool for the database; connections open on first use.
    pub fn new(settings: &Settings) -> Result<Database, DbError> {
        let mut pg = settings.database.clone();
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(CONNECT_TIMEOUT);
        }
        if pg.get_application_name().is_none() {
            pg.application_name("herald");
        }
        // `202` means committed durably (docs/cluster.md): a database (or role) set to
        // `synchronous_commit = off` would acknowledge commits its crash can lose, so herald's
        // sessions turn it on, unless the URL's options choose a level themselves (such as
        // `remote_apply` with a synchronous standby).
        let options = pg.get_options().unwrap_or("").to_string();
        if !options.contains("synchronous_commit") {
            pg.options(format!("{options} -c synchronous_commit=on").trim());
        }
        let tls = MakeRustlsConnect::new(settings.tls.clone());
        let pool_of = |pg: tokio_postgres::Config| {
            let manager = Manager::from_config(
                pg,
                tls.clone(),
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            Pool::builder(manager)
                .max_size(settings.pool_size)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(CONNECT_TIMEOUT))
                .create_timeout(Some(CONNECT_TIMEOUT))
                .build()
                .map_err(|e| DbError::Postgres(e.to_string()))
        };
        let pool = pool_of(pg.clone())?;
        let mut relaxed = pg.clone();
        let options = relaxed.get_options().unwrap_or("").to_string();
        // Its statements (claims, renewals, results) are prepared once per connection, so
        // PostgreSQL may keep a generic plan of one instead of planning each call (planning
        // the results' statement cost more than running it). Every one of them finds its rows
        // through an index, which a plan made while the tables were still small (a new
        // install) would not: sequential scans are ruled out on these connections.
        relaxed
            .options(format!("{options} -c synchronous_commit=off -c enable_seqscan=off").trim());
        let queue = pool_of(relaxed)?;
        Ok(Database {
            pool,
            queue,
            target: target_of(&pg).into(),
            config: pg,
            tls,
        })
    }

    /// Where the database is (`host:port/database`), as messages name it.
    pub fn target(&self) -> &str {
        &self.target
    }

    fn unreachable(&self, e: DbError) -> DbError {
        match e {
            DbError::Postgres(why) => {
                DbError::Postgres(format!("cannot use {}: {why}", self.target))
            }
            other => other,
        }
    }

    /// A pooled connection.
    pub async fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.pool
            .get()
            .await
            .map_err(|e| self.unreachable(e.into()))
    }

    /// A pooled connection whose commits return before the WAL reaches the disk (PostgreSQL's
    /// asynchronous commit), for the queue's own bookkeeping: claims, renewals, holds and
    /// attempts' results. None of them acknowledges anything to a sender; the database's crash
    /// can lose the last fraction of a second of them, and what they recorded is then attempted
    /// again (at least once), in order (the WAL keeps commits in order). Ingest never uses it.
    pub async fn queue_client(&self) -> Result<deadpool_postgres::Object, DbError> {
        self.queue
            .get()
            .await
            .map_err(|e| self.unreachable(e.into()))
    }

    /// A connection of its own, outside the pool (the schema's migration), driven by a task;
    /// it closes when the client is dropped.
    pub async fn dedicated(&self) -> Result<tokio_postgres::Client, DbError> {
        let (client, connection) = self.connect_raw().await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %describe(&e), "database connection closed");
            }
        });
        Ok(client)
    }

    /// A connection and the half that must be polled to drive it (`LISTEN`'s notifications
    /// arrive there).
    pub async fn connect_raw(&self) -> Result<(tokio_postgres::Client, RawConnection), DbError> {
        self.config
            .connect(self.tls.clone())
            .await
            .map_err(|e| self.unreachable(e.into()))
    }
}

/// The driving half of a connection of ours.
pub type RawConnection = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;
