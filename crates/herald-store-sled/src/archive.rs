//! Backup and restore on the embedded store ([`herald_store::contract::Archive`]): events read
//! whole, newest first, hot or folded; events written whole into an empty store, as rows of
//! the current format.

use std::collections::HashMap;

use super::blocking;
use super::codec::{self, Pending};
use super::key;
use super::keys::{self, KeyRow};
use super::{lane_of, Inner, SledStore, StoreError, IDEMPOTENCY_WINDOW_MS};
use herald_core::clock::Millis;
use herald_core::ids::{self, DELIVERY, EVENT};
use herald_core::model::DeliveryState;
use herald_store::contract::Archive;
use herald_store::CopyStart;
use herald_store::{EventHistory, ARCHIVE_PAGE_BYTES};
use std::future::ready;
use std::future::Future;

impl SledStore {
    /// [`herald_store::contract::Archive::export_events`].
    pub fn export_events(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<EventHistory>, Option<String>), StoreError> {
        let upper = match before {
            Some(b) => match ids::parse(EVENT, b) {
                Some(u) => u.saturating_sub(1),
                None => return Err(StoreError::Format(format!("{b} is not an event id"))),
            },
            None => u128::MAX,
        };
        // The ids and the events in one consistent read: a fold or an unfold landing during
        // the walk moves rows the walk has not reached yet (the folder deletes hot rows it
        // folded), so a page read across one could miss events or hold one twice.
        let inner = &self.inner;
        let (page, next) = inner.consistent(|| {
            let mut out = Vec::new();
            let mut bytes = 0;
            let mut seen = 0;
            for item in inner.newest_first(0, upper) {
                let (event, _, _) = item?;
                seen += 1;
                // An event removed since (retention) is not in the backup.
                if let Some(h) = self.history_now(event)? {
                    bytes += h.bytes();
                    out.push(h);
                }
                if seen == limit || bytes >= ARCHIVE_PAGE_BYTES {
                    return Ok((out, Some(ids::format(EVENT, event))));
                }
            }
            Ok((out, None))
        })?;
        // Outside the consistent read, which a fold meanwhile makes read again.
        for h in &page {
            if let Some(event) = ids::parse(EVENT, &h.meta.id) {
                inner.let_go_of_rows(h, event)?;
            }
        }
        Ok((page, next))
    }

    /// The events of a page read before a sync that are still stored after it: the rows of a
    /// commit cycle are visible before its fsync, and a cycle that fails is undone, so only
    /// what is still there once every cycle in flight at the read has ended is durable.
    pub fn still_stored(&self, page: Vec<EventHistory>) -> Result<Vec<EventHistory>, StoreError> {
        let mut out = Vec::with_capacity(page.len());
        for h in page {
            let event = ids::parse(EVENT, &h.meta.id)
                .ok_or_else(|| StoreError::Format(format!("{} is not an event id", h.meta.id)))?;
            if self.inner.event_exists(event)? {
                out.push(h);
            }
        }
        Ok(out)
    }

    /// The event with its payload, its deliveries and their attempts (within a consistent read).
    fn history_now(&self, event: u128) -> Result<Option<EventHistory>, StoreError> {
        let inner = &self.inner;
        {
            let Some((rec, payload, place)) = inner.event_with_payload(event)? else {
                return Ok(None);
            };
            let mut deliveries = Vec::with_capacity(rec.targets.len());
            for index in 0..rec.targets.len() {
                let delivery = ids::delivery_of(event, index);
                let prefix = key::attempts(delivery);
                // The delivery and its attempts as of one moment: an attempt recorded between
                // the reads (its row and the pending row change in one write) would leave the
                // delivery counting fewer attempts than the archive holds, and a restored
                // cluster would number its next attempt as one that exists. A delivery counts
                // the number of its last attempt, read after the attempts: the same number
                // means none landed between.
                let (d, attempts) = loop {
                    let mut attempts = Vec::new();
                    inner.each_row(&place, &prefix, |k, v| {
                        attempts.push(codec::decode_attempt(k, v)?.attempt);
                        Ok(())
                    })?;
                    #[cfg(test)]
                    inner.faults.hold_exporting();
                    let d = inner.assemble(&rec.meta, &rec.targets, index, &place)?;
                    if d.attempt_count == attempts.last().map_or(0, |a| a.number) {
                        break (d, attempts);
                    }
                };
                deliveries.push((d, attempts));
            }
            Ok(Some(EventHistory {
                meta: rec.meta,
                payload,
                deliveries,
                lane_seqs: Vec::new(),
            }))
        }
    }

    /// Whether the store holds no event, endpoint, plan or account secret.
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        let t = &self.inner.trees;
        Ok(self.inner.newest_first(0, u128::MAX).next().is_none()
            && t.endpoints.is_empty()
            && t.accounts.is_empty()
            && t.account_secrets.is_empty())
    }

    /// [`herald_store::contract::Archive::import_events`]: the events' rows in one batch, as
    /// ingest and the engine would have written them, then their idempotency keys. Counts and
    /// the fresh watermark follow in memory and reach `meta` with the next checkpoint (at the
    /// latest when the store closes).
    pub fn import_events(&self, events: Vec<EventHistory>, now: Millis) -> Result<(), StoreError> {
        let inner = &self.inner;
        let oldest_day = key::idempotency_day(now - IDEMPOTENCY_WINDOW_MS);
        let mut batch = sled::Batch::default();
        let mut by_account: HashMap<&str, Vec<u128>> = HashMap::new();
        let mut key_rows: Vec<(KeyRow, u128)> = Vec::new();
        let mut states = Vec::new();
        let mut fresh = Vec::new();
        let mut newest = 0u128;
        let mut written = Vec::with_capacity(events.len());
        // Rows written, about: the event's, its account index share, payload chunks, targets,
        // deliveries' pending rows and attempts.
        let mut rows = 0;
        for h in &events {
            rows += 3
                + h.payload.len() / codec::CHUNK
                + h.deliveries.iter().map(|(_, a)| 1 + a.len()).sum::<usize>();
            let event = ids::parse(EVENT, &h.meta.id)
                .ok_or_else(|| StoreError::Format(format!("{} is not an event id", h.meta.id)))?;
            newest = newest.max(event);
            let targets: Vec<u128> = h
                .deliveries
                .iter()
                .map(|(d, _)| lane_of(d.endpoint_id.as_deref()))
                .collect();
            let encoded = codec::encode_event(&h.meta, &targets, &h.payload)?;
            written.push(event);
            if !encoded.payload_inline {
                for (i, chunk) in h.payload.chunks(codec::CHUNK).enumerate() {
                    batch.insert(&key::chunk(event, i as u32)[..], chunk);
                }
            }
            for (i, row) in encoded.target_rows.into_iter().enumerate() {
                batch.insert(&key::targets(event, i as u32)[..], row);
            }
            batch.insert(&key::event(event)[..], encoded.row);
            if let Some(about) = super::purge::operator_subject(&h.meta.account_id, &h.payload) {
                batch.insert(&key::about(&about, event)[..], &[][..]);
            }
            by_account
                .entry(&h.meta.account_id)
                .or_default()
                .push(event);
            import_deliveries(&mut batch, h, event, &targets, &mut fresh, &mut states)?;
            if key::idempotency_day(ids::ulid_ms(event)) >= oldest_day {
                key_rows.extend(keys::event_rows(&h.meta, event));
            }
        }
        for (account, mut events) in by_account {
            events.sort_unstable();
            for chunk in events.chunks(codec::INDEX_PER_ROW) {
                batch.insert(
                    &key::account_event(account, chunk[0])[..],
                    codec::encode_ulids(chunk),
                );
            }
        }
        {
            // Fresh deliveries hold the watermark below them, so the next start finds them.
            let mut f = inner.lock_fresh();
            fresh.iter().for_each(|d| f.add(*d));
            f.last_event = f.last_event.max(newest);
        }
        inner.trees.log.apply_batch(batch)?;
        // Written out now: rows not yet flushed stay in sled's cache whatever its capacity,
        // so a restore that only wrote would hold the whole archive in memory.
        inner.db.flush()?;
        for (h, event) in events.iter().zip(written) {
            inner.let_go_of_rows(h, event)?;
        }
        Inner::release_garbage(rows);
        inner.keys.add(&key_rows, newest)?;
        ids::observe(newest);
        for s in states {
            inner.stats.count(None, s);
        }
        Ok(())
    }
}

/// An imported event's deliveries into `batch`: their attempts (each in the state it left its
/// delivery in), their pending rows; the fresh ones and every delivery's state are noted for the
/// watermark and the counts.
fn import_deliveries(
    batch: &mut sled::Batch,
    h: &EventHistory,
    event: u128,
    targets: &[u128],
    fresh: &mut Vec<u128>,
    states: &mut Vec<DeliveryState>,
) -> Result<(), StoreError> {
    for (index, (d, attempts)) in h.deliveries.iter().enumerate() {
        let delivery = ids::delivery_of(event, index);
        if ids::parse(DELIVERY, &d.id) != Some(delivery) {
            return Err(StoreError::Format(format!(
                "delivery {} is not delivery {index} of event {}",
                d.id, h.meta.id
            )));
        }
        let lane = targets[index];
        // Every attempt but the last left the delivery pending; the last left it in
        // its state unless it waits again (a retry or a manual retry).
        let last_state = match d.state {
            DeliveryState::Pending => DeliveryState::Pending,
            _ if d.queued => DeliveryState::Pending,
            ended => ended,
        };
        for (i, a) in attempts.iter().enumerate() {
            let state = if i + 1 == attempts.len() {
                last_state
            } else {
                DeliveryState::Pending
            };
            batch.insert(
                &key::attempt(delivery, a.number)[..],
                codec::encode_attempt(delivery, a, state),
            );
        }
        if d.queued {
            let p = Pending {
                due: d.next_attempt_at.unwrap_or(d.created_at),
                manual: d.manual,
            };
            batch.insert(
                &key::pending(delivery)[..],
                &codec::encode_pending(p, lane)[..],
            );
        } else if d.is_fresh() {
            fresh.push(delivery);
        }
        states.push(d.state);
    }
    Ok(())
}

impl Archive for SledStore {
    fn account_secrets(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, String, String)>, StoreError>> + Send {
        ready(SledStore::account_secrets(self))
    }

    async fn export_events(
        &self,
        before: Option<String>,
        limit: usize,
    ) -> Result<(Vec<EventHistory>, Option<String>), StoreError> {
        let (page, next) =
            blocking(self, move |s| s.export_events(before.as_deref(), limit)).await?;
        // Only what is durable: the sync ends after every commit cycle in flight at the read
        // (fsynced, or failed and undone).
        SledStore::sync(self).await?;
        let page = blocking(self, move |s| s.still_stored(page)).await?;
        Ok((page, next))
    }

    async fn is_empty(&self) -> Result<bool, StoreError> {
        blocking(self, |s| s.is_empty()).await
    }

    async fn import_events(
        &self,
        events: Vec<EventHistory>,
        now: Millis,
    ) -> Result<(), StoreError> {
        blocking(self, move |s| s.import_events(events, now)).await
    }

    async fn finish_import(&self) -> Result<(), StoreError> {
        // Lanes come back from the pending deliveries when the store opens.
        Ok(())
    }

    async fn begin_copy(&self, _source: &str, _now: Millis) -> Result<CopyStart, StoreError> {
        Err(not_a_copy_target())
    }

    async fn keep_copy_mark(
        &self,
        _source: &str,
        _cursor: Option<&str>,
        _copied: u64,
        _finished: bool,
    ) -> Result<(), StoreError> {
        Err(not_a_copy_target())
    }
}

/// The embedded store takes a whole archive at once (a restore), never a copy's pages: its
/// import counts what it writes, and a page written twice would count twice.
fn not_a_copy_target() -> StoreError {
    StoreError::Format(
        "the embedded store is not a copy's target: back up the source and restore the archive \
         into it (herald backup, herald restore)"
            .into(),
    )
}
