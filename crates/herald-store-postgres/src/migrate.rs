//! The cluster schema's migrations, compiled in and applied in order (docs/cluster.md): at start
//! and by `herald migrate`. All of them run in one transaction that first takes an advisory lock,
//! so nodes starting together apply each migration once and the others wait, then find it done.
//! Each applied migration is recorded with a digest of its text: a database whose recorded
//! migration differs from this binary's, or that has one this binary does not know (a newer herald
//! migrated it), is refused with a sentence saying so, never used half-understood. A migration
//! never runs while a live node of an older herald serves the database ([`super::versions`]).
//!
//! So a released `schema_00NN.sql` is never edited, not even a comment: every database it
//! migrated would be refused (the first lines still name where the files lived before the
//! storage crates, `src/store/postgres/`).

use std::time::Duration;

use sha2::{Digest, Sha256};

use super::DbError;

/// The advisory lock migrations hold ("herald" in ASCII): one key, so any herald process on
/// the database serializes on it and nothing else is likely to use it.
pub(crate) const LOCK: i64 = 0x6865_7261_6c64;

/// The oldest PostgreSQL herald runs on (docs/cluster.md).
const MIN_SERVER_VERSION: i32 = 130000;

/// The migrations, in order: (version, name, SQL).
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "schema", include_str!("schema_0001.sql")),
    (2, "claims by endpoint", include_str!("schema_0002.sql")),
    (3, "shared rate limits", include_str!("schema_0003.sql")),
    (4, "directory version", include_str!("schema_0004.sql")),
    (5, "endpoint minutes", include_str!("schema_0005.sql")),
    (6, "failure alerts", include_str!("schema_0006.sql")),
    (7, "nodes' schema versions", include_str!("schema_0007.sql")),
    (
        8,
        "alert mails per account per hour",
        include_str!("schema_0008.sql"),
    ),
    (
        9,
        "operator events by account",
        include_str!("schema_0009.sql"),
    ),
    (10, "endpoint secrets", include_str!("schema_0010.sql")),
    (
        11,
        "applications, labels and attempt URLs",
        include_str!("schema_0011.sql"),
    ),
    (
        12,
        "endpoints' last successes",
        include_str!("schema_0012.sql"),
    ),
    (
        13,
        "attempts' response headers",
        include_str!("schema_0013.sql"),
    ),
    (
        14,
        "hourly chart rows and latency buckets",
        include_str!("schema_0014.sql"),
    ),
    (
        15,
        "events' trace contexts",
        include_str!("schema_0015.sql"),
    ),
];

/// The schema version this herald writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// What a run of [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The schema version found (0: an empty database).
    pub from: i32,
    /// The schema version now.
    pub to: i32,
}

fn digest(sql: &str) -> String {
    Sha256::digest(sql.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A node that starts serving the database: [`migrate_and_join`] writes its `nodes` row.
pub struct Joining<'a> {
    pub id: &'a str,
    /// The machine's name.
    pub name: &'a str,
    /// Read for its row's time when it is written (after any wait for the lock or for older
    /// nodes), so that the row counts as live from then.
    pub clock: &'a dyn herald_core::clock::Clock,
}

/// Brings the database's schema to [`SCHEMA_VERSION`], or says why it cannot. With a migration
/// to apply, it first waits up to `lease` (`storage.postgres.lease`, at least two heartbeats) for
/// the live nodes of an older herald to stop, and refuses, naming them, if any still serve.
pub async fn migrate(
    client: &mut tokio_postgres::Client,
    lease: Duration,
) -> Result<Migrated, DbError> {
    migrate_and_join(client, lease, None).await
}

/// The schema version the database is at (0: none), creating the table that records it;
/// refuses a version this herald does not know, or one applied from another definition.
async fn applied_version(tx: &tokio_postgres::Transaction<'_>) -> Result<i32, DbError> {
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS herald_schema (
             version    integer     PRIMARY KEY,
             name       text        NOT NULL,
             digest     text        NOT NULL,
             herald     text        NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let applied = tx
        .query(
            "SELECT version, digest, herald FROM herald_schema ORDER BY version",
            &[],
        )
        .await?;
    let mut from = 0;
    for row in &applied {
        let (v, d, by): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
        match MIGRATIONS.iter().find(|m| m.0 == v) {
            None => {
                return Err(DbError::Schema(format!(
                    "the database's schema is at version {v} (applied by herald {by}); this \
                     herald {} knows versions up to {SCHEMA_VERSION}: run a herald at least as \
                     new as the one that migrated it",
                    env!("CARGO_PKG_VERSION")
                )))
            }
            Some(m) if digest(m.2) != d => {
                return Err(DbError::Schema(format!(
                    "the database's schema version {v} was applied by herald {by} from a \
                     different definition than this herald {}'s; the database was made by \
                     another build: restore it from a backup made with this herald's schema, \
                     or use an empty database",
                    env!("CARGO_PKG_VERSION")
                )))
            }
            Some(_) => from = from.max(v),
        }
    }
    Ok(from)
}

/// [`migrate`], and for a node that starts, its `nodes` row with the schema version it knows,
/// written by the same transaction, under the advisory lock: a newer herald that migrates later
/// finds it live and waits for it; one that migrated first makes this one refuse. (Registered
/// after the commit, a node of an older herald could start serving a schema a newer one
/// migrated meanwhile, between its check and its row.)
pub async fn migrate_and_join(
    client: &mut tokio_postgres::Client,
    lease: Duration,
    node: Option<Joining<'_>>,
) -> Result<Migrated, DbError> {
    let version: i32 = client
        .query_one("SELECT current_setting('server_version_num')::integer", &[])
        .await?
        .get(0);
    if version < MIN_SERVER_VERSION {
        return Err(DbError::Schema(format!(
            "the database runs PostgreSQL {}.{}; herald needs 13 or later",
            version / 10000,
            version % 10000 / 100
        )));
    }
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK])
        .await?;
    let from = applied_version(&tx).await?;
    // An empty database has no nodes; under the lock, no node of this herald migrates meanwhile.
    if from > 0 && from < SCHEMA_VERSION {
        super::versions::wait_for_older_nodes(
            &tx,
            from,
            lease,
            node.as_ref().map(|n| (n.id, n.name)),
        )
        .await
        .map_err(DbError::Schema)?;
    }
    for (v, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > from) {
        tx.batch_execute(sql).await.map_err(|e| {
            DbError::Schema(format!(
                "migration {v} ({name}) failed: {}",
                super::describe(&e)
            ))
        })?;
        tx.execute(
            "INSERT INTO herald_schema (version, name, digest, herald) VALUES ($1, $2, $3, $4)",
            &[v, name, &digest(sql), &env!("CARGO_PKG_VERSION")],
        )
        .await?;
    }
    if let Some(node) = node {
        tx.execute(
            super::nodes::REGISTER,
            &[&node.id, &node.name, &node.clock.now_ms(), &SCHEMA_VERSION],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(Migrated {
        from,
        to: SCHEMA_VERSION,
    })
}
