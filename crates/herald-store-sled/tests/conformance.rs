//! The contract's conformance suite (herald-store's kit) on the embedded store: each case on a
//! store of its own in a temporary directory.

use std::sync::Arc;

use herald_core::clock::Clock;
use herald_store::conformance::Harness;
use herald_store_sled::SledStore;

/// A temporary directory, the store's data directory inside it.
struct Sled {
    dir: tempfile::TempDir,
}

impl Harness for Sled {
    type Store = SledStore;
    const NAME: &'static str = "sled";

    async fn new() -> Sled {
        Sled {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    async fn open(&self, clock: Arc<dyn Clock>) -> Arc<SledStore> {
        SledStore::open(
            &self.dir.path().join("data"),
            8 << 20,
            clock,
            Arc::default(),
        )
        .expect("open the embedded store")
    }

    /// As herald stops: the final flush, then the committer ends with the last handle.
    async fn close(&self, store: Arc<SledStore>) {
        let committer = store.take_committer();
        store.close().expect("close");
        drop(store);
        if let Some(c) = committer {
            c.join().expect("the committer ends");
        }
    }

    /// One process: nothing is changed elsewhere.
    fn listen(&self, _store: &Arc<SledStore>) -> Box<dyn Send> {
        Box::new(())
    }
}

herald_store::conformance_tests!(Sled);
