//! Online backup and restore (docs/operations.md, "Backup, restore, upgrade"), written once on the
//! store contract ([`crate::store::contract`]), so that one archive format serves both stores:
//! a backup of one box restores into a cluster's database and back.
//!
//! A backup reads the directory (endpoints with their secrets and client certificates, plans,
//! account secrets, breakers), then the log a page of events at a time, newest first, each
//! event whole; each page becomes an `events` part of the archive ([`format`]). Ingest and
//! delivery go on meanwhile: the reads are those of the delivery log's pages.
//!
//! `herald restore` checks the whole archive first ([`check`]), so that a damaged one changes
//! nothing; [`restore`] then writes it into an empty store: the directory, then each part of
//! events in one write, then the ordering lanes' places.

pub mod client;
pub mod copy;
pub mod format;
pub mod place;
mod read;

use std::io::Read;

use crate::clock::Millis;
use crate::policy::breaker::Breaker;
use crate::store::prelude::*;
use crate::store::{Backend, DirectoryRecord, StoreError};
use format::{ArchiveError, Info, Part, PartWriter, Reader, Totals};

/// Events per `events` part (and per read of the log) at most; a page also ends once its
/// payloads reach [`crate::store::ARCHIVE_PAGE_BYTES`].
pub const PAGE: usize = crate::store::ARCHIVE_PAGE_EVENTS;
/// After each page, the backup rests this many times as long as reading and encoding the page
/// took, so that it takes at most about half a core from ingest and delivery (docs/operations.md:
/// measured with `cargo bench --bench load -- --phases backup`).
const PACE: f64 = 1.0;
/// Directory rows per `directory` part.
const DIRECTORY_PAGE: usize = 1000;

/// Why a backup or a restore stopped.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// Whoever reads the backup went away.
    #[error("the reader of the backup went away")]
    Gone,
    #[error("{0}")]
    Refused(String),
}

/// Writes a backup of `store` as it is while this runs, part by part, to `send` (which answers
/// `false` once nobody reads any more). Returns the archive's counts.
pub async fn write<F, Fut>(
    store: &Backend,
    started_at: Millis,
    mut send: F,
) -> Result<Totals, BackupError>
where
    F: FnMut(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut parts = PartWriter::default();
    let info = Info {
        format: format::VERSION,
        herald: crate::VERSION.to_string(),
        started_at,
        source: store.kind().to_string(),
    };
    let mut first = format::preamble();
    first.extend(parts.info(&info)?);
    if !send(first).await {
        return Err(BackupError::Gone);
    }
    for rows in directory(store, started_at).await?.chunks(DIRECTORY_PAGE) {
        if !send(parts.directory(rows)?).await {
            return Err(BackupError::Gone);
        }
    }
    let mut before = None;
    loop {
        let working = std::time::Instant::now();
        let (events, next) = store.export_events(before, PAGE).await?;
        if !events.is_empty() {
            // Encoding and compressing a page is CPU work: off the async workers.
            let (encoded, back) = tokio::task::spawn_blocking(move || {
                let encoded = parts.events_split(events);
                (encoded, parts)
            })
            .await
            .map_err(|e| StoreError::Engine(std::sync::Arc::new(e)))?;
            parts = back;
            // Ingest and delivery come first: the backup rests as long as each page took.
            tokio::time::sleep(working.elapsed().mul_f64(PACE)).await;
            // The header, then the body as it was compressed (never copied behind it).
            for chunk in encoded? {
                if !send(chunk).await {
                    return Err(BackupError::Gone);
                }
            }
        }
        match next {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    let totals = parts.totals().clone();
    if !send(parts.end()?).await {
        return Err(BackupError::Gone);
    }
    Ok(totals)
}

/// A restore writes events in batches of this many bytes of records (payloads and attempts),
/// an eighth of a page: a store holds a few times what one write carries until it is flushed
/// (sled's log buffers rewrite each row as its page consolidates and splits), and two batches
/// are in memory at a time (the one written, the next decoded).
const RESTORE_BATCH_BYTES: usize = 1 << 20;
/// And at most this many events: a batch is one write, whose replaced rows the store frees only
/// once it is over, and small events make many rows per MiB (300,000 events of 100 bytes took
/// 75 MB at 1,000 events a batch).
const RESTORE_BATCH_EVENTS: usize = 250;

/// The directory as it is now: every account's usage, plan, endpoints (with their client
/// certificates, their last successes) and breakers that are not closed and clean, every account's alert addresses,
/// every account secret, application record and kept answer.
async fn directory(store: &Backend, now: Millis) -> Result<Vec<DirectoryRecord>, StoreError> {
    store.fresh_directory().await?;
    let mut rows = Vec::new();
    let w = crate::policy::quota::windows(now);
    for account in store.account_ids() {
        let (minute_used, day_used) = store.quota_usage(&account, w).await?;
        if minute_used + day_used > 0 {
            rows.push(DirectoryRecord::Usage {
                account_id: account.clone(),
                minute: w.minute,
                minute_used,
                day: w.day,
                day_used,
            });
        }
        if let Some(plan) = store.account_plan(&account) {
            rows.push(DirectoryRecord::Plan {
                account_id: account.clone(),
                plan,
            });
        }
        for ep in store.account_endpoints(&account) {
            let client_certificate = match ep.client_certificate {
                Some(_) => store.client_certificate_pem(&ep.id).await?,
                None => None,
            };
            rows.push(DirectoryRecord::Endpoint {
                endpoint: Box::new((*ep).clone()),
                client_certificate,
            });
            let breaker = store.breaker(&ep.id).await?;
            if breaker != Breaker::default() {
                rows.push(DirectoryRecord::Breaker {
                    endpoint_id: ep.id.clone(),
                    breaker,
                });
            }
            if let Some(at) = store.last_success(&ep.id).await? {
                rows.push(DirectoryRecord::LastSuccess {
                    endpoint_id: ep.id.clone(),
                    at,
                });
            }
        }
    }
    for (account_id, emails) in store.all_alert_emails().await? {
        rows.push(DirectoryRecord::AlertEmails { account_id, emails });
    }
    for (account_id, name, value) in store.account_secrets().await? {
        rows.push(DirectoryRecord::AccountSecret {
            account_id,
            name,
            value,
        });
    }
    for application in store.applications().await? {
        rows.push(DirectoryRecord::Application { application });
    }
    for (account_id, key, answer) in store.api_answers().await? {
        rows.push(DirectoryRecord::ApiAnswer {
            account_id,
            key,
            answer,
        });
    }
    Ok(rows)
}

/// Reads the whole archive and checks every part ([`Reader::next_part`]); its info and counts.
/// Calls `progress` after each part with the counts so far.
pub fn check(
    input: impl Read,
    mut progress: impl FnMut(&Totals),
) -> Result<(Info, Totals), ArchiveError> {
    let mut reader = Reader::new(input)?;
    let mut info = None;
    while let Some(part) = reader.next_part()? {
        match part {
            Part::Info(i) => info = Some(i),
            Part::End(totals) => {
                return info.map(|i| (i, totals)).ok_or(ArchiveError::NotAnArchive)
            }
            _ => progress(reader.totals()),
        }
    }
    Err(ArchiveError::NotAnArchive)
}

/// Restores an archive (checked with [`check`] before) into `store`, which must be empty.
/// Calls `progress` after each part with the counts so far.
pub async fn restore(
    store: &Backend,
    input: impl Read + Send + 'static,
    now: Millis,
    mut progress: impl FnMut(&Totals),
) -> Result<Totals, BackupError> {
    if !store.is_empty().await? {
        return Err(BackupError::Refused(
            "the store is not empty (it has events, endpoints, plans or account secrets); \
             restore into an empty one"
                .into(),
        ));
    }
    // Parts are read and decoded on a thread of their own, one part (at most a page) ahead of
    // the writes: the reader decodes a part when asked, so two pages at most are in memory,
    // the one being written and the next.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<(Part, Totals), ArchiveError>>(1);
    let (ask, mut asked) = tokio::sync::mpsc::channel::<()>(2);
    let reading = tokio::task::spawn_blocking(move || {
        let mut reader = match Reader::new(input) {
            Ok(r) => r.with_batches(RESTORE_BATCH_BYTES, RESTORE_BATCH_EVENTS),
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        };
        loop {
            if asked.blocking_recv().is_none() {
                return;
            }
            let next = reader.next_part();
            let done = matches!(next, Ok(None) | Err(_));
            let sent = match next {
                Ok(Some(part)) => tx.blocking_send(Ok((part, reader.totals().clone()))),
                Ok(None) => Ok(()),
                Err(e) => tx.blocking_send(Err(e)),
            };
            if done || sent.is_err() {
                return;
            }
        }
    });
    let mut end = None;
    let _ = ask.send(()).await;
    while let Some(next) = rx.recv().await {
        let (part, totals) = next?;
        // The next part is decoded while this one is written.
        let _ = ask.send(()).await;
        match part {
            Part::Info(_) => {}
            Part::Directory(rows) => import_directory(store, rows, now).await?,
            Part::Events(events) => store.import_events(events, now).await?,
            Part::End(t) => end = Some(t),
        }
        progress(&totals);
    }
    let _ = reading.await;
    let end = end.ok_or_else(|| BackupError::Refused("the archive has no end part".into()))?;
    store.finish_import().await?;
    Ok(end)
}

/// Writes directory rows through the contract: endpoints exactly as they were (a client
/// certificate's pair set in between), plans, alert addresses, account secrets, breakers,
/// usage.
async fn import_directory(
    store: &Backend,
    rows: Vec<DirectoryRecord>,
    now: Millis,
) -> Result<(), StoreError> {
    for row in rows {
        match row {
            DirectoryRecord::Endpoint {
                endpoint,
                client_certificate,
            } => {
                let ep = *endpoint;
                store.put_endpoint(ep.clone()).await?;
                if let (Some((chain, key)), Some(described)) =
                    (client_certificate, ep.client_certificate.clone())
                {
                    store
                        .set_client_certificate(&ep.id, Some((&chain, &key, described)), now)
                        .await?;
                    store.put_endpoint(ep).await?;
                }
            }
            DirectoryRecord::Plan { account_id, plan } => {
                store.set_account_plan(&account_id, Some(plan)).await?
            }
            DirectoryRecord::AlertEmails { account_id, emails } => {
                store.set_alert_emails(&account_id, emails).await?
            }
            DirectoryRecord::AccountSecret {
                account_id,
                name,
                value,
            } => store.set_account_secret(&account_id, &name, &value).await?,
            DirectoryRecord::Breaker {
                endpoint_id,
                breaker,
            } => {
                store
                    .change_breaker(&endpoint_id, now, |b| *b = breaker)
                    .await?
            }
            DirectoryRecord::LastSuccess { endpoint_id, at } => {
                store.keep_last_successes(vec![(endpoint_id, at)]).await?
            }
            DirectoryRecord::Usage {
                account_id,
                minute,
                minute_used,
                day,
                day_used,
            } => {
                let w = crate::policy::quota::Windows { minute, day };
                store
                    .set_quota_usage(&account_id, w, (minute_used, day_used))
                    .await?
            }
            DirectoryRecord::Application { application } => {
                store.put_application(&application).await?
            }
            DirectoryRecord::ApiAnswer {
                account_id,
                key,
                answer,
            } => {
                store.keep_api_answer(&account_id, &key, answer).await?;
            }
        }
    }
    Ok(())
}
