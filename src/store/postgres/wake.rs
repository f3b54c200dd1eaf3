//! Waking idle nodes (SPEC §16): a connection of its own `LISTEN`s on the due channel, and
//! every notification (another node's new events or released leases) wakes this node's engine
//! through [`PgStore::wake`](super::PgStore::wake). Notifications arrive on the listening
//! connection itself, so it is driven here rather than pooled. If the connection drops, the
//! engine is woken (it may have missed news) and the listener reconnects, backing off.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use super::ingest::DUE_CHANNEL;
use super::Database;
use crate::shutdown::Shutdown;

/// The longest wait between two attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Listens until shutdown, waking `wake` on each notification.
pub async fn listen(db: Database, wake: Arc<Notify>, mut shutdown: Shutdown) {
    let mut backoff = Duration::from_millis(100);
    loop {
        tokio::select! {
            ended = listen_once(&db, &wake) => {
                if let Err(e) = ended {
                    tracing::warn!(error = %e, "lost the database's notifications; listening again");
                }
                wake.notify_one();
            }
            () = shutdown.wait() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = shutdown.wait() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One listening connection, until it fails.
async fn listen_once(db: &Database, wake: &Arc<Notify>) -> Result<(), super::DbError> {
    let (client, mut connection) = db.connect_raw().await?;
    // Notifications arrive as the connection is polled: a task drives it and wakes the node.
    let waker = wake.clone();
    let mut driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(_))) => waker.notify_one(),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {DUE_CHANNEL}"))
        .await?;
    // News may have come while nobody listened.
    wake.notify_one();
    // The client stays alive (and the connection open) until the connection ends.
    let ended = (&mut driver)
        .await
        .map_err(|e| super::DbError::Postgres(e.to_string()))?;
    drop(client);
    Ok(ended?)
}
