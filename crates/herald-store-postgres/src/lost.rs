//! An ingest whose commit went out and whose answer never came back (docs/cluster.md, "A
//! connection lost at the commit").
//!
//! When PostgreSQL commits and the connection dies before its reply arrives (a restart, a
//! failover, a network cut), the rows are durable although the node heard an error. Answering
//! `503` then would break "a refused request stored nothing": the event would be delivered, and
//! a client retrying without a key would make a second one. So when the error is a lost
//! connection rather than one the server reported, the node finds out what happened on a new
//! connection: it ends the old server process if it still runs (so its transaction cannot
//! commit after the look), waits until that process is gone, and then looks for the batch's
//! first event. Found: the batch committed, and the requests get their `202`. Not found: it did
//! not and never will, and they get `503` with nothing stored.
//!
//! To end the right process the node knows which server process serves each of its pooled
//! connections: it asks once per connection (`pg_backend_pid()` and the process's start time,
//! so a process id the system reused is never mistaken for it).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use deadpool_postgres::{Object, ObjectId};

use super::Database;
use herald_store::StoreError;

/// How long the node keeps trying to find out (the database may be restarting); past it the
/// requests get `503` and the outcome stays unknown (logged).
const FIND_OUT_FOR: Duration = Duration::from_secs(10);
/// Between tries, and between looks for the old process's end.
const PAUSE: Duration = Duration::from_millis(50);
/// Server processes remembered at most; connections come and go, so the list is cleared past
/// it (each connection is then asked again, once).
const REMEMBERED: usize = 256;

/// A server process: its id and its start (microseconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Backend {
    pid: i32,
    started_us: i64,
}

/// The server process behind each pooled connection this node used for ingest.
#[derive(Default)]
pub(super) struct Backends {
    known: Mutex<HashMap<ObjectId, Backend>>,
}

impl Backends {
    /// The server process behind `client`, asked once per connection; `None` if asking failed
    /// (a lost answer is then only looked for, without ending the old process).
    pub(super) async fn of(&self, client: &Object) -> Option<Backend> {
        let id = Object::id(client);
        if let Some(b) = self.lock().get(&id) {
            return Some(*b);
        }
        let row = client
            .query_one(
                "SELECT pg_backend_pid(), (extract(epoch FROM backend_start) * 1000000)::bigint
                 FROM pg_stat_activity WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .ok()?;
        let b = Backend {
            pid: row.get(0),
            started_us: row.get(1),
        };
        let mut known = self.lock();
        if known.len() >= REMEMBERED {
            known.clear();
        }
        known.insert(id, b);
        Some(b)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectId, Backend>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether the error left the outcome unknown: the connection failed, the server said nothing.
pub(super) fn outcome_unknown(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_none()
}

/// Whether the batch whose first event is `first` committed on the connection of `backend`
/// (see the module's doc). An error means it could not be told within [`FIND_OUT_FOR`].
pub(super) async fn committed(
    db: &Database,
    backend: Option<Backend>,
    first: &[u8],
) -> Result<bool, StoreError> {
    let deadline = tokio::time::Instant::now() + FIND_OUT_FOR;
    loop {
        match look(db, backend, first, deadline).await {
            Ok(found) => return Ok(found),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(PAUSE).await,
        }
    }
}

async fn look(
    db: &Database,
    backend: Option<Backend>,
    first: &[u8],
    deadline: tokio::time::Instant,
) -> Result<bool, StoreError> {
    let client = db.client().await?;
    if let Some(b) = backend {
        const SAME: &str = "pid = $1
             AND (extract(epoch FROM backend_start) * 1000000)::bigint = $2
             AND pid <> pg_backend_pid()";
        client
            .execute(
                &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {SAME}"),
                &[&b.pid, &b.started_us],
            )
            .await?;
        // Ending is asynchronous: a transaction is decided once its process is gone.
        loop {
            let left: i64 = client
                .query_one(
                    &format!("SELECT count(*) FROM pg_stat_activity WHERE {SAME}"),
                    &[&b.pid, &b.started_us],
                )
                .await?
                .get(0);
            if left == 0 {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::database(format!(
                    "server process {} did not end",
                    b.pid
                )));
            }
            tokio::time::sleep(PAUSE).await;
        }
    }
    Ok(client
        .query_opt("SELECT 1 FROM events WHERE id = $1", &[&first])
        .await?
        .is_some())
}
