//! A node's ear on the cluster (docs/cluster.md): a connection of its own `LISTEN`s on the due
//! channel (another node's new events or released leases wake this node's engine through
//! [`PgStore::wake`]) and on the change channel (an endpoint or plan another node changed is
//! reloaded into this node's memory; a breaker's copy is forgotten). Notifications arrive on the
//! listening connection itself, so it is driven here rather than pooled. Whenever the listener
//! (re)connects it reloads endpoints and plans, forgets every breaker and wakes the engine, since
//! news may have been missed meanwhile; if the connection drops it listens again, backing off.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use super::rows::DUE_CHANNEL;
use super::{Notice, PgStore, CHANGED_CHANNEL};
use herald_core::shutdown::Shutdown;

/// The longest wait between two attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Listens until shutdown.
pub async fn listen(store: Arc<PgStore>, mut shutdown: Shutdown) {
    let wake = store.wake();
    let mut backoff = Duration::from_millis(100);
    loop {
        tokio::select! {
            ended = listen_once(&store) => {
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
async fn listen_once(store: &Arc<PgStore>) -> Result<(), super::DbError> {
    let (client, mut connection) = store.db.connect_raw().await?;
    // Notifications arrive as the connection is polled: a task drives it, wakes the engine on
    // the due channel and passes change notices on.
    let waker = store.wake();
    let node = store.clone();
    let (changes, mut changed) = mpsc::unbounded_channel::<String>();
    let mut driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) if n.channel() == DUE_CHANNEL => {
                    waker.notify_one()
                }
                Some(Ok(AsyncMessage::Notification(n))) => match Notice::parse(n.payload()) {
                    // Forgotten here, in the order notices come: a breaker that closed also
                    // made deliveries due, and the wake that follows must not find the old copy.
                    Some(Notice::Breaker(id)) => node.breakers.forget(Some(id)),
                    _ => {
                        let _ = changes.send(n.payload().to_string());
                    }
                },
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {DUE_CHANNEL}; LISTEN {CHANGED_CHANNEL}"))
        .await?;
    // News may have come while nobody listened.
    if let Err(e) = store.reload().await {
        tracing::warn!(error = %e, "cannot reload endpoints and plans");
    }
    store.wake.notify_one();
    loop {
        tokio::select! {
            ended = &mut driver => {
                drop(client);
                return ended.map_err(|e| super::DbError::Postgres(e.to_string()))?.map_err(Into::into);
            }
            Some(payload) = changed.recv() => {
                let Some(notice) = Notice::parse(&payload) else {
                    continue;
                };
                if let Err(e) = store.refresh(notice).await {
                    tracing::warn!(error = %e, notice = %payload, "cannot reload a change");
                }
            }
        }
    }
}
