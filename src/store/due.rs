//! The due index: which pending deliveries are due when, per endpoint, kept in memory.
//!
//! sled holds the durable truth (an event's fresh deliveries, the `pending` tree); polling it
//! would cost a scan per tick. The index is rebuilt from sled at start-up and then fed by
//! whoever makes a delivery due (the committer after an fsync, the engine after an attempt).
//!
//! Entries are grouped by *lane* (the endpoint they go to), so the index also does the
//! per-endpoint isolation: [`DueIndex::take`] hands out the earliest due entries across lanes,
//! but never more than the lane limit from one lane at once, and a lane held by its circuit
//! breaker hands out nothing until its hold ends. A dead endpoint's backlog therefore waits in its
//! own lane, costs nothing per tick, and never delays another endpoint's deliveries.
//!
//! Memory: an entry is 24 bytes (due time and delivery ULID). First attempts, which arrive in
//! time order, sit in a deque; retries and other later attempts in an ordered set.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::clock::Millis;

/// The endpoint an entry goes to (its ULID); [`NO_LANE`] for deliveries without an endpoint.
pub type Lane = u128;
pub const NO_LANE: Lane = 0;

/// A due delivery handed out by [`DueIndex::take`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub lane: Lane,
    pub at: Millis,
    pub delivery: u128,
    /// Its first attempt, due since ingest (as opposed to a retry or another later attempt).
    pub fresh: bool,
}

#[derive(Default)]
struct LaneQueue {
    fresh: VecDeque<(Millis, u128)>,
    later: BTreeSet<(Millis, u128)>,
    running: usize,
    held_until: Option<Millis>,
    /// This lane's key in `ready`, if it has one.
    ready_at: Option<Millis>,
}

impl LaneQueue {
    fn is_empty(&self) -> bool {
        self.fresh.is_empty() && self.later.is_empty()
    }

    fn earliest(&self) -> Option<Millis> {
        let f = self.fresh.front().map(|e| e.0);
        let l = self.later.first().map(|e| e.0);
        match (f, l) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn pop(&mut self) -> Option<(Millis, u128, bool)> {
        let f = self.fresh.front().map(|e| e.0);
        let l = self.later.first().map(|e| e.0);
        match (f, l) {
            (Some(a), Some(b)) if b < a => self.later.pop_first().map(|(t, d)| (t, d, false)),
            (Some(_), _) => self.fresh.pop_front().map(|(t, d)| (t, d, true)),
            (None, Some(_)) => self.later.pop_first().map(|(t, d)| (t, d, false)),
            (None, None) => None,
        }
    }
}

#[derive(Default)]
struct Inner {
    lanes: HashMap<Lane, LaneQueue>,
    /// Each lane that has entries and room to run one: (when its earliest entry is due, lane).
    ready: BTreeSet<(Millis, Lane)>,
    len: usize,
    lane_limit: usize,
}

impl Inner {
    /// Puts the lane's `ready` key in line with its queue, its running count and its hold.
    fn refresh(&mut self, lane: Lane) {
        let limit = self.lane_limit.max(1);
        let Some(q) = self.lanes.get_mut(&lane) else {
            return;
        };
        let want = match q.earliest() {
            Some(at) if q.running < limit => Some(q.held_until.map_or(at, |h| h.max(at))),
            _ => None,
        };
        if want != q.ready_at {
            if let Some(old) = q.ready_at {
                self.ready.remove(&(old, lane));
            }
            if let Some(at) = want {
                self.ready.insert((at, lane));
            }
            q.ready_at = want;
        }
        if q.is_empty() && q.running == 0 && q.held_until.is_none() {
            self.lanes.remove(&lane);
        }
    }

    /// Adds an entry; `back_in` puts a fresh entry back at the head of its deque (it was
    /// taken from there), instead of behind the newer ones.
    fn push(&mut self, lane: Lane, at: Millis, delivery: u128, fresh: bool, back_in: bool) -> bool {
        let q = self.lanes.entry(lane).or_default();
        let added = if fresh {
            if back_in {
                q.fresh.push_front((at, delivery));
            } else {
                q.fresh.push_back((at, delivery));
            }
            true
        } else {
            q.later.insert((at, delivery))
        };
        if added {
            self.len += 1;
        }
        added
    }
}

#[derive(Default)]
pub struct DueIndex {
    inner: Mutex<Inner>,
    changed: Notify,
}

impl DueIndex {
    /// Sets how many entries of one lane may be out (running) at once.
    pub fn set_lane_limit(&self, limit: usize) {
        let mut inner = self.lock();
        inner.lane_limit = limit;
        let lanes: Vec<Lane> = inner.lanes.keys().copied().collect();
        for lane in lanes {
            inner.refresh(lane);
        }
    }

    /// Adds a due delivery. `fresh`: its first attempt, due since ingest.
    pub fn insert(&self, lane: Lane, at: Millis, delivery: u128, fresh: bool) {
        self.insert_many([(lane, at, delivery, fresh)]);
    }

    pub fn insert_many(&self, entries: impl IntoIterator<Item = (Lane, Millis, u128, bool)>) {
        let mut inner = self.lock();
        let mut grew = false;
        for (lane, at, delivery, fresh) in entries {
            if inner.push(lane, at, delivery, fresh, false) {
                inner.refresh(lane);
                grew = true;
            }
        }
        drop(inner);
        if grew {
            // A stored permit when nobody waits: the engine cannot miss a wake-up.
            self.changed.notify_one();
        }
    }

    /// Removes a later (not fresh) entry, if it is there.
    pub fn remove(&self, lane: Lane, at: Millis, delivery: u128) {
        let mut inner = self.lock();
        let removed = inner
            .lanes
            .get_mut(&lane)
            .is_some_and(|q| q.later.remove(&(at, delivery)));
        if removed {
            inner.len -= 1;
            inner.refresh(lane);
        }
    }

    /// Takes up to `max` entries due at or before `now`, earliest first across lanes, at most
    /// the lane limit from one lane; each counts as running in its lane until [`Self::done`] or
    /// [`Self::put_back`].
    pub fn take(&self, now: Millis, max: usize) -> Vec<Due> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        while out.len() < max {
            let Some(&(at, lane)) = inner.ready.first() else {
                break;
            };
            if at > now {
                break;
            }
            let q = inner.lanes.get_mut(&lane).expect("a ready lane exists");
            if let Some((due, delivery, fresh)) = q.pop() {
                q.running += 1;
                inner.len -= 1;
                out.push(Due {
                    lane,
                    at: due,
                    delivery,
                    fresh,
                });
            }
            inner.refresh(lane);
        }
        out
    }

    /// An entry from [`Self::take`] finished (its attempt ran or was found stale).
    pub fn done(&self, lane: Lane) {
        let mut inner = self.lock();
        if let Some(q) = inner.lanes.get_mut(&lane) {
            q.running = q.running.saturating_sub(1);
        }
        inner.refresh(lane);
        drop(inner);
        self.changed.notify_one();
    }

    /// An entry from [`Self::take`] was not attempted after all: back in its lane, and, with
    /// `hold_until`, its whole lane waits until then (an open circuit breaker).
    pub fn put_back(&self, due: Due, hold_until: Option<Millis>) {
        let mut inner = self.lock();
        inner.push(due.lane, due.at, due.delivery, due.fresh, true);
        if let Some(q) = inner.lanes.get_mut(&due.lane) {
            q.running = q.running.saturating_sub(1);
            if let Some(h) = hold_until {
                q.held_until = Some(q.held_until.map_or(h, |old| old.max(h)));
            }
        }
        inner.refresh(due.lane);
        drop(inner);
        self.changed.notify_one();
    }

    /// Ends a lane's hold (its breaker's probe decided).
    pub fn release(&self, lane: Lane) {
        let mut inner = self.lock();
        if let Some(q) = inner.lanes.get_mut(&lane) {
            q.held_until = None;
        }
        inner.refresh(lane);
        drop(inner);
        self.changed.notify_one();
    }

    /// The lane's later (not fresh) entries.
    pub fn later_entries(&self, lane: Lane) -> Vec<(Millis, u128)> {
        self.lock()
            .lanes
            .get(&lane)
            .map(|q| q.later.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Entries of one lane waiting or running (an endpoint's pending deliveries herald knows
    /// are due at some time).
    pub fn lane_len(&self, lane: Lane) -> usize {
        self.lock()
            .lanes
            .get(&lane)
            .map_or(0, |q| q.fresh.len() + q.later.len() + q.running)
    }

    /// The earliest due time of any entry, held lanes included (the oldest pending delivery's).
    pub fn oldest(&self) -> Option<Millis> {
        self.lock()
            .lanes
            .values()
            .filter_map(LaneQueue::earliest)
            .min()
    }

    /// When the earliest entry that [`Self::take`] could hand out is due.
    pub fn next_due(&self) -> Option<Millis> {
        self.lock().ready.first().map(|(at, _)| *at)
    }

    /// Entries waiting (not running).
    pub fn len(&self) -> usize {
        self.lock().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves when an entry was added, or a lane made room, since the last call.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(limit: usize) -> DueIndex {
        let d = DueIndex::default();
        d.set_lane_limit(limit);
        d
    }

    fn ids(v: &[Due]) -> Vec<u128> {
        v.iter().map(|d| d.delivery).collect()
    }

    #[test]
    fn hands_out_only_what_is_due_earliest_first() {
        let d = index(8);
        d.insert(1, 30, 3, false);
        d.insert(1, 10, 1, true);
        d.insert(2, 20, 2, true);
        assert_eq!(d.next_due(), Some(10));
        assert_eq!(ids(&d.take(20, 10)), vec![1, 2]);
        assert_eq!(d.take(20, 10), vec![]);
        assert_eq!(d.len(), 1);
        d.remove(1, 30, 3);
        assert!(d.is_empty());
    }

    #[test]
    fn a_full_lane_waits_while_others_go_on() {
        let d = index(2);
        for i in 0..5 {
            d.insert(1, 0, 10 + i, true);
        }
        d.insert(2, 5, 99, true);
        let got = d.take(10, 100);
        assert_eq!(
            ids(&got),
            vec![10, 11, 99],
            "lane 1 stops at its limit of 2"
        );
        assert_eq!(d.take(10, 100), vec![]);
        d.done(1);
        assert_eq!(ids(&d.take(10, 100)), vec![12]);
    }

    #[test]
    fn a_held_lane_hands_out_nothing_until_released_or_the_hold_ends() {
        let d = index(8);
        d.insert(1, 0, 1, true);
        d.insert(1, 0, 2, true);
        let first = d.take(0, 1)[0];
        d.put_back(first, Some(1_000));
        assert_eq!(d.take(999, 10), vec![]);
        assert_eq!(d.next_due(), Some(1_000));
        d.release(1);
        assert_eq!(ids(&d.take(0, 10)), vec![1, 2]);
    }
}
