//! One shutdown signal, passed explicitly to every loop (no global token).
//!
//! [`Trigger::fire`] (or SIGTERM/SIGINT via [`on_signals`]) flips a watch channel; every holder of
//! a [`Shutdown`] sees it. Draining is bounded by [`GRACE`]: in-flight attempts get that long to
//! finish, then the process flushes and exits anyway (what was not finished is still pending on
//! disk and is attempted after the restart).

use std::time::Duration;

use tokio::sync::watch;

/// How long in-flight attempts may take to finish after a shutdown starts (docs/operations.md).
pub const GRACE: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

pub struct Trigger(watch::Sender<bool>);

pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    pub fn fire(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once shutdown has started (at once if it already has).
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|fired| *fired).await;
    }
}

/// Fires `trigger` on the first SIGTERM or SIGINT.
///
/// Also takes SIGXFSZ: by default it kills a process that writes past its file-size limit
/// (systemd's `LimitFSIZE=`, `ulimit -f`). Handled, the write fails with `EFBIG` instead, and
/// herald answers `503` to what it cannot store rather than dying mid-request.
pub fn on_signals(trigger: Trigger) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    const SIGXFSZ: i32 = 25;
    let mut xfsz = signal(SignalKind::from_raw(SIGXFSZ))?;
    tokio::spawn(async move {
        while xfsz.recv().await.is_some() {
            tracing::error!(
                "a write went past the file-size limit (SIGXFSZ); storage refuses writes"
            );
        }
    });
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(signal = name, "shutting down");
        trigger.fire();
    });
    Ok(())
}
