//! `herald copy --from sled:PATH --to postgres:URL` (docs/cluster.md): a stopped store moved
//! into an empty cluster database through the archive's operations, as a backup and a restore
//! would move it, but with no archive between them and resumable: the directory first, then
//! the log a page of events at a time, each page imported and then marked in the target
//! ([`Archive::keep_copy_mark`]). Run again after an interruption, the copy writes the
//! directory again (every write of it sets a row to what it was) and goes on from the last
//! marked page; a page imported twice doubles nothing.

use std::time::Instant;

use super::{directory, import_directory, BackupError, PAGE};
use crate::clock::Millis;
use crate::model::DeliveryState;
use crate::store::prelude::*;
use crate::store::{Backend, CopyStart};

/// How far a copy is.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Deliveries copied (with their events and attempts).
    pub deliveries: u64,
    /// Deliveries in the source.
    pub total: u64,
    /// Deliveries a second since this run started.
    pub rate: f64,
}

/// What a copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copied {
    /// Copied (or finished after an interruption): this many deliveries in all.
    Done { deliveries: u64, resumed: bool },
    /// This source had been copied into this target already: nothing was written.
    AlreadyDone,
}

/// Copies `from` (named `source`: the canonical path of its data directory) into `to`, calling
/// `report` after each page.
pub async fn copy(
    from: &Backend,
    to: &Backend,
    source: &str,
    now: Millis,
    mut report: impl FnMut(Progress),
) -> Result<Copied, BackupError> {
    let (mut cursor, mut copied, resumed) = match to.begin_copy(source, now).await? {
        CopyStart::Fresh => (None, 0, false),
        CopyStart::Resumed { cursor, copied } => (cursor, copied, true),
        CopyStart::Finished => return Ok(Copied::AlreadyDone),
    };
    import_directory(to, directory(from, now).await?, now).await?;

    let stats = from.stats().await?;
    let total: u64 = DeliveryState::ALL
        .iter()
        .map(|s| stats.get(*s).max(0) as u64)
        .sum();
    let started = Instant::now();
    let at_start = copied;
    loop {
        let (events, next) = from.export_events(cursor.clone(), PAGE).await?;
        copied += events
            .iter()
            .map(|h| h.deliveries.len() as u64)
            .sum::<u64>();
        if !events.is_empty() {
            to.import_events(events, now).await?;
        }
        if next.is_none() {
            to.finish_import().await?;
        }
        to.keep_copy_mark(source, next.as_deref(), copied, next.is_none())
            .await?;
        let secs = started.elapsed().as_secs_f64().max(1e-3);
        report(Progress {
            deliveries: copied,
            total: total.max(copied),
            rate: (copied - at_start) as f64 / secs,
        });
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    Ok(Copied::Done {
        deliveries: copied,
        resumed,
    })
}
