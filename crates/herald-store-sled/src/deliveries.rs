//! Deliveries: assembled from their event row, pending entry and last attempt; changed by the
//! engine (an attempt, a manual retry) in one atomic write, by whoever holds the delivery's
//! [`Claim`]; listed newest first with filters.

use bytes::Bytes;

use super::blocking;
use super::codec::{self, AttemptRecord, EventRecord, Pending};
use super::key;
use super::{
    lane_of, Changed, Claim, DeliveryFilter, DueDelivery, Inner, Lane, Place, SledStore,
    StoreError, NO_LANE,
};
use herald_core::clock::Millis;
use herald_core::ids::{self, DELIVERY, ENDPOINT, EVENT};
use herald_core::model::{Attempt, Delivery, DeliveryState, EventMeta};
use herald_core::policy::ordering;
use herald_store::contract::DeliveryChanges;
use herald_store::contract::DeliveryLog;
use herald_store::{Fence, SEARCH_EVENTS};
use std::future::ready;
use std::future::Future;

impl Inner {
    pub(super) fn pending_of(&self, delivery: u128) -> Result<Option<(Pending, Lane)>, StoreError> {
        match self.trees.log.get(key::pending(delivery))? {
            Some(v) => Ok(Some(codec::decode_pending(&v)?)),
            None => Ok(None),
        }
    }

    pub(super) fn last_attempt(
        &self,
        delivery: u128,
        place: &Place,
    ) -> Result<Option<AttemptRecord>, StoreError> {
        match self.last_row(place, &key::attempts(delivery))? {
            Some((k, v)) => codec::decode_attempt(&k, &v).map(Some),
            None => Ok(None),
        }
    }

    /// The delivery to the event's `index`-th target, with its state as stored now (its event's
    /// rows are at `place`).
    pub(super) fn assemble(
        &self,
        meta: &EventMeta,
        targets: &[u128],
        index: usize,
        place: &Place,
    ) -> Result<Delivery, StoreError> {
        let event = ids::parse(EVENT, &meta.id).unwrap_or_default();
        let ulid = ids::delivery_of(event, index);
        // A read that raced the folder runs again ([`Inner::consistent`]), so `place` holds.
        let (pending, last) = match place {
            Place::Hot => (self.pending_of(ulid)?, self.last_attempt(ulid, place)?),
            // A folded delivery has ended: no pending entry.
            Place::Folded(_) => (None, self.last_attempt(ulid, place)?),
        };
        let endpoint = targets.get(index).copied().unwrap_or(NO_LANE);
        Ok(delivery_from(
            ulid,
            meta,
            endpoint,
            pending.map(|p| p.0),
            last.as_ref(),
        ))
    }
}

/// A delivery's state from its fixed fields, its pending entry and its last attempt.
pub(super) fn delivery_from(
    ulid: u128,
    meta: &EventMeta,
    endpoint: u128,
    pending: Option<Pending>,
    last: Option<&AttemptRecord>,
) -> Delivery {
    let (state, next) = match (pending, last) {
        (Some(p), _) => (DeliveryState::Pending, Some(p.due)),
        (None, Some(a)) => (a.state, None),
        (None, None) => (DeliveryState::Pending, Some(meta.received_at)),
    };
    Delivery {
        id: ids::format(DELIVERY, ulid),
        event_id: meta.id.clone(),
        endpoint_id: (endpoint != NO_LANE).then(|| ids::format(ENDPOINT, endpoint)),
        account_id: meta.account_id.clone(),
        event_type: meta.event_type.clone(),
        state,
        last_status: last.map(|a| a.attempt.status),
        last_http_status: last.and_then(|a| a.attempt.http_status),
        attempt_count: last.map_or(0, |a| a.attempt.number),
        next_attempt_at: next,
        created_at: meta.received_at,
        manual: pending.is_some_and(|p| p.manual),
        queued: pending.is_some(),
    }
}

/// Deliveries a list request looks at most before it answers with a cursor to go on from.
const LIST_SCAN_BUDGET: usize = 50_000;

impl SledStore {
    /// The event, its payload bytes exactly as ingested, and its deliveries as stored now (in
    /// fan-out order), from one read of its row.
    pub fn event_with_deliveries(
        &self,
        id: &str,
    ) -> Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError> {
        let Some(ulid) = ids::parse(EVENT, id) else {
            return Ok(None);
        };
        self.inner.consistent(|| {
            let Some((rec, payload, place)) = self.inner.event_with_payload(ulid)? else {
                return Ok(None);
            };
            let deliveries = (0..rec.targets.len())
                .map(|i| self.inner.assemble(&rec.meta, &rec.targets, i, &place))
                .collect::<Result<_, _>>()?;
            Ok(Some((rec.meta, payload, deliveries)))
        })
    }

    // --- deliveries ---------------------------------------------------------------------------

    pub fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        match ids::parse(DELIVERY, id) {
            Some(ulid) => self.delivery_by_ulid(ulid),
            None => Ok(None),
        }
    }

    fn delivery_by_ulid(&self, ulid: u128) -> Result<Option<Delivery>, StoreError> {
        let Some((event, index)) = ids::event_of(ulid) else {
            return Ok(None);
        };
        self.inner.consistent(|| {
            let Some((rec, _, place)) = self.inner.event_record(event)? else {
                return Ok(None);
            };
            if index >= rec.targets.len() {
                return Ok(None);
            }
            self.inner
                .assemble(&rec.meta, &rec.targets, index, &place)
                .map(Some)
        })
    }

    /// A due delivery with its event and payload, read once for its attempt.
    pub fn due_delivery(&self, ulid: u128) -> Result<Option<DueDelivery>, StoreError> {
        let Some((event, index)) = ids::event_of(ulid) else {
            return Ok(None);
        };
        self.inner.consistent(|| {
            let Some((rec, payload, place)) = self.inner.event_with_payload(event)? else {
                return Ok(None);
            };
            if index >= rec.targets.len() {
                return Ok(None);
            }
            let delivery = self
                .inner
                .assemble(&rec.meta, &rec.targets, index, &place)?;
            Ok(Some(DueDelivery {
                delivery,
                event: rec.meta,
                payload,
            }))
        })
    }

    /// For a delivery to an ordered endpoint (docs/delivery-contract.md): its ordering key and,
    /// while it waits behind another delivery of its key, that one's id. `None` for an unordered
    /// endpoint.
    pub fn ordering_of(
        &self,
        d: &Delivery,
    ) -> Result<Option<(String, Option<String>)>, StoreError> {
        let Some(ordering) = self.directory.ordering(d.endpoint_id.as_deref()) else {
            return Ok(None);
        };
        let Some(event) = ids::parse(EVENT, &d.event_id) else {
            return Ok(None);
        };
        let Some((rec, payload, _)) = self
            .inner
            .consistent(|| self.inner.event_with_payload(event))?
        else {
            return Ok(None);
        };
        let key = ordering::key_of(&ordering, rec.meta.ordering_key.as_deref(), &payload);
        let waiting_for = match (d.state, ids::parse(DELIVERY, &d.id)) {
            (DeliveryState::Pending, Some(ulid)) => self
                .inner
                .due
                .ahead_of(lane_of(d.endpoint_id.as_deref()), ulid)
                .map(|u| ids::format(DELIVERY, u)),
            _ => None,
        };
        Ok(Some((key, waiting_for)))
    }

    /// Every attempt of a delivery, oldest first.
    pub fn attempts(&self, delivery_id: &str) -> Result<Vec<Attempt>, StoreError> {
        let Some(ulid) = ids::parse(DELIVERY, delivery_id) else {
            return Ok(Vec::new());
        };
        let Some((event, _)) = ids::event_of(ulid) else {
            return Ok(Vec::new());
        };
        self.inner.consistent(|| {
            let mut out = Vec::new();
            let Some((_, place)) = self.inner.locate(event)? else {
                return Ok(out);
            };
            self.inner.each_row(&place, &key::attempts(ulid), |k, v| {
                out.push(codec::decode_attempt(k, v)?.attempt);
                Ok(())
            })?;
            Ok(out)
        })
    }

    /// The delivery's claim ([`Claim`]), unless someone holds it.
    pub fn claim(&self, delivery: u128) -> Option<Claim> {
        self.inner.claim(delivery)
    }

    /// False once the store failed for good ([`health`](super::health)): nothing should be
    /// attempted, since no result could be recorded.
    pub fn usable(&self) -> bool {
        self.inner.health.not_failed().is_ok()
    }

    /// Whether someone holds the delivery's claim (an attempt of it is running, say).
    pub fn is_claimed(&self, delivery_id: &str) -> bool {
        ids::parse(DELIVERY, delivery_id).is_some_and(|d| self.inner.lock_claims().contains(&d))
    }

    /// Writes a delivery's change from `was` to `now` (and the attempt that led to it) in one
    /// atomic write (a crash leaves the delivery as it was or as it is now, never between), and
    /// keeps the due index and the counts in step. The caller holds the delivery's claim.
    pub fn update_delivery(
        &self,
        was: &Delivery,
        now: &Delivery,
        attempt: Option<&Attempt>,
    ) -> Result<(), StoreError> {
        // Nothing more is recorded once the store failed for good: a write now may reach the
        // file, and an undo kept for the next start could put back what it removed (a
        // delivered candidate made due again).
        self.inner.health.not_failed()?;
        // The delivery of a purged account, attempted while the purge came: discarded.
        let tombstones = self.inner.lock_tombstones();
        let event = ids::parse(DELIVERY, &now.id).and_then(ids::event_of);
        if event.is_some_and(|(e, _)| tombstones.covers(&now.account_id, e)) {
            return Ok(());
        }
        let written = self.write_delivery(was, now, attempt);
        drop(tombstones);
        if written.is_err() {
            // Like a failed commit: storage refuses writes (see `app::STORAGE_DOWN_STOP`).
            self.inner.set_healthy(false);
        }
        written
    }

    fn write_delivery(
        &self,
        was: &Delivery,
        now: &Delivery,
        attempt: Option<&Attempt>,
    ) -> Result<(), StoreError> {
        let t = &self.inner.trees;
        let ulid = ids::parse(DELIVERY, &now.id)
            .ok_or_else(|| StoreError::Corrupt(format!("delivery id {}", now.id)))?;
        let pending_key = key::pending(ulid);
        let lane = lane_of(now.endpoint_id.as_deref());
        let pending = match (now.state, now.next_attempt_at) {
            (DeliveryState::Pending, Some(due)) => Some(Pending {
                due,
                manual: now.manual,
            }),
            _ => None,
        };
        let mut batch = sled::Batch::default();
        let mut ops = 0;
        if let Some(p) = pending {
            batch.insert(&pending_key[..], &codec::encode_pending(p, lane)[..]);
            ops += 1;
        }
        let attempt_row = attempt.map(|a| {
            (
                key::attempt(ulid, a.number),
                codec::encode_attempt(ulid, a, now.state),
            )
        });
        if let Some((k, v)) = &attempt_row {
            batch.insert(&k[..], &v[..]);
            ops += 1;
        }
        if pending.is_none() && was.queued {
            batch.remove(&pending_key[..]);
            ops += 1;
        }
        #[cfg(test)]
        self.inner.faults.check(&self.inner.faults.delivery_write)?;
        match (ops, attempt_row) {
            // The common case (a first attempt that ends the delivery) is one row: a plain
            // insert is atomic too, and leaves sled's batch lock alone.
            (1, Some((k, v))) => {
                t.log.insert(k, v)?;
            }
            (0, _) => {}
            _ => t.log.apply_batch(batch)?,
        }

        if was.is_fresh() && (attempt.is_some() || pending.is_some()) {
            self.inner.lock_fresh().remove(ulid);
        }
        if let (true, Some(at)) = (was.queued, was.next_attempt_at) {
            self.inner.due.remove(lane, at, ulid);
        }
        if let Some(p) = pending {
            self.inner.due.insert(lane, p.due, ulid, false);
        }
        if was.state == DeliveryState::Pending && now.state != DeliveryState::Pending {
            // It ended: the next of its sequence (an ordered endpoint's) may go.
            self.inner.due.ended(lane, ulid);
        }
        self.inner.stats.count(Some(was.state), now.state);
        Ok(())
    }

    /// Drops a pending entry (to `lane`) whose event does not exist (a commit that never
    /// finished, or a purge). One of a purged event is dropped as it is: the purge took the
    /// delivery out of the counts and the fresh buckets, which must lose it once only.
    pub fn drop_orphan(&self, lane: Lane, ulid: u128) -> Result<(), StoreError> {
        if self.inner.due.is_dropped(lane, ulid) {
            return Ok(());
        }
        let fresh = self.inner.trees.log.remove(key::pending(ulid))?.is_none();
        if fresh {
            self.inner.lock_fresh().remove(ulid);
        }
        self.inner.stats.forget(DeliveryState::Pending);
        Ok(())
    }

    /// Reads, changes and writes one delivery under its claim; [`Changed::Busy`] if someone
    /// holds it.
    pub fn change_delivery<T>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)>,
    ) -> Result<Changed<T>, StoreError> {
        let Some(ulid) = ids::parse(DELIVERY, id) else {
            return Ok(Changed::NotFound);
        };
        let Some(_claim) = self.inner.claim(ulid) else {
            return Ok(Changed::Busy);
        };
        let Some(was) = self.delivery_by_ulid(ulid)? else {
            return Ok(Changed::NotFound);
        };
        match f(&was) {
            Some((now, out)) => {
                // A folded delivery changes among hot rows.
                if let Some((event, _)) = ids::event_of(ulid) {
                    self.inner.unfold(event)?;
                }
                self.update_delivery(&was, &now, None)?;
                Ok(Changed::Yes(out))
            }
            None => Ok(Changed::No),
        }
    }

    /// Makes every waiting delivery to `endpoint_id` due at `now` and ends its lane's hold (used
    /// when the endpoint is deleted, so they end at once instead of at their next retry time or
    /// the breaker's next probe). Returns how many were rescheduled.
    pub fn expedite_endpoint(&self, endpoint_id: &str, now: Millis) -> Result<usize, StoreError> {
        let lane = lane_of(Some(endpoint_id));
        let mut n = 0;
        for (at, ulid) in self.inner.due.later_entries(lane) {
            if at <= now {
                continue;
            }
            let id = ids::format(DELIVERY, ulid);
            let changed = self.change_delivery(&id, |d| {
                (d.state == DeliveryState::Pending && d.queued).then(|| {
                    let mut d = d.clone();
                    d.next_attempt_at = Some(now);
                    (d, ())
                })
            })?;
            n += usize::from(matches!(changed, Changed::Yes(())));
        }
        // Its breaker's hold on the lane ends too: the endpoint is gone, so what waits in the
        // lane ends now (`no_endpoint`) rather than at the breaker's next probe.
        self.inner.due.release(lane);
        Ok(n)
    }

    /// Deliveries newest first, from after `cursor`, matching `filter`. The cursor is the last id
    /// looked at; `None` means the end was reached. With an account in the filter only that
    /// account's events are read (its index); `since` and `until` bound the key range.
    pub fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Delivery>, Option<String>), StoreError> {
        let start = cursor
            .and_then(|c| ids::parse(DELIVERY, c))
            .and_then(ids::event_of);
        let endpoint = match &filter.endpoint_id {
            Some(e) => match ids::parse(ENDPOINT, e) {
                Some(u) => Some(u),
                None => return Ok((Vec::new(), None)),
            },
            None => None,
        };
        // Event ULIDs carry their time: the time bounds are a key range.
        let lower = filter.since.map_or(0, ids::ulid_floor);
        let mut upper = filter
            .until
            .map_or(u128::MAX, |u| ids::ulid_floor(u).saturating_sub(1));
        if let Some((event, _)) = start {
            upper = upper.min(event);
        }
        if upper < lower {
            return Ok((Vec::new(), None));
        }
        let range = (lower, upper);
        self.inner
            .consistent(|| self.list_page(filter, limit, start, endpoint, range))
    }

    /// A page of [`Self::list_deliveries`]: events with ULIDs in `range`, newest first, from
    /// `start` (an event and the index of the delivery after the cursor's).
    fn list_page(
        &self,
        filter: &DeliveryFilter,
        limit: usize,
        start: Option<(u128, usize)>,
        endpoint: Option<u128>,
        (lower, upper): (u128, u128),
    ) -> Result<(Vec<Delivery>, Option<String>), StoreError> {
        let inner = &self.inner;
        let events: EventRows<'_> = match &filter.account_id {
            Some(account) => inner.account_newest_first(account, lower, upper),
            None => Box::new(inner.newest_first(lower, upper)),
        };
        let mut out = Vec::new();
        let mut last_seen = None;
        let mut scanned = 0;
        let mut searched = 0;
        for item in events {
            let (event, v, place) = item?;
            let (rec, inline) = self.inner.decode_event(event, &v, &place)?;
            let m = &rec.meta;
            let top = match start {
                Some((e, index)) if e == event => index.min(rec.targets.len()),
                _ => rec.targets.len(),
            };
            let fixed = filter
                .account_id
                .as_ref()
                .is_none_or(|a| *a == m.account_id)
                && filter
                    .event_type
                    .as_ref()
                    .is_none_or(|t| *t == m.event_type);
            if let Some(text) = &filter.text {
                if searched == SEARCH_EVENTS {
                    return Ok((out, last_seen));
                }
                searched += 1;
                if !fixed
                    || !self
                        .inner
                        .payload_holds(event, &rec, inline, &place, text)?
                {
                    // Passed over whole: the next page starts below its deliveries.
                    last_seen = Some(ids::format(DELIVERY, ids::delivery_of(event, 0)));
                    continue;
                }
            }
            for index in (0..top).rev() {
                if scanned >= LIST_SCAN_BUDGET {
                    return Ok((out, last_seen));
                }
                scanned += 1;
                last_seen = Some(ids::format(DELIVERY, ids::delivery_of(event, index)));
                if !fixed || endpoint.is_some_and(|e| rec.targets[index] != e) {
                    continue;
                }
                let d = self.inner.assemble(m, &rec.targets, index, &place)?;
                if filter.state.is_none_or(|s| s == d.state)
                    && filter.status.is_none_or(|s| d.last_status == Some(s))
                {
                    out.push(d);
                    if out.len() == limit {
                        return Ok((out, last_seen));
                    }
                }
            }
        }
        Ok((out, None))
    }
}

impl Inner {
    /// Whether the event's payload (inline in its row, else in its chunks' rows) holds `text`.
    fn payload_holds(
        &self,
        event: u128,
        rec: &EventRecord,
        inline: Option<&[u8]>,
        place: &Place,
        text: &str,
    ) -> Result<bool, StoreError> {
        let text = text.as_bytes();
        let holds =
            |payload: &[u8]| text.is_empty() || payload.windows(text.len()).any(|w| w == text);
        if let Some(payload) = inline {
            return Ok(holds(payload));
        }
        if rec.payload_inline {
            return Ok(holds(&[]));
        }
        let mut payload = Vec::with_capacity(rec.payload_len);
        self.each_row(place, &key::of(key::CHUNK, event), |_, v| {
            payload.extend_from_slice(v);
            Ok(())
        })?;
        Ok(holds(&payload))
    }
}

/// Events read newest first: each with its row and where the row is.
type EventRows<'a> = Box<dyn Iterator<Item = Result<(u128, sled::IVec, Place), StoreError>> + 'a>;

impl Inner {
    /// The account's events from `upper` down to `lower`, newest first, through its index; an
    /// entry whose event is gone (pruned a moment ago) is skipped.
    fn account_newest_first<'a>(
        &'a self,
        account: &str,
        lower: u128,
        upper: u128,
    ) -> EventRows<'a> {
        Box::new(
            self.trees
                .log
                .range(key::account_event(account, 0)..=key::account_event(account, upper))
                .rev()
                .map(move |item| -> Result<Vec<u128>, StoreError> {
                    let (_, v) = item?;
                    let mut events = Vec::new();
                    codec::decode_targets(&v, &mut events)?;
                    Ok(events)
                })
                .flat_map(
                    move |row| -> Box<dyn Iterator<Item = Result<u128, StoreError>>> {
                        match row {
                            Ok(events) => Box::new(
                                events
                                    .into_iter()
                                    .rev()
                                    .filter(move |e| *e <= upper)
                                    .map(Ok),
                            ),
                            Err(e) => Box::new(std::iter::once(Err(e))),
                        }
                    },
                )
                .take_while(move |e| e.as_ref().map_or(true, |e| *e >= lower))
                .filter_map(move |e| {
                    let event = match e {
                        Ok(e) => e,
                        Err(e) => return Some(Err(e)),
                    };
                    // An entry whose event is gone (pruned a moment ago) is skipped.
                    self.locate(event)
                        .transpose()
                        .map(|found| found.map(|(row, place)| (event, row, place)))
                }),
        )
    }
}

impl DeliveryLog for SledStore {
    fn delivery(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Delivery>, StoreError>> + Send {
        let id = id.to_string();
        blocking(self, move |s| s.delivery(&id))
    }

    fn event(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes)>, StoreError>> + Send {
        let id = id.to_string();
        blocking(self, move |s| s.event(&id))
    }

    fn event_with_deliveries(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<(EventMeta, Bytes, Vec<Delivery>)>, StoreError>> + Send
    {
        let id = id.to_string();
        blocking(self, move |s| s.event_with_deliveries(&id))
    }

    fn attempts(
        &self,
        delivery_id: &str,
    ) -> impl Future<Output = Result<Vec<Attempt>, StoreError>> + Send {
        let id = delivery_id.to_string();
        blocking(self, move |s| s.attempts(&id))
    }

    fn list_deliveries(
        &self,
        filter: DeliveryFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> impl Future<Output = Result<(Vec<Delivery>, Option<String>), StoreError>> + Send {
        blocking(self, move |s| {
            s.list_deliveries(&filter, limit, cursor.as_deref())
        })
    }

    fn endpoint_pending(
        &self,
        endpoint_id: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let lane = herald_store::lane_of(Some(endpoint_id));
        ready(Ok(self.due().lane_len(lane) as u64))
    }
}

impl DeliveryChanges for SledStore {
    fn ordering_of(
        &self,
        d: &Delivery,
    ) -> impl Future<Output = Result<Option<(String, Option<String>)>, StoreError>> + Send {
        ready(SledStore::ordering_of(self, d))
    }

    fn change_delivery<T: Send + 'static>(
        &self,
        id: &str,
        f: impl FnOnce(&Delivery) -> Option<(Delivery, T)> + Send + 'static,
    ) -> impl Future<Output = Result<Changed<T>, StoreError>> + Send {
        let id = id.to_string();
        blocking(self, move |s| s.change_delivery(&id, f))
    }

    fn record_attempt(
        &self,
        was: &Delivery,
        now: &Delivery,
        attempt: &Attempt,
        _fence: Fence,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        // The engine holds the delivery's claim for the whole attempt.
        ready(SledStore::update_delivery(self, was, now, Some(attempt)))
    }

    fn is_held(&self, delivery_id: &str) -> bool {
        SledStore::is_claimed(self, delivery_id)
    }

    fn expedite_endpoint(
        &self,
        endpoint_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        ready(SledStore::expedite_endpoint(self, endpoint_id, now).map(|n| n as u64))
    }
}
