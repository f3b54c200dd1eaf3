//! An account's purge on the embedded store ([`herald_store::contract::Accounts::purge_account`]):
//! first its endpoints (their client certificates, breakers and rate buckets); then its events
//! (hot and folded) with their payloads, deliveries, attempts, pending entries and idempotency
//! keys, and its account index; its debounce windows, whatever their key (their own index);
//! then its plan and alert addresses, quota counters, account secrets and portal sessions. The rows go from sled's trees at once; the
//! bytes stay in sled's files until sled rewrites them (docs/operations.md, "Purging an
//! account").

use std::collections::{BTreeSet, HashMap, HashSet};

use super::codec;
use super::keys::{self, KeyRow};
use super::{key, Claim, EventRecord, Inner, Lane, Place, SledStore, StoreError, NO_LANE};
use herald_core::ids;
use herald_store::contract::Purge;
use herald_store::prelude::*;
use herald_store::Purged;

impl SledStore {
    /// Removes the account's events with everything of theirs; (events, deliveries) removed.
    fn purge_log(&self, account: &str) -> Result<(u64, u64), StoreError> {
        // No event moves between hot rows and folds while they go.
        let _folds = self.inner.lock_fold_writes();
        let (mut run, events) = LogPurge::find(self, account)?;
        let (hot, folded) = run.split(&events)?;
        run.tombstone_hot(&hot);
        run.remove_hot(hot)?;
        run.remove_folded(&folded)?;
        run.finish()
    }

    /// A removed delivery leaves the counts and the fresh watermark's buckets, here and only
    /// here: the scheduler drops its entries of purged events without touching them
    /// ([`Tombstones`]), those of the shared no-endpoint lane too. (Left to the queue, one
    /// that a manual retry had queued again left its second's bucket a second time, as if
    /// fresh: its pending row was gone.)
    fn forget_delivery(&self, d: &herald_core::model::Delivery, ulid: u128) {
        if d.is_fresh() {
            self.inner.lock_fresh().remove(ulid);
        }
        self.inner.stats.forget(d.state);
    }

    /// The account's debounce windows, whatever their key (the request's `debounce_key` or
    /// a payload field): found through their account index ([`key::ACCOUNT_WINDOW`]), never
    /// by recomputing keys, and removed with their end entries and index rows.
    fn forget_windows(&self, account: &str, batch: &mut sled::Batch) -> Result<(), StoreError> {
        let log = &self.inner.trees.log;
        for row in log.scan_prefix(key::account_windows(account)).keys() {
            let row = row?;
            if let Some(window) = key::window_of_index_row(&row) {
                if let Some(v) = log.get(window)? {
                    let w = codec::decode_window(&v)?;
                    batch.remove(&key::window_end(w.end, &window)[..]);
                    batch.remove(&window[..]);
                }
            }
            batch.remove(row);
        }
        Ok(())
    }
}

/// Events among hot rows, decoded.
type Hot = Vec<(u128, EventRecord)>;

/// One purge of an account's log ([`SledStore::purge_log`]), phase by phase, under the fold
/// lock: what it found, the claims it holds until it is over, and what it removed.
struct LogPurge<'a> {
    store: &'a SledStore,
    account: &'a str,
    /// The highest id of the account's own events: its tombstone.
    upto: Option<u128>,
    /// The operator events about the account ([`key::ABOUT`]): they go too, not counted.
    operator: BTreeSet<u128>,
    /// The account index's rows and the operator events' index rows.
    index_rows: Vec<sled::IVec>,
    claims: Vec<Claim>,
    /// The removed events' key rows, released at the end.
    released: Vec<(KeyRow, u128)>,
    /// (events, deliveries) of the account's own removed.
    removed: (u64, u64),
}

impl<'a> LogPurge<'a> {
    /// The account's events (its own and the operator's about it), from their indexes.
    fn find(
        store: &'a SledStore,
        account: &'a str,
    ) -> Result<(LogPurge<'a>, BTreeSet<u128>), StoreError> {
        let log = &store.inner.trees.log;
        let mut events = BTreeSet::new();
        let mut index_rows = Vec::new();
        for item in log.scan_prefix(key::account_events(account)) {
            let (k, v) = item?;
            let mut listed = Vec::new();
            codec::decode_targets(&v, &mut listed)?;
            events.extend(listed);
            index_rows.push(k);
        }
        let upto = events.last().copied();
        let mut operator = BTreeSet::new();
        for k in log.scan_prefix(key::abouts(account)).keys() {
            let k = k?;
            operator.extend(key::ulid(&k[16..]));
            index_rows.push(k);
        }
        events.extend(operator.iter().copied());
        let run = LogPurge {
            store,
            account,
            upto,
            operator,
            index_rows,
            claims: Vec::new(),
            released: Vec::new(),
            removed: (0, 0),
        };
        Ok((run, events))
    }

    /// The events among hot rows, decoded, and the folded ones.
    fn split(&self, events: &BTreeSet<u128>) -> Result<(Hot, BTreeSet<u128>), StoreError> {
        let inner = &self.store.inner;
        let (mut hot, mut folded) = (Vec::new(), BTreeSet::new());
        for &event in events {
            match inner.trees.log.get(key::event(event))? {
                Some(v) => hot.push((event, inner.decode_event(event, &v, &Place::Hot)?.0)),
                None => {
                    folded.insert(event);
                }
            }
        }
        Ok((hot, folded))
    }

    /// The tombstone first ([`Tombstones`]): from here on the scheduler drops what it holds of
    /// these events, and what their running attempts record is discarded. The account's
    /// endpoints' lanes wait for nothing any more; the operator endpoints' lanes go on without
    /// the deliveries of the operator events about it. Each delivery is claimed; those whose
    /// claims are held (their attempts running) keep the tombstone until they are let go.
    fn tombstone_hot(&mut self, hot: &Hot) {
        let inner = &self.store.inner;
        let mut tombstones = inner.lock_tombstones_mut();
        let mut lanes = HashSet::new();
        for (event, rec) in hot {
            if !self.operator.contains(event) {
                lanes.extend(rec.targets.iter().copied().filter(|l| *l != NO_LANE));
            }
        }
        if let Some(upto) = self.upto {
            for lane in &lanes {
                inner.due.drop_lane(*lane, upto);
            }
        }
        let mut busy = Vec::new();
        // Deliveries dropped one by one, by lane: the operator events' (their endpoints' lanes
        // go on) and every one of the shared no-endpoint lane.
        let mut one_by_one: HashMap<Lane, Vec<u128>> = HashMap::new();
        for (event, rec) in hot {
            let deliveries: Vec<u128> = (0..rec.targets.len())
                .map(|i| ids::delivery_of(*event, i))
                .collect();
            let operator = self.operator.contains(event);
            let held: Vec<(Lane, u128)> = rec
                .targets
                .iter()
                .copied()
                .zip(deliveries.iter().copied())
                .filter(|(lane, _)| operator || *lane == NO_LANE)
                .collect();
            if !held.is_empty() {
                for (lane, d) in &held {
                    one_by_one.entry(*lane).or_default().push(*d);
                }
                tombstones.events.insert(*event, held);
            }
            for delivery in deliveries {
                match inner.claim(delivery) {
                    Some(c) => self.claims.push(c),
                    None => busy.push(delivery),
                }
            }
        }
        for (lane, deliveries) in one_by_one {
            inner.due.drop_deliveries(lane, &deliveries);
        }
        if let Some(upto) = self.upto {
            tombstones.add(self.account, upto, &lanes, busy);
        }
    }

    /// Removes the hot events, one batch each, and takes their deliveries out of the counts.
    fn remove_hot(&mut self, hot: Hot) -> Result<(), StoreError> {
        let inner = &self.store.inner;
        let log = &inner.trees.log;
        for (event, rec) in hot {
            let mut batch = sled::Batch::default();
            for i in 0..rec.targets.len() {
                let d = inner.assemble(&rec.meta, &rec.targets, i, &Place::Hot)?;
                let ulid = ids::delivery_of(event, i);
                for k in log.scan_prefix(key::attempts(ulid)).keys() {
                    batch.remove(k?);
                }
                batch.remove(&key::pending(ulid)[..]);
                self.store.forget_delivery(&d, ulid);
            }
            for kind in [key::CHUNK, key::TARGETS] {
                for k in log.scan_prefix(key::of(kind, event)).keys() {
                    batch.remove(k?);
                }
            }
            batch.remove(&key::event(event)[..]);
            log.apply_batch(batch)?;
            self.released.extend(keys::event_rows(&rec.meta, event));
            if !self.operator.contains(&event) {
                self.removed.0 += 1;
                self.removed.1 += rec.targets.len() as u64;
            }
        }
        Ok(())
    }

    /// Removes the folded events from their folds. A folded delivery has ended and is in no
    /// lane, but a manual retry may hold it (it read it, and waits for the fold lock to bring
    /// it back among hot rows): a claim found held keeps the tombstone until the retry is over,
    /// so what it writes is discarded.
    fn remove_folded(&mut self, folded: &BTreeSet<u128>) -> Result<(), StoreError> {
        let inner = &self.store.inner;
        let (mut busy, mut folded_operator) = (Vec::new(), Vec::new());
        for (event, rows) in inner.drop_folded(folded)? {
            let Some((_, v)) = rows.iter().find(|(k, _)| k[..] == key::event(event)[..]) else {
                continue;
            };
            let (rec, _) = codec::decode_event(event, v)?;
            let deliveries: Vec<(Lane, u128)> = (0..rec.target_count)
                .map(|i| (NO_LANE, ids::delivery_of(event, i)))
                .collect();
            for (_, d) in &deliveries {
                // Let go at once: its rows are gone, so whoever claims it later finds nothing.
                if inner.claim(*d).is_none() {
                    busy.push(*d);
                }
                // Its state is its last attempt's.
                let prefix = key::attempts(*d);
                let last = rows.iter().rfind(|(k, _)| k.starts_with(&prefix));
                if let Some((k, v)) = last {
                    inner.stats.forget(codec::decode_attempt(k, v)?.state);
                }
            }
            self.released.extend(keys::event_rows(&rec.meta, event));
            if self.operator.contains(&event) {
                folded_operator.push((event, deliveries));
            } else {
                self.removed.0 += 1;
                self.removed.1 += rec.target_count as u64;
            }
        }
        let mut tombstones = inner.lock_tombstones_mut();
        if let Some(upto) = self.upto {
            tombstones.add(self.account, upto, &HashSet::new(), busy);
        }
        tombstones.events.extend(folded_operator);
        Ok(())
    }

    /// The indexes and windows go, the keys are released, and the claims end.
    fn finish(self) -> Result<(u64, u64), StoreError> {
        let mut batch = sled::Batch::default();
        for k in self.index_rows {
            batch.remove(k);
        }
        self.store.forget_windows(self.account, &mut batch)?;
        let inner = &self.store.inner;
        inner.trees.log.apply_batch(batch)?;
        inner.keys.release(&self.released)?;
        drop(self.claims);
        Ok(self.removed)
    }
}

/// Accounts purged while the scheduler may still hold entries of their events: an entry taken
/// when the purge came (its attempt running, or its claim refused while the purge held it), or
/// queued by the committer after the purge read its cycle; or while someone holds a claim of
/// one of their deliveries (a manual retry, a commit cycle superseding a trailing candidate).
/// Each account's tombstone is the highest event id the purge removed: the due index drops that
/// account's lanes' entries at or below it ([`super::DueIndex::drop_lane`]), a delivery write
/// of such an event is discarded, and an entry that comes up without its event leaves the
/// counts alone (the purge took it out of them, once). A tombstone goes once neither the due
/// index, the committer nor a claim holds such an entry ([`Inner::sweep_tombstones`]), so they
/// never pile up.
#[derive(Default)]
pub(super) struct Tombstones {
    by_account: HashMap<String, Tombstone>,
    /// Events whose deliveries are dropped one by one ([`super::DueIndex::drop_deliveries`]),
    /// each with them and their lanes: the operator events about purged accounts (their
    /// endpoints' lanes go on), and the deliveries of the shared no-endpoint lane.
    /// (A folded event's deliveries have ended and are in no lane: [`NO_LANE`] stands there.)
    events: HashMap<u128, Vec<(Lane, u128)>>,
}

struct Tombstone {
    /// The highest event id the purge removed.
    upto: u128,
    /// The purged endpoints' lanes.
    lanes: HashSet<Lane>,
    /// Deliveries whose claim the purge could not take (their attempts were running).
    busy: Vec<u128>,
}

impl Tombstones {
    fn add(&mut self, account: &str, upto: u128, lanes: &HashSet<Lane>, busy: Vec<u128>) {
        let t = self
            .by_account
            .entry(account.to_string())
            .or_insert_with(|| Tombstone {
                upto,
                lanes: HashSet::new(),
                busy: Vec::new(),
            });
        t.upto = t.upto.max(upto);
        t.lanes.extend(lanes);
        t.busy.extend(busy);
    }

    /// Whether `event` of `account` went with a purge.
    pub(super) fn covers(&self, account: &str, event: u128) -> bool {
        (!self.by_account.is_empty()
            && self
                .by_account
                .get(account)
                .is_some_and(|t| event <= t.upto))
            || (!self.events.is_empty() && self.events.contains_key(&event))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_account.is_empty() && self.events.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_account.len() + self.events.len()
    }
}

impl Inner {
    pub(super) fn lock_tombstones(&self) -> std::sync::RwLockReadGuard<'_, Tombstones> {
        self.tombstones.read().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_tombstones_mut(&self) -> std::sync::RwLockWriteGuard<'_, Tombstones> {
        self.tombstones.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The committer's cycle is over: its entries are in the due index.
    pub(super) fn mark_queued(&self) {
        let mut fresh = self.lock_fresh();
        fresh.queued = fresh.last_event;
    }

    /// Removes the tombstones whose events nothing holds any more: the committer is past them,
    /// no claim holds one of their deliveries, and the due index can hand out none of them
    /// again (a purged account's lanes have no entry waiting or running; an operator lane
    /// has none of the dropped deliveries out, in a sequence or in a refill under way).
    /// (Checked at every checkpoint and after each purge.)
    pub(super) fn sweep_tombstones(&self) {
        {
            let t = self.lock_tombstones();
            if t.by_account.is_empty() && t.events.is_empty() {
                return;
            }
        }
        let queued = self.lock_fresh().queued;
        let mut tombstones = self.lock_tombstones_mut();
        tombstones.by_account.retain(|_, t| {
            let claims = self.lock_claims();
            let held = queued < t.upto
                || t.busy.iter().any(|d| claims.contains(d))
                || t.lanes.iter().any(|l| !self.due.lane_idle(*l));
            drop(claims);
            if !held {
                for lane in &t.lanes {
                    self.due.forget_dropped(*lane);
                }
            }
            held
        });
        tombstones.events.retain(|event, deliveries| {
            let claims = self.lock_claims();
            let held = queued < *event
                || deliveries.iter().any(|(_, d)| claims.contains(d))
                || deliveries
                    .iter()
                    .any(|(lane, d)| self.due.holds_any(*lane, &[*d]));
            drop(claims);
            if !held {
                let ids: Vec<u128> = deliveries.iter().map(|(_, d)| *d).collect();
                self.due.forget_dropped_deliveries(&ids);
            }
            held
        });
    }
}

/// The account an operator event is about: its payload's `data.account_id`, for an event of
/// the reserved operator account ([`herald_core::model::OPERATOR_ACCOUNT`]).
pub(super) fn operator_subject(account_id: &str, payload: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Payload {
        data: Data,
    }
    #[derive(serde::Deserialize)]
    struct Data {
        account_id: Option<String>,
    }
    if account_id != herald_core::model::OPERATOR_ACCOUNT {
        return None;
    }
    serde_json::from_slice::<Payload>(payload)
        .ok()?
        .data
        .account_id
}

impl Purge for SledStore {
    /// [`herald_store::contract::Accounts::purge_account`].
    async fn purge_account(&self, account: &str) -> Result<Purged, StoreError> {
        // Its endpoints first: an event that arrives meanwhile has nowhere to go.
        let mut endpoints = 0;
        for ep in self.account_endpoints(account) {
            if self.delete_endpoint(&ep.id).await? {
                endpoints += 1;
            }
            self.drop_minutes(&ep.id)?;
        }
        let owned = account.to_string();
        let (events, deliveries) = super::blocking(self, move |s| s.purge_log(&owned)).await?;
        let purged = Purged {
            events,
            deliveries,
            endpoints,
        };
        self.forget_account(account)?;
        self.forget_application(account)?;
        let t = &self.inner.trees;
        t.quota.remove(account.as_bytes())?;
        for k in t
            .account_secrets
            .scan_prefix(codec::account_key(account, ""))
            .keys()
        {
            t.account_secrets.remove(k?)?;
        }
        for item in t.portal_sessions.scan_prefix(b"h") {
            let (k, v) = item?;
            let s: herald_core::model::PortalSession = serde_json::from_slice(&v)
                .map_err(|e| StoreError::Corrupt(format!("portal session: {e}")))?;
            if s.account_id == account {
                t.portal_sessions.remove(k)?;
                t.portal_sessions
                    .remove([b"i".as_slice(), s.id.as_bytes()].concat())?;
            }
        }
        self.sync().await?;
        self.inner.sweep_tombstones();
        Ok(purged)
    }
}
