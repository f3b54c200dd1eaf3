//! `GET /v1/backup`: an online backup of the whole store, streamed as it is read
//! (docs/operations.md, "Backup, restore, upgrade"). A backup that fails, or herald shutting
//! down, cuts the answer short (no last chunk), so the client never takes it for a whole
//! archive.

use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_TYPE};
use hyper::Response;

use super::{AppState, Body, Resp, Streamed};
use crate::backup::{self, BackupError};

/// Chunks of the archive made ahead of the client: one (a part is two chunks, its header line
/// and its compressed body), so that a backup holds about two pages (one being read, one being
/// sent) whatever the payloads' sizes.
const AHEAD: usize = 1;

pub fn stream(state: &Arc<AppState>) -> Resp {
    let (tx, rx) = tokio::sync::mpsc::channel(AHEAD);
    let started_at = state.clock.now_ms();
    let state = state.clone();
    tokio::spawn(async move {
        let shutdown = state.shutting_down.clone();
        let sent = backup::write(&state.store, started_at, |chunk| {
            let tx = tx.clone();
            let stopping = shutdown.is_fired();
            async move { !stopping && tx.send(Ok(Bytes::from(chunk))).await.is_ok() }
        })
        .await;
        match sent {
            Ok(t) => tracing::info!(
                events = t.events,
                deliveries = t.deliveries,
                attempts = t.attempts,
                "backup sent"
            ),
            Err(BackupError::Gone) => {
                tracing::warn!("backup stopped: its client went away or herald is stopping");
                let _ = tx.send(Err(std::io::Error::other("stopped"))).await;
            }
            Err(e) => {
                tracing::error!(error = %e, "backup failed");
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
            }
        }
    });
    let mut resp = Response::new(Body::Right(Streamed(rx)));
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.herald.backup"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&format!(
        "attachment; filename=\"herald-{}.backup\"",
        started_at
    )) {
        h.insert(CONTENT_DISPOSITION, v);
    }
    resp
}
