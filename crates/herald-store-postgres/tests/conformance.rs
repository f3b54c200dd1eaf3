//! The contract's conformance suite (herald-store's kit) on the cluster's store: each case on a
//! fresh database of a real PostgreSQL this test process starts, from the harness herald's own
//! tests use (one server for the process).

use std::sync::Arc;
use std::time::Duration;

use herald_core::clock::Clock;
use herald_store::conformance::Harness;
use herald_store_postgres::{migrate, Database, PgStore, Settings};

#[path = "../../../tests/common/postgres.rs"]
#[allow(dead_code)]
mod postgres;

/// How long a lease lasts in these cases (they run on a manual clock).
const LEASE: Duration = Duration::from_secs(30);

/// A fresh database, and a directory for the node's files.
struct Postgres {
    url: String,
    dir: tempfile::TempDir,
}

impl Harness for Postgres {
    type Store = PgStore;
    const NAME: &'static str = "postgres";

    async fn new() -> Postgres {
        Postgres {
            url: postgres::shared_database(),
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// A node on the database, migrated first (as herald's first node does).
    async fn open(&self, clock: Arc<dyn Clock>) -> Arc<PgStore> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let settings = Settings {
            database: self.url.parse().expect("the database's URL"),
            tls,
            pool_size: 4,
            lease: LEASE,
            data_dir: self.dir.path().to_path_buf(),
        };
        let db = Database::new(&settings).expect("database");
        let mut client = db.dedicated().await.expect("connect");
        migrate(&mut client, LEASE).await.expect("migrate");
        let store = PgStore::with_database(db, clock, LEASE)
            .await
            .expect("node");
        Arc::new(store)
    }

    /// A node keeps nothing of its own that a restart would lose: it just goes.
    async fn close(&self, store: Arc<PgStore>) {
        drop(store);
    }

    /// The notice listener herald starts beside each node.
    fn listen(&self, store: &Arc<PgStore>) -> Box<dyn Send> {
        let (stop, shutdown) = herald_core::shutdown::channel();
        tokio::spawn(herald_store_postgres::wake::listen(store.clone(), shutdown));
        Box::new(stop)
    }
}

herald_store::conformance_tests!(Postgres);
